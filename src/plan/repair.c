/* A plan for the survivors of a running one, without a full search (`autohet replan`, the recovery path on
 * large clusters; docs/planner.md "Replanning after a loss"): the replicas whose nodes all survive are kept
 * as they are, the surviving nodes of broken replicas that no kept replica uses are planned on their own by
 * the exact search, and the global batch's micro-batches are dealt out again over all replicas: one each,
 * then each next one to the replica that would finish it first (A_k + m_k B_k, the closed form's pipeline
 * time), which minimises the slowest pipeline. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autohet/plan.h"
#include "plan/search.h"
#include "util/errors.h"

/* a copy of r (stages on nodes of `from`) appended to p, its nodes mapped by name to p's cluster */
static void append_replica(ah_plan *p, const ah_replica *r, const ah_cluster *from) {
    p->replicas = ah_xrealloc(p->replicas, sizeof(ah_replica) * (size_t)(p->n_replicas + 1));
    ah_replica *d = &p->replicas[p->n_replicas++];
    memset(d, 0, sizeof *d);
    d->n_stages = r->n_stages;
    d->micro_batches = 1;
    d->stages = ah_xcalloc((size_t)r->n_stages, sizeof(ah_stage));
    for (int j = 0; j < r->n_stages; j++) {
        d->stages[j] = r->stages[j];
        d->stages[j].node = ah_cluster_node_index(&p->cluster, from->nodes[r->stages[j].node].name);
    }
}

/* The micro-batches dealt out (header comment) from each replica's fill-and-drain A and period B. With fewer
 * micro-batches than replicas the last ones (the newly planned, then the kept) go. */
static int deal_micro_batches(ah_plan *p, const ah_profile *prof, const ah_plan_options *o, char *err,
                              size_t errlen) {
    int M = p->global_batch / p->micro_batch, R = p->n_replicas;
    while (R > M) {
        free(p->replicas[R - 1].stages);
        p->n_replicas = --R;
    }
    for (int k = 0; k < R; k++) /* any valid split: A and B do not depend on it */
        p->replicas[k].micro_batches = k == 0 ? M - (R - 1) : 1;
    if (ah_plan_evaluate(p, prof, o, err, errlen) != 0)
        return -1;
    p->replicas[0].micro_batches = 1;
    for (int left = M - R; left > 0; left--) {
        int best = 0;
        double tbest = 0;
        for (int k = 0; k < R; k++) {
            const ah_replica *r = &p->replicas[k];
            double t = r->fill_drain_s + r->micro_batches * r->bottleneck_s;
            if (k == 0 || t < tbest) {
                tbest = t;
                best = k;
            }
        }
        p->replicas[best].micro_batches++;
    }
    return ah_plan_evaluate(p, prof, o, err, errlen);
}

int ah_plan_repair(const ah_plan *old, const ah_cluster *survivors, const ah_profile *prof,
                   const ah_plan_options *o, ah_plan *out, char *err, size_t errlen) {
    ah_plan_options so = *o;
    so.micro_batch = old->micro_batch;
    ah_plan_options_take_plan(&so, old);
    ah_plan_init_from(out, "autohet", &old->model, survivors, &so, old->micro_batch);
    snprintf(out->profile_source, sizeof out->profile_source, "%s", old->profile_source);
    int *map = ah_xcalloc((size_t)old->cluster.n_nodes + 1, sizeof(int));
    unsigned char *used = ah_xcalloc((size_t)survivors->n_nodes + 1, 1);
    for (int i = 0; i < old->cluster.n_nodes; i++)
        map[i] = ah_cluster_node_index(survivors, old->cluster.nodes[i].name);
    /* 1. the replicas that survive whole */
    for (int k = 0; k < old->n_replicas; k++) {
        const ah_replica *r = &old->replicas[k];
        int whole = 1;
        for (int j = 0; j < r->n_stages && whole; j++)
            whole = map[r->stages[j].node] >= 0 && survivors->nodes[map[r->stages[j].node]].gpus ==
                                                       old->cluster.nodes[r->stages[j].node].gpus;
        if (!whole)
            continue;
        append_replica(out, r, &old->cluster);
        for (int j = 0; j < r->n_stages; j++)
            used[map[r->stages[j].node]] = 1;
    }
    /* 2. the surviving nodes of broken replicas that no kept replica touches, planned on their own (nodes
     * the old plan left idle stay idle: it had its reasons, a slow NIC that would slow every all-reduce) */
    unsigned char *was_used = ah_xcalloc((size_t)survivors->n_nodes + 1, 1);
    for (int k = 0; k < old->n_replicas; k++)
        for (int j = 0; j < old->replicas[k].n_stages; j++)
            if (map[old->replicas[k].stages[j].node] >= 0)
                was_used[map[old->replicas[k].stages[j].node]] = 1;
    ah_cluster freec = {ah_xcalloc((size_t)survivors->n_nodes + 1, sizeof(ah_node)), 0};
    for (int i = 0; i < survivors->n_nodes; i++)
        if (!used[i] && was_used[i])
            freec.nodes[freec.n_nodes++] = survivors->nodes[i];
    free(was_used);
    char why[512] = "";
    ah_plan fp, with;
    int have_free =
        freec.n_nodes > 0 && ah_plan_search(&old->model, &freec, prof, &so, &fp, why, sizeof why) == 0;
    free(map);
    free(used);
    /* 3. the micro-batches dealt out again, over the kept replicas alone and over them with the new ones: the
     * faster wins (new replicas of other layer splits add gradient buckets, which can cost more than they
     * give) */
    int have_with = 0;
    if (have_free) {
        ah_plan_copy(&with, out);
        for (int k = 0; k < fp.n_replicas; k++)
            append_replica(&with, &fp.replicas[k], &fp.cluster);
        ah_plan_free(&fp);
        have_with = deal_micro_batches(&with, prof, &so, why, sizeof why) == 0;
        if (!have_with)
            ah_plan_free(&with);
    }
    int have_kept = out->n_replicas > 0 && deal_micro_batches(out, prof, &so, err, errlen) == 0;
    if (have_with && (!have_kept || with.iteration_time_s < out->iteration_time_s)) {
        ah_plan_free(out);
        *out = with;
    } else if (have_with) {
        ah_plan_free(&with);
    }
    free(freec.nodes);
    if (!have_kept && !have_with) {
        snprintf(err, errlen, "replan: no replica survives whole and the nodes left hold none (%s)",
                 why[0] ? why : "no node left");
        ah_plan_free(out);
        return AH_EXIT_BAD_INPUT;
    }
    return 0;
}
