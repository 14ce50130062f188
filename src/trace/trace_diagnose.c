/* The diagnosis of a traced run (autohet/trace_diagnose.h, docs/analyze.md,
 * "Diagnosis"): steps, the per-rank findings (slow rank, input stall,
 * checkpoint stall, bubble, exposed data-parallel communication) and the
 * ranking; links and late arrivals are diagnose_links.c and
 * diagnose_blame.c. Every finding compares what a rank or link did with
 * what it should have done: its peers doing the same work, the schedule,
 * the comm profile. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/diagnose_internal.h"
#include "util/errors.h"

static const char *kind_names[AH_DIAG_KINDS] = {"slow_rank", "slow_link",  "late_arrival", "input_stall",
                                                "checkpoint_stall", "bubble", "exposed_dp", "saturated_link"};

const char *ah_diag_kind_name(ah_diag_kind k) {
    return k >= 0 && k < AH_DIAG_KINDS ? kind_names[k] : "?";
}

int ah_diag_is_recv(const ah_trace_item *v) {
    return v->ev.kind == AH_OP_RECV_ACTIVATION || v->ev.kind == AH_OP_RECV_GRADIENT;
}

int ah_diag_is_collective(const ah_trace_item *v) {
    ah_op_kind k = v->ev.kind;
    return v->comm && (k == AH_OP_TP_ALLREDUCE || k == AH_OP_DP_ALLREDUCE || k == AH_OP_TIED_SYNC ||
                       k == AH_OP_STEP_SYNC);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double ah_diag_median(double *v, int n) {
    if (n <= 0)
        return 0;
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

ah_finding *ah_diag_add(dctx *c, ah_diag_kind kind) {
    ah_diagnosis *d = c->d;
    d->f = ah_xrealloc(d->f, sizeof(ah_finding) * (size_t)(d->n + 1));
    ah_finding *f = &d->f[d->n++];
    memset(f, 0, sizeof *f);
    f->kind = kind;
    f->link[0] = f->link[1] = -1;
    f->explained_by = -1;
    f->cause = kind != AH_DIAG_BUBBLE && kind != AH_DIAG_EXPOSED_DP;
    return f;
}

void ah_diag_set_steps(ah_finding *f, const unsigned char *flag, int S) {
    f->n_steps = 0;
    for (int s = 0; s < S && f->n_steps < AH_DIAG_MAX_STEPS; s++)
        if (flag[s])
            f->steps[f->n_steps++] = s;
}

/* the finding's share and significance: share >= threshold and the kind's own test */
static void settle(dctx *c, ah_finding *f, int test) {
    f->share = c->wall_s > 0 ? f->cost_s / c->wall_s : 0;
    f->significant = test && f->share >= c->d->threshold;
}

/* ---------------------------------------------------------------- steps */

static const ah_trace_item *sort_items;
static int cmp_rank_ts(const void *pa, const void *pb) {
    const ah_trace_item *x = &sort_items[*(const int *)pa], *y = &sort_items[*(const int *)pb];
    if (x->ev.rank != y->ev.rank)
        return x->ev.rank - y->ev.rank;
    if (x->ts != y->ts)
        return x->ts < y->ts ? -1 : 1;
    return *(const int *)pa - *(const int *)pb;
}

/* every item's step, per rank per step its compute, its untraced time before
 * forwards and at the step's start */
