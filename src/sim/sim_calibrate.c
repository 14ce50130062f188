/* Fitting a calibration to measured runs (`autohet calibrate`, docs/calibration.md "Calibrating against
 * measured runs"): every run is simulated as `autohet simulate` would, and what the simulation leaves out is
 * fitted in two steps:
 *   1. compute and optimizer scales: runs whose replicas are one stage of one GPU type pin that type's scales
 *      (the simulated time is affine in both: three simulations per run); for each optimizer scale on a grid
 *      each micro-batch size's compute scale is the median of what its runs need, and the optimizer scale
 *      with the least |error| of the one-replica runs wins (it is pinned only by such runs of one micro-batch
 *      size and different lengths; else 1);
 *   2. the pipeline: with those scales, the multi-stage runs fit the lockstep transfer terms (a latency and a
 *      bandwidth per link class the runs cross) by least mean |error| on a grid, the simulated time taken as
 *      linear in the latency and in 1 / bandwidth (three or four simulations per run);
 *   3. a micro-batch size that only multi-stage runs have takes its compute scale from them (with step 2's
 *      terms), and step 2 is fitted again.
 * Steps 2 and 3 are fitted in each pipeline regime (overlapped sends: step 3 alone; lockstep) and the regime
 * with the least |error| over the runs kept; a calibration that fits worse than none is none.
 * The reported errors are the simulator's own with the fitted calibration (in sample), and, with validate,
 * each run's with a calibration fitted on the other runs (left out). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autohet/profile_table.h"
#include "autohet/sim.h"
#include "util/errors.h"
#include "util/stats.h"

enum { N_ALPHA = 201, N_BW = 61 };
#define ALPHA_STEP 25e-6 /* seconds: 0 .. 5 ms */
#define FR_LO 0.02       /* fractions of a link's bandwidth: 0.02 .. 1, log-spaced */
#define FR_REF 0.1       /* the fraction of the linear coefficients' probe */
#define FR_FREE 1e9      /* a "fraction" at which a transfer costs nothing (probes only) */

typedef struct {
    ah_calib_run *runs;
    int n;
    ah_profile *prof;
    const ah_plan_options *o;
    const ah_sim_options *so;
} fit_ctx;

/* One simulation of run i under calibration c (NULL: none): its iteration time, or -1 with err. */
static double sim_run(const fit_ctx *x, int i, const ah_calibration *c, char *err, size_t errlen) {
    ah_plan p;
    ah_plan_copy(&p, &x->runs[i].plan);
    ah_plan_options o = *x->o;
    ah_calibration_apply(c, x->prof, &o, &p.train, 0);
    ah_plan_options_take_plan(&o, &p);
    ah_sim_result r;
    double t = -1;
    if (ah_simulate(&p, x->prof, &o, x->so, &r, err, errlen) == 0) {
        t = r.iteration_time_s;
        ah_sim_result_free(&r);
    }
    ah_calibration_apply(NULL, x->prof, &o, &p.train, 0);
    ah_plan_free(&p);
    return t;
}

/* whether the calibration names this GPU type already */
static int find_scale(const ah_calibration *c, const char *dev) {
    for (int d = 0; d < c->n_devices; d++)
        if (strcmp(c->devices[d].name, dev) == 0)
            return 1;
    return 0;
}

/* The GPU type of a run whose replicas are one stage each of one type (NULL otherwise). */
static const char *compute_run_device(const ah_plan *p) {
    const char *name = NULL;
    for (int k = 0; k < p->n_replicas; k++) {
        if (p->replicas[k].n_stages != 1)
            return NULL;
        const char *d = p->cluster.nodes[p->replicas[k].stages[0].node].dev.name;
        if (name && strcmp(name, d) != 0)
            return NULL;
        name = d;
    }
    return name;
}

static int is_pipeline_run(const ah_plan *p) {
    for (int k = 0; k < p->n_replicas; k++)
        if (p->replicas[k].n_stages > 1)
            return 1;
    return 0;
}

