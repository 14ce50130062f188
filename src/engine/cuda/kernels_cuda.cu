/* CUDA kernels of the CUDA backend (see kernels_cuda.h): simple, one thread
 * per output element or one block per row, written to equal kernels.c to
 * rounding rather than to be fast. Compiled with --fmad=false so that a*b+c
 * rounds as the CPU build (no FMA) does. Sums over rows are done by one
 * thread per column, rows in order, in double, as kernels.c's colsum_acc. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "engine/cuda/kernels_cuda.h"

#define THREADS 256 /* block size of every kernel; block reductions assume a power of two */

static unsigned blocks_for(size_t n) {
    size_t g = (n + THREADS - 1) / THREADS;
    if (g < 1)
        g = 1;
    if (g > 1048576) /* grid-stride loops cover the rest */
        g = 1048576;
    return (unsigned)g;
}

static int launched(void) {
    return (int)cudaGetLastError();
}

#define GRID_STRIDE(i, n) for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); \
                               i += (size_t)gridDim.x * blockDim.x)

/* Sum of v over the block (THREADS threads); every thread gets the result. */
__device__ double block_sum(double v, double *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s)
            sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

__device__ float block_max(float v, float *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s)
            sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]);
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}

/* The block's softmax of in[first, valid) into out[first, valid) as
 * kernels.c does it (float max, double sum of expf, one float reciprocal),
 * zeros in the rest of out[0, total); returns the double sum and the max in *mx. */
__device__ double softmax_row(const float *in, float *out, int first, int valid, int total, float *mx_out,
                              double *sh, float *shf) {
    float mx = -INFINITY;
    for (int j = first + threadIdx.x; j < valid; j += THREADS)
        mx = fmaxf(mx, in[j]);
    mx = block_max(mx, shf);
    double sum = 0.0;
    for (int j = first + threadIdx.x; j < valid; j += THREADS) {
        float e = expf(in[j] - mx);
        out[j] = e;
        sum += e;
    }
    sum = block_sum(sum, sh);
    float inv = (float)(1.0 / sum);
    for (int j = threadIdx.x; j < total; j += THREADS)
        out[j] = j >= first && j < valid ? out[j] * inv : 0.0f;
    *mx_out = mx;
    return sum;
}

/* ------------------------------------------------------------ linear helpers */

__global__ void k_fill_rows(float *out, const float *row, int N, int M) {
    GRID_STRIDE(i, (size_t)N * M) out[i] = row[i % M];
}

__global__ void k_colsum_acc(float *dst, const float *src, int N, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    double acc = 0.0;
    for (int n = 0; n < N; n++)
        acc += src[(size_t)n * C + c];
    dst[c] += (float)acc;
}

extern "C" int ah__cu_fill_rows(float *out, const float *row, int N, int M) {
    if (N <= 0 || M <= 0)
        return 0;
    k_fill_rows<<<blocks_for((size_t)N * M), THREADS>>>(out, row, N, M);
    return launched();
}

extern "C" int ah__cu_colsum_acc(float *dst, const float *src, int N, int C) {
    if (N <= 0 || C <= 0)
        return 0;
    k_colsum_acc<<<blocks_for((size_t)C), THREADS>>>(dst, src, N, C);
    return launched();
}

/* ------------------------------------------------------------ embedding */

__global__ void k_embedding_fwd(float *out, const int *tok, const float *wte, const float *wpe, int N, int T,
                                int C) {
    GRID_STRIDE(i, (size_t)N * C) {
        size_t n = i / C, c = i % C;
        float e = wte[(size_t)tok[n] * C + c];
        out[i] = wpe ? e + wpe[(n % T) * C + c] : e;
    }
}

/* one thread per column, tokens in order (repeated tokens hit one row) */
__global__ void k_embedding_bwd_wte(float *dwte, const float *dout, const int *tok, int N, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    for (int n = 0; n < N; n++)
        dwte[(size_t)tok[n] * C + c] += dout[(size_t)n * C + c];
}

