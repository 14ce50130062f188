/* Planner benchmark: paper-like heterogeneous mixes and scale points.
 * For each scenario: AutoHet planning time (median of N runs, one core) and
 * the predicted iteration time of autohet / proportional (Whale-style) /
 * megatron under the same cost model, with speedups. Prints a table and, with
 * --markdown FILE, writes it as Markdown. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autohet/plan.h"
#include "plan/costs.h"

#include "scenarios.h"


static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int runs = 5;
    const char *md = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--runs") && i + 1 < argc)
            runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--markdown") && i + 1 < argc)
            md = argv[++i];
        else {
            fprintf(stderr, "usage: plan_bench [--runs N] [--markdown FILE]\n");
            return 2;
        }
    }
    FILE *out = md ? fopen(md, "w") : NULL;
    if (md && !out) {
        perror(md);
        return 1;
    }
    printf("%-12s %-13s %-5s %-62s %9s %9s %9s %9s %8s %8s\n", "group", "model", "GPUs", "cluster", "plan s",
           "autohet", "whale", "megatron", "vs whale", "vs megat");
    if (out)
        fprintf(out,
                "| group | model | GPUs | cluster | global batch | planning time s (median of %d) | "
                "autohet iter s | proportional iter s | megatron iter s | speedup vs proportional | "
                "speedup vs megatron | autohet plan |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n",
                runs);
    int rc = 0;
    for (size_t s = 0; s < N_SCEN; s++) {
        const scenario *sc = &SCENARIOS[s];
        char err[512];
        ah_model_config m;
        ah_cluster c = {0};
        if (ah_model_resolve(sc->model, &m, err, sizeof err) ||
            ah_cluster_resolve(sc->cluster, ah_device_catalog_builtin(), &c, err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        ah_profile *prof =
            sc->profile ? ah_profile_load(sc->profile, err, sizeof err) : ah_profile_analytic();
        if (!prof) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        ah_plan_options o;
        ah_plan_options_default(&o);
        o.global_batch = sc->global_batch;
        o.train.seq = sc->seq;
        double times[32];
        ah_plan p[3];
        int ok[3] = {0, 0, 0};
        for (int r = 0; r < runs && r < 32; r++) {
            ah_plan q;
            double t0 = ah_now_s();
            int e = ah_plan_search(&m, &c, prof, &o, &q, err, sizeof err);
            times[r] = ah_now_s() - t0;
            if (e) {
                fprintf(stderr, "%s: %s\n", sc->model, err);
                rc = 1;
                break;
            }
            if (r == 0) {
                p[0] = q;
                ok[0] = 1;
            } else {
                ah_plan_free(&q);
            }
        }
        for (int k = 1; k < 3; k++) {
            ah_plan_options ob = o;
            ob.strategy = k == 1 ? AH_STRATEGY_PROPORTIONAL : AH_STRATEGY_MEGATRON;
            ok[k] = ah_plan_search(&m, &c, prof, &ob, &p[k], err, sizeof err) == 0;
        }
        qsort(times, (size_t)runs, sizeof(double), cmp_double);
        double med = times[runs / 2];
        char desc[256], shape[160];
        snprintf(shape, sizeof shape, "-");
        if (ok[0]) {
            int depth_min = 1 << 30, depth_max = 0;
            for (int r = 0; r < p[0].n_replicas; r++) {
                int d = p[0].replicas[r].n_stages;
                if (d < depth_min)
                    depth_min = d;
                if (d > depth_max)
                    depth_max = d;
            }
            char tps[64];
            ah_plan_tp_text(&p[0], tps, sizeof tps);
            snprintf(shape, sizeof shape, "TP=%s mb=%d, %d replicas, %d-%d stages", tps, p[0].micro_batch,
                     p[0].n_replicas, depth_min, depth_max);
        }
        snprintf(desc, sizeof desc, "%s", sc->cluster);
        double it[3];
        for (int k = 0; k < 3; k++)
            it[k] = ok[k] ? p[k].iteration_time_s : 0;
        char vs[2][32];
        for (int k = 1; k < 3; k++) {
            if (ok[0] && ok[k])
                snprintf(vs[k - 1], sizeof vs[0], "%.2fx", it[k] / it[0]);
            else
                snprintf(vs[k - 1], sizeof vs[0], "%s", ok[k] ? "-" : "no fit");
        }
        printf("%-12s %-13s %-5d %-62s %9.3f %9.3f %9.3f %9.3f %8s %8s\n", sc->group, sc->model,
               ah_cluster_total_gpus(&c), desc, med, it[0], it[1], it[2], vs[0], vs[1]);
        fflush(stdout);
        if (out)
            fprintf(out, "| %s | %s | %d | `%s` | %d | %.3f | %.3f | %s | %s | %s | %s | %s |\n", sc->group,
                    sc->model, ah_cluster_total_gpus(&c), desc, sc->global_batch, med, it[0],
                    ok[1] ? (snprintf(err, sizeof err, "%.3f", it[1]), err) : "no fit",
                    ok[2] ? (snprintf(err + 64, sizeof err - 64, "%.3f", it[2]), err + 64) : "no fit", vs[0],
                    vs[1], shape);
        for (int k = 0; k < 3; k++)
            if (ok[k])
                ah_plan_free(&p[k]);
        ah_profile_free(prof);
        ah_cluster_free(&c);
    }
    if (out)
        fclose(out);
    return rc;
}
