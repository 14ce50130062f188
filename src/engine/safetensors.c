/* Hugging Face safetensors files, read-only (engine/safetensors.h). */
#include "engine/safetensors.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "util/errors.h"
#include "util/json_file.h"

static const struct {
    const char *name;
    ah_st_dtype d;
    int bytes;
} dtypes[] = {{"F32", AH_ST_F32, 4}, {"F16", AH_ST_F16, 2}, {"BF16", AH_ST_BF16, 2}};

const char *ah__st_dtype_name(ah_st_dtype d) {
    return d >= 0 && d <= AH_ST_BF16 ? dtypes[d].name : "?";
}

void ah__st_shape_text(const int64_t *shape, int ndim, char *out, size_t n) {
    size_t len = (size_t)snprintf(out, n, "[");
    for (int i = 0; i < ndim && len < n; i++)
        len += (size_t)snprintf(out + len, n - len, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (len < n)
        snprintf(out + len, n - len, "]");
}

/* an integer JSON number in [0, 2^53], exact in a double */
static int st_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0) || v->valuedouble > 9007199254740992.0 ||
        v->valuedouble != (double)(uint64_t)v->valuedouble)
        return -1;
    *out = (uint64_t)v->valuedouble;
    return 0;
}

/* one tensor entry checked against the data section (data_len bytes); 0, or
 * -1 with the field's problem in why */
static int tensor_entry(const cJSON *it, uint64_t data_len, ah_st_tensor *t, char *why, size_t n) {
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(it, "dtype"),
                *sh = cJSON_GetObjectItemCaseSensitive(it, "shape"),
                *of = cJSON_GetObjectItemCaseSensitive(it, "data_offsets");
    int bytes = 0;
    if (!cJSON_IsObject(it))
        return snprintf(why, n, "expected an object with dtype, shape and data_offsets"), -1;
    for (size_t k = 0; cJSON_IsString(dt) && k < sizeof dtypes / sizeof dtypes[0]; k++)
        if (!strcmp(dt->valuestring, dtypes[k].name))
            t->dtype = dtypes[k].d, bytes = dtypes[k].bytes;
    if (!bytes)
        return snprintf(why, n, "dtype %s%.16s%s is not supported (F32, F16, BF16)", cJSON_IsString(dt) ? "'" : "",
                        cJSON_IsString(dt) ? dt->valuestring : "missing", cJSON_IsString(dt) ? "'" : ""),
               -1;
    if (!cJSON_IsArray(sh) || cJSON_GetArraySize(sh) > AH_ST_MAX_DIMS)
        return snprintf(why, n, "shape: expected an array of at most %d integers", AH_ST_MAX_DIMS), -1;
    t->ndim = cJSON_GetArraySize(sh);
    uint64_t elems = 1, b, e, need;
    for (int d = 0; d < t->ndim; d++) {
        uint64_t x;
        if (st_uint(cJSON_GetArrayItem(sh, d), &x) != 0 || __builtin_mul_overflow(elems, x, &elems))
            return snprintf(why, n, "shape: dimension %d is not a non-negative integer (or the size overflows)", d),
                   -1;
        t->shape[d] = (int64_t)x;
    }
    if (!cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2 || st_uint(cJSON_GetArrayItem(of, 0), &b) != 0 ||
        st_uint(cJSON_GetArrayItem(of, 1), &e) != 0 || e < b)
        return snprintf(why, n, "data_offsets: expected [begin, end] integers with begin <= end"), -1;
    if (e > data_len)
        return snprintf(why, n, "data_offsets: [%llu, %llu] outside the %llu-byte data section",
                        (unsigned long long)b, (unsigned long long)e, (unsigned long long)data_len),
               -1;
    if (__builtin_mul_overflow(elems, (uint64_t)bytes, &need) || need != e - b || elems > SIZE_MAX / 4)
        return snprintf(why, n, "data_offsets: %llu bytes, the shape needs %llu of %s",
                        (unsigned long long)(e - b), (unsigned long long)need, ah__st_dtype_name(t->dtype)),
               -1;
    t->n = (size_t)elems;
    t->begin = b;
    return 0;
}

static int metadata_ok(const cJSON *m) {
    if (!cJSON_IsObject(m))
        return 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, m) if (!cJSON_IsString(it)) return 0;
    return 1;
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const ah_st_tensor *)a)->name, ((const ah_st_tensor *)b)->name);
}

