/* The MPI level of the stack breakdown (autohet/trace_analysis.h,
 * docs/analyze.md): which all-reduce algorithm Open MPI 4.1's tuned
 * collective component runs for a message, and its alpha-beta cost on the
 * measured links.
 *
 * The decision table restates the commutative branch of
 * ompi_coll_tuned_allreduce_intra_dec_fixed (Open MPI v4.1.x,
 * ompi/mca/coll/tuned/coll_tuned_decision_fixed.c); the costs follow the
 * message pattern of each algorithm in ompi/mca/coll/base/coll_base_allreduce.c
 * (Thakur, Rabenseifner and Gropp's analysis), message by message through the
 * piecewise link model, so a step of small messages is costed in the eager
 * regime and one of large messages in the rendezvous regime. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "autohet/trace_analysis.h"
#include "util/errors.h"
#include "util/json_file.h"

static const char *alg_names[AH_MPI_ALGS] = {"ignore", "basic_linear",   "nonoverlapping", "recursive_doubling",
                                             "ring",   "segmented_ring", "rabenseifner",   "sendrecv"};

const char *ah_mpi_alg_name(ah_mpi_alg a) {
    return a >= 0 && a < AH_MPI_ALGS ? alg_names[a] : "?";
}

int ah_mpi_allreduce_alg_parse(const char *s) {
    for (int i = 0; i < AH_MPI_SENDRECV; i++)
        if (!strcmp(s, alg_names[i]) || (s[0] == '0' + i && s[1] == '\0'))
            return i;
    return -1;
}

/* One row of the decision table: communicators below max_comm ranks; the
 * first threshold the size is below picks its algorithm, else `beyond`. */
typedef struct {
    int max_comm;
    int n;
    double below[7];
    int alg[7]; /* ah_mpi_alg */
    int beyond;
} decision_row;

enum { BL = AH_MPI_AR_BASIC_LINEAR, NO = AH_MPI_AR_NONOVERLAPPING, RD = AH_MPI_AR_RECURSIVE_DOUBLING,
       RI = AH_MPI_AR_RING, SR = AH_MPI_AR_SEGMENTED_RING, RA = AH_MPI_AR_RABENSEIFNER };

static const decision_row rules[] = {
    {4, 6, {8, 4096, 8192, 16384, 65536, 262144}, {RI, RD, RI, RD, RI, SR}, RA},
    {8, 2, {16, 8192}, {RI, RD}, RA},
    {16, 1, {8192}, {RD}, RA},
    {32, 2, {64, 4096}, {SR, RD}, RA},
    {64, 1, {128}, {SR}, RA},
    {128, 1, {262144}, {RD}, RA},
    {256, 2, {131072, 262144}, {NO, RD}, RA},
    {512, 1, {4096}, {NO}, RA},
    {2048, 2, {2048, 16384}, {NO, RD}, RA},
    {4096, 3, {2048, 4096, 16384}, {NO, SR, RD}, RA},
    {1 << 30, 3, {2048, 16384, 32768}, {NO, SR, RD}, RA},
};

ah_mpi_alg ah_mpi_allreduce_decide(int comm_size, double bytes) {
    size_t k = 0;
    while (k + 1 < sizeof rules / sizeof rules[0] && comm_size >= rules[k].max_comm)
        k++;
    for (int i = 0; i < rules[k].n; i++)
        if (bytes < rules[k].below[i])
            return (ah_mpi_alg)rules[k].alg[i];
    return (ah_mpi_alg)rules[k].beyond;
}

static int floor_log2(int p) {
    int k = 0;
    while ((2 << k) <= p)
        k++;
    return k;
}

/* recursive doubling: log2 of the power of two below p exchanges of the
 * whole vector; the ranks beyond it first give theirs to a partner and get
 * the result back at the end (two more messages) */
static double recursive_doubling_us(int p, double n, const ah_link_model *m) {
    int k = floor_log2(p);
    return (k + ((1 << k) != p ? 2 : 0)) * ah_link_us(m, n);
}

/* ring: p - 1 reduce-scatter and p - 1 all-gather steps of one block
 * (the early blocks are ceil(count / p) elements) */
static double ring_us(int p, double count, int ts, const ah_link_model *m) {
    return 2.0 * (p - 1) * ah_link_us(m, ceil(count / p) * ts);
}

/* Rabenseifner (reduce-scatter by recursive halving, all-gather by recursive
 * doubling); p not a power of two: the extra ranks' halves are exchanged and
 * reduced first (two half-vector messages) and the result sent back last */
static double rabenseifner_us(int p, double n, const ah_link_model *m) {
    int k = floor_log2(p);
    double t = (1 << k) != p ? 2 * ah_link_us(m, n / 2) + ah_link_us(m, n) : 0;
    for (int s = 1; s <= k; s++)
        t += 2 * ah_link_us(m, n / (double)(1 << s));
    return t;
}

double ah_mpi_alg_us(ah_mpi_alg alg, int p, double n, int ts, double seg, const ah_link_model *m, ah_mpi_alg *ran) {
    double count = ts > 0 ? floor(n / ts) : n;
    if (p < 2) {
        *ran = alg;
        return 0;
    }
    if (alg == AH_MPI_AR_DECIDE)
        alg = ah_mpi_allreduce_decide(p, n);
    double segcount = count;
    if (alg == AH_MPI_AR_SEGMENTED_RING && seg >= ts && seg < ts * count)
        segcount = floor(seg / ts);
    if (alg == AH_MPI_AR_SEGMENTED_RING && count < p * segcount)
        alg = AH_MPI_AR_RING; /* no segment size, or a vector below p segments */
    if (alg == AH_MPI_AR_RING && count < p)
        alg = AH_MPI_AR_RECURSIVE_DOUBLING;
    if (alg == AH_MPI_AR_RABENSEIFNER && count < (1 << floor_log2(p)))
        alg = AH_MPI_AR_BASIC_LINEAR;
    *ran = alg;
    switch (alg) {
    case AH_MPI_AR_BASIC_LINEAR: /* linear reduce to rank 0, linear broadcast */
        return 2.0 * (p - 1) * ah_link_us(m, n);
    case AH_MPI_AR_NONOVERLAPPING: /* reduce + broadcast, costed as binomial trees */
        return 2.0 * (floor_log2(p) + ((1 << floor_log2(p)) != p)) * ah_link_us(m, n);
    case AH_MPI_AR_RECURSIVE_DOUBLING: return recursive_doubling_us(p, n, m);
    case AH_MPI_AR_RING: return ring_us(p, count, ts, m);
    case AH_MPI_AR_SEGMENTED_RING: {
        double phases = floor(count / (p * segcount)), rest = fmod(count, p * segcount);
        if (rest >= p && rest > p * segcount / 2)
            phases++;
        return phases * ring_us(p, ceil(count / phases), ts, m);
    }
    case AH_MPI_AR_RABENSEIFNER: return rabenseifner_us(p, n, m);
    case AH_MPI_SENDRECV: return ah_link_us(m, n);
    default: return 0;
    }
}
