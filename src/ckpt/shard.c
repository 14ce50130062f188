/* safetensors shards: atomic write, verified read (include/autohet/ckpt.h).
 *
 * safetensors layout (util/safetensors_header.h, whose parser reads them):
 * 8-byte little-endian header length N, N bytes of JSON
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
#include "util/safetensors_header.h"

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

/* The tensor entries of a safetensors header (hl bytes of JSON at hdr) over a
 * data section of data_len bytes (util/safetensors_header.h): *out (data NULL)
 * and each tensor's first byte in the data section. A shard holds F32 tensors
 * of at most AH_CKPT_MAX_DIMS dimensions with names that fit. 0; -1 malformed
 * header; -2 a malformed entry. */
static int header_tensors(const unsigned char *hdr, uint64_t hl, uint64_t data_len, ah_ckpt_loaded **out,
                          uint64_t **begins, int *n) {
    *out = NULL, *begins = NULL, *n = 0;
    ah_st_tensor *st;
    int cnt;
    char why[512];
    int rc = ah_st_parse_header((const char *)hdr, hl, data_len, &st, &cnt, why, sizeof why);
    if (rc != 0)
        return rc;
    ah_ckpt_loaded *t = ah_xcalloc((size_t)cnt + 1, sizeof(ah_ckpt_loaded));
    uint64_t *b = ah_xcalloc((size_t)cnt + 1, sizeof(uint64_t));
    for (int k = 0; k < cnt && rc == 0; k++) {
        size_t len = strlen(st[k].name);
        if (st[k].dtype != AH_ST_F32 || st[k].ndim > AH_CKPT_MAX_DIMS || len >= sizeof t[k].name) {
            rc = -2;
            break;
        }
        memcpy(t[k].name, st[k].name, len + 1);
        t[k].ndim = st[k].ndim;
        memcpy(t[k].shape, st[k].shape, sizeof(int64_t) * (size_t)st[k].ndim);
        t[k].n = st[k].n;
        b[k] = st[k].begin;
    }
    free(st);
    if (rc != 0) {
        free(t);
        free(b);
        return rc;
    }
    *out = t, *begins = b, *n = cnt;
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
    const unsigned char *data = buf + 8 + hl;
    ah_ckpt_loaded *t;
    uint64_t *begins;
    int k, hr = header_tensors(buf + 8, hl, expect_bytes - 8 - hl, &t, &begins, &k);
    if (hr != 0) {
        snprintf(err, errlen, "%s: %s", path,
                 hr == -1 ? "malformed safetensors header" : "malformed tensor entry in the safetensors header");
        return -1;
    }
    for (int i = 0; i < k; i++) {
        ah_ckpt_loaded *v = &t[i];
        const unsigned char *src = data + (size_t)begins[i];
        if (view && (uintptr_t)src % _Alignof(float) == 0) {
            v->data = (float *)(uintptr_t)src; /* read-only by contract: the caller copies out of it */
            v->borrowed = 1;
        } else {
            v->data = ah_xcalloc(v->n + 1, sizeof(float));
            memcpy(v->data, src, v->n * sizeof(float));
        }
    }
    free(begins);
    *out = t;
    *n = k;
    return 0;
}

/* ---- streaming read: hash and hand over in one pass ---- */

enum { STREAM_CHUNK = 512 << 10 }; /* a piece stays in L2 between hashing and copying */

typedef struct {
    const ah_ckpt_stream *s;
    XXH64_state_t *h;
    uint64_t pos, bytes;
    char *err;
    size_t errlen;
} stream_state;

/* hashes [pos, to) chunk by chunk; for tensor i (>= 0) each chunk also goes
 * to the piece callback, element `first` on. 0 or -1 (err: fetch failed). */
static int stream_range(stream_state *st, uint64_t to, int i, size_t first) {
    while (st->pos < to) {
        uint64_t len = to - st->pos < STREAM_CHUNK ? to - st->pos : STREAM_CHUNK;
        const unsigned char *p = st->s->fetch(st->s->fetch_ctx, st->pos, len, st->err, st->errlen);
        if (!p)
            return -1;
        XXH64_update(st->h, p, (size_t)len);
        if (i >= 0) {
            st->s->piece(st->s->ctx, i, first, (size_t)(len / sizeof(float)), (const float *)(const void *)p);
            first += (size_t)(len / sizeof(float));
        }
        st->pos += len;
    }
    return 0;
}

/* A problem found before the end: the rest is hashed to tell a damaged copy
 * (checksum mismatch, -1) from a good one that is malformed (what, -1) or
 * does not fit (begin's err already in st->err, -2). */
