/* The training loop over an executor (trainer.h). */
#include "engine/trainer.h"

#include <errno.h>
#include <mpi.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "autohet/ckpt.h"
#include "autohet/trace.h"
#include "ckpt/ckpt_runtime.h"
#include "util/atomic_file.h"
#include "util/clock.h"
#include "util/json_file.h"
#include "util/step_log.h"

void ah_trainer_config_default(ah_trainer_config *c) {
    memset(c, 0, sizeof *c);
    c->steps = 50;
    c->eval_every = 10;
    c->log_every = 1;
    c->mem_every = 1;
}

void ah_trainer_lr_schedule(double lr, int warmup, int steps, ah_optim_config *oc) {
    ah_optim_config_default(oc);
    oc->lr = (float)lr;
    oc->min_lr = (float)(lr / 10);
    oc->warmup_steps = warmup < steps ? warmup : steps / 2;
    oc->total_steps = steps;
}

/* the step a recovery assignment restores (0: the initialisation from the
 * seed, which the ranks then compute themselves), -1 unreadable */
static int assignment_step(const char *path) {
    char err[512];
    cJSON *o = ah_json_parse_file(path, 64u << 20, 1, err, sizeof err);
    const cJSON *st = o ? cJSON_GetObjectItemCaseSensitive(o, "step") : NULL;
    int step = cJSON_IsNumber(st) ? st->valueint : -1;
    cJSON_Delete(o);
    return step;
}

int ah_trainer_initialises_params(const ah_trainer_config *c) {
    return !c->resume_dir && (!c->recover_path || assignment_step(c->recover_path) == 0);
}

static int rank0(const ah_executor *x) { return ah_executor_rank(x) == 0; }

static int resume(ah_executor *x, const ah_trainer_config *c, int *first_step, char *err, size_t errlen) {
    /* what state.json must record: this run's model, batch shape, seed and LR schedule */
    ah_ckpt_run run = {.cfg = c->cfg, .seed = (uint64_t)c->seed, .lr = c->oc->lr};
    run.global_batch = c->plan->global_batch, run.seq = c->plan->train.seq;
    run.total_steps = c->oc->total_steps, run.warmup_steps = c->oc->warmup_steps;
    if (ah_ckpt_read_state(c->resume_dir, &run, first_step, err, errlen) != 0)
        return AH_EXIT_BAD_INPUT;
    double r0 = MPI_Wtime();
    char why[512];
    if (ah_ckpt_restore(ah__executor_layer_store(x), c->resume_dir, *first_step, why, sizeof why) != 0) {
        /* the checkpoint is the input: a layer with no good copy is bad input, not a crash */
        snprintf(err, errlen, "--resume %s: %s", c->resume_dir, why);
        return AH_EXIT_BAD_INPUT;
    }
    if (rank0(x) && c->progress)
        fprintf(c->progress, "resumed from %s at step %d (%.3f s)\n", c->resume_dir, *first_step,
                MPI_Wtime() - r0);
    return 0;
}

/* the restore from a recovery assignment, and its result file for autohet run */
static int recover(ah_executor *x, const ah_trainer_config *c, int *first_step, char *err, size_t errlen) {
    double r0 = ah_wall_clock_s();
    ah_recover_stats rs;
    char why[512];
    if (ah_ckpt_recover(ah__executor_layer_store(x), c->recover_path, first_step, &rs, why, sizeof why) != 0) {
        snprintf(err, errlen, "--recover %s: %s", c->recover_path, why);
        return 1;
    }
    double r1 = ah_wall_clock_s();
    if (!rank0(x))
        return 0;
    if (c->progress)
        fprintf(c->progress,
                "recovered step %d in %.3f s: memory %.1f MB, disk %.1f MB, peer %.1f MB, cloud %.1f MB\n",
                *first_step, r1 - r0, rs.bytes[0] / 1e6, rs.bytes[1] / 1e6, rs.bytes[2] / 1e6,
                rs.bytes[3] / 1e6);
    char out[3072], js[1024];
    snprintf(out, sizeof out, "%s.result.json", c->recover_path);
    int len = snprintf(js, sizeof js,
                       "{\"step\": %d, \"t_init\": %.6f, \"t_restore_start\": %.6f, \"t_restore_end\": "
                       "%.6f, \"bytes_by_tier\": {\"memory\": %.0f, \"disk\": %.0f, \"peer\": %.0f, "
                       "\"cloud\": %.0f}, \"seconds_by_tier\": {\"memory\": %.6f, \"disk\": %.6f, "
                       "\"peer\": %.6f, \"cloud\": %.6f}, \"fallbacks\": %d}\n",
                       *first_step, c->t_init, r0, r1, rs.bytes[0], rs.bytes[1], rs.bytes[2], rs.bytes[3],
                       rs.seconds[0], rs.seconds[1], rs.seconds[2], rs.seconds[3], rs.fallbacks);
    if (ah_write_file_atomic(out, js, (size_t)len, why, sizeof why) != 0)
        fprintf(stderr, "autohet train: %s\n", why);
    return 0;
}

