/* The program runner: one training step is this rank's schedule program
 * (autohet/schedule.h), op by op. Compute goes to the chunk models (the
 * backend), data between ranks to the transport; each op is traced. An
 * evaluation is the stage's forward-only program through the same runner
 * (untraced: validation batches, activations dropped after each forward,
 * the loss alone reduced). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/executor_internal.h"
#include "util/errors.h"

/* One micro-batch's tokens and targets, drawn when a chunk first needs them. */
typedef struct {
    int *tok, *tgt;
} mb_data;

typedef struct {
    ah_executor *x;
    int step, L, T, B;
    int forward_only;  /* an evaluation: validation batches, no activations kept, the loss alone reduced */
    int row_shift;     /* validation batch b of an evaluation: rows b x global batch on */
    size_t NC;         /* floats of one activation between chunks */
    float loss_scale;  /* 1 / tokens of the global batch */
    double loss;       /* summed token loss of the micro-batches whose head I ran */
    double sums[2];    /* after the step sync: global loss sum, global gradient sum of squares */
    mb_data *md;       /* [m] */
    ah_eng_acts **acts; /* per chunk: [m x its layers] */
    ah_dptr in, dio;   /* receive buffers: activation, activation gradient */
    ah_dptr out;       /* the last forward's output or backward's input gradient, to be sent */
    ah_dptr *sent;     /* buffers of posted sends, freed once they complete */
    int n_sent, cap_sent;
    ah_dptr piece;     /* a cut backward (overlap_dp): the gradient between its pieces */
    double *started;   /* start times of the bucket all-reduces started so far, per (op, layer) in order */
    int n_started, cap_started;
} step_ctx;

static void sleep_s(double s) {
    if (s <= 0)
        return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Test hook of the diagnosis harness (tests/diagnose_harness.sh): AUTOHET_TEST_DATA_DELAY=RANK:SECONDS makes
 * that rank's every micro-batch fetch take SECONDS longer, as a slow data loader would (the engine holds the
 * data in memory, so nothing outside the process can slow its fetches). */
static void test_data_delay(int rank) {
    const char *v = getenv("AUTOHET_TEST_DATA_DELAY");
    int r;
    double s;
    if (v && sscanf(v, "%d:%lf", &r, &s) == 2 && r == rank && s > 0 && s < 60)
        sleep_s(s);
}

static const mb_data *batch_of(step_ctx *c, int i, int validation) {
    mb_data *d = &c->md[i];
    if (!d->tok) {
        ah_executor *x = c->x;
        test_data_delay(x->rank);
        d->tok = ah_xcalloc((size_t)c->B * c->T, sizeof(int));
        d->tgt = ah_xcalloc((size_t)c->B * c->T, sizeof(int));
        ah_dataset_batch(x->data, validation, x->seed, c->step, c->row_shift + x->row0 + i * c->B, c->B, c->T,
                         d->tok, d->tgt);
    }
    return d;
}

/* the lowest of two ranks: names a point-to-point pair in traces */
static int pair_of(int a, int b) {
    return a < b ? a : b;
}

static int stage_tp(const ah_executor *x, int stage) {
    return x->plan.replicas[x->replica].stages[stage].tp;
}

/* rule 1 of per-stage TP: the rank of `stage` (of my replica) I receive from */
static int source_rank(const ah_executor *x, int stage) {
    return ah_slot_rank(&x->plan, x->replica, stage, ah_tp_source(x->tp_rank, stage_tp(x, stage)));
}

/* ... and the ranks of `stage` I send to (none, one, or several when it has a
 * higher degree than mine); returns their count */
static int target_ranks(const ah_executor *x, int stage, int *out) {
    int n = ah_tp_targets(x->tp_rank, x->tp, stage_tp(x, stage), out);
    for (int i = 0; i < n; i++)
        out[i] = ah_slot_rank(&x->plan, x->replica, stage, out[i]);
    return n;
}

static void run_recv(step_ctx *c, const ah_op *op) {
    ah_executor *x = c->x;
    int act = op->kind == AH_OP_RECV_ACTIVATION, peer = source_rank(x, op->peer_stage);
    ah_dptr into = act ? c->in : c->dio;
    ah__engine_sync(&x->chunks[0]); /* the last op that read the buffer is done */
    AH_EXEC_TRACED(x, op->kind, op->mb, ah_op_kind_site(op->kind),
                   (double)c->NC * sizeof(float), 2, pair_of(peer, x->rank), peer,
                   x->tr->recv(x->tr->ctx, ah__dptr_transport(into), c->NC * sizeof(float), peer, op->tag));
}

