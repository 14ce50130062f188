/* ah_plan_evaluate: the closed-form cost model applied to a concrete plan.
 * Formulas are documented in docs/cost-model.md. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include "plan/costs.h"

void ah_calibration_apply(const ah_calibration *c, ah_profile *prof, ah_plan_options *o, ah_train_settings *train,
                          int p2p_given) {
    ah_profile_set_calibration(prof, c);
    o->calibration = c;
    if (c && c->lockstep && !p2p_given)
        train->p2p = AH_P2P_LOCKSTEP;
}

void ah_plan_options_default(ah_plan_options *o) {
    memset(o, 0, sizeof *o);
    o->train.seq = 2048;
    o->train.recompute = AH_RECOMPUTE_NONE;
    o->mem_reserve_gib = 2.0;
    o->max_stages = 32;
    o->max_mixed_stages = 32;
    o->max_mixed_types = 3;
    o->max_mixed3_stages = 8;
    o->phase1_mixed_stages = 0; /* by cluster size (planner.c, phase1_stages) */
    o->alpha_intra_s = 5e-6;
    o->alpha_inter_s = 20e-6;
    o->strategy = AH_STRATEGY_AUTOHET;
}

void ah_plan_options_take_plan(ah_plan_options *o, const ah_plan *p) {
    o->train = p->train;
    o->mem_reserve_gib = p->mem_reserve_gib;
    o->global_batch = p->global_batch;
}

int ah_plan_bucket_starts(const int *holder, int L, int R, int *first) {
    int n = 0;
    for (int l = 0; l < L; l++) {
        int same = l > 0 && !memcmp(&holder[l * R], &holder[(l - 1) * R], sizeof(int) * (size_t)R);
        first[l] = same ? first[l - 1] : l;
        n += !same;
    }
    return n;
}

int ah_plan_validate(const ah_plan *p, char *err, size_t errlen) {
    int L = ah_model_num_layers(&p->model);
    if (p->micro_batch < 1 || p->global_batch < 1) {
        snprintf(err, errlen, "plan: micro_batch and global_batch must be positive");
        return -1;
    }
    if (p->n_replicas < 1) {
        snprintf(err, errlen, "plan: no replicas");
        return -1;
    }
    long long samples = 0;
    int total_gpus = ah_cluster_total_gpus(&p->cluster);
    unsigned char *used = calloc((size_t)(total_gpus > 0 ? total_gpus : 1), 1);
    int *node_base = calloc((size_t)p->cluster.n_nodes + 1, sizeof(int));
    if (!used || !node_base)
        abort();
    for (int i = 0; i < p->cluster.n_nodes; i++)
        node_base[i + 1] = node_base[i] + p->cluster.nodes[i].gpus;
    int rc = 0;
    for (int k = 0; k < p->n_replicas && rc == 0; k++) {
        const ah_replica *r = &p->replicas[k];
        if (r->n_stages < 1 || r->micro_batches < 1) {
            snprintf(err, errlen, "plan: replicas[%d] needs at least one stage and one micro-batch", k);
            rc = -1;
            break;
        }
        samples += (long long)r->micro_batches * p->micro_batch;
        int expect = 0;
        for (int j = 0; j < r->n_stages; j++) {
            const ah_stage *s = &r->stages[j];
            if (s->layer_first != expect || s->layer_last <= s->layer_first || s->layer_last > L) {
                snprintf(err, errlen,
                         "plan: replicas[%d].stages[%d].layers [%d,%d) must continue at layer %d "
                         "and stay within %d layers",
                         k, j, s->layer_first, s->layer_last, expect, L);
                rc = -1;
                break;
            }
            expect = s->layer_last;
            char why[160];
            if (ah_stage_tp_problem(&p->model, s->tp, why, sizeof why) != 0) {
                snprintf(err, errlen, "plan: replicas[%d].stages[%d].tp: %s", k, j, why);
                rc = -1;
                break;
            }
            if (s->node < 0 || s->node >= p->cluster.n_nodes || s->gpu_first < 0 ||
                s->gpu_first + s->tp > p->cluster.nodes[s->node].gpus) {
                snprintf(err, errlen, "plan: replicas[%d].stages[%d]: GPUs out of range of its node", k, j);
                rc = -1;
                break;
            }
            for (int g = 0; g < s->tp; g++) {
                int id = node_base[s->node] + s->gpu_first + g;
                if (used[id]) {
                    snprintf(err, errlen, "plan: replicas[%d].stages[%d]: GPU %d of node '%s' used twice", k,
                             j, s->gpu_first + g, p->cluster.nodes[s->node].name);
                    rc = -1;
                    break;
                }
                used[id] = 1;
            }
            if (rc)
                break;
        }
        if (rc == 0 && expect != L) {
            snprintf(err, errlen, "plan: replicas[%d] covers layers [0,%d) but the model has %d", k, expect,
                     L);
            rc = -1;
        }
    }
    if (rc == 0 && samples != p->global_batch) {
        snprintf(err, errlen, "plan: micro-batches x micro_batch = %lld samples, global batch is %d", samples,
                 p->global_batch);
        rc = -1;
    }
    free(used);
    free(node_base);
    return rc;
}

