/* autohet analyze: where the time of a traced training run went (docs/analyze.md).
 *
 * Per rank the trace span splits into compute (union of compute events),
 * exposed communication (collectives not overlapped by compute), pipeline
 * bubble (blocking receives from the neighbouring stage, not overlapped) and
 * other (untraced gaps); the parts sum to the span by construction. Per
 * collective call site: calls, bytes, achieved bus bandwidth, the alpha-beta
 * prediction (with --comm-profile), and the split of each call into waiting
 * for the last rank to arrive (skew) and the transfer itself. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "autohet/comm.h"
#include "autohet/plan.h"
#include "autohet/trace_otf2.h"
#include "cli/cli.h"
#include "util/errors.h"
#include "util/intervals.h"
#include "util/json_file.h"

typedef struct {
    int pid, comm, seq, ranks, group;
    double ts, dur, bytes;
    char site[64], name[64];
} ev;

typedef struct {
    double compute, exposed, bubble, other, span;
} split;

static int is_optimizer(const ev *v) {
    return !v->comm && !strncmp(v->name, "optimizer", 9);
}

/* the number of optimizer steps every rank completed */
static int count_steps(const ev *e, int n, int ranks) {
    int *c = ah_xcalloc((size_t)ranks, sizeof(int)), mn = -1;
    for (int i = 0; i < n; i++)
        if (is_optimizer(&e[i]))
            c[e[i].pid]++;
    for (int r = 0; r < ranks; r++)
        if (mn < 0 || c[r] < mn)
            mn = c[r];
    free(c);
    return mn < 0 ? 0 : mn;
}

/* cut[r] = when rank r ends the optimizer of its step `k` (a rank's events are in time order) */
static void step_boundaries(const ev *e, int n, int ranks, int k, double *cut) {
    int *c = ah_xcalloc((size_t)ranks, sizeof(int));
    for (int i = 0; i < n; i++)
        if (is_optimizer(&e[i]) && ++c[e[i].pid] == k)
            cut[e[i].pid] = e[i].ts + e[i].dur;
    free(c);
}

static const ev *sort_ev; /* qsort has no context argument */
static int cmp_instance(const void *a, const void *b) {
    const ev *x = &sort_ev[*(const int *)a], *y = &sort_ev[*(const int *)b];
    if (x->group != y->group)
        return (x->group > y->group) - (x->group < y->group);
    return (x->seq > y->seq) - (x->seq < y->seq);
}

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: autohet analyze TRACE.json [--json FILE] [--svg FILE] [--comm-profile FILE] [--top N]\n"
        "                                  [--skip-steps K] [--sim SIM.json] [--otf2 DIR]\n\n"
        "Explains a trace written by autohet train --trace: per rank the split of the run into compute,\n"
        "exposed communication (not overlapped by compute), pipeline bubble (waiting in receives from the\n"
        "neighbouring stage) and other (untraced gaps); they sum to the span;\n"
        "per collective call site the calls, bytes, achieved bus bandwidth, the alpha-beta prediction\n"
        "(--comm-profile: autohet commbench --json) and the time lost to skew (waiting for the last\n"
        "rank to arrive) versus the transfer; and the slowest operations.\n\n"
        "  --skip-steps K  leave out the first K traced steps (default 0: autohet train --trace already\n"
        "                  leaves out the warm-up step); times per step are over the remaining steps\n"
        "  --sim FILE      the simulator's prediction for the same plan (autohet simulate PLAN --json "
        "FILE):\n"
        "                  per rank and per gradient bucket, measured vs simulated time per step and "
        "error\n");
}

