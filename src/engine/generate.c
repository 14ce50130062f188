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
        ah_engine_layer_describe(c, l, 1, 0, &info);
        for (int q = 0; q < info.n_tensors && rc == 0; q++) {
            char name[128];
            snprintf(name, sizeof name, "param.%s", info.t[q].name);
            const float *d = find(t, nt, name, info.t[q].size);
            if (!d && info.t[q].size > 0) {
                snprintf(err, errlen, "layer %d: no %s of %zu values", l, name, info.t[q].size);
                rc = -1;
            } else if (l < L - 1 && info.t[q].size > 0) {
                ah_engine_tensor_from_host(e, l, AH_STATE_PARAM, q, d);
            } else if (l == L - 1) {
                float **dst = !strcmp(info.t[q].name, "norm_w")   ? &hp->norm_w
                              : !strcmp(info.t[q].name, "norm_b") ? &hp->norm_b
                                                                  : &hp->lm_head;
                *dst = copy_of(d, info.t[q].size);
            }
        }
        ah_engine_layer_info_free(&info);
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
        ah_rmsnorm_fwd_eps(nf, &r, h, hp->norm_w, 1, C, eps);
    else
        ah_layernorm_fwd_eps(nf, &m, &r, h, hp->norm_w, hp->norm_b, 1, C, eps);
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

static int check(const ah_model_config *c, const int *prompt, int n_prompt, const ah_gen_config *g, char *err,
                 size_t errlen) {
    if (ah_hf_supported(c, err, errlen) != 0)
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
    int T = n_prompt + g->max_new - 1, L = ah_model_num_layers(c), C = c->hidden;
    ah_engine_model e;
    if (ah_engine_model_init(&e, c, T, 1, 0, L - 1, 1, 0, 0, 0, err, errlen) != 0)
        return -1;
    head_params hp = {0};
    int rc = load(src, &e, &hp, err, errlen);
    int *tok = ah_xcalloc((size_t)T, sizeof(int));
    float *hid = ah_xcalloc((size_t)T * C, sizeof(float)), *logits = ah_xcalloc((size_t)c->vocab, sizeof(float));
    ah_eng_acts *acts = ah_xcalloc((size_t)L, sizeof *acts);
    ah_dptr hbuf = ah_be_alloc(e.be, (size_t)T * C);
    /* causal attention: the zeros after position cur - 1 do not change its state */
    for (int cur = n_prompt; rc == 0 && cur < n_prompt + g->max_new; cur++) {
        double loss = 0;
        memcpy(tok, out, sizeof(int) * (size_t)cur);
        ah_engine_forward(&e, tok, ah_dptr_null(), NULL, hbuf, &loss, acts);
        ah_engine_acts_free(&e, acts);
        ah_be_to_host(e.be, hid, hbuf, (size_t)T * C);
        head_logits(c, &hp, hid + (size_t)(cur - 1) * C, logits);
        out[cur] = pick(logits, c->vocab, g, cur);
    }
    ah_be_free(e.be, hbuf);
    free(acts);
    free(logits);
    free(hid);
    free(tok);
    free(hp.norm_w);
    free(hp.norm_b);
    free(hp.lm_head);
    ah_engine_model_free(&e);
    return rc;
}
