/* Unit tests for the compute backend seam (src/engine/backend.h): selection by
 * name, allocation and copy round trips, handles that do not alias, ops
 * through the table bit-identical to the direct CPU kernels, and the
 * model-level state functions (norm, clip + AdamW, tied copies, host I/O)
 * against the same arithmetic done by hand on host copies; a buffer the
 * machine cannot give ends the process with one line, never abort(). */
#include "test_util.h"

#include "autohet/model.h"
#include "engine/backend.h"
#include "engine/kernels.h"
#include "engine/model.h"
#include "engine/optim.h"
#include "util/errors.h"

#include <sys/resource.h>
#include <sys/wait.h>

static float *host_pattern(size_t n, float base) {
    float *p = calloc(n + 1, sizeof(float));
    assert_non_null(p);
    for (size_t i = 0; i < n; i++)
        p[i] = base + (float)((i * 7919) % 1000) * 0.001f - 0.5f;
    return p;
}

static ah_dptr upload(const ah_backend *be, const void *src, size_t n) {
    ah_dptr d = ah__be_alloc(be, n);
    ah__be_to_device(be, d, src, n);
    return d;
}

static void assert_device_equals(const ah_backend *be, ah_dptr d, const float *want, size_t n) {
    float *got = calloc(n + 1, sizeof(float));
    assert_non_null(got);
    ah__be_to_host(be, got, d, n);
    assert_memory_equal(got, want, n * sizeof(float));
    free(got);
}

static void test_selection_by_name(void **state) {
    (void)state;
    const ah_backend *be = ah__backend_get("cpu");
    assert_non_null(be);
    assert_string_equal(be->name, "cpu");
    assert_ptr_equal(be, ah__backend_cpu());
    assert_null(ah__backend_get("no-such-backend"));
    assert_null(ah__backend_get(NULL));
    char err[256] = "";
    setenv("AUTOHET_BACKEND", "no-such-backend", 1);
    assert_null(ah__backend_default(AH_MATMUL_FP32, err, sizeof err));
    assert_contains(err, "AUTOHET_BACKEND=no-such-backend");
    unsetenv("AUTOHET_BACKEND");
    assert_ptr_equal(ah__backend_default(AH_MATMUL_FP32, err, sizeof err), be);
}

static void test_alloc_copy_round_trip(void **state) {
    (void)state;
    const ah_backend *be = ah__backend_cpu();
    const size_t n = 1000;
    ah_dptr d = ah__be_alloc(be, n);
    assert_false(ah__dptr_is_null(d));
    float *zeros = calloc(n, sizeof(float)), *src = host_pattern(n, 1.0f);
    assert_device_equals(be, d, zeros, n); /* a new buffer is zero-filled */
    ah__be_to_device(be, d, src, n);
    assert_device_equals(be, d, src, n);
    /* device -> device, and an offset view */
    ah_dptr e = ah__be_alloc(be, n);
    ah__be_copy(be, e, d, n);
    assert_device_equals(be, e, src, n);
    ah__be_zero(be, ah__dptr_at(e, 100), 50);
    float *want = calloc(n, sizeof(float));
    memcpy(want, src, n * sizeof(float));
    memset(want + 100, 0, 50 * sizeof(float));
    assert_device_equals(be, e, want, n);
    float part[10];
    ah__be_to_host(be, part, ah__dptr_at(d, 990), 10);
    assert_memory_equal(part, src + 990, sizeof part);
    /* the transport address is the buffer's, offsets in 4-byte elements */
    assert_ptr_equal((char *)ah__dptr_transport(ah__dptr_at(d, 3)), (char *)ah__dptr_transport(d) + 3 * AH_DELEM);
    ah__be_sync(be);
    ah__be_free(be, d);
    ah__be_free(be, e);
    ah__be_free(be, ah__dptr_null()); /* ignored */
    free(zeros);
    free(src);
    free(want);
}

