/* autohet calibrate: fit the simulator's calibration to runs with measured iteration times
 * (docs/calibration.md, "Calibrating against measured runs"). */
#include <getopt.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "autohet/comm.h"
#include "autohet/sim.h"
#include "cli/cli.h"
#include "util/atomic_file.h"
#include "util/json_file.h"
#include "util/json_read.h"

#define MAX_RUNS 4096
#define MIN_MEASURED_S 1e-6 /* a run's measured iteration: from 1 us to 11.6 days */
#define MAX_MEASURED_S 1e6

static void calibrate_usage(FILE *f) {
    fprintf(
        f,
        "usage: autohet calibrate RUNS.json [--devices FILE] [--profile PATH] [--comm-profile FILE]\n"
        "                         [--overlap-dp] [--dp-serial] [--out FILE] [--json FILE] [--no-validate]\n"
        "                         [--quiet]\n\n"
        "Fits what the simulator leaves out to runs whose iteration times were measured, and writes it\n"
        "as a calibration for `simulate --calibration` and `plan --calibration` (docs/calibration.md):\n"
        "  - per GPU type, a compute scale by micro-batch size, from the runs whose replicas are one stage\n"
        "    of one type;\n"
        "  - the pipeline: from the multi-stage runs, lockstep transfers (each stage's forward and\n"
        "    backward wait for two blocking sends of one activation on the replica's slowest boundary,\n"
        "    DeepSpeed's parity-paired steps) with a latency and a share of the link's bandwidth per\n"
        "    link class, kept when that regime fits the runs better than overlapped sends (the share\n"
        "    corrects the links used here, datasheet or measured, and only applies to that kind);\n"
        "  - never a calibration that fits the runs worse than none.\n"
        "Each run is then simulated with the fit (in sample) and, unless --no-validate, with a fit made\n"
        "without it (left out): the table and --json give both errors.\n\n"
        "  RUNS.json    an array of {\"plan\": PATH, \"measured_iteration_s\": SECONDS, ...}; PATH is a "
        "plan\n"
        "               document, relative to the directory of RUNS.json; a run with \"exclude\": REASON\n"
        "               is simulated and shown but not fitted (errors are over the runs fitted)\n"
        "  --devices    GPU catalog override file (the runs' GPUs)\n"
        "  --profile    per-layer profile the runs are simulated with (default: analytic)\n"
        "  --comm-profile  measured links (autohet commbench --json, its links{} matrix between hosts)\n"
        "               the runs are simulated with, as `simulate --comm-profile` does\n"
        "  --overlap-dp / --dp-serial  simulate the runs as `simulate` does with these flags\n"
        "  --out        write the calibration here\n"
        "  --json       the runs' measured and simulated times and the errors\n"
        "  --no-validate  skip the leave-one-out fits\n"
        "  --quiet      no table on stdout\n\n"
        "exit status: 0 success, 2 bad input (one line on stderr)\n");
}