/* alpha-beta prediction of one all-reduce of `bytes` from a comm profile, or -1 */
static double predict_us(const cJSON *fits, double bytes) {
    const cJSON *f;
    cJSON_ArrayForEach(f, fits) {
        const cJSON *op = cJSON_GetObjectItemCaseSensitive(f, "op");
        if (!cJSON_IsString(op) || strcmp(op->valuestring, "allreduce"))
            continue;
        const cJSON *reg = cJSON_GetObjectItemCaseSensitive(f, "regimes");
        const cJSON *use = f;
        if (cJSON_IsArray(reg) && cJSON_GetArraySize(reg) == 2) {
            const cJSON *small = cJSON_GetArrayItem(reg, 0),
                        *mx = cJSON_GetObjectItemCaseSensitive(small, "max_bytes");
            use = cJSON_IsNumber(mx) && bytes <= mx->valuedouble ? small : cJSON_GetArrayItem(reg, 1);
        }
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(use, "alpha_us"),
                    *b = cJSON_GetObjectItemCaseSensitive(use, "beta_GBps");
        if (cJSON_IsNumber(a) && cJSON_IsNumber(b) && b->valuedouble > 0)
            return a->valuedouble + bytes / (b->valuedouble * 1e3);
    }
    return -1;
}

static double num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static double rel_err(double sim, double meas) {
    return meas > 0 ? sim / meas - 1 : NAN;
}

/* Measured (per step) next to the simulator's prediction for the same plan:
 * per rank (engine rank order = the simulator's gpus[] order: replica, stage,
 * TP rank) and per gradient bucket (measured = the transfer part of its
 * all-reduces, as the simulator starts a bucket when all holders are ready). */
