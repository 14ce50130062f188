/* The AutoHet planner: exact search over asymmetric 3D-parallel plans.
 * See docs/planner.md for the plan space and the argument for exactness. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#include "plan/search_internal.h"

/* ---- classes ----------------------------------------------------------- */

static int same_class(const ah_node *a, const ah_node *b) {
    return strcmp(a->dev.name, b->dev.name) == 0 && a->gpus == b->gpus && a->nic_gbit == b->nic_gbit;
}

/* Canonical stage order inside a pipeline: more memory first (early stages
 * keep more micro-batches in flight), then faster, then by name. */
static int class_before(const ah_class *a, const ah_class *b) {
    if (a->dev->mem_gib != b->dev->mem_gib)
        return a->dev->mem_gib > b->dev->mem_gib;
    if (a->dev->peak_tflops != b->dev->peak_tflops)
        return a->dev->peak_tflops > b->dev->peak_tflops;
    int c = strcmp(a->dev->name, b->dev->name);
    if (c != 0)
        return c < 0;
    if (a->gpus_per_node != b->gpus_per_node)
        return a->gpus_per_node > b->gpus_per_node;
    return a->nic_gbit > b->nic_gbit;
}

int ah_search_levels(const ah_cluster *c, ah_search_level *out, int max) {
    int n = 0;
    if (c->n_nodes > 1 && n < max)
        out[n++].single_node = -1;
    /* one node alone: one level per node kind (its nodes are interchangeable) */
    for (int i = 0; i < c->n_nodes && n < max; i++) {
        int seen = 0;
        for (int k = 0; k < n; k++)
            seen |= out[k].single_node >= 0 && same_class(&c->nodes[out[k].single_node], &c->nodes[i]);
        if (!seen)
            out[n++].single_node = i;
    }
    return n;
}

static int log2_int(int t) {
    int i = 0;
    while ((1 << i) < t)
        i++;
    return i;
}

/* Groups the nodes of the level into kinds (same GPU type, GPUs per node,
 * NIC), in canonical order, into kc (each with its nodes); returns the count,
 * or -1 with err. */
static int group_kinds(const ah_cluster *c, const ah_plan_options *o, const ah_search_level *lv, ah_class *kc,
                       char *err, size_t errlen) {
    int n = 0;
    for (int i = 0; i < c->n_nodes; i++) {
        const ah_node *nd = &c->nodes[i];
        if (lv->single_node >= 0 && i != lv->single_node)
            continue;
        int k = 0;
        while (k < n && !same_class(&c->nodes[kc[k].nodes[0]], nd))
            k++;
        if (k == n) {
            if (n == AH_MAX_KINDS) {
                snprintf(err, errlen, "cluster: more than %d distinct node kinds", AH_MAX_KINDS);
                return -1;
            }
            ah_class *cl = &kc[n++];
            cl->dev = &nd->dev;
            cl->gpus_per_node = nd->gpus;
            cl->nic_gbit = nd->nic_gbit;
            cl->nic_share_gbs = ah_nic_share_gbs(nd);
            cl->cap = ah_usable_bytes(&nd->dev, o);
        }
        kc[k].nodes[kc[k].n_nodes++] = i;
    }
    for (int i = 1; i < n; i++) /* insertion sort into canonical order */
        for (int j = i; j > 0 && class_before(&kc[j], &kc[j - 1]); j--) {
            ah_class tmp = kc[j];
            kc[j] = kc[j - 1];
            kc[j - 1] = tmp;
        }
    return n;
}

/* The classes of kind kc at the degrees of tp_mask: a degree must fit its
 * nodes and, when several are searched, divide their GPU count (so that any
 * mix packs); the profile must cover it. Returns how many were added, -1 if
 * the degrees fit but the profile covers none, -2 on too many classes. */
static int add_kind_classes(ah_search_ctx *x, const ah_class *kc, const ah_profile *prof) {
    int single = (x->tp_mask & (x->tp_mask - 1)) == 0, fit = 0, added = 0;
    ah_kind *kd = &x->kinds[x->n_kinds];
    kd->first_cls = x->K;
    for (int t = 1; t <= 8; t *= 2) {
        if (!(x->tp_mask & (1u << t)) || t > kc->gpus_per_node || (!single && kc->gpus_per_node % t))
            continue;
        fit = 1;
        if (!ah_profile_has(prof, x->m, kc->dev, t, x->mb))
            continue;
        if (x->K == AH_MAX_CLASSES)
            return -2;
        ah_class *cl = &x->cls[x->K++];
        *cl = *kc;
        cl->tp = t;
        cl->kind = x->n_kinds;
        cl->upn = kc->gpus_per_node / t;
        cl->units = cl->upn * kc->n_nodes;
        if (!added)
            kd->tmin = t;
        cl->slot_w = t / kd->tmin;
        added++;
    }
    if (!fit)
        return 0;
    if (!added)
        return -1;
    kd->n_cls = added;
    kd->slots = kc->n_nodes * (kc->gpus_per_node / kd->tmin);
    x->n_kinds++;
    return added;
}

