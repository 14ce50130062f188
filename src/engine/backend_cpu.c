/* The CPU backend: the ah_backend table over host memory, with the kernels of
 * kernels.c and the optimizer of optim.c (see backend.h). It runs every
 * operation synchronously, so its queue is always drained. This is the one
 * file where an ah_dptr becomes a float pointer.
 *
 * The linear layers' weights go through ah__gemm_weight, whose bf16 copies
 * (--precision bf16) stay valid until the weight is written: every operation
 * here that writes a buffer other than a kernel's output (zero, to_device,
 * copy, add, scale, adamw) reports the range, and free drops the copies of the
 * freed block. Kernel outputs are activations and gradients, never weights. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/gemm.h"
#include "engine/kernels.h"
#include "engine/optim.h"
#include "util/errors.h"

static float *F(ah_dptr d) {
    return (float *)(void *)d.p;
}
static int *I(ah_dptr d) {
    return (int *)(void *)d.p;
}

static ah_dptr cpu_alloc(void *ctx, size_t n) {
    (void)ctx;
    void *p = calloc(n ? n : 1, AH_DELEM);
    if (p == NULL) /* one line and exit, never abort() */
        ah_out_of_memory(n * AH_DELEM);
    return (ah_dptr){(ah_dmem *)p};
}
static void cpu_free(void *ctx, ah_dptr d) {
    (void)ctx;
    if (d.p != NULL) /* the block's whole extent (calloc rounds up): no other buffer lies in it */
        ah__gemm_weights_released(d.p, malloc_usable_size(d.p));
    free(d.p);
}
static void cpu_zero(void *ctx, ah_dptr d, size_t n) {
    (void)ctx;
    ah__gemm_weights_written(d.p, n * AH_DELEM);
    memset(d.p, 0, n * AH_DELEM);
}
static void cpu_to_device(void *ctx, ah_dptr dst, const void *src, size_t n) {
    (void)ctx;
    ah__gemm_weights_written(dst.p, n * AH_DELEM);
    memcpy(dst.p, src, n * AH_DELEM);
}
static void cpu_to_host(void *ctx, void *dst, ah_dptr src, size_t n) {
    (void)ctx;
    memcpy(dst, src.p, n * AH_DELEM);
}
static void cpu_copy(void *ctx, ah_dptr dst, ah_dptr src, size_t n) {
    (void)ctx;
    ah__gemm_weights_written(dst.p, n * AH_DELEM);
    memmove(dst.p, src.p, n * AH_DELEM);
}
static void cpu_sync(void *ctx) {
    (void)ctx; /* every operation has completed when it returns */
}

/* the context of a CPU backend instance: the precision of its linear layers' products */
static ah_matmul_precision prec_of(const void *ctx) {
    return *(const ah_matmul_precision *)ctx;
}

