/* Plan execution over MPI (see executor.h and docs/engine.md). */
#include "engine/executor_internal.h"

#include <dirent.h>
#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>

#include "autohet/ckpt.h"
#include "autohet/schedule.h"
#include "util/errors.h"

/* Records one operation of this rank (no-op unless tracing): a store after
 * the caller's two clock reads. group: the communicator's lowest rank. */
static ah_trace_event *rec(ah_executor *x, ah_trace_kind kind, double t0, double t1, int mb, int site,
                           double bytes, int ranks, int group, int peer) {
    ah_trace_event *e = ah_trace_record(&x->trace, kind, t0, t1, site, mb);
    if (e) {
        e->bytes = bytes;
        e->ranks = ranks;
        e->group = group;
        e->peer = peer;
    }
    return e;
}

/* time an expression and record it */
#define TRACED(x, kind, mb, site, bytes, ranks, group, peer, stmt)                                         \
    do {                                                                                                     \
        double tq0_ = (x)->trace.on ? MPI_Wtime() : 0;                                                       \
        stmt;                                                                                                \
        if ((x)->trace.on)                                                                                   \
            rec((x), (kind), tq0_, MPI_Wtime(), (mb), (site), (bytes), (ranks), (group), (peer));            \
    } while (0)

static void tp_allreduce_cb(ah_dptr buf, size_t n, void *ctx) {
    ah_executor *x = ctx;
    TRACED(x, AH_TRACE_TP_ALLREDUCE, -1, 1, (double)n * sizeof(float), x->tp, x->rank - x->tp_rank, -1,
           MPI_Allreduce(MPI_IN_PLACE, ah_dptr_transport(buf), (int)n, MPI_FLOAT, MPI_SUM, x->tp_comm));
}

/* World rank of (replica k, stage j, tp rank r). */
static int slot_rank(const ah_plan *p, int k, int j, int r) {
    int idx = 0;
    for (int q = 0; q < k; q++)
        idx += p->replicas[q].n_stages * p->tp;
    return idx + j * p->tp + r;
}

static void sleep_s(double s) {
    if (s <= 0)
        return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

double ah_measure_sgemm_peak(void) {
    const int n = 384;
    float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n),
          *c = malloc(sizeof(float) * n * n);
    if (!a || !b || !c)
        abort();
    for (int i = 0; i < n * n; i++) {
        a[i] = (float)(i % 7) * 0.01f;
        b[i] = (float)(i % 5) * 0.02f;
    }
    double best = 0;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = MPI_Wtime();
        for (int k = 0; k < 4; k++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        double dt = MPI_Wtime() - t0;
        double f = 4.0 * 2.0 * n * n * (double)n / dt;
        if (f > best)
            best = f;
    }
    free(a);
    free(b);
    free(c);
    return best;
}

/* Refuses, before anything is allocated, a batch shape this machine cannot
 * hold: the engine indexes a micro-batch's tokens with an int, and the
 * stage with the most state needs at least its parameters, gradients and
 * AdamW moments (fp32) plus one micro-batch's activations (fp32) of its
 * layers. The same answer on every rank (it looks at every stage). */
static int check_memory(const ah_plan *p, const ah_model_config *cfg, char *err, size_t errlen) {
    double tokens = (double)p->micro_batch * p->train.seq;
    if (tokens * (cfg->hidden > cfg->vocab ? cfg->hidden : cfg->vocab) > (double)SIZE_MAX / 8 ||
        tokens > 2147483647.0) {
        snprintf(err, errlen,
                 "micro-batch %d x seq %d = %.3g tokens: more than a micro-batch can hold (at most 2^31 - 1 "
                 "tokens); lower --micro-batch or --seq",
                 p->micro_batch, p->train.seq, tokens);
        return -1;
    }
    double worst = 0;
    for (int k = 0; k < p->n_replicas; k++)
        for (int j = 0; j < p->replicas[k].n_stages; j++) {
            const ah_stage *st = &p->replicas[k].stages[j];
            double b = 0;
            for (int l = st->layer_first; l < st->layer_last; l++) {
                ah_layer_kind kind = ah_model_layer_kind(cfg, l);
                b += 4.0 * 4.0 * ah_layer_params(cfg, kind) / p->tp;
                b += ah_layer_act_bytes(cfg, kind, p->train.seq, p->micro_batch, p->tp, AH_RECOMPUTE_NONE,
                                        AH_PRECISION_FP32); /* the CPU engine keeps fp32 activations */
            }
            worst = b > worst ? b : worst;
        }
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    double have = pages > 0 && page > 0 ? (double)pages * (double)page : 0;
    if (have > 0 && worst > have) {
        snprintf(err, errlen,
                 "micro-batch %d x seq %d: a rank needs at least %.1f GiB of memory (fp32 parameters, gradients, "
                 "AdamW moments and one micro-batch's activations), this machine has %.1f GiB; use a "
                 "smaller --micro-batch or --seq, or a plan with more stages",
                 p->micro_batch, p->train.seq, worst / 1073741824.0, have / 1073741824.0);
        return -1;
    }
    return 0;
}

