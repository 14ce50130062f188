/* GPU device catalog with alias lookup and JSON overrides. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "autohet/device.h"
#include "util/json_file.h"
#include "util/json_read.h"

#define MAX_FILE_BYTES (16u << 20)

/* Public vendor datasheet figures: dense (no structured sparsity) bf16/fp16
 * tensor-core peak TFLOP/s, memory GiB, memory GB/s, per-GPU intra-node link
 * GB/s in one direction (NVLink, or PCIe for the cards without it), and a
 * typical per-node NIC in Gbit/s. H800 is the export H100 with NVLink cut to
 * 400 GB/s bidirectional; H20 trades compute for HBM3 capacity/bandwidth.
 * sm_count (streaming multiprocessors) and fp32_tflops (dense fp32 GEMM peak:
 * TF32 tensor cores on Ampere and later, CUDA cores on Volta / Turing) are
 * datasheet figures too.
 * efficiency is the fraction of peak a GEMM reaches with full waves of full
 * tiles, fitted per architecture to the Sailor profiles (bench/calib_bench.sh,
 * docs/calibration.md): Volta (V100), Turing (RTX-2080 Ti, Titan-RTX; T4 shares
 * it), GA100 (A100) and GA102 (RTX-3090; A10 shares it). Architectures without
 * a measured profile (Hopper, Ada) get the median of the fitted ones, the same
 * rule the leave-one-type-out validation applies to a held-out architecture.
 * slowdown (1.0) is a model default, not datasheet data. */
#define EFF_VOLTA 0.940
#define EFF_TURING 1.000
#define EFF_GA100 0.762
#define EFF_GA102 1.000
#define EFF_UNSEEN 0.970
/* The last three entries are CPU "devices" for the training engine on one
 * machine: one MPI rank on this machine's cores. Peak is a nominal figure
 * (autohet train measures the real sgemm peak); cpu-half/cpu-quarter are
 * emulated slower devices:
 * the engine waits (slowdown - 1) x the measured time of each compute op.
 * No SMs: costed by the plain roofline at efficiency 0.5. */
#define BUILTIN_DEVICES \
    {"A100-40G", 312, 40, 1555, 300, 1600, EFF_GA100, 1.0, 108, 156},  \
    {"A100-80G", 312, 80, 2039, 300, 1600, EFF_GA100, 1.0, 108, 156},  \
    {"H100-SXM", 989, 80, 3350, 450, 3200, EFF_UNSEEN, 1.0, 132, 495}, \
    {"H800", 989, 80, 3350, 200, 3200, EFF_UNSEEN, 1.0, 132, 495},     \
    {"H20", 148, 96, 4000, 450, 3200, EFF_UNSEEN, 1.0, 78, 74},        \
    {"V100-16G", 125, 16, 900, 150, 100, EFF_VOLTA, 1.0, 80, 15.7},    \
    {"V100-32G", 125, 32, 900, 150, 100, EFF_VOLTA, 1.0, 80, 15.7},    \
    {"L40S", 362, 48, 864, 25, 400, EFF_UNSEEN, 1.0, 142, 183},        \
    {"RTX-4090", 165, 24, 1008, 25, 100, EFF_UNSEEN, 1.0, 128, 82.6},  \
    {"A10", 125, 24, 600, 25, 100, EFF_GA102, 1.0, 72, 62.5},          \
    {"T4", 65, 16, 320, 12, 50, EFF_TURING, 1.0, 40, 8.1},             \
    {"RTX-3090", 71, 24, 936, 25, 100, EFF_GA102, 1.0, 82, 35.6},      \
    {"Titan-RTX", 130, 24, 672, 12, 100, EFF_TURING, 1.0, 72, 16.3},   \
    {"RTX-2080", 40, 8, 448, 12, 100, EFF_TURING, 1.0, 46, 10.6},      \
    {"RTX-2080Ti", 54, 11, 616, 12, 100, EFF_TURING, 1.0, 68, 13.4},   \
    {"cpu", 0.1, 4, 20, 10, 80, 0.5, 1.0, 0, 0},                       \
    {"cpu-half", 0.1, 4, 20, 10, 80, 0.5, 2.0, 0, 0},                  \
    {"cpu-quarter", 0.1, 4, 20, 10, 80, 0.5, 4.0, 0, 0},

/* The table is written once: the count is the size of the same list. */
static const ah_device_catalog builtin = {
    .n = (int)(sizeof((const ah_device[]){BUILTIN_DEVICES}) / sizeof(ah_device)),
    .dev = {BUILTIN_DEVICES},
};

/* Short names that the generic normalisation in key_of() cannot derive.
 * Both sides are normalised keys (upper case, no separators). */
static const struct {
    const char *alias, *key;
} aliases[] = {
    {"A100", "A10040G"}, {"H100", "H100SXM"}, {"H10080G", "H100SXM"}, {"H100SXM5", "H100SXM"},
    {"V100", "V10016G"}, {"4090", "RTX4090"}, {"3090", "RTX3090"},    {"2080", "RTX2080"}, {"2080TI", "RTX2080TI"},
};

