/* safetensors shards: atomic write, verified read (include/autohet/ckpt.h).
 *
 * safetensors layout: 8-byte little-endian header length N, N bytes of JSON
 * {"name": {"dtype": "F32", "shape": [...], "data_offsets": [b, e]}, ...,
 *  "__metadata__": {"k": "v"}}, padded with spaces to a multiple of 8, then the
 * tensor bytes; offsets are relative to the start of the data. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cjson/cJSON.h>

#include "autohet/ckpt.h"
#include "util/atomic_file.h"
#include "util/errors.h"
#include "util/json_file.h"

int ah_ckpt_write_shard(const char *path, const ah_ckpt_tensor *t, int n, const char *const (*meta)[2],
                        int n_meta, uint64_t *bytes, uint64_t *xxh64, char *err, size_t errlen) {
    cJSON *h = cJSON_CreateObject();
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        size_t cnt = 1;
        cJSON *d = cJSON_AddObjectToObject(h, t[i].name), *sh = cJSON_AddArrayToObject(d, "shape");
        cJSON_AddStringToObject(d, "dtype", "F32");
        for (int k = 0; k < t[i].ndim; k++) {
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t[i].shape[k]));
            cnt *= (size_t)t[i].shape[k];
        }
        cJSON *o = cJSON_AddArrayToObject(d, "data_offsets");
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)off));
        off += cnt * sizeof(float);
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)off));
    }
    if (n_meta > 0) {
        cJSON *m = cJSON_AddObjectToObject(h, "__metadata__");
        for (int i = 0; i < n_meta; i++)
            cJSON_AddStringToObject(m, meta[i][0], meta[i][1]);
    }
    char *js = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    size_t hl = strlen(js), padded = (hl + 7) / 8 * 8, total = 8 + padded + off;
    unsigned char *buf = ah_xcalloc(8 + padded, 1); /* the header; tensors are written from where they live */
    for (int k = 0; k < 8; k++)
        buf[k] = (unsigned char)((uint64_t)padded >> (8 * k));
    memcpy(buf + 8, js, hl);
    memset(buf + 8 + hl, ' ', padded - hl);
    free(js);
    const void **parts = ah_xcalloc((size_t)n + 1, sizeof(void *));
    size_t *sizes = ah_xcalloc((size_t)n + 1, sizeof(size_t));
    XXH64_state_t *hs = XXH64_createState();
    if (!hs)
        abort();
    XXH64_reset(hs, 0);
    parts[0] = buf;
    sizes[0] = 8 + padded;
    XXH64_update(hs, buf, sizes[0]);
    for (int i = 0; i < n; i++) {
        size_t cnt = 1;
        for (int k = 0; k < t[i].ndim; k++)
            cnt *= (size_t)t[i].shape[k];
        parts[i + 1] = t[i].data; /* x86-64 and ARM64 are little-endian, as safetensors is */
        sizes[i + 1] = cnt * sizeof(float);
        XXH64_update(hs, t[i].data, sizes[i + 1]);
    }
    *bytes = total;
    *xxh64 = XXH64_digest(hs);
    XXH64_freeState(hs);
    int rc = ah_write_file_atomic_parts(path, parts, sizes, n + 1, err, errlen);
    free(parts);
    free(sizes);
    free(buf);
    return rc;
}

void ah_ckpt_free(ah_ckpt_loaded *t, int n) {
    if (!t)
        return;
    for (int i = 0; i < n; i++)
        if (!t[i].borrowed)
            free(t[i].data);
    free(t);
}

/* opens a shard file after checking that it is a regular file of exactly
 * expect_bytes bytes: nothing is allocated for a size that a manifest, not the
 * file, claims. An fd, or -1 with err. */
static int open_shard(const char *path, uint64_t expect_bytes, char *err, size_t errlen) {
    uint64_t size = 0;
    char e2[512];
    int fd = ah_open_regular(path, UINT64_MAX, &size, e2, sizeof e2);
    if (fd < 0) {
        snprintf(err, errlen, "%s", e2);
        return -1;
    }
    if (size != expect_bytes || expect_bytes == 0) {
        snprintf(err, errlen, "%s: %llu bytes, the manifest says %llu (truncated or replaced)", path,
                 (unsigned long long)size, (unsigned long long)expect_bytes);
        close(fd);
        return -1;
    }
    return fd;
}