/* Are all holders of every layer of [a, e) on node `node`? Then the
 * stage's gradients reduce inside that node (the simulator's rule too). */
static int layers_on_node(const ah_plan *p, int a, int e, int node) {
    for (int k = 0; k < p->n_replicas; k++) {
        const ah_replica *r = &p->replicas[k];
        for (int j = 0; j < r->n_stages; j++) {
            const ah_stage *s = &r->stages[j];
            if (s->layer_last > a && s->layer_first < e && s->node != node)
                return 0;
        }
    }
    return 1;
}

/* Per replica, what the plan-level tail needs: its flush and, per stage,
 * sync + optimizer and the drain after the stage's last backward. */
typedef struct {
    ah_ns P;
    ah_ns *drain; /* per stage: the drain after its last backward */
    ah_ns *upd;   /* per stage: optimizer */
    ah_ns *lsync; /* per layer: its all-reduce on its stage's link */
    ah_ns *lbwd;  /* per layer: its backward on its stage's device */
    ah_ns tied;   /* the tied-embedding exchange of its first and last stage (0: none) */
    double *sync_gbs;  /* per stage: the link its lsync was costed on (the node's NVLink when every holder of
                          its layers is on its node, else its DP link) */
} replica_tail;

/* Every bucket's all-reduce by the algorithm the simulator plays for it
 * (ah_allreduce_choose on its slice of the TP-1 bytes grad_tp1, the plan's
 * DP bandwidth, intra-node latency when all its holders share a node): the
 * layers were costed at ah_allreduce_factor(R), so a ring above
 * AH_RING_EXACT_MAX rescales them; the latency steps are charged once, at
 * the bucket's first layer, on every holder. */
/* ah_ring_measured_gbs over the nodes of layer l's holders, replica by replica */
static double ring_measured(const ah_plan *p, const int *holder, int l, int R, const ah_plan_options *o) {
    if (!o->links)
        return 0;
    int *nodes = calloc((size_t)R + 1, sizeof(int));
    if (!nodes)
        abort();
    for (int k = 0; k < R; k++)
        nodes[k] = p->replicas[k].stages[holder[l * R + k]].node;
    double bw = ah_ring_measured_gbs(o, &p->cluster, nodes, R);
    free(nodes);
    return bw;
}

