/* Internal: the AutoHet search (docs/planner.md).
 *
 * For one (set of TP degrees, micro-batch) the GPUs are grouped into *kinds*
 * (same GPU type, GPUs per node and NIC); a kind offers `slots` (GPUs in units
 * of its smallest degree). A *class* is a (kind, TP degree) pair: its TP
 * groups are the stages a pipeline can run on, and it offers `units` of them.
 * A *template* is a pipeline shape: an ordered list of stage classes
 * (canonical class order) and the layer split chosen for it. Replicas are
 * copies of templates; replicas of one kind share its slots whatever their
 * degrees. The plan space and why the search is exact over it are described
 * in docs/planner.md. */
#ifndef AUTOHET_PLAN_SEARCH_H
#define AUTOHET_PLAN_SEARCH_H
#include "plan/costs.h"

#define AH_MAX_KINDS 16
#define AH_MAX_CLASSES 64 /* (kind, TP degree) pairs */
#define AH_MAX_STAGES 64
/* Above this many GPUs a mixed pipeline's kinds share one degree unless the
 * cluster has at most two node kinds: with more kinds the degree
 * combinations of long mixed shapes cost more than the planning-time
 * targets allow (docs/planner.md, "Speed"). */
#define AH_STAGE_TP_MAX_GPUS 64

/* A level of the search. A stage's gradient all-reduce runs on its node's
 * link (ah_stage_dp_link_gbs): the NIC share when the plan spans nodes, the
 * intra-node link when the whole plan sits in one node. The search therefore
 * runs once with every node (sync on each node's ah_dp_link_gbs) and once per
 * node kind with only one node of it (sync on its intra-node link). A plan is
 * costed exactly at the level that matches it and pessimistically at the
 * other, so the minimum over levels is exact. */
typedef struct {
    int single_node; /* -1 (every node), or the only node allowed */
} ah_search_level;

typedef struct {
    const ah_device *dev;
    int tp;     /* the TP degree of this class's groups */
    int kind;   /* index into ah_search_ctx.kinds */
    int slot_w; /* slots of its kind one group takes: tp / the kind's smallest degree */
    const ah_layer_bytes *lb; /* per-GPU layer bytes at this degree */
    int gpus_per_node;
    double nic_gbit;
    double nic_share_gbs;
    int upn;   /* units (TP groups) per node */
    int units; /* units in the whole class */
    int n_nodes;
    int nodes[4096]; /* indices into the cluster */
    int64_t cap;     /* usable bytes per GPU */
    ah_layer_times lt;
    ah_ns *sync; /* prefix sums of the layers' DP all-reduce on this class's link (any count: factor 2) */
    ah_ns *sync_r[AH_RING_EXACT_MAX + 1]; /* [r], r = 2..: the same among exactly r replicas */
} ah_class;

/* A node kind: the GPUs its classes share. Every degree searched on a kind
 * divides its GPUs per node (or is the only one), so any multiset of TP groups
 * whose slots fit packs into its nodes (powers of two, largest first). */
typedef struct {
    int slots; /* n_nodes x (GPUs per node / tmin) */
    int tmin;  /* smallest degree of its classes */
    int first_cls, n_cls; /* its classes: cls[first_cls ..), degree ascending */
} ah_kind;

typedef struct {
    int n_stages;
    int cls[AH_MAX_STAGES];
    int shape[AH_MAX_CLASSES]; /* stages per class */
    int use[AH_MAX_KINDS];     /* slots per kind: sum of shape x slot_w */
    int mixed;                 /* more than one kind */
    int local;                 /* node-local DP layout: stage j of every copy on one node (every boundary
                                * crosses nodes, gradients reduce inside nodes); used only by the
                                * node-local branch of the solve, never in the knapsack */
    int ends[AH_MAX_STAGES];   /* split used when the plan has several replicas */
    int ends1[AH_MAX_STAGES];  /* split used by a single-replica plan */
    ah_ns A, B, tail, tail1;   /* fill/drain, bottleneck, tail with sync, tail without sync */
    ah_ns tail_r[AH_RING_EXACT_MAX + 1]; /* [r], r = 2..: the tail of split `ends` in a plan of
                                          * exactly r replicas (exact ring, ah_allreduce_factor) */
} ah_template;