static void steps_and_gaps(dctx *c) {
    const ah_trace_item *e = c->a->items;
    int n = c->a->n_items;
    c->order = ah_xcalloc((size_t)n + 1, sizeof(int));
    c->rank_first = ah_xcalloc((size_t)c->R + 1, sizeof(int));
    for (int i = 0; i < n; i++)
        c->order[i] = i;
    sort_items = e;
    qsort(c->order, (size_t)n, sizeof(int), cmp_rank_ts);
    for (int k = 0, r = 0; r <= c->R; r++) {
        while (k < n && e[c->order[k]].ev.rank < r)
            k++;
        c->rank_first[r] = k;
    }
    for (int r = 0; r < c->R; r++) {
        int s = 0, after_opt = 0;
        double prev_end = NAN;
        for (int k = c->rank_first[r]; k < c->rank_first[r + 1]; k++) {
            const ah_trace_item *v = &e[c->order[k]];
            int cs = s < c->S ? s : c->S - 1;
            c->step[c->order[k]] = cs;
            double gap = isnan(prev_end) ? 0 : v->ts - prev_end;
            gap = gap > 0 ? gap * 1e-6 : 0;
            if (after_opt)
                c->bound[r * c->S + cs] += gap;
            else if (v->ev.kind == AH_OP_FORWARD && !v->comm)
                c->gap_in[r * c->S + cs] += gap;
            if (v->ev.kind == AH_OP_CHECKPOINT) { /* between steps: the boundary goes on after it */
                if (s < c->S) { /* before a traced step (the save after the last one delays nothing traced) */
                    c->saved[r * c->S + cs] += v->dur * 1e-6;
                    c->tiers |= v->ev.bucket >= 0 && v->ev.bucket < AH_CKPT_TRACE_TIERS ? 1u << v->ev.bucket : 0;
                }
                prev_end = isnan(prev_end) || v->ts + v->dur > prev_end ? v->ts + v->dur : prev_end;
                continue;
            }
            after_opt = 0;
            if (!v->comm && v->ev.kind < AH_OP_KINDS)
                c->comp[r * c->S + cs] += v->dur * 1e-6;
            if (v->ev.kind == AH_OP_OPTIMIZER && !v->comm) {
                s++;
                after_opt = 1;
            }
            double end = v->ts + v->dur;
            prev_end = isnan(prev_end) || end > prev_end ? end : prev_end;
        }
    }
}

/* ---------------------------------------------------------------- slow rank */

/* the work a rank does: its layers and its forward and backward calls */
typedef struct {
    int lf, ll, nf, nb;
    double layer_calls; /* layers x calls of its forwards and backwards */
} work;

static work work_of(const dctx *c, int r) {
    work w = {1 << 30, -1, 0, 0, 0};
    const ah_trace_item *e = c->a->items;
    for (int k = c->rank_first[r]; k < c->rank_first[r + 1]; k++) {
        const ah_trace_item *v = &e[c->order[k]];
        if (v->comm || (v->ev.kind != AH_OP_FORWARD && v->ev.kind != AH_OP_BACKWARD))
            continue;
        v->ev.kind == AH_OP_FORWARD ? w.nf++ : w.nb++;
        if (v->ev.layer_first >= 0) {
            w.lf = v->ev.layer_first < w.lf ? v->ev.layer_first : w.lf;
            w.ll = v->ev.layer_last > w.ll ? v->ev.layer_last : w.ll;
            w.layer_calls += v->ev.layer_last - v->ev.layer_first;
        } else {
            w.layer_calls += 1;
        }
    }
    return w;
}

static int same_work(work a, work b) {
    return a.lf == b.lf && a.ll == b.ll && a.nf == b.nf && a.nb == b.nb;
}

/* expected[s] for rank r: the median of its peers' compute in step s (peers:
 * the ranks doing the same work); without peers its work at the median
 * rank's time per layer call. Returns the number of peers. */
static int expected_compute(const dctx *c, const work *w, int r, double *expected, double *tmp) {
    int peers = 0;
    for (int q = 0; q < c->R; q++)
        peers += q != r && same_work(w[q], w[r]);
    for (int s = 0; s < c->S; s++) {
        int m = 0;
        if (peers) {
            for (int q = 0; q < c->R; q++)
                if (q != r && same_work(w[q], w[r]))
                    tmp[m++] = c->comp[q * c->S + s];
            expected[s] = ah_diag_median(tmp, m);
            continue;
        }
        for (int q = 0; q < c->R; q++) {
            double tot = 0;
            for (int t = 0; t < c->S; t++)
                tot += c->comp[q * c->S + t];
            if (w[q].layer_calls > 0)
                tmp[m++] = tot / w[q].layer_calls;
        }
        expected[s] = ah_diag_median(tmp, m) * w[r].layer_calls / c->S;
    }
    return peers;
}

