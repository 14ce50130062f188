/* Per-layer cost profiles: forward/backward/optimizer time of one layer on one
 * GPU type at a TP degree and micro-batch size.
 *
 * Sources: the analytic roofline model (default) and tables of measured
 * times (imported from Sailor's published profiles, or written by
 * `autohet profile`). Memory always comes from the model module. */
#ifndef AUTOHET_PROFILE_H
#define AUTOHET_PROFILE_H
#include <stddef.h>
#include "autohet/calibration.h"
#include "autohet/device.h"
#include "autohet/model.h"

typedef struct {
    double fwd_s;    /* forward of one micro-batch, seconds, per GPU of the TP group */
    double bwd_s;    /* backward (incl. recomputation if enabled) */
    double update_s; /* optimizer step for this layer's shard */
    /* Parts of fwd_s / bwd_s that are tensor-parallel all-reduces (the
     * simulator shows them on their own stream). The analytic model knows
     * them; measured profiles report 0 (their times include TP traffic but
     * cannot tell it apart). */
    double tp_comm_fwd_s, tp_comm_bwd_s;
} ah_layer_cost;

typedef struct ah_profile ah_profile;

/* The analytic roofline model (docs/cost-model.md). */
ah_profile *ah_profile_analytic(void);
/* Load a directory of Sailor-format files "<GPU>.json":
 *   {"<mb>": {"<tp>": {"<layer>": [fwd_s, bwd_s, update_s]}}}
 * File names are mapped to catalog device names (A100-40 -> A100-40G, ...).
 * Returns NULL with a one-line error naming the file/field. */
ah_profile *ah_profile_load_sailor_dir(const char *dir, char *err, size_t errlen);
/* The same with the devices of `catalog` (the built-in one with a user's
 * --devices overrides): a file named after a GPU only they define loads. */
ah_profile *ah_profile_load_sailor_dir_with(const char *dir, const ah_device_catalog *catalog, char *err,
                                            size_t errlen);
/* Load one autohet profile JSON (format in docs/profile-format.md) or, if path
 * is a directory, a Sailor directory. */
ah_profile *ah_profile_load(const char *path, char *err, size_t errlen);
/* The same, file names of a directory mapped through `catalog`. */
ah_profile *ah_profile_load_with(const char *path, const ah_device_catalog *catalog, char *err, size_t errlen);
void ah_profile_free(ah_profile *p);
/* "analytic" or "measured:<path>" */
const char *ah_profile_source(const ah_profile *p);

/* Cost of layer `layer` (0 = embedding, N+1 = head) for device `dev` at TP
 * degree tp and micro-batch mb. Returns 0, or -1 if this profile has no entry
 * (a measured profile lacks the device / tp / mb, or its layer count differs
 * from the model's); err then says which. */
int ah_profile_layer_cost(const ah_profile *p, const ah_model_config *m, const ah_train_settings *ts,
                          const ah_device *dev, int layer, int tp, int mb, ah_layer_cost *out, char *err,
                          size_t errlen);

/* Does the profile cover (dev, tp, mb)? Used to prune the search space. */
/* Scale every layer's forward and backward time by the calibration's compute scale of its device at its
 * micro-batch (autohet/calibration.h); NULL removes it. The calibration must outlive the profile's use. */
void ah_profile_set_calibration(ah_profile *p, const ah_calibration *c);
int ah_profile_has(const ah_profile *p, const ah_model_config *m, const ah_device *dev, int tp, int mb);
/* Does it cover `dev` at all (some tp and mb, the model's layer count)? A
 * planner must not quietly leave out a GPU type that it has no data for. */
int ah_profile_has_device(const ah_profile *p, const ah_model_config *m, const ah_device *dev);

#endif