static int compare_sim(const char *sim_path, const cJSON *sim, const split *sp, int ranks, int wsteps,
                       char sites[][64], int n_sites, const double *site_xfer, const int *site_groups,
                       cJSON *out, char *err, size_t errlen) {
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(sim, "format"),
                *gpus = cJSON_GetObjectItemCaseSensitive(sim, "gpus"),
                *buckets = cJSON_GetObjectItemCaseSensitive(sim, "buckets");
    double it_sim = num(sim, "iteration_time_s");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "autohet-sim") || !cJSON_IsArray(gpus) ||
        !(it_sim > 0)) {
        snprintf(err, errlen,
                 "--sim %s: not an autohet simulate --json output (format, gpus, iteration_time_s)",
                 sim_path);
        return -1;
    }
    if (cJSON_GetArraySize(gpus) != ranks) {
        snprintf(err, errlen, "--sim %s: gpus[] has %d entries, the trace %d ranks (not the same plan)",
                 sim_path, cJSON_GetArraySize(gpus), ranks);
        return -1;
    }
    if (wsteps <= 0) {
        snprintf(err, errlen, "--sim: the trace has no complete training step to compare");
        return -1;
    }
    double span = 0; /* the mean window of a rank, per step */
    for (int r = 0; r < ranks; r++)
        span += sp[r].span * 1e-6 / wsteps / ranks;
    cJSON *o = cJSON_AddObjectToObject(out, "prediction");
    cJSON_AddStringToObject(o, "sim", sim_path);
    cJSON_AddNumberToObject(o, "iteration_measured_s", span);
    cJSON_AddNumberToObject(o, "iteration_simulated_s", it_sim);
    cJSON_AddNumberToObject(o, "iteration_error", rel_err(it_sim, span));
    printf("\nmeasured vs simulated, per step (%s; error = simulated / measured - 1):\n", sim_path);
    printf("  iteration: measured %.3f ms, simulated %.3f ms, error %+.1f%%\n\n", span * 1e3, it_sim * 1e3,
           100 * rel_err(it_sim, span));
    printf("%6s %9s %12s %12s %8s %12s %12s %12s %12s\n", "rank", "stage", "compute ms", "simulated", "error",
           "exposed ms", "simulated", "not busy ms", "simulated");
    cJSON *jr = cJSON_AddArrayToObject(o, "ranks");
    for (int r = 0; r < ranks; r++) {
        const cJSON *g = cJSON_GetArrayItem(gpus, r);
        double c_m = sp[r].compute * 1e-6 / wsteps, x_m = sp[r].exposed * 1e-6 / wsteps,
               i_m = (sp[r].bubble + sp[r].other) * 1e-6 / wsteps, c_s = num(g, "compute_s"),
               x_s = num(g, "exposed_comm_s"), i_s = num(g, "idle_s");
        char stage[32];
        snprintf(stage, sizeof stage, "r%.0f s%.0f", num(g, "replica"), num(g, "stage"));
        printf("%6d %9s %12.3f %12.3f %7.1f%% %12.3f %12.3f %12.3f %12.3f\n", r, stage, c_m * 1e3, c_s * 1e3,
               100 * rel_err(c_s, c_m), x_m * 1e3, x_s * 1e3, i_m * 1e3, i_s * 1e3);
        cJSON *q = cJSON_CreateObject();
        cJSON_AddNumberToObject(q, "rank", r);
        cJSON_AddNumberToObject(q, "compute_measured_s", c_m);
        cJSON_AddNumberToObject(q, "compute_simulated_s", c_s);
        cJSON_AddNumberToObject(q, "compute_error", rel_err(c_s, c_m));
        cJSON_AddNumberToObject(q, "exposed_comm_measured_s", x_m);
        cJSON_AddNumberToObject(q, "exposed_comm_simulated_s", x_s);
        cJSON_AddNumberToObject(q, "not_busy_measured_s", i_m);
        cJSON_AddNumberToObject(q, "idle_simulated_s", i_s);
        cJSON_AddItemToArray(jr, q);
    }
    cJSON *jb = cJSON_AddArrayToObject(o, "buckets");
    const cJSON *b;
    int header = 0;
    cJSON_ArrayForEach(b, buckets) {
        const cJSON *ly = cJSON_GetObjectItemCaseSensitive(b, "layers");
        if (!cJSON_IsArray(ly) || cJSON_GetArraySize(ly) != 2)
            continue;
        char name[64];
        snprintf(name, sizeof name, "dp_allreduce layers %d-%d", cJSON_GetArrayItem(ly, 0)->valueint,
                 cJSON_GetArrayItem(ly, 1)->valueint - 1);
        int k = 0;
        while (k < n_sites && strcmp(sites[k], name))
            k++;
        if (k == n_sites || site_groups[k] <= 0)
            continue;
        double meas = site_xfer[k] * 1e-6 / site_groups[k] / wsteps,
               simt = num(b, "end_s") - num(b, "start_s");
        if (!header)
            printf("\n%-26s %20s %14s %8s\n", "gradient bucket", "measured transfer ms", "simulated ms",
                   "error");
        header = 1;
        printf("%-26s %20.3f %14.3f %7.1f%%\n", name, meas * 1e3, simt * 1e3, 100 * rel_err(simt, meas));
        cJSON *q = cJSON_CreateObject();
        cJSON_AddStringToObject(q, "site", name);
        cJSON_AddNumberToObject(q, "measured_s", meas);
        cJSON_AddNumberToObject(q, "simulated_s", simt);
        cJSON_AddNumberToObject(q, "error", rel_err(simt, meas));
        cJSON_AddItemToArray(jb, q);
    }
    return 0;
}

