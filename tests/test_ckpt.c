/* Layer checkpoint shards and manifests: safetensors layout (checked by an
 * independent parse of the bytes), exact round trip, atomic replacement, and
 * detection of truncated, corrupted or mismatched shards with fallback to the
 * next tier. */
#include "test_util.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <xxhash.h>

#include "autohet/ckpt.h"
#include "util/json_file.h"

static void write_manifest_text(const char *dir, const char *text);

static char root[64];

static int setup(void **state) {
    (void)state;
    strcpy(root, "/tmp/ahckpt_XXXXXX");
    assert_non_null(mkdtemp(root));
    return 0;
}

static int teardown(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    return system(cmd) == 0 ? 0 : -1;
}

static void fill(float *v, size_t n, float base) {
    for (size_t i = 0; i < n; i++)
        v[i] = base + 0.001f * (float)i - 0.37f * (float)(i % 7);
}

/* writes a 3-tensor shard (weight 4x6, bias 6, adam_m 4x6) into dir/name */
static void write_layer(const char *dir, const char *name, float base, ah_manifest_entry *e) {
    float w[24], b[6], m[24];
    fill(w, 24, base);
    fill(b, 6, base + 1);
    fill(m, 24, base + 2);
    ah_ckpt_tensor t[3] = {{"weight", w, 2, {4, 6}}, {"bias", b, 1, {6}}, {"adam_m.weight", m, 2, {4, 6}}};
    const char *meta[2][2] = {{"layer", "3"}, {"step", "12"}};
    char path[256], err[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    assert_int_equal(ah_ckpt_write_shard(path, t, 3, (const char *const(*)[2])meta, 2, &e->bytes, &e->xxh64,
                                         err, sizeof err),
                     0);
    snprintf(e->file, sizeof e->file, "%s", name);
}

static void test_safetensors_layout(void **state) {
    (void)state;
    ah_manifest_entry e = {0};
    write_layer(root, "a.safetensors", 1.0f, &e);
    char path[256];
    snprintf(path, sizeof path, "%s/a.safetensors", root);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    unsigned char hdr[8];
    assert_int_equal(fread(hdr, 1, 8, f), 8);
    uint64_t hl = 0;
    for (int k = 0; k < 8; k++)
        hl |= (uint64_t)hdr[k] << (8 * k);
    assert_int_equal(hl % 8, 0);
    char *js = calloc(hl + 1, 1);
    assert_int_equal(fread(js, 1, hl, f), hl);
    /* the spec's keys, offsets contiguous from 0, data = 54 floats */
    assert_contains(js, "\"weight\":{\"shape\":[4,6],\"dtype\":\"F32\",\"data_offsets\":[0,96]}");
    assert_contains(js, "\"bias\":{\"shape\":[6],\"dtype\":\"F32\",\"data_offsets\":[96,120]}");
    assert_contains(js, "\"data_offsets\":[120,216]");
    assert_contains(js, "\"__metadata__\":{\"layer\":\"3\",\"step\":\"12\"}");
    float first;
    assert_int_equal(fread(&first, sizeof first, 1, f), 1);
    float w[24];
    fill(w, 24, 1.0f);
    assert_true(first == w[0]);
    fclose(f);
    free(js);
    assert_int_equal(e.bytes, 8 + hl + 216);
}

static void test_round_trip_is_exact(void **state) {
    (void)state;
    ah_manifest_entry e = {0};
    write_layer(root, "b.safetensors", 2.0f, &e);
    char path[256], err[256];
    snprintf(path, sizeof path, "%s/b.safetensors", root);
    ah_ckpt_loaded *t;
    int n;
    assert_int_equal(ah_ckpt_read_shard(path, e.bytes, e.xxh64, &t, &n, err, sizeof err), 0);
    assert_int_equal(n, 3);
    float want[24];
    fill(want, 24, 2.0f);
    int found = 0;
    for (int i = 0; i < n; i++)
        if (!strcmp(t[i].name, "weight")) {
            found = 1;
            assert_int_equal(t[i].n, 24);
            assert_int_equal(t[i].ndim, 2);
            assert_int_equal(t[i].shape[0], 4);
            assert_int_equal(t[i].shape[1], 6);
            assert_memory_equal(t[i].data, want, sizeof want);
        }
    assert_true(found);
    ah_ckpt_free(t, n);
    /* no temporary file is left behind */
    char tmpglob[300];
    snprintf(tmpglob, sizeof tmpglob, "ls %s | grep -q tmp", root);
    assert_int_not_equal(system(tmpglob), 0);
}

static void corrupt(const char *path, long at, int truncate_to) {
    if (truncate_to >= 0) {
        assert_int_equal(truncate(path, truncate_to), 0);
        return;
    }
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, at, SEEK_SET);
    int c = fgetc(f);
    fseek(f, at, SEEK_SET);
    fputc(c ^ 0x01, f);
    fclose(f);
}

