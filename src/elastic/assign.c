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

/* the holding's entry for TP rank tp of layer at exactly `step` and TP degree
 * deg: strict, one that records deg; else also one that records no degree
 * (an older manifest; deg 0 asks for any) */
static const ah_manifest_entry *held(const ah_holding *h, int layer, int tp, int deg, int step, int strict) {
    if (!strict)
        return ah_manifest_find_shard(&h->m, layer, tp, deg, step);
    for (int i = 0; i < h->m.n; i++) {
        const ah_manifest_entry *e = &h->m.e[i];
        if (e->layer == layer && e->tp_rank == tp && e->tp_degree == deg && e->step == step)
            return e;
    }
    return NULL;
}

void ah_assignment_free(ah_assignment *a) {
    free(a->e);
    free(a->server_node);
    memset(a, 0, sizeof *a);
}

/* what every source choice needs to know */
typedef struct {
    const ah_holding *h;
    int nh;
    const int *usable, *h_node, *server;
    int world, step;
    ah_recovery_mode mode;
    double *load; /* bytes served per holding, to spread peers */
    ah_assignment *out;
} assign_ctx;

/* some usable holding has the shard */
static int available(const assign_ctx *c, int l, int t, int deg, int strict, int step) {
    for (int i = 0; i < c->nh; i++)
        if (c->usable[i] && held(&c->h[i], l, t, deg, step, strict))
            return 1;
    return 0;
}

/* every TP rank of degree T of layer l has a copy (recorded at degree T) */
static int degree_complete(const assign_ctx *c, int l, int T, int step) {
    for (int t = 0; t < T; t++)
        if (!available(c, l, t, T, 1, step))
            return 0;
    return 1;
}

/* Can every stage of `plan` holding layer l restore it at `step`: its own
 * degree's shards (any, legacy entries included), or every TP rank of one
 * recorded degree to reshard from? 1, or 0 with *missing_tp the first
 * own-degree TP rank missing. */
static int layer_restorable(const assign_ctx *c, const ah_plan *plan, int l, int step, int *missing_tp) {
    int direct = 1;
    for (int k = 0; k < plan->n_replicas && direct; k++)
        for (int j = 0; j < plan->replicas[k].n_stages && direct; j++) {
            const ah_stage *s = &plan->replicas[k].stages[j];
            for (int t = 0; l >= s->layer_first && l < s->layer_last && t < s->tp && direct; t++)
                if (!available(c, l, t, s->tp, 0, step))
                    direct = 0, *missing_tp = t;
        }
    for (int T = 1; T <= AH_MAX_TP && !direct; T *= 2)
        direct = degree_complete(c, l, T, step);
    return direct;
}

/* Every other copy of the shard a rank on `node` can read as a file, nearest first: its own node's
 * memory and disk, then every cloud copy (a peer's tiers are only reachable through its server rank). */
static void pick_fallbacks(const assign_ctx *c, ah_assign_entry *v, int node, int l, int t, int deg, int strict) {
    static const int order[3] = {AH_TIER_MEMORY, AH_TIER_DISK, AH_TIER_CLOUD};
    v->n_fallback = 0;
    for (int o = 0; o < 3; o++)
        for (int i = 0; i < c->nh && v->n_fallback < AH_MAX_FALLBACKS; i++) {
            const ah_holding *h = &c->h[i];
            int own = c->h_node[i] >= 0 && c->h_node[i] == node;
            if (i == v->holding || h->tier != order[o] || (order[o] != AH_TIER_CLOUD && !own) ||
                (c->mode == AH_RECOVERY_FULL_RELOAD && order[o] != AH_TIER_CLOUD) ||
                !held(h, l, t, deg, c->step, strict))
                continue;
            v->fallback[v->n_fallback++] = i;
        }
}

/* The source of shard (l, t, deg) for a rank on plan node `node` into v:
 * nearest first (own memory, own disk, peer memory, peer disk, cloud; among
 * peers the least loaded), every other readable copy as a fallback. 0, -1 none. */
