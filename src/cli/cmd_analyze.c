/* autohet analyze: where the time of a traced run went, measured or
 * simulated (docs/analyze.md). Parses flags and prints; the analysis is
 * src/trace/ (autohet/trace_analysis.h). */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "autohet/device.h"
#include "autohet/plan.h"
#include "autohet/schedule.h"
#include "autohet/trace_analysis.h"
#include "autohet/trace_diagnose.h"
#include "autohet/trace_otf2.h"
#include "cli/cli.h"

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: autohet analyze TRACE.json [--sim SIM_TRACE.json] [--json FILE] [--svg FILE]\n"
        "                                  [--comm-profile FILE] [--top N] [--skip-steps K] [--otf2 DIR]\n"
        "                                  [--stack [--mpi-algorithm NAME] [--stack-site SITE]]\n"
        "                                  [--diagnose] [--plan PLAN [--devices FILE]] [--comm-profile-out FILE]\n\n"
        "Explains a trace written by autohet train --trace or autohet simulate --trace (the same format):\n"
        "per rank the split of the run into compute, exposed communication (not overlapped by compute),\n"
        "pipeline bubble (waiting in receives from the neighbouring stage) and other (untraced gaps);\n"
        "they sum to the span; per call site the calls, bytes, achieved bus bandwidth, the alpha-beta\n"
        "prediction and the time lost to skew (waiting for the last rank to arrive) versus the transfer;\n"
        "seconds per step per op kind and per gradient bucket; and the slowest operations.\n\n"
        "  --sim FILE          a simulated trace of the same plan (autohet simulate PLAN --trace FILE):\n"
        "                      measured vs simulated seconds per step and error, per rank, per op kind\n"
        "                      and per gradient bucket\n"
        "  --json FILE         write everything above as JSON (with --sim: a \"prediction\" object)\n"
        "  --svg FILE          one stacked bar per rank (compute / exposed / bubble / checkpoint / other)\n"
        "                      with values\n"
        "  --comm-profile FILE autohet commbench --json: the alpha-beta prediction of each all-reduce site\n"
        "  --top N             list the N longest operations (default 10; 0: none)\n"
        "  --skip-steps K      leave out the first K traced steps of every rank (default 0: autohet train\n"
        "                      --trace already leaves out the warm-up step); times per step are over the rest\n"
        "  --otf2 DIR          also write the trace as an OTF2 archive DIR/trace.otf2 (otf2-print, ViTE)\n"
        "  --stack             the stack-level breakdown of every collective instance: measured (first arrival\n"
        "                      to last completion) = arrival skew (application) + the alpha-beta cost of the\n"
        "                      algorithm Open MPI's tuned component runs (MPI; links from the --comm-profile\n"
        "                      latency fit, else alpha 5 us, beta 10 GB/s) + residual (transport, contention);\n"
        "                      per call site, the largest instances (--top), and per rank the overlap of\n"
        "                      communication with compute, idle time by cause and straggler counts\n"
        "  --mpi-algorithm NAME the coll_tuned_allreduce_algorithm the run set (--mca, with\n"
        "                      coll_tuned_use_dynamic_rules 1): ignore, basic_linear, nonoverlapping,\n"
        "                      recursive_doubling, ring, segmented_ring, rabenseifner or 0-6 (default: the\n"
        "                      environment's OMPI_MCA_coll_tuned_allreduce_algorithm, else the fixed rules)\n"
        "  --stack-site SITE   with --stack: list every instance of the call site SITE (the micro view)\n"
        "  --diagnose          rank the causes of lost time: slow rank (compute beyond its peers' for the same\n"
        "                      work), slow link (a pair's transfers beyond the --comm-profile alpha-beta of the\n"
        "                      pair, else beyond the other pairs'), saturated link (two hosts' link busy most of\n"
        "                      the time at its expected speed: their transfers queue), late arrival into\n"
        "                      collectives (whom everyone waited for), input stall (untraced time before\n"
        "                      forwards), checkpoint stall,\n"
        "                      pipeline bubble beyond the schedule's own, exposed data-parallel all-reduce;\n"
        "                      each with its ranks or link, op, steps, cost and evidence (--json: \"findings\")\n"
        "  --plan PLAN         the plan the run executed: its nodes' hosts name the links, its stages and\n"
        "                      micro-batches give the schedule's own bubble\n"
        "  --devices FILE      device catalog overrides (as autohet plan's), for a --plan of GPU types the\n"
        "                      built-in catalog does not know\n"
        "  --comm-profile-out FILE  write the links as the run saw them (alpha-beta per pair of hosts and size\n"
        "                      regime, links{} matrix) in the format autohet plan --comm-profile reads\n"
        "  -h, --help          this help\n");
}

