/* Simulator outputs (docs/simulator-outputs.md): a Chrome trace-event JSON
 * file (ui.perfetto.dev, chrome://tracing), an SVG Gantt chart, a JSON
 * summary with per-stage and per-GPU numbers, and a text report. Also the
 * names of schedules, event kinds and streams.
 *
 * Nothing here recomputes simulation results: every number comes from the
 * ah_sim_result (and names and layer ranges from the plan). Files are written
 * atomically (util/atomic_file.h), so a reader never sees a
 * partial document; "-" is standard output and non-regular targets
 * (/dev/stdout, FIFOs) are written directly. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cjson/cJSON.h>

#include "util/atomic_file.h"
#include "util/errors.h"
#include "util/json_file.h"
#include "util/num_text.h"
#include "util/svg.h"
#include "autohet/sim.h"
#include "autohet/trace.h"

#define GIB 1073741824.0
/* SVG limits: rows drawn, and the event count above which adjacent
 * same-kind events less than a pixel apart are merged. */
#define SVG_MAX_ROWS 64
#define SVG_MERGE_EVENTS 200000
#define SVG_TOOLTIP_EVENTS 20000

/* ------------------------------------------------------------------ names */


/* ---------------------------------------------------------------- helpers */

/* Integer nanoseconds as microseconds with three decimals: exact. */
static const char *fmt_us(char *buf, size_t n, long long ns) {
    unsigned long long a = ns < 0 ? 0ULL - (unsigned long long)ns : (unsigned long long)ns;
    snprintf(buf, n, "%s%llu.%03llu", ns < 0 ? "-" : "", a / 1000ULL, a % 1000ULL);
    return buf;
}

static long long to_ns(double s) {
    double ns = s * 1e9;
    if (ns > 9.0e18)
        return (long long)9.0e18;
    if (ns < -9.0e18)
        return -(long long)9.0e18;
    return llround(ns);
}

/* --------------------------------------------------- plan / result lookups */

static const ah_node *stage_node(const ah_plan *p, const ah_sim_stage *st) {
    if (!p || !p->cluster.nodes || st->node < 0 || st->node >= p->cluster.n_nodes)
        return NULL;
    return &p->cluster.nodes[st->node];
}

static const char *node_name(const ah_plan *p, const ah_sim_stage *st, char *buf, size_t n) {
    const ah_node *nd = stage_node(p, st);
    if (nd)
        return nd->name;
    snprintf(buf, n, "node %d", st->node);
    return buf;
}

static const char *gpu_type(const ah_plan *p, const ah_sim_stage *st) {
    const ah_node *nd = stage_node(p, st);
    return nd ? nd->dev.name : "?";
}

static int stage_tp(const ah_plan *p, const ah_sim_stage *st) {
    if (st->tp > 0)
        return st->tp;
    int tp = p ? ah_plan_uniform_tp(p) : 0;
    return tp > 0 ? tp : 1;
}

/* The plan's stage for a simulated stage (layers), or NULL. */
static const ah_stage *plan_stage(const ah_plan *p, const ah_sim_stage *st) {
    if (!p || !p->replicas || st->replica < 0 || st->replica >= p->n_replicas)
        return NULL;
    const ah_replica *rep = &p->replicas[st->replica];
    if (!rep->stages || st->stage < 0 || st->stage >= rep->n_stages)
        return NULL;
    return &rep->stages[st->stage];
}

static int is_comm(ah_op_kind k) {
    return k == AH_OP_TP_ALLREDUCE || k == AH_OP_SEND_ACTIVATION || k == AH_OP_SEND_GRADIENT ||
           k == AH_OP_DP_ALLREDUCE || k == AH_OP_TIED_SYNC || k == AH_OP_STEP_SYNC;
}

/* Event name from the point of view of the track it is on. */
static void event_name(const ah_sim_event *e, char *buf, size_t n) {
    char mb[24] = "", ly[40] = "";
    if (e->micro_batch >= 0)
        snprintf(mb, sizeof mb, " mb%d", e->micro_batch);
    if (e->layer_last > e->layer_first)
        snprintf(ly, sizeof ly, " L[%d,%d)", e->layer_first, e->layer_last);
    switch (e->kind) {
    case AH_OP_FORWARD: snprintf(buf, n, "F%s%s", mb, ly); return;
    case AH_OP_BACKWARD: snprintf(buf, n, "B%s%s", mb, ly); return;
    case AH_OP_TP_ALLREDUCE: snprintf(buf, n, "TP-AR%s", mb); return;
    case AH_OP_SEND_ACTIVATION:
    case AH_OP_SEND_GRADIENT: {
        const char *what = e->kind == AH_OP_SEND_ACTIVATION ? "act" : "grad";
        if (e->peer_replica < 0 || e->peer_stage < 0) {
            snprintf(buf, n, "send %s%s", what, mb);
            return;
        }
        /* activations flow to later stages, gradients to earlier ones */
        int peer_later =
            e->peer_replica != e->replica ? e->peer_replica > e->replica : e->peer_stage > e->stage;
        int sender = e->kind == AH_OP_SEND_ACTIVATION ? peer_later : !peer_later;
        snprintf(buf, n, "%s %s%s %s r%d s%d", sender ? "send" : "recv", what, mb, sender ? "->" : "<-",
                 e->peer_replica, e->peer_stage);
        return;
    }
    case AH_OP_RECV_ACTIVATION: /* not simulator events: a transfer is its send */
    case AH_OP_RECV_GRADIENT:
    case AH_OP_SEND_WAIT:
    case AH_OP_DP_WAIT:
    case AH_OP_CHECKPOINT: break; /* nor is a checkpoint */
    case AH_OP_STEP_SYNC: snprintf(buf, n, "step sync"); return;
    case AH_OP_DP_ALLREDUCE:
        if (e->bucket >= 0)
            snprintf(buf, n, "DP-AR bucket %d%s", e->bucket, ly);
        else
            snprintf(buf, n, "DP-AR%s", ly);
        return;
    case AH_OP_OPTIMIZER: snprintf(buf, n, "optimizer"); return;
    case AH_OP_TIED_SYNC: snprintf(buf, n, "tied embedding exchange"); return;
    case AH_OP_KINDS: break;
    }
    snprintf(buf, n, "event");
}

/* Events sorted by track = (stage index, stream), then start, then longer
 * first, with integer-nanosecond times and a lane per track: events that
 * overlap without nesting (the simulator does not promise they never do)
 * go to extra lanes so that every lane is a valid trace thread. */
typedef struct {
    int track; /* stage index * AH_STREAMS + stream */
    int ev;    /* index into r->events */
    int lane;
    long long s_ns, e_ns;
} ev_item;

typedef struct {
    int n_stages;
    ev_item *items;
    int n_items;
    int *track_first; /* n_stages*AH_STREAMS + 1: items of track t are [first[t], first[t+1]) */
    int *track_lanes; /* lanes per track */
} ev_index;