/* the header's entries into f->t; 0 or -1 with err */
static int parse_header(ah_st_file *f, const char *hdr, uint64_t hl, char *err, size_t errlen) {
    cJSON *h = cJSON_ParseWithLength(hdr, (size_t)hl);
    if (!cJSON_IsObject(h)) {
        cJSON_Delete(h);
        snprintf(err, errlen, "%s: header: not a JSON object", f->path);
        return -1;
    }
    if (cJSON_GetArraySize(h) > AH_ST_MAX_TENSORS) {
        cJSON_Delete(h);
        snprintf(err, errlen, "%s: header: more than %d entries", f->path, AH_ST_MAX_TENSORS);
        return -1;
    }
    uint64_t data_len = f->size - 8 - hl;
    f->t = ah_xcalloc((size_t)cJSON_GetArraySize(h) + 1, sizeof *f->t);
    int rc = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, h) {
        char why[256];
        if (!strcmp(it->string, "__metadata__")) {
            if (!metadata_ok(it)) {
                snprintf(err, errlen, "%s: __metadata__: expected an object of strings", f->path);
                rc = -1;
                break;
            }
            continue;
        }
        ah_st_tensor *t = &f->t[f->n];
        if (strlen(it->string) >= sizeof t->name) {
            snprintf(err, errlen, "%s: tensor '%.60s...': name longer than %d bytes", f->path, it->string,
                     AH_ST_MAX_NAME - 1);
            rc = -1;
            break;
        }
        snprintf(t->name, sizeof t->name, "%s", it->string);
        if (tensor_entry(it, data_len, t, why, sizeof why) != 0) {
            snprintf(err, errlen, "%s: tensor '%s': %s", f->path, t->name, why);
            rc = -1;
            break;
        }
        f->n++;
    }
    cJSON_Delete(h);
    if (rc == 0 && f->n > 1) {
        qsort(f->t, (size_t)f->n, sizeof *f->t, by_name);
        for (int i = 1; i < f->n && rc == 0; i++)
            if (!strcmp(f->t[i].name, f->t[i - 1].name)) {
                snprintf(err, errlen, "%s: tensor '%s': named twice in the header", f->path, f->t[i].name);
                rc = -1;
            }
    }
    return rc;
}

int ah__st_open(const char *path, ah_st_file *f, char *err, size_t errlen) {
    memset(f, 0, sizeof *f);
    snprintf(f->path, sizeof f->path, "%s", path);
    int fd = ah_open_regular(path, UINT64_MAX, &f->size, err, errlen);
    if (fd < 0)
        return -1;
    if (f->size < 8 || f->size > SIZE_MAX) {
        snprintf(err, errlen, "%s: %llu bytes: not a safetensors file (no 8-byte header length)", path,
                 (unsigned long long)f->size);
        close(fd);
        return -1;
    }
    void *m = mmap(NULL, (size_t)f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        snprintf(err, errlen, "%s: mmap failed (%s)", path, strerror(errno));
        return -1;
    }
    f->map = m;
    uint64_t hl = 0;
    for (int k = 0; k < 8; k++)
        hl |= (uint64_t)f->map[k] << (8 * k);
    int rc = 0;
    if (hl > f->size - 8 || hl > AH_ST_MAX_HEADER) {
        snprintf(err, errlen, "%s: header length %llu: beyond the file's %llu bytes (or above %u)", path,
                 (unsigned long long)hl, (unsigned long long)f->size, AH_ST_MAX_HEADER);
        rc = -1;
    } else {
        f->data = f->map + 8 + hl;
        rc = parse_header(f, (const char *)f->map + 8, hl, err, errlen);
    }
    if (rc != 0)
        ah__st_close(f);
    return rc;
}

void ah__st_close(ah_st_file *f) {
    if (f->map)
        munmap((void *)(uintptr_t)f->map, (size_t)f->size);
    free(f->t);
    memset(f, 0, sizeof *f);
}

const ah_st_tensor *ah__st_find(const ah_st_file *f, const char *name) {
    ah_st_tensor key;
    if (strlen(name) >= sizeof key.name || f->n == 0)
        return NULL;
    snprintf(key.name, sizeof key.name, "%s", name);
    return bsearch(&key, f->t, (size_t)f->n, sizeof *f->t, by_name);
}

/* IEEE half to float, subnormals, infinities and NaN included */
static float half_to_float(uint16_t h) {
    uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, bits;
    if (e == 0 && m == 0)
        bits = s;
    else if (e == 0) { /* subnormal: normalise */
        int sh = 0;
        while (!(m & 0x400))
            m <<= 1, sh++;
        bits = s | ((uint32_t)(113 - sh) << 23) | ((m & 0x3ff) << 13);
    } else if (e == 31)
        bits = s | 0x7f800000u | (m << 13);
    else
        bits = s | ((e + 112) << 23) | (m << 13);
    float out;
    memcpy(&out, &bits, sizeof out);
    return out;
}

void ah__st_read_f32(const ah_st_file *f, const ah_st_tensor *t, float *dst) {
    const unsigned char *p = f->data + t->begin; /* little-endian, as x86-64 and ARM64 */
    if (t->dtype == AH_ST_F32) {
        memcpy(dst, p, t->n * sizeof(float));
        return;
    }
    for (size_t i = 0; i < t->n; i++) {
        uint16_t v = (uint16_t)(p[2 * i] | (p[2 * i + 1] << 8));
        if (t->dtype == AH_ST_F16) {
            dst[i] = half_to_float(v);
        } else {
            uint32_t bits = (uint32_t)v << 16;
            memcpy(&dst[i], &bits, sizeof bits);
        }
    }
}
