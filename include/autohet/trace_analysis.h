/* Reading a Chrome trace of autohet/trace.h back and explaining it
 * (`autohet analyze`, docs/analyze.md): per rank the split of its window into
 * compute / exposed communication / pipeline bubble / other, per call site
 * the calls, bytes, bus bandwidth, skew / transfer split and alpha-beta
 * prediction, seconds per step per op kind and per gradient bucket, and the
 * comparison of a measured trace with a simulated one. The same code reads
 * the engine's and the simulator's traces, so the comparison is of like with
 * like. */
#ifndef AUTOHET_TRACE_ANALYSIS_H
#define AUTOHET_TRACE_ANALYSIS_H
#include <stddef.h>

#include "autohet/trace.h"

/* One "X" event as read. ev.kind is AH_TRACE_KINDS when the trace does not
 * name a known kind (a hand-written or foreign trace). */
typedef struct {
    ah_trace_event ev; /* t0/t1 in seconds from the file's origin */
    double ts, dur;    /* microseconds, exactly as in the file (the analysis works on these) */
    int comm;          /* cat "communication" */
    int tid;
    char site[64], name[64];
} ah_trace_item;

typedef struct {
    ah_trace_item *items;
    int n, n_ranks;   /* ranks = largest pid + 1 */
    char source[16]; /* otherData.source: "engine", "simulator", or "" */
} ah_trace_file;

/* Reads path (or fails with one line naming it: unreadable, not JSON, no
 * traceEvents array, an "X" event without numeric pid, ts, dur >= 0 and a
 * cat, no "X" events, or the simulator's --json summary instead of a trace). */
int ah_trace_read(const char *path, ah_trace_file *t, char *err, size_t errlen);
void ah_trace_file_free(ah_trace_file *t);

typedef struct {
    int skip_steps;           /* leave out the first K steps of every rank */
    const char *comm_profile; /* autohet commbench --json, for alpha-beta predictions, or NULL */
    int top;                  /* slowest operations to keep */
} ah_trace_options;

typedef struct {
    double compute, exposed, bubble, other, span; /* microseconds; the four sum to span */
} ah_trace_split;

typedef struct {
    char site[64];
    int calls, instances; /* instances: matched across ranks by (site, group, seq), with > 1 member */
    int groups;           /* distinct communicators */
    double bytes_per_call, avg_us;
    double busbw_GBps;   /* 0: none (not an all-reduce, or no transfer time) */
    double skew_us;      /* per instance; with transfer_us only when instances > 0 */
    double transfer_us;
    double predicted_us; /* alpha-beta from the comm profile, -1 none */
} ah_trace_site;

typedef struct {
    int first, last; /* layers [first, last) */
    double *rank_s;  /* per rank: seconds per step in this bucket's all-reduces, -1 not a holder */
    double mean_s;   /* over the holders */
} ah_trace_bucket;

typedef struct {
    int ranks, steps, skipped;
    double span_us;     /* first start to last end over all ranks (after the skip) */
    double iteration_s; /* mean window of a rank / steps; 0 without steps */
    ah_trace_split *split; /* per rank */
    double *kind_s;        /* [rank * AH_TRACE_KINDS + kind]: seconds per step (total when no steps) */
    ah_trace_site *sites;
    int n_sites;
    ah_trace_bucket *buckets; /* in layer order */
    int n_buckets;
    ah_trace_item *items; /* the analysed window (clipped at the skip) */
    int n_items;
    int *slowest; /* indices into items, longest first */
    int n_slowest;
} ah_trace_analysis;

/* Returns 0, or -1 with a one-line message (--skip-steps beyond the trace, a
 * comm profile that cannot be read). */
int ah_trace_analyze(const ah_trace_file *t, const ah_trace_options *o, ah_trace_analysis *a, char *err,
                     size_t errlen);
void ah_trace_analysis_free(ah_trace_analysis *a);

/* measured vs simulated, both per step; error = simulated / measured - 1 (NAN when measured is 0) */
typedef struct {
    double measured_s, simulated_s, error;
} ah_trace_pair;

/* not busy = bubble + other: a simulated receive is the transfer alone (its
 * wait is "other"), a measured one is wait + transfer (all "bubble") */
enum {
    AH_TRACE_PART_COMPUTE,
    AH_TRACE_PART_EXPOSED,
    AH_TRACE_PART_BUBBLE,
    AH_TRACE_PART_OTHER,
    AH_TRACE_PART_NOT_BUSY,
    AH_TRACE_PARTS
};
const char *ah_trace_part_name(int part); /* "compute", "exposed_comm", "bubble", "other", "not_busy" */

typedef struct {
    int ranks;
    ah_trace_pair iteration;
    ah_trace_pair *parts; /* [rank * AH_TRACE_PARTS + part] */
    ah_trace_pair *kinds; /* [rank * AH_TRACE_KINDS + kind] */
    int *kind_seen;       /* [rank * AH_TRACE_KINDS + kind]: either trace has the kind on that rank */
    int n_buckets;        /* buckets of either trace, matched by layers */
    int (*bucket_layers)[2];
    ah_trace_pair *buckets;      /* mean over holders */
    ah_trace_pair *bucket_ranks; /* [bucket * ranks + rank]; NAN where the rank holds none of it */
} ah_trace_comparison;

/* Both analyses need a step and the same number of ranks (else -1 with a
 * message naming sim_label). */
int ah_trace_compare(const ah_trace_analysis *meas, const ah_trace_analysis *sim, const char *sim_label,
                     ah_trace_comparison *c, char *err, size_t errlen);
void ah_trace_comparison_free(ah_trace_comparison *c);

/* --json: the analysis, and the comparison as "prediction" when c is set */
int ah_trace_write_analysis_json(const char *path, const char *trace_path, const ah_trace_analysis *a,
                                 const char *sim_path, const ah_trace_comparison *c, char *err, size_t errlen);
/* --svg: one stacked bar per rank with the value of every part */
int ah_trace_write_analysis_svg(const char *path, const char *trace_path, const ah_trace_analysis *a, char *err,
                                size_t errlen);

#endif