static int cmp_item(const void *a, const void *b) {
    const ev_item *x = a, *y = b;
    if (x->track != y->track)
        return x->track < y->track ? -1 : 1;
    if (x->s_ns != y->s_ns)
        return x->s_ns < y->s_ns ? -1 : 1;
    if (x->e_ns != y->e_ns)
        return x->e_ns > y->e_ns ? -1 : 1;
    return x->ev < y->ev ? -1 : x->ev > y->ev;
}

static void ev_index_free(ev_index *x) {
    free(x->items);
    free(x->track_first);
    free(x->track_lanes);
    memset(x, 0, sizeof *x);
}

static int ev_index_build(const ah_sim_result *r, ev_index *x, char *err, size_t errlen) {
    memset(x, 0, sizeof *x);
    int ns = r->n_stages > 0 && r->stages ? r->n_stages : 0;
    x->n_stages = ns;
    int nt = ns * AH_STREAMS;
    int *lookup = NULL;
    long long *lane_end = NULL;
    x->track_first = calloc((size_t)nt + 1, sizeof *x->track_first);
    x->track_lanes = calloc((size_t)nt + 1, sizeof *x->track_lanes);
    if (!x->track_first || !x->track_lanes)
        goto oom;
    int ne = r->events && r->n_events > 0 ? r->n_events : 0;
    if (ne == 0)
        return 0;

    /* dense (replica, stage) -> stage index table */
    int maxr = 0, maxs = 0;
    for (int i = 0; i < ns; i++) {
        const ah_sim_stage *st = &r->stages[i];
        if (st->replica < 0 || st->stage < 0) {
            ah_errf(err, errlen, "simulated stage %d has a negative replica or stage id", i);
            goto fail;
        }
        maxr = st->replica > maxr ? st->replica : maxr;
        maxs = st->stage > maxs ? st->stage : maxs;
    }
    if ((long long)(maxr + 1) * (maxs + 1) > 50000000LL) {
        ah_errf(err, errlen, "replica/stage ids out of range (r%d s%d)", maxr, maxs);
        goto fail;
    }
    size_t nl = (size_t)(maxr + 1) * (size_t)(maxs + 1);
    lookup = malloc(nl * sizeof *lookup);
    if (!lookup)
        goto oom;
    for (size_t i = 0; i < nl; i++)
        lookup[i] = -1;
    for (int i = 0; i < ns; i++)
        lookup[(size_t)r->stages[i].replica * (size_t)(maxs + 1) + (size_t)r->stages[i].stage] = i;

    x->items = malloc((size_t)ne * sizeof *x->items);
    if (!x->items)
        goto oom;
    for (int i = 0; i < ne; i++) {
        const ah_sim_event *e = &r->events[i];
        int si = -1;
        if (e->replica >= 0 && e->replica <= maxr && e->stage >= 0 && e->stage <= maxs)
            si = lookup[(size_t)e->replica * (size_t)(maxs + 1) + (size_t)e->stage];
        if (si < 0) {
            ah_errf(err, errlen, "event %d is on unknown stage r%d s%d", i, e->replica, e->stage);
            goto fail;
        }
        if ((int)e->stream < 0 || e->stream >= AH_STREAMS || (int)e->kind < 0 || e->kind >= AH_OP_KINDS) {
            ah_errf(err, errlen, "event %d has an invalid stream (%d) or kind (%d)", i, (int)e->stream,
                    (int)e->kind);
            goto fail;
        }
        if (!isfinite(e->start_s) || !isfinite(e->end_s)) {
            ah_errf(err, errlen, "event %d (r%d s%d) has a non-finite time", i, e->replica, e->stage);
            goto fail;
        }
        ev_item *it = &x->items[x->n_items++];
        it->track = si * AH_STREAMS + (int)e->stream;
        it->ev = i;
        it->lane = 0;
        it->s_ns = to_ns(e->start_s);
        it->e_ns = to_ns(e->end_s);
        if (it->e_ns < it->s_ns)
            it->e_ns = it->s_ns;
    }
    qsort(x->items, (size_t)x->n_items, sizeof *x->items, cmp_item);

    /* track ranges and greedy lane assignment (fewest lanes for intervals) */
    int cap = 8;
    lane_end = malloc((size_t)cap * sizeof *lane_end);
    if (!lane_end)
        goto oom;
    int k = 0;
    for (int t = 0; t < nt; t++) {
        x->track_first[t] = k;
        int lanes = 0;
        for (; k < x->n_items && x->items[k].track == t; k++) {
            ev_item *it = &x->items[k];
            int l = 0;
            while (l < lanes && lane_end[l] > it->s_ns)
                l++;
            if (l == lanes) {
                if (lanes == cap) {
                    cap *= 2;
                    long long *nle = realloc(lane_end, (size_t)cap * sizeof *lane_end);
                    if (!nle)
                        goto oom;
                    lane_end = nle;
                }
                lanes++;
            }
            lane_end[l] = it->e_ns;
            it->lane = l;
        }
        x->track_lanes[t] = lanes;
    }
    x->track_first[nt] = k;
    free(lane_end);
    free(lookup);
    return 0;
oom:
    ah_errf(err, errlen, "out of memory");
fail:
    free(lane_end);
    free(lookup);
    ev_index_free(x);
    return -1;
}

static double result_end_s(const ah_sim_result *r) {
    double t = isfinite(r->iteration_time_s) ? r->iteration_time_s : 0.0;
    for (int i = 0; r->events && i < r->n_events; i++)
        if (isfinite(r->events[i].end_s) && r->events[i].end_s > t)
            t = r->events[i].end_s;
    for (int k = 0; r->replica_finish_s && k < r->n_replicas; k++)
        if (isfinite(r->replica_finish_s[k]) && r->replica_finish_s[k] > t)
            t = r->replica_finish_s[k];
    return t;
}

/* ------------------------------------------------------------ Chrome trace */

/* A memory point in integer nanoseconds, with its position in the timeline
 * so that points at the same time keep their order (the last one holds). */
typedef struct {
    long long t_ns;
    double bytes;
    int idx;
} mem_item;

static int cmp_mem(const void *a, const void *b) {
    const mem_item *x = a, *y = b;
    if (x->t_ns != y->t_ns)
        return x->t_ns < y->t_ns ? -1 : 1;
    return x->idx - y->idx;
}

/* The simulator's trace is the engine's (autohet/trace.h): a simulated
 * stage is one TP group, so each of its events is written once per GPU of
 * the group, as the engine rank that GPU would be (replica by replica, stage
 * by stage, tp rank by tp rank). */
typedef struct {
    const ah_plan *plan;
    const ah_sim_result *r;
    int *base;   /* per stage index: its first engine rank */
    int *lookup; /* (replica, stage) -> stage index, -1 */
    int maxs;    /* stage ids are below maxs + 1 */
    int maxr;
} sim_ranks;

