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
        "full search of the survivors runs too (tenths of a second there) and the faster plan is kept.\n\n"
        "  --lost     the lost nodes, by name (PLAN.json's cluster.nodes[].name)\n"
        "  --exact    run the full search on the survivors whatever their size; keep the faster\n"
        "  --fast     never run the full search\n"
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
    if (ah_plan_read_json(argv[optind], &catalog, &old, err, sizeof err) != 0)
        return cli_bad_input("replan", err);
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
    o.train = old.train;
    o.global_batch = old.global_batch;
    ah_plan fast, full;
    double t0 = ah_now_s();
    if (ah_plan_repair(&old, &surv, prof, &o, &fast, err, sizeof err) != 0) {
        rc = cli_bad_input("replan", err);
        goto out;
    }
    double t_fast = ah_now_s() - t0, t_full = 0;
    int have_full = 0;
    if (!fast_only && (exact || ah_cluster_total_gpus(&surv) <= REPLAN_FULL_MAX_GPUS)) {
        t0 = ah_now_s();
        have_full = ah_plan_search(&old.model, &surv, prof, &o, &full, err, sizeof err) == 0;
        t_full = ah_now_s() - t0;
    }
    const ah_plan *pick = have_full && full.iteration_time_s < fast.iteration_time_s ? &full : &fast;
    if (!quiet) {
        ah_plan_print_table(pick, stdout);
        printf("Replanned without the lost nodes in %.1f ms: %.4f s per iteration (was %.4f s)\n",
               1e3 * t_fast, fast.iteration_time_s, old.iteration_time_s);
        if (have_full)
            printf("Full search of the survivors: %.3f s, %.4f s per iteration (the fast replan %+.2f %%); "
                   "kept: %s\n",
                   t_full, full.iteration_time_s, 100 * (fast.iteration_time_s / full.iteration_time_s - 1),
                   pick == &full ? "the full search's" : "the fast replan");
    }
    if (json) {
        cJSON *extra = cJSON_CreateObject(), *r = cJSON_AddObjectToObject(extra, "replan");
        cJSON_AddStringToObject(r, "lost", lost);
        cJSON_AddNumberToObject(r, "fast_s", t_fast);
        cJSON_AddNumberToObject(r, "fast_iteration_time_s", fast.iteration_time_s);
        if (have_full) {
            cJSON_AddNumberToObject(r, "full_search_s", t_full);
            cJSON_AddNumberToObject(r, "full_iteration_time_s", full.iteration_time_s);
        }
        cJSON_AddStringToObject(r, "kept", pick == &full ? "full search" : "fast replan");
        if (ah_plan_write_json(pick, extra, json, err, sizeof err) != 0) {
            fprintf(stderr, "autohet replan: %s\n", err);
            rc = 1;
        }
        cJSON_Delete(extra);
    }
    ah_plan_free(&fast);
    if (have_full)
        ah_plan_free(&full);
out:
    free(surv.nodes);
    ah_profile_free(prof);
    ah_plan_free(&old);
    return rc;
}
