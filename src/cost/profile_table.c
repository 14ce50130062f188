/* Measured cost tables: storage, lookup, the builder, the Sailor directory
 * importer and the autohet profile JSON reader/writer
 * (docs/profile-format.md).
 *
 * A table holds, per device, entries keyed by (micro-batch, TP degree); each
 * entry has one ah_layer_cost per layer (0 = embedding, 1..N = blocks,
 * N+1 = head), the same layer count in every entry. Lookups return the stored
 * times multiplied by dev->slowdown; recomputation settings do not change
 * them (the times are used as measured). */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "autohet/device.h"
#include "autohet/model.h"
#include "autohet/profile.h"
#include "autohet/profile_table.h"
#include "cost/profile_internal.h"
#include "util/atomic_file.h"
#include "util/json_file.h"
#include "util/json_read.h"
#include "util/num_text.h"

/* The Sailor profiles were measured at this sequence length. */
#define AH_SAILOR_SEQ 2048
#define AH_PROFILE_FORMAT "autohet-profile"
#define AH_PROFILE_VERSION 1
#define AH_MAX_KEY_INT 1000000
#define AH_MAX_PROFILE_BYTES ((size_t)256 << 20)

/* ------------------------------------------------------------------ storage */

static void entry_init_unset(ah_layer_cost *l, int n) {
    for (int i = 0; i < n; i++) {
        l[i].fwd_s = NAN;
        l[i].bwd_s = NAN;
        l[i].update_s = NAN;
    }
}

void ah_ptab_release_(ah_profile *p) {
    for (int i = 0; i < p->n_devs; i++) {
        for (int j = 0; j < p->devs[i].n_entries; j++)
            free(p->devs[i].entries[j].layers);
        free(p->devs[i].entries);
    }
    free(p->devs);
    p->devs = NULL;
    p->n_devs = p->cap_devs = 0;
    for (int i = 0; i < p->n_skipped; i++)
        free(p->skipped[i]);
    free(p->skipped);
    p->skipped = NULL;
    p->n_skipped = 0;
}

/* Canonical name for a device name: the catalog's if it knows it, else the
 * name itself. Returns -1 if the name is empty or too long. */
static int canonical_device_name(const char *name, char out[32]) {
    if (!name || !*name)
        return -1;
    const ah_device *d = ah_device_find(ah_device_catalog_builtin(), name);
    const char *c = d ? d->name : name;
    if (strlen(c) >= 32)
        return -1;
    strcpy(out, c);
    return 0;
}

static int find_dev_by_name(const ah_profile *p, const char *name) {
    for (int i = 0; i < p->n_devs; i++)
        if (strcasecmp(p->devs[i].name, name) == 0)
            return i;
    return -1;
}

/* Device lookup for an ah_device (or a name that may be an alias). */
static int find_dev(const ah_profile *p, const char *name) {
    int i = find_dev_by_name(p, name);
    if (i >= 0)
        return i;
    const ah_device *d = ah_device_find(ah_device_catalog_builtin(), name);
    if (d && strcasecmp(d->name, name) != 0)
        return find_dev_by_name(p, d->name);
    return -1;
}

static int add_dev(ah_profile *p, const char *canonical) {
    if (p->n_devs == p->cap_devs) {
        int cap = p->cap_devs ? 2 * p->cap_devs : 4;
        ah_ptab_device *nd = realloc(p->devs, (size_t)cap * sizeof *nd);
        if (!nd)
            return -1;
        p->devs = nd;
        p->cap_devs = cap;
    }
    ah_ptab_device *d = &p->devs[p->n_devs];
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "%s", canonical);
    return p->n_devs++;
}

static int entry_cmp(int mb1, int tp1, int mb2, int tp2) {
    if (mb1 != mb2)
        return mb1 < mb2 ? -1 : 1;
    if (tp1 != tp2)
        return tp1 < tp2 ? -1 : 1;
    return 0;
}