static void slow_ranks(dctx *c) {
    work *w = ah_xcalloc((size_t)c->R, sizeof(work));
    double *ex = ah_xcalloc((size_t)c->S, sizeof(double)), *tmp = ah_xcalloc((size_t)c->R + 1, sizeof(double));
    unsigned char *flag = ah_xcalloc((size_t)c->S, 1);
    for (int r = 0; r < c->R; r++)
        w[r] = work_of(c, r);
    for (int r = 0; r < c->R; r++) {
        c->peer_group[r] = r;
        for (int q = r - 1; q >= 0; q--)
            if (same_work(w[q], w[r]))
                c->peer_group[r] = q;
    }
    for (int r = 0; r < c->R; r++) {
        if (w[r].nf + w[r].nb == 0)
            continue;
        int peers = expected_compute(c, w, r, ex, tmp);
        double m = 0, x = 0, limit = peers ? 1.5 : 2;
        int slow_steps = 0;
        for (int s = 0; s < c->S; s++) {
            m += c->comp[r * c->S + s];
            x += ex[s];
            flag[s] = c->comp[r * c->S + s] > 1.25 * ex[s];
            slow_steps += flag[s];
        }
        if (!(m > x) || x <= 0)
            continue;
        ah_finding *f = ah_diag_add(c, AH_DIAG_SLOW_RANK);
        f->ranks[f->n_ranks++] = r;
        snprintf(f->op, sizeof f->op, "compute");
        ah_diag_set_steps(f, flag, c->S);
        f->measured_s = m, f->expected_s = x, f->cost_s = m - x;
        if (peers)
            snprintf(f->evidence, sizeof f->evidence,
                     "rank %d computed %.3f ms over %d step(s) where the median of its %d peer(s) with the same "
                     "work (layers %d-%d, %d forward and %d backward calls) took %.3f ms: %.2fx",
                     r, m * 1e3, c->S, peers, w[r].lf, w[r].ll - 1, w[r].nf, w[r].nb, x * 1e3, m / x);
        else
            snprintf(f->evidence, sizeof f->evidence,
                     "rank %d computed %.3f ms for %.0f layer calls, %.2fx the median rank's time per layer call "
                     "(%.3f ms expected; no rank does the same work)",
                     r, m * 1e3, w[r].layer_calls, m / x, x * 1e3);
        settle(c, f, m >= limit * x && 3 * slow_steps >= 2 * c->S);
    }
    free(w);
    free(ex);
    free(tmp);
    free(flag);
}

/* ---------------------------------------------------------------- untraced time */

/* The traced checkpoint tiers, "memory+disk", into buf. */
static const char *tier_list(unsigned tiers, char *buf, size_t n) {
    size_t k = 0;
    buf[0] = '\0';
    for (int t = 0; t < AH_CKPT_TRACE_TIERS && k < n; t++)
        if (tiers & (1u << t))
            k += (size_t)snprintf(buf + k, n - k, "%s%s", k ? "+" : "", ah_ckpt_trace_tier_name(t));
    return buf;
}

/* Checkpoints between steps, every rank at once (per step the median over ranks): the traced saves
 * (checkpoint records: their whole time is the cost) and steps whose untraced start gap is long (above
 * twice the median step's plus 5 ms: a checkpoint that was not traced, or another job-wide pause). Fills
 * excess[s], the untraced part. */
