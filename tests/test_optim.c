/* Unit tests for src/engine/optim: schedule, AdamW (PyTorch semantics),
 * sum of squares and the clip factor. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "engine/optim.h"
#include "test_util.h"

/* ----------------------------------------------------------- config */

static void test_defaults(void **state) {
    (void)state;
    ah_optim_config c;
    memset(&c, 0xff, sizeof c);
    ah_optim_config_default(&c);
    assert_true(c.lr == 3e-4f && c.min_lr == 3e-5f);
    assert_int_equal(c.warmup_steps, 10);
    assert_int_equal(c.total_steps, 1000);
    assert_true(c.beta1 == 0.9f && c.beta2 == 0.95f && c.eps == 1e-8f);
    assert_true(c.weight_decay == 0.1f && c.grad_clip == 1.0f);
}

/* ----------------------------------------------------------- schedule */

static void test_lr_schedule(void **state) {
    (void)state;
    ah_optim_config c;
    ah_optim_config_default(&c); /* lr 3e-4, min 3e-5, warmup 10, total 1000 */
    const double lr = 3e-4f, mn = 3e-5f, tol = 1e-10;
    /* Warm-up: lr * (step + 1) / warmup, reaching lr at its last step. */
    assert_double_equal(ah__lr_at(&c, 0), lr / 10, tol);
    assert_double_equal(ah__lr_at(&c, 4), lr * 5 / 10, tol);
    assert_double_equal(ah__lr_at(&c, 9), lr, tol);
    /* Cosine starts at the peak... */
    assert_double_equal(ah__lr_at(&c, 10), lr, tol);
    /* ...is half-way at the middle of [warmup, total]... */
    assert_double_equal(ah__lr_at(&c, 505), mn + 0.5 * (lr - mn), tol);
    /* ...a quarter of the way: min + (lr - min) (1 + cos(pi/4)) / 2... */
    assert_double_equal(ah__lr_at(&c, 10 + 990 / 4), mn + 0.5 * (lr - mn) * (1 + cos(M_PI * 247 / 990.0)),
                        tol);
    /* ...and ends at (and stays on) the floor. */
    assert_double_equal(ah__lr_at(&c, 1000), mn, tol);
    assert_double_equal(ah__lr_at(&c, 5000), mn, tol);
    /* Monotone: up during warm-up, down after. */
    for (int s = 1; s < 1100; s++) {
        if (s < 10)
            assert_true(ah__lr_at(&c, s) > ah__lr_at(&c, s - 1));
        else
            assert_true(ah__lr_at(&c, s) <= ah__lr_at(&c, s - 1));
    }

    /* No warm-up: the first step uses the peak. */
    c.warmup_steps = 0;
    c.total_steps = 100;
    assert_double_equal(ah__lr_at(&c, 0), lr, tol);
    assert_double_equal(ah__lr_at(&c, 50), mn + 0.5 * (lr - mn), tol);
    assert_double_equal(ah__lr_at(&c, 100), mn, tol);

    /* Warm-up only (total == warmup): ramp, then the floor. */
    c.warmup_steps = 4;
    c.total_steps = 4;
    assert_double_equal(ah__lr_at(&c, 3), lr, tol);
    assert_double_equal(ah__lr_at(&c, 4), mn, tol);

    /* Constant learning rate when min_lr == lr. */
    c.warmup_steps = 0;
    c.total_steps = 10;
    c.min_lr = c.lr;
    for (int s = 0; s < 20; s++)
        assert_true(ah__lr_at(&c, s) == c.lr);
}

/* ----------------------------------------------------------- AdamW */

/* torch.optim.AdamW for one scalar, in double. */
typedef struct {
    double p, m, v;
} ref_state;

static void ref_adamw(ref_state *s, double g, double lr, int t, const ah_optim_config *c, int decay) {
    double b1 = c->beta1, b2 = c->beta2;
    if (decay)
        s->p *= 1 - lr * c->weight_decay;
    s->m = b1 * s->m + (1 - b1) * g;
    s->v = b2 * s->v + (1 - b2) * g * g;
    double mhat = s->m / (1 - pow(b1, t));
    double vhat = s->v / (1 - pow(b2, t));
    s->p -= lr * mhat / (sqrt(vhat) + c->eps);
}

