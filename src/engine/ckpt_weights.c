/* Full-layer parameters from a layer checkpoint (engine/ckpt_weights.h). */
#include "engine/ckpt_weights.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "engine/model.h"
#include "engine/reshard.h"
#include "model/model_json.h"
#include "util/errors.h"
#include "util/json_file.h"
#include "util/json_read.h"

/* the step and model name of DIR/state.json, and its stored model config (*has_cfg 0: an older
 * checkpoint without one); 0 or -1 with err */
static int read_state(const char *dir, int *step, char *model, size_t mn, ah_model_config *cfg, int *has_cfg,
                      char *err, size_t errlen) {
    char path[2048];
    snprintf(path, sizeof path, "%s/state.json", dir);
    cJSON *o = ah_json_parse_file(path, 1 << 20, 1, err, errlen);
    if (!o)
        return -1;
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "step"),
                *md = cJSON_GetObjectItemCaseSensitive(o, "model"),
                *mc = cJSON_GetObjectItemCaseSensitive(o, "model_config");
    int rc = 0;
    if (!cJSON_IsNumber(st) || !(st->valuedouble >= 0 && st->valuedouble <= 2147483647.0) ||
        st->valuedouble != (double)st->valueint || !cJSON_IsString(md)) {
        snprintf(err, errlen, "%s: needs an integer step >= 0 and a model name", path);
        rc = -1;
    } else {
        *step = st->valueint;
        snprintf(model, mn, "%s", md->valuestring);
        ah_err_ctx cx = {path, err, errlen};
        *has_cfg = mc != NULL;
        if (mc && !cJSON_IsObject(mc))
            rc = ah_jfail(&cx, "model_config", "expected an object, not %s", ah_json_type_name(mc));
        else if (mc)
            rc = ah_model_config_from_json(&cx, mc, "model_config", cfg);
    }
    cJSON_Delete(o);
    return rc;
}

/* 0 in a config means the default (rope_theta 10000, norm_eps 1e-5) */
static double or_default(double v, double dflt) {
    return v > 0 ? v : dflt;
}

/* the first field in which --model's config differs from the checkpoint's stored one, or NULL (the
 * vocabulary is not compared: the run's may be the data's, trained_vocab reads it from the shards) */
static const char *config_mismatch(const ah_model_config *a, const ah_model_config *b, char *buf, size_t n) {
    if (a->arch != b->arch) { /* by name: the enum's number says nothing */
        snprintf(buf, n, "arch %s, the checkpoint's state.json model_config has %s", ah_arch_name(a->arch),
                 ah_arch_name(b->arch));
        return buf;
    }
    const struct {
        const char *key;
        double x, y;
    } f[] = {{"arch", a->arch, b->arch},
             {"hidden", a->hidden, b->hidden},
             {"n_layers", a->n_layers, b->n_layers},
             {"n_heads", a->n_heads, b->n_heads},
             {"n_kv_heads", a->n_kv_heads, b->n_kv_heads},
             {"ffn_hidden", a->ffn_hidden, b->ffn_hidden},
             {"max_positions", a->max_positions, b->max_positions},
             {"tied_embeddings", a->tied_embeddings, b->tied_embeddings},
             {"embed_dim", a->embed_dim, b->embed_dim},
             {"pos_offset", a->pos_offset, b->pos_offset},
             {"post_norm", a->post_norm, b->post_norm},
             {"activation", a->act, b->act},
             {"qkv_bias", a->qkv_bias, b->qkv_bias},
             {"no_qkv_bias", a->no_qkv_bias, b->no_qkv_bias},
             {"unscaled_attention", a->unscaled_attention, b->unscaled_attention},
             {"attn_window", a->attn_window, b->attn_window},
             {"local_layers", 0, memcmp(a->local_layers, b->local_layers, sizeof a->local_layers) != 0},
             {"rope_theta", or_default(a->rope_theta, 1e4), or_default(b->rope_theta, 1e4)},
             {"norm_eps", or_default(a->norm_eps, 1e-5), or_default(b->norm_eps, 1e-5)}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].x != f[i].y) {
            snprintf(buf, n, "%s %.9g, the checkpoint's state.json model_config has %.9g", f[i].key, f[i].x,
                     f[i].y);
            return buf;
        }
    return NULL;
}

/* w->cfg: --model (which must agree with a stored config), else the stored config, else the preset
 * state.json names; 0 or -1 with err */
static int resolve_model(const char *dir, const char *model, const char *name, const ah_model_config *stored,
                         int has_cfg, ah_model_config *cfg, char *err, size_t errlen) {
    char why[1024];
    if (!model && has_cfg) {
        *cfg = *stored;
        return 0;
    }
    if (ah_model_resolve(model ? model : name, cfg, why, sizeof why) != 0) {
        if (model)
            snprintf(err, errlen, "--model: %s", why);
        else
            snprintf(err, errlen,
                     "%s/state.json: model '%s' is not a preset: give --model CONFIG.json (the "
                     "config it was trained with)",
                     dir, name);
        return -1;
    }
    if (has_cfg && config_mismatch(cfg, stored, why, sizeof why)) {
        snprintf(err, errlen, "--model %s: %s", model, why);
        return -1;
    }
    return 0;
}