static void checkpoint_stalls(dctx *c, double *excess) {
    double *tmp = ah_xcalloc((size_t)(c->R > c->S ? c->R : c->S) + 1, sizeof(double)),
           *med = ah_xcalloc((size_t)c->S, sizeof(double)), *saved = ah_xcalloc((size_t)c->S, sizeof(double));
    for (int s = 0; s < c->S; s++) {
        for (int r = 0; r < c->R; r++)
            tmp[r] = c->bound[r * c->S + s];
        med[s] = ah_diag_median(tmp, c->R);
        for (int r = 0; r < c->R; r++)
            tmp[r] = c->saved[r * c->S + s];
        saved[s] = ah_diag_median(tmp, c->R);
    }
    memcpy(tmp, med + 1, sizeof(double) * (size_t)(c->S - 1));
    double base = ah_diag_median(tmp, c->S - 1), untraced = 0, traced = 0;
    unsigned char *flag = ah_xcalloc((size_t)c->S, 1);
    for (int s = 1; s < c->S; s++) {
        if (med[s] > 2 * base + 5e-3) {
            excess[s] = med[s] - base;
            untraced += excess[s];
            flag[s] = 1;
        }
        traced += saved[s];
        flag[s] |= saved[s] > 0;
    }
    if (untraced + traced > 0) {
        ah_finding *f = ah_diag_add(c, AH_DIAG_CHECKPOINT_STALL);
        for (int r = 0; r < c->R && f->n_ranks < AH_DIAG_MAX_RANKS; r++)
            f->ranks[f->n_ranks++] = r;
        ah_diag_set_steps(f, flag, c->S);
        double cost = untraced + traced;
        f->cost_s = cost, f->measured_s = cost + base * f->n_steps, f->expected_s = base * f->n_steps;
        int per = f->n_steps ? f->n_steps : 1;
        char tiers[64];
        if (traced > 0) {
            snprintf(f->op, sizeof f->op, "checkpoint %s", tier_list(c->tiers, tiers, sizeof tiers));
            snprintf(f->evidence, sizeof f->evidence,
                     "every rank saved checkpoints between steps (traced: %s): %d step(s) lost %.3f ms each on the "
                     "median rank, %.3f ms of it in the traced saves%s",
                     tiers, f->n_steps, cost * 1e3 / per, traced * 1e3 / per,
                     untraced > 0 ? " and the rest untraced before the steps started" : "");
        } else {
            snprintf(f->op, sizeof f->op, "between steps");
            snprintf(f->evidence, sizeof f->evidence,
                     "every rank paused between steps with nothing traced: %d step(s) started %.3f ms later than "
                     "the median step start gap (%.3f ms), on the median rank (a checkpoint write, an evaluation, "
                     "or another pause of the whole job)",
                     f->n_steps, cost * 1e3 / per, base * 1e3);
        }
        settle(c, f, 1);
    }
    free(tmp);
    free(med);
    free(saved);
    free(flag);
}

/* Untraced time before forwards and at step starts (data loading; a
 * checkpoint's share taken out), against the median rank. */
static void input_stalls(dctx *c, const double *ckpt) {
    double *tot = ah_xcalloc((size_t)c->R, sizeof(double)), *tmp = ah_xcalloc((size_t)c->R + 1, sizeof(double));
    double *per = ah_xcalloc((size_t)c->R * c->S + 1, sizeof(double));
    for (int r = 0; r < c->R; r++)
        for (int s = 0; s < c->S; s++) {
            double b = c->bound[r * c->S + s] - ckpt[s];
            per[r * c->S + s] = c->gap_in[r * c->S + s] + (b > 0 ? b : 0);
            tot[r] += per[r * c->S + s];
        }
    memcpy(tmp, tot, sizeof(double) * (size_t)c->R);
    double med = ah_diag_median(tmp, c->R);
    unsigned char *flag = ah_xcalloc((size_t)c->S, 1);
    for (int r = 0; r < c->R; r++) {
        if (!(tot[r] > med) || c->R < 2)
            continue;
        for (int s = 0; s < c->S; s++)
            flag[s] = per[r * c->S + s] > 2 * med / c->S + 1e-3;
        ah_finding *f = ah_diag_add(c, AH_DIAG_INPUT_STALL);
        f->ranks[f->n_ranks++] = r;
        snprintf(f->op, sizeof f->op, "before forward (data loading)");
        ah_diag_set_steps(f, flag, c->S);
        f->measured_s = tot[r], f->expected_s = med, f->cost_s = tot[r] - med;
        snprintf(f->evidence, sizeof f->evidence,
                 "rank %d spent %.3f ms untraced before its forwards and at step starts (data loading, host "
                 "work) where the median rank spent %.3f ms: %.3f ms more per step",
                 r, tot[r] * 1e3, med * 1e3, (tot[r] - med) * 1e3 / c->S);
        settle(c, f, tot[r] >= 1.5 * med + 1e-3 * c->S);
    }
    free(tot);
    free(tmp);
    free(per);
    free(flag);
}

