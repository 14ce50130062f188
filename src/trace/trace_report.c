/* The analysis as files: JSON (analyze --json) and an SVG bar chart
 * (analyze --svg), autohet/trace_analysis.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "autohet/trace_analysis.h"
#include "util/atomic_file.h"
#include "util/svg.h"
#include "util/errors.h"

static void add_pair(cJSON *o, const char *name, ah_trace_pair p) {
    char k[64];
    snprintf(k, sizeof k, "%s_measured_s", name);
    cJSON_AddNumberToObject(o, k, p.measured_s);
    snprintf(k, sizeof k, "%s_simulated_s", name);
    cJSON_AddNumberToObject(o, k, p.simulated_s);
    snprintf(k, sizeof k, "%s_error", name);
    cJSON_AddNumberToObject(o, k, p.error);
}

static cJSON *analysis_json(const char *trace_path, const ah_trace_analysis *a) {
    cJSON *out = cJSON_CreateObject(), *jr = cJSON_AddArrayToObject(out, "ranks"),
          *js = cJSON_AddArrayToObject(out, "sites"), *jb = cJSON_AddArrayToObject(out, "buckets");
    cJSON_AddStringToObject(out, "trace", trace_path);
    cJSON_AddNumberToObject(out, "span_us", a->span_us);
    cJSON_AddNumberToObject(out, "steps", a->steps);
    cJSON_AddNumberToObject(out, "skipped_steps", a->skipped);
    if (a->steps > 0)
        cJSON_AddNumberToObject(out, "iteration_s", a->iteration_s);
    for (int r = 0; r < a->ranks; r++) {
        const ah_trace_split *s = &a->split[r];
        cJSON *o = cJSON_CreateObject(), *k = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "rank", r);
        cJSON_AddNumberToObject(o, "wall_s", s->span * 1e-6);
        cJSON_AddNumberToObject(o, "compute_s", s->compute * 1e-6);
        cJSON_AddNumberToObject(o, "exposed_comm_s", s->exposed * 1e-6);
        cJSON_AddNumberToObject(o, "bubble_s", s->bubble * 1e-6);
        cJSON_AddNumberToObject(o, "checkpoint_s", s->checkpoint * 1e-6);
        cJSON_AddNumberToObject(o, "other_s", s->other * 1e-6);
        for (int q = 0; q < AH_OP_KINDS; q++)
            if (a->kind_s[r * AH_OP_KINDS + q] > 0)
                cJSON_AddNumberToObject(k, ah_op_kind_name((ah_op_kind)q), a->kind_s[r * AH_OP_KINDS + q]);
        cJSON_AddItemToObject(o, "kind_s_per_step", k);
        cJSON_AddItemToArray(jr, o);
    }
    for (int i = 0; i < a->n_sites; i++) {
        const ah_trace_site *s = &a->sites[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "site", s->site);
        cJSON_AddNumberToObject(o, "calls", s->calls);
        cJSON_AddNumberToObject(o, "bytes_per_call", s->bytes_per_call);
        cJSON_AddNumberToObject(o, "ranks", s->ranks);
        cJSON_AddNumberToObject(o, "avg_us", s->avg_us);
        if (s->busbw_GBps > 0)
            cJSON_AddNumberToObject(o, "busbw_GBps", s->busbw_GBps);
        if (s->instances) {
            cJSON_AddNumberToObject(o, "instances", s->instances);
            cJSON_AddNumberToObject(o, "skew_us", s->skew_us);
            cJSON_AddNumberToObject(o, "transfer_us", s->transfer_us);
        }
        if (s->predicted_us >= 0)
            cJSON_AddNumberToObject(o, "predicted_us", s->predicted_us);
        cJSON_AddItemToArray(js, o);
    }
    for (int b = 0; b < a->n_buckets; b++) {
        cJSON *o = cJSON_CreateObject(), *rs = cJSON_AddArrayToObject(o, "rank_s");
        cJSON_AddItemToObject(o, "layers", cJSON_CreateIntArray((int[]){a->buckets[b].first, a->buckets[b].last}, 2));
        cJSON_AddNumberToObject(o, "mean_s", a->buckets[b].mean_s);
        for (int r = 0; r < a->ranks; r++)
            cJSON_AddItemToArray(rs, a->buckets[b].rank_s[r] < 0 ? cJSON_CreateNull()
                                                                  : cJSON_CreateNumber(a->buckets[b].rank_s[r]));
        cJSON_AddItemToArray(jb, o);
    }
    cJSON *jt = cJSON_AddArrayToObject(out, "slowest");
    for (int i = 0; i < a->n_slowest; i++) {
        const ah_trace_item *v = &a->items[a->slowest[i]];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "rank", v->ev.rank);
        cJSON_AddStringToObject(o, "name", v->name);
        cJSON_AddNumberToObject(o, "dur_us", v->dur);
        cJSON_AddItemToArray(jt, o);
    }
    return out;
}

static cJSON *causality_json(const ah_trace_causality_counts *c) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "receives", c->receives);
    cJSON_AddNumberToObject(o, "receives_before_send", c->receives_before_send);
    cJSON_AddNumberToObject(o, "collective_instances", c->collectives);
    cJSON_AddNumberToObject(o, "collective_order_violations", c->collective_order);
    cJSON_AddNumberToObject(o, "flows", c->flows);
    cJSON_AddNumberToObject(o, "flows_backward", c->flows_backward);
    cJSON_AddNumberToObject(o, "worst_violation_us", c->worst_us);
    return o;
}

/* "clock": the correction the trace records; "causality": the checks of its order */
static void clock_json(cJSON *out, const ah_trace_analysis *a) {
    const ah_trace_clock *c = &a->clock;
    cJSON *o = cJSON_AddObjectToObject(out, "clock"), *jr;
    cJSON_AddBoolToObject(o, "corrected", c->present);
    if (c->present) {
        cJSON_AddStringToObject(o, "domain", c->domain);
        cJSON_AddNumberToObject(o, "rounds", c->rounds);
        cJSON_AddNumberToObject(o, "origin_s", c->origin_s);
        double worst = 0;
        jr = cJSON_AddArrayToObject(o, "ranks");
        for (int r = 0; r < c->n; r++) {
            const ah_trace_clock_rank *q = &c->ranks[r];
            cJSON *x = cJSON_CreateObject();
            cJSON_AddNumberToObject(x, "rank", r);
            cJSON_AddNumberToObject(x, "offset_s", q->offset_s);
            cJSON_AddNumberToObject(x, "offset_end_s", q->offset_end_s);
            cJSON_AddNumberToObject(x, "drift_ppm", q->drift_ppm);
            cJSON_AddNumberToObject(x, "residual_s", q->residual_s);
            cJSON_AddNumberToObject(x, "rtt_s", q->rtt_s);
            cJSON_AddItemToArray(jr, x);
            worst = q->residual_s > worst ? q->residual_s : worst;
        }
        cJSON_AddNumberToObject(o, "max_residual_s", worst);
    }
    cJSON *k = causality_json(&a->causality.as_written);
    if (a->causality.has_uncorrected)
        cJSON_AddItemToObject(k, "uncorrected", causality_json(&a->causality.uncorrected));
    cJSON_AddItemToObject(out, "causality", k);
}