static int list_node_dirs(const char *dir, ah_ckpt_weights *w, char *err, size_t errlen) {
    DIR *dh = opendir(dir);
    if (!dh) {
        snprintf(err, errlen, "--ckpt %s: cannot open the directory", dir);
        return -1;
    }
    for (struct dirent *de; (de = readdir(dh));) {
        char p[2048];
        struct stat sb;
        if (de->d_name[0] == '.' || snprintf(p, sizeof p, "%s/%s", dir, de->d_name) >= (int)sizeof p ||
            stat(p, &sb) != 0 || !S_ISDIR(sb.st_mode))
            continue;
        w->dirs = ah_xrealloc(w->dirs, sizeof *w->dirs * (size_t)(w->n_dirs + 1));
        w->dirs[w->n_dirs] = ah_xcalloc(strlen(p) + 1, 1);
        memcpy(w->dirs[w->n_dirs++], p, strlen(p));
    }
    closedir(dh);
    return 0;
}

/* layer l at w->step in the TP=1 layout: the TP rank 0 shard of degree 1
 * when there is one, else the layer resharded from another degree's shards */
static int ckpt_layer(void *ctx, int l, ah_ckpt_loaded **out, int *n, char *err, size_t errlen) {
    const ah_ckpt_weights *w = ctx;
    ah_engine_model e;
    if (ah__engine_model_init(&e, &w->cfg, 1, 1, l, l + 1, 1, 0, 0, 0, err, errlen) != 0)
        return -1;
    const char *const *dp = (const char *const *)w->dirs;
    ah_ckpt_loaded *t = NULL;
    int nt = 0, t_old = 0, rc;
    char own[512] = "";
    int got = ah_ckpt_restore_shard(dp, w->n_dirs, l, 0, 1, w->step, &t, &nt, own, sizeof own);
    if (got >= 0 && !ah__reshard_mismatch(&e, l, t, nt)) {
        *out = t, *n = nt;
        rc = 0;
    } else {
        ah_ckpt_free(t, nt);
        rc = ah__reshard_layer(&e, l, dp, w->n_dirs, w->step, out, n, &t_old, err, errlen);
        if (rc == 1) /* only degree-1 shards, and they do not fit */
            snprintf(err, errlen, "%s", got < 0 ? own : "the checkpoint's shards do not fit the model"), rc = -1;
    }
    ah__engine_model_free(&e);
    return rc;
}

/* the vocabulary the run trained: the embedding's rows in layer 0 */
static int trained_vocab(ah_ckpt_weights *w, char *err, size_t errlen) {
    ah_ckpt_loaded *t = NULL;
    int nt = 0, v = -1;
    if (ah_ckpt_restore_shard((const char *const *)w->dirs, w->n_dirs, 0, 0, 0, w->step, &t, &nt, err, errlen) < 0)
        return -1;
    for (int i = 0; i < nt; i++)
        if (!strcmp(t[i].name, "param.wte") && t[i].ndim == 2 && t[i].shape[0] > 0 && t[i].shape[0] < (1 << 24))
            v = (int)t[i].shape[0];
    ah_ckpt_free(t, nt);
    if (v < 0)
        snprintf(err, errlen, "checkpoint layer 0 at step %d: no param.wte tensor", w->step);
    else
        w->cfg.vocab = v;
    return v < 0 ? -1 : 0;
}

int ah_ckpt_weights_open(const char *dir, int step, const char *model, ah_ckpt_weights *w, ah_weights_src *src,
                         char *err, size_t errlen) {
    memset(w, 0, sizeof *w);
    char name[256];
    int committed = 0, has_cfg = 0;
    ah_model_config stored;
    if (read_state(dir, &committed, name, sizeof name, &stored, &has_cfg, err, errlen) != 0 ||
        resolve_model(dir, model, name, &stored, has_cfg, &w->cfg, err, errlen) != 0)
        return -1;
    w->step = step >= 0 ? step : committed;
    int rc = list_node_dirs(dir, w, err, errlen);
    if (rc == 0)
        rc = trained_vocab(w, err, errlen);
    if (rc != 0) {
        ah_ckpt_weights_close(w);
        return -1;
    }
    src->cfg = w->cfg, src->layer = ckpt_layer, src->ctx = w;
    return 0;
}

void ah_ckpt_weights_close(ah_ckpt_weights *w) {
    for (int i = 0; i < w->n_dirs; i++)
        free(w->dirs[i]);
    free(w->dirs);
    memset(w, 0, sizeof *w);
}
