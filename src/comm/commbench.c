/* The commbench measurement loop (commbench.h). */
#include "comm/commbench.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#define BW_WINDOW 64

void ah_commbench_topology_probe(ah_commbench_topology *t) {
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &t->ranks);
    MPI_Comm shm;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shm);
    int shm_rank;
    MPI_Comm_rank(shm, &shm_rank);
    int leader_here = shm_rank == 0;
    MPI_Allreduce(&leader_here, &t->nodes, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    int color = shm_rank == 0 ? rank : -1, leader = 0;
    MPI_Allreduce(&color, &leader, 1, MPI_INT, MPI_MAX, shm); /* the node leader's world rank */
    int leaders[2] = {0, 0};
    if (rank < 2)
        leaders[rank] = leader + 1;
    MPI_Allreduce(MPI_IN_PLACE, leaders, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    t->p2p_same_node = leaders[0] == leaders[1];
    MPI_Comm_free(&shm);
}

const char *ah_commbench_link_class(const ah_commbench_topology *t, ah_comm_op op) {
    int same = op <= AH_OP_BW ? t->p2p_same_node : t->nodes == 1;
    return same ? "intra-node" : "inter-node";
}

int ah_commbench_buffers_alloc(ah_commbench_buffers *b, size_t max_bytes) {
    b->max_bytes = max_bytes;
    b->send = malloc(max_bytes + 64);
    b->recv = malloc(max_bytes + 64);
    if (!b->send || !b->recv) {
        ah_commbench_buffers_free(b);
        return -1;
    }
    memset(b->send, 1, max_bytes + 64);
    memset(b->recv, 0, max_bytes + 64);
    return 0;
}

void ah_commbench_buffers_free(ah_commbench_buffers *b) {
    free(b->send);
    free(b->recv);
    b->send = b->recv = NULL;
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

int ah_commbench_sizes(ah_comm_op op, size_t min_bytes, size_t max_bytes, int n, size_t *sizes, int max) {
    int ns = 0;
    for (size_t b = min_bytes; b <= max_bytes && ns < max; b *= 2)
        if (size_valid(op, b, n))
            sizes[ns++] = b;
    return ns;
}

int ah_commbench_iters(size_t bytes, int base) {
    long it = (long)base;
    if (bytes > 65536)
        it = (long)((double)base * 65536.0 / (double)bytes);
    return it < 3 ? 3 : (int)it;
}

/* one point-to-point iteration between ranks 0 and 1: its seconds on this rank */
static double p2p_once(ah_comm_op op, size_t bytes, char *sbuf, char *rbuf, int rank) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    if (op == AH_OP_LATENCY) {
        if (rank == 0) {
            MPI_Send(sbuf, (int)bytes, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
            MPI_Recv(rbuf, (int)bytes, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
            MPI_Recv(rbuf, (int)bytes, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(sbuf, (int)bytes, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
        }
        return (MPI_Wtime() - t0) / 2; /* one way */
    }
    MPI_Request req[BW_WINDOW];
    char ack = 0;
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
    return (MPI_Wtime() - t0) / BW_WINDOW; /* per message */
}

/* One iteration of op; returns its seconds on this rank. */
static double run_once(ah_comm_op op, size_t bytes, char *sbuf, char *rbuf, int rank, int n) {
    if (op == AH_OP_LATENCY || op == AH_OP_BW)
        return p2p_once(op, bytes, sbuf, rbuf, rank);
    int cnt = (int)(bytes / sizeof(float));
    if (cnt < 1)
        cnt = 1;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
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
    return MPI_Wtime() - t0;
}

void ah_commbench_measure(ah_comm_op op, size_t bytes, int iters, const ah_commbench_buffers *b,
                          ah_comm_result *out) {
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    int warm = iters / 10 + 2;
    for (int w = 0; w < warm; w++)
        run_once(op, bytes, b->send, b->recv, rank, n);
    double sum = 0;
    for (int k = 0; k < iters; k++)
        sum += run_once(op, bytes, b->send, b->recv, rank, n);
    double mine = sum / iters, lo, hi, tot;
    /* point-to-point: only ranks 0 and 1 took part */
    int p2p = op <= AH_OP_BW, part = p2p ? rank < 2 : 1;
    double v_lo = part ? mine : 1e300, v_hi = part ? mine : 0, v_sum = part ? mine : 0;
    MPI_Allreduce(&v_lo, &lo, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&v_hi, &hi, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&v_sum, &tot, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    double mean = tot / (p2p ? 2 : n);
    memset(out, 0, sizeof *out);
    out->op = op;
    out->bytes = bytes;
    out->iters = iters;
    out->min_us = lo * 1e6;
    out->avg_us = mean * 1e6;
    out->max_us = hi * 1e6;
    out->algbw_gbs = (double)bytes / mean / 1e9;
    out->busbw_gbs = out->algbw_gbs * ah_busbw_factor(op, n);
}

cJSON *ah_commbench_result_json(const ah_comm_result *res, const char *link_class) {
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "op", ah_comm_op_name(res->op));
    cJSON_AddStringToObject(r, "link_class", link_class);
    cJSON_AddNumberToObject(r, "bytes", (double)res->bytes);
    cJSON_AddNumberToObject(r, "iters", res->iters);
    cJSON_AddNumberToObject(r, "min_us", res->min_us);
    cJSON_AddNumberToObject(r, "avg_us", res->avg_us);
    cJSON_AddNumberToObject(r, "max_us", res->max_us);
    cJSON_AddNumberToObject(r, "algbw_GBps", res->algbw_gbs);
    cJSON_AddNumberToObject(r, "busbw_GBps", res->busbw_gbs);
    return r;
}

cJSON *ah_commbench_fit_json(ah_comm_op op, const char *link_class, const ah_comm_fit *f,
                             const ah_comm_fit2 *f2, const size_t *sizes, const double *avg_us, int n) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "op", ah_comm_op_name(op));
    cJSON_AddStringToObject(j, "link_class", link_class);
    cJSON_AddNumberToObject(j, "alpha_us", f->alpha_us);
    cJSON_AddNumberToObject(j, "beta_GBps", f->beta_gbs);
    cJSON_AddNumberToObject(j, "max_rel_error", f->max_rel_error);
    cJSON_AddNumberToObject(j, "sizes", n);
    cJSON *errs = cJSON_AddArrayToObject(j, "rel_error_per_size");
    for (int i = 0; i < n; i++) {
        double pred = f->alpha_us + (double)sizes[i] / (f->beta_gbs * 1e3);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "bytes", (double)sizes[i]);
        cJSON_AddNumberToObject(e, "rel_error", (pred - avg_us[i]) / avg_us[i]);
        cJSON_AddItemToArray(errs, e);
    }
    cJSON *reg = cJSON_AddArrayToObject(j, "regimes");
    const ah_comm_fit *parts[2] = {&f2->small, &f2->large};
    for (int q = 0; q < 2; q++) {
        cJSON *g = cJSON_CreateObject();
        if (q == 0)
            cJSON_AddNumberToObject(g, "max_bytes", (double)f2->split_bytes);
        else
            cJSON_AddNullToObject(g, "max_bytes");
        cJSON_AddNumberToObject(g, "alpha_us", parts[q]->alpha_us);
        cJSON_AddNumberToObject(g, "beta_GBps", parts[q]->beta_gbs);
        cJSON_AddNumberToObject(g, "max_rel_error", parts[q]->max_rel_error);
        cJSON_AddItemToArray(reg, g);
    }
    cJSON_AddNumberToObject(j, "two_regime_max_rel_error", f2->max_rel_error);
    return j;
}

cJSON *ah_commbench_profile_json(const ah_commbench_topology *t, cJSON *results, cJSON *fits) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", "autohet-comm-profile");
    cJSON_AddNumberToObject(root, "version", 1);
    cJSON_AddNumberToObject(root, "ranks", t->ranks);
    cJSON_AddNumberToObject(root, "nodes", t->nodes);
    cJSON_AddItemToObject(root, "results", results);
    cJSON_AddItemToObject(root, "fits", fits);
    return root;
}
