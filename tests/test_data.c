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
    write_bytes(dir, "corpus.bin", bytes, n);
    char path[128];
    snprintf(path, sizeof path, "%s/corpus.bin", dir);
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
