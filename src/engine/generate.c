/* Sampling tokens from a model (engine/generate.h). */
#include "engine/generate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/data.h"
#include "engine/kernels.h"
#include "engine/model.h"
#include "util/errors.h"

/* the final norm and LM head, on the host */
typedef struct {
    float *norm_w, *norm_b, *lm_head;
} head_params;

static const float *find(const ah_ckpt_loaded *t, int n, const char *name, size_t want) {
    for (int i = 0; i < n; i++)
        if (!strcmp(t[i].name, name) && t[i].n == want)
            return t[i].data;
    return NULL;
}

static float *copy_of(const float *src, size_t n) {
    float *d = ah_xcalloc(n + 1, sizeof(float));
    if (src)
        memcpy(d, src, n * sizeof(float));
    return d;
}

/* the blocks into e (layers [0, L-1)) and the head into hp; 0 or -1 with err */
static int load(const ah_weights_src *src, ah_engine_model *e, head_params *hp, char *err, size_t errlen) {
    const ah_model_config *c = &src->cfg;
    int L = ah_model_num_layers(c), rc = 0;
    for (int l = 0; l < L && rc == 0; l++) {
        ah_ckpt_loaded *t = NULL;
        int nt = 0;
        if (src->layer(src->ctx, l, &t, &nt, err, errlen) != 0)
            return -1;
        ah_eng_layer info;
        ah__engine_layer_describe(c, l, 1, 0, &info);
        for (int q = 0; q < info.n_tensors && rc == 0; q++) {
            char name[128];
            snprintf(name, sizeof name, "param.%s", info.t[q].name);
            const float *d = find(t, nt, name, info.t[q].size);
            if (!d && info.t[q].size > 0) {
                snprintf(err, errlen, "layer %d: no %s of %zu values", l, name, info.t[q].size);
                rc = -1;
            } else if (l < L - 1 && info.t[q].size > 0) {
                ah__engine_tensor_from_host(e, l, AH_STATE_PARAM, q, d);
            } else if (l == L - 1) {
                float **dst = !strcmp(info.t[q].name, "norm_w")   ? &hp->norm_w
                              : !strcmp(info.t[q].name, "norm_b") ? &hp->norm_b
                                                                  : &hp->lm_head;
                *dst = copy_of(d, info.t[q].size);
            }
        }
        ah__engine_layer_info_free(&info);
        ah_ckpt_free(t, nt);
    }
    return rc;
}

/* logits of the hidden state h [C] (final norm, LM head) */
static void head_logits(const ah_model_config *c, const head_params *hp, const float *h, float *logits) {
    int C = c->hidden;
    float eps = c->norm_eps > 0 ? (float)c->norm_eps : 1e-5f, m, r;
    float *nf = ah_xcalloc((size_t)C, sizeof(float));
    if (c->arch == AH_ARCH_LLAMA)
        ah__rmsnorm_fwd_eps(nf, &r, h, hp->norm_w, 1, C, eps);
    else
        ah__layernorm_fwd_eps(nf, &m, &r, h, hp->norm_w, hp->norm_b, 1, C, eps);
    for (int v = 0; v < c->vocab; v++) {
        double s = 0;
        const float *w = hp->lm_head + (size_t)v * C;
        for (int k = 0; k < C; k++)
            s += (double)w[k] * nf[k];
        logits[v] = (float)s;
    }
    free(nf);
}

static const float *sort_logits;
static int by_logit_desc(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    float x = sort_logits[i], y = sort_logits[j];
    return x > y ? -1 : x < y ? 1 : i - j;
}

/* the next token: greedy, or sampled from the top-k softmax at temperature */
static int pick(const float *logits, int V, const ah_gen_config *g, int pos) {
    if (!(g->temperature > 0)) {
        int best = 0;
        for (int v = 1; v < V; v++)
            if (logits[v] > logits[best])
                best = v;
        return best;
    }
    int *idx = ah_xcalloc((size_t)V, sizeof(int)), k = g->top_k > 0 && g->top_k < V ? g->top_k : V;
    for (int v = 0; v < V; v++)
        idx[v] = v;
    sort_logits = logits;
    qsort(idx, (size_t)V, sizeof(int), by_logit_desc);
    double *p = ah_xcalloc((size_t)k, sizeof(double)), sum = 0;
    for (int i = 0; i < k; i++)
        sum += p[i] = exp(((double)logits[idx[i]] - logits[idx[0]]) / g->temperature);
    uint64_t hsh = ah_hash64(g->seed ^ ah_hash64((uint64_t)pos + 0x9e3779b97f4a7c15ull));
    double u = (double)(hsh >> 11) / 9007199254740992.0 * sum, acc = 0;
    int tok = idx[k - 1];
    for (int i = 0; i < k; i++)
        if ((acc += p[i]) > u) {
            tok = idx[i];
            break;
        }
    free(p);
    free(idx);
    return tok;
}

