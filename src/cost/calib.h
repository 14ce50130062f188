/* Private to src/cost, the tests and bench/calib_bench: fitting the GEMM
 * model's few constants to the Sailor profiles, and leave-one-type-out
 * validation (docs/calibration.md). */
#ifndef AUTOHET_COST_CALIB_H
#define AUTOHET_COST_CALIB_H
#include <stddef.h>
#include "autohet/model.h"
#include "cost/gemm_model.h"

/* GPU architectures with their own fitted max GEMM efficiency. */
typedef enum { AH_GPU_VOLTA = 0, AH_GPU_TURING, AH_GPU_GA100, AH_GPU_GA102, AH_CALIB_NCLASS } ah_gpu_arch;
const char *ah_gpu_arch_name(int cls);
/* Architecture of a catalog device name, -1 if it has none fitted. */
int ah_gpu_arch_of(const char *device);

/* One measured quantity: the fwd or bwd time of one layer kind of one model on
 * one GPU type at (mb, tp); blocks carry every block layer's value. */
typedef struct {
    char type[32];  /* catalog device the point is costed as */
    char label[32]; /* the profile's own name for it (differs only where identified, ah_calib_load) */
    int model;      /* index into ah_calib_set.models */
    ah_layer_kind kind;
    int mb, tp, bwd;
    double *meas;
    int n_meas;
} ah_calib_point;

typedef struct {
    ah_model_config models[4];
    char model_dirs[4][32];
    int n_models;
    ah_calib_point *pts;
    int n_pts, cap_pts;
    int n_edge_dropped; /* embedding/head points of models whose head holds no LM head (see calib.c) */
} ah_calib_set;

/* Load <root>/<model dir>/<GPU>.json for the Sailor model directories autohet
 * knows (OPT-350, GPT-Neo-2.7); at least one must exist. as_labeled = 0
 * costs a profile whose times its label's datasheet cannot produce as the
 * card they identify (ah_calib_identified); 1 keeps every label. 0, or -1 + err. */
int ah_calib_load(const char *root, int as_labeled, ah_calib_set *set, char *err, size_t errlen);
/* The catalog device a Sailor profile label is costed as (the label itself
 * unless identified otherwise; docs/calibration.md, "Datasheet floor"). */
const char *ah_calib_identified(const char *label);
void ah_calib_free(ah_calib_set *set);

typedef struct {
    double eff[AH_CALIB_NCLASS];
    int fitted[AH_CALIB_NCLASS]; /* 0: no data for this architecture; eff = median of the fitted */
    ah_gemm_consts c;
} ah_calib_params;

/* Fit to the TP = 1 transformer-block points, leaving out GPU type `exclude`
 * (NULL: none): minimise sum |log(pred / measured)| by a pattern search over
 * the log of every parameter. Returns 0, or -1 if no point is left. */
int ah_calib_fit(const ah_calib_set *set, const char *exclude, ah_calib_params *out);
/* Predicted time of point p under params (the analytic profile at FP32). */
double ah_calib_predict(const ah_calib_set *set, const ah_calib_params *prm, const ah_calib_point *p);

/* Which points a statistic covers. */
typedef enum { AH_SEL_BLOCK_TP1, AH_SEL_BLOCK_ALL, AH_SEL_EMBED, AH_SEL_HEAD } ah_calib_sel;
typedef struct {
    int n;              /* measured values covered */
    double median, p90; /* of |pred - meas| / meas */
} ah_calib_err;
/* Errors of type `type`'s points selected by sel and direction bwd. */
ah_calib_err ah_calib_errors(const ah_calib_set *set, const ah_calib_params *prm, const char *type,
                             ah_calib_sel sel, int bwd);

/* The TP = 1 transformer-block forwards of type `type` against their
 * datasheet floor (ah_block_fwd_floor_s at fp32): how many, the median of
 * measured / floor, and the fraction below 1 (physically impossible for
 * that datasheet). */
typedef struct {
    int n;
    double median_ratio, frac_below;
} ah_calib_floor;
ah_calib_floor ah_calib_floor_check(const ah_calib_set *set, const char *type);

#endif
