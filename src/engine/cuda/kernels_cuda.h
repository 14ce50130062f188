/* Launchers of the CUDA backend's kernels (kernels_cuda.cu), callable from C.
 * Every pointer is device memory; every launch goes on the legacy default
 * stream, so the backend's one ordered queue is that stream. The math follows
 * kernels.c line by line (double accumulation where it accumulates in double,
 * the same order for every sum over rows), so that the fp32 results match the
 * CPU backend to rounding. Each launcher returns 0, or a CUDA error code. */
#ifndef AUTOHET_ENGINE_CUDA_KERNELS_CUDA_H
#define AUTOHET_ENGINE_CUDA_KERNELS_CUDA_H
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* the AdamW constants of one update, computed on the host as optim.c does */
typedef struct {
    float b1, b2, eps, step_size, bc2_sqrt, shrink, gscale; /* gscale: the clip factor */
} ah_cu_adamw_consts;

int ah__cu_fill_rows(float *out, const float *row, int N, int M);
int ah__cu_colsum_acc(float *dst, const float *src, int N, int C);
int ah__cu_embedding_fwd(float *out, const int *tok, const float *wte, const float *wpe, int N, int T, int C);
int ah__cu_embedding_bwd(float *dwte, float *dwpe, const float *dout, const int *tok, int N, int T, int C);
/* eps: the model's norm epsilon, added in double as kernels.c does */
int ah__cu_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                        int N, int C, float eps);
int ah__cu_layernorm_bwd(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                        const float *mean, const float *rstd, int N, int C);
int ah__cu_rmsnorm_fwd(float *out, float *rstd, const float *inp, const float *w, int N, int C, float eps);
int ah__cu_rmsnorm_bwd(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                      const float *rstd, int N, int C);
int ah__cu_gelu_fwd(float *out, const float *inp, size_t n);
int ah__cu_gelu_bwd(float *dinp, const float *dout, const float *inp, size_t n);
int ah__cu_relu_fwd(float *out, const float *inp, size_t n);
int ah__cu_relu_bwd(float *dinp, const float *dout, const float *inp, size_t n);
int ah__cu_swiglu_fwd(float *out, const float *inp, int N, int F);
int ah__cu_swiglu_bwd(float *dinp, const float *dout, const float *inp, int N, int F);
int ah__cu_rope(float *x, int N, int T, int H, int D, float theta, int sign);
/* the causal softmax of att[rows, T] in place (row r is query t = r % T), scores already scaled;
 * window > 0: only keys (t - window, t] (local attention), 0: every key up to t */
int ah__cu_causal_softmax(float *att, int rows, int T, int window);
/* ds[heads, T, T] = p (ds - rowsum(p ds)) * scale below the diagonal, 0 above, where head i's
 * probabilities p are the T x T block at att + i * att_stride */
int ah__cu_softmax_bwd(float *ds, const float *att, int heads, int T, size_t att_stride, float scale);
int ah__cu_crossentropy_fwd(float *losses, float *probs, const float *logits, const int *targets, int N, int V,
                           int Vp);
int ah__cu_crossentropy_bwd(float *dlogits, const float *probs, const int *targets, int N, int V, int Vp,
                           float scale);
int ah__cu_add_bias_rows(float *x, const float *b, int N, int C);
int ah__cu_add(float *y, const float *x, size_t n);
int ah__cu_scale(float *y, float a, size_t n);
/* part[i] = sum of squares (double) of block i of AH_CU_SUMSQ_BLOCK elements */
#define AH_CU_SUMSQ_BLOCK 16384
int ah__cu_sumsq_blocks(double *part, const float *x, size_t n);
int ah__cu_adamw(float *param, const float *grad, float *m, float *v, size_t n, ah_cu_adamw_consts k);

#ifdef __cplusplus
}
#endif
#endif
