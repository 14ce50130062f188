/* autohet profile: measure each layer kind's forward, backward and optimizer
 * time on the local backend over a grid of TP degrees and micro-batch sizes,
 * and write a profile the planner and the simulator read (--profile). */
#include <getopt.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "autohet/plan.h"
#include "autohet/profile_table.h"
#include "autohet/engine.h"
#include "cli/cli.h"
#include "util/errors.h"

static void usage(FILE *f) {
    fprintf(f, "usage: autohet profile --model NAME|config.json --out FILE [--device NAME] [--seq S]\n"
               "                       [--tp LIST] [--mb LIST] [--reps N] [--precision fp32|bf16]\n\n"
               "Measures forward, backward and optimizer time of the embedding, one transformer block and\n"
               "the head on this machine's CPU backend (the training engine's kernels), for every TP degree\n"
               "(the 1/tp shard a TP rank computes; TP communication is not included) and micro-batch size,\n"
               "and writes an autohet profile (docs/profile-format.md) for --device: autohet plan --profile\n"
               "FILE then plans with measured costs. Blocks are identical, so one block is measured and\n"
               "used for all N. The model's vocabulary, as autohet train uses it on token data.\n\n"
               "  --device   catalog device the measurements describe (default cpu)\n"
               "  --seq      sequence length (default 128)\n"
               "  --tp       TP degrees (default 1,2,4; must divide heads and KV heads)\n"
               "  --mb       micro-batch sizes (default 1,2,4,8)\n"
               "  --reps     timed repetitions, median kept (default 5)\n"
               "  --precision  the linear layers' matmuls, as autohet train --precision: fp32 (default) or\n"
               "             bf16 (oneDNN, needs AVX512_BF16); recorded as the profile's \"precision\"\n");
}

/* "1,2,4": every item an integer >= 1 (cli_parse_int_list: an empty item is an error) */
static int parse_list(const char *s, int *out, int max) {
    int n = cli_parse_int_list(s, out, max);
    for (int i = 0; i < n; i++)
        if (out[i] < 1)
            return -1;
    return n;
}

/* The bytes this process may still take: the machine's physical memory, or what the address-space limit
 * (ulimit -v, RLIMIT_AS) leaves above the process's mappings when that is less; *what names the figure. */
static double memory_available(const char **what) {
    double phys = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    *what = "physical memory";
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return phys;
    double limit = (double)rl.rlim_cur, mapped = 0;
    unsigned long long pages;
    FILE *f = fopen("/proc/self/statm", "r"); /* the first field: this process's mapped pages */
    if (f && fscanf(f, "%llu", &pages) == 1)
        mapped = (double)pages * (double)sysconf(_SC_PAGESIZE);
    if (f)
        fclose(f);
    if (limit - mapped >= phys)
        return phys;
    *what = "address space left under the limit (ulimit -v)";
    return limit > mapped ? limit - mapped : 0;
}

/* Refuses (AH_EXIT_BAD_INPUT, one line) a grid whose largest measurement, one layer's shard of the smallest
 * TP degree and the largest micro-batch, needs more memory than this process can have. */
static int check_memory(const ah_model_config *cfg, int seq, const int *tps, int n_tp, const int *mbs, int n_mb) {
    static const char *names[3] = {"embedding", "block", "head"};
    int L = ah_model_num_layers(cfg), worst = 0, wtp = 0, wmb = 0;
    double need = 0;
    for (int i = 0; i < n_tp; i++)
        for (int j = 0; j < n_mb; j++)
            for (int q = 0; q < 3; q++) {
                double b = ah_engine_profile_layer_bytes(cfg, q == 0 ? 0 : q == 1 ? 1 : L - 1, seq, tps[i], mbs[j]);
                if (b > need)
                    need = b, worst = q, wtp = tps[i], wmb = mbs[j];
            }
    const char *what;
    double have = memory_available(&what), gib = 1024.0 * 1024.0 * 1024.0;
    if (need <= have)
        return 0;
    char msg[512];
    snprintf(msg, sizeof msg,
             "model %s: measuring its %s at --tp %d --mb %d --seq %d needs %.2f GiB (parameters, gradients, "
             "AdamW moments, activations), more than this machine's %.2f GiB of %s: give a larger --tp or a "
             "smaller --mb / --seq",
             cfg->name, names[worst], wtp, wmb, seq, need / gib, have / gib, what);
    return cli_bad_input("profile", msg);
}

