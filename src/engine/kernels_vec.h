/* Vectorised elementwise loops of the CPU kernels (kernels_vec.c); kernels.c
 * runs them on chunks in parallel. */
#ifndef AUTOHET_ENGINE_KERNELS_VEC_H
#define AUTOHET_ENGINE_KERNELS_VEC_H
#include <stddef.h>

/* out[i] = GELU(inp[i]) (tanh form) */
void ah_vec_gelu_fwd(float *restrict out, const float *restrict inp, size_t n);
/* dinp[i] += GELU'(inp[i]) dout[i] */
void ah_vec_gelu_bwd(float *restrict dinp, const float *restrict dout, const float *restrict inp, size_t n);

/* dst[i] = x[i] rounded to bfloat16 (to nearest even), as its 16 bits; ..._par: in parallel chunks */
void ah_vec_to_bf16(unsigned short *restrict dst, const float *restrict x, size_t n);
void ah_vec_par_to_bf16(unsigned short *dst, const float *x, size_t n);

#endif
