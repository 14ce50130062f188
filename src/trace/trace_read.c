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
static ah_trace_kind item_kind(const cJSON *args, const char *site, const char *name) {
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(args, "kind");
    if (cJSON_IsString(k) && ah_trace_kind_parse(k->valuestring) >= 0)
        return (ah_trace_kind)ah_trace_kind_parse(k->valuestring);
    const char *src[2] = {site, name};
    for (int i = 0; i < 2; i++) {
        char w[64];
        snprintf(w, sizeof w, "%s", src[i]);
        w[strcspn(w, " ")] = '\0';
        if (ah_trace_kind_parse(w) >= 0)
            return (ah_trace_kind)ah_trace_kind_parse(w);
    }
    return AH_TRACE_KINDS;
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
                          .lane = v->tid / AH_TRACE_STREAMS,
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

static int read_events(const char *path, const cJSON *evs, ah_trace_file *t, char *err, size_t errlen) {
    t->items = ah_xcalloc((size_t)cJSON_GetArraySize(evs) + 1, sizeof(ah_trace_item));
    const cJSON *it;
    cJSON_ArrayForEach(it, evs) {
        const cJSON *ph = cJSON_GetObjectItemCaseSensitive(it, "ph");
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
            return -1;
        }
        ah_trace_item *v = &t->items[t->n++];
        read_item(it, v);
        if (v->ev.rank + 1 > t->n_ranks)
            t->n_ranks = v->ev.rank + 1;
    }
    if (t->n == 0) {
        ah_errf(err, errlen, "%s: no \"X\" events", path);
        return -1;
    }
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
        rc = read_events(path, evs, t, err, errlen);
    }
    cJSON_Delete(root);
    if (rc != 0)
        ah_trace_file_free(t);
    return rc;
}

void ah_trace_file_free(ah_trace_file *t) {
    free(t->items);
    memset(t, 0, sizeof *t);
}
