/* CPU kernels of the training engine (see kernels.h for the conventions).
 *
 * Determinism: every output element, activation gradient and parameter
 * gradient is computed by exactly one thread, in an order that does not depend
 * on the number of threads, so results are bitwise identical across runs and
 * across OMP_NUM_THREADS (for the BLAS calls this holds as far as OpenBLAS
 * keeps it, which it does for the shapes tested). Parameter gradients that sum
 * over rows (layernorm/rmsnorm gains, linear bias, token/position embeddings)
 * are parallel over blocks of columns, each column summed over rows in order;
 * no atomics, no per-thread partial buffers.
 *
 * Backward functions accept NULL for any gradient they should skip. */
#include "engine/kernels.h"
#include "engine/gemm.h"
#include "engine/kernels_vec.h"

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/errors.h"

/* Loops with less work than this (in elements touched) stay serial: a
 * parallel region costs a few microseconds. Results do not depend on it. */
#define AH_PAR_MIN 16384L
/* Columns per block in the column-parallel row reductions (2 cache lines). */
#define AH_COL_BLOCK 32
#define AH_NORM_EPS 1e-5

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (p == NULL)
        ah_out_of_memory(n);
    return p;
}

static inline int imin(int a, int b) {
    return a < b ? a : b;
}

/* dst[c] += sum_n src[n*C + c] (double accumulation, rows summed in order). */
static void colsum_acc(float *dst, const float *src, int N, int C) {
    int nblk = (C + AH_COL_BLOCK - 1) / AH_COL_BLOCK;
#pragma omp parallel for schedule(static) if ((long)N * C >= AH_PAR_MIN)
    for (int blk = 0; blk < nblk; blk++) {
        int c0 = blk * AH_COL_BLOCK, c1 = imin(C, c0 + AH_COL_BLOCK);
        double acc[AH_COL_BLOCK] = {0};
        for (int n = 0; n < N; n++) {
            const float *row = src + (size_t)n * C;
            for (int c = c0; c < c1; c++)
                acc[c - c0] += row[c];
        }
        for (int c = c0; c < c1; c++)
            dst[c] += (float)acc[c - c0];
    }
}

/* ------------------------------------------------------------ linear */

/* w's products in precision p: ah__gemm_p, or for an engine weight (weight = 1) ah__gemm_weight_p (its
 * cached bf16 copy) */
static void wgemm(ah_matmul_precision p, int weight, int ta, int tb, int M, int N, int K, const float *A, int lda,
                  const float *W, int ldw, float beta, float *C, int ldc) {
    if (weight)
        ah__gemm_weight_p(p, ta, tb, M, N, K, A, lda, W, ldw, beta, C, ldc);
    else
        ah__gemm_p(p, ta, tb, M, N, K, A, lda, W, ldw, beta, C, ldc);
}

static void linear_fwd(ah_matmul_precision p, int weight, float *out, const float *inp, const float *w, const float *bias, int N, int K,
                       int M) {
    if (N <= 0 || M <= 0)
        return;
    if (bias != NULL) {
#pragma omp parallel for schedule(static) if ((long)N * M >= AH_PAR_MIN)
        for (int n = 0; n < N; n++)
            memcpy(out + (size_t)n * M, bias, (size_t)M * sizeof(float));
    }
    if (K <= 0) {
        if (bias == NULL)
            memset(out, 0, (size_t)N * M * sizeof(float));
        return;
    }
    wgemm(p, weight, 0, 1, N, M, K, inp, K, w, K, bias ? 1.0f : 0.0f, out, M);
}

static void linear_bwd(ah_matmul_precision p, int weight, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                       const float *w, int N, int K, int M) {
    if (N <= 0 || M <= 0)
        return;
    if (K > 0 && dinp != NULL) /* dinp[N,K] += dout[N,M] w[M,K] */
        wgemm(p, weight, 0, 0, N, K, M, dout, M, w, K, 1.0f, dinp, K);
    if (K > 0 && dw != NULL) /* dw[M,K] += dout^T[M,N] inp[N,K] */
        ah__gemm_p(p, 1, 0, M, K, N, dout, M, inp, K, 1.0f, dw, K);
    if (dbias != NULL)
        colsum_acc(dbias, dout, N, M);
}