static void test_detects_flipped_byte_and_truncation(void **state) {
    (void)state;
    ah_manifest_entry e = {0};
    write_layer(root, "c.safetensors", 3.0f, &e);
    char path[256], err[256];
    snprintf(path, sizeof path, "%s/c.safetensors", root);
    ah_ckpt_loaded *t;
    int n;
    corrupt(path, (long)e.bytes - 5, -1); /* one bit of the last tensor */
    assert_int_equal(ah_ckpt_read_shard(path, e.bytes, e.xxh64, &t, &n, err, sizeof err), -1);
    assert_contains(err, "checksum mismatch");
    assert_contains(err, "c.safetensors");
    assert_null(t);
    corrupt(path, 0, 100);
    assert_int_equal(ah_ckpt_read_shard(path, e.bytes, e.xxh64, &t, &n, err, sizeof err), -1);
    assert_contains(err, "truncated");
    snprintf(path, sizeof path, "%s/missing.safetensors", root);
    assert_int_equal(ah_ckpt_read_shard(path, e.bytes, e.xxh64, &t, &n, err, sizeof err), -1);
    assert_contains(err, "cannot open");
}

static void test_manifest_round_trip_and_bitmap(void **state) {
    (void)state;
    ah_manifest m, r;
    ah_manifest_init(&m, "n1", "memory");
    for (int l = 0; l < 10; l++) {
        ah_manifest_entry e = {.layer = l,
                               .tp_rank = l % 2,
                               .step = 10 + l,
                               .bytes = 1000u + (uint64_t)l,
                               .xxh64 = 0xfedcba9876543210ull + (uint64_t)l};
        snprintf(e.file, sizeof e.file, "L%03d.safetensors", l);
        ah_manifest_put(&m, &e);
    }
    ah_manifest_entry again = {.layer = 4, .tp_rank = 0, .step = 99, .bytes = 5, .xxh64 = 1};
    strcpy(again.file, "L004-new.safetensors");
    ah_manifest_put(&m, &again); /* another step of layer 4: added beside step 14 */
    assert_int_equal(m.n, 11);
    again.bytes = 6;
    ah_manifest_put(&m, &again); /* the same (layer, TP rank, step): replaced */
    assert_int_equal(m.n, 11);
    char err[256];
    assert_int_equal(ah_manifest_save(root, &m, err, sizeof err), 0);
    assert_int_equal(ah_manifest_load(root, &r, err, sizeof err), 0);
    assert_string_equal(r.node, "n1");
    assert_string_equal(r.tier, "memory");
    const ah_manifest_entry *e7 = ah_manifest_find(&r, 7, 1);
    assert_non_null(e7);
    assert_int_equal(e7->step, 17);
    assert_true(e7->xxh64 == 0xfedcba9876543217ull); /* 64 bits survive JSON (hex, not a double) */
    assert_int_equal(r.n, 11);
    assert_int_equal(ah_manifest_find(&r, 4, 0)->step, 99); /* the newest */
    assert_int_equal(ah_manifest_find(&r, 4, 0)->bytes, 6);
    assert_int_equal(ah_manifest_find_step(&r, 4, 0, 14)->bytes, 1004);
    assert_null(ah_manifest_find_step(&r, 4, 0, 15));
    uint8_t bits[2];
    /* TP rank 0 holds layers 0, 2, 4, 6, 8; at step >= 13 only 4 (step 99), 6 and 8 */
    assert_int_equal(ah_manifest_bitmap(&r, 0, 0, 10, bits), 5);
    assert_int_equal(bits[0], 0x55);
    assert_int_equal(bits[1], 0x01);
    assert_int_equal(ah_manifest_bitmap(&r, 0, 13, 10, bits), 3);
    assert_int_equal(bits[0], 0x50);
    assert_int_equal(bits[1], 0x01);
    /* pruning to step 99 drops layer 4's step 14, nothing else */
    assert_int_equal(ah_manifest_prune(&r, 99), 1);
    assert_int_equal(r.n, 10);
    assert_null(ah_manifest_find_step(&r, 4, 0, 14));
    assert_non_null(ah_manifest_find_step(&r, 7, 1, 17));
    ah_manifest_free(&m);
    ah_manifest_free(&r);
    /* an empty tier loads as an empty manifest; a malformed one is an error naming the file */
    char dir[128];
    snprintf(dir, sizeof dir, "%s/empty", root);
    mkdir(dir, 0755);
    assert_int_equal(ah_manifest_load(dir, &r, err, sizeof err), 0);
    assert_int_equal(r.n, 0);
    char path[256];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    FILE *f = fopen(path, "w");
    fputs("{\"format\": \"autohet-manifest\", \"version\": 2, \"shards\": [{\"layer\": 1}]}", f);
    fclose(f);
    assert_int_equal(ah_manifest_load(dir, &r, err, sizeof err), -1);
    assert_contains(err, "manifest.json");
    assert_contains(err, "no manifest_xxh64 checksum");
    /* the same with a good checksum of its own: the entry is what is wrong */
    write_manifest_text(dir, "{\"format\": \"autohet-manifest\", \"version\": 2, \"shards\": [{\"layer\": 1}], "
                             "\"manifest_xxh64\": \"0000000000000000\"}");
    assert_int_equal(ah_manifest_load(dir, &r, err, sizeof err), -1);
    assert_contains(err, "shards[0]");
}

