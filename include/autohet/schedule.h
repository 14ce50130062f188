/* Schedule programs: what every rank of a plan does in one training step, in
 * order (docs/architecture.md, docs/schedules.md).
 *
 * A plan document says which layers each (replica, stage) holds; this module
 * turns it into
 *   - the rank <-> slot map (slots are numbered replica by replica, stage by
 *     stage, TP rank by TP rank),
 *   - the chunks of every replica: with the interleaved schedule a stage holds
 *     V non-contiguous layer chunks (Megatron's virtual pipeline stages),
 *   - the gradient buckets: maximal layer runs whose holder stage is the same
 *     in every replica, each with its members (the communicator it needs),
 *   - one program per stage: forward / backward of a chunk for a micro-batch,
 *     receives and sends of activations and gradients (peer, bytes), the wait
 *     for outgoing sends, the tied-embedding exchange, the bucket all-reduces,
 *     the step reduction and the optimizer step.
 * Every TP rank of a stage runs its stage's program; its peers are ranks of
 * the neighbouring stages (the same TP rank when the degrees agree, else the
 * rule of ah_tp_source / ah_tp_targets), and its tensor-parallel all-reduces
 * happen inside the forward and backward of its layers.
 *
 * The engine executes programs over a transport, the simulator turns them
 * into a task graph, `autohet run` maps ranks to hosts with the slot map: one
 * owner for each of these facts. */
#ifndef AUTOHET_SCHEDULE_H
#define AUTOHET_SCHEDULE_H
#include <stddef.h>

#include "autohet/ops.h"
#include "autohet/plan.h"

typedef enum { AH_SCHED_1F1B = 0, AH_SCHED_GPIPE = 1, AH_SCHED_INTERLEAVED = 2, AH_SCHED_KINDS } ah_schedule;
const char *ah_schedule_name(ah_schedule s);
/* "1f1b", "gpipe", "interleaved" (any case): 0, or -1 */
int ah_schedule_parse(const char *s, ah_schedule *out);

/* ---- the rank <-> slot map ---------------------------------------------- */

typedef struct {
    int replica, stage, tp_rank;
} ah_slot;

/* ranks the plan needs: sum over replicas of stages x tp */
int ah_plan_slots(const ah_plan *p);
/* world rank of (replica, stage, tp rank) */
int ah_slot_rank(const ah_plan *p, int replica, int stage, int tp_rank);
/* the slot of a rank: 0, or -1 when the plan has no such rank */
int ah_rank_slot(const ah_plan *p, int rank, ah_slot *out);
/* The world rank's node index in plan->cluster, and its stage's layers and
 * TP rank (the slot map above; the number of ranks is ah_plan_slots). */
int ah_plan_rank_node(const ah_plan *p, int rank, int *layer_first, int *layer_last, int *tp_rank);

/* ---- compute order of one stage ----------------------------------------- */

typedef struct {
    int backward; /* 0 = forward, 1 = backward */
    int chunk;    /* virtual chunk of the stage, 0 .. V-1 */
    int micro_batch;
} ah_compute_op;

/* The compute order of stage j of an S-stage pipeline with V chunks per stage
 * (V = 1 unless interleaved) running m micro-batches: 2 m V entries written to
 * out. Interleaved needs S >= 2 and m a multiple of S (ah_schedule_check). */
void ah_schedule_order(ah_schedule s, int S, int V, int j, int m, ah_compute_op *out);

/* ---- programs ----------------------------------------------------------- */

/* A program's ops are kinds of the one vocabulary of a step (autohet/ops.h): forward and backward
 * (layers [first, last) of chunk, micro-batch mb), recv_activation and recv_gradient (before the compute
 * that needs it), send_activation and send_gradient (non-blocking, after the compute that made it),
 * send_wait (every posted send completed), tied_sync (the two copies of the tied embedding's gradient
 * summed; peer: the other holder), dp_allreduce (one bucket, layer by layer), step_sync (the loss and
 * the gradient norm reduced), optimizer (clip + AdamW of the held layers).
 *
 * The data-parallel all-reduces (docs/schedules.md, "Overlapped all-reduce"): by default every bucket is
 * all-reduced after the flush, blocking, once the sends are complete and the tied exchange done. With
 * overlap_dp the last backward of each chunk is cut at its buckets' boundaries, top bucket first, and each
 * piece is followed by its bucket's non-blocking all-reduce (llm.c's gpt2_backward_and_reduce), which
 * dp_wait completes after the flush, before the tied exchange (which then sums the two all-reduced
 * copies). Either way the step reduction (the global gradient norm the
 * clipping needs) comes before the optimizer, on every rank. */

/* Message tags (their one owner): within one replica's step, the activation chunk c sends chunk c + 1 for
 * micro-batch i is 2 (c m + i), the gradient coming back 2 (c m + i) + 1 (nc chunks, m micro-batches), the
 * tied-embedding exchange 2 nc m, the evaluation's sends 2 nc m + 2 + c m + i. The control plane's
 * messages (checkpoint replication, the recovery servers' release, clock synchronisation) carry fixed tags
 * of their own modules and are exchanged only between steps, when no step message is in flight. */

typedef struct {
    ah_op_kind kind;
    int mb;          /* micro-batch, -1 if none */
    int chunk;       /* the stage's chunk (0..V-1) the op belongs to, -1 if none */
    int first, last; /* layers [first, last) involved, -1 if none */
    int peer_stage;  /* send/receive/tied: the other stage of this replica, -1 if none */
    int tag;         /* send/receive/tied: the same on both ends, unique within the step ("Message tags") */
    int bucket;      /* DP all-reduce: index into ah_schedule_plan.buckets, -1 otherwise */
    double bytes;    /* payload per rank (ah_schedule_options says how it follows the degrees) */
    int nonblocking; /* DP all-reduce: started here, completed at the program's dp_wait (overlap_dp) */
} ah_op;

