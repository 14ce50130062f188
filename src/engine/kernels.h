/* CPU kernels of the training engine: forward and backward of every op of a
 * GPT/LLaMA-style transformer, fp32, row-major. Linear layers go through
 * BLAS (cblas_sgemm), causal attention is blocked and flash-style
 * (attention.c), other loops are parallel with OpenMP.
 *
 * Conventions: N = number of token rows (micro-batch B x sequence T, token
 * n = b*T + t), a Linear layer's weight is [out, in] like PyTorch, so
 * y = x W^T + b. Every backward ACCUMULATES (+=) into the gradients of its
 * parameters and of its input, so callers zero them when they start a step
 * (or a micro-batch for activation gradients). These are the CPU backend's
 * kernels: backend_cpu.c exposes them through the ah_backend table of
 * backend.h, which a CUDA backend implements with the same semantics. */
#ifndef AUTOHET_ENGINE_KERNELS_H
#define AUTOHET_ENGINE_KERNELS_H
#include <stddef.h>

#include "autohet/engine.h" /* ah_matmul_precision */

/* ---- linear algebra ---- */
/* out[N,M] = inp[N,K] W[M,K]^T (+ bias[M] if not NULL), overwrite out. */
void ah__linear_fwd(float *out, const float *inp, const float *w, const float *bias, int N, int K, int M);
/* dinp[N,K] += dout W ; dw[M,K] += dout^T inp ; dbias[M] += column sums (dinp/dw/dbias may be NULL). */
void ah__linear_bwd(float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w,
                   int N, int K, int M);
/* ah__linear_fwd / ah__linear_bwd are fp32. The same in precision p with w an engine weight whose writes
 * are reported to gemm.h (ah__gemm_weights_written): at bf16 the products reuse w's bf16 copy until w is
 * next written (ah__gemm_weight_p). Bitwise the same. */
void ah__linear_fwd_weight(ah_matmul_precision p, float *out, const float *inp, const float *w, const float *bias, int N,
                          int K, int M);
void ah__linear_bwd_weight(ah_matmul_precision p, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                          const float *w, int N, int K, int M);

/* ---- embedding ---- */
/* out[N,C] = wte[tok[n]] (+ wpe[n % T] if wpe). */
void ah__embedding_fwd(float *out, const int *tok, const float *wte, const float *wpe, int N, int T, int C);
void ah__embedding_bwd(float *dwte, float *dwpe, const float *dout, const int *tok, int N, int T, int C);

/* ---- normalisation ---- */
/* LayerNorm over C with eps 1e-5; saves mean[N] and rstd[N] for the backward. */
void ah__layernorm_fwd(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                      int N, int C);
/* The same with the config's epsilon (layer_norm_epsilon); the backward
 * needs none (it reads the saved rstd). */
void ah__layernorm_fwd_eps(float *out, float *mean, float *rstd, const float *inp, const float *w,
                          const float *b, int N, int C, float eps);
void ah__layernorm_bwd(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                      const float *mean, const float *rstd, int N, int C);
/* RMSNorm over C with eps 1e-5 (LLaMA): out = inp * rstd * w; saves rstd[N]. */
void ah__rmsnorm_fwd(float *out, float *rstd, const float *inp, const float *w, int N, int C);
/* The same with the config's epsilon (rms_norm_eps: Qwen2 1e-6). */
void ah__rmsnorm_fwd_eps(float *out, float *rstd, const float *inp, const float *w, int N, int C, float eps);
void ah__rmsnorm_bwd(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                    const float *rstd, int N, int C);

/* ---- activations ---- */
/* GELU, tanh approximation (GPT-2). out/inp [n]. */
void ah__gelu_fwd(float *out, const float *inp, size_t n);
void ah__gelu_bwd(float *dinp, const float *dout, const float *inp, size_t n);
/* ReLU (OPT): out = max(x, 0); dinp += dout where x > 0. */
void ah__relu_fwd(float *out, const float *inp, size_t n);
void ah__relu_bwd(float *dinp, const float *dout, const float *inp, size_t n);
/* SwiGLU: inp[N, 2F] = [gate | up] per row, out[N, F] = silu(gate) * up. */
void ah__swiglu_fwd(float *out, const float *inp, int N, int F);
void ah__swiglu_bwd(float *dinp, const float *dout, const float *inp, int N, int F);

