/* The matrix products of the CPU kernels' linear layers, in the precision the
 * run chose: fp32 (cblas_sgemm: the default and the reference) or bf16
 * (--precision bf16: the operands rounded to bfloat16, products accumulated
 * in fp32 into fp32 outputs, by oneDNN's AVX-512-BF16 kernels; the master
 * weights, gradients and optimizer stay fp32). bf16 needs a CPU with
 * AVX512_BF16 (cpuid) and a build with oneDNN (libdnnl-dev). The setting is
 * process-wide: one rank, one precision. Attention keeps fp32. */
#ifndef AUTOHET_ENGINE_GEMM_H
#define AUTOHET_ENGINE_GEMM_H
#include <stddef.h>

typedef enum { AH_PREC_FP32 = 0, AH_PREC_BF16 = 1 } ah_precision;

/* "fp32" or "bf16": 0, or -1 with the reason in why (unknown name, no
 * AVX512_BF16 on this CPU, built without oneDNN). */
int ah_gemm_set_precision(const char *name, char *why, size_t n);
ah_precision ah_gemm_precision(void);
/* Whether bf16 products can run here (CPU features and the build); why says what is missing. */
int ah_gemm_bf16_available(char *why, size_t n);

/* Row-major C[M,N] = op(A)[M,K] op(B)[K,N] + beta C, beta 0 or 1 (op = transpose
 * when ta/tb); lda/ldb/ldc as cblas_sgemm's. In the process's precision. */
void ah_gemm(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb, float beta,
             float *C, int ldc);

#endif
