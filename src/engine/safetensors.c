/* Hugging Face safetensors files, read-only (engine/safetensors.h). */
#include "engine/safetensors.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "util/errors.h"
#include "util/json_file.h"

void ah__st_shape_text(const int64_t *shape, int ndim, char *out, size_t n) {
    size_t len = (size_t)snprintf(out, n, "[");
    for (int i = 0; i < ndim && len < n; i++)
        len += (size_t)snprintf(out + len, n - len, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (len < n)
        snprintf(out + len, n - len, "]");
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const ah_st_tensor *)a)->name, ((const ah_st_tensor *)b)->name);
}

/* the header's entries into f->t (util/safetensors_header.h), sorted, names unique; 0 or -1 with err */
static int parse_header(ah_st_file *f, const char *hdr, uint64_t hl, char *err, size_t errlen) {
    char why[512];
    if (ah_st_parse_header(hdr, hl, f->size - 8 - hl, &f->t, &f->n, why, sizeof why) != 0) {
        snprintf(err, errlen, "%s: %s", f->path, why);
        return -1;
    }
    if (f->n > 1)
        qsort(f->t, (size_t)f->n, sizeof *f->t, by_name);
    for (int i = 1; i < f->n; i++)
        if (!strcmp(f->t[i].name, f->t[i - 1].name)) {
            snprintf(err, errlen, "%s: tensor '%s': named twice in the header", f->path, f->t[i].name);
            return -1;
        }
    return 0;
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

/* the index of the first value of v[0, n) that is not finite, or n (the rare path of a bad file) */
static size_t first_non_finite(const float *v, size_t n) {
    size_t i = 0;
    for (uint32_t bits; i < n; i++) {
        memcpy(&bits, &v[i], sizeof bits);
        if ((bits & 0x7f800000u) == 0x7f800000u)
            break;
    }
    return i;
}

size_t ah__st_read_f32(const ah_st_file *f, const ah_st_tensor *t, float *dst) {
    const unsigned char *p = f->data + t->begin; /* little-endian, as x86-64 and ARM64 */
    uint32_t bad = 0; /* any value with every exponent bit set (inf, NaN): one pass, no branch */
    if (t->dtype == AH_ST_F32) {
        for (size_t i = 0; i < t->n; i++) {
            uint32_t bits;
            memcpy(&bits, p + 4 * i, sizeof bits);
            bad |= (bits & 0x7f800000u) == 0x7f800000u;
            memcpy(&dst[i], &bits, sizeof bits);
        }
    } else {
        uint16_t exp = t->dtype == AH_ST_F16 ? 0x7c00 : 0x7f80;
        for (size_t i = 0; i < t->n; i++) {
            uint16_t v = (uint16_t)(p[2 * i] | (p[2 * i + 1] << 8));
            bad |= (v & exp) == exp;
            if (t->dtype == AH_ST_F16) {
                dst[i] = half_to_float(v);
            } else {
                uint32_t bits = (uint32_t)v << 16;
                memcpy(&dst[i], &bits, sizeof bits);
            }
        }
    }
    return bad ? first_non_finite(dst, t->n) : t->n;
}