int ah_search_ctx_init(ah_search_ctx *x, const ah_model_config *m, const ah_cluster *c,
                       const ah_profile *prof, const ah_plan_options *o, unsigned tp_mask, int mb,
                       const ah_search_level *lv, char *err, size_t errlen) {
    memset(x, 0, sizeof *x);
    x->level = *lv;
    x->m = m;
    x->c = c;
    x->o = o;
    x->tp_mask = tp_mask;
    x->tp = (tp_mask & (tp_mask - 1)) == 0 ? log2_int((int)tp_mask) : 0;
    x->mb = mb;
    x->L = ah_model_num_layers(m);
    x->M = o->global_batch / mb;
    x->cls = calloc(AH_MAX_CLASSES, sizeof(ah_class));
    ah_class *kc = calloc(AH_MAX_KINDS, sizeof(ah_class));
    if (!x->cls || !kc)
        abort();
    int nk = group_kinds(c, o, lv, kc, err, errlen), rc = 1;
    for (int k = 0; k < nk && rc == 1; k++) {
        int r = add_kind_classes(x, &kc[k], prof);
        if (r == -2) {
            snprintf(err, errlen, "cluster: more than %d (node kind, TP degree) pairs", AH_MAX_CLASSES);
            rc = -1;
        } else if (r == -1)
            rc = 0; /* the profile does not cover this kind at any degree searched */
    }
    free(kc);
    if (nk < 0)
        return -1;
    /* per-kind degrees inside mixed pipelines: exact, on where it fits the
     * planning-time targets (docs/planner.md, "Speed") */
    x->stage_tp = x->tp == 0 && (ah_cluster_total_gpus(c) <= AH_STAGE_TP_MAX_GPUS || x->n_kinds <= 2);
    if (rc != 1 || x->K == 0)
        return rc == 1 ? 0 : rc;
    for (int k = 0; k < x->K; k++) {
        ah_class *cl = &x->cls[k];
        int li = log2_int(cl->tp);
        if (!x->lbs[li].static_bytes) /* dist optimizer: memory at R = 1, the worst case */
            ah_layer_bytes_build(&x->lbs[li], m, &o->train, cl->tp, mb, 1);
        cl->lb = &x->lbs[li];
        if (ah_layer_times_build(&cl->lt, prof, m, &o->train, cl->dev, cl->tp, mb, err, errlen) != 0)
            return -1;
        double link = ah_stage_dp_link_gbs(&c->nodes[cl->nodes[0]], lv->single_node >= 0);
        cl->sync = ah_sync_prefix(cl->lb, link, 0);
        for (int r = 2; r <= AH_RING_EXACT_MAX; r++)
            cl->sync_r[r] = ah_sync_prefix(cl->lb, link, r);
    }
    for (int r = 0; r <= AH_RING_EXACT_MAX; r++)
        x->sync_lat[r] = r == 1 ? 0 : ah_allreduce_latency_ns(r, lv->single_node >= 0, o);
    ah_template_p2p_table(x);
    return 1;
}

void ah_search_ctx_free(ah_search_ctx *x) {
    if (x->cls)
        for (int k = 0; k < x->K; k++) {
            ah_layer_times_free(&x->cls[k].lt);
            free(x->cls[k].sync);
            for (int r = 2; r <= AH_RING_EXACT_MAX; r++)
                free(x->cls[k].sync_r[r]);
        }
    free(x->cls);
    free(x->p2p);
    for (int i = 0; i <= AH_MAX_TP_LOG2; i++)
        if (x->lbs[i].static_bytes)
            ah_layer_bytes_free(&x->lbs[i]);
    free(x->tpl);
    for (int k = 0; k < AH_MAX_KINDS; k++)
        free(x->pure[k]);
    memset(x, 0, sizeof *x);
}

/* ---- templates --------------------------------------------------------- */

/* --pp: only pipelines of the listed depths. */
int ah__depth_allowed(const ah_plan_options *o, int stages) {
    return !o->pp_mask || (stages <= 64 && ((o->pp_mask >> (stages - 1)) & 1));
}

/* A template of this shape with its stages in canonical class order or, for
 * a mixed shape, in the reverse order (reversed = 1): the class holding most
 * gradient then sits at the end, where its all-reduce overlaps the drain. */
static void add_template_order(ah_search_ctx *x, const int *shape, int reversed, int local, ah_ns b0) {
    ah_template t;
    memset(&t, 0, sizeof t);
    t.local = local;
    unsigned kinds = 0;
    for (int q = 0; q < x->K; q++) {
        int k = reversed ? x->K - 1 - q : q;
        t.shape[k] = shape[k];
        t.use[x->cls[k].kind] += shape[k] * x->cls[k].slot_w;
        if (shape[k])
            kinds |= 1u << x->cls[k].kind;
        for (int i = 0; i < shape[k]; i++)
            t.cls[t.n_stages++] = k;
    }
    t.mixed = (kinds & (kinds - 1)) != 0;
    if (ah_template_split_b0_known(x, &t, b0) != 0)
        return;
    if (x->n_tpl == x->cap_tpl) {
        x->cap_tpl = x->cap_tpl ? 2 * x->cap_tpl : 64;
        x->tpl = realloc(x->tpl, sizeof(ah_template) * (size_t)x->cap_tpl);
        if (!x->tpl)
            abort();
    }
    if (!t.mixed && !t.local) {
        int k = x->cls[t.cls[0]].kind;
        if (x->n_pure[k] == x->cap_pure[k]) {
            x->cap_pure[k] = x->cap_pure[k] ? 2 * x->cap_pure[k] : 32;
            x->pure[k] = realloc(x->pure[k], sizeof(int) * (size_t)x->cap_pure[k]);
            if (!x->pure[k])
                abort();
        }
        x->pure[k][x->n_pure[k]++] = x->n_tpl;
    }
    x->tpl[x->n_tpl++] = t;
}

/* Copies of a node-local template need, per stage, a node of its class with
 * room for at least two copies; only where the plan spans nodes. */
int ah__local_possible(const ah_search_ctx *x, const int *shape) {
    if (x->level.single_node >= 0)
        return 0;
    for (int k = 0; k < x->K; k++)
        if (shape[k] && (shape[k] > x->cls[k].n_nodes || x->cls[k].upn < 2))
            return 0;
    return 1;
}

/* The templates of a shape: its normal layout (normal = 1) and, where
 * possible, its node-local one (local = 1), each in both class orders if mixed;
 * b0[order]: their B0 when known (phase 2), else NULL. */
void ah__add_templates(ah_search_ctx *x, const int *shape, int normal, int local, const ah_ns *b0) {
    int classes = 0;
    for (int k = 0; k < x->K; k++)
        classes += shape[k] > 0;
    local = local && ah__local_possible(x, shape);
    for (int l = normal ? 0 : 1; l <= local; l++) {
        add_template_order(x, shape, 0, l, b0 ? b0[0] : -1);
        if (classes > 1)
            add_template_order(x, shape, 1, l, b0 ? b0[1] : -1);
    }
}

/* Mixed shapes: >= 2 kinds, at most max_mixed_types kinds, stages in
 * [lo, hi], never more groups of a class than it has; each kind's stages at
 * one degree, the same for every kind unless x->stage_tp and !uniform.
 * `kind` is the next kind to decide, `deg` the degree fixed so far (0 = none
 * yet), `mixdeg` whether two kinds already differ in degree. */