static int sim_stage_index(const sim_ranks *m, int replica, int stage) {
    if (replica < 0 || replica > m->maxr || stage < 0 || stage > m->maxs)
        return -1;
    return m->lookup[(size_t)replica * (size_t)(m->maxs + 1) + (size_t)stage];
}

/* ev_index_build has checked the ids (non-negative, bounded) */
static int sim_ranks_build(const ah_plan *plan, const ah_sim_result *r, sim_ranks *m) {
    memset(m, 0, sizeof *m);
    m->plan = plan;
    m->r = r;
    int ns = r->n_stages > 0 && r->stages ? r->n_stages : 0;
    for (int i = 0; i < ns; i++) {
        m->maxr = r->stages[i].replica > m->maxr ? r->stages[i].replica : m->maxr;
        m->maxs = r->stages[i].stage > m->maxs ? r->stages[i].stage : m->maxs;
    }
    size_t nl = (size_t)(m->maxr + 1) * (size_t)(m->maxs + 1);
    m->lookup = ah_xcalloc(nl, sizeof(int));
    m->base = ah_xcalloc((size_t)ns + 1, sizeof(int));
    for (size_t i = 0; i < nl; i++)
        m->lookup[i] = -1;
    for (int i = 0; i < ns; i++)
        m->lookup[(size_t)r->stages[i].replica * (size_t)(m->maxs + 1) + (size_t)r->stages[i].stage] = i;
    int ranks = 0;
    for (int k = 0; k <= m->maxr; k++)
        for (int j = 0; j <= m->maxs; j++) {
            int i = sim_stage_index(m, k, j);
            if (i >= 0) {
                m->base[i] = ranks;
                ranks += stage_tp(plan, &r->stages[i]);
            }
        }
    return ranks;
}

/* The simulated events as trace records, one per GPU of the stage. */
static ah_trace_event *sim_trace_events(const sim_ranks *m, const ev_index *x, int *n_out) {
    const ah_sim_result *r = m->r;
    int ns = x->n_stages, nb = r->n_buckets > 0 ? r->n_buckets : 0, n = 0, cap = 0;
    for (int k = 0; k < x->n_items; k++)
        cap += stage_tp(m->plan, &r->stages[x->items[k].track / AH_STREAMS]);
    ah_trace_event *out = ah_xcalloc((size_t)cap + 1, sizeof(ah_trace_event));
    int *seq = ah_xcalloc((size_t)ns * AH_OP_KINDS + 1, sizeof(int));
    int *seq_dp = ah_xcalloc((size_t)ns * (size_t)nb + 1, sizeof(int)); /* one call site per bucket */
    int *bucket_lead = ah_xcalloc((size_t)nb + 1, sizeof(int));
    for (int b = 0; b < nb; b++)
        bucket_lead[b] = 1 << 30;
    for (int k = 0; k < x->n_items; k++) {
        const ah_sim_event *e = &r->events[x->items[k].ev];
        int si = x->items[k].track / AH_STREAMS;
        if (e->kind == AH_OP_DP_ALLREDUCE && e->bucket >= 0 && e->bucket < nb &&
            m->base[si] < bucket_lead[e->bucket])
            bucket_lead[e->bucket] = m->base[si];
    }
    for (int k = 0; k < x->n_items; k++) { /* items: by stage and stream, in start order */
        const ah_sim_event *e = &r->events[x->items[k].ev];
        int si = x->items[k].track / AH_STREAMS, tp = stage_tp(m->plan, &r->stages[si]);
        int pi = sim_stage_index(m, e->peer_replica, e->peer_stage);
        ah_op_kind kind = e->kind; /* the engine's records are of the same kinds ... */
        if (kind == AH_OP_SEND_ACTIVATION || kind == AH_OP_SEND_GRADIENT) {
            /* ... but a transfer is the sender's send and the receiver's receive: activations flow to
             * later stages, gradients to earlier ones */
            int peer_later =
                e->peer_replica != e->replica ? e->peer_replica > e->replica : e->peer_stage > e->stage;
            int act = kind == AH_OP_SEND_ACTIVATION, sender = act ? peer_later : !peer_later;
            if (!sender)
                kind = act ? AH_OP_RECV_ACTIVATION : AH_OP_RECV_GRADIENT;
        }
        int has_bucket = e->bucket >= 0 && e->bucket < nb;
        int s = kind == AH_OP_DP_ALLREDUCE && has_bucket
                    ? seq_dp[(size_t)si * (size_t)nb + (size_t)e->bucket]++
                    : seq[si * AH_OP_KINDS + kind]++;
        for (int q = 0; q < tp; q++) {
            ah_trace_event *t = &out[n++];
            int rank = m->base[si] + q;
            *t = (ah_trace_event){.t0 = e->start_s,
                                  .t1 = e->end_s,
                                  .rank = rank,
                                  .kind = kind,
                                  .micro_batch = e->micro_batch,
                                  .layer_first = -1,
                                  .layer_last = -1,
                                  .bucket = e->bucket,
                                  .bytes = is_comm(e->kind) ? e->bytes : 0,
                                  .ranks = 1,
                                  .group = rank,
                                  .peer = -1,
                                  .site = (int)kind,
                                  .seq = s};
            if (e->layer_last > e->layer_first) {
                t->layer_first = e->layer_first;
                t->layer_last = e->layer_last;
            }
            if (kind == AH_OP_TP_ALLREDUCE) {
                t->ranks = tp;
                t->group = m->base[si];
            } else if (kind == AH_OP_DP_ALLREDUCE && has_bucket) {
                t->ranks = r->buckets[e->bucket].n_holders;
                t->group = bucket_lead[e->bucket] + q;
            } else if (ah_op_kind_stream(kind) == AH_STREAM_P2P && pi >= 0) {
                /* GPU q meets GPU q mod t' of a stage of degree t' (rule 1 of per-stage TP) */
                t->peer = m->base[pi] + q % stage_tp(m->plan, &r->stages[pi]);
                t->ranks = 2;
                t->group = rank < t->peer ? rank : t->peer;
            }
        }
    }
    free(seq);
    free(seq_dp);
    free(bucket_lead);
    *n_out = n;
    return out;
}