/* The tail a copy of t pays in a plan of n replicas (the objective's tail term). */
static inline ah_ns ah_template_tail(const ah_template *t, long long n) {
    return n == 1 ? t->tail1 : n <= AH_RING_EXACT_MAX ? t->tail_r[n] : t->tail;
}

typedef struct {
    const ah_model_config *m;
    const ah_cluster *c;
    const ah_plan_options *o;
    ah_search_level level;
    unsigned tp_mask; /* bit t: degree t searched */
    int tp;           /* the degree when tp_mask has one, else 0 (mixed degrees) */
    int stage_tp;     /* 1: a multi-kind pipeline's kinds may differ in degree (set by ah_search_ctx_init) */
    int mb, L;
    long long M; /* micro-batches per iteration */
    int ring_r;  /* solve pass: 0 = plans of any replica count, tails at the large-R ring;
                  * r = exactly r replicas, tails tail_r[r] (ah_search_solve) */
    ah_ns sync_lat[AH_RING_EXACT_MAX + 1]; /* [r]: one bucket's all-reduce latency among r holders
                                            * (ah_allreduce_latency_ns; [0] the any-count pass's),
                                            * charged once per stage in a tail with the DP sync */
    int K;
    ah_class *cls; /* K classes, canonical order: by kind, then degree */
    int n_kinds;
    ah_kind kinds[AH_MAX_KINDS]; /* canonical order */
    ah_layer_bytes lbs[AH_MAX_TP_LOG2 + 1]; /* per degree (index log2), those used */
    ah_ns *p2p;      /* [(a * K + b) * 2 + inter]: one send from a stage of class a to one of class b
                      * (ah_template_p2p: the same for every template, looked up, not recomputed) */
    ah_template *tpl;
    int n_tpl, cap_tpl;
    int *pure[AH_MAX_KINDS]; /* per kind: indices of its single-kind templates */
    int n_pure[AH_MAX_KINDS], cap_pure[AH_MAX_KINDS];
    int mixed_from;   /* > 0 while ah_search_solve_more runs: the knapsack's mixed templates start here */
    long long evals;  /* feasibility checks, for reporting */
    long long pruned; /* mixed shapes skipped by bounds */
} ah_search_ctx;

/* The levels of a cluster (every node, then one per node kind); returns the count. */
int ah_search_levels(const ah_cluster *c, ah_search_level *out, int max);

/* A replica of a solution: template index and micro-batches. */
typedef struct {
    int tpl;
    long long m;
} ah_sol_replica;

typedef struct {
    ah_ns value; /* AH_NS_INF if nothing fits */
    int single;  /* 1: one replica, split ends1 and no DP sync */
    int local_R; /* > 0: local_R copies of one local template, stage j of all on one node */
    int n;
    ah_sol_replica *r;
} ah_solution;

/* 1 = context ready, 0 = nothing to do at this (degrees, mb) (no units, or
 * the profile covers none of the degrees for some kind), -1 = error in err.
 * tp_mask: bit t = degree t searched; with several, a kind keeps the degrees
 * dividing its GPUs per node (ah_candidate_tp_masks). */
int ah_search_ctx_init(ah_search_ctx *x, const ah_model_config *m, const ah_cluster *c,
                       const ah_profile *prof, const ah_plan_options *o, unsigned tp_mask, int mb,
                       const ah_search_level *lv, char *err, size_t errlen);
void ah_search_ctx_free(ah_search_ctx *x);
/* Split one template (cls/n_stages/shape set); fills ends, ends1, A, B, tail,
 * tail1. Returns 0, or -1 if no split fits in memory. */