/* ---- attention ---- */
/* Rotary position embedding applied in place to x[N, H, D] (D even) with
 * position t = n % T, base theta (10000): pairs (2i, 2i+1) rotated by
 * t * theta^(-2i/D). The backward applies the inverse rotation to dx in place. */
void ah__rope_fwd(float *x, int N, int T, int H, int D, float theta);
void ah__rope_bwd(float *dx, int N, int T, int H, int D, float theta);
/* Causal scaled-dot-product attention with grouped-query heads:
 * q[N, Hq, D], k[N, Hkv, D], v[N, Hkv, D] (Hq % Hkv == 0, query head h uses
 * kv head h / (Hq/Hkv)), batches of T tokens (N = B*T), scale 1/sqrt(D).
 * out[N, Hq, D]. Blocked and flash-style (attention.c): the masked half is
 * skipped and no T x T matrix is kept; stats[B, Hq, T, 2] keeps each query
 * row's softmax statistics (score maximum, 1 / sum of exponentials) for the
 * backward, which recomputes the probabilities block by block. */
void ah__attention_fwd(float *out, float *stats, const float *q, const float *k, const float *v, int B, int T,
                      int Hq, int Hkv, int D);
/* The same with a sliding window (GPT-Neo's local layers): query t sees keys
 * (t - window, t]; window 0 = every earlier key. */
void ah__attention_fwd_window(float *out, float *stats, const float *q, const float *k, const float *v, int B,
                             int T, int Hq, int Hkv, int D, int window);
/* dq, dk, dv += the gradients for dout; out and stats are what the forward
 * with the same window wrote (dq/dk/dv may be NULL). */
void ah__attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *out, const float *stats,
                      const float *q, const float *k, const float *v, int B, int T, int Hq, int Hkv, int D,
                      int window);
/* Floats of stats per (batch, query head): 2 T. */
size_t ah__attention_stats_per_head(int T);
/* The instruction set the attention kernel runs on ("avx512", "avx2" or
 * "base"), chosen from the CPU's features at the first call; tests force
 * each one the CPU has (-1: unknown or not supported here), NULL returns to
 * the CPU's choice. */
const char *ah__attention_kernel(void);
int ah__attention_force_kernel(const char *name);

/* ---- loss ---- */
/* Softmax cross-entropy per row over the first V of Vp >= V columns (rows of
 * Vp: the head GEMM's vocabulary is padded, and the padding is masked out):
 * losses[N] = -log softmax(logits[:, :V])[target]; probs[N,Vp] keeps the
 * softmax, 0 in the padding. Returns the sum of the losses (double). */
double ah__crossentropy_fwd(float *losses, float *probs, const float *logits, const int *targets, int N,
                           int V, int Vp);
/* dlogits[N,Vp] += (probs - onehot(target)) * scale over the first V columns
 * (scale = 1 / tokens the loss is averaged over); the padding is left alone. */
void ah__crossentropy_bwd(float *dlogits, const float *probs, const int *targets, int N, int V, int Vp,
                         float scale);

/* ---- biases of products done without one (TP row splits add it after the all-reduce) ---- */
/* x[n, c] += b[c] for every row n of x[N, C]. */
void ah__add_bias_rows(float *x, const float *b, int N, int C);
/* db[c] += sum over rows of d[N, C] (double accumulation, rows in order). */
void ah__bias_grad_acc(float *db, const float *d, int N, int C);

/* ---- elementwise ---- */
void ah__add_inplace(float *y, const float *x, size_t n); /* y += x */
void ah__scale_inplace(float *y, float a, size_t n);      /* y *= a */

#endif