static void cpu_linear_fwd(void *ctx, ah_dptr out, ah_dptr inp, ah_dptr w, ah_dptr bias, int N, int K, int M) {
    ah__linear_fwd_weight(prec_of(ctx), F(out), F(inp), F(w), F(bias), N, K, M);
}
static void cpu_linear_bwd(void *ctx, ah_dptr dinp, ah_dptr dw, ah_dptr dbias, ah_dptr dout, ah_dptr inp,
                           ah_dptr w, int N, int K, int M) {
    ah__linear_bwd_weight(prec_of(ctx), F(dinp), F(dw), F(dbias), F(dout), F(inp), F(w), N, K, M);
}
static void cpu_embedding_fwd(void *ctx, ah_dptr out, ah_dptr tok, ah_dptr wte, ah_dptr wpe, int N, int T,
                              int C) {
    (void)ctx;
    ah__embedding_fwd(F(out), I(tok), F(wte), F(wpe), N, T, C);
}
static void cpu_embedding_bwd(void *ctx, ah_dptr dwte, ah_dptr dwpe, ah_dptr dout, ah_dptr tok, int N, int T,
                              int C) {
    (void)ctx;
    ah__embedding_bwd(F(dwte), F(dwpe), F(dout), I(tok), N, T, C);
}
static void cpu_layernorm_fwd(void *ctx, ah_dptr out, ah_dptr mean, ah_dptr rstd, ah_dptr inp, ah_dptr w,
                              ah_dptr b, int N, int C, float eps) {
    (void)ctx;
    ah__layernorm_fwd_eps(F(out), F(mean), F(rstd), F(inp), F(w), F(b), N, C, eps);
}
static void cpu_layernorm_bwd(void *ctx, ah_dptr dinp, ah_dptr dw, ah_dptr db, ah_dptr dout, ah_dptr inp,
                              ah_dptr w, ah_dptr mean, ah_dptr rstd, int N, int C) {
    (void)ctx;
    ah__layernorm_bwd(F(dinp), F(dw), F(db), F(dout), F(inp), F(w), F(mean), F(rstd), N, C);
}
static void cpu_rmsnorm_fwd(void *ctx, ah_dptr out, ah_dptr rstd, ah_dptr inp, ah_dptr w, int N, int C,
                            float eps) {
    (void)ctx;
    ah__rmsnorm_fwd_eps(F(out), F(rstd), F(inp), F(w), N, C, eps);
}
static void cpu_rmsnorm_bwd(void *ctx, ah_dptr dinp, ah_dptr dw, ah_dptr dout, ah_dptr inp, ah_dptr w,
                            ah_dptr rstd, int N, int C) {
    (void)ctx;
    ah__rmsnorm_bwd(F(dinp), F(dw), F(dout), F(inp), F(w), F(rstd), N, C);
}
static void cpu_gelu_fwd(void *ctx, ah_dptr out, ah_dptr inp, size_t n) {
    (void)ctx;
    ah__gelu_fwd(F(out), F(inp), n);
}
static void cpu_gelu_bwd(void *ctx, ah_dptr dinp, ah_dptr dout, ah_dptr inp, size_t n) {
    (void)ctx;
    ah__gelu_bwd(F(dinp), F(dout), F(inp), n);
}
static void cpu_relu_fwd(void *ctx, ah_dptr out, ah_dptr inp, size_t n) {
    (void)ctx;
    ah__relu_fwd(F(out), F(inp), n);
}
static void cpu_relu_bwd(void *ctx, ah_dptr dinp, ah_dptr dout, ah_dptr inp, size_t n) {
    (void)ctx;
    ah__relu_bwd(F(dinp), F(dout), F(inp), n);
}
static void cpu_swiglu_fwd(void *ctx, ah_dptr out, ah_dptr inp, int N, int Fn) {
    (void)ctx;
    ah__swiglu_fwd(F(out), F(inp), N, Fn);
}
static void cpu_swiglu_bwd(void *ctx, ah_dptr dinp, ah_dptr dout, ah_dptr inp, int N, int Fn) {
    (void)ctx;
    ah__swiglu_bwd(F(dinp), F(dout), F(inp), N, Fn);
}
static void cpu_rope_fwd(void *ctx, ah_dptr x, int N, int T, int H, int D, float theta) {
    (void)ctx;
    ah__rope_fwd(F(x), N, T, H, D, theta);
}
static void cpu_rope_bwd(void *ctx, ah_dptr dx, int N, int T, int H, int D, float theta) {
    (void)ctx;
    ah__rope_bwd(F(dx), N, T, H, D, theta);
}
static size_t cpu_attention_saved(void *ctx, int T) {
    (void)ctx;
    return ah__attention_stats_per_head(T);
}
static void cpu_attention_fwd(void *ctx, ah_dptr out, ah_dptr saved, ah_dptr q, ah_dptr k, ah_dptr v, int B,
                              int T, int Hq, int Hkv, int D, int window) {
    (void)ctx;
    ah__attention_fwd_window(F(out), F(saved), F(q), F(k), F(v), B, T, Hq, Hkv, D, window);
}
static void cpu_attention_bwd(void *ctx, ah_dptr dq, ah_dptr dk, ah_dptr dv, ah_dptr dout, ah_dptr out,
                              ah_dptr saved, ah_dptr q, ah_dptr k, ah_dptr v, int B, int T, int Hq, int Hkv, int D,
                              int window) {
    (void)ctx;
    ah__attention_bwd(F(dq), F(dk), F(dv), F(dout), F(out), F(saved), F(q), F(k), F(v), B, T, Hq, Hkv, D, window);
}
static double cpu_crossentropy_fwd(void *ctx, ah_dptr losses, ah_dptr probs, ah_dptr logits, ah_dptr targets,
                                   int N, int V, int Vp) {
    (void)ctx;
    return ah__crossentropy_fwd(F(losses), F(probs), F(logits), I(targets), N, V, Vp);
}
static void cpu_crossentropy_bwd(void *ctx, ah_dptr dlogits, ah_dptr probs, ah_dptr targets, int N, int V,
                                 int Vp, float scale) {
    (void)ctx;
    ah__crossentropy_bwd(F(dlogits), F(probs), I(targets), N, V, Vp, scale);
}
static void cpu_add_bias_rows(void *ctx, ah_dptr x, ah_dptr b, int N, int C) {
    (void)ctx;
    ah__add_bias_rows(F(x), F(b), N, C);
}
static void cpu_bias_grad_acc(void *ctx, ah_dptr db, ah_dptr d, int N, int C) {
    (void)ctx;
    ah__bias_grad_acc(F(db), F(d), N, C);
}
static void cpu_add(void *ctx, ah_dptr y, ah_dptr x, size_t n) {
    (void)ctx;
    ah__gemm_weights_written(y.p, n * AH_DELEM);
    ah__add_inplace(F(y), F(x), n);
}
static void cpu_scale(void *ctx, ah_dptr y, float a, size_t n) {
    (void)ctx;
    ah__gemm_weights_written(y.p, n * AH_DELEM);
    ah__scale_inplace(F(y), a, n);
}
static double cpu_sumsq(void *ctx, ah_dptr x, size_t n) {
    (void)ctx;
    return ah__sumsq(F(x), n);
}
static void cpu_adamw(void *ctx, ah_dptr param, ah_dptr grad, ah_dptr m, ah_dptr v, size_t n, float lr, int t,
                      const ah_optim_config *c, int decay, float gscale) {
    (void)ctx;
    ah__gemm_weights_written(param.p, n * AH_DELEM);
    ah__adamw_update_scaled(F(param), F(grad), F(m), F(v), n, lr, t, c, decay, gscale);
}

