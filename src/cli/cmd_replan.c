/* autohet replan: a plan for what survives of a running plan's cluster, fast (docs/planner.md "Replanning
 * after a loss"). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "autohet/plan.h"
#include "cli/cli.h"
#include "util/clock.h"

/* up to this many surviving GPUs the full search runs by default (BENCHMARKS.md "Planner": <= 0.3 s up to 64
 * GPUs, 1 s at 128) */
#define REPLAN_FULL_MAX_GPUS 64

static void replan_usage(FILE *f) {
    fprintf(
        f,
        "usage: autohet replan PLAN.json --lost NODE[,NODE...] [--exact|--fast] [--devices FILE] [--profile "
        "PATH]\n"
        "                      [--json FILE] [--quiet]\n\n"
        "Plans the survivors of PLAN.json's cluster after NODEs are lost, as the recovery path does on\n"
        "large clusters: the replicas whose nodes all survive are kept, the nodes left whole are planned\n"
        "on their own by the exact search, and the micro-batches are dealt out again over all replicas.\n"
        "Milliseconds where a full search of a large cluster takes seconds; on at most %d GPUs the\n"
        "full search of the survivors runs too (tenths of a second there; not when the loss is looked up\n"
        "below) and the faster plan is kept.\n"
        "A PLAN.json made with `autohet plan --replans K` holds the full search's plan for every loss\n"
        "of up to K nodes: such a loss is looked up (milliseconds, the plan a full search returns).\n\n"
        "  --lost     the lost nodes, by name (PLAN.json's cluster.nodes[].name)\n"
        "  --exact    run the full search on the survivors whatever their size; keep the faster\n"
        "  --fast     never run the full search (a lookup in PLAN.json's replans still counts)\n"
        "  --devices  GPU catalog override file\n"
        "  --profile  per-layer profile (default: the one PLAN.json records)\n"
        "  --json     the new plan document (with \"replan\": how it was made, both times)\n"
        "  --quiet    no table on stdout\n\n"
        "exit status: 0 success, 2 bad input or nothing fits (one line on stderr)\n",
        REPLAN_FULL_MAX_GPUS);
}

/* survivors = the plan's cluster without the --lost names; 0, or -1 with msg naming an unknown node */
static int survivors_of(const ah_plan *p, const char *lost, ah_cluster *out, char *msg, size_t n) {
    out->nodes = calloc((size_t)p->cluster.n_nodes + 1, sizeof(ah_node));
    out->n_nodes = 0;
    char *list = strdup(lost), *save = NULL;
    unsigned char *gone = calloc((size_t)p->cluster.n_nodes + 1, 1);
    if (!out->nodes || !list || !gone)
        abort();
    int rc = 0;
    for (char *t = strtok_r(list, ",", &save); t && rc == 0; t = strtok_r(NULL, ",", &save)) {
        int i = 0;
        while (i < p->cluster.n_nodes && strcmp(p->cluster.nodes[i].name, t) != 0)
            i++;
        if (i == p->cluster.n_nodes) {
            snprintf(msg, n, "--lost: no node '%s' in the plan's cluster", t);
            rc = -1;
        } else {
            gone[i] = 1;
        }
    }
    for (int i = 0; i < p->cluster.n_nodes; i++)
        if (!gone[i])
            out->nodes[out->n_nodes++] = p->cluster.nodes[i];
    free(list);
    free(gone);
    return rc;
}

