/* A cost-model calibration: what measured runs say the profile and the links leave out (docs/calibration.md,
 * "Calibrating against measured runs"). Fitted by `autohet calibrate` from runs with known iteration times,
 * applied by `simulate --calibration` and `plan --calibration`:
 *
 *   - per device, a scale of its optimizer step, and a compute scale by micro-batch size: every layer's
 * forward and backward time (its TP all-reduce share included) at micro-batch b is multiplied by scale(b); a
 * size between two fitted ones is interpolated linearly in log2(b), a size outside them takes the nearest end;
 *   - the runtime's pipeline (p2p "lockstep"): the measured runtime's sends block sender and receiver, each
 *     moving one activation across the boundary (1/TP of it per GPU); DeepSpeed's steps pair every stage with
 *     one neighbour by parity, so every stage's forward and backward wait for two transfers on the replica's
 *     slowest boundary (one with two stages: ah_lockstep_chain_of); each transfer costs alpha_s + bytes /
 *     (fraction x the link's bandwidth: intra-node, or the node's NIC share per GPU), the fraction per link
 *     class (at most 1: no transfer beats its link).
 *
 * A device the file does not name keeps scale 1. The device scales correct the profile the runs were simulated
 * with (`profile_model`: a measured profile's model, "" for the analytic model): with a profile of another
 * model they are dropped (ah_calibration_scope) and only the pipeline terms, the runtime's and the links',
 * carry over. Likewise the bandwidth fractions correct the links the runs were simulated with (`links`:
 * "datasheet", or "measured" with a comm profile): with the other kind they are dropped
 * (ah_calibration_link_scope) and transfers get all of each link; the latency stays. */
#ifndef AUTOHET_CALIBRATION_H
#define AUTOHET_CALIBRATION_H
#include <stddef.h>

#define AH_CALIB_MAX_DEVICES 16
#define AH_CALIB_MAX_MB 16
/* What a calibration's figures may be (ah_calibration_load; autohet calibrate fits within them): a compute or
 * optimizer scale from 1/100 to 100x (calibrate's fits: compute from 0.05, optimizer 0.05 to 2), a lockstep
 * latency up to 1 s (fitted: 0 to 5 ms), a bandwidth fraction 0 (all of the link) or from 1 % (fitted: 2 %),
 * a validation error up to 100 (10,000 %); the left-out mean error, the planner's error bars, below 1 as
 * --model-error's. */
#define AH_CALIB_SCALE_MIN 0.01
#define AH_CALIB_SCALE_MAX 100.0
#define AH_CALIB_MAX_ALPHA_S 1.0
#define AH_CALIB_MIN_BW_FRACTION 0.01
#define AH_CALIB_MAX_ERROR 100.0

typedef struct {
    char name[32]; /* a catalog device name */
    int n;
    int mb[AH_CALIB_MAX_MB]; /* ascending */
    double scale[AH_CALIB_MAX_MB];
    double optimizer_scale; /* the optimizer step's time (0 read as 1) */
} ah_calib_device;

typedef struct {
    int n_devices;
    ah_calib_device devices[AH_CALIB_MAX_DEVICES];
    int lockstep;       /* the pipeline transfers are the measured runtime's (above) */
    double p2p_alpha_s; /* lockstep: per-transfer latency */
    double
        p2p_bw_fraction[2]; /* lockstep: of the link's bandwidth, [0] inside a node, [1] between nodes; 0 = 1 */
    char source[256];  /* what it was fitted on (free text) */
    int scoped;              /* profile_model was given (files written before it was are not scoped) */
    char profile_model[64];  /* the model of the profile the device scales correct ("": the analytic one) */
    int links_scoped;        /* links_measured was recorded (pipeline.links) */
    int links_measured;      /* the bandwidth fractions correct measured links (a comm profile), not datasheet */
    double left_out_error; /* its validation's mean |error| with each run left out (0: not validated) */
} ah_calibration;

/* scale(b) of device `name` (1 if it is not named); its optimizer scale (1 if not named or not set). */
double ah_calibration_compute_scale(const ah_calibration *c, const char *name, int mb);
double ah_calibration_optimizer_scale(const ah_calibration *c, const char *name);
/* Set device `name`'s optimizer scale (the device is added); -1 when the table is full. */
int ah_calibration_set_optimizer_scale(ah_calibration *c, const char *name, double scale);
/* Set device `name`'s scale at micro-batch mb (added in order); -1 when the tables are full. */
int ah_calibration_set_scale(ah_calibration *c, const char *name, int mb, double scale);
/* The time of one lockstep transfer of `bytes` on a link of `link_gbs` per GPU (inter: between nodes):
 * alpha_s + bytes / (fraction x link_gbs). */
double ah_calibration_transfer_s(const ah_calibration *c, double bytes, int inter, double link_gbs);

/* Keep the device scales only with a profile of the calibration's model (ah_profile_table_model: "" for the
 * analytic one): 1 when they were dropped (another model's profile), 0 otherwise. */
int ah_calibration_scope(ah_calibration *c, const char *profile_model);
/* Keep the bandwidth fractions only on links of the kind they were fitted on (measured: a comm profile
 * applies): 1 when they were dropped, 0 otherwise. */
int ah_calibration_link_scope(ah_calibration *c, int measured);

/* Read / write the JSON format (docs/calibration.md): 0, or -1 with a one-line error naming the file and
 * field. `extra` (may be NULL): a JSON object text written as the document's "validation" member. */
int ah_calibration_load(const char *path, ah_calibration *c, char *err, size_t errlen);
int ah_calibration_write(const char *path, const ah_calibration *c, const char *extra, char *err,
                         size_t errlen);

#endif
