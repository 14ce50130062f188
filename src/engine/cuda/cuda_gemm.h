/* Row-major GEMMs on a column-major BLAS (cuBLAS): the one place that turns
 * the engine's row-major products into cuBLAS arguments. Pure host code with
 * no CUDA headers, so that CI tests it on machines without the toolkit. */
#ifndef AUTOHET_ENGINE_CUDA_GEMM_H
#define AUTOHET_ENGINE_CUDA_GEMM_H
#include <stddef.h>

/* C[M,N] = alpha op(A) op(B) + beta C, all row-major, as cblas_sgemm with
 * CblasRowMajor: op(A) is M x K (A stored K x M when ta), op(B) K x N. */
typedef struct {
    int ta, tb; /* transpose A / B (0 or 1) */
    int M, N, K;
    int lda, ldb, ldc;
} ah_cu_rowmajor_gemm;

/* The column-major call computing the same bytes: C^T = op(B)^T op(A)^T, so
 * the first operand is B and the second A (first_is_b is always 1; kept so
 * that the caller's code says which pointer goes where). */
typedef struct {
    int op_first, op_second; /* 0 = N, 1 = T, for cublasSgemm's transa/transb */
    int m, n, k;
    int ld_first, ld_second, ldc;
    int first_is_b;
} ah_cu_colmajor_gemm;

ah_cu_colmajor_gemm ah__cu_gemm_to_colmajor(ah_cu_rowmajor_gemm g);

/* Threads-per-block and blocks for n elements (grid capped at 2^31-1 blocks;
 * the kernels loop with a grid stride). */
#define AH_CU_BLOCK 256
unsigned ah__cu_grid(size_t n, unsigned block);

/* Floats of the attention scratch: the probability gradient of every KV head
 * of one batch for one query head of each group (Hkv x T x T). */
size_t ah__cu_attention_scratch(int T, int Hkv);

#endif
