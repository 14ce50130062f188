/* The stack-level breakdown of a trace's collectives (analyze --stack,
 * autohet/trace_analysis.h, docs/analyze.md).
 *
 * Each instance of a collective (the events of one site, communicator and
 * seq on its members) is split into the application level (arrival skew:
 * the last rank's start - the first rank's start), the MPI level (the
 * alpha-beta cost of the algorithm Open MPI runs, mpi_model.c) and the
 * residual, so that the three add up to the instance's measured time, from
 * the first arrival to the last completion. Per rank: how much of its
 * communication is hidden under compute, its idle time by cause and how
 * often it was the straggler. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autohet/trace_analysis.h"
#include "util/errors.h"
#include "util/intervals.h"

static int is_collective(const ah_trace_item *v) {
    ah_op_kind k = v->ev.kind;
    return v->comm && (k == AH_OP_TP_ALLREDUCE || k == AH_OP_DP_ALLREDUCE || k == AH_OP_STEP_SYNC ||
                       k == AH_OP_TIED_SYNC);
}

static const ah_trace_item *sort_items; /* qsort has no context argument */

/* call sites in kind and layer order, then instances by seq, members by rank */
static int cmp_member(const void *pa, const void *pb) {
    const ah_trace_item *x = &sort_items[*(const int *)pa], *y = &sort_items[*(const int *)pb];
    if (x->ev.kind != y->ev.kind)
        return (x->ev.kind > y->ev.kind) - (x->ev.kind < y->ev.kind);
    if (x->ev.layer_first != y->ev.layer_first)
        return (x->ev.layer_first > y->ev.layer_first) - (x->ev.layer_first < y->ev.layer_first);
    int c = strcmp(x->site, y->site);
    if (c)
        return c;
    if (x->ev.group != y->ev.group)
        return (x->ev.group > y->ev.group) - (x->ev.group < y->ev.group);
    if (x->ev.seq != y->ev.seq)
        return (x->ev.seq > y->ev.seq) - (x->ev.seq < y->ev.seq);
    return (x->ev.rank > y->ev.rank) - (x->ev.rank < y->ev.rank);
}

static int same_site(const ah_trace_item *x, const ah_trace_item *y) {
    return x->ev.kind == y->ev.kind && x->ev.group == y->ev.group && !strcmp(x->site, y->site);
}

/* Per rank, merged intervals of one class of events: compute, communication,
 * receives, send_wait. */
typedef struct {
    double *v;
    int *off, *n; /* rank r's pairs are v[2 * off[r] ..], n[r] of them */
} rank_intervals;

enum { CLS_COMPUTE, CLS_COMM, CLS_RECV, CLS_SEND_WAIT, CLS_N };

static int item_class(const ah_trace_item *v) {
    if (!v->comm)
        return CLS_COMPUTE;
    if (v->ev.kind == AH_OP_RECV_ACTIVATION || v->ev.kind == AH_OP_RECV_GRADIENT)
        return CLS_RECV;
    return v->ev.kind == AH_OP_SEND_WAIT ? CLS_SEND_WAIT : -1;
}

static void build_intervals(const ah_trace_analysis *a, int cls, rank_intervals *ri) {
    int n = a->n_items, ranks = a->ranks;
    ri->v = ah_xcalloc(2 * (size_t)n + 2, sizeof(double));
    ri->off = ah_xcalloc((size_t)ranks + 1, sizeof(int));
    ri->n = ah_xcalloc((size_t)ranks + 1, sizeof(int));
    int k = 0;
    for (int r = 0; r < ranks; r++) {
        ri->off[r] = k;
        int m = 0;
        for (int i = 0; i < n; i++) {
            const ah_trace_item *v = &a->items[i];
            if (v->ev.rank != r || (cls == CLS_COMM ? !v->comm : item_class(v) != cls))
                continue;
            ri->v[2 * (k + m)] = v->ts;
            ri->v[2 * (k + m) + 1] = v->ts + v->dur;
            m++;
        }
        ri->n[r] = ah_intervals_merge(ri->v + 2 * k, m);
        k += ri->n[r];
    }
}

static void free_intervals(rank_intervals *ri) {
    free(ri->v);
    free(ri->off);
    free(ri->n);
}

/* length of [t0, t1) not under rank r's compute */
static double exposed(const rank_intervals *compute, int r, double t0, double t1) {
    if (!(t1 > t0))
        return 0;
    double iv[2] = {t0, t1};
    return ah_intervals_minus(iv, 1, compute->v + 2 * compute->off[r], compute->n[r]);
}

/* per rank, the ends of its optimizer steps, ascending */
typedef struct {
    double *end;
    int *off, *n;
} step_ends;

static int cmp_double(const void *pa, const void *pb) {
    double x = *(const double *)pa, y = *(const double *)pb;
    return (x > y) - (x < y);
}