/* A buffer the machine cannot give ends the process with one line and the exit code of ah_oom_context
 * (autohet profile: 2), never abort(): run in a child under a 256 MiB address-space limit. */
static void test_out_of_memory_is_one_line(void **state) {
    (void)state;
#if defined(__SANITIZE_ADDRESS__) /* ASan's allocator reports a failed allocation itself */
    skip();
#endif
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct rlimit rl = {256u << 20, 256u << 20};
        setrlimit(RLIMIT_AS, &rl);
        dup2(fds[1], 2);
        ah_oom_context(2, "profile: model m, block at --tp 1 --mb 8");
        ah__be_alloc(ah__backend_cpu(), (size_t)1 << 30); /* 4 GiB */
        _exit(0);
    }
    close(fds[1]);
    char buf[512] = {0};
    size_t got = 0;
    ssize_t r;
    while (got < sizeof buf - 1 && (r = read(fds[0], buf + got, sizeof buf - 1 - got)) > 0)
        got += (size_t)r;
    close(fds[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status)); /* not SIGABRT */
    assert_int_equal(WEXITSTATUS(status), 2);
    assert_string_equal(buf, "autohet: out of memory (4294967296 bytes): profile: model m, block at --tp 1 --mb 8\n");
}

static void test_handles_do_not_alias(void **state) {
    (void)state;
    const ah_backend *be = ah__backend_cpu();
    enum { K = 6 };
    const size_t n = 4096;
    ah_dptr d[K];
    float *src[K];
    for (int k = 0; k < K; k++) {
        d[k] = ah__be_alloc(be, n);
        src[k] = host_pattern(n, (float)k * 10.0f);
        ah__be_to_device(be, d[k], src[k], n);
    }
    for (int k = 0; k < K; k++) {
        assert_device_equals(be, d[k], src[k], n); /* no write reached another buffer */
        const char *a = ah__dptr_transport(d[k]);
        for (int j = 0; j < K; j++) {
            const char *b = ah__dptr_transport(d[j]);
            if (j != k)
                assert_true(a + n * AH_DELEM <= b || b + n * AH_DELEM <= a);
        }
    }
    for (int k = 0; k < K; k++) {
        ah__be_free(be, d[k]);
        free(src[k]);
    }
}