__global__ void k_embedding_bwd_wpe(float *dwpe, const float *dout, int N, int T, int Tn, int C) {
    GRID_STRIDE(i, (size_t)Tn * C) {
        int t = (int)(i / C), c = (int)(i % C);
        float d = dwpe[i];
        for (int n = t; n < N; n += T)
            d += dout[(size_t)n * C + c];
        dwpe[i] = d;
    }
}

extern "C" int ah__cu_embedding_fwd(float *out, const int *tok, const float *wte, const float *wpe, int N, int T,
                                   int C) {
    if (N <= 0 || C <= 0)
        return 0;
    k_embedding_fwd<<<blocks_for((size_t)N * C), THREADS>>>(out, tok, wte, wpe, N, T, C);
    return launched();
}

extern "C" int ah__cu_embedding_bwd(float *dwte, float *dwpe, const float *dout, const int *tok, int N, int T,
                                   int C) {
    if (N <= 0 || C <= 0)
        return 0;
    if (dwte)
        k_embedding_bwd_wte<<<blocks_for((size_t)C), THREADS>>>(dwte, dout, tok, N, C);
    int Tn = T < N ? T : N;
    if (dwpe && Tn > 0)
        k_embedding_bwd_wpe<<<blocks_for((size_t)Tn * C), THREADS>>>(dwpe, dout, N, T, Tn, C);
    return launched();
}

/* ------------------------------------------------------------ normalisation */

__global__ void k_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                const float *b, int C, float eps) {
    __shared__ double sh[THREADS];
    size_t n = blockIdx.x;
    const float *x = inp + n * C;
    float *o = out + n * C;
    double s = 0.0;
    for (int c = threadIdx.x; c < C; c += THREADS)
        s += x[c];
    double m = block_sum(s, sh) / C;
    double v = 0.0;
    for (int c = threadIdx.x; c < C; c += THREADS) {
        double d = x[c] - m;
        v += d * d;
    }
    v = block_sum(v, sh) / C;
    float mf = (float)m, rs = (float)(1.0 / sqrt(v + eps));
    for (int c = threadIdx.x; c < C; c += THREADS)
        o[c] = (x[c] - mf) * rs * w[c] + b[c];
    if (threadIdx.x == 0) {
        mean[n] = mf;
        rstd[n] = rs;
    }
}

__global__ void k_layernorm_bwd_dx(float *dinp, const float *dout, const float *inp, const float *w,
                                   const float *mean, const float *rstd, int C) {
    __shared__ double sh[THREADS];
    size_t n = blockIdx.x;
    const float *x = inp + n * C, *g = dout + n * C;
    float *dx = dinp + n * C;
    float m = mean[n], rs = rstd[n];
    double sg = 0.0, sgx = 0.0;
    for (int c = threadIdx.x; c < C; c += THREADS) {
        float gw = g[c] * w[c];
        sg += gw;
        sgx += (double)gw * ((x[c] - m) * rs);
    }
    sg = block_sum(sg, sh);
    sgx = block_sum(sgx, sh);
    float mg = (float)(sg / C), mgx = (float)(sgx / C);
    for (int c = threadIdx.x; c < C; c += THREADS) {
        float xh = (x[c] - m) * rs;
        dx[c] += rs * (g[c] * w[c] - mg - xh * mgx);
    }
}

__global__ void k_layernorm_bwd_dwdb(float *dw, float *db, const float *dout, const float *inp,
                                     const float *mean, const float *rstd, int N, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    double aw = 0.0, ab = 0.0;
    for (int n = 0; n < N; n++) {
        float g = dout[(size_t)n * C + c], x = inp[(size_t)n * C + c];
        aw += (double)g * ((x - mean[n]) * rstd[n]);
        ab += g;
    }
    if (dw)
        dw[c] += (float)aw;
    if (db)
        db[c] += (float)ab;
}