static ah_ptab_entry *find_entry(const ah_ptab_device *d, int mb, int tp) {
    int lo = 0, hi = d->n_entries - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int c = entry_cmp(d->entries[mid].mb, d->entries[mid].tp, mb, tp);
        if (c == 0)
            return &d->entries[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return NULL;
}

/* Insert a new (mb, tp) entry with n unset layers; the caller checked that
 * it does not exist yet. */
static ah_ptab_entry *add_entry(ah_ptab_device *d, int mb, int tp, int n) {
    if (d->n_entries == d->cap_entries) {
        int cap = d->cap_entries ? 2 * d->cap_entries : 8;
        ah_ptab_entry *ne = realloc(d->entries, (size_t)cap * sizeof *ne);
        if (!ne)
            return NULL;
        d->entries = ne;
        d->cap_entries = cap;
    }
    ah_layer_cost *layers = malloc((size_t)n * sizeof *layers);
    if (!layers)
        return NULL;
    entry_init_unset(layers, n);
    int pos = 0;
    while (pos < d->n_entries && entry_cmp(d->entries[pos].mb, d->entries[pos].tp, mb, tp) < 0)
        pos++;
    memmove(&d->entries[pos + 1], &d->entries[pos], (size_t)(d->n_entries - pos) * sizeof *d->entries);
    d->entries[pos].mb = mb;
    d->entries[pos].tp = tp;
    d->entries[pos].layers = layers;
    d->n_entries++;
    return &d->entries[pos];
}

static int layer_is_set(const ah_layer_cost *c) {
    return !isnan(c->fwd_s);
}

static int entry_complete(const ah_ptab_entry *e, int n) {
    for (int i = 0; i < n; i++)
        if (!layer_is_set(&e->layers[i]))
            return 0;
    return 1;
}

static int cost_valid(ah_layer_cost c) {
    return isfinite(c.fwd_s) && isfinite(c.bwd_s) && isfinite(c.update_s) && c.fwd_s >= 0 && c.bwd_s >= 0 &&
           c.update_s >= 0;
}

/* Append to a bounded buffer, ending in "..." when it does not fit. */
typedef struct {
    char *buf;
    size_t cap, len;
    int full;
} ah_sbuf;

static void sb_add(ah_sbuf *b, const char *s) {
    if (b->full)
        return;
    size_t l = strlen(s);
    if (b->len + l + 4 >= b->cap) {
        if (b->len + 4 < b->cap) {
            memcpy(b->buf + b->len, "...", 4);
            b->len += 3;
        }
        b->full = 1;
        return;
    }
    memcpy(b->buf + b->len, s, l + 1);
    b->len += l;
}

static void list_devices(const ah_profile *p, char *buf, size_t cap) {
    ah_sbuf b = {buf, cap, 0, 0};
    buf[0] = '\0';
    for (int i = 0; i < p->n_devs; i++) {
        if (i)
            sb_add(&b, ", ");
        sb_add(&b, p->devs[i].name);
    }
}

static void list_entries(const ah_ptab_device *d, char *buf, size_t cap) {
    ah_sbuf b = {buf, cap, 0, 0};
    buf[0] = '\0';
    for (int i = 0; i < d->n_entries; i++) {
        char one[32];
        snprintf(one, sizeof one, "%s%d/%d", i ? ", " : "", d->entries[i].mb, d->entries[i].tp);
        sb_add(&b, one);
    }
}

/* ------------------------------------------------------------------ lookup */

int ah_table_layer_cost_(const ah_profile *p, const ah_model_config *m, const ah_train_settings *ts,
                         const ah_device *dev, int layer, int tp, int mb, ah_layer_cost *out, char *err,
                         size_t errlen) {
    char list[512];
    int di = find_dev(p, dev->name);
    if (di < 0) {
        list_devices(p, list, sizeof list);
        ah_cost_err_(err, errlen, "measured profile has no data for GPU '%s' (has: %s)", dev->name, list);
        return -1;
    }
    const ah_ptab_device *d = &p->devs[di];
    const ah_ptab_entry *e = find_entry(d, mb, tp);
    if (!e) {
        list_entries(d, list, sizeof list);
        ah_cost_err_(err, errlen, "measured profile has no data for GPU '%s' at mb=%d, tp=%d (has mb/tp: %s)",
                     d->name, mb, tp, list);
        return -1;
    }
    int n = ah_model_num_layers(m);
    if (n != p->n_layers) {
        ah_cost_err_(err, errlen,
                     "measured profile has %d layers, model %s has %d (%d blocks + embedding + head)",
                     p->n_layers, m->name, n, n - 2);
        return -1;
    }
    if (ts->seq != p->seq) {
        ah_cost_err_(err, errlen, "measured profile was taken at seq %d, training uses seq %d", p->seq,
                     ts->seq);
        return -1;
    }
    const ah_layer_cost *c = &e->layers[layer];
    if (!layer_is_set(c)) {
        ah_cost_err_(err, errlen, "measured profile has no cost for layer %d of GPU '%s' at mb=%d, tp=%d",
                     layer, d->name, mb, tp);
        return -1;
    }
    out->tp_comm_fwd_s = 0.0;
    out->tp_comm_bwd_s = 0.0;
    out->fwd_s = c->fwd_s * dev->slowdown;
    out->bwd_s = c->bwd_s * dev->slowdown;
    out->update_s = c->update_s * dev->slowdown;
    return 0;
}

int ah_table_has_(const ah_profile *p, const ah_model_config *m, const ah_device *dev, int tp, int mb) {
    int di = find_dev(p, dev->name);
    if (di < 0)
        return 0;
    const ah_ptab_entry *e = find_entry(&p->devs[di], mb, tp);
    if (!e)
        return 0;
    if (ah_model_num_layers(m) != p->n_layers)
        return 0;
    return entry_complete(e, p->n_layers);
}

int ah_table_has_device_(const ah_profile *p, const ah_model_config *m, const ah_device *dev) {
    int di = find_dev(p, dev->name);
    if (di < 0 || ah_model_num_layers(m) != p->n_layers)
        return 0;
    for (int k = 0; k < p->devs[di].n_entries; k++)
        if (entry_complete(&p->devs[di].entries[k], p->n_layers))
            return 1;
    return 0;
}

/* ------------------------------------------------------------------ builder */

ah_profile *ah_profile_table_new(const char *model, int seq) {
    if (seq < 1)
        return NULL;
    ah_profile *p = ah_profile_alloc_(AH_PROFILE_TABLE, "measured:(in-memory)");
    if (!p)
        return NULL;
    p->seq = seq;
    if (model && *model) {
        char *s = strdup(model);
        if (!s) {
            ah_profile_free(p);
            return NULL;
        }
        free(p->model);
        p->model = s;
    }
    return p;
}

int ah_profile_table_set_origin(ah_profile *p, const char *origin) {
    if (!p || p->kind != AH_PROFILE_TABLE)
        return -1;
    char *s = strdup(origin ? origin : "");
    if (!s)
        return -1;
    free(p->origin);
    p->origin = s;
    return 0;
}

int ah_profile_table_set_precision(ah_profile *p, const char *precision) {
    if (!p || p->kind != AH_PROFILE_TABLE)
        return -1;
    if (precision && strcmp(precision, "fp32") && strcmp(precision, "bf16"))
        return -1;
    snprintf(p->precision, sizeof p->precision, "%s", precision ? precision : "");
    return 0;
}

int ah_profile_table_set(ah_profile *p, const char *device, int mb, int tp, int layer, int n_layers,
                         ah_layer_cost c) {
    char name[32];
    if (!p || p->kind != AH_PROFILE_TABLE || mb < 1 || tp < 1 || n_layers < 1 || layer < 0 ||
        layer >= n_layers || !cost_valid(c) || canonical_device_name(device, name) != 0)
        return -1;
    if (p->n_layers != 0 && p->n_layers != n_layers)
        return -1;
    int di = find_dev_by_name(p, name);
    if (di < 0 && (di = add_dev(p, name)) < 0)
        return -1;
    ah_ptab_entry *e = find_entry(&p->devs[di], mb, tp);
    if (!e && !(e = add_entry(&p->devs[di], mb, tp, n_layers)))
        return -1;
    p->n_layers = n_layers;
    e->layers[layer] = c;
    return 0;
}

/* ------------------------------------------------------------------ inspection */

int ah_profile_is_measured(const ah_profile *p) {
    return p && p->kind == AH_PROFILE_TABLE;
}

const char *ah_profile_table_model(const ah_profile *p) {
    return ah_profile_is_measured(p) && p->model ? p->model : "";
}

const char *ah_profile_table_precision(const ah_profile *p) {
    return ah_profile_is_measured(p) ? p->precision : "";
}

const char *ah_profile_table_origin(const ah_profile *p) {
    return ah_profile_is_measured(p) && p->origin ? p->origin : "";
}

int ah_profile_table_seq(const ah_profile *p) {
    return ah_profile_is_measured(p) ? p->seq : 0;
}

int ah_profile_table_num_layers(const ah_profile *p) {
    return ah_profile_is_measured(p) ? p->n_layers : 0;
}

int ah_profile_table_num_devices(const ah_profile *p) {
    return ah_profile_is_measured(p) ? p->n_devs : 0;
}

const char *ah_profile_table_device(const ah_profile *p, int i) {
    if (!ah_profile_is_measured(p) || i < 0 || i >= p->n_devs)
        return NULL;
    return p->devs[i].name;
}

int ah_profile_table_num_entries(const ah_profile *p, int device_index) {
    if (!ah_profile_is_measured(p) || device_index < 0 || device_index >= p->n_devs)
        return 0;
    return p->devs[device_index].n_entries;
}

int ah_profile_table_entry(const ah_profile *p, int device_index, int j, int *mb, int *tp) {
    if (!ah_profile_is_measured(p) || device_index < 0 || device_index >= p->n_devs || j < 0 ||
        j >= p->devs[device_index].n_entries)
        return -1;
    if (mb)
        *mb = p->devs[device_index].entries[j].mb;
    if (tp)
        *tp = p->devs[device_index].entries[j].tp;
    return 0;
}

int ah_profile_table_get(const ah_profile *p, const char *device, int mb, int tp, int layer,
                         ah_layer_cost *out) {
    if (!ah_profile_is_measured(p) || !device || !out || layer < 0 || layer >= p->n_layers)
        return -1;
    int di = find_dev(p, device);
    if (di < 0)
        return -1;
    const ah_ptab_entry *e = find_entry(&p->devs[di], mb, tp);
    if (!e || !layer_is_set(&e->layers[layer]))
        return -1;
    *out = e->layers[layer];
    return 0;
}

int ah_profile_table_num_skipped(const ah_profile *p) {
    return ah_profile_is_measured(p) ? p->n_skipped : 0;
}

const char *ah_profile_table_skipped(const ah_profile *p, int i) {
    if (!ah_profile_is_measured(p) || i < 0 || i >= p->n_skipped)
        return NULL;
    return p->skipped[i];
}

/* ------------------------------------------------------------------ JSON input */

/* Strict decimal key: digits only, no sign, no leading zero (except "0"),
 * value in [lo, hi]. */
static int parse_key_int(const char *s, int lo, int hi, int *out) {
    if (!s || !*s || (s[0] == '0' && s[1] != '\0'))
        return -1;
    long v = 0;
    for (const char *c = s; *c; c++) {
        if (*c < '0' || *c > '9')
            return -1;
        v = v * 10 + (*c - '0');
        if (v > hi)
            return -1;
    }
    if (v < lo)
        return -1;
    *out = (int)v;
    return 0;
}

/* Load {"<mb>":{"<tp>":{"<layer>":[fwd,bwd,update]}}} into device di. */
static int load_nest(ah_profile *p, int di, const cJSON *root, const ah_err_ctx *c, const char *path) {
    char p1[AH_JPATH_LEN], p2[AH_JPATH_LEN], p3[AH_JPATH_LEN], msg[160];
    if (!cJSON_IsObject(root))
        return ah_jfail(c, path, "expected an object keyed by micro-batch size");
    if (!root->child)
        return ah_jfail(c, path, "no micro-batch entries");
    for (const cJSON *jm = root->child; jm; jm = jm->next) {
        int mb;
        ah_jpath_map_key(p1, path, jm->string);
        if (parse_key_int(jm->string, 1, AH_MAX_KEY_INT, &mb) != 0)
            return ah_jfail(c, p1, "micro-batch size must be a positive integer");
        if (!cJSON_IsObject(jm))
            return ah_jfail(c, p1, "expected an object keyed by TP degree");
        if (!jm->child)
            return ah_jfail(c, p1, "no TP-degree entries");
        for (const cJSON *jt = jm->child; jt; jt = jt->next) {
            int tp;
            ah_jpath_map_key(p2, p1, jt->string);
            if (parse_key_int(jt->string, 1, AH_MAX_KEY_INT, &tp) != 0)
                return ah_jfail(c, p2, "TP degree must be a positive integer");
            if (!cJSON_IsObject(jt))
                return ah_jfail(c, p2, "expected an object keyed by layer index");
            if (find_entry(&p->devs[di], mb, tp))
                return ah_jfail(c, p2, "duplicate entry for this micro-batch size and TP degree");
            int n = cJSON_GetArraySize(jt);
            if (n < 1)
                return ah_jfail(c, p2, "no layers");
            if (p->n_layers != 0 && n != p->n_layers) {
                snprintf(msg, sizeof msg, "%d layers, but other entries have %d", n, p->n_layers);
                return ah_jfail(c, p2, "%s", msg);
            }
            ah_ptab_entry *e = add_entry(&p->devs[di], mb, tp, n);
            if (!e)
                return ah_jfail(c, p2, "out of memory");
            p->n_layers = n;
            for (const cJSON *jl = jt->child; jl; jl = jl->next) {
                int layer;
                ah_jpath_map_key(p3, p2, jl->string);
                if (parse_key_int(jl->string, 0, AH_MAX_KEY_INT, &layer) != 0) {
                    return ah_jfail(c, p3, "layer index must be a non-negative integer");
                }
                if (layer >= n) {
                    snprintf(msg, sizeof msg, "layer index out of range: %d layers must be numbered 0..%d", n,
                             n - 1);
                    return ah_jfail(c, p3, "%s", msg);
                }
                if (layer_is_set(&e->layers[layer]))
                    return ah_jfail(c, p3, "duplicate layer index");
                if (!cJSON_IsArray(jl) || cJSON_GetArraySize(jl) != 3)
                    return ah_jfail(c, p3, "expected 3 numbers");
                double v[3];
                int k = 0;
                for (const cJSON *x = jl->child; x; x = x->next, k++) {
                    if (!cJSON_IsNumber(x))
                        return ah_jfail(c, p3, "expected 3 numbers");
                    v[k] = x->valuedouble;
                }
                ah_layer_cost lc = {.fwd_s = v[0], .bwd_s = v[1], .update_s = v[2]};
                if (!cost_valid(lc))
                    return ah_jfail(c, p3, "times must be finite and >= 0");
                e->layers[layer] = lc;
            }
        }
    }
    return 0;
}

static int add_skipped(ah_profile *p, const char *name) {
    char **ns = realloc(p->skipped, (size_t)(p->n_skipped + 1) * sizeof *ns);
    if (!ns)
        return -1;
    p->skipped = ns;
    if (!(ns[p->n_skipped] = strdup(name)))
        return -1;
    p->n_skipped++;
    return 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int has_json_suffix(const char *name) {
    size_t l = strlen(name);
    return l > 5 && strcmp(name + l - 5, ".json") == 0;
}

/* Last path component without trailing slashes. */
static void dir_basename(const char *dir, char *out, size_t cap) {
    size_t l = strlen(dir);
    while (l > 1 && dir[l - 1] == '/')
        l--;
    size_t s = l;
    while (s > 0 && dir[s - 1] != '/')
        s--;
    size_t n = l - s;
    if (n >= cap)
        n = cap - 1;
    memcpy(out, dir + s, n);
    out[n] = '\0';
}

ah_profile *ah_profile_load_sailor_dir(const char *dir, char *err, size_t errlen) {
    return ah_profile_load_sailor_dir_with(dir, ah_device_catalog_builtin(), err, errlen);
}

ah_profile *ah_profile_load_sailor_dir_with(const char *dir, const ah_device_catalog *catalog, char *err,
                                            size_t errlen) {
    if (!catalog)
        catalog = ah_device_catalog_builtin();
    if (!dir || !*dir) {
        ah_cost_err_(err, errlen, "profile: no directory given");
        return NULL;
    }
    DIR *d = opendir(dir);
    if (!d) {
        ah_cost_err_(err, errlen, "%s: %s", dir, strerror(errno));
        return NULL;
    }
    char **names = NULL;
    int n_names = 0, cap_names = 0;
    ah_profile *p = NULL;
    char *text = NULL;
    cJSON *root = NULL;
    char *fullpath = NULL;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.' || !has_json_suffix(de->d_name))
            continue;
        if (n_names == cap_names) {
            int cap = cap_names ? 2 * cap_names : 16;
            char **nn = realloc(names, (size_t)cap * sizeof *nn);
            if (!nn)
                goto oom;
            names = nn;
            cap_names = cap;
        }
        if (!(names[n_names] = strdup(de->d_name)))
            goto oom;
        n_names++;
    }
    closedir(d);
    d = NULL;
    if (n_names == 0) {
        ah_cost_err_(err, errlen, "%s: no <GPU>.json profile files in this directory", dir);
        goto fail;
    }
    qsort(names, (size_t)n_names, sizeof *names, cmp_str);

    size_t srclen = strlen("measured:") + strlen(dir) + 1;
    char *src = malloc(srclen);
    if (!src)
        goto oom;
    snprintf(src, srclen, "measured:%s", dir);
    p = ah_profile_alloc_(AH_PROFILE_TABLE, src);
    free(src);
    if (!p)
        goto oom;
    p->seq = AH_SAILOR_SEQ;
    {
        char base[256];
        dir_basename(dir, base, sizeof base);
        char *m = strdup(base);
        size_t olen = strlen("sailor:") + strlen(dir) + 1;
        char *o = malloc(olen);
        if (o)
            snprintf(o, olen, "sailor:%s", dir);
        if (!m || !o) {
            free(m);
            free(o);
            goto oom;
        }
        free(p->model);
        p->model = m;
        free(p->origin);
        p->origin = o;
    }

    for (int i = 0; i < n_names; i++) {
        const char *name = names[i];
        size_t plen = strlen(dir) + 1 + strlen(name) + 1;
        free(fullpath);
        if (!(fullpath = malloc(plen)))
            goto oom;
        snprintf(fullpath, plen, "%s/%s", dir, name);
        struct stat st;
        if (stat(fullpath, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        char stem[256];
        snprintf(stem, sizeof stem, "%.*s", (int)(strlen(name) - 5), name);
        const ah_device *dev = ah_device_find(catalog, stem);
        if (!dev || strlen(dev->name) >= sizeof p->devs[0].name) {
            if (add_skipped(p, name) != 0)
                goto oom;
            continue;
        }
        int prev = find_dev_by_name(p, dev->name);
        if (prev >= 0) {
            ah_cost_err_(err, errlen, "%s: maps to GPU %s, already loaded from %s", name, dev->name,
                         p->devs[prev].file);
            goto fail;
        }
        size_t len = 0;
        if (!(text = ah_read_text_file(fullpath, AH_MAX_PROFILE_BYTES, &len, err, errlen)))
            goto fail;
        if (!(root = ah_json_parse_text(name, text, len, 0, "invalid JSON", err, errlen)))
            goto fail;
        free(text);
        text = NULL;
        int di = add_dev(p, dev->name);
        if (di < 0)
            goto oom;
        snprintf(p->devs[di].file, sizeof p->devs[di].file, "%s", name);
        ah_err_ctx c = {name, err, errlen};
        if (load_nest(p, di, root, &c, "") != 0)
            goto fail;
        cJSON_Delete(root);
        root = NULL;
    }
    if (p->n_devs == 0) {
        char list[512];
        ah_sbuf b = {list, sizeof list, 0, 0};
        list[0] = '\0';
        for (int i = 0; i < p->n_skipped; i++) {
            if (i)
                sb_add(&b, ", ");
            sb_add(&b, p->skipped[i]);
        }
        ah_cost_err_(err, errlen, "%s: no file name maps to a known GPU (skipped: %s)", dir,
                     p->n_skipped ? list : "none");
        goto fail;
    }
    for (int i = 0; i < n_names; i++)
        free(names[i]);
    free(names);
    free(fullpath);
    return p;

oom:
    ah_cost_err_(err, errlen, "%s: out of memory", dir);
fail:
    if (d)
        closedir(d);
    for (int i = 0; i < n_names; i++)
        free(names[i]);
    free(names);
    free(fullpath);
    free(text);
    cJSON_Delete(root);
    ah_profile_free(p);
    return NULL;
}

ah_profile *ah_table_load_json_(const char *path, char *err, size_t errlen) {
    char msg[160];
    size_t len = 0;
    char *text = ah_read_text_file(path, AH_MAX_PROFILE_BYTES, &len, err, errlen);
    if (!text)
        return NULL;
    cJSON *root = ah_json_parse_text(path, text, len, 0, "invalid JSON", err, errlen);
    free(text);
    if (!root)
        return NULL;
    ah_err_ctx c = {path, err, errlen};
    ah_profile *p = NULL;
    if (!cJSON_IsObject(root)) {
        ah_jfail(&c, NULL, "expected a JSON object (autohet profile)");
        goto fail;
    }
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, AH_PROFILE_FORMAT) != 0) {
        ah_jfail(&c, "format", "expected \"" AH_PROFILE_FORMAT "\"");
        goto fail;
    }
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "version");
    if (!cJSON_IsNumber(ver)) {
        ah_jfail(&c, "version", "expected a number");
        goto fail;
    }
    if (ver->valuedouble != AH_PROFILE_VERSION) {
        snprintf(msg, sizeof msg, "unsupported version %g (this build reads %d)", ver->valuedouble,
                 AH_PROFILE_VERSION);
        ah_jfail(&c, "version", "%s", msg);
        goto fail;
    }
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsString(model)) {
        ah_jfail(&c, "model", "expected a string");
        goto fail;
    }
    const cJSON *seq = cJSON_GetObjectItemCaseSensitive(root, "seq");
    if (!cJSON_IsNumber(seq) || !(seq->valuedouble >= 1) || seq->valuedouble > INT_MAX ||
        seq->valuedouble != floor(seq->valuedouble)) {
        ah_jfail(&c, "seq", "expected a positive integer sequence length");
        goto fail;
    }
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(root, "source");
    if (src && !cJSON_IsString(src)) {
        ah_jfail(&c, "source", "expected a string");
        goto fail;
    }
    /* recorded by autohet profile; the costs are times whatever it says, so it is only validated and kept */
    const cJSON *prec = cJSON_GetObjectItemCaseSensitive(root, "precision");
    if (prec && (!cJSON_IsString(prec) || (strcmp(prec->valuestring, "fp32") && strcmp(prec->valuestring, "bf16")))) {
        ah_jfail(&c, "precision", "expected \"fp32\" or \"bf16\"");
        goto fail;
    }
    const cJSON *devs = cJSON_GetObjectItemCaseSensitive(root, "devices");
    if (!cJSON_IsObject(devs)) {
        ah_jfail(&c, "devices", "expected an object keyed by GPU name");
        goto fail;
    }
    if (!devs->child) {
        ah_jfail(&c, "devices", "no devices");
        goto fail;
    }

    {
        size_t srclen = strlen("measured:") + strlen(path) + 1;
        char *s = malloc(srclen);
        if (!s) {
            ah_jfail(&c, NULL, "out of memory");
            goto fail;
        }
        snprintf(s, srclen, "measured:%s", path);
        p = ah_profile_alloc_(AH_PROFILE_TABLE, s);
        free(s);
    }
    if (!p || ah_profile_table_set_origin(p, src ? src->valuestring : "") != 0) {
        ah_jfail(&c, NULL, "out of memory");
        goto fail;
    }
    p->seq = (int)seq->valuedouble;
    ah_profile_table_set_precision(p, prec ? prec->valuestring : NULL);
    {
        char *m = strdup(model->valuestring);
        if (!m) {
            ah_jfail(&c, NULL, "out of memory");
            goto fail;
        }
        free(p->model);
        p->model = m;
    }
    for (const cJSON *jd = devs->child; jd; jd = jd->next) {
        char dpath[AH_JPATH_LEN], canon[32];
        ah_jpath_map_key(dpath, "devices", jd->string);
        if (canonical_device_name(jd->string, canon) != 0) {
            ah_jfail(&c, dpath, "GPU name must be 1..31 characters");
            goto fail;
        }
        int prev = find_dev_by_name(p, canon);
        if (prev >= 0) {
            snprintf(msg, sizeof msg, "same GPU (%s) as an earlier entry", canon);
            ah_jfail(&c, dpath, "%s", msg);
            goto fail;
        }
        int di = add_dev(p, canon);
        if (di < 0) {
            ah_jfail(&c, NULL, "out of memory");
            goto fail;
        }
        if (load_nest(p, di, jd, &c, dpath) != 0)
            goto fail;
    }
    cJSON_Delete(root);
    return p;