void ah__mixed_shapes(ah_search_ctx *x, const ah__shape_walk *sw, int kind, int deg, int *shape, int stages,
                         int kinds) {
    if (kind == x->n_kinds) {
        if (kinds >= 2 && stages >= sw->lo)
            sw->fn(x, shape, stages, sw->arg);
        return;
    }
    ah__mixed_shapes(x, sw, kind + 1, deg, shape, stages, kinds); /* kind unused */
    if (kinds + 1 > x->o->max_mixed_types)
        return;
    const ah_kind *kd = &x->kinds[kind];
    for (int e = kd->first_cls; e < kd->first_cls + kd->n_cls; e++) {
        if ((!x->stage_tp || sw->uniform) && deg && x->cls[e].tp != deg)
            continue;
        for (int n = 1; n <= x->cls[e].units && stages + n <= sw->hi; n++) {
            if (kinds + 1 >= 3 && stages + n > x->o->max_mixed3_stages)
                break;
            shape[e] = n;
            ah__mixed_shapes(x, sw, kind + 1, deg ? deg : x->cls[e].tp, shape, stages + n, kinds + 1);
        }
        shape[e] = 0;
    }
}

/* Whether every stage of a shape has one degree. */
int ah__shape_uniform(const ah_search_ctx *x, const int *shape) {
    int deg = 0;
    for (int k = 0; k < x->K; k++)
        if (shape[k]) {
            if (deg && x->cls[k].tp != deg)
                return 0;
            deg = x->cls[k].tp;
        }
    return 1;
}

static void add_shape(ah_search_ctx *x, const int *shape, int stages, void *arg) {
    const int *with_local = arg;
    if (ah__depth_allowed(x->o, stages))
        ah__add_templates(x, shape, 1, *with_local, NULL);
}

int ah__mixed_limit(const ah_search_ctx *x) {
    int hi = x->o->max_mixed_stages < x->L ? x->o->max_mixed_stages : x->L;
    return hi < AH_MAX_STAGES ? hi : AH_MAX_STAGES;
}

void ah_search_templates(ah_search_ctx *x, int phase1_mixed_stages) {
    int shape[AH_MAX_CLASSES] = {0};
    int smax = x->o->max_stages < x->L ? x->o->max_stages : x->L;
    if (smax > AH_MAX_STAGES)
        smax = AH_MAX_STAGES;
    for (int k = 0; k < x->K; k++) {
        for (int s = 1; s <= x->cls[k].units && s <= smax; s++) {
            shape[k] = s;
            if (ah__depth_allowed(x->o, s))
                ah__add_templates(x, shape, 1, 1, NULL);
        }
        shape[k] = 0;
    }
    int hi = ah__mixed_limit(x);
    /* When a phase 2 follows, the node-local variants of short mixed shapes
     * wait for it: there the phase-1 optimum bounds which ones can matter. */
    int with_local = phase1_mixed_stages >= hi;
    if (phase1_mixed_stages < hi)
        hi = phase1_mixed_stages;
    /* When a phase 2 follows, phase 1 splits only the shapes of one degree;
     * those whose kinds differ in degree (x->stage_tp) are many more and all
     * go to the bounded phase 2, whatever their depth. */
    ah__shape_walk sw = {2, hi, !with_local, add_shape, &with_local};
    if (x->n_kinds >= 2 && x->o->max_mixed_types >= 2)
        ah__mixed_shapes(x, &sw, 0, 0, shape, 0, 0);
}

/* ---- solve ------------------------------------------------------------- */

/* Micro-batches a copy of template t can run with its pipeline done within P
 * (saturated at M); 0 if its tail exceeds max_tail. */
/* The tail of a copy of t in the current solve pass (x->ring_r). */
static ah_ns pass_tail(const ah_search_ctx *x, const ah_template *t) {
    return x->ring_r ? t->tail_r[x->ring_r] : t->tail;
}

long long ah__capacity(const ah_search_ctx *x, const ah_template *t, ah_ns P, ah_ns max_tail) {
    if (t->local || pass_tail(x, t) > max_tail || P < t->A)
        return 0;
    if (t->B == 0)
        return x->M;
    long long c = (P - t->A) / t->B + 1;
    return c > x->M ? x->M : c;
}


/* --dp: is a plan of r replicas allowed? */
static int dp_allowed(const ah_plan_options *o, long long r) {
    if (o->n_dp == 0)
        return 1;
    for (int i = 0; i < o->n_dp; i++)
        if (o->dp[i] == r)
            return 1;
    return 0;
}

/* --dp: the largest replica count worth tracking (0 without --dp). */
static int dp_track(const ah_search_ctx *x) {
    if (x->o->n_dp == 0)
        return 0;
    long long units = 0, r = 0;
    for (int k = 0; k < x->n_kinds; k++)
        units += x->kinds[k].slots;
    for (int i = 0; i < x->o->n_dp; i++)
        if (x->o->dp[i] > r)
            r = x->o->dp[i];
    if (r > x->M)
        r = x->M;
    if (r > units)
        r = units;
    return (int)(r > 0 ? r : 1);
}

void ah__workspace_scratch(const ah_search_ctx *x, ah__workspace *w) {
    int smax = 0;
    for (int k = 0; k < x->n_kinds; k++)
        smax = x->kinds[k].slots > smax ? x->kinds[k].slots : smax;
    w->plist = malloc(sizeof(int) * (size_t)(x->n_tpl + 1));
    w->best_at = malloc(sizeof(int) * (size_t)(smax + 1));
    if (!w->plist || !w->best_at)
        abort();
}

/* The mixed templates feasible_T may use, with the most copies that fit. */
static void workspace_mixed(const ah_search_ctx *x, ah__workspace *w) {
    w->mixed = malloc(sizeof(int) * (size_t)(x->n_tpl + 1));
    w->mixed_rmax = malloc(sizeof(long long) * (size_t)(x->n_tpl + 1));
    if (!w->mixed || !w->mixed_rmax)
        abort();
    w->n_mixed = 0;
    for (int i = 0; i < x->n_tpl; i++) {
        const ah_template *t = &x->tpl[i];
        if (!t->mixed || t->local || i < x->mixed_from)
            continue;
        long long rmax = LLONG_MAX;
        for (int k = 0; k < x->n_kinds; k++)
            if (t->use[k] && x->kinds[k].slots / t->use[k] < rmax)
                rmax = x->kinds[k].slots / t->use[k];
        if (rmax < 1)
            continue;
        w->mixed[w->n_mixed] = i;
        w->mixed_rmax[w->n_mixed++] = rmax;
    }
}