extern "C" int ah__cu_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                   const float *b, int N, int C, float eps) {
    if (N <= 0 || C <= 0)
        return 0;
    k_layernorm_fwd<<<N, THREADS>>>(out, mean, rstd, inp, w, b, C, eps);
    return launched();
}

extern "C" int ah__cu_layernorm_bwd(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                   const float *w, const float *mean, const float *rstd, int N, int C) {
    if (N <= 0 || C <= 0)
        return 0;
    if (dinp)
        k_layernorm_bwd_dx<<<N, THREADS>>>(dinp, dout, inp, w, mean, rstd, C);
    if (dw || db)
        k_layernorm_bwd_dwdb<<<blocks_for((size_t)C), THREADS>>>(dw, db, dout, inp, mean, rstd, N, C);
    return launched();
}

__global__ void k_rmsnorm_fwd(float *out, float *rstd, const float *inp, const float *w, int C, float eps) {
    __shared__ double sh[THREADS];
    size_t n = blockIdx.x;
    const float *x = inp + n * C;
    float *o = out + n * C;
    double ss = 0.0;
    for (int c = threadIdx.x; c < C; c += THREADS)
        ss += (double)x[c] * x[c];
    ss = block_sum(ss, sh);
    float rs = (float)(1.0 / sqrt(ss / C + eps));
    for (int c = threadIdx.x; c < C; c += THREADS)
        o[c] = x[c] * rs * w[c];
    if (threadIdx.x == 0)
        rstd[n] = rs;
}

__global__ void k_rmsnorm_bwd_dx(float *dinp, const float *dout, const float *inp, const float *w,
                                 const float *rstd, int C) {
    __shared__ double sh[THREADS];
    size_t n = blockIdx.x;
    const float *x = inp + n * C, *g = dout + n * C;
    float *dx = dinp + n * C;
    float rs = rstd[n];
    double sgx = 0.0;
    for (int c = threadIdx.x; c < C; c += THREADS)
        sgx += (double)(g[c] * w[c]) * x[c];
    sgx = block_sum(sgx, sh);
    float k = (float)(sgx / C) * rs * rs;
    for (int c = threadIdx.x; c < C; c += THREADS)
        dx[c] += rs * (g[c] * w[c] - x[c] * k);
}

__global__ void k_rmsnorm_bwd_dw(float *dw, const float *dout, const float *inp, const float *rstd, int N,
                                 int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    double aw = 0.0;
    for (int n = 0; n < N; n++)
        aw += (double)dout[(size_t)n * C + c] * (inp[(size_t)n * C + c] * rstd[n]);
    dw[c] += (float)aw;
}

extern "C" int ah__cu_rmsnorm_fwd(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                                 float eps) {
    if (N <= 0 || C <= 0)
        return 0;
    k_rmsnorm_fwd<<<N, THREADS>>>(out, rstd, inp, w, C, eps);
    return launched();
}

extern "C" int ah__cu_rmsnorm_bwd(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                                 const float *rstd, int N, int C) {
    if (N <= 0 || C <= 0)
        return 0;
    if (dinp)
        k_rmsnorm_bwd_dx<<<N, THREADS>>>(dinp, dout, inp, w, rstd, C);
    if (dw)
        k_rmsnorm_bwd_dw<<<blocks_for((size_t)C), THREADS>>>(dw, dout, inp, rstd, N, C);
    return launched();
}

/* ------------------------------------------------------------ activations */

#define GELU_S 0.7978845608028654f
#define GELU_C 0.044715f

/* kernels.c's exp_poly, operation for operation */
__device__ float exp_poly(float x) {
    x = fminf(fmaxf(x, -87.0f), 88.0f);
    float t = x * 1.44269504088896341f;
    float fi = (float)(int32_t)(t + copysignf(0.5f, t));
    float f = x - fi * 0.693359375f + fi * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * f + 1.3981999507e-3f;
    p = p * f + 8.3334519073e-3f;
    p = p * f + 4.1665795894e-2f;
    p = p * f + 1.6666665459e-1f;
    p = p * f + 5.0000001201e-1f;
    float y = p * f * f + f + 1.0f;
    return y * __int_as_float(((int32_t)fi + 127) << 23);
}