/* ---- the KV cache: one prefill of the prompt, then one position per token ---- */

/* Every layer's parameters on the host in the full (TP=1) layout of
 * engine/model.h, and per block the keys and values of every position so far
 * ([T, Hkv * D], RoPE applied to the keys). */
typedef struct {
    const ah_model_config *c;
    int L, T, kvw; /* layers, positions the cache holds, Hkv * D */
    float **w;     /* w[l]: layer l's buffer */
    ah_eng_layer *info;
    float **k, **v; /* k[b], v[b]: block b's cache */
} kv_model;

/* tensor `name` of layer l (NULL if the layer has none of that size) */
static const float *kv_tensor(const kv_model *m, int l, const char *name) {
    const ah_eng_layer *I = &m->info[l];
    for (int q = 0; q < I->n_tensors; q++)
        if (!strcmp(I->t[q].name, name))
            return I->t[q].size > 0 ? m->w[l] + I->t[q].offset : NULL;
    return NULL;
}

static void kv_free(kv_model *m) {
    for (int l = 0; l < m->L; l++) {
        free(m->w[l]);
        ah__engine_layer_info_free(&m->info[l]);
    }
    for (int b = 0; b < m->L - 2; b++) {
        free(m->k[b]);
        free(m->v[b]);
    }
    free(m->w), free(m->info), free(m->k), free(m->v);
}

static int kv_load(const ah_weights_src *src, int T, kv_model *m, char *err, size_t errlen) {
    const ah_model_config *c = &src->cfg;
    int L = ah_model_num_layers(c), rc = 0;
    *m = (kv_model){c,
                    L,
                    T,
                    c->n_kv_heads * (c->hidden / c->n_heads),
                    ah_xcalloc((size_t)L, sizeof(float *)),
                    ah_xcalloc((size_t)L, sizeof(ah_eng_layer)),
                    ah_xcalloc((size_t)L, sizeof(float *)),
                    ah_xcalloc((size_t)L, sizeof(float *))};
    for (int l = 0; l < L && rc == 0; l++) {
        ah__engine_layer_describe(c, l, 1, 0, &m->info[l]);
        m->w[l] = ah_xcalloc(m->info[l].n + 1, sizeof(float));
        ah_ckpt_loaded *t = NULL;
        int nt = 0;
        if (src->layer(src->ctx, l, &t, &nt, err, errlen) != 0)
            return -1;
        for (int q = 0; q < m->info[l].n_tensors && rc == 0; q++) {
            const ah_tensor_info *ti = &m->info[l].t[q];
            char name[128];
            snprintf(name, sizeof name, "param.%s", ti->name);
            const float *d = find(t, nt, name, ti->size);
            if (!d && ti->size > 0) {
                snprintf(err, errlen, "layer %d: no %s of %zu values", l, name, ti->size);
                rc = -1;
            } else if (d) {
                memcpy(m->w[l] + ti->offset, d, ti->size * sizeof(float));
            }
        }
        ah_ckpt_free(t, nt);
    }
    for (int b = 0; b < L - 2; b++) {
        m->k[b] = ah_xcalloc((size_t)T * m->kvw + 1, sizeof(float));
        m->v[b] = ah_xcalloc((size_t)T * m->kvw + 1, sizeof(float));
    }
    return rc;
}

/* RoPE of x[n, H, D] at positions t0, t0 + 1, ...: the rotation of
 * ah__rope_fwd (kernels.c), whose positions start at 0 */
static void rope_at(float *x, int n, int t0, int H, int D, float theta) {
    for (int r = 0; r < n; r++)
        for (int i = 0; i < D / 2; i++) {
            double a = (double)(t0 + r) * pow((double)theta, -2.0 * i / D);
            float cs = (float)cos(a), sn = (float)sin(a);
            for (int h = 0; h < H; h++) {
                float *p = x + ((size_t)r * H + h) * D + 2 * i, x0 = p[0], x1 = p[1];
                p[0] = x0 * cs - x1 * sn;
                p[1] = x0 * sn + x1 * cs;
            }
        }
}

/* y[n, H, D]: causal attention of the queries q[n, H, D] at positions t0.. over
 * the cached keys/values of positions 0..t0 + r (GQA: query head h reads kv head
 * h / (H / Hkv); window > 0: only the last `window` positions) */
