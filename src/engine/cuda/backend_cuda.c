/* The CUDA backend: the ah_backend table of backend.h over device memory,
 * matmuls through cuBLAS (fp32; TF32 tensor cores with AUTOHET_CUDA_MATH=tf32),
 * the other ops through the kernels of kernels_cuda.cu. Everything runs on the
 * legacy default stream of the device $AUTOHET_CUDA_DEVICE (default 0), so the
 * backend's one ordered queue is that stream. Reductions the engine reads on
 * the host (the loss sum, the gradient norm) finish on the host in the CPU
 * backend's order. A CUDA or cuBLAS failure mid-run is a fault, not bad input:
 * it prints the call and aborts. AUTOHET_CUDA_SYNC_CHECK=1 synchronises after
 * every operation, so that an asynchronous fault names the op that caused it.
 * This is the one file where an ah_dptr becomes a device float pointer. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/cuda/cuda_gemm.h"
#include "engine/cuda/kernels_cuda.h"
#include "engine/optim.h"

typedef struct {
    int device;
    cublasHandle_t blas;
    int sync_check;
    float *scratch; /* attention probability gradients, overlapping copies */
    size_t scratch_n;
    double *part; /* sum-of-squares partials */
    size_t part_n;
    float *host; /* host staging of per-row losses */
    size_t host_n;
} cuda_ctx;

static void die(const char *what, const char *why, const char *op) {
    fprintf(stderr, "autohet cuda backend: %s failed in %s: %s\n", what, op, why);
    abort();
}
static void ck(cudaError_t e, const char *what, const char *op) {
    if (e != cudaSuccess)
        die(what, cudaGetErrorString(e), op);
}
static void ckb(cublasStatus_t s, const char *op) {
    if (s != CUBLAS_STATUS_SUCCESS)
        die("cublas", cublasGetStatusString(s), op);
}
/* a kernel launcher's result, and with AUTOHET_CUDA_SYNC_CHECK the op's completion */
static void done(cuda_ctx *c, int launch, const char *op) {
    ck((cudaError_t)launch, "kernel launch", op);
    if (c->sync_check)
        ck(cudaDeviceSynchronize(), "cudaDeviceSynchronize", op);
}

static float *F(ah_dptr d) {
    return (float *)(void *)d.p;
}
static int *I(ah_dptr d) {
    return (int *)(void *)d.p;
}

static float *scratch(cuda_ctx *c, size_t n) {
    if (n > c->scratch_n) {
        ck(cudaFree(c->scratch), "cudaFree", "scratch");
        ck(cudaMalloc((void **)&c->scratch, n * sizeof(float)), "cudaMalloc", "scratch");
        c->scratch_n = n;
    }
    return c->scratch;
}

/* ------------------------------------------------------------ memory */

static ah_dptr cu_alloc(void *ctx, size_t n) {
    (void)ctx;
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, (n ? n : 1) * AH_DELEM);
    if (e != cudaSuccess) {
        fprintf(stderr, "autohet cuda backend: out of device memory (%zu bytes): %s\n", n * AH_DELEM,
                cudaGetErrorString(e));
        abort();
    }
    ck(cudaMemsetAsync(p, 0, (n ? n : 1) * AH_DELEM, 0), "cudaMemsetAsync", "alloc");
    return (ah_dptr){(ah_dmem *)p};
}
static void cu_free(void *ctx, ah_dptr d) {
    (void)ctx;
    if (!ah__dptr_is_null(d))
        ck(cudaFree(d.p), "cudaFree", "free");
}
static void cu_zero(void *ctx, ah_dptr d, size_t n) {
    if (n)
        ck(cudaMemsetAsync(d.p, 0, n * AH_DELEM, 0), "cudaMemsetAsync", "zero");
    done(ctx, 0, "zero");
}
static void cu_to_device(void *ctx, ah_dptr dst, const void *src, size_t n) {
    (void)ctx;
    if (n)
        ck(cudaMemcpy(dst.p, src, n * AH_DELEM, cudaMemcpyHostToDevice), "cudaMemcpy", "to_device");
}
static void cu_to_host(void *ctx, void *dst, ah_dptr src, size_t n) {
    (void)ctx;
    if (n)
        ck(cudaMemcpy(dst, src.p, n * AH_DELEM, cudaMemcpyDeviceToHost), "cudaMemcpy", "to_host");
}
static void cu_copy(void *ctx, ah_dptr dst, ah_dptr src, size_t n) {
    cuda_ctx *c = ctx;
    uintptr_t d = (uintptr_t)dst.p, s = (uintptr_t)src.p, bytes = n * AH_DELEM;
    if (n == 0 || d == s)
        return;
    if (d < s + bytes && s < d + bytes) { /* memmove semantics: through the scratch */
        float *t = scratch(c, n);
        ck(cudaMemcpyAsync(t, src.p, bytes, cudaMemcpyDeviceToDevice, 0), "cudaMemcpyAsync", "copy");
        ck(cudaMemcpyAsync(dst.p, t, bytes, cudaMemcpyDeviceToDevice, 0), "cudaMemcpyAsync", "copy");
    } else {
        ck(cudaMemcpyAsync(dst.p, src.p, bytes, cudaMemcpyDeviceToDevice, 0), "cudaMemcpyAsync", "copy");
    }
    done(c, 0, "copy");
}
static void cu_sync(void *ctx) {
    (void)ctx;
    ck(cudaDeviceSynchronize(), "cudaDeviceSynchronize", "sync");
}

