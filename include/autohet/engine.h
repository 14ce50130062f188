/* The training engine's public interface (docs/engine.md, docs/architecture.md): what a program
 * (the autohet CLI, a test, a tool) needs to train, sample and move weights, and nothing of how
 * the engine does it. libuv's uv.h is the model: one header, public ah_ names; what the engine's
 * files share among themselves stays in the headers of src/engine/ under the internal prefix
 * ah__ (uv__), and a function of one file is static (scripts/check_structure.sh checks both).
 *
 *   compute      precision, the BLAS kernels, backends, the sgemm peak
 *   data         token files and text, split and served deterministically (ah_dataset)
 *   optimizer    AdamW's configuration (ah_optim_config)
 *   executor     one rank's part of a plan: create from a config, step, gather, trace, save
 *   trainer      the training loop over an executor: steps, evaluation, checkpoints, summary
 *   profile      one layer's measured forward, backward and update (autohet profile)
 *   weights      Hugging Face directories in and out, weights of a layer checkpoint, sampling */
#ifndef AUTOHET_ENGINE_H
#define AUTOHET_ENGINE_H
#include <mpi.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "autohet/ckpt.h"
#include "autohet/model.h"
#include "autohet/plan.h"
#include "autohet/schedule.h"

/* ======================================================================== compute */

/* The precision of the linear layers' matrix products, a property of a backend context (the
 * executor's, a profiled layer's): fp32 (cblas_sgemm: the default and the reference) or bf16
 * (operands rounded to bfloat16, products accumulated in fp32 into fp32 outputs, by oneDNN's
 * AVX-512-BF16 kernels; master weights, gradients and optimizer stay fp32; attention keeps fp32).
 * bf16 needs a CPU with AVX512_BF16 (cpuid) and a build with oneDNN (libdnnl-dev). */
typedef enum { AH_MATMUL_FP32 = 0, AH_MATMUL_BF16 = 1 } ah_matmul_precision;
/* "fp32" or "bf16" into *out: 0, or -1 with the reason in why (unknown name, no AVX512_BF16 on
 * this CPU, built without oneDNN). */
int ah_matmul_precision_parse(const char *name, ah_matmul_precision *out, char *why, size_t n);
/* "fp32" or "bf16" */
const char *ah_matmul_precision_name(ah_matmul_precision p);

/* Call first thing in a command that computes (before MPI_Init, before any
 * thread or signal handler). If OPENBLAS_CORETYPE is unset and OpenBLAS chose a
 * core of a lower class than the CPU's features allow, sets
 * OPENBLAS_CORETYPE (and AUTOHET_BLAS_CORE_CHOSEN, which also stops a second
 * re-exec) and re-executes /proc/self/exe with the same command line. Returns
 * (without re-executing) when nothing is to gain, when the user set the
 * variable, under valgrind (an exec would leave the tool), or when the exec
 * fails. cmd_argv is a subcommand's argument vector
 * (cmd_argv[0] the command name, as main passes it). */
void ah_blas_select_kernels(int argc, char **cmd_argv);

/* The kernel in use and who chose it, for start-up lines, e.g.
 * "OpenBLAS SkylakeX (chosen from CPU features: AVX-512)",
 * "OpenBLAS Haswell (OPENBLAS_CORETYPE as set)", "OpenBLAS Haswell (OpenBLAS's own choice)". */
void ah_blas_kernel_text(char *buf, size_t n);

/* Ranks share the cores they may run on: unless the user chose a thread count (OMP_NUM_THREADS or
 * OPENBLAS_NUM_THREADS set), sets this rank's OpenMP and OpenBLAS threads to its share of its CPU affinity
 * among the ranks of comm on its host with the same affinity (all of them when the launcher binds nothing, as
 * `autohet run` does; itself alone when bound to cores of its own), at least 1. Collective over comm. Returns
 * the threads set, or 0 when the user's choice stands; *sharing the ranks it shares with. Several ranks each
 * running a thread per core spin against each other: 4 ranks on 2 cores trained 15-20x slower. */
int ah_blas_share_cores(MPI_Comm comm, int *sharing);

/* 0 when the compute backend `name` ("cpu", "cuda") is usable here, else -1 with one line in err:
 * "built without CUDA", "no CUDA device visible (reason)", or an unknown name. */
int ah_backend_check(const char *name, char *err, size_t errlen);

