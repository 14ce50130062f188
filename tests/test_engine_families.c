/* The training engine computes the HF model a config.json describes, family
 * by family (GPT-2, LLaMA, Qwen2's q/k/v biases, GPT-Neo's bias-free q/k/v,
 * unscaled scores and local layers, OPT's embedding projection, position
 * offset, post-LN blocks and ReLU): tiny configs are loaded from JSON, every
 * parameter is set to a random value, and the engine's loss and gradients are
 * compared with a float64 reference forward written here from the HF
 * definitions (the gradient by central finite differences of the reference). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autohet/model.h"
#include "engine/data.h"
#include "engine/model.h"

enum { T = 8, B = 2, N = B * T };

/* ---------------------------------------------------------- the engine side */

typedef struct {
    ah_model_config cfg;
    ah_engine_model e;
    int L;
    float **p, **g; /* host copies of every layer's parameters and gradients */
} fixture;

static ah_model_config load_config(const char *json) {
    char path[] = "/tmp/ah_fam_XXXXXX", err[256];
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, json, strlen(json)), (ssize_t)strlen(json));
    close(fd);
    ah_model_config m;
    int rc = ah_model_load_json(path, &m, err, sizeof err);
    unlink(path);
    if (rc != 0)
        fail_msg("%s", err);
    return m;
}

static int tokens[N], targets[N];

/* Every parameter random (norm gains near 1, the rest ~0.3), the same on every run. */
static void randomise(fixture *f) {
    for (int l = 0; l < f->L; l++) {
        const ah_eng_layer *Ly = &f->e.layers[l];
        for (int i = 0; i < Ly->n_tensors; i++) {
            const ah_tensor_info *ti = &Ly->t[i];
            float *v = calloc(ti->size + 1, sizeof(float));
            int norm_w = strstr(ti->name, "_w") &&
                         (strstr(ti->name, "ln") == ti->name || strstr(ti->name, "rms") == ti->name ||
                          strstr(ti->name, "norm") == ti->name);
            for (size_t k = 0; k < ti->size; k++) {
                double u = (double)(ah_hash64((uint64_t)l * 1000003u + (uint64_t)i * 7919u + k) >> 11) /
                           9007199254740992.0;
                v[k] = (float)(norm_w ? 0.8 + 0.4 * u : 0.6 * (u - 0.5));
            }
            if (!strcmp(ti->name, "lm_head") &&
                f->cfg.tied_embeddings) { /* a tied copy equals the embedding */
                float *emb = calloc(ah__engine_layer_floats(&f->e, 0), sizeof(float));
                ah__engine_layer_to_host(&f->e, 0, AH_STATE_PARAM, emb);
                memcpy(v, emb + f->e.layers[0].t[0].offset, ti->size * sizeof(float));
                free(emb);
            }
            ah__engine_tensor_from_host(&f->e, l, AH_STATE_PARAM, i, v);
            free(v);
        }
    }
}

static double engine_loss_and_grads(fixture *f) {
    ah_eng_acts acts[16];
    double loss = 0;
    ah__engine_zero_grads(&f->e);
    assert_int_equal(ah__engine_forward(&f->e, tokens, ah__dptr_null(), targets, ah__dptr_null(), &loss, acts),
                     0);
    assert_int_equal(
        ah__engine_backward(&f->e, tokens, targets, ah__dptr_null(), ah__dptr_null(), 1.0f / (float)N, acts), 0);
    if (f->cfg.tied_embeddings)
        ah__engine_tied_sum_local(&f->e);
    for (int l = 0; l < f->L; l++) {
        ah__engine_layer_to_host(&f->e, l, AH_STATE_PARAM, f->p[l]);
        ah__engine_layer_to_host(&f->e, l, AH_STATE_GRAD, f->g[l]);
    }
    return loss / N;
}

