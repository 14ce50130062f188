#include "util/errors.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void ah_errf(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    for (char *c = err; *c; c++)
        if (*c == '\n' || *c == '\r')
            *c = ' ';
}

void *ah_xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) {
        fprintf(stderr, "autohet: out of memory\n");
        abort();
    }
    return p;
}

void *ah_xrealloc(void *p, size_t size) {
    void *q = realloc(p, size ? size : 1);
    if (!q) {
        fprintf(stderr, "autohet: out of memory\n");
        abort();
    }
    return q;
}