static void print_breakdown(const char *path, const ah_trace_analysis *a) {
    printf("Trace %s: %d ranks, %d events, span %.3f ms", path, a->ranks, a->n_items, a->span_us / 1e3);
    if (a->steps > 0)
        printf(", %d step(s) of %.3f ms (first %d skipped)", a->steps, a->iteration_s * 1e3, a->skipped);
    int ckpt = 0; /* the checkpoint column only where the run traced checkpoints */
    for (int r = 0; r < a->ranks; r++)
        ckpt |= a->split[r].checkpoint > 0;
    printf("\n\n%6s %12s %7s %12s %7s %12s %7s", "rank", "compute ms", "%", "exposed ms", "%", "bubble ms", "%");
    if (ckpt)
        printf(" %13s %7s", "checkpoint ms", "%");
    printf(" %12s %7s\n", "other ms", "%");
    for (int r = 0; r < a->ranks; r++) {
        const ah_trace_split *s = &a->split[r];
        double w = s->span > 0 ? 100 / s->span : 0;
        printf("%6d %12.3f %6.1f%% %12.3f %6.1f%% %12.3f %6.1f%%", r, s->compute / 1e3, s->compute * w,
               s->exposed / 1e3, s->exposed * w, s->bubble / 1e3, s->bubble * w);
        if (ckpt)
            printf(" %13.3f %6.1f%%", s->checkpoint / 1e3, s->checkpoint * w);
        printf(" %12.3f %6.1f%%\n", s->other / 1e3, s->other * w);
    }
}

static void print_causality_counts(const char *label, const ah_trace_causality_counts *c) {
    printf("  %-22s receives before their send %d of %d, collective exits before the last entry %d of %d, "
           "flows backwards %d of %d",
           label, c->receives_before_send, c->receives, c->collective_order, c->collectives,
           c->flows_backward, c->flows);
    if (c->worst_us > 0)
        printf(" (worst %.3f us)", c->worst_us);
    printf("\n");
}

/* the clock correction the trace records, and the causal order of its events */
static void print_clocks(const ah_trace_analysis *a) {
    const ah_trace_clock *c = &a->clock;
    if (!c->present) {
        printf("\nclocks: no correction recorded (every rank on its own clock, or a simulation)\n");
    } else {
        printf("\nclocks: every rank's %s mapped onto rank 0's (ping-pong with rank 0, best of %d rounds at "
               "the\n"
               "start and the end; residual: the bound of the offset's error, half the best round trip)\n",
               c->domain, c->rounds);
        printf("%6s %16s %16s %12s %12s %10s\n", "rank", "offset ms", "offset end ms", "drift ppm",
               "residual us", "rtt us");
        for (int r = 0; r < c->n; r++) {
            const ah_trace_clock_rank *q = &c->ranks[r];
            printf("%6d %16.6f %16.6f %12.3f %12.3f %10.3f\n", r, q->offset_s * 1e3, q->offset_end_s * 1e3,
                   q->drift_ppm, q->residual_s * 1e6, q->rtt_s * 1e6);
        }
    }
    printf("causality:\n");
    print_causality_counts(c->present ? "on the synced clock:" : "as written:", &a->causality.as_written);
    if (a->causality.has_uncorrected)
        print_causality_counts("on each rank's clock:", &a->causality.uncorrected);
}

static void print_sites(const ah_trace_analysis *a) {
    printf("\n%-26s %7s %12s %12s %12s %12s %12s %12s\n", "call site", "calls", "bytes/call", "avg us",
           "busbw GB/s", "skew us", "transfer us", "predicted us");
    for (int k = 0; k < a->n_sites; k++) {
        const ah_trace_site *s = &a->sites[k];
        printf("%-26s %7d %12.0f %12.1f", s->site, s->calls, s->bytes_per_call, s->avg_us);
        if (s->busbw_GBps > 0)
            printf(" %12.3f", s->busbw_GBps);
        else
            printf(" %12s", "-");
        if (s->instances)
            printf(" %12.1f %12.1f", s->skew_us, s->transfer_us);
        else
            printf(" %12s %12s", "-", "-");
        if (s->predicted_us >= 0)
            printf(" %12.1f\n", s->predicted_us);
        else
            printf(" %12s\n", "-");
    }
}

