/* The compute backend seam of the training engine: a table of function
 * pointers over opaque device buffers. model.c runs every layer through it;
 * backend_cpu.c implements it with the CPU kernels of kernels.c, and a CUDA
 * backend implements the same table in its own files (docs/engine.md,
 * "Backend seam").
 *
 * Buffers: an ah_dptr is the address of device memory holding 4-byte elements
 * (fp32 values, or int32 token ids). Its pointer type is incomplete, so host
 * code can neither dereference it nor do arithmetic on it by accident; only a
 * backend's own file turns it into something it reads. ah__dptr_at() offsets
 * it by elements, ah__dptr_transport() yields the address to hand to a
 * transport (MPI for the CPU backend, NCCL for CUDA).
 *
 * Ordering: every operation of a backend instance is issued on its one
 * ordered queue (a CUDA stream), in program order. to_host returns when the
 * data is in host memory; sync waits for every operation issued so far. Sync
 * before a transport touches a buffer (the CPU backend runs synchronously and
 * its sync returns at once). Kernels follow kernels.h: same arguments, same
 * math, with ah_dptr for every array. */
#ifndef AUTOHET_ENGINE_BACKEND_H
#define AUTOHET_ENGINE_BACKEND_H
#include <stddef.h>

#include "autohet/engine.h"
#include "engine/optim.h"

typedef struct ah_dmem ah_dmem; /* never defined: device memory is not host memory */
typedef struct {
    ah_dmem *p;
} ah_dptr;

/* Bytes of one buffer element (fp32 or int32). */
#define AH_DELEM 4

static inline ah_dptr ah__dptr_null(void) {
    return (ah_dptr){NULL};
}
static inline int ah__dptr_is_null(ah_dptr d) {
    return d.p == NULL;
}
/* d advanced by n elements (the address of element n of the buffer at d). */
static inline ah_dptr ah__dptr_at(ah_dptr d, size_t n) {
    return (ah_dptr){(ah_dmem *)(void *)((char *)(void *)d.p + n * AH_DELEM)};
}
/* The address of d for a transport (MPI, NCCL) that moves the buffer's bytes.
 * The caller never dereferences it: on a GPU backend it is device memory. */
static inline void *ah__dptr_transport(ah_dptr d) {
    return (void *)d.p;
}

typedef struct ah_backend ah_backend;
struct ah_backend {
    const char *name;
    void *ctx; /* the backend's own state (device, stream, library handles) */

    /* ---- memory: n counts elements of AH_DELEM bytes ---- */
    ah_dptr (*alloc)(void *ctx, size_t n); /* zero-filled; aborts when out of memory */
    void (*free)(void *ctx, ah_dptr d);    /* a null handle is ignored */
    void (*zero)(void *ctx, ah_dptr d, size_t n);
    void (*to_device)(void *ctx, ah_dptr dst, const void *src, size_t n);
    void (*to_host)(void *ctx, void *dst, ah_dptr src, size_t n);
    void (*copy)(void *ctx, ah_dptr dst, ah_dptr src, size_t n);
    void (*sync)(void *ctx);

    /* ---- kernels (kernels.h): a null handle where kernels.h allows NULL ---- */
    void (*linear_fwd)(void *ctx, ah_dptr out, ah_dptr inp, ah_dptr w, ah_dptr bias, int N, int K, int M);
    void (*linear_bwd)(void *ctx, ah_dptr dinp, ah_dptr dw, ah_dptr dbias, ah_dptr dout, ah_dptr inp,
                       ah_dptr w, int N, int K, int M);
    void (*embedding_fwd)(void *ctx, ah_dptr out, ah_dptr tok, ah_dptr wte, ah_dptr wpe, int N, int T, int C);
    void (*embedding_bwd)(void *ctx, ah_dptr dwte, ah_dptr dwpe, ah_dptr dout, ah_dptr tok, int N, int T,
                          int C);
    /* eps: the model's norm epsilon (the backwards read the saved rstd) */
    void (*layernorm_fwd)(void *ctx, ah_dptr out, ah_dptr mean, ah_dptr rstd, ah_dptr inp, ah_dptr w,
                          ah_dptr b, int N, int C, float eps);
    void (*layernorm_bwd)(void *ctx, ah_dptr dinp, ah_dptr dw, ah_dptr db, ah_dptr dout, ah_dptr inp,
                          ah_dptr w, ah_dptr mean, ah_dptr rstd, int N, int C);
    void (*rmsnorm_fwd)(void *ctx, ah_dptr out, ah_dptr rstd, ah_dptr inp, ah_dptr w, int N, int C,
                        float eps);
    void (*rmsnorm_bwd)(void *ctx, ah_dptr dinp, ah_dptr dw, ah_dptr dout, ah_dptr inp, ah_dptr w,
                        ah_dptr rstd, int N, int C);
    void (*gelu_fwd)(void *ctx, ah_dptr out, ah_dptr inp, size_t n);
    void (*gelu_bwd)(void *ctx, ah_dptr dinp, ah_dptr dout, ah_dptr inp, size_t n);
    void (*relu_fwd)(void *ctx, ah_dptr out, ah_dptr inp, size_t n);
    void (*relu_bwd)(void *ctx, ah_dptr dinp, ah_dptr dout, ah_dptr inp, size_t n);
    void (*swiglu_fwd)(void *ctx, ah_dptr out, ah_dptr inp, int N, int F);
    void (*swiglu_bwd)(void *ctx, ah_dptr dinp, ah_dptr dout, ah_dptr inp, int N, int F);
    void (*rope_fwd)(void *ctx, ah_dptr x, int N, int T, int H, int D, float theta);
    void (*rope_bwd)(void *ctx, ah_dptr dx, int N, int T, int H, int D, float theta);
    /* window > 0: query t sees keys (t - window, t] (local layers); 0: all earlier keys.
     * saved: what the forward keeps for the backward, attention_saved(T) elements per (batch, query
     * head), the backend's own layout (CPU: per-row softmax statistics; CUDA: the probabilities);
     * the backward gets the forward's out, saved and window. */
    size_t (*attention_saved)(void *ctx, int T);
    void (*attention_fwd)(void *ctx, ah_dptr out, ah_dptr saved, ah_dptr q, ah_dptr k, ah_dptr v, int B, int T,
                          int Hq, int Hkv, int D, int window);
    void (*attention_bwd)(void *ctx, ah_dptr dq, ah_dptr dk, ah_dptr dv, ah_dptr dout, ah_dptr out,
                          ah_dptr saved, ah_dptr q, ah_dptr k, ah_dptr v, int B, int T, int Hq, int Hkv, int D,
                          int window);
    /* returns the summed loss: a synchronising read on an asynchronous backend */
    /* rows of Vp >= V logits, the loss over the first V (the padding is masked out) */
    double (*crossentropy_fwd)(void *ctx, ah_dptr losses, ah_dptr probs, ah_dptr logits, ah_dptr targets,
                               int N, int V, int Vp);
    void (*crossentropy_bwd)(void *ctx, ah_dptr dlogits, ah_dptr probs, ah_dptr targets, int N, int V, int Vp,
                             float scale);
    void (*add_bias_rows)(void *ctx, ah_dptr x, ah_dptr b, int N, int C);
    void (*bias_grad_acc)(void *ctx, ah_dptr db, ah_dptr d, int N, int C);

