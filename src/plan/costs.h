/* Internal: the cost-model primitives shared by ah_plan_evaluate, the
 * searches and the exhaustive enumerator used in tests.
 *
 * All model arithmetic is done in integers: times in nanoseconds, memory in
 * bytes. Per-layer values are rounded once; every sum after that is exact and
 * associative, so the value a search optimises is exactly the value the
 * evaluated plan reports, and ties are decided identically everywhere. */
#ifndef AUTOHET_PLAN_COSTS_H
#define AUTOHET_PLAN_COSTS_H
#include <stdint.h>

#include "autohet/plan.h"
#include "util/clock.h" /* ah_now_s */

typedef int64_t ah_ns;
#define AH_NS_INF INT64_MAX

static inline ah_ns ah_to_ns(double seconds) {
    return (ah_ns)(seconds * 1e9 + 0.5);
}
static inline double ah_ns_to_s(ah_ns t) {
    return (double)t * 1e-9;
}

/* Prefix sums (n_layers + 1 entries) of the per-layer times of one device
 * type at one (tp, micro-batch). Range [first,last) = P[last] - P[first]. */
typedef struct {
    int n_layers;
    ah_ns *fwd, *bwd, *w, *upd; /* w = fwd + bwd */
    ah_ns *tpf, *tpb;           /* parts of fwd / bwd that are TP all-reduces */
} ah_layer_times;

/* Prefix sums of the device-independent per-layer quantities. */
typedef struct {
    int n_layers;
    int64_t *static_bytes; /* weights + grads + optimizer state per GPU */
    int64_t *act_bytes;    /* activations per in-flight micro-batch per GPU */
    double *grad_bytes;    /* DP sync buffer per GPU: a ring moves 2(R-1)/R of it (all-reduce of the
                            * fp32 gradient; distributed optimizer: (grad + weight bytes) / 2, the
                            * reduce-scatter + all-gather, ah_dp_sync_bytes_per_param) */
    double p2p_bytes;      /* activation bytes one GPU sends per micro-batch */
    double tied_bytes;     /* tied embedding: the V x h gradient (fp32) one GPU holds at this degree
                            * (vocab-parallel, / tp), which the first and last stage all-reduce; 0 if untied */
} ah_layer_bytes;

int ah_layer_times_build(ah_layer_times *t, const ah_profile *prof, const ah_model_config *m,
                         const ah_train_settings *ts, const ah_device *dev, int tp, int mb, char *err,
                         size_t errlen);
void ah_layer_times_free(ah_layer_times *t);
/* `shards`: replicas the optimizer state is sharded over when
 * ts->dist_optimizer (the plan's replica count; the search uses 1, the worst
 * case, docs/cost-model.md); ignored otherwise. */
void ah_layer_bytes_build(ah_layer_bytes *b, const ah_model_config *m, const ah_train_settings *ts, int tp,
                          int mb, int shards);
/* The layer times of a plan per distinct (device type, TP degree) and its
 * layer bytes per TP degree, built on first use: the closed form and the
 * simulator cost a plan's stages through one of these (rule 4 of per-stage
 * TP, docs/cost-model.md). Zero-initialise; ah_plan_costs_free after use. */
#define AH_PLAN_COSTS_TIMES 64
typedef struct {
    struct {
        const char *name; /* the device's name (borrowed from the plan) */
        int tp;
        ah_layer_times t;
    } times[AH_PLAN_COSTS_TIMES];
    int n_times;
    ah_layer_bytes bytes[AH_MAX_TP_LOG2 + 1]; /* index log2 tp */
    unsigned char built[AH_MAX_TP_LOG2 + 1];
} ah_plan_costs;
/* Layer times of `dev` at degree tp for the plan's model, training settings
 * and micro-batch; NULL with err (profile errors, more than
 * AH_PLAN_COSTS_TIMES pairs). */
const ah_layer_times *ah_plan_costs_times(ah_plan_costs *c, const ah_plan *p, const ah_profile *prof,
                                          const ah_device *dev, int tp, char *err, size_t errlen);
/* Per-GPU layer bytes at degree tp (optimizer state sharded over the plan's
 * replicas when it is distributed). */
