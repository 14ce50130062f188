/* The planner is exact over its plan space: on many generated instances small
 * enough to enumerate (<= 8 GPUs of <= 3 types, <= 8 layers) an exhaustive
 * enumerator agrees with it exactly (integer nanoseconds).
 *
 * The enumerator shares only the template split with the planner, and the
 * split itself is checked here against a brute force over every split. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "plan/search.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static int rnd_int(int lo, int hi) {
    return lo + (int)(rnd() % (uint64_t)(hi - lo + 1));
}
static double rnd_real(double lo, double hi) {
    return lo + (hi - lo) * (double)(rnd() % 1000000) / 1e6;
}

/* ---- brute-force split ---------------------------------------------------- */

typedef struct {
    ah_ns B, A, tail;
    int found;
} lexi;

/* Lockstep pipelines: the template's chain of transfers, restated (-1 in the other modes): one activation per
 * boundary (1/min TP of it per GPU); DeepSpeed's parity-paired steps wait for two transfers on the slowest
 * boundary, one with a single boundary */
static ah_ns lockstep_chain(const ah_search_ctx *x, const ah_template *t) {
    if (x->o->train.p2p != AH_P2P_LOCKSTEP)
        return -1;
    double whole = ah_model_p2p_bytes(x->m, x->o->train.seq, x->mb, x->o->train.precision);
    ah_ns slowest = 0;
    for (int j = 0; j + 1 < t->n_stages; j++) {
        const ah_class *a = &x->cls[t->cls[j]], *b = &x->cls[t->cls[j + 1]];
        ah_pair_link lk =
            ah_pair_link_of(a->dev->intra_bw_gbs, a->nic_share_gbs, b->dev->intra_bw_gbs, b->nic_share_gbs);
        int tmin = a->tp < b->tp ? a->tp : b->tp;
        ah_ns c = ah_p2p_ns(whole / tmin, ah_template_inter(x, t, j), lk.intra_gbs, lk.nic_share_gbs, x->o);
        slowest = c > slowest ? c : slowest;
    }
    return t->n_stages > 2 ? 2 * slowest : slowest;
}

/* Every split of the layers into the template's stages: the rule is the
 * lexicographic minimum of (1F1B period with the sends, sum of stage times,
 * tail with the drain credit), computed here from the cost primitives alone. */
static void brute_split_rec(const ah_search_ctx *x, const ah_template *t, int use_sync, int j, int a,
                            int *ends, lexi *best) {
    int L = x->L, S = t->n_stages;
    if (j == S) {
        if (a != L)
            return;
        ah_ns w[AH_MAX_STAGES], c[AH_MAX_STAGES], bw[AH_MAX_STAGES], xs[AH_MAX_STAGES], sum = 0, upd_last = 0;
        ah_ns pc[AH_MAX_STAGES] = {0}, chain = lockstep_chain(x, t); /* lockstep: constant stage offsets */
        for (int q = 0, lo = 0; q < S; lo = ends[q], q++) {
            const ah_class *cl = &x->cls[t->cls[q]];
            upd_last = ah_range(cl->lt.upd, lo, ends[q]); /* the last stage's, after the loop */
            w[q] = ah_range(cl->lt.w, lo, ends[q]) + (chain >= 0 ? 2 * chain : 0);
            bw[q] = ah_range(cl->lt.bwd, lo, ends[q]);
            xs[q] = ah_range(cl->lt.upd, lo, ends[q]) +
                    (use_sync ? ah_range(cl->sync, lo, ends[q]) +
                                    ah_allreduce_latency_ns(0, x->level.single_node >= 0, x->o)
                              : 0);
            c[q] = q + 1 < S ? (chain >= 0 ? chain : ah_template_p2p(x, t, q)) : 0;
            sum += w[q];
        }
        ah_ns B = chain >= 0 ? ah_pipeline_period(w, pc, S) : ah_pipeline_period_mode(w, c, S, x->o->train.p2p),
              tail = ah_pipeline_tail(xs, bw, c, S, upd_last, ah_template_tied(x, t));
        if (!best->found || B < best->B ||
            (B == best->B && (sum < best->A || (sum == best->A && tail < best->tail)))) {
            best->found = 1;
            best->B = B;
            best->A = sum;
            best->tail = tail;
        }
        return;
    }
    const ah_class *c = &x->cls[t->cls[j]];
    for (int e = a + 1; e <= L - (S - 1 - j); e++) {
        if (j == S - 1 && e != L)
            continue;
        if (ah_stage_memory(c->lb, a, e, S - j) > c->cap)
            continue;
        ends[j] = e;
        brute_split_rec(x, t, use_sync, j + 1, e, ends, best);
    }
}