/* memory counters (per GPU, on every rank of its stage) and markers */
static void sim_trace_extra_events(FILE *f, void *ctx) {
    const sim_ranks *m = ctx;
    const ah_sim_result *r = m->r;
    int ns = r->n_stages > 0 && r->stages ? r->n_stages : 0;
    char b1[64], b2[64], nm[96];
    for (int i = 0; i < ns; i++) {
        const ah_sim_stage *st = &r->stages[i];
        if (!st->mem || st->n_mem <= 0)
            continue;
        mem_item *mp = ah_xcalloc((size_t)st->n_mem, sizeof *mp);
        int nm_pts = 0;
        for (int k = 0; k < st->n_mem; k++)
            if (isfinite(st->mem[k].t) && isfinite(st->mem[k].bytes))
                mp[nm_pts++] = (mem_item){to_ns(st->mem[k].t), st->mem[k].bytes, k};
        qsort(mp, (size_t)nm_pts, sizeof *mp, cmp_mem);
        snprintf(nm, sizeof nm, "memory GiB r%d s%d", st->replica, st->stage);
        for (int q = 0; q < stage_tp(m->plan, st); q++)
            for (int k = 0; k < nm_pts; k++) {
                if (k + 1 < nm_pts && mp[k + 1].t_ns == mp[k].t_ns)
                    continue; /* superseded at the same instant */
                fprintf(
                    f,
                    ",\n{\"ph\":\"C\",\"pid\":%d,\"tid\":0,\"ts\":%s,\"name\":\"%s\",\"args\":{\"used\":%s}}",
                    m->base[i] + q, fmt_us(b1, sizeof b1, mp[k].t_ns), nm,
                    ah_num_format(b2, sizeof b2, "%.9g", mp[k].bytes / GIB));
            }
        free(mp);
    }
    /* each replica's flush (on its first stage's first rank) and the iteration end */
    for (int k = 0; r->replica_flush_s && k < r->n_replicas; k++) {
        int si = -1;
        for (int i = 0; i < ns && si < 0; i++)
            if (r->stages[i].replica == k)
                si = i;
        if (si < 0 || !isfinite(r->replica_flush_s[k]))
            continue;
        fprintf(f,
                ",\n{\"ph\":\"i\",\"s\":\"t\",\"pid\":%d,\"tid\":0,\"ts\":%s,\"name\":\"flush r%d\","
                "\"cat\":\"marker\",\"args\":{\"replica\":%d}}",
                m->base[si], fmt_us(b1, sizeof b1, to_ns(r->replica_flush_s[k])), k, k);
    }
    if (ns > 0 && isfinite(r->iteration_time_s))
        fprintf(f,
                ",\n{\"ph\":\"i\",\"s\":\"g\",\"pid\":0,\"tid\":0,\"ts\":%s,\"name\":\"iteration end\","
                "\"cat\":\"marker\",\"args\":{}}",
                fmt_us(b1, sizeof b1, to_ns(r->iteration_time_s)));
}

static void sim_trace_other_data(FILE *f, void *ctx) {
    const sim_ranks *m = ctx;
    const ah_sim_result *r = m->r;
    char b1[AH_NUM_EXACT_LEN];
    fprintf(f, ",\"schedule\":\"%s\"", ah_schedule_name(r->schedule));
    fprintf(f, ",\"iteration_time_s\":\"%s\"", ah_num_exact(b1, r->iteration_time_s));
    fprintf(f, ",\"closed_form_s\":\"%s\"", ah_num_exact(b1, r->closed_form_s));
    if (m->plan) {
        fputs(",\"model\":", f);
        ah_json_put_string(f, m->plan->model.name);
        fprintf(f, ",\"tp\":\"%d\",\"micro_batch\":\"%d\",\"global_batch\":\"%d\"",
                ah_plan_uniform_tp(m->plan), m->plan->micro_batch, m->plan->global_batch);
    }
    fprintf(f, ",\"replicas\":\"%d\",\"stages\":\"%d\",\"events\":\"%d\"", r->n_replicas,
            r->n_stages > 0 ? r->n_stages : 0, r->n_events > 0 ? r->n_events : 0);
    /* every stage's degree, stage by stage as in "stages" of the JSON (the "tp" above is 0 when they differ)
     */
    fputs(",\"stage_tp\":\"", f);
    for (int i = 0; r->stages && i < r->n_stages; i++)
        fprintf(f, "%s%d", i ? "," : "", stage_tp(m->plan, &r->stages[i]));
    fputs("\"", f);
}

int ah_sim_write_trace(const ah_plan *plan, const ah_sim_result *r, const char *path, char *err,
                       size_t errlen) {
    if (!r) {
        ah_errf(err, errlen, "%s: no simulation result", path ? path : "?");
        return -1;
    }
    ev_index x;
    if (ev_index_build(r, &x, err, errlen) < 0)
        return -1;
    sim_ranks m;
    int n_ranks = sim_ranks_build(plan, r, &m), n = 0;
    ah_trace_event *ev = sim_trace_events(&m, &x, &n);
    ah_trace_rank *rk = ah_xcalloc((size_t)n_ranks + 1, sizeof(ah_trace_rank));
    char(*where)[160] = ah_xcalloc((size_t)x.n_stages + 1, sizeof *where);
    for (int i = 0; i < x.n_stages; i++) {
        const ah_sim_stage *st = &r->stages[i];
        char nb[64];
        snprintf(where[i], sizeof where[i], "%s (%s)", node_name(plan, st, nb, sizeof nb),
                 gpu_type(plan, st));
        for (int q = 0; q < stage_tp(plan, st); q++)
            rk[m.base[i] + q] = (ah_trace_rank){st->replica, st->stage, q, where[i]};
    }
    ah_trace_doc d = {.source = "simulator",
                      .ranks = rk,
                      .n_ranks = n_ranks,
                      .extra_events = sim_trace_extra_events,
                      .other_data = sim_trace_other_data,
                      .ctx = &m};
    ah_out_file o;
    int rc = ah_out_open(&o, path, err, errlen);
    if (rc == 0) {
        /* a write error is the close's to report: it names the file */
        int ok = ah_trace_write_chrome(o.f, ev, n, &d, err, errlen) == 0 || ferror(o.f);
        rc = ah_out_close(&o, ok, err, errlen);
    }
    free(rk);
    free(where);
    free(ev);
    free(m.lookup);
    free(m.base);
    ev_index_free(&x);
    return rc;
}

/* -------------------------------------------------------------------- SVG */

/* Legend groups: forward, backward, TP all-reduce, send (both directions),
 * DP all-reduce, optimizer. */
static const struct {
    const char *label, *colour;
} svg_kinds[] = {
    {"forward", "#4e79a7"},           {"backward", "#f28e2b"},      {"TP all-reduce", "#b07aa1"},
    {"send (act / grad)", "#59a14f"}, {"DP all-reduce", "#e15759"}, {"optimizer", "#9c755f"},
    {"tied exchange", "#76b7b2"},     {"step sync", "#bab0ac"},
};
#define SVG_N_KINDS (sizeof svg_kinds / sizeof svg_kinds[0])

static int svg_class(ah_op_kind k) {
    switch (k) {
    case AH_OP_FORWARD: return 0;
    case AH_OP_BACKWARD: return 1;
    case AH_OP_TP_ALLREDUCE: return 2;
    case AH_OP_SEND_ACTIVATION:
    case AH_OP_SEND_GRADIENT: return 3;
    case AH_OP_DP_ALLREDUCE: return 4;
    case AH_OP_OPTIMIZER: return 5;
    case AH_OP_TIED_SYNC: return 6;
    case AH_OP_STEP_SYNC: return 7;
    case AH_OP_RECV_ACTIVATION: /* not simulator events */
    case AH_OP_RECV_GRADIENT:
    case AH_OP_SEND_WAIT:
    case AH_OP_DP_WAIT:
    case AH_OP_CHECKPOINT:
    case AH_OP_KINDS: break;
    }
    return 0;
}

