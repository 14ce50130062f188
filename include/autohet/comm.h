/* Communication micro-benchmarks (OSU / nccl-tests style) over MPI and the
 * alpha-beta model fitted to them. docs/commbench.md. */
#ifndef AUTOHET_COMM_H
#define AUTOHET_COMM_H
#include <stddef.h>

#include "autohet/plan.h"

typedef enum {
    AH_OP_LATENCY = 0, /* ping-pong between ranks 0 and 1 (osu_latency) */
    AH_OP_BW,          /* windowed streaming 0 -> 1 (osu_bw) */
    AH_OP_ALLREDUCE,
    AH_OP_ALLGATHER,
    AH_OP_REDUCE_SCATTER,
    AH_OP_BCAST,
    AH_OP_ALLTOALL,
    AH_OP_COUNT
} ah_comm_op;

const char *ah_comm_op_name(ah_comm_op op);
int ah_comm_op_parse(const char *s, ah_comm_op *out);
/* busbw / algbw for n ranks (nccl-tests convention); 1 for point-to-point. */
double ah_busbw_factor(ah_comm_op op, int n);

typedef struct {
    ah_comm_op op;
    size_t bytes; /* message size (nccl-tests convention for collectives) */
    int iters;
    int batch;                     /* operations timed together per repetition (1: each alone) */
    double min_us, avg_us, max_us; /* per-rank mean of its iterations: min/avg/max over ranks */
    double algbw_gbs, busbw_gbs;   /* from avg_us */
    double median_us, ci_low_us, ci_high_us; /* over the valid repetitions (each: slowest rank) */
    double p25_us;                 /* their lower quartile (--statistic p25) */
    int invalid;                   /* repetitions dropped (window sync: a rank started late) */
    long wrong;                    /* mismatched elements of the correctness check, summed over ranks */
    double fit_us;                 /* the model's prediction for this size */
} ah_comm_result;

typedef struct {
    ah_comm_op op;
    double alpha_us;      /* latency term */
    double beta_gbs;      /* bandwidth term: time = alpha + bytes / beta */
    double max_rel_error; /* over the sizes fitted */
    double max_abs_error_us; /* the same sizes' largest |model - measured|: a 13% miss at 0.3 us is 0.04 us */
    int n_sizes;
} ah_comm_fit;

/* Fit t = alpha + n / beta to (bytes, time) points minimising the largest
 * relative error (a minimax line: sizes span decades, and the regimes are
 * judged by their worst size). alpha >= 0, beta > 0. */
ah_comm_fit ah_comm_fit_alpha_beta(ah_comm_op op, const size_t *bytes, const double *us, int n);
/* The same with the intercept free (any sign) when intercept_free: a regime
 * above the smallest sizes whose time grows faster than its bytes (messages
 * outgrowing a cache, the copy slowing) is a line of negative intercept; its
 * slope is the marginal bandwidth. The latency is the first regime's. */
ah_comm_fit ah_comm_fit_line(ah_comm_op op, const size_t *bytes, const double *us, int n, int intercept_free);

/* The piecewise alpha-beta model: MPI changes protocol with the message size
 * (eager to rendezvous, shared-memory copy strategies, cache sizes), so each
 * regime [min_bytes, max_bytes] of consecutive measured sizes gets its own
 * line. The break points come from the data: for every regime count K up to
 * AH_COMM_MAX_REGIMES, the partition of the sorted sizes into K runs of at
 * least min_points that minimises the largest relative error (dynamic
 * programming over the runs' fits); the fewest regimes whose error is within
 * `tolerance` win, else the count with the smallest error. The first regime's
 * line has alpha >= 0 (the latency); the others' intercepts are free
 * (ah_comm_fit_line). */
#define AH_COMM_MAX_REGIMES 8
typedef struct {
    size_t min_bytes, max_bytes; /* the measured sizes it covers */
    ah_comm_fit fit;
} ah_comm_regime;

typedef struct {
    int n_regimes;
    ah_comm_regime regime[AH_COMM_MAX_REGIMES];
    double max_rel_error; /* over all sizes */
    double max_abs_error_us;
} ah_comm_piecewise;

/* bytes ascending; n >= 1 (fewer than 2 * min_points sizes: one regime) */
ah_comm_piecewise ah_comm_fit_piecewise(ah_comm_op op, const size_t *bytes, const double *us, int n,
                                        double tolerance, int min_points);
/* The regime a size falls in: the first whose max_bytes >= bytes (the last beyond them all). */
const ah_comm_regime *ah_comm_piecewise_regime(const ah_comm_piecewise *p, size_t bytes);
/* Predicted microseconds at `bytes` */
double ah_comm_piecewise_us(const ah_comm_piecewise *p, size_t bytes);

/* Outlier-robust statistics of repeated measurements (ReproMPI): the median
 * and the distribution-free 95% confidence interval of the median from order
 * statistics (Le Boudec, Performance Evaluation, Thm. 2.1: ranks
 * floor(n/2 - 0.98 sqrt n) and ceil(n/2 + 1 + 0.98 sqrt n); [min, max] below
 * 6 samples). x is sorted in place. */
typedef struct {
    double median, ci_low, ci_high;
    double p25; /* the lower quartile (nearest rank): the time of the undisturbed repetitions, below */
} ah_comm_stats;
ah_comm_stats ah_comm_median_ci(double *x, int n);

/* Apply a comm profile (`autohet commbench --json`) to a cluster and plan
 * options, replacing datasheet figures with measured ones: the `latency` fit's
 * small-message regime sets the per-message latency and the `bw` fit's
 * large-message regime the point-to-point bandwidth, per link class — intra-node:
 * every node's intra-node link; inter-node: every node's NIC share per GPU.
 * links{} (when present): o->links, the per-pair latency and bandwidth
 * between hosts (ah_link_matrix).
 * Writes a one-line summary into summary. Returns 0, or -1 with an error
 * naming the file and field. */
int ah_comm_profile_apply(const char *path, ah_cluster *c, ah_plan_options *o, char *summary,
                          size_t summary_len, char *err, size_t errlen);
/* A profile's links{} (the matrix between hosts, commbench --pairs hosts) also
 * becomes o->links, allocated: the caller frees it with ah_link_matrix_free
 * ((ah_link_matrix *)o->links) when done with o. */
void ah_link_matrix_free(ah_link_matrix *m);

#endif
