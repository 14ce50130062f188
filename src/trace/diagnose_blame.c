/* Late arrivals (autohet/trace_diagnose.h): who everyone waited for. In
 * every collective instance the first member waits from its arrival to the
 * last member's; that window is followed back through the waits of the rank
 * that arrived last: where that rank was itself blocked in a receive before
 * its sender posted, the window passes to the sender; where it was blocked
 * in another collective before that one's last arrival, to that one's
 * straggler; time it spent in transfers is no one's lateness (slow links
 * are diagnose_links.c); the rest — its compute and untraced work — is its
 * own. Members arriving within the clock's residual of the last (at least
 * 5 us) share the window. A rank whose own share is at least twice its
 * peers' (the ranks doing the same work: the median of theirs; without
 * peers the median rank's) is a late arrival, costing what it holds beyond
 * that. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/diagnose_internal.h"
#include "util/errors.h"

#define MAX_DEPTH 8

typedef struct {
    double *own;          /* [rank]: seconds of waits blamed on the rank's own work */
    double *by_site;      /* [rank]: of which at the site below */
    int *site_item;       /* [rank]: an item of the site where it was blamed most */
    unsigned char *steps; /* [rank * S + step] */
} blame_acc;

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

static void blame(const dctx *c, blame_acc *b, int r, double t0, double t1, int depth, int step, int site_item) {
    if (t1 <= t0)
        return;
    double rest = t1 - t0;
    const ah_trace_item *e = c->a->items;
    for (int k = first_ending_after(c, r, t0); depth < MAX_DEPTH && k < c->rank_first[r + 1]; k++) {
        int i = c->order[k];
        const ah_trace_item *v = &e[i];
        if (v->ts >= t1)
            break;
        double u0 = v->ts > t0 ? v->ts : t0, u1 = v->ts + v->dur < t1 ? v->ts + v->dur : t1;
        if (u1 <= u0)
            continue;
        double until = u0; /* [u0, until): waiting for someone; [until, u1): transfer */
        int who = -1;
        if (ah_diag_is_recv(v)) {
            double s = c->send_of[i] >= 0 ? e[c->send_of[i]].ts : v->ts;
            until = s < u1 ? s : u1;
            who = v->ev.peer;
        } else if (c->inst_of[i] >= 0 && c->inst[c->inst_of[i]].straggler != r) {
            double la = c->inst[c->inst_of[i]].la;
            until = la < u1 ? la : u1;
            who = c->inst[c->inst_of[i]].straggler;
        } else if (!v->comm) {
            continue; /* its own compute */
        }
        rest -= u1 - u0; /* communication: waiting or transfer, not its own work */
        if (who >= 0 && until > u0)
            blame(c, b, who, u0, until, depth + 1, step, site_item);
    }
    if (rest > 0) {
        b->own[r] += rest * 1e-6;
        b->steps[r * c->S + step] = 1;
        if (rest * 1e-6 > b->by_site[r])
            b->by_site[r] = rest * 1e-6, b->site_item[r] = site_item;
    }
}

static void late_finding(dctx *c, const blame_acc *b, int r, double med) {
    ah_finding *f = ah_diag_add(c, AH_DIAG_LATE_ARRIVAL);
    f->ranks[f->n_ranks++] = r;
    const ah_trace_item *v = b->site_item[r] >= 0 ? &c->a->items[b->site_item[r]] : NULL;
    snprintf(f->op, sizeof f->op, "%s", v ? v->site : "collectives");
    ah_diag_set_steps(f, b->steps + (size_t)r * c->S, c->S);
    f->measured_s = b->own[r], f->expected_s = med, f->cost_s = b->own[r] - med;
    snprintf(f->evidence, sizeof f->evidence,
             "others waited %.3f ms at collectives for rank %d's own work (compute, untraced work), after "
             "following the waits it was itself in; its peers (the same work, else all ranks) were waited for "
             "%.3f ms (median)%s%s",
             b->own[r] * 1e3, r, med * 1e3, v ? "; most at " : "", v ? v->site : "");
    f->share = c->wall_s > 0 ? f->cost_s / c->wall_s : 0;
    f->significant = b->own[r] >= 2 * med && f->share >= c->d->threshold;
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
    blame_acc b = {ah_xcalloc((size_t)c->R + 1, sizeof(double)), ah_xcalloc((size_t)c->R + 1, sizeof(double)),
                   ah_xcalloc((size_t)c->R + 1, sizeof(int)), ah_xcalloc((size_t)c->R * c->S + 1, 1)};
    for (int r = 0; r < c->R; r++)
        b.site_item[r] = -1;
    double tol = 5;
    for (int r = 0; r < c->a->clock.n; r++)
        tol = c->a->clock.ranks[r].residual_s * 1e6 > tol ? c->a->clock.ranks[r].residual_s * 1e6 : tol;
    for (int k = 0; k < c->n_inst; k++)
        blame_instance(c, &b, &c->inst[k], tol);
    double *tmp = ah_xcalloc((size_t)c->R + 1, sizeof(double));
    for (int r = 0; r < c->R; r++) {
        int m = 0;
        for (int q = 0; q < c->R; q++)
            if (q != r && c->peer_group[q] == c->peer_group[r])
                tmp[m++] = b.own[q];
        if (m == 0)
            for (int q = 0; q < c->R; q++)
                tmp[m++] = b.own[q];
        double med = ah_diag_median(tmp, m);
        if (b.own[r] > med && c->R > 1)
            late_finding(c, &b, r, med);
    }
    free(tmp);
    free(b.own);
    free(b.by_site);
    free(b.site_item);
    free(b.steps);
}
