/* Shared by the GPU tests (tests/gpu/): the CUDA backend or exit 77 (CTest's
 * SKIP_RETURN_CODE: "not run", never "passed"), deterministic inputs, and the
 * norm-relative comparison of a CUDA result with the CPU backend's. */
#ifndef AUTOHET_TESTS_GPU_COMMON_H
#define AUTOHET_TESTS_GPU_COMMON_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"

#define GPU_SKIP 77

/* The backend under test: "cuda", or "cpu" when AUTOHET_GPU_TEST_BACKEND=cpu
 * (the harness's self-test in CI: the CPU against itself must agree exactly). */
static inline const char *gpu_backend_name(void) {
    const char *b = getenv("AUTOHET_GPU_TEST_BACKEND");
    return b && !strcmp(b, "cpu") ? "cpu" : "cuda";
}

/* The backend under test, or the test reports why it did not run and exits 77. */
static inline const ah_backend *gpu_backend_or_skip(const char *test) {
    char why[320];
    if (!strcmp(gpu_backend_name(), "cpu"))
        return ah__backend_get("cpu");
    if (ah_backend_check("cuda", why, sizeof why) != 0) {
        printf("%s: not run: no CUDA device (%s)\n", test, why);
        exit(GPU_SKIP);
    }
    return ah__backend_get("cuda");
}

/* ||a - b|| / max(||a||, tiny), and the largest |a_i - b_i| in *maxd */
static inline double gpu_rel_diff(const float *a, const float *b, size_t n, double *maxd) {
    double num = 0, den = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)a[i] * a[i];
        if (fabs(d) > mx || d != d)
            mx = d != d ? INFINITY : fabs(d);
    }
    if (maxd)
        *maxd = mx;
    if (num != num)
        return INFINITY;
    return sqrt(num) / (den > 1e-300 ? sqrt(den) : 1e-150);
}

static inline void *gpu_xmalloc(size_t n) {
    void *p = calloc(n ? n : 1, 1);
    if (p == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}
#endif