int ah_template_split(ah_search_ctx *x, ah_template *t);
/* The same with its B0 (ah_template_split_b0) already known (b0_known >= 0; AH_NS_INF: no split fits):
 * with pipeline sends overlapped, where the stage times hold no sends, the split starts from it. */
int ah_template_split_b0_known(ah_search_ctx *x, ah_template *t, ah_ns b0_known);
/* Phase 1: every pure template and the mixed templates of at most
 * `phase1_mixed_stages` stages. */
void ah_search_templates(ah_search_ctx *x, int phase1_mixed_stages);
/* Phase 2: the remaining mixed shapes (up to max_mixed_stages) whose
 * optimistic bounds say they could be part of a plan faster than `bound`,
 * split the most promising first with the sub-search solved again into *s
 * (which holds its phase-1 solution) after each group, until none left can
 * beat *s. Returns how many templates were added. Exact: a shape skipped
 * cannot appear in any plan faster than min(bound, s->value). */
int ah_search_expand(ah_search_ctx *x, int phase1_mixed_stages, ah_ns bound, ah_solution *s);
/* The optimum over the plan space for this (tp, mb). */
void ah_search_solve(ah_search_ctx *x, ah_solution *sol);
/* The same after templates were added from index first_new on, *sol optimal over those before: *sol is
 * replaced only by a better plan, which holds copies of a new template (a plan holds copies of one mixed
 * template, the rest pure), so only the new ones are tried as the mixed part. */
void ah_search_solve_more(ah_search_ctx *x, ah_solution *sol, int first_new);
void ah_solution_free(ah_solution *s);
/* Turn a solution into a concrete plan (placement on nodes/GPUs) and evaluate it. */
int ah_search_build_plan(ah_search_ctx *x, const ah_solution *s, const ah_profile *prof, ah_plan *out,
                         char *err, size_t errlen);
/* Start a plan with a deep copy of the cluster and the job settings. */
void ah_plan_init_from(ah_plan *p, const char *strategy, const ah_model_config *m, const ah_cluster *c,
                       const ah_plan_options *o, int mb);
/* Candidate TP degrees / micro-batch sizes for the options (0-terminated). */
int ah_candidate_tps(const ah_model_config *m, const ah_cluster *c, const ah_plan_options *o, int *out);
/* The degree sets the search runs (0-terminated, at most 5): all candidate
 * degrees together (per-replica TP), plus each degree alone that some node's
 * GPU count is not a multiple of (there it only fits on its own); above
 * AH_MIXED_TP_MAX_GPUS (planner.c) every degree alone instead. */
int ah_candidate_tp_masks(const ah_model_config *m, const ah_cluster *c, const ah_plan_options *o,
                          unsigned *out);
int ah_candidate_mbs(const ah_plan_options *o, int *out);
/* Symmetric baselines (baselines.c). */
/* With measured links between hosts (o->links): swaps p's nodes of one class
 * while that shortens its evaluated iteration time (link_placement.c). */
void ah_plan_place_on_links(ah_plan *p, const ah_profile *prof, const ah_plan_options *o);
int ah_plan_megatron(const ah_model_config *m, const ah_cluster *c, const ah_profile *prof,
                     const ah_plan_options *o, ah_plan *out, char *err, size_t errlen);
int ah_plan_proportional(const ah_model_config *m, const ah_cluster *c, const ah_profile *prof,
                         const ah_plan_options *o, ah_plan *out, char *err, size_t errlen);
/* The tied-embedding exchange between the first and last stage of a
 * template (ideal placement; 0 for an untied model or one stage). */