/* The runs file: each run's plan (relative to the file's directory) and measured time. */
static int load_runs(const char *path, const ah_device_catalog *cat, ah_calib_run **out, int *n_out,
                     char *err, size_t errlen) {
    ah_err_ctx cx = {path, err, errlen};
    cJSON *root = ah_json_parse_file(path, 16u << 20, 0, err, errlen);
    if (!root)
        return -1;
    int rc = 0, n = cJSON_GetArraySize(root);
    if (!cJSON_IsArray(root))
        rc = ah_fail(&cx, "expected an array of runs");
    else if (n < 1 || n > MAX_RUNS)
        rc = ah_fail(&cx, "expected 1 to %d runs, got %d", MAX_RUNS, n);
    char *dup = strdup(path), *dir = dup ? dirname(dup) : ".";
    ah_calib_run *runs = rc ? NULL : calloc((size_t)n, sizeof *runs);
    int loaded = 0;
    for (int i = 0; rc == 0 && i < n; i++) {
        char ip[AH_JPATH_LEN], rel[1024], full[2200];
        const cJSON *it = cJSON_GetArrayItem(root, i);
        if (ah_jitem_obj(&cx, it, "", i, ip) < 0 ||
            ah_jget_str(&cx, it, ip, "plan", 1, rel, sizeof rel) < 0 ||
            ah_jget_num(&cx, it, ip, "measured_iteration_s", 1, 0, &runs[i].measured_s) < 0) {
            rc = -1;
            break;
        }
        /* a time no training step takes (1e9 s: 31 years) would swamp every error and fit nothing */
        if (!(runs[i].measured_s >= MIN_MEASURED_S && runs[i].measured_s <= MAX_MEASURED_S)) {
            char fp[AH_JPATH_LEN];
            ah_jpath_key(fp, ip, "measured_iteration_s");
            rc = ah_jfail(&cx, fp, "%g out of range [%g, %g] (seconds per iteration; the run of %s)",
                          runs[i].measured_s, MIN_MEASURED_S, MAX_MEASURED_S, rel);
            break;
        }
        if (ah_jget_str(&cx, it, ip, "exclude", 0, runs[i].excluded, sizeof runs[i].excluded) < 0) {
            rc = -1;
            break;
        }
        snprintf(full, sizeof full, "%s/%s", rel[0] == '/' ? "" : dir, rel);
        if (ah_plan_read_json(rel[0] == '/' ? rel : full, cat, &runs[i].plan, err, errlen) != 0) {
            rc = -1;
            break;
        }
        loaded++;
        const char *base = strrchr(rel, '/') ? strrchr(rel, '/') + 1 : rel;
        size_t bl = strlen(base) < sizeof runs[i].name - 1 ? strlen(base) : sizeof runs[i].name - 1;
        memcpy(runs[i].name, base, bl);
        runs[i].name[bl] = '\0';
        char *dot = strstr(runs[i].name, ".plan.json");
        if (!dot)
            dot = strstr(runs[i].name, ".json");
        if (dot)
            *dot = '\0';
    }
    free(dup);
    cJSON_Delete(root);
    if (rc) {
        for (int i = 0; i < loaded; i++)
            ah_plan_free(&runs[i].plan);
        free(runs);
        return -1;
    }
    *out = runs;
    *n_out = n;
    return 0;
}

typedef struct {
    double mean, worst;
    int worst_run;
} err_stats;

static int excluded_runs(const ah_calib_run *r, int n) {
    int k = 0;
    for (int i = 0; i < n; i++)
        k += r[i].excluded[0] != 0;
    return k;
}

/* |simulated / measured - 1| over the runs fitted (not excluded), the simulated time at byte offset `off` */
static err_stats stats_of(const ah_calib_run *r, int n, size_t off) {
    err_stats s = {0, 0, -1};
    int m = n - excluded_runs(r, n);
    for (int i = 0; i < n; i++) {
        if (r[i].excluded[0])
            continue;
        double sim = *(const double *)((const char *)&r[i] + off), e = fabs(sim / r[i].measured_s - 1);
        s.mean += e / m;
        if (e > s.worst) {
            s.worst = e;
            s.worst_run = i;
        }
    }
    return s;
}

/* whether a run can pin anything: one GPU type in all its stages (its compute scales), or a pipeline (the
 * lockstep transfers) */
static int fittable(const ah_plan *p) {
    const char *name = NULL;
    int one_type = 1;
    for (int k = 0; k < p->n_replicas; k++) {
        if (p->replicas[k].n_stages > 1)
            return 1;
        const char *d = p->cluster.nodes[p->replicas[k].stages[0].node].dev.name;
        one_type &= !name || strcmp(name, d) == 0;
        name = d;
    }
    return one_type;
}

/* Why the calibration corrects nothing (NULL when it corrects something): no run to fit it to, or every fit
 * left the runs further off than none, which ah_sim_calibrate then keeps (scales 1, overlapped sends). */
