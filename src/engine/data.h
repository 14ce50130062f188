/* Training data: byte-level text (vocabulary 256) or token files (llm.c's
 * format, nanoGPT's raw uint16 .bin, or a directory of shards), split into
 * train and validation, served deterministically: the batch of step s is a
 * function of (seed, s) only, so every plan and every rank sees the same
 * samples in the same order. docs/engine.md, "Training data". */
#ifndef AUTOHET_ENGINE_DATA_H
#define AUTOHET_ENGINE_DATA_H

/* the most training text --data may hold (files of a directory together) */
#define AH_DATA_MAX_BYTES (256 << 20)
/* the most token data (bytes of uint16 tokens, shards together): 1 Gi tokens */
#define AH_DATA_MAX_TOKEN_BYTES ((size_t)2 << 30)
/* llm.c's token files: a header of 256 int32 (magic, version, token count,
 * zeros), then the tokens as uint16 */
#define AH_LLMC_MAGIC 20240520
#define AH_LLMC_VERSION 1
#define AH_LLMC_HEADER_BYTES 1024
#include <stddef.h>
#include <stdint.h>

typedef enum {
    AH_DATA_TEXT = 0,  /* bytes of text files: tokens 0..255 */
    AH_DATA_TOKENS = 1 /* uint16 token ids of a tokenizer (the model's vocabulary) */
} ah_data_kind;

/* Where tokens [first, first + count) came from: for error messages. */
typedef struct {
    char *path;
    size_t first, count;
    size_t header; /* bytes before the first token in the file */
} ah_data_file;

typedef struct {
    ah_data_kind kind;
    unsigned char *bytes; /* AH_DATA_TEXT: the corpus (files concatenated in name order) */
    uint16_t *tokens;     /* AH_DATA_TOKENS: the token ids (files concatenated in name order) */
    size_t n;
    size_t n_train; /* [0, n_train) train, [n_train, n) validation */
    ah_data_file *files;
    int n_files;
    char source[256];
} ah_dataset;

/* Load --data: a text file or a directory of text files (bytes), an llm.c
 * token file (starts with AH_LLMC_MAGIC), a nanoGPT raw token file (a name
 * ending in .bin without the magic: uint16 tokens), or a directory of .bin
 * shards (name order; shards with "_val" in the name, as llm.c names them,
 * are the validation split). Otherwise val_fraction of the data at the end
 * becomes the validation split. Returns 0, or -1 with a one-line error
 * naming the file (missing, empty, truncated header, wrong size, too small
 * for the sequence length). */
int ah_dataset_load(ah_dataset *d, const char *path, double val_fraction, int seq, char *err, size_t errlen);
/* --val-data: the validation split is the data of path (any format of
 * ah_dataset_load, of the same kind as d); all of d's data becomes train.
 * 0, or -1 with a one-line error. */
int ah_dataset_set_validation(ah_dataset *d, const char *path, int seq, char *err, size_t errlen);
/* The kind of data ah_dataset_load would read from path, without reading it
 * (a path it cannot read counts as text: the loader names the error). */
ah_data_kind ah_dataset_kind_of(const char *path);
/* The vocabulary the engine trains on data of this kind: the 256 byte values
 * for text, the model's vocabulary for token data. The one owner of that rule
 * (autohet train, autohet run). */
int ah_dataset_vocab(ah_data_kind kind, int model_vocab);
/* Every token id below vocab: 0, or -1 with "FILE: token id X at byte offset
 * O is not below the vocabulary V". Text data always passes vocab >= 256. */
int ah_dataset_check_vocab(const ah_dataset *d, int vocab, char *err, size_t errlen);
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
/* "text" or "tokens" */
const char *ah_data_kind_name(ah_data_kind k);

/* 64-bit counter-based hash (splitmix64 finalizer) used for sampling and for
 * deterministic parameter initialisation. */
uint64_t ah_hash64(uint64_t x);

#endif