/* writes text (whose "manifest_xxh64" is 16 zeros) as dir/manifest.json with
 * its checksum filled in: XXH64 of the text with the digits as zeros */
static void write_manifest_text(const char *dir, const char *text) {
    char path[256], *t = strdup(text), hex[17];
    char *at = strstr(t, "\"manifest_xxh64\": \"0000000000000000\"");
    assert_non_null(at);
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)XXH64(t, strlen(t), 0));
    memcpy(at + strlen("\"manifest_xxh64\": \""), hex, 16);
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(t, f);
    fclose(f);
    free(t);
}

/* the manifest's own checksum: any changed byte is caught; out-of-range
 * fields are refused by name; an unreadable manifest can be set aside */
static void test_manifest_checksum_and_ranges(void **state) {
    (void)state;
    char dir[128], path[256], err[512];
    snprintf(dir, sizeof dir, "%s/msum", root);
    assert_int_equal(mkdir(dir, 0755), 0);
    ah_manifest m, r;
    ah_manifest_init(&m, "n0", "disk");
    ah_manifest_entry e = {.layer = 2, .tp_rank = 0, .step = 7, .bytes = 100, .xxh64 = 5};
    strcpy(e.file, "L002-tp0-s7.safetensors");
    ah_manifest_put(&m, &e);
    assert_int_equal(ah_manifest_save(dir, &m, err, sizeof err), 0);
    ah_manifest_free(&m);
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    /* step 7 -> step 8: still valid JSON and a valid entry, but the checksum fails */
    FILE *f = fopen(path, "r+");
    char text[4096];
    size_t len = fread(text, 1, sizeof text - 1, f);
    text[len] = 0;
    char *st = strstr(text, "\"step\":\t7");
    assert_non_null(st);
    st[strlen("\"step\":\t")] = '8';
    rewind(f);
    fwrite(text, 1, len, f);
    fclose(f);
    assert_int_equal(ah_manifest_load(dir, &r, err, sizeof err), -1);
    assert_contains(err, "manifest checksum mismatch");
    /* out-of-range numbers with a correct checksum: refused, no undefined cast */
    const char *bad[][4] = {{"1", "3", "1e300", "a"}, {"1", "3", "-1", "a"},   {"1", "3", "2.5", "a"},
                            {"1", "1e10", "8", "a"}, {"-3", "3", "8", "a"}, {"1", "3", "8", ".."},
                            {"1", "3", "8", "../x"}};
    for (int i = 0; i < 7; i++) {
        char doc[1024];
        snprintf(doc, sizeof doc,
                 "{\"format\": \"autohet-manifest\", \"version\": 2, \"shards\": [{\"layer\": %s, "
                 "\"tp_rank\": 0, \"step\": %s, \"bytes\": %s, \"file\": \"%s\", \"xxh64\": "
                 "\"0123456789abcdef\"}], \"manifest_xxh64\": \"0000000000000000\"}",
                 bad[i][0], bad[i][1], bad[i][2], bad[i][3]);
        write_manifest_text(dir, doc);
        assert_int_equal(ah_manifest_load(dir, &r, err, sizeof err), -1);
        assert_contains(err, "shards[0]");
    }
    /* a valid hand-written one loads */
    write_manifest_text(dir, "{\"format\": \"autohet-manifest\", \"version\": 2, \"shards\": [{\"layer\": 1, "
                             "\"tp_rank\": 0, \"step\": 3, \"file\": \"a\", \"bytes\": 60000000000, \"xxh64\": "
                             "\"0123456789abcdef\"}], \"manifest_xxh64\": \"0000000000000000\"}");
    assert_int_equal(ah_manifest_load(dir, &r, err, sizeof err), 0);
    assert_int_equal(r.n, 1);
    assert_true(r.e[0].bytes == 60000000000ull);
    ah_manifest_free(&r);
    /* ... and its 6e10-byte shard is refused by its size before any allocation */
    ah_manifest_entry small = {0};
    write_layer(dir, "a", 1.0f, &small);
    ah_ckpt_loaded *t = NULL;
    int n = 0;
    assert_int_equal(ah_ckpt_read_shard(path, 60000000000ull, 1, &t, &n, err, sizeof err), -1);
    snprintf(path, sizeof path, "%s/a", dir);
    assert_int_equal(ah_ckpt_read_shard(path, 60000000000ull, 1, &t, &n, err, sizeof err), -1);
    assert_contains(err, "the manifest says 60000000000");
    /* set aside: a corrupt manifest is renamed and the tier loads empty */
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    f = fopen(path, "w");
    fputs("{\"format\": \"autohet-manif", f);
    fclose(f);
    assert_int_equal(ah_manifest_load_or_set_aside(dir, &r, err, sizeof err), 1);
    assert_int_equal(r.n, 0);
    struct stat sb;
    assert_int_equal(stat(path, &sb), -1);
    snprintf(path, sizeof path, "%s/manifest.json.corrupt", dir);
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(ah_manifest_load_or_set_aside(dir, &r, err, sizeof err), 0); /* now empty, no file */
}

