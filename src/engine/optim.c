/* AdamW (PyTorch semantics), global-norm clipping and the warm-up + cosine
 * learning-rate schedule (see optim.h). */
#include "engine/optim.h"

#include <math.h>
#include <stdlib.h>

#include "engine/simd.h"

void ah_optim_config_default(ah_optim_config *c) {
    c->lr = 3e-4f;
    c->min_lr = 3e-5f;
    c->warmup_steps = 10;
    c->total_steps = 1000;
    c->beta1 = 0.9f;
    c->beta2 = 0.95f;
    c->eps = 1e-8f;
    c->weight_decay = 0.1f;
    c->grad_clip = 1.0f;
}

float ah__lr_at(const ah_optim_config *c, int step) {
    if (step < 0)
        step = 0;
    double lr = c->lr, min_lr = c->min_lr;
    if (c->warmup_steps > 0 && step < c->warmup_steps)
        return (float)(lr * (double)(step + 1) / (double)c->warmup_steps);
    int warm = c->warmup_steps > 0 ? c->warmup_steps : 0;
    double span = (double)c->total_steps - (double)warm;
    /* No cosine phase (total <= warmup): past the warm-up sits at the floor. */
    double progress = span > 0 ? ((double)step - (double)warm) / span : 1.0;
    if (progress < 0)
        progress = 0;
    if (progress > 1)
        progress = 1;
    return (float)(min_lr + 0.5 * (lr - min_lr) * (1.0 + cos(M_PI * progress)));
}

/* Below this many elements a parallel region costs more than it saves. */
#define AH_OMP_MIN 8192

/* AdamW on one chunk; the loop vectorises (AH_VEC_CLONES: AVX-512/AVX2 where the CPU has them). */
typedef struct {
    float b1, b2, omb1, omb2, eps, step_size, bc2_sqrt, shrink, gscale;
} adamw_consts;

AH_VEC_CLONES static void adamw_chunk(float *restrict param, const float *restrict grad, float *restrict m,
                                      float *restrict v, long n, const adamw_consts *k) {
    const float b1 = k->b1, b2 = k->b2, omb1 = k->omb1, omb2 = k->omb2, eps = k->eps;
    const float step_size = k->step_size, bc2_sqrt = k->bc2_sqrt, shrink = k->shrink, gs = k->gscale;
    for (long i = 0; i < n; i++) {
        float g = grad[i] * gs;
        float mi = b1 * m[i] + omb1 * g;
        float vi = b2 * v[i] + omb2 * g * g;
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        param[i] = param[i] * shrink - step_size * (mi / denom);
    }
}

/* Elements per parallel chunk of the update (a multiple of every vector width). */
#define AH_ADAMW_CHUNK 16384

void ah__adamw_update_scaled(float *param, const float *grad, float *m, float *v, size_t n, float lr, int t,
                            const ah_optim_config *c, int decay, float gscale) {
    if (t < 1)
        t = 1;
    /* As torch.optim.AdamW (single-tensor path): bias corrections computed in
     * double, step size lr / bc1, denominator sqrt(v) / sqrt(bc2) + eps. */
    const double bc1 = 1.0 - pow((double)c->beta1, (double)t);
    const double bc2 = 1.0 - pow((double)c->beta2, (double)t);
    const adamw_consts k = {
        .b1 = c->beta1,
        .b2 = c->beta2,
        .omb1 = 1.0f - c->beta1,
        .omb2 = 1.0f - c->beta2,
        .eps = c->eps,
        .step_size = (float)((double)lr / bc1),
        .bc2_sqrt = (float)sqrt(bc2),
        .shrink = decay ? (float)(1.0 - (double)lr * (double)c->weight_decay) : 1.0f,
        .gscale = gscale,
    };
    const long nn = (long)n, chunks = (nn + AH_ADAMW_CHUNK - 1) / AH_ADAMW_CHUNK;
#pragma omp parallel for schedule(static) if (nn >= AH_OMP_MIN)
    for (long ch = 0; ch < chunks; ch++) {
        long off = ch * AH_ADAMW_CHUNK, len = nn - off < AH_ADAMW_CHUNK ? nn - off : AH_ADAMW_CHUNK;
        adamw_chunk(param + off, grad + off, m + off, v + off, len, &k);
    }
}

void ah__adamw_update(float *param, const float *grad, float *m, float *v, size_t n, float lr, int t,
                     const ah_optim_config *c, int decay) {
    ah__adamw_update_scaled(param, grad, m, v, n, lr, t, c, decay, 1.0f);
}

/* Fixed-size blocks make the summation order independent of the thread count,
 * so the global norm (and every clipped update) is bitwise reproducible. */
#define AH_SUMSQ_BLOCK 16384

static double sumsq_serial(const float *x, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)x[i] * (double)x[i];
    return s;
}

double ah__sumsq(const float *x, size_t n) {
    if (n <= AH_SUMSQ_BLOCK)
        return sumsq_serial(x, n);
    size_t nb = (n + AH_SUMSQ_BLOCK - 1) / AH_SUMSQ_BLOCK;
    double *part = malloc(nb * sizeof *part);
    if (part == NULL) {
        /* Same block order, serially. */
        double s = 0.0;
        for (size_t b = 0; b < nb; b++) {
            size_t lo = b * AH_SUMSQ_BLOCK, len = n - lo < AH_SUMSQ_BLOCK ? n - lo : AH_SUMSQ_BLOCK;
            s += sumsq_serial(x + lo, len);
        }
        return s;
    }
    const long nbl = (long)nb;
#pragma omp parallel for schedule(static)
    for (long b = 0; b < nbl; b++) {
        size_t lo = (size_t)b * AH_SUMSQ_BLOCK, len = n - lo < AH_SUMSQ_BLOCK ? n - lo : AH_SUMSQ_BLOCK;
        part[b] = sumsq_serial(x + lo, len);
    }
    double s = 0.0;
    for (size_t b = 0; b < nb; b++)
        s += part[b];
    free(part);
    return s;
}

float ah__clip_factor(double global_norm, float clip) {
    return clip > 0 && global_norm > (double)clip ? (float)((double)clip / global_norm) : 1.0f;
}