/* ---------------------------------------------------------------- effects */

/* per replica (indexed by its lowest rank, c->replica), one pipeline message
 * between its ranks as measured: the mean of its transfers (the links' own
 * time, however slow: a slow link is its own finding), 0 without one */
static void pipeline_transfer_s(const dctx *c, double *x) {
    const ah_diagnosis *d = c->d;
    int *m = ah_xcalloc((size_t)c->R + 1, sizeof(int));
    for (int k = 0; k < d->n_obs; k++) {
        const ah_link_obs *o = &d->obs[k];
        int g = c->replica[o->a];
        if (!o->collective && o->item >= 0 && c->replica[o->b] == g)
            x[g] += o->us * 1e-6, m[g]++;
    }
    for (int g = 0; g < c->R; g++)
        x[g] = m[g] ? x[g] / m[g] : 0;
    free(m);
}

/* Pipeline bubble beyond the schedule's own: a 1F1B step of p stages and m
 * micro-batches lasts (m + p - 1) micro-batch times of the slowest stage
 * plus the 2 (p - 1) messages of its critical path (the first micro-batch's
 * activations down the stages, the last one's gradients back up), of which
 * a rank computes its own: the rest is the schedule's, the stages'
 * imbalance's and the links' own idle time; beyond it, a rank idles for
 * what the trace does not show (a peer descheduled between its operations,
 * a message waiting for its sender's next MPI call). */
static void bubbles(dctx *c) {
    double *xr = ah_xcalloc((size_t)c->R + 1, sizeof(double));
    pipeline_transfer_s(c, xr);
    for (int r = 0; r < c->R; r++) {
        double meas = c->a->split[r].bubble * 1e-6;
        if (meas <= 0)
            continue;
        int p = 0, m = 0, nf = 0;
        double own = 0, slowest = 0;
        for (int q = 0; q < c->R; q++)
            if (c->replica[q] == c->replica[r]) {
                double tot = 0;
                for (int s = 0; s < c->S; s++)
                    tot += c->comp[q * c->S + s];
                slowest = tot > slowest ? tot : slowest;
                own = q == r ? tot : own;
                p++;
            }
        for (int k = c->rank_first[r]; k < c->rank_first[r + 1]; k++)
            nf += c->a->items[c->order[k]].ev.kind == AH_OP_FORWARD && !c->a->items[c->order[k]].comm;
        m = c->o->micro_batches ? c->o->micro_batches[r] : nf / c->S;
        int stages = c->o->n_stages ? c->o->n_stages[r] : p;
        double x = stages > 1 ? xr[c->replica[r]] : 0;
        double mb = m > 0 ? slowest / m : 0, exp_s = (m + stages - 1) * mb + 2.0 * (stages - 1) * x * c->S - own;
        exp_s = exp_s > 0 ? exp_s : 0;
        if (!(meas > exp_s))
            continue;
        ah_finding *f = ah_diag_add(c, AH_DIAG_BUBBLE);
        f->ranks[f->n_ranks++] = r;
        snprintf(f->op, sizeof f->op, "recv_activation/recv_gradient");
        f->measured_s = meas, f->expected_s = exp_s, f->cost_s = meas - exp_s;
        unsigned char *all = ah_xcalloc((size_t)c->S, 1);
        memset(all, 1, (size_t)c->S);
        ah_diag_set_steps(f, all, c->S);
        free(all);
        snprintf(f->evidence, sizeof f->evidence,
                 "rank %d waited %.3f ms in pipeline receives; 1F1B with %d stage(s) and %d micro-batch(es) "
                 "idles it %.3f ms ((m + p - 1) micro-batch times of its slowest stage, %.3f ms per step, and "
                 "2 (p - 1) messages of %.3f ms as measured, less its own compute, over %d step(s))",
                 r, meas * 1e3, stages, m, exp_s * 1e3, mb * 1e3 / (c->S ? c->S : 1), x * 1e3, c->S);
        settle(c, f, meas > 1.5 * exp_s);
    }
    free(xr);
}