ah_executor *ah_executor_create(MPI_Comm comm, const ah_plan *plan, const ah_model_config *cfg,
                                const ah_dataset *data, const ah_optim_config *oc, uint64_t seed,
                                int init_params, double peak_flops_per_rank, char *err, size_t errlen) {
    /* Activation and gradient buffers are allocated per layer and micro-batch;
     * keep freed memory in the heap instead of returning it to the kernel, or
     * every kernel's first writes page-fault (it halved the step time of a
     * GPT-2-124M-shaped model: 35% -> 69% of the sgemm peak). */
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    ah_executor *x = calloc(1, sizeof *x);
    if (!x)
        abort();
    ah_plan_copy(&x->plan, plan);
    ah_plan *p = &x->plan;
    x->cfg = *cfg;
    x->data = data;
    x->oc = *oc;
    x->seed = seed;
    x->peak = peak_flops_per_rank;
    x->tp_comm = MPI_COMM_NULL;
    x->comm = comm;
    MPI_Comm_rank(comm, &x->rank);
    MPI_Comm_size(comm, &x->world);
    int L = ah_model_num_layers(cfg), slots = 0, rc = 0;
    for (int k = 0; k < p->n_replicas; k++)
        slots += p->replicas[k].n_stages * p->tp;
    if (slots != x->world) {
        snprintf(err, errlen,
                 "the plan has %d GPU slots (replicas x stages x tp) but %d MPI ranks were started", slots,
                 x->world);
        rc = -1;
    }
    for (int k = 0; k < p->n_replicas && rc == 0; k++) {
        int expect = 0;
        for (int j = 0; j < p->replicas[k].n_stages && rc == 0; j++) {
            const ah_stage *s = &p->replicas[k].stages[j];
            if (s->layer_first != expect || s->layer_last <= s->layer_first || s->layer_last > L) {
                snprintf(err, errlen, "plan: replica %d does not cover the model's %d layers exactly once", k,
                         L);
                rc = -1;
            }
            expect = s->layer_last;
        }
        if (rc == 0 && expect != L) {
            snprintf(err, errlen, "plan: replica %d covers layers [0,%d), the model has %d", k, expect, L);
            rc = -1;
        }
    }
    long samples = 0;
    for (int k = 0; k < p->n_replicas; k++)
        samples += (long)p->replicas[k].micro_batches * p->micro_batch;
    if (rc == 0 && samples != p->global_batch) {
        snprintf(err, errlen, "plan: micro-batches x micro_batch = %ld, global batch is %d", samples,
                 p->global_batch);
        rc = -1;
    }
    if (rc == 0)
        rc = check_memory(p, cfg, err, errlen);
    /* my slot */
    int row = 0;
    for (int k = 0; k < p->n_replicas && rc == 0; k++) {
        for (int j = 0; j < p->replicas[k].n_stages; j++)
            for (int r = 0; r < p->tp; r++)
                if (slot_rank(p, k, j, r) == x->rank) {
                    x->replica = k;
                    x->stage = j;
                    x->tp_rank = r;
                    x->row0 = row;
                }
        row += p->replicas[k].micro_batches * p->micro_batch;
    }
    if (rc == 0) {
        const ah_replica *rep = &p->replicas[x->replica];
        const ah_stage *st = &rep->stages[x->stage];
        x->n_stages = rep->n_stages;
        x->tp = p->tp;
        x->m = rep->micro_batches;
        x->prev = x->stage > 0 ? slot_rank(p, x->replica, x->stage - 1, x->tp_rank) : -1;
        x->next = x->stage + 1 < x->n_stages ? slot_rank(p, x->replica, x->stage + 1, x->tp_rank) : -1;
        x->slowdown = p->cluster.nodes[st->node].dev.slowdown;
        if (ah_engine_model_init(&x->model, cfg, p->train.seq, p->micro_batch, st->layer_first,
                                 st->layer_last, p->tp, x->tp_rank, seed, init_params, err, errlen) != 0)
            rc = -1;
    }
    /* agree on success before creating communicators (they are collective) */
    int bad = rc != 0, any_bad = 0;
    MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, x->comm);
    if (any_bad) {
        if (!bad)
            snprintf(err, errlen, "another rank could not set up its part of the plan");
        ah_executor_free(x);
        return NULL;
    }
    /* TP group: the ranks of my stage */
    int stage_id = slot_rank(p, x->replica, x->stage, 0);
    MPI_Comm_split(x->comm, stage_id, x->tp_rank, &x->tp_comm);
    x->model.comm.allreduce = tp_allreduce_cb;
    x->model.comm.ctx = x;
    /* buckets: maximal layer runs whose holder stage is the same in every replica */
    int R = p->n_replicas;
    int *holder = calloc((size_t)L * R + 1, sizeof(int));
    x->buckets = calloc((size_t)L + 1, sizeof(bucket));
    if (!holder || !x->buckets)
        abort();
    for (int k = 0; k < R; k++)
        for (int j = 0; j < p->replicas[k].n_stages; j++)
            for (int l = p->replicas[k].stages[j].layer_first; l < p->replicas[k].stages[j].layer_last; l++)
                holder[l * R + k] = j;
    for (int l = 0, n_global = 0; l < L && R > 1;) {
        int e = l + 1;
        while (e < L && !memcmp(&holder[e * R], &holder[l * R], sizeof(int) * (size_t)R))
            e++;
        int member = holder[l * R + x->replica] == x->stage;
        MPI_Comm c;
        MPI_Comm_split(x->comm, member ? x->tp_rank : MPI_UNDEFINED, x->replica, &c);
        if (member) {
            x->buckets[x->n_buckets].index = n_global;
            x->buckets[x->n_buckets].first = l;
            x->buckets[x->n_buckets].last = e;
            x->buckets[x->n_buckets].comm = c;
            MPI_Comm_size(c, &x->buckets[x->n_buckets].size);
            MPI_Allreduce(&x->rank, &x->buckets[x->n_buckets].lead, 1, MPI_INT, MPI_MIN, c);
            x->n_buckets++;
        }
        l = e;
        n_global++;
    }
    /* tied embeddings: layer 0 and the head hold copies of one matrix */
    x->tie_partner = -1;
    if (cfg->tied_embeddings) {
        const ah_replica *rep = &p->replicas[x->replica];
        int has0 = x->stage == 0, hasH = x->stage == rep->n_stages - 1;
        if (has0 && hasH)
            x->tie_partner = -2;
        else if (has0)
            x->tie_partner = slot_rank(p, x->replica, rep->n_stages - 1, x->tp_rank);
        else if (hasH)
            x->tie_partner = slot_rank(p, x->replica, 0, x->tp_rank);
    }
    free(holder);
    return x;
}