/* Polls the background copy (wait: join this rank's first); prints a commit (of step N to the disk tier, and
 * the cloud tier when there is one: a copy goes to both). */
static int persist_poll(ah_executor *x, const ah_trainer_config *c, ah_ckpt_persist *pp, int wait, char *err,
                        size_t errlen) {
    int step = ah_ckpt_persist_step(pp);
    double t0 = ah_now_s();
    int r = ah_ckpt_persist_poll(pp, ah__executor_layer_store(x), wait, err, errlen);
    if (wait && step >= 0) /* the training thread blocked on the copy */
        ah_executor_trace_checkpoint(x, AH_CKPT_TRACE_WAIT, t0);
    if (r == 1 && rank0(x) && c->progress)
        fprintf(c->progress, "checkpoint: step %d persisted to %s%s%s in the background\n", step, c->ckpt_dir,
                c->cloud_dir ? " + " : "", c->cloud_dir ? c->cloud_dir : "");
    return r;
}

/* steps a background disk/cloud copy may take before the training waits for it */
#define AH_PERSIST_MAX_LAG 1

/* The checkpoints due after step s (0-based) completed (pp: the background
 * persist's handle). 0, or -1 with err. */
static int checkpoint_after(ah_executor *x, const ah_trainer_config *c, ah_ckpt_persist *pp, int s, char *err,
                            size_t errlen) {
    const ah_layer_store *ls = ah__executor_layer_store(x);
    int done = s + 1;
    double t0 = ah_now_s();
    if (c->mem_dir && done % c->mem_every == 0) {
        if (ah_ckpt_save(ls, c->mem_dir, "memory", done, pp, err, errlen) != 0)
            return -1;
        ah_executor_trace_checkpoint(x, AH_CKPT_TRACE_MEMORY, t0);
    }
    /* with a memory tier, the disk and cloud copies are made from its snapshot by a
     * thread of each rank while training goes on, and committed at a later step
     * boundary once every rank's copy is done */
    int bg = c->mem_dir && c->ckpt_dir;
    /* the durable copies lag the committed step by at most AH_PERSIST_MAX_LAG steps: a copy still in
     * flight then is waited for (the step slows) rather than left to fall behind, so that a loss of
     * every memory tier at once never resumes from further back than the copy's step */
    int in_flight = ah_ckpt_persist_step(pp), overdue = in_flight >= 0 && done - in_flight >= AH_PERSIST_MAX_LAG;
    if (bg && persist_poll(x, c, pp, overdue, err, errlen) < 0)
        return -1;
    /* every K steps, and the last step whatever K (as Megatron saves at the end of training): the memory
     * tier goes with the run, so the durable tiers are where a finished run's model stays */
    if (!c->ckpt_dir || c->ckpt_every <= 0 || (done % c->ckpt_every != 0 && done != c->steps))
        return 0;
    if (bg && done % c->mem_every == 0) {
        int r = persist_poll(x, c, pp, 1, err, errlen); /* the previous copy first */
        r = r < 0 ? -1 : ah_ckpt_persist_start(pp, ls, c->ckpt_dir, c->cloud_dir, done, err, errlen);
        if (r == 1)
            snprintf(err, errlen, "checkpoint: no memory snapshot of step %d to persist", done);
        return r != 0 ? -1 : 0;
    }
    double c0 = MPI_Wtime();
    t0 = ah_now_s();
    if (ah_ckpt_save(ls, c->ckpt_dir, "disk", done, NULL, err, errlen) != 0)
        return -1;
    ah_executor_trace_checkpoint(x, AH_CKPT_TRACE_DISK, t0);
    t0 = ah_now_s();
    if (c->cloud_dir && ah_ckpt_save(ls, c->cloud_dir, "cloud", done, NULL, err, errlen) != 0)
        return -1;
    if (c->cloud_dir)
        ah_executor_trace_checkpoint(x, AH_CKPT_TRACE_CLOUD, t0);
    if (rank0(x) && c->progress)
        fprintf(c->progress, "checkpoint: step %d -> %s%s%s (%.3f s)\n", done, c->ckpt_dir,
                c->cloud_dir ? " + " : "", c->cloud_dir ? c->cloud_dir : "", MPI_Wtime() - c0);
    return 0;
}

/* The MFU of a step against the job's nominal peak (-1: unknown). */
static double mfu_of(const ah_trainer_config *c, const ah_step_stats *st) {
    return c->peak_flops > 0 ? st->tflops * 1e12 / c->peak_flops : -1;
}

/* Fixed-width columns: an evaluated step and another line up (the val column
 * is blank when the step did not evaluate). */
