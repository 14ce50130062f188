/* Hugging Face model directories in and out (engine/hf_weights.h). */
#include "engine/hf_weights.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "engine/hf_map.h"
#include "engine/model.h"
#include "util/atomic_file.h"
#include "util/errors.h"
#include "util/json_file.h"

int ah__hf_supported(const ah_model_config *c, char *err, size_t errlen) {
    const char *why = NULL;
    if (c->arch == AH_ARCH_BERT)
        why = "BERT is not a decoder-only model";
    else if (c->embed_dim || c->pos_offset || c->post_norm)
        why = "OPT's layout (embedding projection, position offset, post-LN) is not mapped";
    else if (c->no_qkv_bias || c->unscaled_attention || (c->attn_window && c->arch != AH_ARCH_LLAMA))
        why = "GPT-Neo's layout is not mapped";
    else if (c->arch == AH_ARCH_GPT && c->act != AH_ACT_GELU_TANH && c->act != AH_ACT_RELU)
        why = "a GPT-2 model computes gelu_new or relu";
    else if (c->arch == AH_ARCH_GPT && c->max_positions <= 0)
        why = "a GPT-2 model has learned positions (n_positions)";
    if (!why)
        return 0;
    snprintf(err, errlen, "model %s: %s (Hugging Face weights: GPT-2 and LLaMA-family models)", c->name, why);
    return -1;
}

void ah_hf_close(ah_hf_dir *h) {
    for (int i = 0; i < h->n_files; i++)
        ah__st_close(&h->files[i]);
    free(h->files);
    memset(h, 0, sizeof *h);
}

/* the file of a tensor name (GPT-2: with or without the prefix), or NULL */
static const ah_st_tensor *find_tensor(const ah_hf_dir *h, const char *name, const ah_st_file **file) {
    size_t pl = strlen(AH_HF_GPT2_PREFIX);
    for (int pass = 0; pass < 2; pass++) {
        const char *n = name;
        if (pass == 1 && strncmp(name, AH_HF_GPT2_PREFIX, pl))
            break;
        if (pass == 1)
            n = name + pl;
        for (int i = 0; i < h->n_files; i++) {
            const ah_st_tensor *t = ah__st_find(&h->files[i], n);
            if (t) {
                *file = &h->files[i];
                return t;
            }
        }
    }
    return NULL;
}

static int open_file(ah_hf_dir *h, const char *name, char *err, size_t errlen) {
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", h->dir, name);
    h->files = ah_xrealloc(h->files, sizeof *h->files * (size_t)(h->n_files + 1));
    if (ah__st_open(path, &h->files[h->n_files], err, errlen) != 0)
        return -1;
    h->n_files++;
    return 0;
}

/* the index's weight_map: every file it names opened once, every tensor it
 * lists found in its file. 0 or -1 with err. */
static int open_index(ah_hf_dir *h, const char *ipath, char *err, size_t errlen) {
    cJSON *o = ah_json_parse_file(ipath, 64u << 20, 1, err, errlen);
    if (!o)
        return -1;
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(o, "weight_map"), *it;
    int rc = cJSON_IsObject(wm) && cJSON_GetArraySize(wm) > 0 ? 0 : -1;
    if (rc)
        snprintf(err, errlen, "%s: weight_map: expected an object of tensor names and file names", ipath);
    cJSON_ArrayForEach(it, wm) {
        if (rc)
            break;
        const char *f = cJSON_IsString(it) ? it->valuestring : NULL;
        if (!f || !f[0] || f[0] == '.' || strchr(f, '/') || strlen(f) > 255) {
            snprintf(err, errlen, "%s: weight_map '%.100s': expected a plain file name in %s", ipath, it->string,
                     h->dir);
            rc = -1;
            break;
        }
        int k = 0;
        while (k < h->n_files && strcmp(strrchr(h->files[k].path, '/') + 1, f))
            k++;
        if (k == h->n_files && open_file(h, f, err, errlen) != 0)
            rc = -1;
        else if (!ah__st_find(&h->files[k], it->string)) {
            snprintf(err, errlen, "%s: weight_map '%.100s': not in %s", ipath, it->string, f);
            rc = -1;
        }
    }
    cJSON_Delete(o);
    return rc;
}