static void workspace_init(const ah_search_ctx *x, ah__workspace *w, const int *offset) {
    memset(w, 0, sizeof *w);
    ah__workspace_scratch(x, w);
    workspace_mixed(x, w);
    w->V = malloc(sizeof(long long) * (size_t)offset[x->n_kinds]);
    w->choice = malloc(sizeof(int) * (size_t)offset[x->n_kinds]);
    w->cap = malloc(sizeof(long long) * (size_t)(x->n_tpl ? x->n_tpl : 1));
    if (!w->V || !w->choice || !w->cap)
        abort();
    w->R = dp_track(x);
    if (w->R > 0) {
        w->offR[0] = 0;
        for (int k = 0; k < x->n_kinds; k++)
            w->offR[k + 1] = w->offR[k] + (x->kinds[k].slots + 1) * (w->R + 1);
        w->VR = malloc(sizeof(long long) * (size_t)w->offR[x->n_kinds]);
        w->chR = malloc(sizeof(int) * (size_t)w->offR[x->n_kinds]);
        w->conv = malloc(sizeof(long long) * (size_t)(x->n_kinds * (w->R + 1)));
        w->conv_arg = malloc(sizeof(int) * (size_t)(x->n_kinds * (w->R + 1)));
        if (!w->VR || !w->chR || !w->conv || !w->conv_arg)
            abort();
        if (x->n_kinds <= COMP_MAX_K) {
            w->comp = malloc(sizeof(long long) * (size_t)(w->R + 1) << x->n_kinds);
            w->comp_gen = calloc((size_t)1 << x->n_kinds, sizeof(unsigned));
            w->tmp = malloc(sizeof(long long) * (size_t)(2 * (w->R + 1)));
            if (!w->comp || !w->comp_gen || !w->tmp)
                abort();
        }
    }
}

static void workspace_free(ah__workspace *w) {
    free(w->mixed);
    free(w->mixed_rmax);
    free(w->plist);
    free(w->best_at);
    free(w->V);
    free(w->choice);
    free(w->cap);
    free(w->VR);
    free(w->chR);
    free(w->conv);
    free(w->conv_arg);
    free(w->comp);
    free(w->comp_gen);
    free(w->tmp);
}

/* The single-kind templates of kind k worth an item in its knapsack at the
 * current caps (into w->plist; returns how many): per weight (slots) the
 * largest cap, the first among equals, and only where it beats every lighter
 * one. Exact: a template no lighter than another of at least its cap can
 * always be swapped for it. */
static int useful_pure(const ah_search_ctx *x, ah__workspace *w, int k) {
    int S = x->kinds[k].slots, n = 0;
    for (int u = 0; u <= S; u++)
        w->best_at[u] = -1;
    for (int q = 0; q < x->n_pure[k]; q++) {
        int i = x->pure[k][q], u = x->tpl[i].use[k];
        if (w->cap[i] == 0 || u > S)
            continue;
        if (w->best_at[u] < 0 || w->cap[i] > w->cap[w->best_at[u]])
            w->best_at[u] = i;
    }
    long long top = 0;
    for (int u = 1; u <= S; u++)
        if (w->best_at[u] >= 0 && w->cap[w->best_at[u]] > top) {
            w->plist[n++] = w->best_at[u];
            top = w->cap[w->best_at[u]];
        }
    return n;
}

/* Unbounded knapsack per kind over its single-kind templates (weight =
 * slots, value = w->cap). */
void ah__knapsack_tables(const ah_search_ctx *x, ah__workspace *w, const int *offset) {
    for (int k = 0; k < x->n_kinds; k++) {
        long long *V = w->V + offset[k];
        int *ch = w->choice + offset[k];
        int n = useful_pure(x, w, k);
        V[0] = 0;
        ch[0] = -1;
        for (int u = 1; u <= x->kinds[k].slots; u++) {
            V[u] = V[u - 1];
            ch[u] = -1;
            for (int q = 0; q < n; q++) {
                int i = w->plist[q], wt = x->tpl[i].use[k];
                if (wt > u)
                    break; /* plist is by increasing weight */
                long long v = V[u - wt] + w->cap[i];
                if (v > x->M)
                    v = x->M;
                if (v > V[u]) {
                    V[u] = v;
                    ch[u] = i;
                }
            }
        }
    }
}

/* The knapsack tables of the templates' capacities within P, tails <= max_tail. */
static void class_tables(const ah_search_ctx *x, ah_ns P, ah_ns max_tail, ah__workspace *w, int *offset) {
    for (int i = 0; i < x->n_tpl; i++)
        w->cap[i] = ah__capacity(x, &x->tpl[i], P, max_tail);
    ah__knapsack_tables(x, w, offset);
}

/* --dp: the per-class knapsack with an exact replica count (w->cap set by
 * class_tables). VR[u][r] = best ah__capacity of exactly r replicas of the class's
 * pure templates (each with cap >= 1) in at most u units. */
static void class_tables_R(const ah_search_ctx *x, ah__workspace *w) {
    int R = w->R;
    w->gen++; /* the cached convolutions are stale */
    for (int k = 0; k < x->n_kinds; k++) {
        long long *VR = w->VR + w->offR[k];
        int *ch = w->chR + w->offR[k];
        int U = x->kinds[k].slots;
        for (int r = 0; r <= R; r++) {
            VR[r] = r == 0 ? 0 : -1;
            ch[r] = -1;
        }
        for (int u = 1; u <= U; u++) {
            long long *row = VR + (size_t)u * (R + 1), *prev = row - (R + 1);
            int *crow = ch + (size_t)u * (R + 1);
            for (int r = 0; r <= R; r++) {
                row[r] = prev[r];
                crow[r] = -1;
            }
            for (int q = 0; q < x->n_pure[k]; q++) {
                int i = x->pure[k][q];
                int n = x->tpl[i].use[k];
                if (n > u || w->cap[i] == 0)
                    continue;
                const long long *from = VR + (size_t)(u - n) * (R + 1);
                int rmax = R < u ? R : u;
                for (int r = 1; r <= rmax; r++) {
                    if (from[r - 1] < 0)
                        continue;
                    long long v = from[r - 1] + w->cap[i];
                    if (v > x->M)
                        v = x->M;
                    if (v > row[r]) {
                        row[r] = v;
                        crow[r] = i;
                    }
                }
            }
        }
    }
}

