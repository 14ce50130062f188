/* The tables of `autohet commbench`: autohet's columns, OSU's, nccl-tests'
 * (docs/commbench.md). Rank 0 calls these. */
#ifndef AUTOHET_COMMBENCH_PRINT_H
#define AUTOHET_COMMBENCH_PRINT_H

#include "autohet/commbench.h"

typedef enum { AH_FORMAT_DEFAULT = 0, AH_FORMAT_OSU, AH_FORMAT_NCCL } ah_commbench_format;
/* "default", "osu", "nccl-tests"; 0 or -1 */
int ah_commbench_format_parse(const char *s, ah_commbench_format *out);

void ah_commbench_print_header(ah_commbench_format fmt, const ah_commbench_case *c, const char *cls,
                               int ranks);
/* one size; in_place: the in-place measurement (nccl-tests columns), or NULL */
void ah_commbench_print_row(ah_commbench_format fmt, const ah_commbench_case *c, const ah_comm_result *r,
                            const ah_comm_result *in_place);
/* statistic: what the fitted times are, "median" or "lower-quartile" */
void ah_commbench_print_fit(ah_commbench_format fmt, const ah_comm_fit *line, const ah_comm_piecewise *pw,
                            int n, const char *statistic);
/* nccl-tests' closing lines (out-of-bounds values, average bus bandwidth) */
void ah_commbench_print_summary(ah_commbench_format fmt, long wrong, double busbw_sum, int rows);

/* A benchmark run over operations (autohet commbench): how each sweep measures (sizes from min_size to
 * max_size by step_factor, base_iters repetitions taken in `rounds` rounds, batch 0: auto, the lower
 * quartile fitted instead of the median), where, and what the sweeps gather: rank 0's results[] and
 * fits[] (the profile's JSON), wrong results, the rows printed and their bus bandwidth. */
typedef struct {
    double min_size, max_size, step_factor;
    int base_iters, rounds, batch, fit_p25;
    ah_commbench_format format;
    ah_commbench_sync sync;
    const ah_commbench_topology *t;
    const ah_commbench_buffers *b;
    int rank;
    cJSON *results, *fits;
    long wrong;
    double busbw_sum;
    int rows;
} ah_commbench_run;
/* One operation (point-to-point: the pair src -> dst) over its sizes: a table on rank 0, results and the
 * fit appended to the JSON arrays. Collective over MPI_COMM_WORLD. */
void ah_commbench_sweep(ah_commbench_run *x, ah_comm_op op, int src, int dst);

#endif