/* The pair tables phase 2 reads (ah_pair_b0_table: one pass from the last stage back) equal
 * ah_template_split_b0 template by template, for every ordered pair of classes and depth. */
static long long pair_b0_checked;
static void check_pair_tables(const ah_search_ctx *x) {
    int smax = x->L < 12 ? x->L : 12, W = smax + 1;
    ah_ns *tab = malloc(sizeof(ah_ns) * (size_t)W * (size_t)W);
    assert_non_null(tab);
    for (int a = 0; a < x->K; a++)
        for (int b = 0; b < x->K; b++) {
            if (a == b)
                continue;
            ah_pair_b0_table(x, a, b, smax, tab);
            for (int na = 1; na < smax; na++)
                for (int nb = 1; na + nb <= smax; nb++) {
                    ah_template t;
                    memset(&t, 0, sizeof t);
                    for (int i = 0; i < na; i++)
                        t.cls[t.n_stages++] = a;
                    for (int i = 0; i < nb; i++)
                        t.cls[t.n_stages++] = b;
                    assert_int_equal(tab[na * W + nb], ah_template_split_b0(x, &t));
                    pair_b0_checked++;
                }
        }
    free(tab);
}

static long long tail_bounds_checked, tail_bounds_tight;
static void check_split(const ah_search_ctx *x, const ah_template *t) {
    ah_ns p2p = 0, chain = lockstep_chain(x, t);
    for (int j = 0; j + 1 < t->n_stages && chain < 0; j++)
        p2p += ah_template_p2p(x, t, j);
    for (int mode = 0; mode < 2; mode++) {
        lexi best = {0, 0, 0, 0};
        int ends[AH_MAX_STAGES];
        brute_split_rec(x, t, mode == 0, 0, 0, ends, &best);
        assert_true(best.found);
        assert_int_equal(best.B, t->B);
        assert_int_equal(best.A + 2 * p2p, t->A);
        assert_int_equal(best.tail, mode == 0 ? t->tail : t->tail1);
    }
    /* the exact ring's tails of the multi-replica split, restated */
    for (int r = 2; r <= AH_RING_EXACT_MAX; r++) {
        ah_ns c[AH_MAX_STAGES], bw[AH_MAX_STAGES], xs[AH_MAX_STAGES];
        for (int q = 0, lo = 0; q < t->n_stages; lo = t->ends[q], q++) {
            const ah_class *cl = &x->cls[t->cls[q]];
            bw[q] = ah_range(cl->lt.bwd, lo, t->ends[q]);
            xs[q] = ah_range(cl->lt.upd, lo, t->ends[q]) +
                    ah_allreduce_latency_ns(r, x->level.single_node >= 0, x->o); /* one bucket per stage */
            for (int l = lo; l < t->ends[q]; l++)
                xs[q] += ah_layer_sync_ns(
                    cl->lb, l, ah_stage_dp_link_gbs(&x->c->nodes[cl->nodes[0]], x->level.single_node >= 0),
                    r);
            c[q] = q + 1 < t->n_stages ? (chain >= 0 ? chain : ah_template_p2p(x, t, q)) : 0;
        }
        ah_ns upd_last = 0;
        for (int q = 0, lo = 0; q < t->n_stages; lo = t->ends[q], q++)
            upd_last = ah_range(x->cls[t->cls[q]].lt.upd, lo, t->ends[q]);
        assert_int_equal(ah_pipeline_tail(xs, bw, c, t->n_stages, upd_last, ah_template_tied(x, t)),
                         t->tail_r[r]);
        assert_true(t->tail_r[r] <= t->tail);
        assert_true(r == 2 || t->tail_r[r - 1] <= t->tail_r[r]); /* phase 2 bounds tails at the least count */
    }
    /* phase 2's tail bound (every stage's sync + optimizer less the most drain before it, over the splits
     * whose stages take at most B0 + 2 x the largest send) never exceeds the tail of the split the rule
     * picks, at any replica count (AH_RING_EXACT_MAX + 1: any count) */
    if (!t->local) {
        ah_ns cmax = 0;
        for (int j = 0; j + 1 < t->n_stages; j++) {
            ah_ns cj = chain >= 0 ? chain : ah_template_p2p(x, t, j);
            cmax = cj > cmax ? cj : cmax;
        }
        ah_ns wcap = ah_template_split_b0(x, t) + 2 * cmax;
        for (int r = 2; r <= AH_RING_EXACT_MAX + 1; r++) {
            ah_ns tb = ah_template_tail_bound(x, t, wcap, r), exact = r <= AH_RING_EXACT_MAX ? t->tail_r[r] : t->tail;
            assert_true(tb <= exact);
            tail_bounds_checked++;
            tail_bounds_tight += tb == exact;
        }
    }
}