static void bucket_algorithms(ah_plan *p, replica_tail *rt, const int *holder, const int *bfirst,
                              const double *grad_tp1, double dp_bw, const ah_plan_options *o,
                              unsigned char *on_node) {
    int L = ah_model_num_layers(&p->model), R = p->n_replicas;
    for (int l = 0; l < L; l++) {
        if (bfirst[l] != l)
            continue;
        int node0 = p->replicas[0].stages[holder[l * R]].node, one_node = 1, T = 1, e = l;
        double bytes = 0.0;
        while (e < L && bfirst[e] == l)
            bytes += grad_tp1[e++];
        for (int k = 0; k < R; k++) {
            const ah_stage *s = &p->replicas[k].stages[holder[l * R + k]];
            one_node &= s->node == node0;
            T = s->tp > T ? s->tp : T;
        }
        /* across measured hosts the ring (replica order) runs at its slowest pair where that is below a
         * holder's own link */
        double ring = one_node ? 0 : ring_measured(p, holder, l, R, o);
        ah_allreduce_algo a = ah_allreduce_choose(R, bytes / T, ring > 0 && ring < dp_bw ? ring : dp_bw, one_node, o);
        double scale = a.factor / ah_allreduce_factor(R);
        ah_ns lat = ah_to_ns(ah_allreduce_algo_latency_s(a, one_node, o));
        on_node[l] = (unsigned char)one_node;
        for (int k = 0; k < R; k++) {
            int j = holder[l * R + k];
            ah_stage *s = &p->replicas[k].stages[j];
            ah_ns before = 0, after = lat;
            double own = ah_dp_link_gbs(&p->cluster.nodes[s->node]), slow = ring > 0 && ring < own ? own / ring : 1;
            /* a bucket whose holders share one node runs on its NVLink, as the simulator plays it, even where
             * the stage's other buckets cross the network */
            if (one_node && rt[k].sync_gbs[j] > 0 && p->cluster.nodes[s->node].dev.intra_bw_gbs > 0)
                slow = rt[k].sync_gbs[j] / p->cluster.nodes[s->node].dev.intra_bw_gbs;
            for (int q = l; q < e; q++) {
                before += rt[k].lsync[q];
                rt[k].lsync[q] = ah_to_ns(ah_ns_to_s(rt[k].lsync[q]) * scale * slow);
                after += rt[k].lsync[q];
            }
            rt[k].lsync[l] += lat;
            s->sync_s += ah_ns_to_s(after - before);
        }
    }
}

/* Max-min shares of one link among n active items, item i able to use at
 * most cap[i] of it (its flow is held back elsewhere): water-filling. done is
 * the caller's work array of n flags (this runs at every step of a link's
 * sharing loop, for every stage of every evaluated candidate). */
static void maxmin_shares(const double *cap, const unsigned char *on, int n, double *share, unsigned char *done) {
    double left = 1.0;
    int m = 0;
    for (int i = 0; i < n; i++)
        m += on[i];
    memset(done, 0, (size_t)n);
    for (int round = 0; round < n && m > 0; round++) { /* smallest caps first */
        int lo = -1;
        for (int i = 0; i < n; i++)
            if (on[i] && !done[i] && (lo < 0 || cap[i] < cap[lo]))
                lo = i;
        double fair = left / m;
        share[lo] = cap[lo] < fair ? cap[lo] : fair;
        left -= share[lo];
        done[lo] = 1;
        m--;
    }
}

/* Water-fills one link from t = rel[0] among n items released at rel[] (sorted), each needing rem[]
 * of the link alone and able to use at most cap[] of it; raises bucket_end[bucket[i]] to the time item
 * i is through (bucket -1: none to raise) and returns the time the link is done. on and done: the
 * caller's work arrays of n flags, share of n doubles. */
static double share_link(const double *rel, double *rem, const double *cap, const int *bucket, int n,
                         unsigned char *on, unsigned char *done, double *share, ah_ns *bucket_end) {
    double t = n > 0 ? rel[0] : 0.0;
    int next = 0, left = n;
    memset(on, 0, (size_t)n);
    while (left > 0) {
        while (next < n && rel[next] <= t)
            on[next++] = 1;
        int active = 0;
        for (int i = 0; i < next; i++)
            active += on[i];
        if (active == 0) {
            t = rel[next];
            continue;
        }
        maxmin_shares(cap, on, next, share, done);
        double dt = INFINITY; /* until the first active one is through, or the next release */
        for (int i = 0; i < next; i++)
            if (on[i] && rem[i] / share[i] < dt)
                dt = rem[i] / share[i];
        if (next < n && rel[next] < t + dt)
            dt = rel[next] - t;
        t += dt;
        for (int i = 0; i < next; i++) {
            if (!on[i])
                continue;
            rem[i] -= share[i] * dt;
            if (rem[i] <= 1e-3) { /* through (ns; rounding of the shares) */
                on[i] = 0;
                left--;
                ah_ns c = (ah_ns)llround(t);
                if (bucket[i] >= 0 && c > bucket_end[bucket[i]])
                    bucket_end[bucket[i]] = c;
            }
        }
    }
    return t;
}