static void fixture_init(fixture *f, const char *json) {
    memset(f, 0, sizeof *f);
    f->cfg = load_config(json);
    f->L = ah_model_num_layers(&f->cfg);
    char err[256];
    if (ah__engine_model_init(&f->e, &f->cfg, T, B, 0, f->L, 1, 0, 5, 1, err, sizeof err) != 0)
        fail_msg("%s", err);
    assert_true(f->L > 0 && f->L < 16);
    f->p = calloc((size_t)f->L + 1, sizeof(float *));
    f->g = calloc((size_t)f->L + 1, sizeof(float *));
    for (int l = 0; l < f->L; l++) {
        f->p[l] = calloc(ah__engine_layer_floats(&f->e, l), sizeof(float));
        f->g[l] = calloc(ah__engine_layer_floats(&f->e, l), sizeof(float));
    }
    for (int i = 0; i < N; i++) {
        tokens[i] = (int)(ah_hash64((uint64_t)i + 11) % (uint64_t)f->cfg.vocab);
        targets[i] = (int)(ah_hash64((uint64_t)i + 99) % (uint64_t)f->cfg.vocab);
    }
    randomise(f);
}

static void fixture_free(fixture *f) {
    for (int l = 0; l < f->L; l++)
        free(f->p[l]), free(f->g[l]);
    free(f->p), free(f->g);
    ah__engine_model_free(&f->e);
}

/* ------------------------------------------------- the float64 reference */

/* Parameters of the reference: the engine's (TP = 1: local layout = full), as doubles. */
typedef struct {
    const ah_model_config *c;
    const fixture *f;
    double **w; /* per layer, the layer buffer as doubles */
} ref_model;

static const double *tensor(const ref_model *r, int l, const char *name, size_t *size) {
    const ah_eng_layer *Ly = &r->f->e.layers[l];
    for (int i = 0; i < Ly->n_tensors; i++)
        if (!strcmp(Ly->t[i].name, name)) {
            if (size)
                *size = Ly->t[i].size;
            return Ly->t[i].size ? r->w[l] + Ly->t[i].offset : NULL;
        }
    if (size)
        *size = 0;
    return NULL;
}

/* out[M] = W[M,K] x[K] (+ b) */
static void lin(double *out, const double *x, const double *W, const double *b, int K, int M) {
    for (int m = 0; m < M; m++) {
        double s = b ? b[m] : 0.0;
        for (int k = 0; k < K; k++)
            s += W[(size_t)m * K + k] * x[k];
        out[m] = s;
    }
}

static double eps_of(const ah_model_config *c) {
    return c->norm_eps > 0 ? c->norm_eps : 1e-5;
}

static void layernorm(double *x, const double *w, const double *b, int C, double eps) {
    double mu = 0, var = 0;
    for (int c = 0; c < C; c++)
        mu += x[c] / C;
    for (int c = 0; c < C; c++)
        var += (x[c] - mu) * (x[c] - mu) / C;
    double rs = 1.0 / sqrt(var + eps);
    for (int c = 0; c < C; c++)
        x[c] = (x[c] - mu) * rs * w[c] + b[c];
}

static void rmsnorm(double *x, const double *w, int C, double eps) {
    double ss = 0;
    for (int c = 0; c < C; c++)
        ss += x[c] * x[c] / C;
    double rs = 1.0 / sqrt(ss + eps);
    for (int c = 0; c < C; c++)
        x[c] = x[c] * rs * w[c];
}

static double gelu_tanh(double x) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

/* Interleaved-pair rotary embedding of one head vector at position t (the engine's layout). */
static void rope(double *v, int D, int t, double theta) {
    for (int i = 0; i < D / 2; i++) {
        double a = t * pow(theta, -2.0 * i / D), x0 = v[2 * i], x1 = v[2 * i + 1];
        v[2 * i] = x0 * cos(a) - x1 * sin(a);
        v[2 * i + 1] = x0 * sin(a) + x1 * cos(a);
    }
}

/* Causal attention of one sequence: q[T][Hq*D], k, v [T][Hkv*D] -> y[T][Hq*D];
 * GPT-Neo's scores are not scaled; a local layer sees the last `window` positions. */
