/* Where the time of a traced run went (autohet/trace_analysis.h, docs/analyze.md).
 *
 * Per rank the window splits into compute (union of compute events), exposed
 * communication (collectives and sends not overlapped by compute), pipeline
 * bubble (receives from the neighbouring stage, not overlapped), checkpoint
 * (traced saves between steps) and other (untraced gaps); the parts sum to the
 * window by construction. Per
 * collective call site: calls, bytes, achieved bus bandwidth, the alpha-beta
 * prediction, and the split of each call into waiting for the last rank to
 * arrive (skew) and the transfer itself. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "autohet/comm.h"
#include "autohet/trace_analysis.h"
#include "cluster/link_model_json.h"
#include "util/errors.h"
#include "util/intervals.h"
#include "util/json_file.h"

static int is_recv(const ah_trace_item *v) {
    return v->ev.kind == AH_OP_RECV_ACTIVATION || v->ev.kind == AH_OP_RECV_GRADIENT ||
           !strncmp(v->site, "recv_", 5);
}

/* the number of optimizer steps every rank completed */
static int count_steps(const ah_trace_item *e, int n, int ranks) {
    int *c = ah_xcalloc((size_t)ranks, sizeof(int)), mn = -1;
    for (int i = 0; i < n; i++)
        if (e[i].ev.kind == AH_OP_OPTIMIZER && !e[i].comm)
            c[e[i].ev.rank]++;
    for (int r = 0; r < ranks; r++)
        if (mn < 0 || c[r] < mn)
            mn = c[r];
    free(c);
    return mn < 0 ? 0 : mn;
}

/* Leaves out each rank's first `skip` steps: cut[r] = where rank r's
 * optimizer of step `skip` ends (a rank's events are in time order). Returns
 * the events kept, clipped at the cut. */
static int clip_steps(ah_trace_item *e, int n, int ranks, int skip, double *cut) {
    int *c = ah_xcalloc((size_t)ranks, sizeof(int)), k = 0;
    for (int i = 0; i < n; i++)
        if (e[i].ev.kind == AH_OP_OPTIMIZER && !e[i].comm && ++c[e[i].ev.rank] == skip)
            cut[e[i].ev.rank] = e[i].ts + e[i].dur;
    free(c);
    for (int i = 0; i < n; i++) {
        double c0 = cut[e[i].ev.rank];
        if (e[i].ts + e[i].dur <= c0)
            continue;
        ah_trace_item v = e[i];
        if (v.ts < c0) {
            v.dur -= c0 - v.ts;
            v.ts = c0;
        }
        e[k++] = v;
    }
    return k;
}

static void rank_splits(ah_trace_analysis *a, const double *cut, double t1) {
    int n = a->n_items;
    const ah_trace_item *e = a->items;
    double *cv = ah_xcalloc(2 * (size_t)n + 2, sizeof(double)), *mv = ah_xcalloc(2 * (size_t)n + 2, sizeof(double)),
           *pv = ah_xcalloc(2 * (size_t)n + 2, sizeof(double)), *uv = ah_xcalloc(4 * (size_t)n + 2, sizeof(double)),
           *kv = ah_xcalloc(2 * (size_t)n + 2, sizeof(double));
    for (int r = 0; r < a->ranks; r++) {
        /* compute, communication (collectives and sends), pipeline receives */
        int nc = 0, nm = 0, np = 0, nk = 0;
        for (int i = 0; i < n; i++) {
            if (e[i].ev.rank != r)
                continue;
            if (e[i].ev.kind == AH_OP_CHECKPOINT) { /* the training thread's, between steps: its own part */
                kv[2 * nk] = e[i].ts;
                kv[2 * nk++ + 1] = e[i].ts + e[i].dur;
                continue;
            }
            double *dst = !e[i].comm ? cv + 2 * nc++ : is_recv(&e[i]) ? pv + 2 * np++ : mv + 2 * nm++;
            dst[0] = e[i].ts;
            dst[1] = e[i].ts + e[i].dur;
        }
        nc = ah_intervals_merge(cv, nc);
        nk = ah_intervals_merge(kv, nk);
        nm = ah_intervals_merge(mv, nm);
        np = ah_intervals_merge(pv, np);
        memcpy(uv, cv, sizeof(double) * 2 * (size_t)nc);
        memcpy(uv + 2 * nc, mv, sizeof(double) * 2 * (size_t)nm);
        int nu = ah_intervals_merge(uv, nc + nm);
        ah_trace_split *s = &a->split[r];
        s->span = t1 - cut[r];
        s->compute = ah_intervals_length(cv, nc);
        s->exposed = ah_intervals_minus(mv, nm, cv, nc);
        s->bubble = ah_intervals_minus(pv, np, uv, nu);
        s->checkpoint = ah_intervals_length(kv, nk);
        s->other = s->span - s->compute - s->exposed - s->bubble - s->checkpoint;
    }
    free(cv);
    free(mv);
    free(pv);
    free(uv);
    free(kv);
}

