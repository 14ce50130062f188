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

static int oom_code = 1;
static char oom_what[512];

void ah_oom_context(int exit_code, const char *context) {
    oom_code = exit_code;
    snprintf(oom_what, sizeof oom_what, "%s", context ? context : "");
}

_Noreturn void ah_out_of_memory(size_t bytes) {
    fflush(stdout);
    fprintf(stderr, "autohet: out of memory (%zu bytes)%s%s\n", bytes, oom_what[0] ? ": " : "", oom_what);
    exit(oom_code);
}

void *ah_xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        ah_out_of_memory(n * size);
    return p;
}

void *ah_xrealloc(void *p, size_t size) {
    void *q = realloc(p, size ? size : 1);
    if (!q)
        ah_out_of_memory(size);
    return q;
}
