/* The state `autohet run` keeps, shared by its parts (not a public
 * interface): controller.c (the run loop, changes of the node set, recovery
 * records, the report), job.c (one MPI job: launch, step log, kill, reap; the
 * tiers of a node) and sources.c (where preemptions come from: --preempt,
 * autohet preempt / SIGTERM requests, spot traces). */
#ifndef AUTOHET_ELASTIC_RUN_STATE_H
#define AUTOHET_ELASTIC_RUN_STATE_H
#include <signal.h>
#include <stdio.h>
#include <sys/types.h>

#include <cjson/cJSON.h>

#include "autohet/plan.h"
#include "autohet/profile.h"
#include "elastic/controller.h"

#define MAX_NODES 256

typedef struct {
    char node[64];
    int step;
    int fired;
} preempt_ev;

/* One heartbeat datagram, parsed (heartbeat.c, run_beat_parse) */
#define RUN_MAX_STUCK_PEERS 8
typedef struct {
    unsigned long long token;
    int gen, rank;
    unsigned long seq;
    unsigned stuck[RUN_MAX_STUCK_PEERS]; /* the peers its TCP connections stall on (IPv4, network order) */
    int n_stuck;
    unsigned long probe_round; /* the latest bandwidth probe it got, and how many datagrams of it came */
    int probe_got;
} run_beat_msg;

/* what the controller heard from one rank of the running generation (heartbeat.c) */
typedef struct run_beat_rank {
    double seen;                      /* when last heard, by the controller's clock */
    int heard;                        /* heard at least once */
    unsigned long seq_last, seq_first; /* the last sequence number heard; the first (since a restart) */
    unsigned long long got_bits;       /* bit i: beat seq_last - i heard (the last 64) */
    double heard_at[64];               /* when beat q was heard, at [q % 64] */
    double loss;    /* the share of beats lost in the loss window ending at seq_last (-1: fewer beats so far) */
    double loss_t0; /* when its losses began: the last beat heard before its first lost one */
    int node;                         /* the node it runs on (-1: not known yet) */
    unsigned addr;                    /* the IPv4 address its beats come from (network order; 0: none yet) */
    unsigned short port;              /* and their port (network order): where bandwidth probes go */
    run_beat_msg last;                /* its last beat: stalled peers, probe counts */
    double stuck_since; /* since when its beats name stalled peers (0: the last named none) */
} run_beat_rank;

typedef struct {
    const ah_run_options *o;
    ah_cluster inv;
    int alive[MAX_NODES];
    ah_model_config cfg;
    ah_profile *prof;
    ah_plan_options po;
    char run[512], mem[600], disk[600], cloud[600], control[600];
    FILE *log;
    preempt_ev *pre;
    int n_pre;
    ah_spot_event *trace;
    int n_trace, next_trace;
    char trace_map[MAX_NODES][64]; /* trace node name of inventory node i ("" unmapped) */
    double t_start;
    cJSON *report, *gens, *recs;
    /* the running generation */
    int gen;
    pid_t pid;
    ah_plan plan;
    int have_plan;
    struct ah_replan_table *replans; /* --plan's replans computed ahead (plan --replans K), or NULL */
    ah_plan replans_of;              /* the plan they were computed for (--plan as written) */
    const char *replan_way;          /* how the last plan was made: "search", "computed ahead", ... */
    int n_servers;  /* recovery server ranks beside the plan's in this generation */
    int start_step; /* the step this generation starts from */
    int step;       /* last step the current job logged (its checkpoint is committed) */
    int finished;   /* the run trained every step (RUN/run.json says so: --resume has nothing to do) */
    FILE *glog;     /* the job's step log being tailed */
    char glog_path[1200];
    cJSON *pending; /* the recovery whose restore result is awaited */
    char pending_result[1300];
    double t_spawn;
    int n_gone; /* tier directories of preempted nodes set aside, not deleted yet */
    /* across hosts (run_hosts.c): every inventory node is a host of its own */
    int multi_host;
    int host_slots[MAX_NODES], host_line[MAX_NODES]; /* node i's host's slots and hostfile line (0: unknown) */
    char host_source[256];                           /* the host list errors name */
    char host_mem[600], host_disk[600]; /* per-host tier roots: ROOT/HOST/NODE (RUN/memory/NODE links there) */
    char server_host[MAX_NODES][64];    /* the hosts of the generation's recovery server ranks */
    int host_used[MAX_NODES];
    /* heartbeats (heartbeat.c): per rank of generation beat_gen */
    struct run_beat_rank *beat;
    double beat_polled;
    /* failures on the same nodes (faults.c): the last one's signature and how often it came in a row */
    char fail_signature[1200];
    int fail_repeats;
    double ends_polled;
    double t_job_stop; /* when the controller stopped the running job itself (0: it did not) */
    double kill_seen;  /* when a rank's kill was first seen (faults.c; 0: none in this job) */
    /* heartbeats over the network (heartbeat.c) */
    int beat_fd;
    unsigned long long beat_token;
    char beat_env[1100];
    double beat_max_gap;
    double beat_all_silent_said; /* when "every node silent" was last said */
    double beat_stall_said;      /* when "stalled, no node singled out" was last said */
    unsigned long probe_round;   /* the last bandwidth probe sent (heartbeat.c), and when */
    double probe_t;
    unsigned long probed[MAX_NODES]; /* per node: the last probe round it was sent */
    double change_t_event; /* when the change apply_change acts on happened, if known before (0: now) */
    /* the run directory's state (run_dir_state.c) */
    int lock_fd;
    int keep_tiers; /* the run can go on (--resume): its memory and host tiers are not removed */
    double beat_written;
    int log_skip_through; /* lines of steps up to this one are already in --log (the last written, or the
                           * last a resumed controller found); -1 none */
    int n_beat, beat_gen;
    ah_device_catalog catalog; /* the built-in one with --devices: the GPU types of the plan and inventory */
} run_state;

