/* Training data: byte-level text (vocabulary 256) or token files (llm.c's
 * versions 1 and 2, Megatron's .bin/.idx, raw uint16/uint32 .bin, or a
 * directory of shards), split into
 * train and validation, served deterministically: the batch of step s is a
 * function of (seed, s) only, so every plan and every rank sees the same
 * samples in the same order. docs/data.md. */
#ifndef AUTOHET_ENGINE_DATA_H
#define AUTOHET_ENGINE_DATA_H

/* the most training text --data may hold (files of a directory together) */
#define AH_DATA_MAX_BYTES (256 << 20)
/* llm.c's token files: a header of 256 int32 (magic, version, token count,
 * zeros), then the tokens: uint16 in version 1, uint32 in version 2 */
#define AH_LLMC_MAGIC 20240520
#define AH_LLMC_VERSION 1
#define AH_LLMC_VERSION_U32 2
#define AH_LLMC_HEADER_BYTES 1024
/* Megatron's indexed dataset (.bin tokens + .idx index): the index header is
 * the 9-byte magic, uint64 version 1, uint8 dtype code, uint64 sequence
 * count, uint64 document count (34 bytes), then int32 sequence_lengths[S],
 * int64 sequence_pointers[S], int64 document_indices[D] */
#define AH_MEGATRON_MAGIC "MMIDIDX\0\0"
#define AH_MEGATRON_HEADER_BYTES 34
#include <stddef.h>
#include <stdint.h>

typedef enum {
    AH_DATA_TEXT = 0,  /* bytes of text files: tokens 0..255 */
    AH_DATA_TOKENS = 1 /* token ids of a tokenizer (the model's vocabulary) */
} ah_data_kind;

/* The type of the token ids in a file (Megatron's dtype codes map onto it). */
typedef enum {
    AH_TOKENS_UNSTATED = 0, /* a raw file without --data-dtype: read as uint16 */
    AH_TOKENS_U8,
    AH_TOKENS_I8,
    AH_TOKENS_I16,
    AH_TOKENS_U16,
    AH_TOKENS_I32,
    AH_TOKENS_U32,
    AH_TOKENS_I64
} ah_token_type;

/* "uint16", "int32", ... */
const char *ah_token_type_name(ah_token_type t);
/* bytes per token id (an unstated raw type is uint16: 2) */
int ah_token_type_size(ah_token_type t);
/* --data-dtype: "uint16" or "uint32"; AH_TOKENS_UNSTATED for anything else */
ah_token_type ah_token_type_parse(const char *name);

/* Where tokens [first, first + count) came from. A token file is
 * memory-mapped: its tokens are read from the mapping. */
typedef struct {
    char *path;
    size_t first, count;
    size_t header;      /* bytes before the first token in the file */
    ah_token_type type; /* token files: the type of the ids (AH_TOKENS_UNSTATED: raw uint16, not stated) */
    const unsigned char *at; /* token files: the first token, in the mapping */
    void *map;               /* the mapping (NULL for text, or an empty file) */
    size_t map_len;
} ah_data_file;

typedef struct {
    ah_data_kind kind;
    unsigned char *bytes; /* AH_DATA_TEXT: the corpus (files concatenated in name order) */
    /* AH_DATA_TOKENS: the token files, mapped, in order (ah_dataset_token reads one) */
    size_t n;
    size_t n_train; /* [0, n_train) train, [n_train, n) validation */
    ah_data_file *files;
    int n_files;
    char source[256];
    ah_token_type raw_type; /* the type raw token files were read as (--data-dtype) */
} ah_dataset;

/* Load --data: a text file or a directory of text files (bytes), an llm.c
 * token file (starts with AH_LLMC_MAGIC; version 1 uint16, version 2 uint32),
 * Megatron's indexed dataset (PREFIX.bin beside PREFIX.idx, named by either
 * file or by PREFIX), a raw token file (a name ending in .bin otherwise:
 * uint16 as nanoGPT writes them, or raw_type), or a directory of .bin shards
 * (name order; shards with "_val" in the name, as llm.c names them, are the
 * validation split). Token files are memory-mapped. Otherwise val_fraction of
 * the data at the end becomes the validation split. Returns 0, or -1 with a
 * one-line error naming the file (and the header field: missing, empty,
 * truncated header, wrong size, bad index, too small for the sequence). */
int ah_dataset_load(ah_dataset *d, const char *path, double val_fraction, int seq, char *err, size_t errlen);
/* As ah_dataset_load, raw token files read as raw_type (AH_TOKENS_U16 or
 * AH_TOKENS_U32; AH_TOKENS_UNSTATED: uint16, and a vocabulary over 65,536
 * then refused by ah_dataset_check_vocab). */
int ah_dataset_load_typed(ah_dataset *d, const char *path, double val_fraction, int seq,
                          ah_token_type raw_type, char *err, size_t errlen);
/* --val-data: the validation split is the data of path (any format of
 * ah_dataset_load, of the same kind as d, raw files as d's); all of d's train
 * data stays train and its own validation part is dropped. 0, or -1 with a
 * one-line error. */
int ah_dataset_set_validation(ah_dataset *d, const char *path, int seq, char *err, size_t errlen);
/* The kind of data ah_dataset_load would read from path, without reading it
 * (a path it cannot read counts as text: the loader names the error). */
ah_data_kind ah_dataset_kind_of(const char *path);
/* The vocabulary the engine trains on data of this kind: the 256 byte values
 * for text, the model's vocabulary for token data. The one owner of that rule
 * (autohet train, autohet run). */
int ah_dataset_vocab(ah_data_kind kind, int model_vocab);
/* Every token id in [0, vocab): 0, or -1 with "FILE: token id X at byte
 * offset O is not below the vocabulary V" (or "is negative"); a raw file
 * whose type was not stated, for a vocabulary over 65,536, is refused too.
 * Text data always passes vocab >= 256. */
int ah_dataset_check_vocab(const ah_dataset *d, int vocab, char *err, size_t errlen);
void ah_dataset_free(ah_dataset *d);
/* Token i of the dataset (0 <= i < n): a byte for text, a token id for
 * token data. */
int64_t ah_dataset_token(const ah_dataset *d, size_t i);

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