/* Stage j of replica k's links share their bandwidth among its buckets'
 * all-reduces under way, max-min as the simulator's flows do (each ready at
 * ready[its first layer], held to the pace of its slowest holder,
 * slow[bucket]). A bucket whose holders share one node (on_node[its first
 * layer]) runs on the node's NVLink, the others on its network link: two
 * links, each shared among its own. Raises bucket_end[first layer of each
 * bucket] to the time this holder is through with it and returns the time
 * both links are done. */
static ah_ns stage_link_shared(const ah_plan *p, const replica_tail *rt, int k, int j, const ah_ns *ready,
                               const int *bfirst, const ah_ns *slow, const unsigned char *on_node,
                               ah_ns *bucket_end) {
    const ah_stage *s = &p->replicas[k].stages[j];
    int n = 0, cap_n = s->layer_last - s->layer_first + 1; /* its buckets: at most one a layer */
    double *rel = malloc(sizeof(double) * (size_t)cap_n * 8), *rem = rel + cap_n, *cap = rem + cap_n,
           *share = cap + cap_n, *rel2 = share + cap_n, *rem2 = rel2 + cap_n, *cap2 = rem2 + cap_n;
    int *bucket = malloc(sizeof(int) * (size_t)cap_n * 2), *bucket2 = bucket + cap_n;
    unsigned char *on = calloc((size_t)cap_n * 3, 1), *done = on + cap_n, *local = done + cap_n;
    if (!rel || !bucket || !on)
        abort();
    for (int l = s->layer_last - 1; l >= s->layer_first; l--) {
        if (n == 0 || bucket[n - 1] != bfirst[l]) {
            bucket[n] = bfirst[l];
            local[n] = on_node[bfirst[l]];
            rel[n] = (double)ready[l];
            rem[n++] = 0.0;
        }
        rem[n - 1] += (double)rt[k].lsync[l];
    }
    for (int i = 0; i < n; i++)
        cap[i] = slow[bucket[i]] > rem[i] && rem[i] > 0 ? rem[i] / (double)slow[bucket[i]] : 1.0;
    double t = 0.0;
    for (int c = 0; c < 2; c++) { /* the network link, then NVLink: each item in release order */
        int m = 0;
        for (int i = 0; i < n; i++) {
            if (local[i] != c)
                continue;
            int b = m++;
            for (; b > 0 && rel[i] < rel2[b - 1]; b--) /* insertion sort: a stage's few buckets */
                rel2[b] = rel2[b - 1], rem2[b] = rem2[b - 1], cap2[b] = cap2[b - 1], bucket2[b] = bucket2[b - 1];
            rel2[b] = rel[i], rem2[b] = rem[i], cap2[b] = cap[i], bucket2[b] = bucket[i];
        }
        double tc = share_link(rel2, rem2, cap2, bucket2, m, on, done, share, bucket_end);
        t = tc > t ? tc : t;
    }
    free(on);
    free(rel);
    free(bucket);
    return (ah_ns)llround(t);
}

/* After the flush, as the engine's programs order it: each stage's optimizer once its buckets are through
 * and, on a replica's first and last stage, once its tied exchange is: that starts when both end stages
 * are through with their buckets and runs on their pair link. (The step reduction, a 16-byte all-reduce
 * of the loss and the global gradient norm over every GPU, holds every optimizer until the plan's last
 * all-reduce has ended in the simulator; the search's tail is separable, one per stage, and the closed
 * form follows it there: bench/verify_notes.md.) Sets every replica's tail_s and returns the plan's tail
 * after Pmax. */
static ah_ns optimizer_tails(ah_plan *p, const replica_tail *rt, ah_ns Pmax, const int *bfirst,
                             const ah_ns *bucket_end, ah_ns *const *link_done) {
    ah_ns worst = 0;
    for (int k = 0; k < p->n_replicas; k++) {
        const ah_replica *r = &p->replicas[k];
        int S = r->n_stages;
        ah_ns *done = malloc(sizeof(ah_ns) * (size_t)S); /* per stage: its links and buckets through */
        if (!done)
            abort();
        for (int j = 0; j < S; j++) {
            const ah_stage *s = &r->stages[j];
            done[j] = link_done[k][j];
            for (int l = s->layer_first; l < s->layer_last; l++)
                done[j] = bucket_end[bfirst[l]] > done[j] ? bucket_end[bfirst[l]] : done[j];
        }
        if (rt[k].tied > 0) { /* (two stages at least) */
            ah_ns tied_end = (done[0] > done[S - 1] ? done[0] : done[S - 1]) + rt[k].tied;
            tied_end = tied_end > rt[k].P + rt[k].tied ? tied_end : rt[k].P + rt[k].tied;
            done[0] = done[S - 1] = tied_end;
        }
        ah_ns tail = 0;
        for (int j = 0; j < S; j++)
            tail = done[j] + rt[k].upd[j] - Pmax > tail ? done[j] + rt[k].upd[j] - Pmax : tail;
        free(done);
        p->replicas[k].tail_s = ah_ns_to_s(tail);
        worst = tail > worst ? tail : worst;
    }
    return worst;
}

