/* Layer split of one pipeline template.
 *
 * Rule (part of the plan space, docs/planner.md): among all splits of the L
 * layers into the template's stages (contiguous, >= 1 layer each) that fit in
 * memory, take the lexicographic minimum of
 *   (B = slowest stage fwd+bwd,  A = sum of stage times,  tail = max stage sync+update).
 * All costs are integers and every constraint is monotone in the interval
 * (a sub-interval of a feasible stage is feasible), which the sweeps rely on. */
#include <stdlib.h>
#include <string.h>

#include "plan/search.h"

typedef struct {
    const ah_search_ctx *x;
    const ah_template *t;
    int use_sync;     /* tail includes the DP all-reduce */
    ah_ns bmax, tmax; /* limits on stage time and stage tail */
} split_env;

static inline ah_ns stage_w(const split_env *v, int j, int a, int e) {
    return ah_range(v->x->cls[v->t->cls[j]].lt.w, a, e);
}
static inline ah_ns stage_tail(const split_env *v, int j, int a, int e) {
    ah_ns u = ah_range(v->x->cls[v->t->cls[j]].lt.upd, a, e);
    return v->use_sync ? u + ah_range(v->x->lb.sync, a, e) : u;
}
static inline int stage_ok(const split_env *v, int j, int a, int e) {
    const ah_class *c = &v->x->cls[v->t->cls[j]];
    if (ah_stage_memory(&v->x->lb, a, e, v->t->n_stages - j) > c->cap)
        return 0;
    if (stage_w(v, j, a, e) > v->bmax)
        return 0;
    return stage_tail(v, j, a, e) <= v->tmax;
}

/* reach is (S+1) x (L+1): reach[j][p] = the first j stages can cover [0,p). */
static int feasible(const split_env *v, unsigned char *reach, int *diff) {
    int L = v->x->L, S = v->t->n_stages;
    const int64_t *st = v->x->lb.static_bytes, *ac = v->x->lb.act_bytes, *sy = v->x->lb.sync;
    memset(reach, 0, (size_t)(S + 1) * (size_t)(L + 1));
    reach[0] = 1;
    for (int j = 0; j < S; j++) {
        const ah_class *c = &v->x->cls[v->t->cls[j]];
        const int64_t *w = c->lt.w, *up = c->lt.upd;
        const int64_t f = S - j, cap = c->cap, bmax = v->bmax, tmax = v->tmax;
        const int use_sync = v->use_sync, check_tail = tmax != AH_NS_INF;
        const unsigned char *cur = reach + (size_t)j * (L + 1);
        unsigned char *nxt = reach + (size_t)(j + 1) * (L + 1);
        int limit = L - (S - 1 - j); /* leave one layer for each later stage */
        memset(diff, 0, sizeof(int) * (size_t)(L + 2));
        int e = 0, any = 0;
        for (int a = 0; a < limit; a++) {
            if (e < a)
                e = a;
            while (e + 1 <= limit) {
                int n = e + 1;
                if (w[n] - w[a] > bmax)
                    break;
                if ((st[n] - st[a]) + (ac[n] - ac[a]) * f > cap)
                    break;
                if (check_tail && (up[n] - up[a]) + (use_sync ? sy[n] - sy[a] : 0) > tmax)
                    break;
                e = n;
            }
            if (cur[a] && e > a) {
                diff[a + 1]++;
                diff[e + 1]--;
                any = 1;
            }
        }
        if (!any)
            return 0;
        int run = 0;
        for (int p = 0; p <= L; p++) {
            run += diff[p];
            nxt[p] = run > 0;
        }
    }
    return reach[(size_t)S * (L + 1) + L];
}

/* Exact smallest bottleneck over splits whose stages all satisfy the current
 * limits (v->bmax bounds the window, so this is O(S * L * window)). */