static void progress_line(FILE *f, const ah_trainer_config *c, int step, const ah_step_stats *st) {
    char val[16] = "", mfu[16] = "MFU    -";
    if (st->val_loss >= 0)
        snprintf(val, sizeof val, "val %7.4f", st->val_loss);
    if (mfu_of(c, st) >= 0)
        snprintf(mfu, sizeof mfu, "MFU %5.1f%%", 100 * mfu_of(c, st));
    int w = snprintf(NULL, 0, "%d", c->steps);
    fprintf(f,
            "step %*d/%d | loss %7.4f | %-11s | lr %.2e | grad norm %7.3f | %8.0f tok/s | %8.2f GFLOP/s | "
            "%s | %6.0f ms\n",
            w < 4 ? 4 : w, step, c->steps, st->loss, val, st->lr, st->grad_norm, st->tokens_per_s,
            st->tflops * 1e3, mfu, st->step_s * 1e3);
    fflush(f);
}

/* One JSON object per step (docs/data.md, "Metrics log"): no sentinel values,
 * a field that does not apply is absent. */
static void log_line(FILE *f, const ah_trainer_config *c, int step, const ah_step_stats *st, double t_start) {
    double now = ah_wall_clock_s();
    fprintf(f, "{\"step\": %d, \"time_s\": %.6f, \"unix_s\": %.6f, \"step_s\": %.6f, \"loss\": %.9g", step,
            now - t_start, now, st->step_s, st->loss);
    if (st->val_loss >= 0)
        fprintf(f, ", \"val_loss\": %.9g, \"val_batches\": %d", st->val_loss,
                c->eval_batches > 0 ? c->eval_batches : 1);
    fprintf(f,
            ", \"lr\": %.6g, \"grad_norm\": %.9g, \"tokens\": %lld, \"tokens_per_s\": %.3f, \"tflops\": %.6g",
            st->lr, st->grad_norm, (long long)step * c->tokens_per_step, st->tokens_per_s, st->tflops);
    if (mfu_of(c, st) >= 0)
        fprintf(f, ", \"mfu\": %.6g, \"peak_tflops\": %.6g", mfu_of(c, st), c->peak_flops / 1e12);
    if (st->mfu > 0)
        fprintf(f, ", \"sgemm_util\": %.6g", st->mfu);
    fprintf(f, "}\n");
    fflush(f);
}

static void account(ah_trainer_summary *sum, const ah_trainer_config *c, int s, const ah_step_stats *st) {
    sum->last_step = s + 1;
    sum->tokens += (double)c->tokens_per_step;
    sum->step_s += st->step_s;
    sum->mean_mfu += (mfu_of(c, st) > 0 ? mfu_of(c, st) : 0) * st->step_s; /* divided by step_s at the end */
    sum->final_loss = st->loss;
    if (st->val_loss >= 0) {
        sum->last_val_loss = st->val_loss;
        sum->last_val_step = s + 1;
    }
}

