/* Shared by the parts of src/schedule/; not a public interface. */
#ifndef AUTOHET_SCHEDULE_INTERNAL_H
#define AUTOHET_SCHEDULE_INTERNAL_H
#include "autohet/schedule.h"

/* chunks of replica k in model order into out (S_k * V entries); returns their count */
int ah_schedule_build_chunks(const ah_plan *p, int k, int V, ah_chunk *out);
/* sp->buckets from sp->chunks */
void ah_schedule_build_buckets(ah_schedule_plan *sp, int L, const double *grad_bytes);

#endif
