/* The diagnosis as a table, as JSON (analyze --json "findings") and the
 * links as a comm profile (analyze --comm-profile-out), autohet/trace_diagnose.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "trace/diagnose_internal.h"
#include "util/atomic_file.h"
#include "util/errors.h"

/* "0-4,7" (at most n bytes) */
static const char *steps_text(const ah_finding *f, char *buf, size_t n) {
    size_t used = 0;
    buf[0] = '\0';
    for (int k = 0; k < f->n_steps && used + 16 < n;) {
        int j = k;
        while (j + 1 < f->n_steps && f->steps[j + 1] == f->steps[j] + 1)
            j++;
        used += (size_t)snprintf(buf + used, n - used, j > k ? "%s%d-%d" : "%s%d", k ? "," : "", f->steps[k],
                                 f->steps[j]);
        k = j + 1;
    }
    if (!f->n_steps)
        snprintf(buf, n, "-");
    return buf;
}

static const char *where_text(const ah_finding *f, const ah_diag_options *o, char *buf, size_t n) {
    const char *ha = o && o->hosts && f->link[0] >= 0 && f->link[0] < o->n_ranks ? o->hosts[f->link[0]] : NULL,
               *hb = o && o->hosts && f->link[1] >= 0 && f->link[1] < o->n_ranks ? o->hosts[f->link[1]] : NULL;
    if (f->link[0] >= 0) {
        snprintf(buf, n, "link %d-%d%s%s%s%s%s", f->link[0], f->link[1], ha && hb ? " (" : "", ha && hb ? ha : "",
                 ha && hb ? "-" : "", ha && hb ? hb : "", ha && hb ? ")" : "");
        return buf;
    }
    size_t used = (size_t)snprintf(buf, n, f->n_ranks == 1 ? "rank " : "ranks ");
    for (int k = 0; k < f->n_ranks && used + 8 < n; k++)
        used += (size_t)snprintf(buf + used, n - used, k ? ",%d" : "%d", f->ranks[k]);
    return buf;
}

void ah_diagnosis_print(FILE *f, const ah_diagnosis *d, const ah_diag_options *o) {
    int sig = 0;
    for (int i = 0; i < d->n; i++)
        sig += d->f[i].significant;
    fprintf(f,
            "\ndiagnosis: %d step(s) of %.3f ms, traced wall time %.3f ms; a finding is significant from %.1f%% of "
            "the wall time; transfers expected from %s (%d transfer(s) on links)\n",
            d->steps, d->step_s * 1e3, d->wall_s * 1e3, 100 * d->threshold,
            d->n_obs ? d->expected_from : "-", d->n_obs);
    if (!sig)
        fprintf(f, "  no significant finding\n");
    else
        fprintf(f, "%4s %-17s %11s %7s %-22s %-30s %s\n", "#", "kind", "cost ms", "share", "where", "op", "steps");
    for (int i = 0; i < d->n; i++) {
        const ah_finding *x = &d->f[i];
        if (!x->significant)
            continue;
        char st[96], wh[96];
        fprintf(f, "%4d %-17s %11.3f %6.1f%% %-22s %-30s %s\n", i + 1, ah_diag_kind_name(x->kind), x->cost_s * 1e3,
                100 * x->share, where_text(x, o, wh, sizeof wh), x->op, steps_text(x, st, sizeof st));
        fprintf(f, "     measured %.3f ms, expected %.3f ms: %s%s", x->measured_s * 1e3, x->expected_s * 1e3,
                x->evidence, x->explained_by >= 0 ? "" : "\n");
        if (x->explained_by >= 0)
            fprintf(f, " (explained by #%d)\n", x->explained_by + 1);
    }
    int shown = 0;
    for (int i = 0; i < d->n; i++) {
        const ah_finding *x = &d->f[i];
        if (x->significant || x->cost_s <= 0)
            continue;
        char wh[96];
        fprintf(f, "%s%s %s %.3f ms (%.1f%%)",
                shown ? "; " : "  not established (below the threshold or within the expectation's error): ",
                ah_diag_kind_name(x->kind), where_text(x, o, wh, sizeof wh), x->cost_s * 1e3, 100 * x->share);
        if (++shown == 8)
            break;
    }
    if (shown)
        fprintf(f, "\n");
}

