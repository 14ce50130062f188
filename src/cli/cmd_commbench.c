/* autohet commbench: OSU / nccl-tests style communication benchmarks over MPI
 * with a piecewise alpha-beta fit per operation (docs/commbench.md). The
 * measurement and the sweeps are src/comm/commbench*.c; this file parses
 * flags, picks the operations and pairs and writes the profile. */
#include <getopt.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "autohet/comm.h"
#include "autohet/plan.h"
#include "cli/cli.h"
#include "autohet/commbench.h"
#include "autohet/commbench_print.h"
#include "util/atomic_file.h"
#include "util/errors.h"

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: mpirun -np N autohet commbench [--ops LIST] [--min-size BYTES] [--max-size BYTES]\n"
        "                                      [--step-factor F] [--iters N] [--rounds R] [--batch auto|K]\n"
        "                                      [--statistic median|p25] [--format default|osu|nccl-tests]\n"
        "                                      [--sync barrier|window] [--pairs SPEC] [--json FILE]\n\n"
        "Point-to-point latency (ping-pong, osu_latency) and bandwidth (windowed streaming, osu_bw)\n"
        "between pairs of ranks, and all-reduce, all-gather, reduce-scatter, broadcast and all-to-all\n"
        "over all ranks, for message sizes from --min-size in steps of --step-factor. Per size:\n"
        "min/avg/max time over ranks, the median repetition with its 95%% confidence interval and\n"
        "the lower quartile, algorithm and bus bandwidth\n"
        "(nccl-tests convention), and a check of every element of every result (#wrong); per\n"
        "operation a piecewise alpha-beta fit (time = alpha + bytes / beta per protocol regime, the\n"
        "break points found from the data) with its largest relative error.\n\n"
        "  --ops       comma list of latency,bw,allreduce,allgather,reduce_scatter,bcast,alltoall\n"
        "              (default all)\n"
        "  --min-size  smallest message (default 4 B)   --max-size  largest (default 256 MiB); a K, M or\n"
        "              G suffix counts KiB, MiB, GiB (as nccl-tests' -b/-e: 1K, 128M)\n"
        "  --step-factor  size multiplier from one size to the next (default 2: powers of two, as\n"
        "              OSU; nccl-tests -f). A root of 2 (1.414, 1.189) hits every power of two\n"
        "              exactly: 1.414 measures two sizes an octave\n"
        "  --iters     timed repetitions for small messages (default 100; fewer for large ones)\n"
        "  --batch     operations timed together per repetition: auto (default: point-to-point\n"
        "              as many as last about 20 us, at most 1000, as osu_latency/osu_bw time their\n"
        "              loop; collectives one call, as OSU's) or K (1: every call alone)\n"
        "  --statistic what the fit is fitted to: each size's median repetition (default) or its\n"
        "              lower quartile, p25: interference only adds time, so on a shared machine the\n"
        "              faster repetitions are the undisturbed ones (use with --rounds)\n"
        "  --rounds    take each size's repetitions in R rounds over all sizes, each round in a\n"
        "              shuffled order (default 1: size after size, as OSU); R > 1 spreads a slow\n"
        "              phase of the machine over every size (at least R repetitions a size)\n"
        "  --format    default (autohet's columns), osu (OSU micro-benchmarks' columns and units:\n"
        "              latency us, bandwidth MB/s, collectives avg/min/max latency us), nccl-tests\n"
        "              (size count type redop root, time algbw busbw #wrong out-of-place and in-place)\n"
        "  --sync      barrier (default: a barrier before every repetition) or window (ReproMPI:\n"
        "              clocks synchronised, every repetition starts at its own global time)\n"
        "  --pairs     point-to-point pairs: classes (default: the lowest pair of every link class\n"
        "              present), all, hosts (every pair of hosts, and two ranks of every host that\n"
        "              has two: prints the link matrix; between two hosts with two ranks or more\n"
        "              each, as many flows as they have rank pairs stream at once, against one flow:\n"
        "              the shared links), or a list A-B,C-D\n"
        "  --json      write results[] and fits[] (a comm profile; with point-to-point, links{}: the\n"
        "              latency and bandwidth matrix between hosts, and the shared links)\n\n"
        "Needs at least 2 ranks. Exits 1 when a correctness check finds a wrong element.\n");
}

static int fail_all(int rank, const char *msg) {
    return cli_mpi_fail_all("commbench", rank, msg);
}

