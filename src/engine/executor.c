/* Plan execution (see executor.h and docs/engine.md): setting up this rank's
 * part of a plan from its schedule program — its layer chunks, its groups —
 * and gathering parameters. The step itself is in executor_step.c. */
#include "engine/executor_internal.h"

#include <malloc.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cblas.h>

#include "autohet/ckpt.h"
#include "autohet/schedule.h"
#include "util/errors.h"

static void tp_allreduce_cb(ah_dptr buf, size_t n, void *ctx) {
    ah_executor *x = ctx;
    AH_EXEC_TRACED(x, AH_OP_TP_ALLREDUCE, -1, ah_op_kind_site(AH_OP_TP_ALLREDUCE), (double)n * sizeof(float), x->tp, x->rank - x->tp_rank, -1,
                   ah__tr_allreduce_sum_f32(x->tr, x->tp_group, ah__dptr_transport(buf), n));
}

ah_engine_model *ah__exec_model_of(const ah_executor *x, int l) {
    for (int c = 0; c < x->n_chunks; c++)
        if (l >= x->chunks[c].first && l < x->chunks[c].last)
            return &x->chunks[c];
    return NULL;
}

int ah__exec_n_held(const ah_executor *x) {
    int n = 0;
    for (int c = 0; c < x->n_chunks; c++)
        n += x->chunks[c].last - x->chunks[c].first;
    return n;
}

