/* The gradient sync of a bucket whose holders have different TP degrees
 * (rule 2 of per-stage TP, docs/engine.md "Per-stage TP"). With T the largest
 * degree among the holders, each layer's TP-split tensors are cut into the T
 * shards of the TP=T layout; a holder of degree t at TP rank q owns slices
 * q T/t .. (q+1) T/t - 1 and all-reduces each with its other owners (one rank
 * per replica). The replicated tensors (norms, unsplit biases, embeddings)
 * are summed over every holder rank, TP rank 0 of each replica contributing
 * its copy and the others zeros, so that each replica counts once and every
 * TP rank ends with the same sum. The slice layout comes from the model's
 * own tensor tables (ah__engine_layer_describe), not a second description. */
#include <stdlib.h>
#include <string.h>

#include "engine/executor_internal.h"
#include "util/errors.h"

/* the world rank of TP rank q of bucket holder in replica k */
static int holder_rank(const ah_executor *x, const ah_bucket *bk, int k, int q) {
    return ah_slot_rank(&x->plan, k, bk->holder[k], q);
}

/* The runs of each slice I own and of the replicated tensors, for held layer l. */
static void map_layer(ah_executor *x, const bucket_group *b, int l, slice_layer *sl, size_t *largest) {
    const ah_engine_model *e = ah__exec_model_of(x, l);
    const ah_eng_layer *mine = &e->layers[l - e->first];
    sl->slice = ah_xcalloc((size_t)b->n_slices, sizeof(ah_float_run *));
    sl->n_slice_runs = ah_xcalloc((size_t)b->n_slices, sizeof(int));
    sl->slice_floats = ah_xcalloc((size_t)b->n_slices, sizeof(size_t));
    for (int i = 0; i < b->n_slices; i++) {
        ah_eng_layer part;
        ah__engine_layer_describe(&x->cfg, l, b->T, b->first_slice + i, &part);
        sl->n_slice_runs[i] = ah__engine_slice_runs(mine, &part, &sl->slice[i]);
        ah__engine_layer_info_free(&part);
        for (int r = 0; r < sl->n_slice_runs[i]; r++)
            sl->slice_floats[i] += sl->slice[i][r].n;
        *largest = sl->slice_floats[i] > *largest ? sl->slice_floats[i] : *largest;
    }
    sl->n_rep = ah__engine_replicated_runs(mine, &sl->rep);
    for (int r = 0; r < sl->n_rep; r++)
        sl->rep_floats += sl->rep[r].n;
    *largest = sl->rep_floats > *largest ? sl->rep_floats : *largest;
}

void ah__exec_mixed_bucket_setup(ah_executor *x, int q, bucket_group *b) {
    const ah_plan *p = &x->plan;
    const ah_bucket *bk = &x->sched.buckets[q];
    ah_transport *t = x->tr;
    int T = ah_bucket_max_tp(p, bk), member = bk->holder[x->replica] == x->stage;
    b->T = T;
    b->n_slices = member ? T / x->tp : 0;
    b->first_slice = member ? x->tp_rank * (T / x->tp) : -1;
    b->slices = ah_xcalloc((size_t)b->n_slices + 1, sizeof(sync_group));
    for (int s = 0; s < T; s++) {
        int mine = member && ah_tp_slice_owner(s, T, x->tp) == x->tp_rank;
        ah_group *g = NULL;
        t->split(t->ctx, t->world, mine ? 0 : -1, x->replica, &g);
        if (!mine)
            continue;
        sync_group *sg = &b->slices[s - b->first_slice];
        sg->group = g;
        sg->size = p->n_replicas;
        sg->lead = x->world;
        for (int k = 0; k < p->n_replicas; k++) {
            int r = holder_rank(x, bk, k, ah_tp_slice_owner(s, T, p->replicas[k].stages[bk->holder[k]].tp));
            sg->lead = r < sg->lead ? r : sg->lead;
        }
    }
    t->split(t->ctx, t->world, member ? 0 : -1, x->rank, &b->rep.group);
    if (!member)
        return;
    b->rep.lead = x->world;
    for (int k = 0; k < p->n_replicas; k++) {
        int r = holder_rank(x, bk, k, 0);
        b->rep.lead = r < b->rep.lead ? r : b->rep.lead;
        b->rep.size += p->replicas[k].stages[bk->holder[k]].tp;
    }
    b->n_layers = bk->last - bk->first;
    b->layers = ah_xcalloc((size_t)b->n_layers, sizeof(slice_layer));
    size_t largest = 0;
    for (int l = bk->first; l < bk->last; l++)
        map_layer(x, b, l, &b->layers[l - bk->first], &largest);
    b->pack = ah__be_alloc(x->chunks[0].be, largest + 1);
    if (x->sched.overlap_dp) {
        size_t all = 0;
        for (int l = 0; l < b->n_layers; l++) {
            for (int i = 0; i < b->n_slices; i++)
                all += b->layers[l].slice_floats[i];
            all += b->layers[l].rep_floats;
        }
        b->staged = ah__be_alloc(x->chunks[0].be, all + 1);
    }
}

