/* Baselines for the paper's comparisons, costed with the same model:
 *  megatron      symmetric 3D parallelism as Megatron-LM lays it out on any
 *                cluster: D identical pipelines of S stages, N/S blocks per
 *                stage (N % S == 0), ranks in inventory order with TP
 *                innermost then DP then PP, equal micro-batches per replica.
 *  proportional  Whale-style: D symmetric pipelines (blocks split as evenly
 *                as possible), TP groups sorted by GPU type so each replica is
 *                as homogeneous as it can be, micro-batches in proportion to
 *                each replica's speed (1 / its bottleneck stage time).
 * Both return the best configuration over (tp, micro-batch, S, D). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/search.h"

typedef struct {
    int node, unit;
    const ah_device *dev;
} unit_ref;

/* TP groups of the cluster in inventory order. */
static int list_units(const ah_cluster *c, int tp, unit_ref *u) {
    int n = 0;
    for (int i = 0; i < c->n_nodes; i++)
        for (int k = 0; k < c->nodes[i].gpus / tp; k++) {
            u[n].node = i;
            u[n].unit = k;
            u[n].dev = &c->nodes[i].dev;
            n++;
        }
    return n;
}

/* First layer of stage j when N blocks go to S stages, the first N % S
 * stages taking one more; the embedding joins stage 0 and the head the last. */
static int stage_first_layer(int N, int S, int j) {
    if (j == 0)
        return 0;
    int base = N / S, extra = N % S;
    return 1 + j * base + (j < extra ? j : extra);
}

/* Build a symmetric plan: replica d stage j uses units[pick(d, j)]. */
static void build_symmetric(ah_plan *p, const unit_ref *units, int tp, int S, int D, int interleave_dp,
                            const long long *mbs) {
    int N = p->model.n_layers, L = N + 2;
    p->n_replicas = D;
    p->replicas = calloc((size_t)D, sizeof(ah_replica));
    if (!p->replicas)
        abort();
    for (int d = 0; d < D; d++) {
        ah_replica *r = &p->replicas[d];
        r->n_stages = S;
        r->micro_batches = (int)mbs[d];
        r->stages = calloc((size_t)S, sizeof(ah_stage));
        if (!r->stages)
            abort();
        for (int j = 0; j < S; j++) {
            const unit_ref *u = &units[interleave_dp ? j * D + d : d * S + j];
            r->stages[j].node = u->node;
            r->stages[j].tp = tp;
            r->stages[j].gpu_first = u->unit * tp;
            r->stages[j].layer_first = stage_first_layer(N, S, j);
            r->stages[j].layer_last = j + 1 == S ? L : stage_first_layer(N, S, j + 1);
        }
    }
}

typedef int (*assign_fn)(ah_plan *p, const ah_profile *prof, const ah_plan_options *o, long long M, char *err,
                         size_t errlen);

/* Equal batch: every replica M / D micro-batches. */
static int assign_equal(ah_plan *p, const ah_profile *prof, const ah_plan_options *o, long long M, char *err,
                        size_t errlen) {
    (void)M;
    return ah_plan_evaluate(p, prof, o, err, errlen);
}

/* Proportional batch: m_d ~ 1 / B_d, largest remainder, each >= 1. */
static int assign_proportional(ah_plan *p, const ah_profile *prof, const ah_plan_options *o, long long M,
                               char *err, size_t errlen) {
    if (ah_plan_evaluate(p, prof, o, err, errlen) != 0)
        return -1;
    int D = p->n_replicas;
    double total = 0;
    for (int d = 0; d < D; d++)
        total += 1.0 / p->replicas[d].bottleneck_s;
    long long given = 0;
    double *frac = malloc(sizeof(double) * (size_t)D);
    if (!frac)
        abort();
    for (int d = 0; d < D; d++) {
        double share = (double)M * (1.0 / p->replicas[d].bottleneck_s) / total;
        long long m = (long long)share;
        if (m < 1)
            m = 1;
        p->replicas[d].micro_batches = (int)m;
        frac[d] = share - (double)m;
        given += m;
    }
    while (given < M) { /* hand out the rest by largest remainder */
        int best = 0;
        for (int d = 1; d < D; d++)
            if (frac[d] > frac[best])
                best = d;
        p->replicas[best].micro_batches++;
        frac[best] -= 1.0;
        given++;
    }
    while (given > M) { /* the >= 1 floor overshot: take from the largest */
        int best = -1;
        for (int d = 0; d < D; d++)
            if (p->replicas[d].micro_batches > 1 && (best < 0 || frac[d] < frac[best]))
                best = d;
        if (best < 0)
            break;
        p->replicas[best].micro_batches--;
        frac[best] += 1.0;
        given--;
    }
    free(frac);
    return ah_plan_evaluate(p, prof, o, err, errlen);
}