static int by_str(const void *a, const void *b) {
    return strcmp(a, b);
}

/* A tensor HF files carry that is no weight of the engine: GPT-2's attention mask buffers (attn.bias,
 * attn.masked_bias), LLaMA's RoPE frequencies (rotary_emb.inv_freq) of older files, each of a block of the
 * model; a tied head's lm_head.weight (HF ties it to the embedding on load, so does the engine). */
static int ignored(const ah_model_config *c, const char *name) {
    size_t pl = strlen(AH_HF_GPT2_PREFIX);
    int b = -1, end = 0;
    if (!strcmp(name, "lm_head.weight"))
        return c->tied_embeddings;
    if (c->arch == AH_ARCH_LLAMA) {
        sscanf(name, "model.layers.%d.self_attn.rotary_emb.inv_freq%n", &b, &end);
        return end > 0 && !name[end] && b >= 0 && b < c->n_layers;
    }
    if (!strncmp(name, AH_HF_GPT2_PREFIX, pl))
        name += pl;
    sscanf(name, "h.%d.attn.%n", &b, &end);
    if (end == 0 || b < 0 || b >= c->n_layers || name[2] < '0' || name[2] > '9')
        return 0;
    return !strcmp(name + end, "bias") || !strcmp(name + end, "masked_bias");
}

/* Every tensor of every file is one the model of config.json reads, or ignored(): a file of more
 * blocks than config.json's n_layer (or of another layout) is an error naming the first extra tensor,
 * not a model of the first blocks. 0 or -1 with err. */
static int check_unexpected(const ah_hf_dir *h, char *err, size_t errlen) {
    const ah_model_config *c = &h->cfg;
    int L = ah_model_num_layers(c), n = 0, cap = 64, rc = 0;
    char(*want)[AH_ST_MAX_NAME] = ah_xcalloc((size_t)cap, sizeof *want);
    for (int l = 0; l < L; l++) {
        ah_eng_layer E;
        ah__engine_layer_describe(c, l, 1, 0, &E);
        for (int q = 0; q < E.n_tensors; q++) {
            ah_hf_map m;
            ah__hf_map_tensor(c, l, &E.t[q], 0, &m);
            for (int i = 0; i < m.n; i++) {
                if (n == cap)
                    want = ah_xrealloc(want, sizeof *want * (size_t)(cap *= 2));
                memcpy(want[n++], m.p[i].name, AH_ST_MAX_NAME);
            }
        }
        ah__engine_layer_info_free(&E);
    }
    qsort(want, (size_t)n, sizeof *want, by_str);
    for (int i = 0; i < h->n_files && rc == 0; i++)
        for (int k = 0; k < h->files[i].n && rc == 0; k++) {
            const char *name = h->files[i].t[k].name;
            char full[AH_ST_MAX_NAME + 16];
            snprintf(full, sizeof full, "%s%s", c->arch == AH_ARCH_LLAMA ? "" : AH_HF_GPT2_PREFIX, name);
            if (bsearch(name, want, (size_t)n, sizeof *want, by_str) ||
                (strlen(full) < AH_ST_MAX_NAME && bsearch(full, want, (size_t)n, sizeof *want, by_str)) ||
                ignored(c, name))
                continue;
            snprintf(err, errlen, "%s: tensor '%s': not a weight of the model of config.json (%s, %d blocks%s)",
                     h->files[i].path, name, ah_arch_name(c->arch), c->n_layers,
                     !strcmp(name, "lm_head.weight") ? ", tie_word_embeddings false?" : "");
            rc = -1;
        }
    free(want);
    return rc;
}

int ah_hf_open(const char *dir, ah_hf_dir *h, char *err, size_t errlen) {
    memset(h, 0, sizeof *h);
    struct stat sb;
    if (strlen(dir) >= sizeof h->dir - 64 || stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        snprintf(err, errlen, "%s: not a directory (a Hugging Face model directory: config.json + "
                              "model.safetensors)", dir);
        return -1;
    }
    snprintf(h->dir, sizeof h->dir, "%s", dir);
    char path[2048];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (ah_model_load_json(path, &h->cfg, err, errlen) != 0 || ah__hf_supported(&h->cfg, err, errlen) != 0)
        return -1;
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    int rc = stat(path, &sb) == 0 ? open_index(h, path, err, errlen) : open_file(h, "model.safetensors", err, errlen);
    if (rc == 0)
        rc = check_unexpected(h, err, errlen);
    if (rc != 0)
        ah_hf_close(h);
    return rc;
}