static void attention(double *y, const double *q, const double *k, const double *v, int Hq, int Hkv, int D,
                      int unscaled, int window) {
    double sc = unscaled ? 1.0 : 1.0 / sqrt((double)D), p[T];
    for (int h = 0; h < Hq; h++) {
        int kh = h / (Hq / Hkv);
        for (int i = 0; i < T; i++) {
            double mx = -1e300, sum = 0;
            for (int j = 0; j <= i; j++) {
                p[j] = -1e300;
                if (window > 0 && i - j >= window)
                    continue;
                double s = 0;
                for (int d = 0; d < D; d++)
                    s += q[(size_t)i * Hq * D + h * D + d] * k[(size_t)j * Hkv * D + kh * D + d];
                p[j] = s * sc;
                mx = p[j] > mx ? p[j] : mx;
            }
            for (int j = 0; j <= i; j++)
                sum += p[j] = p[j] > -1e299 ? exp(p[j] - mx) : 0.0;
            for (int d = 0; d < D; d++) {
                double o = 0;
                for (int j = 0; j <= i; j++)
                    o += p[j] / sum * v[(size_t)j * Hkv * D + kh * D + d];
                y[(size_t)i * Hq * D + h * D + d] = o;
            }
        }
    }
}

/* x[T][C] through GPT block l (HF GPT2Block / GPTNeoBlock / OPTDecoderLayer). */
static void gpt_block(const ref_model *r, int l, double *x) {
    const ah_model_config *c = r->c;
    int C = c->hidden, F = c->ffn_hidden, H = c->n_heads, D = C / H;
    int window = ah_model_block_is_local(c, l - 1) ? c->attn_window : 0;
    const double *qkv_w = tensor(r, l, "qkv_w", NULL), *qkv_b = tensor(r, l, "qkv_b", NULL);
    double *h = calloc((size_t)T * C, sizeof(double)), *q = calloc((size_t)T * C, sizeof(double)),
           *k = calloc((size_t)T * C, sizeof(double)), *v = calloc((size_t)T * C, sizeof(double)),
           *y = calloc((size_t)T * C, sizeof(double)), *a = calloc((size_t)T * C, sizeof(double)),
           *u = calloc((size_t)F, sizeof(double));
    /* attention */
    memcpy(h, x, sizeof(double) * T * C);
    for (int t = 0; t < T && !c->post_norm; t++)
        layernorm(h + t * C, tensor(r, l, "ln1_w", NULL), tensor(r, l, "ln1_b", NULL), C, eps_of(c));
    for (int t = 0; t < T; t++) {
        lin(q + t * C, h + t * C, qkv_w, qkv_b, C, C);
        lin(k + t * C, h + t * C, qkv_w + (size_t)C * C, qkv_b ? qkv_b + C : NULL, C, C);
        lin(v + t * C, h + t * C, qkv_w + (size_t)2 * C * C, qkv_b ? qkv_b + 2 * C : NULL, C, C);
    }
    attention(y, q, k, v, H, H, D, c->unscaled_attention, window);
    for (int t = 0; t < T; t++) {
        lin(a + t * C, y + t * C, tensor(r, l, "proj_w", NULL), tensor(r, l, "proj_b", NULL), C, C);
        for (int i = 0; i < C; i++)
            x[t * C + i] += a[t * C + i];
        if (c->post_norm)
            layernorm(x + t * C, tensor(r, l, "ln1_w", NULL), tensor(r, l, "ln1_b", NULL), C, eps_of(c));
    }
    /* MLP */
    for (int t = 0; t < T; t++) {
        double *ht = h + t * C;
        memcpy(ht, x + t * C, sizeof(double) * C);
        if (!c->post_norm)
            layernorm(ht, tensor(r, l, "ln2_w", NULL), tensor(r, l, "ln2_b", NULL), C, eps_of(c));
        lin(u, ht, tensor(r, l, "fc_w", NULL), tensor(r, l, "fc_b", NULL), C, F);
        for (int i = 0; i < F; i++)
            u[i] = c->act == AH_ACT_RELU ? (u[i] > 0 ? u[i] : 0.0) : gelu_tanh(u[i]);
        lin(a + t * C, u, tensor(r, l, "fcproj_w", NULL), tensor(r, l, "fcproj_b", NULL), F, C);
        for (int i = 0; i < C; i++)
            x[t * C + i] += a[t * C + i];
        if (c->post_norm)
            layernorm(x + t * C, tensor(r, l, "ln2_w", NULL), tensor(r, l, "ln2_b", NULL), C, eps_of(c));
    }
    free(h), free(q), free(k), free(v), free(y), free(a), free(u);
}

