/* Reading a Chrome trace back into trace records (autohet/trace_analysis.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "autohet/trace_analysis.h"
#include "util/errors.h"
#include "util/json_file.h"

static int int_or(const cJSON *o, const char *k, int dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) && v->valuedouble > -1e9 && v->valuedouble < 1e9 ? v->valueint : dflt;
}

/* the kind: args.kind, else the first word of the site or the name */
static ah_op_kind item_kind(const cJSON *args, const char *site, const char *name) {
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(args, "kind");
    if (cJSON_IsString(k) && ah_op_kind_parse(k->valuestring) >= 0)
        return (ah_op_kind)ah_op_kind_parse(k->valuestring);
    const char *src[2] = {site, name};
    for (int i = 0; i < 2; i++) {
        char w[64];
        snprintf(w, sizeof w, "%s", src[i]);
        w[strcspn(w, " ")] = '\0';
        if (ah_op_kind_parse(w) >= 0)
            return (ah_op_kind)ah_op_kind_parse(w);
    }
    return AH_OP_KINDS;
}

static void read_item(const cJSON *it, ah_trace_item *v) {
    const cJSON *pid = cJSON_GetObjectItemCaseSensitive(it, "pid"), *ts = cJSON_GetObjectItemCaseSensitive(it, "ts"),
                *dur = cJSON_GetObjectItemCaseSensitive(it, "dur"), *cat = cJSON_GetObjectItemCaseSensitive(it, "cat"),
                *args = cJSON_GetObjectItemCaseSensitive(it, "args"),
                *nm = cJSON_GetObjectItemCaseSensitive(it, "name"),
                *site = cJSON_GetObjectItemCaseSensitive(args, "site"),
                *bytes = cJSON_GetObjectItemCaseSensitive(args, "bytes"),
                *ly = cJSON_GetObjectItemCaseSensitive(args, "layers");
    v->ts = ts->valuedouble;
    v->dur = dur->valuedouble;
    v->comm = !strcmp(cat->valuestring, "communication");
    v->tid = int_or(it, "tid", 0);
    snprintf(v->name, sizeof v->name, "%s", cJSON_IsString(nm) ? nm->valuestring : "?");
    snprintf(v->site, sizeof v->site, "%s", cJSON_IsString(site) ? site->valuestring : v->name);
    ah_trace_event *e = &v->ev;
    *e = (ah_trace_event){.t0 = v->ts * 1e-6,
                          .t1 = (v->ts + v->dur) * 1e-6,
                          .rank = pid->valueint,
                          .lane = v->tid / AH_STREAMS,
                          .kind = item_kind(args, v->site, v->name),
                          .micro_batch = int_or(args, "micro_batch", -1),
                          .layer_first = -1,
                          .layer_last = -1,
                          .bucket = int_or(args, "bucket", -1),
                          .bytes = cJSON_IsNumber(bytes) ? bytes->valuedouble : 0,
                          .ranks = int_or(args, "ranks", 1),
                          .group = int_or(args, "group", 0),
                          .peer = int_or(args, "peer", -1),
                          .seq = int_or(args, "seq", 0)};
    int a, b;
    if (cJSON_IsArray(ly) && cJSON_GetArraySize(ly) == 2 && cJSON_IsNumber(cJSON_GetArrayItem(ly, 0)) &&
        cJSON_IsNumber(cJSON_GetArrayItem(ly, 1))) {
        e->layer_first = cJSON_GetArrayItem(ly, 0)->valueint;
        e->layer_last = cJSON_GetArrayItem(ly, 1)->valueint;
    } else if (sscanf(v->site, "dp_allreduce layers %d-%d", &a, &b) == 2) {
        e->layer_first = a; /* a trace that names the bucket only in its site */
        e->layer_last = b + 1;
    }
    if (e->layer_last <= e->layer_first)
        e->layer_first = e->layer_last = -1;
}

/* one end of a flow arrow */
typedef struct {
    double id, ts;
    int pid, end; /* end: 0 "s", 1 "f" */
} flow_point;

static int cmp_flow_point(const void *a, const void *b) {
    const flow_point *x = a, *y = b;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    return x->end - y->end;
}

