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
        if ((o->tp && t != o->tp) || (o->tp_mask && !(o->tp_mask & (1u << t))))
            continue;
        if (t > maxg || m->n_heads % t || m->n_kv_heads % t)
            continue;
        out[n++] = t;
    }
    out[n] = 0;
    return n;
}

/* Above this many GPUs the sub-search over all degrees together costs more
 * than the planning-time targets allow (15 s at 1,024 GPUs of 6 kinds against
 * 10 s; 6.9 s at 512); there the degrees are searched one at a time
 * (docs/planner.md). */
#define AH_MIXED_TP_MAX_GPUS 512

int ah_candidate_tp_masks(const ah_model_config *m, const ah_cluster *c, const ah_plan_options *o,
                          unsigned *out) {
    int tps[8], n = ah_candidate_tps(m, c, o, tps), k = 0;
    int together = n > 1 && ah_cluster_total_gpus(c) <= AH_MIXED_TP_MAX_GPUS;
    unsigned all = 0;
    for (int i = 0; i < n; i++)
        all |= 1u << tps[i];
    if (all && (together || n == 1))
        out[k++] = all;
    for (int i = 0; i < n && n > 1; i++) {
        int odd = 0; /* a node whose GPU count the degree fits but does not divide */
        for (int j = 0; j < c->n_nodes && !odd; j++)
            odd = c->nodes[j].gpus > tps[i] && c->nodes[j].gpus % tps[i];
        if (odd || !together)
            out[k++] = 1u << tps[i];
    }
    out[k] = 0;
    return k;
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
    if (ah_model_check_seq(m, o->train.seq, "--seq", err, errlen) != 0)
        return -1;
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
    for (int t = 0; t < 32; t++) {
        if (!(o->tp_mask & (1u << t)))
            continue;
        if (t != 1 && t != 2 && t != 4 && t != 8) {
            snprintf(err, errlen, "--tp %d: tensor-parallel degree must be 1, 2, 4 or 8", t);
            return -1;
        }
        if (m->n_heads % t || m->n_kv_heads % t) {
            snprintf(err, errlen, "--tp %d does not divide the model's %d attention heads (%d KV heads)", t,
                     m->n_heads, m->n_kv_heads);
            return -1;
        }
    }
    int L = ah_model_num_layers(m);
    for (int s = 1; s <= 64; s++)
        if (((o->pp_mask >> (s - 1)) & 1) && (s > L || s > o->max_stages)) {
            snprintf(err, errlen, "--pp %d: a pipeline has at most %d stages here (%d layers, --max-stages %d)",
                     s, L < o->max_stages ? L : o->max_stages, L, o->max_stages);
            return -1;
        }
    if (o->n_dp < 0 || o->n_dp > AH_MAX_DP_LIST) {
        snprintf(err, errlen, "--dp: at most %d replica counts", AH_MAX_DP_LIST);
        return -1;
    }
    for (int i = 0; i < o->n_dp; i++)
        if (o->dp[i] < 1 || o->dp[i] > 1 << 20) {
            snprintf(err, errlen, "--dp %d: the number of data-parallel replicas must be within 1..%d", o->dp[i],
                     1 << 20);
            return -1;
        }
    if (o->objective != AH_OBJECTIVE_TIME && o->objective != AH_OBJECTIVE_COST) {
        snprintf(err, errlen, "--objective: expected time or cost");
        return -1;
    }
    if (o->objective == AH_OBJECTIVE_COST && o->strategy == AH_STRATEGY_AUTOHET)
        for (int i = 0; i < c->n_nodes; i++)
            if (!(c->nodes[i].price_per_hour > 0)) {
                snprintf(err, errlen,
                         "--objective cost: node '%s' has no price (price_per_hour in the inventory, or a "
                         "$PRICE suffix in --cluster)",
                         c->nodes[i].name);
                return -1;
            }
    if (o->max_stages < 1 || o->max_stages > AH_MAX_STAGES) {
        snprintf(err, errlen, "max stages must be within 1..%d", AH_MAX_STAGES);
        return -1;
    }
    return 0;
}

/* The memory per GPU of the leanest plan under options o (INT64_MAX: none
 * could be costed); its TP degree, stage count and micro-batch. */
static int64_t leanest_need(const ah_model_config *m, const ah_cluster *c, const ah_profile *prof,
                            const ah_plan_options *o, int *bt, int *bs, int *bb) {
    int tps[8], mbs[8];
    ah_candidate_tps(m, c, o, tps);
    ah_candidate_mbs(o, mbs);
    int64_t best = INT64_MAX;
    char e2[256];
    for (int i = 0; tps[i]; i++)
        for (int j = 0; mbs[j]; j++) {
            ah_search_ctx x;
            ah_search_level all = {-1};
            if (ah_search_ctx_init(&x, m, c, prof, o, 1u << tps[i], mbs[j], &all, e2, sizeof e2) == 1) {
                int S;
                int64_t need = ah_min_memory_needed(&x, &S);
                if (need < best) {
                    best = need;
                    *bt = tps[i];
                    *bs = S;
                    *bb = mbs[j];
                }
            }
            ah_search_ctx_free(&x);
        }
    return best;
}

