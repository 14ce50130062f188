/* Sampling tokens from a model (autohet generate, docs/weights.md): one
 * process, TP=1, the last position's logits from the final norm and the LM
 * head; greedy at temperature 0, else softmax(logits / temperature) over the
 * top-k tokens with a seeded generator.
 *
 * With the KV cache (the default) the blocks run on the host: the prompt goes
 * through them once (prefill), then each new token alone, attending to the
 * cached keys and values of every earlier position. Without it every token
 * runs the whole sequence through the engine's training forward: the
 * reference the tests compare the cache with (autohet generate --no-kv-cache). */
#ifndef AUTOHET_ENGINE_GENERATE_H
#define AUTOHET_ENGINE_GENERATE_H
/* ah_gen_config and ah_generate are public: autohet/engine.h */
#include "autohet/engine.h"
#include "engine/hf_weights.h"

#endif
