/* e^x for the engine's vectorised loops (GELU, attention softmax). */
#ifndef AUTOHET_ENGINE_FAST_EXP_H
#define AUTOHET_ENGINE_FAST_EXP_H
#include <math.h>
#include <stdint.h>

/* Cody-Waite range reduction and a degree-6 polynomial (Cephes expf, ~1 ulp),
 * branch-free so that loops calling it vectorise; libm's expf/tanhf are scalar
 * calls. Inputs are clamped to [-87, 88] (below: ~1e-38, not 0). */
static inline float ah_exp_poly(float x) {
    x = fminf(fmaxf(x, -87.0f), 88.0f);
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

#endif
