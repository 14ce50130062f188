/* Plan documents and the planners that produce them.
 *
 * A plan fixes one micro-batch size and a list of data-parallel replicas.
 * Each replica is a pipeline of stages; a stage is one TP group (its own
 * tensor-parallel degree tp: tp GPUs of one node) holding a contiguous layer
 * range. Replicas may differ in stage count, GPU types, TP degrees and layer
 * boundaries, and run different numbers of micro-batches. Cost formulas: docs/cost-model.md;
 * JSON schema: docs/plan-format.md. */
#ifndef AUTOHET_PLAN_H
#define AUTOHET_PLAN_H
#include <stdio.h>
#include "autohet/cluster.h"
#include "autohet/link_model.h"
#include "autohet/model.h"
#include "autohet/profile.h"

#define AH_PLAN_FORMAT_VERSION 2 /* 2: per-stage tp; version 1 documents are read too */
#define AH_EXIT_BAD_INPUT 2
#define AH_MAX_TP_LOG2 6
#define AH_MAX_TP (1 << AH_MAX_TP_LOG2) /* largest TP degree of a stage */

typedef enum { AH_STRATEGY_AUTOHET = 0, AH_STRATEGY_MEGATRON = 1, AH_STRATEGY_PROPORTIONAL = 2 } ah_strategy;
const char *ah_strategy_name(ah_strategy s);
int ah_strategy_parse(const char *s, ah_strategy *out);

typedef struct {
    int node;                    /* index into plan->cluster.nodes */
    int tp;                      /* the stage's tensor-parallel degree (a power of two) */
    int gpu_first;               /* TP group = GPUs gpu_first .. gpu_first+tp-1 of that node */
    int layer_first, layer_last; /* layers [first, last) */
    /* Filled by ah_plan_evaluate: */
    double fwd_s, bwd_s;  /* one micro-batch through this stage */
    double update_s;      /* optimizer step of the stage's shard */
    double sync_s;        /* data-parallel gradient all-reduce of the stage's layers */
    double p2p_s;         /* one activation send to the next stage (0 on the last) */
    int p2p_inter_node;   /* that send crosses nodes */
    int in_flight;        /* micro-batches whose activations are alive at peak (1F1B) */
    double mem_bytes;     /* peak per GPU */
    double mem_cap_bytes; /* usable capacity per GPU (capacity - reserve) */
} ah_stage;

typedef struct {
    ah_stage *stages;
    int n_stages;
    int micro_batches;
    /* Filled by ah_plan_evaluate: */
    double fill_drain_s; /* A: one micro-batch through all stages, fwd + bwd, with sends */
    double bottleneck_s; /* B: steady-state 1F1B period per micro-batch, sends included (>= slowest stage) */
    double tail_s;       /* gradient sync + optimizer left after the flush (max over stages, drain deducted) */
    double time_s;       /* pipeline flush: A + (m - 1) B (iteration = max time_s + max tail_s) */
    int bottleneck_stage;
} ah_replica;

#define AH_MAX_DP_LIST 16
/* time: the lowest iteration time; cost: the lowest dollars per iteration =
 * iteration time x hourly prices of the nodes a plan uses / 3600 */
typedef enum { AH_OBJECTIVE_TIME = 0, AH_OBJECTIVE_COST = 1 } ah_objective;

/* The links between pairs of hosts a comm profile measured (`autohet commbench
 * --pairs hosts --json`: its links{}): for hosts a, b the point-to-point
 * latency alpha_s[a n + b] (seconds, < 0 not measured) and bandwidth
 * bw_gbs[a n + b] (GB/s per GPU, <= 0 not measured). Two plan nodes on
 * different hosts of the matrix pay that pair's alpha + bytes / beta where the
 * cost model and the simulator would charge the inter-node class. */
typedef struct {
    int n;
    char (*hosts)[64];
    double *alpha_s, *bw_gbs;
    /* what the pair carries with flows at once, as a multiple of one flow (>= 1: commbench's shared links,
     * aggregate / one flow measured the same way, at least 1; 1 where not measured); NULL: none measured */
    double *share;
} ah_link_matrix;

