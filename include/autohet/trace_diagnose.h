/* `autohet analyze TRACE --diagnose` (docs/analyze.md, "Diagnosis"): the
 * causes of lost time in a traced run, ranked, each naming the rank(s) or
 * link, the operation and the steps, the time it cost over the trace and the
 * evidence (measured against expected); and `--comm-profile-out`: the links
 * as the run saw them, in the comm-profile format the planner reads.
 *
 * Causes (the culprit):  slow_rank (compute longer than its peers' for the
 * same work), slow_link (a pair's transfers slower than expected for their
 * size), late_arrival (the rank everyone waited for at collectives, traced
 * back through the waits it was itself in), input_stall (untraced time
 * before forwards: data loading), checkpoint_stall (untraced time at step
 * boundaries on every rank at once), saturated_link (the link between two
 * hosts busy most of the time at its expected speed: its transfers queue
 * behind each other, so its pairs look slow). Effects (where the time was lost):
 * bubble (pipeline waits beyond the schedule's own) and exposed_dp
 * (data-parallel all-reduce transfers not overlapped with compute). */
#ifndef AUTOHET_TRACE_DIAGNOSE_H
#define AUTOHET_TRACE_DIAGNOSE_H
#include <stdio.h>

#include "autohet/trace_analysis.h"

typedef enum {
    AH_DIAG_SLOW_RANK = 0,
    AH_DIAG_SLOW_LINK,
    AH_DIAG_LATE_ARRIVAL,
    AH_DIAG_INPUT_STALL,
    AH_DIAG_CHECKPOINT_STALL,
    AH_DIAG_BUBBLE,
    AH_DIAG_EXPOSED_DP,
    AH_DIAG_SATURATED_LINK,
    AH_DIAG_KINDS
} ah_diag_kind;

/* "slow_rank", "slow_link", ... */
const char *ah_diag_kind_name(ah_diag_kind k);

#define AH_DIAG_MAX_RANKS 16
#define AH_DIAG_MAX_STEPS 256

typedef struct {
    ah_diag_kind kind;
    int ranks[AH_DIAG_MAX_RANKS], n_ranks; /* the ranks involved (a link: its two ends) */
    int link[2];                           /* a link's ends (ranks), -1 -1 none */
    char op[64];                           /* the operation (a call site or kind) */
    int steps[AH_DIAG_MAX_STEPS], n_steps; /* the steps where it happened (0 = first analysed) */
    double cost_s;                         /* time lost over the whole analysed trace */
    double share;                          /* cost_s / the traced wall time */
    double measured_s, expected_s;         /* the evidence in numbers (per kind, docs/analyze.md) */
    char evidence[640];
    int cause;        /* 1: names a culprit; 0: an effect (where time was lost) */
    int significant;  /* share >= the threshold and the kind's own test passed */
    int explained_by; /* an effect explained by a cause finding (its index in the sorted list), -1 */
} ah_finding;

/* one measured transfer on a link (a pair of ranks), as one message */
typedef struct {
    int a, b;           /* a < b */
    int collective;     /* 0 a point-to-point message (or the tied exchange), 1 from a 2-rank all-reduce */
    ah_op_kind kind; /* the operation it came from */
    int step;
    double bytes, us;   /* the message's bytes and time after both ends were there */
    double expected_us; /* -1 no expectation */
    int item;           /* a point-to-point message: its receive (index in the analysis' items), else -1 */
    int inst;           /* from a 2-rank all-reduce or the tied exchange: its collective instance, else -1 */
    double per_inst;    /* the instance's time per observed time (2: a ring's two half-vector messages) */
} ah_link_obs;

typedef struct {
    /* per rank (n_ranks entries each, NULL unknown): its host (or node) name, and from the plan its
     * stage, the stages of its replica and the replica's micro-batches */
    int n_ranks;
    const char *const *hosts;
    const int *stage, *n_stages, *micro_batches;
    const char *comm_profile; /* the links' expected alpha-beta (autohet commbench --json), or NULL */
    double threshold;         /* a finding is significant from this share of the wall time (0: 0.05) */
} ah_diag_options;

typedef struct {
    ah_finding *f; /* sorted by cost within: significant causes, significant effects no cause explains,
                      explained effects, the findings below the threshold */
    int n;
    double wall_s; /* traced wall time (the analysed span) */
    double step_s; /* mean step */
    int steps;
    double threshold;
    ah_link_obs *obs;
    int n_obs;
    char expected_from[200]; /* what the links' expected times came from */
} ah_diagnosis;

/* Diagnoses the analysed window a->items. Returns 0, or -1 with one line (a
 * comm profile that cannot be read). */
int ah_trace_diagnose(const ah_trace_analysis *a, const ah_diag_options *o, ah_diagnosis *d, char *err,
                      size_t errlen);
void ah_diagnosis_free(ah_diagnosis *d);

/* the table for people: significant findings first, at most `top` lines of the rest */
void ah_diagnosis_print(FILE *f, const ah_diagnosis *d, const ah_diag_options *o);
struct cJSON;
/* analyze --json's arrays: "findings" (significant: 1), the established ones, and "not_established" (0),
 * each check that found time lost but below the threshold or within its expectation's error */
struct cJSON *ah_diagnosis_json(const ah_diagnosis *d, int significant);

/* --comm-profile-out: every pair of hosts the run's transfers crossed, its alpha-beta per size regime
 * (fits[] with "pair") and the links{} matrix between hosts, plus per link class (intra-node: two ranks on
 * one host, inter-node) a latency and a bw fit (the class's median pair), so that autohet plan / simulate
 * --comm-profile read it. Returns 0, or -1 with one line. */
int ah_diagnosis_write_comm_profile(const char *path, const char *trace_path, const ah_diagnosis *d,
                                    const ah_diag_options *o, char *err, size_t errlen);

#endif