static int read_fd(int fd, const char *path, unsigned char *buf, uint64_t n, char *err, size_t errlen) {
    uint64_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got > (1u << 30) ? (1u << 30) : (size_t)(n - got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            snprintf(err, errlen, "%s: short read (%llu of %llu bytes)", path, (unsigned long long)got,
                     (unsigned long long)n);
            return -1;
        }
        got += (uint64_t)r;
    }
    return 0;
}

int ah_ckpt_read_raw(const char *path, uint64_t expect_bytes, unsigned char *buf, char *err, size_t errlen) {
    int fd = open_shard(path, expect_bytes, err, errlen);
    if (fd < 0)
        return -1;
    int rc = read_fd(fd, path, buf, expect_bytes, err, errlen);
    close(fd);
    return rc;
}

int ah_ckpt_read_shard(const char *path, uint64_t expect_bytes, uint64_t expect_xxh64, ah_ckpt_loaded **out,
                       int *n, char *err, size_t errlen) {
    *out = NULL;
    *n = 0;
    int fd = open_shard(path, expect_bytes, err, errlen);
    if (fd < 0)
        return -1;
    if (expect_bytes > SIZE_MAX - 1) {
        snprintf(err, errlen, "%s: %llu bytes do not fit in memory", path, (unsigned long long)expect_bytes);
        close(fd);
        return -1;
    }
    unsigned char *buf = malloc((size_t)expect_bytes);
    int rc = -1;
    if (!buf)
        snprintf(err, errlen, "%s: out of memory for %llu bytes", path, (unsigned long long)expect_bytes);
    else
        rc = read_fd(fd, path, buf, expect_bytes, err, errlen);
    close(fd);
    if (rc == 0)
        rc = ah_ckpt_parse_shard(path, buf, expect_bytes, expect_xxh64, out, n, err, errlen);
    free(buf);
    return rc;
}

/* a safetensors shape value or offset: an integer JSON number in [0, 2^53]
 * (exact in a double; NaN, inf, negatives, fractions and 1e300 fail) */
static int st_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0) || v->valuedouble > 9007199254740992.0 ||
        v->valuedouble != (double)(uint64_t)v->valuedouble)
        return -1;
    *out = (uint64_t)v->valuedouble;
    return 0;
}

/* one tensor entry of the header: its element count and byte range, checked
 * without overflow against the data section (data_len bytes). 0 or -1. */
static int tensor_extent(const cJSON *it, uint64_t data_len, ah_ckpt_loaded *v, uint64_t *begin) {
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(it, "dtype"),
                *sh = cJSON_GetObjectItemCaseSensitive(it, "shape"),
                *of = cJSON_GetObjectItemCaseSensitive(it, "data_offsets");
    if (!cJSON_IsString(dt) || strcmp(dt->valuestring, "F32") || !cJSON_IsArray(sh) ||
        cJSON_GetArraySize(sh) > AH_CKPT_MAX_DIMS || !cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2 ||
        strlen(it->string) >= sizeof v->name)
        return -1;
    v->ndim = cJSON_GetArraySize(sh);
    uint64_t elems = 1, b, e, bytes;
    for (int d = 0; d < v->ndim; d++) {
        uint64_t x;
        if (st_uint(cJSON_GetArrayItem(sh, d), &x) != 0 || __builtin_mul_overflow(elems, x, &elems))
            return -1;
        v->shape[d] = (int64_t)x;
    }
    if (__builtin_mul_overflow(elems, (uint64_t)sizeof(float), &bytes) || bytes > SIZE_MAX ||
        st_uint(cJSON_GetArrayItem(of, 0), &b) != 0 || st_uint(cJSON_GetArrayItem(of, 1), &e) != 0 || e < b ||
        e > data_len || e - b != bytes)
        return -1;
    v->n = (size_t)elems;
    *begin = b;
    return 0;
}