/* builds a one-tensor safetensors buffer with the given header JSON and
 * data_len bytes of data; returns its length */
static size_t make_shard(unsigned char *buf, const char *hdr, size_t data_len) {
    size_t hl = strlen(hdr), padded = (hl + 7) / 8 * 8;
    for (int k = 0; k < 8; k++)
        buf[k] = (unsigned char)((uint64_t)padded >> (8 * k));
    memcpy(buf + 8, hdr, hl);
    memset(buf + 8 + hl, ' ', padded - hl);
    memset(buf + 8 + padded, 0, data_len);
    return 8 + padded + data_len;
}

/* shapes whose element count wraps, or that are not integers a size_t holds */
static void test_safetensors_hostile_shapes(void **state) {
    (void)state;
    const char *hdrs[] = {
        "{\"w\": {\"dtype\": \"F32\", \"shape\": [2147483648, 2147483648], \"data_offsets\": [0, 0]}}",
        "{\"w\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296, 4], \"data_offsets\": [0, 0]}}",
        "{\"w\": {\"dtype\": \"F32\", \"shape\": [1e19], \"data_offsets\": [0, 16]}}",
        "{\"w\": {\"dtype\": \"F32\", \"shape\": [9223372036854775808], \"data_offsets\": [0, 16]}}",
        "{\"w\": {\"dtype\": \"F32\", \"shape\": [1.5], \"data_offsets\": [0, 4]}}",
        "{\"w\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [1e300, 16]}}",
        "{\"w\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 1e300]}}",
        "{\"w\": {\"dtype\": \"F32\", \"shape\": [\"4\"], \"data_offsets\": [0, 16]}}",
    };
    unsigned char buf[512];
    for (size_t i = 0; i < sizeof hdrs / sizeof hdrs[0]; i++) {
        size_t len = make_shard(buf, hdrs[i], 16);
        ah_ckpt_loaded *t = NULL;
        int n = 0;
        char err[256];
        assert_int_equal(ah_ckpt_parse_shard("x", buf, len, XXH64(buf, len, 0), &t, &n, err, sizeof err), -1);
        assert_contains(err, "malformed tensor entry");
    }
    /* the good one parses */
    size_t len = make_shard(buf, "{\"w\": {\"dtype\": \"F32\", \"shape\": [2, 2], \"data_offsets\": [0, 16]}}", 16);
    ah_ckpt_loaded *t = NULL;
    int n = 0;
    char err[256];
    assert_int_equal(ah_ckpt_parse_shard("x", buf, len, XXH64(buf, len, 0), &t, &n, err, sizeof err), 0);
    assert_int_equal(n, 1);
    assert_int_equal(t[0].n, 4);
    ah_ckpt_free(t, n);
}

/* ---- ah_ckpt_stream_shard: one pass that hashes and hands over ---- */

typedef struct {
    const unsigned char *file;
    size_t len;
    int fail_at; /* a fetch reaching past this offset fails (-1: none) */
} mem_src;

static const unsigned char *mem_fetch(void *ctx, uint64_t off, uint64_t len, char *err, size_t errlen) {
    mem_src *m = ctx;
    assert_true(off + len <= m->len);
    if (m->fail_at >= 0 && off + len > (uint64_t)m->fail_at) {
        snprintf(err, errlen, "fetch failed at %llu", (unsigned long long)off);
        return NULL;
    }
    static unsigned char bounce[1 << 20]; /* a transport's buffer, reused by the next fetch */
    assert_true(len <= sizeof bounce);
    memcpy(bounce, m->file + off, len);
    return bounce;
}

