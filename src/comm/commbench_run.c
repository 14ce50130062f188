/* Running and timing one commbench case (commbench.h): the operations, the
 * barrier and window synchronisation, per-repetition times and statistics. */
#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "autohet/commbench.h"
#include "util/errors.h"

#define BW_WINDOW 64
#define CLOCK_PINGS 20

/* Point-to-point between c->src and c->dst (others idle): the one-way time
 * of a ping-pong (osu_latency) or the time per message of a window of
 * non-blocking sends, acknowledged (osu_bw); seconds from t0. In place: one
 * buffer sends and receives. */
static double p2p_once(const ah_commbench_case *c, char *sbuf, char *rbuf, int rank, int batch, double t0) {
    int bytes = (int)c->bytes, src = c->src, dst = c->dst;
    if (c->in_place)
        sbuf = rbuf;
    if (c->op == AH_OP_LATENCY) {
        for (int k = 0; k < batch; k++)
            if (rank == src) {
                MPI_Send(sbuf, bytes, MPI_BYTE, dst, 1, MPI_COMM_WORLD);
                MPI_Recv(rbuf, bytes, MPI_BYTE, dst, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else if (rank == dst) {
                MPI_Recv(rbuf, bytes, MPI_BYTE, src, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(sbuf, bytes, MPI_BYTE, src, 1, MPI_COMM_WORLD);
            }
        return (MPI_Wtime() - t0) / (2.0 * batch);
    }
    MPI_Request req[BW_WINDOW];
    char ack = 0;
    for (int k = 0; k < batch; k++)
        if (rank == src) {
            for (int w = 0; w < BW_WINDOW; w++)
                MPI_Isend(sbuf, bytes, MPI_BYTE, dst, 2, MPI_COMM_WORLD, &req[w]);
            MPI_Waitall(BW_WINDOW, req, MPI_STATUSES_IGNORE);
            MPI_Recv(&ack, 1, MPI_BYTE, dst, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == dst) {
            for (int w = 0; w < BW_WINDOW; w++)
                MPI_Irecv(rbuf, bytes, MPI_BYTE, src, 2, MPI_COMM_WORLD, &req[w]);
            MPI_Waitall(BW_WINDOW, req, MPI_STATUSES_IGNORE);
            MPI_Send(&ack, 1, MPI_BYTE, src, 3, MPI_COMM_WORLD);
        }
    return (MPI_Wtime() - t0) / ((double)BW_WINDOW * batch);
}

/* One collective call (bytes: the nccl-tests size of the op, docs/commbench.md) */
static void collective_once(const ah_commbench_case *c, char *sbuf, char *rbuf, int n) {
    int cnt = (int)(c->bytes / sizeof(float)), blk = cnt / n;
    const void *in = c->in_place ? MPI_IN_PLACE : sbuf;
    switch (c->op) {
    case AH_OP_ALLREDUCE: MPI_Allreduce(in, rbuf, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
    case AH_OP_ALLGATHER: MPI_Allgather(in, blk, MPI_FLOAT, rbuf, blk, MPI_FLOAT, MPI_COMM_WORLD); break;
    case AH_OP_REDUCE_SCATTER:
        if (c->in_place) /* the input is the receive buffer, the result its first block */
            MPI_Reduce_scatter_block(MPI_IN_PLACE, rbuf, blk, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        else
            MPI_Reduce_scatter_block(sbuf, rbuf, blk, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
    case AH_OP_BCAST: MPI_Bcast(rbuf, cnt, MPI_FLOAT, 0, MPI_COMM_WORLD); break; /* always in place */
    case AH_OP_ALLTOALL: MPI_Alltoall(in, blk, MPI_FLOAT, rbuf, blk, MPI_FLOAT, MPI_COMM_WORLD); break;
    default: break;
    }
}

/* One repetition from t0 (this rank's clock): `batch` operations back to
 * back; the seconds per operation on this rank */
static double run_from(const ah_commbench_case *c, char *sbuf, char *rbuf, int rank, int n, int batch,
                       double t0) {
    if (c->op <= AH_OP_BW)
        return p2p_once(c, sbuf, rbuf, rank, batch, t0);
    for (int k = 0; k < batch; k++)
        collective_once(c, sbuf, rbuf, n);
    return (MPI_Wtime() - t0) / batch;
}

static double run_barrier(const ah_commbench_case *c, const ah_commbench_buffers *b, int rank, int n,
                          int batch) {
    MPI_Barrier(MPI_COMM_WORLD);
    return run_from(c, b->send, b->recv, rank, n, batch, MPI_Wtime());
}

void ah_commbench_run_once(const ah_commbench_case *c, const ah_commbench_buffers *b) {
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    run_barrier(c, b, rank, n, 1);
}

/* --batch auto: operations per repetition so that one lasts about
 * AH_COMMBENCH_BATCH_TARGET_US, from the fastest of a few single
 * operations (the slowest rank's time; the same on every rank) */
static int auto_batch(const ah_commbench_case *c, const ah_commbench_buffers *b, int rank, int n) {
    double best = INFINITY, t, slow;
    for (int k = 0; k < 5; k++) {
        t = run_barrier(c, b, rank, n, 1);
        MPI_Allreduce(&t, &slow, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        best = fmin(best, slow);
    }
    double per_rep = c->op == AH_OP_LATENCY ? 2 * best : c->op == AH_OP_BW ? BW_WINDOW * best : best;
    double k = ceil(AH_COMMBENCH_BATCH_TARGET_US * 1e-6 / fmax(per_rep, 1e-9));
    return k < 1 ? 1 : k > AH_COMMBENCH_MAX_BATCH ? AH_COMMBENCH_MAX_BATCH : (int)k;
}

/* This rank's clock offset to rank 0 (global = MPI_Wtime() + offset): per
 * rank, ping-pongs with rank 0, the one of the shortest round trip (its
 * midpoint against rank 0's reading). Collective. */
static double clock_offset(int rank, int n) {
    double offset = 0;
    for (int r = 1; r < n; r++) {
        double best_rtt = INFINITY;
        for (int k = 0; k < CLOCK_PINGS; k++) {
            double t_remote = 0, t1 = 0;
            if (rank == r) {
                t1 = MPI_Wtime();
                MPI_Send(&t1, 1, MPI_DOUBLE, 0, 9, MPI_COMM_WORLD);
                MPI_Recv(&t_remote, 1, MPI_DOUBLE, 0, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                double t2 = MPI_Wtime();
                if (t2 - t1 < best_rtt) {
                    best_rtt = t2 - t1;
                    offset = t_remote - 0.5 * (t1 + t2);
                }
            } else if (rank == 0) {
                MPI_Recv(&t1, 1, MPI_DOUBLE, r, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                t_remote = MPI_Wtime();
                MPI_Send(&t_remote, 1, MPI_DOUBLE, r, 9, MPI_COMM_WORLD);
            }
        }
    }
    return offset;
}

#define WINDOW_ROUND 10 /* repetitions per broadcast start time: a late rank spoils at most a round */

/* Window synchronisation: in rounds of WINDOW_ROUND repetitions, repetition k
 * starts at the round's global start + (k - first) * window; mine[k] = this
 * rank's seconds from that start, late[k] = it started late. */
static void run_windows(const ah_commbench_case *c, const ah_commbench_buffers *b, int rank, int n, int batch,
                        double window, double *mine, int *late) {
    double offset = clock_offset(rank, n);
    for (int first = 0; first < c->iters; first += WINDOW_ROUND) {
        double start = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0)
            start = MPI_Wtime() + 100e-6 + 20e-6 * n; /* time for the broadcast to arrive */
        MPI_Bcast(&start, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        for (int k = first; k < c->iters && k < first + WINDOW_ROUND; k++) {
            double t_start = start + (k - first) * window - offset; /* on my clock */
            double now = MPI_Wtime();
            late[k] = now > t_start; /* ReproMPI: a late start invalidates the repetition */
            while (now < t_start)
                now = MPI_Wtime();
            mine[k] = run_from(c, b->send, b->recv, rank, n, batch, t_start);
        }
    }
}

/* Window mode: windows of twice the warm-up's slowest repetition (+20 us),
 * widened 4x and run again while fewer than half the repetitions are valid
 * (at most 3 tries). any_late[] gets the verdict per repetition. */
static void measure_windows(const ah_commbench_case *c, const ah_commbench_buffers *b, int rank, int n,
                            int batch, double slow_warm, double *mine, int *late, int *any_late) {
    double w = 0;
    MPI_Allreduce(&slow_warm, &w, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    /* a time is per operation (a point-to-point one per message): a
     * repetition lasts its batch of round trips or windows */
    double rep_len = batch * (c->op == AH_OP_LATENCY ? 2 * w : c->op == AH_OP_BW ? BW_WINDOW * w : w);
    double window = 2 * rep_len + 20e-6;
    for (int attempt = 0; attempt < 3; attempt++, window *= 4) {
        run_windows(c, b, rank, n, batch, window, mine, late);
        MPI_Allreduce(late, any_late, c->iters, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        int valid = 0;
        for (int k = 0; k < c->iters; k++)
            valid += !any_late[k];
        if (2 * valid >= c->iters)
            break;
    }
}

void ah_commbench_samples_init(ah_commbench_samples *s, int cap) {
    memset(s, 0, sizeof *s);
    s->cap = cap > 0 ? cap : 1;
    s->slowest_us = ah_xcalloc((size_t)s->cap, sizeof(double));
}

void ah_commbench_samples_free(ah_commbench_samples *s) {
    free(s->slowest_us);
    memset(s, 0, sizeof *s);
}

void ah_commbench_sample(const ah_commbench_case *c, const ah_commbench_buffers *b, ah_commbench_samples *s) {
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    /* a later round's call warms up once: the caches after another size */
    int it = c->iters, warm = s->iters ? 1 : it / 10 + 2;
    int part = c->op <= AH_OP_BW ? rank == c->src || rank == c->dst : 1;
    if (s->batch < 1) /* the first call fixes it; auto batches point-to-point only, as OSU */
        s->batch = c->batch > 0 ? c->batch : c->op <= AH_OP_BW ? auto_batch(c, b, rank, n) : 1;
    double slow_warm = 0, t;
    for (int w = 0; w < warm; w++) {
        t = run_barrier(c, b, rank, n, s->batch);
        slow_warm = t > slow_warm ? t : slow_warm;
    }
    double *mine = ah_xcalloc((size_t)it, sizeof(double)), *slowest = ah_xcalloc((size_t)it, sizeof(double));
    int *late = ah_xcalloc((size_t)it, sizeof(int)), *any_late = ah_xcalloc((size_t)it, sizeof(int));
    if (c->sync == AH_SYNC_WINDOW)
        measure_windows(c, b, rank, n, s->batch, slow_warm, mine, late, any_late);
    else
        for (int k = 0; k < it; k++)
            mine[k] = run_barrier(c, b, rank, n, s->batch);
    /* the valid repetitions only (all of them with a barrier) */
    int valid = 0;
    for (int k = 0; k < it; k++) {
        if (any_late[k])
            continue;
        s->my_sum += mine[k];
        s->my_count++;
        slowest[valid++] = part ? mine[k] : 0;
    }
    double *slow_all = ah_xcalloc((size_t)(valid > 0 ? valid : 1), sizeof(double));
    MPI_Allreduce(slowest, slow_all, valid, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    for (int k = 0; k < valid && s->n_valid < s->cap; k++)
        s->slowest_us[s->n_valid++] = slow_all[k] * 1e6;
    s->iters += it;
    s->invalid += it - valid;
    s->participates = part;
    free(slow_all);
    free(mine);
    free(slowest);
    free(late);
    free(any_late);
}

int ah_commbench_summarize(const ah_commbench_case *c, const ah_commbench_samples *s, ah_comm_result *out,
                           double *rep_us) {
    int n;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    int part = s->participates;
    double my_mean = s->my_count ? s->my_sum / s->my_count : 0;
    double v[3] = {part ? my_mean : 1e300, part ? -my_mean : 1e300, part ? my_mean : 0}, lo_hi[2], tot;
    MPI_Allreduce(v, lo_hi, 2, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&v[2], &tot, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    double mean = tot / (c->op <= AH_OP_BW ? 2 : n);
    memset(out, 0, sizeof *out);
    out->op = c->op;
    out->bytes = c->bytes;
    out->iters = s->iters;
    out->batch = s->batch;
    out->invalid = s->invalid;
    out->min_us = lo_hi[0] * 1e6;
    out->avg_us = mean * 1e6;
    out->max_us = -lo_hi[1] * 1e6;
    out->algbw_gbs = mean > 0 ? (double)c->bytes / mean / 1e9 : 0;
    out->busbw_gbs = out->algbw_gbs * ah_busbw_factor(c->op, n);
    double *sorted = ah_xcalloc((size_t)(s->n_valid > 0 ? s->n_valid : 1), sizeof(double));
    memcpy(sorted, s->slowest_us, sizeof(double) * (size_t)s->n_valid);
    if (rep_us) /* in measurement order */
        memcpy(rep_us, s->slowest_us, sizeof(double) * (size_t)s->n_valid);
    ah_comm_stats st = ah_comm_median_ci(sorted, s->n_valid);
    free(sorted);
    out->median_us = st.median;
    out->ci_low_us = st.ci_low;
    out->ci_high_us = st.ci_high;
    out->p25_us = st.p25;
    return s->n_valid;
}