typedef struct {
    const char *ops, *json, *pairs;
    double min_size, max_size, step_factor;
    int base_iters, rounds, batch; /* batch 0: auto */
    int fit_p25;                   /* --statistic p25 */
    ah_commbench_format format;
    ah_commbench_sync sync;
} commbench_args;

/* --format / --sync values; 0, or -1 with msg */
static int parse_choice(int c, const char *v, commbench_args *a, char *msg, size_t n) {
    if (c == 'f' && ah_commbench_format_parse(v, &a->format) != 0) {
        snprintf(msg, n, "--format '%s': expected default, osu or nccl-tests", v);
        return -1;
    }
    if (c == 's') {
        if (strcmp(v, "barrier") && strcmp(v, "window")) {
            snprintf(msg, n, "--sync '%s': expected barrier or window", v);
            return -1;
        }
        a->sync = strcmp(v, "window") ? AH_SYNC_BARRIER : AH_SYNC_WINDOW;
    }
    return 0;
}

/* A byte count: a number with an optional K, M or G (binary, as nccl-tests' -b/-e read them) and an optional
 * B or iB: 4, 1K, 8KiB, 128M, 1.5G. 0, or -1 if s is none. */
static int parse_bytes(const char *s, double *out) {
    char num[64];
    size_t k = strcspn(s, "kKmMgG");
    if (k >= sizeof num)
        return -1;
    memcpy(num, s, k);
    num[k] = 0;
    if (cli_parse_double(num, out) != 0)
        return -1;
    const char *u = s + k;
    if (!*u)
        return 0;
    double m = (*u == 'k' || *u == 'K') ? 1024.0 : (*u == 'm' || *u == 'M') ? 1048576.0 : 1073741824.0;
    u++;
    if (!strcmp(u, "") || !strcmp(u, "B") || !strcmp(u, "iB")) {
        *out *= m;
        return 0;
    }
    return -1;
}

/* 0, or -1 with msg */
static int parse_args(int argc, char **argv, commbench_args *a, char *msg, size_t n) {
    static cli_options opts;
    cli_long_options("ops=o min-size=m max-size=M step-factor=F iters=i rounds=R batch=B statistic=S json=j "
                     "format=f sync=s pairs=p",
                     &opts);
    memset(a, 0, sizeof *a);
    a->min_size = 4, a->max_size = 256.0 * 1024 * 1024, a->base_iters = 100, a->step_factor = 2,
    a->rounds = 1;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "", opts.opts, NULL)) != -1) {
        switch (c) {
        case 'o': a->ops = optarg; break;
        case 'j': a->json = optarg; break;
        case 'p': a->pairs = optarg; break;
        case 'f':
        case 's':
            if (parse_choice(c, optarg, a, msg, n) != 0)
                return -1;
            break;
        case 'm':
        case 'M': {
            double *v = c == 'm' ? &a->min_size : &a->max_size;
            if (parse_bytes(optarg, v) != 0 || *v < 1) {
                snprintf(msg, n, "%s '%s': expected a number of bytes >= 1 (a K, M or G suffix: KiB, MiB, GiB)",
                         argv[optind - 2], optarg);
                return -1;
            }
            break;
        }
        case 'F':
            if (cli_parse_double(optarg, &a->step_factor) != 0 ||
                !(a->step_factor >= 1.01 && a->step_factor <= 16)) {
                snprintf(msg, n, "--step-factor '%s': expected a number from 1.01 to 16", optarg);
                return -1;
            }
            break;
        case 'S':
            if (strcmp(optarg, "median") && strcmp(optarg, "p25")) {
                snprintf(msg, n, "--statistic '%s': expected median or p25", optarg);
                return -1;
            }
            a->fit_p25 = !strcmp(optarg, "p25");
            break;
        case 'B':
            if (!strcmp(optarg, "auto"))
                a->batch = 0;
            else if (cli_int_value("--batch", optarg, 1, &a->batch, msg, n) != 0 ||
                     a->batch > AH_COMMBENCH_MAX_BATCH) {
                snprintf(msg, n, "--batch '%s': expected auto or a count from 1 to %d", optarg,
                         AH_COMMBENCH_MAX_BATCH);
                return -1;
            }
            break;
        case 'R':
            if (cli_int_value("--rounds", optarg, 1, &a->rounds, msg, n) != 0)
                return -1;
            if (a->rounds > 1000) {
                snprintf(msg, n, "--rounds '%s': expected at most 1000", optarg);
                return -1;
            }
            break;
        case 'i':
            if (cli_int_value("--iters", optarg, 1, &a->base_iters, msg, n) != 0)
                return -1;
            break;
        default: return cli_unknown_option("commbench", argv[optind - 1], msg, n);
        }
    }
    if (optind < argc) {
        snprintf(msg, n, "unexpected argument '%s' (see autohet commbench --help)", argv[optind]);
        return -1;
    }
    return cli_check_list("--ops", a->ops, msg, n) || cli_check_list("--pairs", a->pairs, msg, n) ? -1 : 0;
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
            snprintf(
                msg, n,
                "--ops: unknown operation '%s' (latency, bw, allreduce, allgather, reduce_scatter, bcast, "
                "alltoall)",
                tok);
            return -1;
        }
        want[op] = 1;
    }
    return 0;
}

