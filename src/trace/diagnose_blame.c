/* Late arrivals (autohet/trace_diagnose.h): who everyone waited for. In
 * every collective instance the first member waits from its arrival to the
 * last member's; that window is followed back through the waits of the rank
 * that arrived last: where that rank was itself blocked in a receive before
 * its sender posted (or while the sender held the message), the window
 * passes to the sender; in a send completion before its receivers took
 * their messages, to the last receiver; in another collective before that
 * one's last arrival, to that one's straggler. Time it spent in transfers is
 * no one's lateness (slow links are diagnose_links.c) — except beyond a
 * transfer's expected time on a direction whose excess is the receiver's
 * alone, and in a send completion after its receivers had their messages:
 * there it was late to take delivery (stopped or descheduled), its own. The
 * rest — its compute and untraced work — is its own. Members arriving within
 * the clock's residual of the last (at least 5 us) share the window. A
 * rank's cost is the union of its own time that others waited for (the wall
 * time the job waited for it, however many waited); a rank whose cost is at
 * least twice its peers' (the ranks doing the same work: the median of
 * theirs; without peers the median rank's) is a late arrival, costing what
 * it holds beyond that. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/diagnose_internal.h"
#include "util/errors.h"

#define MAX_DEPTH 8

/* a stretch of a rank's own time that others waited for (us) */
typedef struct {
    double a, b;
    int late; /* late to take delivery */
} span;

typedef struct {
    span *v;
    int n, cap;
} spans;

typedef struct {
    spans *own;           /* [rank]: its own time that others waited for (overlapping where several waited) */
    double *own_s;        /* [rank]: their union, seconds: the wall time the job waited for its own work */
    double *delivery;     /* [rank]: of which late to take delivery (see below) */
    double *by_site;      /* [rank]: of which at the site below */
    int *site_item;       /* [rank]: an item of the site where it was blamed most */
    unsigned char *steps; /* [rank * S + step] */
    /* per item: a receive's transfer start and expected transfer time (us, -1 unknown); a send's receive */
    double *xfer_t0, *xfer_us;
    int *recv_of;
    unsigned char *slow_into; /* [sender * R + receiver]: transfers slow on the receiving end alone */
} blame_acc;

/* Transfers, from the link observations (diagnose_links.c): where each receive's transfer began and how
 * long it should take, and the directions whose excess is the receiver's: a pair's messages toward one end
 * lost over twice what the other direction lost (a slow link delays both ways; a rank that is stopped or
 * descheduled takes delivery late of what is sent to it, and its own messages still move), and over three
 * times what any other pair in the same roles lost that way (on a clean run gradients into a first stage
 * can lose more than activations out of it, on every replica alike) */
static void transfers(const dctx *c, blame_acc *b) {
    const ah_trace_item *e = c->a->items;
    int n = c->a->n_items, R = c->R;
    double *exc = ah_xcalloc((size_t)R * R + 1, sizeof(double));
    for (int i = 0; i < n; i++)
        b->xfer_t0[i] = b->xfer_us[i] = -1, b->recv_of[i] = -1;
    for (int i = 0; i < n; i++)
        if (c->send_of[i] >= 0)
            b->recv_of[c->send_of[i]] = i;
    for (int k = 0; k < c->d->n_obs; k++) {
        const ah_link_obs *o = &c->d->obs[k];
        int i = o->item;
        if (i < 0 || c->send_of[i] < 0)
            continue;
        b->xfer_t0[i] = e[i].ts + e[i].dur - o->us;
        b->xfer_us[i] = o->expected_us;
        int from = e[c->send_of[i]].ev.rank, to = e[i].ev.rank;
        if (o->expected_us >= 0 && o->us > o->expected_us && from < R && to < R)
            exc[from * R + to] += o->us - o->expected_us;
    }
    /* per pair of roles (peer groups), the most a pair lost that way and its sender, and the most a pair
     * of another sender lost: "any other pair in the same roles" in one pass, not one per pair */
    size_t RR = (size_t)R * R + 1;
    double *top1 = ah_xcalloc(RR, sizeof(double)), *top2 = ah_xcalloc(RR, sizeof(double));
    int *top1_from = ah_xcalloc(RR, sizeof(int));
    for (int p = 0; p < R; p++)
        for (int q = 0; q < R; q++) {
            double v = exc[p * R + q];
            size_t g = (size_t)c->peer_group[p] * R + c->peer_group[q];
            if (v <= 0)
                continue;
            if (v > top1[g]) {
                if (top1_from[g] != p)
                    top2[g] = top1[g];
                top1[g] = v, top1_from[g] = p;
            } else if (p != top1_from[g] && v > top2[g]) {
                top2[g] = v;
            }
        }
    for (int x = 0; x < R; x++)
        for (int y = 0; y < R; y++) {
            double v = exc[x * R + y];
            if (x == y || v <= 0)
                continue;
            size_t g = (size_t)c->peer_group[x] * R + c->peer_group[y];
            double same = top1_from[g] != x ? top1[g] : top2[g]; /* the most any other pair in the roles lost */
            b->slow_into[x * R + y] = v > 2 * exc[y * R + x] && v > 3 * same;
        }
    free(top1);
    free(top2);
    free(top1_from);
    free(exc);
}

