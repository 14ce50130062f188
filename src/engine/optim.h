/* Optimizer and schedule: AdamW with decoupled weight decay, global-norm
 * gradient clipping, cosine learning rate with linear warm-up. */
#ifndef AUTOHET_ENGINE_OPTIM_H
#define AUTOHET_ENGINE_OPTIM_H
#include <stddef.h>

#include "autohet/engine.h"

/* ah_optim_config and ah_optim_config_default: autohet/engine.h */
/* Learning rate at step (0-based): linear warm-up from lr/warmup to lr over
 * warmup_steps, then cosine from lr to min_lr at total_steps. */
float ah__lr_at(const ah_optim_config *c, int step);
/* One AdamW update of n parameters with moments m, v (step t is 1-based for
 * bias correction); decay applies to parameters with decay != 0 (weights, not
 * biases or norm gains). grad is already scaled (e.g. by the clip factor). */
void ah__adamw_update(float *param, const float *grad, float *m, float *v, size_t n, float lr, int t,
                     const ah_optim_config *c, int decay);
/* The same on grad * gscale (the clip factor), without writing grad: one pass
 * over the gradients instead of a scaling pass and an update pass; bitwise the
 * same as scaling grad in place first (one float product either way). */
void ah__adamw_update_scaled(float *param, const float *grad, float *m, float *v, size_t n, float lr, int t,
                            const ah_optim_config *c, int decay, float gscale);
/* Sum of squares of a buffer (double accumulation), for the global norm. */
double ah__sumsq(const float *x, size_t n);
/* Clip factor for a global norm: min(1, clip / norm). */
float ah__clip_factor(double global_norm, float clip);

#endif
