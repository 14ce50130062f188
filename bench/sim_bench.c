/* Simulator benchmark.
 *  1. speed: one iteration of a 64-GPU and a 1,024-GPU plan with 64
 *     micro-batches per replica (median of N runs);
 *  2. the AutoHet paper's comparisons replayed on the simulator: the plans of
 *     autohet, proportional (Whale-like) and megatron for GPT-3, LLaMA-2 and
 *     BERT-Large on A100/H800/H20 mixes (one uneven), each simulated with 1F1B;
 *     speedups from simulated iteration times, next to the paper's headline
 *     numbers. Prints tables; --markdown FILE writes them as Markdown. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autohet/plan.h"
#include "autohet/sim.h"
#include "plan/costs.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* D replicas of S stages over the cluster's GPUs in order (tp = 1), N/S blocks each, m micro-batches. */
static void uniform_plan(ah_plan *p, const ah_model_config *m, const ah_cluster *c, int S, int D,
                         int mb_per_replica) {
    memset(p, 0, sizeof *p);
    p->version = 1;
    snprintf(p->strategy, sizeof p->strategy, "bench");
    p->model = *m;
    p->train.seq = 2048;
    p->micro_batch = 1;
    p->global_batch = D * mb_per_replica;
    p->cluster.n_nodes = c->n_nodes;
    p->cluster.nodes = malloc(sizeof(ah_node) * (size_t)c->n_nodes);
    memcpy(p->cluster.nodes, c->nodes, sizeof(ah_node) * (size_t)c->n_nodes);
    p->n_replicas = D;
    p->replicas = calloc((size_t)D, sizeof(ah_replica));
    int N = m->n_layers, g = 0;
    for (int d = 0; d < D; d++) {
        ah_replica *r = &p->replicas[d];
        r->n_stages = S;
        r->micro_batches = mb_per_replica;
        r->stages = calloc((size_t)S, sizeof(ah_stage));
        for (int j = 0; j < S; j++, g++) {
            r->stages[j].node = g / c->nodes[0].gpus;
            r->stages[j].gpu_first = g % c->nodes[0].gpus;
            r->stages[j].tp = 1;
            r->stages[j].layer_first = j == 0 ? 0 : 1 + j * N / S;
            r->stages[j].layer_last = j + 1 == S ? N + 2 : 1 + (j + 1) * N / S;
        }
    }
}

typedef struct {
    const char *name, *model, *cluster;
    int global_batch, seq;
    const char *paper; /* the paper's headline speedup vs Megatron-LM for this family, if any */
} scenario;

static const scenario PAPER[] = {
    {"GPT-3 6.7B, A100+H800+H20", "gpt3-6.7b", "2x8xA100-40G,1x8xH800,1x8xH20", 256, 2048, "1.53x (GPT-3)"},
    {"GPT-3 13B, A100+H800+H20", "gpt3-13b", "4x8xA100-40G,2x8xH800,2x8xH20", 512, 2048, "1.53x (GPT-3)"},
    {"LLaMA-2 7B, A100+H800+H20", "llama2-7b", "2x8xA100-40G,1x8xH800,1x8xH20", 256, 2048, "-"},
    {"LLaMA-2 13B, A100+H800+H20", "llama2-13b", "4x8xA100-40G,2x8xH800,2x8xH20", 512, 2048, "-"},
    {"LLaMA-2 7B, uneven: 6 H20 + 1 H800 + 1 A100 nodes", "llama2-7b", "6x8xH20,1x8xH800,1x8xA100-40G", 512,
     2048, "1.79x (LLaMA, uneven)"},
    {"LLaMA-2 13B, uneven: 1 H800 + 1 A100 + 6 H20 nodes", "llama2-13b", "1x8xH800,1x8xA100-40G,6x8xH20", 512,
     2048, "1.79x (LLaMA, uneven)"},
    {"BERT-Large, A100+H800+H20", "bert-large", "2x8xA100-40G,1x8xH800,1x8xH20", 1024, 512,
     "1.38x (BERT-Large)"},
};
#define N_PAPER (sizeof PAPER / sizeof PAPER[0])