/* ah_plan_search's pick, and the search's optimum: the pick is the fastest by
 * the evaluated closed form among the best sub-searches' plans, which always
 * hold the search's optimum (checked: the 8 it ranks are in evaluated order). */
static int search_pick(const ah_model_config *m, const ah_cluster *c, const ah_profile *prof,
                       const ah_plan_options *o, ah_plan *pick, ah_ns *optimum, char *err, size_t errlen) {
    ah_plan top[8];
    int n = 0;
    int rc = ah_plan_search_top(m, c, prof, o, 8, top, &n, err, errlen);
    *optimum = AH_NS_INF;
    if (rc != 0)
        return rc;
    assert_true(n >= 1);
    for (int i = 0; i < n; i++) {
        *optimum = top[i].search_value_ns < *optimum ? top[i].search_value_ns : *optimum;
        if (i > 0)
            assert_true(top[i].iteration_time_ns >= top[i - 1].iteration_time_ns);
    }
    *pick = top[0];
    for (int i = 1; i < n; i++)
        ah_plan_free(&top[i]);
    return 0;
}

/* ---- exhaustive enumeration over the plan space --------------------------- */

typedef struct {
    const ah_search_ctx *x;
    int chosen[64];
    int n;
    int mixed_tpl;          /* the one mixed template allowed in a plan, -1 if none yet */
    int left[AH_MAX_KINDS]; /* slots per kind */
    ah_ns best;
    long long plans;
} enum_state;

/* Best value over every split of M micro-batches into n positive parts: the
 * slowest pipeline plus the largest tail among the replicas used (the cost
 * model's objective, restated independently of the planner's search). */
static void alloc_rec(enum_state *s, int k, long long left, ah_ns worst, ah_ns tail) {
    if (worst + tail >= s->best)
        return;
    const ah_template *t = &s->x->tpl[s->chosen[k]];
    if (k == s->n - 1) {
        ah_ns v = ah_replica_time(t->A, t->B, 0, left);
        if (v > worst)
            worst = v;
        if (worst + tail < s->best)
            s->best = worst + tail;
        return;
    }
    for (long long m = 1; m <= left - (s->n - 1 - k); m++) {
        ah_ns v = ah_replica_time(t->A, t->B, 0, m);
        alloc_rec(s, k + 1, left - m, v > worst ? v : worst, tail);
    }
}

/* --dp: plans of n replicas allowed (every count without --dp) */
static int count_allowed(const ah_plan_options *o, long long n) {
    if (o->n_dp == 0)
        return 1;
    for (int i = 0; i < o->n_dp; i++)
        if (o->dp[i] == n)
            return 1;
    return 0;
}

static void multiset_rec(enum_state *s, int from) {
    if (s->n > 0 && s->n <= s->x->M && count_allowed(s->x->o, s->n)) {
        s->plans++;
        ah_ns tail = 0;
        for (int i = 0; i < s->n; i++) {
            const ah_template *t = &s->x->tpl[s->chosen[i]];
            ah_ns tl = ah_template_tail(t, s->n); /* the exact ring up to AH_RING_EXACT_MAX replicas */
            if (tl > tail)
                tail = tl;
        }
        alloc_rec(s, 0, s->x->M, 0, tail);
    }
    if (s->n == 64)
        return;
    for (int i = from; i < s->x->n_tpl; i++) {
        const ah_template *t = &s->x->tpl[i];
        if (t->local)
            continue; /* node-local copies are enumerated on their own below */
        if (t->mixed && s->mixed_tpl >= 0 && s->mixed_tpl != i)
            continue;
        int ok = 1;
        for (int k = 0; k < s->x->n_kinds; k++)
            ok &= s->left[k] >= t->use[k];
        if (!ok)
            continue;
        int prev = s->mixed_tpl;
        if (t->mixed)
            s->mixed_tpl = i;
        for (int k = 0; k < s->x->n_kinds; k++)
            s->left[k] -= t->use[k];
        s->chosen[s->n++] = i;
        multiset_rec(s, i);
        s->n--;
        for (int k = 0; k < s->x->n_kinds; k++)
            s->left[k] += t->use[k];
        s->mixed_tpl = prev;
    }
}

