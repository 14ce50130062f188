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

#include "autohet/link_model.h"
#include "autohet/trace.h"

/* One "X" event as read. ev.kind is AH_OP_KINDS when the trace does not
 * name a known kind (a hand-written or foreign trace). */
typedef struct {
    ah_trace_event ev; /* t0/t1 in seconds from the file's origin */
    double ts, dur;    /* microseconds, exactly as in the file (the analysis works on these) */
    int comm;          /* cat "communication" */
    int tid;
    char site[64], name[64];
} ah_trace_item;

/* A flow arrow (a send linked to its receive): "s" and "f" events with one id. */
typedef struct {
    int from, to;      /* pids of the start and the end */
    double s_ts, f_ts; /* microseconds, as in the file */
} ah_trace_flow;

typedef struct {
    ah_trace_item *items;
    int n, n_ranks;       /* ranks = largest pid + 1 */
    char source[16];      /* otherData.source: "engine", "simulator", or "" */
    ah_trace_flow *flows; /* complete pairs only */
    int n_flows;
    ah_trace_clock clock; /* otherData.clock, if the trace records one */
    char (*node)[64];     /* per rank: the node its process name gives ("rank R (...) on NODE (DEVICE)"), "" none */
} ah_trace_file;

/* Reads path (or fails with one line naming it: unreadable, not JSON, no
 * traceEvents array, an "X" event without numeric pid, ts, dur >= 0 and a
 * cat, no "X" events, an otherData.clock that is not as docs/analyze.md
 * describes it, or the simulator's --json summary instead of a trace). */
int ah_trace_read(const char *path, ah_trace_file *t, char *err, size_t errlen);
void ah_trace_file_free(ah_trace_file *t);

/* Causal order of the whole trace (docs/analyze.md, "Clocks"): what no
 * timeline on one clock can show. */
typedef struct {
    int receives;             /* receives matched with their send, and both halves of a tied exchange */
    int receives_before_send; /* of which the receive ended before its send started */
    int collectives;          /* collective instances (site, group, seq on > 1 rank) */
    int collective_order;     /* of which a member left before the last member entered */
    int flows;                /* flow arrows */
    int flows_backward;       /* of which the end is earlier than the start */
    double worst_us;          /* the largest of these violations (how far before), 0 none */
} ah_trace_causality_counts;

typedef struct {
    ah_trace_causality_counts as_written;  /* the file's times */
    int has_uncorrected;                   /* the trace records a clock correction: */
    ah_trace_causality_counts uncorrected; /* the same on each rank's own clock (the correction undone) */
} ah_trace_causality;

void ah_trace_causality_check(const ah_trace_file *t, ah_trace_causality *c);

typedef struct {
    int skip_steps;           /* leave out the first K steps of every rank */
    const char *comm_profile; /* autohet commbench --json, for alpha-beta predictions, or NULL */
    int top;                  /* slowest operations to keep */
} ah_trace_options;

typedef struct {
    double compute, exposed, bubble, other, span; /* microseconds; these four and checkpoint sum to span */
    double checkpoint; /* saving checkpoints on the training thread (traced checkpoint records) */
} ah_trace_split;

