/* Private to src/cost (and the calibration tests / benchmark): the calibrated
 * analytic compute model of one layer, built from the layer's GEMMs and its
 * element-wise passes (docs/calibration.md). */
#ifndef AUTOHET_COST_GEMM_MODEL_H
#define AUTOHET_COST_GEMM_MODEL_H
#include "autohet/device.h"
#include "autohet/model.h"

/* C[m x n] = A[m x k] * B[k x n], `batch` independent copies (attention per
 * head), dims per GPU after the tensor-parallel split. */
typedef struct {
    double m, n, k, batch;
} ah_gemm;

/* Output tile of one thread block (cuBLAS/CUTLASS's common 128x128 shape). */
#define AH_GEMM_TILE_M 128.0
#define AH_GEMM_TILE_N 128.0
/* Most GEMMs one layer's forward or backward has (LLaMA and GPT: 6 / 12). */
#define AH_GEMM_MAX 12

/* Global constants of the model (src/cost/gemm_model.c). */
typedef struct {
    double launch_s; /* fixed cost of one kernel launch */
    double ew_eff;   /* fraction of mem_bw_gbs that element-wise kernels and GEMM traffic reach */
    double ew_bwd;   /* backward element-wise traffic per counted one (block_ew_bwd): 1 = fused kernels */
} ah_gemm_consts;
extern const ah_gemm_consts ah_gemm_fitted;
/* ew_bwd of the runtime the Sailor profiles were measured on (the same fit). */
extern const double ah_gemm_profiled_ew_bwd;

typedef enum { AH_PREC_BF16 = 0, AH_PREC_FP32 = 1 } ah_precision;

/* What the model needs of a device at one precision. */
typedef struct {
    double peak_flops; /* FLOP/s of the math unit at this precision */
    double max_eff;    /* fraction of peak_flops full waves of full tiles reach (dev->efficiency) */
    double mem_bps;    /* B/s */
    double sms;        /* streaming multiprocessors */
    double elem_bytes; /* 2 (bf16) or 4 (fp32) */
    ah_gemm_consts c;
} ah_gemm_env;

/* Environment of dev at precision p with constants c. Returns 0, or -1 if the
 * device lacks what the model needs (sm_count, fp32_tflops for FP32). */
int ah_gemm_env_of(const ah_device *dev, ah_precision p, const ah_gemm_consts *c, ah_gemm_env *out);

double ah_gemm_flops(const ah_gemm *g); /* 2 m n k batch */
/* ceil(m / tile_m) * ceil(n / tile_n) * batch output tiles. */
double ah_gemm_tiles(const ah_gemm *g);
/* max(wave-quantized compute, bytes / bandwidth) + launch. */
double ah_gemm_time_s(const ah_gemm_env *e, const ah_gemm *g);

/* The forward GEMMs of one layer on one GPU at TP degree tp (0 for the
 * embedding); they sum to ah_layer_fwd_flops / tp. Returns the count. */
int ah_layer_fwd_gemms(const ah_model_config *m, ah_layer_kind k, int seq, int mb, int tp,
                       ah_gemm out[AH_GEMM_MAX]);
/* dgrad + wgrad of each forward GEMM (2x the FLOPs). Returns the count. */
int ah_layer_bwd_gemms(const ah_model_config *m, ah_layer_kind k, int seq, int mb, int tp,
                       ah_gemm out[AH_GEMM_MAX]);

typedef struct {
    double fwd_s, bwd_s; /* compute of one micro-batch, no TP communication */
    double attn_fwd_s;   /* the attention core's forward (selective recomputation redoes it) */
} ah_layer_compute;

/* The forward of one transformer block at the device's datasheet limits: its
 * GEMM FLOPs at the full peak (e->peak_flops, not max_eff) plus its
 * element-wise bytes at the full memory bandwidth, and nothing else (no
 * tiles, waves, launches or GEMM operand traffic). No implementation of the
 * model's kernels runs faster; a measured time below it means the device is
 * not what its datasheet says (docs/calibration.md, "Datasheet floor"). */
double ah_block_fwd_floor_s(const ah_gemm_env *e, const ah_model_config *m, int seq, int mb, int tp);

/* Compute times of one layer on one GPU (no slowdown, no communication). */
void ah_layer_compute_s(const ah_gemm_env *e, const ah_model_config *m, ah_layer_kind k, int seq, int mb,
                        int tp, ah_layer_compute *out);

#endif