void ah__linear_fwd(float *out, const float *inp, const float *w, const float *bias, int N, int K, int M) {
    linear_fwd(AH_MATMUL_FP32, 0, out, inp, w, bias, N, K, M);
}

void ah__linear_bwd(float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w,
                   int N, int K, int M) {
    linear_bwd(AH_MATMUL_FP32, 0, dinp, dw, dbias, dout, inp, w, N, K, M);
}

void ah__linear_fwd_weight(ah_matmul_precision p, float *out, const float *inp, const float *w, const float *bias, int N,
                          int K, int M) {
    linear_fwd(p, 1, out, inp, w, bias, N, K, M);
}

void ah__linear_bwd_weight(ah_matmul_precision p, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                          const float *w, int N, int K, int M) {
    linear_bwd(p, 1, dinp, dw, dbias, dout, inp, w, N, K, M);
}

/* ------------------------------------------------------------ embedding */

void ah__embedding_fwd(float *out, const int *tok, const float *wte, const float *wpe, int N, int T, int C) {
#pragma omp parallel for schedule(static) if ((long)N * C >= AH_PAR_MIN)
    for (int n = 0; n < N; n++) {
        float *o = out + (size_t)n * C;
        const float *e = wte + (size_t)tok[n] * C;
        if (wpe != NULL) {
            const float *p = wpe + (size_t)(n % T) * C;
            for (int c = 0; c < C; c++)
                o[c] = e[c] + p[c];
        } else {
            memcpy(o, e, (size_t)C * sizeof(float));
        }
    }
}

void ah__embedding_bwd(float *dwte, float *dwpe, const float *dout, const int *tok, int N, int T, int C) {
    if (dwte != NULL) {
        /* Rows of dwte are hit by repeated tokens: each thread owns a block of
         * columns and adds the rows in token order. */
        int nblk = (C + AH_COL_BLOCK - 1) / AH_COL_BLOCK;
#pragma omp parallel for schedule(static) if ((long)N * C >= AH_PAR_MIN)
        for (int blk = 0; blk < nblk; blk++) {
            int c0 = blk * AH_COL_BLOCK, c1 = imin(C, c0 + AH_COL_BLOCK);
            for (int n = 0; n < N; n++) {
                float *d = dwte + (size_t)tok[n] * C;
                const float *g = dout + (size_t)n * C;
                for (int c = c0; c < c1; c++)
                    d[c] += g[c];
            }
        }
    }
    if (dwpe != NULL) {
        int Tn = imin(T, N);
#pragma omp parallel for schedule(static) if ((long)N * C >= AH_PAR_MIN)
        for (int t = 0; t < Tn; t++) {
            float *d = dwpe + (size_t)t * C;
            for (int n = t; n < N; n += T) {
                const float *g = dout + (size_t)n * C;
                for (int c = 0; c < C; c++)
                    d[c] += g[c];
            }
        }
    }
}

/* ------------------------------------------------------------ normalisation */

void ah__layernorm_fwd(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                      int N, int C) {
    ah__layernorm_fwd_eps(out, mean, rstd, inp, w, b, N, C, AH_NORM_EPS);
}

void ah__layernorm_fwd_eps(float *out, float *mean, float *rstd, const float *inp, const float *w,
                          const float *b, int N, int C, float eps) {
#pragma omp parallel for schedule(static) if ((long)N * C >= AH_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *o = out + (size_t)n * C;
        double s = 0.0;
        for (int c = 0; c < C; c++)
            s += x[c];
        double m = s / C;
        double v = 0.0;
        for (int c = 0; c < C; c++) {
            double d = x[c] - m;
            v += d * d;
        }
        v /= C;
        /* The backward recomputes x_hat from these stored fp32 values; the
         * forward uses the same ones so both see one function. */
        float mf = (float)m, rs = (float)(1.0 / sqrt(v + eps));
        for (int c = 0; c < C; c++)
            o[c] = (x[c] - mf) * rs * w[c] + b[c];
        mean[n] = mf;
        rstd[n] = rs;
    }
}

