/* Vectorised elementwise loops of the CPU kernels (kernels_vec.c); kernels.c
 * runs them on chunks in parallel. */
#ifndef AUTOHET_ENGINE_KERNELS_VEC_H
#define AUTOHET_ENGINE_KERNELS_VEC_H
#include <stddef.h>

/* out[i] = GELU(inp[i]) (tanh form) */
void ah__vec_gelu_fwd(float *restrict out, const float *restrict inp, size_t n);
/* dinp[i] += GELU'(inp[i]) dout[i] */
void ah__vec_gelu_bwd(float *restrict dinp, const float *restrict dout, const float *restrict inp, size_t n);

/* The loss's softmax over a row: the maximum (n >= 1); out[i] = e^(x[i] - shift) (the
 * activations' exp, ~1 ulp) and their sum in double; x *= a; the gradient
 * d[i] += (p[i] - [i == tgt]) * scale. */
float ah__vec_max(const float *x, size_t n);
double ah__vec_exp_shift_sum(float *restrict out, const float *restrict x, float shift, size_t n);
void ah__vec_scale(float *restrict x, float a, size_t n);
void ah__vec_softmax_grad(float *restrict d, const float *restrict p, size_t tgt, float scale, size_t n);
/* dst[i] = x[i] rounded to bfloat16 (to nearest even), as its 16 bits; ..._par: in parallel chunks */
void ah__vec_to_bf16(unsigned short *restrict dst, const float *restrict x, size_t n);
void ah__vec_par_to_bf16(unsigned short *dst, const float *x, size_t n);

#endif
