/* Unit tests for src/engine/kernels.c: forward values against hand-checked
 * numbers and naive double-precision references, finite-difference checks of
 * every backward, accumulate semantics, causality, determinism. */
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

#include "engine/kernels.h"
#include "test_util.h"

/* ----------------------------------------------------------- helpers */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static void rng_seed(uint64_t s) {
    rng_state = s * 0x9E3779B97F4A7C15ull + 1;
}
static uint64_t rng_next(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double frand(void) {
    return (double)(rng_next() >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0;
}
static int irand(int n) {
    return (int)(rng_next() % (uint64_t)n);
}

static float *falloc(size_t n) {
    float *p = calloc(n ? n : 1, sizeof(float));
    assert_non_null(p);
    return p;
}
static float *frandn(size_t n, double lo, double hi) {
    float *p = falloc(n);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)(lo + (hi - lo) * 0.5 * (frand() + 1.0));
    return p;
}
static float *fdup(const float *src, size_t n) {
    float *p = falloc(n);
    memcpy(p, src, n * sizeof(float));
    return p;
}
static void fill(float *p, size_t n, float v) {
    for (size_t i = 0; i < n; i++)
        p[i] = v;
}

static void assert_close_arrays(const float *got, const double *want, size_t n, double tol,
                                const char *what) {
    for (size_t i = 0; i < n; i++)
        if (!(fabs(got[i] - want[i]) <= tol * (1.0 + fabs(want[i]))))
            fail_msg("%s[%zu]: got %.9g, want %.9g", what, i, got[i], want[i]);
}

/* ----------------------------------------------------------- finite differences
 *
 * Loss L = sum_o out[o] * R[o] with a fixed random R, so the analytic gradient
 * is the backward with dout = R. Each forward runs in fp32; the difference
 * L(p + eps) - L(p - eps) is summed in double as sum_o (out+ - out-) R, so
 * outputs a perturbation does not reach cancel exactly, and is divided by the
 * step actually taken in fp32. */

#define FD_EPS 1e-3f
#define FD_RTOL 1e-2
#define FD_ATOL 1e-3
#define FD_MAX_CHECKS 50 /* tensors above 64 elements: this many random ones */

typedef void (*fwd_fn)(void *ctx, float *out);
typedef void (*bwd_fn)(void *ctx, const float *dout); /* accumulates into the ctx's gradients */

typedef struct {
    const char *name;
    float *p; /* parameter / input */
    float *g; /* its gradient buffer (filled by bwd) */
    size_t n;
} fd_param;

static double fd_max_rel = 0.0, fd_max_abs = 0.0; /* over the whole run, for the summary */

static void fd_check(const char *op, const fd_param *pp, fwd_fn fwd, void *ctx, const float *R, size_t nout,
                     const float *grad) {
    float *op_ = falloc(nout), *om = falloc(nout);
    size_t count = pp->n <= 64 ? pp->n : FD_MAX_CHECKS;
    double worst_rel = 0.0, worst_abs = 0.0;
    for (size_t c = 0; c < count; c++) {
        size_t i = pp->n <= 64 ? c : (size_t)irand((int)pp->n);
        float save = pp->p[i];
        float xp = save + FD_EPS, xm = save - FD_EPS;
        pp->p[i] = xp;
        fwd(ctx, op_);
        pp->p[i] = xm;
        fwd(ctx, om);
        pp->p[i] = save;
        double dl = 0.0;
        for (size_t o = 0; o < nout; o++)
            dl += ((double)op_[o] - (double)om[o]) * R[o];
        double num = dl / ((double)xp - (double)xm), ana = grad[i];
        double err = fabs(num - ana), mag = fmax(fabs(num), fabs(ana));
        if (err > FD_RTOL * mag + FD_ATOL)
            fail_msg("%s d/d%s[%zu]: analytic %.7g, numeric %.7g", op, pp->name, i, ana, num);
        if (err > worst_abs)
            worst_abs = err;
        if (mag > 1e-2 && err / mag > worst_rel)
            worst_rel = err / mag;
    }
    print_message("  FD %-10s %-5s %3zu checks: max abs err %.2e, max rel err %.2e\n", op, pp->name, count,
                  worst_abs, worst_rel);
    if (worst_rel > fd_max_rel)
        fd_max_rel = worst_rel;
    if (worst_abs > fd_max_abs)
        fd_max_abs = worst_abs;
    free(op_);
    free(om);
}

/* Forward once, backward with dout = R twice (zeroed gradients), check that
 * the second call doubled every gradient (accumulate semantics), then compare
 * the first call's gradients with finite differences. */
static void grad_suite(const char *op, void *ctx, fwd_fn fwd, bwd_fn bwd, fd_param *ps, int np, size_t nout) {
    float *R = frandn(nout, -1.0, 1.0);
    float *out = falloc(nout);
    for (int k = 0; k < np; k++)
        memset(ps[k].g, 0, ps[k].n * sizeof(float));
    fwd(ctx, out);
    bwd(ctx, R);
    float **g1 = calloc((size_t)np, sizeof(float *));
    assert_non_null(g1);
    for (int k = 0; k < np; k++)
        g1[k] = fdup(ps[k].g, ps[k].n);
    bwd(ctx, R);
    for (int k = 0; k < np; k++) {
        for (size_t i = 0; i < ps[k].n; i++) {
            double want = 2.0 * g1[k][i];
            if (fabs(ps[k].g[i] - want) > 1e-6 * fabs(want) + 1e-7)
                fail_msg("%s: second backward did not accumulate into d%s[%zu]: %.9g, want %.9g", op,
                         ps[k].name, i, ps[k].g[i], want);
        }
    }
    for (int k = 0; k < np; k++)
        fd_check(op, &ps[k], fwd, ctx, R, nout, g1[k]);
    for (int k = 0; k < np; k++)
        free(g1[k]);
    free(g1);
    free(R);
    free(out);
}

/* ----------------------------------------------------------- linear */

static void naive_linear(double *out, const float *inp, const float *w, const float *bias, int N, int K,
                         int M) {
    for (int n = 0; n < N; n++)
        for (int m = 0; m < M; m++) {
            double s = bias ? bias[m] : 0.0;
            for (int k = 0; k < K; k++)
                s += (double)inp[n * K + k] * w[m * K + k];
            out[n * M + m] = s;
        }
}

static void test_linear_fwd(void **state) {
    (void)state;
    rng_seed(1);
    int N = 13, K = 17, M = 11;
    float *x = frandn((size_t)N * K, -1, 1), *w = frandn((size_t)M * K, -1, 1), *b = frandn(M, -1, 1);
    float *out = falloc((size_t)N * M);
    double *want = calloc((size_t)N * M, sizeof(double));
    fill(out, (size_t)N * M, 123.0f); /* must be overwritten */
    ah__linear_fwd(out, x, w, b, N, K, M);
    naive_linear(want, x, w, b, N, K, M);
    assert_close_arrays(out, want, (size_t)N * M, 1e-5, "linear+bias");
    fill(out, (size_t)N * M, 123.0f);
    ah__linear_fwd(out, x, w, NULL, N, K, M);
    naive_linear(want, x, w, NULL, N, K, M);
    assert_close_arrays(out, want, (size_t)N * M, 1e-5, "linear");
    /* hand check: [1 2] W^T with W = [[1 0],[0 1],[1 1]], b = [0, 0, 0.5] */
    float x2[2] = {1, 2}, w2[6] = {1, 0, 0, 1, 1, 1}, b2[3] = {0, 0, 0.5f}, o2[3];
    ah__linear_fwd(o2, x2, w2, b2, 1, 2, 3);
    assert_double_equal(o2[0], 1.0, 0);
    assert_double_equal(o2[1], 2.0, 0);
    assert_double_equal(o2[2], 3.5, 0);
    free(x), free(w), free(b), free(out), free(want);
}

static void test_linear_bwd_null_and_naive(void **state) {
    (void)state;
    rng_seed(2);
    int N = 9, K = 6, M = 5;
    float *x = frandn((size_t)N * K, -1, 1), *w = frandn((size_t)M * K, -1, 1),
          *g = frandn((size_t)N * M, -1, 1);
    float *dx = falloc((size_t)N * K), *dw = falloc((size_t)M * K), *db = falloc(M);
    ah__linear_bwd(NULL, NULL, db, g, x, w, N, K, M); /* only the bias */
    for (int m = 0; m < M; m++) {
        double s = 0;
        for (int n = 0; n < N; n++)
            s += g[n * M + m];
        assert_double_equal(db[m], s, 1e-5);
    }
    ah__linear_bwd(dx, NULL, NULL, g, x, w, N, K, M);
    ah__linear_bwd(NULL, dw, NULL, g, x, w, N, K, M);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) {
            double s = 0;
            for (int m = 0; m < M; m++)
                s += (double)g[n * M + m] * w[m * K + k];
            assert_double_equal(dx[n * K + k], s, 1e-5);
        }
    for (int m = 0; m < M; m++)
        for (int k = 0; k < K; k++) {
            double s = 0;
            for (int n = 0; n < N; n++)
                s += (double)g[n * M + m] * x[n * K + k];
            assert_double_equal(dw[m * K + k], s, 1e-5);
        }
    free(x), free(w), free(g), free(dx), free(dw), free(db);
}

