/* Small shared helpers: one-line error messages and allocation that aborts
 * with a message instead of returning NULL. */
#ifndef AUTOHET_UTIL_ERRORS_H
#define AUTOHET_UTIL_ERRORS_H
#include <stddef.h>

/* printf into err (if err and errlen allow it), newlines turned into spaces so
 * the message stays one line. */
void ah_errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* calloc/realloc that never return NULL (they print and abort). */
void *ah_xcalloc(size_t n, size_t size);
void *ah_xrealloc(void *p, size_t size);

#endif