/* sgemm peak of this rank in FLOP/s (a short timed loop). */
double ah_measure_sgemm_peak(void);

/* ======================================================================== data */

/* the most training text --data may hold (files of a directory together) */
#define AH_DATA_MAX_BYTES (256 << 20)
/* llm.c's token files: a header of 256 int32 (magic, version, token count,
 * zeros), then the tokens: uint16 in version 1, uint32 in version 2 */
#define AH_LLMC_MAGIC 20240520
#define AH_LLMC_VERSION 1
#define AH_LLMC_VERSION_U32 2
#define AH_LLMC_HEADER_BYTES 1024
/* Megatron's indexed dataset (.bin tokens + .idx index): the index header is
 * the 9-byte magic, uint64 version 1, uint8 dtype code, uint64 sequence
 * count, uint64 document count (34 bytes), then int32 sequence_lengths[S],
 * int64 sequence_pointers[S], int64 document_indices[D] */
#define AH_MEGATRON_MAGIC "MMIDIDX\0\0"
#define AH_MEGATRON_HEADER_BYTES 34

typedef enum {
    AH_DATA_TEXT = 0,  /* bytes of text files: tokens 0..255 */
    AH_DATA_TOKENS = 1 /* token ids of a tokenizer (the model's vocabulary) */
} ah_data_kind;

/* The type of the token ids in a file (Megatron's dtype codes map onto it). */
typedef enum {
    AH_TOKENS_UNSTATED = 0, /* a raw file without --data-dtype: read as uint16 */
    AH_TOKENS_U8,
    AH_TOKENS_I8,
    AH_TOKENS_I16,
    AH_TOKENS_U16,
    AH_TOKENS_I32,
    AH_TOKENS_U32,
    AH_TOKENS_I64
} ah_token_type;

/* "uint16", "int32", ... */
const char *ah_token_type_name(ah_token_type t);
/* bytes per token id (an unstated raw type is uint16: 2) */
int ah_token_type_size(ah_token_type t);
/* --data-dtype: "uint16" or "uint32"; AH_TOKENS_UNSTATED for anything else */
ah_token_type ah_token_type_parse(const char *name);

/* Where tokens [first, first + count) came from. A token file is
 * memory-mapped: its tokens are read from the mapping. */
typedef struct {
    char *path;
    size_t first, count;
    size_t header;      /* bytes before the first token in the file */
    ah_token_type type; /* token files: the type of the ids (AH_TOKENS_UNSTATED: raw uint16, not stated) */
    const unsigned char *at; /* token files: the first token, in the mapping */
    void *map;               /* the mapping (NULL for text, or an empty file) */
    size_t map_len;
} ah_data_file;

typedef struct {
    ah_data_kind kind;
    unsigned char *bytes; /* AH_DATA_TEXT: the corpus (files concatenated in name order) */
    /* AH_DATA_TOKENS: the token files, mapped, in order (ah_dataset_token reads one) */
    size_t n;
    size_t n_train; /* [0, n_train) train, [n_train, n) validation */
    ah_data_file *files;
    int n_files;
    char source[256];
    ah_token_type raw_type; /* the type raw token files were read as (--data-dtype) */
} ah_dataset;

/* Load --data: a text file or a directory of text files (bytes), an llm.c
 * token file (starts with AH_LLMC_MAGIC; version 1 uint16, version 2 uint32),
 * Megatron's indexed dataset (PREFIX.bin beside PREFIX.idx, named by either
 * file or by PREFIX), a raw token file (a name ending in .bin otherwise:
 * uint16 as nanoGPT writes them, or raw_type), or a directory of .bin shards
 * (name order; shards with "_val" in the name, as llm.c names them, are the
 * validation split). Token files are memory-mapped. Otherwise val_fraction of
 * the data at the end becomes the validation split. Returns 0, or -1 with a
 * one-line error naming the file (and the header field: missing, empty,
 * truncated header, wrong size, bad index, too small for the sequence). */
int ah_dataset_load(ah_dataset *d, const char *path, double val_fraction, int seq, char *err, size_t errlen);
/* As ah_dataset_load, raw token files read as raw_type (AH_TOKENS_U16 or
 * AH_TOKENS_U32; AH_TOKENS_UNSTATED: uint16, and a vocabulary over 65,536
 * then refused by ah_dataset_check_vocab). */
int ah_dataset_load_typed(ah_dataset *d, const char *path, double val_fraction, int seq,
                          ah_token_type raw_type, char *err, size_t errlen);
