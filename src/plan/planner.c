/* ah_plan_search: option checks, the loop over (tp, micro-batch), and the
 * dispatch to the AutoHet search or a baseline. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/search.h"

int ah_candidate_tps(const ah_model_config *m, const ah_cluster *c, const ah_plan_options *o, int *out) {
    static const int all[] = {1, 2, 4, 8};
    int maxg = 0, n = 0;
    for (int i = 0; i < c->n_nodes; i++)
        if (c->nodes[i].gpus > maxg)
            maxg = c->nodes[i].gpus;
    for (int i = 0; i < 4; i++) {
        int t = all[i];
        if (o->tp && t != o->tp)
            continue;
        if (t > maxg || m->n_heads % t || m->n_kv_heads % t)
            continue;
        out[n++] = t;
    }
    out[n] = 0;
    return n;
}

int ah_candidate_mbs(const ah_plan_options *o, int *out) {
    static const int all[] = {1, 2, 4, 8};
    int n = 0;
    if (o->micro_batch) {
        out[n++] = o->micro_batch;
    } else {
        for (int i = 0; i < 4; i++)
            if (o->global_batch % all[i] == 0)
                out[n++] = all[i];
    }
    out[n] = 0;
    return n;
}

#define AH_MAX_SEQ (1 << 20)

static int check_options(const ah_model_config *m, const ah_cluster *c, const ah_plan_options *o, char *err,
                         size_t errlen) {
    if (o->global_batch < 1) {
        snprintf(err, errlen, "--global-batch must be a positive number of sequences");
        return -1;
    }
    if (o->train.seq < 1 || o->train.seq > AH_MAX_SEQ) { /* bounded: seq^2 terms of the cost model */
        snprintf(err, errlen, "--seq %d: expected 1..%d tokens", o->train.seq, AH_MAX_SEQ);
        return -1;
    }
    if (o->micro_batch < 0 || (o->micro_batch && o->global_batch % o->micro_batch)) {
        snprintf(err, errlen, "--global-batch %d is not divisible by --micro-batch %d", o->global_batch,
                 o->micro_batch);
        return -1;
    }
    if (o->tp && o->tp != 1 && o->tp != 2 && o->tp != 4 && o->tp != 8) {
        snprintf(err, errlen, "--tp %d: tensor-parallel degree must be 1, 2, 4 or 8", o->tp);
        return -1;
    }
    if (o->tp && (m->n_heads % o->tp || m->n_kv_heads % o->tp)) {
        snprintf(err, errlen, "--tp %d does not divide the model's %d attention heads (%d KV heads)", o->tp,
                 m->n_heads, m->n_kv_heads);
        return -1;
    }
    if (c->n_nodes < 1 || ah_cluster_total_gpus(c) < 1) {
        snprintf(err, errlen, "cluster has no GPUs");
        return -1;
    }
    if (o->tp) {
        int ok = 0;
        for (int i = 0; i < c->n_nodes; i++)
            ok |= c->nodes[i].gpus >= o->tp;
        if (!ok) {
            snprintf(err, errlen, "--tp %d: no node has %d GPUs (TP groups stay inside one node)", o->tp,
                     o->tp);
            return -1;
        }
    }
    if (o->max_stages < 1 || o->max_stages > AH_MAX_STAGES) {
        snprintf(err, errlen, "max stages must be within 1..%d", AH_MAX_STAGES);
        return -1;
    }
    return 0;
}