/* ---- job.c ---- */
void run_sleep(double s);
void run_rm_rf(const char *path);
int run_mkdir_p(const char *path);
/* starts generation s->gen of s->plan (+ s->n_servers recovery servers when
 * recovering) under the launcher; its pid, or -1 with err */
pid_t run_launch(run_state *s, const char *plan_path, const char *recover, char *err, size_t errlen);
/* new complete lines of the job's step log go to --log; updates s->step */
int run_tail_log(run_state *s);
/* refuses a launcher that cannot start ranks as this user (Open MPI as root, unallowed): 0, or -1 with err */
int run_check_launcher(const char *launcher, char *err, size_t errlen);
/* waits for the job to end (killed after `grace` s), then makes sure no rank survives */
int run_reap(run_state *s, double grace);
/* SIGKILL to every process on this machine whose command line names the run directory (not this one);
 * how many were signalled */
int run_kill_run_processes(run_state *s);
/* removes the MPI shared-memory directories of every generation */
void run_remove_job_shm(run_state *s);
/* after the launcher ended: no rank of the job survives, its shared memory removed */
void run_clean_job(run_state *s, double grace);
/* SIGKILL the ranks of `node` (NULL: all) named in the job's pid files */
int run_kill_ranks(run_state *s, const char *node);
/* drop the pins of background copies a stopped job left in the memory tiers */
void run_clear_pins(run_state *s);
/* the instance is gone: its memory and disk tiers with it */
void run_wipe_node(run_state *s, const char *node);
/* deletes the tier directories run_wipe_node set aside */
void run_purge_gone(run_state *s);
/* with notice: the leaving nodes push their memory-tier shards to peers; bytes pushed */
double run_push_to_peers(run_state *s, const int *gone);

/* ---- sources.c ---- */
int run_node_index(const run_state *s, const char *name);
int run_parse_preempts(run_state *s, const char *spec, char *err, size_t errlen);
int run_poll_control(run_state *s, int *gone, double *notice, int *from_signal);
int run_trace_event(run_state *s, const ah_spot_event *ev, int *gone, int *added);
int run_poll_trace(run_state *s, int *gone, int *added);

/* ---- heartbeat.c ---- */
/* the controller's heartbeat socket and the $AUTOHET_BEAT its ranks get; 0 or -1 with err */
int run_heartbeat_listen(run_state *s, char *err, size_t errlen);
/* One heartbeat datagram ("autohet-beat TOKEN GEN RANK SEQ [stuck=A,B] [probe=ROUND:N]", from the network:
 * any bytes) into m; 0, or -1 if it is not a beat. */
int run_beat_parse(const char *msg, run_beat_msg *m);
/* Beat `seq` of rank b heard at `now`: its record and its loss over the window of the last `window` (<= 64)
 * sequence numbers, which slides with every beat heard, so a link that starts dropping shows one window after
 * (a window fixed from the rank's first beat could still hold the beats before the losses and need a second,
 * longer than a short run lasts once its link fails); loss_t0: the last beat heard before the first lost one. */
void run_beat_heard(run_beat_rank *b, unsigned long seq, double now, unsigned long window);
/* flags in gone[] the nodes with a rank not heard for --heartbeat-timeout; 1 if any, *t_last the last
 * time such a rank was heard, kind "heartbeat" or "partition" (its process runs here but is unheard) */
