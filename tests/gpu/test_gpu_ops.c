/* The CUDA backend op by op against the CPU backend: every entry of the
 * ah_backend table on the same deterministic inputs (shapes that are not
 * multiples of the block sizes, grouped-query attention, T above the block
 * size, accumulating backwards started from non-zero gradients), every output
 * compared norm-relative. Prints one line per op and every failure (not just
 * the first), exit 1 on any; exit 77 where no CUDA device is visible.
 * AUTOHET_CUDA_SYNC_CHECK=1 makes an asynchronous fault name its op;
 * AUTOHET_GPU_TEST_BACKEND=cpu runs the harness CPU against CPU (CI). */
#include <string.h>

#include "engine/optim.h"
#include "gpu_common.h"

typedef struct {
    float *v;
    size_t n, cap;
    double scalar; /* a value an op returns (loss sum, sum of squares) */
} res;

static void res_push(res *r, const float *x, size_t n) {
    if (r->n + n > r->cap) {
        r->cap = 2 * (r->n + n);
        r->v = realloc(r->v, r->cap * sizeof(float));
        if (!r->v)
            exit(1);
    }
    memcpy(r->v + r->n, x, n * sizeof(float));
    r->n += n;
}

/* deterministic values in [-scale, scale] */
static float *rnd(size_t n, unsigned seed, float scale) {
    float *h = gpu_xmalloc(n * sizeof(float));
    unsigned long long s = 0x9E3779B97F4A7C15ull * (seed + 1);
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        h[i] = scale * (2.0f * (float)((s >> 40) & 0xFFFFFF) / 16777216.0f - 1.0f);
    }
    return h;
}
static ah_dptr up(const ah_backend *be, const void *h, size_t n) {
    ah_dptr d = ah__be_alloc(be, n);
    ah__be_to_device(be, d, h, n);
    return d;
}
static ah_dptr upr(const ah_backend *be, size_t n, unsigned seed, float scale) {
    float *h = rnd(n, seed, scale);
    ah_dptr d = up(be, h, n);
    free(h);
    return d;
}
static ah_dptr upi(const ah_backend *be, size_t n, int mod, unsigned seed) {
    int *h = gpu_xmalloc(n * sizeof(int));
    for (size_t i = 0; i < n; i++)
        h[i] = (int)((i * 2654435761u + seed * 40503u) % (unsigned)mod);
    ah_dptr d = up(be, h, n);
    free(h);
    return d;
}
/* the buffer's values appended to r; the buffer freed */
static void down(const ah_backend *be, ah_dptr d, size_t n, res *r) {
    float *h = gpu_xmalloc(n * sizeof(float));
    ah__be_to_host(be, h, d, n);
    res_push(r, h, n);
    free(h);
    ah__be_free(be, d);
}

enum { NB = 2, NT = 37, NN = NB * NT, NC = 80, NK = 70, NM = 96 };