static cJSON *comparison_json(const char *sim_path, const ah_trace_comparison *c) {
    cJSON *o = cJSON_CreateObject(), *jr = cJSON_AddArrayToObject(o, "ranks"),
          *jb = cJSON_AddArrayToObject(o, "buckets");
    cJSON_AddStringToObject(o, "sim", sim_path);
    add_pair(o, "iteration", c->iteration);
    for (int r = 0; r < c->ranks; r++) {
        cJSON *q = cJSON_CreateObject(), *jk = cJSON_CreateArray();
        cJSON_AddNumberToObject(q, "rank", r);
        for (int p = 0; p < AH_TRACE_PARTS; p++)
            add_pair(q, ah_trace_part_name(p), c->parts[r * AH_TRACE_PARTS + p]);
        for (int k = 0; k < AH_OP_KINDS; k++) {
            if (!c->kind_seen[r * AH_OP_KINDS + k])
                continue;
            cJSON *x = cJSON_CreateObject();
            cJSON_AddStringToObject(x, "kind", ah_op_kind_name((ah_op_kind)k));
            add_pair(x, "time", c->kinds[r * AH_OP_KINDS + k]);
            cJSON_AddItemToArray(jk, x);
        }
        cJSON_AddItemToObject(q, "kinds", jk);
        cJSON_AddItemToArray(jr, q);
    }
    cJSON *jv = cJSON_AddArrayToObject(o, "volume_mismatches");
    for (int i = 0; i < c->n_volumes; i++) {
        cJSON *q = cJSON_CreateObject();
        cJSON_AddStringToObject(q, "site", c->volumes[i].site);
        cJSON_AddNumberToObject(q, "measured_bytes_per_call", c->volumes[i].measured_bytes);
        cJSON_AddNumberToObject(q, "simulated_bytes_per_call", c->volumes[i].simulated_bytes);
        cJSON_AddItemToArray(jv, q);
    }
    for (int b = 0; b < c->n_buckets; b++) {
        cJSON *q = cJSON_CreateObject(), *rs = cJSON_AddArrayToObject(q, "ranks");
        char site[64];
        snprintf(site, sizeof site, "dp_allreduce layers %d-%d", c->bucket_layers[b][0], c->bucket_layers[b][1] - 1);
        cJSON_AddStringToObject(q, "site", site);
        cJSON_AddItemToObject(q, "layers", cJSON_CreateIntArray(c->bucket_layers[b], 2));
        add_pair(q, "time", c->buckets[b]);
        for (int r = 0; r < c->ranks; r++) {
            ah_trace_pair p = c->bucket_ranks[b * c->ranks + r];
            if (isnan(p.measured_s))
                continue;
            cJSON *x = cJSON_CreateObject();
            cJSON_AddNumberToObject(x, "rank", r);
            add_pair(x, "time", p);
            cJSON_AddItemToArray(rs, x);
        }
        cJSON_AddItemToArray(jb, q);
    }
    return o;
}

