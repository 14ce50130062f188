/* Unit tests for src/engine/gemm: the precision names, and bf16 products
 * (where the CPU and the build run them) against fp32 ones for every
 * transposition and both beta values: exact on operands that bf16 holds
 * exactly, within bf16's rounding (2^-8 relative per operand) otherwise.
 * Where bf16 cannot run, the setting is refused with the reason. */
#include "test_util.h"

#include "engine/gemm.h"

static void test_names(void **state) {
    (void)state;
    char why[200] = "";
    ah_matmul_precision p = AH_MATMUL_BF16;
    assert_int_equal(ah_matmul_precision_parse("fp32", &p, why, sizeof why), 0);
    assert_int_equal(p, AH_MATMUL_FP32);
    assert_int_equal(ah_matmul_precision_parse("fp16", &p, why, sizeof why), -1);
    assert_non_null(strstr(why, "fp32 or bf16"));
    assert_int_equal(p, AH_MATMUL_FP32);
    assert_string_equal(ah_matmul_precision_name(AH_MATMUL_FP32), "fp32");
    assert_string_equal(ah_matmul_precision_name(AH_MATMUL_BF16), "bf16");
}

static void test_bf16_refused_or_set(void **state) {
    (void)state;
    char why[200] = "", why2[200] = "";
    int avail = ah__gemm_bf16_available(why, sizeof why);
    ah_matmul_precision p = AH_MATMUL_FP32;
    int rc = ah_matmul_precision_parse("bf16", &p, why2, sizeof why2);
    if (avail) {
        assert_int_equal(rc, 0);
        assert_int_equal(p, AH_MATMUL_BF16);
    } else {
        assert_int_equal(rc, -1);
        assert_true(strstr(why2, "AVX512_BF16") || strstr(why2, "oneDNN"));
        assert_int_equal(p, AH_MATMUL_FP32);
    }
}

/* C[M,N] = op(A) op(B) + beta C in double, A/B stored as ah__gemm reads them */
static void ref(int ta, int tb, int M, int N, int K, const float *A, const float *B, float beta, const float *C0,
                double *out) {
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = beta * C0[(size_t)m * N + n];
            for (int k = 0; k < K; k++)
                s += (double)(ta ? A[(size_t)k * M + m] : A[(size_t)m * K + k]) *
                     (tb ? B[(size_t)n * K + k] : B[(size_t)k * N + n]);
            out[(size_t)m * N + n] = s;
        }
}

static void check_products(ah_matmul_precision p, int exact_operands) {
    const int M = 37, N = 70, K = 129;
    float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * K * N), *C = malloc(sizeof(float) * M * N),
          *C0 = malloc(sizeof(float) * M * N);
    double *want = malloc(sizeof(double) * M * N);
    srand(5);
    for (int i = 0; i < M * K; i++)
        A[i] = exact_operands ? (float)(rand() % 17 - 8) : (float)rand() / RAND_MAX - 0.5f;
    for (int i = 0; i < K * N; i++)
        B[i] = exact_operands ? (float)(rand() % 9 - 4) * 0.25f : (float)rand() / RAND_MAX - 0.5f;
    for (int i = 0; i < M * N; i++)
        C0[i] = (float)(i % 11) - 5.0f;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int bi = 0; bi < 2; bi++) {
                float beta = (float)bi;
                memcpy(C, C0, sizeof(float) * M * N);
                ah__gemm_p(p, ta, tb, M, N, K, A, ta ? M : K, B, tb ? K : N, beta, C, N);
                ref(ta, tb, M, N, K, A, B, beta, C0, want);
                for (int i = 0; i < M * N; i++) {
                    if (exact_operands) /* small integers and quarters: every sum is exact in fp32 */
                        assert_double_equal(C[i], want[i], 0.0);
                    else /* |error| <= 2 * 2^-8 * sum |a b| ~ K/4 * 2^-7 */
                        assert_double_equal(C[i], want[i], 3e-3 * K * 0.25 + 1e-6);
                }
            }
    free(A), free(B), free(C), free(C0), free(want);
}

static void test_fp32_products(void **state) {
    (void)state;
    check_products(AH_MATMUL_FP32, 1);
    check_products(AH_MATMUL_FP32, 0);
}

static void test_bf16_products(void **state) {
    (void)state;
    char why[200];
    ah_matmul_precision p = AH_MATMUL_FP32;
    if (ah_matmul_precision_parse("bf16", &p, why, sizeof why) != 0) {
        /* no bf16 here: the refusal itself is what test_bf16_refused_or_set checks; the products stay fp32 */
        assert_int_equal(p, AH_MATMUL_FP32);
        check_products(p, 1);
        return;
    }
    check_products(p, 1);
    check_products(p, 0);
}

/* ah__gemm_weight: bitwise ah__gemm's product with W and W^T, the copy reused until W is reported written,
 * then remade from the new values; released copies are dropped (ASan sees the frees). */
static void test_weight_copies(void **state) {
    (void)state;
    char why[200];
    ah_matmul_precision p = AH_MATMUL_FP32;
    int bf16 = ah_matmul_precision_parse("bf16", &p, why, sizeof why) == 0;
    const int M = 9, N = 12, K = 33;
    float *A = malloc(sizeof(float) * M * K), *W = malloc(sizeof(float) * N * K), *C = malloc(sizeof(float) * M * N),
          *D = malloc(sizeof(float) * M * N), *G = malloc(sizeof(float) * M * K), *H = malloc(sizeof(float) * M * K);
    srand(11);
    for (int i = 0; i < M * K; i++)
        A[i] = (float)rand() / RAND_MAX - 0.5f;
    for (int i = 0; i < N * K; i++)
        W[i] = (float)rand() / RAND_MAX - 0.5f;
    for (int round = 0; round < 3; round++) {
        /* forward C = A W^T (W is [N,K]) and backward G = C W, both from one copy */
        ah__gemm_weight_p(p, 0, 1, M, N, K, A, K, W, K, 0.0f, C, N);
        ah__gemm_p(p, 0, 1, M, N, K, A, K, W, K, 0.0f, D, N);
        assert_memory_equal(C, D, sizeof(float) * M * N);
        ah__gemm_weight_p(p, 0, 0, M, K, N, C, N, W, K, 0.0f, G, K);
        ah__gemm_p(p, 0, 0, M, K, N, C, N, W, K, 0.0f, H, K);
        assert_memory_equal(G, H, sizeof(float) * M * K);
        for (int i = 0; i < N * K; i++) /* an update, reported */
            W[i] = W[i] * 0.5f + 0.125f;
        ah__gemm_weights_written(W + 5, sizeof(float) * 3); /* any overlap makes the whole copy stale */
    }
    if (bf16) { /* an unreported write is not seen: the copy is the one of the last reported write */
        ah__gemm_weight_p(p, 0, 1, M, N, K, A, K, W, K, 0.0f, C, N);
        for (int i = 0; i < N * K; i++)
            W[i] += 1.0f;
        ah__gemm_weight_p(p, 0, 1, M, N, K, A, K, W, K, 0.0f, D, N);
        assert_memory_equal(C, D, sizeof(float) * M * N);
    }
    ah__gemm_weights_released(W, sizeof(float) * N * K);
    free(A), free(W), free(C), free(D), free(G), free(H);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_bf16_refused_or_set),
        cmocka_unit_test(test_fp32_products),
        cmocka_unit_test(test_bf16_products),
        cmocka_unit_test(test_weight_copies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