/* co[j][p] = stages j..S-1 can cover [p, L) under the current limits. */
static void co_feasible(const split_env *v, unsigned char *co, int *cnt) {
    int L = v->x->L, S = v->t->n_stages;
    memset(co, 0, (size_t)(S + 1) * (size_t)(L + 1));
    co[(size_t)S * (L + 1) + L] = 1;
    for (int j = S - 1; j >= 0; j--) {
        const unsigned char *nx = co + (size_t)(j + 1) * (L + 1);
        unsigned char *cur = co + (size_t)j * (L + 1);
        /* cnt[p] = number of co-reachable ends in [0, p) for stage j+1 */
        cnt[0] = 0;
        for (int p = 0; p <= L; p++)
            cnt[p + 1] = cnt[p] + nx[p];
        int e = 0;
        for (int a = 0; a < L; a++) {
            if (e < a)
                e = a;
            while (e + 1 <= L && stage_ok(v, j, a, e + 1))
                e++;
            cur[a] = e > a && cnt[e + 1] - cnt[a + 1] > 0;
        }
    }
}

/* Both DPs below only visit stage boundaries that are reachable from the front
 * (reach) and from the back (co) under the current limits. */
#define LIVE(arr, j, p) ((arr)[(size_t)(j) * (L + 1) + (p)])

static ah_ns minmax_dp(const split_env *v, const unsigned char *reach, const unsigned char *co) {
    int L = v->x->L, S = v->t->n_stages;
    ah_ns *g = malloc(sizeof(ah_ns) * (size_t)(S + 1) * (size_t)(L + 1));
    if (!g)
        abort();
    for (size_t i = 0; i < (size_t)(S + 1) * (L + 1); i++)
        g[i] = AH_NS_INF;
    g[0] = 0;
    for (int j = 0; j < S; j++) {
        const ah_ns *cur = g + (size_t)j * (L + 1);
        ah_ns *nxt = g + (size_t)(j + 1) * (L + 1);
        int limit = L - (S - 1 - j);
        for (int e = j + 1; e <= limit; e++) {
            if (!LIVE(reach, j + 1, e) || !LIVE(co, j + 1, e))
                continue;
            ah_ns best = AH_NS_INF;
            for (int a = e - 1; a >= j; a--) {
                if (!stage_ok(v, j, a, e))
                    break; /* longer intervals fail too */
                if (cur[a] == AH_NS_INF || !LIVE(co, j, a))
                    continue;
                ah_ns w = stage_w(v, j, a, e);
                ah_ns val = cur[a] > w ? cur[a] : w;
                if (val < best)
                    best = val;
            }
            nxt[e] = best;
        }
    }
    ah_ns r = g[(size_t)S * (L + 1) + L];
    free(g);
    return r;
}

/* Lexicographic (sum of stage times, max tail) over splits with stage time <= bmax. */
typedef struct {
    ah_ns sum, tail;
    int from;
} dp_cell;

static int lexi_dp(const split_env *v, int *ends, const unsigned char *reach, const unsigned char *co) {
    int L = v->x->L, S = v->t->n_stages;
    dp_cell *f = malloc(sizeof(dp_cell) * (size_t)(S + 1) * (size_t)(L + 1));
    if (!f)
        abort();
    for (size_t i = 0; i < (size_t)(S + 1) * (L + 1); i++)
        f[i].sum = -1;
    f[0].sum = 0;
    f[0].tail = 0;
    for (int j = 0; j < S; j++) {
        dp_cell *cur = f + (size_t)j * (L + 1), *nxt = f + (size_t)(j + 1) * (L + 1);
        int limit = L - (S - 1 - j);
        for (int e = j + 1; e <= limit; e++) {
            dp_cell best = {-1, 0, -1};
            if (!LIVE(reach, j + 1, e) || !LIVE(co, j + 1, e)) {
                nxt[e] = best;
                continue;
            }
            for (int a = e - 1; a >= j; a--) {
                if (!stage_ok(v, j, a, e))
                    break; /* longer intervals fail too */
                if (cur[a].sum < 0 || !LIVE(co, j, a))
                    continue;
                ah_ns s = cur[a].sum + stage_w(v, j, a, e);
                ah_ns tl = stage_tail(v, j, a, e);
                if (cur[a].tail > tl)
                    tl = cur[a].tail;
                if (best.sum < 0 || s < best.sum || (s == best.sum && tl < best.tail)) {
                    best.sum = s;
                    best.tail = tl;
                    best.from = a;
                }
            }
            nxt[e] = best;
        }
    }
    int ok = f[(size_t)S * (L + 1) + L].sum >= 0;
    if (ok) {
        int e = L;
        for (int j = S; j >= 1; j--) {
            ends[j - 1] = e;
            e = f[(size_t)j * (L + 1) + e].from;
        }
    }
    free(f);
    return ok;
}

