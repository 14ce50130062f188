/* Layer-granular checkpoint shards and per-node manifests (docs/checkpoint.md).
 *
 * A shard holds the training state of one layer (one TP shard of it) at one
 * step: its tensors (parameters, Adam moments) in the safetensors format, so
 * Python's `safetensors` reads it. A manifest per (node, tier) lists the
 * shards it holds with their step, size and XXH64 checksum; the layers it
 * lists are the node's *layer bitmap* for that tier. Every file is written to
 * a temporary name, fsynced and renamed, and the manifest is updated last, so
 * a crash leaves either the old or the new state, never a torn one. */
#ifndef AUTOHET_CKPT_H
#define AUTOHET_CKPT_H

#include <stddef.h>
#include <stdint.h>

#define AH_CKPT_MAX_DIMS 4

typedef struct {
    const char *name;
    const float *data;
    int ndim;
    int64_t shape[AH_CKPT_MAX_DIMS];
} ah_ckpt_tensor;

typedef struct {
    char name[96];
    float *data;
    size_t n;
    int ndim;
    int64_t shape[AH_CKPT_MAX_DIMS];
    int borrowed; /* data points into the caller's buffer (ah_ckpt_parse_shard view mode) */
} ah_ckpt_loaded;

/* Writes `n` F32 tensors and string metadata (`meta` = n_meta key/value pairs,
 * may be NULL) as a safetensors file at `path`, atomically. On success fills
 * the file's size and XXH64 (seed 0) of all its bytes. 0, or -1 with err. */
int ah_ckpt_write_shard(const char *path, const ah_ckpt_tensor *t, int n, const char *const (*meta)[2],
                        int n_meta, uint64_t *bytes, uint64_t *xxh64, char *err, size_t errlen);

/* Reads a shard, verifying its size and checksum against the manifest's
 * (`expect_bytes`, `expect_xxh64`) before parsing. 0 and *out (free with
 * ah_ckpt_free), or -1 with err naming the file and what is wrong (missing,
 * truncated, checksum mismatch, malformed header). */
int ah_ckpt_read_shard(const char *path, uint64_t expect_bytes, uint64_t expect_xxh64, ah_ckpt_loaded **out,
                       int *n, char *err, size_t errlen);
void ah_ckpt_free(ah_ckpt_loaded *t, int n);
/* The two halves of ah_ckpt_read_shard: read exactly `expect_bytes` raw bytes
 * of a shard file into buf (size checked), and verify + parse bytes already in
 * memory (e.g. fetched from a peer); `path` only names the source in errors. */
int ah_ckpt_read_raw(const char *path, uint64_t expect_bytes, unsigned char *buf, char *err, size_t errlen);
int ah_ckpt_parse_shard(const char *path, const unsigned char *buf, uint64_t expect_bytes, uint64_t expect_xxh64,
                        ah_ckpt_loaded **out, int *n, char *err, size_t errlen);
/* The same without copying: each tensor's data points into buf (which must
 * outlive the result) when it is float-aligned there. */
int ah_ckpt_parse_shard_view(const char *path, const unsigned char *buf, uint64_t expect_bytes,
                             uint64_t expect_xxh64, ah_ckpt_loaded **out, int *n, char *err, size_t errlen);
/* A shard read as a stream (ah_ckpt_stream_shard). fetch returns bytes [off,
 * off + len) of the shard (valid until its next call; float-aligned when off
 * is a multiple of 4), or NULL with err; begin sees the parsed header's
 * tensors (data NULL) and refuses them with -1 and err when they do not fit
 * the caller; piece gets `count` floats of tensor i from element `first` on. */
typedef struct {
    const unsigned char *(*fetch)(void *ctx, uint64_t off, uint64_t len, char *err, size_t errlen);
    int (*begin)(void *ctx, const ah_ckpt_loaded *t, int n, char *err, size_t errlen);
    void (*piece)(void *ctx, int i, size_t first, size_t count, const float *data);
    void *fetch_ctx, *ctx;
} ah_ckpt_stream;
/* Reads a shard of expect_bytes through s in one pass: every byte is hashed
 * as it passes and each tensor's bytes go to s->piece while they are still in
 * cache (instead of a verifying pass and then a copying one). What piece wrote
 * may be used only when this returns 0: the size, XXH64 and header are good
 * and begin accepted the tensors. -1 with err: unreadable, a checksum mismatch
 * or a malformed header (another copy may be good); -2 with begin's err: the
 * shard is good but does not fit; 1: a layout this does not stream
 * (overlapping, unaligned or twice-named tensors): read it whole instead. */