typedef struct {
    int N, K, M;
    float *x, *w, *b, *dx, *dw, *db;
} linear_ctx;
static void linear_f(void *c, float *out) {
    linear_ctx *L = c;
    ah__linear_fwd(out, L->x, L->w, L->b, L->N, L->K, L->M);
}
static void linear_b(void *c, const float *dout) {
    linear_ctx *L = c;
    ah__linear_bwd(L->dx, L->dw, L->db, dout, L->x, L->w, L->N, L->K, L->M);
}

static void test_linear_grad(void **state) {
    (void)state;
    rng_seed(3);
    linear_ctx L = {5, 7, 6, NULL, NULL, NULL, NULL, NULL, NULL};
    L.x = frandn(35, -1, 1), L.w = frandn(42, -1, 1), L.b = frandn(6, -1, 1);
    L.dx = falloc(35), L.dw = falloc(42), L.db = falloc(6);
    fd_param ps[] = {{"inp", L.x, L.dx, 35}, {"w", L.w, L.dw, 42}, {"bias", L.b, L.db, 6}};
    grad_suite("linear", &L, linear_f, linear_b, ps, 3, 30);
    free(L.x), free(L.w), free(L.b), free(L.dx), free(L.dw), free(L.db);
}

/* ----------------------------------------------------------- embedding */

static void test_embedding_fwd(void **state) {
    (void)state;
    enum { V = 5, T = 3, C = 4, N = 6 };
    float wte[V * C], wpe[T * C], out[N * C];
    for (int v = 0; v < V; v++)
        for (int c = 0; c < C; c++)
            wte[v * C + c] = (float)(10 * v + c);
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++)
            wpe[t * C + c] = (float)(100 * t);
    int tok[N] = {4, 0, 2, 2, 1, 4};
    ah__embedding_fwd(out, tok, wte, wpe, N, T, C);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            assert_double_equal(out[n * C + c], 10 * tok[n] + c + 100 * (n % T), 0);
    ah__embedding_fwd(out, tok, wte, NULL, N, T, C);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            assert_double_equal(out[n * C + c], 10 * tok[n] + c, 0);
}

typedef struct {
    int N, T, C, V;
    int *tok;
    float *wte, *wpe, *dwte, *dwpe;
} emb_ctx;
static void emb_f(void *c, float *out) {
    emb_ctx *E = c;
    ah__embedding_fwd(out, E->tok, E->wte, E->wpe, E->N, E->T, E->C);
}
static void emb_b(void *c, const float *dout) {
    emb_ctx *E = c;
    ah__embedding_bwd(E->dwte, E->dwpe, dout, E->tok, E->N, E->T, E->C);
}

static void test_embedding_grad(void **state) {
    (void)state;
    rng_seed(4);
    int tok[8] = {3, 1, 3, 0, 9, 3, 1, 7}; /* repeats; rows 2, 4, 5, 6, 8 unused */
    emb_ctx E = {8, 4, 6, 10, tok, NULL, NULL, NULL, NULL};
    E.wte = frandn(60, -1, 1), E.wpe = frandn(24, -1, 1), E.dwte = falloc(60), E.dwpe = falloc(24);
    fd_param ps[] = {{"wte", E.wte, E.dwte, 60}, {"wpe", E.wpe, E.dwpe, 24}};
    grad_suite("embedding", &E, emb_f, emb_b, ps, 2, 48);
    free(E.wte), free(E.wpe), free(E.dwte), free(E.dwpe);
}

/* ----------------------------------------------------------- normalisation */

static void test_layernorm_fwd(void **state) {
    (void)state;
    rng_seed(5);
    int N = 6, C = 64;
    float *x = frandn((size_t)N * C, -1, 5), *out = falloc((size_t)N * C), *mean = falloc(N),
          *rstd = falloc(N);
    float *w = falloc(C), *b = falloc(C);
    fill(w, C, 1.0f);
    ah__layernorm_fwd(out, mean, rstd, x, w, b, N, C);
    for (int n = 0; n < N; n++) {
        double m = 0, v = 0, om = 0, ov = 0;
        for (int c = 0; c < C; c++)
            m += x[n * C + c];
        m /= C;
        for (int c = 0; c < C; c++)
            v += (x[n * C + c] - m) * (x[n * C + c] - m);
        v /= C;
        assert_double_equal(mean[n], m, 1e-6 * fabs(m));
        assert_double_equal(rstd[n], 1.0 / sqrt(v + 1e-5), 1e-6 / sqrt(v));
        for (int c = 0; c < C; c++)
            om += out[n * C + c];
        om /= C;
        for (int c = 0; c < C; c++)
            ov += (out[n * C + c] - om) * (out[n * C + c] - om);
        ov /= C;
        assert_double_equal(om, 0.0, 1e-6);
        assert_double_equal(ov, v / (v + 1e-5), 1e-5); /* 1 up to the eps */
    }
    /* affine: out = x_hat * w + b */
    float *w2 = frandn(C, 0.5, 1.5), *b2 = frandn(C, -1, 1), *out2 = falloc((size_t)N * C);
    ah__layernorm_fwd(out2, mean, rstd, x, w2, b2, N, C);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            assert_double_equal(out2[n * C + c], out[n * C + c] * w2[c] + b2[c], 1e-5);
    /* hand check: [1, 3] -> [-1, 1] (var 1, up to eps) */
    float x3[2] = {1, 3}, w3[2] = {1, 1}, b3[2] = {0, 0}, o3[2], m3, r3;
    ah__layernorm_fwd(o3, &m3, &r3, x3, w3, b3, 1, 2);
    assert_double_equal(m3, 2.0, 0);
    assert_double_equal(o3[0], -1.0, 1e-5);
    assert_double_equal(o3[1], 1.0, 1e-5);
    free(x), free(out), free(mean), free(rstd), free(w), free(b), free(w2), free(b2), free(out2);
}

