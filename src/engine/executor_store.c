/* The executor as a layer store (ckpt/layer_store.h): what the checkpoint
 * runtime (src/ckpt/ckpt_runtime.h) saves, persists and restores of this
 * rank's layers, and the plan facts it needs (ranks, TP rank, nodes). */
#include <stdio.h>
#include <string.h>

#include "ckpt/ckpt_runtime.h"
#include "engine/executor_internal.h"
#include "engine/reshard.h"

_Static_assert(AH_STORE_MAX_TENSORS == AH_MAX_TENSORS, "a layer store's tensor table holds a layer's");

/* the engine's buffer of each state a shard holds */
static const ah_layer_state store_states[AH_STORE_N_STATES] = {AH_STATE_PARAM, AH_STATE_ADAM_M,
                                                               AH_STATE_ADAM_V};

static int my_node(const ah_executor *x) {
    return x->plan.replicas[x->replica].stages[x->stage].node;
}

const char *ah_executor_node_name(const ah_executor *x) {
    return x->plan.cluster.nodes[my_node(x)].name;
}

static const char *st_node_name(void *ctx, int node) {
    const ah_executor *x = ctx;
    return x->plan.cluster.nodes[node].name;
}

static int st_n_held(void *ctx) {
    return ah__exec_n_held(ctx);
}

static int st_held_layer(void *ctx, int i) {
    return ah__exec_held_layer(ctx, i);
}

static int st_holds(void *ctx, int l) {
    return ah__exec_model_of(ctx, l) != NULL;
}

static const ah_eng_layer *layer_of(const ah_engine_model *e, int l) {
    return &e->layers[l - e->first];
}

static int st_tensors(void *ctx, int l, ah_store_tensor *t, size_t *n_floats) {
    const ah_eng_layer *Ly = layer_of(ah__exec_model_of(ctx, l), l);
    for (int q = 0; q < Ly->n_tensors; q++) {
        const ah_tensor_info *ti = &Ly->t[q];
        t[q] = (ah_store_tensor){ti->name, ti->offset, ti->size, ti->lrows, ti->lcols};
    }
    *n_floats = Ly->n;
    return Ly->n_tensors;
}

static void st_to_host(void *ctx, int l, ah_store_state s, float *dst) {
    ah__engine_layer_to_host(ah__exec_model_of(ctx, l), l, store_states[s], dst);
}

static void st_from_host(void *ctx, int l, ah_store_state s, int tensor, size_t first, size_t count,
                         const float *src) {
    ah__engine_tensor_range_from_host(ah__exec_model_of(ctx, l), l, store_states[s], tensor, first, count, src);
}

static int st_reshard_mismatch(void *ctx, int l, const ah_ckpt_loaded *t, int nt) {
    return ah__reshard_mismatch(ah__exec_model_of(ctx, l), l, t, nt);
}

static int st_reshard_from_dirs(void *ctx, int l, const char *const *dirs, int n_dirs, int step,
                                ah_ckpt_loaded **out, int *n_out, int *t_old, char *err, size_t errlen) {
    return ah__reshard_layer(ah__exec_model_of(ctx, l), l, dirs, n_dirs, step, out, n_out, t_old, err, errlen);
}

static int st_reshard_from_shards(void *ctx, int l, int t_old, ah_ckpt_loaded *const *shards,
                                  const int *counts, ah_ckpt_loaded **out, int *n_out, char *err,
                                  size_t errlen) {
    return ah__reshard_from_shards(ah__exec_model_of(ctx, l), l, t_old, shards, counts, out, n_out, err,
                                  errlen);
}

void ah__exec_store_init(ah_executor *x) {
    x->store = (ah_layer_store){
        .ctx = x,
        .comm = x->comm,
        .rank = x->rank,
        .world = x->world,
        .tp_rank = x->tp_rank,
        .tp = x->tp,
        .n_nodes = x->plan.cluster.n_nodes,
        .node = my_node(x),
        .node_name = st_node_name,
        .run = {&x->cfg, x->seed, x->plan.global_batch, x->plan.train.seq, x->oc.total_steps,
                x->oc.warmup_steps, x->oc.lr},
        .n_held = st_n_held,
        .held_layer = st_held_layer,
        .holds = st_holds,
        .tensors = st_tensors,
        .to_host = st_to_host,
        .from_host = st_from_host,
        .reshard_mismatch = st_reshard_mismatch,
        .reshard_from_dirs = st_reshard_from_dirs,
        .reshard_from_shards = st_reshard_from_shards,
    };
}

const ah_layer_store *ah__executor_layer_store(const ah_executor *x) {
    return &x->store;
}

int ah_executor_save(ah_executor *x, const char *dir, int step, char *err, size_t errlen) {
    return ah_ckpt_save(ah__executor_layer_store(x), dir, "disk", step, NULL, err, errlen);
}