void ah__layernorm_bwd(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                      const float *mean, const float *rstd, int N, int C) {
    if (dinp != NULL) {
#pragma omp parallel for schedule(static) if ((long)N * C >= AH_PAR_MIN)
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C, *g = dout + (size_t)n * C;
            float *dx = dinp + (size_t)n * C;
            float m = mean[n], rs = rstd[n];
            double sg = 0.0, sgx = 0.0;
            for (int c = 0; c < C; c++) {
                float gw = g[c] * w[c];
                sg += gw;
                sgx += (double)gw * ((x[c] - m) * rs);
            }
            float mg = (float)(sg / C), mgx = (float)(sgx / C);
            for (int c = 0; c < C; c++) {
                float xh = (x[c] - m) * rs;
                dx[c] += rs * (g[c] * w[c] - mg - xh * mgx);
            }
        }
    }
    if (dw != NULL || db != NULL) {
        int nblk = (C + AH_COL_BLOCK - 1) / AH_COL_BLOCK;
#pragma omp parallel for schedule(static) if ((long)N * C >= AH_PAR_MIN)
        for (int blk = 0; blk < nblk; blk++) {
            int c0 = blk * AH_COL_BLOCK, c1 = imin(C, c0 + AH_COL_BLOCK);
            double aw[AH_COL_BLOCK] = {0}, ab[AH_COL_BLOCK] = {0};
            for (int n = 0; n < N; n++) {
                const float *x = inp + (size_t)n * C, *g = dout + (size_t)n * C;
                float m = mean[n], rs = rstd[n];
                for (int c = c0; c < c1; c++) {
                    aw[c - c0] += (double)g[c] * ((x[c] - m) * rs);
                    ab[c - c0] += g[c];
                }
            }
            for (int c = c0; c < c1; c++) {
                if (dw != NULL)
                    dw[c] += (float)aw[c - c0];
                if (db != NULL)
                    db[c] += (float)ab[c - c0];
            }
        }
    }
}

void ah__rmsnorm_fwd(float *out, float *rstd, const float *inp, const float *w, int N, int C) {
    ah__rmsnorm_fwd_eps(out, rstd, inp, w, N, C, AH_NORM_EPS);
}

void ah__rmsnorm_fwd_eps(float *out, float *rstd, const float *inp, const float *w, int N, int C, float eps) {
#pragma omp parallel for schedule(static) if ((long)N * C >= AH_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *o = out + (size_t)n * C;
        double ss = 0.0;
        for (int c = 0; c < C; c++)
            ss += (double)x[c] * x[c];
        float rs = (float)(1.0 / sqrt(ss / C + eps));
        for (int c = 0; c < C; c++)
            o[c] = x[c] * rs * w[c];
        rstd[n] = rs;
    }
}

void ah__rmsnorm_bwd(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                    const float *rstd, int N, int C) {
    /* out_c = w_c x_c r, r = (mean(x^2) + eps)^-1/2, dr/dx_j = -r^3 x_j / C:
     * dx_j = r (g_j w_j - x_j r^2 mean_c(g_c w_c x_c)). */
    if (dinp != NULL) {
#pragma omp parallel for schedule(static) if ((long)N * C >= AH_PAR_MIN)
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C, *g = dout + (size_t)n * C;
            float *dx = dinp + (size_t)n * C;
            float rs = rstd[n];
            double sgx = 0.0;
            for (int c = 0; c < C; c++)
                sgx += (double)(g[c] * w[c]) * x[c];
            float k = (float)(sgx / C) * rs * rs;
            for (int c = 0; c < C; c++)
                dx[c] += rs * (g[c] * w[c] - x[c] * k);
        }
    }
    if (dw != NULL) {
        int nblk = (C + AH_COL_BLOCK - 1) / AH_COL_BLOCK;
#pragma omp parallel for schedule(static) if ((long)N * C >= AH_PAR_MIN)
        for (int blk = 0; blk < nblk; blk++) {
            int c0 = blk * AH_COL_BLOCK, c1 = imin(C, c0 + AH_COL_BLOCK);
            double aw[AH_COL_BLOCK] = {0};
            for (int n = 0; n < N; n++) {
                const float *x = inp + (size_t)n * C, *g = dout + (size_t)n * C;
                float rs = rstd[n];
                for (int c = c0; c < c1; c++)
                    aw[c - c0] += (double)g[c] * (x[c] * rs);
            }
            for (int c = c0; c < c1; c++)
                dw[c] += (float)aw[c - c0];
        }
    }
}