/* --val-data: the validation split is the data of path (any format of
 * ah_dataset_load, of the same kind as d, raw files as d's); all of d's train
 * data stays train and its own validation part is dropped. 0, or -1 with a
 * one-line error. */
int ah_dataset_set_validation(ah_dataset *d, const char *path, int seq, char *err, size_t errlen);
/* The kind of data ah_dataset_load would read from path, without reading it
 * (a path it cannot read counts as text: the loader names the error). */
ah_data_kind ah_dataset_kind_of(const char *path);
/* The vocabulary the engine trains on data of this kind: the 256 byte values
 * for text, the model's vocabulary for token data. The one owner of that rule
 * (autohet train, autohet run). */
int ah_dataset_vocab(ah_data_kind kind, int model_vocab);
/* Every token id in [0, vocab): 0, or -1 with "FILE: token id X at byte
 * offset O is not below the vocabulary V" (or "is negative"); a raw file
 * whose type was not stated, for a vocabulary over 65,536, is refused too.
 * Text data always passes vocab >= 256. */
int ah_dataset_check_vocab(const ah_dataset *d, int vocab, char *err, size_t errlen);
void ah_dataset_free(ah_dataset *d);
/* Token i of the dataset (0 <= i < n): a byte for text, a token id for
 * token data. */
int64_t ah_dataset_token(const ah_dataset *d, size_t i);

/* Sample `rows` sequences of seq+1 tokens (inputs = first seq, targets =
 * shifted by one) for global step `step`: sequence i of the global batch starts
 * at an offset drawn from a counter-based generator keyed by (seed, step, i),
 * uniformly in the split. tokens and targets are [rows * seq]. first_row lets a
 * replica fetch rows [first_row, first_row + rows) of the global batch only. */
void ah_dataset_batch(const ah_dataset *d, int validation, uint64_t seed, long step, int first_row, int rows,
                      int seq, int *tokens, int *targets);
/* Unigram entropy of the train split in nats per token (for judging the loss). */
double ah_dataset_unigram_entropy(const ah_dataset *d);
/* "text" or "tokens" */
const char *ah_data_kind_name(ah_data_kind k);

/* 64-bit counter-based hash (splitmix64 finalizer) used for sampling and for
 * deterministic parameter initialisation. */
uint64_t ah_hash64(uint64_t x);

/* ======================================================================== optimizer */

/* AdamW with decoupled weight decay, global-norm gradient clipping, cosine learning rate with
 * linear warm-up (ah_trainer_lr_schedule fills one for a run). */
typedef struct {
    float lr;     /* peak learning rate */
    float min_lr; /* floor of the cosine */
    int warmup_steps;
    int total_steps;
    float beta1, beta2, eps;
    float weight_decay;
    float grad_clip; /* max global gradient norm, <= 0 disables */
} ah_optim_config;

void ah_optim_config_default(ah_optim_config *c);

/* ======================================================================== executor */

typedef struct ah_executor ah_executor;

typedef struct {
    int step;
    double loss;     /* mean token loss of the global batch */
    double val_loss; /* mean token loss of the validation batches, < 0 if not evaluated */
    double lr;
    double grad_norm; /* before clipping */
    double step_s;
    double tokens_per_s;
    double tflops; /* achieved model TFLOP/s of the whole job */
    double mfu;    /* against the ranks' probed sgemm peak (the log's sgemm_util; its mfu is the trainer's) */
} ah_step_stats;

/* What an executor runs: this rank's part of `plan` (which must match the
 * size of `comm`) under a pipeline schedule: 1F1B, GPipe, or interleaved 1F1B
 * with virtual_stages chunks per stage (0 = 2; ignored by the others). Each
 * stage's tp, the plan's micro_batch, global_batch and train.seq are used.
 * ah_executor_config_default: MPI_COMM_WORLD, 1F1B, fp32, parameters
 * initialised from seed 0; plan, model, data and optim must be set. */