void ah_executor_free(ah_executor *x) {
    if (!x)
        return;
    for (int i = 0; i < x->n_buckets; i++)
        MPI_Comm_free(&x->buckets[i].comm);
    free(x->buckets);
    if (x->tp_comm != MPI_COMM_NULL)
        MPI_Comm_free(&x->tp_comm);
    ah_executor_persist_abandon(x);
    free(x->last_mem);
    ah_engine_model_free(&x->model);
    ah_plan_free(&x->plan);
    ah_trace_recorder_free(&x->trace);
    free(x);
}

int ah_executor_rank(const ah_executor *x) {
    return x->rank;
}

static size_t tied_size(const ah_executor *x) {
    return ah_engine_tied_size(&x->model);
}

/* Sum the gradients of the two copies of a tied embedding matrix. */
static void sync_tied(ah_executor *x) {
    if (x->tie_partner == -1)
        return;
    ah_engine_model *e = &x->model;
    if (x->tie_partner == -2) {
        ah_engine_tied_sum_local(e);
        return;
    }
    size_t n = tied_size(x);
    int head = x->stage != 0;
    const ah_backend *be = e->be;
    ah_dptr theirs = ah_be_alloc(be, n);
    ah_engine_sync(e);
    MPI_Sendrecv(ah_dptr_transport(ah_engine_tied_grad(e, head)), (int)n, MPI_FLOAT, x->tie_partner, 77,
                 ah_dptr_transport(theirs), (int)n, MPI_FLOAT, x->tie_partner, 77, x->comm, MPI_STATUS_IGNORE);
    /* the same sum on both sides: embedding + head */
    ah_engine_tied_add(e, head, theirs);
    ah_be_free(be, theirs);
}