static void op_linear_fwd(const ah_backend *be, res *r) {
    ah_dptr out = upr(be, NN * NM, 9, 1), out2 = upr(be, NN * NM, 10, 1), inp = upr(be, NN * NK, 1, 1),
            w = upr(be, NM * NK, 2, 0.3f), b = upr(be, NM, 3, 0.5f);
    be->linear_fwd(be->ctx, out, inp, w, b, NN, NK, NM);
    be->linear_fwd(be->ctx, out2, inp, w, ah__dptr_null(), NN, NK, NM);
    down(be, out, NN * NM, r), down(be, out2, NN * NM, r);
    ah__be_free(be, inp), ah__be_free(be, w), ah__be_free(be, b);
}
static void op_linear_bwd(const ah_backend *be, res *r) {
    ah_dptr dinp = upr(be, NN * NK, 4, 1), dw = upr(be, NM * NK, 5, 1), db = upr(be, NM, 6, 1),
            dout = upr(be, NN * NM, 7, 1), inp = upr(be, NN * NK, 1, 1), w = upr(be, NM * NK, 2, 0.3f);
    be->linear_bwd(be->ctx, dinp, dw, db, dout, inp, w, NN, NK, NM);
    down(be, dinp, NN * NK, r), down(be, dw, NM * NK, r), down(be, db, NM, r);
    ah__be_free(be, dout), ah__be_free(be, inp), ah__be_free(be, w);
}
static void op_embedding(const ah_backend *be, res *r) {
    const int V = 50;
    ah_dptr tok = upi(be, NN, V, 1), wte = upr(be, (size_t)V * NC, 1, 1), wpe = upr(be, NT * NC, 2, 1);
    ah_dptr out = ah__be_alloc(be, NN * NC), out2 = ah__be_alloc(be, NN * NC);
    be->embedding_fwd(be->ctx, out, tok, wte, wpe, NN, NT, NC);
    be->embedding_fwd(be->ctx, out2, tok, wte, ah__dptr_null(), NN, NT, NC);
    ah_dptr dout = upr(be, NN * NC, 3, 1), dwte = upr(be, (size_t)V * NC, 4, 1), dwpe = upr(be, NT * NC, 5, 1);
    be->embedding_bwd(be->ctx, dwte, dwpe, dout, tok, NN, NT, NC);
    down(be, out, NN * NC, r), down(be, out2, NN * NC, r), down(be, dwte, (size_t)V * NC, r);
    down(be, dwpe, NT * NC, r);
    ah__be_free(be, tok), ah__be_free(be, wte), ah__be_free(be, wpe), ah__be_free(be, dout);
}
static void op_layernorm(const ah_backend *be, res *r) {
    const int C = 320;
    ah_dptr inp = upr(be, NN * C, 1, 2), w = upr(be, C, 2, 1), b = upr(be, C, 3, 1);
    ah_dptr out = ah__be_alloc(be, NN * C), mean = ah__be_alloc(be, NN), rstd = ah__be_alloc(be, NN);
    be->layernorm_fwd(be->ctx, out, mean, rstd, inp, w, b, NN, C, 1e-5f);
    ah_dptr dinp = upr(be, NN * C, 4, 1), dw = upr(be, C, 5, 1), db = upr(be, C, 6, 1), dout = upr(be, NN * C, 7, 1);
    be->layernorm_bwd(be->ctx, dinp, dw, db, dout, inp, w, mean, rstd, NN, C);
    down(be, out, NN * C, r), down(be, mean, NN, r), down(be, rstd, NN, r);
    down(be, dinp, NN * C, r), down(be, dw, C, r), down(be, db, C, r);
    ah__be_free(be, inp), ah__be_free(be, w), ah__be_free(be, b), ah__be_free(be, dout);
}
static void op_rmsnorm(const ah_backend *be, res *r) {
    const int C = 320;
    ah_dptr inp = upr(be, NN * C, 1, 2), w = upr(be, C, 2, 1);
    ah_dptr out = ah__be_alloc(be, NN * C), rstd = ah__be_alloc(be, NN);
    be->rmsnorm_fwd(be->ctx, out, rstd, inp, w, NN, C, 1e-6f);
    ah_dptr dinp = upr(be, NN * C, 4, 1), dw = upr(be, C, 5, 1), dout = upr(be, NN * C, 7, 1);
    be->rmsnorm_bwd(be->ctx, dinp, dw, dout, inp, w, rstd, NN, C);
    down(be, out, NN * C, r), down(be, rstd, NN, r), down(be, dinp, NN * C, r), down(be, dw, C, r);
    ah__be_free(be, inp), ah__be_free(be, w), ah__be_free(be, dout);
}
static void op_activations(const ah_backend *be, res *r) {
    const size_t n = 100003;
    const int F = 75;
    ah_dptr x = upr(be, n, 1, 12), y = ah__be_alloc(be, n), dx = upr(be, n, 2, 1), dy = upr(be, n, 3, 1);
    be->gelu_fwd(be->ctx, y, x, n);
    be->gelu_bwd(be->ctx, dx, dy, x, n);
    ah_dptr ry = ah__be_alloc(be, n), rdx = upr(be, n, 7, 1);
    be->relu_fwd(be->ctx, ry, x, n);
    be->relu_bwd(be->ctx, rdx, dy, x, n);
    down(be, ry, n, r), down(be, rdx, n, r);
    ah_dptr s = upr(be, NN * 2 * F, 4, 4), so = ah__be_alloc(be, NN * F), ds = upr(be, NN * 2 * F, 5, 1),
            dso = upr(be, NN * F, 6, 1);
    be->swiglu_fwd(be->ctx, so, s, NN, F);
    be->swiglu_bwd(be->ctx, ds, dso, s, NN, F);
    down(be, y, n, r), down(be, dx, n, r), down(be, so, NN * F, r), down(be, ds, NN * 2 * F, r);
    ah__be_free(be, x), ah__be_free(be, dy), ah__be_free(be, s), ah__be_free(be, dso);
}
static void op_rope(const ah_backend *be, res *r) {
    const int H = 3, D = 24;
    ah_dptr x = upr(be, NN * H * D, 1, 1), dx = upr(be, NN * H * D, 2, 1);
    be->rope_fwd(be->ctx, x, NN, NT, H, D, 10000.0f);
    be->rope_bwd(be->ctx, dx, NN, NT, H, D, 10000.0f);
    down(be, x, NN * H * D, r), down(be, dx, NN * H * D, r);
}
/* The saved buffer is each backend's own (CPU: row statistics, CUDA: probabilities): it starts as
 * garbage and is not compared; the outputs and gradients are. */
