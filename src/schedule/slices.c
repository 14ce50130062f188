/* Who exchanges what between stages of different TP degrees (the rules of
 * per-stage TP, docs/engine.md "Per-stage TP"): the peers of a pipeline send
 * or receive, and the owners of the TP slices of a gradient bucket. */
#include "autohet/schedule.h"

int ah_tp_source(int tp_rank, int from_tp) {
    return tp_rank % from_tp;
}

int ah_tp_targets(int tp_rank, int from_tp, int to_tp, int *out) {
    int n = 0;
    for (int q = tp_rank; q < to_tp; q += from_tp)
        out[n++] = q;
    return n;
}

int ah_bucket_max_tp(const ah_plan *p, const ah_bucket *b) {
    int T = 0;
    for (int k = 0; k < p->n_replicas; k++) {
        int t = p->replicas[k].stages[b->holder[k]].tp;
        T = t > T ? t : T;
    }
    return T;
}

int ah_bucket_uniform_tp(const ah_plan *p, const ah_bucket *b) {
    for (int k = 1; k < p->n_replicas; k++)
        if (p->replicas[k].stages[b->holder[k]].tp != p->replicas[0].stages[b->holder[0]].tp)
            return 0;
    return 1;
}

int ah_tp_slice_owner(int slice, int T, int tp) {
    return slice / (T / tp);
}