/* What would make it fit: full recomputation, the distributed optimizer, or
 * both, each with its leanest plan's memory; appended to err. */
static void fit_hint(const ah_model_config *m, const ah_cluster *c, const ah_profile *prof, const ah_plan_options *o,
                     double usable, char *err, size_t errlen) {
    const double gib = 1024.0 * 1024.0 * 1024.0;
    static const struct {
        int recompute_full, dist_opt;
        const char *flags;
    } ways[] = {{1, 0, "--recompute full"}, {0, 1, "--dist-optimizer"}, {1, 1, "--recompute full --dist-optimizer"}};
    for (size_t w = 0; w < sizeof ways / sizeof *ways; w++) {
        ah_plan_options o2 = *o;
        if ((ways[w].recompute_full && o->train.recompute == AH_RECOMPUTE_FULL) ||
            (ways[w].dist_opt && o->train.dist_optimizer))
            continue; /* already on */
        if (ways[w].recompute_full)
            o2.train.recompute = AH_RECOMPUTE_FULL;
        if (ways[w].dist_opt)
            o2.train.dist_optimizer = 1;
        int bt, bs, bb;
        int64_t need = leanest_need(m, c, prof, &o2, &bt, &bs, &bb);
        if (need != INT64_MAX && (double)need <= usable) {
            size_t len = strlen(err);
            snprintf(err + len, errlen - len, "; with %s it fits (%.1f GiB per GPU: TP=%d, %d stages, micro-batch %d)",
                     ways[w].flags, (double)need / gib, bt, bs, bb);
            return;
        }
    }
    size_t len = strlen(err);
    snprintf(err + len, errlen - len, "; neither --recompute full nor --dist-optimizer makes it fit: more GPUs, or "
                                      "GPUs with more memory");
}

static void no_fit_message(const ah_model_config *m, const ah_cluster *c, const ah_profile *prof,
                           const ah_plan_options *o, char *err, size_t errlen) {
    const double gib = 1024.0 * 1024.0 * 1024.0;
    int tps[8], mbs[8];
    ah_candidate_tps(m, c, o, tps);
    ah_candidate_mbs(o, mbs);
    int bt = 0, bs = 0, bb = 0;
    int64_t best = leanest_need(m, c, prof, o, &bt, &bs, &bb);
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
    } else {
        snprintf(err, errlen,
                 "model %s does not fit this cluster: the leanest plan needs %.1f GiB per GPU "
                 "(TP=%d, a %d-stage pipeline, micro-batch %d); the largest usable GPU memory is %.1f "
                 "GiB (reserve %.1f GiB)",
                 m->name, (double)best / gib, bt, bs, bb, usable / gib, o->mem_reserve_gib);
        fit_hint(m, c, prof, o, usable, err, errlen);
    }
}

static int search_autohet(const ah_model_config *m, const ah_cluster *c, const ah_profile *prof,
                          const ah_plan_options *o, ah_plan *out, int k_best, int *n_out, char *err,
                          size_t errlen);

/* sub-searches at different bandwidth levels often return the same plan (search.h) */
int ah_plan_same_layout(const ah_plan *a, const ah_plan *b) {
    if (a->micro_batch != b->micro_batch || a->n_replicas != b->n_replicas)
        return 0;
    for (int k = 0; k < a->n_replicas; k++) {
        const ah_replica *x = &a->replicas[k], *y = &b->replicas[k];
        if (x->n_stages != y->n_stages || x->micro_batches != y->micro_batches)
            return 0;
        for (int j = 0; j < x->n_stages; j++) {
            const ah_stage *s = &x->stages[j], *t = &y->stages[j];
            if (s->node != t->node || s->tp != t->tp || s->gpu_first != t->gpu_first || s->layer_first != t->layer_first ||
                s->layer_last != t->layer_last)
                return 0;
        }
    }
    return 1;
}

/* The sub-searches of one AutoHet search: one per (tp, micro-batch,
 * bandwidth level), with their contexts and best solutions. */
typedef struct {
    ah_search_ctx *xs;
    ah_solution *ss;
    int *ready; /* the context initialised (the sub-search can run) */
    int n;
} subsearches;

static void subsearches_free(subsearches *sub) {
    for (int k = 0; k < sub->n; k++) {
        ah_search_ctx_free(&sub->xs[k]);
        ah_solution_free(&sub->ss[k]);
    }
    free(sub->xs);
    free(sub->ss);
    free(sub->ready);
}

