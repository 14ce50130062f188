/* Operation names, bus-bandwidth factors and the alpha-beta fit. */
#include <math.h>
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

/* Weighted least squares for t = a + g n with weights 1/t^2 (relative error):
 * the 2x2 normal equations. */
static void solve(const size_t *x, const double *t, int n, int fix_a0, double *a, double *g) {
    double s00 = 0, s01 = 0, s11 = 0, b0 = 0, b1 = 0;
    for (int i = 0; i < n; i++) {
        double w = 1.0 / (t[i] * t[i]), xi = (double)x[i];
        s00 += w;
        s01 += w * xi;
        s11 += w * xi * xi;
        b0 += w * t[i];
        b1 += w * xi * t[i];
    }
    if (fix_a0) {
        *a = 0;
        *g = s11 > 0 ? b1 / s11 : 0;
        return;
    }
    double det = s00 * s11 - s01 * s01;
    if (fabs(det) < 1e-300) {
        *a = b0 / s00;
        *g = 0;
        return;
    }
    *a = (b0 * s11 - b1 * s01) / det;
    *g = (s00 * b1 - s01 * b0) / det;
}

ah_comm_fit ah_comm_fit_alpha_beta(ah_comm_op op, const size_t *bytes, const double *us, int n) {
    ah_comm_fit f;
    memset(&f, 0, sizeof f);
    f.op = op;
    f.n_sizes = n;
    if (n < 1)
        return f;
    double a, g;
    solve(bytes, us, n, 0, &a, &g);
    if (a < 0) /* a latency below zero is noise: refit through the origin */
        solve(bytes, us, n, 1, &a, &g);
    if (g <= 0) /* no bandwidth term visible (all sizes latency-bound) */
        g = 1e-12;
    f.alpha_us = a;
    f.beta_gbs = 1.0 / g / 1e3; /* bytes per microsecond -> GB/s */
    for (int i = 0; i < n; i++) {
        double pred = a + g * (double)bytes[i];
        double e = fabs(pred - us[i]) / us[i];
        if (e > f.max_rel_error)
            f.max_rel_error = e;
    }
    return f;
}