__global__ void k_gelu_fwd(float *out, const float *inp, size_t n) {
    GRID_STRIDE(i, n) {
        float x = inp[i];
        float u = GELU_S * (x + GELU_C * x * x * x);
        out[i] = x / (1.0f + exp_poly(-2.0f * u));
    }
}

__global__ void k_gelu_bwd(float *dinp, const float *dout, const float *inp, size_t n) {
    GRID_STRIDE(i, n) {
        float x = inp[i];
        float xc = fminf(fmaxf(x, -10.0f), 10.0f);
        float u = GELU_S * (xc + GELU_C * xc * xc * xc);
        float sg = 1.0f / (1.0f + exp_poly(-2.0f * u));
        float d = sg + 2.0f * xc * sg * (1.0f - sg) * GELU_S * (1.0f + 3.0f * GELU_C * xc * xc);
        d = x > 10.0f ? 1.0f : (x < -10.0f ? 0.0f : d);
        dinp[i] += d * dout[i];
    }
}

__global__ void k_relu_fwd(float *out, const float *inp, size_t n) {
    GRID_STRIDE(i, n) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

__global__ void k_relu_bwd(float *dinp, const float *dout, const float *inp, size_t n) {
    GRID_STRIDE(i, n) dinp[i] += inp[i] > 0.0f ? dout[i] : 0.0f;
}

__global__ void k_swiglu_fwd(float *out, const float *inp, int F, size_t total) {
    GRID_STRIDE(i, total) {
        size_t n = i / F, f = i % F;
        float g = inp[n * 2 * F + f], up = inp[n * 2 * F + F + f];
        float sig = 1.0f / (1.0f + expf(-g));
        out[i] = g * sig * up;
    }
}

__global__ void k_swiglu_bwd(float *dinp, const float *dout, const float *inp, int F, size_t total) {
    GRID_STRIDE(i, total) {
        size_t n = i / F, f = i % F;
        float g = inp[n * 2 * F + f], up = inp[n * 2 * F + F + f];
        float sig = 1.0f / (1.0f + expf(-g));
        float dsilu = sig * (1.0f + g * (1.0f - sig));
        dinp[n * 2 * F + f] += dout[i] * up * dsilu;
        dinp[n * 2 * F + F + f] += dout[i] * g * sig;
    }
}

extern "C" int ah__cu_gelu_fwd(float *out, const float *inp, size_t n) {
    if (n == 0)
        return 0;
    k_gelu_fwd<<<blocks_for(n), THREADS>>>(out, inp, n);
    return launched();
}

extern "C" int ah__cu_gelu_bwd(float *dinp, const float *dout, const float *inp, size_t n) {
    if (n == 0)
        return 0;
    k_gelu_bwd<<<blocks_for(n), THREADS>>>(dinp, dout, inp, n);
    return launched();
}

extern "C" int ah__cu_relu_fwd(float *out, const float *inp, size_t n) {
    if (n == 0)
        return 0;
    k_relu_fwd<<<blocks_for(n), THREADS>>>(out, inp, n);
    return launched();
}

extern "C" int ah__cu_relu_bwd(float *dinp, const float *dout, const float *inp, size_t n) {
    if (n == 0)
        return 0;
    k_relu_bwd<<<blocks_for(n), THREADS>>>(dinp, dout, inp, n);
    return launched();
}

extern "C" int ah__cu_swiglu_fwd(float *out, const float *inp, int N, int F) {
    if (N <= 0 || F <= 0)
        return 0;
    k_swiglu_fwd<<<blocks_for((size_t)N * F), THREADS>>>(out, inp, F, (size_t)N * F);
    return launched();
}

extern "C" int ah__cu_swiglu_bwd(float *dinp, const float *dout, const float *inp, int N, int F) {
    if (N <= 0 || F <= 0)
        return 0;
    k_swiglu_bwd<<<blocks_for((size_t)N * F), THREADS>>>(dinp, dout, inp, F, (size_t)N * F);
    return launched();
}

/* ------------------------------------------------------------ attention */

/* one thread per rotated pair (n, h, i); the angle in double as kernels.c's table */
__global__ void k_rope(float *x, int N, int T, int H, int D, float theta, int sign) {
    int P = D / 2;
    GRID_STRIDE(idx, (size_t)N * H * P) {
        int i = (int)(idx % P);
        size_t nh = idx / P;
        int t = (int)((nh / H) % T);
        double a = (double)t * pow((double)theta, -2.0 * i / D);
        float c = (float)cos(a), s = (float)(sign * sin(a));
        float *v = x + nh * D;
        float x0 = v[2 * i], x1 = v[2 * i + 1];
        v[2 * i] = x0 * c - x1 * s;
        v[2 * i + 1] = x0 * s + x1 * c;
    }
}

extern "C" int ah__cu_rope(float *x, int N, int T, int H, int D, float theta, int sign) {
    if (N <= 0 || T <= 0 || H <= 0 || D < 2)
        return 0;
    k_rope<<<blocks_for((size_t)N * H * (D / 2)), THREADS>>>(x, N, T, H, D, theta, sign);
    return launched();
}

__global__ void k_causal_softmax(float *att, int T, int window) {
    __shared__ double sh[THREADS];
    __shared__ float shf[THREADS];
    size_t r = blockIdx.x;
    float *row = att + r * T, mx;
    int t = (int)(r % T), first = window > 0 && t - window + 1 > 0 ? t - window + 1 : 0; /* first visible key */
    softmax_row(row, row, first, t + 1, T, &mx, sh, shf);
}

__global__ void k_softmax_bwd(float *ds, const float *att, int T, size_t att_stride, float scale) {
    __shared__ double sh[THREADS];
    size_t r = blockIdx.x;
    int t = (int)(r % T);
    float *row = ds + r * T;
    const float *p = att + (r / T) * att_stride + (size_t)t * T;
    double pdp = 0.0;
    for (int j = threadIdx.x; j <= t; j += THREADS)
        pdp += (double)p[j] * row[j];
    float rd = (float)block_sum(pdp, sh);
    for (int j = threadIdx.x; j < T; j += THREADS)
        row[j] = j <= t ? p[j] * (row[j] - rd) * scale : 0.0f;
}

extern "C" int ah__cu_causal_softmax(float *att, int rows, int T, int window) {
    if (rows <= 0 || T <= 0)
        return 0;
    k_causal_softmax<<<rows, THREADS>>>(att, T, window);
    return launched();
}

extern "C" int ah__cu_softmax_bwd(float *ds, const float *att, int heads, int T, size_t att_stride, float scale) {
    if (heads <= 0 || T <= 0)
        return 0;
    k_softmax_bwd<<<(unsigned)((size_t)heads * T), THREADS>>>(ds, att, T, att_stride, scale);
    return launched();
}

/* ------------------------------------------------------------ loss */

__global__ void k_crossentropy_fwd(float *losses, float *probs, const float *logits, const int *targets, int V,
                                   int Vp) {
    __shared__ double sh[THREADS];
    __shared__ float shf[THREADS];
    size_t n = blockIdx.x;
    const float *l = logits + n * Vp;
    float mx;
    double sum = softmax_row(l, probs + n * Vp, 0, V, Vp, &mx, sh, shf);
    if (threadIdx.x == 0)
        losses[n] = (float)(log(sum) - ((double)l[targets[n]] - mx));
}

__global__ void k_crossentropy_bwd(float *dlogits, const float *probs, const int *targets, int V, int Vp,
                                   float scale, size_t total) {
    GRID_STRIDE(idx, total) {
        size_t n = idx / V;
        int i = (int)(idx % V);
        size_t at = n * Vp + i;
        dlogits[at] += (probs[at] - (i == targets[n] ? 1.0f : 0.0f)) * scale;
    }
}

extern "C" int ah__cu_crossentropy_fwd(float *losses, float *probs, const float *logits, const int *targets,
                                      int N, int V, int Vp) {
    if (N <= 0 || V <= 0)
        return 0;
    k_crossentropy_fwd<<<N, THREADS>>>(losses, probs, logits, targets, V, Vp);
    return launched();
}

extern "C" int ah__cu_crossentropy_bwd(float *dlogits, const float *probs, const int *targets, int N, int V,
                                      int Vp, float scale) {
    if (N <= 0 || V <= 0)
        return 0;
    k_crossentropy_bwd<<<blocks_for((size_t)N * V), THREADS>>>(dlogits, probs, targets, V, Vp, scale,
                                                                (size_t)N * V);
    return launched();
}

/* ------------------------------------------------------------ elementwise, reductions, AdamW */

__global__ void k_add_bias_rows(float *x, const float *b, int C, size_t total) {
    GRID_STRIDE(i, total) x[i] += b[i % C];
}

__global__ void k_add(float *y, const float *x, size_t n) {
    GRID_STRIDE(i, n) y[i] += x[i];
}

__global__ void k_scale(float *y, float a, size_t n) {
    GRID_STRIDE(i, n) y[i] *= a;
}

__global__ void k_sumsq_blocks(double *part, const float *x, size_t n) {
    __shared__ double sh[THREADS];
    size_t lo = (size_t)blockIdx.x * AH_CU_SUMSQ_BLOCK;
    size_t hi = lo + AH_CU_SUMSQ_BLOCK < n ? lo + AH_CU_SUMSQ_BLOCK : n;
    double s = 0.0;
    for (size_t i = lo + threadIdx.x; i < hi; i += THREADS)
        s += (double)x[i] * (double)x[i];
    s = block_sum(s, sh);
    if (threadIdx.x == 0)
        part[blockIdx.x] = s;
}

__global__ void k_adamw(float *param, const float *grad, float *m, float *v, size_t n, ah_cu_adamw_consts k) {
    const float omb1 = 1.0f - k.b1, omb2 = 1.0f - k.b2;
    GRID_STRIDE(i, n) {
        float g = grad[i] * k.gscale;
        float mi = k.b1 * m[i] + omb1 * g;
        float vi = k.b2 * v[i] + omb2 * g * g;
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) / k.bc2_sqrt + k.eps;
        param[i] = param[i] * k.shrink - k.step_size * (mi / denom);
    }
}