/* ------------------------------------------------------------ GEMMs */

/* Row-major C = alpha op(A) op(B) + beta C, `batch` times with element strides sa, sb, sc. */
static void gemm(cuda_ctx *c, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                 long long sa, const float *B, int ldb, long long sb, float beta, float *C, int ldc, long long sc,
                 int batch, const char *op) {
    ah_cu_colmajor_gemm g = ah__cu_gemm_to_colmajor(
        (ah_cu_rowmajor_gemm){.ta = ta, .tb = tb, .M = M, .N = N, .K = K, .lda = lda, .ldb = ldb, .ldc = ldc});
    cublasOperation_t o1 = g.op_first ? CUBLAS_OP_T : CUBLAS_OP_N, o2 = g.op_second ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (batch == 1)
        ckb(cublasSgemm(c->blas, o1, o2, g.m, g.n, g.k, &alpha, B, g.ld_first, A, g.ld_second, &beta, C, g.ldc),
            op);
    else
        ckb(cublasSgemmStridedBatched(c->blas, o1, o2, g.m, g.n, g.k, &alpha, B, g.ld_first, sb, A, g.ld_second,
                                      sa, &beta, C, g.ldc, sc, batch),
            op);
    done(c, 0, op);
}

static void cu_linear_fwd(void *ctx, ah_dptr out, ah_dptr inp, ah_dptr w, ah_dptr bias, int N, int K, int M) {
    cuda_ctx *c = ctx;
    if (N <= 0 || M <= 0)
        return;
    if (!ah__dptr_is_null(bias))
        done(c, ah__cu_fill_rows(F(out), F(bias), N, M), "linear_fwd bias");
    if (K <= 0) {
        if (ah__dptr_is_null(bias))
            cu_zero(ctx, out, (size_t)N * M);
        return;
    }
    /* out[N,M] = inp[N,K] w[M,K]^T (+ out) */
    gemm(c, 0, 1, N, M, K, 1.0f, F(inp), K, 0, F(w), K, 0, ah__dptr_is_null(bias) ? 0.0f : 1.0f, F(out), M, 0, 1,
         "linear_fwd");
}
static void cu_linear_bwd(void *ctx, ah_dptr dinp, ah_dptr dw, ah_dptr dbias, ah_dptr dout, ah_dptr inp,
                          ah_dptr w, int N, int K, int M) {
    cuda_ctx *c = ctx;
    if (N <= 0 || M <= 0)
        return;
    if (K > 0 && !ah__dptr_is_null(dinp)) /* dinp[N,K] += dout[N,M] w[M,K] */
        gemm(c, 0, 0, N, K, M, 1.0f, F(dout), M, 0, F(w), K, 0, 1.0f, F(dinp), K, 0, 1, "linear_bwd dinp");
    if (K > 0 && !ah__dptr_is_null(dw)) /* dw[M,K] += dout^T inp */
        gemm(c, 1, 0, M, K, N, 1.0f, F(dout), M, 0, F(inp), K, 0, 1.0f, F(dw), K, 0, 1, "linear_bwd dw");
    if (!ah__dptr_is_null(dbias))
        done(c, ah__cu_colsum_acc(F(dbias), F(dout), N, M), "linear_bwd dbias");
}