/* Sum of squares of the gradients this rank counts towards the global norm:
 * replica 0 only, replicated tensors on TP rank 0 only, a tied head once. */
static double my_sumsq(ah_executor *x) {
    return x->replica != 0 ? 0 : ah_engine_grad_sumsq(&x->model);
}

typedef struct {
    int *tok, *tgt;
} mb_data;

static double run_forward_only(ah_executor *x, int validation, int step, double *tokens_counted) {
    /* the validation batch: same shape as a training batch, drawn from the validation split */
    ah_engine_model *e = &x->model;
    int T = e->T, B = e->B, C = e->cfg.hidden;
    size_t NC = (size_t)B * T * C;
    int held = e->last - e->first;
    ah_dptr in = ah_be_alloc(e->be, NC), out = ah_be_alloc(e->be, NC);
    int *tok = calloc((size_t)B * T, sizeof(int)), *tgt = calloc((size_t)B * T, sizeof(int));
    ah_eng_acts *acts = calloc((size_t)held, sizeof(ah_eng_acts));
    if (!tok || !tgt || !acts)
        abort();
    double loss = 0;
    for (int i = 0; i < x->m; i++) {
        ah_dataset_batch(x->data, validation, x->seed, step, x->row0 + i * B, B, T, tok, tgt);
        ah_engine_sync(e);
        if (x->prev >= 0)
            MPI_Recv(ah_dptr_transport(in), (int)NC, MPI_FLOAT, x->prev, 3 * i + 2, x->comm, MPI_STATUS_IGNORE);
        double l = 0;
        ah_engine_forward(e, tok, x->prev >= 0 ? in : ah_dptr_null(), tgt, out, &l, acts);
        ah_engine_acts_free(e, acts);
        ah_engine_sync(e);
        if (x->next >= 0)
            MPI_Send(ah_dptr_transport(out), (int)NC, MPI_FLOAT, x->next, 3 * i + 2, x->comm);
        else
            loss += l;
    }
    ah_be_free(e->be, in);
    ah_be_free(e->be, out);
    free(tok);
    free(tgt);
    free(acts);
    double contrib = x->next < 0 && x->tp_rank == 0 ? loss : 0, total = 0;
    MPI_Allreduce(&contrib, &total, 1, MPI_DOUBLE, MPI_SUM, x->comm);
    *tokens_counted = (double)x->plan.global_batch * T;
    return total / *tokens_counted;
}

