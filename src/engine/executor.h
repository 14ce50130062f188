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
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>

#include "autohet/plan.h"
#include "autohet/schedule.h"
#include "ckpt/layer_store.h"
#include "engine/data.h"
#include "engine/model.h"
#include "engine/optim.h"

typedef struct ah_executor ah_executor;

typedef struct {
    int step;
    double loss;     /* mean token loss of the global batch */
    double val_loss; /* mean token loss of a validation batch, < 0 if not evaluated */
    double lr;
    double grad_norm; /* before clipping */
    double step_s;
    double tokens_per_s;
    double tflops; /* achieved model TFLOP/s of the whole job */
    double mfu;    /* against the ranks' measured sgemm peak */
} ah_step_stats;

/* Set up this rank's part of `plan` (which must match the size of `comm`,
 * normally MPI_COMM_WORLD) under a pipeline schedule: 1F1B, GPipe, or
 * interleaved 1F1B with virtual_stages chunks per stage (0 = 2; ignored by the
 * others). Each stage's tp, the plan's micro_batch, global_batch and train.seq
 * are used.
 * init_params = 0 skips the initialisation from the seed (the state is
 * restored next). Collective over comm. Returns NULL with a one-line error
 * (a plan the schedule cannot run says why: ah_schedule_check). */
ah_executor *ah_executor_create(MPI_Comm comm, const ah_plan *plan, const ah_model_config *cfg,
                                const ah_dataset *data, const ah_optim_config *oc, uint64_t seed, int init_params,
                                double peak_flops_per_rank, ah_schedule schedule, int virtual_stages, char *err,
                                size_t errlen);
/* One training step (collective). eval: also compute the validation loss. */
int ah_executor_step(ah_executor *x, int step, int eval, ah_step_stats *st, char *err, size_t errlen);
void ah_executor_free(ah_executor *x);
int ah_executor_rank(const ah_executor *x);

/* Gather every layer's parameters of one replica into `out` laid out layer
 * by layer as a single-rank model would hold them (TP shards concatenated in
 * tensor order). Collective; only rank 0 receives. *n = floats. -1 when the
 * plan has no such replica. For tests. */
int ah_executor_gather_params(ah_executor *x, int replica, float **out, size_t *n);

/* Record every compute op, wait, send and collective of this rank from now
 * on (low overhead: two clock reads per operation). */
void ah_executor_trace_enable(ah_executor *x);

/* Loads every rank's layers from a Hugging Face model directory (train
 * --init-from, docs/weights.md): each rank reads only the tensors of its own
 * layers and keeps its TP shard of them. The directory's config.json must
 * describe the run's model (the vocabulary may be the data's: then the
 * embedding's shape must match it). Collective. 0, or -1 with err on every rank. */
int ah_executor_init_from_hf(ah_executor *x, const char *dir, char *err, size_t errlen);
/* The executor as a layer store, what the checkpoint runtime
 * (ckpt/ckpt_runtime.h: save, resume, background persist, recovery) works on.
 * Valid as long as the executor. */
const ah_layer_store *ah_executor_layer_store(const ah_executor *x);
/* the inventory name of this rank's node */
const char *ah_executor_node_name(const ah_executor *x);
/* Collective: gather the events to rank 0, which writes Chrome trace JSON
 * (docs/analyze.md). Returns 0 or -1 with err on every rank. */
int ah_executor_write_trace(ah_executor *x, const char *path, char *err, size_t errlen);

/* This run's memory per rank against the cost model (executor_memory.c):
 * the high-water mark of backend tensors and the planner's stage memory
 * for the same layers, degree, micro-batch and schedule. Filled on rank 0. */
typedef struct {
    int ranks;
    double measured_min, measured_max;   /* bytes */
    double predicted_min, predicted_max; /* bytes */
    double worst_error;                  /* predicted / measured - 1 of the rank furthest off */
    int worst_rank;
} ah_exec_memory;
/* Collective over the executor's ranks. */
void ah_executor_memory_report(ah_executor *x, ah_exec_memory *out);

/* sgemm peak of this rank in FLOP/s (a short timed loop). */
double ah_measure_sgemm_peak(void);

#endif