typedef struct {
    float *out[4];
    size_t cap[4];
    int pieces, refuse;
} collect;

static int collect_begin(void *ctx, const ah_ckpt_loaded *t, int n, char *err, size_t errlen) {
    collect *c = ctx;
    assert_true(n <= 4);
    for (int i = 0; i < n; i++) {
        c->out[i] = calloc(t[i].n + 1, sizeof(float));
        c->cap[i] = t[i].n;
    }
    if (c->refuse)
        snprintf(err, errlen, "does not fit");
    return c->refuse ? -1 : 0;
}

static void collect_piece(void *ctx, int i, size_t first, size_t count, const float *data) {
    collect *c = ctx;
    assert_true(first + count <= c->cap[i]);
    memcpy(c->out[i] + first, data, count * sizeof(float));
    c->pieces++;
}

static int stream(mem_src *m, uint64_t xxh, collect *c, char *err, size_t errlen) {
    ah_ckpt_stream s = {mem_fetch, collect_begin, collect_piece, m, c};
    return ah_ckpt_stream_shard("s", m->len, xxh, &s, err, errlen);
}

static void collect_free(collect *c) {
    for (int i = 0; i < 4; i++)
        free(c->out[i]);
    memset(c, 0, sizeof *c);
}

static void test_stream_shard(void **state) {
    (void)state;
    /* a 1.2 MB tensor (three pieces) beside small ones, as the writer lays them out */
    size_t big = 300000;
    float *w = malloc(big * sizeof(float)), b[6], m6[6];
    fill(w, big, 0.5f);
    fill(b, 6, 1.5f);
    fill(m6, 6, 2.5f);
    ah_ckpt_tensor t[3] = {{"w", w, 2, {600, 500}}, {"b", b, 1, {6}}, {"adam_m.b", m6, 1, {6}}};
    char path[256], err[512];
    uint64_t bytes, xxh;
    snprintf(path, sizeof path, "%s/big.safetensors", root);
    assert_int_equal(ah_ckpt_write_shard(path, t, 3, NULL, 0, &bytes, &xxh, err, sizeof err), 0);
    unsigned char *file = malloc(bytes);
    assert_int_equal(ah_ckpt_read_raw(path, bytes, file, err, sizeof err), 0);
    mem_src src = {file, bytes, -1};
    collect c = {0};
    assert_int_equal(stream(&src, xxh, &c, err, sizeof err), 0);
    assert_true(c.pieces >= 5); /* the big tensor in pieces, the small ones whole */
    ah_ckpt_loaded *ref = NULL;
    int nr = 0;
    assert_int_equal(ah_ckpt_parse_shard("s", file, bytes, xxh, &ref, &nr, err, sizeof err), 0);
    for (int i = 0; i < nr; i++) /* the header's order is the writer's */
        assert_memory_equal(c.out[i], ref[i].data, ref[i].n * sizeof(float));
    ah_ckpt_free(ref, nr);
    collect_free(&c);
    /* a flipped byte anywhere: a checksum mismatch, also when begin would refuse */
    file[bytes - 3] ^= 0x10;
    assert_int_equal(stream(&src, xxh, &c, err, sizeof err), -1);
    assert_contains(err, "checksum mismatch");
    collect_free(&c);
    c.refuse = 1;
    assert_int_equal(stream(&src, xxh, &c, err, sizeof err), -1);
    assert_contains(err, "checksum mismatch");
    collect_free(&c);
    file[bytes - 3] ^= 0x10;
    /* a good shard that does not fit: -2 with begin's reason */
    c.refuse = 1;
    assert_int_equal(stream(&src, xxh, &c, err, sizeof err), -2);
    assert_string_equal(err, "does not fit");
    collect_free(&c);
    /* the source failing part way: -1 with its reason */
    src.fail_at = (int)(bytes / 2);
    assert_int_equal(stream(&src, xxh, &c, err, sizeof err), -1);
    assert_contains(err, "fetch failed");
    collect_free(&c);
    free(file);
    free(w);
    /* a malformed header with a good checksum is malformed; overlapping tensors are read whole (1) */
    unsigned char buf[512];
    size_t len = make_shard(buf, "{\"w\": {\"dtype\": \"F32\", \"shape\": [1.5], \"data_offsets\": [0, 4]}}", 16);
    mem_src bad = {buf, len, -1};
    assert_int_equal(stream(&bad, XXH64(buf, len, 0), &c, err, sizeof err), -1);
    assert_contains(err, "malformed tensor entry");
    collect_free(&c);
    len = make_shard(buf,
                     "{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}, "
                     "\"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 16]}}",
                     16);
    bad.len = len;
    assert_int_equal(stream(&bad, XXH64(buf, len, 0), &c, err, sizeof err), 1);
    assert_int_equal(c.pieces, 0);
    collect_free(&c);
}

