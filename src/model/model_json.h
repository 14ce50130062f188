/* The family details of a model config (include/autohet/model.h: OPT's
 * embedding projection, post-LN and activation, Qwen2's q/k/v biases,
 * GPT-Neo's bias-free q/k/v, unscaled scores and local layers, rope_theta) in
 * a JSON object, for documents that spell a model out field by field (plans):
 * the one place those keys are named. Only non-default values are written, so
 * the object of a plain GPT-2 / LLaMA model is unchanged. */
#ifndef AUTOHET_MODEL_MODEL_JSON_H
#define AUTOHET_MODEL_MODEL_JSON_H
#include <cjson/cJSON.h>

#include "autohet/model.h"
#include "util/json_file.h"

/* Adds the keys to o: 0, or -1 when cJSON runs out of memory. */
int ah_model_family_to_json(cJSON *o, const ah_model_config *m);
/* Reads the keys (all optional) of o, whose path is parent, into m: 0, or -1
 * with one line naming the key. */
int ah_model_family_from_json(const ah_err_ctx *cx, const cJSON *o, const char *parent, ah_model_config *m);

/* The whole config as one object: name, arch, the dimensions, then the
 * family keys above (the keys of a plan's "model" object); NULL when cJSON
 * runs out of memory. A checkpoint's state.json keeps it (docs/weights.md). */
cJSON *ah_model_config_to_json(const ah_model_config *m);
/* Reads such an object (path parent) into m and validates it as a model the
 * engine can build (positive sizes, heads dividing hidden, kv heads dividing
 * heads): 0, or -1 with one line naming the key. */
int ah_model_config_from_json(const ah_err_ctx *cx, const cJSON *o, const char *parent, ah_model_config *m);

#endif
