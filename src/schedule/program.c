/* Programs: the ordered operations of every stage in one training step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autohet/schedule.h"
#include "schedule/schedule_internal.h"
#include "util/errors.h"


typedef struct {
    ah_op *ops;
    int n, cap;
} op_list;

static ah_op *push(op_list *l, ah_op_kind kind) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->ops = ah_xrealloc(l->ops, sizeof(ah_op) * (size_t)l->cap);
    }
    ah_op *o = &l->ops[l->n++];
    *o = (ah_op){kind, -1, -1, -1, -1, -1, -1, -1, 0, 0};
    return o;
}

/* tags (autohet/schedule.h, "Message tags"): the activation chunk c sends to chunk c+1 for micro-batch i is
 * 2 (c m + i), the gradient coming back 2 (c m + i) + 1 */
static int tag_of(int c, int m, int i, int grad) {
    return 2 * (c * m + i) + grad;
}

/* Bytes per rank of a send between stages j and peer of replica r (ah_schedule_options). */
static double send_bytes(const ah_replica *r, int j, int peer, const ah_schedule_options *o) {
    if (!o->split_by_tp)
        return o->act_bytes;
    int a = r->stages[j].tp, b = r->stages[peer].tp;
    return o->act_bytes / (a < b ? a : b);
}

/* The DP all-reduce op of bucket q on a holder of degree t. */
static ah_op *push_bucket(op_list *l, const ah_schedule_plan *sp, int q, int t, int nonblocking) {
    const ah_bucket *b = &sp->buckets[q];
    ah_op *o = push(l, AH_OP_DP_ALLREDUCE);
    o->first = b->first;
    o->last = b->last;
    o->bucket = q;
    o->bytes = b->bytes / t; /* this rank's shard (rule 2 of per-stage TP) */
    o->nonblocking = nonblocking;
    return o;
}

/* The backward of chunk layers [first, last) of stage j in replica k: one op, or (cut, with overlap_dp)
 * one piece per bucket, top bucket first, each followed by its bucket's non-blocking all-reduce (buckets
 * lie inside one chunk of each holder: autohet/schedule.h). */
static void emit_backward(op_list *l, const ah_schedule_plan *sp, const ah_plan *p, int k, int j, ah_compute_op op,
                          int first, int last, int cut) {
    int t = p->replicas[k].stages[j].tp, top = last;
    for (int q = sp->n_buckets - 1; cut && q >= 0; q--) {
        const ah_bucket *b = &sp->buckets[q];
        if (b->holder[k] != j || b->last <= first || b->first >= last)
            continue;
        ah_op *o = push(l, AH_OP_BACKWARD);
        o->mb = op.micro_batch;
        o->chunk = op.chunk;
        o->first = b->first;
        o->last = top;
        top = b->first;
        push_bucket(l, sp, q, t, 1);
    }
    if (top > first) { /* uncut, or layers no bucket covers (one replica: no buckets) */
        ah_op *o = push(l, AH_OP_BACKWARD);
        o->mb = op.micro_batch;
        o->chunk = op.chunk;
        o->first = first;
        o->last = top;
    }
}

/* one forward or backward with its receive before and its send after; cut: the chunk's last backward
 * with overlap_dp (emit_backward) */
static void emit_compute(op_list *l, const ah_schedule_plan *sp, const ah_plan *p, int k, int c, int m,
                         ah_compute_op op, const ah_schedule_options *so, int cut) {
    const ah_replica *r = &p->replicas[k];
    const ah_chunk *ch = sp->chunks[k];
    int nc = sp->n_chunks[k], i = op.micro_batch, fwd = !op.backward;
    int from = fwd ? c - 1 : c + 1, to = fwd ? c + 1 : c - 1;
    if (from >= 0 && from < nc) {
        ah_op *o = push(l, fwd ? AH_OP_RECV_ACTIVATION : AH_OP_RECV_GRADIENT);
        o->mb = i;
        o->chunk = op.chunk;
        o->peer_stage = ch[from].stage;
        o->tag = fwd ? tag_of(c - 1, m, i, 0) : tag_of(c, m, i, 1);
        o->bytes = send_bytes(r, ch[c].stage, o->peer_stage, so);
    }
    if (fwd) {
        ah_op *o = push(l, AH_OP_FORWARD);
        o->mb = i;
        o->chunk = op.chunk;
        o->first = ch[c].first;
        o->last = ch[c].last;
    } else {
        emit_backward(l, sp, p, k, ch[c].stage, op, ch[c].first, ch[c].last, cut);
    }
    if (to >= 0 && to < nc) {
        ah_op *o = push(l, fwd ? AH_OP_SEND_ACTIVATION : AH_OP_SEND_GRADIENT);
        o->mb = i;
        o->chunk = op.chunk;
        o->peer_stage = ch[to].stage;
        o->tag = fwd ? tag_of(c, m, i, 0) : tag_of(c - 1, m, i, 1);
        o->bytes = send_bytes(r, ch[c].stage, o->peer_stage, so);
    }
}