static void no_fit_message(const ah_model_config *m, const ah_cluster *c, const ah_profile *prof,
                           const ah_plan_options *o, char *err, size_t errlen) {
    const double gib = 1024.0 * 1024.0 * 1024.0;
    int tps[8], mbs[8];
    ah_candidate_tps(m, c, o, tps);
    ah_candidate_mbs(o, mbs);
    int64_t best = INT64_MAX;
    int bt = 0, bs = 0, bb = 0;
    char e2[256];
    for (int i = 0; tps[i]; i++)
        for (int j = 0; mbs[j]; j++) {
            ah_search_ctx x;
            ah_search_level all = {0.0, -1, 1.0};
            if (ah_search_ctx_init(&x, m, c, prof, o, tps[i], mbs[j], &all, e2, sizeof e2) == 1) {
                int S;
                int64_t need = ah_min_memory_needed(&x, &S);
                if (need < best) {
                    best = need;
                    bt = tps[i];
                    bs = S;
                    bb = mbs[j];
                }
            }
            ah_search_ctx_free(&x);
        }
    double usable = 0;
    for (int i = 0; i < c->n_nodes; i++) {
        double u = (double)ah_usable_bytes(&c->nodes[i].dev, o);
        if (u > usable)
            usable = u;
    }
    if (best == INT64_MAX) {
        /* nothing could be costed: let the profile say what it lacks */
        ah_layer_cost lc;
        char why[400] = "";
        for (int i = 0; tps[i] && !why[0]; i++)
            for (int j = 0; mbs[j] && !why[0]; j++)
                for (int k = 0; k < c->n_nodes && !why[0]; k++)
                    if (c->nodes[k].gpus >= tps[i] &&
                        ah_profile_layer_cost(prof, m, &o->train, &c->nodes[k].dev, 0, tps[i], mbs[j], &lc,
                                              why, sizeof why) != 0)
                        break;
        snprintf(err, errlen, "no plan can be costed: %s",
                 why[0] ? why : "no (tp, micro-batch) fits the cluster");
    } else
        snprintf(err, errlen,
                 "model %s does not fit this cluster: the leanest plan needs %.1f GiB per GPU "
                 "(TP=%d, a %d-stage pipeline, micro-batch %d); the largest usable GPU memory is %.1f "
                 "GiB (reserve %.1f GiB)",
                 m->name, (double)best / gib, bt, bs, bb, usable / gib, o->mem_reserve_gib);
}

/* Two plans with the same TP, micro-batch and replicas (stages on the same
 * GPUs with the same layers, same micro-batches): sub-searches at different
 * bandwidth levels often return the same plan. */
static int same_layout(const ah_plan *a, const ah_plan *b) {
    if (a->tp != b->tp || a->micro_batch != b->micro_batch || a->n_replicas != b->n_replicas)
        return 0;
    for (int k = 0; k < a->n_replicas; k++) {
        const ah_replica *x = &a->replicas[k], *y = &b->replicas[k];
        if (x->n_stages != y->n_stages || x->micro_batches != y->micro_batches)
            return 0;
        for (int j = 0; j < x->n_stages; j++) {
            const ah_stage *s = &x->stages[j], *t = &y->stages[j];
            if (s->node != t->node || s->gpu_first != t->gpu_first || s->layer_first != t->layer_first ||
                s->layer_last != t->layer_last)
                return 0;
        }
    }
    return 1;
}

/* The AutoHet search. Writes the best plan to out[0] and, if k > 1, the best
 * plans of the next-best (tp, micro-batch, level) sub-searches to out[1..]
 * (distinct plans, increasing predicted time); *n_out = how many. */