static void build_step_ends(const ah_trace_analysis *a, step_ends *se) {
    se->end = ah_xcalloc((size_t)a->n_items + 1, sizeof(double));
    se->off = ah_xcalloc((size_t)a->ranks + 1, sizeof(int));
    se->n = ah_xcalloc((size_t)a->ranks + 1, sizeof(int));
    int k = 0;
    for (int r = 0; r < a->ranks; r++) {
        se->off[r] = k;
        for (int i = 0; i < a->n_items; i++) {
            const ah_trace_item *v = &a->items[i];
            if (v->ev.rank == r && !v->comm && v->ev.kind == AH_OP_OPTIMIZER)
                se->end[k + se->n[r]++] = v->ts + v->dur;
        }
        qsort(se->end + k, (size_t)se->n[r], sizeof(double), cmp_double);
        k += se->n[r];
    }
}

/* optimizer steps rank r completed by time t */
static int steps_before(const step_ends *se, int r, double t) {
    int lo = 0, hi = se->n[r];
    const double *e = se->end + se->off[r];
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (e[mid] <= t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* one instance: members idx[b0, b1) of the sorted collectives */
static void build_instance(const ah_trace_analysis *a, const int *idx, int b0, int b1, const ah_stack_options *o,
                           ah_trace_stack *s, const rank_intervals *compute, const step_ends *se) {
    ah_stack_instance *in = &s->inst[s->n_inst++];
    const ah_trace_item *lead = &a->items[idx[b0]];
    memset(in, 0, sizeof *in);
    in->site = s->n_sites - 1;
    in->seq = lead->ev.seq;
    in->first_member = s->n_members;
    in->n_members = b1 - b0;
    in->bytes = lead->ev.bytes;
    in->first_arrival_us = INFINITY;
    in->last_arrival_us = in->last_end_us = -INFINITY;
    for (int b = b0; b < b1; b++) {
        const ah_trace_item *v = &a->items[idx[b]];
        in->first_arrival_us = fmin(in->first_arrival_us, v->ts);
        in->last_end_us = fmax(in->last_end_us, v->ts + v->dur);
        if (v->ts > in->last_arrival_us) {
            in->last_arrival_us = v->ts;
            in->straggler = v->ev.rank; /* members are by rank: a tie keeps the lowest */
        }
    }
    for (int b = b0; b < b1; b++) {
        const ah_trace_item *v = &a->items[idx[b]];
        s->members[s->n_members++] = (ah_stack_member){v->ev.rank, v->ts, v->ts + v->dur, in->last_arrival_us - v->ts};
        double idle = exposed(compute, v->ev.rank, v->ts, fmin(in->last_arrival_us, v->ts + v->dur));
        if (v->ev.kind == AH_OP_STEP_SYNC)
            s->ranks[v->ev.rank].idle_step_us += idle;
        else
            s->ranks[v->ev.rank].idle_collective_us += idle;
    }
    int p = in->n_members > lead->ev.ranks ? in->n_members : lead->ev.ranks;
    in->algorithm = lead->ev.kind == AH_OP_TIED_SYNC ? AH_MPI_SENDRECV
                    : o->mpi_algorithm > 0          ? (ah_mpi_alg)o->mpi_algorithm
                                                    : ah_mpi_allreduce_decide(p, in->bytes);
    /* the engine sums floats; step_sync reduces two doubles */
    int type_size = lead->ev.kind == AH_OP_STEP_SYNC ? 8 : 4;
    in->mpi_us = ah_mpi_alg_us(in->algorithm, p, in->bytes, type_size, o->segment_bytes, &s->link, &in->ran);
    in->measured_us = in->last_end_us - in->first_arrival_us;
    in->skew_us = in->last_arrival_us - in->first_arrival_us;
    in->residual_us = in->measured_us - in->skew_us - in->mpi_us;
    in->step = steps_before(se, in->straggler, in->last_arrival_us);
    s->ranks[in->straggler].straggles++;
    s->sites[in->site].alg_pairs |= 1ull << (8 * in->algorithm + in->ran);
}

static void finish_site(ah_trace_stack *s, int first_inst) {
    ah_stack_site *st = &s->sites[s->n_sites - 1];
    int *count = ah_xcalloc((size_t)s->n_ranks + 1, sizeof(int));
    double bytes = 0;
    for (int i = first_inst; i < s->n_inst; i++) {
        const ah_stack_instance *in = &s->inst[i];
        st->instances++;
        bytes += in->bytes;
        st->measured_us += in->measured_us;
        st->skew_us += in->skew_us;
        st->mpi_us += in->mpi_us;
        st->residual_us += in->residual_us;
        if (++count[in->straggler] > st->straggler_count || (count[in->straggler] == st->straggler_count &&
                                                             in->straggler < st->straggler)) {
            st->straggler_count = count[in->straggler];
            st->straggler = in->straggler;
        }
    }
    if (st->instances)
        st->bytes_per_call = bytes / st->instances;
    free(count);
}

static void build_instances(const ah_trace_analysis *a, const ah_stack_options *o, ah_trace_stack *s,
                            const rank_intervals *compute) {
    int n = a->n_items, m = 0;
    step_ends se;
    build_step_ends(a, &se);
    int *idx = ah_xcalloc((size_t)n + 1, sizeof(int));
    for (int i = 0; i < n; i++)
        if (is_collective(&a->items[i]))
            idx[m++] = i;
    sort_items = a->items;
    qsort(idx, (size_t)m, sizeof(int), cmp_member);
    s->sites = ah_xcalloc((size_t)m + 1, sizeof(ah_stack_site));
    s->inst = ah_xcalloc((size_t)m + 1, sizeof(ah_stack_instance));
    s->members = ah_xcalloc((size_t)m + 1, sizeof(ah_stack_member));
    int site_first_inst = 0;
    for (int b0 = 0; b0 < m;) {
        const ah_trace_item *v = &a->items[idx[b0]];
        if (b0 == 0 || !same_site(v, &a->items[idx[b0 - 1]])) {
            if (s->n_sites > 0)
                finish_site(s, site_first_inst);
            ah_stack_site *st = &s->sites[s->n_sites++];
            snprintf(st->site, sizeof st->site, "%s", v->site);
            st->kind = v->ev.kind;
            st->group = v->ev.group;
            st->ranks = v->ev.ranks;
            st->bytes_per_call = v->ev.bytes;
            site_first_inst = s->n_inst;
        }
        int b1 = b0 + 1;
        while (b1 < m && same_site(&a->items[idx[b1]], v) && a->items[idx[b1]].ev.seq == v->ev.seq)
            b1++;
        if (b1 - b0 > 1) /* one member (a clipped or one-rank call) is no instance */
            build_instance(a, idx, b0, b1, o, s, compute, &se);
        b0 = b1;
    }
    if (s->n_sites > 0)
        finish_site(s, site_first_inst);
    free(idx);
    free(se.end);
    free(se.off);
    free(se.n);
}

/* per rank: communication hidden under compute, receives and send_wait not under it */
static void rank_overlap(ah_trace_stack *s, const rank_intervals *ri) {
    for (int r = 0; r < s->n_ranks; r++) {
        ah_stack_rank *q = &s->ranks[r];
        const double *cv = ri[CLS_COMPUTE].v + 2 * ri[CLS_COMPUTE].off[r];
        int nc = ri[CLS_COMPUTE].n[r];
        const double *mv = ri[CLS_COMM].v + 2 * ri[CLS_COMM].off[r];
        q->comm_us = ah_intervals_length(mv, ri[CLS_COMM].n[r]);
        q->hidden_us = q->comm_us - ah_intervals_minus(mv, ri[CLS_COMM].n[r], cv, nc);
        q->overlap_pct = q->comm_us > 0 ? 100 * q->hidden_us / q->comm_us : 0;
        q->idle_recv_us =
            ah_intervals_minus(ri[CLS_RECV].v + 2 * ri[CLS_RECV].off[r], ri[CLS_RECV].n[r], cv, nc);
        q->idle_step_us += ah_intervals_minus(ri[CLS_SEND_WAIT].v + 2 * ri[CLS_SEND_WAIT].off[r],
                                              ri[CLS_SEND_WAIT].n[r], cv, nc);
    }
}

int ah_trace_stack_build(const ah_trace_analysis *a, const ah_stack_options *o, ah_trace_stack *s, char *err,
                         size_t errlen) {
    memset(s, 0, sizeof *s);
    if (o->comm_profile) {
        if (ah_link_model_read(o->comm_profile, &s->link, err, errlen) != 0)
            return -1;
    } else {
        ah_link_model_default(&s->link);
    }
    s->mpi_algorithm = o->mpi_algorithm;
    s->segment_bytes = o->segment_bytes;
    if (o->mpi_algorithm > 0)
        snprintf(s->mpi_source, sizeof s->mpi_source, "coll_tuned_allreduce_algorithm %d (%s, from %s)",
                 o->mpi_algorithm, ah_mpi_alg_name((ah_mpi_alg)o->mpi_algorithm),
                 o->mpi_algorithm_from ? o->mpi_algorithm_from : "the caller");
    else
        snprintf(s->mpi_source, sizeof s->mpi_source, "Open MPI 4.1 coll_tuned fixed decision rules");
    s->n_ranks = a->ranks;
    s->ranks = ah_xcalloc((size_t)a->ranks + 1, sizeof(ah_stack_rank));
    rank_intervals ri[CLS_N];
    for (int c = 0; c < CLS_N; c++)
        build_intervals(a, c, &ri[c]);
    build_instances(a, o, s, &ri[CLS_COMPUTE]);
    rank_overlap(s, ri);
    for (int c = 0; c < CLS_N; c++)
        free_intervals(&ri[c]);
    return 0;
}

void ah_trace_stack_free(ah_trace_stack *s) {
    free(s->sites);
    free(s->inst);
    free(s->members);
    free(s->ranks);
    memset(s, 0, sizeof *s);
}