int ah_executor_step(ah_executor *x, int step, int eval, ah_step_stats *st, char *err, size_t errlen) {
    (void)err;
    (void)errlen;
    ah_engine_model *e = &x->model;
    const ah_plan *p = &x->plan;
    int T = e->T, B = e->B, C = e->cfg.hidden, m = x->m, S = x->n_stages, held = e->last - e->first;
    size_t NC = (size_t)B * T * C;
    double t0 = MPI_Wtime();
    ah_engine_zero_grads(e);
    float loss_scale = 1.0f / ((float)p->global_batch * (float)T);
    ah_compute_op *prog = malloc(sizeof(ah_compute_op) * (size_t)(2 * m));
    ah_eng_acts *acts = calloc((size_t)m * held, sizeof(ah_eng_acts));
    mb_data *md = calloc((size_t)m, sizeof(mb_data));
    ah_dptr *sendbuf = calloc((size_t)(2 * m), sizeof(ah_dptr));
    MPI_Request *req = calloc((size_t)(2 * m), sizeof(MPI_Request));
    const ah_backend *be = e->be;
    ah_dptr in = ah_be_alloc(be, NC), dio = ah_be_alloc(be, NC);
    if (!prog || !acts || !md || !sendbuf || !req)
        abort();
    int nreq = 0;
    double loss = 0;
    ah_schedule_order(AH_SCHED_1F1B, S, 1, x->stage, m, prog);
    for (int o = 0; o < 2 * m; o++) {
        int i = prog[o].micro_batch;
        if (!prog[o].backward) {
            md[i].tok = malloc(sizeof(int) * (size_t)B * T);
            md[i].tgt = malloc(sizeof(int) * (size_t)B * T);
            ah_dataset_batch(x->data, 0, x->seed, step, x->row0 + i * B, B, T, md[i].tok, md[i].tgt);
            ah_engine_sync(e); /* the last op that read `in` is done */
            if (x->prev >= 0)
                TRACED(x, AH_TRACE_RECV_ACTIVATION, i, 3, (double)NC * sizeof(float), 2,
                       x->prev < x->rank ? x->prev : x->rank, x->prev,
                       MPI_Recv(ah_dptr_transport(in), (int)NC, MPI_FLOAT, x->prev, 3 * i, x->comm,
                                MPI_STATUS_IGNORE));
            ah_dptr out = x->next >= 0 ? ah_be_alloc(be, NC) : ah_dptr_null();
            double l = 0, c0 = MPI_Wtime();
            ah_engine_forward(e, md[i].tok, x->prev >= 0 ? in : ah_dptr_null(), md[i].tgt, out, &l,
                              acts + (size_t)i * held);
            ah_engine_sync(e);
            sleep_s((x->slowdown - 1.0) * (MPI_Wtime() - c0)); /* emulated slower device */
            rec(x, AH_TRACE_FORWARD, c0, MPI_Wtime(), i, -1, 0, 1, x->rank, -1);
            if (x->next >= 0) {
                sendbuf[nreq] = out;
                TRACED(x, AH_TRACE_SEND_ACTIVATION, i, 6, (double)NC * sizeof(float), 2, x->rank, x->next,
                       MPI_Isend(ah_dptr_transport(out), (int)NC, MPI_FLOAT, x->next, 3 * i, x->comm,
                                 &req[nreq++]));
            } else {
                loss += l;
            }
        } else {
            ah_engine_sync(e); /* the last op that read `dio` is done */
            if (x->next >= 0)
                TRACED(x, AH_TRACE_RECV_GRADIENT, i, 4, (double)NC * sizeof(float), 2, x->rank, x->next,
                       MPI_Recv(ah_dptr_transport(dio), (int)NC, MPI_FLOAT, x->next, 3 * i + 1, x->comm,
                                MPI_STATUS_IGNORE));
            ah_dptr din = x->prev >= 0 ? ah_be_alloc(be, NC) : ah_dptr_null();
            double c0 = MPI_Wtime();
            ah_engine_backward(e, md[i].tok, md[i].tgt, x->next >= 0 ? dio : ah_dptr_null(), din, loss_scale,
                               acts + (size_t)i * held);
            ah_engine_sync(e);
            sleep_s((x->slowdown - 1.0) * (MPI_Wtime() - c0));
            rec(x, AH_TRACE_BACKWARD, c0, MPI_Wtime(), i, -1, 0, 1, x->rank, -1);
            if (x->prev >= 0) {
                sendbuf[nreq] = din;
                TRACED(x, AH_TRACE_SEND_GRADIENT, i, 7, (double)NC * sizeof(float), 2, x->prev, x->prev,
                       MPI_Isend(ah_dptr_transport(din), (int)NC, MPI_FLOAT, x->prev, 3 * i + 1, x->comm,
                                 &req[nreq++]));
            }
            free(md[i].tok);
            free(md[i].tgt);
        }
    }
    TRACED(x, AH_TRACE_SEND_WAIT, -1, 5, 0, 2, x->rank, -1, MPI_Waitall(nreq, req, MPI_STATUSES_IGNORE));
    for (int i = 0; i < nreq; i++)
        ah_be_free(be, sendbuf[i]);
    /* gradients: tied copies, then the layer-wise all-reduce of every bucket */
    if (x->tie_partner >= 0)
        TRACED(x, AH_TRACE_TIED_SYNC, -1, 2, (double)tied_size(x) * sizeof(float), 2,
               x->rank < x->tie_partner ? x->rank : x->tie_partner, -1, sync_tied(x));
    else
        sync_tied(x); /* both copies here: a local add, or nothing */
    ah_engine_sync(e);
    for (int b = 0; b < x->n_buckets; b++)
        for (int l = x->buckets[b].first; l < x->buckets[b].last; l++) {
            size_t ln = ah_engine_layer_floats(e, l);
            void *grad = ah_dptr_transport(ah_engine_layer_state(e, l, AH_STATE_GRAD));
            double ta = x->trace.on ? MPI_Wtime() : 0;
            MPI_Allreduce(MPI_IN_PLACE, grad, (int)ln, MPI_FLOAT, MPI_SUM, x->buckets[b].comm);
            ah_trace_event *te = x->trace.on ? rec(x, AH_TRACE_DP_ALLREDUCE, ta, MPI_Wtime(), -1, 8 + b,
                                                   (double)ln * sizeof(float), x->buckets[b].size,
                                                   x->buckets[b].lead, -1)
                                             : NULL;
            if (te) {
                te->layer_first = x->buckets[b].first;
                te->layer_last = x->buckets[b].last;
                te->bucket = x->buckets[b].index;
            }
        }
    /* loss of the global batch, global gradient norm, clipping, AdamW */
    double sums[2] = {x->next < 0 && x->tp_rank == 0 ? loss : 0, my_sumsq(x)}, tot[2];
    TRACED(x, AH_TRACE_STEP_SYNC, -1, 0, 16, x->world, 0, -1,
           MPI_Allreduce(sums, tot, 2, MPI_DOUBLE, MPI_SUM, x->comm));
    double to0 = MPI_Wtime();
    double norm = sqrt(tot[1]);
    float clip = ah_clip_factor(norm, x->oc.grad_clip);
    float lr = ah_lr_at(&x->oc, step);
    ah_engine_clip_and_step(e, clip, lr, step + 1, &x->oc);
    ah_engine_sync(e);
    rec(x, AH_TRACE_OPTIMIZER, to0, MPI_Wtime(), -1, -1, 0, 1, x->rank, -1);
    double dt = MPI_Wtime() - t0;
    double toks = (double)p->global_batch * T;
    st->step = step;
    st->loss = tot[0] / toks;
    st->lr = lr;
    st->grad_norm = norm;
    st->step_s = dt;
    st->tokens_per_s = toks / dt;
    double flops = (double)p->global_batch * ah_model_flops_per_sequence(&x->cfg, T);
    st->tflops = flops / dt / 1e12;
    st->mfu = x->peak > 0 ? flops / dt / (x->peak * x->world) : 0;
    st->val_loss = -1;
    if (eval) {
        double counted;
        st->val_loss = run_forward_only(x, 1, step, &counted);
    }
    free(prog);
    free(acts);
    free(md);
    free(sendbuf);
    free(req);
    ah_be_free(be, in);
    ah_be_free(be, dio);
    (void)C;
    return 0;
}

