/* Helpers shared by the cmocka unit tests: double comparison, substring
 * assertions and temporary JSON files. Include after the cmocka headers. */
#ifndef AH_TEST_UTIL_H
#define AH_TEST_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The example inputs shipped in examples/. */
#define EXAMPLES AH_FIXTURES "/../../examples"

/* cmocka 1.1 only has a float-precision comparison; values here are exact
 * doubles (or nearly), so compare at double precision. */
#define assert_double_equal(got, want, abs_tol) assert_dbl_near((got), (want), (abs_tol), __FILE__, __LINE__)
static inline void assert_dbl_near(double got, double want, double tol, const char *file, int line) {
    if (!(fabs(got - want) <= tol + 1e-12 * fabs(want)))
        fail_msg("%s:%d: got %.17g, want %.17g", file, line, got, want);
}

static inline void assert_contains(const char *hay, const char *needle) {
    if (strstr(hay, needle) == NULL)
        fail_msg("'%s' does not contain '%s'", hay, needle);
}

/* Writes text to a fresh /tmp/ahtest_XXXXXX.json; path must hold 64 bytes. */
static inline void write_tmp(const char *text, char *path) {
    strcpy(path, "/tmp/ahtest_XXXXXX.json");
    int fd = mkstemps(path, 5);
    assert_true(fd >= 0);
    size_t n = strlen(text);
    assert_int_equal(write(fd, text, n), (ssize_t)n);
    close(fd);
}

#endif