const ah_device_catalog *ah_device_catalog_builtin(void) {
    return &builtin;
}

/* Normalised lookup key: upper case with '-', '_', ' ' and '.' dropped, a
 * leading "NVIDIA" dropped, and "...GB" shortened to "...G" after a digit
 * (so "A100_40GB" == "a100-40g"). Returns 0 if the name does not fit. */
static int key_of(const char *name, char *key, size_t n) {
    size_t len = 0;
    for (const char *p = name; *p != '\0'; p++) {
        if (*p == '-' || *p == '_' || *p == ' ' || *p == '.')
            continue;
        if (len + 1 >= n)
            return 0;
        key[len++] = (char)toupper((unsigned char)*p);
    }
    key[len] = '\0';
    if (len > 6 && memcmp(key, "NVIDIA", 6) == 0) {
        memmove(key, key + 6, len - 6 + 1);
        len -= 6;
    }
    if (len >= 3 && key[len - 1] == 'B' && key[len - 2] == 'G' && isdigit((unsigned char)key[len - 3]))
        key[--len] = '\0';
    return len > 0;
}

/* Index of the device whose normalised name is key, or -1. */
static int find_exact_key(const ah_device_catalog *cat, const char *key) {
    char k[64];
    for (int i = 0; i < cat->n; i++)
        if (key_of(cat->dev[i].name, k, sizeof k) && strcmp(k, key) == 0)
            return i;
    return -1;
}

/* Index of the device a name (or an alias) denotes, or -1. */
static int find_index(const ah_device_catalog *cat, const char *name) {
    char key[64];
    if (name == NULL || !key_of(name, key, sizeof key - 1))
        return -1;
    int i = find_exact_key(cat, key);
    if (i >= 0)
        return i;
    /* "A100-40" -> "A100-40G", "V100-16" -> "V100-16G". */
    size_t len = strlen(key);
    if (isdigit((unsigned char)key[len - 1])) {
        key[len] = 'G';
        key[len + 1] = '\0';
        if ((i = find_exact_key(cat, key)) >= 0)
            return i;
        key[len] = '\0';
    }
    for (size_t a = 0; a < sizeof aliases / sizeof aliases[0]; a++)
        if (strcmp(key, aliases[a].alias) == 0)
            return find_exact_key(cat, aliases[a].key);
    return -1;
}

const ah_device *ah_device_find(const ah_device_catalog *cat, const char *name) {
    int i = cat != NULL ? find_index(cat, name) : -1;
    return i >= 0 ? &cat->dev[i] : NULL;
}

/* ----------------------------------------------------------- overrides */

typedef struct {
    const char *key;
    size_t offset;
    int required_for_new; /* new devices need the core figures */
    int fraction;         /* must lie in (0, 1] */
} num_field;

static const num_field num_fields[] = {
    {"peak_tflops", offsetof(ah_device, peak_tflops), 1, 0},
    {"mem_gib", offsetof(ah_device, mem_gib), 1, 0},
    {"mem_bw_gbs", offsetof(ah_device, mem_bw_gbs), 1, 0},
    {"intra_bw_gbs", offsetof(ah_device, intra_bw_gbs), 0, 0},
    {"nic_gbit", offsetof(ah_device, nic_gbit), 0, 0},
    {"efficiency", offsetof(ah_device, efficiency), 0, 1},
    {"slowdown", offsetof(ah_device, slowdown), 0, 0},
    {"sm_count", offsetof(ah_device, sm_count), 0, 0},
    {"fp32_tflops", offsetof(ah_device, fp32_tflops), 0, 0},
};
#define N_NUM_FIELDS (sizeof num_fields / sizeof num_fields[0])

/* Defaults for figures a new device may omit: PCIe 4.0 x16, a 100 Gbit/s NIC,
 * no SM count (so the plain roofline at efficiency 0.5 until one is given). */
static const ah_device new_device_defaults = {"", 0, 0, 0, 25, 100, 0.5, 1.0, 0, 0};

static int valid_device_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n >= sizeof(((ah_device *)0)->name))
        return 0;
    /* No ',', '@', ':' so the name can appear in --cluster shorthand. */
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '-' && *s != '_' && *s != '.')
            return 0;
    return 1;
}

static int check_known_fields(const ah_err_ctx *cx, const cJSON *entry, int idx) {
    char ep[AH_JPATH_LEN];
    for (const cJSON *it = entry->child; it != NULL; it = it->next) {
        int known = strcmp(it->string, "name") == 0 || it->string[0] == '_';
        for (size_t f = 0; f < N_NUM_FIELDS && !known; f++)
            known = strcmp(it->string, num_fields[f].key) == 0;
        if (!known)
            return ah_jfail(cx, ah_jpath_item(ep, "devices", idx, NULL), "unknown field '%s'", it->string);
    }
    return 0;
}