static const char *noop_reason(const ah_calibration *c, const ah_calib_run *r, int n) {
    if (c->n_devices > 0 || c->lockstep)
        return NULL;
    for (int i = 0; i < n; i++)
        if (!r[i].excluded[0] && fittable(&r[i].plan))
            return "every calibration fitted to the runs leaves them further off than none (see the \"as is\" "
                   "column: are the measured times right?)";
    return "no run to fit it to (each run fitted is one-stage replicas of different GPU types)";
}

static void describe(const ah_calibration *c, const char *noop, FILE *f) {
    if (noop) {
        fprintf(f, "calibration    none, it corrects nothing: %s\n", noop);
        return;
    }
    for (int d = 0; d < c->n_devices; d++) {
        fprintf(f, "%-14s compute", c->devices[d].name);
        for (int j = 0; j < c->devices[d].n; j++)
            fprintf(f, "%s micro-batch %d x%.3f", j ? "," : "", c->devices[d].mb[j], c->devices[d].scale[j]);
        fprintf(f, "; optimizer x%.3f\n", ah_calibration_optimizer_scale(c, c->devices[d].name));
    }
    if (c->n_devices == 0)
        fprintf(f, "scales         none (no run whose replicas are one stage of one GPU type)\n");
    if (!c->lockstep) {
        fprintf(f,
                "pipeline       overlapped (lockstep transfers fitted no better, or no multi-stage run)\n");
        return;
    }
    fprintf(f, "pipeline       lockstep: %.3f ms per transfer", c->p2p_alpha_s * 1e3);
    static const char *cls[2] = {"inside a node", "between nodes"};
    for (int k = 0; k < 2; k++)
        if (c->p2p_bw_fraction[k] > 0)
            fprintf(f, ", %.0f%% of the link's bandwidth %s", 100 * c->p2p_bw_fraction[k], cls[k]);
    fprintf(f, "\n");
    if (c->links_scoped)
        fprintf(f, "links          %s: the fractions apply where the links are %s\n",
                c->links_measured ? "measured (--comm-profile)" : "datasheet (no --comm-profile)",
                c->links_measured ? "measured too" : "datasheet figures too");
}

static void print_table(const ah_calib_run *r, int n, int validate, FILE *f) {
    fprintf(f, "\n%-44s %3s %4s %3s %4s %4s %10s %9s %9s", "run", "PP", "rep", "TP", "mb", "m", "measured s",
            "as is", "fitted");
    fprintf(f, validate ? " %9s\n" : "\n", "left out");
    for (int i = 0; i < n; i++) {
        const ah_plan *p = &r[i].plan;
        int pp = 0;
        for (int k = 0; k < p->n_replicas; k++)
            pp = p->replicas[k].n_stages > pp ? p->replicas[k].n_stages : pp;
        fprintf(f, "%-44.44s %3d %4d %3d %4d %4d %10.4f %+8.1f%% %+8.1f%%", r[i].name, pp, p->n_replicas,
                p->replicas[0].stages[0].tp, p->micro_batch, p->replicas[0].micro_batches, r[i].measured_s,
                100 * (r[i].uncalibrated_s / r[i].measured_s - 1),
                100 * (r[i].fitted_s / r[i].measured_s - 1));
        if (validate)
            fprintf(f, " %+8.1f%%", 100 * (r[i].left_out_s / r[i].measured_s - 1));
        if (r[i].excluded[0])
            fprintf(f, "  (excluded: %s)", r[i].excluded);
        fprintf(f, "\n");
    }
}

/* {"runs": n, "excluded": k, "as_is": {...}, "in_sample": {...}, "left_out": {...}} as JSON text (buf); the
 * errors over the runs fitted */