int ah_executor_gather_params(ah_executor *x, float **out, size_t *n) {
    /* every layer: full-size buffer summed over the TP group of its replica-0
     * holder, then sent to rank 0 */
    int L = ah_model_num_layers(&x->cfg);
    ah_engine_model *e = &x->model;
    size_t total = 0, *off = calloc((size_t)L + 1, sizeof(size_t));
    if (!off)
        abort();
    /* sizes of full layers: a TP=1 description of each layer */
    ah_engine_model full;
    char err[128];
    if (ah_engine_model_init(&full, &x->cfg, e->T, e->B, 0, L, 1, 0, 0, 0, err, sizeof err) != 0) {
        free(off);
        return -1;
    }
    for (int l = 0; l < L; l++) {
        off[l] = total;
        total += full.layers[l].n;
    }
    off[L] = total;
    ah_engine_model_free(&full);
    float *all = x->rank == 0 ? calloc(total + 1, sizeof(float)) : NULL;
    for (int l = 0; l < L; l++) {
        size_t ln = off[l + 1] - off[l];
        int mine = x->replica == 0 && l >= e->first && l < e->last;
        float *buf = calloc(ln + 1, sizeof(float));
        if (!buf)
            abort();
        if (mine)
            ah_engine_layer_to_full(e, l, 0, buf);
        /* owner: TP rank 0 of the replica-0 stage holding l */
        int owner = -1;
        for (int j = 0; j < x->plan.replicas[0].n_stages; j++)
            if (l >= x->plan.replicas[0].stages[j].layer_first &&
                l < x->plan.replicas[0].stages[j].layer_last)
                owner = slot_rank(&x->plan, 0, j, 0);
        if (mine)
            MPI_Reduce(x->tp_rank == 0 ? MPI_IN_PLACE : buf, buf, (int)ln, MPI_FLOAT, MPI_SUM, 0, x->tp_comm);
        if (owner == 0) {
            if (x->rank == 0)
                memcpy(all + off[l], buf, ln * sizeof(float));
        } else if (x->rank == owner) {
            MPI_Send(buf, (int)ln, MPI_FLOAT, 0, 99, x->comm);
        } else if (x->rank == 0) {
            MPI_Recv(all + off[l], (int)ln, MPI_FLOAT, owner, 99, x->comm, MPI_STATUS_IGNORE);
        }
        free(buf);
    }
    free(off);
    *out = all;
    *n = total;
    return 0;
}

