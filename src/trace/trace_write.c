/* The trace record, its recorder and the one Chrome-trace writer of the
 * engine and the simulator (autohet/trace.h, docs/analyze.md). */
#include "autohet/trace.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/errors.h"
#include "util/json_file.h"

_Static_assert(sizeof(ah_trace_event) == 3 * sizeof(double) + 12 * sizeof(int), "records have no padding");


const char *ah_ckpt_trace_tier_name(int tier) {
    static const char *const names[AH_CKPT_TRACE_TIERS] = {"memory", "disk", "cloud", "wait"};
    return tier >= 0 && tier < AH_CKPT_TRACE_TIERS ? names[tier] : NULL;
}

const char *ah_trace_site_name(const ah_trace_event *e, char *buf, size_t n) {
    const char *k = ah_op_kind_name(e->kind);
    if (e->kind == AH_OP_DP_ALLREDUCE && e->layer_last > e->layer_first)
        snprintf(buf, n, "%s layers %d-%d", k, e->layer_first, e->layer_last - 1);
    else if (e->kind == AH_OP_CHECKPOINT && ah_ckpt_trace_tier_name(e->bucket))
        snprintf(buf, n, "%s %s", k, ah_ckpt_trace_tier_name(e->bucket));
    else
        snprintf(buf, n, "%s", k ? k : "unknown");
    return buf;
}

int ah_trace_tid(ah_stream s, int lane) {
    return (int)s + AH_STREAMS * lane;
}

/* ---------------------------------------------------------------- recording */

void ah_trace_recorder_init(ah_trace_recorder *r, int rank) {
    memset(r, 0, sizeof *r);
    r->rank = rank;
}

void ah_trace_recorder_free(ah_trace_recorder *r) {
    free(r->ev);
    memset(r, 0, sizeof *r);
}

ah_trace_event *ah_trace_record(ah_trace_recorder *r, ah_op_kind kind, double t0, double t1, int site,
                                int micro_batch) {
    if (!r->on)
        return NULL;
    if (r->n == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 1024;
        r->ev = ah_xrealloc(r->ev, sizeof(ah_trace_event) * (size_t)r->cap);
    }
    int s = site >= 0 && site < AH_TRACE_SITES ? site : AH_TRACE_SITES - 1;
    ah_trace_event *e = &r->ev[r->n++];
    *e = (ah_trace_event){.t0 = t0,
                          .t1 = t1,
                          .rank = r->rank,
                          .kind = kind,
                          .micro_batch = micro_batch,
                          .layer_first = -1,
                          .layer_last = -1,
                          .bucket = -1,
                          .ranks = 1,
                          .group = r->rank,
                          .peer = -1,
                          .site = site,
                          .seq = r->site_seq[s]++};
    return e;
}

/* ------------------------------------------------------------------ writing */

typedef struct {
    int ev;
    int track; /* rank * AH_STREAMS + stream */
    long long s_ns, e_ns;
} item;

static int cmp_item(const void *a, const void *b) {
    const item *x = a, *y = b;
    if (x->track != y->track)
        return x->track < y->track ? -1 : 1;
    if (x->s_ns != y->s_ns)
        return x->s_ns < y->s_ns ? -1 : 1;
    if (x->e_ns != y->e_ns)
        return x->e_ns > y->e_ns ? -1 : 1; /* the enclosing one first */
    return (x->ev > y->ev) - (x->ev < y->ev);
}

static long long to_ns(double s) {
    double ns = s * 1e9;
    return ns > 9.0e18 ? (long long)9.0e18 : ns < -9.0e18 ? -(long long)9.0e18 : llround(ns);
}

/* integer nanoseconds as microseconds with three decimals (exact, locale-free) */
static void put_us(FILE *f, long long ns) {
    unsigned long long a = ns < 0 ? 0ULL - (unsigned long long)ns : (unsigned long long)ns;
    fprintf(f, "%s%llu.%03llu", ns < 0 ? "-" : "", a / 1000ULL, a % 1000ULL);
}

/* Sorted items with a lane each: greedy in start order, so a track gets as
 * many lanes as it has operations overlapping at once (events of one thread
 * must be disjoint or nested). */