static void attention(const ah_backend *be, res *r, int B, int T, int Hq, int Hkv, int D, int window) {
    size_t N = (size_t)B * T, nq = N * Hq * D, nk = N * Hkv * D,
           na = (size_t)B * Hq * be->attention_saved(be->ctx, T);
    ah_dptr q = upr(be, nq, 1, 1), k = upr(be, nk, 2, 1), v = upr(be, nk, 3, 1);
    ah_dptr out = ah__be_alloc(be, nq), att = upr(be, na, 4, 1);
    be->attention_fwd(be->ctx, out, att, q, k, v, B, T, Hq, Hkv, D, window);
    ah_dptr dq = upr(be, nq, 5, 1), dk = upr(be, nk, 6, 1), dv = upr(be, nk, 7, 1), dout = upr(be, nq, 8, 1);
    be->attention_bwd(be->ctx, dq, dk, dv, dout, out, att, q, k, v, B, T, Hq, Hkv, D, window);
    down(be, out, nq, r), down(be, dq, nq, r), down(be, dk, nk, r), down(be, dv, nk, r);
    ah__be_free(be, q), ah__be_free(be, k), ah__be_free(be, v), ah__be_free(be, dout), ah__be_free(be, att);
}
static void op_attention_gqa(const ah_backend *be, res *r) {
    attention(be, r, 2, 40, 4, 2, 16, 0);
}
static void op_attention_long(const ah_backend *be, res *r) {
    attention(be, r, 1, 300, 2, 2, 32, 0);
}
static void op_attention_window(const ah_backend *be, res *r) {
    attention(be, r, 2, 270, 4, 2, 16, 100); /* local layers: keys (t - 100, t] */
}
static void op_crossentropy(const ah_backend *be, res *r) {
    const int V = 1001, Vp = 1024;
    ah_dptr logits = upr(be, (size_t)NN * Vp, 1, 8), tgt = upi(be, NN, V, 2);
    ah_dptr losses = ah__be_alloc(be, NN), probs = upr(be, (size_t)NN * Vp, 3, 1);
    r->scalar = be->crossentropy_fwd(be->ctx, losses, probs, logits, tgt, NN, V, Vp);
    ah_dptr d = upr(be, (size_t)NN * Vp, 4, 1);
    be->crossentropy_bwd(be->ctx, d, probs, tgt, NN, V, Vp, 1.0f / NN);
    down(be, losses, NN, r), down(be, probs, (size_t)NN * Vp, r), down(be, d, (size_t)NN * Vp, r);
    ah__be_free(be, logits), ah__be_free(be, tgt);
}
static void op_elementwise(const ah_backend *be, res *r) {
    const size_t n = 100003;
    ah_dptr x = upr(be, NN * NC, 1, 1), b = upr(be, NC, 2, 1), db = upr(be, NC, 3, 1);
    be->add_bias_rows(be->ctx, x, b, NN, NC);
    be->bias_grad_acc(be->ctx, db, x, NN, NC);
    ah_dptr y = upr(be, n, 4, 1), z = upr(be, n, 5, 1);
    be->add(be->ctx, y, z, n);
    be->scale(be->ctx, y, 0.37f, n);
    r->scalar = be->sumsq(be->ctx, y, n) + 1e3 * be->sumsq(be->ctx, b, NC);
    down(be, x, NN * NC, r), down(be, db, NC, r), down(be, y, n, r);
    ah__be_free(be, b), ah__be_free(be, z);
}
static void op_adamw(const ah_backend *be, res *r) {
    const size_t n = 50001;
    ah_optim_config oc;
    ah_optim_config_default(&oc);
    ah_dptr p = upr(be, n, 1, 1), g = upr(be, n, 2, 1e-2f), m = upr(be, n, 3, 1e-2f), v = ah__be_alloc(be, n);
    float *hv = rnd(n, 4, 1e-4f);
    for (size_t i = 0; i < n; i++)
        hv[i] = hv[i] * hv[i];
    ah__be_to_device(be, v, hv, n);
    free(hv);
    be->adamw(be->ctx, p, g, m, v, n, 3e-3f, 1, &oc, 1, 1.0f);
    be->adamw(be->ctx, p, g, m, v, n, 1e-3f, 4, &oc, 0, 0.5f); /* a clip factor */
    down(be, p, n, r), down(be, m, n, r), down(be, v, n, r);
    ah__be_free(be, g);
}
static void op_memory(const ah_backend *be, res *r) {
    const size_t n = 4099;
    ah_dptr a = upr(be, n, 1, 1), b = ah__be_alloc(be, n), z = upr(be, n, 2, 1);
    be->copy(be->ctx, b, a, n);
    be->copy(be->ctx, ah__dptr_at(a, 1000), a, 2000); /* overlapping: memmove semantics */
    be->zero(be->ctx, ah__dptr_at(z, 7), 100);
    ah__be_sync(be);
    ah_dptr fresh = ah__be_alloc(be, n); /* zero-filled */
    down(be, a, n, r), down(be, b, n, r), down(be, z, n, r), down(be, fresh, n, r);
}

