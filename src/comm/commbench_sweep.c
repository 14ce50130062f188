/* The sweeps of autohet commbench (autohet/commbench_print.h, ah_commbench_sweep): one operation over its
 * sizes, in rounds, summarised, checked, printed and fitted. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "autohet/commbench_print.h"
#include "util/errors.h"

/* one case at one placement, its samples complete: summarised and checked;
 * its results[] entry on rank 0 */
static int finish_case(ah_commbench_run *x, const ah_commbench_case *c, const char *cls,
                       const ah_commbench_samples *s, ah_comm_result *r) {
    double *reps = ah_xcalloc((size_t)(s->n_valid > 0 ? s->n_valid : 1), sizeof(double));
    int valid = ah_commbench_summarize(c, s, r, reps);
    r->wrong = ah_commbench_check(c, x->b);
    x->wrong += r->wrong;
    if (x->rank == 0)
        cJSON_AddItemToArray(x->results, ah_commbench_result_json(r, cls, c, reps, valid));
    free(reps);
    return valid;
}

/* The order round `round` visits ns sizes in: as listed for one round,
 * else a permutation the same on every rank (xorshift from the round) */
static void round_order(int round, int rounds, int ns, int *order) {
    for (int i = 0; i < ns; i++)
        order[i] = i;
    if (rounds <= 1)
        return;
    unsigned long long z = 0x9E3779B97F4A7C15ull * (unsigned long long)(round + 1);
    for (int i = ns - 1; i > 0; i--) {
        z ^= z << 13, z ^= z >> 7, z ^= z << 17;
        int j = (int)(z % (unsigned long long)(i + 1)), t = order[i];
        order[i] = order[j], order[j] = t;
    }
}

/* size i's results: summarised, checked, printed (rank 0), its median in med[i] (NaN: no valid repetition) */
static void finish_size(ah_commbench_run *x, ah_commbench_case *c, const char *cls, ah_commbench_samples *smp,
                        double *med) {
    ah_comm_result r, rin;
    int nccl = x->format == AH_FORMAT_NCCL;
    c->in_place = 0;
    int valid = finish_case(x, c, cls, &smp[0], &r);
    *med = valid > 0 ? (x->fit_p25 ? r.p25_us : r.median_us) : NAN;
    if (nccl) {
        c->in_place = 1;
        finish_case(x, c, cls, &smp[1], &rin);
    }
    if (x->rank != 0)
        return;
    ah_commbench_print_row(x->format, c, &r, nccl ? &rin : NULL);
    if (valid == 0) /* its times are no measurement: left out of the fits */
        printf("# %zu bytes: no valid repetition: every one started late in its --sync window (ranks that share "
               "cores cannot keep the windows; --sync barrier times without them)\n",
               c->bytes);
    x->busbw_sum += r.busbw_gbs;
    x->rows++;
}

/* The sizes with a valid median, moved to the front of sizes/med; their count */
static int measured_sizes(size_t *sizes, double *med, int ns) {
    int m = 0;
    for (int i = 0; i < ns; i++)
        if (isfinite(med[i])) {
            sizes[m] = sizes[i];
            med[m++] = med[i];
        }
    return m;
}

/* One operation (for point-to-point: one pair) over its sizes (commbench_print.h). With
 * --rounds R every size's repetitions are taken in R rounds over all sizes,
 * each round in its own order, so that a slow phase of the machine falls on
 * every size alike rather than on the sizes it happened to meet. */
void ah_commbench_sweep(ah_commbench_run *x, ah_comm_op op, int src, int dst) {
    const ah_commbench_run *a = x;
    size_t sizes[AH_COMMBENCH_MAX_SIZES];
    double med[AH_COMMBENCH_MAX_SIZES];
    int order[AH_COMMBENCH_MAX_SIZES], iters[AH_COMMBENCH_MAX_SIZES], R = a->rounds;
    int ns = ah_commbench_sizes(op, (size_t)a->min_size, (size_t)a->max_size, x->t->ranks, a->step_factor,
                                sizes, AH_COMMBENCH_MAX_SIZES);
    const char *cls = ah_commbench_link_class(x->t, op <= AH_OP_BW ? src : -1, dst);
    ah_commbench_case c = {op, 0, 0, 0, src, dst, a->sync, a->batch};
    int placements = a->format == AH_FORMAT_NCCL ? 2 : 1; /* nccl-tests measures both */
    ah_commbench_samples *smp = ah_xcalloc((size_t)(ns > 0 ? ns : 1) * 2, sizeof *smp);
    for (int i = 0; i < ns; i++) {
        int it = ah_commbench_iters(sizes[i], a->base_iters);
        iters[i] = it < R ? R : it;
        for (int p = 0; p < placements; p++)
            ah_commbench_samples_init(&smp[2 * i + p], iters[i]);
    }
    if (x->rank == 0)
        ah_commbench_print_header(a->format, &c, cls, x->t->ranks);
    for (int round = 0; round < R; round++) {
        round_order(round, R, ns, order);
        for (int k = 0; k < ns; k++) {
            int i = order[k];
            c.bytes = sizes[i];
            c.iters = iters[i] * (round + 1) / R - iters[i] * round / R;
            for (int p = 0; p < placements; p++) {
                c.in_place = p;
                ah_commbench_sample(&c, x->b, &smp[2 * i + p]);
            }
            if (R == 1)
                finish_size(x, &c, cls, &smp[2 * i], &med[i]);
        }
    }
    for (int i = 0; R > 1 && i < ns; i++) {
        c.bytes = sizes[i];
        c.iters = iters[i];
        finish_size(x, &c, cls, &smp[2 * i], &med[i]);
    }
    for (int i = 0; i < 2 * ns; i++)
        ah_commbench_samples_free(&smp[i]);
    free(smp);
    if (x->rank != 0 || (ns = measured_sizes(sizes, med, ns)) == 0)
        return;
    ah_comm_fit line = ah_comm_fit_alpha_beta(op, sizes, med, ns);
    ah_comm_piecewise pw = ah_comm_fit_piecewise(op, sizes, med, ns, 0.10, 3);
    ah_commbench_print_fit(a->format, &line, &pw, ns, a->fit_p25 ? "lower-quartile" : "median");
    c.in_place = 0;
    cJSON_AddItemToArray(x->fits, ah_commbench_fit_json(op, cls, &c, &line, &pw, sizes, med, ns,
                                                        a->fit_p25 ? "p25_us" : "median_us"));
}