typedef struct {
    int N, C;
    float *x, *w, *b, *mean, *rstd, *dx, *dw, *db;
} norm_ctx;
static void ln_f(void *c, float *out) {
    norm_ctx *L = c;
    ah__layernorm_fwd(out, L->mean, L->rstd, L->x, L->w, L->b, L->N, L->C);
}
static void ln_b(void *c, const float *dout) {
    norm_ctx *L = c;
    ah__layernorm_bwd(L->dx, L->dw, L->db, dout, L->x, L->w, L->mean, L->rstd, L->N, L->C);
}
static void rms_f(void *c, float *out) {
    norm_ctx *L = c;
    ah__rmsnorm_fwd(out, L->rstd, L->x, L->w, L->N, L->C);
}
static void rms_b(void *c, const float *dout) {
    norm_ctx *L = c;
    ah__rmsnorm_bwd(L->dx, L->dw, dout, L->x, L->w, L->rstd, L->N, L->C);
}

static void test_layernorm_grad(void **state) {
    (void)state;
    rng_seed(6);
    norm_ctx L = {4, 8, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    L.x = frandn(32, -2, 2), L.w = frandn(8, 0.5, 1.5), L.b = frandn(8, -1, 1);
    L.mean = falloc(4), L.rstd = falloc(4), L.dx = falloc(32), L.dw = falloc(8), L.db = falloc(8);
    fd_param ps[] = {{"inp", L.x, L.dx, 32}, {"w", L.w, L.dw, 8}, {"b", L.b, L.db, 8}};
    grad_suite("layernorm", &L, ln_f, ln_b, ps, 3, 32);
    free(L.x), free(L.w), free(L.b), free(L.mean), free(L.rstd), free(L.dx), free(L.dw), free(L.db);
}

static void test_rmsnorm_fwd(void **state) {
    (void)state;
    rng_seed(7);
    int N = 5, C = 48;
    float *x = frandn((size_t)N * C, -3, 2), *w = falloc(C), *out = falloc((size_t)N * C), *rstd = falloc(N);
    fill(w, C, 1.0f);
    ah__rmsnorm_fwd(out, rstd, x, w, N, C);
    for (int n = 0; n < N; n++) {
        double ss = 0, oss = 0;
        for (int c = 0; c < C; c++)
            ss += (double)x[n * C + c] * x[n * C + c], oss += (double)out[n * C + c] * out[n * C + c];
        assert_double_equal(rstd[n], 1.0 / sqrt(ss / C + 1e-5), 1e-6 * rstd[n]);
        assert_double_equal(oss / C, (ss / C) / (ss / C + 1e-5), 1e-5); /* mean square 1 */
    }
    /* hand check: [3, 4] with w = [1, 2]: rms = sqrt(12.5) */
    float x2[2] = {3, 4}, w2[2] = {1, 2}, o2[2], r2;
    ah__rmsnorm_fwd(o2, &r2, x2, w2, 1, 2);
    assert_double_equal(o2[0], 3.0 / sqrt(12.5 + 1e-5), 1e-6);
    assert_double_equal(o2[1], 8.0 / sqrt(12.5 + 1e-5), 1e-6);
    free(x), free(w), free(out), free(rstd);
}

static void test_rmsnorm_grad(void **state) {
    (void)state;
    rng_seed(8);
    norm_ctx L = {4, 8, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    L.x = frandn(32, -2, 2), L.w = frandn(8, 0.5, 1.5);
    L.rstd = falloc(4), L.dx = falloc(32), L.dw = falloc(8);
    fd_param ps[] = {{"inp", L.x, L.dx, 32}, {"w", L.w, L.dw, 8}};
    grad_suite("rmsnorm", &L, rms_f, rms_b, ps, 2, 32);
    free(L.x), free(L.w), free(L.rstd), free(L.dx), free(L.dw);
}

/* ----------------------------------------------------------- activations */

static void test_gelu_fwd(void **state) {
    (void)state;
    float x[8] = {0, 1, -1, 2, -3, 0.5f, 30, -30}, o[8];
    ah__gelu_fwd(o, x, 8);
    const double want[8] = {0.0,
                            0.8411919906082768,
                            -0.15880800939172324,
                            1.954597694087775,
                            -0.0036373920817729943,
                            0.34571400982514394,
                            30.0,
                            0.0};
    for (int i = 0; i < 8; i++)
        assert_double_equal(o[i], want[i], 2e-7 * (1 + fabs(want[i])));
    /* saturated derivative: 1 for large x, 0 for very negative x, finite for huge */
    float big[3] = {30, -30, -1e30f}, g[3] = {1, 1, 1}, d[3] = {0, 0, 0};
    ah__gelu_bwd(d, g, big, 3);
    assert_double_equal(d[0], 1.0, 1e-6);
    assert_double_equal(d[1], 0.0, 1e-6);
    assert_double_equal(d[2], 0.0, 1e-6);
}

typedef struct {
    size_t n;
    int N, F;
    float *x, *dx;
} act_ctx;
static void gelu_f(void *c, float *out) {
    act_ctx *A = c;
    ah__gelu_fwd(out, A->x, A->n);
}
static void gelu_b(void *c, const float *dout) {
    act_ctx *A = c;
    ah__gelu_bwd(A->dx, dout, A->x, A->n);
}
static void swiglu_f(void *c, float *out) {
    act_ctx *A = c;
    ah__swiglu_fwd(out, A->x, A->N, A->F);
}
static void swiglu_b(void *c, const float *dout) {
    act_ctx *A = c;
    ah__swiglu_bwd(A->dx, dout, A->x, A->N, A->F);
}

static void test_gelu_grad(void **state) {
    (void)state;
    rng_seed(9);
    act_ctx A = {41, 0, 0, frandn(41, -4, 4), falloc(41)};
    A.x[0] = 0.0f;
    fd_param ps[] = {{"inp", A.x, A.dx, 41}};
    grad_suite("gelu", &A, gelu_f, gelu_b, ps, 1, 41);
    free(A.x), free(A.dx);
}

static void test_swiglu_fwd(void **state) {
    (void)state;
    /* row = [gate 0 1 -2 3 | up 5 2 3 -1] */
    float x[8] = {0, 1, -2, 3, 5, 2, 3, -1}, o[4];
    ah__swiglu_fwd(o, x, 1, 4);
    const double want[4] = {0.0, 1.4621171572600098, -0.7152175321327052, -2.8577223804673};
    for (int i = 0; i < 4; i++)
        assert_double_equal(o[i], want[i], 1e-6);
}

static void test_swiglu_grad(void **state) {
    (void)state;
    rng_seed(10);
    act_ctx A = {0, 3, 5, frandn(30, -3, 3), falloc(30)};
    fd_param ps[] = {{"inp", A.x, A.dx, 30}};
    grad_suite("swiglu", &A, swiglu_f, swiglu_b, ps, 1, 15);
    free(A.x), free(A.dx);
}

/* ----------------------------------------------------------- rope */

static void test_rope_fwd(void **state) {
    (void)state;
    /* D = 4, theta 10000: pair 0 turns by t, pair 1 by t * 10000^(-1/2) = 0.01 t */
    enum { T = 3, D = 4 };
    float x[T * D];
    for (int t = 0; t < T; t++) {
        x[t * D + 0] = 1, x[t * D + 1] = 0, x[t * D + 2] = 0, x[t * D + 3] = 1;
    }
    ah__rope_fwd(x, T, T, 1, D, 10000.0f);
    for (int t = 0; t < T; t++) {
        assert_double_equal(x[t * D + 0], cos(t), 1e-6);
        assert_double_equal(x[t * D + 1], sin(t), 1e-6);
        assert_double_equal(x[t * D + 2], -sin(0.01 * t), 1e-6);
        assert_double_equal(x[t * D + 3], cos(0.01 * t), 1e-6);
    }
    /* random x[N = 2T, H, D]: norms of every pair kept, position t = n % T
     * (rows 0 and T unchanged), backward = inverse rotation */
    rng_seed(11);
    int T2 = 40, N = 80, H = 3, D2 = 16;
    size_t n = (size_t)N * H * D2;
    float *y = frandn(n, -1, 1), *y0 = fdup(y, n);
    ah__rope_fwd(y, N, T2, H, D2, 10000.0f);
    for (size_t i = 0; i < n; i += 2) {
        double a = hypot(y0[i], y0[i + 1]), b = hypot(y[i], y[i + 1]);
        assert_double_equal(b, a, 1e-6);
    }
    for (int k = 0; k < H * D2; k++) {
        assert_double_equal(y[k], y0[k], 0);
        assert_double_equal(y[(size_t)T2 * H * D2 + k], y0[(size_t)T2 * H * D2 + k], 0);
    }
    /* the second sequence (rows T2..2T2-1) is rotated like a sequence of its own */
    size_t half = (size_t)T2 * H * D2;
    float *z = fdup(y0 + half, half);
    ah__rope_fwd(z, T2, T2, H, D2, 10000.0f);
    assert_memory_equal(z, y + half, half * sizeof(float));
    ah__rope_bwd(y, N, T2, H, D2, 10000.0f);
    for (size_t i = 0; i < n; i++)
        assert_double_equal(y[i], y0[i], 1e-6);
    free(y), free(y0), free(z);
}

typedef struct {
    int N, T, H, D;
    float theta;
    float *x, *dx;
} rope_ctx;
static void rope_f(void *c, float *out) {
    rope_ctx *R = c;
    memcpy(out, R->x, (size_t)R->N * R->H * R->D * sizeof(float));
    ah__rope_fwd(out, R->N, R->T, R->H, R->D, R->theta);
}
static void rope_b(void *c, const float *dout) {
    /* rope_bwd transforms dx in place; accumulate its result like the others */
    rope_ctx *R = c;
    size_t n = (size_t)R->N * R->H * R->D;
    float *t = fdup(dout, n);
    ah__rope_bwd(t, R->N, R->T, R->H, R->D, R->theta);
    ah__add_inplace(R->dx, t, n);
    free(t);
}

static void test_rope_grad(void **state) {
    (void)state;
    rng_seed(12);
    rope_ctx R = {6, 3, 2, 8, 10.0f, NULL, NULL}; /* small theta: big angles on every pair */
    R.x = frandn(96, -1, 1), R.dx = falloc(96);
    fd_param ps[] = {{"x", R.x, R.dx, 96}};
    grad_suite("rope", &R, rope_f, rope_b, ps, 1, 96);
    free(R.x), free(R.dx);
}

/* ----------------------------------------------------------- attention */

/* double-precision reference: out[N,Hq,D] and each row's softmax statistics
 * st[B,Hq,T,2] (max of the scaled scores, sum of exponentials); window as
 * ah__attention_fwd_window. */
static void naive_attention(double *out, double *st, const float *q, const float *k, const float *v, int B,
                            int T, int Hq, int Hkv, int D, int window) {
    int G = Hq / Hkv;
    double *a = calloc((size_t)T, sizeof(double));
    assert_non_null(a);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < Hq; h++)
            for (int t = 0; t < T; t++) {
                int kh = h / G, j0 = window > 0 && t - window + 1 > 0 ? t - window + 1 : 0;
                double mx = -INFINITY, sum = 0;
                for (int j = j0; j <= t; j++) {
                    double s = 0;
                    for (int d = 0; d < D; d++)
                        s += (double)q[((b * T + t) * Hq + h) * D + d] * k[((b * T + j) * Hkv + kh) * D + d];
                    a[j] = s / sqrt(D);
                    mx = fmax(mx, a[j]);
                }
                for (int j = j0; j <= t; j++)
                    sum += (a[j] = exp(a[j] - mx));
                for (int d = 0; d < D; d++) {
                    double o = 0;
                    for (int j = j0; j <= t; j++)
                        o += a[j] / sum * v[((b * T + j) * Hkv + kh) * D + d];
                    out[((b * T + t) * Hq + h) * D + d] = o;
                }
                double *r = st + (((size_t)b * Hq + h) * T + t) * 2;
                r[0] = mx, r[1] = sum;
            }
    free(a);
}

static size_t stats_len(int B, int T, int Hq) {
    return (size_t)B * Hq * ah__attention_stats_per_head(T);
}

static void check_attention_fwd(int B, int T, int Hq, int Hkv, int D) {
    size_t nq = (size_t)B * T * Hq * D, nk = (size_t)B * T * Hkv * D, ns = stats_len(B, T, Hq);
    assert_int_equal(ns, (size_t)B * Hq * T * 2);
    float *q = frandn(nq, -1.5, 1.5), *k = frandn(nk, -1.5, 1.5), *v = frandn(nk, -1, 1);
    float *out = falloc(nq), *st = falloc(ns);
    fill(st, ns, 7.0f); /* everything must be written */
    double *wo = calloc(nq, sizeof(double)), *ws = calloc(ns, sizeof(double));
    ah__attention_fwd(out, st, q, k, v, B, T, Hq, Hkv, D);
    naive_attention(wo, ws, q, k, v, B, T, Hq, Hkv, D, 0);
    assert_close_arrays(out, wo, nq, 2e-6, "attention out");
    for (size_t r = 0; r < ns / 2; r++) { /* the statistics: the row max and 1 / the sum */
        assert_double_equal(st[2 * r], ws[2 * r], 2e-6 * (1 + fabs(ws[2 * r])));
        assert_double_equal(st[2 * r + 1] * ws[2 * r + 1], 1.0, 2e-6);
    }
    int G = Hq / Hkv;
    /* first token attends only to itself: out = v_0 of its kv head */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < Hq; h++)
            for (int d = 0; d < D; d++)
                assert_double_equal(out[((size_t)b * T * Hq + h) * D + d],
                                    v[((size_t)b * T * Hkv + h / G) * D + d], 1e-7);
    free(q), free(k), free(v), free(out), free(st), free(wo), free(ws);
}