fail:
    cJSON_Delete(root);
    ah_profile_free(p);
    return NULL;
}

/* ------------------------------------------------------------------ JSON output */

int ah_profile_table_write(const ah_profile *p, const char *path, char *err, size_t n) {
    if (!p || !path || !*path) {
        ah_cost_err_(err, n, "profile write: missing argument");
        return -1;
    }
    if (p->kind != AH_PROFILE_TABLE) {
        ah_cost_err_(err, n, "%s: the analytic profile has no table to write", path);
        return -1;
    }
    if (p->n_devs == 0 || p->n_layers == 0) {
        ah_cost_err_(err, n, "%s: profile has no entries to write", path);
        return -1;
    }
    for (int i = 0; i < p->n_devs; i++) {
        const ah_ptab_device *d = &p->devs[i];
        if (d->n_entries == 0) {
            ah_cost_err_(err, n, "%s: GPU %s has no entries", path, d->name);
            return -1;
        }
        for (int j = 0; j < d->n_entries; j++)
            for (int l = 0; l < p->n_layers; l++)
                if (!layer_is_set(&d->entries[j].layers[l])) {
                    ah_cost_err_(err, n, "%s: GPU %s mb=%d tp=%d: layer %d has no cost", path, d->name,
                                 d->entries[j].mb, d->entries[j].tp, l);
                    return -1;
                }
    }

    char *text = NULL;
    cJSON *root = cJSON_CreateObject();
    if (!root)
        goto oom;
    if (!cJSON_AddStringToObject(root, "format", AH_PROFILE_FORMAT) ||
        !cJSON_AddNumberToObject(root, "version", AH_PROFILE_VERSION) ||
        !cJSON_AddStringToObject(root, "model", p->model ? p->model : "") ||
        !cJSON_AddNumberToObject(root, "seq", p->seq))
        goto oom;
    if (p->origin && *p->origin && !cJSON_AddStringToObject(root, "source", p->origin))
        goto oom;
    if (*p->precision && !cJSON_AddStringToObject(root, "precision", p->precision))
        goto oom;
    cJSON *devs = cJSON_AddObjectToObject(root, "devices");
    if (!devs)
        goto oom;
    for (int i = 0; i < p->n_devs; i++) {
        const ah_ptab_device *d = &p->devs[i];
        cJSON *jd = cJSON_AddObjectToObject(devs, d->name);
        if (!jd)
            goto oom;
        cJSON *jm = NULL;
        for (int j = 0; j < d->n_entries; j++) {
            const ah_ptab_entry *e = &d->entries[j];
            char key[16];
            if (j == 0 || e->mb != d->entries[j - 1].mb) {
                snprintf(key, sizeof key, "%d", e->mb);
                if (!(jm = cJSON_AddObjectToObject(jd, key)))
                    goto oom;
            }
            snprintf(key, sizeof key, "%d", e->tp);
            cJSON *jt = cJSON_AddObjectToObject(jm, key);
            if (!jt)
                goto oom;
            for (int l = 0; l < p->n_layers; l++) {
                const double v[3] = {e->layers[l].fwd_s, e->layers[l].bwd_s, e->layers[l].update_s};
                cJSON *arr = cJSON_CreateArray();
                if (!arr)
                    goto oom;
                for (int k = 0; k < 3; k++) {
                    char num[AH_NUM_EXACT_LEN];
                    ah_num_exact(num, v[k]);
                    cJSON *x = cJSON_CreateRaw(num);
                    if (!x || !cJSON_AddItemToArray(arr, x)) {
                        cJSON_Delete(x);
                        cJSON_Delete(arr);
                        goto oom;
                    }
                }
                snprintf(key, sizeof key, "%d", l);
                if (!cJSON_AddItemToObject(jt, key, arr)) {
                    cJSON_Delete(arr);
                    goto oom;
                }
            }
        }
    }
    text = cJSON_Print(root);
    cJSON_Delete(root);
    root = NULL;
    if (!text)
        goto oom;

    int rc = ah_write_text_output(path, text, err, n);
    free(text);
    return rc;
oom:
    cJSON_Delete(root);
    free(text);
    ah_cost_err_(err, n, "%s: out of memory", path);
    return -1;
}