/* out = max-plus convolution of a (indices 0..n) with a class row (0..amax),
 * capped at M; with arg, arg[r] = the row index the best out[r] took. */
static void conv_into(const long long *a, const long long *row, int amax, int n, long long M, long long *out,
                      int *arg) {
    for (int r = 0; r <= n; r++) {
        out[r] = -1;
        if (arg)
            arg[r] = 0;
    }
    for (int r = 0; r <= n; r++) {
        if (a[r] < 0)
            continue;
        for (int q = 0; q <= amax && r + q <= n; q++) {
            if (row[q] < 0)
                continue;
            long long v = a[r] + row[q];
            if (v > M)
                v = M;
            if (v > out[r + q]) {
                out[r + q] = v;
                if (arg)
                    arg[r + q] = q;
            }
        }
    }
}

/* --dp: with `fixed` replicas of ah__capacity fixed_cap each already chosen (the
 * mixed copies) and left[k] units of each class for pure replicas, is there
 * an allowed total count T >= 2 (T <= M) whose pure part reaches M? Combines
 * the classes by a max-plus convolution over the count; on success records
 * the pure replicas per class in w->sel_counts. */
static int count_feasible(const ah_search_ctx *x, ah__workspace *w, const long long *left, int fixed,
                          long long fixed_cap) {
    int R = w->R, W = R + 1;
    int need = R - fixed; /* pure replicas at most */
    if (need < 0)
        return 0;
    for (int k = 0; k < x->n_kinds; k++) {
        const long long *row = w->VR + w->offR[k] + (size_t)left[k] * W;
        long long *cv = w->conv + (size_t)k * W;
        int *ca = w->conv_arg + (size_t)k * W;
        int amax = left[k] < need ? (int)left[k] : need;
        if (k == 0) {
            for (int r = 0; r <= need; r++) {
                cv[r] = r <= amax ? row[r] : -1;
                ca[r] = r <= amax ? r : 0;
            }
            continue;
        }
        conv_into(cv - W, row, amax, need, x->M, cv, ca);
    }
    const long long *last = w->conv + (size_t)(x->n_kinds - 1) * W;
    long long fixed_total = fixed * fixed_cap;
    for (int i = 0; i < x->o->n_dp; i++) {
        int T = x->o->dp[i], p = T - fixed;
        if (T < 2 || T > x->M || p < 0 || p > need || last[p] < 0 || last[p] + fixed_total < x->M)
            continue;
        for (int k = x->n_kinds - 1; k >= 0; k--) {
            int a = w->conv_arg[(size_t)k * W + p];
            w->sel_counts[k] = a;
            p -= a;
        }
        return 1;
    }
    return 0;
}


/* The same answer as count_feasible, faster: the classes a mixed shape does
 * not touch keep all their units, so their convolution is cached per subset;
 * the last touched class is combined only at the counts the targets need.
 * Calls count_feasible (which records the counts) only when it succeeds. */
static int count_feasible_fast(const ah_search_ctx *x, ah__workspace *w, const long long *left, int fixed,
                               long long fixed_cap) {
    if (!w->comp)
        return count_feasible(x, w, left, fixed, fixed_cap);
    int R = w->R, W = R + 1, need = R - fixed;
    if (need < 0)
        return 0;
    unsigned touched = 0;
    for (int k = 0; k < x->n_kinds; k++)
        if (left[k] != x->kinds[k].slots)
            touched |= 1u << k;
    long long *cur = w->comp + (size_t)touched * W;
    if (w->comp_gen[touched] != w->gen) {
        for (int r = 0; r <= R; r++)
            cur[r] = r == 0 ? 0 : -1;
        for (int k = 0; k < x->n_kinds; k++) {
            if (touched & (1u << k))
                continue;
            int U = x->kinds[k].slots;
            conv_into(cur, w->VR + w->offR[k] + (size_t)U * W, U < R ? U : R, R, x->M, w->tmp, NULL);
            memcpy(cur, w->tmp, sizeof(long long) * (size_t)W);
        }
        w->comp_gen[touched] = w->gen;
    }
    int last = -1;
    for (int k = 0; k < x->n_kinds; k++)
        if (touched & (1u << k))
            last = k;
    const long long *a = cur;
    long long *buf = w->tmp, *alt = w->tmp + W;
    for (int k = 0; k < last; k++) {
        if (!(touched & (1u << k)))
            continue;
        conv_into(a, w->VR + w->offR[k] + (size_t)left[k] * W, left[k] < need ? (int)left[k] : need, need, x->M,
                  buf, NULL);
        a = buf;
        long long *t = buf;
        buf = alt;
        alt = t;
    }
    const long long *row = last >= 0 ? w->VR + w->offR[last] + (size_t)left[last] * W : NULL;
    int amax = last >= 0 ? (left[last] < need ? (int)left[last] : need) : 0;
    long long fixed_total = fixed * fixed_cap;
    for (int i = 0; i < x->o->n_dp; i++) {
        int T = x->o->dp[i], p = T - fixed;
        if (T < 2 || T > x->M || p < 0 || p > need)
            continue;
        long long best = -1;
        if (row == NULL)
            best = a[p];
        else
            for (int q = 0; q <= amax && q <= p; q++)
                if (row[q] >= 0 && a[p - q] >= 0 && a[p - q] + row[q] > best)
                    best = a[p - q] + row[q];
        if (best >= 0 && best + fixed_total >= x->M)
            return count_feasible(x, w, left, fixed, fixed_cap);
    }
    return 0;
}

/* Is there a plan (several replicas allowed) whose pipelines all finish within
 * P using only templates whose tail is <= max_tail? On success *mixed_tpl and
 * *mixed_r say which mixed template (or -1) and how many copies. */
