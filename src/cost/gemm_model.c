/* The calibrated analytic compute model (docs/calibration.md).
 *
 * One layer's forward is its GEMMs (dims per GPU after the TP split) plus
 * memory-bound element-wise passes over its activations; its backward is the
 * dgrad and wgrad GEMM of every forward GEMM plus ew_bwd (fitted, ~2-3) times
 * the forward's element-wise traffic. One GEMM takes
 *     max( waves * 2 tm tn k / (peak * max_eff / SMs),  bytes / (bw * ew_eff) ) + launch
 *     waves = ceil( ceil(m/tm) * ceil(n/tn) * batch / SMs )
 * i.e. every SM computes whole tm x tn output tiles at max_eff of its share of
 * the peak, and the last partial wave costs as much as a full one. One
 * element-wise kernel takes bytes / (bw * ew_eff) + launch. */
#include <math.h>

#include "cost/gemm_model.h"

/* launch_s and ew_eff are fitted by `bench/calib_bench.sh` (ah_calib_fit over
 * the Sailor profiles in /work/shared/data/profiles/sailor, all six GPU types,
 * TP = 1 blocks); the per-architecture max efficiencies of the same fit are the
 * `efficiency` figures of the device catalog (src/cluster/device.c). The fit
 * also finds how much more backward element-wise traffic the profiled runtime
 * moves than the fused kernels counted here (ah_gemm_profiled_ew_bwd); the
 * planner's model is of the counted kernels (ew_bwd 1: Megatron's fused
 * scale-mask-softmax, bias + GeLU, bias + dropout + add; docs/calibration.md). */
const ah_gemm_consts ah_gemm_fitted = {
    .launch_s = 0.73e-6,
    .ew_eff = 0.777,
    .ew_bwd = 1.0,
};
const double ah_gemm_profiled_ew_bwd = 2.595;

int ah_gemm_env_of(const ah_device *dev, ah_precision p, const ah_gemm_consts *c, ah_gemm_env *out) {
    double peak = p == AH_PREC_FP32 ? dev->fp32_tflops : dev->peak_tflops;
    if (!(dev->sm_count >= 1.0) || !(peak > 0.0) || !(dev->efficiency > 0.0) || !(dev->mem_bw_gbs > 0.0))
        return -1;
    out->peak_flops = peak * 1e12;
    out->max_eff = dev->efficiency;
    out->mem_bps = dev->mem_bw_gbs * 1e9;
    out->sms = floor(dev->sm_count);
    out->elem_bytes = p == AH_PREC_FP32 ? 4.0 : 2.0;
    out->c = *c;
    return 0;
}

double ah_gemm_flops(const ah_gemm *g) {
    return 2.0 * g->m * g->n * g->k * g->batch;
}

double ah_gemm_tiles(const ah_gemm *g) {
    return ceil(g->m / AH_GEMM_TILE_M) * ceil(g->n / AH_GEMM_TILE_N) * g->batch;
}

double ah_gemm_time_s(const ah_gemm_env *e, const ah_gemm *g) {
    if (!(g->m > 0 && g->n > 0 && g->k > 0 && g->batch > 0))
        return 0.0;
    double waves = ceil(ah_gemm_tiles(g) / e->sms);
    double per_sm_flops = e->peak_flops * e->max_eff / e->sms;
    double compute = waves * 2.0 * AH_GEMM_TILE_M * AH_GEMM_TILE_N * g->k / per_sm_flops;
    double bytes = e->elem_bytes * (g->m * g->k + g->k * g->n + g->m * g->n) * g->batch;
    double memory = bytes / (e->mem_bps * e->c.ew_eff);
    return fmax(compute, memory) + e->c.launch_s;
}

static double kv_width(const ah_model_config *m) {
    return m->n_heads > 0 ? (double)m->hidden * m->n_kv_heads / m->n_heads : m->hidden;
}

static ah_gemm gemm(double mm, double n, double k, double batch) {
    return (ah_gemm){mm, n, k, batch};
}

/* Megatron's split: QKV and MLP-up column-parallel (N / t), the output
 * projection and MLP-down row-parallel (K / t), heads / t per GPU, the LM
 * head vocabulary-parallel (N = V / t). OPT's project_in / project_out
 * (embedding width E < h) are counted split like a column-parallel GEMM. */
