/* Training data: byte-level tokens (vocabulary 256) from a text file or a
 * directory of text files, split into train and validation, served
 * deterministically: the batch of step s is a function of (seed, s) only, so
 * every plan and every rank sees the same samples in the same order. */
#ifndef AUTOHET_ENGINE_DATA_H
#define AUTOHET_ENGINE_DATA_H

/* the most training text --data may hold (files of a directory together) */
#define AH_DATA_MAX_BYTES (256 << 20)
#include <stddef.h>
#include <stdint.h>

typedef struct {
    unsigned char *bytes; /* the whole corpus (files concatenated in name order) */
    size_t n;
    size_t n_train; /* [0, n_train) train, [n_train, n) validation */
    char source[256];
} ah_dataset;

/* Load a file or every regular file of a directory (sorted by name, not
 * recursive). val_fraction of the bytes at the end become the validation split.
 * Returns 0, or -1 with a one-line error naming the path (missing, empty,
 * too small for the sequence length). */
int ah_dataset_load(ah_dataset *d, const char *path, double val_fraction, int seq, char *err, size_t errlen);
void ah_dataset_free(ah_dataset *d);

/* Sample `rows` sequences of seq+1 tokens (inputs = first seq, targets =
 * shifted by one) for global step `step`: sequence i of the global batch starts
 * at an offset drawn from a counter-based generator keyed by (seed, step, i),
 * uniformly in the split. tokens and targets are [rows * seq]. first_row lets a
 * replica fetch rows [first_row, first_row + rows) of the global batch only. */
void ah_dataset_batch(const ah_dataset *d, int validation, uint64_t seed, long step, int first_row, int rows,
                      int seq, int *tokens, int *targets);
/* Unigram entropy of the train split in nats per token (for judging the loss). */
double ah_dataset_unigram_entropy(const ah_dataset *d);

/* 64-bit counter-based hash (splitmix64 finalizer) used for sampling and for
 * deterministic parameter initialisation. */
uint64_t ah_hash64(uint64_t x);

#endif
