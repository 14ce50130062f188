/* The `autohet run` controller (docs/recovery.md): launches and supervises
 * the MPI training job of the current plan, one virtual node per inventory
 * node, injects preemptions (a list, a spot trace, `autohet preempt`), and on
 * every change of the node set replans and recovers from the layer bitmaps. */
#ifndef AUTOHET_ELASTIC_CONTROLLER_H
#define AUTOHET_ELASTIC_CONTROLLER_H
#include "autohet/elastic.h"

typedef struct {
    const char *model_arg, *data, *plan_path, *cluster_arg;
    const char *run_dir; /* NULL: a fresh /tmp/autohet-run.XXXXXX */
    const char *log_path, *report_path;
    const char *preempt; /* "NODE@STEP[,NODE@STEP...]"; across hosts NODE may be a host */
    const char *spot_trace;
    double time_scale; /* trace seconds per wall second */
    double notice_s;   /* notice given with --preempt / trace removals (0: none) */
    ah_recovery_mode mode;
    double cloud_mbs; /* cloud bandwidth per node, MB/s (0: unlimited) */
    int steps, seed, global_batch, micro_batch, seq, tp, warmup, eval_every, ckpt_every, mem_every;
    int replan_tp; /* TP degree of the plans after a change of the node set; 0: the planner's choice */
    double lr;
    const char *launcher; /* "mpirun", or a site wrapper with its arguments ("wrap --x mpirun") */
    const char *hostfile; /* an Open MPI hostfile: node i runs on its i-th host; NULL: none */
    const char *self_exe; /* this autohet binary */
    double heartbeat_s;   /* a rank whose heartbeat is older loses its node (0: no heartbeat check) */
    int max_restarts;
    int mem_copies;       /* memory copies of each layer's snapshot on distinct nodes (layer-bitmap) */     /* a failure on the same nodes, the same way at the same step, restarted this often */
} ah_run_options;

/* Runs to completion; returns the exit status (0, 1 runtime failure, 2 bad input). */
int ah_run(const ah_run_options *o);

/* `autohet run --resume RUN_DIR`: continues the run whose controller ended
 * (killed at any moment), from the options and state in its run directory:
 * ends the old jobs' processes, replans for the live nodes, recovers from the
 * tiers, goes on. Exit status as ah_run; 2 if RUN_DIR holds no run or its
 * controller still runs. */
int ah_run_resume(const char *run_dir, const char *self_exe);

/* Asks the controller owning run_dir to preempt `node` (with notice_s
 * seconds of notice, 0 none); source names the requester in the report:
 * "command" (`autohet preempt`) or "signal" (a rank got SIGTERM). */
int ah_run_request_preempt(const char *run_dir, const char *node, double notice_s, const char *source,
                           char *err, size_t errlen);

/* Under autohet run ($AUTOHET_PID_DIR set), before MPI_Init: forks; the
 * child returns and is the rank, the parent watches it and records how it
 * ended in $AUTOHET_PID_DIR/end-R (rank_watch.c), then exits as it did.
 * Elsewhere it returns at once. */
void ah_run_watch_rank(void);

/* Under autohet run ($AUTOHET_PID_DIR set): starts the rank's heartbeat
 * thread (heartbeat.c); once per process. */
void ah_run_heartbeat_start(int rank);

#endif