/* ------------------------------------------------------------ attention */

/* This backend keeps the T x T probabilities for the backward (the CPU
 * backend keeps per-row statistics: backend.h, attention_saved). */
static size_t cu_attention_saved(void *ctx, int T) {
    (void)ctx;
    return T > 0 ? (size_t)T * (size_t)T : 0;
}

/* Per batch b and position g in a query group, one strided-batched product
 * over the Hkv KV heads: query head h = kh*G + g is G*D floats after the
 * previous one in q, its probabilities G*T*T floats after in att. */
static void cu_attention_fwd(void *ctx, ah_dptr out, ah_dptr att, ah_dptr q, ah_dptr k, ah_dptr v, int B, int T,
                             int Hq, int Hkv, int D, int window) {
    cuda_ctx *c = ctx;
    if (B <= 0 || T <= 0 || Hq <= 0 || Hkv <= 0 || D <= 0)
        return;
    int G = Hq / Hkv, ldq = Hq * D, ldk = Hkv * D;
    long long sq = (long long)G * D, sk = D, sa = (long long)G * T * T;
    float scale = 1.0f / sqrtf((float)D);
    for (int b = 0; b < B; b++)
        for (int g = 0; g < G; g++) /* S = scale Q K^T */
            gemm(c, 0, 1, T, T, D, scale, F(q) + (size_t)b * T * ldq + (size_t)g * D, ldq, sq,
                 F(k) + (size_t)b * T * ldk, ldk, sk, 0.0f, F(att) + ((size_t)b * Hq + g) * T * T, T, sa, Hkv,
                 "attention_fwd scores");
    done(c, ah__cu_causal_softmax(F(att), B * Hq * T, T, window), "attention_fwd softmax");
    for (int b = 0; b < B; b++)
        for (int g = 0; g < G; g++) /* O = P V */
            gemm(c, 0, 0, T, D, T, 1.0f, F(att) + ((size_t)b * Hq + g) * T * T, T, sa, F(v) + (size_t)b * T * ldk,
                 ldk, sk, 0.0f, F(out) + (size_t)b * T * ldq + (size_t)g * D, ldq, sq, Hkv, "attention_fwd PV");
}

/* out and window are not needed: the saved probabilities are 0 where masked. */
static void cu_attention_bwd(void *ctx, ah_dptr dq, ah_dptr dk, ah_dptr dv, ah_dptr dout, ah_dptr out, ah_dptr att,
                             ah_dptr q, ah_dptr k, ah_dptr v, int B, int T, int Hq, int Hkv, int D, int window) {
    cuda_ctx *c = ctx;
    (void)out;
    (void)window;
    if (B <= 0 || T <= 0 || Hq <= 0 || Hkv <= 0 || D <= 0)
        return;
    int G = Hq / Hkv, ldq = Hq * D, ldk = Hkv * D;
    long long sq = (long long)G * D, sk = D, sa = (long long)G * T * T, sd = (long long)T * T;
    float scale = 1.0f / sqrtf((float)D);
    float *ds = scratch(c, ah__cu_attention_scratch(T, Hkv));
    for (int b = 0; b < B; b++) {
        for (int g = 0; g < G; g++) { /* the query heads of a group in order, as kernels.c */
            const float *a = F(att) + ((size_t)b * Hq + g) * T * T;
            const float *go = F(dout) + (size_t)b * T * ldq + (size_t)g * D;
            const float *qb = F(q) + (size_t)b * T * ldq + (size_t)g * D;
            const float *kb = F(k) + (size_t)b * T * ldk, *vb = F(v) + (size_t)b * T * ldk;
            if (!ah__dptr_is_null(dv)) /* dV += P^T dO */
                gemm(c, 1, 0, T, D, T, 1.0f, a, T, sa, go, ldq, sq, 1.0f, F(dv) + (size_t)b * T * ldk, ldk, sk, Hkv,
                     "attention_bwd dv");
            /* dP = dO V^T, then dS = P (dP - rowsum(P dP)) * scale */
            gemm(c, 0, 1, T, T, D, 1.0f, go, ldq, sq, vb, ldk, sk, 0.0f, ds, T, sd, Hkv, "attention_bwd dp");
            done(c, ah__cu_softmax_bwd(ds, a, Hkv, T, (size_t)sa, scale), "attention_bwd softmax");
            if (!ah__dptr_is_null(dq)) /* dQ += dS K */
                gemm(c, 0, 0, T, D, T, 1.0f, ds, T, sd, kb, ldk, sk, 1.0f,
                     F(dq) + (size_t)b * T * ldq + (size_t)g * D, ldq, sq, Hkv, "attention_bwd dq");
            if (!ah__dptr_is_null(dk)) /* dK += dS^T Q */
                gemm(c, 1, 0, T, D, T, 1.0f, ds, T, sd, qb, ldq, sq, 1.0f, F(dk) + (size_t)b * T * ldk, ldk, sk,
                     Hkv, "attention_bwd dk");
        }
    }
}