int ah_ckpt_stream_shard(const char *path, uint64_t expect_bytes, uint64_t expect_xxh64, const ah_ckpt_stream *s,
                         char *err, size_t errlen);
/* Maps a shard file read-only after checking its size (*map, unmap with
 * ah_ckpt_unmap): the zero-copy read of the memory tier. 0 or -1 with err. */
int ah_ckpt_map(const char *path, uint64_t expect_bytes, const unsigned char **map, char *err, size_t errlen);
void ah_ckpt_unmap(const unsigned char *map, uint64_t bytes);

/* ---- tiers ---- */
/* Where a copy of a layer shard lives: its node's memory or disk, another
 * node's (a peer, fetched over RMA), or the cloud. */
enum { AH_TIER_MEMORY, AH_TIER_DISK, AH_TIER_PEER, AH_TIER_CLOUD, AH_TIER_N };
/* copies of one shard a recovery may fall back to when the one it reads does not verify */
#define AH_MAX_FALLBACKS 8
const char *ah_tier_name(int tier); /* "memory", "disk", "peer", "cloud"; "?" out of range */
int ah_tier_parse(const char *name); /* the tier of that name, or -1 */

/* ---- recovery assignments (docs/recovery.md) ----
 * The one owner of the format: `autohet run` writes it (elastic/assign.c),
 * the engine's recovery and the recovery servers read it. */
typedef struct {
    char path[1280]; /* a holding's directory (< 1024) / a shard's file name (< 128) */
    uint64_t bytes, xxh64;
} ah_shard_src;

typedef struct {
    int rank, layer, tp, tier;
    int tp_degree;       /* the TP degree the shard was written under; 0: not stated (the reader's own) */
    int server;          /* a peer shard: the world rank exposing it over RMA; else -1 */
    ah_shard_src src;
    ah_shard_src fallback[AH_MAX_FALLBACKS]; /* other copies of the same shard and step, tried in order */
    int fallback_tier[AH_MAX_FALLBACKS]; /* AH_TIER_MEMORY/DISK (the rank's own node) or AH_TIER_CLOUD */
    int n_fallback;
    char holder[64];       /* the node holding src (written for people) */
    int holder_tier;       /* a peer shard: the holder's own tier, else -1 (written for people) */
} ah_recovery_shard;

typedef struct {
    int rank;
    char node[64];
    double cloud_bytes_per_s; /* this rank's share of its node's cloud bandwidth */
    int server_only;          /* a surviving node's server the new plan does not use */
} ah_recovery_rank;

typedef struct {
    int step;
    ah_recovery_rank *ranks;
    int n_ranks;
    ah_recovery_shard *shards;
    int n_shards;
} ah_recovery_doc;

/* Atomic write; 0 or -1 with err. */
int ah_recovery_doc_write(const char *path, const ah_recovery_doc *d, char *err, size_t errlen);
/* Read and check (bounded file, every field typed, tiers known, sizes in
 * [0, 2^31), checksums 16 hex digits). 0, or -1 with one line naming the file
 * and the entry. */
int ah_recovery_doc_read(const char *path, ah_recovery_doc *d, char *err, size_t errlen);
void ah_recovery_doc_free(ah_recovery_doc *d);

/* ---- manifests ---- */

/* version 2: the manifest carries its own checksum ("manifest_xxh64") */
#define AH_MANIFEST_VERSION 2
#define AH_MANIFEST_MAX_BYTES (64u << 20)

typedef struct {
    int layer, tp_rank, step;
    char file[128]; /* relative to the manifest's directory */
    uint64_t bytes, xxh64;
    int tp_degree; /* the TP degree of the shard's stage; 0: not recorded (an older manifest) */
} ah_manifest_entry;

typedef struct {
    char node[64], tier[16];
    int n, cap;
    ah_manifest_entry *e;
} ah_manifest;

void ah_manifest_init(ah_manifest *m, const char *node, const char *tier);
void ah_manifest_free(ah_manifest *m);
/* adds or replaces the entry for (layer, tp_rank, tp_degree, step): a manifest
 * may list a layer at two steps while a checkpoint commits, and at two TP
 * degrees when two stages of the node hold it (docs/checkpoint.md) */