/* Mixed pipelines of up to this many stages are split without bounds (phase 1), longer ones only where bounds
 * say they could win (phase 2, exact either way): 6 up to 64 GPUs, 2 above, where phase 2's bounds prune
 * most of phase 1's short shapes too (measured: the same plan on every planner-bench pool; 128 GPUs 1.03 ->
 * 0.83 s, 1,024 GPUs 1.74 -> 1.32 s, 4,096 GPUs 2.2 -> 1.8 s; up to 64 GPUs within noise either way). */
static int phase1_stages(const ah_cluster *c, const ah_plan_options *o) {
    if (o->phase1_mixed_stages > 0)
        return o->phase1_mixed_stages;
    return ah_cluster_total_gpus(c) <= 64 ? 6 : 2;
}

/* Phase 1 for every (tp, micro-batch, bandwidth level): pure pipelines and
 * short mixed ones. 0, or -1 with err. */
static int search_phase1(subsearches *sub, const ah_model_config *m, const ah_cluster *c,
                         const ah_profile *prof, const ah_plan_options *o, char *err, size_t errlen) {
    unsigned masks[8];
    int mbs[8];
    ah_candidate_tp_masks(m, c, o, masks);
    ah_candidate_mbs(o, mbs);
    ah_search_level levels[64];
    int n_levels = ah_search_levels(c, levels, 64);
    size_t cap = 20 * (size_t)n_levels; /* at most 5 degree sets x 4 micro-batches per level */
    sub->xs = calloc(cap, sizeof *sub->xs);
    sub->ss = calloc(cap, sizeof *sub->ss);
    sub->ready = calloc(cap, sizeof *sub->ready);
    if (!sub->xs || !sub->ss || !sub->ready)
        abort();
    sub->n = 0;
    int rc = 0;
    for (int i = 0; masks[i] && rc == 0; i++)
        for (int j = 0; mbs[j] && rc == 0; j++)
            for (int l = 0; l < n_levels && rc == 0; l++) {
                ah_search_ctx *x = &sub->xs[sub->n];
                ah_solution *s = &sub->ss[sub->n];
                s->value = AH_NS_INF;
                int r = ah_search_ctx_init(x, m, c, prof, o, masks[i], mbs[j], &levels[l], err, errlen);
                if (r < 0)
                    rc = -1;
                sub->ready[sub->n] = r == 1;
                if (r == 1) {
                    ah_search_templates(x, phase1_stages(c, o));
                    ah_search_solve(x, s);
                }
                sub->n++;
            }
    return rc;
}

/* Phase 2: long mixed pipelines, split only where bounds say they could beat
 * the best plan so far; then the exact optimum of each sub-search. Returns
 * the best sub-search (-1 if none found a plan); *effort = the work done. */