static void kv_attend(const kv_model *m, int b, const float *q, int n, int t0, int window, float *y) {
    const ah_model_config *c = m->c;
    int H = c->n_heads, D = c->hidden / H, G = H / c->n_kv_heads;
    float scale = c->unscaled_attention ? 1.0f : 1.0f / sqrtf((float)D);
    float *s = ah_xcalloc((size_t)t0 + n + 1, sizeof(float));
    for (int r = 0; r < n; r++)
        for (int h = 0; h < H; h++) {
            int p = t0 + r, lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
            const float *qh = q + ((size_t)r * H + h) * D;
            size_t kvo = (size_t)(h / G) * D;
            float mx = -INFINITY;
            for (int j = lo; j <= p; j++) {
                const float *kj = m->k[b] + (size_t)j * m->kvw + kvo;
                float d = 0;
                for (int e = 0; e < D; e++)
                    d += qh[e] * kj[e];
                s[j] = d * scale;
                mx = s[j] > mx ? s[j] : mx;
            }
            double sum = 0;
            for (int j = lo; j <= p; j++)
                sum += s[j] = expf(s[j] - mx);
            float *yh = y + ((size_t)r * H + h) * D;
            memset(yh, 0, sizeof(float) * (size_t)D);
            for (int j = lo; j <= p; j++) {
                const float *vj = m->v[b] + (size_t)j * m->kvw + kvo;
                float pj = (float)(s[j] / sum);
                for (int e = 0; e < D; e++)
                    yh[e] += pj * vj[e];
            }
        }
    free(s);
}

/* block b's k, v [n, kvw] into its cache rows t0.. */
static void kv_store(kv_model *m, int b, const float *k, const float *v, int n, int t0) {
    memcpy(m->k[b] + (size_t)t0 * m->kvw, k, sizeof(float) * (size_t)n * m->kvw);
    memcpy(m->v[b] + (size_t)t0 * m->kvw, v, sizeof(float) * (size_t)n * m->kvw);
}

/* x[n, C] through GPT-2 block b (pre-LN; q/k/v are rows [0,C), [C,2C), [2C,3C) of qkv_w) */
static void kv_gpt_block(kv_model *m, int b, float *x, int n, int t0) {
    const ah_model_config *c = m->c;
    int C = c->hidden, F = c->ffn_hidden, l = b + 1;
    float eps = c->norm_eps > 0 ? (float)c->norm_eps : 1e-5f;
    float *h = ah_xcalloc((size_t)n * C, sizeof(float)), *q = ah_xcalloc((size_t)n * C, sizeof(float)),
          *k = ah_xcalloc((size_t)n * C, sizeof(float)), *v = ah_xcalloc((size_t)n * C, sizeof(float)),
          *y = ah_xcalloc((size_t)n * C, sizeof(float)), *f = ah_xcalloc((size_t)n * F, sizeof(float)),
          *g = ah_xcalloc((size_t)n * F, sizeof(float)), *mean = ah_xcalloc((size_t)n, sizeof(float)),
          *rstd = ah_xcalloc((size_t)n, sizeof(float));
    const float *w = kv_tensor(m, l, "qkv_w"), *bq = kv_tensor(m, l, "qkv_b");
    ah__layernorm_fwd_eps(h, mean, rstd, x, kv_tensor(m, l, "ln1_w"), kv_tensor(m, l, "ln1_b"), n, C, eps);
    ah__linear_fwd(q, h, w, bq, n, C, C);
    ah__linear_fwd(k, h, w + (size_t)C * C, bq ? bq + C : NULL, n, C, C);
    ah__linear_fwd(v, h, w + (size_t)2 * C * C, bq ? bq + 2 * C : NULL, n, C, C);
    kv_store(m, b, k, v, n, t0);
    kv_attend(m, b, q, n, t0, ah_model_block_is_local(c, b) ? c->attn_window : 0, y);
    ah__linear_fwd(h, y, kv_tensor(m, l, "proj_w"), NULL, n, C, C);
    ah__add_bias_rows(h, kv_tensor(m, l, "proj_b"), n, C);
    ah__add_inplace(x, h, (size_t)n * C);
    ah__layernorm_fwd_eps(h, mean, rstd, x, kv_tensor(m, l, "ln2_w"), kv_tensor(m, l, "ln2_b"), n, C, eps);
    ah__linear_fwd(f, h, kv_tensor(m, l, "fc_w"), kv_tensor(m, l, "fc_b"), n, C, F);
    if (c->act == AH_ACT_RELU)
        ah__relu_fwd(g, f, (size_t)n * F);
    else
        ah__gelu_fwd(g, f, (size_t)n * F);
    ah__linear_fwd(h, g, kv_tensor(m, l, "fcproj_w"), NULL, n, F, C);
    ah__add_bias_rows(h, kv_tensor(m, l, "fcproj_b"), n, C);
    ah__add_inplace(x, h, (size_t)n * C);
    free(h), free(q), free(k), free(v), free(y), free(f), free(g), free(mean), free(rstd);
}