cJSON *ah_diagnosis_json(const ah_diagnosis *d, int significant) {
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < d->n; i++) {
        const ah_finding *x = &d->f[i];
        if (!x->significant != !significant || (!significant && x->cost_s <= 0))
            continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "kind", ah_diag_kind_name(x->kind));
        cJSON_AddItemToObject(o, "ranks", cJSON_CreateIntArray(x->ranks, x->n_ranks));
        cJSON_AddItemToObject(o, "link", x->link[0] >= 0 ? cJSON_CreateIntArray(x->link, 2) : cJSON_CreateNull());
        cJSON_AddStringToObject(o, "op", x->op);
        cJSON_AddItemToObject(o, "steps", cJSON_CreateIntArray(x->steps, x->n_steps));
        cJSON_AddNumberToObject(o, "cost_s", x->cost_s);
        cJSON_AddNumberToObject(o, "share", x->share);
        cJSON_AddNumberToObject(o, "measured", x->measured_s);
        cJSON_AddNumberToObject(o, "expected", x->expected_s);
        cJSON_AddStringToObject(o, "evidence", x->evidence);
        cJSON_AddBoolToObject(o, "significant", x->significant);
        cJSON_AddBoolToObject(o, "cause", x->cause);
        cJSON_AddItemToObject(o, "explained_by",
                              x->explained_by >= 0 ? cJSON_CreateNumber(x->explained_by) : cJSON_CreateNull());
        cJSON_AddItemToArray(arr, o);
    }
    return arr;
}

/* ------------------------------------------------------------ comm profile */

#define REGIME_SPLIT 65536.0 /* bytes: the small-message (eager) and the large-message regime */

typedef struct {
    double alpha_us, beta_GBps, max_rel_error;
    int sizes, n;
} regime;

/* alpha-beta through the median time of every size of (bx, by) (least squares,
 * alpha >= 0; one size: alpha_guess, clamped below half its time) */
static regime fit_regime(const double *bx, const double *by, int m, double alpha_guess) {
    regime g = {0, 0, 0, 0, m};
    double sx[64], sy[64], tmp[4096];
    for (int k = 0; k < m && g.sizes < 64; k++) {
        int seen = 0, t = 0;
        for (int q = 0; q < g.sizes; q++)
            seen |= sx[q] == bx[k];
        if (seen)
            continue;
        for (int q = 0; q < m && t < 4096; q++)
            if (bx[q] == bx[k])
                tmp[t++] = by[q] > 0.01 ? by[q] : 0.01;
        sx[g.sizes] = bx[k];
        sy[g.sizes++] = ah_diag_median(tmp, t);
    }
    double mx = 0, my = 0, sxx = 0, sxy = 0;
    for (int q = 0; q < g.sizes; q++)
        mx += sx[q] / g.sizes, my += sy[q] / g.sizes;
    for (int q = 0; q < g.sizes; q++)
        sxx += (sx[q] - mx) * (sx[q] - mx), sxy += (sx[q] - mx) * (sy[q] - my);
    double slope = sxx > 0 ? sxy / sxx : -1;
    if (g.sizes >= 2 && slope > 0 && my - slope * mx >= 0) {
        g.alpha_us = my - slope * mx;
    } else {
        double a = alpha_guess > 0 ? alpha_guess : 0;
        g.alpha_us = a < 0.5 * sy[0] ? a : 0.5 * sy[0];
        double num = 0, den = 0;
        for (int q = 0; q < g.sizes; q++)
            num += sx[q] * (sy[q] - g.alpha_us), den += sx[q] * sx[q];
        slope = den > 0 && num > 0 ? num / den : 1e-9;
    }
    g.beta_GBps = 1e-3 / slope; /* us per byte -> GB/s */
    g.beta_GBps = g.beta_GBps > 1e6 ? 1e6 : g.beta_GBps < 1e-6 ? 1e-6 : g.beta_GBps;
    for (int q = 0; q < g.sizes; q++) {
        double pred = g.alpha_us + sx[q] / (g.beta_GBps * 1e3), e = fabs(pred - sy[q]) / sy[q];
        g.max_rel_error = e > g.max_rel_error ? e : g.max_rel_error;
    }
    return g;
}

typedef struct {
    int ha, hb; /* host indices, ha <= hb */
    int ra, rb; /* the first pair of ranks seen */
    regime reg[2];
    int n;
} host_link;

static cJSON *regimes_json(const host_link *l) {
    cJSON *arr = cJSON_CreateArray();
    for (int q = 0; q < 2; q++) {
        if (!l->reg[q].n)
            continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "min_bytes", q == 0 ? 0 : REGIME_SPLIT + 1);
        int last = q == 1 || !l->reg[1].n;
        cJSON_AddItemToObject(o, "max_bytes", last ? cJSON_CreateNull() : cJSON_CreateNumber(REGIME_SPLIT));
        cJSON_AddNumberToObject(o, "alpha_us", l->reg[q].alpha_us);
        cJSON_AddNumberToObject(o, "beta_GBps", l->reg[q].beta_GBps);
        cJSON_AddNumberToObject(o, "max_rel_error", l->reg[q].max_rel_error);
        cJSON_AddNumberToObject(o, "sizes", l->reg[q].sizes);
        cJSON_AddNumberToObject(o, "transfers", l->reg[q].n);
        cJSON_AddItemToArray(arr, o);
    }
    return arr;
}

