/* Hugging Face safetensors files, read-only and of any size (weights in:
 * `train --init-from`, `generate --init-from`). The file is memory-mapped and
 * every field of its header checked before a byte of data is used; F32 is
 * read as is, F16 and BF16 are converted to fp32. Writing F32 files is
 * ah_ckpt_write_shard (autohet/ckpt.h), whose layout this reads. docs/weights.md.
 *
 * Layout and header: util/safetensors_header.h. */
#ifndef AUTOHET_ENGINE_SAFETENSORS_H
#define AUTOHET_ENGINE_SAFETENSORS_H
#include <stddef.h>
#include <stdint.h>

#include "util/safetensors_header.h" /* the header: ah_st_tensor, its parser, the bounds */

typedef struct ah_st_file {
    char path[1024];
    const unsigned char *map; /* the whole file, read-only */
    uint64_t size;
    const unsigned char *data; /* the data section */
    ah_st_tensor *t;           /* sorted by name */
    int n;
} ah_st_file;

/* Maps and checks `path`: a regular file of at least 8 bytes, a header length
 * inside the file and at most AH_ST_MAX_HEADER, a header ah_st_parse_header
 * accepts, names unique. 0, or -1 with one line naming the file, the tensor
 * and the field. */
int ah__st_open(const char *path, ah_st_file *f, char *err, size_t errlen);
void ah__st_close(ah_st_file *f);
/* the tensor of that name, or NULL */
const ah_st_tensor *ah__st_find(const ah_st_file *f, const char *name);
/* t's n values as fp32 into dst, checked in the same pass: the index of the
 * first value that is not finite (NaN, +-inf), or t->n when every one is */
size_t ah__st_read_f32(const ah_st_file *f, const ah_st_tensor *t, float *dst);
/* "[2, 3]" */
void ah__st_shape_text(const int64_t *shape, int ndim, char *out, size_t n);

#endif
