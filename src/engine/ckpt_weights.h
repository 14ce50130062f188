/* Full-layer parameters from a layer checkpoint of any plan (docs/weights.md):
 * the source of `autohet export` and `autohet generate --ckpt`. Each layer's
 * shards are found in the checkpoint's node directories as --resume finds
 * them (nearest good copy, checksums verified) and, when they were written
 * under TP > 1, joined by the resharding path (ah_reshard_layer) into the
 * TP=1 layout. */
#ifndef AUTOHET_ENGINE_CKPT_WEIGHTS_H
#define AUTOHET_ENGINE_CKPT_WEIGHTS_H
#include <stddef.h>

#include "engine/hf_weights.h"

typedef struct {
    char **dirs; /* the node directories under the checkpoint */
    int n_dirs;
    int step;
    ah_model_config cfg;
} ah_ckpt_weights;

/* Opens checkpoint DIR at `step` (< 0: the committed step of DIR/state.json)
 * for model `model` (a preset or config.json, which must agree with the
 * config state.json keeps as "model_config" in every field but the
 * vocabulary; NULL: that config, or for an older checkpoint without one the
 * name state.json records, which must then be a preset). The vocabulary is the one the run
 * trained (the embedding's rows: 256 on text data). Fills src. 0, or -1 with
 * one line naming the file or flag. */
int ah_ckpt_weights_open(const char *dir, int step, const char *model, ah_ckpt_weights *w, ah_weights_src *src,
                         char *err, size_t errlen);
void ah_ckpt_weights_close(ah_ckpt_weights *w);

#endif
