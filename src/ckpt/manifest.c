/* Per-(node, tier) manifests, layer bitmaps and tiered restore (include/autohet/ckpt.h). */
#define _GNU_SOURCE /* memmem */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <xxhash.h>

#include "autohet/ckpt.h"
#include "util/errors.h"
#include "util/json_file.h"
#include "util/atomic_file.h"
#include "util/proc_stat.h"

static const char *const tier_names[AH_TIER_N] = {"memory", "disk", "peer", "cloud"};

const char *ah_tier_name(int tier) {
    return tier >= 0 && tier < AH_TIER_N ? tier_names[tier] : "?";
}

int ah_tier_parse(const char *name) {
    for (int t = 0; name && t < AH_TIER_N; t++)
        if (!strcmp(name, tier_names[t]))
            return t;
    return -1;
}

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
    const ah_manifest_entry *best = NULL;
    for (int i = 0; i < m->n; i++)
        if (m->e[i].layer == layer && m->e[i].tp_rank == tp_rank && (!best || m->e[i].step > best->step))
            best = &m->e[i];
    return best;
}

const ah_manifest_entry *ah_manifest_find_step(const ah_manifest *m, int layer, int tp_rank, int step) {
    for (int i = 0; i < m->n; i++)
        if (m->e[i].layer == layer && m->e[i].tp_rank == tp_rank && m->e[i].step == step)
            return &m->e[i];
    return NULL;
}

const ah_manifest_entry *ah_manifest_find_shard(const ah_manifest *m, int layer, int tp_rank, int tp_degree,
                                                int step) {
    for (int i = 0; i < m->n; i++)
        if (m->e[i].layer == layer && m->e[i].tp_rank == tp_rank && m->e[i].step == step &&
            (tp_degree == 0 || m->e[i].tp_degree == 0 || m->e[i].tp_degree == tp_degree))
            return &m->e[i];
    return NULL;
}

void ah_ckpt_shard_name(char *out, size_t n, int layer, int tp_rank, int tp_degree, int step) {
    if (tp_degree > 1)
        snprintf(out, n, "L%03d-tp%dof%d-s%d.safetensors", layer, tp_rank, tp_degree, step);
    else
        snprintf(out, n, "L%03d-tp%d-s%d.safetensors", layer, tp_rank, step);
}

void ah_manifest_put(ah_manifest *m, const ah_manifest_entry *e) {
    for (int i = 0; i < m->n; i++) {
        ah_manifest_entry *old = &m->e[i];
        if (old->layer == e->layer && old->tp_rank == e->tp_rank && old->step == e->step &&
            old->tp_degree == e->tp_degree) {
            *old = *e;
            return;
        }
    }
    if (m->n == m->cap) {
        m->cap = m->cap ? 2 * m->cap : 16;
        m->e = ah_xrealloc(m->e, sizeof(ah_manifest_entry) * (size_t)m->cap);
    }
    m->e[m->n++] = *e;
}

int ah_manifest_prune(ah_manifest *m, int step) {
    int k = 0, dropped = 0;
    for (int i = 0; i < m->n; i++) {
        const ah_manifest_entry *e = &m->e[i];
        if (e->step != step && ah_manifest_find_step(m, e->layer, e->tp_rank, step)) {
            dropped++;
            continue;
        }
        m->e[k++] = *e;
    }
    /* compacting in place is safe for the find_step above: an entry at `step`
     * is always kept, so every one stays findable at its old or new slot */
    m->n = k;
    return dropped;
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

/* The manifest's own checksum: XXH64 of the file's text with the 16 hex digits
 * of its "manifest_xxh64" member (the last member) written as zeros. Byte
 * exact, so any change to the file is caught, whatever JSON library wrote it.
 * Returns the offset of the digits in text, or -1 when the member is absent. */
static long checksum_digits(const char *text, size_t len) {
    static const char key[] = "\"manifest_xxh64\"";
    const char *last = NULL;
    for (const char *p = text; (p = memmem(p, len - (size_t)(p - text), key, sizeof key - 1)) != NULL; p++)
        last = p;
    if (!last)
        return -1;
    const char *p = last + sizeof key - 1, *end = text + len;
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == ':'))
        p++;
    if (p >= end || *p != '"' || end - p < 18 || p[17] != '"')
        return -1;
    return (long)(p + 1 - text);
}