static int feasible_T(ah_search_ctx *x, ah_ns P, ah_ns max_tail, ah__workspace *w, int *offset, int *mixed_tpl,
                      long long *mixed_r) {
    x->evals++;
    class_tables(x, P, max_tail, w, offset);
    long long base = 0;
    for (int k = 0; k < x->n_kinds; k++)
        base += w->V[offset[k] + x->kinds[k].slots];
    *mixed_tpl = -1;
    *mixed_r = 0;
    long long left[AH_MAX_KINDS];
    int tables_R = 0; /* --dp: class_tables_R built for this P */
    if (w->R > 0) {
        /* --dp: the same search with exact counts; the plain tables above
         * are an upper bound that skips hopeless combinations cheaply, and so
         * is R copies of the largest ah__capacity (R = the most replicas allowed) */
        long long maxcap = 0;
        for (int i = 0; i < x->n_tpl; i++)
            maxcap = w->cap[i] > maxcap ? w->cap[i] : maxcap;
        if (maxcap * w->R < x->M)
            return 0;
        for (int k = 0; k < x->n_kinds; k++)
            left[k] = x->kinds[k].slots;
        if (base >= x->M) {
            class_tables_R(x, w);
            tables_R = 1;
            if (count_feasible_fast(x, w, left, 0, 0))
                return 1;
        }
    } else if (base >= x->M)
        return 1;
    for (int q = 0; q < w->n_mixed; q++) {
        int i = w->mixed[q];
        const ah_template *t = &x->tpl[i];
        if (w->cap[i] == 0)
            continue;
        long long rmax = w->mixed_rmax[q], r = 1;
        if (base < x->M) {
            /* With base < M no table saturates, and a knapsack table is
             * superadditive (V[a + b] >= V[a] + V[b]), so
             * V_k[S_k - r u_k] <= V_k[S_k] - V_k[r u_k] <= V_k[S_k] - r V_k[u_k]:
             * r copies reach at most base + r g, g = cap - sum_k V_k[u_k] (the
             * copies' gain over pure replicas on their own slots). No r below
             * r0 = ceil((M - base) / g) can reach M; none at all if g <= 0. */
            long long g = w->cap[i];
            for (int k = 0; k < x->n_kinds; k++)
                if (t->use[k])
                    g -= w->V[offset[k] + t->use[k]];
            if (g <= 0)
                continue;
            r = (x->M - base + g - 1) / g;
        } else if (rmax < x->M && rmax * w->cap[i] + base < x->M)
            continue; /* r copies leave each table at most its full value */
        for (; r <= rmax; r++) {
            long long v = r * w->cap[i];
            for (int k = 0; k < x->n_kinds; k++) {
                left[k] = x->kinds[k].slots - r * t->use[k];
                v += w->V[offset[k] + left[k]];
            }
            if (w->R > 0 && r > w->R)
                break;
            if (v >= x->M && w->R > 0 && !tables_R) {
                class_tables_R(x, w);
                tables_R = 1;
            }
            if (v >= x->M && (w->R == 0 || count_feasible_fast(x, w, left, (int)r, w->cap[i]))) {
                *mixed_tpl = i;
                *mixed_r = r;
                return 1;
            }
        }
    }
    return 0;
}

static void push(ah_solution *s, int tpl, long long m, int *cap) {
    if (s->n == *cap) {
        *cap = *cap ? 2 * *cap : 16;
        s->r = realloc(s->r, sizeof(ah_sol_replica) * (size_t)*cap);
        if (!s->r)
            abort();
    }
    s->r[s->n].tpl = tpl;
    s->r[s->n].m = m;
    s->n++;
}

static int cmp_ns(const void *a, const void *b) {
    ah_ns x = *(const ah_ns *)a, y = *(const ah_ns *)b;
    return (x > y) - (x < y);
}

/* Smallest P in (lo, hi] with feasible_T(P, max_tail); hi must be feasible. */
static ah_ns bisect_P(ah_search_ctx *x, ah_ns lo, ah_ns hi, ah_ns max_tail, ah__workspace *w, int *offset) {
    int mt;
    long long mr;
    while (hi - lo > 1) {
        ah_ns mid = lo + (hi - lo) / 2;
        if (feasible_T(x, mid, max_tail, w, offset, &mt, &mr))
            hi = mid;
        else
            lo = mid;
    }
    return hi;
}

/* Single-replica plans: no DP all-reduce, tail = optimizer only. *v1 and
 * *best1 = the best of them (-1 if one replica is not allowed); *hiP = the
 * fastest pipeline and *hiAll = the slowest, without tails. */
static void best_single_replica(const ah_search_ctx *x, ah_ns *v1, int *best1, ah_ns *hiP, ah_ns *hiAll) {
    *best1 = -1;
    *v1 = AH_NS_INF;
    *hiP = AH_NS_INF;
    *hiAll = 0;
    int one_ok = dp_allowed(x->o, 1);
    for (int i = 0; i < x->n_tpl; i++) {
        const ah_template *t = &x->tpl[i];
        if (t->local)
            continue;
        ah_ns v = ah_replica_time(t->A, t->B, t->tail1, x->M);
        if (ah_replica_time(t->A, t->B, 0, x->M) > *hiAll)
            *hiAll = ah_replica_time(t->A, t->B, 0, x->M);
        if (one_ok && v < *v1) {
            *v1 = v;
            *best1 = i;
        }
        ah_ns h = ah_replica_time(t->A, t->B, 0, x->M);
        if (h < *hiP)
            *hiP = h;
    }
}

/* The tail caps tails[lo, hi) (distinct, ascending), in ascending order as
 * the plain loop would try them: one check proves a whole range hopeless (no
 * plan whose tails are all <= its largest cap has its pipelines done within
 * best - its smallest cap - 1); otherwise halves. Each cap reached is tried
 * as before: a feasibility check at best - S - 1, a bisection if it passes. */
typedef struct {
    ah__workspace *w;
    int *offset;
    const ah_ns *tails;
    ah_ns P_all, best, bestP, bestS;
} tail_walk;