/* a flow point of an "s" or "f" event with numeric id, pid and ts */
static int read_flow_point(const cJSON *it, const char *ph, flow_point *p) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id"),
                *pid = cJSON_GetObjectItemCaseSensitive(it, "pid"),
                *ts = cJSON_GetObjectItemCaseSensitive(it, "ts");
    if (strcmp(ph, "s") && strcmp(ph, "f"))
        return 0;
    if (!cJSON_IsNumber(id) || !cJSON_IsNumber(pid) || !cJSON_IsNumber(ts) || !(ts->valuedouble > -1e300) ||
        !(ts->valuedouble < 1e300) || pid->valuedouble < 0 || pid->valuedouble >= 1 << 20)
        return 0;
    *p = (flow_point){id->valuedouble, ts->valuedouble, pid->valueint, ph[0] == 'f'};
    return 1;
}

/* the flow arrows: an "s" and an "f" with the same id (ids seen once or more than twice are left out) */
static void pair_flows(flow_point *p, int n, ah_trace_file *t) {
    qsort(p, (size_t)n, sizeof *p, cmp_flow_point);
    t->flows = ah_xcalloc((size_t)n / 2 + 1, sizeof(ah_trace_flow));
    for (int a = 0, b; a < n; a = b) {
        for (b = a; b < n && p[b].id == p[a].id; b++)
            ;
        if (b - a == 2 && p[a].end == 0 && p[a + 1].end == 1)
            t->flows[t->n_flows++] = (ah_trace_flow){p[a].pid, p[a + 1].pid, p[a].ts, p[a + 1].ts};
    }
}

/* What the trace says of its ranks besides its "X" events: otherData.ranks (the engine and the simulator
 * write it, a string of the count; 0: absent) and which pids a process_name metadata event names. */
typedef struct {
    int declared;    /* otherData.ranks, or 0 */
    char *named;     /* named[pid]: a process_name names it (NULL: the trace names no process) */
    int named_limit; /* the highest named pid + 1 */
    int n_named;
} rank_decl;

static int read_rank_decl(const char *path, const cJSON *root, const cJSON *evs, rank_decl *d, char *err,
                          size_t errlen) {
    const cJSON *rk = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "otherData"), "ranks");
    double v = -1;
    char *end = NULL;
    if (cJSON_IsNumber(rk))
        v = rk->valuedouble;
    else if (cJSON_IsString(rk) && rk->valuestring[0])
        v = strtod(rk->valuestring, &end);
    if (rk && (!(v >= 1 && v < 1 << 20) || v != (int)v || (end && *end))) {
        ah_errf(err, errlen, "%s: otherData.ranks: expected the number of ranks, a positive integer", path);
        return -1;
    }
    d->declared = rk ? (int)v : 0;
    const cJSON *it;
    for (int pass = 0; pass < 2; pass++) { /* the highest pid, then the names */
        cJSON_ArrayForEach(it, evs) {
            const cJSON *ph = cJSON_GetObjectItemCaseSensitive(it, "ph"),
                        *nm = cJSON_GetObjectItemCaseSensitive(it, "name"),
                        *pid = cJSON_GetObjectItemCaseSensitive(it, "pid");
            if (!cJSON_IsString(ph) || strcmp(ph->valuestring, "M") || !cJSON_IsString(nm) ||
                strcmp(nm->valuestring, "process_name") || !cJSON_IsNumber(pid) || pid->valuedouble < 0 ||
                pid->valuedouble >= 1 << 20)
                continue;
            if (pass == 0 && pid->valueint + 1 > d->named_limit)
                d->named_limit = pid->valueint + 1;
            if (pass == 1 && !d->named[pid->valueint]) {
                d->named[pid->valueint] = 1;
                d->n_named++;
            }
        }
        if (pass == 0 && d->named_limit > 0)
            d->named = ah_xcalloc((size_t)d->named_limit, 1);
        else if (pass == 0)
            break;
    }
    return 0;
}

/* an "X" event's pid against otherData.ranks and the process names: a pid outside them made phantom ranks */
static int check_pid(const char *path, int k, const cJSON *it, int pid, const rank_decl *d, char *err,
                     size_t errlen) {
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name");
    const char *name = cJSON_IsString(nm) ? nm->valuestring : "?";
    if (d->declared > 0 && pid >= d->declared) {
        ah_errf(err, errlen, "%s: traceEvents[%d] (\"X\" event \"%.60s\"): pid %d, but otherData.ranks says the "
                "trace has %d ranks (pids 0-%d)", path, k, name, pid, d->declared, d->declared - 1);
        return -1;
    }
    if (d->named && (pid >= d->named_limit || !d->named[pid])) {
        ah_errf(err, errlen, "%s: traceEvents[%d] (\"X\" event \"%.60s\"): pid %d, which no process_name "
                "metadata event names (the trace names %d processes, the highest pid %d)", path, k, name, pid,
                d->n_named, d->named_limit - 1);
        return -1;
    }
    return 0;
}

