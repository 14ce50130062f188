/* The AutoHet planner: exact search over asymmetric 3D-parallel plans.
 * See docs/planner.md for the plan space and the argument for exactness. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#include "plan/search.h"

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
static int depth_allowed(const ah_plan_options *o, int stages) {
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
static int local_possible(const ah_search_ctx *x, const int *shape) {
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
static void add_templates(ah_search_ctx *x, const int *shape, int normal, int local, const ah_ns *b0) {
    int classes = 0;
    for (int k = 0; k < x->K; k++)
        classes += shape[k] > 0;
    local = local && local_possible(x, shape);
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
typedef void (*shape_fn)(ah_search_ctx *x, const int *shape, int stages, void *arg);

typedef struct {
    int lo, hi;
    int uniform; /* only shapes whose kinds share one degree */
    shape_fn fn;
    void *arg;
} shape_walk;

static void mixed_shapes(ah_search_ctx *x, const shape_walk *sw, int kind, int deg, int *shape, int stages,
                         int kinds) {
    if (kind == x->n_kinds) {
        if (kinds >= 2 && stages >= sw->lo)
            sw->fn(x, shape, stages, sw->arg);
        return;
    }
    mixed_shapes(x, sw, kind + 1, deg, shape, stages, kinds); /* kind unused */
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
            mixed_shapes(x, sw, kind + 1, deg ? deg : x->cls[e].tp, shape, stages + n, kinds + 1);
        }
        shape[e] = 0;
    }
}

/* Whether every stage of a shape has one degree. */
static int shape_uniform(const ah_search_ctx *x, const int *shape) {
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
    if (depth_allowed(x->o, stages))
        add_templates(x, shape, 1, *with_local, NULL);
}

static int mixed_limit(const ah_search_ctx *x) {
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
            if (depth_allowed(x->o, s))
                add_templates(x, shape, 1, 1, NULL);
        }
        shape[k] = 0;
    }
    int hi = mixed_limit(x);
    /* When a phase 2 follows, the node-local variants of short mixed shapes
     * wait for it: there the phase-1 optimum bounds which ones can matter. */
    int with_local = phase1_mixed_stages >= hi;
    if (phase1_mixed_stages < hi)
        hi = phase1_mixed_stages;
    /* When a phase 2 follows, phase 1 splits only the shapes of one degree;
     * those whose kinds differ in degree (x->stage_tp) are many more and all
     * go to the bounded phase 2, whatever their depth. */
    shape_walk sw = {2, hi, !with_local, add_shape, &with_local};
    if (x->n_kinds >= 2 && x->o->max_mixed_types >= 2)
        mixed_shapes(x, &sw, 0, 0, shape, 0, 0);
}

/* ---- solve ------------------------------------------------------------- */

/* Micro-batches a copy of template t can run with its pipeline done within P
 * (saturated at M); 0 if its tail exceeds max_tail. */
/* The tail of a copy of t in the current solve pass (x->ring_r). */
static ah_ns pass_tail(const ah_search_ctx *x, const ah_template *t) {
    return x->ring_r ? t->tail_r[x->ring_r] : t->tail;
}

static long long capacity(const ah_search_ctx *x, const ah_template *t, ah_ns P, ah_ns max_tail) {
    if (t->local || pass_tail(x, t) > max_tail || P < t->A)
        return 0;
    if (t->B == 0)
        return x->M;
    long long c = (P - t->A) / t->B + 1;
    return c > x->M ? x->M : c;
}

typedef struct {
    long long *V;   /* per class: best micro-batch capacity with u units, u = 0..units */
    int *choice;    /* template index used last at u, -1 = leave a unit idle */
    long long *cap; /* per template */
    /* --dp only (R > 0): the same knapsack with the replica count as a second
     * dimension, per class (units + 1) x (R + 1) */
    int R;                           /* largest replica count tracked */
    int offR[AH_MAX_KINDS + 1];    /* per class: start of its table */
    long long *VR;                   /* best capacity with <= u units and exactly r replicas, -1 = none */
    int *chR;                        /* template used last at (u, r), -1 = a unit idle */
    long long *conv;                 /* K x (R + 1): classes 0..k combined, exactly r replicas */
    int *conv_arg;                   /* replicas class k contributes at that optimum */
    int sel_counts[AH_MAX_KINDS];  /* the feasible combination found: pure replicas per class */
    /* per subset of classes (K <= COMP_MAX_K): the convolution of the other
     * classes at all their units, built lazily for the current tables */
    long long *comp;
    unsigned *comp_gen;
    unsigned gen;
    long long *tmp; /* 2 x (R + 1) scratch */
    int *plist, *best_at; /* class_tables scratch: n_tpl, and the most slots of a kind + 1 */
    int n_mixed, *mixed;  /* the mixed templates of the knapsack (not node-local) */
    long long *mixed_rmax; /* per mixed template: the most copies its slots allow */
} workspace;

#define COMP_MAX_K 8

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