static void print_pair(ah_trace_pair p) {
    printf(" %10.3f %10.3f", p.measured_s * 1e3, p.simulated_s * 1e3);
    if (isnan(p.error))
        printf(" %8s", "-");
    else
        printf(" %+7.1f%%", 100 * p.error);
}

/* call sites whose volumes differ: the simulated communication is then not the run's */
static void print_volumes(const ah_trace_comparison *c) {
    if (!c->n_volumes)
        return;
    printf("\nnote: the simulation moves other volumes than the run (another plan, or another precision: the CPU\n"
           "engine sends fp32 tensors, so simulate its plans with --precision fp32); bytes a call:\n");
    for (int i = 0; i < c->n_volumes; i++)
        printf("  %-24s measured %.0f, simulated %.0f\n", c->volumes[i].site, c->volumes[i].measured_bytes,
               c->volumes[i].simulated_bytes);
}

static void print_comparison(const char *sim_path, const ah_trace_comparison *c) {
    printf("\nmeasured vs simulated, ms per step (%s; error = simulated / measured - 1):\n", sim_path);
    printf("  iteration: measured %.3f ms, simulated %.3f ms, error %+.1f%%\n\n", c->iteration.measured_s * 1e3,
           c->iteration.simulated_s * 1e3, 100 * c->iteration.error);
    printf("%6s %32s %32s %32s\n", "", "compute", "exposed comm", "not busy (bubble + other)");
    printf("%6s", "rank");
    for (int q = 0; q < 3; q++)
        printf(" %10s %10s %8s  ", "measured", "simulated", "error");
    printf("\n");
    for (int r = 0; r < c->ranks; r++) {
        printf("%6d", r);
        print_pair(c->parts[r * AH_TRACE_PARTS + AH_TRACE_PART_COMPUTE]);
        printf("  ");
        print_pair(c->parts[r * AH_TRACE_PARTS + AH_TRACE_PART_EXPOSED]);
        printf("  ");
        print_pair(c->parts[r * AH_TRACE_PARTS + AH_TRACE_PART_NOT_BUSY]);
        printf("\n");
    }
    printf("\nper op kind (time in operations of the kind):\n%6s %-16s %10s %10s %8s\n", "rank", "kind", "measured",
           "simulated", "error");
    for (int r = 0; r < c->ranks; r++)
        for (int k = 0; k < AH_OP_KINDS; k++)
            if (c->kind_seen[r * AH_OP_KINDS + k]) {
                printf("%6d %-16s", r, ah_op_kind_name((ah_op_kind)k));
                print_pair(c->kinds[r * AH_OP_KINDS + k]);
                printf(k == AH_OP_CHECKPOINT ? "   (not simulated)\n" : "\n");
            }
    print_volumes(c);
    if (c->n_buckets)
        printf("\n%-26s %10s %10s %8s   (mean over the bucket's ranks)\n", "gradient bucket", "measured",
               "simulated", "error");
    for (int b = 0; b < c->n_buckets; b++) {
        char site[64];
        snprintf(site, sizeof site, "dp_allreduce layers %d-%d", c->bucket_layers[b][0], c->bucket_layers[b][1] - 1);
        printf("%-26s", site);
        print_pair(c->buckets[b]);
        printf("\n");
    }
}

static void print_slowest(const ah_trace_analysis *a) {
    if (a->n_slowest > 0)
        printf("\nslowest operations:\n");
    for (int i = 0; i < a->n_slowest; i++) {
        const ah_trace_item *v = &a->items[a->slowest[i]];
        printf("  %10.1f us  rank %-3d %s\n", v->dur, v->ev.rank, v->name);
    }
}

