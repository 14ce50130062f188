/* Resharding on restore (docs/checkpoint.md, "Resharding"). The engine's
 * layer model says where each TP rank's [lrows x lcols] shard of a tensor
 * sits in the full [grows x gcols] one (ah_tensor_info); a TP=T_old
 * description of the layer places every old shard in the full tensor, and
 * this rank's own description cuts its new shard out of it. Only the tensor
 * being resharded is ever held in full. */
#include "engine/reshard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autohet/plan.h"
#include "util/errors.h"

/* The tensor of layer L that a checkpoint tensor PREFIX.NAME holds, or NULL. */
static const ah_tensor_info *tensor_of(const ah_eng_layer *L, const char *ckpt_name) {
    const char *dot = strchr(ckpt_name, '.');
    for (int q = 0; dot && q < L->n_tensors; q++)
        if (!strcmp(L->t[q].name, dot + 1))
            return &L->t[q];
    return NULL;
}

static const ah_ckpt_loaded *loaded_named(const ah_ckpt_loaded *t, int nt, const char *name) {
    for (int i = 0; i < nt; i++)
        if (!strcmp(t[i].name, name))
            return &t[i];
    return NULL;
}

static const ah_eng_layer *layer_of(const ah_engine_model *e, int l) {
    return &e->layers[l - e->first];
}

int ah__reshard_mismatch(const ah_engine_model *e, int l, const ah_ckpt_loaded *t, int nt) {
    const ah_eng_layer *L = layer_of(e, l);
    for (int i = 0; i < nt; i++) {
        const ah_tensor_info *ti = tensor_of(L, t[i].name);
        if (ti && t[i].n != ti->size)
            return 1;
    }
    return 0;
}

/* The TP degree TP rank 0's shard was written under: the full size over the
 * shard size of its first TP-split tensor (1 when the layer has none: every
 * rank then holds the same full copy). 0 with err when the sizes fit no TP
 * degree. */
static int old_tp_degree(const ah_eng_layer *L, int l, const ah_ckpt_loaded *t0, int n0, char *err,
                         size_t errlen) {
    for (int i = 0; i < n0; i++) {
        const ah_tensor_info *ti = tensor_of(L, t0[i].name);
        if (!ti || ti->replicated)
            continue;
        size_t full = (size_t)ti->grows * (size_t)ti->gcols;
        if (t0[i].n == 0 || full % t0[i].n) {
            snprintf(err, errlen, "checkpoint layer %d: %s has %zu values, not a TP shard of its %zu", l,
                     t0[i].name, t0[i].n, full);
            return 0;
        }
        return (int)(full / t0[i].n);
    }
    return 1;
}

/* Scatters old rank r's shard `src` of a tensor (described by oti) into the
 * full tensor. */
static void scatter_shard(const ah_tensor_info *oti, const float *src, float *full) {
    for (int r = 0; r < oti->lrows; r++)
        for (int c = 0; c < oti->lcols; c++)
            full[ah__tensor_global_index(oti, r, c)] = src[(size_t)r * oti->lcols + c];
}

/* Cuts the shard ti describes out of the full tensor into dst. */
static void cut_shard(const ah_tensor_info *ti, const float *full, float *dst) {
    for (int r = 0; r < ti->lrows; r++)
        for (int c = 0; c < ti->lcols; c++)
            dst[(size_t)r * ti->lcols + c] = full[ah__tensor_global_index(ti, r, c)];
}

/* out = this rank's shard (ti) of checkpoint tensor `name`, reassembled from
 * the t_old old ranks' shards (replicated: TP rank 0's copy). 0 or -1 (err). */
static int reshard_tensor(const ah_tensor_info *ti, int l, const char *name, int t_old, const ah_eng_layer *old,
                          ah_ckpt_loaded *const *shards, const int *counts, ah_ckpt_loaded *out, char *err,
                          size_t errlen) {
    float *full = ah_xcalloc((size_t)ti->grows * ti->gcols + 1, sizeof(float));
    int rc = 0;
    for (int r = 0; r < (ti->replicated ? 1 : t_old) && rc == 0; r++) {
        const ah_tensor_info *oti = tensor_of(&old[r], name);
        const ah_ckpt_loaded *src = loaded_named(shards[r], counts[r], name);
        if (!oti || !src || src->n != oti->size) {
            snprintf(err, errlen,
                     "checkpoint layer %d: TP rank %d of %d %s %s (%zu values; a TP=%d shard has %zu)", l, r,
                     t_old, src ? "has a wrong-sized" : "lacks", name, src ? src->n : 0, t_old,
                     oti ? oti->size : 0);
            rc = -1;
        } else {
            scatter_shard(oti, src->data, full);
        }
    }
    if (rc == 0) {
        snprintf(out->name, sizeof out->name, "%s", name);
        out->n = ti->size;
        out->data = ah_xcalloc(ti->size + 1, sizeof(float));
        out->ndim = 2;
        out->shape[0] = ti->lrows;
        out->shape[1] = ti->lcols;
        cut_shard(ti, full, out->data);
    }
    free(full);
    return rc;
}