static uint64_t manifest_hash(const char *text, size_t len, long at) {
    XXH64_state_t *hs = XXH64_createState();
    if (!hs)
        abort();
    XXH64_reset(hs, 0);
    XXH64_update(hs, text, (size_t)at);
    XXH64_update(hs, "0000000000000000", 16);
    XXH64_update(hs, text + at + 16, len - (size_t)at - 16);
    uint64_t h = XXH64_digest(hs);
    XXH64_freeState(hs);
    return h;
}

int ah_manifest_save(const char *dir, const ah_manifest *m, char *err, size_t errlen) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "format", "autohet-manifest");
    cJSON_AddNumberToObject(o, "version", AH_MANIFEST_VERSION);
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
        if (e->tp_degree > 0)
            cJSON_AddNumberToObject(s, "tp_degree", e->tp_degree);
        cJSON_AddNumberToObject(s, "step", e->step);
        cJSON_AddStringToObject(s, "file", e->file);
        cJSON_AddNumberToObject(s, "bytes", (double)e->bytes);
        cJSON_AddStringToObject(s, "xxh64", hex);
        cJSON_AddItemToArray(a, s);
    }
    cJSON_AddStringToObject(o, "manifest_xxh64", "0000000000000000");
    char *txt = cJSON_Print(o);
    cJSON_Delete(o);
    size_t len = strlen(txt);
    long at = checksum_digits(txt, len);
    if (at < 0)
        abort(); /* we just wrote the member */
    char hex[17];
    snprintf(hex, sizeof hex, "%016" PRIx64, manifest_hash(txt, len, at));
    memcpy(txt + at, hex, 16);
    char path[4096];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    int rc = ah_write_file_atomic(path, txt, len, err, errlen);
    free(txt);
    return rc;
}

/* an integer JSON number in [0, max] (a double: NaN, inf, 1e300 and 2.5 fail) */
static int json_uint(const cJSON *v, double max, double *out) {
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0) || v->valuedouble > max ||
        v->valuedouble != (double)(uint64_t)v->valuedouble)
        return -1;
    *out = v->valuedouble;
    return 0;
}

/* one "shards" entry; -1 with err naming it */
static int parse_entry(const char *path, int i, const cJSON *s, ah_manifest_entry *e, char *err, size_t errlen) {
    const cJSON *fi = cJSON_GetObjectItemCaseSensitive(s, "file"),
                *hx = cJSON_GetObjectItemCaseSensitive(s, "xxh64");
    const cJSON *dg = cJSON_GetObjectItemCaseSensitive(s, "tp_degree");
    double ly, tp, st, by, deg = 0;
    memset(e, 0, sizeof *e);
    /* tp_degree is optional (older manifests): absent, the shard's degree is
     * known from its sizes only; present, a power of two above tp_rank */
    if (dg && (json_uint(dg, 65536, &deg) != 0 || deg < 1 || ((uint64_t)deg & ((uint64_t)deg - 1)) != 0)) {
        snprintf(err, errlen, "%s: shards[%d].tp_degree: expected a power of two >= 1", path, i);
        return -1;
    }
    /* bytes up to 2^53: exact in a double; a shard that large is refused by
     * the size check against the file before anything is allocated */
    if (json_uint(cJSON_GetObjectItemCaseSensitive(s, "layer"), 1e6, &ly) != 0 ||
        json_uint(cJSON_GetObjectItemCaseSensitive(s, "tp_rank"), 1e6, &tp) != 0 ||
        json_uint(cJSON_GetObjectItemCaseSensitive(s, "step"), 2147483647.0, &st) != 0 ||
        json_uint(cJSON_GetObjectItemCaseSensitive(s, "bytes"), 9007199254740992.0, &by) != 0 ||
        !cJSON_IsString(fi) || !cJSON_IsString(hx) || !fi->valuestring[0] ||
        strlen(fi->valuestring) >= sizeof e->file || strchr(fi->valuestring, '/') ||
        !strcmp(fi->valuestring, "..") || !strcmp(fi->valuestring, ".")) {
        snprintf(err, errlen,
                 "%s: shards[%d]: needs layer, tp_rank, step (integers >= 0), file (a plain name), bytes "
                 "(an integer <= 2^53), xxh64",
                 path, i);
        return -1;
    }
    char *end = NULL;
    errno = 0;
    e->xxh64 = strtoull(hx->valuestring, &end, 16);
    if (errno || !end || *end || strlen(hx->valuestring) != 16 || !isxdigit((unsigned char)hx->valuestring[0])) {
        snprintf(err, errlen, "%s: shards[%d].xxh64: expected 16 hex digits", path, i);
        return -1;
    }
    if (dg && tp >= deg) {
        snprintf(err, errlen, "%s: shards[%d]: tp_rank %d is not below tp_degree %d", path, i, (int)tp, (int)deg);
        return -1;
    }
    e->layer = (int)ly;
    e->tp_rank = (int)tp;
    e->tp_degree = (int)deg;
    e->step = (int)st;
    e->bytes = (uint64_t)by;
    snprintf(e->file, sizeof e->file, "%s", fi->valuestring);
    return 0;
}

