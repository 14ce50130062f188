/* Phase 2 of the planner's search (docs/planner.md, "Two phases" and "The most promising shapes first"):
 * the long mixed shapes, bounded, bucketed and split the most promising first. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/search_internal.h"

/* ---- phase 2: bounded expansion of long mixed shapes -------------------- */

/* Phase 2 (docs/planner.md, "Two phases"): every long mixed shape gets lower bounds of its split (A, B, the
 * tail), then a test at a pipeline bound T: could r copies of it plus the best pure replicas on the slots
 * left reach M micro-batches in a plan of value < T? Shapes are bucketed by the least T of a grid at which
 * they pass and split bucket by bucket, the most promising first; the sub-search is solved after each, and
 * the walk stops once its optimum is at most the next bucket's T (no shape left can then beat it: a tie
 * with it is no better). */

#define EXPAND_TAIL_LEVELS 24 /* edges of the plan-tail levels of the pure tables */
#define EXPAND_BOUNDS 15      /* the grid of bounds T_j = bound (1 - expand_steps[j]) */
static const double expand_steps[EXPAND_BOUNDS] = {0,    0.0025, 0.005, 0.0075, 0.01, 0.0125, 0.015, 0.0175,
                                                   0.02, 0.025,  0.03,  0.04,   0.06, 0.1,    0.2};

/* What bounds_for needs of a shape's set of classes, whatever its stage counts: per layer the least and
 * the largest time over the set, summed and maximised, and each class's kappa. Cached by the set (a walk
 * visits thousands of shapes over a few dozen sets). */
typedef struct {
    uint64_t mask; /* the set's classes (bit k); 0 = an empty slot */
    ah_ns sum_min, max_min;
    double omega;
    double kappa[AH_MAX_CLASSES]; /* by the set's classes in ascending order */
} class_set_bounds;

#define CLASS_SET_SLOTS 512 /* direct-mapped: a collision recomputes, never answers wrong */

/* A mixed shape that passed the cheap test at the bound, with its bounds. */
typedef struct {
    unsigned char cls[AH_MAX_KINDS], n[AH_MAX_KINDS]; /* its classes and their stage counts */
    int nz;
    int normal;        /* its normal templates may matter (and are not there yet) */
    int local;         /* its node-local ones may */
    ah_ns b0s[2];      /* B0 per class order (ah__add_templates) */
    ah_ns lbA, lbB;    /* normal layout */
    ah_ns tail1;       /* the least optimizer tail (single replica) */
    ah_ns local_value; /* the least value of R node-local copies; AH_NS_INF if none */
    int c0[2];         /* per class order: the first stage's class (-1: no split fits) */
    ah_ns tau; /* its least tail in a plan of >= R replicas (after the walk; cand_tighten's tail DP) */
    int use[AH_MAX_KINDS];
    int bucket; /* the largest j with the shape passing at T_j */
    int tight;  /* its bounds are those of its split (cand_tighten), else from the walk's cheap ones */
    int can_local;
    ah_ns lbA_l, lbB_l;            /* node-local layout (the walk's) */
    ah_ns sends2, sends2_l, slack; /* for cand_tighten */
} shape_cand;

