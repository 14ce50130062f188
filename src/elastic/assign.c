/* The recovery assignment (docs/recovery.md): which step to resume from and
 * where every new rank gets every layer shard of it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "autohet/elastic.h"
#include "autohet/schedule.h"
#include "util/errors.h"
#include "util/atomic_file.h"

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

/* the rank serving holding i's node to peers: its lowest plan rank, or an
 * extra server rank when the plan does not use the node */
static int server_of(ah_assignment *a, const ah_holding *h, int i, const int *h_node, const int *server,
                     int world) {
    if (h_node[i] >= 0 && server[h_node[i]] >= 0)
        return server[h_node[i]];
    for (int k = 0; k < a->n_servers; k++)
        if (!strcmp(a->server_node[k], h[i].node))
            return world + k;
    snprintf(a->server_node[a->n_servers], sizeof a->server_node[0], "%s", h[i].node);
    return world + a->n_servers++;
}

static int cmp_desc(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x < y) - (x > y);
}

/* the holding's entry for (layer, tp) at exactly `step`, or NULL */
static const ah_manifest_entry *held(const ah_holding *h, int layer, int tp, int step) {
    return ah_manifest_find_step(&h->m, layer, tp, step);
}

void ah_assignment_free(ah_assignment *a) {
    free(a->e);
    free(a->server_node);
    memset(a, 0, sizeof *a);
}

int ah_recovery_assign(const ah_holding *h, int nh, const ah_plan *plan, ah_recovery_mode mode,
                       ah_assignment *out, char *err, size_t errlen) {
    int L = ah_model_num_layers(&plan->model), world = ah_plan_slots(plan);
    /* the TP shards of each layer the new plan's ranks restore */
    int *need_tp = ah_xcalloc((size_t)L + 1, sizeof(int));
    for (int k = 0; k < plan->n_replicas; k++)
        for (int j = 0; j < plan->replicas[k].n_stages; j++) {
            const ah_stage *s = &plan->replicas[k].stages[j];
            for (int l = s->layer_first; l < s->layer_last; l++)
                need_tp[l] = s->tp > need_tp[l] ? s->tp : need_tp[l];
        }
    memset(out, 0, sizeof *out);
    out->server_node = ah_xcalloc((size_t)nh + 1, sizeof *out->server_node);
    /* the lowest rank of each plan node serves its node's shards to peers */
    int nn = plan->cluster.n_nodes;
    int *server = ah_xcalloc((size_t)nn + 1, sizeof(int));
    for (int q = 0; q < nn; q++)
        server[q] = -1;
    for (int r = world - 1; r >= 0; r--)
        server[ah_plan_rank_node(plan, r, NULL, NULL, NULL)] = r;
    int *h_node = ah_xcalloc((size_t)nh + 1, sizeof(int)); /* holding -> plan node, -1 not in the plan */
    for (int i = 0; i < nh; i++) {
        h_node[i] = -1;
        for (int q = 0; q < nn; q++)
            if (!strcmp(plan->cluster.nodes[q].name, h[i].node))
                h_node[i] = q;
    }
    /* usable holdings and the steps they offer */
    int *usable = ah_xcalloc((size_t)nh + 1, sizeof(int)), n_steps = 0, cap = 16;
    int *steps = ah_xcalloc((size_t)cap, sizeof(int));
    for (int i = 0; i < nh; i++) {
        usable[i] = h[i].tier == AH_TIER_CLOUD || mode == AH_RECOVERY_LAYER_BITMAP;
        for (int k = 0; usable[i] && k < h[i].m.n; k++) {
            if (n_steps == cap)
                steps = ah_xrealloc(steps, sizeof(int) * (size_t)(cap *= 2));
            steps[n_steps++] = h[i].m.e[k].step;
        }
    }
    qsort(steps, (size_t)n_steps, sizeof(int), cmp_desc);
    /* the newest step at which every (layer, TP shard) has a copy */
    int chosen = -1, worst_layer = 0, worst_tp = 0;
    for (int s = 0; s < n_steps && chosen < 0; s++) {
        if (s > 0 && steps[s] == steps[s - 1])
            continue;
        int ok = 1;
        for (int l = 0; l < L && ok; l++)
            for (int t = 0; t < need_tp[l] && ok; t++) {
                int any = 0;
                for (int i = 0; i < nh && !any; i++)
                    any = usable[i] && held(&h[i], l, t, steps[s]);
                if (!any) {
                    ok = 0;
                    worst_layer = l, worst_tp = t;
                }
            }
        if (ok)
            chosen = steps[s];
    }
    free(steps);
    free(need_tp);
    if (chosen < 0) {
        if (n_steps == 0)
            snprintf(err, errlen, "no checkpoint survives in any%s tier",
                     mode == AH_RECOVERY_FULL_RELOAD ? " cloud" : "");
        else
            snprintf(err, errlen,
                     "no step has a copy of every layer: layer %d (TP rank %d) is missing at every step "
                     "that the others have",
                     worst_layer, worst_tp);
        free(usable), free(server), free(h_node);
        /* step 0 is always recoverable: the initialisation from the seed */
        out->step = 0;
        out->e = ah_xcalloc(1, sizeof(ah_assign_entry));
        return 1;
    }
    double *load = ah_xcalloc((size_t)nh + 1, sizeof(double)); /* bytes served per holding, to spread peers */
    int total = 0;
    for (int r = 0; r < world; r++) {
        int f = 0, l1 = 0;
        ah_plan_rank_node(plan, r, &f, &l1, NULL);
        total += l1 - f;
    }
    ah_assign_entry *e = ah_xcalloc((size_t)total + 1, sizeof(ah_assign_entry));
    int k = 0;
    for (int r = 0; r < world; r++) {
        int f = 0, l1 = 0, t = 0;
        int node = ah_plan_rank_node(plan, r, &f, &l1, &t);
        for (int l = f; l < l1; l++) {
            ah_assign_entry *v = &e[k++];
            *v = (ah_assign_entry){r, l, t, -1, -1, -1, -1, 0};
            /* nearest first: own memory, own disk, peer memory, peer disk, cloud */
            static const int order[4][2] = {
                {AH_TIER_MEMORY, 1}, {AH_TIER_DISK, 1}, {AH_TIER_MEMORY, 0}, {AH_TIER_DISK, 0}};
            for (int o = 0; o < 4 && v->holding < 0 && mode == AH_RECOVERY_LAYER_BITMAP; o++) {
                int best = -1;
                for (int i = 0; i < nh; i++) {
                    if (h[i].tier != order[o][0] || !held(&h[i], l, t, chosen))
                        continue;
                    int own = h_node[i] >= 0 && h_node[i] == node;
                    if (own != order[o][1])
                        continue;
                    if (best < 0 || load[i] < load[best])
                        best = i;
                }
                if (best >= 0) {
                    v->holding = best;
                    v->tier = order[o][1] ? order[o][0] : AH_TIER_PEER;
                    v->server = order[o][1] ? -1 : server_of(out, h, best, h_node, server, world);
                }
            }
            for (int i = 0; i < nh; i++)
                if (h[i].tier == AH_TIER_CLOUD && held(&h[i], l, t, chosen)) {
                    if (v->holding < 0) {
                        v->holding = i;
                        v->tier = AH_TIER_CLOUD;
                    } else if (v->fallback < 0 && v->tier != AH_TIER_CLOUD) {
                        v->fallback = i;
                    }
                }
            if (v->holding < 0) { /* cannot happen: the step was chosen complete over usable holdings */
                snprintf(err, errlen, "layer %d (TP rank %d) at step %d has no source", l, t, chosen);
                free(e);
                free(usable), free(server), free(h_node), free(load);
                ah_assignment_free(out);
                return -1;
            }
            const ah_manifest_entry *me = held(&h[v->holding], l, t, chosen);
            v->bytes = (double)me->bytes;
            load[v->holding] += v->bytes;
        }
    }
    free(usable), free(server), free(h_node), free(load);
    out->step = chosen;
    out->e = e;
    out->n = k;
    return 0;
}