static ah_ns enumerate_best(const ah_search_ctx *x, long long *plans) {
    enum_state s;
    memset(&s, 0, sizeof s);
    s.x = x;
    s.mixed_tpl = -1;
    s.best = AH_NS_INF;
    for (int k = 0; k < x->n_kinds; k++)
        s.left[k] = x->kinds[k].slots;
    multiset_rec(&s, 0);
    /* Node-local plans: R copies of a local template, stage j of all on one
     * node of its class (room for R units on a distinct node per stage), every
     * way of splitting the micro-batches over the copies, each stage's
     * gradients reduced inside its node by the exact ring. */
    for (int i = 0; i < x->n_tpl; i++) {
        const ah_template *t = &x->tpl[i];
        if (!t->local)
            continue;
        for (int R = 2; R <= x->M && R <= 8; R++) {
            int ok = count_allowed(x->o, R);
            for (int k = 0; k < x->K; k++)
                ok &= !t->shape[k] || (x->cls[k].upn >= R && x->cls[k].n_nodes >= t->shape[k]);
            if (!ok)
                continue;
            ah_ns tail = ah_local_tail(x, t, R);
            /* the slowest copy runs the most micro-batches: at best ceil(M/R) */
            for (long long m = (x->M + R - 1) / R; m <= x->M - (R - 1); m++) {
                ah_ns v = ah_replica_time(t->A, t->B, tail, m);
                s.plans++;
                if (v < s.best)
                    s.best = v;
            }
        }
    }
    *plans += s.plans;
    return s.best;
}

/* ---- the planner's search on one sub-search, and what a solution costs ---- */

/* Phase 1, then the bounded phase 2 under the phase-1 optimum, as ah_plan_search runs them. */
static void planner_solve(ah_search_ctx *x, int phase1, ah_solution *sol) {
    ah_search_templates(x, phase1);
    ah_search_solve(x, sol);
    ah_search_expand(x, phase1, sol->value, sol);
}

/* The cost model's value of a solution (slowest pipeline + largest tail),
 * restated from its replicas; *total = its micro-batches. */
static ah_ns solution_value(const ah_search_ctx *x, const ah_solution *sol, long long *total) {
    ah_ns worst = 0, tail = 0;
    *total = 0;
    for (int r = 0; r < sol->n; r++) {
        const ah_template *t = &x->tpl[sol->r[r].tpl];
        *total += sol->r[r].m;
        ah_ns v = ah_replica_time(t->A, t->B, 0, sol->r[r].m);
        ah_ns tl = sol->local_R ? ah_local_tail(x, t, sol->local_R) : ah_template_tail(t, sol->n);
        if (v > worst)
            worst = v;
        if (tl > tail)
            tail = tl;
    }
    return worst + tail;
}

/* ---- instances ------------------------------------------------------------ */

static const char *TYPES[3] = {"TA", "TB", "TC"};

/* The built-in catalog plus TA, TB, TC (write_devices). */
static ah_device_catalog random_devices;

static void write_devices(const ah_model_config *m) {
    /* Memory is sized around the model so that it binds in many instances. */
    double model_gib =
        ah_model_total_params(m) * ah_state_bytes_per_param(AH_PRECISION_BF16, 1) / (1024.0 * 1024 * 1024);
    char path[] = "/tmp/ah_devXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fprintf(f, "{\"devices\":[");
    for (int i = 0; i < 3; i++)
        fprintf(f,
                "%s{\"name\":\"%s\",\"peak_tflops\":%.3f,\"mem_gib\":%.6f,\"mem_bw_gbs\":%.1f,"
                "\"intra_bw_gbs\":%.1f,\"nic_gbit\":%.1f}",
                i ? "," : "", TYPES[i], rnd_real(0.01, 0.5), model_gib * rnd_real(0.35, 2.5),
                rnd_real(50, 900), rnd_real(5, 300), rnd_real(100, 4000));
    fprintf(f, "]}");
    fclose(f);
    char err[256];
    random_devices = *ah_device_catalog_builtin();
    assert_int_equal(ah_device_load_overrides(&random_devices, path, err, sizeof err), 0);
    unlink(path);
}

static void random_model(ah_model_config *m) {
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "tiny");
    m->arch = AH_ARCH_GPT;
    m->hidden = 64 * rnd_int(1, 4);
    m->n_layers = rnd_int(1, 6); /* + embedding + head = 3..8 layers */
    m->n_heads = 4;
    m->n_kv_heads = 4;
    m->ffn_hidden = 4 * m->hidden;
    m->vocab = 64 * rnd_int(4, 64);
    m->max_positions = 128;
    m->tied_embeddings = 1;
}