static const regime *first_reg(const host_link *l) {
    return l->reg[0].n ? &l->reg[0] : &l->reg[1];
}
static const regime *last_reg(const host_link *l) {
    return l->reg[1].n ? &l->reg[1] : &l->reg[0];
}

static cJSON *fit_json(const char *op, const char *cls, const host_link *l, char (*hosts)[128]) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "op", op);
    cJSON_AddStringToObject(o, "link_class", cls);
    if (hosts) {
        cJSON_AddItemToObject(o, "pair", cJSON_CreateIntArray((int[]){l->ra, l->rb}, 2));
        const char *hs[2] = {hosts[l->ha], hosts[l->hb]};
        cJSON_AddItemToObject(o, "hosts", cJSON_CreateStringArray(hs, 2));
    }
    cJSON_AddStringToObject(o, "statistic", "median");
    cJSON_AddNumberToObject(o, "alpha_us", first_reg(l)->alpha_us);
    cJSON_AddNumberToObject(o, "beta_GBps", last_reg(l)->beta_GBps);
    double e = l->reg[0].max_rel_error > l->reg[1].max_rel_error ? l->reg[0].max_rel_error : l->reg[1].max_rel_error;
    cJSON_AddNumberToObject(o, "max_rel_error", e);
    cJSON_AddItemToObject(o, "regimes", regimes_json(l));
    return o;
}

static int host_id(char (*hosts)[128], int *n, const char *name) {
    for (int i = 0; i < *n; i++)
        if (!strcmp(hosts[i], name))
            return i;
    snprintf(hosts[*n], sizeof hosts[0], "%s", name);
    return (*n)++;
}

/* every pair of hosts the transfers crossed, fitted per size regime */
static host_link *host_links(const ah_diagnosis *d, const ah_diag_options *o, char (*hosts)[128], int *nh,
                             int *nl) {
    host_link *l = ah_xcalloc((size_t)d->n_obs + 1, sizeof(host_link));
    int *lk = ah_xcalloc((size_t)d->n_obs + 1, sizeof(int));
    double *bx = ah_xcalloc((size_t)d->n_obs + 1, sizeof(double)), *by = ah_xcalloc((size_t)d->n_obs + 1, sizeof(double));
    for (int r = 0; r < o->n_ranks; r++) { /* hosts in rank order */
        char name[128];
        snprintf(name, sizeof name, "%s", o->hosts && o->hosts[r] ? o->hosts[r] : "");
        if (!name[0])
            snprintf(name, sizeof name, "rank%d", r);
        host_id(hosts, nh, name);
    }
    for (int k = 0; k < d->n_obs; k++) {
        const ah_link_obs *x = &d->obs[k];
        int ha = x->a < o->n_ranks ? x->a : 0, hb = x->b < o->n_ranks ? x->b : 0;
        char na[128], nb[128];
        snprintf(na, sizeof na, "%s", o->hosts && o->hosts[ha] ? o->hosts[ha] : "");
        snprintf(nb, sizeof nb, "%s", o->hosts && o->hosts[hb] ? o->hosts[hb] : "");
        if (!na[0])
            snprintf(na, sizeof na, "rank%d", x->a);
        if (!nb[0])
            snprintf(nb, sizeof nb, "rank%d", x->b);
        int i = host_id(hosts, nh, na), j = host_id(hosts, nh, nb), a = i < j ? i : j, b = i < j ? j : i, q = 0;
        while (q < *nl && !(l[q].ha == a && l[q].hb == b))
            q++;
        if (q == *nl)
            l[(*nl)++] = (host_link){.ha = a, .hb = b, .ra = x->a, .rb = x->b};
        lk[k] = q;
    }
    for (int q = 0; q < *nl; q++)
        for (int g = 0; g < 2; g++) {
            int m = 0;
            for (int k = 0; k < d->n_obs; k++)
                if (lk[k] == q && (d->obs[k].bytes > REGIME_SPLIT) == g)
                    bx[m] = d->obs[k].bytes, by[m++] = d->obs[k].us;
            if (m)
                l[q].reg[g] = fit_regime(bx, by, m, g == 1 && l[q].reg[0].n ? l[q].reg[0].alpha_us : 0);
            l[q].n += m;
        }
    free(lk);
    free(bx);
    free(by);
    return l;
}

