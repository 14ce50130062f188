/* The flash-style attention (src/engine/attention.c) against the engine's
 * earlier attention (tests/attention_reference.c, full T x T probabilities
 * through BLAS): outputs and the gradients of q, k, v agree within 1e-6
 * (norm-relative) on every instruction set this CPU has, for grouped-query,
 * multi-query and local-window heads, sequences that are and are not
 * multiples of the block, head sizes that are not multiples of a vector;
 * results do not depend on the thread count; NULL gradients are skipped. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>

#include "attention_reference.h"
#include "engine/kernels.h"

#define ATT_TOL 1e-6

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float *rnd(size_t n, float scale) {
    float *p = malloc((n ? n : 1) * sizeof(float));
    assert_non_null(p);
    for (size_t i = 0; i < n; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = scale * (2.0f * (float)((rng >> 40) & 0xFFFFFF) / 16777216.0f - 1.0f);
    }
    return p;
}
static float *dup(const float *x, size_t n) {
    float *p = malloc((n ? n : 1) * sizeof(float));
    assert_non_null(p);
    memcpy(p, x, n * sizeof(float));
    return p;
}

/* ||a - b|| / ||b||, and the largest |a - b| over the largest |b|. */
static double rel_diff(const float *a, const float *b, size_t n, double *maxrel) {
    double d2 = 0, b2 = 0, dm = 0, bm = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        d2 += d * d, b2 += (double)b[i] * b[i];
        dm = fmax(dm, fabs(d)), bm = fmax(bm, fabs(b[i]));
    }
    *maxrel = bm > 0 ? dm / bm : dm;
    return b2 > 0 ? sqrt(d2 / b2) : sqrt(d2);
}

typedef struct {
    int B, T, Hq, Hkv, D, window;
} shape;

typedef struct {
    float *out, *dq, *dk, *dv;
} result;

/* The inputs of a shape, the gradients starting from non-zero values (the backward accumulates). */
typedef struct {
    size_t nq, nk;
    float *q, *k, *v, *dout, *g0q, *g0k, *g0v;
} inputs;

static inputs make_inputs(const shape *s) {
    inputs in;
    in.nq = (size_t)s->B * s->T * s->Hq * s->D, in.nk = (size_t)s->B * s->T * s->Hkv * s->D;
    in.q = rnd(in.nq, 1.5f), in.k = rnd(in.nk, 1.5f), in.v = rnd(in.nk, 1.0f), in.dout = rnd(in.nq, 1.0f);
    in.g0q = rnd(in.nq, 0.1f), in.g0k = rnd(in.nk, 0.1f), in.g0v = rnd(in.nk, 0.1f);
    return in;
}
static void free_inputs(inputs *in) {
    free(in->q), free(in->k), free(in->v), free(in->dout), free(in->g0q), free(in->g0k), free(in->g0v);
}
static void free_result(result *r) {
    free(r->out), free(r->dq), free(r->dk), free(r->dv);
}

static result run_reference(const shape *s, const inputs *in) {
    result r = {malloc(in->nq * sizeof(float)), dup(in->g0q, in->nq), dup(in->g0k, in->nk),
                dup(in->g0v, in->nk)};
    float *att = calloc((size_t)s->B * s->Hq * s->T * s->T, sizeof(float));
    assert_non_null(att);
    ah_attention_fwd_window_reference(r.out, att, in->q, in->k, in->v, s->B, s->T, s->Hq, s->Hkv, s->D,
                                      s->window);
    ah_attention_bwd_reference(r.dq, r.dk, r.dv, in->dout, att, in->q, in->k, in->v, s->B, s->T, s->Hq,
                               s->Hkv, s->D);
    free(att);
    return r;
}

static result run_flash(const shape *s, const inputs *in) {
    result r = {malloc(in->nq * sizeof(float)), dup(in->g0q, in->nq), dup(in->g0k, in->nk),
                dup(in->g0v, in->nk)};
    size_t ns = (size_t)s->B * s->Hq * ah__attention_stats_per_head(s->T);
    float *st = rnd(ns, 9.0f); /* garbage: the forward writes every element it needs */
    ah__attention_fwd_window(r.out, st, in->q, in->k, in->v, s->B, s->T, s->Hq, s->Hkv, s->D, s->window);
    ah__attention_bwd(r.dq, r.dk, r.dv, in->dout, r.out, st, in->q, in->k, in->v, s->B, s->T, s->Hq, s->Hkv,
                     s->D, s->window);
    free(st);
    return r;
}

static void expect_close(const char *kernel, const shape *s, const char *what, const float *got,
                         const float *want, size_t n) {
    double mx, rel = rel_diff(got, want, n, &mx);
    print_message("  %-6s B%d T%-4d Hq%d Hkv%d D%-3d W%-3d %-3s rel %.2e  max %.2e\n", kernel, s->B, s->T,
                  s->Hq, s->Hkv, s->D, s->window, what, rel, mx);
    if (!(rel <= ATT_TOL && mx <= 10 * ATT_TOL))
        fail_msg("%s %s: differs from the reference by %.3g (max %.3g) for B%d T%d Hq%d Hkv%d D%d window %d",
                 kernel, what, rel, mx, s->B, s->T, s->Hq, s->Hkv, s->D, s->window);
}