typedef struct {
    char site[64];
    int calls, instances; /* instances: matched across ranks by (site, group, seq), with > 1 member */
    int groups;           /* distinct communicators */
    int ranks;            /* of its communicator (its last call's) */
    double bytes_per_call, avg_us;
    double busbw_GBps;   /* 0: none (not an all-reduce, or no transfer time) */
    double skew_us;      /* per instance; with transfer_us only when instances > 0 */
    double transfer_us;
    double predicted_us; /* alpha-beta from the comm profile, at the site's ranks (ring scaling), -1 none */
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
    double *kind_s;        /* [rank * AH_OP_KINDS + kind]: seconds per step (total when no steps) */
    ah_trace_site *sites;
    int n_sites;
    ah_trace_bucket *buckets; /* in layer order */
    int n_buckets;
    ah_trace_item *items; /* the analysed window (clipped at the skip) */
    int n_items;
    int *slowest; /* indices into items, longest first */
    int n_slowest;
    ah_trace_clock clock;         /* the file's clock correction (a copy), present 0 without */
    ah_trace_causality causality; /* of the whole file (before the skip) */
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

/* a call site whose bytes per call differ between the two traces (by more than 1 %): the simulation moves
 * other volumes than the run (another plan, or another precision: the CPU engine sends fp32 tensors) */
typedef struct {
    char site[64];
    double measured_bytes, simulated_bytes; /* per call */
} ah_trace_volume_mismatch;

typedef struct {
    int ranks;
    ah_trace_pair iteration;
    ah_trace_pair *parts; /* [rank * AH_TRACE_PARTS + part] */
    ah_trace_pair *kinds; /* [rank * AH_OP_KINDS + kind] */
    int *kind_seen;       /* [rank * AH_OP_KINDS + kind]: either trace has the kind on that rank */
    int n_buckets;        /* buckets of either trace, matched by layers */
    int (*bucket_layers)[2];
    ah_trace_pair *buckets;      /* mean over holders */
    ah_trace_pair *bucket_ranks; /* [bucket * ranks + rank]; NAN where the rank holds none of it */
    ah_trace_volume_mismatch *volumes; /* sites in both traces whose bytes per call differ */
    int n_volumes;
} ah_trace_comparison;

/* Both analyses need a step and the same number of ranks (else -1 with a
 * message naming sim_label). */
int ah_trace_compare(const ah_trace_analysis *meas, const ah_trace_analysis *sim, const char *sim_label,
                     ah_trace_comparison *c, char *err, size_t errlen);
void ah_trace_comparison_free(ah_trace_comparison *c);

/* ------------------------------------------- the stack-level breakdown (--stack) */

/* Open MPI 4.1's coll_tuned all-reduce algorithms, numbered as the MCA
 * parameter coll_tuned_allreduce_algorithm numbers them (0 "ignore" = the
 * fixed decision rules choose), plus the engine's tied-embedding exchange,
 * which is one MPI_Sendrecv and no all-reduce. */
typedef enum {
    AH_MPI_AR_DECIDE = 0,
    AH_MPI_AR_BASIC_LINEAR,
    AH_MPI_AR_NONOVERLAPPING,
    AH_MPI_AR_RECURSIVE_DOUBLING,
    AH_MPI_AR_RING,
    AH_MPI_AR_SEGMENTED_RING,
    AH_MPI_AR_RABENSEIFNER,
    AH_MPI_SENDRECV,
    AH_MPI_ALGS
} ah_mpi_alg;

/* "ignore", "basic_linear", ..., "rabenseifner", "sendrecv" (Open MPI's names) */
const char *ah_mpi_alg_name(ah_mpi_alg a);
/* a coll_tuned_allreduce_algorithm value: a name or its number 0..6; -1 otherwise */
int ah_mpi_allreduce_alg_parse(const char *s);
/* The algorithm the fixed decision rules of Open MPI 4.1 coll_tuned
 * (ompi_coll_tuned_allreduce_intra_dec_fixed, commutative operations: the
 * engine sums) choose for `bytes` (count x type size) on `comm_size` ranks. */
ah_mpi_alg ah_mpi_allreduce_decide(int comm_size, double bytes);


/* The alpha-beta cost of one all-reduce of `bytes` (elements of type_size
 * bytes) on comm_size ranks by algorithm alg (not AH_MPI_AR_DECIDE): the
 * sum of its steps' message times t(m), following Open MPI's
 * implementation, including its fallbacks (ring with fewer elements than
 * ranks runs recursive doubling, segmented ring without a segment size the
 * ring, Rabenseifner with fewer elements than the power of two basic linear):
 * *ran gets the algorithm that runs. segment_bytes: the segmented ring's
 * segment size (coll_tuned_allreduce_algorithm_segmentsize; 0 none).
 * AH_MPI_SENDRECV costs one message. No reduction (gamma) term. */
double ah_mpi_alg_us(ah_mpi_alg alg, int comm_size, double bytes, int type_size, double segment_bytes,
                     const ah_link_model *m, ah_mpi_alg *ran);

typedef struct {
    const char *comm_profile; /* NULL: ah_link_model_default */
    int mpi_algorithm;        /* coll_tuned_allreduce_algorithm: 0 the fixed rules choose per size */
    const char *mpi_algorithm_from; /* who set it ("--mpi-algorithm", an environment variable), or NULL */
    double segment_bytes;     /* coll_tuned_allreduce_algorithm_segmentsize */
} ah_stack_options;

/* one rank's part in one instance */
typedef struct {
    int rank;
    double start_us, end_us;
    double wait_us; /* last arrival - own start: waiting for the last rank to arrive */
} ah_stack_member;

/* One instance of a collective call site: its events on its members (the
 * same site, group and seq). measured = last completion - first arrival
 * = skew (last arrival - first arrival: the application level)
 * + mpi (the algorithm's alpha-beta cost: the MPI level)
 * + residual (the rest: transport, contention, the reduction arithmetic;
 *   negative when the links were faster than the model). */
typedef struct {
    int site, seq, step; /* step: optimizer steps the straggler completed before it (after the skip) */
    int first_member, n_members; /* into ah_trace_stack.members, by rank */
    double bytes;
    ah_mpi_alg algorithm; /* chosen (decision rules or forced) */
    ah_mpi_alg ran;       /* after Open MPI's internal fallbacks */
    double first_arrival_us, last_arrival_us, last_end_us;
    double measured_us, skew_us, mpi_us, residual_us;
    int straggler; /* the last rank to arrive (the lowest of a tie) */
} ah_stack_instance;

/* a call site = (site, communicator): the kind, bucket or TP group, chunk */
typedef struct {
    char site[64];
    ah_op_kind kind;
    int group, ranks;
    double bytes_per_call; /* mean over the instances */
    int instances;
    double measured_us, skew_us, mpi_us, residual_us; /* sums over the instances */
    int straggler, straggler_count;                   /* the most frequent straggler and how often */
    unsigned long long alg_pairs; /* bit 8 chosen + ran: some instance (a site's layers differ in size) */
} ah_stack_site;

typedef struct {
    double comm_us;      /* union of the rank's communication intervals */
    double hidden_us;    /* of which under compute */
    double overlap_pct;  /* 100 hidden / comm; 0 without communication */
    double idle_recv_us; /* receives not under compute: waiting on a receive */
    double idle_collective_us; /* arrival waits in all-reduces and the tied exchange, not under compute */
    double idle_step_us; /* arrival wait in step_sync (gates the optimizer) + send_wait, not under compute */
    int straggles;       /* instances where this rank arrived last */
} ah_stack_rank;

typedef struct {
    ah_link_model link;
    int mpi_algorithm;
    char mpi_source[96]; /* "coll_tuned fixed decision rules" or "NAME (from ...)" */
    double segment_bytes;
    ah_stack_site *sites;
    int n_sites;
    ah_stack_instance *inst; /* site by site, by seq */
    int n_inst;
    ah_stack_member *members;
    int n_members;
    ah_stack_rank *ranks;
    int n_ranks;
} ah_trace_stack;

/* Builds the breakdown of the analysed window a->items. Returns 0, or -1
 * with a one-line message (a comm profile without a latency fit). */
int ah_trace_stack_build(const ah_trace_analysis *a, const ah_stack_options *o, ah_trace_stack *s, char *err,
                         size_t errlen);
void ah_trace_stack_free(ah_trace_stack *s);
/* the algorithms a site's instances chose and ran, "+"-separated, each
 * "chosen" or "chosen:ran" ("segmented_ring:ring"); "-" none. Returns buf. */
const char *ah_stack_site_algorithms(const ah_stack_site *st, char *buf, size_t n);
struct cJSON;
/* the "stack" object of analyze --json (times in us) */
struct cJSON *ah_trace_stack_json(const ah_trace_stack *s);

/* --json: the analysis, the comparison as "prediction" when c is set, the
 * stack breakdown as "stack" when stack is set, and the items of `extra` (a
 * cJSON object, e.g. "diagnosis"; taken over, NULL none) */
int ah_trace_write_analysis_json(const char *path, const char *trace_path, const ah_trace_analysis *a,
                                 const char *sim_path, const ah_trace_comparison *c, const ah_trace_stack *stack,
                                 struct cJSON *extra, char *err, size_t errlen);
/* --svg: one stacked bar per rank with the value of every part */
int ah_trace_write_analysis_svg(const char *path, const char *trace_path, const ah_trace_analysis *a, char *err,
                                size_t errlen);

#endif