int main(int argc, char **argv) {
    int runs = 5;
    const char *md = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--runs") && i + 1 < argc)
            runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--markdown") && i + 1 < argc)
            md = argv[++i];
        else {
            fprintf(stderr, "usage: sim_bench [--runs N] [--markdown FILE]\n");
            return 2;
        }
    }
    if (runs < 1 || runs > 31)
        runs = 5;
    FILE *out = md ? fopen(md, "w") : NULL;
    char err[512];
    ah_profile *prof = ah_profile_analytic();
    ah_plan_options o;
    ah_plan_options_default(&o);

    /* 1. speed */
    printf("== simulator speed (median of %d) ==\n", runs);
    if (out)
        fprintf(out,
                "### Simulation speed\n\n| plan | GPUs | replicas x stages | micro-batches per replica | "
                "tasks | simulate s (median of %d) | target |\n|---|---|---|---|---|---|---|\n",
                runs);
    struct {
        const char *cluster;
        int S, D;
        const char *target;
    } speed[] = {{"8x8xA100-40G", 8, 8, "<= 0.05 s"}, {"128x8xA100-40G", 8, 128, "<= 2 s"}};
    for (int i = 0; i < 2; i++) {
        ah_model_config m;
        ah_model_preset("gpt3-6.7b", &m);
        ah_cluster c = {0};
        ah_cluster_resolve(speed[i].cluster, ah_device_catalog_builtin(), &c, err, sizeof err);
        ah_plan p;
        uniform_plan(&p, &m, &c, speed[i].S, speed[i].D, 64);
        o.global_batch = p.global_batch;
        double t[32];
        ah_sim_result r;
        for (int k = 0; k < runs; k++) {
            double t0 = ah_now_s();
            ah_sim_options so = {.schedule = AH_SCHED_1F1B, .record_events = 0, .overlap_dp = 1};
            if (ah_simulate(&p, prof, &o, &so, &r, err, sizeof err) != 0) {
                fprintf(stderr, "%s\n", err);
                return 1;
            }
            t[k] = ah_now_s() - t0;
            if (k + 1 < runs)
                ah_sim_result_free(&r);
        }
        qsort(t, (size_t)runs, sizeof(double), cmp_double);
        long long tasks = (long long)speed[i].D * speed[i].S * (2 * 64 + 1) +
                          (long long)speed[i].D * (speed[i].S - 1) * 64 * 2;
        printf(
            "  %-16s %5d GPUs  %3d x %d stages, 64 micro-batches each: %.4f s (sim %.3f s of training, %lld "
            "rate updates)\n",
            speed[i].cluster, ah_cluster_total_gpus(&c), speed[i].D, speed[i].S, t[runs / 2],
            r.iteration_time_s, r.flow_updates);
        if (out)
            fprintf(out, "| gpt3-6.7b on `%s` | %d | %d x %d | 64 | ~%lld | %.4f | %s |\n", speed[i].cluster,
                    ah_cluster_total_gpus(&c), speed[i].D, speed[i].S, tasks, t[runs / 2], speed[i].target);
        ah_sim_result_free(&r);
        ah_plan_free(&p);
        ah_cluster_free(&c);
    }

    /* 2. the paper's comparisons, simulated */
    printf("\n== paper comparison on the simulator (1F1B, simulated iteration time in s) ==\n");
    printf("  %-50s %9s %9s %9s %8s %8s %8s  %s\n", "scenario", "autohet", "whale", "megatron", "vs megat",
           "vs whale", "model", "paper vs Megatron-LM");
    if (out)
        fprintf(out,
                "\n### The AutoHet paper's comparisons, replayed on the simulator\n\n"
                "| scenario | global batch | autohet s | proportional s | megatron s | autohet vs megatron | "
                "autohet vs proportional | closed-form error (autohet) | paper: AutoHet vs Megatron-LM |\n"
                "|---|---|---|---|---|---|---|---|---|\n");
    int rc = 0;
    for (size_t s = 0; s < N_PAPER; s++) {
        const scenario *sc = &PAPER[s];
        ah_model_config m;
        ah_cluster c = {0};
        if (ah_model_resolve(sc->model, &m, err, sizeof err) ||
            ah_cluster_resolve(sc->cluster, ah_device_catalog_builtin(), &c, err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        o.global_batch = sc->global_batch;
        o.train.seq = sc->seq;
        double sim[3] = {0, 0, 0}, closed[3] = {0, 0, 0};
        ah_strategy st[3] = {AH_STRATEGY_AUTOHET, AH_STRATEGY_PROPORTIONAL, AH_STRATEGY_MEGATRON};
        for (int k = 0; k < 3; k++) {
            ah_plan_options ok = o;
            ok.strategy = st[k];
            ah_plan p;
            if (ah_plan_search(&m, &c, prof, &ok, &p, err, sizeof err) != 0)
                continue;
            ah_sim_options so = {.schedule = AH_SCHED_1F1B, .record_events = 0, .overlap_dp = 1};
            ah_sim_result r;
            if (ah_simulate(&p, prof, &ok, &so, &r, err, sizeof err) == 0) {
                sim[k] = r.iteration_time_s;
                closed[k] = r.closed_form_s;
                ah_sim_result_free(&r);
            } else {
                rc = 1;
            }
            ah_plan_free(&p);
        }
        char vm[16] = "no fit", vw[16] = "no fit";
        if (sim[0] > 0 && sim[2] > 0)
            snprintf(vm, sizeof vm, "%.2fx", sim[2] / sim[0]);
        if (sim[0] > 0 && sim[1] > 0)
            snprintf(vw, sizeof vw, "%.2fx", sim[1] / sim[0]);
        double err_pct = sim[0] > 0 ? 100.0 * (closed[0] / sim[0] - 1.0) : 0;
        printf("  %-50s %9.3f %9.3f %9.3f %8s %8s %7.1f%%  %s\n", sc->name, sim[0], sim[1], sim[2], vm, vw,
               err_pct, sc->paper);
        if (out)
            fprintf(out, "| %s (`%s`) | %d | %.3f | %.3f | %.3f | %s | %s | %+.1f%% | %s |\n", sc->name,
                    sc->cluster, sc->global_batch, sim[0], sim[1], sim[2], vm, vw, err_pct, sc->paper);
        ah_cluster_free(&c);
    }
    /* 3. closed form vs simulation for the planner's best candidates */
    printf("\n== closed form vs simulation, the 5 best candidates (autohet plan --verify 5) ==\n");
    if (out)
        fprintf(out, "\n### Closed form vs simulation (`autohet plan --verify 5`)\n\n"
                     "| scenario | rank | TP | mb | replicas | closed form s | simulated s | error | fastest "
                     "simulated |\n"
                     "|---|---|---|---|---|---|---|---|---|\n");
    struct {
        const char *model, *cluster;
        int gb;
    } ver[] = {
        {"gpt3-6.7b", "2x8xA100-40G,1x8xH800,2x8xH20", 256},
        {"llama2-13b", "32x8xA100-40G,16x8xA100-80G,16x8xH800,16x8xH20,32x8xV100-32G,16x8xH100-SXM", 2048}};
    for (int v = 0; v < 2; v++) {
        ah_model_config m;
        ah_cluster c = {0};
        ah_model_resolve(ver[v].model, &m, err, sizeof err);
        ah_cluster_resolve(ver[v].cluster, ah_device_catalog_builtin(), &c, err, sizeof err);
        o.global_batch = ver[v].gb;
        o.train.seq = 2048;
        ah_plan top[5];
        int n = 0;
        if (ah_plan_search_top(&m, &c, prof, &o, 5, top, &n, err, sizeof err) != 0) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        double sim[5] = {0};
        int best = 0;
        for (int i = 0; i < n; i++) {
            ah_sim_options so = {.schedule = AH_SCHED_1F1B, .record_events = 0, .overlap_dp = 1};
            ah_sim_result r;
            if (ah_simulate(&top[i], prof, &o, &so, &r, err, sizeof err) == 0) {
                sim[i] = r.iteration_time_s;
                ah_sim_result_free(&r);
            }
            if (sim[i] < sim[best])
                best = i;
        }
        for (int i = 0; i < n; i++) {
            double e = 100.0 * (top[i].iteration_time_s / sim[i] - 1.0);
            printf(
                "  %-10s %5d GPUs  #%d TP=%d mb=%d %2d replicas  closed %.4f  simulated %.4f  %+5.1f%%%s\n",
                ver[v].model, ah_cluster_total_gpus(&c), i, ah_plan_uniform_tp(&top[i]), top[i].micro_batch, top[i].n_replicas,
                top[i].iteration_time_s, sim[i], e, i == best ? "  <- fastest simulated" : "");
            if (out)
                fprintf(out, "| %s, %d GPUs | %d | %d | %d | %d | %.4f | %.4f | %+.1f%% | %s |\n",
                        ver[v].model, ah_cluster_total_gpus(&c), i, ah_plan_uniform_tp(&top[i]), top[i].micro_batch,
                        top[i].n_replicas, top[i].iteration_time_s, sim[i], e, i == best ? "yes" : "");
            ah_plan_free(&top[i]);
        }
        ah_cluster_free(&c);
    }
    ah_profile_free(prof);
    if (out)
        fclose(out);
    return rc;
}