static void test_adamw_first_step_closed_form(void **state) {
    (void)state;
    /* Step 1: mhat = g, vhat = g^2, so the update is lr * g / (|g| + eps)
     * on top of the decoupled decay p (1 - lr wd). */
    ah_optim_config c;
    ah_optim_config_default(&c);
    float p[3] = {1.0f, -2.0f, 0.5f}, g[3] = {0.5f, -4.0f, 0.0f}, m[3] = {0}, v[3] = {0};
    ah__adamw_update(p, g, m, v, 3, 0.1f, 1, &c, 1);
    assert_double_equal(p[0], 0.99 - 0.1 * 0.5 / (0.5 + 1e-8), 1e-7);  /* 0.890000002 */
    assert_double_equal(p[1], -1.98 + 0.1 * 4.0 / (4.0 + 1e-8), 1e-7); /* -1.88 */
    assert_double_equal(p[2], 0.5 * 0.99, 1e-7);                       /* zero grad: decay only */
    assert_double_equal(m[0], 0.05, 1e-7);
    assert_double_equal(v[0], 0.0125, 1e-8);
    assert_true(m[2] == 0.0f && v[2] == 0.0f);

    /* Without decay, a zero gradient leaves the parameter unchanged. */
    float q[2] = {3.0f, -1.5f}, h[2] = {0.0f, 2.0f}, mq[2] = {0}, vq[2] = {0};
    ah__adamw_update(q, h, mq, vq, 2, 0.1f, 1, &c, 0);
    assert_true(q[0] == 3.0f);
    assert_double_equal(q[1], -1.5 - 0.1, 1e-7);
}

static void test_adamw_three_steps_vs_reference(void **state) {
    (void)state;
    ah_optim_config c;
    ah_optim_config_default(&c);
    c.weight_decay = 0.1f;
    enum { N = 5 };
    const float p0[N] = {0.5f, -1.0f, 2.0f, 0.0f, -0.03f};
    const float grads[3][N] = {
        {0.1f, -0.2f, 0.3f, 1e-4f, 0.0f},
        {-0.05f, -0.25f, 0.1f, -2e-4f, 0.7f},
        {0.2f, 0.1f, -0.4f, 5e-5f, -0.7f},
    };
    const float lrs[3] = {1e-2f, 2e-2f, 5e-3f}; /* as a schedule would vary it */
    for (int decay = 0; decay <= 1; decay++) {
        float p[N], m[N] = {0}, v[N] = {0};
        ref_state ref[N];
        for (int i = 0; i < N; i++) {
            p[i] = p0[i];
            ref[i] = (ref_state){p0[i], 0, 0};
        }
        for (int t = 1; t <= 3; t++) {
            ah__adamw_update(p, grads[t - 1], m, v, N, lrs[t - 1], t, &c, decay);
            for (int i = 0; i < N; i++) {
                ref_adamw(&ref[i], grads[t - 1][i], lrs[t - 1], t, &c, decay);
                assert_double_equal(p[i], ref[i].p, 2e-7 * (1 + fabs(ref[i].p)));
                assert_double_equal(m[i], ref[i].m, 1e-7 * (1 + fabs(ref[i].m)));
                assert_double_equal(v[i], ref[i].v, 1e-7 * fabs(ref[i].v) + 1e-12);
            }
        }
        /* Decay pulls p toward zero relative to the undecayed run. */
        if (decay)
            assert_true(fabs(p[2]) < 2.0f);
    }

    /* Hand-computed (decay on, lr 1e-2, betas 0.9/0.95, eps 1e-8, wd 0.1),
     * p = 0.5 with gradients 0.1, -0.05, 0.2 at lr 1e-2, 2e-2, 5e-3:
     *   t1: p = 0.5 * 0.999 - 0.01 * 1                          = 0.4895
     *       m = 0.01, v = 5e-4
     *   t2: p *= 0.998; m = 0.009 - 0.005 = 0.004; v = 4.75e-4 + 1.25e-4 = 6e-4
     *       mhat = 0.004 / 0.19 = 0.0210526; vhat = 6e-4 / 0.0975 = 0.00615385
     *       p = 0.488521 - 0.02 * 0.0210526 / 0.0784465    = 0.4831536
     *   t3: p *= 0.9995; m = 0.0036 + 0.02 = 0.0236; v = 5.7e-4 + 0.002 = 0.00257
     *       mhat = 0.0236 / 0.271 = 0.0870849; vhat = 0.00257 / 0.142625 = 0.0180193
     *       p = 0.4829120 - 0.005 * 0.0870849 / 0.1342359 = 0.4796683 */
    float p = 0.5f, m = 0, v = 0;
    const float g[3] = {0.1f, -0.05f, 0.2f};
    for (int t = 1; t <= 3; t++)
        ah__adamw_update(&p, &g[t - 1], &m, &v, 1, lrs[t - 1], t, &c, 1);
    assert_double_equal(p, 0.4796683, 2e-6);
    assert_double_equal(m, 0.0236, 1e-7);
    assert_double_equal(v, 0.00257, 1e-8);
}