static void workspace_scratch(const ah_search_ctx *x, workspace *w) {
    int smax = 0;
    for (int k = 0; k < x->n_kinds; k++)
        smax = x->kinds[k].slots > smax ? x->kinds[k].slots : smax;
    w->plist = malloc(sizeof(int) * (size_t)(x->n_tpl + 1));
    w->best_at = malloc(sizeof(int) * (size_t)(smax + 1));
    if (!w->plist || !w->best_at)
        abort();
}

/* The mixed templates feasible_T may use, with the most copies that fit. */
static void workspace_mixed(const ah_search_ctx *x, workspace *w) {
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

static void workspace_init(const ah_search_ctx *x, workspace *w, const int *offset) {
    memset(w, 0, sizeof *w);
    workspace_scratch(x, w);
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

static void workspace_free(workspace *w) {
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
static int useful_pure(const ah_search_ctx *x, workspace *w, int k) {
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
static void knapsack_tables(const ah_search_ctx *x, workspace *w, const int *offset) {
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
static void class_tables(const ah_search_ctx *x, ah_ns P, ah_ns max_tail, workspace *w, int *offset) {
    for (int i = 0; i < x->n_tpl; i++)
        w->cap[i] = capacity(x, &x->tpl[i], P, max_tail);
    knapsack_tables(x, w, offset);
}

/* --dp: the per-class knapsack with an exact replica count (w->cap set by
 * class_tables). VR[u][r] = best capacity of exactly r replicas of the class's
 * pure templates (each with cap >= 1) in at most u units. */
static void class_tables_R(const ah_search_ctx *x, workspace *w) {
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

/* --dp: with `fixed` replicas of capacity fixed_cap each already chosen (the
 * mixed copies) and left[k] units of each class for pure replicas, is there
 * an allowed total count T >= 2 (T <= M) whose pure part reaches M? Combines
 * the classes by a max-plus convolution over the count; on success records
 * the pure replicas per class in w->sel_counts. */
static int count_feasible(const ah_search_ctx *x, workspace *w, const long long *left, int fixed,
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
static int count_feasible_fast(const ah_search_ctx *x, workspace *w, const long long *left, int fixed,
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
static int feasible_T(ah_search_ctx *x, ah_ns P, ah_ns max_tail, workspace *w, int *offset, int *mixed_tpl,
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
         * is R copies of the largest capacity (R = the most replicas allowed) */
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
static ah_ns bisect_P(ah_search_ctx *x, ah_ns lo, ah_ns hi, ah_ns max_tail, workspace *w, int *offset) {
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
    workspace *w;
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
static ah_ns best_multi_replica(ah_search_ctx *x, workspace *w, int *offset, ah_ns hiP, ah_ns hiAll, ah_ns best,
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
static void trim_to_micro_batches(const ah_search_ctx *x, const workspace *w, ah_solution *sol) {
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
static void build_multi_replica(ah_search_ctx *x, workspace *w, int *offset, ah_ns P, ah_ns S, ah_solution *sol,
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
        workspace w;
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
    workspace w;
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

/* ---- phase 2: bounded expansion of long mixed shapes -------------------- */

/* Phase 2 (docs/planner.md, "Two phases"): every long mixed shape gets lower bounds of its split (A, B, the
 * tail), then a test at a pipeline bound T: could r copies of it plus the best pure replicas on the slots
 * left reach M micro-batches in a plan of value < T? Shapes are bucketed by the least T of a grid at which
 * they pass and split bucket by bucket, the most promising first; the sub-search is solved after each, and
 * the walk stops once its optimum is at most the next bucket's T (no shape left can then beat it: a tie
 * with it is no better). */

#define EXPAND_TAIL_LEVELS 24 /* edges of the plan-tail levels of the pure tables */
#define EXPAND_BOUNDS 15      /* the grid of bounds T_j = bound (1 - expand_steps[j]) */
static const double expand_steps[EXPAND_BOUNDS] = {0,     0.0025, 0.005, 0.0075, 0.01, 0.0125, 0.015, 0.0175,
                                                   0.02,  0.025,  0.03,  0.04,   0.06, 0.1,    0.2};

/* A mixed shape that passed the cheap test at the bound, with its bounds. */
typedef struct {
    unsigned char cls[AH_MAX_KINDS], n[AH_MAX_KINDS]; /* its classes and their stage counts */
    int nz;
    int normal;        /* its normal templates may matter (and are not there yet) */
    int local;         /* its node-local ones may */
    ah_ns b0s[2];      /* B0 per class order (add_templates) */
    ah_ns lbA, lbB;    /* normal layout */
    ah_ns tail1;       /* the least optimizer tail (single replica) */
    ah_ns local_value; /* the least value of R node-local copies; AH_NS_INF if none */
    int c0[2], e0[2];  /* per class order: the first stage's class and its least end (c0 -1: no split) */
    /* (before cand_tighten: every first stage holds at least layer 0) */
    ah_ns tau;         /* its least tail in a plan of >= R replicas (after the walk) */
    int use[AH_MAX_KINDS];
    int bucket; /* the largest j with the shape passing at T_j */
    int tight;  /* its bounds are those of its split (cand_tighten), else from the walk's cheap ones */
    int can_local;
    ah_ns lbA_l, lbB_l;           /* node-local layout (the walk's) */
    ah_ns sends2, sends2_l, slack; /* for cand_tighten */
} shape_cand;

typedef struct {
    ah_ns bound; /* only plans strictly faster than this matter */
    workspace w;
    int offset[AH_MAX_KINDS + 1];
    long long *V0; /* the cheap test's tables: pure capacities within bound - 1 - their 2-replica tail */
    int phase1;    /* mixed shapes up to this many stages of one degree have their normal templates already */
    int smax;      /* the deepest mixed shape */
    ah_ns **pair_b0; /* [a * K + b]: ah_pair_b0_table of classes a then b, made when first needed */
    shape_cand *cand;
    int n_cand, cap_cand;
    long long capmax; /* the most micro-batches one replica can run in a plan below bound */
    /* after the walk */
    int R; /* every multi-replica plan below bound has >= R replicas (2..AH_RING_EXACT_MAX + 1) */
    ah_ns T[EXPAND_BOUNDS + 1]; /* [EXPAND_BOUNDS]: the sub-search's optimum so far (expand_split) */
    int n_lv;
    ah_ns lv[EXPAND_TAIL_LEVELS + 1]; /* tail level edges: level i is [lv[i], lv[i + 1]), lv[n_lv] = inf */
    long long *tab;                   /* [j][i]: pure tables of level i at T_j, made when first needed */
    unsigned char *tab_ok;
    long long *quick; /* [j]: every pure template within T_j - 1 - its tail */
    unsigned char *quick_ok;
} expand_env;

/* The tail of a copy of t in a plan of R >= 2 replicas (R > AH_RING_EXACT_MAX: any count). */
static ah_ns tail_at(const ah_template *t, int R) {
    return R <= AH_RING_EXACT_MAX ? t->tail_r[R] : t->tail;
}

/* A pipeline whose first stage is [0, e) of class c pays at least that stage's sync + optimizer after its
 * slowest pipeline (ah_pipeline_tail counts stage 0 whole), in a plan of R >= 2 replicas. */
static ah_ns first_stage_tail(const ah_search_ctx *x, int c, int e, int R) {
    const ah_class *c0 = &x->cls[c];
    ah_ns u = ah_range(c0->lt.upd, 0, e);
    if (R <= AH_RING_EXACT_MAX)
        return u + ah_range(c0->sync_r[R], 0, e) + x->sync_lat[R];
    return u + ah_range(c0->sync, 0, e) + x->sync_lat[0];
}

/* Optimistic (lower) bounds for any split of a shape, over its classes c:
 *  A >= sum_l min_c w_c(l) + 2 sum sends, B >= max_l min_c w_c(l),
 *  and with omega_l = max_c w_c(l) and kappa_c = min_l w_c(l) / omega_l
 *  (so w_c(l) >= kappa_c omega_l), S stages of classes c_j give
 *  B >= sum_l omega_l / sum_j 1/kappa_{c_j}. */
static void bounds_for(const ah_search_ctx *x, const int *shape, int local, ah_ns *lbA, ah_ns *lbB, ah_ns *sends2,
                       ah_ns *cmax) {
    int in[AH_MAX_CLASSES], n_in = 0;
    for (int k = 0; k < x->K; k++)
        if (shape[k])
            in[n_in++] = k;
    ah_ns sum_min = 0, max_min = 0;
    double omega = 0.0, kappa[AH_MAX_CLASSES];
    for (int q = 0; q < n_in; q++)
        kappa[q] = 1.0;
    for (int l = 0; l < x->L; l++) {
        ah_ns mn = AH_NS_INF, om = 0;
        for (int q = 0; q < n_in; q++) {
            ah_ns wl = ah_range(x->cls[in[q]].lt.w, l, l + 1);
            mn = wl < mn ? wl : mn;
            om = wl > om ? wl : om;
        }
        sum_min += mn;
        max_min = mn > max_min ? mn : max_min;
        omega += (double)om;
        for (int q = 0; q < n_in && om > 0; q++) {
            double r = (double)ah_range(x->cls[in[q]].lt.w, l, l + 1) / (double)om;
            kappa[q] = r < kappa[q] ? r : kappa[q];
        }
    }
    double inv = 0.0;
    for (int q = 0; q < n_in; q++)
        inv += shape[in[q]] * (kappa[q] > 0 ? 1.0 / kappa[q] : 1e300);
    /* the sends of a shape do not depend on its split (or its class order):
     * A pays both directions of each, and the window of all stages bounds
     * the period: B >= (sum w + 2 sum c) / S */
    ah_template t;
    memset(&t, 0, sizeof t); /* normal layout: its sends are the fewest inter-node ones */
    t.local = local;         /* node-local: every boundary crosses nodes */
    for (int k = 0; k < x->K; k++)
        for (int i = 0; i < shape[k]; i++)
            t.cls[t.n_stages++] = k;
    ah_ns sends = 0;
    *cmax = 0;
    for (int j = 0; j + 1 < t.n_stages; j++) {
        ah_ns c = ah_template_p2p(x, &t, j);
        sends += c;
        *cmax = c > *cmax ? c : *cmax;
    }
    ah_ns b = max_min;
    if (x->o->train.p2p == AH_P2P_LOCKSTEP) { /* every stage time holds 2 chains; the period excess is exact */
        ah_ns chain = ah_template_chain(x, &t);
        sends = t.n_stages * chain;
        *cmax = chain;
        b += 2 * chain;
    }
    *sends2 = 2 * sends;
    *lbA = sum_min + 2 * sends;
    ah_ns whole = (sum_min + 2 * sends + t.n_stages - 1) / t.n_stages;
    if (whole > b)
        b = whole;
    if (inv > 0) {
        double frac = omega / inv * (1.0 - 1e-9) - 1.0; /* margin for rounding */
        if (frac > (double)b)
            b = (ah_ns)frac;
    }
    *lbB = b > 1 ? b : 1;
}

/* Could r copies of a shape (pipelines within P, lbA/lbB its bounds) plus the pure replicas of tables V on
 * the slots left reach M micro-batches? */
static int copies_useful(const ah_search_ctx *x, const expand_env *v, const long long *V, const int *use, ah_ns P,
                         ah_ns lbA, ah_ns lbB) {
    long long capub = P < lbA ? 0 : (P - lbA) / lbB + 1;
    if (capub > x->M)
        capub = x->M;
    for (long long r = 1; capub > 0; r++) {
        long long val = r * capub;
        for (int k = 0; k < x->n_kinds; k++) {
            long long left = x->kinds[k].slots - r * use[k];
            if (left < 0)
                return 0;
            val += V[v->offset[k] + left];
        }
        if (val >= x->M)
            return 1;
    }
    return 0;
}

/* A shape's template in either class order, its stages in that order. */
static void shape_template(const ah_search_ctx *x, const int *shape, int reversed, ah_template *t) {
    t->n_stages = 0;
    for (int q = 0; q < x->K; q++) {
        int k = reversed ? x->K - 1 - q : q;
        for (int i = 0; i < shape[k]; i++)
            t->cls[t->n_stages++] = k;
    }
}

/* ah_template_split_bounds over both class orders of a shape: *B0 and *sum_w the smaller of each (bounds for
 * both its templates), per order the first stage's class and least end (c0 -1 where no split fits; its tail
 * bound, first_stage_tail, needs the plan's replica count), *tail1 the least optimizer part. -1 if no split
 * of either order fits. */
static int shape_split_bounds(const ah_search_ctx *x, const int *shape, ah_ns slack, ah_ns *B0, ah_ns *sum_w,
                              int *c0, int *e0s, ah_ns *tail1) {
    *B0 = *sum_w = *tail1 = AH_NS_INF;
    for (int reversed = 0; reversed <= 1; reversed++) {
        ah_template t;
        shape_template(x, shape, reversed, &t);
        ah_ns b, sw;
        int e0;
        c0[reversed] = -1;
        if (ah_template_split_bounds(x, &t, slack, &b, &sw, &e0) != 0)
            continue;
        if (e0 > x->L)
            e0 = 1; /* cannot happen (the B0 split qualifies); layer 0 alone is still a bound */
        c0[reversed] = t.cls[0];
        e0s[reversed] = e0;
        ah_ns u = ah_range(x->cls[t.cls[0]].lt.upd, 0, e0);
        *B0 = b < *B0 ? b : *B0;
        *sum_w = sw < *sum_w ? sw : *sum_w;
        *tail1 = u < *tail1 ? u : *tail1;
    }
    return *B0 == AH_NS_INF ? -1 : 0;
}

/* B0 of a shape's template in each class order (ah_template_split_b0): from the pair tables for 2-class
 * shapes (made when first needed), else template by template. */
static void shape_b0(const ah_search_ctx *x, expand_env *v, const int *shape, ah_ns *b0) {
    int in[2], n_in = 0;
    for (int k = 0; k < x->K && n_in <= 2; k++)
        if (shape[k] && n_in++ < 2)
            in[n_in - 1] = k;
    for (int reversed = 0; reversed <= 1; reversed++) {
        if (n_in == 2 && shape[in[0]] + shape[in[1]] <= v->smax) { /* a pair: its table */
            int a = in[reversed], c = in[1 - reversed];
            ah_ns **tab = &v->pair_b0[a * x->K + c];
            if (!*tab) {
                *tab = malloc(sizeof(ah_ns) * (size_t)(v->smax + 1) * (size_t)(v->smax + 1));
                if (!*tab)
                    abort();
                ah_pair_b0_table(x, a, c, v->smax, *tab);
            }
            b0[reversed] = (*tab)[shape[a] * (v->smax + 1) + shape[c]];
        } else {
            ah_template t;
            shape_template(x, shape, reversed, &t);
            b0[reversed] = ah_template_split_b0(x, &t);
        }
    }
}

/* A test with weaker bounds: B0 of the split (the smaller over both orders) besides the fluid ones, no
 * sum_w, every tail at its least (the pipelines within bound - 1). Every term of the later tests is monotone
 * in these bounds, so failing this fails them (most shapes that fail at all fail here). */
static int cheap_test_passes(const ah_search_ctx *x, const expand_env *v, const int *shape, int can_local, ah_ns lbA,
                             ah_ns lbB, ah_ns lbA_l, ah_ns lbB_l, const ah_ns *b0s) {
    ah_ns b0 = b0s[0] < b0s[1] ? b0s[0] : b0s[1];
    if (b0 == AH_NS_INF)
        return 0; /* no split fits in memory */
    int use[AH_MAX_KINDS] = {0};
    for (int k = 0; k < x->K; k++)
        use[x->cls[k].kind] += shape[k] * x->cls[k].slot_w;
    ah_ns B = b0 > lbB ? b0 : lbB;
    if (ah_replica_time(lbA, B, 0, x->M) < v->bound || copies_useful(x, v, v->V0, use, v->bound - 1, lbA, B))
        return 1;
    if (!can_local)
        return 0;
    int rmax = 1 << 30;
    for (int k = 0; k < x->K; k++)
        if (shape[k] && x->cls[k].upn < rmax)
            rmax = x->cls[k].upn;
    B = b0 > lbB_l ? b0 : lbB_l;
    for (int R = 2; R <= rmax && R <= x->M; R++)
        if (ah_replica_time(lbA_l, B, 0, (x->M + R - 1) / R) < v->bound)
            return 1;
    return 0;
}

static shape_cand *new_cand(expand_env *v) {
    if (v->n_cand == v->cap_cand) {
        v->cap_cand = v->cap_cand ? 2 * v->cap_cand : 256;
        v->cand = realloc(v->cand, sizeof(shape_cand) * (size_t)v->cap_cand);
        if (!v->cand)
            abort();
    }
    shape_cand *c = &v->cand[v->n_cand++];
    memset(c, 0, sizeof *c);
    return c;
}

/* The least value of R node-local copies (R up to the fewest TP groups per node of its classes); the
 * in-node all-reduce is not bounded below by the NIC sync, only by 0. */
static ah_ns local_value(const ah_search_ctx *x, const int *shape, ah_ns lbA, ah_ns lbB, ah_ns tail1) {
    int rmax = 1 << 30;
    for (int k = 0; k < x->K; k++)
        if (shape[k] && x->cls[k].upn < rmax)
            rmax = x->cls[k].upn;
    ah_ns best = AH_NS_INF;
    for (int R = 2; R <= rmax && R <= x->M; R++) {
        ah_ns t = ah_replica_time(lbA, lbB, tail1, (x->M + R - 1) / R);
        best = t < best ? t : best;
    }
    return best;
}

/* The walk: a shape's cheap bounds (fluid ones, B0 from the pair tables, every first stage at least layer
 * 0), the cheap test at the bound, and a candidate for the buckets. The bounds of its split
 * (cand_tighten) are computed only if its bucket is reached. */
static void collect_shape(ah_search_ctx *x, const int *shape, int stages, void *arg) {
    expand_env *v = arg;
    if (!depth_allowed(x->o, stages))
        return;
    int normal_done = stages <= v->phase1 && shape_uniform(x, shape);
    ah_ns lbA, lbB, sends2, cmax, lbA_l = 0, lbB_l = 0, sends2_l = 0, cmax_l = 0;
    bounds_for(x, shape, 0, &lbA, &lbB, &sends2, &cmax);
    int can_local = local_possible(x, shape);
    if (normal_done && !can_local)
        return;
    if (can_local)
        bounds_for(x, shape, 1, &lbA_l, &lbB_l, &sends2_l, &cmax_l);
    ah_ns b0s[2];
    shape_b0(x, v, shape, b0s);
    ah_ns b0 = b0s[0] < b0s[1] ? b0s[0] : b0s[1];
    if (b0 == AH_NS_INF || (!normal_done && !cheap_test_passes(x, v, shape, can_local, lbA, lbB, lbA_l, lbB_l,
                                                                b0s))) {
        x->pruned += !normal_done; /* no split fits in memory, or bounds rule it out */
        return;
    }
    shape_cand *c = new_cand(v);
    int first = -1, last = -1;
    for (int k = 0; k < x->K; k++)
        if (shape[k]) {
            c->cls[c->nz] = (unsigned char)k;
            c->n[c->nz++] = (unsigned char)shape[k];
            c->use[x->cls[k].kind] += shape[k] * x->cls[k].slot_w;
            first = first < 0 ? k : first;
            last = k;
        }
    c->normal = !normal_done;
    c->can_local = can_local;
    c->b0s[0] = b0s[0], c->b0s[1] = b0s[1];
    c->lbB = b0 > lbB ? b0 : lbB;
    c->lbA = lbA;
    c->lbA_l = lbA_l;
    c->lbB_l = b0 > lbB_l ? b0 : lbB_l;
    c->sends2 = sends2, c->sends2_l = sends2_l;
    c->slack = 2 * (can_local && cmax_l > cmax ? cmax_l : cmax); /* either layout's period excess over B0 */
    c->c0[0] = b0s[0] < AH_NS_INF ? first : -1, c->c0[1] = b0s[1] < AH_NS_INF ? last : -1;
    c->e0[0] = c->e0[1] = 1;
    c->tail1 = 0;
    c->local_value = can_local ? local_value(x, shape, c->lbA_l, c->lbB_l, 0) : AH_NS_INF;
    c->local = c->local_value < v->bound;
    if (c->normal && v->bound - 1 >= c->lbA) { /* its copies' micro-batches, for the least replica count */
        long long cap = (v->bound - 1 - c->lbA) / c->lbB + 1;
        v->capmax = cap > v->capmax ? cap : v->capmax;
    }
}

/* The candidate's tail bound at the plan's least replica count. */
static void cand_tau(const ah_search_ctx *x, const expand_env *v, shape_cand *c) {
    c->tau = AH_NS_INF;
    for (int o = 0; o < 2; o++)
        if (c->c0[o] >= 0) {
            ah_ns t = first_stage_tail(x, c->c0[o], c->e0[o], v->R);
            c->tau = t < c->tau ? t : c->tau;
        }
}

/* The bounds of the candidate's split (ah_template_split_bounds in both class orders) in place of the
 * walk's: the least sum of stage times (A), B0 exact, the first stage's least end (the tail). */
static void cand_tighten(ah_search_ctx *x, const expand_env *v, shape_cand *c) {
    int shape[AH_MAX_CLASSES] = {0};
    for (int z = 0; z < c->nz; z++)
        shape[c->cls[z]] = c->n[z];
    c->tight = 1;
    ah_ns b0, sum_w, tail1;
    if (shape_split_bounds(x, shape, c->slack, &b0, &sum_w, c->c0, c->e0, &tail1) != 0) {
        c->normal = c->local = 0; /* no split fits in memory: no template */
        return;
    }
    c->lbB = b0 > c->lbB ? b0 : c->lbB;
    c->lbA = sum_w + c->sends2 > c->lbA ? sum_w + c->sends2 : c->lbA;
    c->tail1 = tail1;
    cand_tau(x, v, c);
    /* the tail of every stage, not only the first: the tail DP per class order (its stages within that
     * order's B0 + slack, as the rule's split) */
    ah_ns tau = AH_NS_INF;
    for (int o = 0; o < 2; o++) {
        if (c->b0s[o] == AH_NS_INF)
            continue;
        ah_template t;
        shape_template(x, shape, o, &t);
        ah_ns tb = ah_template_tail_bound(x, &t, c->b0s[o] + c->slack, v->R);
        tau = tb < tau ? tb : tau;
    }
    if (tau > c->tau && tau != AH_NS_INF)
        c->tau = tau;
    if (c->can_local) {
        ah_ns B = b0 > c->lbB_l ? b0 : c->lbB_l, A = sum_w + c->sends2_l > c->lbA_l ? sum_w + c->sends2_l : c->lbA_l;
        c->local_value = local_value(x, shape, A, B, tail1);
        c->local = c->local_value < v->bound;
    }
}

static int cmp_ns_asc(const void *a, const void *b) {
    ah_ns x = *(const ah_ns *)a, y = *(const ah_ns *)b;
    return (x > y) - (x < y);
}

/* After the walk: the least replica count R of a multi-replica plan below the bound (each replica runs at
 * most capmax micro-batches), every candidate's tail bound at R, the tail levels (quantiles of the pure
 * templates' tails at R) and the grid of bounds. */
static void expand_prepare(const ah_search_ctx *x, expand_env *v) {
    for (int i = 0; i < x->n_tpl; i++) /* pure and phase-1 templates (node-local ones are another family) */
        if (!x->tpl[i].local) {
            long long cap = capacity(x, &x->tpl[i], v->bound - 1, AH_NS_INF);
            v->capmax = cap > v->capmax ? cap : v->capmax;
        }
    long long R = v->capmax > 0 ? (x->M + v->capmax - 1) / v->capmax : 2;
    v->R = R < 2 ? 2 : R > AH_RING_EXACT_MAX ? AH_RING_EXACT_MAX + 1 : (int)R;
    for (int i = 0; i < v->n_cand; i++)
        cand_tau(x, v, &v->cand[i]);
    int n = 0;
    for (int k = 0; k < x->n_kinds; k++)
        n += x->n_pure[k];
    ah_ns *tails = malloc(sizeof(ah_ns) * (size_t)(n + 1));
    if (!tails)
        abort();
    n = 0;
    for (int k = 0; k < x->n_kinds; k++)
        for (int q = 0; q < x->n_pure[k]; q++)
            tails[n++] = tail_at(&x->tpl[x->pure[k][q]], v->R);
    qsort(tails, (size_t)n, sizeof(ah_ns), cmp_ns_asc);
    v->n_lv = 1;
    v->lv[0] = 0;
    for (int q = 1; q < EXPAND_TAIL_LEVELS && n > 0; q++) {
        ah_ns e = tails[(size_t)q * (size_t)n / EXPAND_TAIL_LEVELS];
        if (e > v->lv[v->n_lv - 1])
            v->lv[v->n_lv++] = e;
    }
    v->lv[v->n_lv] = AH_NS_INF;
    free(tails);
    for (int j = 0; j < EXPAND_BOUNDS; j++) {
        v->T[j] = v->bound - (ah_ns)((double)v->bound * expand_steps[j]);
        if (v->T[j] < 1)
            v->T[j] = 1;
    }
    size_t cells = (size_t)v->offset[x->n_kinds];
    v->tab = malloc(sizeof(long long) * cells * (EXPAND_BOUNDS + 1) * (size_t)v->n_lv);
    v->tab_ok = calloc((size_t)(EXPAND_BOUNDS + 1) * (size_t)v->n_lv, 1);
    v->quick = malloc(sizeof(long long) * cells * (EXPAND_BOUNDS + 1));
    v->quick_ok = calloc(EXPAND_BOUNDS + 1, 1);
    if (!v->tab || !v->tab_ok || !v->quick || !v->quick_ok)
        abort();
}

/* The pure tables at T_j: of level i (level < 0: the quick one, every pure template within T_j - 1 - its
 * tail). A plan whose largest tail is in [lv[i], lv[i + 1]) holds only pure templates of tails below
 * lv[i + 1], each within T_j - 1 - max(lv[i], its tail). */
static const long long *level_table(const ah_search_ctx *x, expand_env *v, int j, int i) {
    size_t cells = (size_t)v->offset[x->n_kinds];
    unsigned char *ok = i < 0 ? &v->quick_ok[j] : &v->tab_ok[(size_t)j * (size_t)v->n_lv + (size_t)i];
    long long *V = i < 0 ? v->quick + (size_t)j * cells : v->tab + ((size_t)j * (size_t)v->n_lv + (size_t)i) * cells;
    if (*ok)
        return V;
    for (int k = 0; k < x->n_kinds; k++)
        for (int q = 0; q < x->n_pure[k]; q++) {
            int p = x->pure[k][q];
            ah_ns tp = tail_at(&x->tpl[p], v->R);
            if (i >= 0 && tp >= v->lv[i + 1])
                v->w.cap[p] = 0;
            else {
                ah_ns t = i >= 0 && v->lv[i] > tp ? v->lv[i] : tp;
                v->w.cap[p] = capacity(x, &x->tpl[p], v->T[j] - 1 - t, AH_NS_INF);
            }
        }
    knapsack_tables(x, &v->w, v->offset);
    memcpy(V, v->w.V, sizeof(long long) * cells);
    *ok = 1;
    return V;
}

/* Could a plan holding the candidate's templates have a value below T_j? Its node-local copies, a single
 * replica, or r copies plus pure replicas, the plan's largest tail at some level at or above its own. */
static int cand_passes(const ah_search_ctx *x, expand_env *v, const shape_cand *c, int j) {
    ah_ns T = v->T[j];
    if (c->local && c->local_value < T)
        return 1;
    if (!c->normal || c->tau == AH_NS_INF)
        return 0;
    if (ah_replica_time(c->lbA, c->lbB, c->tail1, x->M) < T)
        return 1;
    if (!copies_useful(x, v, level_table(x, v, j, -1), c->use, T - 1 - c->tau, c->lbA, c->lbB))
        return 0;
    int i = 0;
    while (i + 1 < v->n_lv && v->lv[i + 1] <= c->tau)
        i++;
    for (; i < v->n_lv; i++) {
        ah_ns t = v->lv[i] > c->tau ? v->lv[i] : c->tau;
        if (copies_useful(x, v, level_table(x, v, j, i), c->use, T - 1 - t, c->lbA, c->lbB))
            return 1;
    }
    return 0;
}

/* The largest j <= hi with the candidate passing at T_j (the test is monotone in T), -1 if it fails at the
 * bound itself. */
static int cand_bucket(const ah_search_ctx *x, expand_env *v, const shape_cand *c, int hi) {
    if (!cand_passes(x, v, c, 0))
        return -1;
    int lo = 0; /* passes at lo */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (cand_passes(x, v, c, mid))
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* The grid's extra bound is the sub-search's optimum U: a candidate of bucket <= j failing at U cannot
 * beat it, now or later (U only falls), and leaves the buckets. Returns whether any is left. */
static int drop_hopeless(const ah_search_ctx *x, expand_env *v, ah_ns U, int j) {
    v->T[EXPAND_BOUNDS] = U;
    v->quick_ok[EXPAND_BOUNDS] = 0;
    memset(v->tab_ok + (size_t)EXPAND_BOUNDS * (size_t)v->n_lv, 0, (size_t)v->n_lv);
    int left = 0;
    for (int q = 0; q < v->n_cand; q++) {
        shape_cand *c = &v->cand[q];
        if (c->bucket < 0 || c->bucket > j)
            continue;
        if (cand_passes(x, v, c, EXPAND_BOUNDS))
            left = 1;
        else
            c->bucket = -1;
    }
    return left;
}

/* Split the buckets, the lowest bound first, solving after each, until the optimum is at most the next
 * bucket's bound: the shapes left fail at it, so none is in a plan faster than the optimum. A candidate
 * whose bucket is reached gets the bounds of its split first, which may move it to a later bucket. */
static int expand_split(ah_search_ctx *x, expand_env *v, ah_solution *s) {
    for (int q = 0; q < v->n_cand; q++)
        v->cand[q].bucket = cand_bucket(x, v, &v->cand[q], EXPAND_BOUNDS - 1);
    int added = 0, j = EXPAND_BOUNDS - 1;
    ah_ns tested = v->bound;
    for (; j >= 0; j--) {
        if (j + 1 < EXPAND_BOUNDS && s->value <= v->T[j + 1])
            break;
        if (s->value < tested && !drop_hopeless(x, v, s->value, j))
            break;
        tested = s->value < tested ? s->value : tested;
        int before = x->n_tpl;
        for (int q = 0; q < v->n_cand; q++) {
            shape_cand *c = &v->cand[q];
            if (c->bucket != j)
                continue;
            if (!c->tight) {
                cand_tighten(x, v, c);
                c->bucket = cand_bucket(x, v, c, j);
                if (c->bucket != j || (s->value < v->bound && !cand_passes(x, v, c, EXPAND_BOUNDS))) {
                    c->bucket = c->bucket == j ? -1 : c->bucket;
                    continue;
                }
            }
            int shape[AH_MAX_CLASSES] = {0};
            for (int z = 0; z < c->nz; z++)
                shape[c->cls[z]] = c->n[z];
            add_templates(x, shape, c->normal, c->local, c->b0s);
        }
        if (x->n_tpl > before) {
            added += x->n_tpl - before;
            ah_search_solve_more(x, s, before);
        }
    }
    for (int q = 0; q < v->n_cand; q++) /* never split: bounds ruled them out */
        x->pruned += v->cand[q].normal && v->cand[q].bucket <= j;
    return added;
}

int ah_search_expand(ah_search_ctx *x, int phase1_mixed_stages, ah_ns bound, ah_solution *s) {
    int hi = mixed_limit(x);
    if (x->n_kinds < 2 || x->o->max_mixed_types < 2 || hi <= phase1_mixed_stages || bound <= 1)
        return 0;
    expand_env v;
    memset(&v, 0, sizeof v);
    v.bound = bound;
    v.offset[0] = 0;
    for (int k = 0; k < x->n_kinds; k++)
        v.offset[k + 1] = v.offset[k] + x->kinds[k].slots + 1;
    size_t cells = (size_t)v.offset[x->n_kinds];
    v.w.V = malloc(sizeof(long long) * cells);
    v.w.choice = malloc(sizeof(int) * cells);
    v.w.cap = malloc(sizeof(long long) * (size_t)(x->n_tpl ? x->n_tpl : 1));
    v.w.R = 0; /* the bounds ignore --dp: a relaxation, still exact to prune */
    v.V0 = malloc(sizeof(long long) * cells);
    if (!v.w.V || !v.w.choice || !v.w.cap || !v.V0)
        abort();
    workspace_scratch(x, &v.w);
    /* the cheap test's tables: a pure replica in a plan of >= 2 replicas below bound finishes its pipeline
     * by bound - 1 - its 2-replica tail (mixed templates of phase 1 are left out: a plan holds copies of one
     * mixed template only) */
    for (int t = 0; t < x->n_tpl; t++)
        v.w.cap[t] = capacity(x, &x->tpl[t], bound - 1 - x->tpl[t].tail_r[2], AH_NS_INF);
    knapsack_tables(x, &v.w, v.offset);
    memcpy(v.V0, v.w.V, sizeof(long long) * cells);
    int shape[AH_MAX_CLASSES] = {0};
    v.phase1 = phase1_mixed_stages;
    v.smax = hi;
    v.pair_b0 = calloc((size_t)x->K * (size_t)x->K + 1, sizeof(ah_ns *));
    if (!v.pair_b0)
        abort();
    shape_walk sw = {2, hi, 0, collect_shape, &v};
    mixed_shapes(x, &sw, 0, 0, shape, 0, 0);
    int added = 0;
    if (v.n_cand > 0) {
        expand_prepare(x, &v);
        added = expand_split(x, &v, s);
    }
    for (int i = 0; i < x->K * x->K; i++)
        free(v.pair_b0[i]);
    free(v.pair_b0);
    free(v.cand);
    free(v.tab);
    free(v.tab_ok);
    free(v.quick);
    free(v.quick_ok);
    free(v.V0);
    free(v.w.V);
    free(v.w.choice);
    free(v.w.cap);
    free(v.w.plist);
    free(v.w.best_at);
    return added;
}