static const ah_trace_item *sort_items; /* qsort has no context argument */
static int cmp_instance(const void *pa, const void *pb) {
    const ah_trace_item *x = &sort_items[*(const int *)pa], *y = &sort_items[*(const int *)pb];
    if (x->ev.group != y->ev.group)
        return (x->ev.group > y->ev.group) - (x->ev.group < y->ev.group);
    return (x->ev.seq > y->ev.seq) - (x->ev.seq < y->ev.seq);
}

/* One instance of a collective = the events of its members with the same
 * (site, group, seq). The last rank to arrive waits least: its time is the
 * transfer, the others' extra time is skew. Receives are one-sided (only the
 * receiver records), so they have no instances with more than one event. */
/* The profile's all-reduce fit, measured over fit_ranks ranks, for m bytes over nr ranks: its regime's
 * alpha + m / beta with the latency steps scaled as a ring's 2(n-1) and the bytes through each GPU as its
 * 2(n-1)/n (the fit itself at the profile's rank count, or when the profile does not say it), not below the
 * first regime's latency scaled alike (ah_link_us) */
static double allreduce_us(const ah_link_model *ar, int fit_ranks, int nr, double m) {
    if (nr < 2 || fit_ranks < 2 || nr == fit_ranks)
        return ah_link_us(ar, m);
    double steps = (double)(nr - 1) / (fit_ranks - 1),
           volume = ((double)(nr - 1) / nr) / ((double)(fit_ranks - 1) / fit_ranks);
    ah_link_model scaled = *ar; /* every regime's line scaled alike: ah_link_us picks the regime and the floor */
    for (int q = 0; q < scaled.n; q++)
        scaled.alpha_us[q] *= steps, scaled.beta_GBps[q] /= volume;
    return ah_link_us(&scaled, m);
}

static void site_stats(const ah_trace_item *e, int n, ah_trace_site *s, const ah_link_model *ar, int ar_ranks,
                       int *idx) {
    double tot = 0, bytes = 0, skew = 0, xfer = 0;
    int m = 0, nr = 1;
    for (int i = 0; i < n; i++)
        if (e[i].comm && !strcmp(e[i].site, s->site)) {
            idx[m++] = i;
            tot += e[i].dur;
            bytes += e[i].ev.bytes;
            nr = e[i].ev.ranks;
        }
    sort_items = e;
    qsort(idx, (size_t)m, sizeof(int), cmp_instance);
    for (int a = 0; a < m;) {
        int b = a;
        double mn = 1e300, sum = 0;
        while (b < m && e[idx[b]].ev.group == e[idx[a]].ev.group && e[idx[b]].ev.seq == e[idx[a]].ev.seq) {
            mn = e[idx[b]].dur < mn ? e[idx[b]].dur : mn;
            sum += e[idx[b]].dur;
            b++;
        }
        if (a == 0 || e[idx[a]].ev.group != e[idx[a - 1]].ev.group)
            s->groups++;
        if (b - a > 1) {
            s->instances++;
            xfer += mn;
            skew += sum / (b - a) - mn;
        }
        a = b;
    }
    s->calls = m;
    s->ranks = nr;
    s->avg_us = tot / m;
    s->bytes_per_call = bytes / m;
    /* bus bandwidth of the transfer itself (skew excluded), nccl-tests convention
     * for all-reduce: 2(n-1)/n; the tied-embedding exchange is a 2-rank all-reduce */
    int is_ar = strstr(s->site, "allreduce") != NULL || !strcmp(s->site, "tied_sync");
    double t_x = s->instances ? xfer / s->instances : s->avg_us, bpc = s->bytes_per_call;
    s->busbw_GBps = is_ar && t_x > 0 && nr > 1 && bpc > 0 ? bpc / (t_x * 1e3) * ah_busbw_factor(AH_OP_ALLREDUCE, nr) : 0;
    s->predicted_us = is_ar && ar ? allreduce_us(ar, ar_ranks, nr, bpc) : -1;
    if (s->instances) {
        s->skew_us = skew / s->instances;
        s->transfer_us = xfer / s->instances;
    }
}

