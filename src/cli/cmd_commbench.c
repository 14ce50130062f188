/* autohet commbench: OSU / nccl-tests style communication benchmarks over MPI
 * with an alpha-beta fit per operation (docs/commbench.md). The measurement
 * loop is src/comm/commbench.c; this file parses flags and prints. */
#include <getopt.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "autohet/comm.h"
#include "autohet/plan.h"
#include "cli/cli.h"
#include "comm/commbench.h"

static void usage(FILE *f) {
    fprintf(f, "usage: mpirun -np N autohet commbench [--ops LIST] [--min-size BYTES] [--max-size BYTES]\n"
               "                                      [--iters N] [--json FILE]\n\n"
               "Point-to-point latency (ping-pong, osu_latency) and bandwidth (windowed streaming, osu_bw)\n"
               "between ranks 0 and 1, and all-reduce, all-gather, reduce-scatter, broadcast and all-to-all\n"
               "over all ranks, for message sizes in powers of two. Per size: min/avg/max time over ranks,\n"
               "algorithm and bus bandwidth (nccl-tests convention); per operation an alpha-beta fit\n"
               "time = alpha + bytes / beta with its largest relative error.\n\n"
               "  --ops       comma list of latency,bw,allreduce,allgather,reduce_scatter,bcast,alltoall\n"
               "              (default all)\n"
               "  --min-size  smallest message (default 4 B)   --max-size  largest (default 256 MiB)\n"
               "  --iters     timed iterations for small messages (default 100; fewer for large ones)\n"
               "  --json      write results[] and fits[] (a comm profile)\n\n"
               "Needs at least 2 ranks. Each timed iteration starts after a barrier (collectives) or a\n"
               "full round trip / acknowledged window (point-to-point), so iterations never overlap.\n");
}

static int fail_all(int rank, const char *msg) { return cli_mpi_fail_all("commbench", rank, msg); }

typedef struct {
    const char *ops, *json;
    double min_size, max_size;
    int base_iters;
} commbench_args;

/* 0, or -1 with msg */
static int parse_args(int argc, char **argv, commbench_args *a, char *msg, size_t n) {
    static cli_options opts;
    cli_long_options(
        "ops=o min-size=m max-size=M iters=i json=j",
        &opts);
    a->ops = a->json = NULL;
    a->min_size = 4, a->max_size = 256.0 * 1024 * 1024, a->base_iters = 100;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "", opts.opts, NULL)) != -1) {
        switch (c) {
        case 'o': a->ops = optarg; break;
        case 'j': a->json = optarg; break;
        case 'm':
        case 'M': {
            double *v = c == 'm' ? &a->min_size : &a->max_size;
            if (cli_parse_double(optarg, v) != 0 || *v < 1) {
                snprintf(msg, n, "%s '%s': expected a number of bytes >= 1", argv[optind - 2], optarg);
                return -1;
            }
            break;
        }
        case 'i':
            if (cli_int_value("--iters", optarg, 1, &a->base_iters, msg, n) != 0)
                return -1;
            break;
        default: return cli_unknown_option("commbench", argv[optind - 1], msg, n);
        }
    }
    return 0;
}

/* --ops into want[]; 0, or -1 with msg */
static int parse_ops(const char *ops, int *want, char *msg, size_t n) {
    for (int i = 0; i < AH_OP_COUNT; i++)
        want[i] = ops == NULL;
    if (!ops)
        return 0;
    char list[256];
    snprintf(list, sizeof list, "%s", ops);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        ah_comm_op op;
        if (ah_comm_op_parse(tok, &op) != 0) {
            snprintf(msg, n,
                     "--ops: unknown operation '%s' (latency, bw, allreduce, allgather, reduce_scatter, bcast, "
                     "alltoall)",
                     tok);
            return -1;
        }
        want[op] = 1;
    }
    return 0;
}

/* One operation over its sizes: a table on rank 0, its results and its fit
 * appended to the JSON arrays. Collective. */