int cmd_profile(int argc, char **argv) {
    ah_blas_select_kernels(argc, argv); /* measure with the kernels autohet train will use */
    static cli_options opts;
    cli_long_options("model=m out=o device=d seq=s tp=t mb=b reps=r precision=P help!h", &opts);
    const char *model_arg = NULL, *out = NULL, *device = "cpu";
    int seq = 128, reps = 5, tps[8] = {1, 2, 4}, n_tp = 3, mbs[8] = {1, 2, 4, 8}, n_mb = 4, c;
    char msg[256];
    ah_matmul_precision prec = AH_MATMUL_FP32;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", opts.opts, NULL)) != -1) {
        switch (c) {
        case 'm': model_arg = optarg; break;
        case 'o': out = optarg; break;
        case 'd': device = optarg; break;
        case 's':
            if (cli_parse_int(optarg, &seq) != 0 || seq < 1)
                return cli_bad_input("profile", "--seq: expected a positive integer");
            break;
        case 'r':
            if (cli_parse_int(optarg, &reps) != 0 || reps < 1 || reps > 64)
                return cli_bad_input("profile", "--reps: expected 1..64");
            break;
        case 't':
            if ((n_tp = parse_list(optarg, tps, 8)) <= 0)
                return cli_bad_input("profile", "--tp: expected a comma list of positive integers");
            break;
        case 'b':
            if ((n_mb = parse_list(optarg, mbs, 8)) <= 0)
                return cli_bad_input("profile", "--mb: expected a comma list of positive integers");
            break;
        case 'P': { /* the check autohet train makes (gemm.c owns what bf16 needs) */
            char why[200];
            if (ah_matmul_precision_parse(optarg, &prec, why, sizeof why) != 0) {
                snprintf(msg, sizeof msg, "--precision %s: %s", optarg, why);
                return cli_bad_input("profile", msg);
            }
            break;
        }
        case 'h': usage(stdout); return 0;
        default:
            snprintf(msg, sizeof msg, "unknown or incomplete option '%s' (see autohet profile --help)",
                     argv[optind - 1]);
            return cli_bad_input("profile", msg);
        }
    }
    if (optind < argc) {
        snprintf(msg, sizeof msg, "unexpected argument '%.120s' (see autohet profile --help)", argv[optind]);
        return cli_bad_input("profile", msg);
    }
    if (!model_arg || !out)
        return cli_bad_input("profile", "--model and --out are required (see autohet profile --help)");
    {
        char m[4400];
        if (cli_check_output("--out", out, m, sizeof m))
            return cli_bad_input("profile", m);
    }
    char err[512];
    ah_model_config cfg;
    if (ah_model_resolve(model_arg, &cfg, err, sizeof err) != 0)
        return cli_bad_input("profile", err);
    if (!ah_device_find(ah_device_catalog_builtin(), device)) {
        snprintf(msg, sizeof msg, "--device '%s': unknown device (see autohet devices)", device);
        return cli_bad_input("profile", msg);
    }
    for (int i = 0; i < n_tp; i++)
        if (cfg.n_heads % tps[i] || cfg.n_kv_heads % tps[i] || cfg.ffn_hidden % tps[i]) {
            snprintf(msg, sizeof msg, "--tp %d does not divide %s's %d heads / %d KV heads / MLP %d", tps[i],
                     cfg.name, cfg.n_heads, cfg.n_kv_heads, cfg.ffn_hidden);
            return cli_bad_input("profile", msg);
        }
    if (ah_model_check_seq(&cfg, seq, "--seq", msg, sizeof msg) != 0)
        return cli_bad_input("profile", msg);
    if (check_memory(&cfg, seq, tps, n_tp, mbs, n_mb) != 0)
        return AH_EXIT_BAD_INPUT;
    int L = ah_model_num_layers(&cfg);
    ah_profile *p = ah_profile_table_new(cfg.name, seq);
    char origin[200];
    int bf16 = prec == AH_MATMUL_BF16;
    snprintf(origin, sizeof origin, "autohet profile, CPU backend, %d threads, %d reps (median)%s",
             omp_get_max_threads(), reps, bf16 ? ", bf16 matmuls (oneDNN)" : "");
    ah_profile_table_set_origin(p, origin);
    ah_profile_table_set_precision(p, bf16 ? "bf16" : "fp32");
    double t_start = omp_get_wtime();
    printf("%-4s %-4s %-10s %12s %12s %12s %14s\n", "tp", "mb", "layer", "fwd ms", "bwd ms", "update ms",
           "acts MiB");
    int rc = 0;
    for (int i = 0; i < n_tp && rc == 0; i++)
        for (int j = 0; j < n_mb && rc == 0; j++) {
            const int kinds[3] = {0, 1, L - 1};
            ah_layer_cost cost[3];
            for (int q = 0; q < 3 && rc == 0; q++) {
                ah_layer_timing lt;
                char what[256]; /* an allocation that fails inside: one line naming the measurement, exit 2 */
                snprintf(what, sizeof what, "autohet profile: model %s, %s at --tp %d --mb %d --seq %d", cfg.name,
                         q == 0 ? "embedding" : q == 1 ? "block" : "head", tps[i], mbs[j], seq);
                ah_oom_context(AH_EXIT_BAD_INPUT, what);
                if (ah_engine_profile_layer(&cfg, kinds[q], seq, tps[i], mbs[j], reps, prec, &lt, err,
                                            sizeof err) != 0) {
                    rc = -1;
                    break;
                }
                double f = lt.fwd_s, b = lt.bwd_s, u = lt.update_s, act = lt.act_bytes;
                cost[q] = (ah_layer_cost){.fwd_s = f, .bwd_s = b, .update_s = u};
                printf("%-4d %-4d %-10s %12.3f %12.3f %12.3f %14.2f\n", tps[i], mbs[j],
                       q == 0   ? "embedding"
                       : q == 1 ? "block"
                                : "head",
                       f * 1e3, b * 1e3, u * 1e3, act / (1024.0 * 1024.0));
            }
            for (int l = 0; l < L && rc == 0; l++)
                ah_profile_table_set(p, device, mbs[j], tps[i], l, L, cost[l == 0 ? 0 : l == L - 1 ? 2 : 1]);
        }
    if (rc == 0 && ah_profile_table_write(p, out, err, sizeof err) != 0)
        rc = -1;
    ah_profile_free(p);
    if (rc != 0)
        return cli_bad_input("profile", err);
    printf("profiled %d x %d configurations in %.1f s; wrote %s (use: autohet plan --profile %s --cluster "
           "...x%s)\n",
           n_tp, n_mb, omp_get_wtime() - t_start, out, out, device);
    return 0;
}