int ah_trainer_run(ah_executor *x, const ah_trainer_config *c, ah_trainer_summary *sum, char *err,
                   size_t errlen) {
    memset(sum, 0, sizeof *sum);
    sum->final_loss = sum->last_val_loss = -1;
    int first_step = 0, rc = 0;
    if (c->resume_dir)
        rc = resume(x, c, &first_step, err, errlen);
    else if (c->recover_path)
        rc = recover(x, c, &first_step, err, errlen);
    if (rc != 0)
        return rc;
    sum->first_step = sum->last_step = first_step;
    /* a resumed run's --log (opened to append) holds every step once: the lines after its checkpoint go,
     * the steps are trained again */
    if (c->resume_dir && c->log && rank0(x) && ah_step_log_keep_through(c->log, first_step) < 0)
        fprintf(stderr, "autohet train: --log: cannot cut the lines after step %d (%s): steps may repeat\n",
                first_step, strerror(errno));
    ah_ckpt_persist *pp = ah_ckpt_persist_new(); /* the memory-tier snapshot and its copy in flight */
    ah_ckpt_persist_set_copies(pp, c->mem_copies);
    double t0 = ah_wall_clock_s();
    /* restored at the last step (a job lost after its last step was committed, perhaps before the durable
     * copy of it was): the durable tiers get it now, so that the run's checkpoint is its final model */
    if (first_step == c->steps && c->steps > 0 && (c->resume_dir || c->recover_path))
        rc = checkpoint_after(x, c, pp, c->steps - 1, err, errlen);
    /* the trace skips the run's warm-up step (its first, a resumed run's too) unless it is the only one */
    int trace_from = c->steps - first_step > 1 ? first_step + 1 : first_step;
    for (int s = first_step; s < c->steps && rc == 0; s++) {
        if (c->before_step)
            c->before_step(c->hook_ctx, x, s);
        ah_step_stats st;
        if (c->trace_path && s == trace_from)
            ah_executor_trace_enable(x);
        int eval = c->eval_every > 0 && ((s + 1) % c->eval_every == 0 || s + 1 == c->steps);
        eval *= c->eval_batches > 0 ? c->eval_batches : 1;
        rc = ah_executor_step(x, s, eval, &st, err, errlen);
        if (rc == 0 && !isfinite(st.grad_norm)) { /* the global norm: every rank stops at this step */
            snprintf(err, errlen,
                     "step %d: the gradient norm is %g: training diverged (a smaller --lr?); the step is not "
                     "checkpointed",
                     s + 1, st.grad_norm);
            rc = -1;
        }
        if (rc == 0)
            rc = checkpoint_after(x, c, pp, s, err, errlen);
        if (rc != 0)
            break;
        account(sum, c, s, &st);
        if (!rank0(x))
            continue;
        if (c->progress && ((s + 1) % c->log_every == 0 || s + 1 == c->steps || eval))
            progress_line(c->progress, c, s + 1, &st);
        if (c->log)
            log_line(c->log, c, s + 1, &st, c->t_init > 0 ? c->t_init : t0);
    }
    if (rc == 0 && c->mem_dir && c->ckpt_dir) /* the copy in flight, if any */
        rc = persist_poll(x, c, pp, 1, err, errlen) < 0 ? -1 : 0;
    sum->wall_s = ah_wall_clock_s() - t0;
    ah_ckpt_persist_free(pp); /* after an error: joins and drops a copy in flight */
    if (rc != 0) {
        sum->err_on_every_rank = 1;
        return 1;
    }
    sum->mean_tokens_per_s = sum->step_s > 0 ? sum->tokens / sum->step_s : 0;
    sum->mean_mfu = sum->step_s > 0 ? sum->mean_mfu / sum->step_s : 0;
    ah_executor_memory_report(x, &sum->mem);
    if (c->trace_path && sum->last_step == sum->first_step) { /* no step: an empty trace would replace nothing */
        if (rank0(x) && c->progress)
            fprintf(c->progress, "no step trained: no trace written to %s\n", c->trace_path);
    } else if (c->trace_path) {
        char why[512];
        if (ah_executor_write_trace(x, c->trace_path, why, sizeof why) != 0) {
            snprintf(err, errlen, "%s", why);
            return 1;
        }
        if (rank0(x) && c->progress)
            fprintf(c->progress, "trace written to %s (autohet analyze %s)\n", c->trace_path, c->trace_path);
    }
    return 0;
}

void ah_trainer_format_summary(const ah_trainer_summary *s, char *buf, size_t n) {
    int steps = s->last_step - s->first_step;
    if (steps == 0) { /* restored at the last step (or --steps 0): no rate, no loss, no step's memory */
        snprintf(buf, n, "done: no step to train (at step %d)", s->last_step);
        return;
    }
    int len = snprintf(buf, n,
                       "done: %d step%s (%d-%d), %.0f tokens in %.2f s wall; mean %.0f tokens/s, mean MFU "
                       "%.1f%%",
                       steps, steps == 1 ? "" : "s", steps ? s->first_step + 1 : s->first_step, s->last_step,
                       s->tokens, s->wall_s, s->mean_tokens_per_s, 100 * s->mean_mfu);
    if (len < 0 || (size_t)len >= n)
        return;
    if (s->final_loss >= 0)
        len += snprintf(buf + len, n - (size_t)len, "; final train loss %.4f", s->final_loss);
    else
        len += snprintf(buf + len, n - (size_t)len, "; no step ran");
    if (len < 0 || (size_t)len >= n)
        return;
    if (s->last_val_loss >= 0)
        len += snprintf(buf + len, n - (size_t)len, ", last val loss %.4f (step %d)", s->last_val_loss,
                        s->last_val_step);
    else
        len += snprintf(buf + len, n - (size_t)len, ", no val loss");
    if (len < 0 || (size_t)len >= n || s->mem.ranks == 0)
        return;
    const double mib = 1024.0 * 1024.0;
    const ah_exec_memory *m = &s->mem;
    if (m->ranks == 1)
        snprintf(buf + len, n - (size_t)len, "; tensor memory peak %.1f MiB (cost model %.1f MiB, %+.1f%%)",
                 m->measured_max / mib, m->predicted_max / mib, 100 * m->worst_error);
    else
        snprintf(buf + len, n - (size_t)len,
                 "; tensor memory peak %.1f-%.1f MiB per rank (cost model %.1f-%.1f MiB; furthest %+.1f%% on "
                 "rank %d)",
                 m->measured_min / mib, m->measured_max / mib, m->predicted_min / mib, m->predicted_max / mib,
                 100 * m->worst_error, m->worst_rank);
}