/* ------------------------------------------------------------ the other kernels */

static void cu_embedding_fwd(void *ctx, ah_dptr out, ah_dptr tok, ah_dptr wte, ah_dptr wpe, int N, int T, int C) {
    done(ctx, ah__cu_embedding_fwd(F(out), I(tok), F(wte), F(wpe), N, T, C), "embedding_fwd");
}
static void cu_embedding_bwd(void *ctx, ah_dptr dwte, ah_dptr dwpe, ah_dptr dout, ah_dptr tok, int N, int T,
                             int C) {
    done(ctx, ah__cu_embedding_bwd(F(dwte), F(dwpe), F(dout), I(tok), N, T, C), "embedding_bwd");
}
static void cu_layernorm_fwd(void *ctx, ah_dptr out, ah_dptr mean, ah_dptr rstd, ah_dptr inp, ah_dptr w,
                             ah_dptr b, int N, int C, float eps) {
    done(ctx, ah__cu_layernorm_fwd(F(out), F(mean), F(rstd), F(inp), F(w), F(b), N, C, eps), "layernorm_fwd");
}
static void cu_layernorm_bwd(void *ctx, ah_dptr dinp, ah_dptr dw, ah_dptr db, ah_dptr dout, ah_dptr inp,
                             ah_dptr w, ah_dptr mean, ah_dptr rstd, int N, int C) {
    done(ctx, ah__cu_layernorm_bwd(F(dinp), F(dw), F(db), F(dout), F(inp), F(w), F(mean), F(rstd), N, C),
         "layernorm_bwd");
}
static void cu_rmsnorm_fwd(void *ctx, ah_dptr out, ah_dptr rstd, ah_dptr inp, ah_dptr w, int N, int C,
                           float eps) {
    done(ctx, ah__cu_rmsnorm_fwd(F(out), F(rstd), F(inp), F(w), N, C, eps), "rmsnorm_fwd");
}
static void cu_rmsnorm_bwd(void *ctx, ah_dptr dinp, ah_dptr dw, ah_dptr dout, ah_dptr inp, ah_dptr w,
                           ah_dptr rstd, int N, int C) {
    done(ctx, ah__cu_rmsnorm_bwd(F(dinp), F(dw), F(dout), F(inp), F(w), F(rstd), N, C), "rmsnorm_bwd");
}
static void cu_gelu_fwd(void *ctx, ah_dptr out, ah_dptr inp, size_t n) {
    done(ctx, ah__cu_gelu_fwd(F(out), F(inp), n), "gelu_fwd");
}
static void cu_gelu_bwd(void *ctx, ah_dptr dinp, ah_dptr dout, ah_dptr inp, size_t n) {
    done(ctx, ah__cu_gelu_bwd(F(dinp), F(dout), F(inp), n), "gelu_bwd");
}
static void cu_relu_fwd(void *ctx, ah_dptr out, ah_dptr inp, size_t n) {
    done(ctx, ah__cu_relu_fwd(F(out), F(inp), n), "relu_fwd");
}
static void cu_relu_bwd(void *ctx, ah_dptr dinp, ah_dptr dout, ah_dptr inp, size_t n) {
    done(ctx, ah__cu_relu_bwd(F(dinp), F(dout), F(inp), n), "relu_bwd");
}
static void cu_swiglu_fwd(void *ctx, ah_dptr out, ah_dptr inp, int N, int Fn) {
    done(ctx, ah__cu_swiglu_fwd(F(out), F(inp), N, Fn), "swiglu_fwd");
}
static void cu_swiglu_bwd(void *ctx, ah_dptr dinp, ah_dptr dout, ah_dptr inp, int N, int Fn) {
    done(ctx, ah__cu_swiglu_bwd(F(dinp), F(dout), F(inp), N, Fn), "swiglu_bwd");
}
static void cu_rope_fwd(void *ctx, ah_dptr x, int N, int T, int H, int D, float theta) {
    done(ctx, ah__cu_rope(F(x), N, T, H, D, theta, 1), "rope_fwd");
}
static void cu_rope_bwd(void *ctx, ah_dptr dx, int N, int T, int H, int D, float theta) {
    done(ctx, ah__cu_rope(F(dx), N, T, H, D, theta, -1), "rope_bwd");
}
static double cu_crossentropy_fwd(void *ctx, ah_dptr losses, ah_dptr probs, ah_dptr logits, ah_dptr targets,
                                  int N, int V, int Vp) {
    cuda_ctx *c = ctx;
    done(c, ah__cu_crossentropy_fwd(F(losses), F(probs), F(logits), I(targets), N, V, Vp), "crossentropy_fwd");
    if (N <= 0)
        return 0.0;
    if ((size_t)N > c->host_n) {
        free(c->host);
        c->host = malloc((size_t)N * sizeof(float));
        if (c->host == NULL)
            die("malloc", "out of memory", "crossentropy_fwd");
        c->host_n = (size_t)N;
    }
    cu_to_host(ctx, c->host, losses, (size_t)N);
    double total = 0.0; /* in row order, as the CPU backend */
    for (int n = 0; n < N; n++)
        total += c->host[n];
    return total;
}
static void cu_crossentropy_bwd(void *ctx, ah_dptr dlogits, ah_dptr probs, ah_dptr targets, int N, int V, int Vp,
                                float scale) {
    done(ctx, ah__cu_crossentropy_bwd(F(dlogits), F(probs), I(targets), N, V, Vp, scale), "crossentropy_bwd");
}
static void cu_add_bias_rows(void *ctx, ah_dptr x, ah_dptr b, int N, int C) {
    done(ctx, ah__cu_add_bias_rows(F(x), F(b), N, C), "add_bias_rows");
}
static void cu_bias_grad_acc(void *ctx, ah_dptr db, ah_dptr d, int N, int C) {
    done(ctx, ah__cu_colsum_acc(F(db), F(d), N, C), "bias_grad_acc");
}
static void cu_add(void *ctx, ah_dptr y, ah_dptr x, size_t n) {
    done(ctx, ah__cu_add(F(y), F(x), n), "add");
}
static void cu_scale(void *ctx, ah_dptr y, float a, size_t n) {
    done(ctx, ah__cu_scale(F(y), a, n), "scale");
}
/* block partials on the device, summed here in block order (optim.c's order) */
static double cu_sumsq(void *ctx, ah_dptr x, size_t n) {
    cuda_ctx *c = ctx;
    if (n == 0)
        return 0.0;
    size_t nb = (n + AH_CU_SUMSQ_BLOCK - 1) / AH_CU_SUMSQ_BLOCK;
    if (nb > c->part_n) {
        ck(cudaFree(c->part), "cudaFree", "sumsq");
        ck(cudaMalloc((void **)&c->part, nb * sizeof(double)), "cudaMalloc", "sumsq");
        c->part_n = nb;
    }
    done(c, ah__cu_sumsq_blocks(c->part, F(x), n), "sumsq");
    double *h = malloc(nb * sizeof *h);
    if (h == NULL)
        die("malloc", "out of memory", "sumsq");
    ck(cudaMemcpy(h, c->part, nb * sizeof(double), cudaMemcpyDeviceToHost), "cudaMemcpy", "sumsq");
    double s = 0.0;
    for (size_t b = 0; b < nb; b++)
        s += h[b];
    free(h);
    return s;
}
/* the constants as optim.c's ah__adamw_update computes them */
static void cu_adamw(void *ctx, ah_dptr param, ah_dptr grad, ah_dptr m, ah_dptr v, size_t n, float lr, int t,
                     const ah_optim_config *oc, int decay, float gscale) {
    if (t < 1)
        t = 1;
    const double bc1 = 1.0 - pow((double)oc->beta1, (double)t);
    const double bc2 = 1.0 - pow((double)oc->beta2, (double)t);
    ah_cu_adamw_consts k = {
        .b1 = oc->beta1,
        .b2 = oc->beta2,
        .eps = oc->eps,
        .step_size = (float)((double)lr / bc1),
        .bc2_sqrt = (float)sqrt(bc2),
        .shrink = decay ? (float)(1.0 - (double)lr * (double)oc->weight_decay) : 1.0f,
        .gscale = gscale,
    };
    done(ctx, ah__cu_adamw(F(param), F(grad), F(m), F(v), n, k), "adamw");
}

