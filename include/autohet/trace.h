/* One trace model for the engine and the simulator (docs/analyze.md).
 *
 * An ah_trace_event is one timed operation of one engine rank; the engine
 * records them while it trains (ah_trace_record: two clock reads by the
 * caller and a store), the simulator converts its result into them, and
 * ah_trace_write_chrome writes either as the same Chrome trace JSON: one
 * process per rank, one thread per stream (compute, tp, p2p, dp; a stream
 * whose operations overlap gets extra lanes), the same names and args, and
 * flow events linking each send to its receive. `autohet analyze` reads the
 * file back (autohet/trace_analysis.h). Public because three folders use it:
 * src/engine and src/sim write, src/trace and src/cli read. */
#ifndef AUTOHET_TRACE_H
#define AUTOHET_TRACE_H
#include <stdio.h>

#include "autohet/ops.h"

/* the kinds of records and their streams: the one vocabulary of a step (autohet/ops.h) */

/* Doubles first: no padding, so the engine gathers records as plain bytes. */
typedef struct {
    double t0, t1;               /* seconds (the writer subtracts an origin) */
    double bytes;                /* payload of this rank */
    int rank;      /* engine world rank: replica by replica, stage by stage, tp rank by tp rank */
    int lane;      /* 0, or the extra lane of an overlapping stream (set by the writer / reader) */
    ah_op_kind kind;
    int micro_batch;             /* -1 none */
    int layer_first, layer_last; /* layers [first, last), -1 none */
    int bucket;                  /* gradient bucket index (in layer order over the whole model), -1 none;
                                  * a checkpoint record: its ah_ckpt_trace_tier */
    int ranks;                   /* ranks taking part */
    int group;                   /* lowest rank of the communicator (instances match by site, group, seq) */
    int peer;                    /* the other end of a send or receive, -1 none */
    int site, seq;               /* call site (the caller's number) and the calls made there before */
} ah_trace_event;

/* What a checkpoint record (AH_OP_CHECKPOINT) spent its time on: saving the held layers to the memory,
 * disk or cloud tier, or waiting for the background copy of an earlier memory snapshot to the durable
 * tiers (the training thread blocked on it). */
typedef enum {
    AH_CKPT_TRACE_MEMORY = 0,
    AH_CKPT_TRACE_DISK,
    AH_CKPT_TRACE_CLOUD,
    AH_CKPT_TRACE_WAIT,
    AH_CKPT_TRACE_TIERS
} ah_ckpt_trace_tier;

/* "memory", "disk", "cloud", "wait"; NULL out of range */
const char *ah_ckpt_trace_tier_name(int tier);

/* The call-site name: the kind's name, "dp_allreduce layers A-B" (B inclusive) for a bucket all-reduce
 * with layers, "checkpoint disk" (its tier) for a checkpoint. Returns buf. */
const char *ah_trace_site_name(const ah_trace_event *e, char *buf, size_t n);

/* ---------------------------------------------------------------- recording */

#define AH_TRACE_SITES 64

typedef struct {
    int on, rank;
    ah_trace_event *ev;
    int n, cap;
    int site_seq[AH_TRACE_SITES]; /* calls so far per call site (site >= 63 share one) */
} ah_trace_recorder;

void ah_trace_recorder_init(ah_trace_recorder *r, int rank);
void ah_trace_recorder_free(ah_trace_recorder *r);

/* Appends the operation [t0, t1] of `kind` at call site `site`: rank, stream,
 * seq filled in, no layers / bucket / peer, 1 rank, group = this rank, 0
 * bytes. Returns the record for the caller to complete (bytes, ranks, group,
 * peer, layers), or NULL when the recorder is off. */
ah_trace_event *ah_trace_record(ah_trace_recorder *r, ah_op_kind kind, double t0, double t1, int site,
                                int micro_batch);

/* ------------------------------------------------------------------ clocks */

/* The clock correction an engine trace records (otherData.clock; docs/analyze.md,
 * "Clocks"): every rank's CLOCK_MONOTONIC against rank 0's, measured by
 * ping-pongs at the start and the end of the traced steps; the times in the
 * file are on rank 0's clock. Rank r's clock read, at rank 0's time G,
 * G + offset_s + drift (G - sync_start), drift = drift_ppm / 1e6. */
typedef struct {
    double offset_s, offset_end_s; /* rank's clock - rank 0's, at the two measurements */
    double drift_ppm;
    double residual_s;               /* the bound of the offset error: half the best round trip */
    double rtt_s;                    /* the best round trip */
    double sync_start_s, sync_end_s; /* when measured, in the file's time (seconds from its origin) */
} ah_trace_clock_rank;

typedef struct {
    int present;     /* 0: the trace records no correction (each rank on its own clock, or a simulation) */
    char domain[32]; /* "CLOCK_MONOTONIC" */
    int rounds;      /* ping-pong rounds per rank and measurement */
    double origin_s; /* rank 0's clock at the file's time 0 */
    int n;           /* ranks described */
    ah_trace_clock_rank *ranks;
} ah_trace_clock;

/* rank's own clock reading (seconds) at the file's time t (seconds from its
 * origin); origin + t without a correction for the rank */
double ah_trace_clock_local(const ah_trace_clock *c, int rank, double t);

/* ------------------------------------------------------------------ writing */

/* How a rank is named: "rank R (replica k, stage j, tp t)" and, when where
 * is set, " on <where>" (node and device). */
typedef struct {
    int replica, stage, tp_rank;
    const char *where;
} ah_trace_rank;

typedef struct {
    const char *source; /* otherData.source: "engine" or "simulator" */
    double origin_s;    /* subtracted from every time */
    const ah_trace_rank *ranks;
    int n_ranks; /* every event's rank must be below this */
    /* optional: more events (each written after ",\n") and more otherData
     * members (each as ",\"key\":value"), in the same file */
    void (*extra_events)(FILE *f, void *ctx);
    void (*other_data)(FILE *f, void *ctx);
    void *ctx;
} ah_trace_doc;

/* The tid of (stream, lane) in every trace: stream + AH_STREAMS * lane. */
int ah_trace_tid(ah_stream s, int lane);

/* Writes the events (any order) as one Chrome trace JSON document. Times are
 * rounded to integer nanoseconds and printed as microseconds with three
 * decimals, so operations that touch touch in the file. Returns 0, or -1 with
 * a one-line message (an event's rank out of range, a non-finite time). */
int ah_trace_write_chrome(FILE *f, const ah_trace_event *ev, int n, const ah_trace_doc *d, char *err,
                          size_t errlen);

#endif
