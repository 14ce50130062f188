/* Private to src/cost: the layout of ah_profile shared by profile.c (common
 * entry points and dispatch), profile_analytic.c and profile_table.c. */
#ifndef AUTOHET_COST_PROFILE_INTERNAL_H
#define AUTOHET_COST_PROFILE_INTERNAL_H
#include <stddef.h>
#include "autohet/calibration.h"
#include "autohet/profile.h"
#include "cost/gemm_model.h"

typedef enum { AH_PROFILE_ANALYTIC = 0, AH_PROFILE_TABLE = 1 } ah_profile_kind;

/* One (micro-batch, TP degree) entry of one device: n_layers costs, NaN in
 * fwd_s marks a layer not set yet (builder). */
typedef struct {
    int mb, tp;
    ah_layer_cost *layers;
} ah_ptab_entry;

typedef struct {
    char name[32];          /* canonical catalog name when known */
    char file[256];         /* Sailor file it came from ("" otherwise) */
    ah_ptab_entry *entries; /* sorted by (mb, tp) */
    int n_entries, cap_entries;
} ah_ptab_device;

struct ah_profile {
    ah_profile_kind kind;
    char *source; /* "analytic" or "measured:<path>" */
    /* Measured tables only: */
    char *model;  /* model name recorded in the file ("" if none) */
    char *origin; /* free-form "source" string of the file ("" if none) */
    int seq;      /* sequence length the table was measured at */
    char precision[8]; /* GEMM precision of the measurement, "fp32" or "bf16" ("" if not recorded) */
    int n_layers; /* layers per entry (embedding + blocks + head); 0 = not fixed yet */
    ah_ptab_device *devs;
    int n_devs, cap_devs;
    char **skipped; /* Sailor file names that mapped to no catalog device */
    int n_skipped;
    const ah_calibration *calib; /* compute scales by device and micro-batch (NULL: none); not owned */
};

/* Allocate a zeroed profile of this kind with the given source string. */
ah_profile *ah_profile_alloc_(ah_profile_kind kind, const char *source);
int ah_profile_set_source_(ah_profile *p, const char *source);
/* Release the table part (profile.c calls it from ah_profile_free). */
void ah_ptab_release_(ah_profile *p);

int ah_analytic_layer_cost_(const ah_model_config *m, const ah_train_settings *ts, const ah_device *dev,
                            int layer, int tp, int mb, ah_layer_cost *out, char *err, size_t errlen);
/* The same at an explicit training precision and GEMM-model constants (the
 * calibration evaluates fp32-measured profiles with trial constants; the
 * planner's profile uses BF16 and ah_gemm_fitted). */
int ah_analytic_layer_cost_prec_(const ah_model_config *m, const ah_train_settings *ts, const ah_device *dev,
                                 int layer, int tp, int mb, ah_precision prec, const ah_gemm_consts *gc,
                                 ah_layer_cost *out, char *err, size_t errlen);
int ah_table_layer_cost_(const ah_profile *p, const ah_model_config *m, const ah_train_settings *ts,
                         const ah_device *dev, int layer, int tp, int mb, ah_layer_cost *out, char *err,
                         size_t errlen);
int ah_table_has_(const ah_profile *p, const ah_model_config *m, const ah_device *dev, int tp, int mb);
int ah_table_has_device_(const ah_profile *p, const ah_model_config *m, const ah_device *dev);
ah_profile *ah_table_load_json_(const char *path, char *err, size_t errlen);

/* snprintf into err if err/errlen allow it. */
void ah_cost_err_(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