int ah_layer_fwd_gemms(const ah_model_config *m, ah_layer_kind k, int seq, int mb, int tp,
                       ah_gemm out[AH_GEMM_MAX]) {
    double t = tp > 0 ? tp : 1, s = seq, tok = (double)mb * seq, h = m->hidden, f = m->ffn_hidden;
    double E = ah_model_embed_width(m);
    int proj = E < h;
    switch (k) {
    case AH_LAYER_EMBED:
        if (proj)
            out[0] = gemm(tok, h / t, E, 1); /* project_in */
        return proj;
    case AH_LAYER_HEAD:
        if (proj)
            out[1] = gemm(tok, E / t, h, 1); /* project_out */
        out[0] = gemm(tok, m->vocab / t, E, 1);
        return 1 + proj;
    case AH_LAYER_BLOCK: break;
    }
    int llama = m->arch == AH_ARCH_LLAMA;
    double d = h / m->n_heads, heads = (double)mb * m->n_heads / t;
    out[0] = gemm(tok, (h + 2.0 * (llama ? kv_width(m) : h)) / t, h, 1); /* QKV */
    out[1] = gemm(s, s, d, heads);                                       /* scores Q K^T */
    out[2] = gemm(s, d, s, heads);                                       /* context P V */
    out[3] = gemm(tok, h, h / t, 1);                                     /* output projection */
    out[4] = gemm(tok, (llama ? 2.0 : 1.0) * f / t, h, 1);               /* MLP up (SwiGLU: gate + up) */
    out[5] = gemm(tok, h, f / t, 1);                                     /* MLP down */
    return 6;
}

/* For C = A B: dA = dC B^T is (m x k, inner n), dB = A^T dC is (k x n, inner m). */
int ah_layer_bwd_gemms(const ah_model_config *m, ah_layer_kind k, int seq, int mb, int tp,
                       ah_gemm out[AH_GEMM_MAX]) {
    ah_gemm fwd[AH_GEMM_MAX] = {{0, 0, 0, 0}};
    int n = ah_layer_fwd_gemms(m, k, seq, mb, tp, fwd);
    for (int i = 0; i < n; i++) {
        out[2 * i] = gemm(fwd[i].m, fwd[i].k, fwd[i].n, fwd[i].batch);
        out[2 * i + 1] = gemm(fwd[i].k, fwd[i].n, fwd[i].m, fwd[i].batch);
    }
    return 2 * n;
}

/* Element-wise traffic of one forward: bytes and kernel count. */
typedef struct {
    double bytes, kernels;
} ew_cost;

static void pass(ew_cost *c, double bytes, double kernels) {
    c->bytes += bytes;
    c->kernels += kernels;
}

/* Elements per GPU, e bytes each; dropout (GPT/BERT, not LLaMA) adds a
 * 1-byte mask per element. Unfused Megatron-style kernels:
 *   2 norms (read + write T h), QKV split into heads (read + write), RoPE
 *   (LLaMA), fused scale-mask-softmax over the b a s^2 / t scores (read +
 *   write), dropout on them, context back to T x h/t, 2 x bias + dropout +
 *   residual add (read 2, write 1), GELU (read + write T f/t) or SwiGLU
 *   (read 2, write 1). */
static ew_cost block_ew(const ah_model_config *m, double tok, double s, double mb, double t, double e) {
    double h = m->hidden, f = m->ffn_hidden, hkv = kv_width(m);
    double scores = mb * m->n_heads / t * s * s;
    int llama = m->arch == AH_ARCH_LLAMA, drop = !llama;
    ew_cost c = {0, 0};
    pass(&c, 2 * 2 * tok * h * e, 2);
    pass(&c, 2 * tok * (h + 2 * hkv) / t * e, 1);
    if (llama)
        pass(&c, 2 * tok * (h + hkv) / t * e, 1);
    pass(&c, 2 * scores * e, 1);
    if (drop)
        pass(&c, scores * (2 * e + 1), 1);
    pass(&c, 2 * tok * h / t * e, 1);
    pass(&c, 2 * tok * h * (3 * e + drop), 2);
    pass(&c, (llama ? 3.0 : 2.0) * tok * f / t * e, 1);
    return c;
}

/* Backward of block_ew's kernels, counted the same way (the autograd of
 * Megatron's fused kernels):
 *   each norm reads x and dy and writes dx, then the residual stream adds the
 *   branch gradient to the skip one (read 2, write 1); merging heads back
 *   (read + write); RoPE's inverse rotation; softmax backward reads dy and y
 *   and writes dx; dropout backward reads dy and the mask and writes dx (on the
 *   scores, and fused with each bias + residual add, whose bias gradient is a
 *   reduction over the branch gradient: read it once more); GELU backward reads
 *   dy and x, writes dx, and its bias gradient reads dx; SwiGLU reads dy, the
 *   gate and the up projection and writes both gradients. */
static ew_cost block_ew_bwd(const ah_model_config *m, double tok, double s, double mb, double t, double e) {
    double h = m->hidden, f = m->ffn_hidden, hkv = kv_width(m);
    double scores = mb * m->n_heads / t * s * s;
    int llama = m->arch == AH_ARCH_LLAMA, drop = !llama;
    ew_cost c = {0, 0};
    pass(&c, 2 * 6 * tok * h * e, 4);
    pass(&c, 2 * tok * (h + 2 * hkv) / t * e, 1);
    if (llama)
        pass(&c, 2 * tok * (h + hkv) / t * e, 1);
    pass(&c, 3 * scores * e, 1);
    if (drop)
        pass(&c, scores * (2 * e + 1), 1);
    pass(&c, 2 * tok * h / t * e, 1);
    pass(&c, 2 * tok * h * (3 * e + drop), 2);
    pass(&c, (llama ? 5.0 : 4.0) * tok * f / t * e, llama ? 1 : 2);
    return c;
}

