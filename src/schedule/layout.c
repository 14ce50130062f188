/* Where things are: the rank <-> slot map, the chunks of every replica and
 * the gradient buckets with their members. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autohet/schedule.h"
#include "schedule/schedule_internal.h"
#include "util/errors.h"

static int replica_slots(const ah_replica *r) {
    int n = 0;
    for (int j = 0; j < r->n_stages; j++)
        n += r->stages[j].tp;
    return n;
}

int ah_plan_slots(const ah_plan *p) {
    int n = 0;
    for (int k = 0; k < p->n_replicas; k++)
        n += replica_slots(&p->replicas[k]);
    return n;
}

int ah_slot_rank(const ah_plan *p, int replica, int stage, int tp_rank) {
    int idx = 0;
    for (int q = 0; q < replica; q++)
        idx += replica_slots(&p->replicas[q]);
    for (int j = 0; j < stage; j++)
        idx += p->replicas[replica].stages[j].tp;
    return idx + tp_rank;
}

int ah_rank_slot(const ah_plan *p, int rank, ah_slot *out) {
    int idx = 0;
    for (int k = 0; k < p->n_replicas; k++) {
        const ah_replica *r = &p->replicas[k];
        for (int j = 0; j < r->n_stages; j++) {
            if (rank >= idx && rank < idx + r->stages[j].tp) {
                out->replica = k;
                out->stage = j;
                out->tp_rank = rank - idx;
                return 0;
            }
            idx += r->stages[j].tp;
        }
    }
    return -1;
}

int ah_plan_rank_node(const ah_plan *p, int rank, int *layer_first, int *layer_last, int *tp_rank) {
    ah_slot sl;
    if (ah_rank_slot(p, rank, &sl) != 0)
        return -1;
    const ah_stage *s = &p->replicas[sl.replica].stages[sl.stage];
    if (layer_first)
        *layer_first = s->layer_first;
    if (layer_last)
        *layer_last = s->layer_last;
    if (tp_rank)
        *tp_rank = sl.tp_rank;
    return s->node;
}

int ah_schedule_check(const ah_plan *p, ah_schedule s, int V, char *err, size_t errlen) {
    if (s < 0 || s >= AH_SCHED_KINDS) {
        snprintf(err, errlen, "schedule: unknown schedule %d", (int)s);
        return -1;
    }
    if (s != AH_SCHED_INTERLEAVED)
        return 0;
    if (V < 2) {
        snprintf(err, errlen, "schedule interleaved: --virtual-stages must be at least 2 (got %d)", V);
        return -1;
    }
    for (int k = 0; k < p->n_replicas; k++) {
        const ah_replica *r = &p->replicas[k];
        if (r->n_stages < 2) {
            snprintf(err, errlen,
                     "schedule interleaved: replica %d has one stage, nothing to interleave (use 1f1b, or a plan "
                     "with at least 2 stages per replica)",
                     k);
            return -1;
        }
        if (r->micro_batches % r->n_stages != 0) {
            snprintf(err, errlen,
                     "schedule interleaved: replica %d runs %d micro-batches, not a multiple of its %d stages",
                     k, r->micro_batches, r->n_stages);
            return -1;
        }
        for (int j = 0; j < r->n_stages; j++) {
            int n = r->stages[j].layer_last - r->stages[j].layer_first;
            if (n < V) {
                snprintf(err, errlen,
                         "schedule interleaved: replica %d stage %d holds %d layer%s, fewer than the %d virtual "
                         "stages",
                         k, j, n, n == 1 ? "" : "s", V);
                return -1;
            }
        }
    }
    return 0;
}

/* The chunks of replica k in model order: chunk c = v S + j is the v-th chunk
 * of stage j; stage j's layer count is split into V near-equal parts, so
 * every stage keeps the load the plan gave it, the embedding stays on stage 0
 * and the head on stage S-1. The parts one layer longer go where the
 * embedding or the head is (the first chunks of stage 0, the last ones of the
 * head's stage), so that blocks spread evenly over a stage's chunks. */
int ah_schedule_build_chunks(const ah_plan *p, int k, int V, ah_chunk *out) {
    const ah_replica *r = &p->replicas[k];
    int S = r->n_stages, layer = 0, L = ah_model_num_layers(&p->model);
    for (int v = 0; v < V; v++)
        for (int j = 0; j < S; j++) {
            int n = r->stages[j].layer_last - r->stages[j].layer_first;
            int longer = r->stages[j].layer_last == L && r->stages[j].layer_first > 0 ? v >= V - n % V : v < n % V;
            int size = n / V + longer;
            out[v * S + j] = (ah_chunk){layer, layer + size, j, v};
            layer += size;
        }
    return S * V;
}

/* Buckets: maximal layer runs whose holder stage is the same in every
 * replica (none with one replica). */
void ah_schedule_build_buckets(ah_schedule_plan *sp, int L, const double *grad_bytes) {
    int R = sp->n_replicas;
    if (R < 2)
        return;
    int *holder = ah_xcalloc((size_t)L * (size_t)R, sizeof(int));
    for (int k = 0; k < R; k++)
        for (int c = 0; c < sp->n_chunks[k]; c++)
            for (int l = sp->chunks[k][c].first; l < sp->chunks[k][c].last; l++)
                holder[l * R + k] = sp->chunks[k][c].stage;
    int *first = ah_xcalloc((size_t)L + 1, sizeof(int));
    ah_plan_bucket_starts(holder, L, R, first);
    sp->buckets = ah_xcalloc((size_t)L, sizeof(ah_bucket));
    for (int l = 0; l < L; l++) {
        if (first[l] == l) {
            ah_bucket *b = &sp->buckets[sp->n_buckets++];
            b->first = l;
            b->holder = ah_xcalloc((size_t)R, sizeof(int));
            memcpy(b->holder, &holder[l * R], sizeof(int) * (size_t)R);
        }
        ah_bucket *b = &sp->buckets[sp->n_buckets - 1];
        b->last = l + 1;
        if (grad_bytes)
            b->bytes += grad_bytes[l];
    }
    free(first);
    free(holder);
}

const ah_program *ah_schedule_program_of(const ah_schedule_plan *sp, int replica, int stage) {
    return &sp->programs[sp->first_stage[replica] + stage];
}

const ah_program *ah_schedule_eval_program_of(const ah_schedule_plan *sp, int replica, int stage) {
    return &sp->eval_programs[sp->first_stage[replica] + stage];
}

const ah_chunk *ah_schedule_chunk_of(const ah_schedule_plan *sp, int replica, int layer) {
    for (int c = 0; c < sp->n_chunks[replica]; c++)
        if (layer >= sp->chunks[replica][c].first && layer < sp->chunks[replica][c].last)
            return &sp->chunks[replica][c];
    return NULL;
}