static int search_autohet(const ah_model_config *m, const ah_cluster *c, const ah_profile *prof,
                          const ah_plan_options *o, ah_plan *out, int k_best, int *n_out, char *err,
                          size_t errlen) {
    int tps[8], mbs[8];
    ah_candidate_tps(m, c, o, tps);
    ah_candidate_mbs(o, mbs);
    ah_search_level levels[64];
    int n_levels = ah_search_levels(c, levels, 64);
    int cap = 16 * n_levels;
    ah_search_ctx *xs = calloc((size_t)cap, sizeof *xs);
    ah_solution *ss = calloc((size_t)cap, sizeof *ss);
    int *ready = calloc((size_t)cap, sizeof *ready);
    if (!xs || !ss || !ready)
        abort();
    int n = 0, rc = 0;
    /* Phase 1 for every (tp, micro-batch, bandwidth level): pure pipelines and
     * short mixed ones. */
    for (int i = 0; tps[i] && rc == 0; i++)
        for (int j = 0; mbs[j] && rc == 0; j++)
            for (int l = 0; l < n_levels && rc == 0; l++) {
                ah_search_ctx *x = &xs[n];
                ah_solution *s = &ss[n];
                s->value = AH_NS_INF;
                int r = ah_search_ctx_init(x, m, c, prof, o, tps[i], mbs[j], &levels[l], err, errlen);
                if (r < 0)
                    rc = -1;
                ready[n] = r == 1;
                if (r == 1) {
                    ah_search_templates(x, o->phase1_mixed_stages);
                    ah_search_solve(x, s);
                }
                n++;
            }
    ah_ns bound = AH_NS_INF;
    for (int k = 0; k < n; k++)
        if (ss[k].value < bound)
            bound = ss[k].value;
    /* Phase 2: long mixed pipelines, split only where bounds say they could
     * beat the best plan so far; then the exact optimum of each sub-search. */
    int best = -1;
    long long effort = 0;
    for (int k = 0; k < n && rc == 0; k++) {
        if (ready[k] && ah_search_expand(&xs[k], o->phase1_mixed_stages, bound) > 0) {
            ah_solution_free(&ss[k]);
            ah_search_solve(&xs[k], &ss[k]);
        }
        if (ss[k].value < bound)
            bound = ss[k].value;
        if (ss[k].value != AH_NS_INF && (best < 0 || ss[k].value < ss[best].value))
            best = k;
        effort += xs[k].evals + xs[k].n_tpl;
        if (getenv("AUTOHET_DEBUG") && ready[k])
            fprintf(stderr,
                    "autohet: tp=%d mb=%d level(share>=%.2f, node %d, dp %.2f GB/s) classes=%d "
                    "templates=%d pruned=%lld value=%.6f s\n",
                    xs[k].tp, xs[k].mb, xs[k].level.min_share, xs[k].level.single_node, xs[k].level.dp_bw_gbs,
                    xs[k].K, xs[k].n_tpl, xs[k].pruned, ah_ns_to_s(ss[k].value));
    }
    if (rc == 0 && best < 0) {
        no_fit_message(m, c, prof, o, err, errlen);
        rc = -1;
    }
    *n_out = 0;
    for (int got = 0; rc == 0 && got < k_best; got++) {
        /* next best sub-search not taken yet */
        int pick = -1;
        for (int k = 0; k < n; k++) {
            if (ss[k].value == AH_NS_INF || ss[k].n == 0)
                continue;
            if (pick < 0 || ss[k].value < ss[pick].value)
                pick = k;
        }
        if (pick < 0)
            break;
        ah_plan *pl = &out[got];
        rc = ah_search_build_plan(&xs[pick], &ss[pick], prof, pl, err, errlen);
        if (rc)
            break;
        ss[pick].n = 0; /* taken */
        int dup = 0;
        for (int i = 0; i < got && !dup; i++)
            dup = same_layout(&out[i], pl);
        if (dup) {
            ah_plan_free(pl);
            memset(pl, 0, sizeof *pl);
            got--;
            continue;
        }
        pl->search_value_ns = ss[pick].value;
        pl->search_value_s = ah_ns_to_s(ss[pick].value);
        pl->candidates = effort;
        (*n_out)++;
    }
    for (int k = 0; k < n; k++) {
        ah_search_ctx_free(&xs[k]);
        ah_solution_free(&ss[k]);
    }
    free(xs);
    free(ss);
    free(ready);
    return rc;
}

int ah_plan_search(const ah_model_config *m, const ah_cluster *c, const ah_profile *prof,
                   const ah_plan_options *o, ah_plan *out, char *err, size_t errlen) {
    int n = 0;
    return ah_plan_search_top(m, c, prof, o, 1, out, &n, err, errlen);
}

int ah_plan_search_top(const ah_model_config *m, const ah_cluster *c, const ah_profile *prof,
                       const ah_plan_options *o, int k, ah_plan *out, int *n_out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out * (size_t)(k > 0 ? k : 1));
    *n_out = 0;
    if (k < 1) {
        snprintf(err, errlen, "need at least one plan");
        return AH_EXIT_BAD_INPUT;
    }
    if (check_options(m, c, o, err, errlen) != 0)
        return AH_EXIT_BAD_INPUT;
    double t0 = ah_now_s();
    int rc;
    switch (o->strategy) {
    case AH_STRATEGY_MEGATRON:
        rc = ah_plan_megatron(m, c, prof, o, out, err, errlen);
        *n_out = rc == 0;
        break;
    case AH_STRATEGY_PROPORTIONAL:
        rc = ah_plan_proportional(m, c, prof, o, out, err, errlen);
        *n_out = rc == 0;
        break;
    default: rc = search_autohet(m, c, prof, o, out, k, n_out, err, errlen); break;
    }
    if (rc != 0) {
        for (int i = 0; i < k; i++)
            ah_plan_free(&out[i]);
        memset(out, 0, sizeof *out * (size_t)k);
        *n_out = 0;
        return AH_EXIT_BAD_INPUT;
    }
    double dt = ah_now_s() - t0;
    for (int i = 0; i < *n_out; i++) {
        out[i].planning_time_s = dt;
        snprintf(out[i].profile_source, sizeof out[i].profile_source, "%s", ah_profile_source(prof));
    }
    return 0;
}
