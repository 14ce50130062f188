/* Recovery assignments (include/autohet/ckpt.h, docs/recovery.md): for each
 * new rank and layer shard its source tier, file, size and checksum; one
 * writer and one reader of the format. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "autohet/ckpt.h"
#include "util/atomic_file.h"
#include "util/errors.h"
#include "util/json_file.h"

#define AH_RECOVERY_MAX_BYTES (64u << 20)

static cJSON *src_json(cJSON *o, const ah_shard_src *s) {
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)s->xxh64);
    cJSON_AddStringToObject(o, "path", s->path);
    cJSON_AddNumberToObject(o, "bytes", (double)s->bytes);
    cJSON_AddStringToObject(o, "xxh64", hex);
    return o;
}

int ah_recovery_doc_write(const char *path, const ah_recovery_doc *d, char *err, size_t errlen) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "format", "autohet-recovery");
    cJSON_AddNumberToObject(o, "version", 1);
    cJSON_AddNumberToObject(o, "step", d->step);
    cJSON *ranks = cJSON_AddArrayToObject(o, "ranks");
    for (int i = 0; i < d->n_ranks; i++) {
        const ah_recovery_rank *r = &d->ranks[i];
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "rank", r->rank);
        cJSON_AddStringToObject(x, "node", r->node);
        if (r->server_only)
            cJSON_AddBoolToObject(x, "server_only", 1);
        else
            cJSON_AddNumberToObject(x, "cloud_bytes_per_s", r->cloud_bytes_per_s);
        cJSON_AddItemToArray(ranks, x);
    }
    cJSON *sh = cJSON_AddArrayToObject(o, "shards");
    for (int i = 0; i < d->n_shards; i++) {
        const ah_recovery_shard *e = &d->shards[i];
        cJSON *x = src_json(cJSON_CreateObject(), &e->src);
        cJSON_AddNumberToObject(x, "rank", e->rank);
        cJSON_AddNumberToObject(x, "layer", e->layer);
        cJSON_AddNumberToObject(x, "tp", e->tp);
        if (e->tp_degree > 0)
            cJSON_AddNumberToObject(x, "tp_degree", e->tp_degree);
        cJSON_AddStringToObject(x, "tier", ah_tier_name(e->tier));
        cJSON_AddStringToObject(x, "holder", e->holder);
        if (e->tier == AH_TIER_PEER) {
            cJSON_AddNumberToObject(x, "server", e->server);
            cJSON_AddStringToObject(x, "holder_tier", ah_tier_name(e->holder_tier));
        }
        cJSON *fbs = e->n_fallback ? cJSON_AddArrayToObject(x, "fallbacks") : NULL;
        for (int f = 0; f < e->n_fallback; f++) {
            cJSON *fo = src_json(cJSON_CreateObject(), &e->fallback[f]);
            cJSON_AddStringToObject(fo, "tier", ah_tier_name(e->fallback_tier[f]));
            cJSON_AddItemToArray(fbs, fo);
        }
        cJSON_AddItemToArray(sh, x);
    }
    char *txt = cJSON_Print(o);
    int rc = ah_write_file_atomic(path, txt, strlen(txt), err, errlen);
    free(txt);
    cJSON_Delete(o);
    return rc;
}

static int parse_src(const cJSON *o, ah_shard_src *s) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "path"),
                *b = cJSON_GetObjectItemCaseSensitive(o, "bytes"),
                *h = cJSON_GetObjectItemCaseSensitive(o, "xxh64");
    /* bytes: an integer in [0, 2^31) (one MPI_Get), checked before the cast */
    if (!cJSON_IsString(p) || !cJSON_IsNumber(b) || !(b->valuedouble >= 0 && b->valuedouble <= 2147483647.0) ||
        b->valuedouble != (double)(uint64_t)b->valuedouble || !cJSON_IsString(h))
        return -1;
    snprintf(s->path, sizeof s->path, "%s", p->valuestring);
    s->bytes = (uint64_t)b->valuedouble;
    char *end = NULL;
    s->xxh64 = strtoull(h->valuestring, &end, 16);
    return end && *end == 0 && strlen(h->valuestring) == 16 ? 0 : -1;
}

/* "fallbacks": [{path, bytes, xxh64, tier}, ...], at most AH_MAX_FALLBACKS, tiers memory/disk/cloud */
static int parse_fallbacks(const cJSON *a, ah_recovery_shard *v) {
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) > AH_MAX_FALLBACKS)
        return -1;
    const cJSON *it;
    cJSON_ArrayForEach(it, a) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(it, "tier");
        int tier = cJSON_IsString(t) ? ah_tier_parse(t->valuestring) : -1;
        if (tier < 0 || tier == AH_TIER_PEER || parse_src(it, &v->fallback[v->n_fallback]) != 0)
            return -1;
        v->fallback_tier[v->n_fallback++] = tier;
    }
    return 0;
}