int ah_trace_write_analysis_json(const char *path, const char *trace_path, const ah_trace_analysis *a,
                                 const char *sim_path, const ah_trace_comparison *c, const ah_trace_stack *stack,
                                 cJSON *extra, char *err, size_t errlen) {
    cJSON *out = analysis_json(trace_path, a);
    clock_json(out, a);
    if (c)
        cJSON_AddItemToObject(out, "prediction", comparison_json(sim_path ? sim_path : "", c));
    if (stack)
        cJSON_AddItemToObject(out, "stack", ah_trace_stack_json(stack));
    for (cJSON *it = extra ? extra->child : NULL; it;) {
        cJSON *next = it->next;
        cJSON_AddItemToObject(out, it->string, cJSON_DetachItemViaPointer(extra, it));
        it = next;
    }
    cJSON_Delete(extra);
    char *text = cJSON_Print(out), why[512];
    int rc = text ? ah_write_text_output(path, text, why, sizeof why) : -1;
    if (rc)
        ah_errf(err, errlen, "--json %s", text ? why : "out of memory");
    free(text);
    cJSON_Delete(out);
    return rc;
}

/* One stacked bar per rank (compute / exposed / bubble / other), the values
 * on the bars where they fit and in ms beside them. */
int ah_trace_write_analysis_svg(const char *path, const char *trace_path, const ah_trace_analysis *a, char *err,
                                size_t errlen) {
    ah_out_file o;
    char why[512], buf[256];
    if (ah_out_open(&o, path, why, sizeof why) != 0) {
        ah_errf(err, errlen, "--svg %s", why);
        return -1;
    }
    FILE *f = o.f;
    int W = 900, row = 26, H = 70 + row * a->ranks, bar = 560;
    ah_svg_open(f, W, H, "font-family=\"sans-serif\" font-size=\"12\"");
    ah_svg_rect(f, 0, 0, W, H, "fill=\"white\"", NULL);
    snprintf(buf, sizeof buf, "Where the time went, per rank: %s (span %.1f ms)", trace_path, a->span_us / 1e3);
    ah_svg_title(f, buf);
    ah_svg_text(f, 10, 20, "font-size=\"15\" font-weight=\"bold\"", buf);
    const char *col[5] = {"#4c78a8", "#e45756", "#f2cf5b", "#59a14f", "#bab0ac"},
               *lab[5] = {"compute", "exposed communication", "pipeline bubble", "checkpoint", "other"};
    for (int q = 0; q < 5; q++) {
        char fill[32];
        snprintf(fill, sizeof fill, "fill=\"%s\"", col[q]);
        ah_svg_rect(f, 10 + q * 170, 30, 12, 12, fill, NULL);
        ah_svg_text(f, 26 + q * 170, 41, NULL, lab[q]);
    }
    for (int r = 0; r < a->ranks; r++) {
        const ah_trace_split *s = &a->split[r];
        double x = 70, y = 55 + r * row, parts[5] = {s->compute, s->exposed, s->bubble, s->checkpoint, s->other};
        snprintf(buf, sizeof buf, "rank %d", r);
        ah_svg_text(f, 10, y + 14, NULL, buf);
        for (int q = 0; q < 5; q++) {
            double pw = s->span > 0 ? bar * (parts[q] > 0 ? parts[q] : 0) / s->span : 0,
                   pct = s->span > 0 ? 100 * parts[q] / s->span : 0;
            char fill[32];
            snprintf(fill, sizeof fill, "fill=\"%s\"", col[q]);
            snprintf(buf, sizeof buf, "%s %.3f ms (%.1f%%)", lab[q], parts[q] / 1e3, pct);
            ah_svg_rect(f, x, y, pw, 18, fill, buf);
            if (pw >= 36) { /* the value on the bar where it fits */
                snprintf(buf, sizeof buf, "%.0f%%", pct);
                ah_svg_text(f, x + pw / 2, y + 13, "font-size=\"10\" text-anchor=\"middle\"", buf);
            }
            x += pw;
        }
        if (s->checkpoint > 0)
            snprintf(buf, sizeof buf, "%.2f / %.2f / %.2f / %.2f / %.2f ms", s->compute / 1e3, s->exposed / 1e3,
                     s->bubble / 1e3, s->checkpoint / 1e3, s->other / 1e3);
        else
            snprintf(buf, sizeof buf, "%.2f / %.2f / %.2f / %.2f ms", s->compute / 1e3, s->exposed / 1e3,
                     s->bubble / 1e3, s->other / 1e3);
        ah_svg_text(f, 70 + bar + 8, y + 14, "font-size=\"11\"", buf);
    }
    ah_svg_close(f);
    if (ah_out_close(&o, 1, why, sizeof why) != 0) {
        ah_errf(err, errlen, "--svg %s", why);
        return -1;
    }
    return 0;
}