/* Geometry (px): the plot spans [SVG_LEFT, SVG_WIDTH - SVG_RIGHT]; each
 * stage row is a compute lane over a communication lane. */
#define SVG_WIDTH 1500.0
#define SVG_LEFT 300.0
#define SVG_RIGHT 40.0
#define SVG_TOP 96.0
#define SVG_LANE_C 16.0
#define SVG_LANE_GAP 2.0
#define SVG_LANE_M 7.0
#define SVG_ROW_GAP 9.0
#define SVG_REP_GAP 12.0

/* One chart being drawn: the result, its events by track, the rows shown
 * and the time scale. */
typedef struct {
    const ah_plan *plan;
    const ah_sim_result *r;
    ev_index x;
    int rows, merge, tips;
    double *row_y; /* top of each row */
    double rows_end, height;
    double plot_w, T; /* plot width and the time it spans */
} svg_chart;

static double sx(const svg_chart *c, double t) {
    return SVG_LEFT + t / c->T * c->plot_w;
}

/* A time in the unit chosen for the axis. */
static void fmt_time(char *buf, size_t n, double t) {
    char b[40];
    double a = fabs(t);
    if (a >= 1.0 || a == 0.0)
        snprintf(buf, n, "%s s", ah_num_format(b, sizeof b, "%.6g", t));
    else if (a >= 1e-3)
        snprintf(buf, n, "%s ms", ah_num_format(b, sizeof b, "%.6g", t * 1e3));
    else
        snprintf(buf, n, "%s us", ah_num_format(b, sizeof b, "%.6g", t * 1e6));
}

/* Row positions (a gap between replicas) and the time scale. */
static int svg_layout(svg_chart *c, char *err, size_t errlen) {
    const ah_sim_result *r = c->r;
    const double pitch = SVG_LANE_C + SVG_LANE_GAP + SVG_LANE_M + SVG_ROW_GAP;
    c->row_y = malloc(((size_t)c->rows + 1) * sizeof *c->row_y);
    if (!c->row_y) {
        ah_errf(err, errlen, "out of memory");
        return -1;
    }
    double y = SVG_TOP;
    for (int i = 0; i < c->rows; i++) {
        if (i > 0 && r->stages[i].replica != r->stages[i - 1].replica)
            y += SVG_REP_GAP;
        c->row_y[i] = y;
        y += pitch;
    }
    c->rows_end = y;
    c->height = y + 48;
    c->plot_w = SVG_WIDTH - SVG_LEFT - SVG_RIGHT;
    c->T = result_end_s(r);
    /* the closed-form marker stays inside the plot unless it is far off */
    if (isfinite(r->closed_form_s) && r->closed_form_s > c->T && r->closed_form_s <= 1.5 * c->T)
        c->T = r->closed_form_s;
    if (!(c->T > 0))
        c->T = 1.0;
    return 0;
}

/* Styles, background, the title and the line under it. */
static void svg_header(FILE *f, const svg_chart *c) {
    const ah_sim_result *r = c->r;
    int ns = c->x.n_stages;
    char t1[64], nm[256], a[48];
    ah_svg_open(f, SVG_WIDTH, c->height, "font-family=\"Helvetica, Arial, sans-serif\" font-size=\"11\"");
    fputs("<style>", f);
    for (size_t k = 0; k < SVG_N_KINDS; k++)
        fprintf(f, ".k%zu{fill:%s}", k, svg_kinds[k].colour);
    fputs(".lane{fill:#f1f1f1}.grid{stroke:#dddddd;stroke-width:1}.sep{stroke:#888888;stroke-width:1}"
          ".flush{stroke:#222222;stroke-width:1.5;stroke-dasharray:5,3}.iter{stroke:#d62728;stroke-width:2}"
          ".cf{stroke:#555555;stroke-width:1.2;stroke-dasharray:2,2}</style>\n",
          f);
    fputs("<rect x=\"0\" y=\"0\" width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n", f);

    fmt_time(t1, sizeof t1, r->iteration_time_s);
    snprintf(nm, sizeof nm, "Simulated iteration %s (schedule %s%s%s)", t1, ah_schedule_name(r->schedule),
             c->plan ? ", " : "", c->plan ? c->plan->model.name : "");
    if (c->rows < ns)
        snprintf(nm + strlen(nm), sizeof nm - strlen(nm), ": showing the first %d of %d stages", c->rows, ns);
    ah_svg_title(f, nm);
    ah_svg_text(f, 16, 24, "font-size=\"16\" font-weight=\"bold\"", nm);
    fmt_time(t1, sizeof t1, r->closed_form_s);
    if (r->iteration_time_s > 0 && isfinite(r->closed_form_s))
        snprintf(nm, sizeof nm, "closed form %s, model error %s%%; %d replica%s, %d stages, %d events%s", t1,
                 ah_num_format(a, sizeof a, "%+.2f", (r->closed_form_s / r->iteration_time_s - 1.0) * 100.0),
                 r->n_replicas, r->n_replicas == 1 ? "" : "s", ns, r->n_events,
                 c->merge ? " (adjacent events closer than 1 px merged)" : "");
    else
        snprintf(nm, sizeof nm, "%d replicas, %d stages, %d events", r->n_replicas, ns, r->n_events);
    ah_svg_text(f, 16, 44, "font-size=\"12\" fill=\"#444444\"", nm);
}

/* Kind swatches, then the marker lines (text width estimated at 6.5 px per
 * character of the 11 px font). */
static void svg_legend(FILE *f) {
    char cls[32];
    double lx = 16;
    for (size_t k = 0; k < SVG_N_KINDS; k++) {
        snprintf(cls, sizeof cls, "class=\"k%zu\"", k);
        ah_svg_rect(f, lx, 58, 14, 10, cls, NULL);
        ah_svg_text(f, lx + 18, 67, NULL, svg_kinds[k].label);
        lx += 18 + 6.5 * (double)strlen(svg_kinds[k].label) + 20;
    }
    static const char *const marker_class[] = {"class=\"flush\"", "class=\"iter\"", "class=\"cf\""};
    static const char *const marker_label[] = {"replica flush", "iteration end", "closed form"};
    for (int k = 0; k < 3; k++) {
        ah_svg_line(f, lx, 63, lx + 20, 63, marker_class[k], NULL);
        ah_svg_text(f, lx + 24, 67, NULL, marker_label[k]);
        lx += 24 + 6.5 * (double)strlen(marker_label[k]) + 20;
    }
    ah_svg_text(f, 16, 86, "fill=\"#666666\"",
                "each row: compute (upper lane), communication: TP, p2p, DP (lower lane)");
}

