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
    double min_us, avg_us, max_us; /* per-iteration time, min/avg/max over ranks */
    double algbw_gbs, busbw_gbs;
    double fit_us; /* the alpha-beta prediction for this size */
} ah_comm_result;

typedef struct {
    ah_comm_op op;
    double alpha_us;      /* latency term */
    double beta_gbs;      /* bandwidth term: time = alpha + bytes / beta */
    double max_rel_error; /* over the sizes fitted */
    int n_sizes;
} ah_comm_fit;

/* Fit t = alpha + n / beta to (bytes, time) points by least squares on the
 * relative error (sizes span decades). alpha >= 0, beta > 0. */
ah_comm_fit ah_comm_fit_alpha_beta(ah_comm_op op, const size_t *bytes, const double *us, int n);

/* Two alpha-beta regimes (MPI switches protocol, e.g. eager to rendezvous,
 * at some size): sizes <= split_bytes use small, larger ones use large; the
 * split minimises the largest relative error. n >= 4 points needed (else
 * small = large = the single fit). */
typedef struct {
    size_t split_bytes;
    ah_comm_fit small, large;
    double max_rel_error;
} ah_comm_fit2;

ah_comm_fit2 ah_comm_fit_two_regimes(ah_comm_op op, const size_t *bytes, const double *us, int n);

/* Apply a comm profile (`autohet commbench --json`) to a cluster and plan
 * options, replacing datasheet figures with measured ones: the `latency` fit
 * sets the per-message latency and the `bw` fit (its large-message regime when
 * there is one) the point-to-point bandwidth, per link class — intra-node:
 * every node's intra-node link; inter-node: every node's NIC share per GPU.
 * Writes a one-line summary into summary. Returns 0, or -1 with an error
 * naming the file and field. */
int ah_comm_profile_apply(const char *path, ah_cluster *c, ah_plan_options *o, char *summary,
                          size_t summary_len, char *err, size_t errlen);

#endif
