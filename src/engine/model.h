/* The training engine's transformer: GPT-2 style (LayerNorm, GELU, learned
 * positions) or LLaMA style (RMSNorm, SwiGLU, RoPE, grouped-query attention),
 * built layer by layer so that a rank can hold any contiguous layer range of a
 * plan (layer 0 = embedding, 1..N = blocks, N+1 = head) and a 1/tp shard of
 * each block (Megatron column/row splits: attention by heads, MLP by columns).
 *
 * Each layer keeps its parameters, gradients and Adam moments in one
 * contiguous buffer each: the unit of the layer-wise gradient all-reduce and of
 * layer-granular checkpoints. Initialisation is a function of (seed, layer,
 * tensor, global element index) only, so every plan and every TP degree starts
 * from exactly the same model. */
#ifndef AUTOHET_ENGINE_MODEL_H
#define AUTOHET_ENGINE_MODEL_H
#include <stddef.h>
#include <stdint.h>

#include "autohet/model.h"

/* Communication hooks the model needs inside a layer (tensor parallelism).
 * NULL allreduce = single TP rank. */
typedef struct {
    void (*allreduce)(float *buf, size_t n, void *ctx); /* sum over the TP group, in place */
    void *ctx;
} ah_tp_comm;

typedef struct {
    const char *name;
    size_t offset, size; /* in floats, inside the layer buffer */
    int decay;           /* AdamW weight decay applies */
    int replicated;      /* identical on every TP rank (counted once in the global norm) */
    /* where the local [lrows x lcols] shard sits in the full [grows x gcols]
     * tensor: local row r is global row row_of[r], local column c is col0 + c */
    int lrows, lcols, grows, gcols, col0;
    int *row_of;
    size_t goffset; /* offset of the full tensor in a TP=1 layer buffer */
} ah_tensor_info;

#define AH_MAX_TENSORS 16

typedef struct {
    int index; /* global layer index */
    ah_layer_kind kind;
    size_t n; /* floats in the layer */
    float *param, *grad, *m, *v;
    ah_tensor_info t[AH_MAX_TENSORS];
    int n_tensors;
} ah_eng_layer;

/* Saved activations of one micro-batch through one layer. */
typedef struct {
    float *buf; /* one allocation, sliced */
    size_t n;
} ah_eng_acts;

typedef struct {
    ah_model_config cfg;
    int T, B; /* sequence length, micro-batch size */
    int tp, tp_rank;
    int first, last; /* layers [first, last) held here */
    ah_eng_layer *layers;
    ah_tp_comm comm;
    float rope_theta;
    /* scratch for one micro-batch (largest intermediate sizes) */
    float *scratch;
    size_t scratch_n;
} ah_engine_model;

/* Build the layers [first, last) of cfg for TP rank tp_rank of tp, micro-batch
 * B, sequence T, and (init != 0) initialise them from seed; without init the
 * parameters are zero, for state that is restored next. Returns 0, or -1 with
 * err (heads not divisible by tp, ...). */
int ah_engine_model_init(ah_engine_model *e, const ah_model_config *cfg, int T, int B, int first, int last,
                         int tp, int tp_rank, uint64_t seed, int init, char *err, size_t errlen);
void ah_engine_model_free(ah_engine_model *e);
void ah_engine_zero_grads(ah_engine_model *e);
/* Width of the hidden state passed between layers (C floats per token). */
int ah_engine_hidden(const ah_engine_model *e);

/* Forward of the held layers for one micro-batch. The first held layer takes
 * `tokens` if it is the embedding, else `in` [B*T, C]. If the last held layer
 * is the head, targets are used and the summed token loss is written to *loss;
 * otherwise the hidden state is written to `out` [B*T, C]. acts receives one
 * entry per held layer (released by the backward). */
int ah_engine_forward(ah_engine_model *e, const int *tokens, const float *in, const int *targets, float *out,
                      double *loss, ah_eng_acts *acts);
/* Backward of the held layers for the same micro-batch: dout [B*T, C] unless
 * the last held layer is the head (then the loss gradient is seeded with
 * loss_scale per token); writes din [B*T, C] unless the first held layer is the
 * embedding. Gradients accumulate into the layers. Frees acts. */
int ah_engine_backward(ah_engine_model *e, const int *tokens, const int *targets, const float *dout,
                       float *din, float loss_scale, ah_eng_acts *acts);
void ah_engine_acts_free(ah_engine_model *e, ah_eng_acts *acts);

/* Floats of layer l (global index) in an unsharded (TP=1) layer buffer. */
size_t ah_engine_layer_full_size(const ah_engine_model *e, int l);
/* Scatter the local shard of held layer l into a zeroed full-layer buffer
 * (replicated tensors only when tp_rank == 0, so that summing the buffers of
 * a TP group yields the full layer). which: 0 params, 1 grads. */
void ah_engine_layer_to_full(const ah_engine_model *e, int l, int which, float *full);

/* Model FLOPs of one forward of the held layers' full (unsharded) math for one micro-batch (for MFU). */
double ah_engine_forward_flops(const ah_engine_model *e);

#endif