/* x[T][C] through LLaMA block l (HF LlamaDecoderLayer / Qwen2DecoderLayer). */
static void llama_block(const ref_model *r, int l, double *x) {
    const ah_model_config *c = r->c;
    int C = c->hidden, F = c->ffn_hidden, H = c->n_heads, Hkv = c->n_kv_heads, D = C / H;
    double theta = c->rope_theta > 0 ? c->rope_theta : 10000.0;
    double *h = calloc((size_t)T * C, sizeof(double)), *q = calloc((size_t)T * C, sizeof(double)),
           *k = calloc((size_t)T * C, sizeof(double)), *v = calloc((size_t)T * C, sizeof(double)),
           *y = calloc((size_t)T * C, sizeof(double)), *a = calloc((size_t)C, sizeof(double)),
           *gu = calloc((size_t)2 * F, sizeof(double));
    for (int t = 0; t < T; t++) {
        memcpy(h + t * C, x + t * C, sizeof(double) * C);
        rmsnorm(h + t * C, tensor(r, l, "rms1_w", NULL), C, eps_of(c));
        lin(q + t * H * D, h + t * C, tensor(r, l, "q_w", NULL), tensor(r, l, "q_b", NULL), C, H * D);
        lin(k + t * Hkv * D, h + t * C, tensor(r, l, "k_w", NULL), tensor(r, l, "k_b", NULL), C, Hkv * D);
        lin(v + t * Hkv * D, h + t * C, tensor(r, l, "v_w", NULL), tensor(r, l, "v_b", NULL), C, Hkv * D);
        for (int hh = 0; hh < H; hh++)
            rope(q + t * H * D + hh * D, D, t, theta);
        for (int hh = 0; hh < Hkv; hh++)
            rope(k + t * Hkv * D + hh * D, D, t, theta);
    }
    attention(y, q, k, v, H, Hkv, D, 0, 0);
    for (int t = 0; t < T; t++) {
        lin(a, y + t * H * D, tensor(r, l, "o_w", NULL), NULL, H * D, C);
        for (int i = 0; i < C; i++)
            x[t * C + i] += a[i];
        double *ht = h + t * C;
        memcpy(ht, x + t * C, sizeof(double) * C);
        rmsnorm(ht, tensor(r, l, "rms2_w", NULL), C, eps_of(c));
        lin(gu, ht, tensor(r, l, "gate_up_w", NULL), NULL, C, 2 * F);
        for (int i = 0; i < F; i++)
            gu[i] = gu[i] / (1.0 + exp(-gu[i])) * gu[F + i];
        lin(a, gu, tensor(r, l, "down_w", NULL), NULL, F, C);
        for (int i = 0; i < C; i++)
            x[t * C + i] += a[i];
    }
    free(h), free(q), free(k), free(v), free(y), free(a), free(gu);
}

/* Mean token cross-entropy of the batch under the reference model. */
static double ref_loss(const ref_model *r) {
    const ah_model_config *c = r->c;
    int C = c->hidden, V = c->vocab, E = ah_model_embed_width(c), llama = c->arch == AH_ARCH_LLAMA;
    int head = ah_model_num_layers(c) - 1;
    double *x = calloc((size_t)T * C, sizeof(double)), *hE = calloc((size_t)E, sizeof(double)),
           *logit = calloc((size_t)V, sizeof(double));
    const double *wte = tensor(r, 0, "wte", NULL), *wpe = tensor(r, 0, "wpe", NULL),
                 *pin = tensor(r, 0, "proj_in", NULL), *pout = tensor(r, head, "proj_out", NULL),
                 *lm = tensor(r, head, "lm_head", NULL);
    double total = 0;
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            const double *emb = wte + (size_t)tokens[b * T + t] * E;
            if (pin)
                lin(x + t * C, emb, pin, NULL, E, C);
            else
                memcpy(x + t * C, emb, sizeof(double) * C);
            for (int i = 0; i < C && !llama; i++)
                x[t * C + i] += wpe[(size_t)(t + c->pos_offset) * C + i];
        }
        for (int l = 1; l < head; l++)
            (llama ? llama_block : gpt_block)(r, l, x);
        for (int t = 0; t < T; t++) {
            double *xt = x + t * C;
            if (llama)
                rmsnorm(xt, tensor(r, head, "norm_w", NULL), C, eps_of(c));
            else if (!c->post_norm)
                layernorm(xt, tensor(r, head, "norm_w", NULL), tensor(r, head, "norm_b", NULL), C, eps_of(c));
            if (pout)
                lin(hE, xt, pout, NULL, C, E);
            else
                memcpy(hE, xt, sizeof(double) * C);
            lin(logit, hE, lm, NULL, E, V);
            double mx = -1e300, s = 0;
            for (int i = 0; i < V; i++)
                mx = logit[i] > mx ? logit[i] : mx;
            for (int i = 0; i < V; i++)
                s += exp(logit[i] - mx);
            total += log(s) + mx - logit[targets[b * T + t]];
        }
    }
    free(x), free(hE), free(logit);
    return total / N;
}

