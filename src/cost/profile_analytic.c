/* Analytic cost profile.
 *
 * Compute of a layer on a GPU (device with sm_count > 0) comes from the
 * calibrated GEMM model (src/cost/gemm_model.c, docs/calibration.md): the
 * layer's GEMMs after the TP split, tile- and wave-quantized over the SMs at
 * the device's max GEMM efficiency, plus memory-bound element-wise passes;
 * backward = dgrad + wgrad GEMMs + twice the element-wise traffic. Devices
 * without an SM count (the CPU devices, new devices given without one) keep
 * the plain roofline below. TP all-reduces, recomputation, the optimizer step
 * and slowdown are the same for both.
 *
 * Roofline notation: layer kind k (embedding / transformer block / head), TP degree t,
 * micro-batch b, sequence length s, hidden size h, device figures
 * peak = peak_tflops * 1e12 FLOP/s, eff = efficiency, bw = mem_bw_gbs * 1e9 B/s,
 * link = intra_bw_gbs * 1e9 B/s.
 *
 * Forward compute of one layer on one GPU of the TP group (roofline):
 *     C = max( F / (t * peak * eff),  B / bw )
 *     F = ah_layer_fwd_flops(m, k, s, b)      whole layer, before the TP split
 *     B = ah_layer_fwd_bytes(m, k, s, b, t)   HBM traffic per GPU
 * The embedding has F = 0, so it is memory-bound.
 *
 * Tensor parallelism (t > 1) adds ring all-reduces of the activation,
 * n = 2 * b * s * h bytes (bf16), over the intra-node link:
 *     AR = 2 (t - 1) / t * n / link + 2 (t - 1) * alpha,   alpha = 5e-6 s
 * Count per layer:            forward   backward
 *     transformer block          2          2
 *     head                       1          1
 *     embedding                  1          0
 * (AR = 0 when t = 1.)
 *
 *     fwd_s = C + n_fwd * AR
 *     bwd_s = 2 C + n_bwd * AR  + recomputation:
 *         FULL:      + C + n_fwd * AR          (the forward is run again)
 *         SELECTIVE: + 4 b s^2 h / (t * peak * eff)   (attention core only)
 *   Recomputation applies to transformer blocks only: Megatron checkpoints
 *   the transformer layers, the embedding and the head are never recomputed.
 *
 * Optimizer step (Adam), memory-bound: update_s = ah_layer_params(m, k) / t *
 * U / bw with U the training precision's optimizer traffic per parameter
 * (ah_precision_bytes_of: 32 B for bf16/fp16 mixed precision, 30 B for fp32).
 * Precision: fp32 runs the GEMMs at fp32_tflops (TF32 tensor cores on Ampere
 * and later) with 4-byte elements; bf16 and fp16 at peak_tflops, 2 bytes.
 *
 * Every time is multiplied by dev->slowdown (1 on real hardware; > 1 when the
 * engine emulates a slower GPU on one machine).
 * The analytic profile covers every (device, tp, mb): ah_profile_has() is
 * always true for it. */
#include <math.h>
#include <stddef.h>

#include "autohet/device.h"
#include "autohet/model.h"
#include "autohet/profile.h"
#include "cost/gemm_model.h"
#include "cost/profile_internal.h"

#define AH_TP_ALLREDUCE_ALPHA_S 5e-6

static double ring_allreduce_s(double bytes, int t, double link_bps) {
    if (t <= 1)
        return 0.0;
    return 2.0 * (t - 1) / t * bytes / link_bps + 2.0 * (t - 1) * AH_TP_ALLREDUCE_ALPHA_S;
}

/* Forward / backward compute (no communication) and the attention core that
 * selective recomputation redoes, by the GEMM model or the roofline. */
static int layer_compute(const ah_model_config *m, int seq, const ah_device *dev, ah_precision prec,
                         const ah_gemm_consts *gc, ah_layer_kind k, int tp, int mb, ah_layer_compute *c,
                         char *err, size_t errlen) {
    ah_gemm_env env;
    if (dev->sm_count > 0.0) {
        if (ah_gemm_env_of(dev, prec, gc, &env) != 0) {
            ah_cost_err_(err, errlen, "device %s: the GEMM model needs peak_tflops%s, efficiency, mem_bw_gbs > 0",
                         dev->name, prec == AH_PREC_FP32 ? " (fp32_tflops)" : "");
            return -1;
        }
        ah_layer_compute_s(&env, m, k, seq, mb, tp, c);
        return 0;
    }
    /* fp32 on a device without an fp32 figure (the CPU devices, whose nominal
     * peak is an fp32 one anyway): peak_tflops */
    const double peak = prec == AH_PREC_FP32 && dev->fp32_tflops > 0 ? dev->fp32_tflops : dev->peak_tflops;
    const double flops_rate = peak * 1e12 * dev->efficiency;
    if (!(flops_rate > 0.0) || !isfinite(flops_rate)) {
        ah_cost_err_(err, errlen, "device %s: peak_tflops * efficiency must be > 0", dev->name);
        return -1;
    }
    const double t = (double)tp;
    const double flops = ah_layer_fwd_flops(m, k, seq, mb);
    const double bytes = ah_layer_fwd_bytes(m, k, seq, mb, tp);
    c->fwd_s = fmax(flops / (t * flops_rate), bytes / (dev->mem_bw_gbs * 1e9));
    c->bwd_s = 2.0 * c->fwd_s;
    c->attn_fwd_s = 4.0 * (double)mb * (double)seq * (double)seq * (double)m->hidden / (t * flops_rate);
    return 0;
}