/* The output of the last compute to every receiver of it. Each receiver's
 * send is one trace record; they share the op's seq (the sends made at the
 * site before this op), which is what each receiver's record counts. */
static void run_send(step_ctx *c, const ah_op *op) {
    ah_executor *x = c->x;
    int site = ah_op_kind_site(op->kind), peers[AH_MAX_TP];
    int n = target_ranks(x, op->peer_stage, peers), seq = x->trace.site_seq[site];
    if (c->n_sent == c->cap_sent) {
        c->cap_sent = c->cap_sent ? 2 * c->cap_sent : 16;
        c->sent = ah_xrealloc(c->sent, sizeof(ah_dptr) * (size_t)c->cap_sent);
    }
    c->sent[c->n_sent++] = c->out; /* freed at the wait, sent or not */
    for (int i = 0; i < n; i++) {
        AH_EXEC_TRACED(x, op->kind, op->mb, site,
                       (double)c->NC * sizeof(float), 2, pair_of(peers[i], x->rank), peers[i],
                       x->tr->send(x->tr->ctx, ah__dptr_transport(c->out), c->NC * sizeof(float), peers[i],
                                   op->tag));
        if (x->trace.on && x->trace.n > 0) {
            x->trace.ev[x->trace.n - 1].seq = seq;
            x->trace.site_seq[site] = seq + 1;
        }
    }
    c->out = ah__dptr_null();
}

/* the chunk model running op: x->chunks holds my stage's chunks in virtual
 * order, which is the op's chunk index */
static ah_engine_model *chunk_of(step_ctx *c, const ah_op *op) {
    return &c->x->chunks[op->chunk];
}

/* An emulated device: the op (kind over layers [first, last)), computed from c0 on, lasts its modelled time
 * (an op that took longer is an overrun); else a device `slowdown` times slower waits (slowdown - 1) x the
 * time it took. */
static void emulate_device(ah_executor *x, ah_op_kind kind, int first, int last, double c0) {
    if (!x->emulate) {
        sleep_s((x->slowdown - 1.0) * (ah_now_s() - c0));
        return;
    }
    const ah_stage_op_times *t = &x->emu;
    double model = kind == AH_OP_FORWARD    ? t->fwd_s[last] - t->fwd_s[first]
                   : kind == AH_OP_BACKWARD ? t->bwd_s[last] - t->bwd_s[first]
                                            : t->update_s;
    double left = c0 + model - ah_now_s();
    x->emu_ops++;
    if (left < 0) {
        x->emu_overruns++;
        x->emu_worst_s = -left > x->emu_worst_s ? -left : x->emu_worst_s;
        return;
    }
    sleep_s(left);
    double late = ah_now_s() - (c0 + model);
    x->emu_late_s += late > 0 ? late : 0;
}

static void traced_compute(step_ctx *c, const ah_op *op, double c0) {
    ah_executor *x = c->x;
    emulate_device(x, op->kind, op->first, op->last, c0);
    ah_trace_event *e =
        ah__exec_record(x, op->kind, c0, ah_now_s(), op->mb, ah_op_kind_site(op->kind), 0, 1, x->rank, -1);
    if (e) {
        e->layer_first = op->first;
        e->layer_last = op->last;
    }
}

static void run_forward(step_ctx *c, const ah_op *op) {
    ah_engine_model *e = chunk_of(c, op);
    const mb_data *d = batch_of(c, op->mb, c->forward_only);
    int k = op->chunk, held = e->last - e->first, head = e->last == c->L;
    ah_eng_acts *acts = c->acts[k] + (size_t)op->mb * held;
    c->out = head ? ah__dptr_null() : ah__be_alloc(e->be, c->NC);
    double l = 0, c0 = ah_now_s();
    ah__engine_forward(e, d->tok, e->first > 0 ? c->in : ah__dptr_null(), d->tgt, c->out, &l, acts);
    if (c->forward_only) /* no backward will read them */
        ah__engine_acts_free(e, acts);
    ah__engine_sync(e);
    traced_compute(c, op, c0);
    if (head)
        c->loss += l;
}

/* The backward of op's layers: the chunk's whole range, or a piece of it (overlap_dp cuts a chunk's last
 * backward at its buckets, top piece first): the top piece takes the received gradient (none at the
 * head), the bottom one writes the gradient to send; between pieces it passes through c->piece. */