int ah__exec_held_layer(const ah_executor *x, int i) {
    for (int c = 0; c < x->n_chunks; c++) {
        int n = x->chunks[c].last - x->chunks[c].first;
        if (i < n)
            return x->chunks[c].first + i;
        i -= n;
    }
    return -1;
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
                b += 4.0 * 4.0 * ah_layer_params(cfg, kind) / st->tp;
                b += ah_layer_act_bytes(cfg, kind, p->train.seq, p->micro_batch, st->tp, AH_RECOMPUTE_NONE,
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

/* The plan's structure (the one validator), its size against the ranks
 * started, the batch shape against this machine. The same answer on every
 * rank. */
static int check_plan(ah_executor *x, char *err, size_t errlen) {
    const ah_plan *p = &x->plan;
    int slots = ah_plan_slots(p);
    if (slots != x->world) {
        snprintf(err, errlen,
                 "the plan has %d GPU slots (replicas x stages x tp) but %d MPI ranks were started", slots,
                 x->world);
        return -1;
    }
    if (ah_plan_validate(p, err, errlen) != 0)
        return -1;
    return check_memory(p, &x->cfg, err, errlen); /* the schedule's own conditions: ah_schedule_build */
}

/* After each layer of a backward with --overlap-dp: the started all-reduces move on. */
static void progress_collectives(void *arg) {
    ah_executor *x = arg;
    x->tr->progress(x->tr->ctx);
}

/* My slot, my stage's program and chunk models. */
static int setup_my_part(ah_executor *x, ah_schedule s, int V, int overlap_dp, int init_params, char *err,
                         size_t errlen) {
    const ah_plan *p = &x->plan;
    ah_slot me;
    if (ah_rank_slot(p, x->rank, &me) != 0) {
        snprintf(err, errlen, "rank %d has no slot in the plan", x->rank);
        return -1;
    }
    x->replica = me.replica;
    x->stage = me.stage;
    x->tp_rank = me.tp_rank;
    for (int k = 0; k < x->replica; k++)
        x->row0 += p->replicas[k].micro_batches * p->micro_batch;
    const ah_replica *rep = &p->replicas[x->replica];
    x->n_stages = rep->n_stages;
    x->tp = rep->stages[x->stage].tp;
    x->m = rep->micro_batches;
    x->slowdown = p->cluster.nodes[rep->stages[x->stage].node].dev.slowdown;
    ah_schedule_options so = {
        .schedule = s,
        .virtual_stages = V,
        .act_bytes = (double)p->micro_batch * p->train.seq * x->cfg.hidden * sizeof(float),
        .tied_bytes = x->cfg.tied_embeddings ? (double)x->cfg.vocab * x->cfg.hidden * sizeof(float) : 0,
        .overlap_dp = overlap_dp,
    };
    if (ah_schedule_build(p, &so, &x->sched, err, errlen) != 0)
        return -1;
    x->prog = ah_schedule_program_of(&x->sched, x->replica, x->stage);
    x->eval_prog = ah_schedule_eval_program_of(&x->sched, x->replica, x->stage);
    x->chunks = ah_xcalloc((size_t)x->sched.V, sizeof(ah_engine_model));
    for (int c = 0; c < x->sched.n_chunks[x->replica]; c++) {
        const ah_chunk *ch = &x->sched.chunks[x->replica][c];
        if (ch->stage != x->stage)
            continue;
        if (ah__engine_model_init_prec(&x->chunks[x->n_chunks], &x->cfg, p->train.seq, p->micro_batch, ch->first,
                                      ch->last, x->tp, x->tp_rank, x->seed, init_params, x->prec, err,
                                      errlen) != 0)
            return -1;
        if (overlap_dp) {
            x->chunks[x->n_chunks].after_layer = progress_collectives;
            x->chunks[x->n_chunks].after_layer_arg = x;
        }
        x->n_chunks++;
    }
    return 0;
}

/* The tied-embedding exchange of my stage (stage 0 or the last): the rank I
 * take the other copy's gradient from, and the ranks I send mine to (rule 1
 * of per-stage TP between the two stages; one partner each way when their
 * degrees are equal). */
static void setup_tied(ah_executor *x) {
    const ah_plan *p = &x->plan;
    x->tie_partner = -1;
    for (int i = 0; i < x->prog->n_ops; i++)
        if (x->prog->ops[i].kind == AH_OP_TIED_SYNC) {
            int peer = x->prog->ops[i].peer_stage;
            if (peer == x->stage) {
                x->tie_partner = -2;
                continue;
            }
            int their_tp = p->replicas[x->replica].stages[peer].tp, q[AH_MAX_TP];
            x->tie_partner = ah_slot_rank(p, x->replica, peer, ah_tp_source(x->tp_rank, their_tp));
            x->n_tie_targets = ah_tp_targets(x->tp_rank, x->tp, their_tp, q);
            for (int k = 0; k < x->n_tie_targets; k++)
                x->tie_targets[k] = ah_slot_rank(p, x->replica, peer, q[k]);
        }
}

/* The groups my program needs: my stage's TP group, one group per gradient
 * bucket (its holders with my TP rank; every rank takes part in every split,
 * in bucket order; a bucket whose holders have different degrees gets its
 * slice groups instead, executor_slices.c), and the tied-embedding peers. */
static void setup_groups(ah_executor *x) {
    const ah_plan *p = &x->plan;
    ah_transport *t = x->tr;
    t->split(t->ctx, t->world, ah_slot_rank(p, x->replica, x->stage, 0), x->tp_rank, &x->tp_group);
    for (int c = 0; c < x->n_chunks; c++) {
        x->chunks[c].comm.allreduce = tp_allreduce_cb;
        x->chunks[c].comm.ctx = x;
    }
    x->bgroups = ah_xcalloc((size_t)x->sched.n_buckets + 1, sizeof(bucket_group));
    for (int q = 0; q < x->sched.n_buckets; q++) {
        bucket_group *b = &x->bgroups[q];
        if (!ah_bucket_uniform_tp(p, &x->sched.buckets[q])) {
            ah__exec_mixed_bucket_setup(x, q, b);
            continue;
        }
        int member = x->sched.buckets[q].holder[x->replica] == x->stage;
        t->split(t->ctx, t->world, member ? x->tp_rank : -1, x->replica, &b->group);
        if (b->group) {
            b->size = t->group_size(t->ctx, b->group);
            b->lead = x->rank;
            t->allreduce(t->ctx, b->group, &b->lead, 1, AH_DT_I32, AH_RED_MIN);
        }
    }
    setup_tied(x);
}

void ah_executor_config_default(ah_executor_config *c) {
    memset(c, 0, sizeof *c);
    c->comm = MPI_COMM_WORLD;
    c->init_params = 1;
    c->schedule = AH_SCHED_1F1B;
    c->precision = AH_MATMUL_FP32;
}

ah_executor *ah_executor_create(const ah_executor_config *c, char *err, size_t errlen) {
    MPI_Comm comm = c->comm;
    const ah_plan *plan = c->plan;
    const ah_model_config *cfg = c->model;
    const ah_dataset *data = c->data;
    const ah_optim_config *oc = c->optim;
    uint64_t seed = c->seed;
    int init_params = c->init_params, virtual_stages = c->virtual_stages;
    double peak_flops_per_rank = c->peak_flops_per_rank;
    ah_schedule schedule = c->schedule;
    /* Activation and gradient buffers are allocated per layer and micro-batch;
     * keep freed memory in the heap instead of returning it to the kernel, or
     * every kernel's first writes page-fault (it halved the step time of a
     * GPT-2-124M-shaped model: 35% -> 69% of the sgemm peak). */
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    ah_executor *x = ah_xcalloc(1, sizeof *x);
    ah_plan_copy(&x->plan, plan);
    x->cfg = *cfg;
    x->data = data;
    x->oc = *oc;
    x->seed = seed;
    x->prec = c->precision;
    x->peak = peak_flops_per_rank;
    x->comm = comm;
    x->tr = ah__transport_mpi(&comm);
    x->rank = x->tr->rank;
    x->world = x->tr->size;
    int V = schedule == AH_SCHED_INTERLEAVED ? (virtual_stages > 0 ? virtual_stages : 2) : 1;
    int rc = check_plan(x, err, errlen);
    if (rc == 0)
        rc = setup_my_part(x, schedule, V, c->overlap_dp, init_params, err, errlen);
    if (rc == 0 && c->emulate) {
        rc = ah_plan_stage_op_times(&x->plan, c->emulate, x->replica, x->stage, &x->emu, err, errlen);
        x->emulate = rc == 0;
        /* an emulated op ends by sleeping to its modelled time: without this, Linux lets each sleep run up to
         * 50 us late (the default timer slack), time the device would not lose */
        if (x->emulate)
            prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    }
    /* agree on success before creating groups (they are collective) */
    int bad = rc != 0;
    x->tr->allreduce(x->tr->ctx, x->tr->world, &bad, 1, AH_DT_I32, AH_RED_MAX);
    if (bad) {
        if (rc == 0)
            snprintf(err, errlen, "another rank could not set up its part of the plan");
        ah_executor_free(x);
        return NULL;
    }
    setup_groups(x);
    ah__exec_store_init(x);
    return x;
}

void ah_executor_free(ah_executor *x) {
    if (!x)
        return;
    for (int q = 0; x->bgroups && q < x->sched.n_buckets; q++) {
        if (x->bgroups[q].group)
            x->tr->group_free(x->tr->ctx, x->bgroups[q].group);
        if (x->bgroups[q].T)
            ah__exec_mixed_bucket_free(x, &x->bgroups[q]);
    }
    free(x->bgroups);
    if (x->tp_group)
        x->tr->group_free(x->tr->ctx, x->tp_group);
    for (int c = 0; c < x->n_chunks; c++)
        ah__engine_model_free(&x->chunks[c]);
    free(x->chunks);
    ah_schedule_plan_free(&x->sched);
    ah_stage_op_times_free(&x->emu);
    ah__transport_free(x->tr);
    ah_plan_free(&x->plan);
    ah_trace_recorder_free(&x->trace);
    free(x->clock_start);
    free(x);
}

int ah_executor_rank(const ah_executor *x) {
    return x->rank;
}

/* Every layer of one replica as one rank holds it: each layer's TP shards
 * scattered into a full-size buffer and summed over the TP group of its
 * holder, then sent to rank 0. Host data over the transport. */
int ah_executor_gather_params(ah_executor *x, int replica, float **out, size_t *n) {
    if (replica < 0 || replica >= x->plan.n_replicas)
        return -1;
    int L = ah_model_num_layers(&x->cfg);
    ah_engine_model *e0 = &x->chunks[0];
    size_t total = 0, *off = ah_xcalloc((size_t)L + 1, sizeof(size_t));
    /* sizes of full layers: a TP=1 description of each layer */
    ah_engine_model full;
    char err[128];
    if (ah__engine_model_init(&full, &x->cfg, e0->T, e0->B, 0, L, 1, 0, 0, 0, err, sizeof err) != 0) {
        free(off);
        return -1;
    }
    for (int l = 0; l < L; l++) {
        off[l] = total;
        total += full.layers[l].n;
    }
    off[L] = total;
    ah__engine_model_free(&full);
    float *all = x->rank == 0 ? ah_xcalloc(total + 1, sizeof(float)) : NULL;
    ah_transport *t = x->tr;
    for (int l = 0; l < L; l++) {
        size_t ln = off[l + 1] - off[l];
        ah_engine_model *e = x->replica == replica ? ah__exec_model_of(x, l) : NULL;
        float *buf = ah_xcalloc(ln + 1, sizeof(float));
        if (e)
            ah__engine_layer_to_full(e, l, 0, buf);
        /* owner: TP rank 0 of the replica's stage holding l */
        int owner = ah_slot_rank(&x->plan, replica, ah_schedule_chunk_of(&x->sched, replica, l)->stage, 0);
        if (e)
            t->reduce(t->ctx, x->tp_group, buf, ln, AH_DT_F32, 0);
        if (owner == 0) {
            if (x->rank == 0)
                memcpy(all + off[l], buf, ln * sizeof(float));
        } else if (x->rank == owner) {
            t->send(t->ctx, buf, ln * sizeof(float), 0, 99);
            t->wait_sends(t->ctx);
        } else if (x->rank == 0) {
            t->recv(t->ctx, all + off[l], ln * sizeof(float), owner, 99);
        }
        free(buf);
    }
    free(off);
    *out = all;
    *n = total;
    return 0;
}

void ah_executor_emulation_stats(const ah_executor *x, ah_emulation_stats *st) {
    st->ops = x->emu_ops;
    st->overruns = x->emu_overruns;
    st->worst_s = x->emu_worst_s;
    st->late_s = x->emu_late_s;
}
