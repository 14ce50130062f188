/* Full-layer parameters from a layer checkpoint of any plan (docs/weights.md):
 * the source of `autohet export` and `autohet generate --ckpt`. Each layer's
 * shards are found in the checkpoint's node directories as --resume finds
 * them (nearest good copy, checksums verified) and, when they were written
 * under TP > 1, joined by the resharding path (ah__reshard_layer) into the
 * TP=1 layout. */
#ifndef AUTOHET_ENGINE_CKPT_WEIGHTS_H
#define AUTOHET_ENGINE_CKPT_WEIGHTS_H
/* ah_ckpt_weights_open / close are public: autohet/engine.h */
#include "autohet/engine.h"
#include "engine/hf_weights.h"

#endif