/* ------------------------------------------------------------ activations */

#define AH_GELU_CHUNK 4096

void ah__gelu_fwd(float *out, const float *inp, size_t n) {
    long chunks = (long)((n + AH_GELU_CHUNK - 1) / AH_GELU_CHUNK);
#pragma omp parallel for schedule(static) if (n >= (size_t)AH_PAR_MIN)
    for (long c = 0; c < chunks; c++) {
        size_t off = (size_t)c * AH_GELU_CHUNK, len = n - off < AH_GELU_CHUNK ? n - off : AH_GELU_CHUNK;
        ah__vec_gelu_fwd(out + off, inp + off, len);
    }
}

void ah__gelu_bwd(float *dinp, const float *dout, const float *inp, size_t n) {
    long chunks = (long)((n + AH_GELU_CHUNK - 1) / AH_GELU_CHUNK);
#pragma omp parallel for schedule(static) if (n >= (size_t)AH_PAR_MIN)
    for (long c = 0; c < chunks; c++) {
        size_t off = (size_t)c * AH_GELU_CHUNK, len = n - off < AH_GELU_CHUNK ? n - off : AH_GELU_CHUNK;
        ah__vec_gelu_bwd(dinp + off, dout + off, inp + off, len);
    }
}

void ah__relu_fwd(float *out, const float *inp, size_t n) {
#pragma omp parallel for schedule(static) if (n >= (size_t)AH_PAR_MIN)
    for (size_t i = 0; i < n; i++)
        out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

void ah__relu_bwd(float *dinp, const float *dout, const float *inp, size_t n) {
#pragma omp parallel for schedule(static) if (n >= (size_t)AH_PAR_MIN)
    for (size_t i = 0; i < n; i++)
        dinp[i] += inp[i] > 0.0f ? dout[i] : 0.0f;
}

void ah__swiglu_fwd(float *out, const float *inp, int N, int F) {
#pragma omp parallel for schedule(static) if ((long)N * F >= AH_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *gate = inp + (size_t)n * 2 * F, *up = gate + F;
        float *o = out + (size_t)n * F;
        for (int f = 0; f < F; f++) {
            float g = gate[f];
            float sig = 1.0f / (1.0f + expf(-g));
            o[f] = g * sig * up[f];
        }
    }
}

void ah__swiglu_bwd(float *dinp, const float *dout, const float *inp, int N, int F) {
#pragma omp parallel for schedule(static) if ((long)N * F >= AH_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *gate = inp + (size_t)n * 2 * F, *up = gate + F;
        const float *go = dout + (size_t)n * F;
        float *dgate = dinp + (size_t)n * 2 * F, *dup = dgate + F;
        for (int f = 0; f < F; f++) {
            float g = gate[f];
            float sig = 1.0f / (1.0f + expf(-g));
            float dsilu = sig * (1.0f + g * (1.0f - sig)); /* d/dg (g sigmoid(g)) */
            dgate[f] += go[f] * up[f] * dsilu;
            dup[f] += go[f] * g * sig;
        }
    }
}

/* ------------------------------------------------------------ attention */

