/* The matrix products of the CPU kernels' linear layers, in the precision the
 * run chose: fp32 (cblas_sgemm: the default and the reference) or bf16
 * (--precision bf16: the operands rounded to bfloat16, products accumulated
 * in fp32 into fp32 outputs, by oneDNN's AVX-512-BF16 kernels; the master
 * weights, gradients and optimizer stay fp32). bf16 needs a CPU with
 * AVX512_BF16 (cpuid) and a build with oneDNN (libdnnl-dev). The precision is
 * the caller's (the CPU backend context's, autohet/engine.h): ah__gemm_p and
 * ah__gemm_weight_p take it, ah__gemm and ah__gemm_weight are fp32. Attention
 * keeps fp32. */
#ifndef AUTOHET_ENGINE_GEMM_H
#define AUTOHET_ENGINE_GEMM_H
#include <stddef.h>

#include "autohet/engine.h" /* ah_matmul_precision */

/* Whether bf16 products can run here (CPU features and the build); why says what is missing. */
int ah__gemm_bf16_available(char *why, size_t n);

/* Row-major C[M,N] = op(A)[M,K] op(B)[K,N] + beta C, beta 0 or 1 (op = transpose
 * when ta/tb); lda/ldb/ldc as cblas_sgemm's. In precision p (ah__gemm: fp32). */
void ah__gemm_p(ah_matmul_precision p, int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B,
               int ldb, float beta, float *C, int ldc);
void ah__gemm(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb, float beta,
             float *C, int ldc);

/* ah__gemm whose B operand W is a weight of the engine: at bf16 its bf16 copy
 * is made on the first product after W was written and reused by every later
 * one (forward and backward, all micro-batches) until the next write. The
 * caller reports every write of W's memory (ah__gemm_weights_written: the
 * optimizer update, loads, copies) and its release (ah__gemm_weights_released):
 * the CPU backend does so for all of its buffers. The products are bitwise
 * those of ah__gemm: the copy is the same rounding, made less often. */
void ah__gemm_weight_p(ah_matmul_precision p, int ta, int tb, int M, int N, int K, const float *A, int lda,
                      const float *W, int ldw, float beta, float *C, int ldc);
void ah__gemm_weight(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *W, int ldw,
                    float beta, float *C, int ldc);
/* The bytes at p were written: bf16 copies of weights there are stale (recomputed on their next use). */
void ah__gemm_weights_written(const void *p, size_t bytes);
/* The bytes at p are being freed: the bf16 copies of weights there are dropped. */
void ah__gemm_weights_released(const void *p, size_t bytes);

#endif