/* the expected time of each data-parallel instance after its last arrival:
 * the links' expectation of a 2-rank all-reduce, else the median of the
 * instances of the same call site and group (the run's own typical time,
 * computed once per site and group: instances are sorted by site, group) */
static void dp_expected(const dctx *c, double *ex) {
    const ah_trace_item *e = c->a->items;
    for (int k = 0; k < c->n_inst; k++)
        ex[k] = -1;
    for (int k = 0; k < c->d->n_obs; k++) {
        const ah_link_obs *o = &c->d->obs[k];
        if (o->inst >= 0 && o->expected_us >= 0)
            ex[o->inst] = o->expected_us * o->per_inst;
    }
    double *v = ah_xcalloc((size_t)c->n_inst + 1, sizeof(double));
    for (int a = 0, b; a < c->n_inst; a = b) {
        const ah_trace_item *x = &e[c->inst_items[c->inst[a].first]];
        int m = 0;
        for (b = a; b < c->n_inst; b++) {
            const ah_trace_item *y = &e[c->inst_items[c->inst[b].first]];
            if (strcmp(x->site, y->site) || x->ev.group != y->ev.group)
                break;
            v[m++] = c->inst[b].le - c->inst[b].la;
        }
        if (x->ev.kind != AH_OP_DP_ALLREDUCE)
            continue;
        double med = ah_diag_median(v, m);
        for (int k = a; k < b; k++)
            ex[k] = ex[k] >= 0 ? ex[k] : med;
    }
    free(v);
}

/* Data-parallel all-reduce time after every member arrived, not under
 * compute, beyond what the all-reduce itself should take: the engine's
 * all-reduces are blocking, so their own time is the schedule's; more is
 * lost (mean over the ranks taking part). The evidence also says what
 * overlapping them with the backward pass could hide. */
static void exposed_dp(dctx *c) {
    double *per = ah_xcalloc((size_t)c->R, sizeof(double)), *ex = ah_xcalloc((size_t)c->n_inst + 1, sizeof(double));
    double *per_ex = ah_xcalloc((size_t)c->R, sizeof(double));
    unsigned char *in = ah_xcalloc((size_t)c->R, 1), *flag = ah_xcalloc((size_t)c->S, 1);
    dp_expected(c, ex);
    for (int i = 0; i < c->a->n_items; i++) {
        const ah_trace_item *v = &c->a->items[i];
        if (v->ev.kind != AH_OP_DP_ALLREDUCE || c->inst_of[i] < 0)
            continue;
        double la = c->inst[c->inst_of[i]].la, t = v->ts + v->dur - (v->ts > la ? v->ts : la);
        per[v->ev.rank] += t > 0 ? t * 1e-6 : 0;
        per_ex[v->ev.rank] += ex[c->inst_of[i]] > 0 ? ex[c->inst_of[i]] * 1e-6 : 0;
        in[v->ev.rank] = 1;
        flag[c->step[i]] = 1;
    }
    double tot = 0, tot_ex = 0;
    int n = 0;
    for (int r = 0; r < c->R; r++)
        if (in[r]) { /* a rank's own all-reduces, signed; one rank faster than expected offsets no other's */
            tot += per[r];
            tot_ex += per_ex[r] < per[r] ? per_ex[r] : per[r];
            n++;
        }
    if (n > 0 && tot > tot_ex) {
        ah_finding *f = ah_diag_add(c, AH_DIAG_EXPOSED_DP);
        for (int r = 0; r < c->R && f->n_ranks < AH_DIAG_MAX_RANKS; r++)
            if (in[r])
                f->ranks[f->n_ranks++] = r;
        snprintf(f->op, sizeof f->op, "dp_allreduce");
        ah_diag_set_steps(f, flag, c->S);
        f->measured_s = tot / n;
        f->expected_s = tot_ex / n;
        f->cost_s = f->measured_s - f->expected_s;
        snprintf(f->evidence, sizeof f->evidence,
                 "%d rank(s) spent %.3f ms per step on average in data-parallel all-reduces after every member "
                 "had arrived, none of it under compute, where the all-reduces themselves should take %.3f ms "
                 "(%s); the blocking all-reduce's own time is the schedule's, overlapping it with the backward "
                 "pass would hide up to %.3f ms per step",
                 n, tot / n * 1e3 / c->S, tot_ex / n * 1e3 / c->S,
                 c->d->expected_from[0] ? c->d->expected_from : "their typical time", tot / n * 1e3 / c->S);
        settle(c, f, f->measured_s > 1.5 * f->expected_s);
    }
    free(per);
    free(per_ex);
    free(ex);
    free(in);
    free(flag);
}