/* Ops through the table give exactly the direct kernels' bits. */
static void test_ops_equal_direct_kernels(void **state) {
    (void)state;
    const ah_backend *be = ah__backend_cpu();
    const int N = 24, K = 16, M = 12, T = 6, B = N / T, H = 2, D = K / H, V = 10;
    float *x = host_pattern((size_t)N * K, 0.1f), *w = host_pattern((size_t)M * K, -0.2f),
          *b = host_pattern((size_t)M, 0.3f);
    ah_dptr dx = upload(be, x, (size_t)N * K), dw = upload(be, w, (size_t)M * K), db = upload(be, b, M);
    /* linear */
    float *y = calloc((size_t)N * M, sizeof(float));
    ah__linear_fwd(y, x, w, b, N, K, M);
    ah_dptr dy = ah__be_alloc(be, (size_t)N * M);
    be->linear_fwd(be->ctx, dy, dx, dw, db, N, K, M);
    assert_device_equals(be, dy, y, (size_t)N * M);
    /* layernorm */
    float *ln = calloc((size_t)N * K, sizeof(float)), *mean = calloc(N, sizeof(float)),
          *rstd = calloc(N, sizeof(float)), *g = host_pattern(K, 1.0f);
    ah__layernorm_fwd(ln, mean, rstd, x, g, g, N, K);
    ah_dptr dln = ah__be_alloc(be, (size_t)N * K), dmean = ah__be_alloc(be, N), drstd = ah__be_alloc(be, N),
            dg = upload(be, g, K);
    be->layernorm_fwd(be->ctx, dln, dmean, drstd, dx, dg, dg, N, K, 1e-5f);
    assert_device_equals(be, dln, ln, (size_t)N * K);
    assert_device_equals(be, drstd, rstd, N);
    /* attention (q = k = v = x viewed as [N, H, D]) */
    size_t nst = (size_t)B * H * be->attention_saved(be->ctx, T);
    assert_int_equal(nst, (size_t)B * H * ah__attention_stats_per_head(T));
    float *att_out = calloc((size_t)N * K, sizeof(float)), *att = calloc(nst, sizeof(float));
    ah__attention_fwd(att_out, att, x, x, x, B, T, H, H, D);
    ah_dptr datt_out = ah__be_alloc(be, (size_t)N * K), datt = ah__be_alloc(be, nst);
    be->attention_fwd(be->ctx, datt_out, datt, dx, dx, dx, B, T, H, H, D, 0);
    assert_device_equals(be, datt_out, att_out, (size_t)N * K);
    assert_device_equals(be, datt, att, nst);
    /* GELU */
    float *ge = calloc((size_t)N * K, sizeof(float));
    ah__gelu_fwd(ge, x, (size_t)N * K);
    ah_dptr dge = ah__be_alloc(be, (size_t)N * K);
    be->gelu_fwd(be->ctx, dge, dx, (size_t)N * K);
    assert_device_equals(be, dge, ge, (size_t)N * K);
    /* embedding and cross-entropy: int32 ids in a backend buffer */
    int tok[24];
    for (int i = 0; i < N; i++)
        tok[i] = (i * 5) % V;
    ah_dptr dtok = upload(be, tok, (size_t)N);
    float *wte = host_pattern((size_t)V * K, 0.0f), *emb = calloc((size_t)N * K, sizeof(float));
    ah__embedding_fwd(emb, tok, wte, NULL, N, T, K);
    ah_dptr dwte = upload(be, wte, (size_t)V * K), demb = ah__be_alloc(be, (size_t)N * K);
    be->embedding_fwd(be->ctx, demb, dtok, dwte, ah__dptr_null(), N, T, K);
    assert_device_equals(be, demb, emb, (size_t)N * K);
    float *logits = host_pattern((size_t)N * V, 0.0f), *losses = calloc(N, sizeof(float)),
          *probs = calloc((size_t)N * V, sizeof(float));
    double want_loss = ah__crossentropy_fwd(losses, probs, logits, tok, N, V, V);
    ah_dptr dlogits = upload(be, logits, (size_t)N * V), dlosses = ah__be_alloc(be, N),
            dprobs = ah__be_alloc(be, (size_t)N * V);
    double got_loss = be->crossentropy_fwd(be->ctx, dlosses, dprobs, dlogits, dtok, N, V, V);
    assert_memory_equal(&got_loss, &want_loss, sizeof got_loss);
    assert_device_equals(be, dprobs, probs, (size_t)N * V);
    /* bias rows and their gradient against naive loops */
    float *xb = calloc((size_t)N * M, sizeof(float)), *gb = calloc(M, sizeof(float));
    memcpy(xb, y, sizeof(float) * (size_t)N * M);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < M; c++)
            xb[(size_t)n * M + c] += b[c];
    for (int c = 0; c < M; c++) {
        double s = 0;
        for (int n = 0; n < N; n++)
            s += y[(size_t)n * M + c];
        gb[c] = b[c] + (float)s;
    }
    ah_dptr dgb = upload(be, b, M);
    be->bias_grad_acc(be->ctx, dgb, dy, N, M);
    be->add_bias_rows(be->ctx, dy, db, N, M);
    assert_device_equals(be, dy, xb, (size_t)N * M);
    assert_device_equals(be, dgb, gb, M);
    /* sum of squares, scale, add, AdamW */
    double ss = be->sumsq(be->ctx, dx, (size_t)N * K), want_ss = ah__sumsq(x, (size_t)N * K);
    assert_memory_equal(&ss, &want_ss, sizeof ss);
    ah__scale_inplace(x, 0.37f, (size_t)N * K);
    be->scale(be->ctx, dx, 0.37f, (size_t)N * K);
    assert_device_equals(be, dx, x, (size_t)N * K);
    ah__add_inplace(x, ln, (size_t)N * K);
    be->add(be->ctx, dx, dln, (size_t)N * K);
    assert_device_equals(be, dx, x, (size_t)N * K);
    ah_optim_config oc;
    ah_optim_config_default(&oc);
    float *m = host_pattern((size_t)M * K, 0.0f), *v = host_pattern((size_t)M * K, 1.0f);
    ah_dptr dm = upload(be, m, (size_t)M * K), dv = upload(be, v, (size_t)M * K),
            dgrad = upload(be, ge, (size_t)M * K);
    /* the clip factor folded into the update: as scaling the gradient first; the gradient stays */
    float *gs = host_pattern((size_t)M * K, 0.0f);
    memcpy(gs, ge, sizeof(float) * (size_t)M * K);
    ah__scale_inplace(gs, 0.37f, (size_t)M * K);
    ah__adamw_update(w, gs, m, v, (size_t)M * K, 1e-3f, 3, &oc, 1);
    be->adamw(be->ctx, dw, dgrad, dm, dv, (size_t)M * K, 1e-3f, 3, &oc, 1, 0.37f);
    assert_device_equals(be, dgrad, ge, (size_t)M * K);
    free(gs);
    assert_device_equals(be, dw, w, (size_t)M * K);
    assert_device_equals(be, dm, m, (size_t)M * K);
    assert_device_equals(be, dv, v, (size_t)M * K);
    ah_dptr all[] = {dx, dw, db, dy, dln, dmean, drstd, dg, datt_out, datt, dge, dtok, dwte, demb, dlogits,
                     dlosses, dprobs, dgb, dm, dv, dgrad};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        ah__be_free(be, all[i]);
    float *host[] = {x, w, b, y, ln, mean, rstd, g, att_out, att, ge, wte, emb, logits, losses, probs, xb, gb, m, v};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++)
        free(host[i]);
}