static void random_cluster(ah_cluster *c) {
    int kinds = rnd_int(1, 3), total = 0;
    c->nodes = calloc(8, sizeof(ah_node));
    c->n_nodes = 0;
    for (int k = 0; k < kinds && total < 8; k++) {
        int gpn = rnd_int(1, 4), nodes = rnd_int(1, 2);
        for (int i = 0; i < nodes && total + gpn <= 8; i++) {
            ah_node *n = &c->nodes[c->n_nodes++];
            snprintf(n->name, sizeof n->name, "%s-%d", TYPES[k], i);
            n->dev = *ah_device_find(&random_devices, TYPES[k]);
            n->gpus = gpn;
            n->nic_gbit = n->dev.nic_gbit;
            total += gpn;
        }
    }
}

/* variant 0: default cost-model options over `n_inst` instances; 1: blocking
 * pipeline sends; 2: random precision, p2p mode (lockstep too) and distributed optimizer;
 * 3: the default options with per-kind degrees inside mixed pipelines
 * (stage_tp) forced on. ah_plan_search turns stage_tp on for these small
 * clusters by itself (AH_STAGE_TP_MAX_GPUS), so every variant searches the
 * wider space and its plan equals the enumerated optimum. */
static void run_exhaustive(int n_inst, int variant) {
    int local_plans = 0, colocated = 0;
    ah_profile *prof = ah_profile_analytic();
    int instances = 0, fitted = 0, with_mixed = 0, multi_replica = 0, asymmetric = 0, mixed_tp = 0;
    long long plans = 0, templates_checked = 0, pruned = 0;
    int placement_gaps = 0;
    double worst_gap = 0.0;
    for (int it = 0; it < n_inst; it++) {
        ah_model_config m;
        random_model(&m);
        write_devices(&m);
        ah_cluster c;
        random_cluster(&c);
        ah_plan_options o;
        ah_plan_options_default(&o);
        o.train.seq = 128;
        o.global_batch = rnd_int(1, 8);
        o.mem_reserve_gib = 0;
        o.max_mixed_types = 3;
        o.max_mixed_stages = 8;
        o.max_mixed3_stages = 5;
        o.phase1_mixed_stages = 2; /* so that the bounded phase 2 is exercised */
        int stage_tp = variant == 3;
        if (variant == 1)
            o.train.p2p = AH_P2P_BLOCKING;
        else if (variant == 2) {
            o.train.p2p = (ah_p2p_mode)rnd_int(0, 2); /* overlapped, blocking, lockstep */
            o.train.precision = (ah_precision_mode)rnd_int(0, 2);
            o.train.dist_optimizer = rnd_int(0, 1);
        }
        unsigned tps[8];
        int mbs[8];
        ah_candidate_tp_masks(&m, &c, &o, tps);
        ah_candidate_mbs(&o, mbs);
        ah_ns best_enum = AH_NS_INF;
        char err[256];
        ah_search_level levels[64];
        int n_levels = ah_search_levels(&c, levels, 64);
        for (int i = 0; tps[i]; i++)
            for (int j = 0; mbs[j]; j++)
                for (int l = 0; l < n_levels; l++) {
                    ah_search_ctx x;
                    int rc =
                        ah_search_ctx_init(&x, &m, &c, prof, &o, tps[i], mbs[j], &levels[l], err, sizeof err);
                    assert_true(rc >= 0);
                    x.stage_tp |= stage_tp;
                    if (rc == 1) {
                        /* the enumerator sees every template of the space ... */
                        ah_search_ctx full;
                        assert_int_equal(ah_search_ctx_init(&full, &m, &c, prof, &o, tps[i], mbs[j],
                                                            &levels[l], err, sizeof err),
                                         1);
                        full.stage_tp |= stage_tp;
                        ah_search_templates(&full, o.max_mixed_stages);
                        for (int t = 0; t < full.n_tpl; t++)
                            check_split(&full, &full.tpl[t]);
                        check_pair_tables(&full);
                        templates_checked += full.n_tpl;
                        ah_ns e = enumerate_best(&full, &plans);
                        ah_search_ctx_free(&full);
                        /* ... the planner only splits long mixed shapes its bounds keep */
                        ah_solution sol;
                        planner_solve(&x, o.phase1_mixed_stages, &sol);
                        pruned += x.pruned;
                        assert_int_equal(sol.value, e);
                        if (e < best_enum)
                            best_enum = e;
                        if (sol.value != AH_NS_INF) {
                            /* the solution itself achieves its value */
                            long long total = 0;
                            local_plans += sol.local_R > 0;
                            assert_true(solution_value(&x, &sol, &total) <= sol.value);
                            assert_int_equal(total, x.M);
                        }
                        ah_solution_free(&sol);
                    }
                    ah_search_ctx_free(&x);
                }
        ah_plan plan;
        ah_ns optimum;
        int rc = search_pick(&m, &c, prof, &o, &plan, &optimum, err, sizeof err);
        instances++;
        if (best_enum == AH_NS_INF) {
            assert_int_equal(rc, AH_EXIT_BAD_INPUT);
            assert_non_null(strstr(err, "does not fit"));
        } else {
            assert_int_equal(rc, 0);
            fitted++;
            assert_int_equal(optimum, best_enum);
            /* the evaluated plan reports the search optimum (placement realised
             * the ideal layout), more when placement had to add hops, or less
             * when placement happened to put every holder of a stage's layers
             * in one node (the evaluation credits the node-local all-reduce) */
            if (plan.iteration_time_ns < optimum)
                colocated++;
            else if (plan.iteration_time_ns != optimum) {
                placement_gaps++;
                double gap = (double)plan.iteration_time_ns / (double)optimum - 1.0;
                worst_gap = gap > worst_gap ? gap : worst_gap;
                if (getenv("AH_TEST_VERBOSE")) {
                    ah_plan_print_table(&plan, stdout);
                    printf("search %lld evaluated %lld\n", (long long)optimum, (long long)plan.iteration_time_ns);
                }
            }
            assert_int_equal(ah_plan_check_memory(&plan, err, sizeof err), 0);
            if (plan.n_replicas > 1)
                multi_replica++;
            mixed_tp += ah_plan_uniform_tp(&plan) == 0;
            int depth0 = plan.replicas[0].n_stages;
            for (int r = 0; r < plan.n_replicas; r++) {
                const ah_replica *rep = &plan.replicas[r];
                if (rep->n_stages != depth0 || rep->micro_batches != plan.replicas[0].micro_batches)
                    asymmetric++;
                for (int j = 1; j < rep->n_stages; j++)
                    if (strcmp(plan.cluster.nodes[rep->stages[j].node].dev.name,
                               plan.cluster.nodes[rep->stages[0].node].dev.name))
                        with_mixed++;
            }
            ah_plan_free(&plan);
        }
        ah_cluster_free(&c);
    }
    ah_profile_free(prof);
    printf("  variant %d: %d instances (%d fit), %lld plans enumerated, %lld splits brute-forced, %lld long "
           "mixed "
           "shapes pruned by bounds; optimum has several replicas in %d, asymmetric replicas in %d, "
           "mixed-type stages in %d, stages of different TP degrees in %d\n",
           variant, instances, fitted, plans, templates_checked, pruned, multi_replica, asymmetric,
           with_mixed, mixed_tp);
    printf("  pair B0 tables checked against the template's own B0: %lld depths; phase 2's tail bound at most the "
           "tail in %lld (template, replica count) pairs, equal in %lld\n",
           pair_b0_checked, tail_bounds_checked, tail_bounds_tight);
    assert_true(pair_b0_checked > 0);
    assert_true(tail_bounds_checked > 0);
    /* the generator must exercise the interesting parts of the space */
    int q = instances / 40; /* 10 at 400 instances */
    assert_true(fitted > instances / 3);
    assert_true(multi_replica > q);
    assert_true(asymmetric > q / 2);
    assert_true(with_mixed > q / 2);
    assert_true(mixed_tp > q / 2); /* per-stage TP is exercised */
    assert_true(pruned > 0);
    printf("  evaluated plan above the search optimum (placement hops, bucket latencies and waits) in %d "
           "instances (at most %.2f%%), below it (co-located gradients) in %d; node-local optimum in %d "
           "sub-searches\n",
           placement_gaps, 100 * worst_gap, colocated, local_plans);
    assert_true(local_plans > 0);
    /* The search's tail is separable (docs/cost-model.md): one all-reduce
     * latency per stage, each replica's sync on its own link. The evaluation
     * sees every bucket of asymmetric replicas and a fast holder waiting for a
     * bucket's slow holders, and the tied exchange after the end stages'
     * buckets; on these small models (where 20 us steps weigh) that moves
     * about one pick in seven, by at most 8% (7.9%). */
    assert_true(placement_gaps <= fitted / 6);
    assert_true(worst_gap < 0.08);
}

