/* Causal attention of the CPU engine, blocked and flash-style (kernels.h).
 *
 * Per (batch, query head) the sequence is cut into blocks of ATT_B query rows
 * and ATT_B keys. The forward walks, for each query block, the key blocks up
 * to the diagonal (from the window's first key on local layers) with an
 * online softmax (running max and sum, the output rescaled as the max grows),
 * so blocks above the diagonal are never computed and no T x T matrix exists;
 * it keeps the rows' max and 1/sum. The backward (FlashAttention-2) walks key
 * blocks outside and the query blocks that see them inside, recomputes each
 * block's probabilities from those statistics, and uses
 * rowsum(dP o P) = rowsum(dO o O) so that no pass over a whole row is needed.
 *
 * Block products run on register tiles written once (attention_isa.h) and
 * compiled for AVX-512, AVX2+FMA and SSE2, chosen by CPU features at the first
 * call; q, k, v are packed per task into zero-padded, vector-aligned buffers
 * (K and V also transposed), so blocks need no edge cases. No BLAS: calls from
 * inside OpenMP regions serialise on OpenBLAS's buffer pool here.
 *
 * Threads: the forward is parallel over (batch, query head), the backward
 * over (batch, kv head), each task doing the G query heads of its group in
 * order, so every output and gradient element is computed by one thread in a
 * fixed order: results do not depend on the thread count. */
#include "engine/kernels.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/fast_exp.h"
#include "util/errors.h"

#define ATT_B 64 /* query rows and keys per block */
/* Fewer multiply-adds than this (B Hq T^2 D / 2) stay on one thread. */
#define ATT_PAR_MIN (1L << 20)

typedef struct {
    int T, Tp, D, window; /* Tp: T rounded up to a block */
    float scale;
} att_shape;

/* One thread's buffers, ATT_VW-aligned. Tp x Dp (row-major, zero-padded):
 * qp, kp, vp, dop and the gradient accumulators dqa, dka, dva; kt, vt: K and
 * V transposed per block (att_pack_cols). ATT_B x ATT_B: the scores s, ds; o: ATT_B x Dp. */
typedef struct {
    int Dp;
    float *qp, *kp, *vp, *kt, *vt, *dop, *dqa, *dka, *dva, *s, *ds, *o, *m, *di;
    double *l;
} att_work;

/* Which tiles of a diagonal block's product to skip (attention_isa.h,
 * block): FULL none; COLS the columns right of a row tile's last row (scores:
 * rows are queries, columns keys); KHI the keys after a row tile's last row
 * (P V, dS K); KLO the query rows before a row tile's first key (P^T dO, dS^T Q). */
typedef enum { ATT_FULL, ATT_TRI_COLS, ATT_TRI_KHI, ATT_TRI_KLO } att_tri;

/* A backward task: the G query heads h0.. of one kv head, at their first
 * element in the batch (row strides ldq, ldk); stats of head h0. */
typedef struct {
    const float *q, *k, *v, *dout, *out, *stats;
    float *dq, *dk, *dv;
    int ldq, ldk, G;
} att_task;

static void *att_alloc(size_t floats) {
    size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
    void *p = aligned_alloc(64, bytes ? bytes : 64);
    if (p == NULL)
        ah_out_of_memory(bytes);
    return p;
}

/* 0, 1, .. ATT_B - 1: the columns of a block, for the visibility masks */
static const float att_iota[ATT_B] __attribute__((aligned(64))) = {
    0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21,
    22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43,
    44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63};

/* The keys of block j0 that query t sees, as columns [*lo, *hi] of the
 * block; 0 when none (or t is a padding row). */
static inline int att_visible(const att_shape *sh, int t, int j0, int *lo, int *hi) {
    if (t >= sh->T)
        return 0;
    int first = sh->window > 0 ? t - sh->window + 1 : 0;
    *lo = first > j0 ? first - j0 : 0;
    *hi = t - j0 < ATT_B - 1 ? t - j0 : ATT_B - 1;
    return *lo <= *hi;
}

/* dst[Tp x Dp] = src rows (T x D, row stride ld), zero-padded. */
static void att_pack_rows(float *dst, const float *src, int ld, const att_shape *sh, int Dp) {
    for (int t = 0; t < sh->Tp; t++) {
        float *d = dst + (size_t)t * Dp;
        int n = t < sh->T ? sh->D : 0;
        if (n > 0)
            memcpy(d, src + (size_t)t * ld, sizeof(float) * (size_t)n);
        memset(d + n, 0, sizeof(float) * (size_t)(Dp - n));
    }
}

/* The same rows transposed block by block, zero-padded: block jb is
 * dst[jb*Dp*ATT_B ..] = [Dp x ATT_B], so a block's 64 keys are contiguous
 * (rows Tp apart would all fall into the same L1 sets). */