static int stream_fail(stream_state *st, const char *path, uint64_t expect_xxh64, const char *what) {
    char keep[512];
    snprintf(keep, sizeof keep, "%s", st->err);
    if (stream_range(st, st->bytes, -1, 0) != 0)
        return -1;
    uint64_t hsh = XXH64_digest(st->h);
    if (hsh != expect_xxh64) {
        snprintf(st->err, st->errlen, "%s: checksum mismatch (xxh64 %016llx, the manifest says %016llx)", path,
                 (unsigned long long)hsh, (unsigned long long)expect_xxh64);
        return -1;
    }
    if (!what) {
        snprintf(st->err, st->errlen, "%s", keep);
        return -2;
    }
    snprintf(st->err, st->errlen, "%s: %s", path, what);
    return -1;
}

/* the tensors in data order when they can be streamed there: disjoint,
 * float-aligned in the file (data_at: the data section's offset), named once */
static int *stream_order(const ah_ckpt_loaded *t, const uint64_t *b, int n, uint64_t data_at) {
    if (n > 4096) /* no layer has that many: not worth the quadratic checks below */
        return NULL;
    int *ord = ah_xcalloc((size_t)n + 1, sizeof(int));
    for (int i = 0; i < n; i++) {
        int j = i;
        for (; j > 0 && b[ord[j - 1]] > b[i]; j--)
            ord[j] = ord[j - 1];
        ord[j] = i;
    }
    int ok = 1;
    for (int k = 0; k < n && ok; k++) {
        int i = ord[k];
        ok = (data_at + b[i]) % sizeof(float) == 0 &&
             (k == 0 || b[i] >= b[ord[k - 1]] + t[ord[k - 1]].n * sizeof(float));
        for (int j = 0; j < i && ok; j++)
            ok = strcmp(t[i].name, t[j].name) != 0;
    }
    if (!ok) {
        free(ord);
        return NULL;
    }
    return ord;
}

/* the data section in file order: gaps hashed, tensors hashed and handed over */
static int stream_data(stream_state *st, const ah_ckpt_loaded *t, const uint64_t *b, const int *ord, int n,
                       uint64_t data_at) {
    for (int k = 0; k < n; k++) {
        int i = ord[k];
        if (stream_range(st, data_at + b[i], -1, 0) != 0 ||
            stream_range(st, data_at + b[i] + t[i].n * sizeof(float), i, 0) != 0)
            return -1;
    }
    return stream_range(st, st->bytes, -1, 0);
}

int ah_ckpt_stream_shard(const char *path, uint64_t expect_bytes, uint64_t expect_xxh64, const ah_ckpt_stream *s,
                         char *err, size_t errlen) {
    stream_state st = {s, XXH64_createState(), 0, expect_bytes, err, errlen};
    if (!st.h)
        abort();
    XXH64_reset(st.h, 0);
    int rc;
    uint64_t hl = 0;
    const unsigned char *p = expect_bytes >= 8 ? s->fetch(s->fetch_ctx, 0, 8, err, errlen) : NULL;
    if (expect_bytes >= 8 && !p) {
        rc = -1;
        goto out;
    }
    for (int k = 0; p && k < 8; k++)
        hl |= (uint64_t)p[k] << (8 * k);
    if (expect_bytes < 8 || hl > expect_bytes - 8) {
        rc = stream_fail(&st, path, expect_xxh64, "not a safetensors file (header length)");
        goto out;
    }
    XXH64_update(st.h, p, 8);
    st.pos = 8;
    const unsigned char *hdr = s->fetch(s->fetch_ctx, 8, hl, err, errlen);
    if (!hdr) {
        rc = -1;
        goto out;
    }
    XXH64_update(st.h, hdr, (size_t)hl);
    st.pos = 8 + hl;
    ah_ckpt_loaded *t = NULL;
    uint64_t *b = NULL;
    int n = 0, hr = header_tensors(hdr, hl, expect_bytes - 8 - hl, &t, &b, &n);
    int *ord = hr == 0 ? stream_order(t, b, n, 8 + hl) : NULL;
    if (hr != 0)
        rc = stream_fail(&st, path, expect_xxh64,
                         hr == -1 ? "malformed safetensors header" : "malformed tensor entry in the safetensors header");
    else if (!ord)
        rc = 1;
    else if (s->begin(s->ctx, t, n, err, errlen) != 0)
        rc = stream_fail(&st, path, expect_xxh64, NULL);
    else if (stream_data(&st, t, b, ord, n, 8 + hl) != 0)
        rc = -1;
    else if (XXH64_digest(st.h) != expect_xxh64)
        rc = stream_fail(&st, path, expect_xxh64, "checksum"); /* everything hashed: reports the mismatch */
    else
        rc = 0;
    free(ord);
    free(t);
    free(b);
out:
    XXH64_freeState(st.h);
    return rc;
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