int ah_analytic_layer_cost_prec_(const ah_model_config *m, const ah_train_settings *ts, const ah_device *dev,
                                 int layer, int tp, int mb, ah_precision prec, const ah_gemm_consts *gc,
                                 ah_layer_cost *out, char *err, size_t errlen) {
    const double mem_bps = dev->mem_bw_gbs * 1e9;
    const double link_bps = dev->intra_bw_gbs * 1e9;
    if (!(mem_bps > 0.0) || !isfinite(mem_bps)) {
        ah_cost_err_(err, errlen, "device %s: mem_bw_gbs must be > 0", dev->name);
        return -1;
    }
    if (tp > 1 && (!(link_bps > 0.0) || !isfinite(link_bps))) {
        ah_cost_err_(err, errlen, "device %s: intra_bw_gbs must be > 0 for tp=%d", dev->name, tp);
        return -1;
    }

    const ah_layer_kind k = ah_model_layer_kind(m, layer);
    const int s = ts->seq;
    const double t = (double)tp;
    const double h = (double)m->hidden;
    ah_layer_compute c;
    if (layer_compute(m, s, dev, prec, gc, k, tp, mb, &c, err, errlen) != 0)
        return -1;

    /* The all-reduced activation has the training precision's element size;
     * the optimizer step's traffic is the training precision's (model.c). */
    const ah_precision_bytes *pb =
        ah_precision_bytes_of(prec == AH_PREC_FP32 ? AH_PRECISION_FP32 : ts->precision);
    const double elem = pb->elem;
    const double ar = ring_allreduce_s(elem * (double)mb * (double)s * h, tp, link_bps);
    int n_fwd, n_bwd;
    switch (k) {
    case AH_LAYER_BLOCK:
        n_fwd = 2;
        n_bwd = 2;
        break;
    case AH_LAYER_HEAD:
        n_fwd = 1;
        n_bwd = 1;
        break;
    case AH_LAYER_EMBED:
    default:
        n_fwd = 1;
        n_bwd = 0;
        break;
    }

    double fwd = c.fwd_s + n_fwd * ar;
    double bwd = c.bwd_s + n_bwd * ar;
    double bwd_comm = n_bwd * ar;
    if (k == AH_LAYER_BLOCK) {
        if (ts->recompute == AH_RECOMPUTE_FULL) {
            bwd += fwd;
            bwd_comm += n_fwd * ar;
        }
        else if (ts->recompute == AH_RECOMPUTE_SELECTIVE)
            bwd += c.attn_fwd_s;
    }
    out->tp_comm_fwd_s = n_fwd * ar * dev->slowdown;
    out->tp_comm_bwd_s = bwd_comm * dev->slowdown;
    double update = ah_layer_params(m, k) / t * pb->update / mem_bps;

    const double sd = dev->slowdown;
    out->fwd_s = fwd * sd;
    out->bwd_s = bwd * sd;
    out->update_s = update * sd;
    if (!isfinite(out->fwd_s) || !isfinite(out->bwd_s) || !isfinite(out->update_s) || out->fwd_s < 0 ||
        out->bwd_s < 0 || out->update_s < 0) {
        ah_cost_err_(err, errlen, "analytic cost of layer %d of %s on %s is not a finite time", layer,
                     m->name, dev->name);
        return -1;
    }
    return 0;
}

int ah_analytic_layer_cost_(const ah_model_config *m, const ah_train_settings *ts, const ah_device *dev,
                            int layer, int tp, int mb, ah_layer_cost *out, char *err, size_t errlen) {
    ah_precision prec = ts->precision == AH_PRECISION_FP32 ? AH_PREC_FP32 : AH_PREC_BF16;
    return ah_analytic_layer_cost_prec_(m, ts, dev, layer, tp, mb, prec, &ah_gemm_fitted, out, err, errlen);
}