typedef struct {
    ah_ns bound; /* only plans strictly faster than this matter */
    ah__workspace w;
    int offset[AH_MAX_KINDS + 1];
    long long *V0; /* the cheap test's tables: pure capacities within bound - 1 - their 2-replica tail */
    int phase1;    /* mixed shapes up to this many stages of one degree have their normal templates already */
    int smax;      /* the deepest mixed shape */
    ah_ns **pair_b0; /* [a * K + b]: ah_pair_b0_table of classes a then b, made when first needed */
    class_set_bounds *class_sets; /* [CLASS_SET_SLOTS]: bounds_for's cache */
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

static const class_set_bounds *class_set_of(const ah_search_ctx *x, class_set_bounds *cache, const int *in,
                                            int n_in) {
    uint64_t mask = 0;
    for (int q = 0; q < n_in; q++)
        mask |= 1ull << in[q];
    uint64_t h = mask * 0x9E3779B97F4A7C15ull;
    class_set_bounds *e = &cache[(h >> 40) % CLASS_SET_SLOTS];
    if (e->mask == mask)
        return e;
    e->mask = mask;
    e->sum_min = e->max_min = 0;
    e->omega = 0.0;
    for (int q = 0; q < n_in; q++)
        e->kappa[q] = 1.0;
    for (int l = 0; l < x->L; l++) {
        ah_ns mn = AH_NS_INF, om = 0, wl[AH_MAX_CLASSES];
        for (int q = 0; q < n_in; q++) {
            wl[q] = ah_range(x->cls[in[q]].lt.w, l, l + 1);
            mn = wl[q] < mn ? wl[q] : mn;
            om = wl[q] > om ? wl[q] : om;
        }
        e->sum_min += mn;
        e->max_min = mn > e->max_min ? mn : e->max_min;
        e->omega += (double)om;
        for (int q = 0; q < n_in && om > 0; q++) {
            double r = (double)wl[q] / (double)om;
            e->kappa[q] = r < e->kappa[q] ? r : e->kappa[q];
        }
    }
    return e;
}

/* The sends of a shape's pipeline (they do not depend on its split or its class order): their sum and the
 * largest. Normal layout: a run of one class crosses nodes at its whole-node chunks' edges
 * (ah_template_inter), between classes always; node-local: every boundary crosses nodes. */
static ah_ns shape_sends(const ah_search_ctx *x, const int *in, int n_in, const int *shape, int local,
                         ah_ns *cmax) {
    ah_ns sum = 0;
    *cmax = 0;
    for (int q = 0; q < n_in; q++) {
        int k = in[q], inside = shape[k] - 1;
        int crossing = local ? inside : inside / x->cls[k].upn;
        if (crossing > 0) {
            ah_ns c = ah_class_p2p(x, k, k, 1);
            sum += crossing * c;
            *cmax = c > *cmax ? c : *cmax;
        }
        if (inside - crossing > 0) {
            ah_ns c = ah_class_p2p(x, k, k, 0);
            sum += (inside - crossing) * c;
            *cmax = c > *cmax ? c : *cmax;
        }
        if (q + 1 < n_in) {
            ah_ns c = ah_class_p2p(x, k, in[q + 1], 1);
            sum += c;
            *cmax = c > *cmax ? c : *cmax;
        }
    }
    return sum;
}

/* Optimistic (lower) bounds for any split of a shape, over its classes c:
 *  A >= sum_l min_c w_c(l) + 2 sum sends, B >= max_l min_c w_c(l),
 *  and with omega_l = max_c w_c(l) and kappa_c = min_l w_c(l) / omega_l
 *  (so w_c(l) >= kappa_c omega_l), S stages of classes c_j give
 *  B >= sum_l omega_l / sum_j 1/kappa_{c_j}. */
static void bounds_for(const ah_search_ctx *x, class_set_bounds *cache, const int *shape, int local,
                       ah_ns *lbA, ah_ns *lbB, ah_ns *sends2, ah_ns *cmax) {
    int in[AH_MAX_CLASSES], n_in = 0, stages = 0;
    for (int k = 0; k < x->K; k++)
        if (shape[k]) {
            in[n_in++] = k;
            stages += shape[k];
        }
    const class_set_bounds *cs = class_set_of(x, cache, in, n_in);
    double inv = 0.0;
    for (int q = 0; q < n_in; q++)
        inv += shape[in[q]] * (cs->kappa[q] > 0 ? 1.0 / cs->kappa[q] : 1e300);
    /* A pays both directions of each send, and the window of all stages bounds the period:
     * B >= (sum w + 2 sum c) / S */
    ah_ns sends, b = cs->max_min;
    if (x->o->train.p2p == AH_P2P_LOCKSTEP) { /* every stage time holds 2 chains; the period excess is exact */
        ah_template t;
        memset(&t, 0, sizeof t);
        t.local = local;
        for (int k = 0; k < x->K; k++)
            for (int i = 0; i < shape[k]; i++)
                t.cls[t.n_stages++] = k;
        ah_ns chain = ah_template_chain(x, &t);
        sends = stages * chain;
        *cmax = chain;
        b += 2 * chain;
    } else
        sends = shape_sends(x, in, n_in, shape, local, cmax);
    *sends2 = 2 * sends;
    *lbA = cs->sum_min + 2 * sends;
    ah_ns whole = (cs->sum_min + 2 * sends + stages - 1) / stages;
    if (whole > b)
        b = whole;
    if (inv > 0) {
        double frac = cs->omega / inv * (1.0 - 1e-9) - 1.0; /* margin for rounding */
        if (frac > (double)b)
            b = (ah_ns)frac;
    }
    *lbB = b > 1 ? b : 1;
}

/* Could r copies of a shape (pipelines within P, lbA/lbB its bounds) plus the pure replicas of tables V on
 * the slots left reach M micro-batches? */
static int copies_useful(const ah_search_ctx *x, const expand_env *v, const long long *V, const int *use,
                         ah_ns P, ah_ns lbA, ah_ns lbB) {
    long long capub = P < lbA ? 0 : (P - lbA) / lbB + 1;
    if (capub > x->M)
        capub = x->M;
    if (capub <= 0)
        return 0;
    /* V grows with the units: r copies reach at most r capub plus every kind's pure replicas on all its
     * slots, so fewer than r0 copies cannot reach M */
    long long all = 0;
    for (int k = 0; k < x->n_kinds; k++)
        all += V[v->offset[k] + x->kinds[k].slots];
    long long r0 = all >= x->M ? 1 : (x->M - all + capub - 1) / capub;
    for (long long r = r0 > 1 ? r0 : 1;; r++) {
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
    memset(t, 0, sizeof *t); /* the normal layout (local 0), no split yet */
    for (int q = 0; q < x->K; q++) {
        int k = reversed ? x->K - 1 - q : q;
        for (int i = 0; i < shape[k]; i++)
            t->cls[t->n_stages++] = k;
    }
}

/* ah_template_split_bounds over both class orders of a shape: *B0 and *sum_w the smaller of each (bounds for
 * both its templates), *tail1 the least optimizer time of a first stage (single replica). -1 if no split of
 * either order fits. */
static int shape_split_bounds(const ah_search_ctx *x, const int *shape, ah_ns slack, ah_ns *B0, ah_ns *sum_w,
                              ah_ns *tail1) {
    *B0 = *sum_w = *tail1 = AH_NS_INF;
    for (int reversed = 0; reversed <= 1; reversed++) {
        ah_template t;
        shape_template(x, shape, reversed, &t);
        ah_ns b, sw;
        int e0;
        if (ah_template_split_bounds(x, &t, slack, &b, &sw, &e0) != 0)
            continue;
        if (e0 > x->L)
            e0 = 1; /* cannot happen (the B0 split qualifies); layer 0 alone is still a bound */
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
static int cheap_test_passes(const ah_search_ctx *x, const expand_env *v, const int *shape, int can_local,
                             ah_ns lbA, ah_ns lbB, ah_ns lbA_l, ah_ns lbB_l, const ah_ns *b0s) {
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
    if (!ah__depth_allowed(x->o, stages))
        return;
    int normal_done = stages <= v->phase1 && ah__shape_uniform(x, shape);
    ah_ns lbA, lbB, sends2, cmax, lbA_l = 0, lbB_l = 0, sends2_l = 0, cmax_l = 0;
    bounds_for(x, v->class_sets, shape, 0, &lbA, &lbB, &sends2, &cmax);
    int can_local = ah__local_possible(x, shape);
    if (normal_done && !can_local)
        return;
    if (can_local)
        bounds_for(x, v->class_sets, shape, 1, &lbA_l, &lbB_l, &sends2_l, &cmax_l);
    /* the cheap test with the fluid bounds alone first (B0 costs a DP per shape of 3 classes or more): it
     * only weakens the bounds, so a shape it rules out the test with B0 rules out too */
    ah_ns b0s[2] = {0, 0};
    if (!normal_done && !cheap_test_passes(x, v, shape, can_local, lbA, lbB, lbA_l, lbB_l, b0s)) {
        x->pruned++;
        return;
    }
    shape_b0(x, v, shape, b0s);
    ah_ns b0 = b0s[0] < b0s[1] ? b0s[0] : b0s[1];
    if (b0 == AH_NS_INF ||
        (!normal_done && !cheap_test_passes(x, v, shape, can_local, lbA, lbB, lbA_l, lbB_l, b0s))) {
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
    c->tail1 = 0;
    c->local_value = can_local ? local_value(x, shape, c->lbA_l, c->lbB_l, 0) : AH_NS_INF;
    c->local = c->local_value < v->bound;
    if (c->normal && v->bound - 1 >= c->lbA) { /* its copies' micro-batches, for the least replica count */
        long long cap = (v->bound - 1 - c->lbA) / c->lbB + 1;
        v->capmax = cap > v->capmax ? cap : v->capmax;
    }
}

/* The walk's tail bound at the plan's least replica count: a first stage holds at least layer 0 and pays
 * its sync + optimizer whole after the slowest pipeline (ah_pipeline_tail). */
static void cand_tau(const ah_search_ctx *x, const expand_env *v, shape_cand *c) {
    c->tau = AH_NS_INF;
    for (int o = 0; o < 2; o++)
        if (c->c0[o] >= 0) {
            ah_ns t = ah_stage_tail_at(x, &x->cls[c->c0[o]], 0, 1, v->R);
            c->tau = t < c->tau ? t : c->tau;
        }
}

/* The bounds of the candidate's split in place of the walk's: B0 and the least sum of stage times (A) over
 * both class orders (ah_template_split_bounds), and the tail DP over every stage (ah_template_tail_bound,
 * at least the walk's first-stage bound). */
static void cand_tighten(ah_search_ctx *x, const expand_env *v, shape_cand *c) {
    int shape[AH_MAX_CLASSES] = {0};
    for (int z = 0; z < c->nz; z++)
        shape[c->cls[z]] = c->n[z];
    c->tight = 1;
    ah_ns b0, sum_w, tail1;
    if (shape_split_bounds(x, shape, c->slack, &b0, &sum_w, &tail1) != 0) {
        c->normal = c->local = 0; /* no split fits in memory: no template */
        return;
    }
    c->lbB = b0 > c->lbB ? b0 : c->lbB;
    c->lbA = sum_w + c->sends2 > c->lbA ? sum_w + c->sends2 : c->lbA;
    c->tail1 = tail1;
    /* the tail DP per class order, its stages within that order's B0 + slack (as the rule's split) */
    ah_ns tau = AH_NS_INF;
    for (int o = 0; o < 2; o++) {
        if (c->b0s[o] == AH_NS_INF)
            continue;
        ah_template t;
        shape_template(x, shape, o, &t);
        ah_ns tb = ah_template_tail_bound(x, &t, c->b0s[o] + c->slack, v->R);
        tau = tb < tau ? tb : tau;
    }
    if (tau != AH_NS_INF) /* it holds every first stage the walk's bound counts (>= layer 0) */
        c->tau = tau;
    if (c->can_local) {
        ah_ns B = b0 > c->lbB_l ? b0 : c->lbB_l,
              A = sum_w + c->sends2_l > c->lbA_l ? sum_w + c->sends2_l : c->lbA_l;
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
            long long cap = ah__capacity(x, &x->tpl[i], v->bound - 1, AH_NS_INF);
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
    long long *V =
        i < 0 ? v->quick + (size_t)j * cells : v->tab + ((size_t)j * (size_t)v->n_lv + (size_t)i) * cells;
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
                v->w.cap[p] = ah__capacity(x, &x->tpl[p], v->T[j] - 1 - t, AH_NS_INF);
            }
        }
    ah__knapsack_tables(x, &v->w, v->offset);
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
                if (c->bucket != j || (tested < v->bound && !cand_passes(x, v, c, EXPAND_BOUNDS))) {
                    c->bucket = c->bucket == j ? -1 : c->bucket;
                    continue;
                }
            }
            int shape[AH_MAX_CLASSES] = {0};
            for (int z = 0; z < c->nz; z++)
                shape[c->cls[z]] = c->n[z];
            ah__add_templates(x, shape, c->normal, c->local, c->b0s);
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
    int hi = ah__mixed_limit(x);
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
    ah__workspace_scratch(x, &v.w);
    /* the cheap test's tables: a pure replica in a plan of >= 2 replicas below bound finishes its pipeline
     * by bound - 1 - its 2-replica tail (mixed templates of phase 1 are left out: a plan holds copies of one
     * mixed template only) */
    for (int t = 0; t < x->n_tpl; t++)
        v.w.cap[t] = ah__capacity(x, &x->tpl[t], bound - 1 - x->tpl[t].tail_r[2], AH_NS_INF);
    ah__knapsack_tables(x, &v.w, v.offset);
    memcpy(v.V0, v.w.V, sizeof(long long) * cells);
    int shape[AH_MAX_CLASSES] = {0};
    v.phase1 = phase1_mixed_stages;
    v.smax = hi;
    v.pair_b0 = calloc((size_t)x->K * (size_t)x->K + 1, sizeof(ah_ns *));
    v.class_sets = calloc(CLASS_SET_SLOTS, sizeof *v.class_sets);
    if (!v.pair_b0 || !v.class_sets)
        abort();
    ah__shape_walk sw = {2, hi, 0, collect_shape, &v};
    ah__mixed_shapes(x, &sw, 0, 0, shape, 0, 0);
    int added = 0;
    if (v.n_cand > 0) {
        expand_prepare(x, &v);
        added = expand_split(x, &v, s);
    }
    for (int i = 0; i < x->K * x->K; i++)
        free(v.pair_b0[i]);
    free(v.pair_b0);
    free(v.class_sets);
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