/* Time axis: ticks at 1/2/5 x 10^k, labelled in s, ms or us. */
static void svg_axis(FILE *f, const svg_chart *c) {
    double raw = c->T / 10.0, mag = pow(10.0, floor(log10(raw))), step = mag;
    if (step < raw)
        step = 2 * mag;
    if (step < raw)
        step = 5 * mag;
    if (step < raw)
        step = 10 * mag;
    double unit = c->T >= 2.0 ? 1.0 : c->T >= 2e-3 ? 1e-3 : 1e-6;
    const char *uname = unit == 1.0 ? "s" : unit == 1e-3 ? "ms" : "us";
    int dec = (int)fmax(0.0, -floor(log10(step / unit) + 1e-9));
    ah_svg_line(f, SVG_LEFT, c->rows_end + 4, SVG_LEFT + c->plot_w, c->rows_end + 4, "class=\"sep\"", NULL);
    char num[48], label[64];
    for (int k = 0; k * step <= c->T * (1 + 1e-9) && k < 1000; k++) {
        double tx = sx(c, k * step);
        ah_svg_line(f, tx, SVG_TOP - 4, tx, c->rows_end + 8, "class=\"grid\"", NULL);
        snprintf(label, sizeof label, "%s %s", ah_num_format(num, sizeof num, "%.*f", dec, k * step / unit),
                 uname);
        ah_svg_text(f, tx, c->rows_end + 22, "text-anchor=\"middle\"", label);
    }
    ah_svg_text(f, SVG_LEFT + c->plot_w / 2, c->rows_end + 40, "text-anchor=\"middle\" fill=\"#444444\"",
                "time");
}

/* Rows: label, lane backgrounds, replica separators. */
static void svg_rows(FILE *f, const svg_chart *c) {
    char nm[256], nb[64];
    for (int i = 0; i < c->rows; i++) {
        const ah_sim_stage *st = &c->r->stages[i];
        double y = c->row_y[i];
        if (i > 0 && st->replica != c->r->stages[i - 1].replica) {
            double sy = y - SVG_REP_GAP / 2 - SVG_ROW_GAP / 2;
            ah_svg_line(f, 8, sy, SVG_WIDTH - 8, sy, "class=\"sep\"", NULL);
        }
        snprintf(nm, sizeof nm, "r%d s%d %s %s", st->replica, st->stage, gpu_type(c->plan, st),
                 node_name(c->plan, st, nb, sizeof nb));
        ah_svg_text(f, SVG_LEFT - 8, y + SVG_LANE_C - 4, "text-anchor=\"end\"", nm);
        ah_svg_rect(f, SVG_LEFT, y, c->plot_w, SVG_LANE_C, "class=\"lane\"", NULL);
        ah_svg_rect(f, SVG_LEFT, y + SVG_LANE_C + SVG_LANE_GAP, c->plot_w, SVG_LANE_M, "class=\"lane\"",
                    NULL);
    }
}

/* One event box, at least half a pixel wide. */
static void svg_event(FILE *f, double x0, double x1, double y, double h, int cls, const char *tip) {
    char attrs[32];
    snprintf(attrs, sizeof attrs, "class=\"k%d\"", cls);
    ah_svg_rect(f, x0, y, x1 - x0 < 0.5 ? 0.5 : x1 - x0, h, attrs, tip);
}

/* The events of stage row i on stream s; with c->merge, adjacent same-kind
 * events less than a pixel apart become one box (no tooltips). */
static void svg_track(FILE *f, const svg_chart *c, int i, int s) {
    int t = i * AH_STREAMS + s;
    double ly = s == AH_STREAM_COMPUTE ? c->row_y[i] : c->row_y[i] + SVG_LANE_C + SVG_LANE_GAP;
    double lh = s == AH_STREAM_COMPUTE ? SVG_LANE_C : SVG_LANE_M;
    int have = 0, cur_cls = 0;
    double cx0 = 0, cx1 = 0;
    char nm[256], t1[64], t2[64], tip[400];
    for (int k = c->x.track_first[t]; k < c->x.track_first[t + 1]; k++) {
        const ah_sim_event *e = &c->r->events[c->x.items[k].ev];
        int cls = svg_class(e->kind);
        double x0 = sx(c, c->x.items[k].s_ns * 1e-9), x1 = sx(c, c->x.items[k].e_ns * 1e-9);
        if (c->merge) {
            if (have && cls == cur_cls && x0 <= cx1 + 1.0) {
                cx1 = x1 > cx1 ? x1 : cx1;
                continue;
            }
            if (have)
                svg_event(f, cx0, cx1, ly, lh, cur_cls, NULL);
            have = 1;
            cur_cls = cls;
            cx0 = x0;
            cx1 = x1;
            continue;
        }
        const char *tp = NULL;
        if (c->tips) {
            event_name(e, nm, sizeof nm);
            fmt_time(t1, sizeof t1, e->start_s);
            fmt_time(t2, sizeof t2, e->end_s - e->start_s);
            snprintf(tip, sizeof tip, "%s: start %s, %s", nm, t1, t2);
            tp = tip;
        }
        svg_event(f, x0, x1, ly, lh, cls, tp);
    }
    if (c->merge && have)
        svg_event(f, cx0, cx1, ly, lh, cur_cls, NULL);
}

/* Replica flushes (over that replica's rows), closed form and iteration end
 * (over all rows). */
static void svg_markers(FILE *f, const svg_chart *c) {
    const ah_sim_result *r = c->r;
    char t1[64], nm[128];
    for (int k = 0; r->replica_flush_s && k < r->n_replicas; k++) {
        int i0 = -1, i1 = -1;
        for (int i = 0; i < c->rows; i++)
            if (r->stages[i].replica == k) {
                i0 = i0 < 0 ? i : i0;
                i1 = i;
            }
        if (i0 < 0 || !isfinite(r->replica_flush_s[k]))
            continue;
        double fx = sx(c, r->replica_flush_s[k]);
        fmt_time(t1, sizeof t1, r->replica_flush_s[k]);
        snprintf(nm, sizeof nm, "flush r%d at %s", k, t1);
        ah_svg_line(f, fx, c->row_y[i0] - 3, fx, c->row_y[i1] + SVG_LANE_C + SVG_LANE_GAP + SVG_LANE_M + 3,
                    "class=\"flush\"", nm);
        snprintf(nm, sizeof nm, "flush r%d", k);
        ah_svg_text(f, fx - 3, c->row_y[i0] - 2, "text-anchor=\"end\" font-size=\"9\" fill=\"#222222\"", nm);
    }
    if (c->rows > 0 && isfinite(r->closed_form_s) && r->closed_form_s > 0 && r->closed_form_s <= c->T * 1.5) {
        double cx = sx(c, r->closed_form_s);
        fmt_time(t1, sizeof t1, r->closed_form_s);
        snprintf(nm, sizeof nm, "closed form %s", t1);
        ah_svg_line(f, cx, SVG_TOP - 6, cx, c->rows_end, "class=\"cf\"", nm);
    }
    if (c->rows > 0 && isfinite(r->iteration_time_s)) {
        double ix = sx(c, r->iteration_time_s);
        fmt_time(t1, sizeof t1, r->iteration_time_s);
        snprintf(nm, sizeof nm, "iteration %s", t1);
        ah_svg_line(f, ix, SVG_TOP - 8, ix, c->rows_end, "class=\"iter\"", NULL);
        ah_svg_text(f, ix - 3, SVG_TOP - 10, "text-anchor=\"end\" fill=\"#d62728\"", nm);
    }
}