typedef struct {
    int first, last; /* layers [first, last) */
    int stage;       /* the stage of its replica that holds it */
    int virt;        /* which of that stage's chunks it is */
} ah_chunk;

typedef struct {
    int first, last; /* layers [first, last) */
    double bytes;    /* gradient bytes of the layers at TP 1 (the whole tensors); a holder of degree t
                      * moves bytes / t per rank (its DP_ALLREDUCE op's bytes) */
    int *holder;     /* per replica: the stage holding these layers (the members, same TP rank) */
} ah_bucket;

typedef struct {
    int replica, stage;
    ah_op *ops;
    int n_ops;
} ah_program;

/* What a program builder needs besides the plan. Every byte count is at TP 1
 * (degree-independent); the builder divides by the stages' degrees:
 *   - a send or receive between stages of degrees a and b carries act_bytes
 *     whole, or act_bytes / min(a, b) per rank with split_by_tp (a GPU system's
 *     scatter/gather between TP groups: rule 1 of per-stage TP,
 *     docs/cost-model.md; the simulator's cost model);
 *   - the DP all-reduce of a bucket on a holder of degree t carries the bucket's
 *     gradient bytes / t (the rank's shard, rule 2);
 *   - the tied-embedding exchange carries tied_bytes whole, or tied_bytes / t
 *     with split_by_tp.
 * The CPU engine sends whole activations and leaves split_by_tp 0. */
typedef struct {
    ah_schedule schedule;
    int virtual_stages; /* V, chunks per stage with the interleaved schedule (0 = 2) */
    double act_bytes;   /* one micro-batch's activation between stages */
    const double *grad_bytes; /* [num_layers] gradient bytes of each layer (NULL: bucket bytes are 0) */
    double tied_bytes;        /* > 0: layer 0 and the head share a matrix of this many bytes */
    int split_by_tp;          /* 1: sends and the tied exchange move each rank's share, as above */
    int overlap_dp;           /* 1: bucket all-reduces start inside the last backward (above) */
} ah_schedule_options;

typedef struct {
    ah_schedule schedule;
    int overlap_dp; /* the programs start uniform buckets' all-reduces inside the backward */
    int V;          /* chunks per stage */
    int n_replicas;
    int *first_stage; /* [n_replicas + 1]: index of (replica k, stage 0) in programs */
    ah_chunk **chunks; /* per replica: S_k * V chunks in model order */
    int *n_chunks;
    ah_bucket *buckets; /* from the lowest layer up; none when there is one replica */
    int n_buckets;
    ah_program *programs; /* one per (replica, stage), replica-major */
    int n_programs;
    /* evaluation (Megatron's forward_only), indexed as programs: every micro-batch through the
     * replica's chunks in model order (receive, forward, send, wait), then the loss's reduction
     * (STEP_SYNC); one chain every rank walks in the same order, so it cannot deadlock under any
     * schedule; its tags follow the step's */
    ah_program *eval_programs;
} ah_schedule_plan;

/* Can the plan run this schedule? (interleaved: every replica has >= 2 stages,
 * micro-batches a multiple of its stages, >= V layers per stage). 0, or -1
 * with one line in err. */
int ah_schedule_check(const ah_plan *p, ah_schedule s, int V, char *err, size_t errlen);
/* Build the chunks, buckets and programs of a plan (ah_plan_validate first).
 * 0, or -1 with err. */
int ah_schedule_build(const ah_plan *p, const ah_schedule_options *o, ah_schedule_plan *out, char *err,
                      size_t errlen);
void ah_schedule_plan_free(ah_schedule_plan *sp);
/* the program of (replica, stage), and its evaluation program */
const ah_program *ah_schedule_program_of(const ah_schedule_plan *sp, int replica, int stage);
const ah_program *ah_schedule_eval_program_of(const ah_schedule_plan *sp, int replica, int stage);
/* the chunk of replica k holding layer l */
const ah_chunk *ah_schedule_chunk_of(const ah_schedule_plan *sp, int replica, int layer);

/* ---- per-stage TP: who exchanges what (src/schedule/slices.c) ----------- */

/* Rule 1: between a sending stage of degree from_tp and a receiving stage,
 * TP rank q of the receiver takes the whole activation (or gradient) from TP
 * rank q mod from_tp of the sender. */
int ah_tp_source(int tp_rank, int from_tp);
/* The receivers of TP rank tp_rank of a sending stage of degree from_tp in a
 * receiving stage of degree to_tp (tp_rank, tp_rank + from_tp, ... < to_tp):
 * their count (0 when tp_rank >= to_tp), written to out (AH_MAX_TP entries). */
int ah_tp_targets(int tp_rank, int from_tp, int to_tp, int *out);
/* Rule 2: the largest TP degree among a bucket's holders (T: its layers' split
 * tensors are cut into the T shards of the TP=T layout), and 1 when every
 * holder has the same degree. */
int ah_bucket_max_tp(const ah_plan *p, const ah_bucket *b);
int ah_bucket_uniform_tp(const ah_plan *p, const ah_bucket *b);
/* The TP rank of a holder of degree tp that owns slice `slice` of T (a rank
 * at TP rank q owns slices q T/tp .. (q+1) T/tp - 1). */
int ah_tp_slice_owner(int slice, int T, int tp);

#endif
