/* Elastic training on spot nodes (docs/recovery.md): the recovery assignment
 * after a change of the node set, and spot availability traces.
 *
 * After a preemption the controller (`autohet run`) knows, from the surviving
 * manifests, which layer shards every node still holds in which tier (the
 * layer bitmaps). For the new plan it picks the newest step at which every
 * layer can be restored, then for every (new rank, layer) the nearest copy of
 * its own shard (own memory > own disk > peer memory > peer disk > cloud), or,
 * when its stage's TP degree was not checkpointed, the nearest copy of every
 * old TP rank's shard of one checkpointed degree, which the rank reshards. */
#ifndef AUTOHET_ELASTIC_H
#define AUTOHET_ELASTIC_H
#include <stddef.h>

#include "autohet/ckpt.h"
#include "autohet/plan.h"

/* tiers: AH_TIER_* of autohet/ckpt.h */

/* What one (node, tier) holds: its manifest, loaded from dir. Tier is
 * AH_TIER_MEMORY, AH_TIER_DISK or AH_TIER_CLOUD (cloud: node names the writer). */
typedef struct {
    char node[64];
    int tier;
    char dir[1024];
    ah_manifest m;
} ah_holding;

typedef struct {
    int rank, layer, tp;
    int tier;     /* AH_TIER_*: memory/disk = the rank's own node, peer = another node's memory/disk */
    int holding;  /* index of the source holding */
    int server;   /* peer: the world rank on the holder node that serves it over RMA; else -1 */
    int fallback[AH_MAX_FALLBACKS]; /* other holdings of the same shard and step, nearest first: the own
                                       node's tiers, then every cloud copy */
    int n_fallback;
    double bytes;
    int degree; /* the TP degree of the source shard (0: its manifest records none); when it is not
                   the rank's stage's, the rank has one entry per old TP rank and reshards */
} ah_assign_entry;

typedef enum { AH_RECOVERY_LAYER_BITMAP, AH_RECOVERY_FULL_RELOAD } ah_recovery_mode;

typedef struct {
    int step;           /* the step every shard is restored at */
    ah_assign_entry *e; /* per (plan rank, layer it holds): its own shard, or every old TP rank's of one degree */
    int n;
    int n_servers;           /* extra ranks (after the plan's) on surviving nodes the plan does not use */
    char (*server_node)[64]; /* their nodes */
} ah_assignment;

/* Chooses the step and the source of every shard the ranks of `plan` need.
 * layer-bitmap: any holding, nearest first; full-reload: cloud only (Varuna).
 * A surviving node without a rank in the plan still serves its copies: the
 * assignment then asks for an extra server rank there. Returns 0 (free with
 * ah_assignment_free); 1 when no step has a copy of every layer: err says why
 * and the assignment is step 0 without shards (the initialisation from the
 * seed, which every rank recomputes). */
int ah_recovery_assign(const ah_holding *h, int nh, const ah_plan *plan, ah_recovery_mode mode,
                       ah_assignment *out, char *err, size_t errlen);
void ah_assignment_free(ah_assignment *a);

/* Writes the assignment as the JSON `autohet train --recover` reads;
 * cloud_bytes_per_s is each node's bandwidth to the cloud store, shared by its
 * ranks that read from it (0: unlimited). */
int ah_recovery_write(const char *path, const ah_holding *h, const ah_plan *plan, const ah_assignment *a,
                      double cloud_bytes_per_s, char *err, size_t errlen);

/* ---- spot availability traces ---- */
typedef struct {
    double t_s;    /* seconds from the start of the trace */
    int add;       /* 1 add (node available), 0 remove (preempted) */
    char node[64]; /* the trace's node name */
} ah_spot_event;

/* Reads "<time_ms>,<add|remove>,<node>" lines (blank lines and # comments
 * skipped). Times are decimal milliseconds, 0 to 10 years, in time order; an
 * add of a node the trace has, or a remove of one it has not, is an error
 * (events apply in file order). 0, or -1 with err naming the file and line. */
int ah_spot_trace_load(const char *path, ah_spot_event **out, int *n, char *err, size_t errlen);

/* ---- the `autohet run` controller (controller.c, docs/recovery.md): launches and supervises
 * the MPI training job of the current plan, one virtual node per inventory node, injects
 * preemptions (a list, a spot trace, `autohet preempt`), and on every change of the node set
 * replans and recovers from the layer bitmaps ---- */

typedef struct {
    const char *model_arg, *data, *plan_path, *cluster_arg;
    const char *run_dir; /* NULL: a fresh /tmp/autohet-run.XXXXXX */
    const char *log_path, *report_path;
    const char *svg_path;   /* the plot of the run: steps over wall time per generation, recoveries (NULL: none) */
    const char *trace_path; /* the trace of the generation that trains the run's last steps (NULL: none);
                               every generation that ends by itself keeps its own in RUN/trace-G.json */
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
    int max_restarts;     /* a failure on the same nodes, the same way at the same step, restarted this often */
    int mem_copies;   /* memory copies of each layer's snapshot on distinct nodes (layer-bitmap) */
    /* passed to every generation's `autohet train` as its flags of the same names (NULL / 0: not given) */
    const char *val_data, *data_dtype, *devices;
    const char *init_from; /* only to a generation that starts from no checkpoint (no --recover) */
    int eval_batches;
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
