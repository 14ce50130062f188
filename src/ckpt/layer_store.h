/* The layer store: what the checkpoint runtime (ckpt_runtime.h) needs of the
 * training state it saves, persists and restores, and nothing more. The
 * engine implements it over its executor (src/engine/executor_store.c,
 * ah__executor_layer_store); the runtime never sees the engine's types, so
 * src/ckpt/ depends on no engine header (scripts/check_structure.sh).
 *
 * A rank holds some layers of the model (its stage's chunks), each as its TP
 * shard: per layer a table of tensors laid out in one buffer of n floats, and
 * three states of that buffer a shard records: the parameters and both AdamW
 * moments. */
#ifndef AUTOHET_CKPT_LAYER_STORE_H
#define AUTOHET_CKPT_LAYER_STORE_H
#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "autohet/ckpt.h"
#include "autohet/model.h"

/* at most this many tensors per layer (the engine's AH_MAX_TENSORS) */
#define AH_STORE_MAX_TENSORS 16

/* The states of a layer a shard holds, each tensor named PREFIX.TENSOR with
 * PREFIX "param", "adam_m", "adam_v" (the runtime names them). */
typedef enum {
    AH_STORE_PARAM = 0,
    AH_STORE_ADAM_M = 1,
    AH_STORE_ADAM_V = 2,
    AH_STORE_N_STATES = 3
} ah_store_state;

/* One tensor of a held layer as this rank holds it (its TP shard). */
typedef struct {
    const char *name;
    size_t offset, size; /* in floats, inside the layer's buffer of one state */
    int rows, cols;      /* the local shard's rows x cols (a matrix when their product is size) */
} ah_store_tensor;

/* What DIR/state.json records of the run and what a resume checks it against. */
typedef struct {
    const ah_model_config *cfg;
    uint64_t seed;
    int global_batch, seq;
    int total_steps, warmup_steps; /* the learning-rate schedule */
    float lr;
} ah_ckpt_run;

typedef struct ah_layer_store ah_layer_store;
struct ah_layer_store {
    void *ctx; /* the implementation's, passed to every function below */
    /* the control plane: the training ranks (MPI_COMM_WORLD unless recovery
     * servers run beside them) */
    MPI_Comm comm;
    int rank, world;
    int tp_rank, tp; /* this rank's TP rank and its stage's TP degree */
    /* the nodes of the plan's cluster (tier directories are per node) and this rank's */
    int n_nodes, node;
    const char *(*node_name)(void *ctx, int node);
    ah_ckpt_run run;
    /* the held layers, in layer order */
    int (*n_held)(void *ctx);
    int (*held_layer)(void *ctx, int i);
    int (*holds)(void *ctx, int layer);
    /* layer l's tensor table into t[AH_STORE_MAX_TENSORS]: the count, and its
     * buffer's size in floats (*n_floats) */
    int (*tensors)(void *ctx, int l, ah_store_tensor *t, size_t *n_floats);
    /* a host copy of one state of layer l (n_floats) */
    void (*to_host)(void *ctx, int l, ah_store_state s, float *dst);
    /* `count` floats of tensor `tensor` of one state of layer l, from element
     * `first` on, overwritten with src (a restore, whole or piece by piece) */
    void (*from_host)(void *ctx, int l, ah_store_state s, int tensor, size_t first, size_t count,
                      const float *src);
    /* Resharding, whose TP layout the implementation owns (engine/reshard.h):
     * whether a loaded shard of layer l has another TP degree's sizes; layer l
     * at `step` rebuilt from the shards of another degree in the tier
     * directories (1: the checkpoint has this rank's degree, nothing done;
     * *t_old = the degree used); layer l rebuilt from every old TP rank's shard
     * of degree t_old. The results are shards of this rank's sizes (free with
     * ah_ckpt_free). 0, or -1 with err. */
    int (*reshard_mismatch)(void *ctx, int l, const ah_ckpt_loaded *t, int nt);
    int (*reshard_from_dirs)(void *ctx, int l, const char *const *dirs, int n_dirs, int step,
                             ah_ckpt_loaded **out, int *n_out, int *t_old, char *err, size_t errlen);
    int (*reshard_from_shards)(void *ctx, int l, int t_old, ah_ckpt_loaded *const *shards, const int *counts,
                               ah_ckpt_loaded **out, int *n_out, char *err, size_t errlen);
};

#endif