const ah_layer_bytes *ah_plan_costs_bytes(ah_plan_costs *c, const ah_plan *p, int tp);
void ah_plan_costs_free(ah_plan_costs *c);
/* Optimizer step of layers [a, e) with the state sharded over `shards` (1 = not). */
static inline int64_t ah_update_ns(const int64_t *upd_prefix, int a, int e, int shards) {
    int64_t u = upd_prefix[e] - upd_prefix[a];
    return shards > 1 ? (u + shards - 1) / shards : u;
}
/* Dense peak TFLOP/s of a device at the training precision (fp32: the
 * catalog's fp32_tflops, TF32 tensor cores from Ampere on; devices without
 * that figure fall back to peak_tflops). */
static inline double ah_peak_tflops(const ah_device *d, ah_precision_mode p) {
    return p == AH_PRECISION_FP32 && d->fp32_tflops > 0 ? d->fp32_tflops : d->peak_tflops;
}
/* The DP all-reduce among R holders, as the cost model and the simulator
 * both play it (docs/cost-model.md, "DP sync"): a ring up to
 * AH_RING_EXACT_MAX holders -- 2(R-1)/R of the buffer through every GPU in
 * 2(R-1) latency steps; above that, per bucket, the faster of the ring and a
 * log-depth tree (2 n through every GPU in 2 ceil(log2 R) steps), as NCCL's
 * tuner picks: a ring of 384 holders takes 766 steps, 15 ms a bucket at
 * 20 us. The search's counts: r <= AH_RING_EXACT_MAX the ring exactly;
 * R = 0, its pass for any count, the most the chosen algorithm can take
 * at a count above that (factor 2, and the ring's 30 steps at 16, which
 * bound the tree's up to 2^15 holders). */
#define AH_RING_EXACT_MAX 16
static inline double ah_allreduce_factor(int R) {
    return R >= 2 && R <= AH_RING_EXACT_MAX ? 2.0 * (R - 1) / R : 2.0;
}
static inline int ah_allreduce_steps(int R) {
    if (R == 0)
        return 2 * (AH_RING_EXACT_MAX - 1);
    if (R < 2)
        return 0;
    if (R <= AH_RING_EXACT_MAX)
        return 2 * (R - 1);
    int d = 0;
    while ((1 << d) < R)
        d++;
    return 2 * d;
}
/* The latency of one bucket's all-reduce among R holders (ah_allreduce_steps),
 * inside one node or across nodes. */
ah_ns ah_allreduce_latency_ns(int R, int one_node, const ah_plan_options *o);
/* The algorithm of one bucket's all-reduce among R holders: the ring up to
 * AH_RING_EXACT_MAX; above, the tree when it is faster for slice_bytes per
 * GPU at bw_gbs (the plan's DP bandwidth) and the latency of one_node. */
typedef struct {
    int tree;      /* 0: ring */
    double factor; /* bytes through every GPU per byte of the buffer */
    int steps;     /* latency steps */
} ah_allreduce_algo;
ah_allreduce_algo ah_allreduce_choose(int R, double slice_bytes, double bw_gbs, int one_node,
                                      const ah_plan_options *o);
/* Seconds of latency of one all-reduce by algorithm a, inside one node or across nodes. */
static inline double ah_allreduce_algo_latency_s(ah_allreduce_algo a, int one_node,
                                                 const ah_plan_options *o) {
    return a.steps * (one_node ? o->alpha_intra_s : o->alpha_inter_s);
}
/* DP gradient all-reduce time of layer l among R replicas at bw_gbs GB/s per
 * GPU: the bandwidth term (ah_allreduce_factor); the latency is per bucket. */
ah_ns ah_layer_sync_ns(const ah_layer_bytes *b, int l, double bw_gbs, int R);
/* All-reduce of layers [first, last) among R holders inside one node: the
 * bandwidth term at the intra-node link (like ah_layer_sync_ns, the latency
 * is per bucket; docs/cost-model.md). */
ah_ns ah_local_sync_ns(const ah_layer_bytes *b, int first, int last, int R, double intra_gbs);
/* Prefix sums of ah_layer_sync_ns among R replicas (n_layers + 1 entries; free() it). */
ah_ns *ah_sync_prefix(const ah_layer_bytes *b, double bw_gbs, int R);
void ah_layer_bytes_free(ah_layer_bytes *b);