void ah_manifest_put(ah_manifest *m, const ah_manifest_entry *e);
/* the newest entry for (layer, tp_rank), or NULL */
const ah_manifest_entry *ah_manifest_find(const ah_manifest *m, int layer, int tp_rank);
/* the entry for (layer, tp_rank) at exactly `step`, or NULL */
const ah_manifest_entry *ah_manifest_find_step(const ah_manifest *m, int layer, int tp_rank, int step);
/* the entry for (layer, tp_rank) of TP degree tp_degree at exactly `step`, or
 * NULL. tp_degree 0 asks for any degree; an entry that records no degree
 * (tp_degree 0) matches any: its degree is then known from its sizes only. */
const ah_manifest_entry *ah_manifest_find_shard(const ah_manifest *m, int layer, int tp_rank, int tp_degree,
                                                int step);
/* The file name of a shard: L<layer>-tp<rank>-s<step>.safetensors for TP
 * degree 1 (or 0, unstated), L<layer>-tp<rank>of<degree>-s<step>.safetensors
 * otherwise, so that one node directory can hold a layer at two degrees. */
void ah_ckpt_shard_name(char *out, size_t n, int layer, int tp_rank, int tp_degree, int step);
/* drops the entries of every (layer, tp_rank) that also has one at `step`;
 * returns how many were dropped */
int ah_manifest_prune(ah_manifest *m, int step);
/* layer bitmap: bit l of bits[l / 8] set when layer l (this TP rank) is held
 * at step >= min_step; returns the number of layers set */
int ah_manifest_bitmap(const ah_manifest *m, int tp_rank, int min_step, int n_layers, uint8_t *bits);
/* atomic save / load of DIR/manifest.json; a missing manifest loads as empty.
 * The load verifies the manifest's own checksum and every field's range. */
int ah_manifest_save(const char *dir, const ah_manifest *m, char *err, size_t errlen);
int ah_manifest_load(const char *dir, ah_manifest *m, char *err, size_t errlen);
/* ah_manifest_load, but an unreadable manifest is renamed to
 * manifest.json.corrupt (reported on stderr) and loads as empty, so that the
 * tier can be written again: 0 loaded, 1 set aside, -1 (err) cannot rename */
int ah_manifest_load_or_set_aside(const char *dir, ah_manifest *m, char *err, size_t errlen);
/* Removes from DIR the background-persist pins (.pin-PID-FILE) of writers that
 * are gone, and their temporary files (NAME.tmp.PID)
 * (every temporary file with `all_tmp`: where no writer of this job can be at
 * work, e.g. before a resume restores) and, with `keep`, the shard files
 * (L*-tp*-s*.safetensors) it does not list. Only call it where no live writer
 * can be between writing a shard and listing it. Returns the number removed. */
int ah_ckpt_sweep(const char *dir, const ah_manifest *keep, int all_tmp);

/* Restores layer `layer` (TP rank `tp_rank`) at exactly `step` from the first
 * of `n_dirs` tier directories (nearest first) whose manifest lists it and
 * whose shard verifies; a corrupt or truncated shard is reported on stderr
 * and the next tier is tried. Returns the index of the tier used, or -1 with
 * err when no tier has a good copy. */
int ah_ckpt_restore_layer(const char *const *dirs, int n_dirs, int layer, int tp_rank, int step,
                          ah_ckpt_loaded **out, int *n, char *err, size_t errlen);
/* The same for the shard of TP degree tp_degree (ah_manifest_find_shard's
 * matching: 0 = any degree; an entry without a degree matches any). */
int ah_ckpt_restore_shard(const char *const *dirs, int n_dirs, int layer, int tp_rank, int tp_degree, int step,
                          ah_ckpt_loaded **out, int *n, char *err, size_t errlen);

/* Atomic whole-file writes: ah_write_file_atomic() in util/atomic_file.h. */

/* ---- the recovery servers of a job (the checkpoint runtime, ckpt_recover.c) ---- */

/* A recovery server: a world rank beyond the plan's slots, on a surviving node
 * that the new plan does not use, serves that node's shards for the new
 * owners' one-sided gets (its part of ah_ckpt_recover), then sleeps until
 * rank 0 releases it with ah_ckpt_release_servers. 0, or -1 with err. */
int ah_ckpt_serve_recovery(const char *assignment, char *err, size_t errlen);
/* rank 0 at the end of a successful run: world ranks first..world-1 may exit */
void ah_ckpt_release_servers(int first, int world);

#endif