static int pick_source(const assign_ctx *c, ah_assign_entry *v, int node, int l, int t, int deg, int strict) {
    static const int order[4][2] = {{AH_TIER_MEMORY, 1}, {AH_TIER_DISK, 1}, {AH_TIER_MEMORY, 0}, {AH_TIER_DISK, 0}};
    const ah_holding *h = c->h;
    v->holding = v->server = -1;
    for (int o = 0; o < 4 && v->holding < 0 && c->mode == AH_RECOVERY_LAYER_BITMAP; o++) {
        int best = -1;
        for (int i = 0; i < c->nh; i++) {
            if (h[i].tier != order[o][0] || !held(&h[i], l, t, deg, c->step, strict))
                continue;
            int own = c->h_node[i] >= 0 && c->h_node[i] == node;
            if (own != order[o][1])
                continue;
            if (best < 0 || c->load[i] < c->load[best])
                best = i;
        }
        if (best >= 0) {
            v->holding = best;
            v->tier = order[o][1] ? order[o][0] : AH_TIER_PEER;
            v->server = order[o][1] ? -1 : server_of(c->out, h, best, c->h_node, c->server, c->world);
        }
    }
    for (int i = 0; i < c->nh && v->holding < 0; i++) /* the cloud copy with the least load so far */
        if (h[i].tier == AH_TIER_CLOUD && held(&h[i], l, t, deg, c->step, strict))
            v->holding = i, v->tier = AH_TIER_CLOUD;
    if (v->holding < 0)
        return -1;
    pick_fallbacks(c, v, node, l, t, deg, strict);
    const ah_manifest_entry *me = held(&h[v->holding], l, t, deg, c->step, strict);
    v->bytes = (double)me->bytes;
    v->degree = me->tp_degree;
    c->load[v->holding] += v->bytes;
    return 0;
}

/* The old degree to reshard layer l from for a rank on `node`: a complete
 * recorded degree, the one with most shards on the rank's own node, then the
 * smallest. 0 when none. */
static int reshard_degree(const assign_ctx *c, int l, int node) {
    int best = 0, best_own = -1;
    for (int T = 1; T <= AH_MAX_TP; T *= 2) {
        if (!degree_complete(c, l, T, c->step))
            continue;
        int own = 0;
        for (int t = 0; t < T; t++)
            for (int i = 0, hit = 0; i < c->nh && !hit; i++)
                hit = c->usable[i] && c->h_node[i] == node && c->h[i].tier != AH_TIER_CLOUD &&
                      held(&c->h[i], l, t, T, c->step, 1),
                own += hit;
        if (own > best_own)
            best = T, best_own = own;
    }
    return best;
}

/* The entries of plan rank r: per held layer its own shard, or every old TP
 * rank's shard of one degree to reshard from. Appends to *e (n, cap). 0 or
 * -1 with err. */
static int assign_rank(const assign_ctx *c, const ah_plan *plan, int r, ah_assign_entry **e, int *n, int *cap,
                       char *err, size_t errlen) {
    int f = 0, l1 = 0, t = 0;
    int node = ah_plan_rank_node(plan, r, &f, &l1, &t);
    ah_slot sl;
    ah_rank_slot(plan, r, &sl);
    int deg = plan->replicas[sl.replica].stages[sl.stage].tp;
    for (int l = f; l < l1; l++) {
        int direct = available(c, l, t, deg, 0, c->step), T = direct ? deg : reshard_degree(c, l, node);
        for (int q = 0; q < (direct ? 1 : T); q++) {
            if (*n == *cap)
                *e = ah_xrealloc(*e, sizeof **e * (size_t)(*cap *= 2));
            ah_assign_entry *v = &(*e)[(*n)++];
            *v = (ah_assign_entry){.rank = r, .layer = l, .tp = direct ? t : q, .tier = -1, .holding = -1,
                                   .server = -1};
            if (T == 0 || pick_source(c, v, node, l, direct ? t : q, T, !direct) != 0) {
                /* cannot happen: the step was chosen restorable over usable holdings */
                snprintf(err, errlen, "layer %d (TP rank %d) at step %d has no source", l, t, c->step);
                return -1;
            }
        }
    }
    return 0;
}

/* The newest step (of the usable holdings' entries) at which every layer is
 * restorable by the plan; -1 with *why_layer, *why_tp, *n_steps (0: no
 * entry at all) when none is. */