static void print_stack_sites(const ah_trace_stack *s) {
    printf("\nstack breakdown per collective call site: measured (first arrival to last completion)\n"
           "= skew (application: waiting for the last rank) + mpi (the algorithm's alpha-beta cost) + residual\n"
           "(transport, contention); us summed over the site's instances\n"
           "  MPI level: %s\n  links: %s\n\n", s->mpi_source, s->link.source);
    printf("%-26s %5s %5s %10s %-24s %5s %12s %11s %11s %11s  %s\n", "call site", "group", "ranks", "bytes/call",
           "algorithm", "inst", "measured us", "skew us", "mpi us", "residual us", "straggler");
    for (int k = 0; k < s->n_sites; k++) {
        const ah_stack_site *st = &s->sites[k];
        char algs[128];
        printf("%-26s %5d %5d %10.0f %-24s %5d", st->site, st->group, st->ranks, st->bytes_per_call,
               ah_stack_site_algorithms(st, algs, sizeof algs), st->instances);
        if (st->instances)
            printf(" %12.1f %11.1f %11.1f %11.1f  rank %d (%d/%d)\n", st->measured_us, st->skew_us, st->mpi_us,
                   st->residual_us, st->straggler, st->straggler_count, st->instances);
        else
            printf(" %12s %11s %11s %11s  -\n", "-", "-", "-", "-");
    }
}

static void print_instance(const ah_trace_stack *s, const ah_stack_instance *in) {
    char alg[64];
    snprintf(alg, sizeof alg, "%s%s%s", ah_mpi_alg_name(in->algorithm), in->ran == in->algorithm ? "" : ":",
             in->ran == in->algorithm ? "" : ah_mpi_alg_name(in->ran));
    printf("  %-26s seq %-4d step %-3d %9.0f B %-19s %10.1f = %9.1f + %8.1f + %9.1f   straggler %d; waits",
           s->sites[in->site].site, in->seq, in->step, in->bytes, alg, in->measured_us,
           in->skew_us, in->mpi_us, in->residual_us, in->straggler);
    for (int k = 0; k < in->n_members; k++)
        printf(" r%d %.1f", s->members[in->first_member + k].rank, s->members[in->first_member + k].wait_us);
    printf("\n");
}

/* the micro view: every instance of one site, or the `top` longest */
static void print_stack_instances(const ah_trace_stack *s, const char *site, int top) {
    if (site) {
        printf("\ninstances of %s (us: measured = skew + mpi + residual; waits: last arrival - own start):\n", site);
        int seen = 0;
        for (int i = 0; i < s->n_inst; i++)
            if (!strcmp(s->sites[s->inst[i].site].site, site)) {
                print_instance(s, &s->inst[i]);
                seen++;
            }
        if (!seen)
            printf("  none: no collective instance has the site \"%s\"\n", site);
        return;
    }
    int n = top < s->n_inst ? top : s->n_inst;
    if (n <= 0)
        return;
    printf("\nlongest collective instances (us: measured = skew + mpi + residual; waits: last arrival - own start):\n");
    char *used = calloc((size_t)s->n_inst + 1, 1);
    for (int k = 0; used && k < n; k++) {
        int best = -1;
        for (int i = 0; i < s->n_inst; i++)
            if (!used[i] && (best < 0 || s->inst[i].measured_us > s->inst[best].measured_us))
                best = i;
        used[best] = 1;
        print_instance(s, &s->inst[best]);
    }
    free(used);
}

static void print_stack_ranks(const ah_trace_stack *s) {
    printf("\n%6s %10s %9s %14s %18s %12s %12s\n", "rank", "comm ms", "overlap", "idle recv ms",
           "idle collective ms", "idle step ms", "straggler of");
    for (int r = 0; r < s->n_ranks; r++) {
        const ah_stack_rank *q = &s->ranks[r];
        printf("%6d %10.3f %8.1f%% %14.3f %18.3f %12.3f %12d\n", r, q->comm_us / 1e3, q->overlap_pct,
               q->idle_recv_us / 1e3, q->idle_collective_us / 1e3, q->idle_step_us / 1e3, q->straggles);
    }
}

typedef struct {
    const char *json, *svg, *sim, *otf2, *stack_site, *plan, *cp_out, *devices;
    int stack, diagnose;
    ah_trace_options o;
    ah_stack_options so;
} analyze_args;