/* the checks of the whole document before its entries: format, version, own checksum */
static int check_document(const char *path, const char *txt, size_t len, const cJSON *o, char *err,
                          size_t errlen) {
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(o, "format"),
                *ver = cJSON_GetObjectItemCaseSensitive(o, "version"),
                *sum = cJSON_GetObjectItemCaseSensitive(o, "manifest_xxh64"),
                *a = cJSON_GetObjectItemCaseSensitive(o, "shards");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "autohet-manifest") || !cJSON_IsArray(a)) {
        snprintf(err, errlen, "%s: not an autohet manifest (format, shards)", path);
        return -1;
    }
    if (!cJSON_IsNumber(ver) || ver->valuedouble != AH_MANIFEST_VERSION) {
        snprintf(err, errlen, "%s: manifest version %g, this autohet reads version %d", path,
                 cJSON_IsNumber(ver) ? ver->valuedouble : -1.0, AH_MANIFEST_VERSION);
        return -1;
    }
    long at = checksum_digits(txt, len);
    char *end = NULL;
    uint64_t want = 0;
    if (cJSON_IsString(sum) && strlen(sum->valuestring) == 16)
        want = strtoull(sum->valuestring, &end, 16);
    if (at < 0 || !end || *end || memcmp(txt + at, sum->valuestring, 16) != 0) {
        snprintf(err, errlen, "%s: no manifest_xxh64 checksum (16 hex digits, the last member)", path);
        return -1;
    }
    uint64_t got = manifest_hash(txt, len, at);
    if (got != want) {
        snprintf(err, errlen, "%s: manifest checksum mismatch (xxh64 %016" PRIx64 ", the file says %016" PRIx64 ")",
                 path, got, want);
        return -1;
    }
    return 0;
}

int ah_manifest_load(const char *dir, ah_manifest *m, char *err, size_t errlen) {
    char path[4096];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    ah_manifest_init(m, "", "");
    if (access(path, F_OK) != 0)
        return 0; /* nothing held in this tier yet */
    size_t len = 0;
    char *txt = ah_read_text_file(path, AH_MANIFEST_MAX_BYTES, &len, err, errlen);
    if (!txt)
        return -1;
    cJSON *o = ah_json_parse_text(path, txt, len, 1, NULL, err, errlen);
    if (!o || check_document(path, txt, len, o, err, errlen) != 0) {
        cJSON_Delete(o);
        free(txt);
        return -1;
    }
    free(txt);
    const cJSON *node = cJSON_GetObjectItemCaseSensitive(o, "node"),
                *tier = cJSON_GetObjectItemCaseSensitive(o, "tier"),
                *a = cJSON_GetObjectItemCaseSensitive(o, "shards");
    ah_manifest_init(m, cJSON_IsString(node) ? node->valuestring : "",
                     cJSON_IsString(tier) ? tier->valuestring : "");
    const cJSON *s;
    int i = 0;
    cJSON_ArrayForEach(s, a) {
        ah_manifest_entry e;
        if (parse_entry(path, i, s, &e, err, errlen) != 0) {
            ah_manifest_free(m);
            cJSON_Delete(o);
            return -1;
        }
        ah_manifest_put(m, &e);
        i++;
    }
    cJSON_Delete(o);
    return 0;
}

int ah_manifest_load_or_set_aside(const char *dir, ah_manifest *m, char *err, size_t errlen) {
    if (ah_manifest_load(dir, m, err, errlen) == 0)
        return 0;
    char path[4096], aside[4200];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    snprintf(aside, sizeof aside, "%s.corrupt", path);
    if (rename(path, aside) != 0) {
        size_t l = strlen(err);
        snprintf(err + l, errlen - l, "; cannot set it aside (%s)", strerror(errno));
        return -1;
    }
    fprintf(stderr, "autohet: %s; set aside as %s, the tier starts a new manifest\n", err, aside);
    ah_manifest_init(m, "", "");
    return 1;
}