static void run_backward(step_ctx *c, const ah_op *op) {
    ah_engine_model *e = chunk_of(c, op);
    const mb_data *d = batch_of(c, op->mb, 0);
    int k = op->chunk, held = e->last - e->first, head = e->last == c->L;
    int top = op->last == e->last, bottom = op->first == e->first;
    ah_dptr dout = top ? (head ? ah__dptr_null() : c->dio) : c->piece, din = c->piece;
    if (bottom)
        din = c->out = e->first > 0 ? ah__be_alloc(e->be, c->NC) : ah__dptr_null();
    double c0 = ah_now_s();
    ah__engine_backward_range(e, d->tok, d->tgt, dout, din, c->loss_scale, c->acts[k] + (size_t)op->mb * held,
                              op->first, op->last);
    ah__engine_sync(e);
    traced_compute(c, op, c0);
}

static void run_send_wait(step_ctx *c) {
    ah_executor *x = c->x;
    AH_EXEC_TRACED(x, AH_OP_SEND_WAIT, -1, ah_op_kind_site(AH_OP_SEND_WAIT), 0, 2, x->rank, -1,
                   x->tr->wait_sends(x->tr->ctx));
    for (int i = 0; i < c->n_sent; i++)
        ah__be_free(x->chunks[0].be, c->sent[i]);
    c->n_sent = 0;
}

/* Sum the gradients of the two copies of a tied embedding matrix: both here
 * (a local add), or exchanged with the other holder's stage: one partner
 * each way when the two stages have the same degree, else mine to every rank
 * that takes it and theirs from one (rule 1 of per-stage TP). */
static void run_tied_sync(step_ctx *c, const ah_op *op) {
    ah_executor *x = c->x;
    if (x->tie_partner == -2) {
        ah__engine_tied_sum_local(&x->chunks[0]);
        return;
    }
    int head = x->stage != 0;
    ah_engine_model *e = ah__exec_model_of(x, head ? c->L - 1 : 0);
    size_t n = ah__engine_tied_size(e);
    ah_dptr theirs = ah__be_alloc(e->be, n), mine = ah__engine_tied_grad(e, head);
    ah__engine_sync(e);
    ah_transport *t = x->tr;
    if (x->n_tie_targets == 1 && x->tie_targets[0] == x->tie_partner) {
        AH_EXEC_TRACED(x, AH_OP_TIED_SYNC, -1, ah_op_kind_site(AH_OP_TIED_SYNC), (double)n * sizeof(float), 2,
                       pair_of(x->rank, x->tie_partner), x->tie_partner,
                       t->sendrecv(t->ctx, ah__dptr_transport(mine), ah__dptr_transport(theirs), n * sizeof(float),
                                   x->tie_partner, op->tag));
    } else {
        double t0 = x->trace.on ? ah_now_s() : 0;
        for (int i = 0; i < x->n_tie_targets; i++)
            t->send(t->ctx, ah__dptr_transport(mine), n * sizeof(float), x->tie_targets[i], op->tag);
        t->recv(t->ctx, ah__dptr_transport(theirs), n * sizeof(float), x->tie_partner, op->tag);
        t->wait_sends(t->ctx); /* mine is read by the sends until here */
        if (x->trace.on)
            ah__exec_record(x, AH_OP_TIED_SYNC, t0, ah_now_s(), -1, ah_op_kind_site(AH_OP_TIED_SYNC),
                           (double)n * sizeof(float), 2,
                           pair_of(x->rank, x->tie_partner), x->tie_partner);
    }
    /* the same sum on both sides: embedding + head */
    ah__engine_tied_add(e, head, theirs);
    ah__be_free(e->be, theirs);
}

static void record_dp(ah_executor *x, const ah_op *op, int l, double t0, double t1) {
    const bucket_group *b = &x->bgroups[op->bucket];
    ah_engine_model *e = ah__exec_model_of(x, l);
    ah_trace_event *te = ah__exec_record(x, AH_OP_DP_ALLREDUCE, t0, t1, -1,
                                         ah_op_kind_site(AH_OP_DP_ALLREDUCE) + op->bucket,
                                         (double)ah__engine_layer_floats(e, l) * sizeof(float), b->size, b->lead, -1);
    if (te) {
        te->layer_first = op->first;
        te->layer_last = op->last;
        te->bucket = op->bucket;
    }
}

/* The layer-wise all-reduce of one bucket's gradients among its holders: done here, or (nonblocking)
 * started here and completed at the program's dp_wait, traced from its start to then. */