/* what the run set: the flag, else Open MPI's environment variables */
static int mpi_settings(analyze_args *a, const char *flag_value) {
    const char *env = getenv("OMPI_MCA_coll_tuned_allreduce_algorithm"),
               *seg = getenv("OMPI_MCA_coll_tuned_allreduce_algorithm_segmentsize");
    const char *v = flag_value ? flag_value : env && *env ? env : NULL;
    if (v && (a->so.mpi_algorithm = ah_mpi_allreduce_alg_parse(v)) < 0) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s '%.100s': expected ignore, basic_linear, nonoverlapping, "
                 "recursive_doubling, ring, segmented_ring, rabenseifner or 0-6",
                 flag_value ? "--mpi-algorithm" : "OMPI_MCA_coll_tuned_allreduce_algorithm", v);
        return cli_bad_input("analyze", msg);
    }
    a->so.mpi_algorithm_from = flag_value ? "--mpi-algorithm" : "OMPI_MCA_coll_tuned_allreduce_algorithm";
    if (seg && *seg && (cli_parse_double(seg, &a->so.segment_bytes) != 0 || a->so.segment_bytes < 0))
        return cli_bad_input("analyze", "OMPI_MCA_coll_tuned_allreduce_algorithm_segmentsize: expected bytes >= 0");
    if ((flag_value || a->stack_site) && !a->stack)
        return cli_bad_input("analyze", flag_value ? "--mpi-algorithm needs --stack" : "--stack-site needs --stack");
    return 0;
}

/* 0 parsed, 1 --help printed, 2 bad input (printed) */
static int parse_args(int argc, char **argv, analyze_args *a) {
    static const struct option opts[] = {
        {"json", required_argument, 0, 'j'}, {"svg", required_argument, 0, 's'},
        {"comm-profile", required_argument, 0, 'c'}, {"top", required_argument, 0, 't'},
        {"skip-steps", required_argument, 0, 'k'}, {"sim", required_argument, 0, 'S'},
        {"otf2", required_argument, 0, 'O'}, {"stack", no_argument, 0, 'T'},
        {"mpi-algorithm", required_argument, 0, 'M'}, {"stack-site", required_argument, 0, 'I'},
        {"diagnose", no_argument, 0, 'D'}, {"plan", required_argument, 0, 'P'},
        {"comm-profile-out", required_argument, 0, 'C'}, {"devices", required_argument, 0, 'V'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    memset(a, 0, sizeof *a);
    a->o.top = 10;
    const char *mpi_alg = NULL;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'j': a->json = optarg; break;
        case 's': a->svg = optarg; break;
        case 'c': a->o.comm_profile = optarg; break;
        case 't':
            if (cli_parse_int(optarg, &a->o.top) != 0 || a->o.top < 0)
                return cli_bad_input("analyze", "--top: expected an integer >= 0");
            break;
        case 'k':
            if (cli_parse_int(optarg, &a->o.skip_steps) != 0 || a->o.skip_steps < 0)
                return cli_bad_input("analyze", "--skip-steps: expected an integer >= 0");
            break;
        case 'S': a->sim = optarg; break;
        case 'O':
            a->otf2 = optarg;
            if (!ah_trace_otf2_available())
                return cli_bad_input("analyze", "--otf2: this autohet was built without OTF2 "
                                                "(install libopen-trace-format2-dev and rebuild)");
            break;
        case 'T': a->stack = 1; break;
        case 'M': mpi_alg = optarg; break;
        case 'I': a->stack_site = optarg; break;
        case 'D': a->diagnose = 1; break;
        case 'P': a->plan = optarg; break;
        case 'V': a->devices = optarg; break;
        case 'C': a->cp_out = optarg; break;
        case 'h': usage(stdout); return 1;
        default: {
            char msg[160];
            snprintf(msg, sizeof msg, "unknown or incomplete option '%s' (see autohet analyze --help)",
                     argv[optind - 1]);
            return cli_bad_input("analyze", msg);
        }
        }
    }
    if (optind != argc - 1)
        return cli_bad_input("analyze", "expected exactly one TRACE.json (from autohet train or simulate --trace)");
    if (mpi_settings(a, mpi_alg) != 0)
        return 2;
    a->so.comm_profile = a->o.comm_profile;
    char m[4400];
    if (cli_check_output("--json", a->json, m, sizeof m) || cli_check_output("--svg", a->svg, m, sizeof m) ||
        cli_check_output_dir("--otf2", a->otf2, 0, m, sizeof m) ||
        cli_check_output("--comm-profile-out", a->cp_out, m, sizeof m))
        return cli_bad_input("analyze", m);
    if (a->plan && !a->diagnose && !a->cp_out)
        return cli_bad_input("analyze", "--plan needs --diagnose or --comm-profile-out");
    if (a->devices && !a->plan)
        return cli_bad_input("analyze", "--devices is for a --plan's GPU types: give --plan");
    return 0;
}

