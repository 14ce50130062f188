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
#include <stdint.h>

#include "engine/hf_weights.h"

/* the most positions of a RoPE model's context here (what the uncached
 * reference path's engine forward is sized for; a GPT-2 model has its
 * max_positions) */
#define AH_GEN_MAX_POSITIONS 4096

typedef struct {
    int max_new;        /* tokens to add */
    double temperature; /* 0: greedy (the lowest id among equal logits) */
    int top_k;          /* 0: every token */
    uint64_t seed;
    int no_cache;       /* 1: no KV cache, the whole sequence per token (the reference) */
} ah_gen_config;

/* The weights of src, the prompt (n_prompt ids below the vocabulary), then
 * g->max_new sampled ids: out (n_prompt + max_new ints) holds all of them.
 * 0, or -1 with err (an id out of range, more positions than a GPT-2 model
 * has, a model the HF mapping does not cover, a layer that does not load). */
int ah_generate(const ah_weights_src *src, const int *prompt, int n_prompt, const ah_gen_config *g, int *out,
                char *err, size_t errlen);

#endif
