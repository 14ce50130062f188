/* The executor's state, shared by its parts: executor.c (set-up, the 1F1B
 * step, tracing) and executor_ckpt.c (layer checkpoints and recovery). Not a
 * public interface. */
#ifndef AUTOHET_ENGINE_EXECUTOR_INTERNAL_H
#define AUTOHET_ENGINE_EXECUTOR_INTERNAL_H
#include <mpi.h>

#include "autohet/trace.h"
#include "engine/executor.h"

typedef struct {
    int first, last; /* layers [first, last) */
    MPI_Comm comm;   /* the holders of this bucket with my TP rank */
    int size;        /* its ranks */
    int lead;        /* its lowest world rank: names the communicator in traces */
    int index;       /* the bucket's number over the whole model, in layer order (traces) */
} bucket;

struct ah_executor {
    ah_plan plan;
    ah_model_config cfg;
    const ah_dataset *data;
    ah_optim_config oc;
    uint64_t seed;
    MPI_Comm comm; /* the training ranks (MPI_COMM_WORLD unless recovery servers run beside them) */
    int rank, world;
    int replica, stage, tp_rank, n_stages, tp;
    int m;          /* my replica's micro-batches */
    int row0;       /* my replica's first row of the global batch */
    int prev, next; /* world ranks of the neighbouring stages (same TP rank), -1 at the ends */
    MPI_Comm tp_comm;
    bucket *buckets;
    int n_buckets;
    int tie_partner; /* tied embeddings: the rank holding the other copy, -1 none, -2 myself */
    /* the last memory-tier snapshot of my layers (what a background persist copies) */
    struct saved_shard *last_mem;
    int last_mem_n, last_mem_step;
    char last_mem_dir[3072];
    struct ah_persist_job *persist; /* a disk + cloud copy in flight, or NULL */
    double slowdown;
    double peak; /* sgemm FLOP/s of one rank */
    ah_engine_model model;
    ah_trace_recorder trace; /* on after ah_executor_trace_enable */
};

#endif