/* one HF tensor of the map into the engine tensor `full`; 0 or -1 with err */
static int read_part(const ah_hf_dir *h, const ah_hf_part *p, int gcols, float *full, char *err, size_t errlen) {
    const ah_st_file *f = NULL;
    const ah_st_tensor *t = find_tensor(h, p->name, &f);
    char want[64], got[64];
    if (!t) {
        snprintf(err, errlen, "%s: no tensor '%s' in its safetensors file(s)", h->dir, p->name);
        return -1;
    }
    ah__st_shape_text(p->shape, p->ndim, want, sizeof want);
    ah__st_shape_text(t->shape, t->ndim, got, sizeof got);
    if (strcmp(want, got)) {
        snprintf(err, errlen, "%s: tensor '%s': shape %s, the model needs %s", f->path, t->name, got, want);
        return -1;
    }
    float *tmp = ah_xcalloc(t->n + 1, sizeof(float));
    size_t bad = ah__st_read_f32(f, t, tmp);
    if (bad < t->n) { /* NaN or inf: the model would compute nonsense (NaN logits, a "diverged" first step) */
        char at[64] = "";
        if (t->ndim == 2)
            snprintf(at, sizeof at, " ([%zu, %zu])", bad / (size_t)t->shape[1], bad % (size_t)t->shape[1]);
        snprintf(err, errlen, "%s: tensor '%s': element %zu%s is %s: weights must be finite", f->path, t->name,
                 bad, at, isnan(tmp[bad]) ? "NaN" : tmp[bad] > 0 ? "inf" : "-inf");
        free(tmp);
        return -1;
    }
    ah__hf_part_to_engine(p, gcols, tmp, full);
    free(tmp);
    return 0;
}

int ah__hf_read_layer(const ah_hf_dir *h, const ah_model_config *cfg, int l, ah_ckpt_loaded **out, int *n,
                     char *err, size_t errlen) {
    ah_eng_layer L;
    ah__engine_layer_describe(cfg, l, 1, 0, &L);
    ah_ckpt_loaded *t = ah_xcalloc((size_t)L.n_tensors + 1, sizeof *t);
    int k = 0, rc = 0;
    for (int q = 0; q < L.n_tensors && rc == 0; q++) {
        const ah_tensor_info *ti = &L.t[q];
        ah_hf_map m;
        ah__hf_map_tensor(cfg, l, ti, 1, &m);
        if (m.n == 0)
            continue;
        size_t full = (size_t)ti->grows * ti->gcols;
        ah_ckpt_loaded *o = &t[k++];
        snprintf(o->name, sizeof o->name, "param.%s", ti->name);
        o->data = ah_xcalloc(full + 1, sizeof(float));
        o->n = full, o->ndim = 2, o->shape[0] = ti->grows, o->shape[1] = ti->gcols;
        for (int i = 0; i < m.n && rc == 0; i++)
            rc = read_part(h, &m.p[i], ti->gcols, o->data, err, errlen);
    }
    ah__engine_layer_info_free(&L);
    if (rc != 0) {
        ah_ckpt_free(t, k);
        return -1;
    }
    *out = t, *n = k;
    return 0;
}

static int hf_src_layer(void *ctx, int l, ah_ckpt_loaded **out, int *n, char *err, size_t errlen) {
    const ah_hf_src_ctx *c = ctx;
    return ah__hf_read_layer(c->h, &c->cfg, l, out, n, err, errlen);
}

void ah_hf_source(ah_hf_src_ctx *ctx, const ah_hf_dir *h, const ah_model_config *cfg, ah_weights_src *src) {
    ctx->h = h, ctx->cfg = *cfg;
    src->cfg = *cfg, src->layer = hf_src_layer, src->ctx = ctx;
}
