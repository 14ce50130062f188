/* Goodput over spot-availability traces (docs/spot-sim.md): replay a trace
 * through the planner, the simulator and the recovery cost model, and compare
 * policies on the same trace.
 *
 * At every change of the available node set (all events of one timestamp are
 * one change) each policy may stop: it pays detection, replanning (a
 * modelled planning time, or the planner's measured one on request), a restart and the transfer of the state
 * its new plan needs (bytes per tier over tier bandwidths), loses the iterations it cannot restore, and then
 * runs at the simulated iteration time of its plan until the next change. */
#ifndef AUTOHET_SPOT_SIM_H
#define AUTOHET_SPOT_SIM_H
#include <stddef.h>

#include "autohet/cluster.h"
#include "autohet/elastic.h"
#include "autohet/model.h"
#include "autohet/profile.h"

typedef enum { AH_POLICY_AUTOHET, AH_POLICY_FULL_RELOAD, AH_POLICY_STATIC, AH_POLICY_N } ah_spot_policy;
const char *ah_spot_policy_name(ah_spot_policy p);

/* The recovery cost model (the recovery benchmark's regime, BENCHMARKS.md). */
typedef struct {
    double detect_s;        /* from a preemption to the job stopped (heartbeat / notice) */
    double restart_s;       /* relaunch: processes, communicators, model set-up */
    double mem_gbs;         /* a node reading its own memory tier, GB/s */
    double cloud_mbs;       /* a node's bandwidth to the cloud store, MB/s */
    int ckpt_every;         /* cloud checkpoint every K iterations (all policies) */
    double bytes_per_param; /* training state: bf16 weights + fp32 master + Adam m, v + grads = 16 */
    /* planning time of a new node set: modelled (plan_s_64 x (GPUs / 64)^1.36,
     * the planner benchmark's curve) so that a replay is deterministic, or the
     * planner's measured time when measure_planning */
    double plan_s_64;
    int measure_planning;
} ah_spot_costs;
void ah_spot_costs_default(ah_spot_costs *c);
/* the modelled planning seconds for a node set of `gpus` GPUs */
double ah_spot_modelled_plan_s(const ah_spot_costs *c, int gpus);

/* A trace node becomes one inventory node: one of `n` types chosen
 * deterministically from the trace node's name with the given weights. */
typedef struct {
    ah_node node[8];
    double weight[8];
    int n;
} ah_spot_node_mix;
/* "8xA100-40G" or "8xA100-40G=3,8xV100-16G=1" (GPUs x type [= weight]). */
int ah_spot_node_mix_parse(const char *s, const ah_device_catalog *devices, ah_spot_node_mix *mix, char *err,
                           size_t errlen);

typedef enum {
    AH_DOWN_DETECT,
    AH_DOWN_PLAN,
    AH_DOWN_RESTART,
    AH_DOWN_TRANSFER,
    AH_DOWN_WAIT,
    AH_DOWN_N
} ah_down_cause;
const char *ah_down_cause_name(ah_down_cause c);

typedef struct {
    double t0, t1;
    double samples_per_s; /* 0: down */
} ah_spot_segment;

typedef struct {
    int enabled;
    double samples;           /* useful samples at the end (lost work removed) */
    double avg_samples_per_s; /* samples / trace duration */
    double downtime_s;        /* sum of down_s */
    double down_s[AH_DOWN_N];
    double lost_samples;     /* computed, then lost to a restart from an older state */
    double bytes[AH_TIER_N]; /* state moved per tier, all recoveries */
    int restarts;
    ah_spot_segment *seg;
    int n_seg, cap_seg;
} ah_spot_policy_result;

typedef struct {
    double duration_s; /* the trace's span: first to last event */
    int n_events, n_changes, max_nodes, min_nodes;
    int static_nodes;    /* the node count the static policy's plan is sized for */
    int tp;              /* the TP degree every plan was held to; 0: the planner's choice per node set */
    unsigned tp_degrees; /* bit k: a stage of some plan computed has TP degree 2^k */
    double *t;           /* node count over time: nodes[i] from t[i] */
    int *nodes;
    int n_points;
    int plans_computed, sims_computed;
    ah_spot_policy_result pol[AH_POLICY_N];
} ah_spot_result;

/* Replays `ev` (time-ordered) for the policies with enabled[p] != 0. The
 * planner searches with `prof`, global batch gb and sequence seq, once per
 * distinct composition of the node set (counts per node type), micro-batch
 * and TP degrees free as in `autohet plan`, or every stage at TP degree tp
 * when tp > 0. A plan of other degrees than the state it recovers from
 * reshards (the recovery assignment of `autohet run`). 0, or -1 with err: also,
 * before any replay, for what would stop every search alike (ah_plan_check_inputs). */
int ah_spot_replay(const ah_spot_event *ev, int n, const ah_spot_node_mix *mix, const ah_model_config *m,
                   const ah_profile *prof, int gb, int seq, int tp, const ah_spot_costs *c,
                   const int *enabled, ah_spot_result *out, char *err, size_t errlen);
void ah_spot_result_free(ah_spot_result *r);

/* Samples/s over time per policy, the node count beneath (SVG). */
int ah_spot_write_svg(const ah_spot_result *r, const char *title, const char *path, char *err, size_t errlen);

#endif