static void test_exhaustive_agreement(void **state) {
    (void)state;
    run_exhaustive(400, 0);
}

/* Blocking sends change the period (max_j w_j + c_{j-1} + c_j) that the
 * split DP and the search optimise: the same exhaustive check. */
static void test_exhaustive_blocking(void **state) {
    (void)state;
    run_exhaustive(200, 1);
}

/* Precision and the distributed optimizer change bytes, times and memory:
 * search and enumerator must still agree. */
static void test_exhaustive_options(void **state) {
    (void)state;
    run_exhaustive(200, 2);
}

/* --dp: with a random set of allowed replica counts, the planner's optimum
 * equals the exhaustive minimum over the plans whose replica count is in the
 * set, per (tp, micro-batch, level) and for the final plan, which has exactly
 * an allowed number of replicas; a set no plan can meet is an error. */
/* Per-kind degrees inside a mixed pipeline (V100 stages at TP 2 feeding A100
 * stages at TP 1): the search stays exact over that wider space. */
static void test_exhaustive_stage_tp(void **state) {
    (void)state;
    run_exhaustive(200, 3);
}

static void test_exhaustive_agreement_dp(void **state) {
    (void)state;
    ah_profile *prof = ah_profile_analytic();
    int instances = 0, fitted = 0, restricted = 0, none = 0, subs = 0;
    long long plans = 0;
    for (int it = 0; it < 300; it++) {
        ah_model_config m;
        random_model(&m);
        write_devices(&m);
        ah_cluster c;
        random_cluster(&c);
        ah_plan_options o;
        ah_plan_options_default(&o);
        o.train.seq = 128;
        o.global_batch = rnd_int(1, 8);
        o.mem_reserve_gib = 0;
        o.max_mixed_types = 3;
        o.max_mixed_stages = 8;
        o.max_mixed3_stages = 5;
        o.phase1_mixed_stages = 2;
        /* 1..3 distinct counts in 1..6, ascending */
        int want = rnd_int(1, 3);
        o.n_dp = 0;
        for (int v = 1; v <= 6 && o.n_dp < want; v++)
            if (rnd_int(0, 6 - v) < want - o.n_dp)
                o.dp[o.n_dp++] = v;
        ah_plan_options any = o;
        any.n_dp = 0;
        unsigned tps[8];
        int mbs[8];
        ah_candidate_tp_masks(&m, &c, &o, tps);
        ah_candidate_mbs(&o, mbs);
        ah_ns best_enum = AH_NS_INF, best_any = AH_NS_INF;
        char err[256];
        ah_search_level levels[64];
        int n_levels = ah_search_levels(&c, levels, 64);
        for (int i = 0; tps[i]; i++)
            for (int j = 0; mbs[j]; j++)
                for (int l = 0; l < n_levels; l++) {
                    ah_search_ctx x, full, fany;
                    int rc =
                        ah_search_ctx_init(&x, &m, &c, prof, &o, tps[i], mbs[j], &levels[l], err, sizeof err);
                    assert_true(rc >= 0);
                    if (rc == 1) {
                        subs++;
                        assert_int_equal(ah_search_ctx_init(&full, &m, &c, prof, &o, tps[i], mbs[j],
                                                            &levels[l], err, sizeof err),
                                         1);
                        ah_search_templates(&full, o.max_mixed_stages);
                        ah_ns e = enumerate_best(&full, &plans);
                        ah_search_ctx_free(&full);
                        assert_int_equal(ah_search_ctx_init(&fany, &m, &c, prof, &any, tps[i], mbs[j],
                                                            &levels[l], err, sizeof err),
                                         1);
                        ah_search_templates(&fany, any.max_mixed_stages);
                        ah_ns ea = enumerate_best(&fany, &plans);
                        ah_search_ctx_free(&fany);
                        if (ea < best_any)
                            best_any = ea;
                        ah_solution sol;
                        planner_solve(&x, o.phase1_mixed_stages, &sol);
                        assert_int_equal(sol.value, e);
                        if (e < best_enum)
                            best_enum = e;
                        if (sol.value != AH_NS_INF) {
                            /* exactly an allowed count, every replica busy, the value achieved */
                            assert_true(count_allowed(&o, sol.n));
                            long long total = 0;
                            for (int r = 0; r < sol.n; r++)
                                assert_true(sol.r[r].m >= 1);
                            assert_true(solution_value(&x, &sol, &total) <= sol.value);
                            assert_int_equal(total, x.M);
                        }
                        ah_solution_free(&sol);
                    }
                    ah_search_ctx_free(&x);
                }
        ah_plan plan;
        ah_ns optimum;
        int rc = search_pick(&m, &c, prof, &o, &plan, &optimum, err, sizeof err);
        instances++;
        if (best_enum > best_any)
            restricted++;
        if (best_enum == AH_NS_INF) {
            none++;
            assert_int_equal(rc, AH_EXIT_BAD_INPUT);
        } else {
            assert_int_equal(rc, 0);
            fitted++;
            assert_int_equal(optimum, best_enum);
            assert_true(count_allowed(&o, plan.n_replicas));
            ah_plan_free(&plan);
        }
        ah_cluster_free(&c);
    }
    ah_profile_free(prof);
    printf("  --dp: %d instances (%d fit, %d with no plan of an allowed count), %d sub-searches, %lld plans "
           "enumerated; the count constraint raised the optimum in %d\n",
           instances, fitted, none, subs, plans, restricted);
    assert_true(fitted > instances / 3);
    assert_true(restricted > instances / 10);
    assert_true(none > 0);
}