/* Rotates the pairs of x[N,H,D] by sign * t * theta^(-2i/D). The cos/sin table
 * is computed in double for the positions present. */
static void rope_apply(float *x, int N, int T, int H, int D, float theta, int sign) {
    if (N <= 0 || T <= 0 || H <= 0 || D < 2)
        return;
    int P = D / 2, Tn = imin(T, N);
    float *tab = xmalloc((size_t)Tn * P * 2 * sizeof(float)); /* [t][i] = (cos, sin) */
#pragma omp parallel for schedule(static) if ((long)Tn * P >= AH_PAR_MIN / 16)
    for (int t = 0; t < Tn; t++) {
        for (int i = 0; i < P; i++) {
            double a = (double)t * pow((double)theta, -2.0 * i / D);
            tab[((size_t)t * P + i) * 2] = (float)cos(a);
            tab[((size_t)t * P + i) * 2 + 1] = (float)(sign * sin(a));
        }
    }
#pragma omp parallel for schedule(static) if ((long)N * H * D >= AH_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *cs = tab + (size_t)(n % T) * P * 2;
        for (int h = 0; h < H; h++) {
            float *v = x + ((size_t)n * H + h) * D;
            for (int i = 0; i < P; i++) {
                float c = cs[2 * i], s = cs[2 * i + 1];
                float x0 = v[2 * i], x1 = v[2 * i + 1];
                v[2 * i] = x0 * c - x1 * s;
                v[2 * i + 1] = x0 * s + x1 * c;
            }
        }
    }
    free(tab);
}

void ah__rope_fwd(float *x, int N, int T, int H, int D, float theta) {
    rope_apply(x, N, T, H, D, theta, 1);
}

void ah__rope_bwd(float *dx, int N, int T, int H, int D, float theta) {
    rope_apply(dx, N, T, H, D, theta, -1);
}

/* ------------------------------------------------------------ loss */

double ah__crossentropy_fwd(float *losses, float *probs, const float *logits, const int *targets, int N,
                           int V, int Vp) {
#pragma omp parallel for schedule(static) if ((long)N * V >= AH_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * Vp;
        float *p = probs + (size_t)n * Vp;
        float mx = ah__vec_max(l, (size_t)V);
        double sum = ah__vec_exp_shift_sum(p, l, mx, (size_t)V);
        ah__vec_scale(p, (float)(1.0 / sum), (size_t)V);
        for (int i = V; i < Vp; i++)
            p[i] = 0.0f; /* padding columns: masked out of the softmax */
        /* -log softmax[target] = log(sum) - (l[target] - max) */
        losses[n] = (float)(log(sum) - ((double)l[targets[n]] - mx));
    }
    double total = 0.0; /* serial, in row order: independent of the thread count */
    for (int n = 0; n < N; n++)
        total += losses[n];
    return total;
}

void ah__crossentropy_bwd(float *dlogits, const float *probs, const int *targets, int N, int V, int Vp,
                         float scale) {
#pragma omp parallel for schedule(static) if ((long)N * V >= AH_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *p = probs + (size_t)n * Vp;
        float *d = dlogits + (size_t)n * Vp; /* padding columns [V, Vp) get no gradient */
        ah__vec_softmax_grad(d, p, (size_t)targets[n], scale, (size_t)V);
    }
}

/* ------------------------------------------------------------ elementwise */

void ah__add_bias_rows(float *x, const float *b, int N, int C) {
#pragma omp parallel for
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            x[(size_t)n * C + c] += b[c];
}

void ah__bias_grad_acc(float *db, const float *d, int N, int C) {
    colsum_acc(db, d, N, C);
}

void ah__add_inplace(float *y, const float *x, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= (size_t)AH_PAR_MIN * 4)
    for (size_t i = 0; i < n; i++)
        y[i] += x[i];
}

void ah__scale_inplace(float *y, float a, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= (size_t)AH_PAR_MIN * 4)
    for (size_t i = 0; i < n; i++)
        y[i] *= a;
}
