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

/* The most blocks a config with local-attention layers may have. */
#define AH_MAX_LOCAL_LAYERS 256

/* Bounds on a model's dimensions, for every reader (config.json, plan
 * documents, checkpoints): several times the largest real models' (~130
 * blocks, hidden 25600, vocabulary 256k). The planner's search grows faster
 * than linearly with the blocks (on 256 GPUs of two types, 1024 blocks plan
 * in ~3 s, 4096 in ~45 s, 100,000 took minutes), so absurd configs are
 * refused rather than searched. */
#define AH_MODEL_MAX_LAYERS 1024
#define AH_MODEL_MAX_HIDDEN (1 << 16)
#define AH_MODEL_MAX_HEADS 4096
#define AH_MODEL_MAX_FFN (1 << 18)
#define AH_MODEL_MAX_VOCAB (1 << 22)
#define AH_MODEL_MAX_POSITIONS (1 << 20)

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
    /* Details of HF families that change the parameter count or the math; 0
     * everywhere (what presets and GPT-2 / LLaMA configs get) is the plain
     * GPT-2 / LLaMA block. docs/model-configs.md, "Families". */
    /* OPT word_embed_proj_dim when != hidden: token embeddings (and the tied
     * head) are [V, embed_dim], project_in / project_out [embed_dim <-> hidden]
     * without bias; 0 = hidden */
    int embed_dim;
    int pos_offset;         /* learned position rows before position 0 (OPT: 2) */
    int post_norm;          /* LayerNorm after each residual add, no final norm (OPT) */
    int act;                /* MLP activation of GPT blocks (ah_activation) */
    int qkv_bias;           /* LLaMA-style blocks with q/k/v biases (Qwen2) */
    int no_qkv_bias;        /* GPT blocks without q/k/v biases (GPT-Neo; out_proj keeps its bias) */
    int unscaled_attention; /* scores not divided by sqrt(head dim) (GPT-Neo) */
    int attn_window;        /* local layers see the last attn_window positions (GPT-Neo) */
    unsigned char local_layers[AH_MAX_LOCAL_LAYERS / 8]; /* bit i: block i (0-based) is local */
    double rope_theta;      /* RoPE base (rope_theta); 0 = 10000 */
    double norm_eps;        /* norm epsilon (rms_norm_eps, layer_norm_epsilon/_eps); 0 = 1e-5 */
} ah_model_config;

/* MLP activation of GPT-style blocks (HF activation_function). */
typedef enum { AH_ACT_GELU_TANH = 0, AH_ACT_RELU = 1, AH_ACT_GELU_EXACT = 2, AH_ACT_OTHER = 3 } ah_activation;
const char *ah_activation_name(ah_activation a);
/* Width of the token embedding (embed_dim, or hidden). */
int ah_model_embed_width(const ah_model_config *m);
/* Whether block b (0-based) uses local (sliding-window) attention. */
int ah_model_block_is_local(const ah_model_config *m, int b);
/* Parameters of the tied embedding matrix (V x embedding width). */
double ah_model_tied_params(const ah_model_config *m);

typedef enum { AH_RECOMPUTE_NONE = 0, AH_RECOMPUTE_SELECTIVE = 1, AH_RECOMPUTE_FULL = 2 } ah_recompute;

/* Training precision: bf16 / fp16 mixed precision (half-precision weights,
 * activations and GEMMs; fp32 gradients, master weights and Adam) or plain
 * fp32 (GEMMs at the device's fp32_tflops: TF32 tensor cores on Ampere and
 * later). docs/cost-model.md, "Precision". */
typedef enum { AH_PRECISION_BF16 = 0, AH_PRECISION_FP16 = 1, AH_PRECISION_FP32 = 2 } ah_precision_mode;
/* Pipeline sends: on their own stream, overlapping compute (default), or
 * blocking: a send occupies the sender's compute stream until it completes;
 * lockstep: a model of other runtimes' pipelines (DeepSpeed's), not one the
 * engine runs: every stage's forward and backward wait for the replica's
 * chain of blocking transfers of one activation on its slowest boundary
 * (autohet/calibration.h, docs/cost-model.md). */
typedef enum { AH_P2P_OVERLAPPED = 0, AH_P2P_BLOCKING = 1, AH_P2P_LOCKSTEP = 2 } ah_p2p_mode;

/* Training settings that change cost and memory. Zero = the defaults
 * (bf16, overlapped sends, no distributed optimizer). */
typedef struct {
    int seq;                     /* sequence length s */
    ah_recompute recompute;      /* activation recomputation */
    ah_precision_mode precision; /* element sizes and GEMM peak */
    ah_p2p_mode p2p;             /* pipeline sends overlapped, blocking or lockstep */
    int dist_optimizer;          /* optimizer state sharded over the data-parallel replicas */
} ah_train_settings;

/* Bytes per element / per parameter of one training precision: the one place
 * these facts live (docs/cost-model.md, "Precision"). */
