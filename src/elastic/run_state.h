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
    int n_servers;  /* recovery server ranks beside the plan's in this generation */
    int start_step; /* the step this generation starts from */
    int step;       /* last step the current job logged (its checkpoint is committed) */
    FILE *glog;     /* the job's step log being tailed */
    char glog_path[1200];
    cJSON *pending; /* the recovery whose restore result is awaited */
    char pending_result[1300];
    double t_spawn;
    int n_gone; /* tier directories of preempted nodes set aside, not deleted yet */
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
/* waits for the job to end (killed after `grace` s), then makes sure no rank survives */
int run_reap(run_state *s, double grace);
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

#endif