static void run_dp_allreduce(step_ctx *c, const ah_op *op) {
    ah_executor *x = c->x;
    const bucket_group *b = &x->bgroups[op->bucket];
    if (op->nonblocking) {
        if (c->n_started == c->cap_started) {
            c->cap_started = c->cap_started ? 2 * c->cap_started : 16;
            c->started = ah_xrealloc(c->started, sizeof(double) * (size_t)c->cap_started);
        }
        c->started[c->n_started++] = ah_now_s();
    }
    if (op->nonblocking && b->T) { /* holders of different degrees: their slices, packed */
        ah__exec_mixed_allreduce_start(x, op->bucket);
        return;
    }
    for (int l = op->first; l < op->last; l++) {
        if (b->T) {
            ah__exec_mixed_allreduce(x, op->bucket, l);
            continue;
        }
        ah_engine_model *e = ah__exec_model_of(x, l);
        ah__engine_sync(e);
        size_t ln = ah__engine_layer_floats(e, l);
        void *grad = ah__dptr_transport(ah__engine_layer_state(e, l, AH_STATE_GRAD));
        if (op->nonblocking) {
            x->tr->iallreduce(x->tr->ctx, b->group, grad, ln, AH_DT_F32, AH_RED_SUM);
            continue;
        }
        double ta = ah_now_s();
        ah__tr_allreduce_sum_f32(x->tr, b->group, grad, ln);
        if (x->trace.on)
            record_dp(x, op, l, ta, ah_now_s());
    }
}

/* Completes the started bucket all-reduces (the program's nonblocking dp_allreduce ops before this one):
 * mixed buckets unpacked, each traced from its op's start. */
static void run_dp_wait(step_ctx *c) {
    ah_executor *x = c->x;
    x->tr->wait_collectives(x->tr->ctx);
    int n = 0;
    for (int p = 0; p < x->prog->n_ops && n < c->n_started; p++) {
        const ah_op *op = &x->prog->ops[p];
        if (op->kind != AH_OP_DP_ALLREDUCE || !op->nonblocking)
            continue;
        double t0 = c->started[n++];
        if (x->bgroups[op->bucket].T) {
            ah__exec_mixed_allreduce_finish(x, op->bucket, t0);
            continue;
        }
        for (int l = op->first; l < op->last && x->trace.on; l++)
            record_dp(x, op, l, t0, ah_now_s());
    }
    c->n_started = 0;
}

/* The loss of the global batch and the global gradient norm: replica 0
 * counts its gradients (replicated tensors on TP rank 0, a tied head once),
 * TP rank 0 of the head's stage its losses. */
static void run_step_sync(step_ctx *c) {
    ah_executor *x = c->x;
    c->sums[0] = x->tp_rank == 0 ? c->loss : 0;
    if (c->forward_only) { /* an evaluation: the loss alone */
        x->tr->allreduce(x->tr->ctx, x->tr->world, c->sums, 1, AH_DT_F64, AH_RED_SUM);
        return;
    }
    c->sums[1] = 0;
    for (int k = 0; k < x->n_chunks && x->replica == 0; k++)
        c->sums[1] += ah__engine_grad_sumsq(&x->chunks[k]);
    AH_EXEC_TRACED(x, AH_OP_STEP_SYNC, -1, ah_op_kind_site(AH_OP_STEP_SYNC), 16, x->world, 0, -1,
                   x->tr->allreduce(x->tr->ctx, x->tr->world, c->sums, 2, AH_DT_F64, AH_RED_SUM));
}

static void run_optimizer(step_ctx *c) {
    ah_executor *x = c->x;
    double t0 = ah_now_s();
    float clip = ah__clip_factor(sqrt(c->sums[1]), x->oc.grad_clip), lr = ah__lr_at(&x->oc, c->step);
    for (int k = 0; k < x->n_chunks; k++) {
        ah__engine_clip_and_step(&x->chunks[k], clip, lr, c->step + 1, &x->oc);
        ah__engine_sync(&x->chunks[k]);
    }
    if (x->emulate)
        emulate_device(x, AH_OP_OPTIMIZER, -1, -1, t0);
    ah__exec_record(x, AH_OP_OPTIMIZER, t0, ah_now_s(), -1, ah_op_kind_site(AH_OP_OPTIMIZER), 0, 1, x->rank, -1);
}

static void run_op(step_ctx *c, const ah_op *op) {
    switch (op->kind) {
    case AH_OP_FORWARD: run_forward(c, op); break;
    case AH_OP_BACKWARD: run_backward(c, op); break;
    case AH_OP_RECV_ACTIVATION:
    case AH_OP_RECV_GRADIENT: run_recv(c, op); break;
    case AH_OP_SEND_ACTIVATION:
    case AH_OP_SEND_GRADIENT: run_send(c, op); break;
    case AH_OP_SEND_WAIT: run_send_wait(c); break;
    case AH_OP_TIED_SYNC: run_tied_sync(c, op); break;
    case AH_OP_DP_ALLREDUCE: run_dp_allreduce(c, op); break;
    case AH_OP_DP_WAIT: run_dp_wait(c); break;
    case AH_OP_STEP_SYNC: run_step_sync(c); break;
    case AH_OP_OPTIMIZER: run_optimizer(c); break;
    case AH_OP_TP_ALLREDUCE: /* inside the forwards and backwards, not a program op */
    case AH_OP_CHECKPOINT:   /* between steps (the trainer), not a program op */
    case AH_OP_KINDS: break;
    }
}