static void att_pack_cols(float *dst, const float *src, int ld, const att_shape *sh, int Dp) {
    memset(dst, 0, sizeof(float) * (size_t)Dp * sh->Tp);
    for (int t0 = 0; t0 < sh->T; t0 += ATT_B) {
        int t1 = t0 + ATT_B < sh->T ? t0 + ATT_B : sh->T;
        float *blk = dst + (size_t)t0 * Dp;
        for (int d = 0; d < sh->D; d++)
            for (int t = t0; t < t1; t++)
                blk[(size_t)d * ATT_B + t - t0] = src[(size_t)t * ld + d];
    }
}

/* dst rows (T x D, stride ld) += acc[Tp x Dp]. */
static void att_unpack_add(float *dst, int ld, const float *acc, const att_shape *sh, int Dp) {
    for (int t = 0; t < sh->T; t++)
        for (int d = 0; d < sh->D; d++)
            dst[(size_t)t * ld + d] += acc[(size_t)t * Dp + d];
}

/* di[t] = sum_d a[t][d] b[t][d] (double accumulation), 0 on padding rows. */
static void att_row_dots(float *di, const float *a, const float *b, int ld, const att_shape *sh) {
    for (int t = 0; t < sh->Tp; t++) {
        double s = 0.0;
        for (int d = 0; t < sh->T && d < sh->D; d++)
            s += (double)a[(size_t)t * ld + d] * b[(size_t)t * ld + d];
        di[t] = (float)s;
    }
}

/* ---- the head kernels, once per instruction set ---- */
#if defined(__x86_64__) || defined(__i386__)
#define ATT_VW 16
#define ATT_TR 4
#define ATT_CV 4
#define ATT_TARGET __attribute__((target("avx512f,avx2,fma")))
#define ATT_SFX avx512
#include "engine/attention_isa.h"
#undef ATT_VW
#undef ATT_TR
#undef ATT_CV
#undef ATT_TARGET
#undef ATT_SFX

#define ATT_VW 8
#define ATT_TR 4
#define ATT_CV 2
#define ATT_TARGET __attribute__((target("avx2,fma")))
#define ATT_SFX avx2
#include "engine/attention_isa.h"
#undef ATT_VW
#undef ATT_TR
#undef ATT_CV
#undef ATT_TARGET
#undef ATT_SFX
#endif

#define ATT_VW 4 /* the baseline (SSE2 on x86-64) */
#define ATT_TR 4
#define ATT_CV 2
#define ATT_TARGET
#define ATT_SFX base
#include "engine/attention_isa.h"
#undef ATT_VW
#undef ATT_TR
#undef ATT_CV
#undef ATT_TARGET
#undef ATT_SFX

typedef struct {
    const char *name;
    int vw;
    void (*fwd_head)(const att_shape *, att_work *, const float *, const float *, const float *, int, int,
                     float *, float *);
    void (*bwd_group)(const att_shape *, att_work *, const att_task *);
} att_isa;

static const att_isa att_isas[] = {
#if defined(__x86_64__) || defined(__i386__)
    {"avx512", 16, fwd_head_avx512, bwd_group_avx512},
    {"avx2", 8, fwd_head_avx2, bwd_group_avx2},
#endif
    {"base", 4, fwd_head_base, bwd_group_base},
};
#define ATT_N_ISAS ((int)(sizeof att_isas / sizeof att_isas[0]))
static int att_chosen = -1;

static int att_supported(int i) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (strcmp(att_isas[i].name, "avx512") == 0)
        return __builtin_cpu_supports("avx512f");
    if (strcmp(att_isas[i].name, "avx2") == 0)
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
    return 1;
}

static const att_isa *att_pick(void) {
    for (int i = 0; att_chosen < 0 && i < ATT_N_ISAS; i++)
        if (att_supported(i))
            att_chosen = i;
    return &att_isas[att_chosen];
}

const char *ah__attention_kernel(void) {
    return att_pick()->name;
}

int ah__attention_force_kernel(const char *name) {
    if (name == NULL) {
        att_chosen = -1;
        return 0;
    }
    for (int i = 0; i < ATT_N_ISAS; i++)
        if (strcmp(att_isas[i].name, name) == 0 && att_supported(i)) {
            att_chosen = i;
            return 0;
        }
    return -1;
}

size_t ah__attention_stats_per_head(int T) {
    return 2 * (size_t)(T > 0 ? T : 0);
}

/* ---- scratch and the parallel loops ---- */

static att_shape att_shape_of(int T, int D, int window) {
    att_shape sh = {T, (T + ATT_B - 1) / ATT_B * ATT_B, D, window > 0 ? window : 0, 1.0f / sqrtf((float)D)};
    return sh;
}