/* the table of the plan kept and a line for each way it was made (made[]: as write_replan's) */
static void print_replan(const ah_plan *pick, const ah_plan *old, const ah_plan *const made[4], const double took[4],
                         const char *fast_err) {
    ah_plan_print_table(pick, stdout);
    if (made[0])
        printf("Replanned without the lost nodes in %.1f ms: %.4f s per iteration (was %.4f s)\n", 1e3 * took[0],
               made[0]->iteration_time_s, old->iteration_time_s);
    else if (strcmp(fast_err, "not run") != 0)
        printf("The fast replan found no plan (%s)\n", fast_err);
    if (made[1])
        printf("Computed ahead (plan --replans), looked up in %.1f ms: %.4f s per iteration (was %.4f s)\n",
               1e3 * took[1], made[1]->iteration_time_s, old->iteration_time_s);
    if (made[2])
        printf("Deeper than the replans computed ahead: part of the loss looked up, the rest repaired in %.1f ms: "
               "%.4f s per iteration\n",
               1e3 * took[2], made[2]->iteration_time_s);
    if (made[3])
        printf("Full search of the survivors: %.3f s, %.4f s per iteration\n", took[3], made[3]->iteration_time_s);
    printf("Kept: %s\n", pick == made[1]   ? "the plan computed ahead"
                          : pick == made[2] ? "the plan computed ahead for part of the loss, repaired"
                          : pick == made[3] ? "the full search's plan"
                                            : "the fast replan");
}

/* the new plan document, with "replan": how it was made, and each way's time and plan (NULL: not made) in the
 * order fast, computed ahead, computed ahead and repaired, full search */
static int write_replan(const char *json, const char *lost, const ah_plan *pick, const ah_plan *const made[4],
                        const double took[4], const char *kept) {
    static const char *way[4] = {"fast", "ahead", "ahead_repair", "full_search"};
    char err[512], k[64];
    int rc = 0;
    cJSON *x = cJSON_CreateObject(), *r = cJSON_AddObjectToObject(x, "replan");
    cJSON_AddStringToObject(r, "lost", lost);
    for (int i = 0; i < 4; i++) {
        if (!made[i])
            continue;
        snprintf(k, sizeof k, "%s_s", way[i]);
        cJSON_AddNumberToObject(r, k, took[i]);
        snprintf(k, sizeof k, "%s_iteration_time_s", i == 3 ? "full" : way[i]);
        cJSON_AddNumberToObject(r, k, made[i]->iteration_time_s);
        if (i == 1 || i == 3) { /* exact: the search's value */
            snprintf(k, sizeof k, "%s_search_value_ns", i == 3 ? "full" : way[i]);
            cJSON_AddNumberToObject(r, k, (double)made[i]->search_value_ns);
        }
    }
    cJSON_AddStringToObject(r, "kept", kept);
    if (ah_plan_write_json(pick, x, json, err, sizeof err) != 0) {
        fprintf(stderr, "autohet replan: %s\n", err);
        rc = -1;
    }
    cJSON_Delete(x);
    return rc;
}

