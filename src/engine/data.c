/* Training data: text and token-file loading, train/validation split and
 * deterministic, partition-independent batch sampling (see data.h). */
#include "engine/data.h"
#include "engine/data_tokens.h"
#include "util/json_file.h"
#include "util/errors.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
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

const char *ah_data_kind_name(ah_data_kind k) {
    return k == AH_DATA_TOKENS ? "tokens" : "text";
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

/* Appends the whole file to b, which stays within max bytes in all; on
 * failure writes "path: reason" to err. Sets *got to the file's bytes. */
static int read_file_into(buf_t *b, const char *path, size_t max, size_t *got_bytes, char *err,
                          size_t errlen) {
    /* a regular file, and the data stays within max in all: a FIFO or a
     * device would block or never end */
    if (b->n >= max) {
        ah_errf(err, errlen, "%s: the training data is larger than %zu MiB in all", path, max >> 20);
        return -1;
    }
    size_t before = b->n;
    FILE *f = ah_fopen_regular(path, max - b->n, err, errlen);
    if (f == NULL)
        return -1;
    for (;;) {
        if (buf_reserve(b, 65536) != 0) {
            ah_errf(err, errlen, "%s: out of memory", path);
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
                ah_errf(err, errlen, "%s: read error: %s", path, strerror(e));
                return -1;
            }
            *got_bytes = b->n - before;
            return 0;
        }
    }
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void free_names(char **names, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* The full paths of the regular, non-hidden files of a directory, sorted by
 * name: 0, or -1 with err. */
static int list_dir(const char *path, char ***out, size_t *out_n, char *err, size_t errlen) {
    DIR *dir = opendir(path);
    if (dir == NULL) {
        ah_errf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0, plen = strlen(path);
    int slash = plen > 0 && path[plen - 1] == '/', rc = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        size_t flen = plen + 1 + strlen(e->d_name) + 1;
        char *full = malloc(flen);
        if (full == NULL) {
            rc = -1;
            break;
        }
        snprintf(full, flen, "%s%s%s", path, slash ? "" : "/", e->d_name);
        struct stat st;
        if (stat(full, &st) != 0 || !S_ISREG(st.st_mode)) {
            free(full);
            continue;
        }
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 16;
            char **p = realloc(names, nc * sizeof *names);
            if (p == NULL) {
                free(full);
                rc = -1;
                break;
            }
            names = p;
            cap = nc;
        }
        names[n++] = full;
    }
    closedir(dir);
    if (rc != 0) {
        ah_errf(err, errlen, "%s: out of memory", path);
        free_names(names, n);
        return -1;
    }
    if (n > 1)
        qsort(names, n, sizeof *names, cmp_names);
    *out = names;
    *out_n = n;
    return 0;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Whether the file starts with llm.c's magic (a file too short to hold it
 * does not). */
static int has_llmc_magic(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return 0; /* a FIFO would block here: the reader refuses it with its own message */
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return 0;
    unsigned char m[4];
    int yes = fread(m, 1, 4, f) == 4 &&
              (int32_t)((uint32_t)m[0] | (uint32_t)m[1] << 8 | (uint32_t)m[2] << 16 | (uint32_t)m[3] << 24) ==
                  AH_LLMC_MAGIC;
    fclose(f);
    return yes;
}

static int add_file(ah_dataset *d, const char *path, size_t first, size_t count, size_t header) {
    ah_data_file *f = realloc(d->files, sizeof *f * (size_t)(d->n_files + 1));
    if (f == NULL)
        return -1;
    d->files = f;
    char *copy = strdup(path);
    if (copy == NULL)
        return -1;
    f[d->n_files++] = (ah_data_file){.path = copy, .first = first, .count = count, .header = header};
    return 0;
}

/* Maps one token file (data_tokens.h) and appends it to d: its tokens
 * follow d's. 0, or -1 with err. */
static int read_token_file(ah_dataset *d, const char *path, char *err, size_t errlen) {
    ah_data_file f;
    if (ah__token_file_map(&f, path, d->raw_type, err, errlen) != 0)
        return -1;
    ah_data_file *files = realloc(d->files, sizeof *files * (size_t)(d->n_files + 1));
    if (files == NULL) {
        ah_errf(err, errlen, "%s: out of memory", path);
        ah__token_file_unmap(&f);
        return -1;
    }
    d->files = files;
    f.first = d->n;
    files[d->n_files++] = f;
    d->n += f.count;
    return 0;
}

/* Text: the file, or every regular file of the directory in name order. */
static int load_text(ah_dataset *d, buf_t *b, const char *path, int is_dir, char **names, size_t n_names,
                     char *err, size_t errlen) {
    size_t n = is_dir ? n_names : 1;
    for (size_t i = 0; i < n; i++) {
        const char *f = is_dir ? names[i] : path;
        size_t first = b->n, got = 0;
        if (read_file_into(b, f, AH_DATA_MAX_BYTES, &got, err, errlen) != 0)
            return -1;
        if (add_file(d, f, first, got, 0) != 0) {
            ah_errf(err, errlen, "%s: out of memory", f);
            return -1;
        }
    }
    return 0;
}

/* Tokens: the file, or the .bin shards of the directory (train shards, then
 * those with "_val" in the name); *n_val_shard = tokens of the latter. */
static int load_tokens(ah_dataset *d, const char *path, int is_dir, char **names, size_t n_names,
                       size_t *n_val_shard, char *err, size_t errlen) {
    *n_val_shard = 0;
    if (!is_dir)
        return read_token_file(d, path, err, errlen);
    for (int val = 0; val < 2; val++)
        for (size_t i = 0; i < n_names; i++) {
            const char *base = strrchr(names[i], '/');
            base = base ? base + 1 : names[i];
            if (!ends_with(base, ".bin") || (strstr(base, "_val") != NULL) != val)
                continue;
            size_t before = d->n;
            if (read_token_file(d, names[i], err, errlen) != 0)
                return -1;
            if (val)
                *n_val_shard += d->n - before;
        }
    return 0;
}

/* The train/validation split and its size checks; 0 or -1 with err. */
static int split(ah_dataset *d, const char *path, double val_fraction, size_t n_val_shard, int seq, char *err,
                 size_t errlen) {
    const char *unit = d->kind == AH_DATA_TOKENS ? "tokens" : "bytes";
    size_t need = (size_t)seq + 1;
    size_t n_val = n_val_shard;
    if (n_val == 0) {
        n_val = (size_t)floor((double)d->n * val_fraction + 0.5);
        if (val_fraction > 0 && n_val == 0)
            n_val = 1;
    }
    size_t n_train = d->n - n_val;
    if (n_train < need) {
        if (n_val == 0)
            ah_errf(err, errlen, "%s: %zu %s, too small for sequences of %d (+1) tokens", path, d->n, unit,
                    seq);
        else
            ah_errf(err, errlen, "%s: %zu %s (train split %zu), too small for sequences of %d (+1) tokens",
                    path, d->n, unit, n_train, seq);
        return -1;
    }
    if (n_val > 0 && n_val < need) {
        ah_errf(err, errlen, "%s: %zu %s (validation split %zu), too small for sequences of %d (+1) tokens",
                path, d->n, unit, n_val, seq);
        return -1;
    }
    d->n_train = n_train;
    return 0;
}

/* Token data: a directory with a .bin shard, a file named .bin or one that
 * starts with llm.c's magic; anything else is text. */
static ah_data_kind kind_of(const char *path, int is_dir, char *const *names, size_t n_names) {
    int tokens = 0;
    char bin[4096];
    for (size_t i = 0; is_dir && i < n_names && !tokens; i++)
        tokens = ends_with(names[i], ".bin");
    if (!is_dir)
        tokens = ends_with(path, ".bin") || has_llmc_magic(path) || ah__megatron_pair(path, bin, sizeof bin);
    return tokens ? AH_DATA_TOKENS : AH_DATA_TEXT;
}

ah_data_kind ah_dataset_kind_of(const char *path) {
    struct stat st;
    char bin[4096];
    if (path != NULL && ah__megatron_pair(path, bin, sizeof bin)) /* PREFIX of PREFIX.bin/.idx too */
        return AH_DATA_TOKENS;
    if (path == NULL || stat(path, &st) != 0)
        return AH_DATA_TEXT;
    if (!S_ISDIR(st.st_mode))
        return kind_of(path, 0, NULL, 0);
    char **names = NULL, err[8];
    size_t n = 0;
    if (list_dir(path, &names, &n, err, sizeof err) != 0)
        return AH_DATA_TEXT;
    ah_data_kind k = kind_of(path, 1, names, n);
    free_names(names, n);
    return k;
}

int ah_dataset_vocab(ah_data_kind kind, int model_vocab) {
    return kind == AH_DATA_TEXT ? 256 : model_vocab;
}

int ah_dataset_load(ah_dataset *d, const char *path, double val_fraction, int seq, char *err, size_t errlen) {
    return ah_dataset_load_typed(d, path, val_fraction, seq, AH_TOKENS_UNSTATED, err, errlen);
}

/* The arguments of a load: one line naming the bad one. */
static int check_load_args(const char *path, double val_fraction, int seq, char *err, size_t errlen) {
    if (path == NULL || path[0] == '\0') {
        ah_errf(err, errlen, "(empty path): no such file or directory");
        return -1;
    }
    if (!(val_fraction >= 0.0 && val_fraction <= 0.5)) {
        ah_errf(err, errlen, "%s: validation fraction %g outside [0, 0.5]", path, val_fraction);
        return -1;
    }
    if (seq < 1) {
        ah_errf(err, errlen, "%s: sequence length %d must be positive", path, seq);
        return -1;
    }
    return 0;
}

int ah_dataset_load_typed(ah_dataset *d, const char *path, double val_fraction, int seq,
                          ah_token_type raw_type, char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    d->raw_type = raw_type;
    if (check_load_args(path, val_fraction, seq, err, errlen) != 0)
        return -1;
    struct stat st;
    char bin[4096];
    int prefix = ah__megatron_pair(path, bin, sizeof bin); /* Megatron's PREFIX of PREFIX.bin/.idx */
    if (!prefix && stat(path, &st) != 0) {
        ah_errf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
        return -1;
    }
    char **names = NULL;
    size_t n_names = 0, n_val_shard = 0;
    int is_dir = !prefix && S_ISDIR(st.st_mode);
    if (is_dir && list_dir(path, &names, &n_names, err, errlen) != 0)
        return -1;
    int tokens = prefix || kind_of(path, is_dir, names, n_names) == AH_DATA_TOKENS;
    d->kind = tokens ? AH_DATA_TOKENS : AH_DATA_TEXT;
    buf_t b = {NULL, 0, 0};
    int rc = tokens ? load_tokens(d, path, is_dir, names, n_names, &n_val_shard, err, errlen)
                    : load_text(d, &b, path, is_dir, names, n_names, err, errlen);
    free_names(names, n_names);
    if (!tokens)
        d->n = b.n;
    if (rc == 0 && d->n == 0) {
        ah_errf(err, errlen, is_dir ? "%s: no %s" : "%s: empty file", path,
                tokens ? "tokens in its .bin files" : "readable text files");
        rc = -1;
    }
    if (rc == 0)
        rc = split(d, path, val_fraction, n_val_shard, seq, err, errlen);
    /* shrink to fit: the text stays resident for the whole run (tokens stay mapped) */
    unsigned char *p = b.n ? realloc(b.p, b.n) : NULL;
    d->bytes = p ? p : b.p;
    if (rc != 0) {
        ah_dataset_free(d);
        return -1;
    }
    snprintf(d->source, sizeof d->source, "%s", path);
    return 0;
}

/* Drops d's files (and text) from token keep on: its validation part. */
static void keep_train(ah_dataset *d, size_t keep) {
    int nf = 0;
    for (int i = 0; i < d->n_files; i++) {
        ah_data_file *f = &d->files[i];
        if (f->first >= keep) {
            if (d->kind == AH_DATA_TOKENS)
                ah__token_file_unmap(f);
            else
                free(f->path);
            continue;
        }
        if (f->first + f->count > keep)
            f->count = keep - f->first;
        d->files[nf++] = *f;
    }
    d->n_files = nf;
    d->n = keep;
}

int ah_dataset_set_validation(ah_dataset *d, const char *path, int seq, char *err, size_t errlen) {
    ah_dataset v;
    if (ah_dataset_load_typed(&v, path, 0.0, seq, d->raw_type, err, errlen) != 0)
        return -1;
    if (v.kind != d->kind) {
        ah_errf(err, errlen, "%s: %s data, but --data %s is %s", path, ah_data_kind_name(v.kind), d->source,
                ah_data_kind_name(d->kind));
        ah_dataset_free(&v);
        return -1;
    }
    size_t keep = d->n_train;
    ah_data_file *files = realloc(d->files, sizeof *files * (size_t)(d->n_files + v.n_files));
    unsigned char *p = d->kind == AH_DATA_TEXT ? realloc(d->bytes, keep + v.n) : NULL;
    if (files)
        d->files = files;
    if (p)
        d->bytes = p;
    if (files == NULL || (d->kind == AH_DATA_TEXT && p == NULL)) {
        ah_errf(err, errlen, "%s: out of memory", path);
        ah_dataset_free(&v);
        return -1;
    }
    /* all of --data is train now: its own validation part (a tail or _val shards) is dropped */
    keep_train(d, keep);
    if (d->kind == AH_DATA_TEXT)
        memcpy(d->bytes + keep, v.bytes, v.n);
    for (int i = 0; i < v.n_files; i++) {
        d->files[d->n_files + i] = v.files[i];
        d->files[d->n_files + i].first += keep;
    }
    d->n_files += v.n_files;
    v.n_files = 0; /* the mappings are d's now */
    d->n = keep + v.n;
    d->n_train = keep;
    ah_dataset_free(&v);
    return 0;
}

int ah_dataset_check_vocab(const ah_dataset *d, int vocab, char *err, size_t errlen) {
    if (d->kind == AH_DATA_TEXT) {
        if (vocab >= 256)
            return 0;
        ah_errf(err, errlen, "%s: text data has 256 byte values, the vocabulary is %d", d->source, vocab);
        return -1;
    }
    for (int f = 0; f < d->n_files; f++) {
        const ah_data_file *fi = &d->files[f];
        if (fi->type == AH_TOKENS_UNSTATED && vocab > 65536) {
            ah_errf(err, errlen,
                    "%s: a raw token file says nothing of its token type: with the vocabulary %d give "
                    "--data-dtype "
                    "uint32 (or uint16)",
                    fi->path, vocab);
            return -1;
        }
        size_t elem = (size_t)ah_token_type_size(fi->type);
        for (size_t i = 0; i < fi->count; i++) {
            int64_t t = ah__token_file_at(fi, i);
            if (t < 0) {
                ah_errf(err, errlen, "%s: token id %lld at byte offset %zu is negative", fi->path,
                        (long long)t, fi->header + elem * i);
                return -1;
            }
            if (t >= vocab) {
                ah_errf(err, errlen, "%s: token id %lld at byte offset %zu is not below the vocabulary %d",
                        fi->path, (long long)t, fi->header + elem * i, vocab);
                return -1;
            }
        }
    }
    return 0;
}

void ah_dataset_free(ah_dataset *d) {
    if (d == NULL)
        return;
    free(d->bytes);
    for (int i = 0; i < d->n_files; i++) {
        if (d->kind == AH_DATA_TOKENS)
            ah__token_file_unmap(&d->files[i]);
        else
            free(d->files[i].path);
    }
    free(d->files);
    memset(d, 0, sizeof *d);
}

/* The file holding token i (files are in token order). */
static const ah_data_file *file_of(const ah_dataset *d, size_t i) {
    int lo = 0, hi = d->n_files - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (d->files[mid].first <= i)
            lo = mid;
        else
            hi = mid - 1;
    }
    return &d->files[lo];
}

