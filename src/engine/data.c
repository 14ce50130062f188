/* Training data: byte-level corpus loading, train/validation split and
 * deterministic, partition-independent batch sampling (see data.h). */
#include "engine/data.h"
#include "util/json_file.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

uint64_t ah_hash64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static void set_err(char *err, size_t errlen, const char *fmt, ...) {
    if (err == NULL || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* A growing byte buffer. */
typedef struct {
    unsigned char *p;
    size_t n, cap;
} buf_t;

static int buf_reserve(buf_t *b, size_t extra) {
    if (extra <= b->cap - b->n)
        return 0;
    if (extra > SIZE_MAX - b->n)
        return -1;
    size_t need = b->n + extra;
    size_t cap = b->cap ? b->cap : 65536;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    unsigned char *p = realloc(b->p, cap);
    if (p == NULL)
        return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

/* Appends the whole file to b; on failure writes "path: reason" to err. */
static int read_file_into(buf_t *b, const char *path, char *err, size_t errlen) {
    /* a regular file, and the corpus stays within AH_DATA_MAX_BYTES in all:
     * a FIFO or a device would block or never end */
    if (b->n >= AH_DATA_MAX_BYTES) {
        set_err(err, errlen, "%s: the training data is larger than %d MiB in all", path, AH_DATA_MAX_BYTES >> 20);
        return -1;
    }
    FILE *f = ah_fopen_regular(path, AH_DATA_MAX_BYTES - b->n, err, errlen);
    if (f == NULL)
        return -1;
    for (;;) {
        if (buf_reserve(b, 65536) != 0) {
            set_err(err, errlen, "%s: out of memory", path);
            fclose(f);
            return -1;
        }
        size_t got = fread(b->p + b->n, 1, b->cap - b->n, f);
        b->n += got;
        if (got == 0) {
            int bad = ferror(f);
            int e = errno;
            fclose(f);
            if (bad) {
                set_err(err, errlen, "%s: read error: %s", path, strerror(e));
                return -1;
            }
            return 0;
        }
    }
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Appends every regular, non-hidden file of the directory, in name order. */
static int read_dir_into(buf_t *b, const char *path, char *err, size_t errlen) {
    DIR *dir = opendir(path);
    if (dir == NULL) {
        set_err(err, errlen, "%s: cannot read: %s", path, strerror(errno));
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 16;
            char **p = realloc(names, nc * sizeof *names);
            if (p == NULL) {
                rc = -1;
                break;
            }
            names = p;
            cap = nc;
        }
        names[n] = strdup(e->d_name);
        if (names[n] == NULL) {
            rc = -1;
            break;
        }
        n++;
    }
    closedir(dir);
    if (rc != 0) {
        set_err(err, errlen, "%s: out of memory", path);
    } else {
        if (n > 1)
            qsort(names, n, sizeof *names, cmp_names);
        size_t plen = strlen(path);
        int slash = plen > 0 && path[plen - 1] == '/';
        for (size_t i = 0; i < n && rc == 0; i++) {
            size_t flen = plen + 1 + strlen(names[i]) + 1;
            char *full = malloc(flen);
            if (full == NULL) {
                set_err(err, errlen, "%s: out of memory", path);
                rc = -1;
                break;
            }
            snprintf(full, flen, "%s%s%s", path, slash ? "" : "/", names[i]);
            struct stat st;
            if (stat(full, &st) == 0 && S_ISREG(st.st_mode))
                rc = read_file_into(b, full, err, errlen);
            free(full);
        }
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return rc;
}

int ah_dataset_load(ah_dataset *d, const char *path, double val_fraction, int seq, char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    if (path == NULL || path[0] == '\0') {
        set_err(err, errlen, "(empty path): no such file or directory");
        return -1;
    }
    if (!(val_fraction >= 0.0 && val_fraction <= 0.5)) {
        set_err(err, errlen, "%s: validation fraction %g outside [0, 0.5]", path, val_fraction);
        return -1;
    }
    if (seq < 1) {
        set_err(err, errlen, "%s: sequence length %d must be positive", path, seq);
        return -1;
    }
    struct stat st;
    if (stat(path, &st) != 0) {
        set_err(err, errlen, "%s: cannot read: %s", path, strerror(errno));
        return -1;
    }
    buf_t b = {NULL, 0, 0};
    int is_dir = S_ISDIR(st.st_mode);
    int rc = is_dir ? read_dir_into(&b, path, err, errlen) : read_file_into(&b, path, err, errlen);
    if (rc != 0) {
        free(b.p);
        return -1;
    }
    if (b.n == 0) {
        set_err(err, errlen, is_dir ? "%s: no readable text files" : "%s: empty file", path);
        free(b.p);
        return -1;
    }
    size_t need = (size_t)seq + 1;
    size_t n_val = (size_t)floor((double)b.n * val_fraction + 0.5);
    if (val_fraction > 0 && n_val == 0)
        n_val = 1;
    size_t n_train = b.n - n_val;
    if (n_train < need) {
        if (n_val == 0)
            set_err(err, errlen, "%s: %zu bytes, too small for sequences of %d (+1) tokens", path, b.n, seq);
        else
            set_err(err, errlen, "%s: %zu bytes (train split %zu), too small for sequences of %d (+1) tokens",
                    path, b.n, n_train, seq);
        free(b.p);
        return -1;
    }
    if (val_fraction > 0 && n_val < need) {
        set_err(
            err, errlen,
            "%s: %zu bytes (validation split %zu at fraction %g), too small for sequences of %d (+1) tokens",
            path, b.n, n_val, val_fraction, seq);
        free(b.p);
        return -1;
    }
    /* Shrink to fit: the corpus stays resident for the whole run. */
    unsigned char *p = realloc(b.p, b.n);
    d->bytes = p ? p : b.p;
    d->n = b.n;
    d->n_train = n_train;
    snprintf(d->source, sizeof d->source, "%s", path);
    return 0;
}

void ah_dataset_free(ah_dataset *d) {
    if (d == NULL)
        return;
    free(d->bytes);
    memset(d, 0, sizeof *d);
}

/* Start of row i of the global batch of step `step`: a pure function of
 * (seed, step, i, validation), uniform in [0, range). */
static size_t row_offset(uint64_t seed, long step, long i, int validation, size_t range) {
    uint64_t h = ah_hash64(seed ^ 0x6a09e667f3bcc908ULL);
    h = ah_hash64(h ^ (uint64_t)step);
    h = ah_hash64(h ^ (((uint64_t)i << 1) | (uint64_t)(validation != 0)));
    /* Multiply-shift maps the 64-bit hash onto [0, range) (bias < range / 2^64). */
    return (size_t)(((unsigned __int128)h * (unsigned __int128)range) >> 64);
}

void ah_dataset_batch(const ah_dataset *d, int validation, uint64_t seed, long step, int first_row, int rows,
                      int seq, int *tokens, int *targets) {
    if (rows <= 0 || seq <= 0)
        return;
    size_t base = validation ? d->n_train : 0;
    size_t len = validation ? d->n - d->n_train : d->n_train;
    size_t count = (size_t)rows * (size_t)seq;
    if (d->bytes == NULL || len < (size_t)seq + 1) {
        /* Misuse (no such split, or sequences longer than at load): serve
         * zeros rather than read out of bounds. */
        memset(tokens, 0, count * sizeof *tokens);
        memset(targets, 0, count * sizeof *targets);
        return;
    }
    size_t range = len - (size_t)seq; /* offsets 0 .. len - seq - 1 */
    for (int r = 0; r < rows; r++) {
        size_t off = base + row_offset(seed, step, (long)first_row + r, validation, range);
        const unsigned char *src = d->bytes + off;
        int *tok = tokens + (size_t)r * (size_t)seq;
        int *tgt = targets + (size_t)r * (size_t)seq;
        for (int t = 0; t < seq; t++) {
            tok[t] = src[t];
            tgt[t] = src[t + 1];
        }
    }
}

double ah_dataset_unigram_entropy(const ah_dataset *d) {
    if (d == NULL || d->bytes == NULL || d->n_train == 0)
        return 0.0;
    size_t counts[256] = {0};
    for (size_t i = 0; i < d->n_train; i++)
        counts[d->bytes[i]]++;
    double h = 0.0, n = (double)d->n_train;
    for (int c = 0; c < 256; c++) {
        if (counts[c] == 0)
            continue;
        double p = (double)counts[c] / n;
        h -= p * log(p);
    }
    return h;
}