typedef struct {
    double elem;   /* activations, pipeline sends, TP all-reduces */
    double weight; /* the weight copy the GEMMs read (and the dist-optimizer all-gather moves) */
    double grad;   /* gradient as accumulated and reduced across replicas (fp32) */
    double master; /* fp32 master copy of the weights (0 when the weights are fp32) */
    double adam;   /* Adam m + v (fp32) */
    double update; /* HBM traffic of the optimizer step per parameter */
} ah_precision_bytes;
const ah_precision_bytes *ah_precision_bytes_of(ah_precision_mode p);
/* Training state per parameter with the optimizer state (master + Adam)
 * sharded over `shards` replicas (1 = not sharded): weight + grad +
 * (master + adam) / shards. bf16: 18 B unsharded, fp32: 16 B. */
double ah_state_bytes_per_param(ah_precision_mode p, int shards);
/* Bytes per parameter one GPU moves in the data-parallel gradient sync, at
 * the large-R limit of a ring: all-reduce 2 x grad; distributed optimizer
 * reduce-scatter of the gradients + all-gather of the weights, grad + weight. */
double ah_dp_sync_bytes_per_param(ah_precision_mode p, int dist_optimizer);
int ah_precision_parse(const char *s, ah_precision_mode *out);
const char *ah_precision_name(ah_precision_mode p);
int ah_p2p_mode_parse(const char *s, ah_p2p_mode *out);
const char *ah_p2p_mode_name(ah_p2p_mode p);

typedef enum { AH_LAYER_EMBED = 0, AH_LAYER_BLOCK = 1, AH_LAYER_HEAD = 2 } ah_layer_kind;


/* Presets: 0 on success, -1 if the name is unknown. Names are case-insensitive. */
int ah_model_preset(const char *name, ah_model_config *out);
/* NULL-terminated list of preset names. */
const char *const *ah_model_preset_names(void);
/* Parse an HF-style config.json (GPT-2, LLaMA or BERT keys). On error returns
 * -1 and writes one line naming the file and the field into err. */
int ah_model_load_json(const char *path, ah_model_config *out, char *err, size_t errlen);
/* Preset name, or a path to a config.json. */
int ah_model_resolve(const char *name_or_path, ah_model_config *out, char *err, size_t errlen);
/* Whether the model takes sequences of seq tokens: a model with learned
 * positions has max_positions rows (the engine refuses longer sequences); a
 * RoPE model (max_positions 0) has no such limit. 0 if it does, else -1 with
 * "WHAT SEQ exceeds ..." in buf (what: "--seq", "train.seq"). */
int ah_model_check_seq(const ah_model_config *m, int seq, const char *what, char *buf, size_t n);
const char *ah_arch_name(ah_arch a);
int ah_recompute_parse(const char *s, ah_recompute *out);
const char *ah_recompute_name(ah_recompute r);

int ah_model_num_layers(const ah_model_config *m); /* n_layers + 2 */
ah_layer_kind ah_model_layer_kind(const ah_model_config *m, int layer);
/* Parameters of one layer of this kind (the head counts its own copy of a tied
 * embedding matrix, as Megatron keeps one on the last stage). */
double ah_layer_params(const ah_model_config *m, ah_layer_kind k);
double ah_model_total_params(const ah_model_config *m); /* unique parameters (tied counted once) */
/* The vocabulary the training engine's head GEMM computes: V rounded up to a
 * multiple of AH_VOCAB_PAD (as llm.c pads 50257 to 50304); the padding logits
 * are masked out of the loss and are not parameters. */
#define AH_VOCAB_PAD 64
int ah_model_padded_vocab(const ah_model_config *m);
/* Forward FLOPs of one layer for one micro-batch of mb sequences (whole layer,
 * before any tensor-parallel split). Backward = 2x forward. */
double ah_layer_fwd_flops(const ah_model_config *m, ah_layer_kind k, int seq, int mb);
/* Bytes of HBM traffic of one layer's forward (weights read + activations
 * read/written), per GPU at TP degree tp; used by the roofline. */
double ah_layer_fwd_bytes(const ah_model_config *m, ah_layer_kind k, int seq, int mb, int tp);
/* Activation bytes one GPU keeps for one in-flight micro-batch of this layer
 * at TP degree tp (Korthikanti et al. 2022 accounting; see docs/cost-model.md). */
double ah_layer_act_bytes(const ah_model_config *m, ah_layer_kind k, int seq, int mb, int tp,
                          ah_recompute rc, ah_precision_mode prec);
/* Bytes of the activation tensor sent between pipeline stages for one
 * micro-batch (b*s*h elements of the training precision), before any TP split. */
double ah_model_p2p_bytes(const ah_model_config *m, int seq, int mb, ah_precision_mode prec);
/* Hardware FLOPs per sequence: model FLOPs plus what recomputation redoes
 * (full: the blocks' forward again, Megatron's 4x forward; selective: the
 * blocks' attention core 4 b s^2 h again). */
double ah_model_hw_flops_per_sequence(const ah_model_config *m, int seq, ah_recompute rc);
/* Model FLOPs per iteration per sequence (fwd+bwd = 3x forward, no
 * recomputation counted): the convention behind reported TFLOP/s and MFU. */
double ah_model_flops_per_sequence(const ah_model_config *m, int seq);

#endif