/* Applies one devices[idx] entry to the scratch catalog *cat; entry_of[d]
 * is the entry that named catalog device d (-1: none yet). */
static int apply_entry(const ah_err_ctx *cx, const cJSON *entry, int idx, ah_device_catalog *cat, int *entry_of) {
    char ep[AH_JPATH_LEN];
    if (!cJSON_IsObject(entry))
        return ah_jfail(cx, ah_jpath_item(ep, "devices", idx, NULL), "must be an object");
    if (check_known_fields(cx, entry, idx))
        return -1;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(entry, "name");
    if (name == NULL)
        return ah_jfail(cx, ah_jpath_item(ep, "devices", idx, NULL), "missing field 'name'");
    if (!cJSON_IsString(name) || !valid_device_name(name->valuestring))
        return ah_jfail(cx, ah_jpath_item(ep, "devices", idx, "name"),
                        "must be 1-31 letters, digits, '-', '_' or '.'");

    ah_device dev;
    int at = find_index(cat, name->valuestring);
    /* A second entry would silently replace the first one's figures. */
    if (at >= 0 && entry_of[at] >= 0)
        return ah_jfail(cx, ah_jpath_item(ep, "devices", idx, "name"),
                        "device '%s' given twice (also devices[%d]%s%s%s): give each device once", cat->dev[at].name,
                        entry_of[at], strcmp(name->valuestring, cat->dev[at].name) ? "; '" : "",
                        strcmp(name->valuestring, cat->dev[at].name) ? name->valuestring : "",
                        strcmp(name->valuestring, cat->dev[at].name) ? "' is that device" : "");
    ah_device *existing = at >= 0 ? &cat->dev[at] : NULL;
    if (existing != NULL) {
        dev = *existing;
    } else {
        dev = new_device_defaults;
        snprintf(dev.name, sizeof dev.name, "%s", name->valuestring);
    }
    for (size_t f = 0; f < N_NUM_FIELDS; f++) {
        const num_field *nf = &num_fields[f];
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(entry, nf->key);
        if (it == NULL) {
            if (existing == NULL && nf->required_for_new)
                return ah_jfail(cx, ah_jpath_item(ep, "devices", idx, nf->key),
                                "is required for new device '%s'", dev.name);
            continue;
        }
        double v = cJSON_IsNumber(it) ? it->valuedouble : -1.0;
        if (nf->fraction && !(v > 0.0 && v <= 1.0))
            return ah_jfail(cx, ah_jpath_item(ep, "devices", idx, nf->key), "must be a number in (0, 1]");
        if (!(v > 0.0 && v < 1e12))
            return ah_jfail(cx, ah_jpath_item(ep, "devices", idx, nf->key), "must be a positive number");
        *(double *)((char *)&dev + nf->offset) = v;
    }
    if (existing != NULL) {
        *existing = dev;
    } else {
        if (cat->n >= AH_MAX_DEVICES)
            return ah_jfail(cx, ah_jpath_item(ep, "devices", idx, NULL),
                            "catalog is full (%d devices at most)", AH_MAX_DEVICES);
        at = cat->n;
        cat->dev[cat->n++] = dev;
    }
    entry_of[at] = idx;
    return 0;
}

int ah_device_load_overrides(ah_device_catalog *cat, const char *path, char *err, size_t errlen) {
    ah_err_ctx cx = {path ? path : "(null)", err, errlen};
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (path == NULL)
        return ah_fail(&cx, "no file given");
    if (cat == NULL)
        return ah_fail(&cx, "no catalog given");
    cJSON *root = ah_json_parse_file(path, MAX_FILE_BYTES, 1, err, errlen);
    if (root == NULL)
        return -1;
    /* Work on a copy so a bad entry leaves the catalog untouched. */
    ah_device_catalog scratch = *cat;
    int rc = 0;
    const cJSON *devices = cJSON_GetObjectItemCaseSensitive(root, "devices");
    if (devices == NULL)
        rc = ah_fail(&cx, "missing field 'devices'");
    else if (!cJSON_IsArray(devices))
        rc = ah_fail(&cx, "field 'devices' must be an array");
    for (const cJSON *it = root->child; rc == 0 && it; it = it->next) /* a typo is not a silent no-op */
        if (strcmp(it->string, "devices") != 0 && it->string[0] != '_') /* "_comment" */
            rc = ah_fail(&cx, "unknown field '%s' (a devices file has only \"devices\")", it->string);
    int idx = 0, entry_of[AH_MAX_DEVICES];
    for (int d = 0; d < AH_MAX_DEVICES; d++)
        entry_of[d] = -1;
    for (const cJSON *e = devices ? devices->child : NULL; rc == 0 && e != NULL; e = e->next)
        rc = apply_entry(&cx, e, idx++, &scratch, entry_of);
    if (rc == 0)
        *cat = scratch;
    cJSON_Delete(root);
    return rc;
}
