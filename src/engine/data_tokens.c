/* Token files of the training data (data_tokens.h): llm.c versions 1 and 2,
 * raw uint16/uint32, Megatron's indexed .bin/.idx, memory-mapped. */
#include "engine/data_tokens.h"
#include "util/errors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

const char *ah_token_type_name(ah_token_type t) {
    static const char *const names[] = {"uint16", "uint8", "int8",   "int16",
                                        "uint16", "int32", "uint32", "int64"};
    return (unsigned)t < sizeof names / sizeof *names ? names[t] : "?";
}

int ah_token_type_size(ah_token_type t) {
    static const int sizes[] = {2, 1, 1, 2, 2, 4, 4, 8};
    return (unsigned)t < sizeof sizes / sizeof *sizes ? sizes[t] : 2;
}

ah_token_type ah_token_type_parse(const char *name) {
    if (name && !strcmp(name, "uint16"))
        return AH_TOKENS_U16;
    if (name && !strcmp(name, "uint32"))
        return AH_TOKENS_U32;
    return AH_TOKENS_UNSTATED;
}

/* A read-only mapping of a regular file (NULL for an empty one). */
typedef struct {
    void *p;
    size_t len;
} mapping;

static int map_path(const char *path, mapping *m, char *err, size_t errlen) {
    m->p = NULL;
    m->len = 0;
    /* O_NONBLOCK: a FIFO must not block the open; it is refused below */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        ah_errf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ah_errf(err, errlen, "%s: not a regular file", path);
        close(fd);
        return -1;
    }
    m->len = (size_t)st.st_size;
    if (m->len > 0) {
        m->p = mmap(NULL, m->len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m->p == MAP_FAILED) {
            m->p = NULL;
            ah_errf(err, errlen, "%s: cannot map: %s", path, strerror(errno));
            close(fd);
            return -1;
        }
    }
    close(fd);
    return 0;
}

static void unmap(mapping *m) {
    if (m->p)
        munmap(m->p, m->len);
    m->p = NULL;
    m->len = 0;
}

static uint64_t rd64(const unsigned char *p) {
    uint64_t v = 0;
    for (int b = 7; b >= 0; b--)
        v = v << 8 | p[b];
    return v;
}

