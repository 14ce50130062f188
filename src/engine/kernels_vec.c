/* The engine's vectorised elementwise loops: plain loops compiled once per
 * vector width (AH_VEC_CLONES, simd.h) with flags that let GCC turn the clamps
 * into min/max instructions (CMakeLists.txt: no errno, no trapping math,
 * finite math, no signed zeros; no FMA contraction, so every width rounds
 * alike). Inputs are assumed finite (the clamps bound everything else). */
#include "engine/kernels_vec.h"

#include <math.h>
#include <stdint.h>

#include "engine/simd.h"

#define AH_GELU_S 0.7978845608028654f /* sqrt(2/pi) */
#define AH_GELU_C 0.044715f

static inline float clampf(float x, float lo, float hi) {
    /* fminf/fmaxf stay library calls, which keep a loop scalar; with this file's flags these
     * compare-selects become min/max (the same values for every non-NaN x) */
    x = x < lo ? lo : x;
    return x > hi ? hi : x;
}

/* e^x for the activation kernels: Cody-Waite range reduction and a degree-6
 * polynomial (Cephes expf, ~1 ulp), branch-free so that the loops vectorise;
 * libm's tanhf/expf are scalar calls and made GELU a fifth of a training step. */
static inline float exp_poly(float x) {
    x = clampf(x, -87.0f, 88.0f);
    float t = x * 1.44269504088896341f;
    float fi = (float)(int32_t)(t + copysignf(0.5f, t)); /* round to nearest without libm */
    float f = x - fi * 0.693359375f + fi * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * f + 1.3981999507e-3f;
    p = p * f + 8.3334519073e-3f;
    p = p * f + 4.1665795894e-2f;
    p = p * f + 1.6666665459e-1f;
    p = p * f + 5.0000001201e-1f;
    float y = p * f * f + f + 1.0f;
    union {
        float f;
        int32_t i;
    } u;
    u.i = ((int32_t)fi + 127) << 23;
    return y * u.f;
}

/* GELU (tanh form) through the identity 0.5 x (1 + tanh(u)) = x * sigmoid(2u),
 * which has no cancellation for negative x. */
AH_VEC_CLONES void ah_vec_gelu_fwd(float *restrict out, const float *restrict inp, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = AH_GELU_S * (x + AH_GELU_C * x * x * x);
        out[i] = x / (1.0f + exp_poly(-2.0f * u));
    }
}

AH_VEC_CLONES void ah_vec_gelu_bwd(float *restrict dinp, const float *restrict dout, const float *restrict inp,
                                   size_t n) {
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        /* saturated beyond |x| = 10 (no inf * 0 for huge |x|): there the formula gives exactly 1
         * for x > 10 and ~-3e-36 for x < -10 */
        float xc = clampf(x, -10.0f, 10.0f);
        float u = AH_GELU_S * (xc + AH_GELU_C * xc * xc * xc);
        float sg = 1.0f / (1.0f + exp_poly(-2.0f * u));
        float d = sg + 2.0f * xc * sg * (1.0f - sg) * AH_GELU_S * (1.0f + 3.0f * AH_GELU_C * xc * xc);
        dinp[i] += d * dout[i];
    }
}


AH_VEC_CLONES void ah_vec_to_bf16(unsigned short *restrict dst, const float *restrict x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        union {
            float f;
            uint32_t u;
        } v = {x[i]};
        dst[i] = (unsigned short)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
    }
}

#define AH_BF16_CHUNK 32768

void ah_vec_par_to_bf16(unsigned short *dst, const float *x, size_t n) {
    long chunks = (long)((n + AH_BF16_CHUNK - 1) / AH_BF16_CHUNK);
#pragma omp parallel for schedule(static) if (chunks > 1)
    for (long c = 0; c < chunks; c++) {
        size_t off = (size_t)c * AH_BF16_CHUNK, len = n - off < AH_BF16_CHUNK ? n - off : AH_BF16_CHUNK;
        ah_vec_to_bf16(dst + off, x + off, len);
    }
}
