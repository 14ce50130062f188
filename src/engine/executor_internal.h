/* The executor's state, shared by its parts: executor.c (set-up, groups,
 * parameter gathering), executor_step.c (the program runner), executor_trace.c
 * (recording and writing traces) and executor_ckpt.c (layer checkpoints and
 * recovery). Not a public interface. */
#ifndef AUTOHET_ENGINE_EXECUTOR_INTERNAL_H
#define AUTOHET_ENGINE_EXECUTOR_INTERNAL_H
#include <mpi.h>

#include "autohet/schedule.h"
#include "autohet/trace.h"
#include "engine/executor.h"
#include "engine/transport.h"

/* My membership in one gradient bucket of the schedule (ah_schedule_plan.buckets). */
typedef struct {
    ah_group *group; /* the holders of the bucket with my TP rank; NULL: I do not hold it */
    int size;        /* its ranks */
    int lead;        /* its lowest world rank: names the communicator in traces */
} bucket_group;

struct ah_executor {
    ah_plan plan;
    ah_model_config cfg;
    const ah_dataset *data;
    ah_optim_config oc;
    uint64_t seed;
    /* the control plane (checkpoints, recovery, trace collection): the training
     * ranks, MPI_COMM_WORLD unless recovery servers run beside them */
    MPI_Comm comm;
    ah_transport *tr; /* the data plane of a step, over the same ranks */
    int rank, world;
    int replica, stage, tp_rank, n_stages, tp;
    int m;    /* my replica's micro-batches */
    int row0; /* my replica's first row of the global batch */
    ah_schedule_plan sched;  /* chunks, buckets and the programs of every stage */
    const ah_program *prog;  /* my stage's program */
    ah_engine_model *chunks; /* the layer chunks my stage holds, in layer order (one unless interleaved) */
    int n_chunks;
    ah_group *tp_group;      /* the ranks of my stage */
    bucket_group *bgroups;   /* [sched.n_buckets] */
    int tie_partner;         /* tied embeddings: the rank holding the other copy, -1 none, -2 myself */
    /* the last memory-tier snapshot of my layers (what a background persist copies) */
    struct saved_shard *last_mem;
    int last_mem_n, last_mem_step;
    char last_mem_dir[3072];
    struct ah_persist_job *persist; /* a disk + cloud copy in flight, or NULL */
    double slowdown;
    double peak; /* sgemm FLOP/s of one rank */
    ah_trace_recorder trace; /* on after ah_executor_trace_enable */
};

/* The chunk model holding layer l, or NULL if this rank does not hold it. */
ah_engine_model *ah_exec_model_of(const ah_executor *x, int l);
/* Layers this rank holds, and the i-th of them in layer order. */
int ah_exec_n_held(const ah_executor *x);
int ah_exec_held_layer(const ah_executor *x, int i);

/* Recording (executor_trace.c): one operation of this rank, a no-op unless
 * tracing; returns the record for the caller to complete, or NULL. group: the
 * communicator's lowest rank; peer: the other end of a send or receive. */
ah_trace_event *ah_exec_record(ah_executor *x, ah_trace_kind kind, double t0, double t1, int mb, int site,
                               double bytes, int ranks, int group, int peer);

/* time a statement and record it */
#define AH_EXEC_TRACED(x, kind, mb, site, bytes, ranks, group, peer, stmt)                                   \
    do {                                                                                                     \
        double tq0_ = (x)->trace.on ? MPI_Wtime() : 0;                                                       \
        stmt;                                                                                                \
        if ((x)->trace.on)                                                                                   \
            ah_exec_record((x), (kind), tq0_, MPI_Wtime(), (mb), (site), (bytes), (ranks), (group), (peer));  \
    } while (0)

#endif