    /* ---- elementwise, reductions, optimizer ---- */
    void (*add)(void *ctx, ah_dptr y, ah_dptr x, size_t n); /* y += x (the tied-gradient sum) */
    void (*scale)(void *ctx, ah_dptr y, float a, size_t n); /* y *= a (clipping) */
    double (*sumsq)(void *ctx, ah_dptr x, size_t n);       /* as ah__sumsq: synchronising */
    void (*adamw)(void *ctx, ah_dptr param, ah_dptr grad, ah_dptr m, ah_dptr v, size_t n, float lr, int t,
                  const ah_optim_config *c, int decay, float gscale); /* as ah__adamw_update_scaled:
                                                                        grad * gscale, grad unchanged */
};

/* The backend registered under name ("cpu"; "cuda" where built and a device
 * is visible: src/engine/cuda/backend_cuda.c), or NULL. */
const ah_backend *ah__backend_get(const char *name);
/* The engine's backend: $AUTOHET_BACKEND if set, else "cpu", with the
 * linear layers' products in precision prec (its context); NULL (with a
 * one-line reason in err) for an unknown name or a precision it lacks (the
 * CUDA backend computes in fp32). */
const ah_backend *ah__backend_default(ah_matmul_precision prec, char *err, size_t errlen);
/* ah_backend_check: autohet/engine.h */
/* The CPU backend (backend_cpu.c): fp32, and with its context's precision p. */
const ah_backend *ah__backend_cpu(void);
const ah_backend *ah__backend_cpu_prec(ah_matmul_precision p);

/* Device memory the engine holds through ah__be_alloc / ah__be_free, counted
 * in backend.c whatever the backend (one process, one engine): the bytes live
 * now and their high-water mark since the last ah__be_mem_reset_peak. This is
 * what the cost model's stage memory (weights, gradients, optimizer state,
 * in-flight activations) predicts (docs/engine.md, "Memory"). */
typedef struct {
    double live_bytes, peak_bytes;
} ah_be_mem;
ah_be_mem ah__be_mem_stats(void);
void ah__be_mem_reset_peak(void);
void ah__be_mem_track_alloc(ah_dptr d, size_t bytes);
void ah__be_mem_track_free(ah_dptr d);

/* Short forms of the memory operations. */
static inline ah_dptr ah__be_alloc(const ah_backend *be, size_t n) {
    ah_dptr d = be->alloc(be->ctx, n);
    ah__be_mem_track_alloc(d, n * AH_DELEM);
    return d;
}
static inline void ah__be_free(const ah_backend *be, ah_dptr d) {
    ah__be_mem_track_free(d);
    be->free(be->ctx, d);
}
static inline void ah__be_zero(const ah_backend *be, ah_dptr d, size_t n) {
    be->zero(be->ctx, d, n);
}
static inline void ah__be_to_device(const ah_backend *be, ah_dptr dst, const void *src, size_t n) {
    be->to_device(be->ctx, dst, src, n);
}
static inline void ah__be_to_host(const ah_backend *be, void *dst, ah_dptr src, size_t n) {
    be->to_host(be->ctx, dst, src, n);
}
static inline void ah__be_copy(const ah_backend *be, ah_dptr dst, ah_dptr src, size_t n) {
    be->copy(be->ctx, dst, src, n);
}
static inline void ah__be_sync(const ah_backend *be) {
    be->sync(be->ctx);
}

#endif
