/* Numbers as text for documents (JSON, SVG): always '.' as the decimal
 * point, whatever LC_NUMERIC says, and exact round trips where promised.
 * The one place these rules are written; every writer of numbers uses it. */
#ifndef AH_UTIL_NUM_TEXT_H
#define AH_UTIL_NUM_TEXT_H

#include <stddef.h>

/* Room for any text ah_num_exact() writes. */
#define AH_NUM_EXACT_LEN 40

/* The shortest "%.15g".."%.17g" text of d that strtod() reads back bit for
 * bit (cJSON's own printer only promises approximate round trips), with '.'
 * as the decimal point; "null" when d is not finite (the JSON way). Writes
 * into buf[AH_NUM_EXACT_LEN] and returns buf. */
const char *ah_num_exact(char *buf, double d);

/* snprintf(buf, n, fmt, ...) for a format of numbers only: every decimal
 * point of the current locale becomes '.'. Returns buf. */
const char *ah_num_format(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