/* ar: the comm profile's allreduce fit over ar_ranks ranks (NULL: none), whose piecewise alpha-beta at a site's
 * size and ranks (allreduce_us) is the site's prediction */
static void all_sites(ah_trace_analysis *a, const ah_link_model *ar, int ar_ranks) {
    const ah_trace_item *e = a->items;
    int n = a->n_items, cap = 8;
    a->sites = ah_xcalloc((size_t)cap, sizeof(ah_trace_site));
    for (int i = 0; i < n; i++) {
        if (!e[i].comm)
            continue;
        int k = 0;
        while (k < a->n_sites && strcmp(a->sites[k].site, e[i].site))
            k++;
        if (k < a->n_sites || a->n_sites >= 4096)
            continue;
        if (a->n_sites == cap) {
            cap *= 2;
            a->sites = ah_xrealloc(a->sites, sizeof(ah_trace_site) * (size_t)cap);
        }
        memset(&a->sites[a->n_sites], 0, sizeof(ah_trace_site));
        snprintf(a->sites[a->n_sites++].site, sizeof a->sites[0].site, "%s", e[i].site);
    }
    int *idx = ah_xcalloc((size_t)n + 1, sizeof(int));
    for (int k = 0; k < a->n_sites; k++)
        site_stats(e, n, &a->sites[k], ar, ar_ranks, idx);
    free(idx);
}

static int cmp_bucket(const void *pa, const void *pb) {
    const ah_trace_bucket *x = pa, *y = pb;
    return x->first != y->first ? (x->first > y->first) - (x->first < y->first) : (x->last > y->last) - (x->last < y->last);
}

/* seconds per step per op kind and per gradient bucket (by its layers) */
static void kinds_and_buckets(ah_trace_analysis *a) {
    double per = a->steps > 0 ? 1e-6 / a->steps : 1e-6;
    int cap = 8;
    a->kind_s = ah_xcalloc((size_t)a->ranks * AH_OP_KINDS + 1, sizeof(double));
    a->buckets = ah_xcalloc((size_t)cap, sizeof(ah_trace_bucket));
    for (int i = 0; i < a->n_items; i++) {
        const ah_trace_item *v = &a->items[i];
        if (v->ev.kind >= AH_OP_KINDS)
            continue;
        a->kind_s[v->ev.rank * AH_OP_KINDS + v->ev.kind] += v->dur * per;
        if (v->ev.kind != AH_OP_DP_ALLREDUCE || v->ev.layer_first < 0)
            continue;
        int b = 0;
        while (b < a->n_buckets && (a->buckets[b].first != v->ev.layer_first || a->buckets[b].last != v->ev.layer_last))
            b++;
        if (b == a->n_buckets) {
            if (b == cap) {
                cap *= 2;
                a->buckets = ah_xrealloc(a->buckets, sizeof(ah_trace_bucket) * (size_t)cap);
            }
            a->buckets[b] = (ah_trace_bucket){v->ev.layer_first, v->ev.layer_last,
                                              ah_xcalloc((size_t)a->ranks, sizeof(double)), 0};
            for (int r = 0; r < a->ranks; r++)
                a->buckets[b].rank_s[r] = -1;
            a->n_buckets++;
        }
        double *rs = &a->buckets[b].rank_s[v->ev.rank];
        *rs = (*rs < 0 ? 0 : *rs) + v->dur * per;
    }
    qsort(a->buckets, (size_t)a->n_buckets, sizeof(ah_trace_bucket), cmp_bucket);
    for (int b = 0; b < a->n_buckets; b++) {
        int holders = 0;
        for (int r = 0; r < a->ranks; r++)
            if (a->buckets[b].rank_s[r] >= 0) {
                a->buckets[b].mean_s += a->buckets[b].rank_s[r];
                holders++;
            }
        a->buckets[b].mean_s /= holders ? holders : 1;
    }
}

