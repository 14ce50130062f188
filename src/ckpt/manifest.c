/* Per-(node, tier) manifests, layer bitmaps and tiered restore (include/autohet/ckpt.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "autohet/ckpt.h"
#include "util/errors.h"
#include "util/json_file.h"

void ah_manifest_init(ah_manifest *m, const char *node, const char *tier) {
    memset(m, 0, sizeof *m);
    snprintf(m->node, sizeof m->node, "%s", node ? node : "");
    snprintf(m->tier, sizeof m->tier, "%s", tier ? tier : "");
}

void ah_manifest_free(ah_manifest *m) {
    free(m->e);
    m->e = NULL;
    m->n = m->cap = 0;
}

const ah_manifest_entry *ah_manifest_find(const ah_manifest *m, int layer, int tp_rank) {
    for (int i = 0; i < m->n; i++)
        if (m->e[i].layer == layer && m->e[i].tp_rank == tp_rank)
            return &m->e[i];
    return NULL;
}

void ah_manifest_put(ah_manifest *m, const ah_manifest_entry *e) {
    ah_manifest_entry *old = (ah_manifest_entry *)ah_manifest_find(m, e->layer, e->tp_rank);
    if (old) {
        *old = *e;
        return;
    }
    if (m->n == m->cap) {
        m->cap = m->cap ? 2 * m->cap : 16;
        m->e = ah_xrealloc(m->e, sizeof(ah_manifest_entry) * (size_t)m->cap);
    }
    m->e[m->n++] = *e;
}

int ah_manifest_bitmap(const ah_manifest *m, int tp_rank, int min_step, int n_layers, uint8_t *bits) {
    memset(bits, 0, (size_t)(n_layers + 7) / 8);
    int set = 0;
    for (int i = 0; i < m->n; i++) {
        const ah_manifest_entry *e = &m->e[i];
        if (e->tp_rank != tp_rank || e->step < min_step || e->layer < 0 || e->layer >= n_layers)
            continue;
        if (!(bits[e->layer / 8] & (1u << (e->layer % 8)))) {
            bits[e->layer / 8] |= (uint8_t)(1u << (e->layer % 8));
            set++;
        }
    }
    return set;
}

int ah_manifest_save(const char *dir, const ah_manifest *m, char *err, size_t errlen) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "format", "autohet-manifest");
    cJSON_AddNumberToObject(o, "version", 1);
    cJSON_AddStringToObject(o, "node", m->node);
    cJSON_AddStringToObject(o, "tier", m->tier);
    cJSON *a = cJSON_AddArrayToObject(o, "shards");
    for (int i = 0; i < m->n; i++) {
        const ah_manifest_entry *e = &m->e[i];
        cJSON *s = cJSON_CreateObject();
        char hex[17];
        snprintf(hex, sizeof hex, "%016" PRIx64, e->xxh64);
        cJSON_AddNumberToObject(s, "layer", e->layer);
        cJSON_AddNumberToObject(s, "tp_rank", e->tp_rank);
        cJSON_AddNumberToObject(s, "step", e->step);
        cJSON_AddStringToObject(s, "file", e->file);
        cJSON_AddNumberToObject(s, "bytes", (double)e->bytes);
        cJSON_AddStringToObject(s, "xxh64", hex);
        cJSON_AddItemToArray(a, s);
    }
    char *txt = cJSON_Print(o);
    cJSON_Delete(o);
    char path[4096];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    int rc = ah_write_file_atomic(path, txt, strlen(txt), err, errlen);
    free(txt);
    return rc;
}

int ah_manifest_load(const char *dir, ah_manifest *m, char *err, size_t errlen) {
    char path[4096];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    ah_manifest_init(m, "", "");
    if (access(path, F_OK) != 0)
        return 0; /* nothing held in this tier yet */
    cJSON *o = ah_json_parse_file(path, 64u << 20, 1, err, errlen);
    if (!o)
        return -1;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(o, "format"),
                *node = cJSON_GetObjectItemCaseSensitive(o, "node"),
                *tier = cJSON_GetObjectItemCaseSensitive(o, "tier"),
                *a = cJSON_GetObjectItemCaseSensitive(o, "shards");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "autohet-manifest") || !cJSON_IsArray(a)) {
        snprintf(err, errlen, "%s: not an autohet manifest (format, shards)", path);
        cJSON_Delete(o);
        return -1;
    }
    ah_manifest_init(m, cJSON_IsString(node) ? node->valuestring : "",
                     cJSON_IsString(tier) ? tier->valuestring : "");
    const cJSON *s;
    int i = 0;
    cJSON_ArrayForEach(s, a) {
        const cJSON *ly = cJSON_GetObjectItemCaseSensitive(s, "layer"),
                    *tp = cJSON_GetObjectItemCaseSensitive(s, "tp_rank"),
                    *st = cJSON_GetObjectItemCaseSensitive(s, "step"),
                    *fi = cJSON_GetObjectItemCaseSensitive(s, "file"),
                    *by = cJSON_GetObjectItemCaseSensitive(s, "bytes"),
                    *hx = cJSON_GetObjectItemCaseSensitive(s, "xxh64");
        ah_manifest_entry e = {0};
        char *end = NULL;
        if (!cJSON_IsNumber(ly) || !cJSON_IsNumber(tp) || !cJSON_IsNumber(st) || !cJSON_IsString(fi) ||
            !cJSON_IsNumber(by) || by->valuedouble < 0 || !cJSON_IsString(hx) ||
            strlen(fi->valuestring) >= sizeof e.file || strchr(fi->valuestring, '/')) {
            snprintf(err, errlen,
                     "%s: shards[%d]: needs layer, tp_rank, step, file (a plain name), bytes, xxh64", path,
                     i);
            ah_manifest_free(m);
            cJSON_Delete(o);
            return -1;
        }
        errno = 0;
        e.xxh64 = strtoull(hx->valuestring, &end, 16);
        if (errno || !end || *end || strlen(hx->valuestring) != 16) {
            snprintf(err, errlen, "%s: shards[%d].xxh64: expected 16 hex digits", path, i);
            ah_manifest_free(m);
            cJSON_Delete(o);
            return -1;
        }
        e.layer = ly->valueint;
        e.tp_rank = tp->valueint;
        e.step = st->valueint;
        e.bytes = (uint64_t)by->valuedouble;
        snprintf(e.file, sizeof e.file, "%s", fi->valuestring);
        ah_manifest_put(m, &e);
        i++;
    }
    cJSON_Delete(o);
    return 0;
}

int ah_ckpt_restore_layer(const char *const *dirs, int n_dirs, int layer, int tp_rank, int step,
                          ah_ckpt_loaded **out, int *n, char *err, size_t errlen) {
    char why[1024] = "";
    for (int d = 0; d < n_dirs; d++) {
        ah_manifest m;
        char e2[512];
        if (ah_manifest_load(dirs[d], &m, e2, sizeof e2) != 0) {
            fprintf(stderr, "autohet: %s; trying the next tier\n", e2);
            continue;
        }
        const ah_manifest_entry *e = ah_manifest_find(&m, layer, tp_rank);
        if (e && e->step == step) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", dirs[d], e->file);
            if (ah_ckpt_read_shard(path, e->bytes, e->xxh64, out, n, e2, sizeof e2) == 0) {
                ah_manifest_free(&m);
                return d;
            }
            fprintf(stderr, "autohet: %s; trying the next tier\n", e2);
            snprintf(why, sizeof why, "%s", e2);
        }
        ah_manifest_free(&m);
    }
    snprintf(err, errlen, "layer %d (TP rank %d) at step %d: no tier holds a good copy%s%s", layer, tp_rank,
             step, why[0] ? "; last error: " : "", why);
    return -1;
}
