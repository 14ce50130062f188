/* The engine's memory against the cost model's (issue #11): each rank's
 * high-water mark of backend tensors (backend.c's accounting) next to what
 * the planner's stage memory predicts for the same layers, degree,
 * micro-batch and schedule (docs/engine.md, "Memory"). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autohet/plan.h"
#include "engine/backend.h"
#include "engine/executor_internal.h"

/* The cost model's activation accounting for what the backend's attention
 * keeps: a backend that saves the T x T probabilities (CUDA) is the model's
 * "no recomputation" case; one that keeps only per-row statistics and
 * recomputes the scores in the backward (the CPU's flash-style kernel) keeps
 * what the model's "selective" case (scores recomputed) counts. */
static ah_recompute attention_recompute(const ah_executor *x, ah_recompute planned) {
    int T = x->plan.train.seq;
    if (x->n_chunks < 1 || planned != AH_RECOMPUTE_NONE || T <= 2)
        return planned;
    const ah_backend *be = x->chunks[0].be;
    if (be->attention_saved(be->ctx, T) < (size_t)T * T)
        return AH_RECOMPUTE_SELECTIVE;
    return planned;
}

/* The cost model's bytes for this rank: weights, gradients and optimizer
 * state of the held layers, plus the largest sum of in-flight activations
 * its schedule program ever holds (a forward makes a micro-batch's chunk
 * activations live, its backward frees them). fp32 throughout, the
 * optimizer state replicated, as the CPU engine trains. */
static double predicted_bytes(const ah_executor *x) {
    ah_train_settings ts = x->plan.train;
    ts.precision = AH_PRECISION_FP32;
    ts.dist_optimizer = 0;
    ts.recompute = attention_recompute(x, ts.recompute);
    int L = ah_model_num_layers(&x->cfg);
    double state, act, bytes = 0, live = 0, peak = 0;
    double *act_of = malloc(sizeof(double) * (size_t)L); /* per layer: one micro-batch's activations */
    for (int l = 0; l < L; l++)
        act_of[l] = -1;
    for (int i = 0; i < ah__exec_n_held(x); i++) {
        int l = ah__exec_held_layer(x, i);
        ah_layers_memory(&x->cfg, &ts, x->tp, x->plan.micro_batch, l, l + 1, &state, &act_of[l]);
        bytes += state;
    }
    for (int i = 0; i < x->prog->n_ops; i++) {
        const ah_op *op = &x->prog->ops[i];
        if (op->kind != AH_OP_FORWARD && op->kind != AH_OP_BACKWARD)
            continue;
        act = 0;
        for (int l = op->first; l < op->last; l++)
            act += act_of[l];
        live += op->kind == AH_OP_FORWARD ? act : -act;
        peak = live > peak ? live : peak;
    }
    free(act_of);
    return bytes + peak;
}

void ah_executor_memory_report(ah_executor *x, ah_exec_memory *out) {
    memset(out, 0, sizeof *out);
    double mine[2] = {ah__be_mem_stats().peak_bytes, predicted_bytes(x)};
    double *all = x->rank == 0 ? malloc(sizeof(double) * 2 * (size_t)x->world) : NULL;
    MPI_Gather(mine, 2, MPI_DOUBLE, all, 2, MPI_DOUBLE, 0, x->comm);
    if (x->rank != 0)
        return;
    out->ranks = x->world;
    out->measured_min = out->predicted_min = INFINITY;
    out->worst_rank = -1;
    for (int r = 0; r < x->world; r++) {
        double m = all[2 * r], p = all[2 * r + 1];
        out->measured_min = m < out->measured_min ? m : out->measured_min;
        out->measured_max = m > out->measured_max ? m : out->measured_max;
        out->predicted_min = p < out->predicted_min ? p : out->predicted_min;
        out->predicted_max = p > out->predicted_max ? p : out->predicted_max;
        double e = m > 0 ? p / m - 1 : 0;
        if (out->worst_rank < 0 || fabs(e) > fabs(out->worst_error)) {
            out->worst_error = e;
            out->worst_rank = r;
        }
    }
    free(all);
}