/* pipelines: ranks joined by point-to-point transfers (or the plan's replicas' ranks) */
static void pipelines(dctx *c) {
    c->replica = ah_xcalloc((size_t)c->R + 1, sizeof(int));
    for (int r = 0; r < c->R; r++)
        c->replica[r] = r;
    for (int changed = 1; changed;) {
        changed = 0;
        for (int i = 0; i < c->a->n_items; i++) {
            const ah_trace_event *e = &c->a->items[i].ev;
            if (e->peer < 0 || e->peer >= c->R || e->kind == AH_OP_TIED_SYNC)
                continue;
            int lo = c->replica[e->rank] < c->replica[e->peer] ? c->replica[e->rank] : c->replica[e->peer];
            if (c->replica[e->rank] != lo || c->replica[e->peer] != lo) {
                c->replica[e->rank] = c->replica[e->peer] = lo;
                changed = 1;
            }
        }
    }
}

/* ---------------------------------------------------------------- ranking */

static int involves(const ah_finding *f, int r) {
    for (int k = 0; k < f->n_ranks; k++)
        if (f->ranks[k] == r)
            return 1;
    return 0;
}

/* An effect is explained by a significant cause on a rank of its pipeline
 * (bubble) or, for exposed DP, by a slow link of a DP all-reduce between its
 * ranks; a slow link by a slow rank at one of its ends: its slow communication
 * (every link of that rank slow, diagnose_links.c) or its slow compute (a link
 * cannot slow a rank's compute, while a rank stopped or descheduled part of
 * the time progresses its messages no faster: its links lose time, often more
 * than its compute), or by a saturated link between its two hosts (its
 * load, diagnose_links.c); a late arrival (the macro view: whom the others waited
 * for) by a more specific cause (slow rank, input stall, slow link, checkpoint
 * stall) on a rank of the late rank's pipeline (the micro view: why). A cause
 * explained itself explains nothing: the chain ends at the first cause. */
static int explains(const dctx *c, const ah_finding *cause, const ah_finding *eff) {
    if (!cause->cause || !cause->significant || cause == eff || cause->explained_by >= 0)
        return 0;
    if (eff->kind == AH_DIAG_SLOW_LINK)
        return (cause->kind == AH_DIAG_SLOW_RANK && (involves(cause, eff->link[0]) || involves(cause, eff->link[1]))) ||
               (cause->kind == AH_DIAG_SATURATED_LINK && ah_diag_same_hosts(c, cause, eff));
    if (eff->kind == AH_DIAG_EXPOSED_DP)
        return cause->kind == AH_DIAG_SLOW_LINK && !strcmp(cause->op, "dp_allreduce") &&
               involves(eff, cause->link[0]) && involves(eff, cause->link[1]);
    if (eff->cause && (eff->kind != AH_DIAG_LATE_ARRIVAL || cause->kind == AH_DIAG_LATE_ARRIVAL))
        return 0;
    for (int k = 0; k < eff->n_ranks; k++)
        for (int q = 0; q < c->R; q++)
            if (involves(cause, q) && c->replica[q] == c->replica[eff->ranks[k]])
                return 1;
    return 0;
}

/* significant causes, significant effects no cause explains, explained findings, the rest */
static int rank_class(const ah_finding *f) {
    return !f->significant ? 3 : f->explained_by >= 0 ? 2 : f->cause ? 0 : 1;
}