static void measure(const split_env *v, const int *ends, ah_ns *sum_w, ah_ns *B, ah_ns *tail) {
    int a = 0;
    *sum_w = 0;
    *B = 0;
    *tail = 0;
    for (int j = 0; j < v->t->n_stages; j++) {
        ah_ns w = stage_w(v, j, a, ends[j]), tl = stage_tail(v, j, a, ends[j]);
        *sum_w += w;
        if (w > *B)
            *B = w;
        if (tl > *tail)
            *tail = tl;
        a = ends[j];
    }
}

ah_ns ah_template_p2p(const ah_search_ctx *x, const ah_template *t, int j) {
    const ah_class *a = &x->cls[t->cls[j]], *b = &x->cls[t->cls[j + 1]];
    int inter = 1;
    if (t->cls[j] == t->cls[j + 1]) {
        /* Position of stage j inside its run of same-class stages: runs are
         * placed in whole-node chunks of `upn` units, so only chunk edges cross. */
        int q = 0;
        while (j - q - 1 >= 0 && t->cls[j - q - 1] == t->cls[j])
            q++;
        inter = (q + 1) % a->upn == 0;
    }
    double intra = a->dev->intra_bw_gbs < b->dev->intra_bw_gbs ? a->dev->intra_bw_gbs : b->dev->intra_bw_gbs;
    double nic = a->nic_share_gbs < b->nic_share_gbs ? a->nic_share_gbs : b->nic_share_gbs;
    return ah_p2p_ns(x->lb.p2p_bytes, inter, intra, nic, x->o);
}

