/* The Hugging Face safetensors reader (engine/safetensors.h) and the HF
 * layout map (engine/hf_map.h): F32 written by the checkpoint writer reads
 * back exactly; F16 (normal, subnormal, inf, NaN) and BF16 convert to fp32,
 * the read naming the first value that is not finite;
 * every malformed header is refused with the file, tensor and field named;
 * GPT-2 transposes and LLaMA RoPE permutations invert exactly. */
#include "test_util.h"

#include "autohet/ckpt.h"
#include "engine/hf_map.h"
#include "engine/safetensors.h"

static char path[64];

static void write_bytes(const void *b, size_t n) {
    strcpy(path, "/tmp/ahst_XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, b, n), (ssize_t)n);
    close(fd);
}

/* a file of one header (padded to 8) and `data` */
static void write_file(const char *header, const void *data, size_t n) {
    size_t hl = strlen(header), padded = (hl + 7) / 8 * 8;
    unsigned char *buf = calloc(8 + padded + n + 1, 1);
    for (int k = 0; k < 8; k++)
        buf[k] = (unsigned char)((uint64_t)padded >> (8 * k));
    memcpy(buf + 8, header, hl);
    memset(buf + 8 + hl, ' ', padded - hl);
    memcpy(buf + 8 + padded, data, n);
    write_bytes(buf, 8 + padded + n);
    free(buf);
}

static void test_f32_round_trip(void **state) {
    (void)state;
    float w[6] = {1, -2, 3.5f, 1e-30f, -0.0f, 7}, b[2] = {0.25f, -8};
    ah_ckpt_tensor t[2] = {{"w", w, 2, {2, 3}}, {"a.b", b, 1, {2}}};
    const char *meta[1][2] = {{"format", "pt"}};
    uint64_t bytes, h;
    char err[512];
    strcpy(path, "/tmp/ahst_XXXXXX");
    close(mkstemp(path));
    assert_int_equal(ah_ckpt_write_shard(path, t, 2, (const char *const(*)[2])meta, 1, &bytes, &h, err, sizeof err), 0);
    ah_st_file f;
    assert_int_equal(ah__st_open(path, &f, err, sizeof err), 0);
    assert_int_equal(f.n, 2);
    const ah_st_tensor *tw = ah__st_find(&f, "w"), *tb = ah__st_find(&f, "a.b");
    assert_non_null(tw);
    assert_non_null(tb);
    assert_null(ah__st_find(&f, "x"));
    assert_int_equal(tw->ndim, 2);
    assert_int_equal(tw->shape[1], 3);
    float got[6];
    assert_int_equal(ah__st_read_f32(&f, tw, got), 6); /* every value finite: the count */
    assert_memory_equal(got, w, sizeof w);
    assert_int_equal(ah__st_read_f32(&f, tb, got), 2);
    assert_memory_equal(got, b, sizeof b);
    ah__st_close(&f);
    unlink(path);
}

static void test_half_and_bf16(void **state) {
    (void)state;
    /* F16: 1, -2, 65504, 2^-24 (smallest subnormal), 2^-14 * 1023/1024 (largest subnormal), inf, NaN, -0 */
    uint16_t h[8] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x03ff, 0x7c00, 0x7e00, 0x8000};
    /* BF16: 1, -3, the upper halves of pi and 1e-40 */
    uint16_t bf[4] = {0x3f80, 0xc040, 0x4049, 0x0001};
    unsigned char data[24];
    memcpy(data, h, 16);
    memcpy(data + 16, bf, 8);
    write_file("{\"h\": {\"dtype\": \"F16\", \"shape\": [8], \"data_offsets\": [0, 16]}, "
               "\"b\": {\"dtype\": \"BF16\", \"shape\": [2, 2], \"data_offsets\": [16, 24]}}",
               data, sizeof data);
    ah_st_file f;
    char err[512];
    assert_int_equal(ah__st_open(path, &f, err, sizeof err), 0);
    float v[8];
    assert_int_equal(ah__st_read_f32(&f, ah__st_find(&f, "h"), v), 5); /* the first non-finite: inf */
    assert_true(v[0] == 1.0f && v[1] == -2.0f && v[2] == 65504.0f);
    assert_true(v[3] == ldexpf(1, -24) && v[4] == ldexpf(1023, -24));
    assert_true(isinf(v[5]) && v[5] > 0 && isnan(v[6]) && v[7] == 0 && signbit(v[7]));
    assert_int_equal(ah__st_read_f32(&f, ah__st_find(&f, "b"), v), 4);
    uint32_t pi_bits = 0x40490000u, tiny_bits = 0x00010000u;
    float pi, tiny;
    memcpy(&pi, &pi_bits, 4);
    memcpy(&tiny, &tiny_bits, 4);
    assert_true(v[0] == 1.0f && v[1] == -3.0f && v[2] == pi && v[3] == tiny);
    ah__st_close(&f);
    unlink(path);
}

