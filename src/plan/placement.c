/* Placement: turning a solution (templates x micro-batches) into concrete
 * nodes and GPU ids. Runs of same-class stages are laid out in whole-node
 * chunks first and the remainder best-fit into one node, which realises the
 * intra-/inter-node boundaries the templates were costed with whenever the
 * free units allow it; ah_plan_evaluate then costs the actual links. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/search.h"

void ah_plan_init_from(ah_plan *p, const char *strategy, const ah_model_config *m, const ah_cluster *c,
                       const ah_plan_options *o, int mb) {
    memset(p, 0, sizeof *p);
    p->version = AH_PLAN_FORMAT_VERSION;
    snprintf(p->strategy, sizeof p->strategy, "%s", strategy);
    p->model = *m;
    p->train = o->train;
    p->mem_reserve_gib = o->mem_reserve_gib;
    p->cluster.n_nodes = c->n_nodes;
    p->cluster.nodes = malloc(sizeof(ah_node) * (size_t)(c->n_nodes ? c->n_nodes : 1));
    if (!p->cluster.nodes)
        abort();
    memcpy(p->cluster.nodes, c->nodes, sizeof(ah_node) * (size_t)c->n_nodes);
    p->micro_batch = mb;
    p->global_batch = o->global_batch;
}

/* Free GPUs per cluster node. Stages take nodes first; their GPU ids are
 * handed out at the end (assign_gpus). */
typedef struct {
    int *free_gpus;
} gpu_pool;

/* TP groups of class k that still fit on node n */
static int groups_free(const gpu_pool *pool, const ah_class *k, int n) {
    return pool->free_gpus[n] / k->tp;
}

static void take_groups(gpu_pool *pool, const ah_class *k, int node, int n, int *pos, int *node_out) {
    for (int g = 0; g < n; g++)
        node_out[(*pos)++] = node;
    pool->free_gpus[node] -= n * k->tp;
}

/* Place `len` consecutive stages of class k: whole free nodes first, the
 * remainder best-fit into one node, else spread over the emptiest nodes. */
static void alloc_run(const ah_class *k, gpu_pool *pool, int len, int *node_out) {
    int pos = 0;
    while (len - pos >= k->upn) {
        int full = -1;
        for (int i = 0; i < k->n_nodes && full < 0; i++)
            if (pool->free_gpus[k->nodes[i]] == k->gpus_per_node)
                full = k->nodes[i];
        if (full < 0)
            break;
        take_groups(pool, k, full, k->upn, &pos, node_out);
    }
    int rem = len - pos;
    if (rem > 0) {
        int best = -1;
        for (int i = 0; i < k->n_nodes; i++) {
            int f = groups_free(pool, k, k->nodes[i]);
            if (f >= rem && (best < 0 || f < groups_free(pool, k, best)))
                best = k->nodes[i];
        }
        if (best >= 0)
            take_groups(pool, k, best, rem, &pos, node_out);
    }
    while (pos < len) { /* fragmented: spread over the emptiest nodes */
        int best = -1;
        for (int i = 0; i < k->n_nodes; i++) {
            int f = groups_free(pool, k, k->nodes[i]);
            if (f > 0 && (best < 0 || f > groups_free(pool, k, best)))
                best = k->nodes[i];
        }
        if (best < 0)
            abort(); /* the search never uses more slots than exist, and they pack */
        int f = groups_free(pool, k, best), want = len - pos;
        take_groups(pool, k, best, want < f ? want : f, &pos, node_out);
    }
}

/* GPU ids: on each node the stages placed there take consecutive GPUs,
 * larger degrees first (in placement order within a degree), so every group
 * starts at a multiple of its degree and the groups fill the node exactly
 * when their degrees divide its GPU count. */
static void assign_gpus(ah_plan *p) {
    int *next = calloc((size_t)p->cluster.n_nodes + 1, sizeof(int));
    if (!next)
        abort();
    for (int t = AH_MAX_TP; t >= 1; t /= 2)
        for (int r = 0; r < p->n_replicas; r++)
            for (int j = 0; j < p->replicas[r].n_stages; j++) {
                ah_stage *st = &p->replicas[r].stages[j];
                if (st->tp != t)
                    continue;
                st->gpu_first = next[st->node];
                next[st->node] += t;
            }
    free(next);
}

