/* How sure a predicted time is (`autohet plan --top K`, docs/planner.md "Error bars"): a plan is evaluated
 * again with its uncertain terms moved to the ends of their error, compute (every layer's time) by +-ec and
 * communication (link bandwidths and latencies, the lockstep chain's latency) by +-en, four corners; its
 * error bar is half the spread of those times. Across a set of plans, each plan's regret at a corner (or at
 * the nominal point) is its time over the best plan's there; the plan of least worst-case regret is the one
 * that holds best whichever way the errors fall. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autohet/plan.h"

/* the plan's closed form with compute x fc and communication x fn (0 with *t, or -1) */
static int corner_time(const ah_plan *p, const ah_profile *prof, const ah_plan_options *o, double fc,
                       double fn, double *t) {
    ah_plan q;
    ah_plan_copy(&q, p);
    for (int i = 0; i < q.cluster.n_nodes; i++) {
        ah_node *n = &q.cluster.nodes[i];
        n->dev.slowdown *= fc; /* every layer time of a profile scales with it */
        n->nic_gbit /= fn;
        n->dev.intra_bw_gbs /= fn;
    }
    ah_plan_options oc = *o;
    oc.alpha_intra_s *= fn;
    oc.alpha_inter_s *= fn;
    ah_calibration cal;
    if (o->calibration) {
        cal = *o->calibration;
        cal.p2p_alpha_s *= fn;
        oc.calibration = &cal;
    }
    char err[256];
    int rc = ah_plan_evaluate(&q, prof, &oc, err, sizeof err);
    *t = q.iteration_time_s;
    ah_plan_free(&q);
    return rc;
}

int ah_plan_corners(const ah_plan *p, const ah_profile *prof, const ah_plan_options *o, double ec, double en,
                    double t[4]) {
    static const int sign[4][2] = {{-1, -1}, {-1, 1}, {1, -1}, {1, 1}};
    for (int c = 0; c < 4; c++)
        if (corner_time(p, prof, o, 1 + sign[c][0] * ec, 1 + sign[c][1] * en, &t[c]) != 0)
            return -1;
    return 0;
}

int ah_plan_robustness(const ah_plan *plans, int n, const ah_profile *prof, const ah_plan_options *o,
                       double ec, double en, double *error_bar_s, double *regret) {
    double *t = calloc((size_t)n * 5 + 1, sizeof(double)); /* per plan: 4 corners, then the nominal time */
    if (!t)
        abort();
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        rc = ah_plan_corners(&plans[i], prof, o, ec, en, &t[5 * i]);
        t[5 * i + 4] = plans[i].iteration_time_s;
        double lo = INFINITY, hi = 0;
        for (int c = 0; c < 4; c++) {
            lo = t[5 * i + c] < lo ? t[5 * i + c] : lo;
            hi = t[5 * i + c] > hi ? t[5 * i + c] : hi;
        }
        error_bar_s[i] = (hi - lo) / 2;
    }
    for (int i = 0; i < n && rc == 0; i++) {
        regret[i] = 0;
        for (int c = 0; c < 5; c++) {
            double best = INFINITY;
            for (int j = 0; j < n; j++)
                best = t[5 * j + c] < best ? t[5 * j + c] : best;
            double r = t[5 * i + c] / best - 1;
            regret[i] = r > regret[i] ? r : regret[i];
        }
    }
    free(t);
    return rc;
}