/* ------------------------------------------------------------ the table */

static cuda_ctx the_ctx;
static ah_backend cuda_backend = {
    .name = "cuda",
    .ctx = &the_ctx,
    .alloc = cu_alloc,
    .free = cu_free,
    .zero = cu_zero,
    .to_device = cu_to_device,
    .to_host = cu_to_host,
    .copy = cu_copy,
    .sync = cu_sync,
    .linear_fwd = cu_linear_fwd,
    .linear_bwd = cu_linear_bwd,
    .embedding_fwd = cu_embedding_fwd,
    .embedding_bwd = cu_embedding_bwd,
    .layernorm_fwd = cu_layernorm_fwd,
    .layernorm_bwd = cu_layernorm_bwd,
    .rmsnorm_fwd = cu_rmsnorm_fwd,
    .rmsnorm_bwd = cu_rmsnorm_bwd,
    .gelu_fwd = cu_gelu_fwd,
    .gelu_bwd = cu_gelu_bwd,
    .relu_fwd = cu_relu_fwd,
    .relu_bwd = cu_relu_bwd,
    .swiglu_fwd = cu_swiglu_fwd,
    .swiglu_bwd = cu_swiglu_bwd,
    .rope_fwd = cu_rope_fwd,
    .rope_bwd = cu_rope_bwd,
    .attention_saved = cu_attention_saved,
    .attention_fwd = cu_attention_fwd,
    .attention_bwd = cu_attention_bwd,
    .crossentropy_fwd = cu_crossentropy_fwd,
    .crossentropy_bwd = cu_crossentropy_bwd,
    .add_bias_rows = cu_add_bias_rows,
    .bias_grad_acc = cu_bias_grad_acc,
    .add = cu_add,
    .scale = cu_scale,
    .sumsq = cu_sumsq,
    .adamw = cu_adamw,
};