/* The tied-embedding exchange of stage j (first or last of an S-stage replica), tagged after every send
 * of the step (autohet/schedule.h, "Message tags"). */
static void push_tied(op_list *l, int j, int S, int L, double tied_bytes, int tag) {
    ah_op *o = push(l, AH_OP_TIED_SYNC);
    o->tag = tag;
    o->peer_stage = j == 0 ? S - 1 : 0;
    o->first = j == 0 ? 0 : L - 1;
    o->last = o->first + 1;
    o->bytes = S > 1 ? tied_bytes : 0;
}

/* After the flush: sends complete, then the tied exchange and the buckets top down (one global order, so
 * that ranks in several buckets cannot wait on each other), step reduction, optimizer. Without overlap_dp
 * the tied copies are summed first, then all-reduced with their buckets (the engine's reference order);
 * with it, the buckets' all-reduces are under way since the backward, so they complete first (dp_wait)
 * and the tied exchange sums the two all-reduced copies: the same sum, linear, in the closed form's order
 * (docs/cost-model.md, "Tied embeddings"). */
static void emit_tail(op_list *l, const ah_schedule_plan *sp, const ah_plan *p, int k, int j, int L, int sent,
                      const ah_schedule_options *so) {
    const ah_replica *r = &p->replicas[k];
    int S = r->n_stages, t = r->stages[j].tp;
    double tied_bytes = so->split_by_tp ? so->tied_bytes / t : so->tied_bytes;
    int tied = tied_bytes > 0 && (j == 0 || j == S - 1), tag = 2 * sp->n_chunks[k] * r->micro_batches;
    if (sent)
        push(l, AH_OP_SEND_WAIT);
    if (tied && !so->overlap_dp)
        push_tied(l, j, S, L, tied_bytes, tag);
    int started = 0;
    for (int i = 0; i < l->n; i++)
        started |= l->ops[i].kind == AH_OP_DP_ALLREDUCE && l->ops[i].nonblocking;
    if (started)
        push(l, AH_OP_DP_WAIT);
    for (int q = sp->n_buckets - 1; q >= 0; q--)
        if (sp->buckets[q].holder[k] == j && !so->overlap_dp)
            push_bucket(l, sp, q, t, 0);
    if (tied && so->overlap_dp)
        push_tied(l, j, S, L, tied_bytes, tag);
    push(l, AH_OP_STEP_SYNC)->bytes = 16;
    push(l, AH_OP_OPTIMIZER);
}

static void build_program(ah_schedule_plan *sp, const ah_plan *p, const ah_schedule_options *o, int k, int j,
                          ah_program *out) {
    const ah_replica *r = &p->replicas[k];
    int S = r->n_stages, m = r->micro_batches, V = sp->V;
    int L = ah_model_num_layers(&p->model);
    ah_compute_op *order = ah_xcalloc((size_t)(2 * m * V), sizeof *order);
    ah_schedule_order(sp->schedule, S, V, j, m, order);
    /* each chunk's last backward: where overlap_dp starts its buckets' all-reduces */
    int *last_bwd = ah_xcalloc((size_t)V, sizeof(int));
    for (int i = 0; i < 2 * m * V; i++)
        if (order[i].backward)
            last_bwd[order[i].chunk] = i;
    op_list l = {0};
    for (int i = 0; i < 2 * m * V; i++)
        emit_compute(&l, sp, p, k, order[i].chunk * S + j, m, order[i], o,
                     o->overlap_dp && order[i].backward && last_bwd[order[i].chunk] == i);
    int sent = 0;
    for (int i = 0; i < l.n; i++)
        sent |= l.ops[i].kind == AH_OP_SEND_ACTIVATION || l.ops[i].kind == AH_OP_SEND_GRADIENT;
    emit_tail(&l, sp, p, k, j, L, sent, o);
    free(last_bwd);
    free(order);
    *out = (ah_program){k, j, l.ops, l.n};
}

