/* Does the planner's closed form agree with the simulator, and does its pick
 * beat the public planners' plans under the simulator?
 *
 * For every scenario of scenarios.h and every peer pool below: the K best
 * distinct plans (ah_plan_search_top), each simulated (1F1B); reports the
 * worst |closed form / simulated - 1|, Kendall tau between the two rankings,
 * and the regret of the pick (its simulated time over the best simulated
 * time among the K). For a peer pool, the peer planner's plan (autohet plan
 * format) is simulated with the same inputs and compared with autohet's pick.
 * Prints a table and, with --markdown FILE, writes it as Markdown. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autohet/plan.h"
#include "autohet/sim.h"
#include "plan/costs.h"
#include "scenarios.h"
#include "util/stats.h"

/* Pools with a plan from another planner (bench/peer-plans/README.md). */
typedef struct {
    const char *model, *cluster, *profile, *devices;
    int global_batch, seq;
    const char *peer, *peer_plan;
} peer_pool;

#define GCP "bench/peer-plans/gcp-devices.json"
#define OPT "tests/fixtures/sailor/OPT-350"
static const peer_pool PEERS[] = {
    {"opt-350m", "4x4xA100-40G,4x4xV100-16G", OPT, GCP, 1024, 2048, "Metis",
     "bench/peer-plans/metis-opt350-16xA100-16xV100.json"},
    {"opt-350m", "8x4xA100-40G,24x4xV100-16G", OPT, GCP, 1024, 2048, "Metis",
     "bench/peer-plans/metis-opt350-32xA100-96xV100.json"},
    /* pools the planner was not developed on (Metis run for this benchmark) */
    {"opt-350m", "8x4xA100-40G,8x4xV100-16G", OPT, GCP, 1024, 2048, "Metis",
     "bench/peer-plans/metis-opt350-32xA100-32xV100.json"},
    {"opt-350m", "16x4xA100-40G,16x4xV100-16G", OPT, GCP, 1024, 2048, "Metis",
     "bench/peer-plans/metis-opt350-64xA100-64xV100.json"},
    {"opt-350m", "2x4xA100-40G,6x4xV100-16G", OPT, GCP, 1024, 2048, "Metis",
     "bench/peer-plans/metis-opt350-8xA100-24xV100.json"},
    {"opt-350m", "12x4xA100-40G,4x4xV100-16G", OPT, GCP, 1024, 2048, "Metis",
     "bench/peer-plans/metis-opt350-48xA100-16xV100.json"},
    {"opt-350m", "8x4xA100-40G", OPT, GCP, 1024, 2048, "Metis", "bench/peer-plans/metis-opt350-32xA100.json"},
    {"opt-350m", "16x4xV100-16G", OPT, GCP, 1024, 2048, "Metis", "bench/peer-plans/metis-opt350-64xV100.json"},
    {"opt-350m", "32x4xA100-40G,96x4xV100-16G", OPT, GCP, 1024, 2048, "Metis",
     "bench/peer-plans/metis-opt350-128xA100-384xV100.json"},
};
#define N_PEERS (sizeof PEERS / sizeof PEERS[0])

typedef struct {
    int n;
    double worst, tau, pick_sim, best_sim, plan_s;
    int worst_rank;
} verdict;

static double simulate(ah_plan *p, const ah_profile *prof, const ah_plan_options *o, char *err, size_t n) {
    ah_plan copy;
    ah_plan_copy(&copy, p);
    ah_sim_options so = {.schedule = AH_SCHED_1F1B, .overlap_dp = 1}; /* the program the planner costs */
    ah_sim_result r;
    double t = -1;
    if (ah_simulate(&copy, prof, o, &so, &r, err, n) == 0) {
        t = r.iteration_time_s;
        ah_sim_result_free(&r);
    }
    ah_plan_free(&copy);
    return t;
}