/* The gradient sync of a stage starts when every holder of its layers is done
 * with them: the layer's ready time is the latest, over replicas, of that
 * replica's flush minus the drain after the stage holding it (the simulator
 * starts each bucket so). Sets every replica's tail_s and returns the plan's
 * tail after the slowest flush Pmax (docs/cost-model.md). */
static ah_ns plan_tail(ah_plan *p, replica_tail *rt, ah_ns Pmax, const double *grad_tp1, double dp_bw,
                       const ah_plan_options *o) {
    int L = ah_model_num_layers(&p->model), R = p->n_replicas;
    ah_ns *ready = malloc(sizeof(ah_ns) * (size_t)(L > 0 ? L : 1));
    int *bfirst = malloc(sizeof(int) * (size_t)(L > 0 ? L : 1));
    int *holder = malloc(sizeof(int) * (size_t)(L > 0 ? L : 1) * (size_t)R);
    if (!ready || !bfirst || !holder)
        abort();
    for (int k = 0; k < R; k++)
        for (int j = 0; j < p->replicas[k].n_stages; j++)
            for (int l = p->replicas[k].stages[j].layer_first; l < p->replicas[k].stages[j].layer_last; l++)
                holder[l * R + k] = j;
    ah_plan_bucket_starts(holder, L, R, bfirst);
    unsigned char *on_node = calloc((size_t)(L > 0 ? L : 1), 1); /* per bucket (its first layer): holders on one node */
    if (!on_node)
        abort();
    bucket_algorithms(p, rt, holder, bfirst, grad_tp1, dp_bw, o, on_node);
    /* a bucket is ready when every holder has done the backward of its lowest
     * layer: the holder's flush minus the drain after its stage minus the
     * backward of the stage's layers below the bucket */
    for (int l = 0; l < L; l++) {
        ready[l] = INT64_MIN;
        for (int k = 0; k < R; k++) {
            int j = holder[l * R + k], a = p->replicas[k].stages[j].layer_first;
            ah_ns below = 0;
            for (int q = a; q < bfirst[l]; q++)
                below += rt[k].lbwd[q];
            if (rt[k].P - rt[k].drain[j] - below > ready[l])
                ready[l] = rt[k].P - rt[k].drain[j] - below;
        }
    }
    /* pass 1: every holder's link; a bucket ends when its last holder is
     * through with it (the simulator plays one flow for all holders) */
    ah_ns *bucket_end = malloc(sizeof(ah_ns) * (size_t)(L > 0 ? L : 1));
    ah_ns **link_done = malloc(sizeof(ah_ns *) * (size_t)R);
    if (!bucket_end || !link_done)
        abort();
    ah_ns *slow = calloc((size_t)(L > 0 ? L : 1), sizeof(ah_ns)); /* a bucket's time at its slowest holder */
    if (!slow)
        abort();
    for (int l = 0; l < L; l++)
        bucket_end[l] = INT64_MIN;
    for (int k = 0; k < R; k++) {
        ah_ns own = 0;
        for (int l = 0; l < L; l++) {
            own += rt[k].lsync[l];
            if (l + 1 == L || bfirst[l + 1] != bfirst[l]) {
                slow[bfirst[l]] = own > slow[bfirst[l]] ? own : slow[bfirst[l]];
                own = 0;
            }
        }
    }
    for (int k = 0; k < R; k++) {
        link_done[k] = malloc(sizeof(ah_ns) * (size_t)p->replicas[k].n_stages);
        if (!link_done[k])
            abort();
        for (int j = 0; j < p->replicas[k].n_stages; j++)
            link_done[k][j] = stage_link_shared(p, rt, k, j, ready, bfirst, slow, on_node, bucket_end);
    }
    ah_ns worst = optimizer_tails(p, rt, Pmax, bfirst, bucket_end, link_done);
    for (int k = 0; k < R; k++)
        free(link_done[k]);
    free(link_done);
    free(bucket_end);
    free(slow);
    free(on_node);
    free(ready);
    free(bfirst);
    free(holder);
    return worst;
}