/* a FIFO or a device given as a shard is refused at once (no blocking read) */
static void test_refuses_special_files(void **state) {
    (void)state;
    char fifo[128], err[256];
    snprintf(fifo, sizeof fifo, "%s/fifo", root);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    ah_ckpt_loaded *t = NULL;
    int n = 0;
    assert_int_equal(ah_ckpt_read_shard(fifo, 16, 1, &t, &n, err, sizeof err), -1);
    assert_contains(err, "not a regular file (a FIFO)");
    const unsigned char *map = NULL;
    assert_int_equal(ah_ckpt_map("/dev/zero", 16, &map, err, sizeof err), -1);
    assert_contains(err, "not a regular file (a character device)");
    size_t len = 0;
    assert_null(ah_read_text_file(fifo, 1 << 20, &len, err, sizeof err));
    assert_contains(err, "not a regular file (a FIFO)");
    assert_null(ah_read_text_file("/dev/zero", 1 << 20, &len, err, sizeof err));
    assert_contains(err, "not a regular file");
}

/* the sweep removes temporary files of dead writers and unlisted shards only */
static void test_sweep(void **state) {
    (void)state;
    char dir[128], p[700], err[256];
    snprintf(dir, sizeof dir, "%s/sweep", root);
    assert_int_equal(mkdir(dir, 0755), 0);
    pid_t child = fork();
    if (child == 0)
        _exit(0);
    waitpid(child, NULL, 0); /* a PID that is gone */
    char names[5][96];
    snprintf(names[0], sizeof names[0], "state.json.tmp.%ld", (long)child);    /* dead writer: removed */
    snprintf(names[1], sizeof names[1], "L001-tp0-s3.safetensors.tmp.%ld", (long)getpid()); /* live: kept */
    snprintf(names[2], sizeof names[2], "L001-tp0-s3.safetensors");            /* listed: kept */
    snprintf(names[3], sizeof names[3], "L001-tp0-s2.safetensors");            /* unlisted: removed */
    snprintf(names[4], sizeof names[4], ".pin-1-L001-tp0-s2.safetensors");     /* a live writer's pin: kept */
    for (int i = 0; i < 5; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        FILE *f = fopen(p, "w");
        fclose(f);
    }
    ah_manifest m;
    ah_manifest_init(&m, "n0", "disk");
    ah_manifest_entry e = {.layer = 1, .tp_rank = 0, .step = 3, .bytes = 1};
    strcpy(e.file, names[2]);
    ah_manifest_put(&m, &e);
    assert_int_equal(ah_manifest_save(dir, &m, err, sizeof err), 0);
    assert_int_equal(ah_ckpt_sweep(dir, &m, 0), 2);
    struct stat sb;
    int want[5] = {-1, 0, 0, -1, 0};
    for (int i = 0; i < 5; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        assert_int_equal(stat(p, &sb), want[i]);
    }
    /* a zombie writer (SIGKILLed, not reaped yet) is gone too */
    pid_t zombie = fork();
    if (zombie == 0)
        _exit(0);
    usleep(200000);
    snprintf(p, sizeof p, "%s/L002-tp0-s3.safetensors.tmp.%ld", dir, (long)zombie);
    fclose(fopen(p, "w"));
    char pin[600]; /* and so is its background persist's pin (a live writer's, names[4], stays) */
    snprintf(pin, sizeof pin, "%s/.pin-%ld-L001-tp0-s3.safetensors", dir, (long)zombie);
    fclose(fopen(pin, "w"));
    assert_int_equal(ah_ckpt_sweep(dir, &m, 0), 2);
    assert_int_equal(stat(p, &sb), -1);
    assert_int_equal(stat(pin, &sb), -1);
    waitpid(zombie, NULL, 0);
    /* before a resume restores, every temporary file goes, a live PID's too */
    assert_int_equal(ah_ckpt_sweep(dir, &m, 1), 1);
    snprintf(p, sizeof p, "%s/%s", dir, names[1]);
    assert_int_equal(stat(p, &sb), -1);
    ah_manifest_free(&m);
}

/* three tiers (memory, disk, cloud): a corrupt nearer copy falls through to the
 * next good one; a tier at an older step is not used for a newer step */
