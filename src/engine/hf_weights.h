/* Weights in and out of the engine in Hugging Face format (docs/weights.md):
 * GPT-2 (GPT2LMHeadModel) and LLaMA-family (LlamaForCausalLM; Mistral and
 * Qwen2 keys) model directories: config.json + model.safetensors, or shards
 * listed by model.safetensors.index.json.
 *
 * The engine's tensors of a layer, in the full (TP=1) layout of
 * engine/model.h, are named "param.<tensor>" (as in a layer checkpoint), so a
 * layer read from a HF directory is a TP=1 checkpoint shard of it: the one
 * owner of TP slicing, ah__reshard_from_shards, cuts each rank's shard out. */
#ifndef AUTOHET_ENGINE_HF_WEIGHTS_H
#define AUTOHET_ENGINE_HF_WEIGHTS_H
#include <stddef.h>

#include "autohet/ckpt.h"
#include "autohet/engine.h"
#include "autohet/model.h"
#include "engine/safetensors.h"

/* Whether the HF mapping covers cfg (GPT-2 blocks: learned positions, pre-LN,
 * gelu_new or relu, q/k/v biases; LLaMA blocks, Qwen2's q/k/v biases): 0, or
 * -1 with err naming what it lacks (OPT, GPT-Neo, ...). */
int ah__hf_supported(const ah_model_config *cfg, char *err, size_t errlen);

/* ah_hf_dir, ah_hf_open, ah_hf_close: autohet/engine.h */

/* Layer l of cfg (the run's model: its vocabulary may be the data's) from the
 * HF tensors, as the full engine tensors "param.<name>" (free with
 * ah_ckpt_free): names mapped, GPT-2's Conv1D weights transposed, LLaMA q/k
 * rows permuted from HF's rotate-half layout to the engine's interleaved RoPE
 * pairs, gate/up concatenated, a tied head taken from the embedding. 0, or -1
 * with err naming the tensor (missing, or its shape and the expected one). */
int ah__hf_read_layer(const ah_hf_dir *h, const ah_model_config *cfg, int l, ah_ckpt_loaded **out, int *n,
                     char *err, size_t errlen);

/* ah_weights_src, ah_hf_source, ah_hf_export: autohet/engine.h */

#endif