static void test_attention_fwd(void **state) {
    (void)state;
    rng_seed(13);
    check_attention_fwd(2, 7, 4, 2, 8);   /* GQA */
    check_attention_fwd(1, 9, 3, 3, 4);   /* MHA */
    check_attention_fwd(2, 5, 4, 1, 6);   /* MQA */
    check_attention_fwd(1, 1, 2, 1, 3);   /* single token */
    check_attention_fwd(1, 150, 2, 1, 20); /* several blocks, the last one partial */
}

static void test_attention_causal(void **state) {
    (void)state;
    rng_seed(14);
    int B = 2, T = 8, Hq = 4, Hkv = 2, D = 8;
    size_t nq = (size_t)B * T * Hq * D, nk = (size_t)B * T * Hkv * D, ns = stats_len(B, T, Hq);
    float *q = frandn(nq, -1, 1), *k = frandn(nk, -1, 1), *v = frandn(nk, -1, 1);
    float *o1 = falloc(nq), *a1 = falloc(ns), *o2 = falloc(nq), *a2 = falloc(ns);
    ah__attention_fwd(o1, a1, q, k, v, B, T, Hq, Hkv, D);
    /* change q, k and v of the tokens t >= 5 of batch 0 */
    for (int t = 5; t < T; t++) {
        for (int i = 0; i < Hkv * D; i++) {
            k[((size_t)t * Hkv) * D + i] += 0.7f;
            v[((size_t)t * Hkv) * D + i] -= 1.3f;
        }
        for (int i = 0; i < Hq * D; i++)
            q[((size_t)t * Hq) * D + i] *= -2.0f;
    }
    ah__attention_fwd(o2, a2, q, k, v, B, T, Hq, Hkv, D);
    size_t row = (size_t)Hq * D, hs = ah__attention_stats_per_head(T);
    assert_memory_equal(o1, o2, 5 * row * sizeof(float));                             /* earlier tokens */
    assert_memory_equal(o1 + T * row, o2 + T * row, (size_t)T * row * sizeof(float)); /* batch 1 */
    assert_memory_not_equal(o1 + 5 * row, o2 + 5 * row, row * sizeof(float));
    for (int h = 0; h < Hq; h++) /* the statistics of the earlier tokens */
        assert_memory_equal(a1 + (size_t)h * hs, a2 + (size_t)h * hs, (size_t)5 * 2 * sizeof(float));
    free(q), free(k), free(v), free(o1), free(a1), free(o2), free(a2);
}