static item *sorted_items(const ah_trace_event *ev, int n, const ah_trace_doc *d, int **lane_out, char *err,
                          size_t errlen) {
    item *it = ah_xcalloc((size_t)n + 1, sizeof(item));
    for (int i = 0; i < n; i++) {
        const ah_trace_event *e = &ev[i];
        if (e->rank < 0 || e->rank >= d->n_ranks || (int)e->kind < 0 || e->kind >= AH_OP_KINDS ||
            !isfinite(e->t0) || !isfinite(e->t1)) {
            ah_errf(err, errlen, "trace event %d: rank %d of %d, kind %d, times %g..%g: not writable", i,
                    e->rank, d->n_ranks, (int)e->kind, e->t0, e->t1);
            free(it);
            return NULL;
        }
        it[i] = (item){i, e->rank * AH_STREAMS + (int)ah_op_kind_stream(e->kind),
                       to_ns(e->t0 - d->origin_s), to_ns(e->t1 - d->origin_s)};
        if (it[i].e_ns < it[i].s_ns)
            it[i].e_ns = it[i].s_ns;
    }
    qsort(it, (size_t)n, sizeof(item), cmp_item);
    int *lane = ah_xcalloc((size_t)n + 1, sizeof(int)), cap = 8;
    long long *lane_end = ah_xcalloc((size_t)cap, sizeof(long long));
    for (int k = 0, lanes = 0; k < n; k++) {
        if (k == 0 || it[k].track != it[k - 1].track)
            lanes = 0;
        int l = 0;
        while (l < lanes && lane_end[l] > it[k].s_ns)
            l++;
        if (l == lanes) {
            if (lanes == cap) {
                cap *= 2;
                lane_end = ah_xrealloc(lane_end, sizeof(long long) * (size_t)cap);
            }
            lanes++;
        }
        lane_end[l] = it[k].e_ns;
        lane[k] = l;
    }
    free(lane_end);
    *lane_out = lane;
    return it;
}

static void write_threads(FILE *f, const item *it, const int *lane, int n, const ah_trace_doc *d) {
    for (int r = 0; r < d->n_ranks; r++) {
        const ah_trace_rank *q = d->ranks ? &d->ranks[r] : NULL;
        char name[512];
        int len = q ? snprintf(name, sizeof name, "rank %d (replica %d, stage %d, tp %d)", r, q->replica,
                               q->stage, q->tp_rank)
                    : snprintf(name, sizeof name, "rank %d", r);
        if (q && q->where && len > 0 && (size_t)len < sizeof name)
            snprintf(name + len, sizeof name - (size_t)len, " on %s", q->where);
        fprintf(f, "%s{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":",
                r ? ",\n" : "\n", r);
        ah_json_put_string(f, name);
        fprintf(f, "}},\n{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":%d,\"tid\":0,"
                   "\"args\":{\"sort_index\":%d}}", r, r);
    }
    /* threads: compute always, every other (stream, lane) that has events */
    int *lanes = ah_xcalloc((size_t)d->n_ranks * AH_STREAMS + 1, sizeof(int));
    for (int k = 0; k < n; k++)
        if (lane[k] + 1 > lanes[it[k].track])
            lanes[it[k].track] = lane[k] + 1;
    for (int t = 0; t < d->n_ranks * AH_STREAMS; t++) {
        int r = t / AH_STREAMS, s = t % AH_STREAMS;
        for (int l = 0; l < (s == AH_STREAM_COMPUTE && !lanes[t] ? 1 : lanes[t]); l++) {
            int tid = ah_trace_tid((ah_stream)s, l);
            fprintf(f, ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s",
                    r, tid, ah_stream_name((ah_stream)s));
            if (l > 0)
                fprintf(f, " #%d", l + 1);
            fprintf(f, "\"}},\n{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":%d,\"tid\":%d,"
                       "\"args\":{\"sort_index\":%d}}", r, tid, s * 1000 + l);
        }
    }
    free(lanes);
}

static void write_op(FILE *f, const ah_trace_event *e, const item *it, int lane) {
    char site[64], mb[24] = "";
    ah_trace_site_name(e, site, sizeof site);
    if (e->micro_batch >= 0)
        snprintf(mb, sizeof mb, " mb%d", e->micro_batch);
    ah_stream s = ah_op_kind_stream(e->kind);
    const char *cat = e->kind == AH_OP_CHECKPOINT ? "checkpoint" : s == AH_STREAM_COMPUTE ? "compute" : "communication";
    fprintf(f, ",\n{\"ph\":\"X\",\"name\":\"%s%s\",\"cat\":\"%s\",\"pid\":%d,\"tid\":%d,\"ts\":", site, mb, cat,
            e->rank, ah_trace_tid(s, lane));
    put_us(f, it->s_ns);
    fputs(",\"dur\":", f);
    put_us(f, it->e_ns - it->s_ns);
    fprintf(f,
            ",\"args\":{\"kind\":\"%s\",\"site\":\"%s\",\"micro_batch\":%d,\"layers\":[%d,%d],\"bucket\":%d,"
            "\"bytes\":%.0f,\"ranks\":%d,\"group\":%d,\"peer\":%d,\"seq\":%d}}",
            ah_op_kind_name(e->kind), site, e->micro_batch, e->layer_first, e->layer_last, e->bucket,
            isfinite(e->bytes) ? e->bytes : 0.0, e->ranks, e->group, e->peer, e->seq);
}