/* bit 0: a boundary inside a node, bit 1: one between nodes */
static int link_classes(const ah_plan *p) {
    int m = 0;
    for (int k = 0; k < p->n_replicas; k++)
        for (int j = 0; j + 1 < p->replicas[k].n_stages; j++)
            m |= p->replicas[k].stages[j].node != p->replicas[k].stages[j + 1].node ? 2 : 1;
    return m;
}

/* A one-stage run's simulated time as affine in its GPU type's compute scale c and optimizer scale u:
 * rest + c compute + u optimizer (three simulations). */
typedef struct {
    const char *dev;
    int mb;
    int one_replica; /* no data-parallel all-reduce: what pins the optimizer scale */
    double rest, compute, optimizer, meas;
} scale_run;

static int scale_run_build(const fit_ctx *x, int i, const char *dev, scale_run *r, char *err, size_t errlen) {
    static const double probe[3][2] = {{1, 1}, {2, 1}, {1, 2}};
    double s[3];
    int mb = x->runs[i].plan.micro_batch;
    for (int v = 0; v < 3; v++) {
        ah_calibration c;
        memset(&c, 0, sizeof c);
        ah_calibration_set_scale(&c, dev, mb, probe[v][0]);
        ah_calibration_set_optimizer_scale(&c, dev, probe[v][1]);
        if ((s[v] = sim_run(x, i, &c, err, errlen)) < 0)
            return -1;
    }
    *r = (scale_run){
        dev, mb, x->runs[i].plan.n_replicas == 1, 0, s[1] - s[0], s[2] - s[0], x->runs[i].measured_s};
    r->rest = s[0] - r->compute - r->optimizer;
    return 0;
}

/* Given optimizer scale u, each (type, micro-batch)'s c: the mean of what each of its runs needs; the sum of
 * |error| of its one-replica runs returned (with replicas, the data-parallel all-reduce would take part in
 * the optimizer's fit), the scales set in c when `set`. */
static double scales_at(const scale_run *sr, int n, const char *dev, double u, ah_calibration *c, int set) {
    double err = 0, *need = ah_xcalloc((size_t)n + 1, sizeof *need);
    for (int i = 0; i < n; i++) {
        if (strcmp(sr[i].dev, dev) != 0)
            continue;
        int cnt = 0;
        for (int j = 0; j < n; j++)
            if (sr[j].mb == sr[i].mb && strcmp(sr[j].dev, dev) == 0) {
                double cj = sr[j].compute > 0
                                ? (sr[j].meas - sr[j].rest - u * sr[j].optimizer) / sr[j].compute
                                : 1.0;                  /* no compute to scale */
                /* compute never vanishes, nor grows past what a calibration file may hold */
                need[cnt++] = fmin(fmax(cj, 0.05), AH_CALIB_SCALE_MAX);
            }
        double ci = ah_median(need, cnt);
        if (sr[i].one_replica)
            err += fabs((sr[i].rest + ci * sr[i].compute + u * sr[i].optimizer) / sr[i].meas - 1);
        if (set)
            ah_calibration_set_scale(c, dev, sr[i].mb, ci);
    }
    free(need);
    return err;
}

/* Step 1 over the runs in `use`: per GPU type, the optimizer scale (a grid from 1/20 to 2, fitted where one
 * micro-batch size has one-replica runs of different lengths, else 1) and each micro-batch size's compute
 * scale. */
static int fit_scales(const fit_ctx *x, const unsigned char *use, ah_calibration *c, char *err,
                      size_t errlen) {
    scale_run *sr = ah_xcalloc((size_t)x->n + 1, sizeof *sr);
    int n = 0, rc = 0;
    for (int i = 0; i < x->n && rc == 0; i++) {
        const char *dev = compute_run_device(&x->runs[i].plan);
        if (use[i] && dev)
            rc = scale_run_build(x, i, dev, &sr[n++], err, errlen);
    }
    for (int i = 0; i < n && rc == 0; i++) {
        if (find_scale(c, sr[i].dev))
            continue; /* this type is done */
        double best = scales_at(sr, n, sr[i].dev, 1.0, c, 0), bu = 1.0;
        for (int g = 0; g <= 60; g++) { /* u = 2^(g/13.9 - 4.32): 0.05 .. 2 */
            double u = 0.05 * pow(40.0, g / 60.0), e = scales_at(sr, n, sr[i].dev, u, c, 0);
            if (e < best - 1e-9) {
                best = e;
                bu = u;
            }
        }
        if (ah_calibration_set_optimizer_scale(c, sr[i].dev, bu) != 0) {
            snprintf(err, errlen, "calibrate: more than %d GPU types", AH_CALIB_MAX_DEVICES);
            rc = -1;
        } else {
            scales_at(sr, n, sr[i].dev, bu, c, 1);
        }
    }
    free(sr);
    return rc;
}