static void slowest(ah_trace_analysis *a, int top) {
    int n = a->n_items;
    int *order = ah_xcalloc((size_t)n + 1, sizeof(int));
    for (int i = 0; i < n; i++)
        order[i] = i;
    for (int i = 0; i < top && i < n; i++) /* partial selection sort: top is small */
        for (int j = i + 1; j < n; j++)
            if (a->items[order[j]].dur > a->items[order[i]].dur) {
                int t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
    a->slowest = order;
    a->n_slowest = top < n ? top : n;
}

int ah_trace_analyze(const ah_trace_file *t, const ah_trace_options *o, ah_trace_analysis *a, char *err,
                     size_t errlen) {
    memset(a, 0, sizeof *a);
    cJSON *fits_root = NULL;
    if (o->comm_profile && !(fits_root = ah_comm_profile_parse(o->comm_profile, err, errlen)))
        return -1;
    int skip = o->skip_steps > 0 ? o->skip_steps : 0;
    a->ranks = t->n_ranks;
    a->steps = count_steps(t->items, t->n, t->n_ranks);
    if (skip > 0 && skip >= a->steps) {
        ah_errf(err, errlen, "--skip-steps %d: the trace has %d step(s)", skip, a->steps);
        cJSON_Delete(fits_root);
        return -1;
    }
    a->items = ah_xcalloc((size_t)t->n + 1, sizeof(ah_trace_item));
    memcpy(a->items, t->items, sizeof(ah_trace_item) * (size_t)t->n);
    a->n_items = t->n;
    double *cut = ah_xcalloc((size_t)a->ranks, sizeof(double));
    if (skip > 0)
        a->n_items = clip_steps(a->items, t->n, a->ranks, skip, cut);
    a->skipped = skip;
    a->steps -= skip;
    double t0 = 1e300, t1 = -1e300;
    for (int i = 0; i < a->n_items; i++) {
        t0 = a->items[i].ts < t0 ? a->items[i].ts : t0;
        t1 = a->items[i].ts + a->items[i].dur > t1 ? a->items[i].ts + a->items[i].dur : t1;
    }
    for (int r = 0; r < a->ranks && skip == 0; r++)
        cut[r] = t0;
    a->span_us = t1 - t0;
    a->split = ah_xcalloc((size_t)a->ranks, sizeof(ah_trace_split));
    rank_splits(a, cut, t1);
    double mean_span = 0;
    for (int r = 0; r < a->ranks; r++)
        mean_span += a->split[r].span / a->ranks;
    a->iteration_s = a->steps > 0 ? mean_span * 1e-6 / a->steps : 0;
    ah_link_model ar; /* read once for every site */
    int have_ar = fits_root && ah_link_model_from_op_fit(cJSON_GetObjectItemCaseSensitive(fits_root, "fits"),
                                                         "allreduce", NULL, &ar) == 0;
    const cJSON *fit_ranks = fits_root ? cJSON_GetObjectItemCaseSensitive(fits_root, "ranks") : NULL;
    all_sites(a, have_ar ? &ar : NULL, cJSON_IsNumber(fit_ranks) ? fit_ranks->valueint : 0);
    kinds_and_buckets(a);
    slowest(a, o->top > 0 ? o->top : 0);
    ah_trace_causality_check(t, &a->causality);
    a->clock = t->clock;
    a->clock.ranks = ah_xcalloc((size_t)t->clock.n + 1, sizeof(ah_trace_clock_rank));
    if (t->clock.n > 0)
        memcpy(a->clock.ranks, t->clock.ranks, sizeof(ah_trace_clock_rank) * (size_t)t->clock.n);
    free(cut);
    cJSON_Delete(fits_root);
    return 0;
}

void ah_trace_analysis_free(ah_trace_analysis *a) {
    for (int b = 0; b < a->n_buckets; b++)
        free(a->buckets[b].rank_s);
    free(a->buckets);
    free(a->split);
    free(a->kind_s);
    free(a->sites);
    free(a->items);
    free(a->slowest);
    free(a->clock.ranks);
    memset(a, 0, sizeof *a);
}
