/* Tracing the engine (docs/analyze.md): every rank records its operations
 * (autohet/trace.h) on its CLOCK_MONOTONIC, rank 0 measures every rank's
 * clock when tracing begins and when the trace is written (trace/clock_sync.h),
 * gathers the records, maps them onto its own timeline and writes one Chrome
 * trace with the correction in otherData.clock. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/executor_internal.h"
#include "util/atomic_file.h"

/* Records one operation of this rank (no-op unless tracing): a store after
 * the caller's two clock reads. group: the communicator's lowest rank. */
ah_trace_event *ah__exec_record(ah_executor *x, ah_op_kind kind, double t0, double t1, int mb, int site,
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

void ah_executor_trace_checkpoint(ah_executor *x, int tier, double t0) {
    if (!x->trace.on) /* a run without --trace pays nothing for its checkpoints' records */
        return;
    double t1 = ah_now_s(), bytes = 0;
    if (tier != AH_CKPT_TRACE_WAIT) /* every held layer's parameters and both AdamW moments */
        for (int k = 0; k < x->n_chunks; k++)
            for (int l = x->chunks[k].first; l < x->chunks[k].last; l++)
                bytes += (double)ah__engine_layer_floats(&x->chunks[k], l) * sizeof(float) * 3;
    ah_trace_event *e =
        ah__exec_record(x, AH_OP_CHECKPOINT, t0, t1, -1, ah_op_kind_site(AH_OP_CHECKPOINT), bytes, 1, x->rank, -1);
    int n = ah__exec_n_held(x);
    e->bucket = tier;
    if (n > 0) {
        e->layer_first = ah__exec_held_layer(x, 0);
        e->layer_last = ah__exec_held_layer(x, n - 1) + 1;
    }
}

/* ping-pong rounds per rank and measurement: the best of them is kept */
#define CLOCK_ROUNDS 200

void ah_executor_trace_enable(ah_executor *x) {
    if (x->trace.on)
        return;
    ah_trace_recorder_init(&x->trace, x->rank);
    free(x->clock_start);
    x->clock_start = x->rank == 0 ? calloc((size_t)x->world, sizeof(ah_clock_estimate)) : NULL;
    if (x->rank == 0 && !x->clock_start)
        abort();
    ah_clock_sync_measure(x->comm, CLOCK_ROUNDS, ah_now_s, x->clock_start);
    x->trace.on = 1;
}

typedef struct {
    const ah_clock_map *maps;
    int n;
    double origin_s;
} clock_doc;

/* otherData.clock: how every rank's clock was mapped onto rank 0's, and how
 * well (docs/analyze.md, "Clocks"); times relative to the trace's origin */
static void write_clock_data(FILE *f, void *ctx) {
    const clock_doc *c = ctx;
    fprintf(
        f,
        ",\"clock\":{\"domain\":\"CLOCK_MONOTONIC\",\"reference_rank\":0,\"method\":\"ping-pong with rank 0, "
        "best (minimum round trip) of %d rounds at the start and at the end of the traced steps, offset "
        "interpolated linearly\",\"rounds\":%d,\"origin_s\":%.9f,\"ranks\":[",
        c->n ? c->maps[0].rounds : 0, c->n ? c->maps[0].rounds : 0, c->origin_s);
    for (int r = 0; r < c->n; r++) {
        const ah_clock_map *m = &c->maps[r];
        fprintf(f,
                "%s{\"rank\":%d,\"offset_s\":%.17g,\"offset_end_s\":%.17g,\"drift_ppm\":%.17g,"
                "\"residual_s\":%.17g,\"rtt_s\":%.17g,\"sync_start_s\":%.9f,\"sync_end_s\":%.9f}",
                r ? "," : "", r, m->offset_start_s, m->offset_end_s, m->drift * 1e6, m->residual_s, m->rtt_s,
                m->t_start - c->origin_s, m->t_end - c->origin_s);
    }
    fputs("]}", f);
}

/* Rank 0's file: every rank named after its slot and node, the earliest
 * event at time 0. */
static int write_gathered_trace(const ah_executor *x, const char *path, const ah_trace_event *all, int total,
                                const ah_clock_map *maps, char *err, size_t errlen) {
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
    clock_doc cd = {maps, x->world, total ? origin : 0};
    ah_trace_doc d = {.source = "engine",
                      .origin_s = total ? origin : 0,
                      .ranks = rk,
                      .n_ranks = x->world,
                      .other_data = maps ? write_clock_data : NULL,
                      .ctx = &cd};
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

/* Rank 0: every event onto its own timeline, by the map of the event's rank
 * from the two clock measurements. */
static ah_clock_map *map_clocks(const ah_executor *x, const ah_clock_estimate *end, ah_trace_event *all,
                                int total) {
    ah_clock_map *maps = calloc((size_t)x->world, sizeof(ah_clock_map));
    if (!maps)
        abort();
    for (int r = 0; r < x->world; r++)
        ah_clock_fit(&x->clock_start[r], &end[r], &maps[r]);
    for (int i = 0; i < total; i++) {
        int r = all[i].rank >= 0 && all[i].rank < x->world ? all[i].rank : 0;
        all[i].t0 = ah_clock_to_ref(&maps[r], all[i].t0);
        all[i].t1 = ah_clock_to_ref(&maps[r], all[i].t1);
    }
    return maps;
}

/* Gather every rank's events to rank 0 and write them as one Chrome trace
 * (autohet/trace.h: one process per rank, a thread per stream). */
int ah_executor_write_trace(ah_executor *x, const char *path, char *err, size_t errlen) {
    /* the second clock measurement (tracing is on on every rank or on none) */
    int synced = x->trace.on;
    ah_clock_estimate *end =
        synced && x->rank == 0 ? calloc((size_t)x->world, sizeof(ah_clock_estimate)) : NULL;
    if (synced && x->rank == 0 && (!end || !x->clock_start))
        abort();
    if (synced)
        ah_clock_sync_measure(x->comm, CLOCK_ROUNDS, ah_now_s, end);
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
    int rc = 0;
    if (x->rank == 0) {
        ah_clock_map *maps = synced ? map_clocks(x, end, all, total) : NULL;
        rc = write_gathered_trace(x, path, all, total, maps, err, errlen);
        free(maps);
    }
    free(end);
    free(counts);
    free(displ);
    free(all);
    MPI_Bcast(&rc, 1, MPI_INT, 0, x->comm);
    return rc;
}
