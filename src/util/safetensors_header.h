/* Internal: the header of a safetensors file, parsed and checked (one reader for the engine's weights in,
 * src/engine/safetensors.c, and the checkpoint's shards, src/ckpt/shard.c).
 *
 * Layout: 8-byte little-endian header length N, N bytes of JSON
 * {"NAME": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}, ...,
 *  "__metadata__": {"k": "v"}}, then the data section (offsets relative to it). */
#ifndef AH_UTIL_SAFETENSORS_HEADER_H
#define AH_UTIL_SAFETENSORS_HEADER_H
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

/* The hl bytes of header JSON at hdr, over a data section of data_len bytes: a JSON object of at most
 * AH_ST_MAX_TENSORS entries, each "__metadata__" (an object of strings) or a tensor with a known dtype, a
 * shape of at most AH_ST_MAX_DIMS integers and data_offsets [b, e] inside the data section spanning exactly
 * the shape's bytes, its name shorter than AH_ST_MAX_NAME. *t (n entries, in header order; free()), 0; or
 * -1 (the header as a whole) / -2 (one tensor entry) with what is wrong in err, without a file name. */
int ah_st_parse_header(const char *hdr, uint64_t hl, uint64_t data_len, ah_st_tensor **t, int *n, char *err,
                       size_t errlen);
const char *ah_st_dtype_name(ah_st_dtype d);

#endif
