/* The engine's attention before the flash-style kernel (src/engine/attention.c),
 * kept verbatim as the reference the new kernel is tested and benchmarked
 * against (tests/test_kernels.c, bench/attention_bench.c): per (batch, head)
 * on BLAS, the full T x T score matrix kept as softmax probabilities
 * att[B, Hq, T, T] for the backward (0 above the diagonal and outside a
 * window). Same conventions as kernels.h otherwise. */
#include "attention_reference.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>

#define AH_PAR_MIN 16384L /* as kernels.c */

/* Attention runs per (batch, head) on BLAS: S = Q K^T and O = P V are sgemm
 * calls on strided views of q/k/v (row stride H*D), the causal softmax is a
 * row loop. Heads run one after another and OpenBLAS threads each product:
 * calling sgemm from inside an OpenMP region serialises on OpenBLAS's buffer
 * pool here and was 4x slower. The query heads of a GQA group, which share
 * dk/dv, accumulate in a fixed order, so results do not depend on threads. */
void ah_attention_fwd_reference(float *out, float *att, const float *q, const float *k, const float *v, int B,
                                int T, int Hq, int Hkv, int D) {
    ah_attention_fwd_window_reference(out, att, q, k, v, B, T, Hq, Hkv, D, 0);
}

void ah_attention_fwd_window_reference(float *out, float *att, const float *q, const float *k, const float *v,
                                       int B, int T, int Hq, int Hkv, int D, int window) {
    if (B <= 0 || T <= 0 || Hq <= 0 || Hkv <= 0 || D <= 0)
        return;
    int G = Hq / Hkv;
    float scale = 1.0f / sqrtf((float)D);
    int ldq = Hq * D, ldk = Hkv * D;
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < Hq; h++) {
            int kh = h / G;
            const float *qb = q + (size_t)b * T * ldq + (size_t)h * D;
            const float *kb = k + (size_t)b * T * ldk + (size_t)kh * D;
            const float *vb = v + (size_t)b * T * ldk + (size_t)kh * D;
            float *ob = out + (size_t)b * T * ldq + (size_t)h * D;
            float *a = att + ((size_t)b * Hq + h) * T * T;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, D, scale, qb, ldq, kb, ldk, 0.0f, a,
                        T);
#pragma omp parallel for schedule(static) if ((long)T * T >= AH_PAR_MIN)
            for (int t = 0; t < T; t++) {
                float *row = a + (size_t)t * T;
                int j0 = window > 0 && t - window + 1 > 0 ? t - window + 1 : 0; /* first visible key */
                float mx = -INFINITY;
                for (int j = j0; j <= t; j++)
                    if (row[j] > mx)
                        mx = row[j];
                double sum = 0.0;
                for (int j = j0; j <= t; j++) {
                    float e = expf(row[j] - mx);
                    row[j] = e;
                    sum += e;
                }
                float inv = (float)(1.0 / sum);
                for (int j = 0; j < j0; j++)
                    row[j] = 0.0f;
                for (int j = j0; j <= t; j++)
                    row[j] *= inv;
                for (int j = t + 1; j < T; j++)
                    row[j] = 0.0f;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, D, T, 1.0f, a, T, vb, ldk, 0.0f, ob,
                        ldq);
        }
    }
}

void ah_attention_bwd_reference(float *dq, float *dk, float *dv, const float *dout, const float *att,
                                const float *q, const float *k, const float *v, int B, int T, int Hq, int Hkv,
                                int D) {
    if (B <= 0 || T <= 0 || Hq <= 0 || Hkv <= 0 || D <= 0)
        return;
    int G = Hq / Hkv;
    float scale = 1.0f / sqrtf((float)D);
    int ldq = Hq * D, ldk = Hkv * D;
    float *ds = malloc((size_t)T * T * sizeof(float));
    if (ds == NULL)
        abort();
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < Hq; h++) {
            int kh = h / G;
            const float *a = att + ((size_t)b * Hq + h) * T * T;
            const float *go = dout + (size_t)b * T * ldq + (size_t)h * D;
            const float *qb = q + (size_t)b * T * ldq + (size_t)h * D;
            const float *kb = k + (size_t)b * T * ldk + (size_t)kh * D;
            const float *vb = v + (size_t)b * T * ldk + (size_t)kh * D;
            /* dV += P^T dO */
            if (dv != NULL)
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, D, T, 1.0f, a, T, go, ldq, 1.0f,
                            dv + (size_t)b * T * ldk + (size_t)kh * D, ldk);
            /* dP = dO V^T, then dS = P (dP - rowsum(P dP)) * scale */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, D, 1.0f, go, ldq, vb, ldk, 0.0f, ds,
                        T);
#pragma omp parallel for schedule(static) if ((long)T * T >= AH_PAR_MIN)
            for (int t = 0; t < T; t++) {
                float *row = ds + (size_t)t * T;
                const float *p = a + (size_t)t * T;
                double pdp = 0.0;
                for (int j = 0; j <= t; j++)
                    pdp += (double)p[j] * row[j];
                float rd = (float)pdp;
                for (int j = 0; j <= t; j++)
                    row[j] = p[j] * (row[j] - rd) * scale;
                for (int j = t + 1; j < T; j++)
                    row[j] = 0.0f;
            }
            /* dQ += dS K ; dK += dS^T Q */
            if (dq != NULL)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, D, T, 1.0f, ds, T, kb, ldk, 1.0f,
                            dq + (size_t)b * T * ldq + (size_t)h * D, ldq);
            if (dk != NULL)
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, D, T, 1.0f, ds, T, qb, ldq, 1.0f,
                            dk + (size_t)b * T * ldk + (size_t)kh * D, ldk);
        }
    }
    free(ds);
}
