/* The closed form against the simulator on candidate plans (autohet/sim.h, ah_sim_verify). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "autohet/sim.h"
#include "util/errors.h"
#include "util/stats.h"

void ah_sim_verify(const ah_plan *plans, int n, const ah_profile *prof, const ah_plan_options *o,
                   ah_sim_verification *v) {
    *v = (ah_sim_verification){.n = n, .winner = -1, .worst = -1};
    v->simulated_s = ah_xcalloc((size_t)n + 1, sizeof(double));
    v->errors = ah_xcalloc((size_t)n + 1, sizeof *v->errors);
    double *closed = ah_xcalloc((size_t)n + 1, sizeof(double)), *sim = ah_xcalloc((size_t)n + 1, sizeof(double));
    for (int i = 0; i < n; i++) {
        ah_plan copy;
        ah_plan_copy(&copy, &plans[i]);
        ah_sim_options so = {.schedule = AH_SCHED_1F1B, .overlap_dp = 1};
        ah_sim_result r;
        if (ah_simulate(&copy, prof, o, &so, &r, v->errors[i], sizeof v->errors[i]) == 0) {
            double t = v->simulated_s[i] = r.iteration_time_s, e = fabs(plans[i].iteration_time_s / t - 1.0);
            if (v->winner < 0 || t < v->simulated_s[v->winner])
                v->winner = i;
            if (v->worst < 0 || e > v->worst_error) {
                v->worst = i;
                v->worst_error = e;
            }
            closed[v->n_simulated] = plans[i].iteration_time_s;
            sim[v->n_simulated++] = t;
            ah_sim_result_free(&r);
        }
        ah_plan_free(&copy);
    }
    v->tau = ah_kendall_tau(closed, sim, v->n_simulated);
    free(closed);
    free(sim);
}

void ah_sim_verification_free(ah_sim_verification *v) {
    free(v->simulated_s);
    free(v->errors);
    v->simulated_s = NULL;
    v->errors = NULL;
}