typedef struct {
    int tp;           /* 0 = search {1,2,4,8} (or those in tp_mask) */
    unsigned tp_mask; /* bit t: TP degree t allowed (0 = any); --tp 1,2 */
    unsigned long long pp_mask; /* bit s-1: pipelines of s stages allowed (0 = any up to max_stages); --pp */
    int dp[AH_MAX_DP_LIST];     /* --dp: data-parallel replica counts allowed, ascending ... */
    int n_dp;                   /* ... how many (0 = any count) */
    ah_objective objective;     /* --objective: time (default) or cost (needs node prices) */
    int micro_batch;  /* 0 = search {1,2,4,8} */
    int global_batch; /* sequences per iteration */
    ah_train_settings train;
    double mem_reserve_gib;  /* per-GPU reserve (CUDA context, comm buffers, fragmentation) */
    int max_stages;          /* deepest pipeline considered */
    int max_mixed_stages;    /* deepest mixed-type pipeline of two GPU types */
    int max_mixed_types;     /* most GPU types in one mixed pipeline */
    int max_mixed3_stages;   /* deepest mixed pipeline of three or more GPU types */
    int phase1_mixed_stages; /* search tuning: mixed pipelines split before pruning starts (0: by size) */
    double alpha_intra_s;    /* per-message latency inside a node */
    double alpha_inter_s;    /* per-message latency between nodes */
    ah_strategy strategy;
    const ah_link_matrix *links; /* measured links between pairs of hosts (NULL: one inter-node class) */
    /* The measured one-way time of a message per link class ([0] intra-node,
     * [1] inter-node): a comm profile's piecewise latency fit, measured on a
     * link of msg_ref_gbs (n = 0: alpha + bytes / the link's bandwidth) */
    ah_link_model msg_model[2];
    double msg_ref_gbs[2];
    /* A calibration's lockstep transfer terms (train.p2p lockstep; NULL: the links' own costs). Its compute
     * scales act through the profile (ah_profile_set_calibration). Not owned. */
    const ah_calibration *calibration;
} ah_plan_options;

void ah_plan_options_default(ah_plan_options *o);
/* A calibration put to use (NULL: none, every part taken off): its scales through prof, its lockstep terms
 * through o, and its runtime's pipeline (lockstep) into *train unless the user gave a p2p mode. c must outlive
 * prof's and o's use. */
void ah_calibration_apply(const ah_calibration *c, ah_profile *prof, ah_plan_options *o, ah_train_settings *train,
                          int p2p_given);

typedef struct {
    int version;
    char strategy[16];
    ah_model_config model;
    ah_train_settings train;
    double mem_reserve_gib; /* the per-GPU reserve it was planned with (train.mem_reserve_gib; absent: 2) */
    ah_cluster cluster; /* owned copy */
    int micro_batch, global_batch;
    ah_replica *replicas;
    int n_replicas;
    /* Filled by ah_plan_evaluate: */
    double iteration_time_s;
    double tokens_per_s;
    double tflops_per_gpu; /* model FLOPs (3x forward) / time / GPUs used */
    double hw_tflops_per_gpu; /* hardware FLOPs (with recomputation) / time / GPUs used */
    double mfu;            /* achieved / sum of used GPUs' peak */
    int bottleneck_replica;
    int gpus_used, gpus_total;
    double dp_bw_gbs;            /* per-GPU bandwidth of the data-parallel all-reduce */
    long long iteration_time_ns; /* the same, exact integer nanoseconds of the model */
    /* Set by the planner: */
    double planning_time_s;
    double search_value_s; /* the optimum of the search objective */
    long long search_value_ns;
    long long candidates; /* search effort: templates / evaluations counted */
    char profile_source[128];
} ah_plan;

/* What plan p was costed with into o: its training settings, per-GPU memory reserve and global batch (a
 * simulation, repair or replan of p costs it as it was planned). */
void ah_plan_options_take_plan(ah_plan_options *o, const ah_plan *p);

