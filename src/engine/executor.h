/* Executing a plan document over MPI processes (docs/engine.md).
 *
 * Rank r takes one GPU slot of the plan (the slot map of autohet/schedule.h:
 * replica by replica, stage by stage, TP rank by TP rank). Each rank holds its
 * stage's layer chunks (its 1/tp shard, tp its stage's own degree; several
 * chunks under the interleaved schedule) and runs its stage's schedule
 * program: forwards and backwards, non-blocking sends and blocking receives of
 * activations and gradients (peers between stages of different degrees by
 * rule 1 of per-stage TP), all-reduces inside its TP group, after the flush
 * the layer-wise gradient all-reduce of every bucket it holds (one group per
 * bucket: exactly its holders; per TP slice when their degrees differ), the
 * step reduction and AdamW. Compute runs on a backend
 * (engine/backend.h), communication over a transport (engine/transport.h). A
 * run on one rank without a plan is the trivial plan (one replica, one stage). */
#ifndef AUTOHET_ENGINE_EXECUTOR_H
#define AUTOHET_ENGINE_EXECUTOR_H
/* the executor's entry points (ah_executor_config, ah_executor_create, step, ...) are public:
 * autohet/engine.h; here what the engine's own files and the checkpoint runtime share */
#include "autohet/engine.h"
#include "ckpt/layer_store.h"
#include "engine/data.h"
#include "engine/model.h"
#include "engine/optim.h"

/* The executor as a layer store, what the checkpoint runtime
 * (ckpt/ckpt_runtime.h: save, resume, background persist, recovery) works on.
 * Valid as long as the executor. */
const ah_layer_store *ah__executor_layer_store(const ah_executor *x);

#endif