static ah_shard_src src_of(const ah_holding *h, const ah_manifest_entry *me) {
    ah_shard_src s = {.bytes = me->bytes, .xxh64 = me->xxh64};
    snprintf(s.path, sizeof s.path, "%s/%s", h->dir, me->file);
    return s;
}

int ah_recovery_write(const char *path, const ah_holding *h, const ah_plan *plan, const ah_assignment *a,
                      double cloud_bytes_per_s, char *err, size_t errlen) {
    int world = ah_plan_slots(plan), nn = plan->cluster.n_nodes, step = a->step, n = a->n;
    const ah_assign_entry *e = a->e;
    /* ranks of a node that read from the cloud share the node's bandwidth */
    int *cloud_readers = ah_xcalloc((size_t)nn + 1, sizeof(int)),
        *reads = ah_xcalloc((size_t)world + 1, sizeof(int));
    for (int i = 0; i < n; i++)
        if (e[i].tier == AH_TIER_CLOUD || e[i].fallback >= 0)
            reads[e[i].rank] = 1;
    for (int r = 0; r < world; r++)
        cloud_readers[ah_plan_rank_node(plan, r, NULL, NULL, NULL)] += reads[r];
    ah_recovery_doc d = {.step = step, .n_ranks = world + a->n_servers, .n_shards = n};
    d.ranks = ah_xcalloc((size_t)d.n_ranks + 1, sizeof(ah_recovery_rank));
    d.shards = ah_xcalloc((size_t)n + 1, sizeof(ah_recovery_shard));
    for (int r = 0; r < world; r++) {
        int node = ah_plan_rank_node(plan, r, NULL, NULL, NULL);
        ah_recovery_rank *x = &d.ranks[r];
        x->rank = r;
        snprintf(x->node, sizeof x->node, "%s", plan->cluster.nodes[node].name);
        x->cloud_bytes_per_s =
            cloud_bytes_per_s > 0 && cloud_readers[node] > 0 ? cloud_bytes_per_s / cloud_readers[node] : 0;
    }
    for (int k = 0; k < a->n_servers; k++) {
        ah_recovery_rank *x = &d.ranks[world + k];
        x->rank = world + k;
        snprintf(x->node, sizeof x->node, "%s", a->server_node[k]);
        x->server_only = 1;
    }
    for (int i = 0; i < n; i++) {
        const ah_holding *src = &h[e[i].holding];
        ah_recovery_shard *x = &d.shards[i];
        *x = (ah_recovery_shard){.rank = e[i].rank,
                                 .layer = e[i].layer,
                                 .tp = e[i].tp,
                                 .tier = e[i].tier,
                                 .server = e[i].tier == AH_TIER_PEER ? e[i].server : -1,
                                 .src = src_of(src, held(src, e[i].layer, e[i].tp, step)),
                                 .holder_tier = e[i].tier == AH_TIER_PEER ? src->tier : -1};
        snprintf(x->holder, sizeof x->holder, "%s", src->node);
        if (e[i].fallback >= 0)
            x->fallback = src_of(&h[e[i].fallback], held(&h[e[i].fallback], e[i].layer, e[i].tp, step));
    }
    int rc = ah_recovery_doc_write(path, &d, err, errlen);
    ah_recovery_doc_free(&d);
    free(cloud_readers);
    free(reads);
    return rc;
}
