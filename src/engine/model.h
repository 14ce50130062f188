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
#include "engine/backend.h"
#include "engine/optim.h"

/* Communication hooks the model needs inside a layer (tensor parallelism).
 * NULL allreduce = single TP rank. The model has synchronised its backend
 * before the call; buf is a backend buffer of n floats (ah__dptr_transport
 * gives its address for the transport). */
typedef struct {
    void (*allreduce)(ah_dptr buf, size_t n, void *ctx); /* sum over the TP group, in place */
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

/* Index in the full tensor (row-major [grows x gcols]) of local element
 * (r, c) of the shard ti describes. */
size_t ah__tensor_global_index(const ah_tensor_info *ti, int r, int c);

#define AH_MAX_TENSORS 16

typedef struct {
    int index; /* global layer index */
    ah_layer_kind kind;
    size_t n; /* floats in the layer */
    ah_dptr param, grad, m, v; /* backend buffers of n floats: only model.c reads them */
    ah_tensor_info t[AH_MAX_TENSORS];
    int n_tensors;
} ah_eng_layer;

/* The tensor table of layer l as TP rank tp_rank of tp holds it, without
 * buffers (where each tensor's shard sits in the full tensor, which tensors
 * are replicated): the one description of the TP layout, for code that maps
 * one degree's shards onto another's. Free with ah__engine_layer_info_free. */
void ah__engine_layer_describe(const ah_model_config *cfg, int l, int tp, int tp_rank, ah_eng_layer *out);
void ah__engine_layer_info_free(ah_eng_layer *L);

/* A run of n floats at offset off of a layer buffer. */
typedef struct {
    size_t off, n;
} ah_float_run;
/* The runs of layer buffer `mine` (a held layer's table) that hold the TP-split
 * tensors of `part` (the same layer's table at a degree that is a multiple of
 * mine's, for a TP rank whose shard lies inside mine), in part's element order:
 * a TP slice of the gradient sync of a layer held at different degrees.
 * Replicated tensors are left out. Returns the count; *out is malloc'ed. */
int ah__engine_slice_runs(const ah_eng_layer *mine, const ah_eng_layer *part, ah_float_run **out);
/* The runs of mine's replicated tensors (the same on every TP rank). */
int ah__engine_replicated_runs(const ah_eng_layer *mine, ah_float_run **out);

/* Saved activations of one micro-batch through one layer. */
typedef struct {
    ah_dptr buf; /* one backend allocation, sliced */
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
    float norm_eps;       /* LayerNorm / RMSNorm epsilon (the config's, default 1e-5) */
    const ah_backend *be; /* every buffer of the model lives on it */
    /* called after each layer of a backward (NULL: none): the executor's progress of the all-reduces it
     * started inside the backward (--overlap-dp), which MPI moves only inside its calls */
    void (*after_layer)(void *arg);
    void *after_layer_arg;
} ah_engine_model;

/* Which buffer of a layer. */
typedef enum { AH_STATE_PARAM = 0, AH_STATE_GRAD = 1, AH_STATE_ADAM_M = 2, AH_STATE_ADAM_V = 3 } ah_layer_state;

/* Build the layers [first, last) of cfg for TP rank tp_rank of tp, micro-batch
 * B, sequence T, and (init != 0) initialise them from seed; without init the
 * parameters are zero, for state that is restored next. The buffers live on
 * ah__backend_default(), whose context computes the linear layers' products in
 * precision prec (ah__engine_model_init: fp32). Returns 0, or -1 with err
 * (heads not divisible by tp, an unknown backend, ...). */
int ah__engine_model_init(ah_engine_model *e, const ah_model_config *cfg, int T, int B, int first, int last,
                         int tp, int tp_rank, uint64_t seed, int init, char *err, size_t errlen);
int ah__engine_model_init_prec(ah_engine_model *e, const ah_model_config *cfg, int T, int B, int first, int last,
                              int tp, int tp_rank, uint64_t seed, int init, ah_matmul_precision prec, char *err,
                              size_t errlen);
void ah__engine_model_free(ah_engine_model *e);
void ah__engine_zero_grads(ah_engine_model *e);
/* Width of the hidden state passed between layers (C floats per token). */
int ah__engine_hidden(const ah_engine_model *e);

/* Forward of the held layers for one micro-batch. The first held layer takes
 * `tokens` (host) if it is the embedding, else `in` [B*T, C] (a backend
 * buffer). If the last held layer is the head, targets (host) are used and the
 * summed token loss is written to *loss; otherwise the hidden state is written
 * to the backend buffer `out` [B*T, C] (a null handle: not written). acts
 * receives one entry per held layer (released by the backward). */
int ah__engine_forward(ah_engine_model *e, const int *tokens, ah_dptr in, const int *targets, ah_dptr out,
                      double *loss, ah_eng_acts *acts);
/* Backward of the held layers for the same micro-batch: dout [B*T, C] unless
 * the last held layer is the head (then the loss gradient is seeded with
 * loss_scale per token); writes din [B*T, C] unless the first held layer is the
 * embedding (dout, din: backend buffers). Gradients accumulate into the
 * layers. Frees acts. */
int ah__engine_backward(ah_engine_model *e, const int *tokens, const int *targets, ah_dptr dout, ah_dptr din,
                       float loss_scale, ah_eng_acts *acts);
/* The same over held layers [lo, hi) only (a piece of the backward, top piece first: dout is the gradient
 * into layer hi - 1, din the one out of layer lo; acts the whole held range's). Frees those layers' acts. */
int ah__engine_backward_range(ah_engine_model *e, const int *tokens, const int *targets, ah_dptr dout, ah_dptr din,
                              float loss_scale, ah_eng_acts *acts, int lo, int hi);
void ah__engine_acts_free(ah_engine_model *e, ah_eng_acts *acts);

/* Floats of layer l (global index) in an unsharded (TP=1) layer buffer. */
size_t ah__engine_layer_full_size(const ah_engine_model *e, int l);
/* Scatter the local shard of held layer l into a zeroed full-layer buffer
 * (replicated tensors only when tp_rank == 0, so that summing the buffers of
 * a TP group yields the full layer). which: 0 params, 1 grads. */
void ah__engine_layer_to_full(const ah_engine_model *e, int l, int which, float *full);

/* Waits for every operation issued on the model's backend (before a transport
 * reads or writes one of its buffers). */
void ah__engine_sync(ah_engine_model *e);
/* Backend buffer of one state of held layer l (n = ah__engine_layer_floats),
 * for a transport (the data-parallel gradient all-reduce). */
ah_dptr ah__engine_layer_state(const ah_engine_model *e, int l, ah_layer_state which);
size_t ah__engine_layer_floats(const ah_engine_model *e, int l);
/* Host copy of a whole state of held layer l (ah__engine_layer_floats floats). */
void ah__engine_layer_to_host(const ah_engine_model *e, int l, ah_layer_state which, float *dst);
/* Overwrite tensor `tensor` of state `which` of held layer l with
 * t[tensor].size host floats (checkpoint restore). */
void ah__engine_tensor_from_host(ah_engine_model *e, int l, ah_layer_state which, int tensor, const float *src);
/* The same for `count` floats of that tensor from element `first` on (a
 * checkpoint restored piece by piece as it streams in). */
void ah__engine_tensor_range_from_host(ah_engine_model *e, int l, ah_layer_state which, int tensor, size_t first,
                                      size_t count, const float *src);

/* Tied embeddings: floats of the tied matrix, and the gradient of the copy held
 * here in the embedding (head 0) or in the head (head 1). */
size_t ah__engine_tied_size(const ah_engine_model *e);
ah_dptr ah__engine_tied_grad(const ah_engine_model *e, int head);
/* Both copies held here: each becomes embedding + head. */
void ah__engine_tied_sum_local(ah_engine_model *e);
/* One copy held here (the head's if head): it becomes embedding + head, with
 * `other` (a backend buffer) holding the other copy's gradient. */
void ah__engine_tied_add(ah_engine_model *e, int head, ah_dptr other);

/* Sum of squares of the gradients this model counts towards the global norm:
 * replicated tensors only on TP rank 0, a tied head never (its embedding copy
 * counts). */
double ah__engine_grad_sumsq(const ah_engine_model *e);
/* One AdamW step t (1-based) at learning rate lr on the gradients times clip
 * (read, not written: the gradients are zeroed before the next use), each
 * tensor with its weight-decay flag. */
void ah__engine_clip_and_step(ah_engine_model *e, float clip, float lr, int t, const ah_optim_config *oc);

/* Model FLOPs of one forward of the held layers' full (unsharded) math for one micro-batch (for MFU). */
double ah__engine_forward_flops(const ah_engine_model *e);

#endif