/* A pipeline run's simulated time as linear in the lockstep latency and in 1 / bandwidth per class. */
typedef struct {
    double s0, da, du[2]; /* base; per second of latency; per (1 / bandwidth fraction) of each class */
    double meas;
} lin_model;

static double lin_pred(const lin_model *m, double alpha, const double bw[2]) {
    return m->s0 + m->da * alpha + m->du[0] / bw[0] + m->du[1] / bw[1];
}

static int lin_build(const fit_ctx *x, int i, const ah_calibration *scales, lin_model *m, char *err,
                     size_t errlen) {
    ah_calibration c = *scales;
    c.lockstep = 1;
    c.p2p_alpha_s = 0;
    c.p2p_bw_fraction[0] = c.p2p_bw_fraction[1] = FR_FREE;
    memset(m, 0, sizeof *m);
    m->meas = x->runs[i].measured_s;
    if ((m->s0 = sim_run(x, i, &c, err, errlen)) < 0)
        return -1;
    c.p2p_alpha_s = 1e-3;
    double s = sim_run(x, i, &c, err, errlen);
    if (s < 0)
        return -1;
    m->da = (s - m->s0) / 1e-3;
    int cls = link_classes(&x->runs[i].plan);
    for (int k = 0; k < 2; k++) {
        if (!(cls >> k & 1))
            continue;
        c.p2p_alpha_s = 0;
        c.p2p_bw_fraction[0] = c.p2p_bw_fraction[1] = FR_FREE;
        c.p2p_bw_fraction[k] = FR_REF;
        if ((s = sim_run(x, i, &c, err, errlen)) < 0)
            return -1;
        m->du[k] = (s - m->s0) * FR_REF; /* (s - s0) = du / FR_REF */
    }
    return 0;
}

static double fraction_at(int j) {
    return FR_LO * pow(1.0 / FR_LO, (double)j / (N_BW - 1));
}

/* Step 2 over the pipeline runs in `use`: the grid's best lockstep terms (lockstep off without such runs). */
static int fit_pipeline(const fit_ctx *x, const unsigned char *use, ah_calibration *c, char *err,
                        size_t errlen) {
    lin_model *lm = ah_xcalloc((size_t)x->n + 1, sizeof *lm);
    int n = 0, cls = 0;
    for (int i = 0; i < x->n; i++) {
        if (!use[i] || !is_pipeline_run(&x->runs[i].plan))
            continue;
        if (lin_build(x, i, c, &lm[n], err, errlen) != 0) {
            free(lm);
            return -1;
        }
        cls |= link_classes(&x->runs[i].plan);
        n++;
    }
    double best = INFINITY, ba = 0, bb[2] = {0, 0};
    int n0 = cls & 1 ? N_BW : 1, n1 = cls & 2 ? N_BW : 1;
    for (int a = 0; n > 0 && a < N_ALPHA; a++)
        for (int j0 = 0; j0 < n0; j0++)
            for (int j1 = 0; j1 < n1; j1++) {
                double bw[2] = {cls & 1 ? fraction_at(j0) : FR_FREE, cls & 2 ? fraction_at(j1) : FR_FREE},
                       e = 0;
                for (int r = 0; r < n && e < best; r++)
                    e += fabs(lin_pred(&lm[r], a * ALPHA_STEP, bw) / lm[r].meas - 1);
                if (e < best) {
                    best = e;
                    ba = a * ALPHA_STEP;
                    bb[0] = cls & 1 ? bw[0] : 0;
                    bb[1] = cls & 2 ? bw[1] : 0;
                }
            }
    free(lm);
    c->lockstep = n > 0;
    c->p2p_alpha_s = c->lockstep ? ba : 0;
    c->p2p_bw_fraction[0] = c->lockstep ? bb[0] : 0;
    c->p2p_bw_fraction[1] = c->lockstep ? bb[1] : 0;
    return 0;
}