int64_t ah_dataset_token(const ah_dataset *d, size_t i) {
    if (d->kind == AH_DATA_TEXT)
        return d->bytes[i];
    const ah_data_file *f = file_of(d, i);
    return ah__token_file_at(f, i - f->first);
}

/* Tokens [off, off + n) into out, across files. */
static void copy_tokens(const ah_dataset *d, size_t off, size_t n, int *out) {
    const ah_data_file *f = file_of(d, off);
    const ah_data_file *end = d->files + d->n_files;
    for (size_t k = 0; k < n; k++, off++) {
        while (off >= f->first + f->count && f + 1 < end)
            f++;
        out[k] = (int)ah__token_file_at(f, off - f->first);
    }
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
    if ((d->kind == AH_DATA_TEXT ? d->bytes == NULL : d->n_files == 0) || len < (size_t)seq + 1) {
        /* Misuse (no such split, or sequences longer than at load): serve
         * zeros rather than read out of bounds. */
        memset(tokens, 0, count * sizeof *tokens);
        memset(targets, 0, count * sizeof *targets);
        return;
    }
    size_t range = len - (size_t)seq; /* offsets 0 .. len - seq - 1 */
    for (int r = 0; r < rows; r++) {
        size_t off = base + row_offset(seed, step, (long)first_row + r, validation, range);
        int *tok = tokens + (size_t)r * (size_t)seq;
        int *tgt = targets + (size_t)r * (size_t)seq;
        if (d->kind == AH_DATA_TOKENS) {
            copy_tokens(d, off, (size_t)seq, tok);
            copy_tokens(d, off + 1, (size_t)seq, tgt);
        } else {
            const unsigned char *src = d->bytes + off;
            for (int t = 0; t < seq; t++) {
                tok[t] = src[t];
                tgt[t] = src[t + 1];
            }
        }
    }
}

