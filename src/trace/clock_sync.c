/* Clock synchronisation of the ranks of a trace (trace/clock_sync.h). */
#include "trace/clock_sync.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int ah_clock_best_round(const ah_clock_round *r, int n, ah_clock_estimate *out) {
    int best = -1;
    for (int i = 0; i < n; i++) {
        double rtt = r[i].t_recv - r[i].t_send;
        if (!isfinite(r[i].t_send) || !isfinite(r[i].t_remote) || !isfinite(r[i].t_recv) || !(rtt >= 0))
            continue;
        if (best < 0 || rtt < r[best].t_recv - r[best].t_send)
            best = i;
    }
    if (best < 0)
        return -1;
    double rtt = r[best].t_recv - r[best].t_send, mid = r[best].t_send + 0.5 * rtt;
    *out = (ah_clock_estimate){
        .t_ref = mid, .offset_s = r[best].t_remote - mid, .rtt_s = rtt, .residual_s = 0.5 * rtt, .rounds = n};
    return 0;
}

void ah_clock_fit(const ah_clock_estimate *start, const ah_clock_estimate *end, ah_clock_map *m) {
    memset(m, 0, sizeof *m);
    m->t_start = m->t_end = start->t_ref;
    m->offset_start_s = m->offset_end_s = start->offset_s;
    m->residual_s = start->residual_s;
    m->rtt_s = start->rtt_s;
    m->rounds = start->rounds;
    if (!end)
        return;
    m->t_end = end->t_ref;
    m->offset_end_s = end->offset_s;
    m->residual_s = end->residual_s > m->residual_s ? end->residual_s : m->residual_s;
    m->rtt_s = end->rtt_s < m->rtt_s ? end->rtt_s : m->rtt_s;
    if (end->t_ref > start->t_ref)
        m->drift = (end->offset_s - start->offset_s) / (end->t_ref - start->t_ref);
}

double ah_clock_offset_at(const ah_clock_map *m, double t_ref) {
    return m->offset_start_s + m->drift * (t_ref - m->t_start);
}

double ah_clock_to_local(const ah_clock_map *m, double t_ref) {
    return t_ref + ah_clock_offset_at(m, t_ref);
}

/* L = G + o + d (G - t) solved for G */
double ah_clock_to_ref(const ah_clock_map *m, double t_local) {
    return m->t_start + (t_local - m->offset_start_s - m->t_start) / (1.0 + m->drift);
}

/* ------------------------------------------------------------ measuring */

enum { TAG_TURN = 1, TAG_PING, TAG_PONG, TAG_DONE };

/* wait for a request without spinning on a core another pair needs */
static int sleepy_wait(MPI_Request *rq) {
    const struct timespec nap = {0, 50000};
    for (;;) {
        int done = 0, rc = MPI_Test(rq, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS || done)
            return rc;
        nanosleep(&nap, NULL);
    }
}

/* rank 0's side with rank r: `rounds` ping-pongs, the best kept in *est */
static int measure_one(MPI_Comm c, int r, int rounds, double (*now)(void), ah_clock_round *buf,
                       ah_clock_estimate *est) {
    char go = 1;
    int rc = MPI_Send(&go, 1, MPI_CHAR, r, TAG_TURN, c);
    for (int i = 0; rc == MPI_SUCCESS && i < rounds; i++) {
        double t_remote = 0, t_send = now();
        rc = MPI_Send(&go, 1, MPI_CHAR, r, TAG_PING, c);
        if (rc == MPI_SUCCESS)
            rc = MPI_Recv(&t_remote, 1, MPI_DOUBLE, r, TAG_PONG, c, MPI_STATUS_IGNORE);
        buf[i] = (ah_clock_round){t_send, t_remote, now()};
    }
    if (rc == MPI_SUCCESS && ah_clock_best_round(buf, rounds, est) != 0)
        memset(est, 0, sizeof *est);
    return rc;
}

/* a remote rank's side: sleep until its turn, answer every ping with its
 * clock, sleep until rank 0 is done with everyone */
static int answer(MPI_Comm c, int rounds, double (*now)(void)) {
    char go = 0;
    MPI_Request rq;
    int rc = MPI_Irecv(&go, 1, MPI_CHAR, 0, TAG_TURN, c, &rq);
    if (rc == MPI_SUCCESS)
        rc = sleepy_wait(&rq);
    for (int i = 0; rc == MPI_SUCCESS && i < rounds; i++) {
        rc = MPI_Recv(&go, 1, MPI_CHAR, 0, TAG_PING, c, MPI_STATUS_IGNORE);
        double t = now();
        if (rc == MPI_SUCCESS)
            rc = MPI_Send(&t, 1, MPI_DOUBLE, 0, TAG_PONG, c);
    }
    if (rc == MPI_SUCCESS)
        rc = MPI_Irecv(&go, 1, MPI_CHAR, 0, TAG_DONE, c, &rq);
    if (rc == MPI_SUCCESS)
        rc = sleepy_wait(&rq);
    return rc;
}

int ah_clock_sync_measure(MPI_Comm comm, int rounds, double (*now)(void), ah_clock_estimate *est) {
    MPI_Comm c;
    int rc = MPI_Comm_dup(comm, &c), me = 0, size = 1;
    if (rc != MPI_SUCCESS)
        return rc;
    MPI_Comm_rank(c, &me);
    MPI_Comm_size(c, &size);
    rounds = rounds < 1 ? 1 : rounds;
    if (me != 0) {
        rc = answer(c, rounds, now);
    } else {
        ah_clock_round *buf = calloc((size_t)rounds, sizeof *buf);
        if (!buf)
            abort();
        est[0] = (ah_clock_estimate){.t_ref = now(), .rounds = rounds}; /* rank 0 against itself */
        for (int r = 1; rc == MPI_SUCCESS && r < size; r++)
            rc = measure_one(c, r, rounds, now, buf, &est[r]);
        char done = 1;
        for (int r = 1; rc == MPI_SUCCESS && r < size; r++)
            rc = MPI_Send(&done, 1, MPI_CHAR, r, TAG_DONE, c);
        free(buf);
    }
    MPI_Comm_free(&c);
    return rc;
}