/* The one GPU type of every stage of a run (NULL for a mixed run). */
static const char *run_device(const ah_plan *p) {
    const char *name = NULL;
    for (int k = 0; k < p->n_replicas; k++)
        for (int j = 0; j < p->replicas[k].n_stages; j++) {
            const char *d = p->cluster.nodes[p->replicas[k].stages[j].node].dev.name;
            if (name && strcmp(name, d) != 0)
                return NULL;
            name = d;
        }
    return name;
}

typedef struct {
    const char *dev;
    int mb;
    double need; /* the scale this run needs */
} scale_need;

/* Step 3: a micro-batch size that only pipelines ran at takes its compute scale from them, with the pipeline
 * terms of step 2 (each run's time is affine in the scale: two simulations): the median of what its runs
 * need (one odd run does not move the others, as with the mean). */
static int fit_pipeline_scales(const fit_ctx *x, const unsigned char *use, const ah_calibration *one_stage,
                               ah_calibration *c, char *err, size_t errlen) {
    scale_need *acc = ah_xcalloc((size_t)x->n + 1, sizeof *acc);
    double *v = ah_xcalloc((size_t)x->n + 1, sizeof *v);
    int na = 0, rc = 0, sizes = 0;
    for (int i = 0; i < x->n && rc == 0; i++) {
        const char *dev = run_device(&x->runs[i].plan);
        int mb = x->runs[i].plan.micro_batch, have = 0;
        for (int d = 0; dev && d < one_stage->n_devices; d++)
            for (int j = 0; j < one_stage->devices[d].n; j++)
                have |= !strcmp(one_stage->devices[d].name, dev) && one_stage->devices[d].mb[j] == mb;
        if (!use[i] || !dev || have || !is_pipeline_run(&x->runs[i].plan))
            continue;
        double s[2];
        for (int v = 0; v < 2 && rc == 0; v++) {
            ah_calibration probe = *c;
            if (ah_calibration_set_scale(&probe, dev, mb, 1.0 + v) != 0 ||
                (s[v] = sim_run(x, i, &probe, err, errlen)) < 0)
                rc = -1;
        }
        if (rc)
            break;
        double sc = s[1] > s[0] ? 1.0 + (x->runs[i].measured_s - s[0]) / (s[1] - s[0]) : 1.0;
        acc[na++] = (scale_need){dev, mb, fmin(fmax(sc, 0.05), AH_CALIB_SCALE_MAX)};
    }
    for (int a = 0; a < na && rc == 0; a++) {
        int first = 1, k = 0;
        for (int b = 0; b < na; b++) /* each (type, size) once, at its first run */
            if (acc[b].mb == acc[a].mb && strcmp(acc[b].dev, acc[a].dev) == 0) {
                first &= b >= a;
                v[k++] = acc[b].need;
            }
        if (!first)
            continue;
        sizes++;
        if (ah_calibration_set_scale(c, acc[a].dev, acc[a].mb, ah_median(v, k)) != 0) {
            snprintf(err, errlen, "calibrate: more than %d GPU types or %d micro-batch sizes",
                     AH_CALIB_MAX_DEVICES, AH_CALIB_MAX_MB);
            rc = -1;
        }
    }
    free(acc);
    free(v);
    return rc < 0 ? -1 : sizes;
}

/* Sum of |error| over the runs in `use` under c (NULL: uncalibrated); -1 on a simulation error. */
static double total_error(const fit_ctx *x, const unsigned char *use, const ah_calibration *c, char *err,
                          size_t errlen) {
    double e = 0;
    for (int i = 0; i < x->n; i++) {
        if (!use[i])
            continue;
        double t = sim_run(x, i, c, err, errlen);
        if (t < 0)
            return -1;
        e += fabs(t / x->runs[i].measured_s - 1);
    }
    return e;
}