/* Top-K, simulated; fills v and leaves the pick in *pick. */
static int verify(const ah_model_config *m, const ah_cluster *c, const ah_profile *prof, const ah_plan_options *o,
                  int k, verdict *v, ah_plan *pick) {
    char err[512];
    ah_plan *top = calloc((size_t)k, sizeof *top);
    double *sim = calloc((size_t)k, sizeof *sim);
    if (!top || !sim)
        abort();
    int n = 0;
    double t0 = ah_now_s();
    if (ah_plan_search_top(m, c, prof, o, k, top, &n, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", m->name, err);
        free(top);
        free(sim);
        return -1;
    }
    memset(v, 0, sizeof *v);
    v->plan_s = ah_now_s() - t0;
    v->n = n;
    v->best_sim = INFINITY;
    for (int i = 0; i < n; i++) {
        sim[i] = simulate(&top[i], prof, o, err, sizeof err);
        if (sim[i] < 0) {
            fprintf(stderr, "%s: simulation failed: %s\n", m->name, err);
            continue;
        }
        double e = fabs(top[i].iteration_time_s / sim[i] - 1.0);
        if (e > v->worst || i == 0) {
            v->worst = e;
            v->worst_rank = i;
        }
        if (sim[i] < v->best_sim)
            v->best_sim = sim[i];
    }
    double *closed = calloc((size_t)n + 1, sizeof(double));
    if (!closed)
        abort();
    for (int i = 0; i < n; i++)
        closed[i] = top[i].iteration_time_s;
    v->tau = ah_kendall_tau(closed, sim, n);
    free(closed);
    v->pick_sim = sim[0];
    *pick = top[0];
    for (int i = 1; i < n; i++)
        ah_plan_free(&top[i]);
    free(top);
    free(sim);
    return 0;
}

static void row(FILE *md, const char *model, const char *cluster, int gpus, const verdict *v,
                const char *peer, double peer_sim) {
    char vs[96] = "";
    if (peer)
        snprintf(vs, sizeof vs, "%s %.3f s: autohet %+.1f%%", peer, peer_sim,
                 100.0 * (v->pick_sim / peer_sim - 1.0));
    printf("%-13s %5d %-58s %3d %7.2f%% %6.3f %8.3f %6.2f%% %7.3f  %s\n", model, gpus, cluster, v->n,
           100 * v->worst, v->tau, v->pick_sim, 100 * (v->pick_sim / v->best_sim - 1), v->plan_s, vs);
    if (md)
        fprintf(md, "| %s | %d | `%s` | %d | %.2f%% (rank %d) | %.3f | %.3f | %.2f%% | %.3f | %s |\n", model,
                gpus, cluster, v->n, 100 * v->worst, v->worst_rank, v->tau, v->pick_sim,
                100 * (v->pick_sim / v->best_sim - 1), v->plan_s, peer ? vs : "-");
}

/* cost-model options of every run (--precision, --p2p, --dist-optimizer) */
static ah_train_settings g_train;

static int run_one(FILE *md, const char *model, const char *cluster, const char *profile, const char *devices,
                   int gb, int seq, int k, const char *peer, const char *peer_plan, double *worst_all,
                   double *tau_min) {
    char err[512];
    ah_device_catalog catalog = *ah_device_catalog_builtin();
    if (devices && ah_device_load_overrides(&catalog, devices, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    ah_model_config m;
    ah_cluster c = {0};
    if (ah_model_resolve(model, &m, err, sizeof err) || ah_cluster_resolve(cluster, &catalog, &c, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    ah_profile *prof = profile ? ah_profile_load(profile, err, sizeof err) : ah_profile_analytic();
    if (!prof) {
        fprintf(stderr, "%s\n", err);
        ah_cluster_free(&c);
        return -1;
    }
    ah_plan_options o;
    ah_plan_options_default(&o);
    o.global_batch = gb;
    o.train = g_train;
    o.train.seq = seq;
    verdict v;
    ah_plan pick;
    int rc = verify(&m, &c, prof, &o, k, &v, &pick);
    double peer_sim = 0;
    if (rc == 0 && peer_plan) {
        ah_plan pp;
        int rd = ah_plan_read_json(peer_plan, &catalog, &pp, err, sizeof err);
        if (rd == 0) { /* the peer plan at the same cost-model options */
            pp.train.precision = g_train.precision;
            pp.train.p2p = g_train.p2p;
            pp.train.dist_optimizer = g_train.dist_optimizer;
        }
        if (rd != 0 ||
            (peer_sim = simulate(&pp, prof, &o, err, sizeof err)) < 0) {
            fprintf(stderr, "%s: %s\n", peer_plan, err);
            rc = -1;
        } else
            ah_plan_free(&pp);
    }
    if (rc == 0) {
        row(md, model, cluster, ah_cluster_total_gpus(&c), &v, peer, peer_sim);
        if (v.worst > *worst_all)
            *worst_all = v.worst;
        if (v.tau < *tau_min)
            *tau_min = v.tau;
        ah_plan_free(&pick);
    }
    ah_profile_free(prof);
    ah_cluster_free(&c);
    return rc;
}

int main(int argc, char **argv) {
    int k = 20;
    const char *mdpath = NULL, *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--top") && i + 1 < argc)
            k = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--precision") && i + 1 < argc) {
            if (ah_precision_parse(argv[++i], &g_train.precision) != 0) {
                fprintf(stderr, "verify_bench: --precision: expected bf16, fp16 or fp32\n");
                return 2;
            }
        } else if (!strcmp(argv[i], "--p2p") && i + 1 < argc) {
            if (ah_p2p_mode_parse(argv[++i], &g_train.p2p) != 0) {
                fprintf(stderr, "verify_bench: --p2p: expected overlapped or blocking\n");
                return 2;
            }
        } else if (!strcmp(argv[i], "--dist-optimizer"))
            g_train.dist_optimizer = 1;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else if (!strcmp(argv[i], "--markdown") && i + 1 < argc)
            mdpath = argv[++i];
        else {
            fprintf(stderr, "usage: verify_bench [--top K] [--markdown FILE] [--precision bf16|fp16|fp32]\n"
                            "                    [--p2p overlapped|blocking] [--dist-optimizer] [--only CLUSTER]\n");
            return 2;
        }
    }
    if (k < 2) {
        fprintf(stderr, "verify_bench: --top must be >= 2\n");
        return 2;
    }
    FILE *md = mdpath ? fopen(mdpath, "w") : NULL;
    if (mdpath && !md) {
        perror(mdpath);
        return 1;
    }
    printf("%-13s %5s %-58s %3s %8s %6s %8s %7s %7s  %s\n", "model", "GPUs", "cluster", "K", "worst", "tau",
           "pick sim", "regret", "plan s", "peer plan (simulated)");
    if (md)
        fprintf(md, "| model | GPUs | cluster | candidates | worst closed-form error | Kendall tau | "
                    "pick simulated s | regret | planning s (one core) | peer plan simulated |\n"
                    "|---|---|---|---|---|---|---|---|---|---|\n");
    double worst = 0, tau_min = 1;
    int rc = 0;
    for (size_t p = 0; p < N_PEERS && rc == 0; p++) {
        const peer_pool *q = &PEERS[p];
        if (only && strcmp(only, q->cluster))
            continue;
        rc = run_one(md, q->model, q->cluster, q->profile, q->devices, q->global_batch, q->seq, k, q->peer,
                     q->peer_plan, &worst, &tau_min);
    }
    for (size_t s = 0; s < N_SCEN && rc == 0; s++) {
        const scenario *sc = &SCENARIOS[s];
        if (only && strcmp(only, sc->cluster))
            continue;
        rc = run_one(md, sc->model, sc->cluster, sc->profile, NULL, sc->global_batch, sc->seq, k, NULL, NULL,
                     &worst, &tau_min);
    }
    printf("worst closed-form error over all candidates %.2f%%, smallest Kendall tau %.3f\n", 100 * worst,
           tau_min);
    if (md) {
        fprintf(md, "\nWorst closed-form error over every candidate of every scenario: %.2f%%; smallest Kendall "
                    "tau: %.3f.\n",
                100 * worst, tau_min);
        fclose(md);
    }
    return rc ? 1 : 0;
}
