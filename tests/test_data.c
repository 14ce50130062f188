/* Unit tests for src/engine/data: corpus loading (file, directory, split,
 * errors), deterministic partition-independent batches, unigram entropy. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/data.h"
#include "test_util.h"

#define GPL3 "/usr/share/common-licenses/GPL-3"
#define TEXT_FIXTURES AH_FIXTURES "/text"

/* ----------------------------------------------------------- helpers */

/* A fresh temporary directory; path must hold 64 bytes. */
static void make_tmpdir(char *path) {
    strcpy(path, "/tmp/ahdata_XXXXXX");
    assert_non_null(mkdtemp(path));
}

/* Writes n bytes to dir/name (dir may be NULL: name is the full path). */
static void write_bytes(const char *dir, const char *name, const void *data, size_t n) {
    char path[512];
    if (dir)
        snprintf(path, sizeof path, "%s/%s", dir, name);
    else
        snprintf(path, sizeof path, "%s", name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static void write_text(const char *dir, const char *name, const char *text) {
    write_bytes(dir, name, text, strlen(text));
}

/* Removes the directory's entries (one level, plus one nested empty dir) and
 * the directory itself. */
static void remove_dir(const char *dir, const char *const *names) {
    char path[512];
    for (int i = 0; names[i] != NULL; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (unlink(path) != 0)
            rmdir(path);
    }
    assert_int_equal(rmdir(dir), 0);
}

/* A corpus of n pseudo-random bytes (every 16-byte window is unique with
 * overwhelming probability, so a row's offset can be recovered). */
static unsigned char *random_bytes(size_t n, uint64_t key) {
    unsigned char *b = malloc(n);
    assert_non_null(b);
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)(ah_hash64(key * 1000003u + i) >> 56);
    return b;
}

/* Loads bytes from a temporary file. */
static void load_bytes(ah_dataset *d, const unsigned char *bytes, size_t n, double val, int seq) {
    char dir[64], err[256];
    make_tmpdir(dir);
    write_bytes(dir, "corpus.dat", bytes, n);
    char path[128];
    snprintf(path, sizeof path, "%s/corpus.dat", dir);
    int rc = ah_dataset_load(d, path, val, seq, err, sizeof err);
    if (rc != 0)
        fail_msg("load: %s", err);
    unlink(path);
    rmdir(dir);
}

/* Offset of a row in the corpus: the tokens are a window of the corpus, and
 * targets are that window shifted by one. Fails if not found. */
static size_t row_offset_of(const ah_dataset *d, const int *tok, const int *tgt, int seq) {
    for (size_t off = 0; off + (size_t)seq < d->n; off++) {
        int ok = 1;
        for (int t = 0; t < seq && ok; t++)
            ok = d->bytes[off + t] == tok[t] && d->bytes[off + t + 1] == tgt[t];
        if (ok)
            return off;
    }
    fail_msg("row not found in the corpus");
    return 0;
}

/* Expects ah_dataset_load to fail with a message containing the path and
 * `also` (if not NULL); d must be left empty. */
static void expect_load_error(const char *path, double val, int seq, const char *also) {
    ah_dataset d;
    char err[512] = "";
    assert_int_equal(ah_dataset_load(&d, path, val, seq, err, sizeof err), -1);
    assert_contains(err, path);
    if (also)
        assert_contains(err, also);
    assert_null(strchr(err, '\n'));
    assert_null(d.bytes);
    assert_int_equal(d.n, 0);
    ah_dataset_free(&d); /* safe on a failed load */
}

/* ----------------------------------------------------------- hash */

static void test_hash64_splitmix(void **state) {
    (void)state;
    /* splitmix64 seeded with 0: the first outputs are the finalizer applied
     * to k * golden-gamma (k = 0, 1, ...): well-known reference values. */
    assert_true(ah_hash64(0) == 0xe220a8397b1dcdafULL);
    assert_true(ah_hash64(0x9e3779b97f4a7c15ULL) == 0x6e789e6aa1b965f4ULL);
    assert_true(ah_hash64(1) != ah_hash64(2));
}

/* ----------------------------------------------------------- loading */

static void test_load_directory_concatenates_in_name_order(void **state) {
    (void)state;
    char dir[64], err[256] = "";
    make_tmpdir(dir);
    write_text(dir, "b.txt", "BBBBBBBBBB");
    write_text(dir, "a.txt", "aaaaaaaaaa");
    write_text(dir, "c.txt", "cccccccccc");
    write_text(dir, ".hidden", "HIDDEN");
    char sub[128];
    snprintf(sub, sizeof sub, "%s/sub", dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    write_text(sub, "z.txt", "not loaded: not recursive");

    ah_dataset d;
    assert_int_equal(ah_dataset_load(&d, dir, 0.0, 8, err, sizeof err), 0);
    assert_int_equal(d.n, 30);
    assert_int_equal(d.n_train, 30);
    assert_memory_equal(d.bytes, "aaaaaaaaaaBBBBBBBBBBcccccccccc", 30);
    assert_string_equal(d.source, dir);
    ah_dataset_free(&d);
    assert_null(d.bytes);

    /* A trailing slash works the same. */
    char dir_slash[80];
    snprintf(dir_slash, sizeof dir_slash, "%s/", dir);
    assert_int_equal(ah_dataset_load(&d, dir_slash, 0.0, 8, err, sizeof err), 0);
    assert_memory_equal(d.bytes, "aaaaaaaaaaBBBBBBBBBBcccccccccc", 30);
    ah_dataset_free(&d);

    char zpath[160];
    snprintf(zpath, sizeof zpath, "%s/z.txt", sub);
    unlink(zpath);
    const char *names[] = {"a.txt", "b.txt", "c.txt", ".hidden", "sub", NULL};
    remove_dir(dir, names);
}

static void test_load_single_file(void **state) {
    (void)state;
    char dir[64], path[128], err[256] = "";
    make_tmpdir(dir);
    write_text(dir, "one.txt", "hello, world\n");
    snprintf(path, sizeof path, "%s/one.txt", dir);
    ah_dataset d;
    assert_int_equal(ah_dataset_load(&d, path, 0.0, 4, err, sizeof err), 0);
    assert_int_equal(d.n, 13);
    assert_int_equal(d.n_train, 13);
    assert_memory_equal(d.bytes, "hello, world\n", 13);
    assert_string_equal(d.source, path);
    ah_dataset_free(&d);
    unlink(path);
    rmdir(dir);
}

static void test_validation_split_is_the_tail(void **state) {
    (void)state;
    unsigned char buf[1000];
    for (int i = 0; i < 1000; i++)
        buf[i] = (unsigned char)(i < 900 ? 'T' : 'V');
    ah_dataset d;
    load_bytes(&d, buf, 1000, 0.1, 16);
    assert_int_equal(d.n, 1000);
    assert_int_equal(d.n_train, 900);
    assert_int_equal(d.bytes[899], 'T');
    assert_int_equal(d.bytes[900], 'V');

    /* Every validation row reads 'V' only, every train row 'T' only. */
    int tok[32 * 16], tgt[32 * 16];
    ah_dataset_batch(&d, 1, 7, 3, 0, 32, 16, tok, tgt);
    for (int i = 0; i < 32 * 16; i++)
        assert_true(tok[i] == 'V' && tgt[i] == 'V');
    ah_dataset_batch(&d, 0, 7, 3, 0, 32, 16, tok, tgt);
    for (int i = 0; i < 32 * 16; i++)
        assert_true(tok[i] == 'T' && tgt[i] == 'T');
    ah_dataset_free(&d);

    /* The split size rounds to the nearest byte. */
    load_bytes(&d, buf, 999, 0.25, 16);
    assert_int_equal(d.n - d.n_train, 250); /* 249.75 */
    ah_dataset_free(&d);
    load_bytes(&d, buf, 1000, 0.5, 16);
    assert_int_equal(d.n_train, 500);
    ah_dataset_free(&d);
}

static void test_fixture_corpus(void **state) {
    (void)state;
    /* The shipped text fixtures (license texts) load as one corpus. */
    ah_dataset d;
    char err[256] = "";
    assert_int_equal(ah_dataset_load(&d, TEXT_FIXTURES, 0.1, 128, err, sizeof err), 0);
    assert_true(d.n > 50000);
    assert_true(d.n_train > 0.85 * d.n && d.n_train < 0.95 * d.n);
    double h = ah_dataset_unigram_entropy(&d);
    assert_true(h > 2.0 && h < 4.0); /* English text: ~2.9 nats/byte */
    ah_dataset_free(&d);
}

/* ----------------------------------------------------------- errors */

static void test_load_errors(void **state) {
    (void)state;
    char dir[64], path[128], err[512];
    make_tmpdir(dir);

    /* Empty directory, or only hidden files / subdirectories. */
    expect_load_error(dir, 0.0, 8, "no readable text files");
    write_text(dir, ".hidden", "hidden text that is long enough to be a corpus");
    char sub[128];
    snprintf(sub, sizeof sub, "%s/sub", dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    expect_load_error(dir, 0.0, 8, "no readable text files");

    /* Directory of empty files. */
    write_text(dir, "empty.txt", "");
    expect_load_error(dir, 0.0, 8, "no readable text files");

    /* Missing path. */
    snprintf(path, sizeof path, "%s/missing.txt", dir);
    expect_load_error(path, 0.0, 8, "cannot read");

    /* Empty file. */
    snprintf(path, sizeof path, "%s/empty.txt", dir);
    expect_load_error(path, 0.0, 8, "empty");

    /* Too small: the train split needs seq + 1 bytes. */
    write_text(dir, "small.txt", "0123456789"); /* 10 bytes */
    snprintf(path, sizeof path, "%s/small.txt", dir);
    expect_load_error(path, 0.0, 10, "10 bytes, too small for sequences of 10 (+1) tokens");
    ah_dataset d;
    assert_int_equal(ah_dataset_load(&d, path, 0.0, 9, err, sizeof err), 0); /* exactly seq + 1 */
    ah_dataset_free(&d);

    /* Too small for the validation split (and for train after the split). */
    char big[201];
    memset(big, 'x', 200);
    big[200] = '\0';
    write_text(dir, "mid.txt", big);
    snprintf(path, sizeof path, "%s/mid.txt", dir);
    expect_load_error(path, 0.1, 32, "validation"); /* 20 validation bytes < 33 */
    expect_load_error(path, 0.1, 32, "too small for sequences of 32 (+1) tokens");
    expect_load_error(path, 0.5, 100, "too small");                           /* 100 train bytes < 101 */
    assert_int_equal(ah_dataset_load(&d, path, 0.1, 19, err, sizeof err), 0); /* 20 = 19 + 1 */
    ah_dataset_free(&d);
    expect_load_error(path, 0.001, 8, "validation"); /* a positive fraction never rounds to no split */

    /* val_fraction outside [0, 0.5], bad sequence length. */
    expect_load_error(path, 0.6, 8, "0.6");
    expect_load_error(path, -0.1, 8, NULL);
    expect_load_error(path, NAN, 8, NULL);
    expect_load_error(path, 0.0, 0, NULL);

    /* Unreadable file (root reads everything, so only checked as a user). */
    if (geteuid() != 0) {
        write_text(dir, "locked.txt", big);
        snprintf(path, sizeof path, "%s/locked.txt", dir);
        assert_int_equal(chmod(path, 0), 0);
        expect_load_error(path, 0.0, 8, "cannot read");
        /* In a directory, an unreadable file fails the load (names the file). */
        expect_load_error(dir, 0.0, 8, "locked.txt");
        unlink(path);
    }

    /* A NULL or zero-length error buffer is tolerated. */
    assert_int_equal(ah_dataset_load(&d, "/nonexistent/ah", 0.0, 8, NULL, 0), -1);

    const char *names[] = {".hidden", "sub", "empty.txt", "small.txt", "mid.txt", NULL};
    remove_dir(dir, names);
}

/* ----------------------------------------------------------- batches */

static void test_batch_deterministic_and_partition_independent(void **state) {
    (void)state;
    const size_t n = 20000;
    const int seq = 16, rows = 8;
    unsigned char *bytes = random_bytes(n, 1);
    ah_dataset d;
    load_bytes(&d, bytes, n, 0.1, seq);

    int a_tok[8 * 16], a_tgt[8 * 16], b_tok[8 * 16], b_tgt[8 * 16];
    for (int val = 0; val <= 1; val++) {
        ah_dataset_batch(&d, val, 42, 5, 0, rows, seq, a_tok, a_tgt);
        ah_dataset_batch(&d, val, 42, 5, 0, rows, seq, b_tok, b_tgt);
        assert_memory_equal(a_tok, b_tok, sizeof a_tok);
        assert_memory_equal(a_tgt, b_tgt, sizeof a_tgt);

        /* Rows [2, 4) alone equal rows 2..3 of the full batch; so does every
         * other partition of the 8 rows. */
        ah_dataset_batch(&d, val, 42, 5, 2, 2, seq, b_tok, b_tgt);
        assert_memory_equal(b_tok, a_tok + 2 * seq, 2 * seq * sizeof(int));
        assert_memory_equal(b_tgt, a_tgt + 2 * seq, 2 * seq * sizeof(int));
        for (int parts = 1; parts <= rows; parts *= 2) {
            int per = rows / parts;
            for (int p = 0; p < parts; p++) {
                ah_dataset_batch(&d, val, 42, 5, p * per, per, seq, b_tok, b_tgt);
                assert_memory_equal(b_tok, a_tok + p * per * seq, per * seq * sizeof(int));
                assert_memory_equal(b_tgt, a_tgt + p * per * seq, per * seq * sizeof(int));
            }
        }

        /* Rows of one batch are distinct; another step, seed or split gives
         * other offsets. */
        size_t off[8];
        for (int r = 0; r < rows; r++)
            off[r] = row_offset_of(&d, a_tok + r * seq, a_tgt + r * seq, seq);
        int distinct = 0;
        for (int r = 1; r < rows; r++)
            distinct += off[r] != off[0];
        assert_true(distinct >= rows - 2);

        ah_dataset_batch(&d, val, 42, 6, 0, rows, seq, b_tok, b_tgt);
        int differ = 0;
        for (int r = 0; r < rows; r++)
            differ += row_offset_of(&d, b_tok + r * seq, b_tgt + r * seq, seq) != off[r];
        assert_true(differ >= rows - 1);

        ah_dataset_batch(&d, val, 43, 5, 0, rows, seq, b_tok, b_tgt);
        differ = 0;
        for (int r = 0; r < rows; r++)
            differ += row_offset_of(&d, b_tok + r * seq, b_tgt + r * seq, seq) != off[r];
        assert_true(differ >= rows - 1);
    }
    ah_dataset_free(&d);
    free(bytes);
}

static void test_batch_targets_are_shifted_tokens(void **state) {
    (void)state;
    const size_t n = 5000;
    const int seq = 32, rows = 6;
    unsigned char *bytes = random_bytes(n, 2);
    ah_dataset d;
    load_bytes(&d, bytes, n, 0.2, seq);
    int tok[6 * 32], tgt[6 * 32];
    for (int val = 0; val <= 1; val++) {
        ah_dataset_batch(&d, val, 9, 0, 0, rows, seq, tok, tgt);
        for (int r = 0; r < rows; r++) {
            const int *tk = tok + r * seq, *tg = tgt + r * seq;
            for (int t = 0; t + 1 < seq; t++)
                assert_int_equal(tg[t], tk[t + 1]);
            size_t off = row_offset_of(&d, tk, tg, seq);
            for (int t = 0; t < seq; t++) {
                assert_int_equal(tk[t], d.bytes[off + t]);
                assert_int_equal(tg[t], d.bytes[off + t + 1]);
                assert_true(tk[t] >= 0 && tk[t] < 256);
            }
        }
    }
    ah_dataset_free(&d);
    free(bytes);
}

static void test_batch_offsets_stay_in_split(void **state) {
    (void)state;
    const size_t n = 4000;
    const int seq = 16, rows = 16;
    unsigned char *bytes = random_bytes(n, 3);
    ah_dataset d;
    load_bytes(&d, bytes, n, 0.25, seq); /* train [0, 3000), validation [3000, 4000) */
    assert_int_equal(d.n_train, 3000);
    int tok[16 * 16], tgt[16 * 16];
    size_t lo[2] = {SIZE_MAX, SIZE_MAX}, hi[2] = {0, 0};
    for (long step = 0; step < 200; step++) {
        for (int val = 0; val <= 1; val++) {
            ah_dataset_batch(&d, val, 1234, step, 0, rows, seq, tok, tgt);
            for (int r = 0; r < rows; r++) {
                size_t off = row_offset_of(&d, tok + r * seq, tgt + r * seq, seq);
                if (val) {
                    assert_true(off >= d.n_train);             /* never reads train bytes */
                    assert_true(off + (size_t)seq <= d.n - 1); /* last target in range */
                } else {
                    assert_true(off + (size_t)seq <= d.n_train - 1); /* never reads validation bytes */
                }
                lo[val] = off < lo[val] ? off : lo[val];
                hi[val] = off > hi[val] ? off : hi[val];
            }
        }
    }
    /* 3200 draws per split cover it end to end. */
    assert_true(lo[0] < 20 && hi[0] > 3000 - 17 - 20);
    assert_true(lo[1] < 3000 + 10 && hi[1] > 4000 - 17 - 10);
    ah_dataset_free(&d);
    free(bytes);
}

static void test_batch_offset_range_inclusive(void **state) {
    (void)state;
    /* A split of seq + 3 bytes admits offsets {0, 1, 2}: all three occur and
     * nothing else; a split of exactly seq + 1 bytes only offset 0. */
    const int seq = 8;
    unsigned char bytes[11];
    for (int i = 0; i < 11; i++)
        bytes[i] = (unsigned char)('a' + i);
    ah_dataset d;
    load_bytes(&d, bytes, 11, 0.0, seq);
    int seen[3] = {0, 0, 0};
    int tok[8], tgt[8];
    for (long step = 0; step < 300; step++) {
        ah_dataset_batch(&d, 0, 5, step, 0, 1, seq, tok, tgt);
        int off = tok[0] - 'a';
        assert_true(off >= 0 && off <= 2);
        assert_int_equal(tgt[seq - 1], 'a' + off + seq);
        seen[off]++;
    }
    assert_true(seen[0] > 50 && seen[1] > 50 && seen[2] > 50);
    ah_dataset_free(&d);

    load_bytes(&d, bytes, 9, 0.0, seq);
    for (long step = 0; step < 20; step++) {
        ah_dataset_batch(&d, 0, 5, step, 0, 1, seq, tok, tgt);
        assert_int_equal(tok[0], 'a');
        assert_int_equal(tgt[seq - 1], 'i');
    }
    ah_dataset_free(&d);
}

static void test_batch_misuse_is_safe(void **state) {
    (void)state;
    /* No validation split, or sequences longer than the split: zeros, no
     * out-of-bounds reads (the sanitizer build checks the latter). */
    unsigned char bytes[64];
    memset(bytes, 'q', sizeof bytes);
    ah_dataset d;
    load_bytes(&d, bytes, 64, 0.0, 8);
    int tok[2 * 100], tgt[2 * 100];
    memset(tok, 0x55, sizeof tok);
    ah_dataset_batch(&d, 1, 1, 0, 0, 2, 8, tok, tgt);
    for (int i = 0; i < 16; i++)
        assert_true(tok[i] == 0 && tgt[i] == 0);
    ah_dataset_batch(&d, 0, 1, 0, 0, 2, 100, tok, tgt);
    for (int i = 0; i < 200; i++)
        assert_true(tok[i] == 0 && tgt[i] == 0);
    ah_dataset_free(&d);
}

/* ----------------------------------------------------------- entropy */

static void test_unigram_entropy(void **state) {
    (void)state;
    char text[201];
    for (int i = 0; i < 160; i++)
        text[i] = i % 2 ? 'b' : 'a';
    for (int i = 160; i < 200; i++)
        text[i] = 'c'; /* the validation split: not counted */
    text[200] = '\0';
    ah_dataset d;
    load_bytes(&d, (const unsigned char *)text, 200, 0.2, 16);
    assert_int_equal(d.n_train, 160);
    assert_double_equal(ah_dataset_unigram_entropy(&d), log(2.0), 1e-12);
    ah_dataset_free(&d);

    load_bytes(&d, (const unsigned char *)text, 200, 0.0, 16); /* a:80 b:80 c:40 */
    double want = -(0.4 * log(0.4) * 2 + 0.2 * log(0.2));
    assert_double_equal(ah_dataset_unigram_entropy(&d), want, 1e-12);
    ah_dataset_free(&d);

    memset(text, 'z', 200);
    load_bytes(&d, (const unsigned char *)text, 200, 0.0, 16);
    assert_double_equal(ah_dataset_unigram_entropy(&d), 0.0, 1e-15);
    ah_dataset_free(&d);

    unsigned char all[256 * 4];
    for (int i = 0; i < 256 * 4; i++)
        all[i] = (unsigned char)i;
    load_bytes(&d, all, sizeof all, 0.0, 16);
    assert_double_equal(ah_dataset_unigram_entropy(&d), log(256.0), 1e-12);
    ah_dataset_free(&d);
}

/* ----------------------------------------------------------- real text */

static void test_real_corpus_gpl3(void **state) {
    (void)state;
    FILE *f = fopen(GPL3, "rb");
    if (f == NULL) {
        skip(); /* Debian always ships it; elsewhere there is nothing to check */
        return;
    }
    static unsigned char want[1 << 17];
    size_t n = fread(want, 1, sizeof want, f);
    fclose(f);
    assert_true(n > 30000 && n < sizeof want);

    ah_dataset d;
    char err[256] = "";
    const int seq = 64, rows = 12;
    assert_int_equal(ah_dataset_load(&d, GPL3, 0.1, seq, err, sizeof err), 0);
    assert_int_equal(d.n, n);
    assert_memory_equal(d.bytes, want, n);
    assert_true(d.n - d.n_train == (size_t)floor(n * 0.1 + 0.5));
    assert_string_equal(d.source, GPL3);

    double h = ah_dataset_unigram_entropy(&d);
    assert_true(h > 2.0 && h < 4.0 && h < log(256.0));

    int tok[12 * 64], tgt[12 * 64], tok2[12 * 64], tgt2[12 * 64];
    for (int val = 0; val <= 1; val++) {
        for (long step = 0; step < 10; step++) {
            ah_dataset_batch(&d, val, 2024, step, 0, rows, seq, tok, tgt);
            for (int r = 0; r < rows; r++) {
                const int *tk = tok + r * seq, *tg = tgt + r * seq;
                for (int t = 0; t < seq; t++)
                    assert_true(tk[t] > 0 && tk[t] < 128); /* ASCII text */
                for (int t = 0; t + 1 < seq; t++)
                    assert_int_equal(tg[t], tk[t + 1]);
            }
            /* Two replicas of 6 rows each see the same global batch. */
            ah_dataset_batch(&d, val, 2024, step, 0, rows / 2, seq, tok2, tgt2);
            ah_dataset_batch(&d, val, 2024, step, rows / 2, rows / 2, seq, tok2 + rows / 2 * seq,
                             tgt2 + rows / 2 * seq);
            assert_memory_equal(tok, tok2, sizeof tok);
            assert_memory_equal(tgt, tgt2, sizeof tgt);
        }
    }
    ah_dataset_free(&d);
}

/* ----------------------------------------------------------- token files */

/* An llm.c token file: the 256-int32 header (magic, version, count), then the
 * tokens as uint16 (little-endian, as on x86). */
static void write_llmc(const char *dir, const char *name, const uint16_t *tok, int n, int version,
                       int count) {
    int32_t header[256] = {AH_LLMC_MAGIC, version, count};
    size_t bytes = sizeof header + sizeof(uint16_t) * (size_t)n;
    unsigned char *buf = malloc(bytes);
    assert_non_null(buf);
    memcpy(buf, header, sizeof header);
    memcpy(buf + sizeof header, tok, sizeof(uint16_t) * (size_t)n);
    write_bytes(dir, name, buf, bytes);
    free(buf);
}

static uint16_t *random_tokens(int n, int vocab, uint64_t key) {
    uint16_t *t = malloc(sizeof *t * (size_t)n);
    assert_non_null(t);
    for (int i = 0; i < n; i++)
        t[i] = (uint16_t)(ah_hash64(key * 7919u + (uint64_t)i) % (uint64_t)vocab);
    return t;
}

/* Tokens [off, off + n) of the dataset equal want. */
static void assert_tokens_equal(const ah_dataset *d, size_t off, const uint16_t *want, size_t n) {
    for (size_t i = 0; i < n; i++)
        assert_int_equal(ah_dataset_token(d, off + i), want[i]);
}

/* Every row of a batch is a window of the tokens: found at some offset. */
static void assert_rows_are_windows(const ah_dataset *d, const uint16_t *tok, size_t lo, size_t hi, int val) {
    enum { ROWS = 6, SEQ = 12 };
    int x[ROWS * SEQ], y[ROWS * SEQ];
    ah_dataset_batch(d, val, 9, 4, 0, ROWS, SEQ, x, y);
    for (int r = 0; r < ROWS; r++) {
        int found = 0;
        for (size_t off = lo; off + SEQ < hi && !found; off++) {
            int ok = 1;
            for (int t = 0; t < SEQ && ok; t++)
                ok = x[r * SEQ + t] == tok[off + t] && y[r * SEQ + t] == tok[off + t + 1];
            found = ok;
        }
        assert_true(found);
    }
}

static void test_llmc_and_raw_token_files(void **state) {
    (void)state;
    char dir[64], path[128], err[512];
    make_tmpdir(dir);
    enum { N = 3000 };
    uint16_t *tok = random_tokens(N, 50257, 1);
    write_llmc(dir, "a.bin", tok, N, 1, N);
    write_bytes(dir, "b.bin", tok, sizeof *tok * N); /* nanoGPT: raw uint16, no header */
    const char *names[] = {"a.bin", "b.bin"};
    for (int k = 0; k < 2; k++) {
        ah_dataset d;
        snprintf(path, sizeof path, "%s/%s", dir, names[k]);
        assert_int_equal(ah_dataset_load(&d, path, 0.1, 16, err, sizeof err), 0);
        assert_int_equal(d.kind, AH_DATA_TOKENS);
        assert_int_equal(d.n, N);
        assert_int_equal(d.n_train, N - 300);
        assert_tokens_equal(&d, 0, tok, N);
        assert_int_equal(d.n_files, 1);
        assert_int_equal(d.files[0].header, k == 0 ? AH_LLMC_HEADER_BYTES : 0);
        assert_rows_are_windows(&d, tok, 0, N - 300, 0);
        assert_rows_are_windows(&d, tok, N - 300, N, 1);
        assert_int_equal(ah_dataset_check_vocab(&d, 50257, err, sizeof err), 0);
        assert_true(ah_dataset_unigram_entropy(&d) > 7.0); /* ~ln(2700): nearly all distinct */
        ah_dataset_free(&d);
    }
    const char *const all[] = {"a.bin", "b.bin", NULL};
    remove_dir(dir, all);
    free(tok);
}

static void test_token_file_errors(void **state) {
    (void)state;
    char dir[64], path[128];
    make_tmpdir(dir);
    uint16_t tok[64] = {0};
    int32_t header[256] = {AH_LLMC_MAGIC, 1, 64};
    /* a header cut short */
    write_bytes(dir, "short.bin", header, 500);
    snprintf(path, sizeof path, "%s/short.bin", dir);
    expect_load_error(path, 0.0, 8, "short.bin: truncated llm.c header: 500 bytes, the header is 1024");
    /* fewer tokens than the header says, and more */
    write_llmc(dir, "cut.bin", tok, 40, 1, 64);
    snprintf(path, sizeof path, "%s/cut.bin", dir);
    expect_load_error(
        path, 0.0, 8,
        "cut.bin: the llm.c header says 64 tokens, the file holds 80 bytes after it (truncated)");
    write_llmc(dir, "long.bin", tok, 64, 1, 10);
    snprintf(path, sizeof path, "%s/long.bin", dir);
    expect_load_error(
        path, 0.0, 8,
        "long.bin: the llm.c header says 10 tokens, the file holds 128 bytes after it (wrong size)");
    /* llm.c's version 2 holds uint32 tokens: 64 uint16 are 32 of them; version 3 is not read */
    write_llmc(dir, "v2.bin", tok, 64, 2, 64);
    snprintf(path, sizeof path, "%s/v2.bin", dir);
    expect_load_error(
        path, 0.0, 8,
        "v2.bin: the llm.c header says 64 tokens, the file holds 128 bytes after it (truncated)");
    write_llmc(dir, "v3.bin", tok, 64, 3, 64);
    snprintf(path, sizeof path, "%s/v3.bin", dir);
    expect_load_error(
        path, 0.0, 8,
        "v3.bin: llm.c token file version 3: version 1 (uint16 tokens) and 2 (uint32 tokens) are read");
    /* a raw file of an odd size, and an empty one */
    write_bytes(dir, "odd.bin", tok, 33);
    snprintf(path, sizeof path, "%s/odd.bin", dir);
    expect_load_error(path, 0.0, 8, "odd.bin: 33 bytes, an odd size: not a file of uint16 tokens");
    write_bytes(dir, "empty.bin", tok, 0);
    snprintf(path, sizeof path, "%s/empty.bin", dir);
    expect_load_error(path, 0.0, 8, "empty.bin: no tokens");
    /* too few tokens for the sequence */
    write_bytes(dir, "few.bin", tok, 16);
    snprintf(path, sizeof path, "%s/few.bin", dir);
    expect_load_error(path, 0.0, 8, "few.bin: 8 tokens, too small for sequences of 8 (+1) tokens");
    const char *const all[] = {"short.bin", "cut.bin",   "long.bin", "v2.bin", "v3.bin",
                               "odd.bin",   "empty.bin", "few.bin",  NULL};
    remove_dir(dir, all);
}

/* A token id at or above the vocabulary: the file and the byte offset of the
 * first such token (after llm.c's header). */
static void test_token_above_vocab_names_file_and_offset(void **state) {
    (void)state;
    char dir[64], err[512];
    make_tmpdir(dir);
    uint16_t *a = random_tokens(400, 256, 2), *b = random_tokens(400, 256, 3);
    b[37] = 300;
    write_bytes(dir, "shard_000.bin", a, 800);
    write_llmc(dir, "shard_001.bin", b, 400, 1, 400);
    ah_dataset d;
    assert_int_equal(ah_dataset_load(&d, dir, 0.0, 16, err, sizeof err), 0);
    assert_int_equal(d.n, 800);
    assert_int_equal(ah_dataset_check_vocab(&d, 301, err, sizeof err), 0);
    assert_int_equal(ah_dataset_check_vocab(&d, 256, err, sizeof err), -1);
    assert_contains(err, "/shard_001.bin: token id 300 at byte offset 1098 is not below the vocabulary 256");
    ah_dataset_free(&d);
    /* text is 256 byte values: a smaller vocabulary cannot hold it */
    ah_dataset t;
    assert_int_equal(ah_dataset_load(&t, TEXT_FIXTURES, 0.1, 16, err, sizeof err), 0);
    assert_int_equal(ah_dataset_check_vocab(&t, 256, err, sizeof err), 0);
    assert_int_equal(ah_dataset_check_vocab(&t, 100, err, sizeof err), -1);
    assert_contains(err, "text data has 256 byte values, the vocabulary is 100");
    ah_dataset_free(&t);
    const char *const all[] = {"shard_000.bin", "shard_001.bin", NULL};
    remove_dir(dir, all);
    free(a), free(b);
}

/* A directory of shards: .bin files in name order (other files ignored),
 * "_val" shards the validation split; --val-data replaces the validation. */
static void test_shard_directory_and_val_data(void **state) {
    (void)state;
    char dir[64], vdir[64], err[512], vpath[128];
    make_tmpdir(dir);
    make_tmpdir(vdir);
    uint16_t *t0 = random_tokens(500, 50257, 4), *t1 = random_tokens(300, 50257, 5),
             *tv = random_tokens(200, 50257, 6);
    write_llmc(dir, "data_train_000001.bin", t1, 300, 1, 300);
    write_llmc(dir, "data_train_000000.bin", t0, 500, 1, 500);
    write_llmc(dir, "data_val_000000.bin", tv, 200, 1, 200);
    write_text(dir, "README", "not a shard");
    ah_dataset d;
    assert_int_equal(ah_dataset_load(&d, dir, 0.1, 16, err, sizeof err), 0);
    assert_int_equal(d.kind, AH_DATA_TOKENS);
    assert_int_equal(d.n, 1000);
    assert_int_equal(d.n_train, 800); /* the _val shard, not a 10% tail */
    assert_tokens_equal(&d, 0, t0, 500);
    assert_tokens_equal(&d, 500, t1, 300);
    assert_tokens_equal(&d, 800, tv, 200);
    assert_rows_are_windows(&d, tv, 0, 200, 1);
    /* --val-data: all of --data is train, the file is the validation split */
    write_bytes(vdir, "val.bin", t1, 600);
    snprintf(vpath, sizeof vpath, "%s/val.bin", vdir);
    assert_int_equal(ah_dataset_set_validation(&d, vpath, 16, err, sizeof err), 0);
    assert_int_equal(d.n_train, 800);
    assert_int_equal(d.n, 1100);
    assert_tokens_equal(&d, 800, t1, 300);
    assert_int_equal(d.n_files, 3); /* the _val shard is dropped */
    assert_int_equal(d.files[2].first, 800);
    assert_rows_are_windows(&d, t1, 0, 300, 1);
    /* a text validation file for token data is refused */
    assert_int_equal(ah_dataset_set_validation(&d, GPL3, 16, err, sizeof err), -1);
    assert_contains(err, "GPL-3: text data, but --data");
    ah_dataset_free(&d);
    /* text with text */
    ah_dataset t;
    assert_int_equal(ah_dataset_load(&t, TEXT_FIXTURES, 0.0, 16, err, sizeof err), 0);
    size_t n = t.n;
    assert_int_equal(t.n_train, n);
    assert_int_equal(ah_dataset_set_validation(&t, GPL3, 16, err, sizeof err), 0);
    assert_int_equal(t.n_train, n);
    assert_true(t.n > n + 30000);
    assert_int_equal(ah_dataset_set_validation(&t, vpath, 16, err, sizeof err), -1);
    assert_contains(err, "val.bin: tokens data, but --data");
    ah_dataset_free(&t);
    const char *const all[] = {"data_train_000000.bin", "data_train_000001.bin", "data_val_000000.bin",
                               "README", NULL};
    remove_dir(dir, all);
    const char *const vall[] = {"val.bin", NULL};
    remove_dir(vdir, vall);
    free(t0), free(t1), free(tv);
}

/* The kind of a path without loading it, and the vocabulary rule autohet
 * train and autohet run share: 256 byte values on text, the model's on tokens. */
static void test_kind_of_path_and_training_vocab(void **state) {
    (void)state;
    char dir[64], tdir[64], path[128];
    make_tmpdir(dir);
    make_tmpdir(tdir);
    uint16_t *t = random_tokens(640, 1000, 9);
    write_llmc(dir, "data_train_000000.bin", t, 640, 1, 640);
    write_llmc(tdir, "magic_no_suffix", t, 64, 1, 64);
    write_text(tdir, "notes.txt", "plain text");
    assert_int_equal(ah_dataset_kind_of(dir), AH_DATA_TOKENS);
    snprintf(path, sizeof path, "%s/magic_no_suffix", tdir);
    assert_int_equal(ah_dataset_kind_of(path), AH_DATA_TOKENS);
    snprintf(path, sizeof path, "%s/notes.txt", tdir);
    assert_int_equal(ah_dataset_kind_of(path), AH_DATA_TEXT);
    assert_int_equal(ah_dataset_kind_of(TEXT_FIXTURES), AH_DATA_TEXT);
    assert_int_equal(ah_dataset_kind_of(GPL3), AH_DATA_TEXT);
    assert_int_equal(ah_dataset_kind_of("/nonexistent/x.bin"), AH_DATA_TEXT);
    /* the kind the loader finds is the kind the path reports */
    ah_dataset d;
    char err[256];
    assert_int_equal(ah_dataset_load(&d, dir, 0.1, 8, err, sizeof err), 0);
    assert_int_equal(d.kind, ah_dataset_kind_of(dir));
    ah_dataset_free(&d);
    assert_int_equal(ah_dataset_vocab(AH_DATA_TOKENS, 50257), 50257);
    assert_int_equal(ah_dataset_vocab(AH_DATA_TEXT, 50257), 256);
    assert_int_equal(ah_dataset_vocab(AH_DATA_TEXT, 100), 256);
    const char *const all[] = {"data_train_000000.bin", NULL};
    remove_dir(dir, all);
    const char *const tall[] = {"magic_no_suffix", "notes.txt", NULL};
    remove_dir(tdir, tall);
    free(t);
}

/* llm.c version 2 (uint32), raw uint32 (--data-dtype) and Megatron's
 * .bin/.idx (written here as _IndexWriter lays it out): the ids past 65,535
 * read back exactly, rows span the documents, the vocabulary check names the
 * byte offset in the file's own token size. */
static void test_uint32_and_megatron_files(void **state) {
    (void)state;
    char dir[64], path[160], err[512];
    make_tmpdir(dir);
    enum { N = 2000 };
    uint32_t tok[N];
    for (int i = 0; i < N; i++)
        tok[i] = (uint32_t)(ah_hash64(77u + (uint64_t)i) % 128256u);
    tok[10] = 128255;
    int32_t header[256] = {AH_LLMC_MAGIC, 2, N};
    unsigned char *buf = malloc(sizeof header + sizeof tok);
    assert_non_null(buf);
    memcpy(buf, header, sizeof header);
    memcpy(buf + sizeof header, tok, sizeof tok);
    write_bytes(dir, "v2.bin", buf, sizeof header + sizeof tok);
    write_bytes(dir, "raw32.bin", tok, sizeof tok);
    /* Megatron int32: three sequences (documents) of 500, 1000, 500 tokens */
    int64_t S = 3, D = 4;
    unsigned char idx[34 + 3 * 4 + 3 * 8 + 4 * 8];
    memcpy(idx, "MMIDIDX\0\0", 9);
    uint64_t version = 1;
    memcpy(idx + 9, &version, 8);
    idx[17] = 4; /* int32 */
    memcpy(idx + 18, &S, 8);
    memcpy(idx + 26, &D, 8);
    int32_t lens[3] = {500, 1000, 500};
    int64_t ptrs[3] = {0, 2000, 6000}, docs[4] = {0, 1, 2, 3};
    memcpy(idx + 34, lens, sizeof lens);
    memcpy(idx + 34 + sizeof lens, ptrs, sizeof ptrs);
    memcpy(idx + 34 + sizeof lens + sizeof ptrs, docs, sizeof docs);
    write_bytes(dir, "mega.idx", idx, sizeof idx);
    write_bytes(dir, "mega.bin", tok, sizeof tok);
    const char *names[] = {"v2.bin", "raw32.bin", "mega.bin", "mega.idx", "mega"};
    for (int k = 0; k < 5; k++) {
        ah_dataset d;
        snprintf(path, sizeof path, "%s/%s", dir, names[k]);
        assert_int_equal(ah_dataset_kind_of(path), AH_DATA_TOKENS);
        assert_int_equal(ah_dataset_load_typed(&d, path, 0.1, 16, k == 1 ? AH_TOKENS_U32 : AH_TOKENS_UNSTATED,
                                               err, sizeof err),
                         0);
        assert_int_equal(d.n, N);
        assert_int_equal(d.files[0].type, k == 0 || k == 1 ? AH_TOKENS_U32 : AH_TOKENS_I32);
        for (int i = 0; i < N; i++)
            assert_int_equal(ah_dataset_token(&d, (size_t)i), tok[i]);
        assert_int_equal(ah_dataset_check_vocab(&d, 128256, err, sizeof err), 0);
        assert_int_equal(ah_dataset_check_vocab(&d, 128255, err, sizeof err), -1);
        char want[64];
        snprintf(want, sizeof want, "token id 128255 at byte offset %d is not below",
                 (k == 0 ? 1024 : 0) + 40);
        assert_contains(err, want);
        int x[4 * 16], y[4 * 16];
        ah_dataset_batch(&d, 0, 3, 1, 0, 4, 16, x, y);
        for (int r = 0; r < 4; r++) {
            size_t off = 0;
            while (off + 16 < N &&
                   !(tok[off] == (uint32_t)x[r * 16] && tok[off + 1] == (uint32_t)x[r * 16 + 1]))
                off++;
            for (int t = 0; t < 16; t++)
                assert_int_equal(y[r * 16 + t], tok[off + (size_t)t + 1]);
        }
        ah_dataset_free(&d);
    }
    /* a raw uint32 file read as uint16 without --data-dtype: refused for a vocabulary over 65,536 */
    ah_dataset d;
    snprintf(path, sizeof path, "%s/raw32.bin", dir);
    assert_int_equal(ah_dataset_load(&d, path, 0.1, 16, err, sizeof err), 0);
    assert_int_equal(d.n, 2 * N);
    assert_int_equal(ah_dataset_check_vocab(&d, 128256, err, sizeof err), -1);
    assert_contains(err, "raw32.bin: a raw token file says nothing of its token type");
    ah_dataset_free(&d);
    const char *const all[] = {"v2.bin", "raw32.bin", "mega.bin", "mega.idx", NULL};
    remove_dir(dir, all);
    free(buf);
}

/* Rows that span two token files read across the boundary; --val-data drops
 * the 25% tail of a single --data file, and only it. */
static void test_rows_across_files_and_val_tail(void **state) {
    (void)state;
    char dir[64], path[128], vpath[128], err[512];
    make_tmpdir(dir);
    uint16_t *a = random_tokens(40, 50257, 11), *b = random_tokens(40, 50257, 12);
    write_bytes(dir, "s_000.bin", a, 80);
    write_bytes(dir, "s_001.bin", b, 80);
    uint16_t ab[80];
    memcpy(ab, a, 80);
    memcpy(ab + 40, b, 80);
    ah_dataset d;
    assert_int_equal(ah_dataset_load(&d, dir, 0.0, 30, err, sizeof err), 0);
    assert_int_equal(d.n_files, 2);
    int spans = 0;
    for (long step = 0; step < 50; step++) {
        int x[30], y[30];
        ah_dataset_batch(&d, 0, 5, step, 0, 1, 30, x, y);
        size_t off = 0;
        while (off + 30 < 80 && !(ab[off] == x[0] && ab[off + 1] == x[1] && ab[off + 2] == x[2]))
            off++;
        for (int t = 0; t < 30; t++)
            assert_int_equal(y[t], ab[off + (size_t)t + 1]);
        spans += off + 30 > 40;
    }
    assert_true(spans > 0);
    ah_dataset_free(&d);
    snprintf(path, sizeof path, "%s/s_000.bin", dir);
    snprintf(vpath, sizeof vpath, "%s/s_001.bin", dir);
    assert_int_equal(ah_dataset_load(&d, path, 0.25, 8, err, sizeof err), 0);
    assert_int_equal(d.n_train, 30);
    assert_int_equal(ah_dataset_set_validation(&d, vpath, 8, err, sizeof err), 0);
    assert_int_equal(d.n_train, 30);
    assert_int_equal(d.n, 70);
    assert_int_equal(d.files[0].count, 30);
    assert_int_equal(d.files[1].first, 30);
    assert_tokens_equal(&d, 30, b, 40);
    ah_dataset_free(&d);
    const char *const all[] = {"s_000.bin", "s_001.bin", NULL};
    remove_dir(dir, all);
    free(a), free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hash64_splitmix),
        cmocka_unit_test(test_load_directory_concatenates_in_name_order),
        cmocka_unit_test(test_load_single_file),
        cmocka_unit_test(test_validation_split_is_the_tail),
        cmocka_unit_test(test_fixture_corpus),
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_batch_deterministic_and_partition_independent),
        cmocka_unit_test(test_batch_targets_are_shifted_tokens),
        cmocka_unit_test(test_batch_offsets_stay_in_split),
        cmocka_unit_test(test_batch_offset_range_inclusive),
        cmocka_unit_test(test_batch_misuse_is_safe),
        cmocka_unit_test(test_unigram_entropy),
        cmocka_unit_test(test_real_corpus_gpl3),
        cmocka_unit_test(test_llmc_and_raw_token_files),
        cmocka_unit_test(test_token_file_errors),
        cmocka_unit_test(test_token_above_vocab_names_file_and_offset),
        cmocka_unit_test(test_shard_directory_and_val_data),
        cmocka_unit_test(test_kind_of_path_and_training_vocab),
        cmocka_unit_test(test_uint32_and_megatron_files),
        cmocka_unit_test(test_rows_across_files_and_val_tail),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