typedef struct {
    int B, T, Hq, Hkv, D;
    float *q, *k, *v, *st, *out, *dq, *dk, *dv;
    int window;
} att_ctx;
static void att_f(void *c, float *out) {
    att_ctx *A = c;
    ah__attention_fwd_window(out, A->st, A->q, A->k, A->v, A->B, A->T, A->Hq, A->Hkv, A->D, A->window);
    memcpy(A->out, out, sizeof(float) * (size_t)A->B * A->T * A->Hq * A->D); /* the backward reads it */
}
static void att_b(void *c, const float *dout) {
    att_ctx *A = c;
    ah__attention_bwd(A->dq, A->dk, A->dv, dout, A->out, A->st, A->q, A->k, A->v, A->B, A->T, A->Hq, A->Hkv,
                     A->D, A->window);
}

static void attention_grad(const char *name, int B, int T, int Hq, int Hkv, int D, int window) {
    size_t nq = (size_t)B * T * Hq * D, nk = (size_t)B * T * Hkv * D;
    att_ctx A = {B, T, Hq, Hkv, D, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, window};
    A.q = frandn(nq, -1.5, 1.5), A.k = frandn(nk, -1.5, 1.5), A.v = frandn(nk, -1, 1);
    A.st = falloc(stats_len(B, T, Hq)), A.out = falloc(nq);
    A.dq = falloc(nq), A.dk = falloc(nk), A.dv = falloc(nk);
    fd_param ps[] = {{"q", A.q, A.dq, nq}, {"k", A.k, A.dk, nk}, {"v", A.v, A.dv, nk}};
    grad_suite(name, &A, att_f, att_b, ps, 3, nq);
    free(A.q), free(A.k), free(A.v), free(A.st), free(A.out), free(A.dq), free(A.dk), free(A.dv);
}

static void test_attention_grad(void **state) {
    (void)state;
    rng_seed(15);
    attention_grad("attn-gqa", 2, 5, 4, 2, 4, 0);
    attention_grad("attn-mha", 1, 6, 2, 2, 4, 0);
    attention_grad("attn-mqa", 1, 4, 3, 1, 5, 0);
    attention_grad("attn-window", 2, 7, 2, 2, 4, 3); /* GPT-Neo's local layers */
    attention_grad("attn-blocks", 1, 70, 2, 1, 4, 0); /* two blocks, the second partial */
}

/* A sliding window: query t sees keys (t - window, t]; a window as long as
 * the sequence is full causal attention, a window of 1 returns v. */
static void test_attention_window(void **state) {
    (void)state;
    rng_seed(16);
    int B = 2, T = 9, Hq = 2, Hkv = 1, D = 4, W = 3;
    size_t nq = (size_t)B * T * Hq * D, nk = (size_t)B * T * Hkv * D, ns = stats_len(B, T, Hq);
    float *q = frandn(nq, -1, 1), *k = frandn(nk, -1, 1), *v = frandn(nk, -1, 1);
    float *o1 = falloc(nq), *a1 = falloc(ns), *o2 = falloc(nq), *a2 = falloc(ns);
    double *wo = calloc(nq, sizeof(double)), *ws = calloc(ns, sizeof(double));
    ah__attention_fwd(o1, a1, q, k, v, B, T, Hq, Hkv, D);
    ah__attention_fwd_window(o2, a2, q, k, v, B, T, Hq, Hkv, D, T);
    assert_memory_equal(o1, o2, nq * sizeof(float));
    ah__attention_fwd_window(o2, a2, q, k, v, B, T, Hq, Hkv, D, W);
    naive_attention(wo, ws, q, k, v, B, T, Hq, Hkv, D, W);
    assert_close_arrays(o2, wo, nq, 2e-6, "windowed attention out");
    assert_memory_equal(o1, o2, (size_t)W * Hq * D * sizeof(float)); /* the first W tokens see everything */
    assert_memory_not_equal(o1 + (size_t)W * Hq * D, o2 + (size_t)W * Hq * D, (size_t)Hq * D * sizeof(float));
    ah__attention_fwd_window(o2, a2, q, k, v, B, T, Hq, Hkv, D, 1);
    for (int n = 0; n < B * T; n++)
        for (int h = 0; h < Hq; h++)
            for (int d = 0; d < D; d++)
                assert_true(o2[((size_t)n * Hq + h) * D + d] == v[(size_t)n * Hkv * D + d]);
    free(q), free(k), free(v), free(o1), free(a1), free(o2), free(a2), free(wo), free(ws);
}