static int write_profile(int rank, const commbench_args *a, const ah_commbench_topology *t, cJSON *results,
                         cJSON *fits, const ah_commbench_shared *shared) {
    int rc = 0;
    cJSON *root =
        ah_commbench_profile_json(t, a->sync == AH_SYNC_WINDOW ? "window" : "barrier", results, fits, shared);
    if (rank == 0 && a->json) {
        char *text = cJSON_Print(root), err[4200];
        if (!text || ah_write_file_atomic(a->json, text, strlen(text), err, sizeof err) != 0) {
            fprintf(stderr, "autohet commbench: --json %s\n", text ? err : "out of memory");
            rc = 1;
        }
        free(text);
    }
    cJSON_Delete(root);
    return rc;
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
    ah_commbench_pair pairs[AH_COMMBENCH_MAX_PAIRS];
    int np = ah_commbench_pairs(&t, a.pairs, pairs, AH_COMMBENCH_MAX_PAIRS, msg, sizeof msg);
    ah_commbench_buffers b;
    if (np < 0 || ah_commbench_buffers_alloc(&b, (size_t)a.max_size) != 0) {
        ah_commbench_topology_free(&t);
        return fail_all(rank, np < 0 ? msg : "cannot allocate the message buffers (lower --max-size)");
    }
    ah_commbench_run x = {.min_size = a.min_size, .max_size = a.max_size, .step_factor = a.step_factor,
                          .base_iters = a.base_iters, .rounds = a.rounds, .batch = a.batch, .fit_p25 = a.fit_p25,
                          .format = a.format, .sync = a.sync, .t = &t, .b = &b, .rank = rank,
                          .results = cJSON_CreateArray(), .fits = cJSON_CreateArray()};
    if (rank == 0)
        printf("# autohet commbench: %d ranks on %d node%s; %d point-to-point pair%s; %s synchronisation\n",
               n, t.nodes, t.nodes == 1 ? "" : "s", np, np == 1 ? "" : "s",
               a.sync == AH_SYNC_WINDOW ? "window" : "barrier");
    for (int op = 0; op < AH_OP_COUNT; op++)
        for (int q = 0; want[op] && q < (op <= AH_OP_BW ? np : 1); q++)
            ah_commbench_sweep(&x, (ah_comm_op)op, op <= AH_OP_BW ? pairs[q].src : 0,
                               op <= AH_OP_BW ? pairs[q].dst : 1);
    if (rank == 0)
        ah_commbench_print_summary(a.format, x.wrong, x.busbw_sum, x.rows);
    /* --pairs hosts with a point-to-point op: every two hosts' link shared by as many flows as they have
     * rank pairs, at the largest size up to 1 MiB */
    int hosts = a.pairs && !strcmp(a.pairs, "hosts");
    ah_commbench_shared shared = {0};
    if (hosts && (want[AH_OP_LATENCY] || want[AH_OP_BW]))
        ah_commbench_shared_measure(&t, &b, a.max_size < 1048576.0 ? (size_t)a.max_size : (size_t)1 << 20,
                                    &shared);
    cJSON *links = rank == 0 && hosts ? ah_commbench_links_json(&t, x.fits, &shared) : NULL;
    if (links)
        ah_commbench_print_links(links, stdout);
    cJSON_Delete(links);
    int rc = write_profile(rank, &a, &t, x.results, x.fits, &shared);
    ah_commbench_shared_free(&shared);
    ah_commbench_topology_free(&t);
    ah_commbench_buffers_free(&b);
    MPI_Finalize();
    return rc ? rc : x.wrong ? 1 : 0;
}