static void try_tail_range(ah_search_ctx *x, tail_walk *tw, int lo, int hi) {
    int mt;
    long long mr;
    if (lo >= hi || tw->tails[lo] + tw->P_all >= tw->best)
        return;
    ah_ns S = tw->tails[lo], target = tw->best - S - 1; /* strictly better */
    if (hi - lo > 1) {
        if (!feasible_T(x, target, tw->tails[hi - 1], tw->w, tw->offset, &mt, &mr))
            return;
        int mid = lo + (hi - lo) / 2;
        try_tail_range(x, tw, lo, mid);
        try_tail_range(x, tw, mid, hi);
        return;
    }
    if (!feasible_T(x, target, S, tw->w, tw->offset, &mt, &mr))
        return;
    ah_ns P = bisect_P(x, tw->P_all - 1, target, S, tw->w, tw->offset);
    tw->best = P + S;
    tw->bestP = P;
    tw->bestS = S;
}

/* Plans with several replicas: T = P + Sigma, P = slowest pipeline, Sigma =
 * largest stage tail (gradient sync + optimizer) among the templates used.
 * P_all, the best P with every template allowed, bounds P from below; then
 * every distinct tail value Sigma* is tried as the cap, in ascending order,
 * while Sigma* + P_all can still beat the best value found (try_tail_range).
 * P_floor > 0: no P below it is feasible, and it stands in for P_all (no
 * bisection for it). Returns the best value (best if none beats it); *bestP,
 * *bestS = its P and Sigma (-1 if none); *P_all_out = P_all. */
static ah_ns best_multi_replica(ah_search_ctx *x, ah__workspace *w, int *offset, ah_ns hiP, ah_ns hiAll, ah_ns best,
                                ah_ns P_floor, ah_ns *bestP, ah_ns *bestS, ah_ns *P_all_out) {
    ah_ns P_all;
    int mt;
    long long mr;
    if (P_floor > 0)
        P_all = P_floor <= hiAll ? P_floor : AH_NS_INF;
    else if (w->R == 0)
        P_all = bisect_P(x, 0, hiP, AH_NS_INF, w, offset);
    else if (feasible_T(x, hiAll, AH_NS_INF, w, offset, &mt, &mr))
        /* --dp: every cap saturates at hiAll; the single replica's pipeline
         * need not be feasible with the counts required */
        P_all = bisect_P(x, 0, hiAll, AH_NS_INF, w, offset);
    else
        P_all = AH_NS_INF; /* no multi-replica plan with an allowed count */
    *P_all_out = P_all;
    ah_ns *tails = malloc(sizeof(ah_ns) * (size_t)x->n_tpl);
    if (!tails)
        abort();
    int n_tails = 0;
    for (int i = 0; i < x->n_tpl; i++)
        if (!x->tpl[i].local)
            tails[n_tails++] = pass_tail(x, &x->tpl[i]);
    qsort(tails, (size_t)n_tails, sizeof(ah_ns), cmp_ns);
    int n_distinct = 0;
    for (int i = 0; i < n_tails; i++)
        if (i == 0 || tails[i] != tails[n_distinct - 1])
            tails[n_distinct++] = tails[i];
    tail_walk tw = {w, offset, tails, P_all, best, -1, -1};
    if (P_all != AH_NS_INF)
        try_tail_range(x, &tw, 0, n_distinct);
    free(tails);
    *bestP = tw.bestP;
    *bestS = tw.bestS;
    return tw.best;
}

/* Node-local plans: R copies of one local template, micro-batches split
 * evenly, each layer's gradient reduced inside one node (exact ring). Lowers
 * *best if one beats it; *best_local = its template (-1 if none), *best_R. */
static void best_node_local(const ah_search_ctx *x, ah_ns *best, int *best_local, int *best_R) {
    *best_local = -1;
    *best_R = 0;
    for (int i = 0; i < x->n_tpl; i++) {
        const ah_template *t = &x->tpl[i];
        if (!t->local)
            continue;
        int rmax = 1 << 30;
        for (int k = 0; k < x->K; k++)
            if (t->shape[k] && x->cls[k].upn < rmax)
                rmax = x->cls[k].upn;
        for (int R = 2; R <= rmax && R <= x->M; R++) {
            if (!dp_allowed(x->o, R))
                continue;
            ah_ns v = ah_replica_time(t->A, t->B, ah_local_tail(x, t, R), (x->M + R - 1) / R);
            if (v < *best) {
                *best = v;
                *best_local = i;
                *best_R = R;
            }
        }
    }
}

/* Trim to exactly M micro-batches: take from the pipeline that finishes last;
 * a replica left with none is dropped (with --dp none is: the count found is
 * exact, and R <= M leaves every replica one). */
static void trim_to_micro_batches(const ah_search_ctx *x, const ah__workspace *w, ah_solution *sol) {
    long long total = 0;
    for (int i = 0; i < sol->n; i++)
        total += sol->r[i].m;
    while (total > x->M) {
        int worst = -1;
        ah_ns wt = -1;
        for (int i = 0; i < sol->n; i++) {
            const ah_template *t = &x->tpl[sol->r[i].tpl];
            ah_ns v = ah_replica_time(t->A, t->B, 0, sol->r[i].m);
            if (w->R > 0 && sol->r[i].m <= 1)
                continue;
            if (v >= wt) {
                wt = v;
                worst = i;
            }
        }
        sol->r[worst].m--;
        total--;
        if (sol->r[worst].m == 0)
            sol->r[worst] = sol->r[--sol->n];
    }
}

/* The replicas of the multi-replica plan with slowest pipeline P and tail
 * cap S: the mixed copies feasible_T chose, then each class's pure replicas
 * from the tables, trimmed to M micro-batches. */
static void build_multi_replica(ah_search_ctx *x, ah__workspace *w, int *offset, ah_ns P, ah_ns S, ah_solution *sol,
                                int *cap) {
    int mt;
    long long mr;
    feasible_T(x, P, S, w, offset, &mt, &mr);
    for (long long r = 0; r < mr; r++)
        push(sol, mt, w->cap[mt], cap);
    for (int k = 0; k < x->n_kinds && w->R > 0; k++) {
        /* --dp: exactly sel_counts[k] pure replicas of class k */
        int u = x->kinds[k].slots - (mt >= 0 ? (int)(mr * x->tpl[mt].use[k]) : 0);
        int r = w->sel_counts[k];
        while (r > 0) {
            int i = w->chR[w->offR[k] + u * (w->R + 1) + r];
            if (i < 0) {
                u--;
                continue;
            }
            push(sol, i, w->cap[i], cap);
            u -= x->tpl[i].use[k];
            r--;
        }
    }
    for (int k = 0; k < x->n_kinds && w->R == 0; k++) {
        int u = x->kinds[k].slots - (mt >= 0 ? (int)(mr * x->tpl[mt].use[k]) : 0);
        while (u > 0) {
            int i = w->choice[offset[k] + u];
            if (i < 0) {
                u--;
                continue;
            }
            push(sol, i, w->cap[i], cap);
            u -= x->tpl[i].use[k];
        }
    }
    trim_to_micro_batches(x, w, sol);
}