/* every pid below the highest one has events: ranks are numbered 0 to N-1, each with operations, so a gap
 * is an event on a pid that is no rank of the run (it would make the ranks between phantom, without
 * compute) */
static int check_gaps(const char *path, const ah_trace_file *t, char *err, size_t errlen) {
    char *seen = ah_xcalloc((size_t)t->n_ranks + 1, 1);
    int top = 0;
    for (int i = 0; i < t->n; i++) {
        seen[t->items[i].ev.rank] = 1;
        if (t->items[i].ev.rank == t->n_ranks - 1)
            top = i;
    }
    int gap = 0;
    while (gap < t->n_ranks && seen[gap])
        gap++;
    free(seen);
    if (gap == t->n_ranks)
        return 0;
    ah_errf(err, errlen,
            "%s: an \"X\" event \"%.60s\" has pid %d, but pid %d has no events: a trace's ranks are pids 0 to "
            "N-1, each with events",
            path, t->items[top].name, t->n_ranks - 1, gap);
    return -1;
}

static int read_events(const char *path, const cJSON *evs, const rank_decl *d, ah_trace_file *t, char *err,
                       size_t errlen) {
    t->items = ah_xcalloc((size_t)cJSON_GetArraySize(evs) + 1, sizeof(ah_trace_item));
    flow_point *fp = ah_xcalloc((size_t)cJSON_GetArraySize(evs) + 1, sizeof(flow_point));
    int nfp = 0, k = -1;
    const cJSON *it;
    cJSON_ArrayForEach(it, evs) {
        k++;
        const cJSON *ph = cJSON_GetObjectItemCaseSensitive(it, "ph");
        if (cJSON_IsString(ph))
            nfp += read_flow_point(it, ph->valuestring, &fp[nfp]);
        if (!cJSON_IsString(ph) || strcmp(ph->valuestring, "X"))
            continue;
        const cJSON *pid = cJSON_GetObjectItemCaseSensitive(it, "pid"),
                    *ts = cJSON_GetObjectItemCaseSensitive(it, "ts"),
                    *dur = cJSON_GetObjectItemCaseSensitive(it, "dur"),
                    *cat = cJSON_GetObjectItemCaseSensitive(it, "cat");
        if (!cJSON_IsNumber(pid) || !cJSON_IsNumber(ts) || !cJSON_IsNumber(dur) || !cJSON_IsString(cat) ||
            pid->valuedouble < 0 || pid->valuedouble >= 1 << 20 || !(dur->valuedouble >= 0) ||
            !(ts->valuedouble > -1e300 && ts->valuedouble < 1e300) || !(dur->valuedouble < 1e300)) {
            ah_errf(err, errlen, "%s: traceEvents[]: an \"X\" event needs numeric pid, ts, dur >= 0 and a cat",
                    path);
            free(fp);
            return -1;
        }
        if (check_pid(path, k, it, pid->valueint, d, err, errlen)) {
            free(fp);
            return -1;
        }
        ah_trace_item *v = &t->items[t->n++];
        read_item(it, v);
        if (v->ev.rank + 1 > t->n_ranks)
            t->n_ranks = v->ev.rank + 1;
    }
    pair_flows(fp, nfp, t);
    free(fp);
    if (t->n == 0) {
        ah_errf(err, errlen, "%s: no \"X\" events", path);
        return -1;
    }
    return check_gaps(path, t, err, errlen);
}

/* each rank's node from its process name: "rank R (replica k, stage j, tp t) on NODE (DEVICE)" */
static void read_nodes(const cJSON *evs, ah_trace_file *t) {
    t->node = ah_xcalloc((size_t)t->n_ranks + 1, sizeof *t->node);
    const cJSON *it;
    cJSON_ArrayForEach(it, evs) {
        const cJSON *ph = cJSON_GetObjectItemCaseSensitive(it, "ph"), *nm = cJSON_GetObjectItemCaseSensitive(it, "name"),
                    *pid = cJSON_GetObjectItemCaseSensitive(it, "pid"),
                    *arg = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(it, "args"), "name");
        if (!cJSON_IsString(ph) || strcmp(ph->valuestring, "M") || !cJSON_IsString(nm) ||
            strcmp(nm->valuestring, "process_name") || !cJSON_IsNumber(pid) || pid->valuedouble < 0 ||
            pid->valuedouble >= t->n_ranks || !cJSON_IsString(arg))
            continue;
        const char *on = strstr(arg->valuestring, ") on ");
        if (!on)
            continue;
        char *dst = t->node[pid->valueint];
        snprintf(dst, sizeof t->node[0], "%s", on + 5);
        char *paren = strstr(dst, " (");
        if (paren)
            *paren = '\0';
    }
}