/* ----------------------------------------------------------- cross-entropy */

static void test_crossentropy_fwd(void **state) {
    (void)state;
    enum { V = 4 };
    /* row 0: logits log(1..4) -> probs 0.1..0.4; row 1: uniform; row 2: huge */
    float logits[3 * V] = {0, logf(2), logf(3), logf(4), 0.3f, 0.3f, 0.3f, 0.3f, 1000, 0, -1000, 999};
    int tg[3] = {3, 1, 3};
    float losses[3], probs[3 * V];
    double total = ah__crossentropy_fwd(losses, probs, logits, tg, 3, V, V);
    for (int i = 0; i < V; i++) {
        assert_double_equal(probs[i], 0.1 * (i + 1), 1e-6);
        assert_double_equal(probs[V + i], 0.25, 1e-7);
    }
    assert_double_equal(losses[0], -log(0.4), 1e-6);
    assert_double_equal(losses[1], log(4.0), 1e-6);
    assert_double_equal(losses[2], 1.0 + log1p(exp(-1.0)), 1e-5); /* stable: no inf/nan */
    assert_double_equal(probs[2 * V + 0], 1.0 / (1.0 + exp(-1.0)), 1e-6);
    assert_double_equal(probs[2 * V + 2], 0.0, 0);
    assert_double_equal(total, (double)losses[0] + losses[1] + losses[2], 1e-12);
    /* backward: (probs - onehot) * scale, added */
    float d[3 * V];
    fill(d, 3 * V, 1.0f);
    ah__crossentropy_bwd(d, probs, tg, 3, V, V, 0.5f);
    for (int n = 0; n < 3; n++)
        for (int i = 0; i < V; i++)
            assert_double_equal(d[n * V + i], 1.0 + (probs[n * V + i] - (i == tg[n])) * 0.5, 1e-7);
    /* random rows sum to 1 */
    rng_seed(16);
    int N = 7, V2 = 50;
    float *l = frandn((size_t)N * V2, -20, 20), *p = falloc((size_t)N * V2), *ls = falloc(N);
    int *t = calloc(N, sizeof(int));
    for (int n = 0; n < N; n++)
        t[n] = irand(V2);
    ah__crossentropy_fwd(ls, p, l, t, N, V2, V2);
    for (int n = 0; n < N; n++) {
        double s = 0;
        for (int i = 0; i < V2; i++)
            s += p[n * V2 + i];
        assert_double_equal(s, 1.0, 1e-6);
        assert_double_equal(ls[n], -log(p[n * V2 + t[n]]), 1e-4 * (1 + ls[n]));
    }
    free(l), free(p), free(ls), free(t);
}

/* A padded vocabulary (rows of Vp > V, as the head GEMM pads to a multiple of
 * 64): the padding columns, whatever they hold, change neither the losses nor
 * the probabilities of the V real columns, get probability 0 and no gradient. */
static void test_crossentropy_padded(void **state) {
    (void)state;
    enum { N = 5, V = 50, VP = 64 };
    rng_seed(61);
    float *l = frandn((size_t)N * V, -5, 5), *lp = falloc((size_t)N * VP);
    int t[N];
    for (int n = 0; n < N; n++) {
        t[n] = irand(V);
        for (int i = 0; i < VP; i++)
            lp[n * VP + i] = i < V ? l[n * V + i] : 1e4f; /* a huge padding logit would dominate if counted */
    }
    float ls[N], lsp[N], *p = falloc((size_t)N * V), *pp = falloc((size_t)N * VP);
    double tot = ah__crossentropy_fwd(ls, p, l, t, N, V, V), totp = ah__crossentropy_fwd(lsp, pp, lp, t, N, V, VP);
    assert_double_equal(tot, totp, 0);
    float *d = falloc((size_t)N * V), *dp = falloc((size_t)N * VP);
    fill(dp, (size_t)N * VP, 0.0f);
    fill(d, (size_t)N * V, 0.0f);
    ah__crossentropy_bwd(d, p, t, N, V, V, 0.25f);
    ah__crossentropy_bwd(dp, pp, t, N, V, VP, 0.25f);
    for (int n = 0; n < N; n++) {
        assert_float_equal(ls[n], lsp[n], 0);
        for (int i = 0; i < VP; i++) {
            assert_float_equal(pp[n * VP + i], i < V ? p[n * V + i] : 0.0f, 0);
            assert_float_equal(dp[n * VP + i], i < V ? d[n * V + i] : 0.0f, 0);
        }
    }
    free(l), free(lp), free(p), free(pp), free(d), free(dp);
}

typedef struct {
    int N, V;
    float scale;
    int *tg;
    float *logits, *probs, *dlogits;
} ce_ctx;
static void ce_f(void *c, float *out) {
    ce_ctx *E = c;
    ah__crossentropy_fwd(out, E->probs, E->logits, E->tg, E->N, E->V, E->V);
}
static void ce_b(void *c, const float *dout) {
    (void)dout; /* R = scale on every row: L = scale * sum(losses) */
    ce_ctx *E = c;
    ah__crossentropy_bwd(E->dlogits, E->probs, E->tg, E->N, E->V, E->V, E->scale);
}

/* grad_suite with R fixed to a constant instead of random */
static void grad_suite_const_r(const char *op, void *ctx, fwd_fn fwd, bwd_fn bwd, fd_param *ps, int np,
                               size_t nout, float r) {
    float *R = falloc(nout), *out = falloc(nout);
    fill(R, nout, r);
    for (int k = 0; k < np; k++)
        memset(ps[k].g, 0, ps[k].n * sizeof(float));
    fwd(ctx, out);
    bwd(ctx, R);
    float **g1 = calloc((size_t)np, sizeof(float *));
    assert_non_null(g1);
    for (int k = 0; k < np; k++)
        g1[k] = fdup(ps[k].g, ps[k].n);
    bwd(ctx, R);
    for (int k = 0; k < np; k++)
        for (size_t i = 0; i < ps[k].n; i++)
            if (fabs(ps[k].g[i] - 2.0 * g1[k][i]) > 1e-6 * fabs(2.0 * g1[k][i]) + 1e-7)
                fail_msg("%s: second backward did not accumulate into d%s[%zu]", op, ps[k].name, i);
    for (int k = 0; k < np; k++)
        fd_check(op, &ps[k], fwd, ctx, R, nout, g1[k]);
    for (int k = 0; k < np; k++)
        free(g1[k]);
    free(g1), free(R), free(out);
}