static void test_restore_falls_back_across_tiers(void **state) {
    (void)state;
    const char *names[3] = {"mem", "disk", "cloud"};
    char dirs[3][128];
    const char *dp[3];
    char err[512];
    for (int d = 0; d < 3; d++) {
        snprintf(dirs[d], sizeof dirs[d], "%s/%s", root, names[d]);
        assert_int_equal(mkdir(dirs[d], 0755), 0);
        dp[d] = dirs[d];
        ah_manifest m;
        ah_manifest_init(&m, "n0", names[d]);
        ah_manifest_entry e = {.layer = 3, .tp_rank = 0, .step = d == 2 ? 8 : 12};
        write_layer(dirs[d], "L003.safetensors", 5.0f, &e);
        ah_manifest_put(&m, &e);
        assert_int_equal(ah_manifest_save(dirs[d], &m, err, sizeof err), 0);
        ah_manifest_free(&m);
    }
    ah_ckpt_loaded *t;
    int n;
    assert_int_equal(ah_ckpt_restore_layer(dp, 3, 3, 0, 12, &t, &n, err, sizeof err), 0);
    ah_ckpt_free(t, n);
    char path[256];
    snprintf(path, sizeof path, "%s/L003.safetensors", dirs[0]);
    corrupt(path, 40, -1);
    assert_int_equal(ah_ckpt_restore_layer(dp, 3, 3, 0, 12, &t, &n, err, sizeof err), 1); /* disk */
    float want[24];
    fill(want, 24, 5.0f);
    assert_memory_equal(t[0].data, want, sizeof want);
    ah_ckpt_free(t, n);
    snprintf(path, sizeof path, "%s/L003.safetensors", dirs[1]);
    corrupt(path, 0, 50);
    /* cloud holds step 8 only: step 12 is nowhere good */
    assert_int_equal(ah_ckpt_restore_layer(dp, 3, 3, 0, 12, &t, &n, err, sizeof err), -1);
    assert_contains(err, "layer 3");
    assert_contains(err, "no tier holds a good copy");
    assert_int_equal(ah_ckpt_restore_layer(dp, 3, 3, 0, 8, &t, &n, err, sizeof err), 2);
    ah_ckpt_free(t, n);
}

/* Every entry records its shard's TP degree (issue #13): it survives the round
 * trip, is optional on read (an older manifest: 0, matched by TP rank alone),
 * must be a power of two above tp_rank; one (layer, TP rank, step) may be
 * listed at two degrees, and restore takes the degree asked for. */