int cmd_replan(int argc, char **argv) {
    cli_options lo;
    if (cli_long_options("lost=l exact!e fast!f devices=d profile=p json=j quiet!q help!h", &lo) < 0)
        return 1;
    const char *lost = NULL, *devices = NULL, *profile = NULL, *json = NULL;
    int exact = 0, fast_only = 0, quiet = 0, c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", lo.opts, NULL)) != -1) {
        switch (c) {
        case 'l': lost = optarg; break;
        case 'e': exact = 1; break;
        case 'f': fast_only = 1; break;
        case 'd': devices = optarg; break;
        case 'p': profile = optarg; break;
        case 'j': json = optarg; break;
        case 'q': quiet = 1; break;
        case 'h': replan_usage(stdout); return 0;
        default: {
            char msg[160];
            cli_unknown_option("replan", argv[optind - 1], msg, sizeof msg);
            return cli_bad_input("replan", msg);
        }
        }
    }
    char err[4400];
    if (optind != argc - 1)
        return cli_bad_input("replan", "expected exactly one PLAN.json (see --help)");
    if (!lost || cli_check_list("--lost", lost, err, sizeof err))
        return cli_bad_input("replan", lost ? err : "--lost is required");
    if (cli_check_output("--json", json, err, sizeof err))
        return cli_bad_input("replan", err);
    if (exact && fast_only)
        return cli_bad_input("replan", "--exact and --fast: one or the other");
    ah_device_catalog catalog = *ah_device_catalog_builtin();
    if (devices && ah_device_load_overrides(&catalog, devices, err, sizeof err) != 0)
        return cli_bad_input("replan", err);
    ah_plan old;
    cJSON *extra = NULL;
    if (ah_plan_read_json_extras(argv[optind], &catalog, &old, &extra, err, sizeof err) != 0)
        return cli_bad_input("replan", err);
    ah_replan_table *table = NULL;
    const cJSON *tj = cJSON_GetObjectItemCaseSensitive(extra, "replans");
    int bad_table = tj && ah_replan_table_from_json(tj, &old, argv[optind], &table, err, sizeof err) != 0;
    cJSON_Delete(extra);
    if (bad_table) {
        ah_plan_free(&old);
        return cli_bad_input("replan", err);
    }
    ah_profile *prof = profile ? ah_profile_load_with(profile, &catalog, err, sizeof err)
                       : !strncmp(old.profile_source, "measured:", 9)
                           ? ah_profile_load_with(old.profile_source + 9, &catalog, err, sizeof err)
                           : ah_profile_analytic();
    ah_cluster surv = {0};
    int rc = 0;
    if (!prof || survivors_of(&old, lost, &surv, err, sizeof err) != 0) {
        rc = cli_bad_input("replan", err);
        goto out;
    }
    ah_plan_options o;
    ah_plan_options_default(&o);
    ah_plan_options_take_plan(&o, &old);
    ah_plan fast, full, ahead, near;
    double t0 = ah_now_s();
    int have_ahead = table ? ah_replan_table_lookup(table, &old, &surv, prof, &o, &ahead, err, sizeof err) : 0;
    double t_ahead = ah_now_s() - t0, t_full = 0;
    if (have_ahead < 0) {
        rc = cli_bad_input("replan", err);
        goto out;
    }
    /* deeper than the table: its entry for part of the loss, repaired for the rest */
    t0 = ah_now_s();
    int have_near = table && !have_ahead && ah_replan_table_nearest(table, &old, &surv, prof, &o, &near, err,
                                                                      sizeof err) == 1;
    double t_near = ah_now_s() - t0;
    /* the fast replan of the whole loss: where the table answered, only to compare (--exact) */
    t0 = ah_now_s();
    char fast_err[sizeof err] = "not run";
    int have_fast = (exact || (!have_ahead && !have_near)) &&
                    ah_plan_repair(&old, &surv, prof, &o, &fast, fast_err, sizeof fast_err) == 0;
    double t_fast = ah_now_s() - t0;
    if (!have_fast && !have_ahead && !have_near) {
        rc = cli_bad_input("replan", fast_err);
        goto out;
    }
    int have_full = 0;
    if (!fast_only && (exact || (!have_ahead && ah_cluster_total_gpus(&surv) <= REPLAN_FULL_MAX_GPUS))) {
        t0 = ah_now_s();
        have_full = ah_plan_search(&old.model, &surv, prof, &o, &full, err, sizeof err) == 0;
        t_full = ah_now_s() - t0;
    }
    /* the plan computed ahead (the full search's); else the fastest evaluated */
    const ah_plan *pick = have_ahead ? &ahead : have_near ? &near : &fast;
    if (have_near && have_fast && fast.iteration_time_s < pick->iteration_time_s)
        pick = &fast;
    if (have_full && full.iteration_time_s < pick->iteration_time_s)
        pick = &full;
    const char *kept = pick == &ahead  ? "computed ahead"
                       : pick == &near ? "computed ahead, repaired"
                       : pick == &full ? "full search"
                                       : "fast replan";
    const ah_plan *made[4] = {have_fast ? &fast : NULL, have_ahead ? &ahead : NULL, have_near ? &near : NULL,
                              have_full ? &full : NULL};
    double took[4] = {t_fast, t_ahead, t_near, t_full};
    if (!quiet)
        print_replan(pick, &old, made, took, fast_err);
    if (json && write_replan(json, lost, pick, made, took, kept) != 0)
        rc = 1;
    if (have_fast)
        ah_plan_free(&fast);
    if (have_ahead)
        ah_plan_free(&ahead);
    if (have_near)
        ah_plan_free(&near);
    if (have_full)
        ah_plan_free(&full);
out:
    ah_replan_table_free(table);
    free(surv.nodes);
    ah_profile_free(prof);
    ah_plan_free(&old);
    return rc;
}