static int32_t rd32(const unsigned char *p) {
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int is_regular(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int ah__megatron_pair(const char *path, char *bin, size_t n) {
    size_t len = strlen(path);
    char idx[4096];
    if (len + 5 > sizeof idx || len + 5 > n)
        return 0;
    if (ends_with(path, ".bin") || ends_with(path, ".idx")) {
        snprintf(bin, n, "%.*s.bin", (int)(len - 4), path);
        snprintf(idx, sizeof idx, "%.*s.idx", (int)(len - 4), path);
    } else {
        struct stat st;
        if (stat(path, &st) == 0) /* an existing file or directory is not a prefix */
            return 0;
        snprintf(bin, n, "%s.bin", path);
        snprintf(idx, sizeof idx, "%s.idx", path);
    }
    return is_regular(bin) && is_regular(idx);
}

/* Megatron's dtype code onto a token type; 0 when it is not one. */
static ah_token_type megatron_type(unsigned code) {
    switch (code) {
    case 1: return AH_TOKENS_U8;
    case 2: return AH_TOKENS_I8;
    case 3: return AH_TOKENS_I16;
    case 4: return AH_TOKENS_I32;
    case 5: return AH_TOKENS_I64;
    case 8: return AH_TOKENS_U16;
    default: return AH_TOKENS_UNSTATED;
    }
}

/* The header of a Megatron index: the type, S and D; the size of the file
 * checked against them. */
static int megatron_header(const char *idx, const unsigned char *p, size_t len, ah_token_type *type,
                           uint64_t *S, uint64_t *D, char *err, size_t errlen) {
    if (len < AH_MEGATRON_HEADER_BYTES) {
        ah_errf(err, errlen, "%s: header: %zu bytes, the MMIDIDX header is %d", idx, len,
                AH_MEGATRON_HEADER_BYTES);
        return -1;
    }
    if (memcmp(p, AH_MEGATRON_MAGIC, 9) != 0) {
        ah_errf(err, errlen, "%s: magic: not \"MMIDIDX\\0\\0\" (not a Megatron indexed-dataset index)", idx);
        return -1;
    }
    uint64_t version = rd64(p + 9);
    if (version != 1) {
        ah_errf(err, errlen, "%s: version %llu: only version 1 is read", idx, (unsigned long long)version);
        return -1;
    }
    unsigned code = p[17];
    *type = megatron_type(code);
    if (*type == AH_TOKENS_UNSTATED) {
        ah_errf(err, errlen, "%s: dtype code %u: %s", idx, code,
                code == 6 || code == 7 ? "floating-point, not token ids"
                                       : "unknown (1-5 and 8 are integer types)");
        return -1;
    }
    *S = rd64(p + 18);
    *D = rd64(p + 26);
    size_t room = len - AH_MEGATRON_HEADER_BYTES;
    if (*S > room / 12 || *D > room / 8 || *S * 12 + *D * 8 > room) {
        ah_errf(err, errlen,
                "%s: sequence_count %llu and document_count %llu need more than the %zu bytes of the file",
                idx, (unsigned long long)*S, (unsigned long long)*D, len);
        return -1;
    }
    size_t want = AH_MEGATRON_HEADER_BYTES + (size_t)(*S * 12 + *D * 8);
    if (len != want) {
        ah_errf(err, errlen, "%s: size: %zu bytes, sequence_count %llu and document_count %llu make %zu%s",
                idx, len, (unsigned long long)*S, (unsigned long long)*D, want,
                len == want + *S ? " (sequence_modes: a multimodal index is not read)" : "");
        return -1;
    }
    return 0;
}

/* Validates a Megatron index against its .bin of bin_len bytes: the
 * sequences are contiguous and fill the .bin, the documents cover them. */
static int megatron_index(const char *idx, const char *bin, size_t bin_len, ah_token_type *type, char *err,
                          size_t errlen) {
    mapping m;
    if (map_path(idx, &m, err, errlen) != 0)
        return -1;
    const unsigned char *p = m.p;
    uint64_t S = 0, D = 0;
    int rc = megatron_header(idx, p, m.len, type, &S, &D, err, errlen);
    if (rc != 0) {
        unmap(&m);
        return -1;
    }
    const unsigned char *lens = p + AH_MEGATRON_HEADER_BYTES, *ptrs = lens + 4 * S, *docs = ptrs + 8 * S;
    uint64_t elem = (uint64_t)ah_token_type_size(*type), at = 0;
    for (uint64_t i = 0; i < S && rc == 0; i++) {
        int32_t n = rd32(lens + 4 * i);
        uint64_t ptr = rd64(ptrs + 8 * i);
        if (n < 0)
            ah_errf(err, errlen, "%s: sequence_lengths[%llu] = %d is negative", idx, (unsigned long long)i,
                    (int)n);
        else if (ptr != at)
            ah_errf(err, errlen,
                    "%s: sequence_pointers[%llu] = %llu, the sequences before it end at byte %llu", idx,
                    (unsigned long long)i, (unsigned long long)ptr, (unsigned long long)at);
        rc = n < 0 || ptr != at ? -1 : 0;
        at += (uint64_t)(n > 0 ? n : 0) * elem;
        if (rc == 0 && at > bin_len) {
            ah_errf(err, errlen,
                    "%s: sequence_lengths[%llu] = %d ends at byte %llu, past the %zu bytes of %s", idx,
                    (unsigned long long)i, (int)n, (unsigned long long)at, bin_len, bin);
            rc = -1;
        }
    }
    if (rc == 0 && at != bin_len) {
        ah_errf(err, errlen, "%s: %zu bytes, its index %s says %llu (sequence_lengths x %s)", bin, bin_len,
                idx, (unsigned long long)at, ah_token_type_name(*type));
        rc = -1;
    }
    for (uint64_t i = 0, prev = 0; i < D && rc == 0; i++) {
        uint64_t v = rd64(docs + 8 * i);
        if ((i == 0 && v != 0) || v < prev || v > S || (i == D - 1 && v != S)) {
            ah_errf(err, errlen, "%s: document_indices[%llu] = %lld: must rise from 0 to sequence_count %llu",
                    idx, (unsigned long long)i, (long long)v, (unsigned long long)S);
            rc = -1;
        }
        prev = v;
    }
    if (rc == 0 && D == 0) {
        ah_errf(err, errlen, "%s: document_count 0: document_indices must hold at least 0", idx);
        rc = -1;
    }
    unmap(&m);
    return rc;
}

/* llm.c's header: version 1 uint16, version 2 uint32, the count the size. */
static int llmc_header(ah_data_file *f, const char *path, const unsigned char *p, size_t len, char *err,
                       size_t errlen) {
    if (len < AH_LLMC_HEADER_BYTES) {
        ah_errf(err, errlen, "%s: truncated llm.c header: %zu bytes, the header is %d", path, len,
                AH_LLMC_HEADER_BYTES);
        return -1;
    }
    int32_t version = rd32(p + 4), count = rd32(p + 8);
    if (version != AH_LLMC_VERSION && version != AH_LLMC_VERSION_U32) {
        ah_errf(err, errlen,
                "%s: llm.c token file version %d: version 1 (uint16 tokens) and 2 (uint32 tokens) are read",
                path, (int)version);
        return -1;
    }
    f->type = version == AH_LLMC_VERSION ? AH_TOKENS_U16 : AH_TOKENS_U32;
    size_t body = len - AH_LLMC_HEADER_BYTES, elem = (size_t)ah_token_type_size(f->type);
    if (count < 0 || (size_t)count * elem != body) {
        ah_errf(err, errlen, "%s: the llm.c header says %d tokens, the file holds %zu bytes after it (%s)",
                path, (int)count, body,
                count >= 0 && (size_t)count * elem > body ? "truncated" : "wrong size");
        return -1;
    }
    f->header = AH_LLMC_HEADER_BYTES;
    f->count = (size_t)count;
    return 0;
}

/* The format of a mapped file: Megatron, llm.c or raw. */
static int classify(ah_data_file *f, const char *path, const mapping *m, ah_token_type raw_type, char *err,
                    size_t errlen) {
    const unsigned char *p = m->p;
    char bin[4096];
    f->header = 0;
    if (ends_with(path, ".bin") && ah__megatron_pair(path, bin, sizeof bin)) {
        char idx[4096];
        snprintf(idx, sizeof idx, "%.*s.idx", (int)(strlen(path) - 4), path);
        if (megatron_index(idx, path, m->len, &f->type, err, errlen) != 0)
            return -1;
        f->count = m->len / (size_t)ah_token_type_size(f->type);
    } else if (m->len >= 4 && rd32(p) == AH_LLMC_MAGIC) {
        if (llmc_header(f, path, p, m->len, err, errlen) != 0)
            return -1;
    } else {
        f->type = raw_type == AH_TOKENS_U32   ? AH_TOKENS_U32
                  : raw_type == AH_TOKENS_U16 ? AH_TOKENS_U16
                                              : AH_TOKENS_UNSTATED;
        size_t elem = (size_t)ah_token_type_size(f->type);
        if (m->len % elem != 0) {
            ah_errf(err, errlen,
                    elem == 2 ? "%s: %zu bytes, an odd size: not a file of uint16 tokens"
                              : "%s: %zu bytes, not a multiple of 4: not a file of uint32 tokens",
                    path, m->len);
            return -1;
        }
        f->count = m->len / elem;
    }
    if (f->count == 0) {
        ah_errf(err, errlen, "%s: no tokens", path);
        return -1;
    }
    f->at = p + f->header;
    return 0;
}

int ah__token_file_map(ah_data_file *f, const char *path, ah_token_type raw_type, char *err, size_t errlen) {
    memset(f, 0, sizeof *f);
    char bin[4096];
    /* an .idx or a prefix names its .bin */
    const char *use = !ends_with(path, ".bin") && ah__megatron_pair(path, bin, sizeof bin) ? bin : path;
    mapping m;
    if (map_path(use, &m, err, errlen) != 0)
        return -1;
    if (classify(f, use, &m, raw_type, err, errlen) != 0) {
        unmap(&m);
        return -1;
    }
    f->path = strdup(use);
    if (f->path == NULL) {
        ah_errf(err, errlen, "%s: out of memory", use);
        unmap(&m);
        return -1;
    }
    f->map = m.p;
    f->map_len = m.len;
    return 0;
}

void ah__token_file_unmap(ah_data_file *f) {
    if (f->map)
        munmap(f->map, f->map_len);
    free(f->path);
    memset(f, 0, sizeof *f);
}