static const shape shapes[] = {
    {2, 64, 4, 2, 16, 0},                          /* one full block, GQA */
    {1, 200, 4, 1, 24, 0},                         /* MQA, T and D not multiples of a block / vector */
    {2, 150, 6, 3, 64, 0},                         /* GPT-2's head size */
    {1, 300, 2, 2, 40, 100},                       /* a local window across block edges */
    {1, 257, 3, 3, 8, 70},   {1, 130, 2, 2, 5, 1}, /* window 1: each token its own value */
    {1, 1, 2, 1, 3, 0},                            /* one token */
    {1, 1024, 2, 1, 64, 0},                        /* the long sequence of the benchmark */
};

static void test_matches_reference(void **state) {
    (void)state;
    const char *kernels[] = {"avx512", "avx2", "base"};
    int ran = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const shape *s = &shapes[i];
        inputs in = make_inputs(s);
        result ref = run_reference(s, &in);
        for (size_t kk = 0; kk < sizeof kernels / sizeof kernels[0]; kk++) {
            if (ah__attention_force_kernel(kernels[kk]) != 0)
                continue; /* not on this CPU */
            ran += i == 0;
            result got = run_flash(s, &in);
            expect_close(kernels[kk], s, "out", got.out, ref.out, in.nq);
            /* the gradients' increments over their starting values */
            for (size_t j = 0; j < in.nq; j++)
                got.dq[j] -= in.g0q[j], ref.dq[j] -= in.g0q[j];
            for (size_t j = 0; j < in.nk; j++)
                got.dk[j] -= in.g0k[j], ref.dk[j] -= in.g0k[j], got.dv[j] -= in.g0v[j],
                    ref.dv[j] -= in.g0v[j];
            expect_close(kernels[kk], s, "dq", got.dq, ref.dq, in.nq);
            expect_close(kernels[kk], s, "dk", got.dk, ref.dk, in.nk);
            expect_close(kernels[kk], s, "dv", got.dv, ref.dv, in.nk);
            for (size_t j = 0; j < in.nq; j++) /* restore for the next kernel */
                ref.dq[j] += in.g0q[j];
            for (size_t j = 0; j < in.nk; j++)
                ref.dk[j] += in.g0k[j], ref.dv[j] += in.g0v[j];
            free_result(&got);
        }
        free_result(&ref);
        free_inputs(&in);
    }
    assert_true(ran >= 1);                                /* the base kernel runs everywhere */
    assert_int_equal(ah__attention_force_kernel(NULL), 0); /* back to the CPU's choice */
    print_message("  kernel chosen for this CPU: %s\n", ah__attention_kernel());
}

static void test_unknown_kernel(void **state) {
    (void)state;
    assert_int_equal(ah__attention_force_kernel("sve"), -1);
    assert_int_equal(ah__attention_force_kernel("base"), 0);
    assert_string_equal(ah__attention_kernel(), "base");
    assert_int_equal(ah__attention_force_kernel(NULL), 0);
}

/* Enough heads and length for the parallel loops: 1 and 2 threads give the same bits. */
static void test_thread_count_independent(void **state) {
    (void)state;
    shape s = {2, 192, 4, 2, 32, 0};
    inputs in = make_inputs(&s);
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    result a = run_flash(&s, &in);
    omp_set_num_threads(2);
    result b = run_flash(&s, &in);
    omp_set_num_threads(saved);
    assert_memory_equal(a.out, b.out, in.nq * sizeof(float));
    assert_memory_equal(a.dq, b.dq, in.nq * sizeof(float));
    assert_memory_equal(a.dk, b.dk, in.nk * sizeof(float));
    assert_memory_equal(a.dv, b.dv, in.nk * sizeof(float));
    free_result(&a), free_result(&b);
    free_inputs(&in);
}

/* A NULL gradient is skipped; the others are what they are with all three. */
static void test_null_gradients(void **state) {
    (void)state;
    shape s = {1, 100, 2, 1, 16, 0};
    inputs in = make_inputs(&s);
    result all = run_flash(&s, &in);
    size_t ns = (size_t)s.B * s.Hq * ah__attention_stats_per_head(s.T);
    float *out = malloc(in.nq * sizeof(float)), *st = malloc(ns * sizeof(float)), *dk = dup(in.g0k, in.nk),
          *dv = dup(in.g0v, in.nk), *dq = dup(in.g0q, in.nq);
    ah__attention_fwd(out, st, in.q, in.k, in.v, s.B, s.T, s.Hq, s.Hkv, s.D);
    ah__attention_bwd(NULL, dk, dv, in.dout, out, st, in.q, in.k, in.v, s.B, s.T, s.Hq, s.Hkv, s.D, 0);
    ah__attention_bwd(dq, NULL, NULL, in.dout, out, st, in.q, in.k, in.v, s.B, s.T, s.Hq, s.Hkv, s.D, 0);
    assert_memory_equal(dk, all.dk, in.nk * sizeof(float));
    assert_memory_equal(dv, all.dv, in.nk * sizeof(float));
    assert_memory_equal(dq, all.dq, in.nq * sizeof(float));
    free(out), free(st), free(dk), free(dv), free(dq);
    free_result(&all);
    free_inputs(&in);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_reference),
        cmocka_unit_test(test_unknown_kernel),
        cmocka_unit_test(test_thread_count_independent),
        cmocka_unit_test(test_null_gradients),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