/* The DP bandwidth over the nodes the plan uses, and their count. */
static double used_nodes_dp_bw(const ah_plan *p, int *n_used) {
    unsigned char *used_nodes = calloc((size_t)p->cluster.n_nodes + 1, 1);
    if (!used_nodes)
        abort();
    *n_used = 0;
    for (int k = 0; k < p->n_replicas; k++)
        for (int j = 0; j < p->replicas[k].n_stages; j++) {
            *n_used += !used_nodes[p->replicas[k].stages[j].node];
            used_nodes[p->replicas[k].stages[j].node] = 1;
        }
    double dp_bw = ah_dp_bandwidth_gbs(&p->cluster, used_nodes);
    free(used_nodes);
    return dp_bw;
}

/* The send of stage j's activations to stage j + 1 (0 for the last stage);
 * sets the stage's p2p_s and p2p_inter_node. Each GPU of a TP group sends
 * 1/t of the activation (Megatron's scatter/gather); between stages of
 * different TP degrees the smaller group's GPUs move 1/min(t) each, which
 * bounds both directions (docs/cost-model.md). */
static ah_ns stage_p2p_ns(const ah_plan *p, ah_replica *r, int j, ah_plan_costs *pc,
                          const ah_plan_options *o) {
    ah_stage *s = &r->stages[j];
    const ah_node *nd = &p->cluster.nodes[s->node];
    ah_ns p2p = 0;
    s->p2p_inter_node = 0;
    if (j + 1 < r->n_stages) {
        const ah_node *nx = &p->cluster.nodes[r->stages[j + 1].node];
        int inter = r->stages[j + 1].node != s->node;
        int tmin = s->tp < r->stages[j + 1].tp ? s->tp : r->stages[j + 1].tp;
        p2p = ah_nodes_p2p_ns(ah_plan_costs_bytes(pc, p, tmin)->p2p_bytes, nd, nx, inter, o);
        s->p2p_inter_node = inter;
    }
    s->p2p_s = ah_ns_to_s(p2p);
    return p2p;
}

/* Lockstep pipelines (docs/cost-model.md, "Pipeline sends"): every forward and every backward of the
 * replica's stages waits for its chain of transfers in that direction, each of a boundary's activation;
 * the transfers are then no longer separate terms. The stages' p2p_s show their boundary's transfer. */
static void lockstep_stages(const ah_plan *p, ah_replica *r, ah_plan_costs *pc, const ah_plan_options *o,
                            ah_ns *ws, ah_ns *cs, ah_ns *bs, ah_ns *sum_w, ah_ns *sum_p2p) {
    double whole = ah_plan_costs_bytes(pc, p, 1)->p2p_bytes;
    ah_ns chain = ah_lockstep_chain_ns(p, r, whole, o);
    for (int j = 0; j < r->n_stages; j++) {
        ah_stage *s = &r->stages[j];
        ws[j] += 2 * chain;
        bs[j] += chain;
        *sum_w += 2 * chain;
        cs[j] = 0;
        s->p2p_s = j + 1 < r->n_stages ? ah_ns_to_s(ah_lockstep_boundary_ns(p, r, j, whole, o)) : 0.0;
    }
    *sum_p2p = 0;
}

/* The tied-embedding exchange between the first and last stage of r (0 for
 * an untied model or one stage), on the link between their nodes. */
static ah_ns replica_tied_ns(const ah_plan *p, const ah_replica *r, ah_plan_costs *pc, const ah_plan_options *o) {
    int S = r->n_stages;
    if (S < 2 || !p->model.tied_embeddings)
        return 0;
    const ah_stage *a = &r->stages[0], *b = &r->stages[S - 1];
    const ah_node *na = &p->cluster.nodes[a->node], *nb = &p->cluster.nodes[b->node];
    const ah_layer_bytes *lb = ah_plan_costs_bytes(pc, p, a->tp < b->tp ? a->tp : b->tp);
    return lb->tied_bytes > 0 ? ah_nodes_p2p_ns(lb->tied_bytes, na, nb, a->node != b->node, o) : 0;
}