/* ------------------------------------------------------------ the checks */

/* The engine's loss equals the reference's (1e-5 relative), and its gradient
 * of a few elements of every tensor equals the reference's central finite
 * differences (a tied matrix: both copies moved together). */
static void check_family(const char *json, const char *expect_tensor) {
    fixture f;
    fixture_init(&f, json);
    double loss = engine_loss_and_grads(&f);
    assert_true(f.L > 0 && f.L < 16);
    ref_model r = {&f.cfg, &f, calloc((size_t)f.L + 1, sizeof(double *))};
    for (int l = 0; l < f.L; l++) {
        size_t n = ah__engine_layer_floats(&f.e, l);
        r.w[l] = calloc(n, sizeof(double));
        for (size_t i = 0; i < n; i++)
            r.w[l][i] = f.p[l][i];
    }
    if (expect_tensor != NULL) {
        int found = 0;
        for (int l = 0; l < f.L; l++) {
            size_t sz = 0;
            found |= tensor(&r, l, expect_tensor, &sz) != NULL && sz > 0;
        }
        assert_true(found);
    }
    double want = ref_loss(&r);
    if (fabs(loss - want) > 1e-5 * fabs(want))
        fail_msg("%s: engine loss %.9f, reference %.9f", f.cfg.name, loss, want);
    int head = f.L - 1, checked = 0;
    for (int l = 0; l < f.L; l++) {
        const ah_eng_layer *Ly = &f.e.layers[l];
        for (int i = 0; i < Ly->n_tensors; i++) {
            const ah_tensor_info *ti = &Ly->t[i];
            int tied =
                f.cfg.tied_embeddings && ((l == 0 && i == 0) || (l == head && !strcmp(ti->name, "lm_head")));
            for (int s = 0; s < 3 && ti->size > 0; s++) {
                size_t k = ti->offset + (size_t)(ah_hash64((uint64_t)(l * 64 + i * 3 + s)) % ti->size);
                if (!strcmp(ti->name, "wte")) /* a row that is looked up */
                    k = ti->offset + (size_t)tokens[s] * ti->lcols + (size_t)s % ti->lcols;
                if (!strcmp(ti->name, "wpe")) /* a row of a position that is used */
                    k = ti->offset + (size_t)(f.cfg.pos_offset + s) * ti->lcols + (size_t)s;
                /* the other copy of a tied matrix: the head's lm_head (tensor 2) or the embedding's wte */
                size_t other = l == 0 ? f.e.layers[head].t[2].offset : f.e.layers[0].t[0].offset;
                double *tw = tied ? &r.w[l == 0 ? head : 0][other + (k - ti->offset)] : NULL;
                double w0 = r.w[l][k], h = 1e-5;
                r.w[l][k] = w0 + h;
                if (tw)
                    *tw = w0 + h;
                double up = ref_loss(&r);
                r.w[l][k] = w0 - h;
                if (tw)
                    *tw = w0 - h;
                double dn = ref_loss(&r);
                r.w[l][k] = w0;
                if (tw)
                    *tw = w0;
                double fd = (up - dn) / (2 * h), got = f.g[l][k];
                if (fabs(got - fd) > 2e-3 * fabs(fd) + 2e-6)
                    fail_msg("%s: layer %d %s[%zu]: engine gradient %.8g, finite differences %.8g",
                             f.cfg.name, l, ti->name, k - ti->offset, got, fd);
                checked++;
            }
        }
    }
    assert_true(checked > 20);
    for (int l = 0; l < f.L; l++)
        free(r.w[l]);
    free(r.w);
    fixture_free(&f);
}