/* x[n, C] through LLaMA block b (RMSNorm, RoPE at positions t0.., GQA, SwiGLU; Qwen2's q/k/v biases) */
static void kv_llama_block(kv_model *m, int b, float *x, int n, int t0) {
    const ah_model_config *c = m->c;
    int C = c->hidden, F = c->ffn_hidden, l = b + 1, H = c->n_heads, D = C / H, Hkv = c->n_kv_heads;
    float eps = c->norm_eps > 0 ? (float)c->norm_eps : 1e-5f,
          theta = c->rope_theta > 0 ? (float)c->rope_theta : 10000.0f;
    size_t nq = (size_t)n * H * D, nkv = (size_t)n * m->kvw;
    float *h = ah_xcalloc((size_t)n * C, sizeof(float)), *q = ah_xcalloc(nq, sizeof(float)),
          *k = ah_xcalloc(nkv, sizeof(float)), *v = ah_xcalloc(nkv, sizeof(float)),
          *y = ah_xcalloc(nq, sizeof(float)), *gu = ah_xcalloc((size_t)2 * n * F, sizeof(float)),
          *sw = ah_xcalloc((size_t)n * F, sizeof(float)), *rstd = ah_xcalloc((size_t)n, sizeof(float));
    ah__rmsnorm_fwd_eps(h, rstd, x, kv_tensor(m, l, "rms1_w"), n, C, eps);
    ah__linear_fwd(q, h, kv_tensor(m, l, "q_w"), kv_tensor(m, l, "q_b"), n, C, H * D);
    ah__linear_fwd(k, h, kv_tensor(m, l, "k_w"), kv_tensor(m, l, "k_b"), n, C, m->kvw);
    ah__linear_fwd(v, h, kv_tensor(m, l, "v_w"), kv_tensor(m, l, "v_b"), n, C, m->kvw);
    rope_at(q, n, t0, H, D, theta);
    rope_at(k, n, t0, Hkv, D, theta);
    kv_store(m, b, k, v, n, t0);
    kv_attend(m, b, q, n, t0, ah_model_block_is_local(c, b) ? c->attn_window : 0, y); /* Mistral: a window */
    ah__linear_fwd(h, y, kv_tensor(m, l, "o_w"), NULL, n, H * D, C);
    ah__add_inplace(x, h, (size_t)n * C);
    ah__rmsnorm_fwd_eps(h, rstd, x, kv_tensor(m, l, "rms2_w"), n, C, eps);
    ah__linear_fwd(gu, h, kv_tensor(m, l, "gate_up_w"), NULL, n, C, 2 * F);
    ah__swiglu_fwd(sw, gu, n, F);
    ah__linear_fwd(h, sw, kv_tensor(m, l, "down_w"), NULL, n, F, C);
    ah__add_inplace(x, h, (size_t)n * C);
    free(h), free(q), free(k), free(v), free(y), free(gu), free(sw), free(rstd);
}

/* The hidden state last[C] of position t0 + n - 1 after the n tokens tok at
 * positions t0.. went through every block (their keys/values cached). */
static void kv_forward(kv_model *m, const int *tok, int n, int t0, float *last) {
    const ah_model_config *c = m->c;
    int C = c->hidden;
    float *x = ah_xcalloc((size_t)n * C, sizeof(float));
    const float *wte = kv_tensor(m, 0, "wte"), *wpe = kv_tensor(m, 0, "wpe");
    for (int r = 0; r < n; r++)
        for (int i = 0; i < C; i++)
            x[(size_t)r * C + i] = wte[(size_t)tok[r] * C + i] + (wpe ? wpe[(size_t)(t0 + r) * C + i] : 0.0f);
    for (int b = 0; b < m->L - 2; b++)
        if (c->arch == AH_ARCH_LLAMA)
            kv_llama_block(m, b, x, n, t0);
        else
            kv_gpt_block(m, b, x, n, t0);
    memcpy(last, x + (size_t)(n - 1) * C, sizeof(float) * (size_t)C);
    free(x);
}

