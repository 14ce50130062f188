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
int ah_reshard_mismatch(const ah_engine_model *e, int l, const ah_ckpt_loaded *t, int nt);

/* Layer l at exactly `step`, resharded for e's TP rank: reads TP rank 0's
 * shard from the tiers `dirs` (ah_ckpt_restore_layer: verified, nearest good
 * copy), derives the checkpoint's TP degree *t_old from its sizes, reads the
 * other old ranks' shards the same way and writes to *out (free with
 * ah_ckpt_free) every tensor of TP rank 0's shard as e's shard of it, under
 * the same names. Replicated tensors are TP rank 0's copy. Returns 0; 1 when
 * the checkpoint has e's TP degree (nothing to reshard, *out untouched); -1
 * with err. */
int ah_reshard_layer(const ah_engine_model *e, int l, const char *const *dirs, int n_dirs, int step,
                     ah_ckpt_loaded **out, int *n_out, int *t_old, char *err, size_t errlen);

#endif
