/* Causal order of a trace (autohet/trace_analysis.h; docs/analyze.md,
 * "Clocks"): a receive cannot end before its send started, no member of a
 * collective can leave before its last member entered, a flow arrow cannot
 * point back in time. Counted on the file's times and, when the trace records
 * its clock correction, on each rank's own clock (the correction undone). */
#include <stdlib.h>
#include <string.h>

#include "autohet/trace_analysis.h"
#include "trace/clock_sync.h"
#include "util/errors.h"

double ah_trace_clock_local(const ah_trace_clock *c, int rank, double t) {
    double g = c->origin_s + t;
    if (!c->present || rank < 0 || rank >= c->n)
        return g;
    const ah_trace_clock_rank *q = &c->ranks[rank];
    ah_clock_map m = {.t_start = c->origin_s + q->sync_start_s,
                      .offset_start_s = q->offset_s,
                      .drift = q->drift_ppm * 1e-6};
    return ah_clock_to_local(&m, g);
}

/* a time of the file (us) on the chosen clock (us; own clocks: from rank 0's origin) */
static double at(const ah_trace_file *t, int raw, int rank, double ts_us) {
    if (!raw)
        return ts_us;
    return (ah_trace_clock_local(&t->clock, rank, ts_us * 1e-6) - t->clock.origin_s) * 1e6;
}

static void violation(int *count, double *worst, double by_us) {
    (*count)++;
    if (by_us > *worst)
        *worst = by_us;
}

/* p2p keys: (from, to, direction, seq); a send's time is its start, a receive's its end */
typedef struct {
    int from, to, dir, seq;
    double t;
} p2p;

static int cmp_p2p(const void *a, const void *b) {
    const p2p *x = a, *y = b;
    int c[4] = {x->from - y->from, x->to - y->to, x->dir - y->dir, x->seq - y->seq};
    for (int i = 0; i < 4; i++)
        if (c[i])
            return c[i] < 0 ? -1 : 1;
    return 0;
}

static void check_receives(const ah_trace_file *t, int raw, ah_trace_causality_counts *c) {
    p2p *s = ah_xcalloc((size_t)t->n + 1, sizeof(p2p)), *r = ah_xcalloc((size_t)t->n + 1, sizeof(p2p));
    int ns = 0, nr = 0;
    for (int i = 0; i < t->n; i++) {
        const ah_trace_item *v = &t->items[i];
        const ah_trace_event *e = &v->ev;
        if (e->peer < 0)
            continue;
        int grad = e->kind == AH_OP_SEND_GRADIENT || e->kind == AH_OP_RECV_GRADIENT;
        if (e->kind == AH_OP_SEND_ACTIVATION || e->kind == AH_OP_SEND_GRADIENT)
            s[ns++] = (p2p){e->rank, e->peer, grad, e->seq, at(t, raw, e->rank, v->ts)};
        else if (e->kind == AH_OP_RECV_ACTIVATION || e->kind == AH_OP_RECV_GRADIENT)
            r[nr++] = (p2p){e->peer, e->rank, grad, e->seq, at(t, raw, e->rank, v->ts + v->dur)};
        else if (e->kind ==
                 AH_OP_TIED_SYNC) { /* both: the exchange sends at its start, receives at its end */
            s[ns++] = (p2p){e->rank, e->peer, 2, e->seq, at(t, raw, e->rank, v->ts)};
            r[nr++] = (p2p){e->peer, e->rank, 2, e->seq, at(t, raw, e->rank, v->ts + v->dur)};
        }
    }
    qsort(s, (size_t)ns, sizeof(p2p), cmp_p2p);
    qsort(r, (size_t)nr, sizeof(p2p), cmp_p2p);
    for (int a = 0, b = 0; a < ns && b < nr;) {
        int k = cmp_p2p(&s[a], &r[b]);
        if (k) {
            k < 0 ? a++ : b++;
            continue;
        }
        c->receives++;
        if (r[b].t < s[a].t)
            violation(&c->receives_before_send, &c->worst_us, s[a].t - r[b].t);
        a++, b++;
    }
    free(s);
    free(r);
}

static const ah_trace_file *sort_file;
static int cmp_coll(const void *a, const void *b) {
    const ah_trace_item *x = &sort_file->items[*(const int *)a], *y = &sort_file->items[*(const int *)b];
    int c = strcmp(x->site, y->site);
    if (c)
        return c;
    if (x->ev.group != y->ev.group)
        return x->ev.group < y->ev.group ? -1 : 1;
    return (x->ev.seq > y->ev.seq) - (x->ev.seq < y->ev.seq);
}

static void check_collectives(const ah_trace_file *t, int raw, ah_trace_causality_counts *c) {
    int *ix = ah_xcalloc((size_t)t->n + 1, sizeof(int)), n = 0;
    for (int i = 0; i < t->n; i++) {
        ah_op_kind k = t->items[i].ev.kind;
        if (k == AH_OP_TP_ALLREDUCE || k == AH_OP_DP_ALLREDUCE || k == AH_OP_STEP_SYNC)
            ix[n++] = i;
    }
    sort_file = t;
    qsort(ix, (size_t)n, sizeof(int), cmp_coll);
    for (int a = 0, b; a < n; a = b) {
        double last_entry = -1e300, first_exit = 1e300;
        for (b = a; b < n && cmp_coll(&ix[a], &ix[b]) == 0; b++) {
            const ah_trace_item *v = &t->items[ix[b]];
            double s = at(t, raw, v->ev.rank, v->ts), e = at(t, raw, v->ev.rank, v->ts + v->dur);
            last_entry = s > last_entry ? s : last_entry;
            first_exit = e < first_exit ? e : first_exit;
        }
        if (b - a < 2)
            continue;
        c->collectives++;
        if (first_exit < last_entry)
            violation(&c->collective_order, &c->worst_us, last_entry - first_exit);
    }
    free(ix);
}

static void check_all(const ah_trace_file *t, int raw, ah_trace_causality_counts *c) {
    memset(c, 0, sizeof *c);
    check_receives(t, raw, c);
    check_collectives(t, raw, c);
    for (int i = 0; i < t->n_flows; i++) {
        const ah_trace_flow *f = &t->flows[i];
        double s = at(t, raw, f->from, f->s_ts), e = at(t, raw, f->to, f->f_ts);
        c->flows++;
        if (e < s)
            violation(&c->flows_backward, &c->worst_us, s - e);
    }
}

void ah_trace_causality_check(const ah_trace_file *t, ah_trace_causality *c) {
    memset(c, 0, sizeof *c);
    check_all(t, 0, &c->as_written);
    c->has_uncorrected = t->clock.present;
    if (c->has_uncorrected)
        check_all(t, 1, &c->uncorrected);
}
