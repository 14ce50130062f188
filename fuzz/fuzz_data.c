/* libFuzzer: the training-data readers (ah_dataset_load): the input as an
 * llm.c or raw token file (.bin), as text, and as the validation file of
 * --val-data; then the vocabulary check and a batch of the loaded data. */
#include "fuzz_common.h"

#include "engine/data.h"

static void exercise(ah_dataset *d) {
    char err[512];
    int tok[2 * 8], tgt[2 * 8];
    ah_dataset_check_vocab(d, 50257, err, sizeof err);
    ah_dataset_batch(d, 0, 1, 3, 0, 2, 8, tok, tgt);
    ah_dataset_batch(d, 1, 1, 3, 0, 2, 8, tok, tgt);
    (void)ah_dataset_unigram_entropy(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    ah_dataset d;
    const char *bin = fuzz_write("tokens.bin", data, size);
    if (ah_dataset_load(&d, bin, 0.1, 8, err, sizeof err) == 0) {
        exercise(&d);
        ah_dataset_free(&d);
    }
    const char *txt = fuzz_write("text.txt", data, size);
    if (ah_dataset_load(&d, txt, 0.0, 8, err, sizeof err) == 0) {
        if (ah_dataset_set_validation(&d, bin, 8, err, sizeof err) == 0)
            exercise(&d);
        ah_dataset_free(&d);
    }
    return 0;
}