static void test_crossentropy_grad(void **state) {
    (void)state;
    rng_seed(17);
    int tg[4] = {2, 0, 6, 2};
    ce_ctx E = {4, 7, 0.25f, tg, frandn(28, -2, 2), falloc(28), falloc(28)};
    fd_param ps[] = {{"logits", E.logits, E.dlogits, 28}};
    grad_suite_const_r("xent", &E, ce_f, ce_b, ps, 1, 4, E.scale);
    free(E.logits), free(E.probs), free(E.dlogits);
}

/* ----------------------------------------------------------- composite:
 * layernorm -> linear -> gelu -> linear -> cross-entropy (mean over rows) */

typedef struct {
    int N, C, H, V;
    int *tg;
    float *x, *lw, *lb, *w1, *b1, *w2, *b2;                /* inputs / parameters */
    float *dx, *dlw, *dlb, *dw1, *db1, *dw2, *db2;         /* their gradients */
    float *xn, *mean, *rstd, *h, *a, *lg, *probs, *losses; /* activations */
    float *dxn, *dh, *da, *dlg;                            /* activation gradients */
} mlp_ctx;

static void mlp_f(void *c, float *out) {
    mlp_ctx *M = c;
    ah__layernorm_fwd(M->xn, M->mean, M->rstd, M->x, M->lw, M->lb, M->N, M->C);
    ah__linear_fwd(M->h, M->xn, M->w1, M->b1, M->N, M->C, M->H);
    ah__gelu_fwd(M->a, M->h, (size_t)M->N * M->H);
    ah__linear_fwd(M->lg, M->a, M->w2, M->b2, M->N, M->H, M->V);
    ah__crossentropy_fwd(out, M->probs, M->lg, M->tg, M->N, M->V, M->V);
}
static void mlp_b(void *c, const float *dout) {
    (void)dout;
    mlp_ctx *M = c;
    memset(M->dlg, 0, (size_t)M->N * M->V * sizeof(float));
    memset(M->da, 0, (size_t)M->N * M->H * sizeof(float));
    memset(M->dh, 0, (size_t)M->N * M->H * sizeof(float));
    memset(M->dxn, 0, (size_t)M->N * M->C * sizeof(float));
    ah__crossentropy_bwd(M->dlg, M->probs, M->tg, M->N, M->V, M->V, 1.0f / M->N);
    ah__linear_bwd(M->da, M->dw2, M->db2, M->dlg, M->a, M->w2, M->N, M->H, M->V);
    ah__gelu_bwd(M->dh, M->da, M->h, (size_t)M->N * M->H);
    ah__linear_bwd(M->dxn, M->dw1, M->db1, M->dh, M->xn, M->w1, M->N, M->C, M->H);
    ah__layernorm_bwd(M->dx, M->dlw, M->dlb, M->dxn, M->x, M->lw, M->mean, M->rstd, M->N, M->C);
}

static void test_composite_grad(void **state) {
    (void)state;
    rng_seed(18);
    int N = 4, C = 6, H = 8, V = 5;
    int tg[4] = {1, 4, 0, 1};
    mlp_ctx M = {.N = N, .C = C, .H = H, .V = V, .tg = tg};
    M.x = frandn((size_t)N * C, -2, 2), M.lw = frandn(C, 0.5, 1.5), M.lb = frandn(C, -0.5, 0.5);
    M.w1 = frandn((size_t)H * C, -1, 1), M.b1 = frandn(H, -0.5, 0.5);
    M.w2 = frandn((size_t)V * H, -1, 1), M.b2 = frandn(V, -0.5, 0.5);
    M.dx = falloc((size_t)N * C), M.dlw = falloc(C), M.dlb = falloc(C), M.dw1 = falloc((size_t)H * C);
    M.db1 = falloc(H), M.dw2 = falloc((size_t)V * H), M.db2 = falloc(V);
    M.xn = falloc((size_t)N * C), M.mean = falloc(N), M.rstd = falloc(N), M.h = falloc((size_t)N * H);
    M.a = falloc((size_t)N * H), M.lg = falloc((size_t)N * V), M.probs = falloc((size_t)N * V);
    M.losses = falloc(N), M.dxn = falloc((size_t)N * C), M.dh = falloc((size_t)N * H);
    M.da = falloc((size_t)N * H), M.dlg = falloc((size_t)N * V);
    fd_param ps[] = {{"x", M.x, M.dx, (size_t)N * C}, {"ln.w", M.lw, M.dlw, C},
                     {"ln.b", M.lb, M.dlb, C},        {"w1", M.w1, M.dw1, (size_t)H * C},
                     {"b1", M.b1, M.db1, H},          {"w2", M.w2, M.dw2, (size_t)V * H},
                     {"b2", M.b2, M.db2, V}};
    grad_suite_const_r("mlp", &M, mlp_f, mlp_b, ps, 7, N, 1.0f / N);
    float *all[] = {M.x,   M.lw,  M.lb,    M.w1,     M.b1,  M.w2, M.b2,   M.dx,   M.dlw,
                    M.dlb, M.dw1, M.db1,   M.dw2,    M.db2, M.xn, M.mean, M.rstd, M.h,
                    M.a,   M.lg,  M.probs, M.losses, M.dxn, M.dh, M.da,   M.dlg};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
}

/* ----------------------------------------------------------- elementwise */

static void test_elementwise(void **state) {
    (void)state;
    size_t n = 100003; /* above the parallel threshold, odd length */
    float *y = falloc(n), *x = falloc(n);
    for (size_t i = 0; i < n; i++)
        y[i] = (float)i, x[i] = 0.5f;
    ah__add_inplace(y, x, n);
    ah__scale_inplace(y, 2.0f, n);
    for (size_t i = 0; i < n; i++)
        if (y[i] != 2.0f * ((float)i + 0.5f))
            fail_msg("elementwise[%zu] = %g", i, y[i]);
    free(y), free(x);
}

/* ----------------------------------------------------------- determinism
 *
 * A set of forwards and backwards big enough to run in parallel, run with 1
 * and with 2 threads and twice with 2: every output and gradient must be
 * bitwise identical. Each kernel gives every element to one thread and sums in
 * a fixed order, and OpenBLAS sgemm splits M/N (not the K reduction) across
 * threads, so this holds for the linear layer too. */

#define DET_BUFS 32
typedef struct {
    float *b[DET_BUFS];
    size_t n[DET_BUFS];
    int count;
} det_result;

static float *det_buf(det_result *r, size_t n) {
    assert_true(r->count < DET_BUFS);
    r->n[r->count] = n;
    return r->b[r->count++] = falloc(n);
}