typedef struct {
    MPI_Comm comm;                 /* the training ranks, normally MPI_COMM_WORLD */
    const ah_plan *plan;
    const ah_model_config *model;  /* the run's model (its vocabulary the data's) */
    const ah_dataset *data;
    const ah_optim_config *optim;
    uint64_t seed;                 /* parameter initialisation and batch sampling */
    int init_params;               /* 0: skip the initialisation from the seed (the state is restored next) */
    double peak_flops_per_rank;    /* the MFU's reference (ah_measure_sgemm_peak) */
    ah_schedule schedule;
    int virtual_stages;
    int overlap_dp;                /* start each bucket's all-reduce inside the backward (docs/schedules.md) */
    ah_matmul_precision precision; /* the linear layers' products, in the backend context (CPU backend) */
    /* emulated devices (NULL: none): every compute op lasts exactly the time this cost model gives it on
     * the rank's device (ah_plan_stage_op_times): computed, then slept to that time; an op that computes
     * longer is counted as an overrun (ah_executor_emulation_stats). So 8-16 ranks of a pipeline whose devices
     * the model makes slow enough fit on a few cores with their real schedule and transfers. */
    const ah_profile *emulate;
} ah_executor_config;
void ah_executor_config_default(ah_executor_config *c);
/* With emulate, this rank's compute ops so far: */
typedef struct {
    long ops;
    long overruns;  /* those that computed longer than their modelled time */
    double worst_s; /* the worst such excess */
    double late_s;  /* summed over the others: how late their sleep to the modelled end woke up (the OS's
                     * timer slack and scheduling on a shared core: time the emulated device would not lose) */
} ah_emulation_stats;
void ah_executor_emulation_stats(const ah_executor *x, ah_emulation_stats *st);

/* Sets up this rank's part of c->plan. Collective over c->comm. Returns NULL
 * with a one-line error (a plan the schedule cannot run says why:
 * ah_schedule_check). */
ah_executor *ah_executor_create(const ah_executor_config *c, char *err, size_t errlen);
/* One training step (collective). eval > 0: also compute the validation loss,
 * the mean over eval validation batches (batch b: rows b x global batch on of
 * the step's validation sample; eval 1 is the step's validation batch). */
int ah_executor_step(ah_executor *x, int step, int eval, ah_step_stats *st, char *err, size_t errlen);
void ah_executor_free(ah_executor *x);
int ah_executor_rank(const ah_executor *x);

/* Gather every layer's parameters of one replica into `out` laid out layer
 * by layer as a single-rank model would hold them (TP shards concatenated in
 * tensor order). Collective; only rank 0 receives. *n = floats. -1 when the
 * plan has no such replica. For tests. */
int ah_executor_gather_params(ah_executor *x, int replica, float **out, size_t *n);

/* Record every compute op, wait, send and collective of this rank from now
 * on (low overhead: two clock reads per operation). */
void ah_executor_trace_enable(ah_executor *x);
/* A checkpoint record from t0 until now, when tracing: the save of this rank's layers to a tier (tier: an
 * ah_ckpt_trace_tier of autohet/trace.h; the bytes and layers it holds), or the wait for the background copy
 * of an earlier snapshot (AH_CKPT_TRACE_WAIT). */
void ah_executor_trace_checkpoint(ah_executor *x, int tier, double t0);

/* Loads every rank's layers from a Hugging Face model directory (train
 * --init-from, docs/weights.md): each rank reads only the tensors of its own
 * layers and keeps its TP shard of them. The directory's config.json must
 * describe the run's model (the vocabulary may be the data's: then the
 * embedding's shape must match it). Collective. 0, or -1 with err on every rank. */
int ah_executor_init_from_hf(ah_executor *x, const char *dir, char *err, size_t errlen);
/* A disk-tier layer checkpoint of step `step` into DIR (the checkpoint
 * runtime's save of the executor's layers: train --init-from with --steps 0).
 * Collective. 0, or -1 with err on every rank. */
int ah_executor_save(ah_executor *x, const char *dir, int step, char *err, size_t errlen);
/* the inventory name of this rank's node */
const char *ah_executor_node_name(const ah_executor *x);
/* Collective: gather the events to rank 0, which writes Chrome trace JSON
 * (docs/analyze.md). Returns 0 or -1 with err on every rank. */
int ah_executor_write_trace(ah_executor *x, const char *path, char *err, size_t errlen);

/* This run's memory per rank against the cost model (executor_memory.c):
 * the high-water mark of backend tensors and the planner's stage memory
 * for the same layers, degree, micro-batch and schedule. Filled on rank 0. */
typedef struct {
    int ranks;
    double measured_min, measured_max;   /* bytes */
    double predicted_min, predicted_max; /* bytes */
    double worst_error;                  /* predicted / measured - 1 of the rank furthest off */
    int worst_rank;
} ah_exec_memory;
/* Collective over the executor's ranks. */
void ah_executor_memory_report(ah_executor *x, ah_exec_memory *out);