static int cmp_finding(const void *pa, const void *pb) {
    const ah_finding *x = pa, *y = pb;
    if (rank_class(x) != rank_class(y))
        return rank_class(x) - rank_class(y);
    return (x->cost_s < y->cost_s) - (x->cost_s > y->cost_s);
}

/* sort, then point each explained effect at its cause's index */
static void rank_findings(dctx *c) {
    ah_diagnosis *d = c->d;
    /* slow links first, then the other causes (late arrivals), then effects: an explained cause explains
     * nothing, so whether it is explained is settled before it is asked */
    for (int pass = 0; pass < 3; pass++)
        for (int i = 0; i < d->n; i++) {
            const ah_finding *e = &d->f[i];
            if (pass != (e->kind == AH_DIAG_SLOW_LINK ? 0 : e->cause ? 1 : 2))
                continue;
            for (int j = 0; j < d->n && d->f[i].explained_by < 0; j++)
                if (explains(c, &d->f[j], e))
                    d->f[i].explained_by = j;
        }
    /* remember the causes by kind and ranks across the sort */
    ah_finding *old = ah_xcalloc((size_t)d->n + 1, sizeof(ah_finding));
    memcpy(old, d->f, sizeof(ah_finding) * (size_t)d->n);
    qsort(d->f, (size_t)d->n, sizeof(ah_finding), cmp_finding);
    for (int i = 0; i < d->n; i++) {
        int e = d->f[i].explained_by;
        if (e < 0)
            continue;
        for (int j = 0; j < d->n; j++)
            if (!memcmp(&d->f[j], &old[e], sizeof(ah_finding)))
                d->f[i].explained_by = j;
    }
    free(old);
}

int ah_trace_diagnose(const ah_trace_analysis *a, const ah_diag_options *o, ah_diagnosis *d, char *err,
                      size_t errlen) {
    memset(d, 0, sizeof *d);
    dctx c = {.a = a, .o = o, .d = d, .R = a->ranks, .S = a->steps > 0 ? a->steps : 1};
    d->threshold = o->threshold > 0 ? o->threshold : 0.05;
    d->steps = a->steps;
    d->wall_s = a->span_us * 1e-6;
    d->step_s = a->iteration_s;
    c.wall_s = d->wall_s;
    size_t rs = (size_t)c.R * (size_t)c.S + 1;
    c.step = ah_xcalloc((size_t)a->n_items + 1, sizeof(int));
    c.comp = ah_xcalloc(rs, sizeof(double));
    c.gap_in = ah_xcalloc(rs, sizeof(double));
    c.bound = ah_xcalloc(rs, sizeof(double));
    c.saved = ah_xcalloc(rs, sizeof(double));
    double *ckpt = ah_xcalloc((size_t)c.S + 1, sizeof(double));
    c.peer_group = ah_xcalloc((size_t)c.R + 1, sizeof(int));
    steps_and_gaps(&c);
    pipelines(&c);
    ah_diag_match_transfers(&c);
    int rc = ah_diag_links(&c, err, errlen);
    if (rc == 0) {
        ah_diag_saturated_links(&c);
        slow_ranks(&c);
        if (c.S > 2)
            checkpoint_stalls(&c, ckpt);
        input_stalls(&c, ckpt);
        ah_diag_late_arrivals(&c);
        ah_diag_common_ends(&c);
        bubbles(&c);
        exposed_dp(&c);
        rank_findings(&c);
    }
    free(ckpt);
    free(c.step);
    free(c.order);
    free(c.rank_first);
    free(c.comp);
    free(c.gap_in);
    free(c.bound);
    free(c.saved);
    free(c.send_of);
    free(c.inst_of);
    free(c.inst);
    free(c.inst_items);
    free(c.replica);
    free(c.peer_group);
    free(c.obs_busy_us);
    if (rc != 0)
        ah_diagnosis_free(d);
    return rc;
}

void ah_diagnosis_free(ah_diagnosis *d) {
    free(d->f);
    free(d->obs);
    memset(d, 0, sizeof *d);
}
