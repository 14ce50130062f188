/* Shared links between hosts (commbench.h): several pairs of ranks streaming
 * across one pair of hosts at once, as osu_mbw_mr does, for the aggregate
 * bandwidth the simulator shares among concurrent flows (one flow alone is
 * the bw fit's: a multi-rail node carries more at once than one flow does,
 * a single NIC or a shaper no more). */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "autohet/commbench.h"
#include "util/errors.h"
#include "util/stats.h"

#define SHARED_WINDOW 4
#define SHARED_REPS 3

/* rank r's index among its node's ranks (0 = the node's first rank) */
static int index_on_node(const ah_commbench_topology *t, int r) {
    int i = 0;
    for (int q = 0; q < r; q++)
        i += t->node_of[q] == t->node_of[r];
    return i;
}

static int ranks_on_node(const ah_commbench_topology *t, int k) {
    int n = 0;
    for (int r = 0; r < t->ranks; r++)
        n += t->node_of[r] == k;
    return n;
}

/* the rank with index i on node k; -1 if none */
static int rank_at(const ah_commbench_topology *t, int k, int i) {
    for (int r = 0; r < t->ranks; r++)
        if (t->node_of[r] == k && i-- == 0)
            return r;
    return -1;
}

/* One repetition: the first `flows` ranks of node a each send a window to the rank of the same index on node
 * b, all at once; the slowest pair's seconds (every rank gets it). */
static double stream_once(const ah_commbench_topology *t, const ah_commbench_buffers *buf, int a, int b,
                          int flows, size_t bytes, int rank) {
    int i = index_on_node(t, rank), node = t->node_of[rank], role = 0, peer = -1;
    if (i < flows && node == a)
        role = 1, peer = rank_at(t, b, i);
    else if (i < flows && node == b)
        role = 2, peer = rank_at(t, a, i);
    MPI_Request req[SHARED_WINDOW];
    char ack = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime(), mine = 0, slowest = 0;
    if (role) {
        for (int w = 0; w < SHARED_WINDOW; w++)
            if (role == 1)
                MPI_Isend(buf->send, (int)bytes, MPI_BYTE, peer, 4, MPI_COMM_WORLD, &req[w]);
            else
                MPI_Irecv(buf->recv, (int)bytes, MPI_BYTE, peer, 4, MPI_COMM_WORLD, &req[w]);
        MPI_Waitall(SHARED_WINDOW, req, MPI_STATUSES_IGNORE);
        if (role == 1)
            MPI_Recv(&ack, 1, MPI_BYTE, peer, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        else
            MPI_Send(&ack, 1, MPI_BYTE, peer, 5, MPI_COMM_WORLD);
        mine = MPI_Wtime() - t0;
    }
    MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return slowest;
}

/* GB/s of `flows` pairs streaming at once between nodes a and b: the median repetition after a warm-up */
static double stream_gbs(const ah_commbench_topology *t, const ah_commbench_buffers *buf, int a, int b, int flows,
                         size_t bytes, int rank) {
    double s[SHARED_REPS];
    stream_once(t, buf, a, b, flows, bytes, rank); /* warm-up: connections made */
    for (int k = 0; k < SHARED_REPS; k++)
        s[k] = stream_once(t, buf, a, b, flows, bytes, rank);
    double med = ah_median(s, SHARED_REPS);
    return med > 0 ? (double)flows * SHARED_WINDOW * (double)bytes / med / 1e9 : 0;
}

void ah_commbench_shared_measure(const ah_commbench_topology *t, const ah_commbench_buffers *buf, size_t bytes,
                                 ah_commbench_shared *out) {
    int n = t->nodes, rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    out->nodes = n;
    out->bytes = bytes;
    out->gbs = ah_xcalloc((size_t)n * (size_t)n, sizeof(double));
    out->one_gbs = ah_xcalloc((size_t)n * (size_t)n, sizeof(double));
    out->flows = ah_xcalloc((size_t)n * (size_t)n, sizeof(int));
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++) {
            int na = ranks_on_node(t, a), nb = ranks_on_node(t, b), flows = na < nb ? na : nb;
            if (flows < 2)
                continue;
            /* one flow the same way (window, size) first: their ratio is the link's gain from sharing */
            double one = stream_gbs(t, buf, a, b, 1, bytes, rank), all = stream_gbs(t, buf, a, b, flows, bytes, rank);
            out->one_gbs[a * n + b] = out->one_gbs[b * n + a] = one;
            out->gbs[a * n + b] = out->gbs[b * n + a] = all;
            out->flows[a * n + b] = out->flows[b * n + a] = flows;
        }
}

void ah_commbench_shared_free(ah_commbench_shared *s) {
    free(s->gbs);
    free(s->one_gbs);
    free(s->flows);
    memset(s, 0, sizeof *s);
}