/* ======================================================================== trainer */

typedef struct {
    int steps;      /* total optimizer steps; a resumed run continues up to this */
    int eval_every; /* validation loss every K steps and at the last step (0: never) */
    int eval_batches; /* validation batches averaged per evaluation (0 counts as 1) */
    /* the job's nominal peak FLOP/s (the plan's devices, catalog or --devices): the MFU's
     * denominator; 0: unknown, no MFU */
    double peak_flops;
    int log_every;  /* a progress line every K steps, at evaluations and at the last step */
    long long tokens_per_step; /* global batch x sequence: the summary's token count */
    /* checkpoints: ckpt_dir every ckpt_every steps (+ cloud_dir); a memory-tier
     * snapshot into mem_dir every mem_every steps; with both a memory and a
     * disk tier, the disk and cloud copies are made from the snapshot in the
     * background and committed at a later step boundary */
    const char *ckpt_dir, *mem_dir, *cloud_dir;
    int ckpt_every, mem_every;
    int mem_copies; /* memory copies of each layer's snapshot on distinct nodes (1, or 2: buddy copies) */
    /* before the first step: continue from a checkpoint directory, or restore
     * from a recovery assignment of `autohet run` (writes ASSIGNMENT.result.json) */
    const char *resume_dir, *recover_path;
    const char *trace_path; /* record every op from the second step trained on (NULL: no trace; none is
                               written when no step is trained) */
    double t_init;          /* wall clock at process start, for the recovery result */
    /* what the resume checks the checkpoint's state.json against */
    const ah_model_config *cfg;
    const ah_plan *plan;
    int seed;
    const ah_optim_config *oc;
    FILE *progress; /* progress lines, checkpoint and summary lines (rank 0; NULL: none) */
    FILE *log;      /* one JSON object per step (rank 0; NULL: none) */
    /* called on every rank before each step (test hooks, grace-period notices) */
    void (*before_step)(void *ctx, ah_executor *x, int step);
    void *hook_ctx;
} ah_trainer_config;

typedef struct {
    int first_step, last_step; /* steps first_step+1 .. last_step ran */
    double tokens;             /* tokens trained on by the steps run */
    double wall_s;             /* from the first step to the end of the loop, checkpoints included */
    double step_s;             /* summed step times */
    double mean_tokens_per_s;  /* tokens / step_s */
    double mean_mfu;           /* step-time weighted mean MFU (of the nominal peak; 0: unknown) */
    double final_loss;         /* train loss of the last step (< 0: no step ran) */
    double last_val_loss;      /* the last validation loss (< 0: none) */
    int last_val_step;
    int err_on_every_rank;     /* on failure: every rank has its own err (else rank 0's counts) */
    ah_exec_memory mem;        /* tensor memory against the cost model (rank 0; ranks 0 if not measured) */
} ah_trainer_summary;

void ah_trainer_config_default(ah_trainer_config *c);
/* The learning-rate schedule of a run: AdamW defaults, peak lr, floor lr/10,
 * linear warm-up over `warmup` steps (at most half of a shorter run), cosine
 * decay to step `steps`. */
void ah_trainer_lr_schedule(double lr, int warmup, int steps, ah_optim_config *oc);
/* Whether the executor initialises parameters from the seed: not when the
 * state is restored (resume, or a recovery assignment of a step > 0). */
int ah_trainer_initialises_params(const ah_trainer_config *c);
/* Restore (resume / recover), then run the steps. Collective. Returns 0, or
 * the exit status (2: the checkpoint does not fit this run, 1: a runtime
 * failure) with err. */
int ah_trainer_run(ah_executor *x, const ah_trainer_config *c, ah_trainer_summary *sum, char *err,
                   size_t errlen);
/* The one-line summary of a finished run (no newline). */
void ah_trainer_format_summary(const ah_trainer_summary *s, char *buf, size_t n);

/* ======================================================================== profile */

/* One layer's costs on this machine's CPU backend (autohet profile): layer l of cfg as TP rank 0
 * of tp computes it (its 1/tp shard; no TP communication), micro-batch mb, sequence seq, products
 * in precision prec; the median of reps (1..64) timed repetitions after one warm-up of the forward
 * (fwd_s), the backward (bwd_s) and the AdamW update (update_s), and the bytes of activations the
 * forward saves. 0, or -1 with err. */