extern "C" int ah__cu_add_bias_rows(float *x, const float *b, int N, int C) {
    if (N <= 0 || C <= 0)
        return 0;
    k_add_bias_rows<<<blocks_for((size_t)N * C), THREADS>>>(x, b, C, (size_t)N * C);
    return launched();
}

extern "C" int ah__cu_add(float *y, const float *x, size_t n) {
    if (n == 0)
        return 0;
    k_add<<<blocks_for(n), THREADS>>>(y, x, n);
    return launched();
}

extern "C" int ah__cu_scale(float *y, float a, size_t n) {
    if (n == 0)
        return 0;
    k_scale<<<blocks_for(n), THREADS>>>(y, a, n);
    return launched();
}

extern "C" int ah__cu_sumsq_blocks(double *part, const float *x, size_t n) {
    if (n == 0)
        return 0;
    size_t nb = (n + AH_CU_SUMSQ_BLOCK - 1) / AH_CU_SUMSQ_BLOCK;
    k_sumsq_blocks<<<(unsigned)nb, THREADS>>>(part, x, n);
    return launched();
}

extern "C" int ah__cu_adamw(float *param, const float *grad, float *m, float *v, size_t n, ah_cu_adamw_consts k) {
    if (n == 0)
        return 0;
    k_adamw<<<blocks_for(n), THREADS>>>(param, grad, m, v, n, k);
    return launched();
}
