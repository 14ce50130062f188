/* Layer split of one pipeline template.
 *
 * Rule (part of the plan space, docs/planner.md): among all splits of the L
 * layers into the template's stages (contiguous, >= 1 layer each) that fit in
 * memory, take the lexicographic minimum of
 *   (B = the 1F1B steady-state period with the sends between stages
 *        (ah_pipeline_period),  A = sum of stage times,  tail = max stage sync+update).
 * All costs are integers and every constraint is monotone in the interval
 * (a sub-interval of a feasible stage is feasible), which the sweeps rely on. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "plan/search.h"

typedef struct {
    const ah_search_ctx *x;
    const ah_template *t;
    int use_sync;     /* tail includes the DP all-reduce */
    ah_ns bmax, tmax; /* limits on stage time and stage tail */
    ah_ns tied;       /* the tied-embedding exchange of the template (template_tied_ns) */
    /* Blocking sends (ah_pipeline_period_mode): stage j's time includes its
     * own sends, off[j] = c[j-1] + c[j], and the period's send terms pc are 0;
     * overlapped: off = 0, pc = c. Either way A = sum stage_w + 2 sum pc. */
    ah_ns off[AH_MAX_STAGES];
    int *em; /* S x L: stage_ends of every stage at the limits last set (stage_limits, feasible) */
} split_env;

static inline ah_ns stage_w(const split_env *v, int j, int a, int e) {
    return ah_range(v->x->cls[v->t->cls[j]].lt.w, a, e) + v->off[j];
}
ah_ns ah_stage_tail_at(const ah_search_ctx *x, const ah_class *c, int a, int e, int R) {
    ah_ns u = ah_range(c->lt.upd, a, e);
    if (R <= AH_RING_EXACT_MAX)
        return u + ah_range(c->sync_r[R], a, e) + x->sync_lat[R];
    return u + ah_range(c->sync, a, e) + x->sync_lat[0];
}
static inline ah_ns stage_tail(const split_env *v, int j, int a, int e) {
    const ah_class *c = &v->x->cls[v->t->cls[j]];
    return v->use_sync ? ah_stage_tail_at(v->x, c, a, e, AH_RING_EXACT_MAX + 1) : ah_range(c->lt.upd, a, e);
}

/* The longest stage j can run under the current limits: em[a] = the largest end e <= limit (a stage [a, e)
 * fits in memory, within bmax and tmax; e = a if none, or a >= limit), limit = L less one layer per later
 * stage (returned). The limits are monotone in the interval, so em grows with a: two pointers. */
static int stage_ends(const split_env *v, int j, int *em) {
    int L = v->x->L, S = v->t->n_stages;
    const ah_class *c = &v->x->cls[v->t->cls[j]];
    const int64_t *st = c->lb->static_bytes, *ac = c->lb->act_bytes;
    const int64_t *w = c->lt.w, *up = c->lt.upd, *sy = c->sync;
    const int64_t f = S - j, cap = c->cap, bmax = v->bmax - v->off[j], tmax = v->tmax;
    const int use_sync = v->use_sync, check_tail = tmax != AH_NS_INF;
    const ah_ns lat = use_sync ? v->x->sync_lat[0] : 0;
    int limit = L - (S - 1 - j); /* leave one layer for each later stage */
    int e = 0;
    for (int a = 0; a < limit; a++) {
        if (e < a)
            e = a;
        while (e + 1 <= limit) {
            int n = e + 1;
            if (w[n] - w[a] > bmax)
                break;
            if ((st[n] - st[a]) + (ac[n] - ac[a]) * f > cap)
                break;
            if (check_tail && (up[n] - up[a]) + (use_sync ? sy[n] - sy[a] : 0) + lat > tmax)
                break;
            e = n;
        }
        em[a] = e;
    }
    for (int a = limit > 0 ? limit : 0; a < L; a++)
        em[a] = a;
    return limit;
}

/* Every stage's stage_ends into v->em (S x L): what the DPs below read for "stage j may run [a, e)". */
static void stage_limits(const split_env *v) {
    for (int j = 0; j < v->t->n_stages; j++)
        stage_ends(v, j, v->em + (size_t)j * (size_t)v->x->L);
}

/* reach is (S+1) x (L+1): reach[j][p] = the first j stages can cover [0,p). Leaves v->em at the current
 * limits when it returns 1 (stage_limits). */