int run_poll_heartbeats(run_state *s, int *gone, double *t_last, char *kind, size_t kindlen);

/* ---- faults.c ---- */
typedef struct {
    int gone[MAX_NODES]; /* nodes lost (a SIGKILLed or vanished rank) */
    int n_lost;
    double t_fault;          /* when the first rank ended (wall clock), 0 if unknown */
    char cause[600];         /* "signal: lost n2 (rank 2, SIGKILL)", "exit: rank 1 on n1 exited with ..." */
    char signature[1200];    /* a failure on the same nodes: what must match for "the same way" */
    char message[1001];      /* its rank's last line on stderr */
    int exit_code;           /* the exit status autohet run gives when it stops on it */
} run_fault;
/* why the generation's job ended abnormally (the watchers' records); 1 if nodes were lost */
int run_diagnose_end(run_state *s, int status, run_fault *f);
/* 1 once a rank of the running job was killed or crashed (a watcher's "signal" record) 0.2 s ago, before the
 * launcher's teardown (~1 s later) ends the job: the controller stops it then (ranks killed with it record
 * their deaths first) */
int run_poll_ends(run_state *s);

/* ---- run_dir_state.c ---- */
/* takes RUN/.controller.lock for this process's life; -1 with err if another controller holds it */
int run_state_lock(run_state *s, char *err, size_t errlen);
/* RUN/run.json rewritten atomically from s (options, nodes, generation, report so far) */
int run_state_save(run_state *s);
/* controller.c: what the recoveries so far cost: the seconds from each loss to the restored state, summed,
 * and the steps trained again */
void run_recovery_totals(const run_state *s, double *seconds, int *redone);
/* run_svg.c: the plot of the run (--svg) */
int run_write_svg(const run_state *s, const char *path, int final_step, char *err, size_t errlen);
/* touches RUN/controller.beat (at most once a second) / when it was last touched (0: never) */
void run_state_beat(run_state *s);
double run_state_last_beat(const run_state *s);
/* the options of the run in dir (pointing into *doc, which the caller frees last) */
int run_state_read_options(const char *dir, ah_run_options *o, cJSON **doc, char *err, size_t errlen);
/* the rest of s from the document: tiers, nodes, generation, report so far */
void run_state_restore(run_state *s, const cJSON *doc);

/* ---- run_hosts.c ---- */
/* the host of every inventory node: --hostfile, else $SLURM_JOB_NODELIST
 * (when the inventory names none), else the inventory's own; sets multi_host */
int run_setup_hosts(run_state *s, char *err, size_t errlen);
/* an inventory node by its name or (across hosts) its host's; -1 if none */
int run_host_index(const run_state *s, const char *name);
const char *run_host_of(const run_state *s, const char *node);
/* the per-host memory and disk tiers of every node (base: the run's name) */
int run_host_tiers(run_state *s, const char *base, char *err, size_t errlen);
int run_host_tiers_node(run_state *s, int i);
/* inventory node i's memory (memory != 0) or disk tier directory: across hosts its host's own path */
void run_node_tier_dir(const run_state *s, int memory, int i, char *out, size_t n);
/* node's host is gone: its tier directories set aside (run_purge_gone deletes them) */
void run_wipe_host(run_state *s, const char *node);
void run_remove_host_tiers(run_state *s);
/* the hosts s->plan puts ranks on, space-separated */
void run_plan_hosts(const run_state *s, char *buf, size_t n);
/* checks the hosts' slots against s->plan and writes its rankfile (+ n_servers server ranks) */
int run_place_generation(run_state *s, const char *rankfile, int n_servers, char *err, size_t errlen);
/* SIGKILL node's ranks on its host through the launcher's remote agent; ranks signalled */
int run_kill_host(run_state *s, const char *node);
/* Runs argv, killed after timeout_s (a command that hangs, silent or not); with out, its stdout into out
 * (cap, NUL-terminated), else stdout inherited. Its exit status, -1 if it could not run or timed out. */
int run_exec(const char *const *argv, char *out, size_t cap, double timeout_s);

/* ---- run_slurm.c ---- */
/* inside a Slurm allocation ($SLURM_JOB_ID) and no rsh agent of one's own */
int run_in_slurm(void);
/* the nodes whose hosts left the job's allocation (squeue's node list), into f ("slurm: lost ..."); how many */
int run_slurm_lost(run_state *s, run_fault *f);
/* the hosts of a rankfile with their ranks, "H:N,H:N" (mpirun --host); 0, -1 if none or too long */
int run_rankfile_hosts(const char *rankfile, char *out, size_t n);

#endif
