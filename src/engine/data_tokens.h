/* Token files of the training data (data.c): llm.c versions 1 and 2, raw
 * uint16/uint32, Megatron's indexed .bin/.idx; memory-mapped, every header
 * field validated. docs/data.md. */
#ifndef AUTOHET_ENGINE_DATA_TOKENS_H
#define AUTOHET_ENGINE_DATA_TOKENS_H
#include "engine/data.h"

#include <stddef.h>
#include <stdint.h>

/* Maps the token file at path into *f (path, header, type, at, map, count;
 * first is left to the caller): an llm.c file by its magic, Megatron's when
 * path ends in .bin and the .idx beside it exists, else raw tokens of
 * raw_type. 0, or -1 with one line naming the file (and the field). */
int ah__token_file_map(ah_data_file *f, const char *path, ah_token_type raw_type, char *err, size_t errlen);
/* Unmaps and frees what ah__token_file_map set. */
void ah__token_file_unmap(ah_data_file *f);
/* Token i of the file (0 <= i < count). */
static inline int64_t ah__token_file_at(const ah_data_file *f, size_t i) {
    const unsigned char *p = f->at;
    switch (f->type) {
    case AH_TOKENS_U8: return p[i];
    case AH_TOKENS_I8: return (int8_t)p[i];
    case AH_TOKENS_I16: {
        uint16_t v = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
        return (int16_t)v;
    }
    case AH_TOKENS_U32:
    case AH_TOKENS_I32: {
        const unsigned char *q = p + 4 * i;
        uint32_t v = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
        return f->type == AH_TOKENS_U32 ? (int64_t)v : (int64_t)(int32_t)v;
    }
    case AH_TOKENS_I64: {
        uint64_t v = 0;
        for (int b = 7; b >= 0; b--)
            v = v << 8 | p[8 * i + (size_t)b];
        return (int64_t)v;
    }
    default: return (uint16_t)(p[2 * i] | p[2 * i + 1] << 8); /* uint16, stated or not */
    }
}
/* The Megatron pair of path, if it names one: path ending in .bin or .idx
 * with the other beside it, or a prefix with PREFIX.bin and PREFIX.idx. Writes
 * the .bin path to bin (size n); 1 if it is one, else 0. */
int ah__megatron_pair(const char *path, char *bin, size_t n);

#endif
