/* Shared state of the diagnosis (autohet/trace_diagnose.h): trace_diagnose.c
 * (steps, per-rank findings, ranking), diagnose_links.c (transfers and
 * slow links), diagnose_blame.c (late arrivals), diagnose_report.c (table,
 * JSON, comm profile). */
#ifndef AUTOHET_TRACE_DIAGNOSE_INTERNAL_H
#define AUTOHET_TRACE_DIAGNOSE_INTERNAL_H
#include "autohet/trace_diagnose.h"

/* one collective instance: (site, group, seq) on two ranks or more */
typedef struct {
    int first, n;      /* members: dctx.inst_items[first .. first + n) */
    double fa, la, le; /* first arrival, last arrival, last end (us) */
    int straggler;     /* the last rank to arrive */
} dinst;

typedef struct {
    const ah_trace_analysis *a;
    const ah_diag_options *o;
    ah_diagnosis *d;
    int R, S;          /* ranks, steps (at least 1) */
    int *step;         /* per item: the rank's optimizer steps completed before it */
    int *order;        /* items by rank, then start */
    int *rank_first;   /* [R + 1]: each rank's items in order[] */
    double *comp;      /* [r * S + s]: compute seconds */
    double *gap_in;    /* [r * S + s]: untraced seconds before forwards within the step */
    double *bound;     /* [r * S + s]: untraced seconds between the previous optimizer and the step's first op */
    double *saved;     /* [r * S + s]: traced checkpoint seconds there (AH_OP_CHECKPOINT records) */
    unsigned tiers;    /* bit t: a traced checkpoint of ah_ckpt_trace_tier t */
    int *send_of;      /* per item (a receive): its matched send, -1 */
    int *inst_of;      /* per item: its collective instance, -1 */
    dinst *inst;
    int n_inst;
    int *inst_items;
    int *replica;      /* per rank: its pipeline (the component of point-to-point peers) */
    int *peer_group;   /* per rank: the lowest rank doing the same work (layers, forward and backward calls) */
    double wall_s;
    double *obs_busy_us; /* per link observation: its expected time / its hosts' shared gain (ah_diag_links) */
} dctx;

/* a new finding (zeroed, link -1 -1, explained_by -1) */
ah_finding *ah_diag_add(dctx *c, ah_diag_kind kind);
/* the steps s of rank r (or of every rank when r < 0) with flag[s] set, into f->steps */
void ah_diag_set_steps(ah_finding *f, const unsigned char *flag, int S);
double ah_diag_median(double *v, int n); /* sorts v */
int ah_diag_is_recv(const ah_trace_item *v);
int ah_diag_is_collective(const ah_trace_item *v);

/* diagnose_links.c */
void ah_diag_match_transfers(dctx *c);   /* send_of, inst_of, inst */
int ah_diag_links(dctx *c, char *err, size_t errlen); /* observations, expectations, slow_link findings */
/* a rank whose every link is slow and who is a late arrival: its communication (after the late arrivals);
 * a slow link on a saturated pair of hosts does not count */
void ah_diag_common_ends(dctx *c);
/* one saturated_link finding per pair of hosts whose slow links' transfers, at their expected speed, keep the
 * link between the two hosts busy most of the traced time (after ah_diag_links) */
void ah_diag_saturated_links(dctx *c);
/* the two findings' links join the same two hosts (different ones) */
int ah_diag_same_hosts(const dctx *c, const ah_finding *x, const ah_finding *y);
/* diagnose_blame.c */
void ah_diag_late_arrivals(dctx *c);

#endif