static int feasible(const split_env *v, unsigned char *reach, int *diff) {
    int L = v->x->L, S = v->t->n_stages;
    memset(reach, 0, (size_t)(S + 1) * (size_t)(L + 1));
    reach[0] = 1;
    for (int j = 0; j < S; j++) {
        const unsigned char *cur = reach + (size_t)j * (L + 1);
        unsigned char *nxt = reach + (size_t)(j + 1) * (L + 1);
        int *em = v->em + (size_t)j * (size_t)L;
        int limit = stage_ends(v, j, em);
        memset(diff, 0, sizeof(int) * (size_t)(L + 2));
        int any = 0;
        for (int a = 0; a < limit; a++)
            if (cur[a] && em[a] > a) {
                diff[a + 1]++;
                diff[em[a] + 1]--;
                any = 1;
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
/* co[j][p] = stages j..S-1 can cover [p, L) under the current limits (v->em). */
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
        const int *em = v->em + (size_t)j * (size_t)L;
        for (int a = 0; a < L; a++)
            cur[a] = em[a] > a && cnt[em[a] + 1] - cnt[a + 1] > 0;
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
        const int *em = v->em + (size_t)j * (size_t)L;
        const int64_t *W = v->x->cls[v->t->cls[j]].lt.w;
        const ah_ns off = v->off[j];
        for (int e = j + 1; e <= limit; e++) {
            if (!LIVE(reach, j + 1, e) || !LIVE(co, j + 1, e))
                continue;
            ah_ns best = AH_NS_INF;
            for (int a = e - 1; a >= j; a--) {
                if (em[a] < e)
                    break; /* longer intervals fail too */
                if (cur[a] == AH_NS_INF || !LIVE(co, j, a))
                    continue;
                ah_ns w = W[e] - W[a] + off;
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

/* Boundary costs of a template: c[j] = one send after stage j (c[S-1] = 0); lockstep pipelines: the chain
 * of every boundary's transfer, which each backward of the drain waits for (plan_eval.c's lockstep_stages). */
static ah_ns template_comm(const ah_search_ctx *x, const ah_template *t, ah_ns *c) {
    ah_ns cmax = 0, chain = x->o->train.p2p == AH_P2P_LOCKSTEP ? ah_template_chain(x, t) : -1;
    for (int j = 0; j < t->n_stages; j++) {
        c[j] = j + 1 < t->n_stages ? (chain >= 0 ? chain : ah_template_p2p(x, t, j)) : 0;
        if (c[j] > cmax)
            cmax = c[j];
    }
    return cmax;
}

/* (Reads v->em: stage_limits at the current limits.)
 * The steady-state period of a split is <= B (ah_pipeline_period) iff every
 * window [j, e] of stages has sum w + 2 sum c <= (e - j + 1) B. Scanning the
 * stages in order, that is: w_e + h_{e-1} <= B for every stage, where the
 * carry h_e = max(0, w_e + h_{e-1} + 2 c_e - B) is the largest excess of a
 * window ending at e. A prefix with a smaller carry dominates, so a DP keeping
 * the smallest carry per (stages, layers) decides feasibility exactly. */
static ah_ns period_feasible(const split_env *v, const ah_ns *c, ah_ns B, ah_ns *h, int *from) {
    int L = v->x->L, S = v->t->n_stages;
    for (size_t i = 0; i < (size_t)(S + 1) * (L + 1); i++)
        h[i] = AH_NS_INF;
    h[0] = 0;
    for (int j = 0; j < S; j++) {
        const ah_ns *cur = h + (size_t)j * (L + 1);
        ah_ns *nxt = h + (size_t)(j + 1) * (L + 1);
        int *nfrom = from + (size_t)(j + 1) * (L + 1);
        int limit = L - (S - 1 - j);
        const int *em = v->em + (size_t)j * (size_t)L;
        const int64_t *W = v->x->cls[v->t->cls[j]].lt.w;
        const ah_ns off = v->off[j], c2 = 2 * c[j];
        for (int a = j; a < limit; a++) {
            if (cur[a] == AH_NS_INF)
                continue;
            const ah_ns base = cur[a] + off - W[a];
            for (int e = a + 1; e <= em[a]; e++) { /* longer intervals fail the limits too */
                ah_ns w = base + W[e]; /* the stage's time plus the carry */
                if (w > B)
                    break;
                ah_ns carry = w + c2 - B;
                if (carry < 0)
                    carry = 0;
                if (carry < nxt[e]) {
                    nxt[e] = carry;
                    nfrom[e] = a;
                }
            }
        }
    }
    if (h[(size_t)S * (L + 1) + L] == AH_NS_INF)
        return AH_NS_INF;
    /* the period of the split found, which is <= B */
    ah_ns w[AH_MAX_STAGES];
    for (int j = S, e = L; j >= 1; j--) {
        int a = from[(size_t)j * (L + 1) + e];
        w[j - 1] = stage_w(v, j - 1, a, e);
        e = a;
    }
    return ah_pipeline_period(w, c, S);
}

/* Lexicographic (sum of stage times, tail) over the splits whose stages
 * satisfy the limits and whose period is <= B, with the tail as
 * ah_pipeline_tail counts it (sync + optimizer minus the drain after the
 * stage). A (stages, layers) prefix is described by its carry h, sum, tail so
 * far and drain D = sum of (bwd + send) of its stages; a later stage's tail
 * term is reduced by D, so (smaller h, sum, tail; larger D) dominates, and
 * only Pareto-minimal entries are kept per cell. */
typedef struct {
    ah_ns h, sum, tail, drain;
    int parent; /* pool index of the previous stage's entry, -1 at the start */
    int a;      /* this stage starts at layer a */
} pentry;

typedef struct {
    pentry *e;
    size_t n, cap;
} pool;

static void pool_push(pool *p, pentry x) {
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 1024;
        p->e = realloc(p->e, sizeof(pentry) * p->cap);
        if (!p->e)
            abort();
    }
    p->e[p->n++] = x;
}

static int dominates(const pentry *y, const pentry *x) {
    return y->h <= x->h && y->sum <= x->sum && y->tail <= x->tail && y->drain >= x->drain;
}

/* Insert x into the Pareto list [first, p->n) unless an entry dominates it. */
static void pareto_insert(pool *p, size_t first, pentry x) {
    for (size_t i = first; i < p->n; i++)
        if (dominates(&p->e[i], &x))
            return;
    size_t k = first;
    for (size_t i = first; i < p->n; i++)
        if (!dominates(&x, &p->e[i]))
            p->e[k++] = p->e[i];
    p->n = k;
    pool_push(p, x);
}

/* Stage j's term of the tail (ah_pipeline_tail): tl = its sync + optimizer,
 * drain = what runs after its last backward. */
static inline ah_ns tied_term(const split_env *v, int j, ah_ns tl, ah_ns upd, ah_ns drain) {
    int S = v->t->n_stages;
    if (v->tied == 0 || S < 2 || (j != 0 && j != S - 1))
        return tl - drain;
    if (j == 0)
        return tl + v->tied;
    ah_ns sync = tl - upd - drain;
    return (sync > 0 ? sync : 0) + v->tied + upd;
}

static int lexi_dp(const split_env *v, const ah_ns *c, const ah_ns *pc, ah_ns B, int *ends,
                   const unsigned char *reach, const unsigned char *co) {
    int L = v->x->L, S = v->t->n_stages;
    size_t cells = (size_t)(S + 1) * (L + 1);
    size_t *lo = calloc(cells, sizeof(size_t)), *hi = calloc(cells, sizeof(size_t));
    if (!lo || !hi)
        abort();
    pool p = {0};
    pool_push(&p, (pentry){0, 0, INT64_MIN / 4, 0, -1, 0});
    lo[0] = 0;
    hi[0] = 1;
    for (int j = 0; j < S; j++) {
        int limit = L - (S - 1 - j);
        const int *em = v->em + (size_t)j * (size_t)L;
        for (int e = j + 1; e <= limit; e++) {
            size_t cell = (size_t)(j + 1) * (L + 1) + e;
            lo[cell] = hi[cell] = p.n;
            if (!LIVE(reach, j + 1, e) || !LIVE(co, j + 1, e))
                continue;
            for (int a = e - 1; a >= j; a--) {
                if (em[a] < e)
                    break; /* longer intervals fail too */
                size_t from = (size_t)j * (L + 1) + a;
                if (!LIVE(co, j, a))
                    continue;
                ah_ns w = stage_w(v, j, a, e), tl = stage_tail(v, j, a, e);
                ah_ns bw = ah_range(v->x->cls[v->t->cls[j]].lt.bwd, a, e) + c[j];
                ah_ns upd = ah_range(v->x->cls[v->t->cls[j]].lt.upd, a, e);
                for (size_t i = lo[from]; i < hi[from]; i++) {
                    const pentry *q = &p.e[i];
                    if (w + q->h > B)
                        continue;
                    ah_ns carry = w + q->h + 2 * pc[j] - B, own = tied_term(v, j, tl, upd, q->drain);
                    pentry x = {carry > 0 ? carry : 0, q->sum + w, q->tail > own ? q->tail : own,
                                q->drain + bw,         (int)i,     a};
                    pareto_insert(&p, lo[cell], x);
                }
            }
            hi[cell] = p.n;
        }
    }
    size_t last = cells - 1;
    int best = -1;
    for (size_t i = lo[last]; i < hi[last]; i++)
        if (best < 0 || p.e[i].sum < p.e[best].sum ||
            (p.e[i].sum == p.e[best].sum && p.e[i].tail < p.e[best].tail))
            best = (int)i;
    if (best >= 0) {
        int e = L;
        for (int j = S, i = best; j >= 1; j--) {
            ends[j - 1] = e;
            e = p.e[i].a;
            i = p.e[i].parent;
        }
    }
    free(p.e);
    free(lo);
    free(hi);
    return best >= 0;
}

/* Sum of stage times and the tails (with and without the DP sync) of a split;
 * tail_r (if not NULL): the tail with the sync of exactly r replicas. */
static void measure(const split_env *v, const int *ends, const ah_ns *c, ah_ns *sum_w, ah_ns *tail,
                    ah_ns *tail1, ah_ns *tail_r) {
    ah_ns x[AH_MAX_STAGES], x1[AH_MAX_STAGES], bw[AH_MAX_STAGES];
    int a = 0, S = v->t->n_stages;
    *sum_w = 0;
    for (int j = 0; j < S; j++) {
        const ah_class *cl = &v->x->cls[v->t->cls[j]];
        *sum_w += stage_w(v, j, a, ends[j]);
        x1[j] = ah_range(cl->lt.upd, a, ends[j]);
        x[j] = ah_stage_tail_at(v->x, cl, a, ends[j], AH_RING_EXACT_MAX + 1);
        bw[j] = ah_range(cl->lt.bwd, a, ends[j]);
        a = ends[j];
    }
    *tail = ah_pipeline_tail(x, bw, c, S, x1[S - 1], v->tied);
    *tail1 = ah_pipeline_tail(x1, bw, c, S, x1[S - 1], v->tied);
    for (int r = 2; tail_r && r <= AH_RING_EXACT_MAX; r++) {
        a = 0;
        for (int j = 0; j < S; j++) {
            x[j] = ah_stage_tail_at(v->x, &v->x->cls[v->t->cls[j]], a, ends[j], r);
            a = ends[j];
        }
        tail_r[r] = ah_pipeline_tail(x, bw, c, S, x1[S - 1], v->tied);
    }
}

static ah_pair_link class_link(const ah_class *a, const ah_class *b) {
    return ah_pair_link_of(a->dev->intra_bw_gbs, a->nic_share_gbs, b->dev->intra_bw_gbs, b->nic_share_gbs);
}

ah_ns ah_template_tied(const ah_search_ctx *x, const ah_template *t) {
    int S = t->n_stages;
    if (S < 2)
        return 0;
    const ah_class *a = &x->cls[t->cls[0]], *b = &x->cls[t->cls[S - 1]];
    /* one node holds both ends only for a single-class run within one chunk */
    int one_run = 1;
    for (int j = 1; j < S; j++)
        one_run &= t->cls[j] == t->cls[0];
    int inter = t->local || !one_run || S > a->upn;
    return ah_tied_exchange_ns(a->tp < b->tp ? a->lb : b->lb, inter, class_link(a, b), x->o);
}

int ah_template_inter(const ah_search_ctx *x, const ah_template *t, int j) {
    const ah_class *a = &x->cls[t->cls[j]];
    int inter = 1;
    if (!t->local && t->cls[j] == t->cls[j + 1]) {
        /* Position of stage j inside its run of same-class stages: runs are
         * placed in whole-node chunks of `upn` units, so only chunk edges cross. */
        int q = 0;
        while (j - q - 1 >= 0 && t->cls[j - q - 1] == t->cls[j])
            q++;
        inter = (q + 1) % a->upn == 0;
    }
    return inter;
}

/* Lockstep (plan_eval.c): one transfer of boundary j, 1/min(TP) of the activation per GPU, at the
 * calibration's latency and class bandwidth (the link's where it has none); the chain of the pipeline
 * (ah_lockstep_chain_of). */
static ah_ns template_lockstep_ns(const ah_search_ctx *x, const ah_template *t, int j) {
    const ah_class *a = &x->cls[t->cls[j]], *b = &x->cls[t->cls[j + 1]];
    int inter = ah_template_inter(x, t, j);
    ah_pair_link lk = class_link(a, b);
    double whole = ah_model_p2p_bytes(x->m, x->o->train.seq, x->mb, x->o->train.precision); /* plan_eval's */
    int tmin = a->tp < b->tp ? a->tp : b->tp;
    double bytes = whole / (tmin > 0 ? tmin : 1);
    if (!x->o->calibration)
        return ah_p2p_ns(bytes, inter, lk.intra_gbs, lk.nic_share_gbs, x->o);
    return ah_to_ns(
        ah_calibration_transfer_s(x->o->calibration, bytes, inter, inter ? lk.nic_share_gbs : lk.intra_gbs));
}

ah_ns ah_template_chain(const ah_search_ctx *x, const ah_template *t) {
    ah_ns slowest = 0;
    for (int j = 0; j + 1 < t->n_stages; j++) {
        ah_ns c = template_lockstep_ns(x, t, j);
        slowest = c > slowest ? c : slowest;
    }
    return ah_lockstep_chain_of(slowest, t->n_stages - 1);
}

void ah_template_p2p_table(ah_search_ctx *x) {
    int K = x->K;
    x->p2p = malloc(sizeof(ah_ns) * (size_t)K * (size_t)K * 2);
    if (!x->p2p)
        abort();
    for (int a = 0; a < K; a++)
        for (int b = 0; b < K; b++) {
            const ah_class *ca = &x->cls[a], *cb = &x->cls[b];
            ah_pair_link lk = class_link(ca, cb);
            /* each GPU of the smaller TP group moves 1/min(t) of the activation */
            const ah_layer_bytes *lb = ca->tp < cb->tp ? ca->lb : cb->lb;
            for (int inter = 0; inter <= 1; inter++)
                x->p2p[((size_t)a * (size_t)K + (size_t)b) * 2 + (size_t)inter] =
                    ah_p2p_ns(lb->p2p_bytes, inter, lk.intra_gbs, lk.nic_share_gbs, x->o);
        }
}

ah_ns ah_template_p2p(const ah_search_ctx *x, const ah_template *t, int j) {
    return ah_class_p2p(x, t->cls[j], t->cls[j + 1], ah_template_inter(x, t, j));
}

/* B0: the smallest largest stage time over the splits that fit (v's memory and tail limits), by bracketing
 * it from below and above and an exact DP over the stages no slower than the bracket's top. */
static ah_ns split_b0(split_env *v, unsigned char *reach, unsigned char *co, int *diff) {
    const ah_search_ctx *x = v->x;
    const ah_template *t = v->t;
    int L = x->L, S = t->n_stages;
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
        ah_ns w = stage_w(v, j, 0, L);
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
        v->bmax = lo + step;
        if (feasible(v, reach, diff)) {
            hi = lo + step;
            break;
        }
        lo += step;
    }
    /* 1. smallest bottleneck B: exact DP over stages no slower than hi */
    v->bmax = hi;
    if (!feasible(v, reach, diff))
        return AH_NS_INF; /* cannot happen: a whole model on one stage fits (the caller checked memory) */
    co_feasible(v, co, diff);
    return minmax_dp(v, reach, co);
}

int ah_template_split(ah_search_ctx *x, ah_template *t) {
    return ah_template_split_b0_known(x, t, -1);
}

int ah_template_split_b0_known(ah_search_ctx *x, ah_template *t, ah_ns b0_known) {
    int L = x->L, S = t->n_stages;
    if (S > L)
        return -1;
    unsigned char *reach = malloc((size_t)(S + 1) * (size_t)(L + 1));
    unsigned char *co = malloc((size_t)(S + 1) * (size_t)(L + 1));
    int *diff = malloc(sizeof(int) * (size_t)(L + 2)), *em = malloc(sizeof(int) * (size_t)S * (size_t)L);
    if (!reach || !co || !diff || !em)
        abort();
    split_env v = {x, t, 1, AH_NS_INF, AH_NS_INF, ah_template_tied(x, t), {0}, em};
    int rc = -1;
    x->evals++;
    /* boundary costs: c the sends (drain, tail), pc their share in the period; lockstep: every stage's
     * forward and backward wait for the chain, a constant offset of the stage times */
    ah_ns c[AH_MAX_STAGES], pc[AH_MAX_STAGES];
    template_comm(x, t, c);
    int blocking = x->o->train.p2p == AH_P2P_BLOCKING, lockstep = x->o->train.p2p == AH_P2P_LOCKSTEP;
    ah_ns chain = lockstep ? ah_template_chain(x, t) : 0;
    for (int j = 0; j < S; j++) {
        pc[j] = blocking || lockstep ? 0 : c[j];
        v.off[j] = blocking ? (j > 0 ? c[j - 1] : 0) + (j + 1 < S ? c[j] : 0) : 2 * chain;
    }
    blocking |= lockstep; /* below: the stage times hold offsets */
    if (!feasible(&v, reach, diff))
        goto done; /* memory alone rules it out */
    ah_ns B0;
    if (b0_known >= 0 && !blocking) { /* sends out of the stage times: the B0 of bounds_pass */
        if (b0_known == AH_NS_INF)
            goto done;
        B0 = b0_known;
    } else {
        B0 = split_b0(&v, reach, co, diff);
    }
    /* 2. smallest period B >= B0 (sends inside the steady state): the B0
     * split itself meets B0 + 2 max c, so bisect in between */
    ah_ns cmax = 0;
    for (int j = 0; j < S; j++)
        cmax = pc[j] > cmax ? pc[j] : cmax;
    ah_ns *h = malloc(sizeof(ah_ns) * (size_t)(S + 1) * (size_t)(L + 1));
    int *from = malloc(sizeof(int) * (size_t)(S + 1) * (size_t)(L + 1));
    if (!h || !from)
        abort();
    ah_ns B = B0;
    if (cmax > 0) {
        v.bmax = B0 + 2 * cmax;
        stage_limits(&v);
        /* B0 is a lower bound; otherwise descend: the period p of a split
         * found at B is feasible, so test p - 1 until nothing is found (each
         * step finds a strictly better split; usually a few steps) */
        if (period_feasible(&v, pc, B0, h, from) == AH_NS_INF) {
            B = period_feasible(&v, pc, B0 + 2 * cmax, h, from); /* the B0 split meets it */
            for (;;) {
                ah_ns p = period_feasible(&v, pc, B - 1, h, from);
                if (p == AH_NS_INF)
                    break;
                B = p;
            }
        }
    }
    free(from);
    free(h);
    v.bmax = B;
    feasible(&v, reach, diff);
    co_feasible(&v, co, diff); /* the tail is not limited below, so one pass serves both modes */
    ah_ns sum_w, tl, tl1;
    /* 3./4. then smallest A, then smallest max stage sync + optimizer: once
     * with the DP sync (plans with several replicas), once without (single
     * replica). The template's tails credit the drain (ah_pipeline_tail). */
    for (int mode = 0; mode < 2; mode++) {
        int *ends = mode == 0 ? t->ends : t->ends1;
        v.use_sync = mode == 0;
        v.bmax = B;
        v.tmax = AH_NS_INF;
        if (!lexi_dp(&v, c, pc, B, ends, reach, co))
            goto done; /* cannot happen: B is feasible */
        measure(&v, ends, c, &sum_w, &tl, &tl1, mode == 0 ? t->tail_r : NULL);
        if (mode == 0)
            t->tail = tl;
        else
            t->tail1 = tl1;
    }
    ah_ns p2p = 0;
    for (int j = 0; j + 1 < S; j++)
        p2p += pc[j];
    t->A = sum_w + 2 * p2p; /* blocking, lockstep: sum_w already holds the sends */
    t->B = B;
    rc = 0;
done:
    free(reach);
    free(co);
    free(diff);
    free(em);
    return rc;
}

ah_ns ah_local_tail(const ah_search_ctx *x, const ah_template *t, int R) {
    ah_ns xs[AH_MAX_STAGES], bw[AH_MAX_STAGES], c[AH_MAX_STAGES];
    for (int j = 0, a = 0; j < t->n_stages; a = t->ends[j], j++) {
        const ah_class *cl = &x->cls[t->cls[j]];
        xs[j] = ah_range(cl->lt.upd, a, t->ends[j]) +
                ah_local_sync_ns(cl->lb, a, t->ends[j], R, cl->dev->intra_bw_gbs) +
                ah_allreduce_latency_ns(R, 1, x->o);
        bw[j] = ah_range(cl->lt.bwd, a, t->ends[j]);
    }
    template_comm(x, t, c);
    ah_ns upd_last = ah_range(x->cls[t->cls[t->n_stages - 1]].lt.upd,
                              t->n_stages > 1 ? t->ends[t->n_stages - 2] : 0, t->ends[t->n_stages - 1]);
    return ah_pipeline_tail(xs, bw, c, t->n_stages, upd_last, ah_template_tied(x, t));
}

/* One pass of the bounds DP: per stage, cur[e] = the best value of the first
 * stages covering [0, e), all in memory; minmax = 1: the value is the largest
 * stage time, else the sum of stage times with each stage at most wcap. */
static ah_ns bounds_pass(const ah_search_ctx *x, const ah_template *t, int minmax, ah_ns wcap, ah_ns *g) {
    int L = x->L, S = t->n_stages;
    ah_ns *cur = g, *nxt = g + L + 1;
    for (int e = 0; e <= L; e++)
        cur[e] = e == 0 ? 0 : AH_NS_INF;
    for (int j = 0; j < S; j++) {
        const ah_class *c = &x->cls[t->cls[j]];
        const int64_t *W = c->lt.w;
        int limit = L - (S - 1 - j), am = 0; /* am: the earliest start of a stage ending at e that fits in
                                                 * memory; it grows with e (two pointers) */
        for (int e = 0; e <= L; e++)
            nxt[e] = AH_NS_INF;
        for (int e = j + 1; e <= limit; e++) {
            ah_ns best = AH_NS_INF;
            while (am < e && ah_stage_memory(c->lb, am, e, S - j) > c->cap)
                am++;
            /* memory and stage time only grow as a stage starts earlier */
            for (int a = e - 1; a >= j && a >= am; a--) {
                ah_ns w = W[e] - W[a];
                if (w > wcap || (minmax && w >= best))
                    break;
                if (cur[a] == AH_NS_INF)
                    continue;
                ah_ns val = minmax ? (cur[a] > w ? cur[a] : w) : cur[a] + w;
                if (val < best)
                    best = val;
            }
            nxt[e] = best;
        }
        ah_ns *tmp = cur;
        cur = nxt;
        nxt = tmp;
    }
    return cur[L];
}

/* The smallest end of stage 0 over the splits whose stages all fit in memory
 * and take at most wcap (L + 1 if none): a backward pass keeps, per stage,
 * which starts the later stages can cover to the end from. */
static int first_end_pass(const ah_search_ctx *x, const ah_template *t, ah_ns wcap, int *cnt,
                          unsigned char *co) {
    int L = x->L, S = t->n_stages;
    memset(co, 0, (size_t)(L + 1));
    co[L] = 1; /* after the last stage: exactly at L */
    for (int j = S - 1; j >= 0; j--) {
        const ah_class *c = &x->cls[t->cls[j]];
        cnt[0] = 0; /* cnt[p] = covered starts of stage j + 1 in [0, p) */
        for (int p = 0; p <= L; p++)
            cnt[p + 1] = cnt[p] + co[p];
        if (j == 0) {
            int e = 1;
            while (e <= L - (S - 1) && ah_stage_memory(c->lb, 0, e, S) <= c->cap &&
                   ah_range(c->lt.w, 0, e) <= wcap) {
                if (co[e])
                    return e;
                e++;
            }
            return L + 1;
        }
        int e = 0; /* the longest stage j can run from p: it grows with p (two pointers) */
        for (int p = 0; p <= L; p++) {
            e = e < p ? p : e;
            while (e + 1 <= L && ah_stage_memory(c->lb, p, e + 1, S - j) <= c->cap &&
                   ah_range(c->lt.w, p, e + 1) <= wcap)
                e++;
            co[p] = p < L && e > p && cnt[e + 1] - cnt[p + 1] > 0;
        }
    }
    return L + 1;
}

int ah_template_split_bounds(const ah_search_ctx *x, const ah_template *t, ah_ns slack, ah_ns *B0,
                             ah_ns *sum_w, int *first_end) {
    *B0 = *sum_w = AH_NS_INF;
    *first_end = x->L + 1;
    if (t->n_stages > x->L)
        return -1;
    ah_ns *g = malloc(sizeof(ah_ns) * 2 * (size_t)(x->L + 1));
    int *cnt = malloc(sizeof(int) * (size_t)(x->L + 2));
    unsigned char *co = malloc((size_t)(x->L + 1));
    if (!g || !cnt || !co)
        abort();
    *B0 = bounds_pass(x, t, 1, AH_NS_INF, g);
    if (*B0 != AH_NS_INF) {
        *sum_w = bounds_pass(x, t, 0, *B0 + slack, g);
        *first_end = first_end_pass(x, t, *B0 + slack, cnt, co);
    }
    free(g);
    free(cnt);
    free(co);
    return *B0 == AH_NS_INF ? -1 : 0;
}

ah_ns ah_template_tail_bound(const ah_search_ctx *x, const ah_template *t, ah_ns wcap, int R) {
    int L = x->L, S = t->n_stages;
    if (S > L)
        return AH_NS_INF;
    ah_ns c[AH_MAX_STAGES];
    template_comm(x, t, c);
    ah_ns *D = malloc(sizeof(ah_ns) * (size_t)(L + 1)), *g = malloc(sizeof(ah_ns) * 2 * (size_t)(L + 1));
    if (!D || !g)
        abort();
    D[0] = 0; /* the most backward time layers [0, l) can take among the template's classes */
    for (int l = 0; l < L; l++) {
        ah_ns mx = 0;
        for (int j = 0; j < S; j++) {
            ah_ns b = ah_range(x->cls[t->cls[j]].lt.bwd, l, l + 1);
            mx = b > mx ? b : mx;
        }
        D[l + 1] = D[l] + mx;
    }
    ah_ns *cur = g, *nxt = g + L + 1, sends = 0;
    for (int e = 0; e <= L; e++)
        cur[e] = AH_NS_INF;
    const ah_class *c0 = &x->cls[t->cls[0]];
    for (int e = 1; e <= L - (S - 1); e++) { /* stage 0: no drain after it */
        if (ah_stage_memory(c0->lb, 0, e, S) > c0->cap || ah_range(c0->lt.w, 0, e) > wcap)
            break;
        cur[e] = ah_stage_tail_at(x, c0, 0, e, R);
    }
    for (int j = 1; j < S; j++) {
        const ah_class *cl = &x->cls[t->cls[j]];
        int limit = L - (S - 1 - j);
        sends += c[j - 1];
        for (int e = 0; e <= L; e++)
            nxt[e] = AH_NS_INF;
        for (int e = j + 1; e <= limit; e++) {
            ah_ns best = AH_NS_INF;
            for (int a = e - 1; a >= j; a--) { /* memory and stage time only grow as a stage starts earlier */
                if (ah_stage_memory(cl->lb, a, e, S - j) > cl->cap || ah_range(cl->lt.w, a, e) > wcap)
                    break;
                if (cur[a] == AH_NS_INF)
                    continue;
                ah_ns term = ah_stage_tail_at(x, cl, a, e, R) - D[a] - sends;
                ah_ns val = cur[a] > term ? cur[a] : term;
                best = val < best ? val : best;
            }
            nxt[e] = best;
        }
        ah_ns *tmp = cur;
        cur = nxt;
        nxt = tmp;
    }
    ah_ns r = cur[L];
    free(D);
    free(g);
    return r;
}

ah_ns ah_template_split_b0(const ah_search_ctx *x, const ah_template *t) {
    if (t->n_stages > x->L)
        return AH_NS_INF;
    ah_ns *g = malloc(sizeof(ah_ns) * 2 * (size_t)(x->L + 1));
    if (!g)
        abort();
    ah_ns b0 = bounds_pass(x, t, 1, AH_NS_INF, g);
    free(g);
    return b0;
}

/* row[p] = the least largest stage time over the splits of layers [p, L) whose first stage is one of class
 * c with `in_flight` micro-batches (the stages from it to the end) and whose later stages are next's
 * (next[e]: the same for [e, L)); AH_NS_INF where none fits. */
static void stage_row(const ah_search_ctx *x, int c, int in_flight, const ah_ns *next, ah_ns *row) {
    const ah_class *cl = &x->cls[c];
    const int64_t *W = cl->lt.w;
    int L = x->L, em = L; /* the longest stage from p that fits in memory: it shrinks as p falls */
    row[L] = AH_NS_INF;
    for (int p = L - 1; p >= 0; p--) {
        while (em > p && ah_stage_memory(cl->lb, p, em, in_flight) > cl->cap)
            em--;
        ah_ns best = AH_NS_INF;
        /* stage time only grows as the stage ends later */
        for (int e = p + 1; e <= em; e++) {
            ah_ns w = W[e] - W[p];
            if (w >= best)
                break;
            if (next[e] == AH_NS_INF)
                continue;
            ah_ns val = next[e] > w ? next[e] : w;
            best = val < best ? val : best;
        }
        row[p] = best;
    }
}

void ah_pair_b0_table(const ah_search_ctx *x, int a, int b, int smax, ah_ns *out) {
    int L = x->L, W = smax + 1;
    for (int i = 0; i < W * W; i++)
        out[i] = AH_NS_INF;
    /* rows of the b suffixes: tail[nb] covers [p, L) with nb stages of b (in flight 1 .. nb) */
    ah_ns *tail = malloc(sizeof(ah_ns) * (size_t)W * (size_t)(L + 1)), *cur = malloc(sizeof(ah_ns) * 2 * (size_t)(L + 1));
    if (!tail || !cur)
        abort();
    for (int p = 0; p <= L; p++)
        tail[p] = p == L ? 0 : AH_NS_INF; /* nb = 0: nothing left to cover */
    for (int nb = 1; nb < smax; nb++)
        stage_row(x, b, nb, tail + (size_t)(nb - 1) * (L + 1), tail + (size_t)nb * (L + 1));
    for (int nb = 1; nb < smax; nb++) {
        const ah_ns *next = tail + (size_t)nb * (L + 1);
        for (int na = 1; na + nb <= smax; na++) {
            ah_ns *row = cur + (size_t)(na & 1) * (L + 1);
            stage_row(x, a, nb + na, next, row);
            out[na * W + nb] = row[0];
            next = row;
        }
    }
    free(tail);
    free(cur);
}

int64_t ah_min_memory_needed(const ah_search_ctx *x, int *best_stages) {
    /* Memory is the same function of the layer range for every class of one
     * degree, so one class with an adjustable capacity answers "how little can
     * a stage need" (at the degree of class 0: callers pass one degree). */
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
    int *diff = malloc(sizeof(int) * (size_t)(L + 2)), *em = malloc(sizeof(int) * (size_t)(smax + 1) * (size_t)L);
    if (!reach || !diff || !em)
        abort();
    for (int S = 1; S <= smax; S++) {
        ah_template t;
        memset(&t, 0, sizeof t);
        t.n_stages = S;
        split_env v = {&y, &t, 0, AH_NS_INF, AH_NS_INF, 0, {0}, em};
        int64_t lo = 0, hi = ah_range(one.lb->static_bytes, 0, L) + ah_range(one.lb->act_bytes, 0, L) * S;
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
    free(em);
    return best;
}
