/* Numbers as text with '.' as the decimal point (util/num_text.h). */
#include "util/num_text.h"

#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* printf and strtod follow LC_NUMERIC (a decimal comma under de_DE);
 * documents want '.'. */
static void c_decimal_point(char *buf) {
    char dp = localeconv()->decimal_point[0];
    if (!dp || dp == '.')
        return;
    for (char *c = strchr(buf, dp); c; c = strchr(c + 1, dp))
        *c = '.';
}

const char *ah_num_exact(char *buf, double d) {
    if (!isfinite(d)) {
        snprintf(buf, AH_NUM_EXACT_LEN, "null");
        return buf;
    }
    /* strtod reads the locale's point too, so the check runs before the fix */
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, AH_NUM_EXACT_LEN, "%.*g", prec, d);
        if (strtod(buf, NULL) == d)
            break;
    }
    c_decimal_point(buf);
    return buf;
}

const char *ah_num_format(char *buf, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
    c_decimal_point(buf);
    return buf;
}