static void att_work_alloc(att_work *w, const att_shape *sh, int vw, int backward) {
    memset(w, 0, sizeof *w);
    w->Dp = (sh->D + vw - 1) / vw * vw;
    size_t rows = (size_t)sh->Tp * w->Dp;
    w->qp = att_alloc(rows), w->kt = att_alloc(rows);
    w->s = att_alloc(ATT_B * ATT_B);
    memset(w->s, 0, sizeof(float) * ATT_B * ATT_B); /* entries a diagonal block skips are read masked */
    if (!backward) {
        w->vp = att_alloc(rows), w->o = att_alloc((size_t)ATT_B * w->Dp), w->m = att_alloc(ATT_B);
        w->l = aligned_alloc(64, ATT_B * sizeof(double));
        if (w->l == NULL)
            abort();
        return;
    }
    w->kp = att_alloc(rows), w->vt = att_alloc(rows), w->dop = att_alloc(rows);
    w->dqa = att_alloc(rows), w->dka = att_alloc(rows), w->dva = att_alloc(rows);
    w->ds = att_alloc(ATT_B * ATT_B), w->di = att_alloc((size_t)sh->Tp);
    memset(w->ds, 0, sizeof(float) * ATT_B * ATT_B);
}

static void att_work_free(att_work *w) {
    float *f[] = {w->qp,  w->kp,  w->vp, w->kt, w->vt, w->dop, w->dqa,
                  w->dka, w->dva, w->s,  w->ds, w->o,  w->m,   w->di};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        free(f[i]);
    free(w->l);
}

void ah__attention_fwd(float *out, float *stats, const float *q, const float *k, const float *v, int B, int T,
                      int Hq, int Hkv, int D) {
    ah__attention_fwd_window(out, stats, q, k, v, B, T, Hq, Hkv, D, 0);
}

void ah__attention_fwd_window(float *out, float *stats, const float *q, const float *k, const float *v, int B,
                             int T, int Hq, int Hkv, int D, int window) {
    if (B <= 0 || T <= 0 || Hq <= 0 || Hkv <= 0 || D <= 0)
        return;
    const att_isa *isa = att_pick();
    const att_shape sh = att_shape_of(T, D, window);
    const int G = Hq / Hkv, ldq = Hq * D, ldk = Hkv * D, ntask = B * Hq;
    const long work = (long)ntask * T * T / 2 * D;
#pragma omp parallel if (work >= ATT_PAR_MIN && ntask > 1)
    {
        att_work w;
        att_work_alloc(&w, &sh, isa->vw, 0);
#pragma omp for schedule(dynamic, 1)
        for (int task = 0; task < ntask; task++) {
            int b = task / Hq, h = task % Hq;
            size_t qo = (size_t)b * T * ldq + (size_t)h * D, ko = (size_t)b * T * ldk + (size_t)(h / G) * D;
            isa->fwd_head(&sh, &w, q + qo, k + ko, v + ko, ldq, ldk, out + qo,
                          stats + (size_t)task * ah__attention_stats_per_head(T));
        }
        att_work_free(&w);
    }
}

void ah__attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *out,
                      const float *stats, const float *q, const float *k, const float *v, int B, int T,
                      int Hq, int Hkv, int D, int window) {
    if (B <= 0 || T <= 0 || Hq <= 0 || Hkv <= 0 || D <= 0)
        return;
    const att_isa *isa = att_pick();
    const att_shape sh = att_shape_of(T, D, window);
    const int G = Hq / Hkv, ldq = Hq * D, ldk = Hkv * D, ntask = B * Hkv;
    const long work = (long)B * Hq * T * T / 2 * D;
#pragma omp parallel if (work >= ATT_PAR_MIN && ntask > 1)
    {
        att_work w;
        att_work_alloc(&w, &sh, isa->vw, 1);
#pragma omp for schedule(dynamic, 1)
        for (int task = 0; task < ntask; task++) {
            int b = task / Hkv, kh = task % Hkv;
            size_t qo = (size_t)b * T * ldq + (size_t)kh * G * D, ko = (size_t)b * T * ldk + (size_t)kh * D;
            att_task tk = {q + qo,
                           k + ko,
                           v + ko,
                           dout + qo,
                           out + qo,
                           stats + ((size_t)b * Hq + (size_t)kh * G) * ah__attention_stats_per_head(T),
                           dq ? dq + qo : NULL,
                           dk ? dk + ko : NULL,
                           dv ? dv + ko : NULL,
                           ldq,
                           ldk,
                           G};
            isa->bwd_group(&sh, &w, &tk);
        }
        att_work_free(&w);
    }
}