static void test_adamw_large_parallel_matches_serial(void **state) {
    (void)state;
    /* Above the OpenMP threshold every element still gets the same update as
     * a one-element call (elementwise, no cross-element state). */
    ah_optim_config c;
    ah_optim_config_default(&c);
    const size_t n = 100003;
    float *p = malloc(n * sizeof *p), *g = malloc(n * sizeof *g), *m = calloc(n, sizeof *m),
          *v = calloc(n, sizeof *v);
    assert_true(p && g && m && v);
    for (size_t i = 0; i < n; i++) {
        p[i] = (float)sin((double)i);
        g[i] = (float)cos((double)i * 0.37) * 0.01f;
    }
    float *p1 = malloc(n * sizeof *p1), *m1 = calloc(n, sizeof *m1), *v1 = calloc(n, sizeof *v1);
    assert_true(p1 && m1 && v1);
    memcpy(p1, p, n * sizeof *p);
    for (int t = 1; t <= 2; t++) {
        ah__adamw_update(p, g, m, v, n, 1e-3f, t, &c, 1);
        for (size_t i = 0; i < n; i += 997)
            ah__adamw_update(&p1[i], &g[i], &m1[i], &v1[i], 1, 1e-3f, t, &c, 1);
    }
    for (size_t i = 0; i < n; i += 997) {
        assert_true(p[i] == p1[i]);
        assert_true(m[i] == m1[i] && v[i] == v1[i]);
    }
    free(p);
    free(g);
    free(m);
    free(v);
    free(p1);
    free(m1);
    free(v1);
}

/* ----------------------------------------------------------- norm, clip */

static void test_sumsq(void **state) {
    (void)state;
    const float x[4] = {3.0f, -4.0f, 0.5f, 0.0f};
    assert_double_equal(ah__sumsq(x, 4), 25.25, 0);
    assert_double_equal(ah__sumsq(x, 0), 0.0, 0);

    /* Large buffers: blocked, parallel, still exact for representable sums
     * and accumulated in double (1e8 small terms would stall in float). */
    const size_t n = 1000001;
    float *y = malloc(n * sizeof *y);
    assert_non_null(y);
    for (size_t i = 0; i < n; i++)
        y[i] = (i % 2) ? 0.5f : -0.25f;
    double want = 500000 * 0.25 + 500001 * 0.0625;
    assert_double_equal(ah__sumsq(y, n), want, 0);
    for (size_t i = 0; i < n; i++)
        y[i] = 1e-3f;
    double s1 = ah__sumsq(y, n);
    assert_double_equal(s1, (double)n * (double)1e-3f * (double)1e-3f, 1e-9);
    assert_true(ah__sumsq(y, n) == s1); /* reproducible */
#ifdef _OPENMP
    /* Bitwise independent of the thread count (fixed blocks, fixed order). */
    for (size_t i = 0; i < n; i++)
        y[i] = (float)sin((double)i * 0.001) * 1e-2f;
    int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    double one = ah__sumsq(y, n);
    omp_set_num_threads(3);
    double three = ah__sumsq(y, n);
    omp_set_num_threads(threads);
    assert_true(one == three);
#endif
    free(y);
}

static void test_clip_factor(void **state) {
    (void)state;
    assert_true(ah__clip_factor(0.5, 1.0f) == 1.0f);
    assert_true(ah__clip_factor(1.0, 1.0f) == 1.0f);
    assert_double_equal(ah__clip_factor(4.0, 1.0f), 0.25, 1e-7);
    assert_double_equal(ah__clip_factor(3.0, 0.5f), 0.5 / 3.0, 1e-7);
    assert_true(ah__clip_factor(100.0, 0.0f) == 1.0f);  /* disabled */
    assert_true(ah__clip_factor(100.0, -1.0f) == 1.0f); /* disabled */
    assert_true(ah__clip_factor(0.0, 1.0f) == 1.0f);
    assert_true(ah__clip_factor(INFINITY, 1.0f) == 0.0f);
    /* Clipping then renorming gives the clip value. */
    float g[3] = {3.0f, 4.0f, 12.0f}; /* norm 13 */
    float f = ah__clip_factor(sqrt(ah__sumsq(g, 3)), 1.0f);
    for (int i = 0; i < 3; i++)
        g[i] *= f;
    assert_double_equal(sqrt(ah__sumsq(g, 3)), 1.0, 1e-6);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_lr_schedule),
        cmocka_unit_test(test_adamw_first_step_closed_form),
        cmocka_unit_test(test_adamw_three_steps_vs_reference),
        cmocka_unit_test(test_adamw_large_parallel_matches_serial),
        cmocka_unit_test(test_sumsq),
        cmocka_unit_test(test_clip_factor),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
