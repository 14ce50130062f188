/* Discrete-event simulator of one training iteration of a plan.
 *
 * Every TP group (pipeline stage) has a compute stream and communication
 * streams; operations are tasks with explicit dependencies. Compute tasks run
 * in the order the pipeline schedule gives; transfers and collectives are
 * fluid flows whose rates are shared max-min fairly on the links they cross
 * (per-GPU intra-node link, per-GPU NIC rail, node NIC). See docs/simulator.md. */
#ifndef AUTOHET_SIM_H
#define AUTOHET_SIM_H
#include <stdio.h>

#include "autohet/ops.h"
#include "autohet/plan.h"
#include "autohet/profile.h"
#include "autohet/schedule.h"

/* An event's kind and stream: the one vocabulary of a step (autohet/ops.h): forward, backward,
 * tp_allreduce, send_activation and send_gradient (a transfer), dp_allreduce, optimizer, tied_sync. */

/* A finished event as it appears on one stage's stream (a transfer appears on
 * the sender's and the receiver's P2P stream; a collective on every
 * participant's DP stream). */
typedef struct {
    ah_op_kind kind;
    ah_stream stream;
    int replica, stage;           /* the stage whose track it is on */
    int micro_batch;              /* -1 if none */
    int layer_first, layer_last;  /* layers [first, last) involved */
    int peer_replica, peer_stage; /* the other end of a transfer, -1 if none */
    int bucket;                   /* DP bucket index, -1 if none */
    double start_s, end_s;
    double bytes; /* bytes per GPU moved (communication events) */
} ah_sim_event;

/* Memory of a stage over time: a step function (time, bytes per GPU). */
typedef struct {
    double t, bytes;
} ah_mem_point;

typedef struct {
    int replica, stage;
    int node, gpu_first, tp; /* where it runs; its tp GPUs behave identically */
    double compute_s;        /* busy computing */
    double exposed_comm_s;   /* communicating while not computing */
    double idle_s;           /* neither: bubbles and waiting */
    double peak_memory_bytes, capacity_bytes;
    double static_bytes; /* weights + gradients + optimizer state */
    int peak_in_flight;  /* micro-batches whose activations were alive at the peak */
    double finish_s;     /* end of its last operation (optimizer) */
    ah_mem_point *mem;   /* memory timeline */
    int n_mem;
} ah_sim_stage;

typedef struct {
    int first, last; /* layers [first, last) */
    double bytes;    /* gradient bytes per GPU of one slice: the layers' bytes over `slices` */
    double ready_s, start_s, end_s;
    int n_holders;
    int slices; /* the largest degree among its holders: a holder of degree t all-reduces slices / t
                 * slices per GPU (uniform degrees: 1 per GPU, its whole shard) */
} ah_sim_bucket;

typedef struct {
    ah_schedule schedule;
    double iteration_time_s;
    double closed_form_s; /* the planner's prediction for the same plan (it leaves out the step sync) */
    double step_sync_s;   /* the step reduction's own time (loss and gradient norm over every rank; 0 for one) */
    int n_replicas;
    double *replica_flush_s;  /* per replica: end of its last backward (pipeline flush) */
    double *replica_finish_s; /* per replica: end of its last operation */
    ah_sim_stage *stages;     /* one per (replica, stage), replica-major */
    int n_stages;
    ah_sim_bucket *buckets;
    int n_buckets;
    ah_sim_event *events;
    int n_events;
    long long flow_updates; /* rate recomputations, for reporting */
} ah_sim_result;

typedef struct {
    ah_schedule schedule;
    int virtual_stages; /* interleaved: chunks per stage (0 = 2) */
    int record_events; /* keep the event list (needed for --trace / --svg) */
    /* 0: bucket all-reduces run concurrently, sharing the links (one
     * communicator and stream per bucket, or MPI non-blocking collectives);
     * 1: each GPU runs its buckets one at a time in a global order (a single
     * NCCL stream), so buckets of misaligned stages form chains. */
    int dp_serial;
    /* the programs start each bucket's all-reduce inside the backward (ah_schedule_options.overlap_dp),
     * as `train --overlap-dp` runs them; 0: blocking after the flush, as `train` runs them */
    int overlap_dp;
} ah_sim_options;

/* Simulate one iteration. The plan is (re-)evaluated with `prof` and `o`
 * first so the stage costs are the planner's. Returns 0, or -1 with err. */
int ah_simulate(ah_plan *plan, const ah_profile *prof, const ah_plan_options *o, const ah_sim_options *so,
                ah_sim_result *out, char *err, size_t errlen);
void ah_sim_result_free(ah_sim_result *r);

/* The closed form against the simulator on candidate plans (`autohet plan --verify`): each simulated
 * under 1F1B with the program the closed form costs (the buckets' all-reduces overlapped, overlap_dp). */
typedef struct {
    int n, n_simulated;
    double *simulated_s; /* [n]: the simulated iteration, 0 where it could not be simulated */
    char (*errors)[256]; /* [n]: why not, "" where it was */
    int winner;          /* the fastest in simulation, -1 if none was simulated */
    int worst;           /* the candidate of the largest |closed form / simulated - 1|, -1 if none */
    double worst_error;  /* that |error| */
    double tau;          /* Kendall tau of closed form against simulated, over the simulated candidates */
} ah_sim_verification;
void ah_sim_verify(const ah_plan *plans, int n, const ah_profile *prof, const ah_plan_options *o,
                   ah_sim_verification *v);
void ah_sim_verification_free(ah_sim_verification *v);

/* Fitting a calibration to measured runs (`autohet calibrate`, src/sim/sim_calibrate.c): each run's plan and
 * measured iteration time in, its simulated times out. */
typedef struct {
    char name[128];
    ah_plan plan;
    double measured_s;
    double uncalibrated_s; /* simulated as is */
    double fitted_s;       /* simulated with the calibration fitted on every run */
    double left_out_s;     /* simulated with a calibration fitted on the other runs (0: not validated) */
    char excluded[160];    /* why the run is not fitted ("": it is); it is still simulated, as a held-out run */
} ah_calib_run;
/* Fit `out` to the runs not excluded, each simulated with `prof` (its calibration is set and cleared here), `o`
 * (train and global batch from each plan) and `so`; with validate, leave each fitted run out once (an excluded
 * run's left-out time is its fitted one: the fit never saw it). 0, or -1 with err. */
int ah_sim_calibrate(ah_calib_run *runs, int n, ah_profile *prof, const ah_plan_options *o, const ah_sim_options *so,
                     int validate, ah_calibration *out, char *err, size_t errlen);

/* Outputs (src/sim/sim_output.c). Each returns 0 or -1 with err. */
int ah_sim_write_trace(const ah_plan *plan, const ah_sim_result *r, const char *path, char *err,
                       size_t errlen);
int ah_sim_write_svg(const ah_plan *plan, const ah_sim_result *r, const char *path, char *err, size_t errlen);
int ah_sim_write_json(const ah_plan *plan, const ah_sim_result *r, const char *path, char *err,
                      size_t errlen);
void ah_sim_print_summary(const ah_plan *plan, const ah_sim_result *r, FILE *f);

#endif
