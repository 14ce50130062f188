/* Operation names, bus-bandwidth factors and the alpha-beta fit. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "autohet/comm.h"

static const char *names[AH_OP_COUNT] = {"latency",        "bw",    "allreduce", "allgather",
                                         "reduce_scatter", "bcast", "alltoall"};

const char *ah_comm_op_name(ah_comm_op op) {
    return op >= 0 && op < AH_OP_COUNT ? names[op] : "?";
}

int ah_comm_op_parse(const char *s, ah_comm_op *out) {
    for (int i = 0; i < AH_OP_COUNT; i++)
        if (!strcasecmp(s, names[i])) {
            *out = (ah_comm_op)i;
            return 0;
        }
    if (!strcasecmp(s, "reducescatter") || !strcasecmp(s, "reduce-scatter")) {
        *out = AH_OP_REDUCE_SCATTER;
        return 0;
    }
    return -1;
}

double ah_busbw_factor(ah_comm_op op, int n) {
    if (n < 1)
        n = 1;
    switch (op) {
    case AH_OP_ALLREDUCE: return 2.0 * (n - 1) / n;
    case AH_OP_ALLGATHER:
    case AH_OP_REDUCE_SCATTER:
    case AH_OP_ALLTOALL: return (double)(n - 1) / n;
    default: return 1.0;
    }
}

/* The fit minimises the largest relative error |a + g x_i - t_i| / t_i (what
 * the regimes are judged by): a weighted Chebyshev approximation by a line.
 * Lines are a Haar system, so the optimum levels the error on some three
 * points with alternating signs, and that reference is the one whose levelled
 * error is largest (de la Vallee Poussin): try every triple. */
static double max_rel_err(const size_t *x, const double *t, int n, double a, double g) {
    double m = 0;
    for (int i = 0; i < n; i++)
        m = fmax(m, fabs(a + g * (double)x[i] - t[i]) / t[i]);
    return m;
}

static double max_abs_err(const size_t *x, const double *t, int n, double a, double g) {
    double m = 0;
    for (int i = 0; i < n; i++)
        m = fmax(m, fabs(a + g * (double)x[i] - t[i]));
    return m;
}

/* a + g x_i - t_i = s_i h t_i (s = +, -, +) for one triple: 0, or -1 if singular */
static int level_triple(const size_t *x, const double *t, int i, int j, int k, double *a, double *g, double *h) {
    double xi = (double)x[i], xj = (double)x[j], xk = (double)x[k];
    /* rows j and k minus row i: g (xj - xi) + h (tj + ti) = tj - ti, g (xk - xi) - h (tk - ti) = tk - ti */
    double m00 = xj - xi, m01 = t[j] + t[i], r0 = t[j] - t[i];
    double m10 = xk - xi, m11 = t[i] - t[k], r1 = t[k] - t[i];
    double det = m00 * m11 - m01 * m10;
    if (fabs(det) < 1e-300)
        return -1;
    *g = (r0 * m11 - m01 * r1) / det;
    *h = (m00 * r1 - m10 * r0) / det;
    *a = t[i] + *h * t[i] - *g * xi;
    return 0;
}

/* best c >= 0 with max |c u_i - 1| least: c = 2 / (min u + max u) */
static double best_scale(const double *u, int n, double *err) {
    double lo = INFINITY, hi = 0;
    for (int i = 0; i < n; i++)
        lo = fmin(lo, u[i]), hi = fmax(hi, u[i]);
    *err = (hi - lo) / (hi + lo);
    return 2.0 / (hi + lo);
}

/* the minimax line with g >= 0 and, unless intercept_free, a >= 0 */
static void minimax_line(const size_t *x, const double *t, int n, int intercept_free, double *a, double *g) {
    double best = INFINITY;
    *a = t[0], *g = 0;
    if (n == 1)
        return;
    if (n == 2) { /* interpolate */
        double gg = (t[1] - t[0]) / ((double)x[1] - (double)x[0]), aa = t[0] - gg * (double)x[0];
        if ((aa >= 0 || intercept_free) && gg >= 0) {
            *a = aa, *g = gg;
            return;
        }
    } else {
        double hb = -1, ab = 0, gb = 0;
        for (int i = 0; i < n; i++)
            for (int j = i + 1; j < n; j++)
                for (int k = j + 1; k < n; k++) {
                    double aa, gg, h;
                    if (level_triple(x, t, i, j, k, &aa, &gg, &h) == 0 && fabs(h) > hb)
                        hb = fabs(h), ab = aa, gb = gg;
                }
        if (hb >= 0 && (ab >= 0 || intercept_free) && gb >= 0) {
            *a = ab, *g = gb;
            return;
        }
    }
    /* the optimum of a convex problem outside the quadrant lies on its edge:
     * a = 0 (through the origin) or g = 0 (a constant) */
    double *u = malloc(sizeof(double) * (size_t)n), e;
    if (!u)
        abort();
    for (int i = 0; i < n; i++)
        u[i] = (double)x[i] / t[i];
    double g0 = best_scale(u, n, &e);
    if (e < best)
        best = e, *a = 0, *g = g0;
    for (int i = 0; i < n; i++)
        u[i] = 1.0 / t[i];
    double a0 = best_scale(u, n, &e);
    if (e < best)
        *a = a0, *g = 0;
    free(u);
}

ah_comm_fit ah_comm_fit_line(ah_comm_op op, const size_t *bytes, const double *us, int n, int intercept_free) {
    ah_comm_fit f;
    memset(&f, 0, sizeof f);
    f.op = op;
    f.n_sizes = n;
    if (n < 1)
        return f;
    double a, g;
    minimax_line(bytes, us, n, intercept_free, &a, &g);
    if (g <= 0) /* no bandwidth term visible (all sizes latency-bound) */
        g = 1e-12;
    f.alpha_us = a;
    f.beta_gbs = 1.0 / g / 1e3; /* bytes per microsecond -> GB/s */
    f.max_rel_error = max_rel_err(bytes, us, n, a, g);
    f.max_abs_error_us = max_abs_err(bytes, us, n, a, g);
    return f;
}

ah_comm_fit ah_comm_fit_alpha_beta(ah_comm_op op, const size_t *bytes, const double *us, int n) {
    return ah_comm_fit_line(op, bytes, us, n, 0);
}