static int num_field(const cJSON *o, const char *k, double *v) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(x) || !(x->valuedouble > -1e300 && x->valuedouble < 1e300))
        return -1;
    *v = x->valuedouble;
    return 0;
}

/* otherData.clock (docs/analyze.md, "Clocks"); absent: no correction */
static int read_clock(const char *path, const cJSON *clk, ah_trace_clock *c, char *err, size_t errlen) {
    if (!clk)
        return 0;
    const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(clk, "ranks"),
                *dom = cJSON_GetObjectItemCaseSensitive(clk, "domain"), *q;
    double rounds = 0;
    int bad = !cJSON_IsObject(clk) || !cJSON_IsArray(ranks) || num_field(clk, "origin_s", &c->origin_s) ||
              num_field(clk, "rounds", &rounds);
    c->n = bad ? 0 : cJSON_GetArraySize(ranks);
    c->ranks = ah_xcalloc((size_t)c->n + 1, sizeof(ah_trace_clock_rank));
    const cJSON *list = bad ? NULL : ranks;
    cJSON_ArrayForEach(q, list) {
        double r = -1;
        ah_trace_clock_rank v;
        if (num_field(q, "rank", &r) || r < 0 || r >= c->n || r != (int)r ||
            num_field(q, "offset_s", &v.offset_s) || num_field(q, "offset_end_s", &v.offset_end_s) ||
            num_field(q, "drift_ppm", &v.drift_ppm) || num_field(q, "residual_s", &v.residual_s) ||
            num_field(q, "rtt_s", &v.rtt_s) || num_field(q, "sync_start_s", &v.sync_start_s) ||
            num_field(q, "sync_end_s", &v.sync_end_s)) {
            bad = 1;
            break;
        }
        c->ranks[(int)r] = v;
    }
    if (bad) {
        ah_errf(err, errlen,
                "%s: otherData.clock: expected origin_s, rounds and ranks[] with rank, offset_s, "
                "offset_end_s, drift_ppm, residual_s, rtt_s, sync_start_s, sync_end_s",
                path);
        return -1;
    }
    c->present = 1;
    c->rounds = rounds > 0 && rounds < 1e9 ? (int)rounds : 0;
    snprintf(c->domain, sizeof c->domain, "%s", cJSON_IsString(dom) ? dom->valuestring : "?");
    return 0;
}

int ah_trace_read(const char *path, ah_trace_file *t, char *err, size_t errlen) {
    memset(t, 0, sizeof *t);
    cJSON *root = ah_json_parse_file(path, 1u << 30, 1, err, errlen);
    if (!root)
        return -1;
    const cJSON *evs = cJSON_GetObjectItemCaseSensitive(root, "traceEvents"),
                *fmt = cJSON_GetObjectItemCaseSensitive(root, "format"),
                *src = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "otherData"), "source");
    int rc = 0;
    if (cJSON_IsString(fmt) && !strcmp(fmt->valuestring, "autohet-sim")) {
        ah_errf(err, errlen, "%s: the summary of autohet simulate --json, not a trace (write one with "
                             "autohet simulate PLAN --trace FILE)", path);
        rc = -1;
    } else if (!cJSON_IsArray(evs)) {
        ah_errf(err, errlen, "%s: traceEvents: expected an array (a trace of autohet train or simulate --trace)",
                path);
        rc = -1;
    } else {
        if (cJSON_IsString(src))
            snprintf(t->source, sizeof t->source, "%s", src->valuestring);
        rank_decl d = {0};
        rc = read_rank_decl(path, root, evs, &d, err, errlen);
        if (rc == 0)
            rc = read_events(path, evs, &d, t, err, errlen);
        free(d.named);
        if (rc == 0)
            read_nodes(evs, t);
        if (rc == 0)
            rc = read_clock(path,
                            cJSON_GetObjectItemCaseSensitive(
                                cJSON_GetObjectItemCaseSensitive(root, "otherData"), "clock"),
                            &t->clock, err, errlen);
    }
    cJSON_Delete(root);
    if (rc != 0)
        ah_trace_file_free(t);
    return rc;
}

void ah_trace_file_free(ah_trace_file *t) {
    free(t->items);
    free(t->flows);
    free(t->clock.ranks);
    free(t->node);
    memset(t, 0, sizeof *t);
}