int ah_sim_write_svg(const ah_plan *plan, const ah_sim_result *r, const char *path, char *err,
                     size_t errlen) {
    if (!r) {
        ah_errf(err, errlen, "%s: no simulation result", path ? path : "?");
        return -1;
    }
    svg_chart c = {.plan = plan, .r = r};
    if (ev_index_build(r, &c.x, err, errlen) < 0)
        return -1;
    c.rows = c.x.n_stages < SVG_MAX_ROWS ? c.x.n_stages : SVG_MAX_ROWS;
    c.merge = r->n_events > SVG_MERGE_EVENTS;
    c.tips = !c.merge && r->n_events <= SVG_TOOLTIP_EVENTS;
    ah_out_file o;
    if (svg_layout(&c, err, errlen) < 0 || ah_out_open(&o, path, err, errlen) < 0) {
        free(c.row_y);
        ev_index_free(&c.x);
        return -1;
    }
    svg_header(o.f, &c);
    svg_legend(o.f);
    svg_axis(o.f, &c);
    svg_rows(o.f, &c);
    /* compute in the upper lane; DP, then p2p, then TP on the lower lane
     * (shorter ones drawn last stay visible on top) */
    static const int order[AH_STREAMS] = {AH_STREAM_COMPUTE, AH_STREAM_DP, AH_STREAM_P2P, AH_STREAM_TP};
    for (int i = 0; i < c.rows; i++)
        for (int so = 0; so < AH_STREAMS; so++)
            svg_track(o.f, &c, i, order[so]);
    svg_markers(o.f, &c);
    ah_svg_close(o.f);
    free(c.row_y);
    ev_index_free(&c.x);
    return ah_out_close(&o, 1, err, errlen);
}

/* ------------------------------------------------------------ JSON summary */

/* Numbers are raw items holding the shortest text that reads back exactly;
 * non-finite ones are null. */
static cJSON *jnum(double d) {
    if (!isfinite(d))
        return cJSON_CreateNull();
    char buf[40];
    return cJSON_CreateRaw(ah_num_exact(buf, d));
}

typedef struct {
    int bad;
} jw;

static void jadd(jw *w, cJSON *obj, const char *key, cJSON *item) {
    if (!obj || !item || !cJSON_AddItemToObject(obj, key, item)) {
        cJSON_Delete(item);
        w->bad = 1;
    }
}

static void jpush(jw *w, cJSON *arr, cJSON *item) {
    if (!arr || !item || !cJSON_AddItemToArray(arr, item)) {
        cJSON_Delete(item);
        w->bad = 1;
    }
}

static cJSON *jint(long long v) {
    return cJSON_CreateNumber((double)v);
}

static cJSON *jpair(int a, int b) {
    int v[2] = {a, b};
    return cJSON_CreateIntArray(v, 2);
}

static double last_flush(const ah_sim_result *r) {
    double t = 0;
    for (int k = 0; r->replica_flush_s && k < r->n_replicas; k++)
        if (isfinite(r->replica_flush_s[k]) && r->replica_flush_s[k] > t)
            t = r->replica_flush_s[k];
    return t;
}

static double last_bucket_end(const ah_sim_result *r) {
    double t = 0;
    for (int b = 0; r->buckets && b < r->n_buckets; b++)
        if (isfinite(r->buckets[b].end_s) && r->buckets[b].end_s > t)
            t = r->buckets[b].end_s;
    return t;
}

