/* The checkpoint runtime (docs/checkpoint.md, docs/recovery.md): what runs a
 * checkpoint across the ranks of a job, beside the format (autohet/ckpt.h:
 * shards, manifests, recovery assignments). It works on a layer store
 * (ckpt/layer_store.h) that the engine implements:
 *
 *   ckpt_commit.c   save: every rank writes its shards, then the two-phase
 *                   commit (manifests, state.json, prune and sweep); state.json
 *   ckpt_restore.c  --resume: every held layer from the nearest good copy
 *   ckpt_persist.c  the background persist of a memory-tier snapshot to the
 *                   disk and cloud tiers, a request whose finalize commits
 *   ckpt_recover.c  --recover: a recovery assignment's shards from own tiers,
 *                   peers over MPI RMA (client and server) and the cloud; the
 *                   release of the server-only ranks */
#ifndef AUTOHET_CKPT_RUNTIME_H
#define AUTOHET_CKPT_RUNTIME_H
#include <mpi.h>
#include <stddef.h>

#include "ckpt/layer_store.h"

/* ---- save and resume (ckpt_commit.c, ckpt_restore.c) ---- */

typedef struct ah_ckpt_persist ah_ckpt_persist;

/* Layer checkpoint after `step` completed steps (collective): every rank writes
 * its layers (parameters + AdamW moments, its TP shard) as safetensors shards
 * into DIR/<its node>/, each node's lowest rank then writes that node's
 * manifest.json and rank 0 last DIR/state.json. `tier` names the tier in the
 * manifests (memory, disk, cloud). With tier "memory" and a persist handle,
 * the handle remembers the snapshot for ah_ckpt_persist_start. 0, or -1 with
 * err on every rank. */
int ah_ckpt_save(const ah_layer_store *s, const char *dir, const char *tier, int step, ah_ckpt_persist *p,
                 char *err, size_t errlen);
/* Restores every rank's layers at `step` from DIR, its own node's directory
 * first, then the other nodes' (checksums verified; a bad copy falls through
 * to the next); a layer checkpointed under another TP degree is resharded.
 * Collective. 0, or -1 with err on every rank. */
int ah_ckpt_restore(const ah_layer_store *s, const char *dir, int step, char *err, size_t errlen);
/* DIR/state.json of a checkpoint: the step to continue from (*step), after
 * checking that it was written for this model, batch shape, seed and
 * learning-rate schedule. 0, or -1 with one line in msg naming the file. */
int ah_ckpt_read_state(const char *dir, const ah_ckpt_run *run, int *step, char *msg, size_t n);

/* ---- background persist (ckpt_persist.c) ---- */

/* The handle a training loop holds: the last memory-tier snapshot of this
 * rank (ah_ckpt_save fills it) and the disk + cloud copy in flight. */
ah_ckpt_persist *ah_ckpt_persist_new(void);
/* memory copies of every layer's snapshot on distinct nodes (1 default; 2: layers no other node holds
 * are copied to a buddy node at every snapshot, ckpt_replicate.c) */
void ah_ckpt_persist_set_copies(ah_ckpt_persist *p, int copies);
int ah_ckpt_persist_copies(const ah_ckpt_persist *p);
/* abandons a copy in flight (ah_ckpt_persist_abandon) and frees the handle */
void ah_ckpt_persist_free(ah_ckpt_persist *p);
/* After the memory-tier snapshot of `step`, copy it to DIR/<node>/ of the
 * disk tier and the cloud tier (`cloud` may be NULL) in a thread of this rank
 * while training continues. Returns 0 started, 1 when there is no memory
 * snapshot of that step or a copy is still in flight (save synchronously), -1
 * with err. Not collective. */
int ah_ckpt_persist_start(ah_ckpt_persist *p, const ah_layer_store *s, const char *disk, const char *cloud,
                          int step, char *err, size_t errlen);
/* Collective, at a step boundary: once every rank's copy is done (wait = 1:
 * wait for this rank's), finalize it: commit it (manifests, state.json in
 * both tiers). Returns 1 committed, 0 nothing to commit yet, -1 with err on
 * every rank. */
/* the step of the copy in flight, -1 if none (the same on every rank: copies start together) */
int ah_ckpt_persist_step(const ah_ckpt_persist *p);
int ah_ckpt_persist_poll(ah_ckpt_persist *p, const ah_layer_store *s, int wait, char *err, size_t errlen);
/* joins and drops a copy in flight without committing it (e.g. on an error) */
void ah_ckpt_persist_abandon(ah_ckpt_persist *p);

/* ---- recovery (ckpt_recover.c) ---- */

/* What a recovery moved and how long it took (tiers: memory, disk, peer, cloud). */
typedef struct {
    double bytes[4];   /* summed over ranks */
    double seconds[4]; /* the slowest rank's time in each tier */
    double total_s;    /* the slowest rank's whole restore */
    int fallbacks;     /* shards whose first source was bad and came from the cloud copy */
} ah_recover_stats;
/* Restores every rank's layers from a recovery assignment written by
 * `autohet run` (docs/recovery.md): for each (rank, layer shard) its source
 * tier and file; peer shards are fetched with MPI one-sided gets from the
 * holder node's rank, which exposes them in an RMA window; cloud reads are
 * paced to the rank's share of the cloud bandwidth; every shard's checksum is
 * verified and a bad one falls back to its cloud copy. Collective over
 * MPI_COMM_WORLD (with the server-only ranks' ah_ckpt_serve_recovery). *step
 * = the step restored. 0, or -1 with err on every rank. */
int ah_ckpt_recover(const ah_layer_store *s, const char *assignment, int *step, ah_recover_stats *st,
                    char *err, size_t errlen);
/* the recovery servers (ah_ckpt_serve_recovery, ah_ckpt_release_servers): autohet/ckpt.h */
/* Reads and checks a recovery assignment (docs/recovery.md) as rank `rank`
 * would, without MPI: 0, or -1 with err. (The fuzzing entry of its parser.) */
int ah_recovery_assignment_check(const char *path, int rank, char *err, size_t errlen);

#endif