/* the class's fit: its median pair by bandwidth, -1 none */
static int class_pair(const host_link *l, int nl, int inter) {
    double bw[4096];
    int m = 0;
    for (int q = 0; q < nl && m < 4096; q++)
        if ((l[q].ha != l[q].hb) == inter)
            bw[m++] = last_reg(&l[q])->beta_GBps;
    if (!m)
        return -1;
    double med = ah_diag_median(bw, m);
    for (int q = 0; q < nl; q++)
        if ((l[q].ha != l[q].hb) == inter && last_reg(&l[q])->beta_GBps >= med)
            return q;
    return -1;
}

static cJSON *matrix_json(const host_link *l, int nl, int nh, int what) {
    cJSON *m = cJSON_CreateArray();
    for (int i = 0; i < nh; i++) {
        cJSON *row = cJSON_CreateArray();
        for (int j = 0; j < nh; j++) {
            int q = 0, a = i < j ? i : j, b = i < j ? j : i;
            while (q < nl && !(l[q].ha == a && l[q].hb == b))
                q++;
            cJSON *v = cJSON_CreateNull();
            if (q < nl) {
                cJSON_Delete(v);
                v = what == 0   ? cJSON_CreateNumber(first_reg(&l[q])->alpha_us)
                    : what == 1 ? cJSON_CreateNumber(last_reg(&l[q])->beta_GBps)
                    : what == 2 ? cJSON_CreateIntArray((int[]){l[q].ra, l[q].rb}, 2)
                                : cJSON_CreateNumber(l[q].n);
            }
            cJSON_AddItemToArray(row, v);
        }
        cJSON_AddItemToArray(m, row);
    }
    return m;
}

static cJSON *profile_json(const char *trace_path, const host_link *l, int nl, char (*hosts)[128], int nh) {
    cJSON *out = cJSON_CreateObject(), *fits;
    cJSON_AddStringToObject(out, "format", "autohet-comm-profile");
    cJSON_AddNumberToObject(out, "version", 2);
    cJSON_AddStringToObject(out, "source", "autohet analyze --comm-profile-out: transfers measured in a traced run");
    cJSON_AddStringToObject(out, "trace", trace_path);
    cJSON_AddStringToObject(out, "sync", "trace");
    cJSON_AddItemToObject(out, "results", cJSON_CreateArray());
    fits = cJSON_AddArrayToObject(out, "fits");
    const char *cls[2] = {"intra-node", "inter-node"}, *ops[2] = {"latency", "bw"};
    for (int inter = 0; inter < 2; inter++) {
        int q = class_pair(l, nl, inter);
        for (int k = 0; q >= 0 && k < 2; k++)
            cJSON_AddItemToArray(fits, fit_json(ops[k], cls[inter], &l[q], NULL));
    }
    for (int q = 0; q < nl; q++)
        for (int k = 0; k < 2; k++)
            cJSON_AddItemToArray(fits, fit_json(ops[k], cls[l[q].ha != l[q].hb], &l[q], hosts));
    const char *names[4096];
    for (int i = 0; i < nh && i < 4096; i++)
        names[i] = hosts[i];
    cJSON_AddItemToObject(out, "hosts", cJSON_CreateStringArray(names, nh));
    cJSON *lk = cJSON_AddObjectToObject(out, "links");
    cJSON_AddItemToObject(lk, "hosts", cJSON_CreateStringArray(names, nh));
    cJSON_AddItemToObject(lk, "latency_us", matrix_json(l, nl, nh, 0));
    cJSON_AddItemToObject(lk, "bandwidth_GBps", matrix_json(l, nl, nh, 1));
    cJSON_AddItemToObject(lk, "pairs", matrix_json(l, nl, nh, 2));
    cJSON_AddItemToObject(lk, "transfers", matrix_json(l, nl, nh, 3));
    return out;
}

int ah_diagnosis_write_comm_profile(const char *path, const char *trace_path, const ah_diagnosis *d,
                                    const ah_diag_options *o, char *err, size_t errlen) {
    if (d->n_obs == 0) {
        ah_errf(err, errlen, "--comm-profile-out %s: the trace has no transfer between two ranks to measure a link by",
                path);
        return -1;
    }
    char(*hosts)[128] = ah_xcalloc((size_t)(o->n_ranks + 2 * d->n_obs) + 1, sizeof *hosts);
    int nh = 0, nl = 0;
    host_link *l = host_links(d, o, hosts, &nh, &nl);
    cJSON *out = profile_json(trace_path, l, nl, hosts, nh);
    char *text = cJSON_Print(out), why[512];
    int rc = text ? ah_write_text_output(path, text, why, sizeof why) : -1;
    if (rc)
        ah_errf(err, errlen, "--comm-profile-out %s", text ? why : "out of memory");
    free(text);
    cJSON_Delete(out);
    free(l);
    free(hosts);
    return rc;
}