static int search_phase2(subsearches *sub, int phase1, long long *effort) {
    ah_ns bound = AH_NS_INF;
    for (int k = 0; k < sub->n; k++)
        if (sub->ss[k].value < bound)
            bound = sub->ss[k].value;
    int best = -1;
    *effort = 0;
    /* the most promising first (the least phase-1 value): the bound is tight before the big sub-searches */
    int *order = malloc(sizeof(int) * (size_t)(sub->n + 1));
    if (!order)
        abort();
    for (int k = 0; k < sub->n; k++)
        order[k] = k;
    for (int i = 1; i < sub->n; i++) /* insertion sort: stable, a few dozen entries */
        for (int j = i; j > 0 && sub->ss[order[j]].value < sub->ss[order[j - 1]].value; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    for (int q = 0; q < sub->n; q++) {
        int k = order[q];
        ah_search_ctx *x = &sub->xs[k];
        ah_solution *s = &sub->ss[k];
        double t0 = ah_now_s();
        if (sub->ready[k])
            ah_search_expand(x, phase1, bound, s);
        double t_phase2 = ah_now_s() - t0;
        if (s->value < bound)
            bound = s->value;
        if (s->value != AH_NS_INF && (best < 0 || s->value < sub->ss[best].value ||
                                      (s->value == sub->ss[best].value && k < best)))
            best = k; /* ties: the first in (tp, micro-batch, level) order, as before */
        *effort += x->evals + x->n_tpl;
        if (getenv("AUTOHET_DEBUG") && sub->ready[k]) {
            char tps[32] = "";
            for (int t = 1, n = 0; t <= 8; t *= 2)
                if (x->tp_mask & (1u << t))
                    n += snprintf(tps + n, sizeof tps - (size_t)n, "%s%d", n ? "," : "", t);
            fprintf(stderr,
                    "autohet: tp=%s mb=%d level(node %d) kinds=%d classes=%d templates=%d pruned=%lld value=%.6f "
                    "s (phase 2: %.3f s)\n",
                    tps, x->mb, x->level.single_node, x->n_kinds, x->K, x->n_tpl, x->pruned, ah_ns_to_s(s->value),
                    t_phase2);
        }
    }
    free(order);
    return best;
}

/* Why --tp/--pp/--dp limits leave no plan: the leanest plan without them, or
 * why none fits at all, into why. */
static void unlimited_plan_summary(const ah_model_config *m, const ah_cluster *c, const ah_profile *prof,
                                   const ah_plan_options *o, char *why, size_t whylen) {
    ah_plan_options free_o = *o;
    free_o.tp_mask = 0;
    free_o.pp_mask = 0;
    free_o.n_dp = 0;
    ah_plan fp;
    int nf = 0;
    if (search_autohet(m, c, prof, &free_o, &fp, 1, &nf, why, whylen) == 0 && nf == 1) {
        int smin_f = 1 << 30, smax_f = 0;
        for (int r = 0; r < fp.n_replicas; r++) {
            int d = fp.replicas[r].n_stages;
            smin_f = d < smin_f ? d : smin_f;
            smax_f = d > smax_f ? d : smax_f;
        }
        char tps[64];
        ah_plan_tp_text(&fp, tps, sizeof tps);
        snprintf(why, whylen, "the fastest plan has %d replica(s) of %d..%d stages at TP %s", fp.n_replicas,
                 smin_f, smax_f, tps);
        ah_plan_free(&fp);
    } else
        no_fit_message(m, c, prof, &free_o, why, whylen);
}

/* The one-line error when no sub-search found a plan: the --tp/--pp/--dp
 * limit that cannot be met, else what the limits cost, else why nothing fits. */
static void no_plan_message(const ah_model_config *m, const ah_cluster *c, const ah_profile *prof,
                            const ah_plan_options *o, char *err, size_t errlen) {
    int tmin = 0, smin = 0;
    for (int t = 1; t <= 8 && !tmin; t *= 2)
        if (!o->tp_mask || (o->tp_mask & (1u << t)))
            tmin = o->tp ? o->tp : t;
    for (int s = 1; s <= 64 && !smin; s++)
        if ((o->pp_mask >> (s - 1)) & 1)
            smin = s;
    int dmin = o->n_dp ? o->dp[0] : 0, groups = 0;
    for (int i = 1; i < o->n_dp; i++)
        if (o->dp[i] < dmin)
            dmin = o->dp[i];
    for (int i = 0; i < c->n_nodes; i++)
        groups += c->nodes[i].gpus / tmin;
    int mb_min = o->micro_batch ? o->micro_batch : 1;
    if (o->n_dp && dmin > groups) {
        snprintf(err, errlen, "--dp %d needs at least %d TP groups (of %d GPUs, --tp %d); the cluster has %d", dmin,
                 dmin, tmin, tmin, groups);
    } else if (o->n_dp && dmin > o->global_batch / mb_min) {
        snprintf(err, errlen,
                 "--dp %d needs at least %d micro-batches per iteration (one per replica); --global-batch %d "
                 "with micro-batch %d gives %d",
                 dmin, dmin, o->global_batch, mb_min, o->global_batch / mb_min);
    } else if (o->n_dp && o->pp_mask && (long long)dmin * smin > groups) {
        snprintf(err, errlen, "--dp %d with --pp %d needs at least %d TP groups (--tp %d); the cluster has %d",
                 dmin, smin, dmin * smin, tmin, groups);
    } else if (o->pp_mask && tmin * smin > ah_cluster_total_gpus(c)) {
        snprintf(err, errlen,
                 "--pp %d with --tp %d needs at least %d GPUs for one replica (TP x stages); the cluster has %d",
                 smin, tmin, tmin * smin, ah_cluster_total_gpus(c));
    } else if (o->tp_mask || o->pp_mask || o->n_dp) {
        char why[400];
        unlimited_plan_summary(m, c, prof, o, why, sizeof why);
        snprintf(err, errlen, "no plan with the given --tp/--pp/--dp fits this cluster (too few GPUs or "
                 "too little memory per replica); without those limits: %s", why);
    } else
        no_fit_message(m, c, prof, o, err, errlen);
}

/* The best plans of the best sub-searches, distinct layouts, increasing
 * predicted time, into out[0..k_best); *n_out = how many. 0, or -1 with err. */
static int take_best_plans(subsearches *sub, const ah_profile *prof, long long effort, ah_plan *out,
                           int k_best, int *n_out, char *err, size_t errlen) {
    int rc = 0;
    *n_out = 0;
    for (int got = 0; rc == 0 && got < k_best; got++) {
        /* next best sub-search not taken yet */
        int pick = -1;
        for (int k = 0; k < sub->n; k++) {
            if (sub->ss[k].value == AH_NS_INF || sub->ss[k].n == 0)
                continue;
            if (pick < 0 || sub->ss[k].value < sub->ss[pick].value)
                pick = k;
        }
        if (pick < 0)
            break;
        ah_plan *pl = &out[got];
        rc = ah_search_build_plan(&sub->xs[pick], &sub->ss[pick], prof, pl, err, errlen);
        if (rc)
            break;
        sub->ss[pick].n = 0; /* taken */
        int dup = 0;
        for (int i = 0; i < got && !dup; i++)
            dup = ah_plan_same_layout(&out[i], pl);
        if (dup) {
            ah_plan_free(pl);
            memset(pl, 0, sizeof *pl);
            got--;
            continue;
        }
        pl->search_value_ns = sub->ss[pick].value;
        pl->search_value_s = ah_ns_to_s(sub->ss[pick].value);
        pl->candidates = effort;
        (*n_out)++;
    }
    return rc;
}

/* The AutoHet search. Writes the best plan to out[0] and, if k > 1, the best
 * plans of the next-best (tp, micro-batch, level) sub-searches to out[1..]
 * (distinct plans, increasing predicted time); *n_out = how many. */
static int search_autohet(const ah_model_config *m, const ah_cluster *c, const ah_profile *prof,
                          const ah_plan_options *o, ah_plan *out, int k_best, int *n_out, char *err,
                          size_t errlen) {
    subsearches sub = {0};
    *n_out = 0;
    int rc = search_phase1(&sub, m, c, prof, o, err, errlen);
    if (rc == 0) {
        long long effort = 0;
        int best = search_phase2(&sub, phase1_stages(c, o), &effort);
        if (best < 0) {
            no_plan_message(m, c, prof, o, err, errlen);
            rc = -1;
        } else {
            rc = take_best_plans(&sub, prof, effort, out, k_best, n_out, err, errlen);
        }
    }
    subsearches_free(&sub);
    return rc;
}

/* ---- cost ------------------------------------------------------------------ */

double ah_plan_price_per_hour(const ah_plan *p) {
    double sum = 0;
    for (int n = 0; n < p->cluster.n_nodes; n++) {
        int used = 0;
        for (int k = 0; k < p->n_replicas && !used; k++)
            for (int j = 0; j < p->replicas[k].n_stages && !used; j++)
                used = p->replicas[k].stages[j].node == n;
        if (!used)
            continue;
        if (!(p->cluster.nodes[n].price_per_hour > 0))
            return -1;
        sum += p->cluster.nodes[n].price_per_hour;
    }
    return sum;
}

double ah_plan_cost_per_iteration(const ah_plan *p) {
    double price = ah_plan_price_per_hour(p);
    return price < 0 ? -1 : p->iteration_time_s * price / 3600.0;
}

double ah_plan_cost_per_mtoken(const ah_plan *p) {
    double c = ah_plan_cost_per_iteration(p);
    double tokens = (double)p->global_batch * (double)p->train.seq;
    return c < 0 || !(tokens > 0) ? -1 : c * 1e6 / tokens;
}

/* --objective cost. Nodes of one class (GPU type, GPUs per node, NIC) are
 * interchangeable for the time search, so a choice of nodes to pay for is a
 * vector of counts per class, taking the cheapest nodes of each class. For
 * every vector of a grid (below) the exact time search runs on those nodes
 * only, and the objective is its optimum x the price of the chosen nodes.
 * Over all vectors this is the exact minimum cost (a plan using node counts u
 * costs at least optimum(u) x price(u)); over a grid it is exact among plans
 * whose node counts lie on the grid. The reported cost counts only the nodes
 * the plan uses (never more than the objective).
 * Grid: every count 0..n_c of every class if that is at most 256 vectors,
 * else 0, the powers of two below n_c and n_c, if at most 256, else {0, n_c}.
 * Exact pruning: vectors are visited with the most nodes first; a vector
 * whose nodes are contained in an infeasible one is infeasible, and one
 * whose price x the optimum of a visited superset (which is never slower)
 * reaches the k-th best objective is skipped. */
#define COST_GRID_MAX 256

typedef struct {
    int n;          /* nodes of the class */
    int idx[4096];  /* cluster node indices, cheapest first */
    int n_grid, grid[64];
} cost_class;

typedef struct {
    int counts[AH_MAX_KINDS];
    int n_nodes;
    double price;
    int state; /* 0 not visited, 1 feasible, 2 infeasible, 3 skipped */
    ah_ns value;
} cost_vec;

static int cmp_vec(const void *a, const void *b) {
    const cost_vec *x = a, *y = b;
    if (x->n_nodes != y->n_nodes)
        return y->n_nodes - x->n_nodes;
    return (x->price < y->price) - (x->price > y->price);
}

/* Groups the nodes into classes (GPU type, GPUs per node, NIC), each class's
 * nodes cheapest first. *K = the number of classes; 0, or -1 with err. */
static int cost_classes(const ah_cluster *c, cost_class *cc, int *K, char *err, size_t errlen) {
    *K = 0;
    for (int i = 0; i < c->n_nodes; i++) {
        const ah_node *nd = &c->nodes[i];
        int k = 0;
        while (k < *K && !(strcmp(c->nodes[cc[k].idx[0]].dev.name, nd->dev.name) == 0 &&
                           c->nodes[cc[k].idx[0]].gpus == nd->gpus && c->nodes[cc[k].idx[0]].nic_gbit == nd->nic_gbit))
            k++;
        if (k == *K) {
            if (*K == AH_MAX_KINDS) {
                snprintf(err, errlen, "cluster: more than %d distinct node kinds", AH_MAX_KINDS);
                return -1;
            }
            (*K)++;
        }
        /* insertion by price: cheapest first, inventory order among equals */
        int j = cc[k].n++;
        while (j > 0 && c->nodes[cc[k].idx[j - 1]].price_per_hour > nd->price_per_hour) {
            cc[k].idx[j] = cc[k].idx[j - 1];
            j--;
        }
        cc[k].idx[j] = i;
    }
    return 0;
}

/* The grid of node counts per class (see above), and every vector of it,
 * most nodes first; *nv = how many. */
static cost_vec *cost_vectors(const ah_cluster *c, cost_class *cc, int K, long long *nv) {
    for (int level = 0; level < 3; level++) {
        double total = 1;
        for (int k = 0; k < K; k++) {
            cost_class *q = &cc[k];
            q->n_grid = 0;
            for (int v = 0; v <= q->n; v++) {
                int on = level == 0 || v == 0 || v == q->n || (level == 1 && (v & (v - 1)) == 0);
                if (on && q->n_grid < 64)
                    q->grid[q->n_grid++] = v;
            }
            total *= q->n_grid;
        }
        if (total <= COST_GRID_MAX || level == 2)
            break;
    }
    *nv = 1;
    for (int k = 0; k < K; k++)
        *nv *= cc[k].n_grid;
    cost_vec *vec = calloc((size_t)*nv, sizeof *vec);
    if (!vec)
        abort();
    for (long long v = 0; v < *nv; v++) {
        long long r = v;
        for (int k = 0; k < K; k++) {
            int n = cc[k].grid[r % cc[k].n_grid];
            r /= cc[k].n_grid;
            vec[v].counts[k] = n;
            vec[v].n_nodes += n;
            for (int i = 0; i < n; i++)
                vec[v].price += c->nodes[cc[k].idx[i]].price_per_hour;
        }
    }
    qsort(vec, (size_t)*nv, sizeof *vec, cmp_vec);
    return vec;
}

/* The k best plans by objective, ascending. */
typedef struct {
    ah_plan *plan;
    double *obj;
    int n, k;
} cost_keep;

/* Whether vec[v] can be skipped without a search: a visited superset is
 * infeasible (state 2), or its price x the optimum of a visited superset
 * reaches the k-th best objective (state 3). */
static int cost_vector_pruned(cost_vec *vec, long long v, int K, const cost_keep *keep) {
    cost_vec *cv = &vec[v];
    ah_ns faster = 0; /* optimum of the smallest visited superset: a lower bound */
    for (long long u = 0; u < v; u++) {
        int sup = 1;
        for (int k = 0; k < K && sup; k++)
            sup = vec[u].counts[k] >= cv->counts[k];
        if (!sup)
            continue;
        if (vec[u].state == 2) {
            cv->state = 2;
            return 1;
        }
        if (vec[u].state == 1 && vec[u].value > faster)
            faster = vec[u].value;
    }
    if (keep->n == keep->k && ah_ns_to_s(faster) * cv->price / 3600.0 >= keep->obj[keep->k - 1]) {
        cv->state = 3;
        return 1;
    }
    return 0;
}

/* The nodes a vector pays for, in inventory order, into sub (storage
 * sub->nodes); map[i] = the cluster index of sub's node i. */
static void cost_sub_cluster(const ah_cluster *c, const cost_class *cc, int K, const cost_vec *cv,
                             ah_cluster *sub, int *map) {
    sub->n_nodes = 0;
    for (int i = 0; i < c->n_nodes; i++) {
        int k = 0, pos = -1;
        for (; k < K && pos < 0; k++)
            for (int q = 0; q < cv->counts[k]; q++)
                if (cc[k].idx[q] == i)
                    pos = q;
        if (pos >= 0) {
            map[sub->n_nodes] = i;
            sub->nodes[sub->n_nodes++] = c->nodes[i];
        }
    }
}

/* Moves a plan found on a sub-cluster onto the whole cluster's node indices
 * and evaluates it there. 0, or -1 with err. */
static int cost_plan_on_cluster(ah_plan *pl, const ah_cluster *c, const int *map, const ah_profile *prof,
                                const ah_plan_options *o, char *err, size_t errlen) {
    for (int k = 0; k < pl->n_replicas; k++)
        for (int j = 0; j < pl->replicas[k].n_stages; j++)
            pl->replicas[k].stages[j].node = map[pl->replicas[k].stages[j].node];
    free(pl->cluster.nodes);
    pl->cluster.n_nodes = c->n_nodes;
    pl->cluster.nodes = malloc(sizeof(ah_node) * (size_t)c->n_nodes);
    if (!pl->cluster.nodes)
        abort();
    memcpy(pl->cluster.nodes, c->nodes, sizeof(ah_node) * (size_t)c->n_nodes);
    ah_ns sv = pl->search_value_ns;
    if (ah_plan_evaluate(pl, prof, o, err, errlen) != 0)
        return -1;
    pl->search_value_ns = sv;
    pl->search_value_s = ah_ns_to_s(sv);
    return 0;
}

/* Adds a plan of objective obj to keep (which takes it over or frees it). */
static void cost_keep_add(cost_keep *keep, ah_plan *pl, double obj) {
    /* the same plan found on a larger node set (paying for idle nodes)
     * gives way to the cheaper objective */
    int dup = -1;
    for (int i = 0; i < keep->n && dup < 0; i++)
        if (ah_plan_same_layout(&keep->plan[i], pl))
            dup = i;
    if (dup >= 0 && keep->obj[dup] <= obj) {
        ah_plan_free(pl);
        return;
    }
    if (dup >= 0) {
        ah_plan_free(&keep->plan[dup]);
        for (int i = dup; i + 1 < keep->n; i++) {
            keep->plan[i] = keep->plan[i + 1];
            keep->obj[i] = keep->obj[i + 1];
        }
        keep->n--;
    }
    if (keep->n == keep->k)
        ah_plan_free(&keep->plan[--keep->n]);
    int at = keep->n++;
    while (at > 0 && keep->obj[at - 1] > obj) {
        keep->plan[at] = keep->plan[at - 1];
        keep->obj[at] = keep->obj[at - 1];
        at--;
    }
    keep->plan[at] = *pl;
    keep->obj[at] = obj;
}

static void cost_debug_line(const cost_vec *cv, int K, int found, const char *e2, double value_s) {
    fprintf(stderr, "autohet: cost vector");
    for (int k = 0; k < K; k++)
        fprintf(stderr, " %d", cv->counts[k]);
    fprintf(stderr, " ($%.2f/h): %s %.6f s\n", cv->price, found ? "optimum" : e2, found ? value_s : 0.0);
}

static int search_cost(const ah_model_config *m, const ah_cluster *c, const ah_profile *prof,
                       const ah_plan_options *o, ah_plan *out, int k_best, int *n_out, char *err,
                       size_t errlen) {
    int K = 0;
    cost_class *cc = calloc(AH_MAX_KINDS, sizeof *cc);
    if (!cc)
        abort();
    if (cost_classes(c, cc, &K, err, errlen) != 0) {
        free(cc);
        return -1;
    }
    long long nv = 0;
    cost_vec *vec = cost_vectors(c, cc, K, &nv);
    cost_keep keep = {calloc((size_t)k_best, sizeof *keep.plan), calloc((size_t)k_best, sizeof *keep.obj), 0,
                      k_best};
    ah_node *sub_nodes = malloc(sizeof(ah_node) * (size_t)c->n_nodes);
    int *map = malloc(sizeof(int) * (size_t)c->n_nodes);
    if (!keep.plan || !keep.obj || !sub_nodes || !map)
        abort();
    int rc = 0, any_feasible = 0;
    long long effort = 0;
    char first_err[512] = "";
    ah_plan_options ot = *o;
    ot.objective = AH_OBJECTIVE_TIME;
    for (long long v = 0; v < nv && rc == 0; v++) {
        cost_vec *cv = &vec[v];
        if (cv->n_nodes == 0 || cost_vector_pruned(vec, v, K, &keep))
            continue;
        ah_cluster sub = {sub_nodes, 0};
        cost_sub_cluster(c, cc, K, cv, &sub, map);
        ah_plan pl;
        int got = 0;
        char e2[512];
        int r = search_autohet(m, &sub, prof, &ot, &pl, 1, &got, e2, sizeof e2);
        if (getenv("AUTOHET_DEBUG"))
            cost_debug_line(cv, K, r == 0 && got, e2, r == 0 && got ? pl.search_value_s : 0.0);
        if (r != 0 || got == 0) {
            cv->state = 2;
            if (!first_err[0])
                snprintf(first_err, sizeof first_err, "%s", e2);
            continue;
        }
        cv->state = 1;
        cv->value = pl.search_value_ns;
        effort += pl.candidates;
        any_feasible = 1;
        double obj = pl.search_value_s * cv->price / 3600.0;
        if (keep.n == k_best && obj >= keep.obj[k_best - 1]) {
            ah_plan_free(&pl);
            continue;
        }
        if (cost_plan_on_cluster(&pl, c, map, prof, o, e2, sizeof e2) != 0) {
            ah_plan_free(&pl);
            snprintf(err, errlen, "%s", e2);
            rc = -1;
            break;
        }
        cost_keep_add(&keep, &pl, obj);
    }
    if (rc == 0 && !any_feasible) {
        snprintf(err, errlen, "%s", first_err[0] ? first_err : "no plan fits this cluster");
        rc = -1;
    }
    if (rc == 0) {
        for (int i = 0; i < keep.n; i++) {
            keep.plan[i].candidates = effort;
            out[i] = keep.plan[i];
        }
        *n_out = keep.n;
    } else
        for (int i = 0; i < keep.n; i++)
            ah_plan_free(&keep.plan[i]);
    free(keep.plan);
    free(keep.obj);
    free(sub_nodes);
    free(map);
    free(vec);
    free(cc);
    return rc;
}

/* The search's objective is separable per replica (docs/cost-model.md); the
 * evaluation of a concrete plan sees every bucket (its latency, a fast holder
 * waiting for slow ones) and can order the best sub-searches' plans
 * differently. So PICK_POOL of them are built and ranked by the evaluated
 * iteration time: the pick is the fastest of them by the closed form, and
 * the search's optimum is always among them. */
#define PICK_POOL 8
static int by_iteration_time(const void *a, const void *b) {
    const ah_plan *x = a, *y = b;
    if (x->iteration_time_ns != y->iteration_time_ns)
        return x->iteration_time_ns < y->iteration_time_ns ? -1 : 1;
    return (x->search_value_ns > y->search_value_ns) - (x->search_value_ns < y->search_value_ns);
}

static int search_reranked(const ah_model_config *m, const ah_cluster *c, const ah_profile *prof,
                           const ah_plan_options *o, ah_plan *out, int k, int *n_out, char *err, size_t errlen) {
    int pool = k > PICK_POOL ? k : PICK_POOL, n = 0;
    ah_plan *built = calloc((size_t)pool, sizeof *built);
    if (!built)
        abort();
    int rc = search_autohet(m, c, prof, o, built, pool, &n, err, errlen);
    for (int i = 0; rc == 0 && i < n; i++)
        ah_plan_place_on_links(&built[i], prof, o);
    if (rc == 0)
        qsort(built, (size_t)n, sizeof *built, by_iteration_time);
    *n_out = 0;
    for (int i = 0; i < n; i++) {
        if (rc == 0 && i < k)
            out[(*n_out)++] = built[i];
        else
            ah_plan_free(&built[i]);
    }
    free(built);
    return rc;
}

int ah_plan_check_inputs(const ah_model_config *m, const ah_cluster *c, const ah_profile *prof,
                         const ah_plan_options *o, char *err, size_t errlen) {
    if (check_options(m, c, o, err, errlen) != 0)
        return AH_EXIT_BAD_INPUT;
    int tps[8], mbs[8], L = ah_model_num_layers(m);
    ah_candidate_tps(m, c, o, tps);
    ah_candidate_mbs(o, mbs);
    for (int k = 0; k < c->n_nodes; k++) {
        const ah_device *dev = &c->nodes[k].dev;
        int first_t = 0, first_b = 0, any = 0;
        for (int i = 0; tps[i]; i++)
            for (int j = 0; mbs[j] && tps[i] <= c->nodes[k].gpus; j++) {
                if (!first_t)
                    first_t = tps[i], first_b = mbs[j];
                if (!ah_profile_has(prof, m, dev, tps[i], mbs[j]))
                    continue;
                any = 1;
                ah_layer_cost lc;
                for (int l = 0; l < L; l++) /* what the costing of a stage on this node type would stop at */
                    if (ah_profile_layer_cost(prof, m, &o->train, dev, l, tps[i], mbs[j], &lc, err, errlen) != 0)
                        return AH_EXIT_BAD_INPUT;
            }
        ah_layer_cost lc;
        if (first_t && !any) /* no candidate of this node type has data: the profile's reason */
            if (ah_profile_layer_cost(prof, m, &o->train, dev, 0, first_t, first_b, &lc, err, errlen) != 0)
                return AH_EXIT_BAD_INPUT;
    }
    return 0;
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
    default:
        rc = o->objective == AH_OBJECTIVE_COST ? search_cost(m, c, prof, o, out, k, n_out, err, errlen)
                                               : search_reranked(m, c, prof, o, out, k, n_out, err, errlen);
        break;
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