static void summary_json(const ah_calib_run *r, int n, int validate, char *buf, size_t cap) {
    err_stats a = stats_of(r, n, offsetof(ah_calib_run, uncalibrated_s)),
              b = stats_of(r, n, offsetof(ah_calib_run, fitted_s)),
              c = stats_of(r, n, offsetof(ah_calib_run, left_out_s));
    int excluded = excluded_runs(r, n);
    int w = snprintf(buf, cap,
                     "{\"runs\": %d, \"excluded\": %d, \"as_is\": {\"mean_abs_error\": %.6f, \"worst_abs_error\": "
                     "%.6f}, \"in_sample\": {\"mean_abs_error\": %.6f, \"worst_abs_error\": %.6f}",
                     n, excluded, a.mean, a.worst, b.mean, b.worst);
    if (validate && w > 0 && (size_t)w < cap)
        w += snprintf(buf + w, cap - (size_t)w,
                      ", \"left_out\": {\"mean_abs_error\": %.6f, \"worst_abs_error\": %.6f}", c.mean,
                      c.worst);
    if (w > 0 && (size_t)w < cap)
        snprintf(buf + w, cap - (size_t)w, "}");
}

static int write_json(const char *path, const ah_calib_run *r, int n, int validate, const ah_calibration *c,
                      const char *summary, char *err, size_t errlen) {
    cJSON *o = cJSON_CreateObject(), *runs = cJSON_AddArrayToObject(o, "runs");
    for (int i = 0; i < n; i++) {
        cJSON *x = cJSON_CreateObject();
        cJSON_AddStringToObject(x, "run", r[i].name);
        cJSON_AddNumberToObject(x, "measured_s", r[i].measured_s);
        cJSON_AddNumberToObject(x, "simulated_s", r[i].uncalibrated_s);
        cJSON_AddNumberToObject(x, "fitted_s", r[i].fitted_s);
        if (validate)
            cJSON_AddNumberToObject(x, "left_out_s", r[i].left_out_s);
        if (r[i].excluded[0])
            cJSON_AddStringToObject(x, "excluded", r[i].excluded);
        cJSON_AddItemToArray(runs, x);
    }
    cJSON_AddItemToObject(o, "summary", cJSON_Parse(summary));
    cJSON_AddStringToObject(o, "pipeline", c->lockstep ? "lockstep" : "overlapped");
    char *text = cJSON_Print(o);
    int rc = text ? ah_write_text_output(path, text, err, errlen) : -1;
    free(text);
    cJSON_Delete(o);
    return rc;
}

/* Every run's links as `simulate --comm-profile` sets them: its nodes' links and o's latencies and matrix. */
static int apply_comm_profile(const char *comm, ah_calib_run *runs, int n, ah_plan_options *o, char *err,
                              size_t errlen) {
    char summary[256];
    for (int i = 0; comm && i < n; i++)
        if (ah_comm_profile_apply(comm, &runs[i].plan.cluster, o, summary, sizeof summary, err, errlen) != 0)
            return -1;
    return 0;
}

