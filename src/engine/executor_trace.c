/* Tracing the engine (docs/analyze.md): every rank records its operations
 * (autohet/trace.h), rank 0 gathers them and writes one Chrome trace. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/executor_internal.h"
#include "util/atomic_file.h"

/* Records one operation of this rank (no-op unless tracing): a store after
 * the caller's two clock reads. group: the communicator's lowest rank. */
ah_trace_event *ah_exec_record(ah_executor *x, ah_trace_kind kind, double t0, double t1, int mb, int site,
                               double bytes, int ranks, int group, int peer) {
    ah_trace_event *e = ah_trace_record(&x->trace, kind, t0, t1, site, mb);
    if (e) {
        e->bytes = bytes;
        e->ranks = ranks;
        e->group = group;
        e->peer = peer;
    }
    return e;
}

void ah_executor_trace_enable(ah_executor *x) {
    if (x->trace.on)
        return;
    ah_trace_recorder_init(&x->trace, x->rank);
    x->trace.on = 1;
}

/* Rank 0's file: every rank named after its slot and node, the earliest
 * event at time 0. */
static int write_gathered_trace(const ah_executor *x, const char *path, const ah_trace_event *all, int total,
                                char *err, size_t errlen) {
    const ah_plan *p = &x->plan;
    ah_trace_rank *rk = calloc((size_t)x->world, sizeof(ah_trace_rank));
    char(*where)[160] = calloc((size_t)x->world, sizeof *where);
    if (!rk || !where)
        abort();
    for (int k = 0; k < p->n_replicas; k++)
        for (int j = 0; j < p->replicas[k].n_stages; j++)
            for (int q = 0; q < p->replicas[k].stages[j].tp; q++) {
                int r = ah_slot_rank(p, k, j, q), nd = p->replicas[k].stages[j].node;
                if (r >= x->world)
                    continue;
                rk[r] = (ah_trace_rank){k, j, q, NULL};
                if (nd >= 0 && nd < p->cluster.n_nodes) {
                    snprintf(where[r], sizeof where[r], "%s (%s)", p->cluster.nodes[nd].name,
                             p->cluster.nodes[nd].dev.name);
                    rk[r].where = where[r];
                }
            }
    double origin = 1e300;
    for (int i = 0; i < total; i++)
        if (all[i].t0 < origin)
            origin = all[i].t0;
    ah_trace_doc d = {.source = "engine", .origin_s = total ? origin : 0, .ranks = rk, .n_ranks = x->world};
    ah_out_file o;
    char why[1024];
    int rc = ah_out_open(&o, path, why, sizeof why);
    if (rc == 0) { /* a write error is the close's to report: it names the file */
        int ok = ah_trace_write_chrome(o.f, all, total, &d, why, sizeof why) == 0 || ferror(o.f);
        rc = ah_out_close(&o, ok, why, sizeof why);
    }
    if (rc != 0)
        snprintf(err, errlen, "--trace %s", why);
    free(rk);
    free(where);
    return rc;
}

/* Gather every rank's events to rank 0 and write them as one Chrome trace
 * (autohet/trace.h: one process per rank, a thread per stream). */
int ah_executor_write_trace(ah_executor *x, const char *path, char *err, size_t errlen) {
    int n = x->trace.n;
    int *counts = x->rank == 0 ? calloc((size_t)x->world, sizeof(int)) : NULL;
    MPI_Gather(&n, 1, MPI_INT, counts, 1, MPI_INT, 0, x->comm);
    int *displ = NULL, total = 0;
    ah_trace_event *all = NULL;
    MPI_Datatype t;
    MPI_Type_contiguous((int)sizeof(ah_trace_event), MPI_BYTE, &t);
    MPI_Type_commit(&t);
    if (x->rank == 0) {
        displ = calloc((size_t)x->world, sizeof(int));
        for (int r = 0; r < x->world; r++) {
            displ[r] = total;
            total += counts[r];
        }
        all = malloc(sizeof(ah_trace_event) * (size_t)(total + 1));
        if (!displ || !all)
            abort();
    }
    MPI_Gatherv(x->trace.ev, n, t, all, counts, displ, t, 0, x->comm);
    MPI_Type_free(&t);
    int rc = x->rank == 0 ? write_gathered_trace(x, path, all, total, err, errlen) : 0;
    free(counts);
    free(displ);
    free(all);
    MPI_Bcast(&rc, 1, MPI_INT, 0, x->comm);
    return rc;
}