/* shard file names as the engine writes them (ah_ckpt_shard_name):
 * L<layer>-tp<r>-s<step>.safetensors, L<layer>-tp<r>of<degree>-s<step>.safetensors */
static int is_shard_name(const char *n) {
    int layer, tp, deg, step, end = 0;
    if (sscanf(n, "L%d-tp%d-s%d.safetensors%n", &layer, &tp, &step, &end) == 3 && end > 0 && n[end] == 0)
        return 1;
    end = 0;
    return sscanf(n, "L%d-tp%dof%d-s%d.safetensors%n", &layer, &tp, &deg, &step, &end) == 4 && end > 0 &&
           n[end] == 0;
}

/* Is process pid gone? A SIGKILLed writer whose parent died too can stay a
 * zombie for a while (the machine's init may reap late): that counts as gone. */
static int process_gone(long pid) {
    if (kill((pid_t)pid, 0) != 0)
        return errno == ESRCH;
    char state;
    return ah_proc_stat(pid, &state, NULL) == 0 && (state == 'Z' || state == 'X');
}

/* a temporary file of ah_write_file_atomic (NAME.tmp.PID); *pid its writer */
static int is_tmp(const char *n, long *pid) {
    const char *t = strstr(n, ".tmp.");
    if (!t)
        return 0;
    char *end = NULL;
    *pid = strtol(t + 5, &end, 10);
    return end && !*end && *pid > 0 && end != t + 5;
}

/* .pin-PID-FILE: a background persist's hard link to a shard it copies (ckpt_persist.c) */
static int is_pin(const char *n, long *pid) {
    if (strncmp(n, ".pin-", 5))
        return 0;
    char *end = NULL;
    *pid = strtol(n + 5, &end, 10);
    return end && *end == '-' && *pid > 0;
}

int ah_ckpt_sweep(const char *dir, const ah_manifest *keep, int all_tmp) {
    DIR *d = opendir(dir);
    int removed = 0;
    for (struct dirent *de; d && (de = readdir(d));) {
        int unlisted = 0;
        if (keep && is_shard_name(de->d_name)) {
            unlisted = 1;
            for (int i = 0; i < keep->n && unlisted; i++)
                unlisted = strcmp(keep->e[i].file, de->d_name) != 0;
        }
        long pid = 0;
        int stale = (is_tmp(de->d_name, &pid) && (all_tmp || process_gone(pid))) ||
                    (is_pin(de->d_name, &pid) && process_gone(pid));
        if (!unlisted && !stale)
            continue;
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (unlink(p) == 0)
            removed++;
    }
    if (d)
        closedir(d);
    return removed;
}

int ah_ckpt_restore_layer(const char *const *dirs, int n_dirs, int layer, int tp_rank, int step,
                          ah_ckpt_loaded **out, int *n, char *err, size_t errlen) {
    return ah_ckpt_restore_shard(dirs, n_dirs, layer, tp_rank, 0, step, out, n, err, errlen);
}

int ah_ckpt_restore_shard(const char *const *dirs, int n_dirs, int layer, int tp_rank, int tp_degree, int step,
                          ah_ckpt_loaded **out, int *n, char *err, size_t errlen) {
    char why[1024] = "", note[1100] = "", of[32] = "";
    if (tp_degree > 0)
        snprintf(of, sizeof of, " of %d", tp_degree);
    for (int d = 0; d < n_dirs; d++) {
        ah_manifest m;
        char e2[512];
        if (ah_manifest_load(dirs[d], &m, e2, sizeof e2) != 0) {
            fprintf(stderr, "autohet: %s; trying the next tier\n", e2);
            continue;
        }
        const ah_manifest_entry *e = ah_manifest_find_shard(&m, layer, tp_rank, tp_degree, step);
        if (!e && !note[0]) { /* the nearest tier's reason, when no copy was read */
            snprintf(e2, sizeof e2, "%s/manifest.json", dirs[d]);
            snprintf(note, sizeof note, access(e2, F_OK) != 0 ? "; %s: no such file (the tier's list of shards)"
                                                               : "; %s lists no such shard",
                     e2);
        }
        if (e) {
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
    snprintf(err, errlen, "layer %d (TP rank %d%s) at step %d: no tier holds a good copy%s%s", layer, tp_rank, of,
             step, why[0] ? "; last error: " : "", why[0] ? why : note);
    return -1;
}