/* Calls f(ctx, id) for every id of the train split, file by file. */
static void for_train_ids(const ah_dataset *d, void (*f)(void *, int64_t), void *ctx) {
    if (d->kind == AH_DATA_TEXT) {
        for (size_t i = 0; i < d->n_train; i++)
            f(ctx, d->bytes[i]);
        return;
    }
    for (int k = 0; k < d->n_files && d->files[k].first < d->n_train; k++) {
        const ah_data_file *fi = &d->files[k];
        size_t end = fi->first + fi->count < d->n_train ? fi->count : d->n_train - fi->first;
        for (size_t i = 0; i < end; i++)
            f(ctx, ah__token_file_at(fi, i));
    }
}

static void max_id(void *ctx, int64_t t) {
    int64_t *m = ctx;
    *m = *m < 0 || t < 0 ? -1 : t > *m ? t : *m;
}

typedef struct {
    size_t *counts, n;
} counter;

static void count_id(void *ctx, int64_t t) {
    counter *c = ctx;
    if (t >= 0 && (size_t)t < c->n)
        c->counts[t]++;
}

double ah_dataset_unigram_entropy(const ah_dataset *d) {
    if (d == NULL || (d->kind == AH_DATA_TEXT ? d->bytes == NULL : d->n_files == 0) || d->n_train == 0)
        return 0.0;
    /* one count per id up to the largest id of the train split (ids outside [0, 2^24) give 0) */
    int64_t max = 255;
    for_train_ids(d, max_id, &max);
    if (max < 0 || max >= (1 << 24))
        return 0.0;
    counter c = {calloc((size_t)max + 1, sizeof(size_t)), (size_t)max + 1};
    if (c.counts == NULL)
        return 0.0;
    for_train_ids(d, count_id, &c);
    double h = 0.0, n = (double)d->n_train;
    for (size_t i = 0; i < c.n; i++) {
        if (c.counts[i] == 0)
            continue;
        double p = (double)c.counts[i] / n;
        h -= p * log(p);
    }
    free(c.counts);
    return h;
}