/* --objective cost: the cheapest plan's objective (its time optimum x the
 * hourly price of the nodes it uses) equals the minimum over every subset of
 * the nodes of (the time optimum on that subset x the subset's price): the
 * subsets a plan can be paid for by. Small clusters: every count vector. */
static void test_cost_objective(void **state) {
    (void)state;
    ah_profile *prof = ah_profile_analytic();
    int fitted = 0, cheaper = 0, equal = 0;
    for (int it = 0; it < 80; it++) {
        ah_model_config m;
        random_model(&m);
        write_devices(&m);
        ah_cluster c;
        random_cluster(&c);
        for (int i = 0; i < c.n_nodes; i++)
            c.nodes[i].price_per_hour = rnd_int(1, 40) / 4.0;
        ah_plan_options o;
        ah_plan_options_default(&o);
        o.train.seq = 128;
        o.global_batch = rnd_int(1, 8);
        o.mem_reserve_gib = 0;
        o.max_mixed_stages = 8;
        o.max_mixed3_stages = 5;
        char err[256];
        double best = -1;
        ah_node sub_nodes[8];
        for (unsigned mask = 1; mask < 1u << c.n_nodes; mask++) {
            ah_cluster sub = {sub_nodes, 0};
            double price = 0;
            for (int i = 0; i < c.n_nodes; i++)
                if (mask & (1u << i)) {
                    sub_nodes[sub.n_nodes++] = c.nodes[i];
                    price += c.nodes[i].price_per_hour;
                }
            ah_plan p;
            if (ah_plan_search(&m, &sub, prof, &o, &p, err, sizeof err) != 0)
                continue;
            double v = p.search_value_s * price;
            if (best < 0 || v < best)
                best = v;
            ah_plan_free(&p);
        }
        ah_plan fast, cheap;
        int rt = ah_plan_search(&m, &c, prof, &o, &fast, err, sizeof err);
        o.objective = AH_OBJECTIVE_COST;
        int rc = ah_plan_search(&m, &c, prof, &o, &cheap, err, sizeof err);
        assert_int_equal(rc, rt);
        if (best < 0) {
            assert_int_equal(rc, AH_EXIT_BAD_INPUT);
        } else {
            assert_int_equal(rc, 0);
            fitted++;
            double got = cheap.search_value_s * ah_plan_price_per_hour(&cheap);
            /* never dearer than paying for any subset's fastest plan; equal
             * unless the plan found on a larger node set is costed lower than
             * on its own nodes (a lone node has no node-local DP family) */
            assert_true(got <= best * (1 + 1e-12));
            equal += got >= best * (1 - 1e-12);
            assert_true(ah_plan_cost_per_iteration(&cheap) > 0);
            if (got < fast.search_value_s * ah_plan_price_per_hour(&fast) * (1 - 1e-9))
                cheaper++;
            ah_plan_free(&fast);
            ah_plan_free(&cheap);
        }
        ah_cluster_free(&c);
    }
    ah_profile_free(prof);
    printf("  --objective cost: %d instances fit; the cheapest plan is cheaper than the fastest in %d; "
           "equals the "
           "best subset in %d\n",
           fitted, cheaper, equal);
    assert_true(fitted > 20);
    assert_true(equal >= fitted - fitted / 10);
    assert_true(cheaper > 3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exhaustive_agreement),    cmocka_unit_test(test_exhaustive_blocking),
        cmocka_unit_test(test_exhaustive_options),      cmocka_unit_test(test_exhaustive_stage_tp),
        cmocka_unit_test(test_exhaustive_agreement_dp), cmocka_unit_test(test_cost_objective)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
