/* Host-side unit tests of the CUDA backend (src/engine/cuda/cuda_gemm.c), run
 * everywhere, GPU or not: the row-major to column-major GEMM mapping the
 * backend hands cuBLAS, checked by running the mapped call through a
 * column-major reference GEMM (cuBLAS's semantics) against the row-major
 * product for every transpose pair and padded leading dimensions; the launch
 * grid and the attention scratch size. */
#include "test_util.h"

#include "engine/cuda/cuda_gemm.h"

/* row-major C = alpha op(A) op(B) + beta C, as cblas_sgemm(CblasRowMajor) */
static void rowmajor_ref(ah_cu_rowmajor_gemm g, float alpha, const float *A, const float *B, float beta, float *C) {
    for (int i = 0; i < g.M; i++)
        for (int j = 0; j < g.N; j++) {
            double s = 0;
            for (int k = 0; k < g.K; k++)
                s += (double)(g.ta ? A[k * g.lda + i] : A[i * g.lda + k]) *
                     (g.tb ? B[j * g.ldb + k] : B[k * g.ldb + j]);
            C[i * g.ldc + j] = (float)(alpha * s + beta * C[i * g.ldc + j]);
        }
}

/* column-major C[m,n] = alpha op(X) op(Y) + beta C, as cublasSgemm(transa, transb) */
static void colmajor_ref(int tx, int ty, int m, int n, int k, float alpha, const float *X, int ldx, const float *Y,
                         int ldy, float beta, float *C, int ldc) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int p = 0; p < k; p++)
                s += (double)(tx ? X[i * ldx + p] : X[p * ldx + i]) * (ty ? Y[p * ldy + j] : Y[j * ldy + p]);
            C[j * ldc + i] = (float)(alpha * s + beta * C[j * ldc + i]);
        }
}

static void test_mapping_matches_rowmajor(void **state) {
    (void)state;
    const int M = 5, N = 7, K = 3, pad = 2;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            ah_cu_rowmajor_gemm g = {.ta = ta, .tb = tb, .M = M, .N = N, .K = K,
                                     .lda = (ta ? M : K) + pad, .ldb = (tb ? K : N) + pad, .ldc = N + pad};
            float A[64], B[64], C1[64], C2[64];
            for (int i = 0; i < 64; i++) {
                A[i] = (float)((i * 7) % 11) - 5;
                B[i] = (float)((i * 5) % 13) - 6;
                C1[i] = C2[i] = (float)(i % 3);
            }
            rowmajor_ref(g, 0.5f, A, B, 1.0f, C1);
            ah_cu_colmajor_gemm c = ah__cu_gemm_to_colmajor(g);
            assert_int_equal(c.first_is_b, 1);
            colmajor_ref(c.op_first, c.op_second, c.m, c.n, c.k, 0.5f, B, c.ld_first, A, c.ld_second, 1.0f, C2, c.ldc);
            assert_memory_equal(C1, C2, sizeof C1);
        }
}

static void test_grid_and_scratch(void **state) {
    (void)state;
    assert_int_equal(ah__cu_grid(0, 256), 1);
    assert_int_equal(ah__cu_grid(256, 256), 1);
    assert_int_equal(ah__cu_grid(257, 256), 2);
    assert_int_equal(ah__cu_grid(1000, 0), 4); /* block 0: AH_CU_BLOCK */
    assert_int_equal(ah__cu_grid((size_t)1 << 50, 1), 2147483647u);
    assert_int_equal(ah__cu_attention_scratch(1024, 12), (size_t)12 * 1024 * 1024);
    assert_int_equal(ah__cu_attention_scratch(0, 12), 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mapping_matches_rowmajor),
        cmocka_unit_test(test_grid_and_scratch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