/* flow matching: a send (from, to, direction, seq) meets the receive with the same key; the arrow runs
 * from the start of the send (the data leaves) to the end of the receive (it has arrived): a receive
 * posted before its send waits for it, so only these two points are ordered by causality */
typedef struct {
    int from, to, dir, seq, pos; /* pos: index into the sorted items */
} p2p_key;

static int cmp_key(const void *a, const void *b) {
    const p2p_key *x = a, *y = b;
    int c[4] = {x->from - y->from, x->to - y->to, x->dir - y->dir, x->seq - y->seq};
    for (int i = 0; i < 4; i++)
        if (c[i])
            return c[i] < 0 ? -1 : 1;
    return 0;
}

static void write_flows(FILE *f, const ah_trace_event *ev, const item *it, const int *lane, int n) {
    p2p_key *snd = ah_xcalloc((size_t)n + 1, sizeof(p2p_key)), *rcv = ah_xcalloc((size_t)n + 1, sizeof(p2p_key));
    int ns = 0, nr = 0;
    for (int k = 0; k < n; k++) {
        const ah_trace_event *e = &ev[it[k].ev];
        if (e->peer < 0)
            continue;
        if (e->kind == AH_OP_SEND_ACTIVATION || e->kind == AH_OP_SEND_GRADIENT)
            snd[ns++] = (p2p_key){e->rank, e->peer, e->kind == AH_OP_SEND_GRADIENT, e->seq, k};
        else if (e->kind == AH_OP_RECV_ACTIVATION || e->kind == AH_OP_RECV_GRADIENT)
            rcv[nr++] = (p2p_key){e->peer, e->rank, e->kind == AH_OP_RECV_GRADIENT, e->seq, k};
    }
    qsort(snd, (size_t)ns, sizeof(p2p_key), cmp_key);
    qsort(rcv, (size_t)nr, sizeof(p2p_key), cmp_key);
    for (int a = 0, b = 0, id = 1; a < ns && b < nr;) {
        int c = cmp_key(&snd[a], &rcv[b]);
        if (c) {
            c < 0 ? a++ : b++;
            continue;
        }
        const item *x = &it[snd[a].pos], *y = &it[rcv[b].pos];
        const char *what = snd[a].dir ? "gradient" : "activation";
        fprintf(f, ",\n{\"ph\":\"s\",\"id\":%d,\"name\":\"%s\",\"cat\":\"p2p\",\"pid\":%d,\"tid\":%d,\"ts\":", id,
                what, snd[a].from, ah_trace_tid(AH_STREAM_P2P, lane[snd[a].pos]));
        put_us(f, x->s_ns);
        fprintf(f, "},\n{\"ph\":\"f\",\"bp\":\"e\",\"id\":%d,\"name\":\"%s\",\"cat\":\"p2p\",\"pid\":%d,"
                   "\"tid\":%d,\"ts\":", id, what, snd[a].to, ah_trace_tid(AH_STREAM_P2P, lane[rcv[b].pos]));
        put_us(f, y->e_ns - 1 > y->s_ns ? y->e_ns - 1
                                        : y->s_ns); /* where the data arrived, inside the receive */
        fputs("}", f);
        id++, a++, b++;
    }
    free(snd);
    free(rcv);
}

int ah_trace_write_chrome(FILE *f, const ah_trace_event *ev, int n, const ah_trace_doc *d, char *err,
                          size_t errlen) {
    if (d->n_ranks < 1) {
        ah_errf(err, errlen, "trace: no ranks");
        return -1;
    }
    int *lane = NULL;
    item *it = sorted_items(ev, n > 0 ? n : 0, d, &lane, err, errlen);
    if (!it)
        return -1;
    n = n > 0 ? n : 0;
    fputs("{\"traceEvents\":[", f);
    write_threads(f, it, lane, n, d);
    for (int k = 0; k < n; k++)
        write_op(f, &ev[it[k].ev], &it[k], lane[k]);
    write_flows(f, ev, it, lane, n);
    if (d->extra_events)
        d->extra_events(f, d->ctx);
    fprintf(f, "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"format\":\"autohet-trace\",\"version\":\"2\","
               "\"source\":\"%s\",\"ranks\":\"%d\"", d->source ? d->source : "unknown", d->n_ranks);
    if (d->other_data)
        d->other_data(f, d->ctx);
    fputs("}\n}\n", f);
    free(it);
    free(lane);
    return ferror(f) ? (ah_errf(err, errlen, "trace: write error"), -1) : 0;
}