static ah_matmul_precision cpu_precisions[2] = {AH_MATMUL_FP32, AH_MATMUL_BF16};

static const ah_backend cpu_backend = {
    .name = "cpu",
    .ctx = &cpu_precisions[AH_MATMUL_FP32],
    .alloc = cpu_alloc,
    .free = cpu_free,
    .zero = cpu_zero,
    .to_device = cpu_to_device,
    .to_host = cpu_to_host,
    .copy = cpu_copy,
    .sync = cpu_sync,
    .linear_fwd = cpu_linear_fwd,
    .linear_bwd = cpu_linear_bwd,
    .embedding_fwd = cpu_embedding_fwd,
    .embedding_bwd = cpu_embedding_bwd,
    .layernorm_fwd = cpu_layernorm_fwd,
    .layernorm_bwd = cpu_layernorm_bwd,
    .rmsnorm_fwd = cpu_rmsnorm_fwd,
    .rmsnorm_bwd = cpu_rmsnorm_bwd,
    .gelu_fwd = cpu_gelu_fwd,
    .gelu_bwd = cpu_gelu_bwd,
    .relu_fwd = cpu_relu_fwd,
    .relu_bwd = cpu_relu_bwd,
    .swiglu_fwd = cpu_swiglu_fwd,
    .swiglu_bwd = cpu_swiglu_bwd,
    .rope_fwd = cpu_rope_fwd,
    .rope_bwd = cpu_rope_bwd,
    .attention_saved = cpu_attention_saved,
    .attention_fwd = cpu_attention_fwd,
    .attention_bwd = cpu_attention_bwd,
    .crossentropy_fwd = cpu_crossentropy_fwd,
    .crossentropy_bwd = cpu_crossentropy_bwd,
    .add_bias_rows = cpu_add_bias_rows,
    .bias_grad_acc = cpu_bias_grad_acc,
    .add = cpu_add,
    .scale = cpu_scale,
    .sumsq = cpu_sumsq,
    .adamw = cpu_adamw,
};

/* the same table with the bf16 context */
static ah_backend cpu_backend_bf16;

const ah_backend *ah__backend_cpu(void) {
    return &cpu_backend;
}

const ah_backend *ah__backend_cpu_prec(ah_matmul_precision p) {
    if (p != AH_MATMUL_BF16)
        return &cpu_backend;
    if (cpu_backend_bf16.name == NULL) { /* (the engine sets up its backends from one thread) */
        cpu_backend_bf16 = cpu_backend;
        cpu_backend_bf16.ctx = &cpu_precisions[AH_MATMUL_BF16];
    }
    return &cpu_backend_bf16;
}