static inline int64_t ah_range(const int64_t *prefix, int first, int last) {
    return prefix[last] - prefix[first];
}
/* Peak memory of a stage holding [first,last) with `in_flight` micro-batches. */
static inline int64_t ah_stage_memory(const ah_layer_bytes *b, int first, int last, int in_flight) {
    return ah_range(b->static_bytes, first, last) + ah_range(b->act_bytes, first, last) * in_flight;
}

/* One activation (or gradient) send between consecutive stages. */
/* The link between two GPUs: the slower intra-node link and the smaller
 * per-GPU NIC share of the two ends (which of them a transfer uses depends on
 * whether the ends share a node). */
typedef struct {
    double intra_gbs, nic_share_gbs;
} ah_pair_link;
static inline ah_pair_link ah_pair_link_of(double intra_a, double nic_a, double intra_b, double nic_b) {
    return (ah_pair_link){intra_a < intra_b ? intra_a : intra_b, nic_a < nic_b ? nic_a : nic_b};
}
ah_ns ah_p2p_ns(double bytes, int inter_node, double intra_bw_gbs, double nic_share_gbs,
                const ah_plan_options *o);
/* One message of `bytes` over a link of link_gbs, alone on it, as a latency
 * and a volume at that bandwidth (latency + volume / link_gbs = its time):
 * the class's alpha and the bytes, or where a comm profile measured the class
 * (o->msg_model), the measured time of that size (its regime's alpha and
 * beta; a link of another bandwidth than the measured one scales beta by the
 * ratio), latency = the regime's alpha clamped to [0, time]. The closed form
 * and the simulator's flows (which share the volume part) both cost a send
 * by it. */
typedef struct {
    double latency_s, volume_bytes;
} ah_msg_cost;
ah_msg_cost ah_msg_cost_of(double bytes, int inter_node, double link_gbs, const ah_plan_options *o);
/* The measured link between nodes a and b (o->links): 1 with its latency
 * (seconds) and bandwidth (GB/s per GPU) when both name hosts of the matrix,
 * different ones, whose pair was measured; else 0. */
int ah_pair_link_measured(const ah_plan_options *o, const ah_node *a, const ah_node *b, double *alpha_s,
                          double *bw_gbs);
/* The measured pair's gain from flows at once (ah_link_matrix.share): what it
 * carries with several flows as a multiple of one flow's bandwidth; 1 where
 * not measured. */
double ah_pair_link_share(const ah_plan_options *o, const ah_node *a, const ah_node *b);
/* A send of `bytes` between GPUs of nodes a and b: the measured pair's
 * alpha + bytes / beta between hosts of o->links, else ah_p2p_ns on the
 * link of the two ends (ah_pair_link_of). */
ah_ns ah_nodes_p2p_ns(double bytes, const ah_node *a, const ah_node *b, int inter_node,
                      const ah_plan_options *o);
/* The slowest measured pair (o->links) of a ring over nodes[0..n-1] of c, in
 * that order and back to the first: its bandwidth (GB/s per GPU); 0 when the
 * ring crosses no measured pair. */
/* Lockstep pipelines (train.p2p lockstep, autohet/calibration.h): one transfer of `bytes` per GPU (a
 * boundary's activation over the smaller TP degree of its ends: one activation per boundary crosses the
 * link, as the overlapped sends) between GPUs of nodes a and b: the calibration's alpha + bytes / its class
 * bandwidth (a measured pair's or the ends' link where it has none), else ah_nodes_p2p_ns; and the chain of
 * replica r's boundaries, which every forward and backward of its stages waits for (`whole`: one
 * micro-batch's activation at TP 1). */
ah_ns ah_lockstep_transfer_ns(double bytes, const ah_node *a, const ah_node *b, int inter_node,
                              const ah_plan_options *o);
ah_ns ah_lockstep_boundary_ns(const ah_plan *p, const ah_replica *r, int j, double whole,
                              const ah_plan_options *o);
ah_ns ah_lockstep_chain_ns(const ah_plan *p, const ah_replica *r, double whole, const ah_plan_options *o);
/* The chain of a pipeline of `boundaries` boundaries whose slowest transfer takes `slowest`: DeepSpeed's
 * schedule pairs each stage with one neighbour per step by stage parity (a forward step's stage sends its
 * gradient to the previous stage, then receives the activation from it; the previous stage, in a backward
 * step, does the other halves), so a step waits for two blocking transfers on its slowest pair: one with
 * two stages, whose only pair exchanges every other step (docs/calibration.md, "The lockstep pipeline"). */