/* a header that must be refused with err containing `want` */
static void refused(const char *header, size_t data_len, const char *want) {
    unsigned char data[64] = {0};
    write_file(header, data, data_len);
    ah_st_file f;
    char err[512];
    assert_int_equal(ah__st_open(path, &f, err, sizeof err), -1);
    assert_contains(err, path);
    assert_contains(err, want);
    unlink(path);
}

static void test_malformed(void **state) {
    (void)state;
    refused("[1, 2]", 0, "header: not a JSON object");
    refused("{\"x\": {\"dtype\": \"I64\", \"shape\": [1], \"data_offsets\": [0, 8]}}", 8,
            "tensor 'x': dtype 'I64' is not supported");
    refused("{\"x\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4, "tensor 'x': dtype missing");
    refused("{\"x\": {\"dtype\": \"F32\", \"shape\": [1, -2], \"data_offsets\": [0, 4]}}", 4,
            "tensor 'x': shape: dimension 1");
    refused("{\"x\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1,1,1,1,1], \"data_offsets\": [0, 4]}}", 4,
            "shape: expected an array of at most 8");
    refused("{\"x\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 4]}}", 8,
            "data_offsets: 4 bytes, the shape needs 8 of F32");
    refused("{\"x\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 16]}}", 8,
            "data_offsets: [8, 16] outside the 8-byte data section");
    refused("{\"x\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 0]}}", 8,
            "data_offsets: expected [begin, end]");
    refused("{\"x\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, "
            "\"x\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}",
            4, "tensor 'x': named twice");
    refused("{\"__metadata__\": {\"a\": 1}}", 0, "__metadata__: expected an object of strings");
    refused("{\"x\": 3}", 0, "tensor 'x': expected an object");
    /* the header length itself: beyond the file, and a file too short for it */
    unsigned char b[12] = {0xff, 0xff, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' '};
    write_bytes(b, sizeof b);
    ah_st_file f;
    char err[512];
    assert_int_equal(ah__st_open(path, &f, err, sizeof err), -1);
    assert_contains(err, "header length 65535: beyond the file's 12 bytes");
    unlink(path);
    write_bytes(b, 5);
    assert_int_equal(ah__st_open(path, &f, err, sizeof err), -1);
    assert_contains(err, "5 bytes: not a safetensors file");
    unlink(path);
}

/* every layout op and its inverse: exact, and the RoPE permutation as stated */
static void test_layouts_invert(void **state) {
    (void)state;
    float eng[24], hf[24], back[24];
    for (int i = 0; i < 24; i++)
        eng[i] = (float)i;
    /* a [4, 6] engine tensor from a [6, 4] Conv1D weight */
    ah_hf_part p = {.op = AH_HF_TRANSPOSE, .first = 0, .count = 24};
    ah__hf_part_from_engine(&p, 6, eng, hf);
    assert_true(hf[1 * 4 + 2] == eng[2 * 6 + 1]); /* hf[c][r] = eng[r][c] */
    ah__hf_part_to_engine(&p, 6, hf, back);
    assert_memory_equal(back, eng, sizeof eng);
    /* RoPE: 2 heads of D = 4, rows of 3 columns: engine row 2i + j of a head is HF row i + 2j */
    ah_hf_part r = {.op = AH_HF_ROPE, .first = 0, .count = 24, .heads = 2, .head_dim = 4};
    ah__hf_part_to_engine(&r, 3, eng, back); /* eng read as HF rows 0..7 */
    static const int hf_row_of[8] = {0, 2, 1, 3, 4, 6, 5, 7};
    for (int row = 0; row < 8; row++)
        assert_true(back[row * 3] == (float)(hf_row_of[row] * 3));
    ah__hf_part_from_engine(&r, 3, back, hf);
    assert_memory_equal(hf, eng, sizeof eng);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f32_round_trip),
        cmocka_unit_test(test_half_and_bf16),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_layouts_invert),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