void ah__exec_mixed_bucket_free(ah_executor *x, bucket_group *b) {
    ah_transport *t = x->tr;
    for (int i = 0; i < b->n_slices; i++)
        if (b->slices[i].group)
            t->group_free(t->ctx, b->slices[i].group);
    if (b->rep.group)
        t->group_free(t->ctx, b->rep.group);
    for (int l = 0; l < b->n_layers; l++) {
        slice_layer *sl = &b->layers[l];
        for (int i = 0; i < b->n_slices; i++)
            free(sl->slice[i]);
        free(sl->slice);
        free(sl->n_slice_runs);
        free(sl->slice_floats);
        free(sl->rep);
    }
    if (b->layers)
        ah__be_free(x->chunks[0].be, b->pack);
    if (b->layers && x->sched.overlap_dp)
        ah__be_free(x->chunks[0].be, b->staged);
    free(b->layers);
    free(b->slices);
}

/* Copies runs of grad into the packed buffer (to_pack) or back. */
static void move_runs(const ah_backend *be, ah_dptr grad, ah_dptr pack, const ah_float_run *runs, int n,
                      int to_pack) {
    size_t at = 0;
    for (int r = 0; r < n; r++) {
        ah_dptr g = ah__dptr_at(grad, runs[r].off), pk = ah__dptr_at(pack, at);
        ah__be_copy(be, to_pack ? pk : g, to_pack ? g : pk, runs[r].n);
        at += runs[r].n;
    }
}

/* The bucket's trace record of one packed part (its seq names the (layer, slice): see packed_allreduce). */
static void record_part(ah_executor *x, int q, int l, int part, const sync_group *g, size_t n, double t0) {
    const ah_bucket *bk = &x->sched.buckets[q];
    ah_trace_event *te = ah__exec_record(x, AH_OP_DP_ALLREDUCE, t0, ah_now_s(), -1,
                                         ah_op_kind_site(AH_OP_DP_ALLREDUCE) + q, (double)n * sizeof(float), g->size,
                                         g->lead, -1);
    if (te) {
        te->layer_first = bk->first;
        te->layer_last = bk->last;
        te->bucket = q;
        te->seq = (l - bk->first) * (x->bgroups[q].T + 1) + part;
    }
}

/* One all-reduce of a packed part among g, traced as the bucket's: its seq
 * names the (layer, slice) so that every member's record of one collective
 * matches (members take part in different numbers of them). */
static void packed_allreduce(ah_executor *x, int q, int l, int part, const sync_group *g, size_t n) {
    const ah_bucket *bk = &x->sched.buckets[q];
    bucket_group *b = &x->bgroups[q];
    ah__engine_sync(&x->chunks[0]);
    double ta = x->trace.on ? ah_now_s() : 0;
    ah__tr_allreduce_sum_f32(x->tr, g->group, ah__dptr_transport(b->pack), n);
    ah_trace_event *te = x->trace.on ? ah__exec_record(x, AH_OP_DP_ALLREDUCE, ta, ah_now_s(), -1, ah_op_kind_site(AH_OP_DP_ALLREDUCE) + q,
                                                      (double)n * sizeof(float), g->size, g->lead, -1)
                                     : NULL;
    if (te) {
        te->layer_first = bk->first;
        te->layer_last = bk->last;
        te->bucket = q;
        te->seq = (l - bk->first) * (b->T + 1) + part;
    }
}