int ah_sim_write_json(const ah_plan *plan, const ah_sim_result *r, const char *path, char *err,
                      size_t errlen) {
    if (!r) {
        ah_errf(err, errlen, "%s: no simulation result", path ? path : "?");
        return -1;
    }
    jw w = {0};
    char nb[64];
    cJSON *root = cJSON_CreateObject();
    if (!root) {
        ah_errf(err, errlen, "out of memory");
        return -1;
    }
    jadd(&w, root, "format", cJSON_CreateString("autohet-sim"));
    jadd(&w, root, "version", jint(1));
    jadd(&w, root, "schedule", cJSON_CreateString(ah_schedule_name(r->schedule)));
    if (plan) {
        jadd(&w, root, "model", cJSON_CreateString(plan->model.name));
        jadd(&w, root, "tp", jint(ah_plan_uniform_tp(plan))); /* 0: per stage (stages[].tp) */
        jadd(&w, root, "micro_batch", jint(plan->micro_batch));
        jadd(&w, root, "global_batch", jint(plan->global_batch));
    }
    jadd(&w, root, "iteration_time_s", jnum(r->iteration_time_s));
    jadd(&w, root, "closed_form_s", jnum(r->closed_form_s));
    jadd(&w, root, "model_error",
         r->iteration_time_s > 0 ? jnum(r->closed_form_s / r->iteration_time_s - 1.0) : cJSON_CreateNull());
    double tail = r->n_buckets > 0 ? last_bucket_end(r) - last_flush(r) : 0.0;
    jadd(&w, root, "dp_allreduce_tail_s", jnum(tail));
    jadd(&w, root, "events", jint(r->n_events));
    jadd(&w, root, "flow_updates", jint(r->flow_updates));

    cJSON *reps = cJSON_CreateArray();
    jadd(&w, root, "replicas", reps);
    for (int k = 0; k < r->n_replicas; k++) {
        cJSON *o = cJSON_CreateObject();
        jpush(&w, reps, o);
        int n = 0;
        for (int i = 0; r->stages && i < r->n_stages; i++)
            n += r->stages[i].replica == k;
        jadd(&w, o, "id", jint(k));
        if (plan && plan->replicas && k < plan->n_replicas)
            jadd(&w, o, "micro_batches", jint(plan->replicas[k].micro_batches));
        jadd(&w, o, "flush_s", r->replica_flush_s ? jnum(r->replica_flush_s[k]) : cJSON_CreateNull());
        jadd(&w, o, "finish_s", r->replica_finish_s ? jnum(r->replica_finish_s[k]) : cJSON_CreateNull());
        jadd(&w, o, "stages", jint(n));
    }

    cJSON *stages = cJSON_CreateArray(), *gpus = cJSON_CreateArray();
    jadd(&w, root, "stages", stages);
    jadd(&w, root, "gpus", gpus);
    for (int i = 0; r->stages && i < r->n_stages; i++) {
        const ah_sim_stage *st = &r->stages[i];
        const ah_stage *ps = plan_stage(plan, st);
        int tp = stage_tp(plan, st);
        const char *node = node_name(plan, st, nb, sizeof nb);
        cJSON *o = cJSON_CreateObject();
        jpush(&w, stages, o);
        jadd(&w, o, "replica", jint(st->replica));
        jadd(&w, o, "stage", jint(st->stage));
        jadd(&w, o, "node", cJSON_CreateString(node));
        jadd(&w, o, "node_index", jint(st->node));
        jadd(&w, o, "gpu_type", cJSON_CreateString(gpu_type(plan, st)));
        jadd(&w, o, "tp", jint(tp));
        cJSON *ids = cJSON_CreateArray();
        jadd(&w, o, "gpus", ids);
        for (int g = 0; g < tp; g++)
            jpush(&w, ids, jint(st->gpu_first + g));
        if (ps)
            jadd(&w, o, "layers", jpair(ps->layer_first, ps->layer_last));
        jadd(&w, o, "compute_s", jnum(st->compute_s));
        jadd(&w, o, "exposed_comm_s", jnum(st->exposed_comm_s));
        jadd(&w, o, "idle_s", jnum(st->idle_s));
        jadd(&w, o, "peak_memory_bytes", jnum(st->peak_memory_bytes));
        jadd(&w, o, "capacity_bytes", jnum(st->capacity_bytes));
        jadd(&w, o, "static_bytes", jnum(st->static_bytes));
        jadd(&w, o, "peak_in_flight", jint(st->peak_in_flight));
        jadd(&w, o, "finish_s", jnum(st->finish_s));
        for (int g = 0; g < tp; g++) {
            cJSON *q = cJSON_CreateObject();
            jpush(&w, gpus, q);
            jadd(&w, q, "node", cJSON_CreateString(node));
            jadd(&w, q, "node_index", jint(st->node));
            jadd(&w, q, "gpu", jint(st->gpu_first + g));
            jadd(&w, q, "gpu_type", cJSON_CreateString(gpu_type(plan, st)));
            jadd(&w, q, "replica", jint(st->replica));
            jadd(&w, q, "stage", jint(st->stage));
            jadd(&w, q, "tp", jint(tp));
            jadd(&w, q, "compute_s", jnum(st->compute_s));
            jadd(&w, q, "exposed_comm_s", jnum(st->exposed_comm_s));
            jadd(&w, q, "idle_s", jnum(st->idle_s));
            jadd(&w, q, "peak_memory_bytes", jnum(st->peak_memory_bytes));
            jadd(&w, q, "capacity_bytes", jnum(st->capacity_bytes));
        }
    }

    cJSON *bks = cJSON_CreateArray();
    jadd(&w, root, "buckets", bks);
    for (int k = 0; r->buckets && k < r->n_buckets; k++) {
        const ah_sim_bucket *bk = &r->buckets[k];
        cJSON *o = cJSON_CreateObject();
        jpush(&w, bks, o);
        jadd(&w, o, "layers", jpair(bk->first, bk->last));
        jadd(&w, o, "bytes", jnum(bk->bytes));
        jadd(&w, o, "slices", jint(bk->slices > 0 ? bk->slices : 1));
        jadd(&w, o, "holders", jint(bk->n_holders));
        jadd(&w, o, "ready_s", jnum(bk->ready_s));
        jadd(&w, o, "start_s", jnum(bk->start_s));
        jadd(&w, o, "end_s", jnum(bk->end_s));
    }

    char *text = w.bad ? NULL : cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) {
        ah_errf(err, errlen, "%s: out of memory building the document", path ? path : "?");
        return -1;
    }
    int rc = ah_write_text_output(path, text, err, errlen);
    cJSON_free(text);
    return rc;
}

/* ------------------------------------------------------------- text report */

static double pct(double part, double whole) {
    return whole > 0 ? 100.0 * part / whole : 0.0;
}

void ah_sim_print_summary(const ah_plan *plan, const ah_sim_result *r, FILE *f) {
    if (!r || !f)
        return;
    char nb[64];
    double it = r->iteration_time_s;
    fprintf(f, "Simulated iteration (schedule %s): %.6f s; closed form %.6f s; model error %+.2f%%\n",
            ah_schedule_name(r->schedule), it, r->closed_form_s,
            it > 0 ? (r->closed_form_s / it - 1.0) * 100.0 : 0.0);
    fprintf(f, "%d replica%s, %d stages, %d events, %lld flow updates\n\n", r->n_replicas,
            r->n_replicas == 1 ? "" : "s", r->n_stages, r->n_events, r->flow_updates);

    int wn = 4, wg = 3;
    for (int i = 0; r->stages && i < r->n_stages; i++) {
        int ln = (int)strlen(node_name(plan, &r->stages[i], nb, sizeof nb));
        int lg = (int)strlen(gpu_type(plan, &r->stages[i]));
        wn = ln > wn ? ln : wn;
        wg = lg > wg ? lg : wg;
    }
    wn = wn > 24 ? 24 : wn;
    wg = wg > 16 ? 16 : wg;
    fprintf(f, "%7s %5s %3s  %-*s  %-*s  %8s %10s %7s  %-19s %9s %10s\n", "replica", "stage", "tp", wg, "gpu",
            wn, "node", "compute", "exp. comm", "idle", "peak mem / cap GiB", "in flight", "finish s");
    for (int i = 0; r->stages && i < r->n_stages; i++) {
        const ah_sim_stage *st = &r->stages[i];
        char mem[48];
        snprintf(mem, sizeof mem, "%.2f / %.2f%s", st->peak_memory_bytes / GIB, st->capacity_bytes / GIB,
                 st->capacity_bytes > 0 && st->peak_memory_bytes > st->capacity_bytes ? " !" : "");
        fprintf(f, "%7d %5d %3d  %-*.*s  %-*.*s  %7.1f%% %9.1f%% %6.1f%%  %-19s %9d %10.6f\n", st->replica,
                st->stage, stage_tp(plan, st), wg, wg, gpu_type(plan, st), wn, wn,
                node_name(plan, st, nb, sizeof nb), pct(st->compute_s, it), pct(st->exposed_comm_s, it),
                pct(st->idle_s, it), mem, st->peak_in_flight, st->finish_s);
    }
    fputc('\n', f);
    for (int k = 0; k < r->n_replicas; k++)
        fprintf(f, "replica %d: flush %.6f s, finish %.6f s\n", k,
                r->replica_flush_s ? r->replica_flush_s[k] : 0.0,
                r->replica_finish_s ? r->replica_finish_s[k] : 0.0);
    if (r->n_buckets > 0)
        fprintf(f, "DP all-reduce: %d bucket%s, tail after the last flush %.6f s\n", r->n_buckets,
                r->n_buckets == 1 ? "" : "s", last_bucket_end(r) - last_flush(r));
    else
        fprintf(f, "DP all-reduce: no buckets\n");
    fprintf(f, "Iteration time: simulated %.6f s, closed form %.6f s, model error %+.2f%%\n", it,
            r->closed_form_s, it > 0 ? (r->closed_form_s / it - 1.0) * 100.0 : 0.0);
}