/* the first item of rank r (in c->order) that ends after t (us) */
static int first_ending_after(const dctx *c, int r, double t) {
    int lo = c->rank_first[r], hi = c->rank_first[r + 1];
    while (lo < hi) { /* the engine's operations are sequential: ends increase with starts */
        int mid = (lo + hi) / 2;
        const ah_trace_item *v = &c->a->items[c->order[mid]];
        if (v->ts + v->dur <= t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo > c->rank_first[r] ? lo - 1 : lo;
}

/* a communication item of rank r (at position k of c->order) over [u0, u1): until when it waited for
 * someone (*who), and from when it was late to take delivery (*late; u1 none) */
static void comm_parts(const dctx *c, const blame_acc *b, int r, int k, double u0, double u1, double *until,
                       int *who, double *late) {
    const ah_trace_item *e = c->a->items, *v = &e[c->order[k]];
    int i = c->order[k];
    *until = u0, *who = -1, *late = u1;
    if (ah_diag_is_recv(
            v)) { /* waiting for the sender to post (or to move what it held), then the transfer */
        double s = b->xfer_t0[i] >= 0 ? b->xfer_t0[i] : c->send_of[i] >= 0 ? e[c->send_of[i]].ts : v->ts;
        *until = s < u1 ? s : u1;
        *who = v->ev.peer;
        if (b->xfer_us[i] >= 0 && v->ev.peer >= 0 && v->ev.peer < c->R && b->slow_into[v->ev.peer * c->R + r])
            *late = s + b->xfer_us[i] > u0 ? s + b->xfer_us[i] : u0;
    } else if (c->inst_of[i] >= 0 && c->inst[c->inst_of[i]].straggler != r) {
        double la = c->inst[c->inst_of[i]].la;
        *until = la < u1 ? la : u1;
        *who = c->inst[c->inst_of[i]].straggler;
    } else if (v->ev.kind == AH_OP_SEND_WAIT) {
        /* completing the sends since the last wait: waiting for their receivers until the last of them took
         * its message (and its expected transfer time for the news to return); after that the rank's own */
        double t = -1, slack = 0;
        for (int q = k - 1; q >= c->rank_first[r]; q--) {
            const ah_trace_item *x = &e[c->order[q]];
            int rv = b->recv_of[c->order[q]];
            if (x->ev.kind == AH_OP_SEND_WAIT)
                break;
            if (rv < 0 || e[rv].ts + e[rv].dur <= t)
                continue;
            t = e[rv].ts + e[rv].dur, *who = e[rv].ev.rank, slack = b->xfer_us[rv] > 0 ? b->xfer_us[rv] : 0;
        }
        if (*who >= 0) {
            *until = t < u1 ? (t > u0 ? t : u0) : u1;
            *late = t + slack > u0 ? t + slack : u0;
        }
    }
}

static void add_span(spans *s, double a, double b, int late) {
    if (b <= a)
        return;
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->v = ah_xrealloc(s->v, sizeof(span) * (size_t)s->cap);
    }
    s->v[s->n++] = (span){a, b, late};
}

static void blame(const dctx *c, blame_acc *b, int r, double t0, double t1, int depth, int step,
                  int site_item) {
    if (t1 <= t0)
        return;
    double at = t0,
           own = 0; /* own: [at, ...) not yet seen; the window less its communication, plus lateness */
    const ah_trace_item *e = c->a->items;
    for (int k = first_ending_after(c, r, t0); depth < MAX_DEPTH && k < c->rank_first[r + 1]; k++) {
        const ah_trace_item *v = &e[c->order[k]];
        if (v->ts >= t1)
            break;
        double u0 = v->ts > t0 ? v->ts : t0, u1 = v->ts + v->dur < t1 ? v->ts + v->dur : t1;
        if (u1 <= u0 || !v->comm)
            continue; /* its own compute */
        double until, late;
        int who;
        comm_parts(c, b, r, k, u0, u1, &until, &who, &late);
        /* communication is waiting or transfer, not its own work, unless it was late to take delivery */
        add_span(&b->own[r], at, u0, 0);
        add_span(&b->own[r], late, u1, 1);
        own += (u0 > at ? u0 - at : 0) + (u1 - late);
        at = u1;
        if (who >= 0 && until > u0)
            blame(c, b, who, u0, until, depth + 1, step, site_item);
    }
    add_span(&b->own[r], at, t1, 0);
    own += t1 > at ? t1 - at : 0;
    if (own > 0) {
        b->steps[r * c->S + step] = 1;
        if (own * 1e-6 > b->by_site[r])
            b->by_site[r] = own * 1e-6, b->site_item[r] = site_item;
    }
}

static int cmp_span(const void *pa, const void *pb) {
    const span *x = pa, *y = pb;
    return (x->a > y->a) - (x->a < y->a);
}

/* the union of a rank's spans, sorted by start (of its late ones alone when late_only), seconds */
static double union_s(const spans *s, int late_only) {
    double tot = 0, hi = -1e300;
    for (int k = 0; k < s->n; k++) {
        if (late_only && !s->v[k].late)
            continue;
        double a = s->v[k].a > hi ? s->v[k].a : hi;
        if (s->v[k].b > a)
            tot += s->v[k].b - a;
        hi = s->v[k].b > hi ? s->v[k].b : hi;
    }
    return tot * 1e-6;
}

static void late_finding(dctx *c, const blame_acc *b, int r, double med) {
    ah_finding *f = ah_diag_add(c, AH_DIAG_LATE_ARRIVAL);
    f->ranks[f->n_ranks++] = r;
    const ah_trace_item *v = b->site_item[r] >= 0 ? &c->a->items[b->site_item[r]] : NULL;
    snprintf(f->op, sizeof f->op, "%s", v ? v->site : "collectives");
    ah_diag_set_steps(f, b->steps + (size_t)r * c->S, c->S);
    f->measured_s = b->own_s[r], f->expected_s = med, f->cost_s = b->own_s[r] - med;
    snprintf(
        f->evidence, sizeof f->evidence,
        "others waited %.3f ms at collectives for rank %d's own work (compute, untraced work, %.3f ms of it "
        "late to take delivery of messages that had arrived), after following the waits it was itself in; "
        "its peers (the same work, else all ranks) were waited for %.3f ms (median)%s%s",
        b->own_s[r] * 1e3, r, b->delivery[r] * 1e3, med * 1e3, v ? "; most at " : "", v ? v->site : "");
    f->share = c->wall_s > 0 ? f->cost_s / c->wall_s : 0;
    f->significant = b->own_s[r] >= 2 * med && f->share >= c->d->threshold;
}

/* the ranks arriving last (within tol us of the last arrival), each blamed for its share of the window */
static void blame_instance(const dctx *c, blame_acc *b, const dinst *in, double tol) {
    int late[AH_DIAG_MAX_RANKS], items[AH_DIAG_MAX_RANKS], n = 0;
    for (int q = in->first; q < in->first + in->n && n < AH_DIAG_MAX_RANKS; q++) {
        const ah_trace_item *v = &c->a->items[c->inst_items[q]];
        if (v->ts >= in->la - tol)
            late[n] = v->ev.rank, items[n++] = c->inst_items[q];
    }
    /* each tied straggler takes 1/n of the window: a sub-window of it */
    double w = (in->la - in->fa) / (n ? n : 1);
    for (int k = 0; k < n; k++)
        blame(c, b, late[k], in->la - w * (k + 1), in->la - w * k, 0, c->step[items[k]], items[k]);
}

void ah_diag_late_arrivals(dctx *c) {
    size_t n = (size_t)c->a->n_items + 1, R = (size_t)c->R + 1;
    blame_acc b = {ah_xcalloc(R, sizeof(spans)),  ah_xcalloc(R, sizeof(double)),
                   ah_xcalloc(R, sizeof(double)), ah_xcalloc(R, sizeof(double)),
                   ah_xcalloc(R, sizeof(int)),    ah_xcalloc((size_t)c->R * c->S + 1, 1),
                   ah_xcalloc(n, sizeof(double)), ah_xcalloc(n, sizeof(double)),
                   ah_xcalloc(n, sizeof(int)),    ah_xcalloc(R * R, 1)};
    transfers(c, &b);
    for (int r = 0; r < c->R; r++)
        b.site_item[r] = -1;
    double tol = 5;
    for (int r = 0; r < c->a->clock.n; r++)
        tol = c->a->clock.ranks[r].residual_s * 1e6 > tol ? c->a->clock.ranks[r].residual_s * 1e6 : tol;
    for (int k = 0; k < c->n_inst; k++)
        blame_instance(c, &b, &c->inst[k], tol);
    for (int r = 0; r < c->R; r++) {
        if (b.own[r].n > 0) /* qsort of no array: undefined */
            qsort(b.own[r].v, (size_t)b.own[r].n, sizeof(span), cmp_span);
        b.own_s[r] = union_s(&b.own[r], 0);
        b.delivery[r] = union_s(&b.own[r], 1);
        free(b.own[r].v);
    }
    double *tmp = ah_xcalloc((size_t)c->R + 1, sizeof(double));
    for (int r = 0; r < c->R; r++) {
        int m = 0;
        for (int q = 0; q < c->R; q++)
            if (q != r && c->peer_group[q] == c->peer_group[r])
                tmp[m++] = b.own_s[q];
        if (m == 0)
            for (int q = 0; q < c->R; q++)
                tmp[m++] = b.own_s[q];
        double med = ah_diag_median(tmp, m);
        if (b.own_s[r] > med && c->R > 1)
            late_finding(c, &b, r, med);
    }
    free(tmp);
    free(b.own);
    free(b.own_s);
    free(b.delivery);
    free(b.xfer_t0);
    free(b.xfer_us);
    free(b.recv_of);
    free(b.slow_into);
    free(b.by_site);
    free(b.site_item);
    free(b.steps);
}