static void test_manifest_tp_degree(void **state) {
    (void)state;
    char dir[2][128], err[512], name[128];
    const char *dp[2];
    for (int d = 0; d < 2; d++) {
        snprintf(dir[d], sizeof dir[d], "%s/deg%d", root, d);
        assert_int_equal(mkdir(dir[d], 0755), 0);
        dp[d] = dir[d];
    }
    ah_ckpt_shard_name(name, sizeof name, 3, 1, 4, 12);
    assert_string_equal(name, "L003-tp1of4-s12.safetensors");
    ah_ckpt_shard_name(name, sizeof name, 3, 0, 1, 12);
    assert_string_equal(name, "L003-tp0-s12.safetensors");
    /* dir 0: TP rank 0 of layer 3 at degrees 2 and 4; dir 1: the same key at degree 4 only */
    ah_manifest m, r;
    ah_manifest_init(&m, "n0", "disk");
    for (int deg = 2; deg <= 4; deg += 2) {
        ah_manifest_entry e = {.layer = 3, .tp_rank = 0, .step = 12, .tp_degree = deg};
        ah_ckpt_shard_name(name, sizeof name, 3, 0, deg, 12);
        write_layer(dir[0], name, (float)deg, &e);
        ah_manifest_put(&m, &e);
    }
    assert_int_equal(m.n, 2); /* two degrees of one key: both kept */
    assert_int_equal(ah_manifest_save(dir[0], &m, err, sizeof err), 0);
    assert_int_equal(ah_manifest_load(dir[0], &r, err, sizeof err), 0);
    assert_int_equal(r.n, 2);
    assert_int_equal(ah_manifest_find_shard(&r, 3, 0, 4, 12)->tp_degree, 4);
    assert_int_equal(ah_manifest_find_shard(&r, 3, 0, 2, 12)->tp_degree, 2);
    assert_null(ah_manifest_find_shard(&r, 3, 0, 1, 12));
    assert_non_null(ah_manifest_find_shard(&r, 3, 0, 0, 12)); /* any degree */
    ah_manifest_free(&r);
    ah_manifest_free(&m);
    ah_manifest_init(&m, "n1", "disk");
    ah_manifest_entry e4 = {.layer = 3, .tp_rank = 0, .step = 12, .tp_degree = 4};
    write_layer(dir[1], "L003-tp0of4-s12.safetensors", 40.0f, &e4);
    ah_manifest_put(&m, &e4);
    assert_int_equal(ah_manifest_save(dir[1], &m, err, sizeof err), 0);
    ah_manifest_free(&m);
    ah_ckpt_loaded *t;
    int n;
    float want[24];
    assert_int_equal(ah_ckpt_restore_shard(dp, 2, 3, 0, 4, 12, &t, &n, err, sizeof err), 0);
    fill(want, 24, 4.0f);
    assert_memory_equal(t[0].data, want, sizeof want); /* dir 0's degree-4 copy, not its degree 2 */
    ah_ckpt_free(t, n);
    assert_int_equal(ah_ckpt_restore_shard(dp, 2, 3, 0, 8, 12, &t, &n, err, sizeof err), -1);
    assert_contains(err, "layer 3 (TP rank 0 of 8) at step 12");
    /* optional on read; when present a power of two above tp_rank */
    write_manifest_text(dir[1], "{\"format\": \"autohet-manifest\", \"version\": 2, \"shards\": [{\"layer\": 1, "
                                "\"tp_rank\": 1, \"step\": 3, \"file\": \"a\", \"bytes\": 6, \"xxh64\": "
                                "\"0123456789abcdef\"}], \"manifest_xxh64\": \"0000000000000000\"}");
    assert_int_equal(ah_manifest_load(dir[1], &r, err, sizeof err), 0);
    assert_int_equal(r.e[0].tp_degree, 0);
    assert_non_null(ah_manifest_find_shard(&r, 1, 1, 2, 3)); /* an unrecorded degree matches any */
    ah_manifest_free(&r);
    const char *bad[] = {"3", "0", "2.5", "1e300", "-2", "1"}; /* "1": tp_rank 1 is not below it */
    for (int i = 0; i < 6; i++) {
        char doc[1024];
        snprintf(doc, sizeof doc,
                 "{\"format\": \"autohet-manifest\", \"version\": 2, \"shards\": [{\"layer\": 1, "
                 "\"tp_rank\": 1, \"tp_degree\": %s, \"step\": 3, \"file\": \"a\", \"bytes\": 6, "
                 "\"xxh64\": \"0123456789abcdef\"}], \"manifest_xxh64\": \"0000000000000000\"}",
                 bad[i]);
        write_manifest_text(dir[1], doc);
        assert_int_equal(ah_manifest_load(dir[1], &r, err, sizeof err), -1);
        assert_contains(err, "shards[0]");
    }
}

/* a crash between writing the temporary file and the rename leaves the old
 * shard and manifest intact and readable */
static void test_torn_write_leaves_previous_state(void **state) {
    (void)state;
    char dir[128], err[256];
    snprintf(dir, sizeof dir, "%s/torn", root);
    assert_int_equal(mkdir(dir, 0755), 0);
    ah_manifest m;
    ah_manifest_init(&m, "n0", "disk");
    ah_manifest_entry e = {.layer = 0, .tp_rank = 0, .step = 4};
    write_layer(dir, "L000.safetensors", 7.0f, &e);
    ah_manifest_put(&m, &e);
    assert_int_equal(ah_manifest_save(dir, &m, err, sizeof err), 0);
    ah_manifest_free(&m);
    /* the half-written next version: only a temporary file exists */
    char path[256];
    snprintf(path, sizeof path, "%s/L000.safetensors.tmp.999", dir);
    FILE *f = fopen(path, "wb");
    fputs("garbage", f);
    fclose(f);
    const char *dp[1] = {dir};
    ah_ckpt_loaded *t;
    int n;
    assert_int_equal(ah_ckpt_restore_layer(dp, 1, 0, 0, 4, &t, &n, err, sizeof err), 0);
    float want[24];
    fill(want, 24, 7.0f);
    assert_memory_equal(t[0].data, want, sizeof want);
    ah_ckpt_free(t, n);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_safetensors_layout),
        cmocka_unit_test(test_round_trip_is_exact),
        cmocka_unit_test(test_detects_flipped_byte_and_truncation),
        cmocka_unit_test(test_manifest_round_trip_and_bitmap),
        cmocka_unit_test(test_restore_falls_back_across_tiers),
        cmocka_unit_test(test_manifest_tp_degree),
        cmocka_unit_test(test_torn_write_leaves_previous_state),
        cmocka_unit_test(test_manifest_checksum_and_ranges),
        cmocka_unit_test(test_safetensors_hostile_shapes),
        cmocka_unit_test(test_stream_shard),
        cmocka_unit_test(test_refuses_special_files),
        cmocka_unit_test(test_sweep),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