static int choose_step(assign_ctx *c, const ah_plan *plan, int *why_layer, int *why_tp, int *n_steps_out) {
    int L = ah_model_num_layers(&plan->model), n_steps = 0, cap = 16, chosen = -1;
    int *steps = ah_xcalloc((size_t)cap, sizeof(int));
    for (int i = 0; i < c->nh; i++)
        for (int k = 0; c->usable[i] && k < c->h[i].m.n; k++) {
            if (n_steps == cap)
                steps = ah_xrealloc(steps, sizeof(int) * (size_t)(cap *= 2));
            steps[n_steps++] = c->h[i].m.e[k].step;
        }
    qsort(steps, (size_t)n_steps, sizeof(int), cmp_desc);
    for (int s = 0; s < n_steps && chosen < 0; s++) {
        if (s > 0 && steps[s] == steps[s - 1])
            continue;
        int ok = 1;
        for (int l = 0; l < L && ok; l++)
            if (!layer_restorable(c, plan, l, steps[s], why_tp))
                ok = 0, *why_layer = l;
        if (ok)
            chosen = steps[s];
    }
    free(steps);
    *n_steps_out = n_steps;
    return chosen;
}

int ah_recovery_assign(const ah_holding *h, int nh, const ah_plan *plan, ah_recovery_mode mode,
                       ah_assignment *out, char *err, size_t errlen) {
    int world = ah_plan_slots(plan);
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
    int *usable = ah_xcalloc((size_t)nh + 1, sizeof(int));
    for (int i = 0; i < nh; i++) {
        h_node[i] = -1;
        for (int q = 0; q < nn; q++)
            if (!strcmp(plan->cluster.nodes[q].name, h[i].node))
                h_node[i] = q;
        usable[i] = h[i].tier == AH_TIER_CLOUD || mode == AH_RECOVERY_LAYER_BITMAP;
    }
    double *load = ah_xcalloc((size_t)nh + 1, sizeof(double));
    assign_ctx c = {h, nh, usable, h_node, server, world, 0, mode, load, out};
    int worst_layer = 0, worst_tp = 0, n_steps = 0;
    int chosen = choose_step(&c, plan, &worst_layer, &worst_tp, &n_steps), rc = 0;
    if (chosen < 0) {
        if (n_steps == 0)
            snprintf(err, errlen, "no checkpoint survives in any%s tier",
                     mode == AH_RECOVERY_FULL_RELOAD ? " cloud" : "");
        else
            snprintf(err, errlen,
                     "no step has a copy of every layer: layer %d (TP rank %d) is missing at every step "
                     "that the others have",
                     worst_layer, worst_tp);
        /* step 0 is always recoverable: the initialisation from the seed */
        out->step = 0;
        out->e = ah_xcalloc(1, sizeof(ah_assign_entry));
        rc = 1;
    } else {
        c.step = chosen;
        int n = 0, cap = 16;
        ah_assign_entry *e = ah_xcalloc((size_t)cap, sizeof(ah_assign_entry));
        for (int r = 0; r < world && rc == 0; r++)
            rc = assign_rank(&c, plan, r, &e, &n, &cap, err, errlen);
        out->step = chosen;
        out->e = e;
        out->n = n;
        if (rc != 0)
            ah_assignment_free(out);
    }
    free(usable), free(server), free(h_node), free(load);
    return rc;
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
    for (int i = 0; i < n; i++) {
        if (e[i].tier == AH_TIER_CLOUD)
            reads[e[i].rank] = 1;
        for (int f = 0; f < e[i].n_fallback && !reads[e[i].rank]; f++)
            reads[e[i].rank] = h[e[i].fallback[f]].tier == AH_TIER_CLOUD;
    }
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
                                 .tp_degree = e[i].degree,
                                 .src = src_of(src, held(src, e[i].layer, e[i].tp, e[i].degree, step, e[i].degree > 0)),
                                 .holder_tier = e[i].tier == AH_TIER_PEER ? src->tier : -1};
        snprintf(x->holder, sizeof x->holder, "%s", src->node);
        for (int f = 0; f < e[i].n_fallback; f++) {
            const ah_holding *fh = &h[e[i].fallback[f]];
            x->fallback[x->n_fallback] = src_of(fh, held(fh, e[i].layer, e[i].tp, e[i].degree, step, e[i].degree > 0));
            x->fallback_tier[x->n_fallback++] = fh->tier;
        }
    }
    int rc = ah_recovery_doc_write(path, &d, err, errlen);
    ah_recovery_doc_free(&d);
    free(cloud_readers);
    free(reads);
    return rc;
}