/* who each rank is, for the diagnosis: its host (from --plan: the node's host, else its name; without a
 * plan the node the trace names), and from the plan its stage, its replica's stages and micro-batches */
typedef struct {
    ah_diag_options o;
    char (*host)[128];
    const char **hostp;
    int *stage, *n_stages, *mbs;
} diag_topology;

static void diag_topology_free(diag_topology *g) {
    free(g->host);
    free(g->hostp);
    free(g->stage);
    free(g->n_stages);
    free(g->mbs);
    memset(g, 0, sizeof *g);
}

static int plan_topology(const char *path, const char *devices, int ranks, diag_topology *g, char *err,
                         size_t n) {
    ah_plan p;
    ah_device_catalog catalog = *ah_device_catalog_builtin();
    if ((devices && ah_device_load_overrides(&catalog, devices, err, n) != 0) ||
        ah_plan_read_json(path, &catalog, &p, err, n) != 0)
        return -1;
    int pr = 0;
    for (int k = 0; k < p.n_replicas; k++)
        for (int j = 0; j < p.replicas[k].n_stages; j++)
            for (int q = 0; q < p.replicas[k].stages[j].tp; q++)
                pr = ah_slot_rank(&p, k, j, q) + 1 > pr ? ah_slot_rank(&p, k, j, q) + 1 : pr;
    if (pr != ranks) {
        snprintf(err, n, "--plan %s: the plan runs %d rank(s), the trace has %d", path, pr, ranks);
        ah_plan_free(&p);
        return -1;
    }
    g->stage = calloc((size_t)ranks, sizeof(int));
    g->n_stages = calloc((size_t)ranks, sizeof(int));
    g->mbs = calloc((size_t)ranks, sizeof(int));
    for (int k = 0; g->mbs && k < p.n_replicas; k++)
        for (int j = 0; j < p.replicas[k].n_stages; j++)
            for (int q = 0; q < p.replicas[k].stages[j].tp; q++) {
                int r = ah_slot_rank(&p, k, j, q), nd = p.replicas[k].stages[j].node;
                g->stage[r] = j;
                g->n_stages[r] = p.replicas[k].n_stages;
                g->mbs[r] = p.replicas[k].micro_batches;
                if (nd >= 0 && nd < p.cluster.n_nodes)
                    snprintf(g->host[r], sizeof g->host[r], "%s",
                             p.cluster.nodes[nd].host[0] ? p.cluster.nodes[nd].host : p.cluster.nodes[nd].name);
            }
    ah_plan_free(&p);
    return 0;
}

static int diag_topology_init(const analyze_args *ar, const ah_trace_file *t, int ranks, diag_topology *g,
                              char *err, size_t n) {
    memset(g, 0, sizeof *g);
    g->host = calloc((size_t)ranks + 1, sizeof *g->host);
    g->hostp = calloc((size_t)ranks + 1, sizeof(char *));
    if (!g->host || !g->hostp)
        abort();
    for (int r = 0; r < ranks; r++)
        snprintf(g->host[r], sizeof g->host[r], "%s", t->node ? t->node[r] : "");
    if (ar->plan && plan_topology(ar->plan, ar->devices, ranks, g, err, n) != 0)
        return -1;
    for (int r = 0; r < ranks; r++)
        g->hostp[r] = g->host[r][0] ? g->host[r] : NULL;
    g->o = (ah_diag_options){ranks, g->hostp, g->stage, g->n_stages, g->mbs, ar->o.comm_profile, 0};
    return 0;
}

/* the simulated side of --sim: a simulator trace, analysed as the measured one */
static int analyze_sim(const char *path, ah_trace_analysis *sa, char *err, size_t errlen) {
    ah_trace_file st;
    if (ah_trace_read(path, &st, err, errlen) != 0)
        return -1;
    int rc = 0;
    if (!strcmp(st.source, "engine")) {
        snprintf(err, errlen, "--sim %s: a measured trace (autohet train --trace); expected autohet simulate "
                              "--trace output", path);
        rc = -1;
    }
    ah_trace_options so = {0};
    if (rc == 0)
        rc = ah_trace_analyze(&st, &so, sa, err, errlen);
    ah_trace_file_free(&st);
    return rc;
}

