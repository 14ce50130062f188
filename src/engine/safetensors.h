/* Hugging Face safetensors files, read-only and of any size (weights in:
 * `train --init-from`, `generate --init-from`). The file is memory-mapped and
 * every field of its header checked before a byte of data is used; F32 is
 * read as is, F16 and BF16 are converted to fp32. Writing F32 files is
 * ah_ckpt_write_shard (autohet/ckpt.h), whose layout this reads. docs/weights.md.
 *
 * Layout: 8-byte little-endian header length N, N bytes of JSON
 * {"NAME": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}, ...,
 *  "__metadata__": {"k": "v"}}, then the data section (offsets relative to it). */
#ifndef AUTOHET_ENGINE_SAFETENSORS_H
#define AUTOHET_ENGINE_SAFETENSORS_H
#include <stddef.h>
#include <stdint.h>

typedef enum { AH_ST_F32 = 0, AH_ST_F16 = 1, AH_ST_BF16 = 2 } ah_st_dtype;
#define AH_ST_MAX_DIMS 8
#define AH_ST_MAX_NAME 192
/* the safetensors specification's bound on the header */
#define AH_ST_MAX_HEADER (100u << 20)
/* the most entries a header may have (a 70B model has under 1,000 tensors) */
#define AH_ST_MAX_TENSORS (1 << 20)

typedef struct {
    char name[AH_ST_MAX_NAME];
    ah_st_dtype dtype;
    int ndim;
    int64_t shape[AH_ST_MAX_DIMS];
    size_t n;       /* elements */
    uint64_t begin; /* first byte in the data section */
} ah_st_tensor;

typedef struct ah_st_file {
    char path[1024];
    const unsigned char *map; /* the whole file, read-only */
    uint64_t size;
    const unsigned char *data; /* the data section */
    ah_st_tensor *t;           /* sorted by name */
    int n;
} ah_st_file;

/* Maps and checks `path`: a regular file of at least 8 bytes, a header length
 * inside the file and at most AH_ST_MAX_HEADER, a JSON object whose entries
 * are "__metadata__" (an object of strings) or tensors with a known dtype, a
 * shape of at most AH_ST_MAX_DIMS integers and data_offsets [b, e] inside the
 * data section spanning exactly the shape's bytes; names unique and shorter
 * than AH_ST_MAX_NAME. 0, or -1 with one line naming the file, the tensor and
 * the field. */
int ah__st_open(const char *path, ah_st_file *f, char *err, size_t errlen);
void ah__st_close(ah_st_file *f);
/* the tensor of that name, or NULL */
const ah_st_tensor *ah__st_find(const ah_st_file *f, const char *name);
/* t's n values as fp32 into dst */
void ah__st_read_f32(const ah_st_file *f, const ah_st_tensor *t, float *dst);
const char *ah__st_dtype_name(ah_st_dtype d);
/* "[2, 3]" */
void ah__st_shape_text(const int64_t *shape, int ndim, char *out, size_t n);

#endif