static void bench_op(ah_comm_op op, const commbench_args *a, const ah_commbench_topology *t,
                     const ah_commbench_buffers *b, int rank, cJSON *results, cJSON *fits) {
    size_t sizes[AH_COMMBENCH_MAX_SIZES];
    double avg[AH_COMMBENCH_MAX_SIZES];
    int ns = ah_commbench_sizes(op, (size_t)a->min_size, (size_t)a->max_size, t->ranks, sizes,
                                AH_COMMBENCH_MAX_SIZES);
    const char *cls = ah_commbench_link_class(t, op);
    if (rank == 0) {
        printf("\n# %s (%s)\n", ah_comm_op_name(op), cls);
        printf("%12s %10s %12s %12s %12s %12s %12s\n", "bytes", "iters", "min us", "avg us", "max us",
               "algbw GB/s", "busbw GB/s");
    }
    for (int i = 0; i < ns; i++) {
        ah_comm_result r;
        ah_commbench_measure(op, sizes[i], ah_commbench_iters(sizes[i], a->base_iters), b, &r);
        avg[i] = r.avg_us;
        if (rank != 0)
            continue;
        printf("%12zu %10d %12.2f %12.2f %12.2f %12.3f %12.3f\n", r.bytes, r.iters, r.min_us, r.avg_us,
               r.max_us, r.algbw_gbs, r.busbw_gbs);
        cJSON_AddItemToArray(results, ah_commbench_result_json(&r, cls));
    }
    if (rank != 0 || ns == 0)
        return;
    ah_comm_fit f = ah_comm_fit_alpha_beta(op, sizes, avg, ns);
    printf("# fit: time = %.2f us + bytes / %.3f GB/s; largest relative error %.1f%% over %d sizes\n",
           f.alpha_us, f.beta_gbs, 100 * f.max_rel_error, ns);
    ah_comm_fit2 f2 = ah_comm_fit_two_regimes(op, sizes, avg, ns);
    printf("# two regimes: <= %zu B: %.2f us + bytes / %.3f GB/s; larger: %.2f us + bytes / %.3f GB/s; "
           "largest relative error %.1f%%\n",
           f2.split_bytes, f2.small.alpha_us, f2.small.beta_gbs, f2.large.alpha_us, f2.large.beta_gbs,
           100 * f2.max_rel_error);
    cJSON_AddItemToArray(fits, ah_commbench_fit_json(op, cls, &f, &f2, sizes, avg, ns));
}

int cmd_commbench(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    commbench_args a;
    char msg[4400] = "";
    int bad = parse_args(argc, argv, &a, msg, sizeof msg) != 0;
    MPI_Init(&argc, &argv);
    int rank, n, want[AH_OP_COUNT];
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (bad)
        return fail_all(rank, msg);
    if (n < 2)
        return fail_all(rank, "needs at least 2 MPI ranks (mpirun -np 2 or more)");
    if (a.min_size > a.max_size)
        return fail_all(rank, "--min-size is larger than --max-size");
    if (cli_check_output("--json", a.json, msg, sizeof msg) || parse_ops(a.ops, want, msg, sizeof msg))
        return fail_all(rank, msg);
    ah_commbench_topology t;
    ah_commbench_topology_probe(&t);
    ah_commbench_buffers b;
    if (ah_commbench_buffers_alloc(&b, (size_t)a.max_size) != 0)
        return fail_all(rank, "cannot allocate the message buffers (lower --max-size)");
    cJSON *results = cJSON_CreateArray(), *fits = cJSON_CreateArray();
    if (rank == 0)
        printf("# autohet commbench: %d ranks on %d node%s; point-to-point between ranks 0 and 1 (%s)\n", n,
               t.nodes, t.nodes == 1 ? "" : "s", ah_commbench_link_class(&t, AH_OP_LATENCY));
    for (int op = 0; op < AH_OP_COUNT; op++)
        if (want[op])
            bench_op((ah_comm_op)op, &a, &t, &b, rank, results, fits);
    int rc = 0;
    cJSON *root = ah_commbench_profile_json(&t, results, fits);
    if (rank == 0 && a.json) {
        char *text = cJSON_Print(root);
        FILE *f = fopen(a.json, "w");
        if (!f || fputs(text, f) < 0) {
            fprintf(stderr, "autohet commbench: cannot write %s\n", a.json);
            rc = 1;
        }
        if (f)
            fclose(f);
        free(text);
    }
    cJSON_Delete(root);
    ah_commbench_buffers_free(&b);
    MPI_Finalize();
    return rc;
}
