/* Human-readable plan report. Prints the numbers already in the plan (filled
 * by ah_plan_evaluate and the planner); nothing is recomputed here. */
#include <stdio.h>
#include <string.h>

#include "autohet/plan.h"

#define MS(x) ((x)*1e3)
#define GIB(x) ((x) / 1073741824.0)

static const ah_node *stage_node(const ah_plan *p, const ah_stage *s) {
    if (!p->cluster.nodes || s->node < 0 || s->node >= p->cluster.n_nodes)
        return NULL;
    return &p->cluster.nodes[s->node];
}

static int is_bottleneck(const ah_plan *p, int r, int j) {
    return r == p->bottleneck_replica && j == p->replicas[r].bottleneck_stage;
}

void ah_plan_print_table(const ah_plan *p, FILE *f) {
    if (!p || !f)
        return;

    long long total_mb = 0;
    for (int r = 0; p->replicas && r < p->n_replicas; r++)
        total_mb += p->replicas[r].micro_batches;
    char cdesc[512] = "";
    if (p->cluster.nodes && p->cluster.n_nodes > 0)
        ah_cluster_describe(&p->cluster, cdesc, sizeof cdesc);

    char tp[48];
    ah_plan_tp_text(p, tp, sizeof tp);
    fprintf(f,
            "Plan (%s): %s, seq %d, global batch %d = %lld micro-batches x %d; TP=%s; "
            "%d replica%s; %d/%d GPUs used; cluster %s\n",
            p->strategy[0] ? p->strategy : "?", p->model.name, p->train.seq, p->global_batch, total_mb,
            p->micro_batch, tp, p->n_replicas, p->n_replicas == 1 ? "" : "s", p->gpus_used, p->gpus_total,
            cdesc[0] ? cdesc : "(none)");
    const char *rc = ah_recompute_name(p->train.recompute);
    fprintf(f,
            "Layers: 0 = embedding, 1..%d = transformer blocks, %d = head; recomputation %s; "
            "precision %s; p2p %s; %s optimizer; profile %s\n\n",
            p->model.n_layers, p->model.n_layers + 1, rc ? rc : "?", ah_precision_name(p->train.precision),
            ah_p2p_mode_name(p->train.p2p), p->train.dist_optimizer ? "distributed" : "replicated",
            p->profile_source[0] ? p->profile_source : "(unknown)");

    if (!p->replicas || p->n_replicas <= 0) {
        fprintf(f, "(no replicas)\n");
        return;
    }

    /* column widths for node and GPU names */
    int wn = 4, wg = 3;
    for (int i = 0; p->cluster.nodes && i < p->cluster.n_nodes; i++) {
        int ln = (int)strlen(p->cluster.nodes[i].name), lg = (int)strlen(p->cluster.nodes[i].dev.name);
        wn = ln > wn ? ln : wn;
        wg = lg > wg ? lg : wg;
    }
    wn = wn > 24 ? 24 : wn;
    wg = wg > 16 ? 16 : wg;

    fprintf(f, "%7s %6s %6s  %-*s  %-*s  %-7s %-11s %10s %8s %8s %8s %6s  %s\n", "replica", "mb", "stage", wn,
            "node", wg, "gpu", "gpus", "layers", "fwd+bwd ms", "p2p ms", "sync ms", "upd ms", "inflt",
            "mem GiB used/cap");
    int over = 0;
    for (int r = 0; r < p->n_replicas; r++) {
        const ah_replica *rep = &p->replicas[r];
        for (int j = 0; rep->stages && j < rep->n_stages; j++) {
            const ah_stage *s = &rep->stages[j];
            const ah_node *n = stage_node(p, s);
            char rcol[16] = "", mcol[16] = "", gpus[32], layers[32], stage[16];
            if (j == 0) {
                snprintf(rcol, sizeof rcol, "%d", r);
                snprintf(mcol, sizeof mcol, "%d", rep->micro_batches);
            }
            snprintf(stage, sizeof stage, "%d%c", j, is_bottleneck(p, r, j) ? '*' : ' ');
            if (s->tp > 1)
                snprintf(gpus, sizeof gpus, "%d-%d", s->gpu_first, s->gpu_first + s->tp - 1);
            else
                snprintf(gpus, sizeof gpus, "%d", s->gpu_first);
            snprintf(layers, sizeof layers, "[%d,%d)", s->layer_first, s->layer_last);
            int oom = s->mem_cap_bytes > 0 && s->mem_bytes > s->mem_cap_bytes;
            over += oom;
            fprintf(f, "%7s %6s %7s %-*.*s  %-*.*s  %-7s %-11s %10.2f %8.2f %8.2f %8.2f %6d  %.1f/%.1f%s\n",
                    rcol, mcol, stage, wn, wn, n ? n->name : "?", wg, wg, n ? n->dev.name : "?", gpus, layers,
                    MS(s->fwd_s + s->bwd_s), MS(s->p2p_s), MS(s->sync_s), MS(s->update_s), s->in_flight,
                    GIB(s->mem_bytes), GIB(s->mem_cap_bytes), oom ? " !" : "");
        }
    }
    fprintf(f, "  * = bottleneck stage (slowest fwd+bwd of the slowest replica)%s\n",
            over ? "; ! = over GPU memory capacity" : "");

    fprintf(f, "\nReplica pipelines (flush = fill/drain + (m-1) x steady-state period, sends included), then "
               "their tail\n(sync + optimizer left after the flush, the drain they overlap deducted; "
               "docs/cost-model.md):\n");
    double max_tail = 0, max_flush = 0;
    for (int r = 0; r < p->n_replicas; r++) {
        const ah_replica *rep = &p->replicas[r];
        const ah_stage *bs = NULL;
        if (rep->stages && rep->bottleneck_stage >= 0 && rep->bottleneck_stage < rep->n_stages)
            bs = &rep->stages[rep->bottleneck_stage];
        const ah_node *bn = bs ? stage_node(p, bs) : NULL;
        int steady = rep->micro_batches > 0 ? rep->micro_batches - 1 : 0;
        if (rep->tail_s > max_tail)
            max_tail = rep->tail_s;
        if (rep->time_s > max_flush)
            max_flush = rep->time_s;
        fprintf(f,
                "  replica %d: flush %.1f ms = fill/drain %.1f + steady %d x %.2f = %.1f; tail %.1f"
                "  (%d stage%s, %d micro-batches, bottleneck stage %d on %s)%s\n",
                r, MS(rep->time_s), MS(rep->fill_drain_s), steady, MS(rep->bottleneck_s),
                MS(steady * rep->bottleneck_s), MS(rep->tail_s), rep->n_stages, rep->n_stages == 1 ? "" : "s",
                rep->micro_batches, rep->bottleneck_stage, bn ? bn->dev.name : "?",
                r == p->bottleneck_replica ? "  <- slowest" : "");
    }
    fprintf(f,
            "  iteration = slowest flush %.1f ms + longest tail %.1f ms (a bucket's all-reduce needs every "
            "replica holding it)\n",
            MS(max_flush), MS(max_tail));

    fprintf(f, "\nPredicted iteration time: %.4f s\n", p->iteration_time_s);
    fprintf(f, "Throughput:               %.0f tokens/s\n", p->tokens_per_s);
    fprintf(f, "TFLOP/s per GPU:          %.1f (model, 3x fwd); %.1f (hardware, with recomputation)\n",
            p->tflops_per_gpu, p->hw_tflops_per_gpu);
    fprintf(f,
            "MFU:                      %.1f%%  (model FLOPs against the sum of used GPUs' dense %s "
            "peak%s)\n",
            100.0 * p->mfu, p->train.precision == AH_PRECISION_FP32 ? "fp32 (TF32)" : "bf16/fp16",
            p->mfu > 1 ? "; over 100 %: the profile's layer times beat the catalog's peak, which --devices FILE "
                         "sets"
                       : "");
    if (p->bottleneck_replica >= 0 && p->bottleneck_replica < p->n_replicas) {
        const ah_replica *rep = &p->replicas[p->bottleneck_replica];
        const ah_stage *bs = NULL;
        if (rep->stages && rep->bottleneck_stage >= 0 && rep->bottleneck_stage < rep->n_stages)
            bs = &rep->stages[rep->bottleneck_stage];
        const ah_node *bn = bs ? stage_node(p, bs) : NULL;
        if (bs)
            fprintf(f,
                    "Bottleneck:               replica %d stage %d (%s on node %s, layers "
                    "[%d,%d), fwd+bwd %.2f ms)\n",
                    p->bottleneck_replica, rep->bottleneck_stage, bn ? bn->dev.name : "?",
                    bn ? bn->name : "?", bs->layer_first, bs->layer_last, MS(bs->fwd_s + bs->bwd_s));
        else
            fprintf(f, "Bottleneck:               replica %d\n", p->bottleneck_replica);
    }
    fprintf(f, "DP all-reduce bandwidth:  %.1f GB/s per GPU\n", p->dp_bw_gbs);
    fprintf(f, "Planning time:            %.3f s (%lld candidates; search objective %.4f s)\n",
            p->planning_time_s, p->candidates, p->search_value_s);
    if (over)
        fprintf(f, "WARNING: %d stage%s exceed%s GPU memory capacity (marked !)\n", over,
                over == 1 ? "" : "s", over == 1 ? "s" : "");
}