/* A whole tiny GPT (tied embeddings) on one rank: one micro-batch of
 * gradients, then the model-level functions against the same arithmetic on
 * host copies. */
static void test_model_state_functions(void **state) {
    (void)state;
    ah_model_config cfg;
    assert_int_equal(ah_model_preset("tiny-gpt", &cfg), 0);
    assert_true(cfg.tied_embeddings);
    ah_engine_model e;
    char err[256];
    const int T = 8, B = 2, L = ah_model_num_layers(&cfg);
    assert_int_equal(ah__engine_model_init(&e, &cfg, T, B, 0, L, 1, 0, 11, 1, err, sizeof err), 0);
    int tok[16], tgt[16];
    for (int i = 0; i < T * B; i++) {
        tok[i] = (i * 37) % cfg.vocab;
        tgt[i] = (i * 11 + 3) % cfg.vocab;
    }
    ah_eng_acts *acts = calloc((size_t)L, sizeof *acts);
    double loss = 0;
    ah__engine_zero_grads(&e);
    ah__engine_forward(&e, tok, ah__dptr_null(), tgt, ah__dptr_null(), &loss, acts);
    ah__engine_backward(&e, tok, tgt, ah__dptr_null(), ah__dptr_null(), 1.0f / (float)(T * B), acts);
    assert_true(loss > 0);
    /* host copies of every layer's state */
    float *p[8], *g[8], *m[8], *v[8];
    assert_true(L <= 8);
    for (int l = 0; l < L; l++) {
        size_t n = ah__engine_layer_floats(&e, l);
        p[l] = calloc(n, sizeof(float)), g[l] = calloc(n, sizeof(float)), m[l] = calloc(n, sizeof(float)),
        v[l] = calloc(n, sizeof(float));
        ah__engine_layer_to_host(&e, l, AH_STATE_PARAM, p[l]);
        ah__engine_layer_to_host(&e, l, AH_STATE_GRAD, g[l]);
    }
    /* the tied copies: summed in place, both become embedding + head */
    const ah_eng_layer *emb = &e.layers[0], *head = &e.layers[L - 1];
    size_t vt = ah__engine_tied_size(&e);
    assert_int_equal(vt, (size_t)cfg.vocab * cfg.hidden);
    float *gsum = calloc(vt, sizeof(float));
    for (size_t i = 0; i < vt; i++)
        gsum[i] = g[0][emb->t[0].offset + i] + g[L - 1][head->t[2].offset + i];
    ah__engine_tied_sum_local(&e);
    assert_device_equals(e.be, ah__engine_tied_grad(&e, 0), gsum, vt);
    assert_device_equals(e.be, ah__engine_tied_grad(&e, 1), gsum, vt);
    memcpy(g[0] + emb->t[0].offset, gsum, vt * sizeof(float));
    memcpy(g[L - 1] + head->t[2].offset, gsum, vt * sizeof(float));
    /* global norm: every tensor once, the tied head not at all */
    double want = 0;
    for (int l = 0; l < L; l++)
        for (int i = 0; i < e.layers[l].n_tensors; i++)
            if (!(l == L - 1 && i == 2))
                want += ah__sumsq(g[l] + e.layers[l].t[i].offset, e.layers[l].t[i].size);
    double got = ah__engine_grad_sumsq(&e);
    assert_memory_equal(&got, &want, sizeof got);
    /* clip + AdamW: per tensor with its decay flag */
    ah_optim_config oc;
    ah_optim_config_default(&oc);
    float clip = 0.5f;
    ah__engine_clip_and_step(&e, clip, 2e-3f, 1, &oc);
    for (int l = 0; l < L; l++) {
        const ah_eng_layer *Ly = &e.layers[l];
        ah__scale_inplace(g[l], clip, Ly->n);
        for (int i = 0; i < Ly->n_tensors; i++) {
            size_t o = Ly->t[i].offset;
            ah__adamw_update(p[l] + o, g[l] + o, m[l] + o, v[l] + o, Ly->t[i].size, 2e-3f, 1, &oc, Ly->t[i].decay);
        }
        assert_device_equals(e.be, ah__engine_layer_state(&e, l, AH_STATE_PARAM), p[l], Ly->n);
        assert_device_equals(e.be, ah__engine_layer_state(&e, l, AH_STATE_ADAM_M), m[l], Ly->n);
        assert_device_equals(e.be, ah__engine_layer_state(&e, l, AH_STATE_ADAM_V), v[l], Ly->n);
    }
    /* a tensor written from the host lands at its offset, the rest stays */
    const ah_tensor_info *ti = &e.layers[1].t[2];
    float *vals = host_pattern(ti->size, 5.0f);
    ah__engine_tensor_from_host(&e, 1, AH_STATE_ADAM_V, 2, vals);
    memcpy(v[1] + ti->offset, vals, ti->size * sizeof(float));
    assert_device_equals(e.be, ah__engine_layer_state(&e, 1, AH_STATE_ADAM_V), v[1], e.layers[1].n);
    free(vals);
    for (int l = 0; l < L; l++) {
        free(p[l]);
        free(g[l]);
        free(m[l]);
        free(v[l]);
    }
    free(gsum);
    free(acts);
    ah__engine_model_free(&e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_selection_by_name),
        cmocka_unit_test(test_alloc_copy_round_trip),
        cmocka_unit_test(test_handles_do_not_alias),
        cmocka_unit_test(test_out_of_memory_is_one_line),
        cmocka_unit_test(test_ops_equal_direct_kernels),
        cmocka_unit_test(test_model_state_functions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