/* The forward-only program of stage j of replica k: micro-batch by micro-batch, the stage's chunks in
 * model order; the activation chunk c sends chunk c + 1 for micro-batch i is tagged after every tag of the
 * step's program (2 nc m + 2 + c m + i). */
static void build_eval_program(const ah_schedule_plan *sp, const ah_plan *p, const ah_schedule_options *o, int k,
                               int j, ah_program *out) {
    const ah_replica *r = &p->replicas[k];
    const ah_chunk *ch = sp->chunks[k];
    int m = r->micro_batches, nc = sp->n_chunks[k], base = 2 * nc * m + 2;
    op_list l = {0};
    for (int i = 0; i < m; i++)
        for (int c = 0; c < nc; c++) {
            if (ch[c].stage != j)
                continue;
            ah_op *x;
            if (c > 0) {
                x = push(&l, AH_OP_RECV_ACTIVATION);
                x->mb = i, x->chunk = ch[c].virt, x->peer_stage = ch[c - 1].stage, x->tag = base + c * m + i;
                x->bytes = send_bytes(r, j, x->peer_stage, o);
            }
            x = push(&l, AH_OP_FORWARD);
            x->mb = i, x->chunk = ch[c].virt, x->first = ch[c].first, x->last = ch[c].last;
            if (c + 1 < nc) {
                x = push(&l, AH_OP_SEND_ACTIVATION);
                x->mb = i, x->chunk = ch[c].virt, x->peer_stage = ch[c + 1].stage, x->tag = base + (c + 1) * m + i;
                x->bytes = send_bytes(r, j, x->peer_stage, o);
                push(&l, AH_OP_SEND_WAIT);
            }
        }
    push(&l, AH_OP_STEP_SYNC)->bytes = 8;
    *out = (ah_program){k, j, l.ops, l.n};
}

int ah_schedule_build(const ah_plan *p, const ah_schedule_options *o, ah_schedule_plan *sp, char *err,
                      size_t errlen) {
    memset(sp, 0, sizeof *sp);
    int V = o->schedule == AH_SCHED_INTERLEAVED ? (o->virtual_stages > 0 ? o->virtual_stages : 2) : 1;
    if (ah_schedule_check(p, o->schedule, V, err, errlen) != 0)
        return -1;
    int R = p->n_replicas, L = ah_model_num_layers(&p->model);
    sp->schedule = o->schedule;
    sp->overlap_dp = o->overlap_dp;
    sp->V = V;
    sp->n_replicas = R;
    sp->first_stage = ah_xcalloc((size_t)R + 1, sizeof(int));
    sp->chunks = ah_xcalloc((size_t)R, sizeof(ah_chunk *));
    sp->n_chunks = ah_xcalloc((size_t)R, sizeof(int));
    for (int k = 0; k < R; k++) {
        sp->first_stage[k + 1] = sp->first_stage[k] + p->replicas[k].n_stages;
        sp->chunks[k] = ah_xcalloc((size_t)(p->replicas[k].n_stages * V), sizeof(ah_chunk));
        sp->n_chunks[k] = ah_schedule_build_chunks(p, k, V, sp->chunks[k]);
    }
    ah_schedule_build_buckets(sp, L, o->grad_bytes);
    sp->n_programs = sp->first_stage[R];
    sp->programs = ah_xcalloc((size_t)sp->n_programs, sizeof(ah_program));
    sp->eval_programs = ah_xcalloc((size_t)sp->n_programs, sizeof(ah_program));
    for (int k = 0; k < R; k++)
        for (int j = 0; j < p->replicas[k].n_stages; j++) {
            build_program(sp, p, o, k, j, &sp->programs[sp->first_stage[k] + j]);
            build_eval_program(sp, p, o, k, j, &sp->eval_programs[sp->first_stage[k] + j]);
        }
    return 0;
}

void ah_schedule_plan_free(ah_schedule_plan *sp) {
    for (int i = 0; i < sp->n_programs; i++) {
        free(sp->programs[i].ops);
        if (sp->eval_programs)
            free(sp->eval_programs[i].ops);
    }
    free(sp->programs);
    free(sp->eval_programs);
    for (int q = 0; q < sp->n_buckets; q++)
        free(sp->buckets[q].holder);
    free(sp->buckets);
    for (int k = 0; k < sp->n_replicas; k++)
        free(sp->chunks[k]);
    free(sp->chunks);
    free(sp->n_chunks);
    free(sp->first_stage);
    memset(sp, 0, sizeof *sp);
}
