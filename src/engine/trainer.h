/* The training loop over an executor (docs/engine.md): steps, the evaluation
 * cadence, the learning-rate schedule, the checkpoint cadence (synchronous
 * saves, the memory-tier snapshot and its background persist, polled at step
 * boundaries), resume and recovery before the first step, progress lines and
 * the end-of-run summary. `autohet train` parses flags, fills an
 * ah_trainer_config and prints what ah_trainer_run returns. */
#ifndef AUTOHET_ENGINE_TRAINER_H
#define AUTOHET_ENGINE_TRAINER_H
#include <stdio.h>

#include "autohet/plan.h"
#include "engine/executor.h"
#include "engine/optim.h"

typedef struct {
    int steps;      /* total optimizer steps; a resumed run continues up to this */
    int eval_every; /* validation loss every K steps and at the last step (0: never) */
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
    const char *trace_path; /* record every op from the second step on (NULL: no trace) */
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
    double mean_mfu;           /* step-time weighted mean MFU */
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

#endif
