/* Resharding on restore (docs/checkpoint.md, "Resharding"): a layer
 * checkpointed under one TP degree is loaded under another by reassembling
 * each tensor from every old TP rank's shard and cutting this rank's new
 * shard out of it. */
#ifndef AUTOHET_ENGINE_RESHARD_H
#define AUTOHET_ENGINE_RESHARD_H
#include <stddef.h>

#include "autohet/ckpt.h"
#include "engine/model.h"

/* 1 when a tensor of the loaded shard (named PREFIX.TENSOR) that held layer l
 * of e has is not the size of e's shard of it (written under another TP
 * degree); else 0. */
int ah__reshard_mismatch(const ah_engine_model *e, int l, const ah_ckpt_loaded *t, int nt);

/* Layer l at exactly `step`, resharded for e's TP rank: for each TP degree
 * the manifests of the tiers `dirs` record for the layer (ascending, e's own
 * skipped), then for shards without a recorded degree (derived from TP rank
 * 0's sizes), reads every old rank's shard of that one degree
 * (ah_ckpt_restore_shard: verified, nearest good copy) until a degree is
 * complete and writes to *out (free with
 * ah_ckpt_free) every tensor of TP rank 0's shard as e's shard of it, under
 * the same names. Replicated tensors are TP rank 0's copy. Returns 0; 1 when
 * the checkpoint has e's TP degree (nothing to reshard, *out untouched); -1
 * with err. */
/* The layout's one owner: layer l for e's TP rank from every old TP rank's
 * shard (shards[r], counts[r], r < t_old: all of one TP degree t_old), as
 * *out under the same names (free with ah_ckpt_free). 0 or -1 with err
 * (an old shard lacks a tensor or has another degree's size). */
int ah__reshard_from_shards(const ah_engine_model *e, int l, int t_old, ah_ckpt_loaded *const *shards,
                           const int *counts, ah_ckpt_loaded **out, int *n_out, char *err, size_t errlen);

int ah__reshard_layer(const ah_engine_model *e, int l, const char *const *dirs, int n_dirs, int step,
                     ah_ckpt_loaded **out, int *n_out, int *t_old, char *err, size_t errlen);

#endif