/* The iteration time and what follows from it: throughput, TFLOP/s, MFU. */
static void set_plan_totals(ah_plan *p, ah_ns iteration_ns, int used, double peak_sum, double dp_bw) {
    p->iteration_time_ns = iteration_ns;
    p->iteration_time_s = ah_ns_to_s(p->iteration_time_ns);
    p->gpus_used = used;
    p->gpus_total = ah_cluster_total_gpus(&p->cluster);
    p->dp_bw_gbs = dp_bw;
    double tokens = (double)p->global_batch * p->train.seq;
    p->tokens_per_s = tokens / p->iteration_time_s;
    double flops = (double)p->global_batch * ah_model_flops_per_sequence(&p->model, p->train.seq);
    p->tflops_per_gpu = flops / p->iteration_time_s / used / 1e12;
    double hw =
        (double)p->global_batch * ah_model_hw_flops_per_sequence(&p->model, p->train.seq, p->train.recompute);
    p->hw_tflops_per_gpu = hw / p->iteration_time_s / used / 1e12;
    p->mfu = flops / p->iteration_time_s / (peak_sum * 1e12);
}

int ah_plan_evaluate(ah_plan *p, const ah_profile *prof, const ah_plan_options *o, char *err, size_t errlen) {
    if (ah_plan_validate(p, err, errlen) != 0)
        return -1;
    int n_used;
    double dp_bw = used_nodes_dp_bw(p, &n_used);
    ah_plan_costs pc;
    memset(&pc, 0, sizeof pc);
    int shards = p->train.dist_optimizer ? p->n_replicas : 1;
    int multi = p->n_replicas > 1;
    int rc = 0;
    ah_ns worst = -1, worst_tail = 0;
    double peak_sum = 0.0;
    int used = 0;
    replica_tail *rt = calloc((size_t)p->n_replicas, sizeof *rt);
    if (!rt)
        abort();
    int L = ah_model_num_layers(&p->model);
    for (int k = 0; k < p->n_replicas && rc == 0; k++) {
        ah_replica *r = &p->replicas[k];
        rt[k].lsync = calloc((size_t)L + 1, sizeof(ah_ns));
        rt[k].lbwd = calloc((size_t)L + 1, sizeof(ah_ns));
        rt[k].upd = calloc((size_t)r->n_stages + 1, sizeof(ah_ns));
        rt[k].sync_gbs = calloc((size_t)r->n_stages + 1, sizeof(double));
        if (!rt[k].lsync || !rt[k].lbwd || !rt[k].upd || !rt[k].sync_gbs)
            abort();
        ah_ns sum_w = 0, sum_p2p = 0, B = -1;
        size_t n = (size_t)r->n_stages;
        ah_ns *ws = calloc(n, sizeof(ah_ns)), *cs = calloc(n, sizeof(ah_ns)), *bs = calloc(n, sizeof(ah_ns));
        if (!ws || !cs || !bs)
            abort();
        for (int j = 0; j < r->n_stages; j++) {
            ah_stage *s = &r->stages[j];
            const ah_node *nd = &p->cluster.nodes[s->node];
            const ah_layer_times *t = ah_plan_costs_times(&pc, p, prof, &nd->dev, s->tp, err, errlen);
            if (!t) {
                rc = -1;
                break;
            }
            const ah_layer_bytes *lb = ah_plan_costs_bytes(&pc, p, s->tp);
            int a = s->layer_first, e = s->layer_last;
            ah_ns w = ah_range(t->w, a, e);
            ah_ns upd = ah_update_ns(t->upd, a, e, shards);
            ah_ns sync = 0;
            int local = multi && layers_on_node(p, a, e, s->node);
            double link = ah_stage_dp_link_gbs(nd, n_used == 1);
            rt[k].sync_gbs[j] = local ? nd->dev.intra_bw_gbs : link;
            for (int l = a; multi && l < e; l++) {
                rt[k].lsync[l] = local ? ah_local_sync_ns(lb, l, l + 1, p->n_replicas, nd->dev.intra_bw_gbs)
                                       : ah_layer_sync_ns(lb, l, link, p->n_replicas);
                sync += rt[k].lsync[l];
            }
            for (int l = a; l < e; l++)
                rt[k].lbwd[l] = ah_range(t->bwd, l, l + 1);
            rt[k].upd[j] = upd;
            s->fwd_s = ah_ns_to_s(ah_range(t->fwd, a, e));
            s->bwd_s = ah_ns_to_s(ah_range(t->bwd, a, e));
            s->update_s = ah_ns_to_s(upd);
            s->sync_s = ah_ns_to_s(sync);
            s->in_flight = r->n_stages - j;
            s->mem_bytes = (double)ah_stage_memory(lb, a, e, s->in_flight);
            s->mem_cap_bytes = (double)ah_usable_bytes(&nd->dev, o);
            ah_ns p2p = stage_p2p_ns(p, r, j, &pc, o);
            ws[j] = w;
            cs[j] = p2p;
            bs[j] = ah_range(t->bwd, a, e);
            sum_w += w;
            sum_p2p += p2p;
            used += s->tp;
            peak_sum += ah_peak_tflops(&nd->dev, p->train.precision) * s->tp;
        }
        if (rc == 0 && p->train.p2p == AH_P2P_LOCKSTEP)
            lockstep_stages(p, r, &pc, o, ws, cs, bs, &sum_w, &sum_p2p);
        /* steady state: the 1F1B period with the sends (docs/cost-model.md) */
        if (rc == 0) {
            for (int j = 0; j < r->n_stages; j++) {
                ah_ns w =
                    p->train.p2p == AH_P2P_BLOCKING ? ah_blocking_stage_ns(ws, cs, r->n_stages, j) : ws[j];
                if (w > B) {
                    B = w;
                    r->bottleneck_stage = j;
                }
            }
            B = ah_pipeline_period_mode(ws, cs, r->n_stages, p->train.p2p);
            rt[k].drain = calloc(n, sizeof(ah_ns));
            if (!rt[k].drain)
                abort();
            for (int j = 1; j < r->n_stages; j++)
                rt[k].drain[j] = rt[k].drain[j - 1] + bs[j - 1] + cs[j - 1];
        }
        free(ws);
        free(cs);
        free(bs);
        if (rc)
            break;
        rt[k].tied = replica_tied_ns(p, r, &pc, o);
        ah_ns A = sum_w + 2 * sum_p2p;
        ah_ns P = ah_replica_time(A, B, 0, r->micro_batches);
        r->fill_drain_s = ah_ns_to_s(A);
        r->bottleneck_s = ah_ns_to_s(B);
        r->time_s = ah_ns_to_s(P);
        rt[k].P = P;
        if (P > worst) {
            worst = P;
            p->bottleneck_replica = k;
        }
    }
    /* the slowest pipeline, then what is left of the gradient syncs and
     * optimizer steps: a bucket's all-reduce needs every replica holding it */
    if (rc == 0)
        worst_tail = plan_tail(p, rt, worst, ah_plan_costs_bytes(&pc, p, 1)->grad_bytes, dp_bw, o);
    ah_plan_costs_free(&pc);
    for (int k = 0; k < p->n_replicas; k++) {
        free(rt[k].drain);
        free(rt[k].upd);
        free(rt[k].lsync);
        free(rt[k].lbwd);
        free(rt[k].sync_gbs);
    }
    free(rt);
    if (rc)
        return -1;
    set_plan_totals(p, worst + worst_tail, used, peak_sum, dp_bw);
    return 0;
}

int ah_plan_check_memory(const ah_plan *p, char *err, size_t errlen) {
    const double gib = 1024.0 * 1024.0 * 1024.0;
    for (int k = 0; k < p->n_replicas; k++)
        for (int j = 0; j < p->replicas[k].n_stages; j++) {
            const ah_stage *s = &p->replicas[k].stages[j];
            if (s->mem_bytes > s->mem_cap_bytes) {
                snprintf(err, errlen,
                         "plan: replicas[%d].stages[%d] on %s needs %.2f GiB per GPU, %.2f GiB usable", k, j,
                         p->cluster.nodes[s->node].dev.name, s->mem_bytes / gib, s->mem_cap_bytes / gib);
                return -1;
            }
        }
    return 0;
}
