/* Plan document lifetime (free / deep copy) and strategy names. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "autohet/plan.h"

static const char *const strategy_names[] = {
    [AH_STRATEGY_AUTOHET] = "autohet",
    [AH_STRATEGY_MEGATRON] = "megatron",
    [AH_STRATEGY_PROPORTIONAL] = "proportional",
};
#define N_STRATEGIES ((int)(sizeof strategy_names / sizeof strategy_names[0]))

const char *ah_strategy_name(ah_strategy s) {
    if ((int)s < 0 || (int)s >= N_STRATEGIES)
        return "unknown";
    return strategy_names[s];
}

int ah_strategy_parse(const char *s, ah_strategy *out) {
    if (!s)
        return -1;
    for (int i = 0; i < N_STRATEGIES; i++) {
        if (strcasecmp(s, strategy_names[i]) == 0) {
            if (out)
                *out = (ah_strategy)i;
            return 0;
        }
    }
    return -1;
}

void ah_plan_free(ah_plan *p) {
    if (!p)
        return;
    if (p->replicas) {
        for (int r = 0; r < p->n_replicas; r++)
            free(p->replicas[r].stages);
        free(p->replicas);
    }
    /* The cluster is an owned copy; ah_node holds no pointers, so freeing the
     * node array releases it completely (same as ah_cluster_free). */
    free(p->cluster.nodes);
    memset(p, 0, sizeof *p);
}

int ah_plan_uniform_tp(const ah_plan *p) {
    int tp = 0;
    for (int k = 0; k < p->n_replicas; k++)
        for (int j = 0; j < p->replicas[k].n_stages; j++) {
            int t = p->replicas[k].stages[j].tp;
            if (tp && t != tp)
                return 0;
            tp = t;
        }
    return tp;
}

void ah_plan_set_tp(ah_plan *p, int tp) {
    for (int k = 0; k < p->n_replicas; k++)
        for (int j = 0; j < p->replicas[k].n_stages; j++)
            p->replicas[k].stages[j].tp = tp;
}

int ah_plan_max_tp(const ah_plan *p) {
    int tp = 0;
    for (int k = 0; k < p->n_replicas; k++)
        for (int j = 0; j < p->replicas[k].n_stages; j++)
            if (p->replicas[k].stages[j].tp > tp)
                tp = p->replicas[k].stages[j].tp;
    return tp;
}

void ah_plan_tp_text(const ah_plan *p, char *buf, size_t n) {
    int u = ah_plan_uniform_tp(p), lo = 0;
    for (int k = 0; k < p->n_replicas; k++)
        for (int j = 0; j < p->replicas[k].n_stages; j++)
            if (!lo || p->replicas[k].stages[j].tp < lo)
                lo = p->replicas[k].stages[j].tp;
    if (u > 0)
        snprintf(buf, n, "%d", u);
    else
        snprintf(buf, n, "%d-%d per stage", lo, ah_plan_max_tp(p));
}

int ah_stage_tp_problem(const ah_model_config *m, int tp, char *buf, size_t n) {
    if (tp < 1 || tp > AH_MAX_TP || (tp & (tp - 1)))
        snprintf(buf, n, "%d is not a power of two in 1..%d", tp, AH_MAX_TP);
    else if (m->n_heads % tp || m->n_kv_heads % tp)
        snprintf(buf, n, "%d does not divide the model's %d attention heads and %d KV heads", tp, m->n_heads,
                 m->n_kv_heads);
    else
        return 0;
    return -1;
}

int ah_plan_uses_node(const ah_plan *p, const char *name) {
    for (int k = 0; k < p->n_replicas; k++)
        for (int j = 0; j < p->replicas[k].n_stages; j++)
            if (!strcmp(p->cluster.nodes[p->replicas[k].stages[j].node].name, name))
                return 1;
    return 0;
}

void ah_plan_copy(ah_plan *dst, const ah_plan *src) {
    if (!dst)
        return;
    if (!src || dst == src) {
        if (!src)
            memset(dst, 0, sizeof *dst);
        return;
    }
    *dst = *src; /* scalars and fixed-size strings */
    dst->cluster.nodes = NULL;
    dst->cluster.n_nodes = 0;
    dst->replicas = NULL;
    dst->n_replicas = 0;

    if (src->cluster.nodes && src->cluster.n_nodes > 0) {
        size_t n = (size_t)src->cluster.n_nodes;
        dst->cluster.nodes = malloc(n * sizeof *dst->cluster.nodes);
        if (!dst->cluster.nodes)
            goto oom;
        memcpy(dst->cluster.nodes, src->cluster.nodes, n * sizeof *dst->cluster.nodes);
        dst->cluster.n_nodes = src->cluster.n_nodes;
    }
    if (src->replicas && src->n_replicas > 0) {
        size_t n = (size_t)src->n_replicas;
        dst->replicas = calloc(n, sizeof *dst->replicas);
        if (!dst->replicas)
            goto oom;
        dst->n_replicas = src->n_replicas;
        for (size_t r = 0; r < n; r++) {
            const ah_replica *sr = &src->replicas[r];
            ah_replica *dr = &dst->replicas[r];
            *dr = *sr;
            dr->stages = NULL;
            dr->n_stages = 0;
            if (sr->stages && sr->n_stages > 0) {
                size_t ns = (size_t)sr->n_stages;
                dr->stages = malloc(ns * sizeof *dr->stages);
                if (!dr->stages)
                    goto oom;
                memcpy(dr->stages, sr->stages, ns * sizeof *dr->stages);
                dr->n_stages = sr->n_stages;
            }
        }
    }
    return;
oom:
    /* The signature cannot report failure; leave dst empty and valid. */
    ah_plan_free(dst);
}