int cmd_analyze(int argc, char **argv) {
    static const struct option opts[] = {{"json", required_argument, 0, 'j'},
                                         {"svg", required_argument, 0, 's'},
                                         {"comm-profile", required_argument, 0, 'c'},
                                         {"top", required_argument, 0, 't'},
                                         {"skip-steps", required_argument, 0, 'k'},
                                         {"sim", required_argument, 0, 'S'},
                                         {"otf2", required_argument, 0, 'O'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *json_path = NULL, *svg_path = NULL, *cp_path = NULL, *sim_path = NULL, *otf2_dir = NULL;
    int top = 10, skip = 0, c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'j': json_path = optarg; break;
        case 's': svg_path = optarg; break;
        case 'c': cp_path = optarg; break;
        case 't':
            if (cli_parse_int(optarg, &top) != 0 || top < 0)
                return cli_bad_input("analyze", "--top: expected an integer >= 0");
            break;
        case 'k':
            if (cli_parse_int(optarg, &skip) != 0 || skip < 0)
                return cli_bad_input("analyze", "--skip-steps: expected an integer >= 0");
            break;
        case 'S': sim_path = optarg; break;
        case 'O':
            otf2_dir = optarg;
            if (!ah_trace_otf2_available())
                return cli_bad_input("analyze", "--otf2: this autohet was built without OTF2 "
                                                "(install libopen-trace-format2-dev and rebuild)");
            break;
        case 'h': usage(stdout); return 0;
        default: {
            char msg[160];
            snprintf(msg, sizeof msg, "unknown or incomplete option '%s' (see autohet analyze --help)",
                     argv[optind - 1]);
            return cli_bad_input("analyze", msg);
        }
        }
    }
    if (optind != argc - 1)
        return cli_bad_input("analyze", "expected exactly one TRACE.json (from autohet train --trace)");
    {
        char m[4400];
        if (cli_check_output("--json", json_path, m, sizeof m) || cli_check_output("--svg", svg_path, m, sizeof m) ||
            cli_check_output_dir("--otf2", otf2_dir, 0, m, sizeof m))
            return cli_bad_input("analyze", m);
    }
    const char *path = argv[optind];
    char err[512];
    cJSON *root = ah_json_parse_file(path, 1u << 30, 1, err, sizeof err);
    if (!root)
        return cli_bad_input("analyze", err);
    cJSON *fits_root = NULL;
    const cJSON *fits = NULL;
    if (cp_path) {
        fits_root = ah_json_parse_file(cp_path, 64u << 20, 1, err, sizeof err);
        if (!fits_root) {
            cJSON_Delete(root);
            return cli_bad_input("analyze", err);
        }
        fits = cJSON_GetObjectItemCaseSensitive(fits_root, "fits");
    }
    cJSON *sim_root = NULL;
    if (sim_path) {
        sim_root = ah_json_parse_file(sim_path, 256u << 20, 1, err, sizeof err);
        if (!sim_root) {
            cJSON_Delete(root);
            cJSON_Delete(fits_root);
            return cli_bad_input("analyze", err);
        }
    }
    const cJSON *evs = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
    if (!cJSON_IsArray(evs)) {
        snprintf(err, sizeof err, "%s: traceEvents: expected an array (a trace from autohet train --trace)",
                 path);
        cJSON_Delete(root);
        cJSON_Delete(fits_root);
        cJSON_Delete(sim_root);
        return cli_bad_input("analyze", err);
    }
    int n = 0, cap = cJSON_GetArraySize(evs) + 1, ranks = 0;
    ev *e = ah_xcalloc((size_t)cap, sizeof(ev));
    const cJSON *it;
    cJSON_ArrayForEach(it, evs) {
        const cJSON *ph = cJSON_GetObjectItemCaseSensitive(it, "ph");
        if (!cJSON_IsString(ph) || strcmp(ph->valuestring, "X"))
            continue;
        const cJSON *pid = cJSON_GetObjectItemCaseSensitive(it, "pid"),
                    *ts = cJSON_GetObjectItemCaseSensitive(it, "ts"),
                    *dur = cJSON_GetObjectItemCaseSensitive(it, "dur"),
                    *cat = cJSON_GetObjectItemCaseSensitive(it, "cat"),
                    *args = cJSON_GetObjectItemCaseSensitive(it, "args"),
                    *nm = cJSON_GetObjectItemCaseSensitive(it, "name");
        if (!cJSON_IsNumber(pid) || !cJSON_IsNumber(ts) || !cJSON_IsNumber(dur) || !cJSON_IsString(cat) ||
            pid->valueint < 0 || pid->valueint >= 1 << 20 || dur->valuedouble < 0) {
            snprintf(err, sizeof err,
                     "%s: traceEvents[]: an \"X\" event needs numeric pid, ts, dur >= 0 and a cat", path);
            free(e);
            cJSON_Delete(root);
            cJSON_Delete(fits_root);
            cJSON_Delete(sim_root);
            return cli_bad_input("analyze", err);
        }
        ev *v = &e[n++];
        v->pid = pid->valueint;
        v->ts = ts->valuedouble;
        v->dur = dur->valuedouble;
        v->comm = !strcmp(cat->valuestring, "communication");
        snprintf(v->name, sizeof v->name, "%s", cJSON_IsString(nm) ? nm->valuestring : "?");
        const cJSON *site = cJSON_GetObjectItemCaseSensitive(args, "site"),
                    *seq = cJSON_GetObjectItemCaseSensitive(args, "seq"),
                    *bytes = cJSON_GetObjectItemCaseSensitive(args, "bytes"),
                    *rk = cJSON_GetObjectItemCaseSensitive(args, "ranks"),
                    *grp = cJSON_GetObjectItemCaseSensitive(args, "group");
        snprintf(v->site, sizeof v->site, "%s", cJSON_IsString(site) ? site->valuestring : v->name);
        v->seq = cJSON_IsNumber(seq) ? seq->valueint : 0;
        v->bytes = cJSON_IsNumber(bytes) ? bytes->valuedouble : 0;
        v->ranks = cJSON_IsNumber(rk) ? rk->valueint : 1;
        v->group = cJSON_IsNumber(grp) ? grp->valueint : 0;
        if (v->pid + 1 > ranks)
            ranks = v->pid + 1;
    }
    if (n == 0) {
        snprintf(err, sizeof err, "%s: no \"X\" events", path);
        free(e);
        cJSON_Delete(root);
        cJSON_Delete(fits_root);
        cJSON_Delete(sim_root);
        return cli_bad_input("analyze", err);
    }
    /* steps: every rank runs the optimizer once per step. The first `skip`
     * steps (warm-up: first-touch page faults, BLAS buffers) are cut off, on each
     * rank where its own optimizer of step `skip` ends; a rank's window is from
     * there to the end of the trace. */
    int steps = count_steps(e, n, ranks);
    if (skip < 0)
        skip = 0; /* autohet train --trace already leaves out its first step */
    if (skip > 0 && skip >= steps) {
        snprintf(err, sizeof err, "--skip-steps %d: %s has %d step(s)", skip, path, steps);
        free(e);
        cJSON_Delete(root);
        cJSON_Delete(fits_root);
        cJSON_Delete(sim_root);
        return cli_bad_input("analyze", err);
    }
    double *cut = ah_xcalloc((size_t)ranks, sizeof(double));
    if (skip > 0) {
        step_boundaries(e, n, ranks, skip, cut);
        int k = 0;
        for (int i = 0; i < n; i++) {
            double c0 = cut[e[i].pid];
            if (e[i].ts + e[i].dur <= c0)
                continue;
            ev v = e[i];
            if (v.ts < c0) {
                v.dur -= c0 - v.ts;
                v.ts = c0;
            }
            e[k++] = v;
        }
        n = k;
    }
    int wsteps = steps - skip;
    /* span of the whole run */
    double t0 = 1e300, t1 = -1e300;
    for (int i = 0; i < n; i++) {
        if (e[i].ts < t0)
            t0 = e[i].ts;
        if (e[i].ts + e[i].dur > t1)
            t1 = e[i].ts + e[i].dur;
    }
    if (skip == 0)
        for (int r = 0; r < ranks; r++)
            cut[r] = t0;
    split *sp = calloc((size_t)ranks, sizeof(split));
    double *cv = ah_xcalloc(2 * (size_t)n, sizeof(double)), *mv = ah_xcalloc(2 * (size_t)n, sizeof(double)),
           *pv = ah_xcalloc(2 * (size_t)n, sizeof(double)), *uv = ah_xcalloc(4 * (size_t)n, sizeof(double));
    for (int r = 0; r < ranks; r++) {
        /* compute, communication (collectives and send completion), pipeline
         * receives: a blocking receive is the pipeline bubble, waiting for the
         * neighbouring stage (the transfer of one activation is microseconds) */
        int nc = 0, nm = 0, np = 0;
        for (int i = 0; i < n; i++) {
            if (e[i].pid != r)
                continue;
            double *dst = !e[i].comm                        ? cv + 2 * nc++
                          : !strncmp(e[i].site, "recv_", 5) ? pv + 2 * np++
                                                            : mv + 2 * nm++;
            dst[0] = e[i].ts;
            dst[1] = e[i].ts + e[i].dur;
        }
        nc = ah_intervals_merge(cv, nc);
        nm = ah_intervals_merge(mv, nm);
        np = ah_intervals_merge(pv, np);
        memcpy(uv, cv, sizeof(double) * 2 * (size_t)nc);
        memcpy(uv + 2 * nc, mv, sizeof(double) * 2 * (size_t)nm);
        int nu = ah_intervals_merge(uv, nc + nm);
        sp[r].span = t1 - cut[r];
        sp[r].compute = ah_intervals_length(cv, nc);
        sp[r].exposed = ah_intervals_minus(mv, nm, cv, nc);
        sp[r].bubble = ah_intervals_minus(pv, np, uv, nu);
        sp[r].other = sp[r].span - sp[r].compute - sp[r].exposed - sp[r].bubble;
    }
    double mean_span = 0;
    for (int r = 0; r < ranks; r++)
        mean_span += sp[r].span / ranks;
    printf("Trace %s: %d ranks, %d events, span %.3f ms", path, ranks, n, (t1 - t0) / 1e3);
    if (wsteps > 0)
        printf(", %d step(s) of %.3f ms (first %d skipped)", wsteps, mean_span / 1e3 / wsteps, skip);
    printf("\n\n");
    printf("%6s %12s %7s %12s %7s %12s %7s %12s %7s\n", "rank", "compute ms", "%", "exposed ms", "%",
           "bubble ms", "%", "other ms", "%");
    for (int r = 0; r < ranks; r++)
        printf("%6d %12.3f %6.1f%% %12.3f %6.1f%% %12.3f %6.1f%% %12.3f %6.1f%%\n", r, sp[r].compute / 1e3,
               100 * sp[r].compute / sp[r].span, sp[r].exposed / 1e3, 100 * sp[r].exposed / sp[r].span,
               sp[r].bubble / 1e3, 100 * sp[r].bubble / sp[r].span, sp[r].other / 1e3,
               100 * sp[r].other / sp[r].span);

    /* collective call sites: instances matched across ranks by (site, seq) */
    char sites[64][64];
    int n_sites = 0;
    for (int i = 0; i < n; i++) {
        if (!e[i].comm)
            continue;
        int k = 0;
        while (k < n_sites && strcmp(sites[k], e[i].site))
            k++;
        if (k == n_sites && n_sites < 64)
            snprintf(sites[n_sites++], 64, "%s", e[i].site);
    }
    int *idx = ah_xcalloc((size_t)n, sizeof(int)), site_groups[64];
    double site_xfer[64] = {0};
    cJSON *out = cJSON_CreateObject(), *jr = cJSON_AddArrayToObject(out, "ranks"),
          *js = cJSON_AddArrayToObject(out, "sites");
    cJSON_AddStringToObject(out, "trace", path);
    cJSON_AddNumberToObject(out, "span_us", t1 - t0);
    cJSON_AddNumberToObject(out, "steps", wsteps);
    cJSON_AddNumberToObject(out, "skipped_steps", skip);
    if (wsteps > 0)
        cJSON_AddNumberToObject(out, "iteration_s", mean_span * 1e-6 / wsteps);
    for (int r = 0; r < ranks; r++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "rank", r);
        cJSON_AddNumberToObject(o, "wall_s", sp[r].span * 1e-6);
        cJSON_AddNumberToObject(o, "compute_s", sp[r].compute * 1e-6);
        cJSON_AddNumberToObject(o, "exposed_comm_s", sp[r].exposed * 1e-6);
        cJSON_AddNumberToObject(o, "bubble_s", sp[r].bubble * 1e-6);
        cJSON_AddNumberToObject(o, "other_s", sp[r].other * 1e-6);
        cJSON_AddItemToArray(jr, o);
    }
    printf("\n%-26s %7s %12s %12s %12s %12s %12s %12s\n", "call site", "calls", "bytes/call", "avg us",
           "busbw GB/s", "skew us", "transfer us", "predicted us");
    for (int k = 0; k < n_sites; k++) {
        double tot = 0, bytes = 0, skew = 0, xfer = 0;
        int inst = 0, nr = 1;
        /* One instance of a collective = the events of its members with the same
         * (site, group, seq). The last rank to arrive waits least: its time is the
         * transfer, the others' extra time is skew. Receives are one-sided (only the
         * receiver records), so they have no instances with more than one event. */
        int m = 0;
        for (int i = 0; i < n; i++)
            if (e[i].comm && !strcmp(e[i].site, sites[k])) {
                idx[m++] = i;
                tot += e[i].dur;
                bytes += e[i].bytes;
                nr = e[i].ranks;
            }
        int calls = m;
        sort_ev = e;
        qsort(idx, (size_t)m, sizeof(int), cmp_instance);
        site_groups[k] = 0;
        for (int a = 0; a < m;) {
            int b = a;
            double mn = 1e300, sum = 0;
            while (b < m && e[idx[b]].group == e[idx[a]].group && e[idx[b]].seq == e[idx[a]].seq) {
                if (e[idx[b]].dur < mn)
                    mn = e[idx[b]].dur;
                sum += e[idx[b]].dur;
                b++;
            }
            if (a == 0 || e[idx[a]].group != e[idx[a - 1]].group)
                site_groups[k]++;
            if (b - a > 1) {
                inst++;
                xfer += mn;
                skew += sum / (b - a) - mn;
            }
            a = b;
        }
        site_xfer[k] = xfer;
        double avg = tot / calls, bpc = bytes / calls;
        /* bus bandwidth of the transfer itself (skew excluded), nccl-tests convention
         * for all-reduce: 2(n-1)/n; the tied-embedding exchange is a 2-rank all-reduce */
        int is_ar = strstr(sites[k], "allreduce") != NULL || !strcmp(sites[k], "tied_sync");
        double t_x = inst ? xfer / inst : avg;
        double busbw = is_ar && t_x > 0 && nr > 1 && bpc > 0 ? bpc / (t_x * 1e3) * 2.0 * (nr - 1) / nr : 0;
        double pred = is_ar && fits ? predict_us(fits, bpc) : -1;
        printf("%-26s %7d %12.0f %12.1f", sites[k], calls, bpc, avg);
        if (busbw > 0)
            printf(" %12.3f", busbw);
        else
            printf(" %12s", "-");
        if (inst)
            printf(" %12.1f %12.1f", skew / inst, xfer / inst);
        else
            printf(" %12s %12s", "-", "-");
        if (pred >= 0)
            printf(" %12.1f\n", pred);
        else
            printf(" %12s\n", "-");
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "site", sites[k]);
        cJSON_AddNumberToObject(o, "calls", calls);
        cJSON_AddNumberToObject(o, "bytes_per_call", bpc);
        cJSON_AddNumberToObject(o, "avg_us", avg);
        if (busbw > 0)
            cJSON_AddNumberToObject(o, "busbw_GBps", busbw);
        if (inst) {
            cJSON_AddNumberToObject(o, "instances", inst);
            cJSON_AddNumberToObject(o, "skew_us", skew / inst);
            cJSON_AddNumberToObject(o, "transfer_us", xfer / inst);
        }
        if (pred >= 0)
            cJSON_AddNumberToObject(o, "predicted_us", pred);
        cJSON_AddItemToArray(js, o);
    }
    int rc = 0;
    if (sim_root && compare_sim(sim_path, sim_root, sp, ranks, wsteps, sites, n_sites, site_xfer, site_groups,
                                out, err, sizeof err) != 0)
        rc = cli_bad_input("analyze", err);
    if (otf2_dir && rc == 0) {
        ah_trace_span *spans = ah_xcalloc((size_t)n, sizeof(ah_trace_span));
        for (int i = 0; i < n; i++)
            spans[i] = (ah_trace_span){e[i].pid, e[i].comm, e[i].ts, e[i].dur, e[i].site};
        if (ah_trace_write_otf2(otf2_dir, "trace", spans, n, ranks, err, sizeof err) != 0) {
            fprintf(stderr, "autohet analyze: --otf2 %s: %s\n", otf2_dir, err);
            rc = 1;
        } else {
            printf("\nOTF2 archive written: %s/trace.otf2 (otf2-print %s/trace.otf2)\n", otf2_dir, otf2_dir);
        }
        free(spans);
    }
    /* the slowest operations */
    int *order = ah_xcalloc((size_t)n, sizeof(int));
    for (int i = 0; i < n; i++)
        order[i] = i;
    for (int i = 0; i < top && i < n; i++) /* partial selection sort: top is small */
        for (int j = i + 1; j < n; j++)
            if (e[order[j]].dur > e[order[i]].dur) {
                int t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
    cJSON *jt = cJSON_AddArrayToObject(out, "slowest");
    if (top > 0)
        printf("\nslowest operations:\n");
    for (int i = 0; i < top && i < n; i++) {
        const ev *v = &e[order[i]];
        printf("  %10.1f us  rank %-3d %s\n", v->dur, v->pid, v->name);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "rank", v->pid);
        cJSON_AddStringToObject(o, "name", v->name);
        cJSON_AddNumberToObject(o, "dur_us", v->dur);
        cJSON_AddItemToArray(jt, o);
    }
    if (json_path && rc == 0) {
        char *text = cJSON_Print(out);
        FILE *f = fopen(json_path, "w");
        if (!f || fputs(text, f) < 0) {
            fprintf(stderr, "autohet analyze: cannot write %s\n", json_path);
            rc = 1;
        }
        if (f)
            fclose(f);
        free(text);
    }
    if (svg_path && rc == 0) {
        FILE *f = fopen(svg_path, "w");
        if (!f) {
            fprintf(stderr, "autohet analyze: cannot write %s\n", svg_path);
            rc = 1;
        } else {
            int W = 760, row = 26, H = 70 + row * ranks;
            fprintf(
                f,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                "font-family=\"sans-serif\" "
                "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
                "<text x=\"10\" y=\"20\" font-size=\"15\" font-weight=\"bold\">Where the time went, per rank "
                "(span %.1f ms)</text>\n",
                W, H, (t1 - t0) / 1e3);
            const char *col[4] = {"#4c78a8", "#e45756", "#f2cf5b", "#bab0ac"},
                       *lab[4] = {"compute", "exposed communication", "pipeline bubble", "other"};
            for (int q = 0; q < 4; q++)
                fprintf(f,
                        "<rect x=\"%d\" y=\"30\" width=\"12\" height=\"12\" fill=\"%s\"/><text x=\"%d\" "
                        "y=\"41\">%s</text>\n",
                        10 + q * 180, col[q], 26 + q * 180, lab[q]);
            for (int r = 0; r < ranks; r++) {
                double x = 70, y = 55 + r * row, w = W - 90,
                       parts[4] = {sp[r].compute, sp[r].exposed, sp[r].bubble, sp[r].other};
                fprintf(f, "<text x=\"10\" y=\"%.0f\">rank %d</text>\n", y + 14, r);
                for (int q = 0; q < 4; q++) {
                    double pw = w * (parts[q] > 0 ? parts[q] : 0) / sp[r].span;
                    fprintf(f,
                            "<rect x=\"%.1f\" y=\"%.0f\" width=\"%.1f\" height=\"18\" fill=\"%s\"><title>%s "
                            "%.1f%%</title></rect>\n",
                            x, y, pw, col[q], lab[q], 100 * parts[q] / sp[r].span);
                    x += pw;
                }
            }
            fprintf(f, "</svg>\n");
            fclose(f);
        }
    }
    free(order);
    free(idx);
    free(cut);
    free(pv);
    free(uv);
    free(sp);
    free(cv);
    free(mv);
    free(e);
    cJSON_Delete(out);
    cJSON_Delete(root);
    cJSON_Delete(fits_root);
    cJSON_Delete(sim_root);
    return rc;
}