/* Pass settings for plans of exactly r replicas (0: any count): --dp {r}
 * (within the user's --dp) and the exact ring's tails. */
typedef struct {
    const ah_plan_options *saved;
    ah_plan_options o;
} pass_opts;

static void pass_enter(ah_search_ctx *x, pass_opts *po, int r) {
    po->saved = x->o;
    if (r > 0) {
        po->o = *x->o;
        po->o.n_dp = 1;
        po->o.dp[0] = r;
        x->o = &po->o;
    }
    x->ring_r = r;
}

static void pass_leave(ah_search_ctx *x, pass_opts *po) {
    x->o = po->saved;
    x->ring_r = 0;
}

/* Plans of exactly r = 2..AH_RING_EXACT_MAX replicas pay the exact ring
 * (tail_r[r], ah_template_tail): one pass each with --dp's exact-count
 * knapsack. A pass is skipped when its fastest possible plan cannot beat
 * best: some replica runs >= ceil(M/r) micro-batches, and the pass's tails
 * are >= its least one. Lowers best; *best_r = the pass that did (0: none). */
static ah_ns exact_ring_passes(ah_search_ctx *x, int *offset, ah_ns hiP, ah_ns hiAll, ah_ns P_all, ah_ns best,
                               int *best_r, ah_ns *bestP, ah_ns *bestS) {
    *best_r = 0;
    for (int r = 2; r <= AH_RING_EXACT_MAX && r <= x->M; r++) {
        if (!dp_allowed(x->o, r) || P_all == AH_NS_INF)
            continue;
        ah_ns P_lb = AH_NS_INF, tail_lb = AH_NS_INF;
        long long m = (x->M + r - 1) / r;
        for (int i = 0; i < x->n_tpl; i++) {
            const ah_template *t = &x->tpl[i];
            if (t->local)
                continue;
            ah_ns v = ah_replica_time(t->A, t->B, 0, m);
            P_lb = v < P_lb ? v : P_lb;
            tail_lb = t->tail_r[r] < tail_lb ? t->tail_r[r] : tail_lb;
        }
        if (P_lb < P_all)
            P_lb = P_all;
        if (P_lb == AH_NS_INF || P_lb + tail_lb >= best)
            continue;
        pass_opts po;
        pass_enter(x, &po, r);
        ah__workspace w;
        workspace_init(x, &w, offset);
        ah_ns P, S, pa;
        ah_ns v = best_multi_replica(x, &w, offset, hiP, hiAll, best, P_lb, &P, &S, &pa);
        workspace_free(&w);
        pass_leave(x, &po);
        if (P >= 0 && v < best) {
            best = v;
            *best_r = r;
            *bestP = P;
            *bestS = S;
        }
    }
    return best;
}

/* The optimum into *sol, or (x->mixed_from > 0) only a plan better than *sol: the search starts from its
 * value, and the phase that finds the least pipeline time of every template (P_all) is skipped (its bound
 * is 1: the mixed candidates are only the new templates, and the fastest single pipeline may not be one). */
static void solve(ah_search_ctx *x, ah_solution *sol) {
    ah_ns incumbent = x->mixed_from > 0 ? sol->value : AH_NS_INF;
    if (x->n_tpl == 0)
        return;
    int best1;
    ah_ns v1, hiP, hiAll;
    best_single_replica(x, &v1, &best1, &hiP, &hiAll);
    ah__workspace w;
    int offset[AH_MAX_KINDS + 1];
    offset[0] = 0;
    for (int k = 0; k < x->n_kinds; k++)
        offset[k + 1] = offset[k] + x->kinds[k].slots + 1;
    workspace_init(x, &w, offset);
    ah_ns bestP, bestS, P_all, start = v1 < incumbent ? v1 : incumbent;
    ah_ns best = best_multi_replica(x, &w, offset, hiP, hiAll, start, x->mixed_from > 0, &bestP, &bestS, &P_all);
    int best_r;
    best = exact_ring_passes(x, offset, hiP, hiAll, P_all, best, &best_r, &bestP, &bestS);
    int best_local, best_R;
    best_node_local(x, &best, &best_local, &best_R);
    if (best >= incumbent) { /* nothing better than *sol */
        workspace_free(&w);
        return;
    }
    ah_solution_free(sol);
    sol->value = AH_NS_INF;
    int cap = 0;
    if (best_local >= 0) {
        sol->value = best;
        sol->local_R = best_R;
        for (int r = 0; r < best_R; r++)
            push(sol, best_local, x->M / best_R + (r < x->M % best_R), &cap);
    } else if (bestP < 0) {
        if (best1 >= 0) { /* else nothing with an allowed replica count */
            sol->value = v1;
            sol->single = 1;
            push(sol, best1, x->M, &cap);
        }
    } else {
        sol->value = best;
        pass_opts po;
        pass_enter(x, &po, best_r);
        if (best_r > 0) { /* the tables of that pass */
            workspace_free(&w);
            workspace_init(x, &w, offset);
        }
        build_multi_replica(x, &w, offset, bestP, bestS, sol, &cap);
        pass_leave(x, &po);
    }
    workspace_free(&w);
}

void ah_search_solve(ah_search_ctx *x, ah_solution *sol) {
    memset(sol, 0, sizeof *sol);
    sol->value = AH_NS_INF;
    x->mixed_from = 0;
    solve(x, sol);
}

void ah_search_solve_more(ah_search_ctx *x, ah_solution *sol, int first_new) {
    x->mixed_from = first_new > 0 ? first_new : 0;
    solve(x, sol);
    x->mixed_from = 0;
}

void ah_solution_free(ah_solution *s) {
    free(s->r);
    memset(s, 0, sizeof *s);
}