void ah_plan_free(ah_plan *p);
/* The TP degree every stage shares, or 0 when stages differ (or no stage). */
int ah_plan_uniform_tp(const ah_plan *p);
/* Sets every stage's TP degree (a plan built with one degree). */
void ah_plan_set_tp(ah_plan *p, int tp);
/* Why `tp` cannot be a stage's TP degree for model m (not a power of two in
 * 1..AH_MAX_TP, or not dividing the attention and KV heads), written into
 * buf as "<tp> is not ..." / "<tp> does not ..."; 0 when it can. The one
 * check of the plan reader and ah_plan_validate. */
int ah_stage_tp_problem(const ah_model_config *m, int tp, char *buf, size_t n);
/* Largest TP degree of any stage. */
int ah_plan_max_tp(const ah_plan *p);
/* "2" for a plan whose stages all have TP 2, "1-4 per stage" otherwise. */
void ah_plan_tp_text(const ah_plan *p, char *buf, size_t n);
/* Deep copy (dst must be uninitialised or freed). */
void ah_plan_copy(ah_plan *dst, const ah_plan *src);
/* 1 if a stage of the plan runs on the cluster node named `name` */
int ah_plan_uses_node(const ah_plan *p, const char *name);
/* Sum of the hourly prices of the nodes the plan uses (a node is paid for if
 * any of its GPUs runs a stage); -1 if a used node has no price (<= 0). */
double ah_plan_price_per_hour(const ah_plan *p);
/* Dollars per iteration (iteration time x price per hour / 3600) and per 1M
 * tokens; both -1 when a used node has no price. */
double ah_plan_cost_per_iteration(const ah_plan *p);
double ah_plan_cost_per_mtoken(const ah_plan *p);

/* The inputs of a search that do not depend on how many nodes of each type there are: the options, as
 * ah_plan_search checks them, and the profile's data for every node type of c at the (tp, micro-batch)
 * candidates (a profile of another seq or layer count, a candidate without data for every one of them).
 * 0, or AH_EXIT_BAD_INPUT with err: the error a search over nodes of these types stops with, not the
 * "nothing fits" of too few nodes. */
int ah_plan_check_inputs(const ah_model_config *m, const ah_cluster *c, const ah_profile *prof,
                         const ah_plan_options *o, char *err, size_t errlen);

/* Search the plan space with the given strategy. Returns 0, or
 * AH_EXIT_BAD_INPUT with a one-line reason in err (bad options, nothing fits). */
int ah_plan_search(const ah_model_config *m, const ah_cluster *c, const ah_profile *prof,
                   const ah_plan_options *o, ah_plan *out, char *err, size_t errlen);

/* Replanning after a loss without a full search (src/plan/repair.c, docs/planner.md "Replanning after a
 * loss"): `old`'s replicas whose nodes all survive (same names, same GPU counts in `survivors`) are kept, the
 * surviving nodes of its broken replicas that no kept replica uses are planned by ah_plan_search on their own
 * (old's micro-batch size; nodes old left idle stay idle), and
 * the micro-batches are dealt out again over all replicas. Returns 0, or AH_EXIT_BAD_INPUT with err. */
int ah_plan_repair(const ah_plan *old, const ah_cluster *survivors, const ah_profile *prof, const ah_plan_options *o,
                   ah_plan *out, char *err, size_t errlen);

/* Replans computed ahead (src/plan/replan_table.c, docs/planner.md "Replans computed ahead"): for every loss
 * of 1..depth nodes of p's cluster, the plan ah_plan_search(p's model, the survivors, prof, o) returns. Nodes
 * of one class (device, GPUs, NIC, price, spot) are interchangeable under the cost model, so losses are told
 * apart by how many nodes of each class they take: one search each. A lookup maps the entry's plan onto the
 * actual survivors (a node that survived keeps its stages) and evaluates it: the plan a full search of the
 * survivors would return, up to which node of a class holds what. The searches run on OpenMP's threads. */
