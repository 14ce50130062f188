/* Model description: HF-style configs, built-in presets, and the per-layer
 * quantities (parameters, FLOPs, activation memory) every other module uses.
 *
 * Layer numbering used everywhere in autohet: a model with N transformer
 * blocks has N + 2 "layers": 0 = embedding, 1..N = blocks, N+1 = output head
 * (final norm + LM head; for BERT the MLM head). */
#ifndef AUTOHET_MODEL_H
#define AUTOHET_MODEL_H
#include <stddef.h>

typedef enum { AH_ARCH_GPT = 0, AH_ARCH_LLAMA = 1, AH_ARCH_BERT = 2 } ah_arch;

typedef struct {
    char name[64];
    ah_arch arch;
    int hidden;        /* h */
    int n_layers;      /* transformer blocks N */
    int n_heads;       /* attention heads a */
    int n_kv_heads;    /* key/value heads (GQA); == n_heads for MHA */
    int ffn_hidden;    /* MLP inner size (4h for GPT/BERT; intermediate_size for LLaMA) */
    int vocab;         /* vocabulary size V */
    int max_positions; /* learned positions (GPT/BERT); 0 for RoPE models */
    int tied_embeddings;
} ah_model_config;

typedef enum { AH_RECOMPUTE_NONE = 0, AH_RECOMPUTE_SELECTIVE = 1, AH_RECOMPUTE_FULL = 2 } ah_recompute;

/* Training settings that change cost and memory. */
typedef struct {
    int seq;                /* sequence length s */
    ah_recompute recompute; /* activation recomputation */
} ah_train_settings;

typedef enum { AH_LAYER_EMBED = 0, AH_LAYER_BLOCK = 1, AH_LAYER_HEAD = 2 } ah_layer_kind;

/* Bytes of training state per parameter (bf16 mixed precision with fp32
 * master weights and Adam): 2 bf16 weight + 4 fp32 gradient + 4 fp32 master
 * + 4 Adam m + 4 Adam v. */
#define AH_STATE_BYTES_PER_PARAM 18.0
/* Gradient bytes per parameter moved by the data-parallel all-reduce (fp32). */
#define AH_GRAD_BYTES_PER_PARAM 4.0
/* Activation element size (bf16). */
#define AH_ACT_BYTES 2.0

/* Presets: 0 on success, -1 if the name is unknown. Names are case-insensitive. */
int ah_model_preset(const char *name, ah_model_config *out);
/* NULL-terminated list of preset names. */
const char *const *ah_model_preset_names(void);
/* Parse an HF-style config.json (GPT-2, LLaMA or BERT keys). On error returns
 * -1 and writes one line naming the file and the field into err. */
int ah_model_load_json(const char *path, ah_model_config *out, char *err, size_t errlen);
/* Preset name, or a path to a config.json. */
int ah_model_resolve(const char *name_or_path, ah_model_config *out, char *err, size_t errlen);
const char *ah_arch_name(ah_arch a);
int ah_recompute_parse(const char *s, ah_recompute *out);
const char *ah_recompute_name(ah_recompute r);

int ah_model_num_layers(const ah_model_config *m); /* n_layers + 2 */
ah_layer_kind ah_model_layer_kind(const ah_model_config *m, int layer);
/* Parameters of one layer of this kind (the head counts its own copy of a tied
 * embedding matrix, as Megatron keeps one on the last stage). */
double ah_layer_params(const ah_model_config *m, ah_layer_kind k);
double ah_model_total_params(const ah_model_config *m); /* unique parameters (tied counted once) */
/* Forward FLOPs of one layer for one micro-batch of mb sequences (whole layer,
 * before any tensor-parallel split). Backward = 2x forward. */
double ah_layer_fwd_flops(const ah_model_config *m, ah_layer_kind k, int seq, int mb);
/* Bytes of HBM traffic of one layer's forward (weights read + activations
 * read/written), per GPU at TP degree tp; used by the roofline. */
double ah_layer_fwd_bytes(const ah_model_config *m, ah_layer_kind k, int seq, int mb, int tp);
/* Activation bytes one GPU keeps for one in-flight micro-batch of this layer
 * at TP degree tp (Korthikanti et al. 2022 accounting; see docs/cost-model.md). */
double ah_layer_act_bytes(const ah_model_config *m, ah_layer_kind k, int seq, int mb, int tp,
                          ah_recompute rc);
/* Bytes of the activation tensor sent between pipeline stages for one
 * micro-batch (b*s*h bf16), before any TP split. */
double ah_model_p2p_bytes(const ah_model_config *m, int seq, int mb);
/* Model FLOPs per iteration per sequence (fwd+bwd = 3x forward, no
 * recomputation counted): the convention behind reported TFLOP/s and MFU. */
double ah_model_flops_per_sequence(const ah_model_config *m, int seq);

#endif
