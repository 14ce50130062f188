/* Unit tests for src/engine/blas_select: the CPU features -> OpenBLAS core
 * mapping on fake feature sets, the core classes, and the kernel text. The
 * tests never set or change OPENBLAS_CORETYPE: the process runs with the
 * environment as found. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/blas_select.h"

static ah_cpu_features avx512_cpu(void) {
    ah_cpu_features f = {.avx = 1, .avx2 = 1, .fma = 1, .avx512f = 1, .avx512bw = 1, .avx512vl = 1,
                         .avx512dq = 1, .avx512cd = 1, .os_ymm = 1, .os_zmm = 1};
    return f;
}

static void test_avx512_maps_to_skylakex(void **state) {
    (void)state;
    ah_cpu_features f = avx512_cpu();
    assert_string_equal(ah__openblas_core_for(&f), "SkylakeX");
}

static void test_partial_avx512_falls_back_to_haswell(void **state) {
    (void)state;
    /* each AVX-512 subset SkylakeX's kernels need: without it, the AVX2 kernels */
    for (int drop = 0; drop < 5; drop++) {
        ah_cpu_features f = avx512_cpu();
        int *bits[] = {&f.avx512f, &f.avx512bw, &f.avx512vl, &f.avx512dq, &f.avx512cd};
        *bits[drop] = 0;
        assert_string_equal(ah__openblas_core_for(&f), "Haswell");
    }
}

static void test_os_support_is_required(void **state) {
    (void)state;
    ah_cpu_features f = avx512_cpu();
    f.os_zmm = 0; /* the OS does not save ZMM state: AVX-512 cannot run */
    assert_string_equal(ah__openblas_core_for(&f), "Haswell");
    f.os_ymm = 0; /* nor YMM: no AVX at all */
    assert_null(ah__openblas_core_for(&f));
}

static void test_avx2_needs_fma(void **state) {
    (void)state;
    ah_cpu_features f = {.avx = 1, .avx2 = 1, .fma = 1, .os_ymm = 1};
    assert_string_equal(ah__openblas_core_for(&f), "Haswell");
    f.fma = 0;
    assert_string_equal(ah__openblas_core_for(&f), "Sandybridge");
    f.avx2 = 0, f.fma = 1;
    assert_string_equal(ah__openblas_core_for(&f), "Sandybridge");
    ah_cpu_features sse = {0};
    assert_null(ah__openblas_core_for(&sse));
}

static void test_core_classes(void **state) {
    (void)state;
    assert_int_equal(ah__openblas_core_class("SkylakeX"), 3);
    assert_int_equal(ah__openblas_core_class("COOPERLAKE"), 3);
    assert_int_equal(ah__openblas_core_class("Haswell"), 2);
    assert_int_equal(ah__openblas_core_class("Zen"), 2);
    assert_int_equal(ah__openblas_core_class("Sandybridge"), 1);
    assert_int_equal(ah__openblas_core_class("Prescott"), 0);
    assert_int_equal(ah__openblas_core_class("Nehalem"), 0);
    assert_int_equal(ah__openblas_core_class(NULL), 0);
    /* every core the mapping picks has the class of its features */
    ah_cpu_features f = avx512_cpu();
    assert_int_equal(ah__openblas_core_class(ah__openblas_core_for(&f)), 3);
}

static void test_detect_is_consistent(void **state) {
    (void)state;
    ah_cpu_features f;
    ah__cpu_features_detect(&f);
    /* architectural implications: the OS saving ZMM state implies YMM; AVX2 and
     * AVX-512 CPUs have AVX */
    if (f.os_zmm)
        assert_true(f.os_ymm);
    if (f.avx2 || f.avx512f)
        assert_true(f.avx);
#if defined(__x86_64__)
    assert_true(f.avx || ah__openblas_core_for(&f) == NULL);
#endif
    if (f.avx512bf16)
        assert_true(f.avx512f);
}

/* the kernel's view of the CPU (/proc/cpuinfo flags) agrees with cpuid on the features chosen by */
static void test_detect_matches_cpuinfo(void **state) {
    (void)state;
    FILE *fp = fopen("/proc/cpuinfo", "r");
    if (fp == NULL)
        return; /* not Linux: nothing to compare with */
    static char line[8192];
    int found = 0;
    while (!found && fgets(line, sizeof line, fp))
        found = !strncmp(line, "flags", 5);
    fclose(fp);
    if (!found)
        return;
    char *nl = strchr(line, '\n');
    if (nl)
        *nl = ' '; /* the last flag ends with a space too */
    ah_cpu_features f;
    ah__cpu_features_detect(&f);
    assert_int_equal(f.avx512f, strstr(line, " avx512f ") != NULL);
    assert_int_equal(f.avx512bf16, strstr(line, " avx512_bf16 ") != NULL);
    assert_int_equal(f.avx2, strstr(line, " avx2 ") != NULL);
}

static void test_kernel_text_names_the_core(void **state) {
    (void)state;
    char text[160];
    ah_blas_kernel_text(text, sizeof text);
    assert_int_equal(strncmp(text, "OpenBLAS ", 9), 0);
    /* who chose: the user's variable, autohet's re-exec, or OpenBLAS itself */
    if (getenv("OPENBLAS_CORETYPE"))
        assert_true(strstr(text, "(OPENBLAS_CORETYPE as set)") || strstr(text, "(chosen from CPU features"));
    else
        assert_non_null(strstr(text, "OpenBLAS's own choice"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_avx512_maps_to_skylakex),
        cmocka_unit_test(test_partial_avx512_falls_back_to_haswell),
        cmocka_unit_test(test_os_support_is_required),
        cmocka_unit_test(test_avx2_needs_fma),
        cmocka_unit_test(test_core_classes),
        cmocka_unit_test(test_detect_is_consistent),
        cmocka_unit_test(test_detect_matches_cpuinfo),
        cmocka_unit_test(test_kernel_text_names_the_core),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