#define AH_REPLAN_MAX_DEPTH 8
#define AH_REPLAN_MAX_ENTRIES 2000
typedef struct ah_replan_table ah_replan_table;
struct cJSON;
/* 0, or AH_EXIT_BAD_INPUT with err (depth out of range, more than AH_REPLAN_MAX_ENTRIES losses, measured links
 * between hosts); _check says so for a cluster before any search */
int ah_replan_table_check(const ah_cluster *c, const ah_plan_options *o, int depth, char *err, size_t errlen);
int ah_replan_table_build(const ah_plan *p, const ah_profile *prof, const ah_plan_options *o, int depth,
                          ah_replan_table **out, char *err, size_t errlen);
/* 1 with *out (cluster = survivors), 0 when the table does not hold the loss (or its search found no plan),
 * -1 with err when the entry does not evaluate (a table edited by hand, other options) */
int ah_replan_table_lookup(const ah_replan_table *t, const ah_plan *old, const ah_cluster *survivors,
                           const ah_profile *prof, const ah_plan_options *o, ah_plan *out, char *err,
                           size_t errlen);
/* A loss deeper than the table: the entry of `depth` of the lost nodes, mapped onto the survivors with the rest
 * of the loss used last, then ah_plan_repair of it for the rest. Of the ways to choose the `depth` nodes (loss
 * vectors, at most 64 tried) the one whose entry keeps the most micro-batches on replicas the rest leaves
 * whole. 1 with *out, 0 when the loss is not deeper or nothing gave a plan (err: the repair's why). */
int ah_replan_table_nearest(const ah_replan_table *t, const ah_plan *old, const ah_cluster *survivors,
                            const ah_profile *prof, const ah_plan_options *o, ah_plan *out, char *err,
                            size_t errlen);
/* the plan document's "replans" object, and back (p: the plan read from the same document; errors name
 * `file` and the field) */
struct cJSON *ah_replan_table_to_json(const ah_replan_table *t);
int ah_replan_table_from_json(const struct cJSON *j, const ah_plan *p, const char *file, ah_replan_table **out,
                              char *err, size_t errlen);
/* the table's depth, losses held, node classes, and its build's seconds and threads (0 if read from a document) */
void ah_replan_table_stats(const ah_replan_table *t, int *depth, int *n_entries, int *n_classes, double *build_s,
                           int *threads);
void ah_replan_table_free(ah_replan_table *t);

/* The best plan and, after it, the best plans of the next-best search
 * configurations (tp, micro-batch, bandwidth level), up to k, in increasing
 * predicted time: what `autohet plan --verify K` simulates. out must hold k
 * plans; *n_out says how many were found. Baselines return one plan. */
int ah_plan_search_top(const ah_model_config *m, const ah_cluster *c, const ah_profile *prof,
                       const ah_plan_options *o, int k, ah_plan *out, int *n_out, char *err, size_t errlen);

/* `autohet plan --top K`: best (copied) first, then the best plan of each structural alternative to it —
 * at most half its pipeline depth (and half again), one TP degree on every stage, another micro-batch
 * size — each an exact search under that constraint (within o's own limits), duplicates dropped, ranked
 * by predicted time; at most k into out, with why[i] saying which constraint made it ("the chosen plan",
 * "at most 4 pipeline stages", "TP 2 on every stage", "micro-batch 4"). Returns 0. */
/* Error bars (src/plan/robust.c, docs/planner.md "Error bars"): the plan's closed form with compute scaled by
 * 1 -+ ec and communication (link bandwidths and latencies) by 1 -+ en, t[4] = (-,-), (-,+), (+,-), (+,+);
 * over n plans, each one's error bar (half the spread of its corners, seconds) and its worst regret (its time
 * over the best of the n at a corner or at the nominal point, minus 1, where that is largest). 0, or -1 if a
 * plan cannot be evaluated. */
int ah_plan_corners(const ah_plan *p, const ah_profile *prof, const ah_plan_options *o, double ec, double en,
                    double t[4]);
int ah_plan_robustness(const ah_plan *plans, int n, const ah_profile *prof, const ah_plan_options *o, double ec,
                       double en, double *error_bar_s, double *regret);