void ah_executor_trace_enable(ah_executor *x) {
    if (x->trace.on)
        return;
    ah_trace_recorder_init(&x->trace, x->rank);
    x->trace.on = 1;
}

/* Rank 0's file: every rank named after its slot and node, the earliest
 * event at time 0. */
static int write_gathered_trace(const ah_executor *x, const char *path, const ah_trace_event *all, int total,
                                char *err, size_t errlen) {
    const ah_plan *p = &x->plan;
    ah_trace_rank *rk = calloc((size_t)x->world, sizeof(ah_trace_rank));
    char(*where)[160] = calloc((size_t)x->world, sizeof *where);
    if (!rk || !where)
        abort();
    for (int k = 0; k < p->n_replicas; k++)
        for (int j = 0; j < p->replicas[k].n_stages; j++)
            for (int q = 0; q < p->tp; q++) {
                int r = slot_rank(p, k, j, q), nd = p->replicas[k].stages[j].node;
                if (r >= x->world)
                    continue;
                rk[r] = (ah_trace_rank){k, j, q, NULL};
                if (nd >= 0 && nd < p->cluster.n_nodes) {
                    snprintf(where[r], sizeof where[r], "%s (%s)", p->cluster.nodes[nd].name,
                             p->cluster.nodes[nd].dev.name);
                    rk[r].where = where[r];
                }
            }
    double origin = 1e300;
    for (int i = 0; i < total; i++)
        if (all[i].t0 < origin)
            origin = all[i].t0;
    ah_trace_doc d = {.source = "engine", .origin_s = total ? origin : 0, .ranks = rk, .n_ranks = x->world};
    int rc = 0;
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, errlen, "--trace %s: cannot open for writing", path);
        rc = -1;
    } else {
        rc = ah_trace_write_chrome(f, all, total, &d, err, errlen);
        if (fclose(f) != 0 && rc == 0) {
            snprintf(err, errlen, "--trace %s: write error", path);
            rc = -1;
        }
    }
    free(rk);
    free(where);
    return rc;
}

/* Gather every rank's events to rank 0 and write them as one Chrome trace
 * (autohet/trace.h: one process per rank, a thread per stream). */
int ah_executor_write_trace(ah_executor *x, const char *path, char *err, size_t errlen) {
    int n = x->trace.n;
    int *counts = x->rank == 0 ? calloc((size_t)x->world, sizeof(int)) : NULL;
    MPI_Gather(&n, 1, MPI_INT, counts, 1, MPI_INT, 0, x->comm);
    int *displ = NULL, total = 0;
    ah_trace_event *all = NULL;
    MPI_Datatype t;
    MPI_Type_contiguous((int)sizeof(ah_trace_event), MPI_BYTE, &t);
    MPI_Type_commit(&t);
    if (x->rank == 0) {
        displ = calloc((size_t)x->world, sizeof(int));
        for (int r = 0; r < x->world; r++) {
            displ[r] = total;
            total += counts[r];
        }
        all = malloc(sizeof(ah_trace_event) * (size_t)(total + 1));
        if (!displ || !all)
            abort();
    }
    MPI_Gatherv(x->trace.ev, n, t, all, counts, displ, t, 0, x->comm);
    MPI_Type_free(&t);
    int rc = x->rank == 0 ? write_gathered_trace(x, path, all, total, err, errlen) : 0;
    free(counts);
    free(displ);
    free(all);
    MPI_Bcast(&rc, 1, MPI_INT, 0, x->comm);
    return rc;
}