static void test_gpt2(void **state) {
    (void)state;
    check_family("{\"model_type\": \"gpt2\", \"n_embd\": 16, \"n_head\": 2, \"n_layer\": 2, \"n_inner\": 32,"
                 "\"n_positions\": 16, \"vocab_size\": 50, \"tie_word_embeddings\": false}",
                 "qkv_b");
}

static void test_llama(void **state) {
    (void)state;
    check_family("{\"model_type\": \"llama\", \"hidden_size\": 16, \"num_attention_heads\": 4,"
                 "\"num_key_value_heads\": 2, \"num_hidden_layers\": 2, \"intermediate_size\": 24,"
                 "\"vocab_size\": 50}",
                 NULL);
}

/* Qwen2: q/k/v with biases (o_proj and the MLP without), tied embeddings. */
static void test_qwen2(void **state) {
    (void)state;
    check_family("{\"model_type\": \"qwen2\", \"hidden_size\": 16, \"num_attention_heads\": 4,"
                 "\"num_key_value_heads\": 2, \"num_hidden_layers\": 2, \"intermediate_size\": 24,"
                 "\"vocab_size\": 50, \"tie_word_embeddings\": true, \"rope_theta\": 1000000.0, "
                 "\"rms_norm_eps\": 0.01,"
                 "\"use_sliding_window\": false, \"sliding_window\": 4096}",
                 "k_b");
}

/* GPT-Neo: no q/k/v biases, unscaled scores, and a local layer whose window
 * (3) is shorter than the sequence (8); the output projection keeps its bias. */
static void test_gpt_neo(void **state) {
    (void)state;
    check_family("{\"model_type\": \"gpt_neo\", \"hidden_size\": 16, \"num_heads\": 2, \"num_layers\": 2,"
                 "\"intermediate_size\": 32, \"max_position_embeddings\": 16, \"vocab_size\": 50,"
                 "\"attention_types\": [[[\"global\", \"local\"], 1]], \"window_size\": 3,"
                 "\"activation_function\": \"gelu_new\", \"layer_norm_epsilon\": 0.01}",
                 "proj_b");
}

/* OPT-350m's shape: 8-wide embeddings (word_embed_proj_dim) with project_in/out
 * around a 16-wide model, 2 position rows before position 0, post-LN blocks
 * without a final norm, ReLU, the LM head tied to the [V, 8] embedding. */
static void test_opt_projection_post_ln(void **state) {
    (void)state;
    check_family("{\"model_type\": \"opt\", \"hidden_size\": 16, \"num_attention_heads\": 2,"
                 "\"num_hidden_layers\": 2, \"ffn_dim\": 32, \"max_position_embeddings\": 16,"
                 "\"vocab_size\": 50, \"word_embed_proj_dim\": 8, \"do_layer_norm_before\": false,"
                 "\"activation_function\": \"relu\"}",
                 "proj_out");
}

/* The other OPT sizes: pre-LN with a final norm, embeddings as wide as the model. */
static void test_opt_pre_ln(void **state) {
    (void)state;
    check_family("{\"model_type\": \"opt\", \"hidden_size\": 16, \"num_attention_heads\": 2,"
                 "\"num_hidden_layers\": 2, \"ffn_dim\": 32, \"max_position_embeddings\": 16,"
                 "\"vocab_size\": 50, \"word_embed_proj_dim\": 16, \"do_layer_norm_before\": true}",
                 "norm_b");
}

/* What the engine does not compute is refused with the config field named. */
static void test_refused_by_field(void **state) {
    (void)state;
    ah_model_config m =
        load_config("{\"model_type\": \"gpt2\", \"n_embd\": 16, \"n_head\": 2, \"n_layer\": 1,"
                    "\"n_positions\": 16, \"vocab_size\": 50, \"activation_function\": \"gelu\"}");
    ah_engine_model e;
    char err[256];
    assert_int_equal(ah__engine_model_init(&e, &m, T, B, 0, 3, 1, 0, 1, 1, err, sizeof err), -1);
    assert_non_null(strstr(err, "activation_function 'gelu'"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt2),
        cmocka_unit_test(test_llama),
        cmocka_unit_test(test_qwen2),
        cmocka_unit_test(test_gpt_neo),
        cmocka_unit_test(test_opt_projection_post_ln),
        cmocka_unit_test(test_opt_pre_ln),
        cmocka_unit_test(test_refused_by_field),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