typedef struct {
    double fwd_s, bwd_s, update_s;
    double act_bytes;
} ah_layer_timing;
int ah_engine_profile_layer(const ah_model_config *cfg, int l, int seq, int tp, int mb, int reps,
                            ah_matmul_precision prec, ah_layer_timing *out, char *err, size_t errlen);
/* The bytes ah_engine_profile_layer needs for the same layer and configuration (its estimate, from the
 * engine's layout of the layer's shard and the cost model's activations: docs/profile-format.md): the
 * shard's parameters, gradients and AdamW moments, the saved activations, the layer's input and output. */
double ah_engine_profile_layer_bytes(const ah_model_config *cfg, int l, int seq, int tp, int mb);

/* ======================================================================== weights */

/* Weights in and out of the engine in Hugging Face format (docs/weights.md): GPT-2
 * (GPT2LMHeadModel) and LLaMA-family (LlamaForCausalLM; Mistral and Qwen2 keys) model
 * directories: config.json + model.safetensors, or shards listed by
 * model.safetensors.index.json. */
typedef struct ah_st_file ah_st_file; /* an opened safetensors file (the engine's reader) */
/* An opened HF model directory: its config and safetensors files. */
typedef struct {
    char dir[1024];
    ah_model_config cfg; /* config.json */
    ah_st_file *files;
    int n_files;
} ah_hf_dir;

/* Opens DIR/config.json and DIR/model.safetensors, or the files that
 * DIR/model.safetensors.index.json's weight_map names (plain file names in
 * DIR; every tensor it lists must be in its file). 0, or -1 with one line
 * naming the file and the field. */
int ah_hf_open(const char *dir, ah_hf_dir *h, char *err, size_t errlen);
void ah_hf_close(ah_hf_dir *h);

/* Where full-layer parameters come from (a HF directory, a layer checkpoint):
 * layer() gives layer l's "param.<name>" tensors in the full layout. */
typedef struct {
    ah_model_config cfg;
    int (*layer)(void *ctx, int l, ah_ckpt_loaded **out, int *n, char *err, size_t errlen);
    void *ctx;
} ah_weights_src;
/* a source over an opened HF directory for the model cfg */
typedef struct {
    const ah_hf_dir *h;
    ah_model_config cfg;
} ah_hf_src_ctx;
void ah_hf_source(ah_hf_src_ctx *ctx, const ah_hf_dir *h, const ah_model_config *cfg, ah_weights_src *src);

/* Writes OUT/config.json and OUT/model.safetensors (F32, HF names; no lm_head
 * when the embeddings are tied, as save_pretrained) from every layer of src.
 * OUT must exist. 0, or -1 with err. */
int ah_hf_export(const ah_weights_src *src, const char *out_dir, char *err, size_t errlen);

/* Full-layer parameters from a layer checkpoint of any plan (docs/weights.md): the source of
 * `autohet export` and `autohet generate --ckpt`. Each layer's shards are found in the
 * checkpoint's node directories as --resume finds them (nearest good copy, checksums verified)
 * and, when they were written under TP > 1, joined into the TP=1 layout. */
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

/* Sampling tokens from a model (autohet generate, docs/weights.md): one process, TP=1, the last
 * position's logits from the final norm and the LM head; greedy at temperature 0, else
 * softmax(logits / temperature) over the top-k tokens with a seeded generator. With the KV cache
 * (the default) the blocks run on the host: the prompt goes through them once (prefill), then
 * each new token alone, attending to the cached keys and values of every earlier position.
 * Without it every token runs the whole sequence through the engine's training forward: the
 * reference the tests compare the cache with (autohet generate --no-kv-cache). */
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
    void (*on_token)(void *ctx, int id); /* each new id as it is sampled (streaming; NULL: none) */
    void *on_token_ctx;
} ah_gen_config;

/* The weights of src, the prompt (n_prompt ids below the vocabulary), then
 * g->max_new sampled ids: out (n_prompt + max_new ints) holds all of them.
 * 0, or -1 with err (an id out of range, more positions than a GPT-2 model
 * has, a model the HF mapping does not cover, a layer that does not load). */
int ah_generate(const ah_weights_src *src, const int *prompt, int n_prompt, const ah_gen_config *g, int *out,
                char *err, size_t errlen);

#endif