int cmd_analyze(int argc, char **argv) {
    analyze_args ar;
    int rc = parse_args(argc, argv, &ar);
    if (rc)
        return rc == 1 ? 0 : rc;
    const char *path = argv[optind];
    char err[4600];
    ah_trace_file t;
    ah_trace_analysis a = {0}, sa = {0};
    ah_trace_comparison cmp = {0};
    ah_trace_stack stack = {0};
    ah_diagnosis diag = {0};
    diag_topology topo = {0};
    if (ah_trace_read(path, &t, err, sizeof err) != 0)
        return cli_bad_input("analyze", err);
    if (ah_trace_analyze(&t, &ar.o, &a, err, sizeof err) != 0 ||
        (ar.sim && (analyze_sim(ar.sim, &sa, err, sizeof err) != 0 ||
                    ah_trace_compare(&a, &sa, ar.sim, &cmp, err, sizeof err) != 0)) ||
        (ar.stack && ah_trace_stack_build(&a, &ar.so, &stack, err, sizeof err) != 0) ||
        ((ar.diagnose || ar.cp_out) && (diag_topology_init(&ar, &t, a.ranks, &topo, err, sizeof err) != 0 ||
                                        ah_trace_diagnose(&a, &topo.o, &diag, err, sizeof err) != 0))) {
        rc = cli_bad_input("analyze", err);
        goto out;
    }
    print_breakdown(path, &a);
    print_clocks(&a);
    print_sites(&a);
    if (ar.sim)
        print_comparison(ar.sim, &cmp);
    if (ar.otf2) {
        ah_trace_event *ev = calloc((size_t)a.n_items + 1, sizeof(ah_trace_event));
        for (int i = 0; ev && i < a.n_items; i++)
            ev[i] = a.items[i].ev;
        if (!ev ||
            ah_trace_write_otf2(ar.otf2, "trace", ev, a.n_items, a.ranks, &a.clock, err, sizeof err) != 0) {
            fprintf(stderr, "autohet analyze: --otf2 %s: %s\n", ar.otf2, ev ? err : "out of memory");
            rc = 3; /* reported */
        } else {
            printf("\nOTF2 archive written: %s/trace.otf2 (otf2-print %s/trace.otf2)\n", ar.otf2, ar.otf2);
        }
        free(ev);
    }
    print_slowest(&a);
    if (ar.stack) {
        print_stack_sites(&stack);
        print_stack_instances(&stack, ar.stack_site, ar.o.top);
        print_stack_ranks(&stack);
    }
    if (ar.diagnose)
        ah_diagnosis_print(stdout, &diag, &topo.o);
    cJSON *extra = ar.diagnose ? cJSON_CreateObject() : NULL;
    if (extra) {
        cJSON_AddItemToObject(extra, "findings", ah_diagnosis_json(&diag, 1));
        cJSON_AddItemToObject(extra, "not_established", ah_diagnosis_json(&diag, 0));
    }
    if (rc == 0 && ar.json &&
        ah_trace_write_analysis_json(ar.json, path, &a, ar.sim, ar.sim ? &cmp : NULL, ar.stack ? &stack : NULL,
                                     extra, err, sizeof err) != 0)
        rc = 1;
    else if (!(rc == 0 && ar.json))
        cJSON_Delete(extra);
    if (rc == 0 && ar.cp_out) {
        if (ah_diagnosis_write_comm_profile(ar.cp_out, path, &diag, &topo.o, err, sizeof err) != 0)
            rc = 1;
        else
            printf("\ncomm profile written: %s (%d transfer(s) on links; autohet plan --comm-profile %s)\n",
                   ar.cp_out, diag.n_obs, ar.cp_out);
    }
    if (rc == 0 && ar.svg && ah_trace_write_analysis_svg(ar.svg, path, &a, err, sizeof err) != 0)
        rc = 1;
    if (rc == 1)
        fprintf(stderr, "autohet analyze: %s\n", err);
    rc = rc == 3 ? 1 : rc;
out:
    ah_diagnosis_free(&diag);
    diag_topology_free(&topo);
    ah_trace_stack_free(&stack);
    ah_trace_comparison_free(&cmp);
    ah_trace_analysis_free(&sa);
    ah_trace_analysis_free(&a);
    ah_trace_file_free(&t);
    return rc;
}