static int parse_shard(const cJSON *it, ah_recovery_shard *v) {
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(it, "rank"), *l = cJSON_GetObjectItemCaseSensitive(it, "layer"),
                *t = cJSON_GetObjectItemCaseSensitive(it, "tp"), *ti = cJSON_GetObjectItemCaseSensitive(it, "tier"),
                *sv = cJSON_GetObjectItemCaseSensitive(it, "server"),
                *fb = cJSON_GetObjectItemCaseSensitive(it, "fallback"),
                *fbs = cJSON_GetObjectItemCaseSensitive(it, "fallbacks"),
                *ho = cJSON_GetObjectItemCaseSensitive(it, "holder"),
                *ht = cJSON_GetObjectItemCaseSensitive(it, "holder_tier"),
                *dg = cJSON_GetObjectItemCaseSensitive(it, "tp_degree");
    memset(v, 0, sizeof *v);
    /* tp_degree (optional): a power of two above tp, checked before the cast */
    if (dg && (!cJSON_IsNumber(dg) || !(dg->valuedouble >= 1 && dg->valuedouble <= 65536) ||
               dg->valuedouble != (double)(int)dg->valuedouble || ((int)dg->valuedouble & ((int)dg->valuedouble - 1))))
        return -1;
    v->tp_degree = dg ? (int)dg->valuedouble : 0;
    v->tier = cJSON_IsString(ti) ? ah_tier_parse(ti->valuestring) : -1;
    if (!cJSON_IsNumber(r) || !cJSON_IsNumber(l) || !cJSON_IsNumber(t) || v->tier < 0 ||
        parse_src(it, &v->src) != 0 || (v->tier == AH_TIER_PEER && !cJSON_IsNumber(sv)) ||
        (fb && fbs) || (fb && parse_src(fb, &v->fallback[0]) != 0) || (fbs && parse_fallbacks(fbs, v) != 0))
        return -1;
    if (fb) /* one fallback (the first format): a cloud copy */
        v->n_fallback = 1, v->fallback_tier[0] = AH_TIER_CLOUD;
    v->rank = r->valueint;
    v->layer = l->valueint;
    v->tp = t->valueint;
    if (v->tp_degree > 0 && (v->tp < 0 || v->tp >= v->tp_degree))
        return -1;
    v->server = cJSON_IsNumber(sv) ? sv->valueint : -1;
    v->holder_tier = cJSON_IsString(ht) ? ah_tier_parse(ht->valuestring) : -1;
    if (cJSON_IsString(ho))
        snprintf(v->holder, sizeof v->holder, "%s", ho->valuestring);
    return 0;
}

static void parse_rank(const cJSON *it, ah_recovery_rank *v) {
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(it, "rank"), *n = cJSON_GetObjectItemCaseSensitive(it, "node"),
                *c = cJSON_GetObjectItemCaseSensitive(it, "cloud_bytes_per_s"),
                *so = cJSON_GetObjectItemCaseSensitive(it, "server_only");
    memset(v, 0, sizeof *v);
    v->rank = cJSON_IsNumber(r) ? r->valueint : -1;
    if (cJSON_IsString(n))
        snprintf(v->node, sizeof v->node, "%s", n->valuestring);
    v->cloud_bytes_per_s = cJSON_IsNumber(c) ? c->valuedouble : 0;
    v->server_only = cJSON_IsTrue(so);
}

int ah_recovery_doc_read(const char *path, ah_recovery_doc *d, char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    cJSON *o = ah_json_parse_file(path, AH_RECOVERY_MAX_BYTES, 1, err, errlen);
    if (!o)
        return -1;
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "step"), *rk = cJSON_GetObjectItemCaseSensitive(o, "ranks"),
                *sh = cJSON_GetObjectItemCaseSensitive(o, "shards"), *it;
    if (!cJSON_IsNumber(st) || st->valueint < 0 || !cJSON_IsArray(sh) || !cJSON_IsArray(rk)) {
        snprintf(err, errlen, "%s: needs step, ranks and shards", path);
        cJSON_Delete(o);
        return -1;
    }
    d->step = st->valueint;
    d->ranks = ah_xcalloc((size_t)cJSON_GetArraySize(rk) + 1, sizeof(ah_recovery_rank));
    cJSON_ArrayForEach(it, rk) parse_rank(it, &d->ranks[d->n_ranks++]);
    d->shards = ah_xcalloc((size_t)cJSON_GetArraySize(sh) + 1, sizeof(ah_recovery_shard));
    int rc = 0;
    cJSON_ArrayForEach(it, sh) {
        if (parse_shard(it, &d->shards[d->n_shards]) != 0) {
            snprintf(err, errlen, "%s: shards[%d] is malformed", path, d->n_shards);
            rc = -1;
            break;
        }
        d->n_shards++;
    }
    cJSON_Delete(o);
    if (rc != 0)
        ah_recovery_doc_free(d);
    return rc;
}

void ah_recovery_doc_free(ah_recovery_doc *d) {
    free(d->ranks);
    free(d->shards);
    memset(d, 0, sizeof *d);
}