/* out[n_prompt ..] with the KV cache: the prompt in one prefill, then each new token alone */
static int generate_cached(const ah_weights_src *src, int n_prompt, const ah_gen_config *g, int *out,
                           char *err, size_t errlen) {
    const ah_model_config *c = &src->cfg;
    kv_model m;
    int rc = kv_load(src, n_prompt + g->max_new - 1, &m, err, errlen), H = m.L - 1;
    head_params hp = {(float *)kv_tensor(&m, H, "norm_w"), (float *)kv_tensor(&m, H, "norm_b"),
                      (float *)kv_tensor(&m, H, "lm_head")};
    float *hid = ah_xcalloc((size_t)c->hidden, sizeof(float)),
          *logits = ah_xcalloc((size_t)c->vocab, sizeof(float));
    for (int cur = n_prompt; rc == 0 && cur < n_prompt + g->max_new; cur++) {
        if (cur == n_prompt)
            kv_forward(&m, out, n_prompt, 0, hid);
        else
            kv_forward(&m, out + cur - 1, 1, cur - 1, hid);
        head_logits(c, &hp, hid, logits);
        out[cur] = pick(logits, c->vocab, g, cur);
        if (g->on_token)
            g->on_token(g->on_token_ctx, out[cur]);
    }
    free(hid);
    free(logits);
    kv_free(&m);
    return rc;
}

static int check(const ah_model_config *c, const int *prompt, int n_prompt, const ah_gen_config *g, char *err,
                 size_t errlen) {
    if (ah__hf_supported(c, err, errlen) != 0)
        return -1;
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= c->vocab) {
            snprintf(err, errlen, "--prompt-tokens: token %d (item %d) is not below the vocabulary %d", prompt[i],
                     i + 1, c->vocab);
            return -1;
        }
    int most = c->arch == AH_ARCH_GPT ? c->max_positions : AH_GEN_MAX_POSITIONS;
    if (n_prompt + g->max_new - 1 > most) {
        snprintf(err, errlen, "--prompt-tokens + --max-new-tokens: %d positions, model %s has %d%s",
                 n_prompt + g->max_new - 1, c->name, most, c->arch == AH_ARCH_GPT ? "" : " here (RoPE)");
        return -1;
    }
    return 0;
}

int ah_generate(const ah_weights_src *src, const int *prompt, int n_prompt, const ah_gen_config *g, int *out,
                char *err, size_t errlen) {
    const ah_model_config *c = &src->cfg;
    if (check(c, prompt, n_prompt, g, err, errlen) != 0)
        return -1;
    memcpy(out, prompt, sizeof(int) * (size_t)n_prompt);
    if (g->max_new == 0)
        return 0;
    if (!g->no_cache)
        return generate_cached(src, n_prompt, g, out, err, errlen);
    int T = n_prompt + g->max_new - 1, L = ah_model_num_layers(c), C = c->hidden;
    ah_engine_model e;
    if (ah__engine_model_init(&e, c, T, 1, 0, L - 1, 1, 0, 0, 0, err, errlen) != 0)
        return -1;
    head_params hp = {0};
    int rc = load(src, &e, &hp, err, errlen);
    int *tok = ah_xcalloc((size_t)T, sizeof(int));
    float *hid = ah_xcalloc((size_t)T * C, sizeof(float)), *logits = ah_xcalloc((size_t)c->vocab, sizeof(float));
    ah_eng_acts *acts = ah_xcalloc((size_t)L, sizeof *acts);
    ah_dptr hbuf = ah__be_alloc(e.be, (size_t)T * C);
    /* causal attention: the zeros after position cur - 1 do not change its state */
    for (int cur = n_prompt; rc == 0 && cur < n_prompt + g->max_new; cur++) {
        double loss = 0;
        memcpy(tok, out, sizeof(int) * (size_t)cur);
        ah__engine_forward(&e, tok, ah__dptr_null(), NULL, hbuf, &loss, acts);
        ah__engine_acts_free(&e, acts);
        ah__be_to_host(e.be, hid, hbuf, (size_t)T * C);
        head_logits(c, &hp, hid + (size_t)(cur - 1) * C, logits);
        out[cur] = pick(logits, c->vocab, g, cur);
        if (g->on_token)
            g->on_token(g->on_token_ctx, out[cur]);
    }
    ah__be_free(e.be, hbuf);
    free(acts);
    free(logits);
    free(hid);
    free(tok);
    free(hp.norm_w);
    free(hp.norm_b);
    free(hp.lm_head);
    ah__engine_model_free(&e);
    return rc;
}