ah_ns ah_lockstep_chain_of(ah_ns slowest, int boundaries);
double ah_ring_measured_gbs(const ah_plan_options *o, const ah_cluster *c, const int *nodes, int n);
/* Per-GPU share of a node's NIC in GB/s. */
double ah_nic_share_gbs(const ah_node *n);
/* Slowest link a cross-node ring meets at this node: its per-GPU NIC share
 * or its intra-node link. */
double ah_dp_link_gbs(const ah_node *n);
/* Slowest DP all-reduce link over the nodes marked in `used` (NULL = all):
 * the intra-node link if that is a single node, else the slowest
 * ah_dp_link_gbs among them (reported; each stage's sync uses its own node's
 * link, ah_stage_dp_link_gbs). */
double ah_dp_bandwidth_gbs(const ah_cluster *c, const unsigned char *used);
/* The link a stage's gradient all-reduce runs on: its node's intra-node link
 * when the whole plan sits in that node, else ah_dp_link_gbs of its node. */
static inline double ah_stage_dp_link_gbs(const ah_node *n, int single_node_plan) {
    return single_node_plan ? n->dev.intra_bw_gbs : ah_dp_link_gbs(n);
}
/* Usable bytes per GPU of a device after the reserve. */
int64_t ah_usable_bytes(const ah_device *d, const ah_plan_options *o);

/* Steady-state time per micro-batch of a 1F1B pipeline whose stage j takes
 * w[j] (forward + backward) and whose boundary j -> j+1 costs c[j] each way
 * (c[S-1] unused): the largest mean, over windows of consecutive stages, of
 * the window's compute plus both directions of the sends inside it, rounded
 * up to a nanosecond. Each window is a cycle of the 1F1B dependency graph
 * (docs/cost-model.md); a window of one stage gives max_j w[j]. O(S^2). */
ah_ns ah_pipeline_period(const ah_ns *w, const ah_ns *c, int S);
/* The period in either p2p mode. Blocking sends occupy the sender's compute
 * stream, so stage j is busy w'[j] = w[j] + c[j-1] + c[j] per micro-batch
 * (its gradient send down and its activation send up); every window cycle
 * then weighs sum w' over its stages, so the period is max_j w'[j]
 * (docs/cost-model.md). */
ah_ns ah_pipeline_period_mode(const ah_ns *w, const ah_ns *c, int S, ah_p2p_mode mode);
/* w'[j] above: the stage's per-micro-batch busy time with blocking sends. */
static inline ah_ns ah_blocking_stage_ns(const ah_ns *w, const ah_ns *c, int S, int j) {
    return w[j] + (j > 0 ? c[j - 1] : 0) + (j + 1 < S ? c[j] : 0);
}

/* Gradient-sync + optimizer tail of a pipeline after its flush (the end of
 * stage 0's last backward). Stage j finishes its last backward
 * D_j = sum_{i<j} (bwd[i] + c[i]) earlier: the last micro-batch's gradient
 * still travels down to stage 0, and stage j's all-reduce overlaps that drain.
 * tail = max_j (x[j] - D_j) with x[j] = sync + optimizer of stage j; >= x[0].
 * tied > 0 (a tied embedding, S > 1): the first and last stage exchange its
 * gradient once the flush is done, before their optimizer steps: stage 0 pays
 * x[0] + tied, stage S-1 max(sync - D, 0) + tied + upd_last (upd_last = its
 * optimizer part of x[S-1]). */
ah_ns ah_pipeline_tail(const ah_ns *x, const ah_ns *bwd, const ah_ns *c, int S, ah_ns upd_last, ah_ns tied);
/* The tied-embedding exchange of a replica whose first and last stages hold
 * lb (the smaller degree's bytes) on these links: a 2-rank all-reduce, each
 * GPU moving its tied_bytes once (0 when untied; docs/cost-model.md). */
ah_ns ah_tied_exchange_ns(const ah_layer_bytes *lb, int inter_node, ah_pair_link link,
                          const ah_plan_options *o);

/* T_k = A + (m - 1) B + tail, saturating. */
static inline ah_ns ah_replica_time(ah_ns A, ah_ns B, ah_ns tail, long long m) {
    if (m > 1 && B > (AH_NS_INF - A - tail) / (m - 1))
        return AH_NS_INF;
    return A + (m - 1) * B + tail;
}

#endif
