/* One clock for every rank of a trace (docs/analyze.md, "Clocks"): the engine
 * stamps events with CLOCK_MONOTONIC, which has one origin per machine (and a
 * time namespace may shift it), so rank 0 measures every rank's offset with
 * ping-pongs as ReproMPI and Score-P do: many rounds, the one with the
 * smallest round trip wins, offset = t_remote - (t_send + rtt / 2), bounded by
 * rtt / 2 (the residual). Measured at the start and at the end of the traced
 * steps, the two offsets give the drift, and every event is mapped onto rank
 * 0's timeline by linear interpolation of the offset.
 *
 * The model of rank r, in rank 0's time G: its clock reads
 *   L(G) = G + offset(G),  offset(G) = offset_start + drift (G - t_start).
 * The estimate and the mapping are pure functions (tests/test_clock_sync.c);
 * ah_clock_sync_measure is the MPI part. */
#ifndef AUTOHET_TRACE_CLOCK_SYNC_H
#define AUTOHET_TRACE_CLOCK_SYNC_H

#include <mpi.h>

/* one ping-pong: rank 0 sends at t_send and has the answer at t_recv (its
 * clock); the remote rank stamped t_remote (its clock) in between */
typedef struct {
    double t_send, t_remote, t_recv;
} ah_clock_round;

/* the best round of one measurement */
typedef struct {
    double t_ref;      /* rank 0's time of the estimate: the round's midpoint */
    double offset_s;   /* remote clock - rank 0's clock */
    double rtt_s;      /* its round trip */
    double residual_s; /* rtt / 2: |true offset - offset_s| is at most this */
    int rounds;        /* rounds measured (the best of them is kept) */
} ah_clock_estimate;

/* a rank's clock against rank 0's (rank 0's own: all zero) */
typedef struct {
    double t_start, offset_start_s; /* first measurement (rank 0's time) and its offset */
    double t_end, offset_end_s;     /* second measurement; t_end = t_start when there is one */
    double drift;                   /* d offset / d t (seconds per second; x 1e6 = ppm) */
    double residual_s;              /* the larger half round trip of the two best rounds */
    double rtt_s;                   /* the smaller of the two best round trips */
    int rounds;                     /* rounds of each measurement */
} ah_clock_map;

/* The estimate of n rounds: the round with the smallest round trip (the
 * first of a tie); rounds with t_recv < t_send or non-finite times are left
 * out. Returns 0, or -1 when no round is usable. */
int ah_clock_best_round(const ah_clock_round *r, int n, ah_clock_estimate *out);

/* The map of a rank from its start and (optional, NULL: none) end estimate:
 * drift from the two offsets when the end is later than the start, else 0. */
void ah_clock_fit(const ah_clock_estimate *start, const ah_clock_estimate *end, ah_clock_map *m);

/* offset(G) at rank 0's time G */
double ah_clock_offset_at(const ah_clock_map *m, double t_ref);
/* rank 0's time of the rank's local reading L (the inverse of ah_clock_to_local) */
double ah_clock_to_ref(const ah_clock_map *m, double t_local);
/* the rank's local reading at rank 0's time G */
double ah_clock_to_local(const ah_clock_map *m, double t_ref);

/* Collective over comm: rank 0 ping-pongs `rounds` times with every other
 * rank in turn (ranks not at their turn sleep between polls, so that the two
 * in the measurement have the cores), each side reading its clock with
 * now(). On rank 0, est[r] (comm size entries) gets rank r's best round
 * (est[0]: zero offset); other ranks may pass NULL. Returns MPI_SUCCESS or
 * an MPI error code. */
int ah_clock_sync_measure(MPI_Comm comm, int rounds, double (*now)(void), ah_clock_estimate *est);

#endif
