/* Measured cost tables: build them in memory, write them as autohet profile
 * JSON (docs/profile-format.md), and inspect loaded ones (autohet files or
 * Sailor directories, see autohet/profile.h for the loaders).
 *
 * Device names are resolved through the built-in catalog (ah_device_find) so
 * aliases such as "A100-40" are stored as "A100-40G"; names it does not know
 * are kept verbatim and match an ah_device of exactly that name (case-
 * insensitive), e.g. one added by ah_device_load_overrides. */
#ifndef AUTOHET_PROFILE_TABLE_H
#define AUTOHET_PROFILE_TABLE_H
#include <stddef.h>
#include "autohet/profile.h"

/* ---- builder ---- */

/* Empty measured table for `model` (a name recorded in the file, may be NULL
 * or "") measured at sequence length `seq` (> 0). NULL on bad arguments or
 * out of memory. ah_profile_source() is "measured:(in-memory)" until the
 * table is written and loaded back. */
ah_profile *ah_profile_table_new(const char *model, int seq);
/* Set one layer's cost for (device, mb, tp). n_layers is the number of layers
 * per entry (ah_model_num_layers(): embedding + blocks + head); the first call
 * fixes it and later calls must pass the same value. Costs must be finite and
 * >= 0. Loaded measured profiles may be extended too. Returns 0, or -1 (bad
 * argument, analytic profile, layer out of range, layer count differing from
 * the table's, out of memory). */
int ah_profile_table_set(ah_profile *p, const char *device, int mb, int tp, int layer, int n_layers,
                         ah_layer_cost c);
/* Free-form provenance text stored as "source" in the file (NULL clears). */
int ah_profile_table_set_origin(ah_profile *p, const char *origin);
/* The GEMM precision the costs were measured at, "fp32" or "bf16", stored as "precision" (NULL clears). */
int ah_profile_table_set_precision(ah_profile *p, const char *precision);

/* ---- writer ---- */

/* Write p (built, or loaded from either format) as autohet profile JSON.
 * Every entry must have all its layers set. Returns 0, or -1 with one line in
 * err. */
int ah_profile_table_write(const ah_profile *p, const char *path, char *err, size_t n);

/* ---- inspection (all return 0 / NULL for the analytic profile) ---- */

int ah_profile_is_measured(const ah_profile *p);
const char *ah_profile_table_model(const ah_profile *p);  /* "" if unknown */
const char *ah_profile_table_origin(const ah_profile *p); /* "" if none */
const char *ah_profile_table_precision(const ah_profile *p); /* "fp32", "bf16", or "" if not recorded */
int ah_profile_table_seq(const ah_profile *p);
int ah_profile_table_num_layers(const ah_profile *p); /* 0 while empty */
int ah_profile_table_num_devices(const ah_profile *p);
const char *ah_profile_table_device(const ah_profile *p, int i);
/* Entries of device i, sorted by (mb, tp). */
int ah_profile_table_num_entries(const ah_profile *p, int device_index);
int ah_profile_table_entry(const ah_profile *p, int device_index, int j, int *mb, int *tp);
/* Raw stored cost (no slowdown applied); -1 if absent or not set. */
int ah_profile_table_get(const ah_profile *p, const char *device, int mb, int tp, int layer,
                         ah_layer_cost *out);
/* Sailor files skipped because their name matched no catalog device. */
int ah_profile_table_num_skipped(const ah_profile *p);
const char *ah_profile_table_skipped(const ah_profile *p, int i);

#endif
