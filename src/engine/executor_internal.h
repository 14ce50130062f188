/* The executor's state, shared by its parts: executor.c (set-up, groups,
 * parameter gathering), executor_step.c (the program runner), executor_trace.c
 * (recording and writing traces) and executor_store.c (the layer store the
 * checkpoint runtime works on). Not a public interface. */
#ifndef AUTOHET_ENGINE_EXECUTOR_INTERNAL_H
#define AUTOHET_ENGINE_EXECUTOR_INTERNAL_H
#include <mpi.h>

#include "autohet/schedule.h"
#include "autohet/trace.h"
#include "trace/clock_sync.h"
#include "util/clock.h"
#include "engine/executor.h"
#include "engine/transport.h"

/* A set of ranks of a gradient sync: the communicator, its size and its
 * lowest world rank (which names it in traces). */
typedef struct {
    ah_group *group;
    int size, lead;
} sync_group;

/* One held layer of a bucket whose holders have different TP degrees: the runs
 * of its gradient buffer that make each TP=T slice I own (in the TP=T shard's
 * order), and the runs of its replicated tensors. */
typedef struct {
    ah_float_run **slice; /* [n_slices] */
    int *n_slice_runs;
    size_t *slice_floats;
    ah_float_run *rep;
    int n_rep;
    size_t rep_floats;
} slice_layer;

/* My membership in one gradient bucket of the schedule (ah_schedule_plan.buckets). */
typedef struct {
    ah_group *group; /* uniform degree: the holders with my TP rank; NULL: I do not hold it (or mixed) */
    int size;        /* its ranks */
    int lead;        /* its lowest world rank: names the communicator in traces */
    /* mixed degrees (executor_slices.c; T = 0 when uniform) */
    int T;              /* the largest degree among the holders */
    int n_slices;       /* the TP=T slices I own: first_slice .. + n_slices - 1 (0: not a holder) */
    int first_slice;
    sync_group *slices; /* [n_slices]: each slice's owners, one rank per replica */
    sync_group rep;     /* every holder rank: the replicated tensors, summed once per replica */
    slice_layer *layers; /* [n_layers]: the bucket's layers, when I hold it */
    int n_layers;
    ah_dptr pack;       /* a backend buffer of the largest slice or replicated part */
    ah_dptr staged;     /* overlap_dp: every part of every layer, packed side by side while in flight */
} bucket_group;

struct ah_executor {
    ah_plan plan;
    ah_model_config cfg;
    const ah_dataset *data;
    ah_optim_config oc;
    uint64_t seed;
    ah_matmul_precision prec; /* the backend context's precision of the linear layers' products */
    /* the control plane (checkpoints, recovery, trace collection): the training
     * ranks, MPI_COMM_WORLD unless recovery servers run beside them */
    MPI_Comm comm;
    ah_transport *tr; /* the data plane of a step, over the same ranks */
    int rank, world;
    int replica, stage, tp_rank, n_stages, tp;
    int m;    /* my replica's micro-batches */
    int row0; /* my replica's first row of the global batch */
    ah_schedule_plan sched;  /* chunks, buckets and the programs of every stage */
    const ah_program *prog;      /* my stage's program */
    const ah_program *eval_prog; /* its forward-only program (evaluation) */
    ah_engine_model *chunks; /* the layer chunks my stage holds, in layer order (one unless interleaved) */
    int n_chunks;
    ah_group *tp_group;      /* the ranks of my stage */
    bucket_group *bgroups;   /* [sched.n_buckets] */
    int tie_partner;         /* tied embeddings: the rank I take the other copy from, -1 none, -2 myself */
    int tie_targets[AH_MAX_TP]; /* the ranks I send my copy to (tie_partner alone when the degrees match) */
    int n_tie_targets;
    ah_layer_store store; /* this executor as the checkpoint runtime sees it (executor_store.c) */
    double slowdown;
    int emulate;                 /* every compute op lasts its modelled time (emu) */
    ah_stage_op_times emu;
    long emu_ops, emu_overruns;
    double emu_worst_s, emu_late_s;
    double peak; /* sgemm FLOP/s of one rank */
    ah_trace_recorder trace; /* on after ah_executor_trace_enable */
    ah_clock_estimate *clock_start; /* rank 0: every rank's clock when tracing began (trace/clock_sync.h) */
};

/* The chunk model holding layer l, or NULL if this rank does not hold it. */
ah_engine_model *ah__exec_model_of(const ah_executor *x, int l);
/* Layers this rank holds, and the i-th of them in layer order. */
int ah__exec_n_held(const ah_executor *x);
int ah__exec_held_layer(const ah_executor *x, int i);
/* Fills x->store once the executor is set up (executor_store.c). */
void ah__exec_store_init(ah_executor *x);

/* Gradient buckets whose holders have different TP degrees (executor_slices.c):
 * set-up of bucket q (collective over every rank, in bucket order: T + 1
 * splits), its release, and the all-reduce of held layer l (rule 2 of
 * per-stage TP, docs/engine.md). */
void ah__exec_mixed_bucket_setup(ah_executor *x, int q, bucket_group *b);
void ah__exec_mixed_bucket_free(ah_executor *x, bucket_group *b);
void ah__exec_mixed_allreduce(ah_executor *x, int q, int l);
/* overlap_dp: every part of bucket q's layers packed and its all-reduce started (non-blocking); after the
 * transport's wait_collectives, _finish unpacks them and traces each from t0 to now. */
void ah__exec_mixed_allreduce_start(ah_executor *x, int q);
void ah__exec_mixed_allreduce_finish(ah_executor *x, int q, double t0);

/* Recording (executor_trace.c): one operation of this rank, a no-op unless
 * tracing; returns the record for the caller to complete, or NULL. group: the
 * communicator's lowest rank; peer: the other end of a send or receive. */
ah_trace_event *ah__exec_record(ah_executor *x, ah_op_kind kind, double t0, double t1, int mb, int site,
                               double bytes, int ranks, int group, int peer);

/* time a statement and record it */
#define AH_EXEC_TRACED(x, kind, mb, site, bytes, ranks, group, peer, stmt)                                   \
    do {                                                                                                     \
        double tq0_ = (x)->trace.on ? ah_now_s() : 0;                                                        \
        stmt;                                                                                                \
        if ((x)->trace.on)                                                                                   \
            ah__exec_record((x), (kind), tq0_, ah_now_s(), (mb), (site), (bytes), (ranks), (group), (peer));  \
    } while (0)

#endif