static int init_state; /* 0 not tried, 1 ready, -1 no device */
static char init_why[256];

static int cuda_init(void) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        snprintf(init_why, sizeof init_why, "%s", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return -1;
    }
    const char *dev = getenv("AUTOHET_CUDA_DEVICE");
    the_ctx.device = dev && *dev ? atoi(dev) : 0;
    if (the_ctx.device < 0 || the_ctx.device >= count) {
        snprintf(init_why, sizeof init_why, "AUTOHET_CUDA_DEVICE=%d: %d device%s visible", the_ctx.device, count,
                 count == 1 ? "" : "s");
        return -1;
    }
    if ((e = cudaSetDevice(the_ctx.device)) != cudaSuccess) {
        snprintf(init_why, sizeof init_why, "cudaSetDevice(%d): %s", the_ctx.device, cudaGetErrorString(e));
        return -1;
    }
    cublasStatus_t s = cublasCreate(&the_ctx.blas);
    if (s != CUBLAS_STATUS_SUCCESS) {
        snprintf(init_why, sizeof init_why, "cublasCreate: %s", cublasGetStatusString(s));
        return -1;
    }
    const char *math = getenv("AUTOHET_CUDA_MATH");
    int tf32 = math && !strcmp(math, "tf32");
    /* the default math mode is plain fp32 (no TF32): the equivalence tests' mode */
    ckb(cublasSetMathMode(the_ctx.blas, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH), "init");
    const char *sc = getenv("AUTOHET_CUDA_SYNC_CHECK");
    the_ctx.sync_check = sc && *sc && strcmp(sc, "0");
    return 1;
}

const ah_backend *ah__backend_cuda(void) {
    if (init_state == 0)
        init_state = cuda_init();
    return init_state > 0 ? &cuda_backend : NULL;
}

const char *ah__backend_cuda_why(void) {
    return init_why;
}