int ah_template_split(ah_search_ctx *x, ah_template *t) {
    int L = x->L, S = t->n_stages;
    if (S > L)
        return -1;
    unsigned char *reach = malloc((size_t)(S + 1) * (size_t)(L + 1));
    unsigned char *co = malloc((size_t)(S + 1) * (size_t)(L + 1));
    int *diff = malloc(sizeof(int) * (size_t)(L + 2));
    if (!reach || !co || !diff)
        abort();
    split_env v = {x, t, 1, AH_NS_INF, AH_NS_INF};
    int rc = -1;
    x->evals++;
    if (!feasible(&v, reach, diff))
        goto done; /* memory alone rules it out */
    /* Bracket the bottleneck: every layer sits on some stage, so
     * B >= max_l min_c w_c(l) and S*B >= sum_l min_c w_c(l) (c over the
     * template's classes); wmax (a whole model on one stage) is feasible. */
    ah_ns wmax = 0, sum_min = 0, layer_min_max = 0, layer_max = 0;
    for (int l = 0; l < L; l++) {
        ah_ns lo_l = AH_NS_INF, hi_l = 0;
        for (int j = 0; j < S; j++) {
            ah_ns wl = ah_range(x->cls[t->cls[j]].lt.w, l, l + 1);
            if (wl < lo_l)
                lo_l = wl;
            if (wl > hi_l)
                hi_l = wl;
        }
        sum_min += lo_l;
        if (lo_l > layer_min_max)
            layer_min_max = lo_l;
        if (hi_l > layer_max)
            layer_max = hi_l;
    }
    for (int j = 0; j < S; j++) {
        ah_ns w = ah_range(x->cls[t->cls[j]].lt.w, 0, L);
        if (w > wmax)
            wmax = w;
    }
    ah_ns lo = (sum_min + S - 1) / S;
    if (layer_min_max > lo)
        lo = layer_min_max;
    lo -= 1;
    /* a balanced split rarely needs more than the average plus one layer */
    ah_ns hi = wmax;
    for (ah_ns step = layer_max > 0 ? layer_max : 1; lo + step < wmax; step *= 2) {
        v.bmax = lo + step;
        if (feasible(&v, reach, diff)) {
            hi = lo + step;
            break;
        }
        lo += step;
    }
    /* 1. smallest bottleneck B: exact DP over stages no slower than hi */
    v.bmax = hi;
    feasible(&v, reach, diff);
    co_feasible(&v, co, diff);
    ah_ns B = minmax_dp(&v, reach, co);
    v.bmax = B;
    feasible(&v, reach, diff);
    co_feasible(&v, co, diff); /* the tail is not limited below, so one pass serves both modes */
    ah_ns sum_w, b2, tl;
    /* 2./3. then smallest A, then smallest tail: once with the DP sync in the
     * tail (plans with several replicas), once without (single replica). */
    for (int mode = 0; mode < 2; mode++) {
        int *ends = mode == 0 ? t->ends : t->ends1;
        v.use_sync = mode == 0;
        v.bmax = B;
        v.tmax = AH_NS_INF;
        if (!lexi_dp(&v, ends, reach, co))
            goto done; /* cannot happen: B is feasible */
        measure(&v, ends, &sum_w, &b2, &tl);
        if (mode == 0)
            t->tail = tl;
        else
            t->tail1 = tl;
    }
    ah_ns p2p = 0;
    for (int j = 0; j + 1 < S; j++)
        p2p += ah_template_p2p(x, t, j);
    t->A = sum_w + 2 * p2p;
    t->B = B;
    rc = 0;
done:
    free(reach);
    free(co);
    free(diff);
    return rc;
}

int64_t ah_min_memory_needed(const ah_search_ctx *x, int *best_stages) {
    /* Memory is the same function of the layer range for every class, so one
     * class with an adjustable capacity answers "how little can a stage need". */
    ah_search_ctx y = *x;
    ah_class one = x->cls[0];
    y.cls = &one;
    int L = x->L;
    int64_t best = INT64_MAX;
    *best_stages = 1;
    int units = 0;
    for (int k = 0; k < x->K; k++)
        units += x->cls[k].units;
    int smax = x->o->max_stages < L ? x->o->max_stages : L;
    if (units < smax)
        smax = units;
    unsigned char *reach = malloc((size_t)(smax + 1) * (size_t)(L + 1));
    int *diff = malloc(sizeof(int) * (size_t)(L + 2));
    if (!reach || !diff)
        abort();
    for (int S = 1; S <= smax; S++) {
        ah_template t;
        memset(&t, 0, sizeof t);
        t.n_stages = S;
        split_env v = {&y, &t, 0, AH_NS_INF, AH_NS_INF};
        int64_t lo = 0, hi = ah_range(x->lb.static_bytes, 0, L) + ah_range(x->lb.act_bytes, 0, L) * S;
        one.cap = hi;
        if (!feasible(&v, reach, diff))
            continue;
        while (hi - lo > 1) {
            one.cap = lo + (hi - lo) / 2;
            if (feasible(&v, reach, diff))
                hi = one.cap;
            else
                lo = one.cap;
        }
        if (hi < best) {
            best = hi;
            *best_stages = S;
        }
    }
    free(reach);
    free(diff);
    return best;
}