int ah_plan_alternatives(const ah_model_config *m, const ah_cluster *c, const ah_profile *prof,
                         const ah_plan_options *o, const ah_plan *best, int k, ah_plan *out, char (*why)[96],
                         int *n_out);

/* Recompute every derived field of a plan from its structure (stages, layers,
 * micro-batches) with the cost model. Returns 0, or -1 with err if the plan is
 * malformed (layers not covered exactly once per replica, GPUs out of range,
 * micro-batches not summing to the global batch) or the profile lacks an entry.
 * Memory over capacity is not an error here; see ah_plan_check_memory. */
int ah_plan_evaluate(ah_plan *p, const ah_profile *prof, const ah_plan_options *o, char *err, size_t errlen);

/* The cost model's time of every compute op of one stage on its device, as the closed form and the simulator
 * cost it (the profile's layer times at the stage's degree and the plan's micro-batch; the optimizer step of
 * the stage's layers, sharded as the plan says): what `train --emulate` makes each op last. */
typedef struct {
    int first, last;  /* the stage's layers [first, last) */
    double *fwd_s;    /* [n_layers + 1] prefix sums: the forward of layers [a, b) is fwd_s[b] - fwd_s[a] */
    double *bwd_s;    /* the same for the backward */
    double update_s;  /* the optimizer step of the stage's layers */
} ah_stage_op_times;
/* 0, or -1 with err (the profile lacks the stage's device, degree or micro-batch). */
int ah_plan_stage_op_times(const ah_plan *p, const ah_profile *prof, int replica, int stage, ah_stage_op_times *out,
                           char *err, size_t errlen);
void ah_stage_op_times_free(ah_stage_op_times *t);
/* 0 if every stage fits, else -1 with the first offending stage in err. */
int ah_plan_check_memory(const ah_plan *p, char *err, size_t errlen);
/* The cost model's per-GPU memory of layers [first, last) at TP degree tp and
 * micro-batch mb (the planner's own accounting, src/plan/costs.c): weights,
 * gradients and optimizer state (*state, optimizer state not sharded), and
 * the activations one in-flight micro-batch keeps (*act). */
void ah_layers_memory(const ah_model_config *m, const ah_train_settings *ts, int tp, int mb, int first, int last,
                      double *state, double *act);
/* The structure of a plan: positive sizes, every replica covering the model's
 * layers exactly once in order, GPUs inside their nodes and used once,
 * micro-batches summing to the global batch. The one plan validator of the
 * planner, the simulator, the engine and `autohet run`. 0, or -1 with err. */
int ah_plan_validate(const ah_plan *p, char *err, size_t errlen);
/* Gradient buckets, the one definition (closed form, schedule programs, hence
 * the simulator and the engine): maximal runs of layers whose holder is the
 * same in every replica. holder[l * R + k] is the stage of replica k holding
 * layer l; first[l] receives the first layer of l's bucket. Returns the
 * number of buckets. */
int ah_plan_bucket_starts(const int *holder, int L, int R, int *first);

/* Output. */
void ah_plan_print_table(const ah_plan *p, FILE *f);
/* Writes the versioned JSON document. `extra` (may be NULL) is a cJSON object
 * whose items are added at top level (e.g. "comparison"). Returns 0 or -1. */
struct cJSON;
int ah_plan_write_json(const ah_plan *p, const struct cJSON *extra, const char *path, char *err,
                       size_t errlen);
struct cJSON *ah_plan_to_json(const ah_plan *p);
/* Reads a plan document; GPU types are looked up in devices. */
int ah_plan_read_json(const char *path, const ah_device_catalog *devices, ah_plan *out, char *err,
                      size_t errlen);
/* The same, in the same one parse also handing back the document's top-level
 * items that are not fields of the plan ("comparison", "top", ...) as a new
 * object in *extra (the caller deletes it), to pass as ah_plan_write_json's
 * extra when a tool rewrites a plan it read. */
int ah_plan_read_json_extras(const char *path, const ah_device_catalog *devices, ah_plan *out,
                             struct cJSON **extra, char *err, size_t errlen);

#endif
