/* libFuzzer: the token-file headers of the training data (data_tokens.c):
 * Megatron's .idx (the first two bytes of the input give its length, the rest
 * is the .bin beside it), the input as an llm.c file (version 1 or 2) or a raw
 * uint32 file (--data-dtype uint32); then the vocabulary check, a batch and
 * the entropy of what loaded. */
#include "fuzz_common.h"

#include "engine/data.h"

static void exercise(ah_dataset *d) {
    char err[512];
    int tok[2 * 8], tgt[2 * 8];
    ah_dataset_check_vocab(d, 128256, err, sizeof err);
    ah_dataset_batch(d, 0, 1, 3, 0, 2, 8, tok, tgt);
    ah_dataset_batch(d, 1, 1, 3, 0, 2, 8, tok, tgt);
    (void)ah_dataset_unigram_entropy(d);
    if (d->n > 0)
        (void)ah_dataset_token(d, d->n - 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512], prefix[256];
    ah_dataset d;
    size_t hdr = size >= 2 ? 2 : size, rest = size - hdr;
    size_t idx_len = hdr == 2 ? (size_t)(data[0] | data[1] << 8) : 0;
    idx_len = idx_len > rest ? rest : idx_len;
    fuzz_write("m.idx", data + hdr, idx_len);
    const char *bin = fuzz_write("m.bin", data + hdr + idx_len, rest - idx_len);
    snprintf(prefix, sizeof prefix, "%.*s", (int)(strlen(bin) - 4), bin);
    if (ah_dataset_load(&d, prefix, 0.1, 8, err, sizeof err) == 0) {
        exercise(&d);
        ah_dataset_free(&d);
    }
    const char *raw = fuzz_write("tokens.bin", data, size);
    if (ah_dataset_load_typed(&d, raw, 0.1, 8, AH_TOKENS_U32, err, sizeof err) == 0) {
        exercise(&d);
        ah_dataset_free(&d);
    }
    return 0;
}
