/* e^x for the engine's vectorised loops: Cody-Waite range reduction and a
 * degree-6 polynomial (Cephes expf, ~1 ulp), branch-free so that loops
 * calling it vectorise; libm's expf/tanhf are scalar calls. GELU and the
 * loss softmax (kernels_vec.c) use these constants, attention
 * (attention_isa.h) the same steps on vectors. Inputs are clamped to [-87, 88] (below: ~1e-38, not 0). */
#ifndef AUTOHET_ENGINE_FAST_EXP_H
#define AUTOHET_ENGINE_FAST_EXP_H
#include <math.h>
#include <stdint.h>

#define AH_EXP_LO -87.0f
#define AH_EXP_HI 88.0f
#define AH_EXP_LOG2E 1.44269504088896341f
#define AH_EXP_LN2_HI 0.693359375f /* ln 2 = HI - LO, HI exact in a few bits */
#define AH_EXP_LN2_LO 2.12194440e-4f
#define AH_EXP_P0 1.9875691500e-4f
#define AH_EXP_P1 1.3981999507e-3f
#define AH_EXP_P2 8.3334519073e-3f
#define AH_EXP_P3 4.1665795894e-2f
#define AH_EXP_P4 1.6666665459e-1f
#define AH_EXP_P5 5.0000001201e-1f

/* The reduction and the polynomial: e^x = y * 2^(*e) for x already clamped
 * (each caller clamps and applies the power of two its own way). */
static inline float ah__exp_poly_core(float x, int32_t *e) {
    float t = x * AH_EXP_LOG2E;
    float fi = (float)(int32_t)(t + copysignf(0.5f, t)); /* round to nearest without libm */
    float f = x - fi * AH_EXP_LN2_HI + fi * AH_EXP_LN2_LO;
    float p = AH_EXP_P0;
    p = p * f + AH_EXP_P1;
    p = p * f + AH_EXP_P2;
    p = p * f + AH_EXP_P3;
    p = p * f + AH_EXP_P4;
    p = p * f + AH_EXP_P5;
    *e = (int32_t)fi;
    return p * f * f + f + 1.0f;
}

static inline float ah__exp_poly(float x) {
    int32_t e;
    float y = ah__exp_poly_core(fminf(fmaxf(x, AH_EXP_LO), AH_EXP_HI), &e);
    union {
        float f;
        int32_t i;
    } u;
    u.i = (e + 127) << 23;
    return y * u.f;
}

#endif