static void det_run(det_result *r, uint64_t seed) {
    r->count = 0;
    rng_seed(seed);
    /* layernorm / rmsnorm N=256, C=96 */
    int N = 256, C = 96;
    float *x = frandn((size_t)N * C, -2, 2), *w = frandn(C, 0.5, 1.5), *b = frandn(C, -1, 1);
    float *g = frandn((size_t)N * C, -1, 1), *mean = falloc(N), *rstd = falloc(N);
    float *o = det_buf(r, (size_t)N * C), *dx = det_buf(r, (size_t)N * C), *dw = det_buf(r, C),
          *db = det_buf(r, C);
    ah__layernorm_fwd(o, mean, rstd, x, w, b, N, C);
    ah__layernorm_bwd(dx, dw, db, g, x, w, mean, rstd, N, C);
    float *o2 = det_buf(r, (size_t)N * C), *dx2 = det_buf(r, (size_t)N * C), *dw2 = det_buf(r, C);
    ah__rmsnorm_fwd(o2, rstd, x, w, N, C);
    ah__rmsnorm_bwd(dx2, dw2, g, x, w, rstd, N, C);
    /* embedding: 512 tokens of 37, C=96 */
    int T = 64, V = 37, *tok = calloc(512, sizeof(int));
    for (int n = 0; n < 512; n++)
        tok[n] = irand(V);
    float *wte = frandn((size_t)V * C, -1, 1), *wpe = frandn((size_t)T * C, -1, 1);
    float *ge = frandn((size_t)512 * C, -1, 1);
    float *oe = det_buf(r, (size_t)512 * C), *dwte = det_buf(r, (size_t)V * C),
          *dwpe = det_buf(r, (size_t)T * C);
    ah__embedding_fwd(oe, tok, wte, wpe, 512, T, C);
    ah__embedding_bwd(dwte, dwpe, ge, tok, 512, T, C);
    /* linear N=256, K=96, M=160 */
    int M = 160;
    float *lw = frandn((size_t)M * C, -1, 1), *lb = frandn(M, -1, 1), *gl = frandn((size_t)N * M, -1, 1);
    float *ol = det_buf(r, (size_t)N * M), *dxl = det_buf(r, (size_t)N * C), *dwl = det_buf(r, (size_t)M * C);
    float *dbl = det_buf(r, M);
    ah__linear_fwd(ol, x, lw, lb, N, C, M);
    ah__linear_bwd(dxl, dwl, dbl, gl, x, lw, N, C, M);
    /* attention B=2, T=160, Hq=4, Hkv=2, D=16 (enough work for the parallel loops), with rope on q and k */
    int B = 2, TA = 160, Hq = 4, Hkv = 2, D = 16;
    size_t nq = (size_t)B * TA * Hq * D, nk = (size_t)B * TA * Hkv * D;
    float *q = frandn(nq, -1, 1), *k = frandn(nk, -1, 1), *v = frandn(nk, -1, 1), *ga = frandn(nq, -1, 1);
    ah__rope_fwd(q, B * TA, TA, Hq, D, 10000.0f);
    ah__rope_fwd(k, B * TA, TA, Hkv, D, 10000.0f);
    float *att = det_buf(r, stats_len(B, TA, Hq)), *oa = det_buf(r, nq);
    float *dq = det_buf(r, nq), *dk = det_buf(r, nk), *dv = det_buf(r, nk);
    ah__attention_fwd(oa, att, q, k, v, B, TA, Hq, Hkv, D);
    ah__attention_bwd(dq, dk, dv, ga, oa, att, q, k, v, B, TA, Hq, Hkv, D, 0);
    ah__rope_bwd(dq, B * TA, TA, Hq, D, 10000.0f);
    /* gelu, swiglu, cross-entropy */
    float *gg = det_buf(r, (size_t)N * M), *sw = det_buf(r, (size_t)N * M / 2),
          *dsw = det_buf(r, (size_t)N * M);
    ah__gelu_bwd(gg, gl, ol, (size_t)N * M);
    ah__swiglu_fwd(sw, ol, N, M / 2);
    ah__swiglu_bwd(dsw, gl, ol, N, M / 2);
    float *probs = det_buf(r, (size_t)N * M), *losses = det_buf(r, N), *dlg = det_buf(r, (size_t)N * M);
    int *tg = calloc(N, sizeof(int));
    for (int n = 0; n < N; n++)
        tg[n] = irand(M);
    double loss = ah__crossentropy_fwd(losses, probs, ol, tg, N, M, M);
    ah__crossentropy_bwd(dlg, probs, tg, N, M, M, 1.0f / N);
    float *lossf = det_buf(r, 2);
    memcpy(lossf, &loss, sizeof loss);
    free(x), free(w), free(b), free(g), free(mean), free(rstd), free(tok), free(wte), free(wpe), free(ge);
    free(lw), free(lb), free(gl), free(q), free(k), free(v), free(ga), free(tg);
}

static void det_free(det_result *r) {
    for (int i = 0; i < r->count; i++)
        free(r->b[i]);
    r->count = 0;
}

static void det_compare(const det_result *a, const det_result *b, const char *what) {
    assert_int_equal(a->count, b->count);
    for (int i = 0; i < a->count; i++)
        if (memcmp(a->b[i], b->b[i], a->n[i] * sizeof(float)) != 0)
            fail_msg("%s: buffer %d differs", what, i);
}

static void test_determinism(void **state) {
    (void)state;
    det_result r1 = {0}, r2 = {0}, r3 = {0};
#ifdef _OPENMP
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    det_run(&r1, 99);
    omp_set_num_threads(2);
    det_run(&r2, 99);
    det_run(&r3, 99);
    omp_set_num_threads(saved);
    det_compare(&r1, &r2, "1 vs 2 threads");
#else
    det_run(&r1, 99);
    det_run(&r2, 99);
    det_run(&r3, 99);
#endif
    det_compare(&r2, &r3, "two runs");
    det_free(&r1), det_free(&r2), det_free(&r3);
}

static int report_fd(void **state) {
    (void)state;
    print_message("finite differences: max rel err %.2e (|grad| > 1e-2), max abs err %.2e\n", fd_max_rel,
                  fd_max_abs);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_linear_fwd),       cmocka_unit_test(test_linear_bwd_null_and_naive),
        cmocka_unit_test(test_linear_grad),      cmocka_unit_test(test_embedding_fwd),
        cmocka_unit_test(test_embedding_grad),   cmocka_unit_test(test_layernorm_fwd),
        cmocka_unit_test(test_layernorm_grad),   cmocka_unit_test(test_rmsnorm_fwd),
        cmocka_unit_test(test_rmsnorm_grad),     cmocka_unit_test(test_gelu_fwd),
        cmocka_unit_test(test_gelu_grad),        cmocka_unit_test(test_swiglu_fwd),
        cmocka_unit_test(test_swiglu_grad),      cmocka_unit_test(test_rope_fwd),
        cmocka_unit_test(test_rope_grad),        cmocka_unit_test(test_attention_fwd),
        cmocka_unit_test(test_attention_causal), cmocka_unit_test(test_attention_grad),
        cmocka_unit_test(test_crossentropy_fwd), cmocka_unit_test(test_crossentropy_padded),
        cmocka_unit_test(test_crossentropy_grad),
        cmocka_unit_test(test_composite_grad),   cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_attention_window), /* GPT-Neo's local layers */
    };
    return cmocka_run_group_tests(tests, NULL, report_fd);
}
