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

#endif
