/* safetensors shards: atomic write, verified read (include/autohet/ckpt.h).
 *
 * safetensors layout: 8-byte little-endian header length N, N bytes of JSON
 * {"name": {"dtype": "F32", "shape": [...], "data_offsets": [b, e]}, ...,
 *  "__metadata__": {"k": "v"}}, padded with spaces to a multiple of 8, then the
 * tensor bytes; offsets are relative to the start of the data. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cjson/cJSON.h>

#include "autohet/ckpt.h"
#include "util/errors.h"

static int fsync_dir_of(const char *path) {
    char *copy = strdup(path);
    if (!copy)
        abort();
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
    free(copy);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

int ah_write_file_atomic(const char *path, const void *data, size_t size, char *err, size_t errlen) {
    return ah_write_file_atomic_parts(path, &data, &size, 1, err, errlen);
}

int ah_write_file_atomic_parts(const char *path, const void *const *parts, const size_t *sizes, int n, char *err,
                               size_t errlen) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp) {
        snprintf(err, errlen, "%s: path too long", path);
        return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot create (%s)", tmp, strerror(errno));
        return -1;
    }
    for (int i = 0; i < n; i++) {
        const char *p = parts[i];
        size_t left = sizes[i];
        while (left > 0) {
            ssize_t w = write(fd, p, left);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                snprintf(err, errlen, "%s: write failed (%s)", tmp, strerror(errno));
                close(fd);
                unlink(tmp);
                return -1;
            }
            p += w;
            left -= (size_t)w;
        }
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        snprintf(err, errlen, "%s: fsync/close failed (%s)", tmp, strerror(errno));
        unlink(tmp);
        return -1;
    }
    if (rename(tmp, path) != 0) {
        snprintf(err, errlen, "%s: rename to %s failed (%s)", tmp, path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    fsync_dir_of(path); /* make the rename durable; best effort (tmpfs has nothing to sync) */
    return 0;
}

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

int ah_ckpt_read_raw(const char *path, uint64_t expect_bytes, unsigned char *buf, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open (%s)", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || (uint64_t)st.st_size != expect_bytes) {
        snprintf(err, errlen, "%s: %lld bytes, the manifest says %llu (truncated or replaced)", path,
                 (long long)st.st_size, (unsigned long long)expect_bytes);
        fclose(f);
        return -1;
    }
    size_t got = fread(buf, 1, expect_bytes, f);
    fclose(f);
    if (got != expect_bytes) {
        snprintf(err, errlen, "%s: short read (%zu of %llu bytes)", path, got,
                 (unsigned long long)expect_bytes);
        return -1;
    }
    return 0;
}

int ah_ckpt_read_shard(const char *path, uint64_t expect_bytes, uint64_t expect_xxh64, ah_ckpt_loaded **out,
                       int *n, char *err, size_t errlen) {
    *out = NULL;
    *n = 0;
    unsigned char *buf = ah_xcalloc(expect_bytes ? expect_bytes : 1, 1);
    int rc = ah_ckpt_read_raw(path, expect_bytes, buf, err, errlen);
    if (rc == 0)
        rc = ah_ckpt_parse_shard(path, buf, expect_bytes, expect_xxh64, out, n, err, errlen);
    free(buf);
    return rc;
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
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(it, "dtype"),
                    *sh = cJSON_GetObjectItemCaseSensitive(it, "shape"),
                    *of = cJSON_GetObjectItemCaseSensitive(it, "data_offsets");
        if (!cJSON_IsString(dt) || strcmp(dt->valuestring, "F32") || !cJSON_IsArray(sh) ||
            cJSON_GetArraySize(sh) > AH_CKPT_MAX_DIMS || !cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2) {
            bad = 1;
            break;
        }
        ah_ckpt_loaded *v = &t[k];
        snprintf(v->name, sizeof v->name, "%s", it->string);
        v->ndim = cJSON_GetArraySize(sh);
        size_t elems = 1;
        for (int d = 0; d < v->ndim; d++) {
            double x = cJSON_GetArrayItem(sh, d)->valuedouble;
            if (!(x >= 0)) {
                bad = 1;
                break;
            }
            v->shape[d] = (int64_t)x;
            elems *= (size_t)x;
        }
        double b = cJSON_GetArrayItem(of, 0)->valuedouble, e = cJSON_GetArrayItem(of, 1)->valuedouble;
        if (bad || !(b >= 0) || e < b || e > (double)data_len || (size_t)(e - b) != elems * sizeof(float)) {
            bad = 1;
            break;
        }
        v->n = elems;
        const unsigned char *src = data + (size_t)b;
        if (view && (uintptr_t)src % _Alignof(float) == 0) {
            v->data = (float *)(uintptr_t)src; /* read-only by contract: the caller copies out of it */
            v->borrowed = 1;
        } else {
            v->data = ah_xcalloc(elems + 1, sizeof(float));
            memcpy(v->data, src, elems * sizeof(float));
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
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot open (%s)", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_size != expect_bytes || expect_bytes == 0) {
        snprintf(err, errlen, "%s: %lld bytes, the manifest says %llu (truncated or replaced)", path,
                 (long long)st.st_size, (unsigned long long)expect_bytes);
        close(fd);
        return -1;
    }
    void *m = mmap(NULL, expect_bytes, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
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