static int parse_shard(const char *path, const unsigned char *buf, uint64_t expect_bytes, uint64_t expect_xxh64,
                       int view, ah_ckpt_loaded **out, int *n, char *err, size_t errlen) {
    *out = NULL;
    *n = 0;
    uint64_t hsh = XXH64(buf, expect_bytes, 0);
    if (hsh != expect_xxh64) {
        snprintf(err, errlen, "%s: checksum mismatch (xxh64 %016llx, the manifest says %016llx)", path,
                 (unsigned long long)hsh, (unsigned long long)expect_xxh64);
        return -1;
    }
    uint64_t hl = 0;
    for (int k = 0; k < 8 && expect_bytes >= 8; k++)
        hl |= (uint64_t)buf[k] << (8 * k);
    if (expect_bytes < 8 || hl > expect_bytes - 8) {
        snprintf(err, errlen, "%s: not a safetensors file (header length)", path);
        return -1;
    }
    cJSON *h = cJSON_ParseWithLength((const char *)buf + 8, (size_t)hl);
    uint64_t data_len = expect_bytes - 8 - hl;
    const unsigned char *data = buf + 8 + hl;
    if (!cJSON_IsObject(h)) {
        snprintf(err, errlen, "%s: malformed safetensors header", path);
        cJSON_Delete(h);
        return -1;
    }
    int cnt = cJSON_GetArraySize(h), k = 0;
    ah_ckpt_loaded *t = ah_xcalloc((size_t)cnt + 1, sizeof(ah_ckpt_loaded));
    const cJSON *it;
    int bad = 0;
    cJSON_ArrayForEach(it, h) {
        if (!strcmp(it->string, "__metadata__"))
            continue;
        ah_ckpt_loaded *v = &t[k];
        uint64_t b = 0;
        if (tensor_extent(it, data_len, v, &b) != 0) {
            bad = 1;
            break;
        }
        snprintf(v->name, sizeof v->name, "%s", it->string);
        const unsigned char *src = data + (size_t)b;
        if (view && (uintptr_t)src % _Alignof(float) == 0) {
            v->data = (float *)(uintptr_t)src; /* read-only by contract: the caller copies out of it */
            v->borrowed = 1;
        } else {
            v->data = ah_xcalloc(v->n + 1, sizeof(float));
            memcpy(v->data, src, v->n * sizeof(float));
        }
        k++;
    }
    cJSON_Delete(h);
    if (bad) {
        snprintf(err, errlen, "%s: malformed tensor entry in the safetensors header", path);
        ah_ckpt_free(t, k);
        return -1;
    }
    *out = t;
    *n = k;
    return 0;
}

int ah_ckpt_parse_shard(const char *path, const unsigned char *buf, uint64_t expect_bytes, uint64_t expect_xxh64,
                        ah_ckpt_loaded **out, int *n, char *err, size_t errlen) {
    return parse_shard(path, buf, expect_bytes, expect_xxh64, 0, out, n, err, errlen);
}

int ah_ckpt_parse_shard_view(const char *path, const unsigned char *buf, uint64_t expect_bytes,
                             uint64_t expect_xxh64, ah_ckpt_loaded **out, int *n, char *err, size_t errlen) {
    return parse_shard(path, buf, expect_bytes, expect_xxh64, 1, out, n, err, errlen);
}

int ah_ckpt_map(const char *path, uint64_t expect_bytes, const unsigned char **map, char *err, size_t errlen) {
    *map = NULL;
    int fd = open_shard(path, expect_bytes, err, errlen);
    if (fd < 0)
        return -1;
    if (expect_bytes > SIZE_MAX) {
        snprintf(err, errlen, "%s: %llu bytes do not fit in memory", path, (unsigned long long)expect_bytes);
        close(fd);
        return -1;
    }
    void *m = mmap(NULL, (size_t)expect_bytes, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        snprintf(err, errlen, "%s: mmap failed (%s)", path, strerror(errno));
        return -1;
    }
    *map = m;
    return 0;
}

void ah_ckpt_unmap(const unsigned char *map, uint64_t bytes) {
    if (map)
        munmap((void *)(uintptr_t)map, bytes);
}
