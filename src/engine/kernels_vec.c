/* The engine's vectorised elementwise loops: plain loops compiled once per
 * vector width (AH_VEC_CLONES, simd.h) with flags that let GCC turn the clamps
 * into min/max instructions (CMakeLists.txt: no errno, no trapping math,
 * finite math, no signed zeros; no FMA contraction, so every width rounds
 * alike). Inputs are assumed finite (the clamps bound everything else). */
#include "engine/kernels_vec.h"

#include <math.h>
#include <stdint.h>

#include "engine/fast_exp.h"
#include "engine/simd.h"

#define AH_GELU_S 0.7978845608028654f /* sqrt(2/pi) */
#define AH_GELU_C 0.044715f

static inline float clampf(float x, float lo, float hi) {
    /* fminf/fmaxf stay library calls, which keep a loop scalar; with this file's flags these
     * compare-selects become min/max (the same values for every non-NaN x) */
    x = x < lo ? lo : x;
    return x > hi ? hi : x;
}

/* e^x for the activation kernels: fast_exp.h's polynomial (the one owner of
 * its constants), written with clampf so the loops vectorise under this file's
 * flags, and with a lower clamp of -110 whose far tail underflows to 0. */
static inline float exp_poly(float x) {
    int32_t ii;
    float y = ah__exp_poly_core(clampf(x, -110.0f, AH_EXP_HI), &ii);
    /* y 2^ii as y 2^h 2^(ii-h): exact while normal, and below e^-87 it underflows through the
     * subnormals to 0 (a softmax's far tail) with no select that would keep the loop scalar */
    int32_t h = ii >> 1;
    union {
        float f;
        int32_t i;
    } u1, u2;
    u1.i = (h + 127) << 23;
    u2.i = (ii - h + 127) << 23;
    return y * u1.f * u2.f;
}

/* GELU (tanh form) through the identity 0.5 x (1 + tanh(u)) = x * sigmoid(2u),
 * which has no cancellation for negative x. */
AH_VEC_CLONES void ah__vec_gelu_fwd(float *restrict out, const float *restrict inp, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = AH_GELU_S * (x + AH_GELU_C * x * x * x);
        out[i] = x / (1.0f + exp_poly(-2.0f * u));
    }
}

AH_VEC_CLONES void ah__vec_gelu_bwd(float *restrict dinp, const float *restrict dout, const float *restrict inp,
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


AH_VEC_CLONES void ah__vec_to_bf16(unsigned short *restrict dst, const float *restrict x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        union {
            float f;
            uint32_t u;
        } v = {x[i]};
        dst[i] = (unsigned short)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
    }
}

#define AH_BF16_CHUNK 32768

void ah__vec_par_to_bf16(unsigned short *dst, const float *x, size_t n) {
    long chunks = (long)((n + AH_BF16_CHUNK - 1) / AH_BF16_CHUNK);
#pragma omp parallel for schedule(static) if (chunks > 1)
    for (long c = 0; c < chunks; c++) {
        size_t off = (size_t)c * AH_BF16_CHUNK, len = n - off < AH_BF16_CHUNK ? n - off : AH_BF16_CHUNK;
        ah__vec_to_bf16(dst + off, x + off, len);
    }
}

/* ---- the softmax of the loss over one row of logits ---- */

AH_VEC_CLONES float ah__vec_max(const float *x, size_t n) {
    float m = x[0];
    for (size_t i = 1; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

AH_VEC_CLONES double ah__vec_exp_shift_sum(float *restrict out, const float *restrict x, float shift, size_t n) {
    for (size_t i = 0; i < n; i++)
        out[i] = exp_poly(x[i] - shift);
    /* eight double partial sums in a fixed pattern (vectorisable without reassociation), then in order */
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            acc[j] += out[i + j];
    double s = 0;
    for (; i < n; i++)
        s += out[i];
    for (int j = 0; j < 8; j++)
        s += acc[j];
    return s;
}

AH_VEC_CLONES void ah__vec_scale(float *restrict x, float a, size_t n) {
    for (size_t i = 0; i < n; i++)
        x[i] *= a;
}

AH_VEC_CLONES void ah__vec_softmax_grad(float *restrict d, const float *restrict p, size_t tgt, float scale, size_t n) {
    for (size_t i = 0; i < n; i++)
        d[i] += (p[i] - (i == tgt ? 1.0f : 0.0f)) * scale;
}