/* Deeper pipelines are placed first: they need the most whole nodes. */
static void sort_by_depth(const ah_search_ctx *x, ah_sol_replica *r, int n) {
    for (int i = 1; i < n; i++) {
        ah_sol_replica v = r[i];
        int dv = x->tpl[v.tpl].n_stages, j = i;
        while (j > 0 && (x->tpl[r[j - 1].tpl].n_stages < dv ||
                         (x->tpl[r[j - 1].tpl].n_stages == dv && r[j - 1].tpl > v.tpl))) {
            r[j] = r[j - 1];
            j--;
        }
        r[j] = v;
    }
}

/* Node-local layout: stage j of every copy on node local_nodes[j], a node
 * of the stage's class with room for all R copies, a different node per stage. */
static void pick_local_nodes(const ah_search_ctx *x, const ah_template *t, int R, gpu_pool *pool, int *out) {
    for (int j = 0; j < t->n_stages; j++) {
        const ah_class *k = &x->cls[t->cls[j]];
        out[j] = -1;
        for (int i = 0; i < k->n_nodes && out[j] < 0; i++)
            if (groups_free(pool, k, k->nodes[i]) >= R)
                out[j] = k->nodes[i];
        if (out[j] < 0)
            abort(); /* the search admits a local template only where this exists */
        pool->free_gpus[out[j]] = 0;
    }
}

int ah_search_build_plan(ah_search_ctx *x, const ah_solution *s, const ah_profile *prof, ah_plan *out,
                         char *err, size_t errlen) {
    ah_plan_init_from(out, "autohet", x->m, x->c, x->o, x->mb);
    ah_sol_replica *order = malloc(sizeof *order * (size_t)(s->n ? s->n : 1));
    if (!order)
        abort();
    memcpy(order, s->r, sizeof *order * (size_t)s->n);
    sort_by_depth(x, order, s->n);
    gpu_pool pool;
    pool.free_gpus = calloc((size_t)x->c->n_nodes + 1, sizeof(int));
    if (!pool.free_gpus)
        abort();
    for (int k = 0; k < x->K; k++)
        for (int i = 0; i < x->cls[k].n_nodes; i++)
            pool.free_gpus[x->cls[k].nodes[i]] = x->cls[k].gpus_per_node;
    int local_nodes[AH_MAX_STAGES];
    if (s->local_R > 0)
        pick_local_nodes(x, &x->tpl[s->r[0].tpl], s->local_R, &pool, local_nodes);
    out->n_replicas = s->n;
    out->replicas = calloc((size_t)(s->n ? s->n : 1), sizeof(ah_replica));
    if (!out->replicas)
        abort();
    for (int r = 0; r < s->n; r++) {
        const ah_template *t = &x->tpl[order[r].tpl];
        const int *ends = s->single ? t->ends1 : t->ends;
        ah_replica *rep = &out->replicas[r];
        rep->n_stages = t->n_stages;
        rep->micro_batches = (int)order[r].m;
        rep->stages = calloc((size_t)t->n_stages, sizeof(ah_stage));
        if (!rep->stages)
            abort();
        for (int j = 0, first = 0; j < t->n_stages; first = ends[j], j++) {
            ah_stage *st = &rep->stages[j];
            st->node = s->local_R > 0 ? local_nodes[j] : -1;
            st->tp = x->cls[t->cls[j]].tp;
            st->layer_first = first;
            st->layer_last = ends[j];
        }
    }
    /* Runs of same-class stages take nodes by decreasing degree (deepest
     * pipelines first within a degree): with every degree of a kind dividing
     * its GPUs per node, each node's free GPUs stay a multiple of the degree
     * being placed, so the groups the search counted always fit. */
    for (int t = AH_MAX_TP; t >= 1 && s->local_R == 0; t /= 2)
        for (int r = 0; r < s->n; r++) {
            const ah_template *tp = &x->tpl[order[r].tpl];
            for (int j = 0; j < tp->n_stages;) {
                int len = 1, nodes[AH_MAX_STAGES];
                while (j + len < tp->n_stages && tp->cls[j + len] == tp->cls[j])
                    len++;
                if (x->cls[tp->cls[j]].tp == t) {
                    alloc_run(&x->cls[tp->cls[j]], &pool, len, nodes);
                    for (int q = 0; q < len; q++)
                        out->replicas[r].stages[j + q].node = nodes[q];
                }
                j += len;
            }
        }
    free(order);
    free(pool.free_gpus);
    assign_gpus(out);
    return ah_plan_evaluate(out, prof, x->o, err, errlen);
}