int cmd_calibrate(int argc, char **argv) {
    cli_options lo;
    if (cli_long_options(
            "devices=d profile=p comm-profile=c overlap-dp!O dp-serial!S out=o json=j no-validate!N quiet!q help!h",
            &lo) <
        0)
        return 1;
    const char *devices = NULL, *profile = NULL, *comm = NULL, *out = NULL, *json = NULL;
    int quiet = 0, validate = 1, c;
    ah_sim_options so = {.schedule = AH_SCHED_1F1B};
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", lo.opts, NULL)) != -1) {
        switch (c) {
        case 'd': devices = optarg; break;
        case 'p': profile = optarg; break;
        case 'c': comm = optarg; break;
        case 'O': so.overlap_dp = 1; break;
        case 'S': so.dp_serial = 1; break;
        case 'o': out = optarg; break;
        case 'j': json = optarg; break;
        case 'N': validate = 0; break;
        case 'q': quiet = 1; break;
        case 'h': calibrate_usage(stdout); return 0;
        default: {
            char msg[160];
            cli_unknown_option("calibrate", argv[optind - 1], msg, sizeof msg);
            return cli_bad_input("calibrate", msg);
        }
        }
    }
    if (optind != argc - 1)
        return cli_bad_input("calibrate", "expected exactly one RUNS.json (see --help)");
    char err[4400];
    if (cli_check_output("--out", out, err, sizeof err) || cli_check_output("--json", json, err, sizeof err))
        return cli_bad_input("calibrate", err);
    ah_device_catalog catalog = *ah_device_catalog_builtin();
    if (devices && ah_device_load_overrides(&catalog, devices, err, sizeof err) != 0)
        return cli_bad_input("calibrate", err);
    ah_profile *prof =
        profile ? ah_profile_load_with(profile, &catalog, err, sizeof err) : ah_profile_analytic();
    if (!prof)
        return cli_bad_input("calibrate", err);
    ah_calib_run *runs = NULL;
    int n = 0;
    if (load_runs(argv[optind], &catalog, &runs, &n, err, sizeof err) != 0) {
        ah_profile_free(prof);
        return cli_bad_input("calibrate", err);
    }
    ah_plan_options o;
    ah_plan_options_default(&o);
    ah_calibration calib;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = 0;
    if (apply_comm_profile(comm, runs, n, &o, err, sizeof err) != 0 ||
        ah_sim_calibrate(runs, n, prof, &o, &so, validate, &calib, err, sizeof err) != 0) {
        rc = cli_bad_input("calibrate", err);
    } else {
        clock_gettime(CLOCK_MONOTONIC, &t1);
        snprintf(calib.source, sizeof calib.source, "autohet calibrate %s: %d runs", argv[optind], n);
        char summary[512];
        summary_json(runs, n, validate, summary, sizeof summary);
        const char *noop = noop_reason(&calib, runs, n);
        if (!quiet) {
            printf("Calibration from %d measured runs (%s), fitted in %.2f s\n", n, argv[optind],
                   (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
            describe(&calib, noop, stdout);
            print_table(runs, n, validate, stdout);
            err_stats a = stats_of(runs, n, offsetof(ah_calib_run, uncalibrated_s)),
                      b = stats_of(runs, n, offsetof(ah_calib_run, fitted_s)),
                      v = stats_of(runs, n, offsetof(ah_calib_run, left_out_s));
            printf("\nmean |error|: as is %.1f%% (worst %.1f%%), fitted %.1f%% (worst %.1f%%)", 100 * a.mean,
                   100 * a.worst, 100 * b.mean, 100 * b.worst);
            if (validate)
                printf(", left out %.1f%% (worst %.1f%%, %s)", 100 * v.mean, 100 * v.worst,
                       v.worst_run >= 0 ? runs[v.worst_run].name : "-");
            int excluded = excluded_runs(runs, n);
            if (excluded)
                printf(" over the %d runs fitted (%d excluded)", n - excluded, excluded);
            printf("\n");
        }
        if (out && ah_calibration_write(out, &calib, summary, err, sizeof err) != 0)
            rc = cli_bad_input("calibrate", err);
        else if (out && !quiet)
            printf("wrote %s\n", out);
        if (rc == 0 && out && noop) /* a file that changes nothing says so, --quiet or not */
            fprintf(stderr, "autohet calibrate: note: %s corrects nothing: %s\n", out, noop);
        if (rc == 0 && json && write_json(json, runs, n, validate, &calib, summary, err, sizeof err) != 0)
            rc = cli_bad_input("calibrate", err);
        else if (rc == 0 && json && !quiet)
            printf("wrote %s\n", json);
    }
    for (int i = 0; i < n; i++)
        ah_plan_free(&runs[i].plan);
    free(runs);
    ah_link_matrix_free((ah_link_matrix *)o.links);
    ah_profile_free(prof);
    return rc;
}