typedef struct {
    const char *name;
    void (*run)(const ah_backend *be, res *r);
    double tol; /* norm-relative, outputs and the returned scalar */
} op_case;

static const op_case cases[] = {
    {"linear_fwd", op_linear_fwd, 1e-5},
    {"linear_bwd", op_linear_bwd, 1e-5},
    {"embedding", op_embedding, 1e-7},
    {"layernorm", op_layernorm, 1e-5},
    {"rmsnorm", op_rmsnorm, 1e-5},
    {"gelu+relu+swiglu", op_activations, 1e-6},
    {"rope", op_rope, 1e-6},
    {"attention_gqa", op_attention_gqa, 1e-5},
    {"attention_T300", op_attention_long, 1e-5},
    {"attention_window", op_attention_window, 1e-5},
    {"crossentropy", op_crossentropy, 1e-6},
    {"elementwise+sumsq", op_elementwise, 1e-6},
    {"adamw", op_adamw, 1e-6},
    {"memory", op_memory, 0},
};

int main(void) {
    const ah_backend *gpu = gpu_backend_or_skip("test_gpu_ops"), *cpu = ah__backend_get("cpu");
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        res rc = {0}, rg = {0};
        cases[i].run(cpu, &rc);
        cases[i].run(gpu, &rg);
        double maxd = 0, rel = rc.n == rg.n ? gpu_rel_diff(rc.v, rg.v, rc.n, &maxd) : INFINITY;
        double srel = fabs(rc.scalar - rg.scalar) / (fabs(rc.scalar) > 0 ? fabs(rc.scalar) : 1);
        int ok = rel <= cases[i].tol && srel <= (cases[i].tol > 0 ? cases[i].tol : 0);
        printf("op %-18s %8zu values  rel %.3g  max|d| %.3g  scalar rel %.3g  (tol %.0e)  %s\n", cases[i].name, rc.n,
               rel, maxd, srel, cases[i].tol, ok ? "ok" : "FAIL");
        bad += !ok;
        free(rc.v), free(rg.v);
    }
    ah_be_mem m = ah__be_mem_stats();
    if (m.live_bytes != 0) {
        printf("FAIL: %.0f bytes still allocated after the ops\n", m.live_bytes);
        bad++;
    }
    printf("test_gpu_ops: %s (%d of %zu ops failed)\n", bad ? "FAIL" : "ok", bad, sizeof cases / sizeof cases[0]);
    return bad ? 1 : 0;
}
