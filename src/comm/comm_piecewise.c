/* The piecewise alpha-beta model with break points found from the data, and
 * the median with its confidence interval (autohet/comm.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autohet/comm.h"
#include "util/errors.h"

/* err[i * (n + 1) + j]: the largest relative error of one line fitted to points [i, j) */
static double *run_errors(ah_comm_op op, const size_t *bytes, const double *us, int n, int min_points) {
    double *err = ah_xcalloc((size_t)(n + 1) * (size_t)(n + 1), sizeof(double));
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j <= n; j++)
            err[i * (n + 1) + j] = j - i >= min_points
                                       ? ah_comm_fit_line(op, bytes + i, us + i, j - i, i > 0).max_rel_error
                                       : INFINITY;
    return err;
}

/* The best partition of [0, n) into k runs: cut[] gets the k + 1 boundaries.
 * best/from are (k + 1) x (n + 1) work arrays. Returns its largest error. */
static double best_partition(const double *err, int n, int k, double *best, int *from, int *cut) {
    int w = n + 1;
    for (int q = 0; q <= k; q++)
        for (int j = 0; j <= n; j++)
            best[q * w + j] = INFINITY;
    best[0] = 0;
    for (int q = 1; q <= k; q++)
        for (int j = 1; j <= n; j++)
            for (int i = q - 1; i < j; i++) {
                double e = fmax(best[(q - 1) * w + i], err[i * w + j]);
                if (e < best[q * w + j]) {
                    best[q * w + j] = e;
                    from[q * w + j] = i;
                }
            }
    cut[k] = n;
    for (int q = k; q >= 1; q--)
        cut[q - 1] = isfinite(best[q * w + cut[q]]) ? from[q * w + cut[q]] : 0;
    return best[k * w + n];
}

ah_comm_piecewise ah_comm_fit_piecewise(ah_comm_op op, const size_t *bytes, const double *us, int n,
                                        double tolerance, int min_points) {
    ah_comm_piecewise p;
    memset(&p, 0, sizeof p);
    if (n < 1)
        return p;
    if (min_points < 2)
        min_points = 2;
    int max_k = n / min_points < AH_COMM_MAX_REGIMES ? n / min_points : AH_COMM_MAX_REGIMES;
    if (max_k < 1)
        max_k = 1;
    double *err = run_errors(op, bytes, us, n, n < min_points ? 1 : min_points);
    double *best = ah_xcalloc((size_t)(max_k + 1) * (size_t)(n + 1), sizeof(double));
    int *from = ah_xcalloc((size_t)(max_k + 1) * (size_t)(n + 1), sizeof(int));
    /* one regime over every point unless a partition fits better: when no fit is finite (every time 0, say)
     * no partition is chosen, and the one regime is still a whole one */
    int cut[AH_COMM_MAX_REGIMES + 1], chosen[AH_COMM_MAX_REGIMES + 1] = {0, n}, k_best = 1;
    double e_best = INFINITY;
    for (int k = 1; k <= max_k; k++) {
        int c[AH_COMM_MAX_REGIMES + 1];
        double e = best_partition(err, n, k, best, from, c);
        if (e < e_best) {
            e_best = e;
            k_best = k;
            memcpy(chosen, c, sizeof c);
        }
        if (e <= tolerance)
            break; /* the fewest regimes within tolerance */
    }
    memcpy(cut, chosen, sizeof cut);
    p.n_regimes = k_best;
    for (int q = 0; q < k_best; q++) {
        ah_comm_regime *r = &p.regime[q];
        r->min_bytes = bytes[cut[q]];
        r->max_bytes = bytes[cut[q + 1] - 1];
        r->fit = ah_comm_fit_line(op, bytes + cut[q], us + cut[q], cut[q + 1] - cut[q], cut[q] > 0);
        p.max_rel_error = fmax(p.max_rel_error, r->fit.max_rel_error);
        p.max_abs_error_us = fmax(p.max_abs_error_us, r->fit.max_abs_error_us);
    }
    free(err);
    free(best);
    free(from);
    return p;
}

const ah_comm_regime *ah_comm_piecewise_regime(const ah_comm_piecewise *p, size_t bytes) {
    for (int q = 0; q + 1 < p->n_regimes; q++)
        if (bytes <= p->regime[q].max_bytes)
            return &p->regime[q];
    return &p->regime[p->n_regimes > 0 ? p->n_regimes - 1 : 0];
}

double ah_comm_piecewise_us(const ah_comm_piecewise *p, size_t bytes) {
    const ah_comm_fit *f = &ah_comm_piecewise_regime(p, bytes)->fit;
    return f->alpha_us + (double)bytes / (f->beta_gbs * 1e3);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

ah_comm_stats ah_comm_median_ci(double *x, int n) {
    ah_comm_stats s = {0, 0, 0, 0};
    if (n < 1)
        return s;
    qsort(x, (size_t)n, sizeof(double), cmp_double);
    s.median = n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
    int q1 = (int)ceil(0.25 * n); /* nearest rank, 1-based */
    s.p25 = x[(q1 < 1 ? 1 : q1) - 1];
    s.ci_low = x[0];
    s.ci_high = x[n - 1];
    if (n >= 6) { /* 1-based order statistics j and k */
        int j = (int)floor(0.5 * n - 0.98 * sqrt((double)n)),
            k = (int)ceil(0.5 * n + 1 + 0.98 * sqrt((double)n));
        s.ci_low = x[(j < 1 ? 1 : j) - 1];
        s.ci_high = x[(k > n ? n : k) - 1];
    }
    return s;
}