/* The attention core alone (softmax + dropout over the scores), the part
 * selective recomputation redoes besides the two attention GEMMs. */
static ew_cost attn_ew(const ah_model_config *m, double s, double mb, double t, double e) {
    double scores = mb * m->n_heads / t * s * s;
    ew_cost c = {0, 0};
    pass(&c, 2 * scores * e, 1);
    if (m->arch != AH_ARCH_LLAMA)
        pass(&c, scores * (2 * e + 1), 1);
    return c;
}

/* Forward and backward element-wise cost of the embedding and the head.
 * Embedding: gather (read + write T h), learned positions added (read 2,
 * write 1), dropout; backward scatter-adds the gradient (read, read +
 * write the table rows). Head: final norm, then softmax cross-entropy over
 * the fp32 logits (T V / t, 4 bytes whatever the precision, as Megatron
 * upcasts them): 3 passes forward (max, sum of exp, softmax), 2 backward. */
static void edge_ew(const ah_model_config *m, ah_layer_kind k, double tok, double t, double e, ew_cost *fwd,
                    ew_cost *bwd) {
    double h = m->hidden;
    int drop = m->arch != AH_ARCH_LLAMA;
    *fwd = (ew_cost){0, 0};
    *bwd = (ew_cost){0, 0};
    if (k == AH_LAYER_EMBED) {
        pass(fwd, 2 * tok * h * e, 1);
        if (m->max_positions > 0)
            pass(fwd, 3 * tok * h * e, 1);
        if (drop)
            pass(fwd, tok * h * (2 * e + 1), 1);
        pass(bwd, 3 * tok * h * e, 1);
        return;
    }
    double logits = tok * m->vocab / t * 4.0;
    pass(fwd, 2 * tok * h * e, 1);
    pass(fwd, 3 * logits, 3);
    pass(bwd, 4 * tok * h * e, 2);
    pass(bwd, 2 * logits, 1);
}

static double ew_time(const ah_gemm_env *e, ew_cost c) {
    return c.bytes / (e->mem_bps * e->c.ew_eff) + c.kernels * e->c.launch_s;
}

static double gemms_time(const ah_gemm_env *e, const ah_gemm *g, int n) {
    double sum = 0.0;
    for (int i = 0; i < n; i++)
        sum += ah_gemm_time_s(e, &g[i]);
    return sum;
}

double ah_block_fwd_floor_s(const ah_gemm_env *e, const ah_model_config *m, int seq, int mb, int tp) {
    ah_gemm g[AH_GEMM_MAX] = {{0, 0, 0, 0}};
    double t = tp > 0 ? tp : 1, flops = 0.0;
    int n = ah_layer_fwd_gemms(m, AH_LAYER_BLOCK, seq, mb, tp, g);
    for (int i = 0; i < n; i++)
        flops += ah_gemm_flops(&g[i]);
    ew_cost ew = block_ew(m, (double)mb * seq, seq, mb, t, e->elem_bytes);
    return flops / e->peak_flops + ew.bytes / e->mem_bps;
}

void ah_layer_compute_s(const ah_gemm_env *e, const ah_model_config *m, ah_layer_kind k, int seq, int mb,
                        int tp, ah_layer_compute *out) {
    ah_gemm g[AH_GEMM_MAX];
    double t = tp > 0 ? tp : 1, tok = (double)mb * seq;
    double fwd_g = gemms_time(e, g, ah_layer_fwd_gemms(m, k, seq, mb, tp, g));
    double bwd_g = gemms_time(e, g, ah_layer_bwd_gemms(m, k, seq, mb, tp, g));
    out->attn_fwd_s = 0.0;
    if (k == AH_LAYER_BLOCK) {
        ew_cost ew = block_ew(m, tok, seq, mb, t, e->elem_bytes);
        out->fwd_s = fwd_g + ew_time(e, ew);
        /* ew_bwd scales the counted backward traffic: 1 for the kernels as
         * counted, more for a runtime that moves more. */
        ew_cost eb = block_ew_bwd(m, tok, seq, mb, t, e->elem_bytes);
        eb.bytes *= e->c.ew_bwd;
        out->bwd_s = bwd_g + ew_time(e, eb);
        ah_layer_fwd_gemms(m, k, seq, mb, tp, g); /* g[1], g[2]: the attention GEMMs */
        out->attn_fwd_s = ah_gemm_time_s(e, &g[1]) + ah_gemm_time_s(e, &g[2]) +
                          ew_time(e, attn_ew(m, seq, mb, t, e->elem_bytes));
        return;
    }
    ew_cost ef, eb;
    edge_ew(m, k, tok, t, e->elem_bytes, &ef, &eb);
    out->fwd_s = fwd_g + ew_time(e, ef);
    out->bwd_s = bwd_g + ew_time(e, eb);
}