ah_ns ah_template_tied(const ah_search_ctx *x, const ah_template *t);
/* p2p cost of the boundary after stage j of a template (ideal placement). */
ah_ns ah_template_p2p(const ah_search_ctx *x, const ah_template *t, int j);
/* Builds x->p2p (ah_search_ctx_init). */
void ah_template_p2p_table(ah_search_ctx *x);
/* One send from a stage of class a to one of class b, across nodes or not. */
static inline ah_ns ah_class_p2p(const ah_search_ctx *x, int a, int b, int inter) {
    return x->p2p[((size_t)a * (size_t)x->K + (size_t)b) * 2 + (size_t)inter];
}
/* Whether that boundary crosses nodes (ideal placement). */
int ah_template_inter(const ah_search_ctx *x, const ah_template *t, int j);
/* Lockstep pipelines: the chain of the template's transfers (each boundary's whole activation), which every
 * forward and every backward waits for (docs/cost-model.md, "Pipeline sends"). */
ah_ns ah_template_chain(const ah_search_ctx *x, const ah_template *t);
/* Lower bounds of template t's split (cls, n_stages), for skipping it
 * unsplit: *B0 = the smallest largest stage time (fwd + bwd, sends left out)
 * over the splits that fit in memory, a lower bound of its period B in either
 * p2p mode; *sum_w = the smallest sum of stage times over those splits whose
 * stages all take at most B0 + slack. With slack >= the period's excess over
 * B0 (2 x the largest send: the B0 split meets B0 + 2 max c), the split the
 * rule picks is among them, so A >= *sum_w + 2 x the sends, and its first
 * stage ends at or after *first_end (its tail >= stage 0's sync + optimizer
 * over [0, first_end)). -1 (AH_NS_INF, L + 1) if no split fits in memory. */
int ah_template_split_bounds(const ah_search_ctx *x, const ah_template *t, ah_ns slack, ah_ns *B0, ah_ns *sum_w,
                             int *first_end);
/* A stage's tail term over layers [a, e) of class c: its optimizer step plus its gradients' all-reduce in a
 * plan of R >= 2 replicas (the exact ring; R > AH_RING_EXACT_MAX: the any-count cost), before the drain. */
ah_ns ah_stage_tail_at(const ah_search_ctx *x, const ah_class *c, int a, int e, int R);
/* A lower bound of template t's tail (ah_pipeline_tail with the DP sync of a plan of R >= 2 replicas; R >
 * AH_RING_EXACT_MAX: any count) over the splits whose stages fit in memory and take at most wcap: a min-max
 * DP over (stage, end) of each stage's sync + optimizer less the most drain the stages before it can give
 * (their layers at the slowest backward of the template's classes, and the sends between them).
 * AH_NS_INF if no such split. */
ah_ns ah_template_tail_bound(const ah_search_ctx *x, const ah_template *t, ah_ns wcap, int R);
/* The *B0 of ah_template_split_bounds alone (one pass): AH_NS_INF if no split fits in memory. */
ah_ns ah_template_split_b0(const ah_search_ctx *x, const ah_template *t);
/* ah_template_split_b0 of every 2-class template na stages of class a, then nb of class b (na, nb >= 1,
 * na + nb <= smax) into out[na * (smax + 1) + nb] (AH_NS_INF elsewhere): the same minimum by a pass from
 * the last stage back (a stage's memory depends on the stages after it), so the b suffixes are shared by
 * every na: O(smax^2 / 2) stage rows for the pair instead of O(smax^3 / 3) template by template. */
void ah_pair_b0_table(const ah_search_ctx *x, int a, int b, int smax, ah_ns *out);
/* Two plans with the same TP, micro-batch and replicas (stages on the same GPUs with the same layers, the
 * same micro-batches): the same plan (planner.c). */
int ah_plan_same_layout(const ah_plan *a, const ah_plan *b);
/* Tail of R node-local copies of local template t (ah_local_sync_ns per stage). */
ah_ns ah_local_tail(const ah_search_ctx *x, const ah_template *t, int R);
/* Smallest per-GPU peak memory any pipeline of up to max_stages stages needs
 * at this (tp, mb), and the depth that achieves it. */
int64_t ah_min_memory_needed(const ah_search_ctx *x, int *best_stages);

#endif