int ah__reshard_from_shards(const ah_engine_model *e, int l, int t_old, ah_ckpt_loaded *const *shards,
                           const int *counts, ah_ckpt_loaded **out, int *n_out, char *err, size_t errlen) {
    const ah_eng_layer *L = layer_of(e, l);
    /* the TP=t_old description of the layer: where every old shard sits (tables
     * only: no buffers of a full layer are allocated for it) */
    const ah_model_config *c = &e->cfg;
    if (t_old < 1 || c->n_heads % t_old || c->n_kv_heads % t_old || c->ffn_hidden % t_old) {
        snprintf(err, errlen, "checkpoint layer %d: TP degree %d does not divide the model's heads and MLP", l,
                 t_old);
        return -1;
    }
    ah_eng_layer *old = ah_xcalloc((size_t)t_old, sizeof *old);
    int rc = 0;
    for (int r = 0; r < t_old; r++)
        ah__engine_layer_describe(c, l, t_old, r, &old[r]);
    ah_ckpt_loaded *res = ah_xcalloc((size_t)counts[0] + 1, sizeof *res);
    int nr = 0;
    for (int i = 0; i < counts[0] && rc == 0; i++) {
        const ah_tensor_info *ti = tensor_of(L, shards[0][i].name);
        if (ti && (rc = reshard_tensor(ti, l, shards[0][i].name, t_old, old, shards, counts, &res[nr], err,
                                       errlen)) == 0)
            nr++;
    }
    for (int r = 0; r < t_old; r++)
        ah__engine_layer_info_free(&old[r]);
    free(old);
    if (rc != 0) {
        ah_ckpt_free(res, nr);
        return -1;
    }
    *out = res;
    *n_out = nr;
    return 0;
}

/* The TP degrees (> 0, ascending, at most max) that the manifests of `dirs`
 * record for TP rank 0 of layer l at `step`; *unrecorded: whether one lists
 * that shard without its degree (an older manifest). */
static int recorded_degrees(const char *const *dirs, int n_dirs, int l, int step, int *deg, int max,
                            int *unrecorded) {
    int n = 0;
    *unrecorded = 0;
    for (int d = 0; d < n_dirs; d++) {
        ah_manifest m;
        char e2[512];
        if (ah_manifest_load(dirs[d], &m, e2, sizeof e2) != 0)
            continue; /* ah_ckpt_restore_shard reports it */
        for (int i = 0; i < m.n; i++) {
            const ah_manifest_entry *me = &m.e[i];
            int k = 0;
            if (me->layer == l && me->tp_rank == 0 && me->step == step && me->tp_degree <= 0)
                *unrecorded = 1;
            if (me->layer != l || me->tp_rank != 0 || me->step != step || me->tp_degree <= 0)
                continue;
            while (k < n && deg[k] < me->tp_degree)
                k++;
            if ((k < n && deg[k] == me->tp_degree) || n == max)
                continue;
            memmove(&deg[k + 1], &deg[k], sizeof *deg * (size_t)(n - k));
            deg[k] = me->tp_degree, n++;
        }
        ah_manifest_free(&m);
    }
    return n;
}

/* Every old TP rank's shard of layer l at degree t (0: the degree is not
 * recorded; rank 0's sizes tell it) into shards[], counts[] (sized
 * AH_MAX_TP); *t_out the degree. 0 or -1 (err; nothing held). */
static int load_old_shards(const ah_engine_model *e, int l, const char *const *dirs, int n_dirs, int step, int t,
                           ah_ckpt_loaded **shards, int *counts, int *t_out, char *err, size_t errlen) {
    if (ah_ckpt_restore_shard(dirs, n_dirs, l, 0, t, step, &shards[0], &counts[0], err, errlen) < 0)
        return -1;
    int T = t > 0 ? t : old_tp_degree(layer_of(e, l), l, shards[0], counts[0], err, errlen);
    int rc = T > 0 && T <= AH_MAX_TP ? 0 : -1;
    if (T > AH_MAX_TP)
        snprintf(err, errlen, "checkpoint layer %d: TP degree %d is above %d", l, T, AH_MAX_TP);
    for (int r = 1; r < T && rc == 0; r++)
        rc = ah_ckpt_restore_shard(dirs, n_dirs, l, r, t > 0 ? t : T, step, &shards[r], &counts[r], err, errlen) < 0
                 ? -1
                 : 0;
    if (rc != 0) {
        for (int r = 0; r < AH_MAX_TP; r++)
            ah_ckpt_free(shards[r], counts[r]), shards[r] = NULL, counts[r] = 0;
        return -1;
    }
    *t_out = T;
    return 0;
}

int ah__reshard_layer(const ah_engine_model *e, int l, const char *const *dirs, int n_dirs, int step,
                     ah_ckpt_loaded **out, int *n_out, int *t_old, char *err, size_t errlen) {
    /* the degrees the manifests record, each tried as a whole (its shards are
     * never mixed with another degree's); last an unrecorded one (an older
     * manifest), known from TP rank 0's sizes, only when a manifest lists one:
     * degree 0 matches every entry, so it read the caller's own shards again,
     * and reported each bad copy a second time */
    int unrecorded, deg[AH_MAX_TP + 1], nd = recorded_degrees(dirs, n_dirs, l, step, deg, AH_MAX_TP, &unrecorded);
    if (unrecorded)
        deg[nd++] = 0;
    ah_ckpt_loaded *shards[AH_MAX_TP] = {0};
    int counts[AH_MAX_TP] = {0}, T = 0, rc = -1, tried = 0;
    for (int k = 0; k < nd && rc != 0; k++) {
        if (deg[k] == e->tp)
            continue; /* the caller found no good shard of its own degree */
        tried = 1;
        rc = load_old_shards(e, l, dirs, n_dirs, step, deg[k], shards, counts, &T, err, errlen);
    }
    if (!tried)
        return 1; /* only this plan's degree: the caller's own shard's error stands */
    if (rc != 0)
        return -1;
    if (T == e->tp) { /* an unrecorded degree that is this plan's */
        for (int r = 0; r < T; r++)
            ah_ckpt_free(shards[r], counts[r]);
        return 1;
    }
    rc = ah__reshard_from_shards(e, l, T, shards, counts, out, n_out, err, errlen);
    for (int r = 0; r < T; r++)
        ah_ckpt_free(shards[r], counts[r]);
    if (rc == 0)
        *t_old = T;
    return rc;
}