void ah__exec_mixed_allreduce(ah_executor *x, int q, int l) {
    bucket_group *b = &x->bgroups[q];
    const slice_layer *sl = &b->layers[l - x->sched.buckets[q].first];
    ah_engine_model *e = ah__exec_model_of(x, l);
    ah_dptr grad = ah__engine_layer_state(e, l, AH_STATE_GRAD);
    for (int i = 0; i < b->n_slices; i++) {
        if (sl->slice_floats[i] == 0)
            continue; /* a layer without split tensors: every owner skips it alike */
        move_runs(e->be, grad, b->pack, sl->slice[i], sl->n_slice_runs[i], 1);
        packed_allreduce(x, q, l, b->first_slice + i, &b->slices[i], sl->slice_floats[i]);
        move_runs(e->be, grad, b->pack, sl->slice[i], sl->n_slice_runs[i], 0);
    }
    if (sl->rep_floats == 0)
        return;
    if (x->tp_rank == 0)
        move_runs(e->be, grad, b->pack, sl->rep, sl->n_rep, 1);
    else
        ah__be_zero(e->be, b->pack, sl->rep_floats);
    packed_allreduce(x, q, l, b->T, &b->rep, sl->rep_floats);
    move_runs(e->be, grad, b->pack, sl->rep, sl->n_rep, 0);
}

/* Each part of every layer of bucket q, in the order of ah__exec_mixed_allreduce (slices, then the
 * replicated tensors), at its place in b->staged: packed (to_stage) or unpacked, or (t0 >= 0) traced. */
static void staged_parts(ah_executor *x, int q, int to_stage, int start, double t0) {
    bucket_group *b = &x->bgroups[q];
    const ah_bucket *bk = &x->sched.buckets[q];
    size_t at = 0;
    for (int l = bk->first; l < bk->last; l++) {
        const slice_layer *sl = &b->layers[l - bk->first];
        ah_engine_model *e = ah__exec_model_of(x, l);
        ah_dptr grad = ah__engine_layer_state(e, l, AH_STATE_GRAD);
        for (int i = 0; i <= b->n_slices; i++) {
            int rep = i == b->n_slices;
            size_t n = rep ? sl->rep_floats : sl->slice_floats[i];
            if (n == 0)
                continue;
            ah_dptr part = ah__dptr_at(b->staged, at);
            const sync_group *g = rep ? &b->rep : &b->slices[i];
            if (t0 >= 0) {
                record_part(x, q, l, rep ? b->T : b->first_slice + i, g, n, t0);
            } else if (to_stage) {
                if (rep && x->tp_rank != 0)
                    ah__be_zero(e->be, part, n); /* each replica's copy counts once */
                else
                    move_runs(e->be, grad, part, rep ? sl->rep : sl->slice[i], rep ? sl->n_rep : sl->n_slice_runs[i], 1);
            } else {
                move_runs(e->be, grad, part, rep ? sl->rep : sl->slice[i], rep ? sl->n_rep : sl->n_slice_runs[i], 0);
            }
            if (start) {
                ah__engine_sync(e);
                x->tr->iallreduce(x->tr->ctx, g->group, ah__dptr_transport(part), n, AH_DT_F32, AH_RED_SUM);
            }
            at += n;
        }
    }
}

void ah__exec_mixed_allreduce_start(ah_executor *x, int q) {
    staged_parts(x, q, 1, 1, -1);
}

void ah__exec_mixed_allreduce_finish(ah_executor *x, int q, double t0) {
    staged_parts(x, q, 0, 0, -1);
    if (x->trace.on)
        staged_parts(x, q, 0, 0, t0);
}