static int by_class(const void *a, const void *b) {
    const unit_ref *x = a, *y = b;
    if (x->dev->peak_tflops != y->dev->peak_tflops)
        return x->dev->peak_tflops < y->dev->peak_tflops ? 1 : -1;
    if (x->dev->mem_gib != y->dev->mem_gib)
        return x->dev->mem_gib < y->dev->mem_gib ? 1 : -1;
    int c = strcmp(x->dev->name, y->dev->name);
    if (c)
        return c;
    if (x->node != y->node)
        return x->node - y->node;
    return x->unit - y->unit;
}

static int symmetric_search(const char *name, const ah_model_config *m, const ah_cluster *c,
                            const ah_profile *prof, const ah_plan_options *o, ah_plan *out, int megatron,
                            char *err, size_t errlen) {
    int tps[8], mbs[8];
    ah_candidate_tps(m, c, o, tps);
    ah_candidate_mbs(o, mbs);
    int total = ah_cluster_total_gpus(c);
    unit_ref *units = malloc(sizeof(unit_ref) * (size_t)(total + 1));
    long long *mb_list = malloc(sizeof(long long) * (size_t)(total + 1));
    if (!units || !mb_list)
        abort();
    int found = 0, N = m->n_layers;
    long long effort = 0;
    char e2[256];
    for (int i = 0; tps[i]; i++) {
        int U = list_units(c, tps[i], units);
        if (!megatron)
            qsort(units, (size_t)U, sizeof(unit_ref), by_class);
        for (int j = 0; mbs[j]; j++) {
            if (!ah_profile_has(prof, m, units[0].dev, tps[i], mbs[j]))
                continue;
            long long M = o->global_batch / mbs[j];
            for (int S = 1; S <= U && S <= o->max_stages && S <= N; S++) {
                if (megatron && N % S)
                    continue;
                for (int D = 1; D * S <= U && D <= M; D++) {
                    if (megatron && M % D)
                        continue;
                    for (int d = 0; d < D; d++)
                        mb_list[d] = megatron ? M / D : (d < M % D) + M / D;
                    ah_plan p;
                    ah_plan_init_from(&p, name, m, c, o, mbs[j]);
                    build_symmetric(&p, units, tps[i], S, D, megatron, mb_list);
                    effort++;
                    int rc = megatron ? assign_equal(&p, prof, o, M, e2, sizeof e2)
                                      : assign_proportional(&p, prof, o, M, e2, sizeof e2);
                    if (rc == 0 && ah_plan_check_memory(&p, e2, sizeof e2) == 0 &&
                        (!found || p.iteration_time_ns < out->iteration_time_ns)) {
                        if (found)
                            ah_plan_free(out);
                        *out = p;
                        found = 1;
                    } else {
                        ah_plan_free(&p);
                    }
                }
            }
        }
    }
    free(units);
    free(mb_list);
    if (!found) {
        snprintf(err, errlen, "no %s plan fits this cluster in memory (or the profile covers none)", name);
        return -1;
    }
    out->candidates = effort;
    out->search_value_ns = out->iteration_time_ns;
    out->search_value_s = out->iteration_time_s;
    return 0;
}

int ah_plan_megatron(const ah_model_config *m, const ah_cluster *c, const ah_profile *prof,
                     const ah_plan_options *o, ah_plan *out, char *err, size_t errlen) {
    return symmetric_search("megatron", m, c, prof, o, out, 1, err, errlen);
}

int ah_plan_proportional(const ah_model_config *m, const ah_cluster *c, const ah_profile *prof,
                         const ah_plan_options *o, ah_plan *out, char *err, size_t errlen) {
    return symmetric_search("proportional", m, c, prof, o, out, 0, err, errlen);
}