static void ctx_init(step_ctx *c, ah_executor *x, int step) {
    memset(c, 0, sizeof *c);
    const ah_engine_model *e0 = &x->chunks[0];
    c->x = x;
    c->step = step;
    c->L = ah_model_num_layers(&x->cfg);
    c->T = e0->T;
    c->B = e0->B;
    c->NC = (size_t)c->B * c->T * x->cfg.hidden;
    c->loss_scale = 1.0f / ((float)x->plan.global_batch * (float)c->T);
    c->md = ah_xcalloc((size_t)x->m, sizeof(mb_data));
    c->acts = ah_xcalloc((size_t)x->n_chunks, sizeof(ah_eng_acts *));
    for (int k = 0; k < x->n_chunks; k++)
        c->acts[k] = ah_xcalloc((size_t)x->m * (size_t)(x->chunks[k].last - x->chunks[k].first) + 1,
                                sizeof(ah_eng_acts));
    c->in = ah__be_alloc(e0->be, c->NC);
    c->dio = ah__be_alloc(e0->be, c->NC);
    c->piece = x->sched.overlap_dp ? ah__be_alloc(e0->be, c->NC) : ah__dptr_null();
}

static void ctx_free(step_ctx *c) {
    ah_executor *x = c->x;
    for (int i = 0; i < x->m; i++) {
        free(c->md[i].tok);
        free(c->md[i].tgt);
    }
    free(c->md);
    for (int k = 0; k < x->n_chunks; k++)
        free(c->acts[k]);
    free(c->acts);
    free(c->sent);
    ah__be_free(x->chunks[0].be, c->in);
    ah__be_free(x->chunks[0].be, c->dio);
    if (!ah__dptr_is_null(c->piece))
        ah__be_free(x->chunks[0].be, c->piece);
    free(c->started);
}

/* The validation loss of validation batch b of step `step` (rows b x global
 * batch on of the step's validation sample): the stage's forward-only
 * program (autohet/schedule.h), untraced. */
static double run_forward_only(ah_executor *x, int step, int b) {
    step_ctx c;
    ctx_init(&c, x, step);
    c.forward_only = 1;
    c.row_shift = b * x->plan.global_batch;
    int traced = x->trace.on;
    x->trace.on = 0; /* the traces are of training steps */
    for (int i = 0; i < x->eval_prog->n_ops; i++)
        run_op(&c, &x->eval_prog->ops[i]);
    x->trace.on = traced;
    double total = c.sums[0];
    ctx_free(&c);
    return total / ((double)x->plan.global_batch * c.T);
}

int ah_executor_step(ah_executor *x, int step, int eval, ah_step_stats *st, char *err, size_t errlen) {
    (void)err;
    (void)errlen;
    double t0 = MPI_Wtime();
    for (int k = 0; k < x->n_chunks; k++)
        ah__engine_zero_grads(&x->chunks[k]);
    step_ctx c;
    ctx_init(&c, x, step);
    for (int i = 0; i < x->prog->n_ops; i++)
        run_op(&c, &x->prog->ops[i]);
    double dt = MPI_Wtime() - t0, toks = (double)x->plan.global_batch * c.T;
    double flops = (double)x->plan.global_batch * ah_model_flops_per_sequence(&x->cfg, c.T);
    *st = (ah_step_stats){.step = step,
                          .loss = c.sums[0] / toks,
                          .val_loss = -1,
                          .lr = ah__lr_at(&x->oc, step),
                          .grad_norm = sqrt(c.sums[1]),
                          .step_s = dt,
                          .tokens_per_s = toks / dt,
                          .tflops = flops / dt / 1e12,
                          .mfu = x->peak > 0 ? flops / dt / (x->peak * x->world) : 0};
    ctx_free(&c);
    if (eval > 0) { /* the mean of eval batches (nanoGPT's eval_iters) */
        double sum = 0;
        for (int b = 0; b < eval; b++)
            sum += run_forward_only(x, step, b);
        st->val_loss = sum / eval;
    }
    return 0;
}