/* Steps 2 and 3 in one pipeline regime from the one-stage scales: overlapped sends (lockstep 0: the scales
 * of sizes only pipelines ran at, once: each is fitted from its own runs alone), or the lockstep terms (1) and
 * those scales in turn, twice (they settle together), then the terms once more. */
static int fit_regime(const fit_ctx *x, const unsigned char *use, const ah_calibration *one_stage, int lockstep,
                      ah_calibration *c, char *err, size_t errlen) {
    *c = *one_stage;
    for (int round = 0; round < (lockstep ? 2 : 1); round++)
        if ((lockstep && fit_pipeline(x, use, c, err, errlen) != 0) ||
            fit_pipeline_scales(x, use, one_stage, c, err, errlen) < 0)
            return -1;
    return lockstep ? fit_pipeline(x, use, c, err, errlen) : 0;
}

/* The pipeline regime and the scales of sizes only pipelines ran at decide each other (lockstep transfers
 * add time a larger compute scale would add too), so each regime is fitted whole and the one with the least
 * |error| over the runs wins; a calibration never fits the runs worse than none (its scales 1, overlapped). */
static int fit(const fit_ctx *x, const unsigned char *use, ah_calibration *c, char *err, size_t errlen) {
    ah_calibration one_stage, reg[2];
    memset(&one_stage, 0, sizeof one_stage);
    if (fit_scales(x, use, &one_stage, err, errlen) != 0)
        return -1;
    double e[3];
    for (int k = 0; k < 2; k++)
        if (fit_regime(x, use, &one_stage, k, &reg[k], err, errlen) != 0 ||
            (e[k] = total_error(x, use, &reg[k], err, errlen)) < 0)
            return -1;
    if ((e[2] = total_error(x, use, NULL, err, errlen)) < 0)
        return -1;
    memset(c, 0, sizeof *c);
    int k = e[1] < e[0] - 1e-12 ? 1 : 0;
    if (e[k] <= e[2] + 1e-12)
        *c = reg[k];
    return 0;
}

int ah_sim_calibrate(ah_calib_run *runs, int n, ah_profile *prof, const ah_plan_options *o,
                     const ah_sim_options *so, int validate, ah_calibration *out, char *err, size_t errlen) {
    fit_ctx x = {runs, n, prof, o, so};
    unsigned char *use = ah_xcalloc((size_t)n + 1, 1);
    int fitted = 0;
    for (int i = 0; i < n; i++)
        fitted += use[i] = !runs[i].excluded[0];
    if (fitted == 0) {
        snprintf(err, errlen, "calibrate: every run is excluded: nothing to fit");
        free(use);
        return -1;
    }
    int rc = fit(&x, use, out, err, errlen);
    if (rc == 0) { /* its device scales correct this profile (ah_calibration_scope) */
        out->scoped = 1;
        snprintf(out->profile_model, sizeof out->profile_model, "%s", ah_profile_table_model(prof));
        /* and its bandwidth fractions these links (ah_calibration_link_scope): a comm profile's or datasheet */
        out->links_scoped = 1;
        out->links_measured = o->links || o->msg_ref_gbs[0] > 0 || o->msg_ref_gbs[1] > 0;
    }
    for (int i = 0; rc == 0 && i < n; i++) {
        runs[i].left_out_s = 0;
        if ((runs[i].uncalibrated_s = sim_run(&x, i, NULL, err, errlen)) < 0 ||
            (runs[i].fitted_s = sim_run(&x, i, out, err, errlen)) < 0)
            rc = -1;
    }
    for (int i = 0; rc == 0 && validate && i < n; i++) {
        ah_calibration c;
        if (!use[i]) {
            runs[i].left_out_s = runs[i].fitted_s;
            continue;
        }
        use[i] = 0;
        if (fit(&x, use, &c, err, errlen) != 0 || (runs[i].left_out_s = sim_run(&x, i, &c, err, errlen)) < 0)
            rc = -1;
        use[i] = 1;
    }
    free(use);
    return rc;
}
