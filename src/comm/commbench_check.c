/* The correctness check of commbench (commbench.h): every rank's input holds
 * values of its rank and the element's index, small integers so that float
 * sums are exact in any order; after one run every element of every result
 * is compared with the value it must have (nccl-tests' #wrong). */
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "autohet/commbench.h"

static float fval(int r, size_t i) {
    return (float)(((unsigned)r * 131u + (unsigned)(i % 100003u) * 7u) % 97u + 1u);
}

static uint8_t bval(int r, size_t i) {
    return (uint8_t)((unsigned)r * 31u + (unsigned)i * 7u + 1u);
}

/* where op reads this rank's input from, in floats (point-to-point: bytes) */
static char *input_of(const ah_commbench_case *c, const ah_commbench_buffers *b, int rank, size_t blk) {
    if (!c->in_place && c->op != AH_OP_BCAST)
        return b->send;
    return c->op == AH_OP_ALLGATHER ? b->recv + (size_t)rank * blk * sizeof(float) : b->recv;
}

/* fills the input (and clears the output) of this rank */
static void fill(const ah_commbench_case *c, const ah_commbench_buffers *b, int rank, int n) {
    size_t cnt = ah_commbench_count(c->op, c->bytes), blk = cnt / (size_t)n;
    memset(b->recv, 0xff, c->bytes);
    char *in = input_of(c, b, rank, blk);
    if (c->op <= AH_OP_BW) {
        for (size_t i = 0; i < cnt; i++)
            ((uint8_t *)in)[i] = bval(rank, i);
        if (c->in_place && rank != c->src) /* dst's one buffer is what it receives into */
            memset(b->recv, 0, c->bytes);
        return;
    }
    size_t mine = c->op == AH_OP_ALLGATHER ? blk : cnt;
    if (c->op == AH_OP_BCAST && rank != ah_commbench_root(c->op))
        return;
    for (size_t i = 0; i < mine; i++)
        ((float *)in)[i] = fval(rank, i);
}

/* the value element i of this rank's result must have */
static float expected(const ah_commbench_case *c, int rank, int n, size_t i, size_t blk) {
    float s = 0;
    switch (c->op) {
    case AH_OP_ALLREDUCE:
        for (int r = 0; r < n; r++)
            s += fval(r, i);
        return s;
    case AH_OP_REDUCE_SCATTER:
        for (int r = 0; r < n; r++)
            s += fval(r, (size_t)rank * blk + i);
        return s;
    case AH_OP_ALLGATHER: return fval((int)(i / blk), i % blk);
    case AH_OP_ALLTOALL: return fval((int)(i / blk), (size_t)rank * blk + i % blk);
    default: return fval(ah_commbench_root(c->op), i); /* broadcast */
    }
}

static long count_wrong(const ah_commbench_case *c, const ah_commbench_buffers *b, int rank, int n) {
    size_t cnt = ah_commbench_count(c->op, c->bytes), blk = cnt / (size_t)n;
    long wrong = 0;
    if (c->op <= AH_OP_BW) {
        if (rank == c->dst)
            for (size_t i = 0; i < cnt; i++)
                wrong += ((const uint8_t *)b->recv)[i] != bval(c->src, i);
        return wrong;
    }
    size_t out = c->op == AH_OP_REDUCE_SCATTER ? blk : cnt;
    for (size_t i = 0; i < out; i++)
        wrong += ((const float *)b->recv)[i] != expected(c, rank, n, i, blk);
    return wrong;
}

long ah_commbench_check(const ah_commbench_case *c, const ah_commbench_buffers *b) {
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    fill(c, b, rank, n);
    const char *hook = getenv(AH_COMMBENCH_CORRUPT_ENV);
    if (hook && *hook && atoi(hook) == rank) { /* the test hook: one element of my input changes */
        char *in = input_of(c, b, rank, ah_commbench_count(c->op, c->bytes) / (size_t)n);
        if (c->op <= AH_OP_BW)
            in[0] ^= 0x5a;
        else
            ((float *)in)[0] += 1000.0f;
    }
    ah_commbench_run_once(c, b);
    long mine = count_wrong(c, b, rank, n), all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    return all;
}
