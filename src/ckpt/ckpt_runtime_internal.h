/* Shared by the checkpoint runtime's files (ckpt_runtime.h); not a public
 * interface. */
#ifndef AUTOHET_CKPT_RUNTIME_INTERNAL_H
#define AUTOHET_CKPT_RUNTIME_INTERNAL_H
#include <stddef.h>
#include <stdint.h>

#include "ckpt/ckpt_runtime.h"

/* A shard holds these states of each tensor, named PREFIX.TENSOR. */
extern const char *const ah_ckpt_state_prefix[AH_STORE_N_STATES];

/* One shard a rank wrote: what its node's manifest lists of it. Ranks
 * exchange these records as bytes. */
typedef struct ah_saved_shard {
    int node, layer, tp_rank, tp_degree, step;
    uint64_t bytes, xxh64;
    char file[64];
} ah_saved_shard;

/* DIR/<node name> (a node out of range: DIR/node) */
void ah_ckpt_node_dir(const ah_layer_store *s, const char *dir, int node, char *out, size_t n);

/* Every rank's saved-shard records (this rank's: `mine`, nl of them), *ns in all, and (*from, to free) the
 * rank each came from. Collective. The caller frees the result. */
ah_saved_shard *ah_ckpt_gather_records(const ah_layer_store *ls, const ah_saved_shard *mine, int nl, int *ns,
                                       int **from);

/* The two-phase commit of a checkpoint whose shards every rank has written
 * (`mine`, `nl` records; bad_in: this rank failed), into DIR's tier `tier`
 * (ckpt_commit.c). Collective. 0, or -1 with err on every rank. */
int ah_ckpt_commit(const ah_layer_store *s, const char *dir, const char *tier, int step,
                   const ah_saved_shard *mine, int nl, int bad_in, char *err, size_t errlen);

/* Buddy copies of a memory snapshot (ckpt_replicate.c): the shards of `mine` (this rank's records,
 * written in nd) held on fewer than `copies` nodes go to the next nodes' lowest ranks, which write them
 * into their nodes' directories of DIR; *extra (to free) gets the records this rank received, to commit
 * as its own. Collective. 0, or -1 with err. */
#define AH_MAX_MEM_COPIES 4
int ah_ckpt_replicate(const ah_layer_store *ls, const char *dir, const char *nd, const ah_saved_shard *mine,
                      int nl, int copies, ah_saved_shard **extra, int *n_extra, char *err, size_t errlen);

/* The memory-tier snapshot of `step` that ah_ckpt_save just committed (`rec`,
 * n records, taken over; nd: this rank's node directory of the tier), what a
 * background persist of that step copies (ckpt_persist.c). */
void ah_ckpt_persist_remember(ah_ckpt_persist *p, ah_saved_shard *rec, int n, int step, const char *nd);

/* Copies a loaded shard's parameters and AdamW moments into held layer l: every
 * tensor of the layer must be there with this rank's size (ckpt_restore.c).
 * 0, or -1 with err. */
int ah_ckpt_apply_layer(const ah_layer_store *s, int l, const ah_ckpt_loaded *t, int nt, char *err,
                        size_t errlen);

#endif
