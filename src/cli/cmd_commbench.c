/* autohet commbench: OSU / nccl-tests style communication benchmarks over MPI
 * with an alpha-beta fit per operation (docs/commbench.md). */
#include <getopt.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "autohet/comm.h"
#include "autohet/plan.h"
#include "cli/cli.h"

#define BW_WINDOW 64

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

/* Timed iterations for a size: fewer for big messages, at least 3. */
static int iters_for(size_t bytes, int base) {
    long it = (long)base;
    if (bytes > 65536)
        it = (long)((double)base * 65536.0 / (double)bytes);
    return it < 3 ? 3 : (int)it;
}

/* One iteration of op; returns its seconds on this rank. */
static double run_once(ah_comm_op op, size_t bytes, char *sbuf, char *rbuf, int rank, int n) {
    double t0, t1;
    int cnt = (int)(bytes / sizeof(float));
    if (cnt < 1)
        cnt = 1;
    switch (op) {
    case AH_OP_LATENCY:
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        if (rank == 0) {
            MPI_Send(sbuf, (int)bytes, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
            MPI_Recv(rbuf, (int)bytes, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
            MPI_Recv(rbuf, (int)bytes, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(sbuf, (int)bytes, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
        }
        t1 = MPI_Wtime();
        return (t1 - t0) / 2; /* one way */
    case AH_OP_BW: {
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Request req[BW_WINDOW];
        char ack = 0;
        t0 = MPI_Wtime();
        if (rank == 0) {
            for (int w = 0; w < BW_WINDOW; w++)
                MPI_Isend(sbuf, (int)bytes, MPI_BYTE, 1, 2, MPI_COMM_WORLD, &req[w]);
            MPI_Waitall(BW_WINDOW, req, MPI_STATUSES_IGNORE);
            MPI_Recv(&ack, 1, MPI_BYTE, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
            for (int w = 0; w < BW_WINDOW; w++)
                MPI_Irecv(rbuf, (int)bytes, MPI_BYTE, 0, 2, MPI_COMM_WORLD, &req[w]);
            MPI_Waitall(BW_WINDOW, req, MPI_STATUSES_IGNORE);
            MPI_Send(&ack, 1, MPI_BYTE, 0, 3, MPI_COMM_WORLD);
        }
        t1 = MPI_Wtime();
        return (t1 - t0) / BW_WINDOW; /* per message */
    }
    default: break;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    switch (op) {
    case AH_OP_ALLREDUCE: MPI_Allreduce(sbuf, rbuf, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
    case AH_OP_ALLGATHER: /* bytes = the gathered total */
        MPI_Allgather(sbuf, (int)(bytes / (size_t)n), MPI_BYTE, rbuf, (int)(bytes / (size_t)n), MPI_BYTE,
                      MPI_COMM_WORLD);
        break;
    case AH_OP_REDUCE_SCATTER: /* bytes = the input per rank */
        MPI_Reduce_scatter_block(sbuf, rbuf, cnt / n > 0 ? cnt / n : 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
    case AH_OP_BCAST: MPI_Bcast(sbuf, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD); break;
    case AH_OP_ALLTOALL: /* bytes = what each rank sends in total */
        MPI_Alltoall(sbuf, (int)(bytes / (size_t)n), MPI_BYTE, rbuf, (int)(bytes / (size_t)n), MPI_BYTE,
                     MPI_COMM_WORLD);
        break;
    default: break;
    }
    t1 = MPI_Wtime();
    return t1 - t0;
}

/* Sizes a collective can use with n ranks: at least n floats so each rank gets one. */
static int size_valid(ah_comm_op op, size_t bytes, int n) {
    if (op == AH_OP_ALLGATHER || op == AH_OP_ALLTOALL)
        return bytes % (size_t)n == 0 && bytes >= (size_t)n;
    if (op == AH_OP_REDUCE_SCATTER)
        return bytes >= sizeof(float) * (size_t)n && bytes % (sizeof(float) * (size_t)n) == 0;
    if (op == AH_OP_ALLREDUCE)
        return bytes >= sizeof(float);
    return 1;
}

static int fail_all(int rank, const char *msg) {
    if (rank == 0)
        fprintf(stderr, "autohet commbench: %s\n", msg);
    MPI_Finalize();
    return AH_EXIT_BAD_INPUT;
}

int cmd_commbench(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
    static const struct option opts[] = {
        {"ops", required_argument, 0, 'o'},      {"min-size", required_argument, 0, 'm'},
        {"max-size", required_argument, 0, 'M'}, {"iters", required_argument, 0, 'i'},
        {"json", required_argument, 0, 'j'},     {0, 0, 0, 0}};
    const char *ops_arg = NULL, *json_path = NULL;
    double min_size = 4, max_size = 256.0 * 1024 * 1024;
    int base_iters = 100, c, bad = 0;
    char msg[256] = "";
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1 && !bad) {
        switch (c) {
        case 'o': ops_arg = optarg; break;
        case 'j': json_path = optarg; break;
        case 'm':
        case 'M':
            if (cli_parse_double(optarg, c == 'm' ? &min_size : &max_size) != 0 ||
                (c == 'm' ? min_size : max_size) < 1) {
                snprintf(msg, sizeof msg, "%s '%s': expected a number of bytes >= 1", argv[optind - 2],
                         optarg);
                bad = 1;
            }
            break;
        case 'i':
            if (cli_parse_int(optarg, &base_iters) != 0 || base_iters < 1) {
                snprintf(msg, sizeof msg, "--iters '%s': expected an integer >= 1", optarg);
                bad = 1;
            }
            break;
        default:
            snprintf(msg, sizeof msg, "unknown or incomplete option '%s' (see autohet commbench --help)",
                     argv[optind - 1]);
            bad = 1;
        }
    }
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (bad)
        return fail_all(rank, msg);
    if (n < 2)
        return fail_all(rank, "needs at least 2 MPI ranks (mpirun -np 2 or more)");
    if (min_size > max_size)
        return fail_all(rank, "--min-size is larger than --max-size");
    {
        char m[4400];
        if (cli_check_output("--json", json_path, m, sizeof m))
            return fail_all(rank, m);
    }
    int want[AH_OP_COUNT];
    for (int i = 0; i < AH_OP_COUNT; i++)
        want[i] = ops_arg == NULL;
    if (ops_arg) {
        char list[256];
        snprintf(list, sizeof list, "%s", ops_arg);
        for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
            ah_comm_op op;
            if (ah_comm_op_parse(tok, &op) != 0) {
                snprintf(msg, sizeof msg,
                         "--ops: unknown operation '%s' (latency, bw, allreduce, allgather, reduce_scatter, "
                         "bcast, alltoall)",
                         tok);
                return fail_all(rank, msg);
            }
            want[op] = 1;
        }
    }
    /* link class: do all ranks (or ranks 0 and 1 for point-to-point) share a node? */
    MPI_Comm shm;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shm);
    int shm_size, node_leader = 0, nodes = 0;
    MPI_Comm_size(shm, &shm_size);
    int shm_rank;
    MPI_Comm_rank(shm, &shm_rank);
    node_leader = shm_rank == 0;
    MPI_Allreduce(MPI_IN_PLACE, &node_leader, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    nodes = node_leader;
    int same01 = 0;
    {
        int color = shm_rank == 0 ? rank : -1, leader = 0;
        MPI_Allreduce(&color, &leader, 1, MPI_INT, MPI_MAX, shm); /* the node leader's world rank */
        int leaders[2] = {0, 0};
        if (rank < 2)
            leaders[rank] = leader + 1;
        MPI_Allreduce(MPI_IN_PLACE, leaders, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        same01 = leaders[0] == leaders[1];
    }
    MPI_Comm_free(&shm);
    const char *class_all = nodes == 1 ? "intra-node" : "inter-node",
               *class_p2p = same01 ? "intra-node" : "inter-node";

    size_t maxb = (size_t)max_size;
    char *sbuf = malloc(maxb + 64), *rbuf = malloc(maxb + 64);
    if (!sbuf || !rbuf) {
        free(sbuf);
        free(rbuf);
        return fail_all(rank, "cannot allocate the message buffers (lower --max-size)");
    }
    memset(sbuf, 1, maxb + 64);
    memset(rbuf, 0, maxb + 64);
    cJSON *root = cJSON_CreateObject(), *results = cJSON_CreateArray(), *fits = cJSON_CreateArray();
    if (rank == 0)
        printf("# autohet commbench: %d ranks on %d node%s; point-to-point between ranks 0 and 1 (%s)\n", n,
               nodes, nodes == 1 ? "" : "s", class_p2p);
    for (int op = 0; op < AH_OP_COUNT; op++) {
        if (!want[op])
            continue;
        size_t sizes[64];
        double avg[64];
        int ns = 0;
        if (rank == 0) {
            printf("\n# %s (%s)\n", ah_comm_op_name((ah_comm_op)op), op <= AH_OP_BW ? class_p2p : class_all);
            printf("%12s %10s %12s %12s %12s %12s %12s\n", "bytes", "iters", "min us", "avg us", "max us",
                   "algbw GB/s", "busbw GB/s");
        }
        for (size_t b = (size_t)min_size; b <= maxb && ns < 64; b *= 2) {
            if (!size_valid((ah_comm_op)op, b, n))
                continue;
            int it = iters_for(b, base_iters), warm = it / 10 + 2;
            for (int w = 0; w < warm; w++)
                run_once((ah_comm_op)op, b, sbuf, rbuf, rank, n);
            double sum = 0;
            for (int k = 0; k < it; k++)
                sum += run_once((ah_comm_op)op, b, sbuf, rbuf, rank, n);
            double mine = sum / it, lo, hi, tot;
            /* point-to-point: only ranks 0 and 1 took part */
            int part = op <= AH_OP_BW ? rank < 2 : 1;
            double v_lo = part ? mine : 1e300, v_hi = part ? mine : 0, v_sum = part ? mine : 0;
            MPI_Allreduce(&v_lo, &lo, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
            MPI_Allreduce(&v_hi, &hi, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            MPI_Allreduce(&v_sum, &tot, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            double mean = tot / (op <= AH_OP_BW ? 2 : n);
            sizes[ns] = b;
            avg[ns] = mean * 1e6;
            ns++;
            if (rank == 0) {
                double algbw = (double)b / mean / 1e9, busbw = algbw * ah_busbw_factor((ah_comm_op)op, n);
                printf("%12zu %10d %12.2f %12.2f %12.2f %12.3f %12.3f\n", b, it, lo * 1e6, mean * 1e6,
                       hi * 1e6, algbw, busbw);
                cJSON *r = cJSON_CreateObject();
                cJSON_AddStringToObject(r, "op", ah_comm_op_name((ah_comm_op)op));
                cJSON_AddStringToObject(r, "link_class", op <= AH_OP_BW ? class_p2p : class_all);
                cJSON_AddNumberToObject(r, "bytes", (double)b);
                cJSON_AddNumberToObject(r, "iters", it);
                cJSON_AddNumberToObject(r, "min_us", lo * 1e6);
                cJSON_AddNumberToObject(r, "avg_us", mean * 1e6);
                cJSON_AddNumberToObject(r, "max_us", hi * 1e6);
                cJSON_AddNumberToObject(r, "algbw_GBps", algbw);
                cJSON_AddNumberToObject(r, "busbw_GBps", busbw);
                cJSON_AddItemToArray(results, r);
            }
        }
        if (rank == 0 && ns > 0) {
            ah_comm_fit f = ah_comm_fit_alpha_beta((ah_comm_op)op, sizes, avg, ns);
            printf("# fit: time = %.2f us + bytes / %.3f GB/s; largest relative error %.1f%% over %d sizes\n",
                   f.alpha_us, f.beta_gbs, 100 * f.max_rel_error, ns);
            cJSON *j = cJSON_CreateObject();
            cJSON_AddStringToObject(j, "op", ah_comm_op_name((ah_comm_op)op));
            cJSON_AddStringToObject(j, "link_class", op <= AH_OP_BW ? class_p2p : class_all);
            cJSON_AddNumberToObject(j, "alpha_us", f.alpha_us);
            cJSON_AddNumberToObject(j, "beta_GBps", f.beta_gbs);
            cJSON_AddNumberToObject(j, "max_rel_error", f.max_rel_error);
            cJSON_AddNumberToObject(j, "sizes", ns);
            cJSON *errs = cJSON_AddArrayToObject(j, "rel_error_per_size");
            for (int i = 0; i < ns; i++) {
                double pred = f.alpha_us + (double)sizes[i] / (f.beta_gbs * 1e3);
                cJSON *e = cJSON_CreateObject();
                cJSON_AddNumberToObject(e, "bytes", (double)sizes[i]);
                cJSON_AddNumberToObject(e, "rel_error", (pred - avg[i]) / avg[i]);
                cJSON_AddItemToArray(errs, e);
            }
            ah_comm_fit2 f2 = ah_comm_fit_two_regimes((ah_comm_op)op, sizes, avg, ns);
            printf(
                "# two regimes: <= %zu B: %.2f us + bytes / %.3f GB/s; larger: %.2f us + bytes / %.3f GB/s; "
                "largest relative error %.1f%%\n",
                f2.split_bytes, f2.small.alpha_us, f2.small.beta_gbs, f2.large.alpha_us, f2.large.beta_gbs,
                100 * f2.max_rel_error);
            cJSON *reg = cJSON_AddArrayToObject(j, "regimes");
            const ah_comm_fit *parts[2] = {&f2.small, &f2.large};
            for (int q = 0; q < 2; q++) {
                cJSON *g = cJSON_CreateObject();
                if (q == 0)
                    cJSON_AddNumberToObject(g, "max_bytes", (double)f2.split_bytes);
                else
                    cJSON_AddNullToObject(g, "max_bytes");
                cJSON_AddNumberToObject(g, "alpha_us", parts[q]->alpha_us);
                cJSON_AddNumberToObject(g, "beta_GBps", parts[q]->beta_gbs);
                cJSON_AddNumberToObject(g, "max_rel_error", parts[q]->max_rel_error);
                cJSON_AddItemToArray(reg, g);
            }
            cJSON_AddNumberToObject(j, "two_regime_max_rel_error", f2.max_rel_error);
            cJSON_AddItemToArray(fits, j);
        }
    }
    int rc = 0;
    if (rank == 0 && json_path) {
        cJSON_AddStringToObject(root, "format", "autohet-comm-profile");
        cJSON_AddNumberToObject(root, "version", 1);
        cJSON_AddNumberToObject(root, "ranks", n);
        cJSON_AddNumberToObject(root, "nodes", nodes);
        cJSON_AddItemToObject(root, "results", results);
        cJSON_AddItemToObject(root, "fits", fits);
        results = fits = NULL;
        char *text = cJSON_Print(root);
        FILE *f = fopen(json_path, "w");
        if (!f || fputs(text, f) < 0) {
            fprintf(stderr, "autohet commbench: cannot write %s\n", json_path);
            rc = 1;
        }
        if (f)
            fclose(f);
        free(text);
    }
    cJSON_Delete(root);
    cJSON_Delete(results);
    cJSON_Delete(fits);
    free(sbuf);
    free(rbuf);
    MPI_Finalize();
    return rc;
}
