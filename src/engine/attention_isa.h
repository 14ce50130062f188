/* The flash-attention head kernels for one instruction set. attention.c
 * includes this file once per vector width, after defining
 *   ATT_VW      floats per vector (16: AVX-512, 8: AVX2, 4: SSE2)
 *   ATT_TR, ATT_CV  the register tile of a block product: rows x vectors
 *   ATT_TARGET  the function attribute that selects the instruction set
 *   ATT_SFX     the suffix of every name defined here
 * and the shared types (att_shape, att_work, att_task) and helpers. No
 * include guard on purpose. Everything is written with GCC vector
 * extensions: a tile's accumulators stay in registers, and the masked
 * softmax and its exponential are vector code (the compiler left that loop
 * scalar for AVX2). */

#define ATT_CAT2(a, b) a##_##b
#define ATT_CAT(a, b) ATT_CAT2(a, b)
#define FN(name) ATT_CAT(name, ATT_SFX)
#define VT FN(vf)
#define VI FN(vi)
#define LDV(p) (*(const VT *)(const void *)(p))
#define STV(p, x) (*(VT *)(void *)(p) = (x))

typedef float VT __attribute__((vector_size(ATT_VW * 4), may_alias));
typedef int32_t VI __attribute__((vector_size(ATT_VW * 4), may_alias));
#define SPLAT(x) ((VT){0} + (x))

/* m ? a : b lane by lane (m from a comparison: all ones or zero). */
ATT_TARGET static inline VT FN(vsel)(VI m, VT a, VT b) {
    return (VT)(((VI)a & m) | ((VI)b & ~m));
}

/* ah__exp_poly (fast_exp.h) on a vector, the same steps lane by lane. */
ATT_TARGET static inline VT FN(vexp)(VT x) {
    x = FN(vsel)(x < SPLAT(AH_EXP_LO), SPLAT(AH_EXP_LO), x);
    x = FN(vsel)(x > SPLAT(AH_EXP_HI), SPLAT(AH_EXP_HI), x);
    VT t = x * AH_EXP_LOG2E;
    VT half = (VT)(((VI)t & (int32_t)0x80000000) | (VI)SPLAT(0.5f)); /* copysign(0.5, t) */
    VI fi_i = __builtin_convertvector(t + half, VI);
    VT fi = __builtin_convertvector(fi_i, VT);
    VT f = x - fi * AH_EXP_LN2_HI + fi * AH_EXP_LN2_LO;
    VT p = SPLAT(AH_EXP_P0);
    p = p * f + AH_EXP_P1;
    p = p * f + AH_EXP_P2;
    p = p * f + AH_EXP_P3;
    p = p * f + AH_EXP_P4;
    p = p * f + AH_EXP_P5;
    VT y = p * f * f + f + 1.0f;
    return y * (VT)((fi_i + 127) << 23);
}

/* Lanes c0.. of a row whose key column lies in [lo, hi] (att_iota: 0, 1, .. ATT_B-1). */
ATT_TARGET static inline VI FN(vvisible)(int c0, VT lo, VT hi) {
    VT ix = LDV(att_iota + c0);
    return (ix >= lo) & (ix <= hi);
}

/* A register tile: c[TR x CV*VW] (row stride ldc) = (acc ? c : 0) +
 * sum_k a(i, k) b[k][:], with a(i, k) = a[i*sai + k*sak] (so one function
 * does A B and A^T B) and b's rows ldb apart. Every pointer is vector-aligned.
 * The block's sum starts from 0 and is added to c at the end: accumulators
 * that sum over many blocks (O, dQ, dK, dV) get two-level sums, as accurate
 * as the BLAS products of the reference, not one long fp32 chain. */
#define ATT_TILE(NAME, TR_, CV_)                                                                             \
    ATT_TARGET static inline void NAME(float *restrict c, int ldc, const float *restrict a, int sai,         \
                                       int sak, const float *restrict b, int ldb, int K, int acc) {          \
        VT s[TR_][CV_];                                                                                      \
        for (int i = 0; i < TR_; i++)                                                                        \
            for (int j = 0; j < CV_; j++)                                                                    \
                s[i][j] = (VT){0};                                                                           \
        for (int k = 0; k < K; k++) {                                                                        \
            const float *bk = b + (size_t)k * ldb;                                                           \
            for (int i = 0; i < TR_; i++) {                                                                  \
                float x = a[(size_t)i * sai + (size_t)k * sak];                                              \
                for (int j = 0; j < CV_; j++)                                                                \
                    s[i][j] += x * LDV(bk + j * ATT_VW);                                                     \
            }                                                                                                \
        }                                                                                                    \
        for (int i = 0; i < TR_; i++)                                                                        \
            for (int j = 0; j < CV_; j++) {                                                                  \
                float *cij = c + (size_t)i * ldc + j * ATT_VW;                                               \
                if (acc)                                                                                     \
                    s[i][j] += LDV(cij);                                                                     \
                STV(cij, s[i][j]);                                                                           \
            }                                                                                                \
    }
ATT_TILE(FN(tile), ATT_TR, ATT_CV)
ATT_TILE(FN(tile1), ATT_TR, 1)
#undef ATT_TILE

/* c[ATT_B x ncols] (+)= a(ATT_B x K) b[K x ncols], ncols a multiple of ATT_VW.
 * On a diagonal block, tri skips the tiles above the diagonal (att_tri): what
 * they would give is masked or zero, and the entries left unwritten are
 * never read unmasked. */
ATT_TARGET static void FN(block)(float *restrict c, int ldc, const float *restrict a, int sai, int sak,
                                 const float *restrict b, int ldb, int K, int ncols, int acc, att_tri tri) {
    for (int i = 0; i < ATT_B; i += ATT_TR) {
        float *ci = c + (size_t)i * ldc;
        int n = ncols, k0 = 0, k1 = K;
        if (tri == ATT_TRI_COLS && (i + ATT_TR + ATT_VW - 1) / ATT_VW * ATT_VW < n)
            n = (i + ATT_TR + ATT_VW - 1) / ATT_VW * ATT_VW; /* the columns up to the tile's last row */
        else if (tri == ATT_TRI_KHI && i + ATT_TR < k1)
            k1 = i + ATT_TR; /* the keys up to the tile's last row */
        else if (tri == ATT_TRI_KLO)
            k0 = i; /* the query rows from the tile's first key on */
        const float *ai = a + (size_t)i * sai + (size_t)k0 * sak, *bk = b + (size_t)k0 * ldb;
        int j = 0;
        for (; j + ATT_CV * ATT_VW <= n; j += ATT_CV * ATT_VW)
            FN(tile)(ci + j, ldc, ai, sai, sak, bk + j, ldb, k1 - k0, acc);
        for (; j < n; j += ATT_VW)
            FN(tile1)(ci + j, ldc, ai, sai, sak, bk + j, ldb, k1 - k0, acc);
    }
}

/* The online softmax of one block of scores (w->s, raw q.k products of rows
 * i0.., keys j0..): w->s becomes exp(score - running max) over each row's
 * visible keys (0 elsewhere), the running max m, sum l and the output
 * accumulator o are updated. */
ATT_TARGET static void FN(fwd_softmax)(const att_shape *sh, att_work *w, int i0, int j0) {
    const float scale = sh->scale;
    for (int r = 0; r < ATT_B; r++) {
        float *s = w->s + (size_t)r * ATT_B;
        int lo, hi;
        if (!att_visible(sh, i0 + r, j0, &lo, &hi)) {
            memset(s, 0, ATT_B * sizeof(float));
            continue;
        }
        VT vlo = SPLAT((float)lo), vhi = SPLAT((float)hi), vmx = SPLAT(-INFINITY);
        for (int c = 0; c < ATT_B; c += ATT_VW) {
            VT x = LDV(s + c);
            vmx = FN(vsel)(FN(vvisible)(c, vlo, vhi) & (x > vmx), x, vmx);
        }
        float mx = -INFINITY;
        for (int i = 0; i < ATT_VW; i++)
            mx = vmx[i] > mx ? vmx[i] : mx;
        mx *= scale; /* = the maximum of the scaled scores: scaling by scale > 0 is monotonic */
        float mold = w->m[r], mnew = mx > mold ? mx : mold;
        VT vsum = SPLAT(0.0f);
        for (int c = 0; c < ATT_B; c += ATT_VW) { /* exp everywhere, then the mask: no branch */
            VT p = FN(vsel)(FN(vvisible)(c, vlo, vhi), FN(vexp)(LDV(s + c) * scale - mnew), SPLAT(0.0f));
            STV(s + c, p);
            vsum += p;
        }
        float sum = 0.0f;
        for (int i = 0; i < ATT_VW; i++)
            sum += vsum[i];
        if (mnew != mold) {
            float alpha = expf(mold - mnew); /* 0 for the first visible block (mold = -inf) */
            float *o = w->o + (size_t)r * w->Dp;
            for (int d = 0; d < w->Dp; d++)
                o[d] *= alpha;
            w->l[r] *= alpha;
        }
        w->l[r] += sum;
        w->m[r] = mnew;
    }
}

/* One (batch, query head): q, out rows ldq apart, k, v rows ldk apart;
 * writes out and the rows' statistics. */
ATT_TARGET static void FN(fwd_head)(const att_shape *sh, att_work *w, const float *q, const float *k,
                                    const float *v, int ldq, int ldk, float *out, float *stats) {
    const int nb = sh->Tp / ATT_B, Dp = w->Dp;
    att_pack_rows(w->qp, q, ldq, sh, Dp);
    att_pack_cols(w->kt, k, ldk, sh, Dp);
    att_pack_rows(w->vp, v, ldk, sh, Dp);
    for (int ib = 0; ib < nb; ib++) {
        int i0 = ib * ATT_B;
        memset(w->o, 0, sizeof(float) * ATT_B * Dp);
        for (int r = 0; r < ATT_B; r++)
            w->m[r] = -INFINITY, w->l[r] = 0.0;
        int jlo = sh->window > 0 && i0 - sh->window + 1 > 0 ? (i0 - sh->window + 1) / ATT_B : 0;
        for (int jb = jlo; jb <= ib; jb++) {
            int j0 = jb * ATT_B;
            int diag = jb == ib;
            FN(block)
            (w->s, ATT_B, w->qp + (size_t)i0 * Dp, Dp, 1, w->kt + (size_t)j0 * Dp, ATT_B, Dp, ATT_B, 0,
             diag ? ATT_TRI_COLS : ATT_FULL);
            FN(fwd_softmax)(sh, w, i0, j0);
            FN(block)
            (w->o, Dp, w->s, ATT_B, 1, w->vp + (size_t)j0 * Dp, Dp, ATT_B, Dp, 1,
             diag ? ATT_TRI_KHI : ATT_FULL);
        }
        for (int r = 0; r < ATT_B && i0 + r < sh->T; r++) {
            int t = i0 + r;
            float inv = (float)(1.0 / w->l[r]);
            const float *o = w->o + (size_t)r * Dp;
            float *y = out + (size_t)t * ldq;
            for (int d = 0; d < sh->D; d++)
                y[d] = o[d] * inv;
            stats[2 * t] = w->m[r];
            stats[2 * t + 1] = inv;
        }
    }
}

/* Backward, one block: w->s (raw scores) becomes the probabilities
 * exp(score - max) / sum from the forward's statistics, 0 where masked. */
ATT_TARGET static void FN(bwd_probs)(const att_shape *sh, float *restrict s, const float *restrict stats,
                                     int i0, int j0) {
    const float scale = sh->scale;
    for (int r = 0; r < ATT_B; r++) {
        float *sr = s + (size_t)r * ATT_B;
        int lo, hi, t = i0 + r;
        if (!att_visible(sh, t, j0, &lo, &hi)) {
            memset(sr, 0, ATT_B * sizeof(float));
            continue;
        }
        float m = stats[2 * t], inv = stats[2 * t + 1];
        VT vlo = SPLAT((float)lo), vhi = SPLAT((float)hi);
        for (int c = 0; c < ATT_B; c += ATT_VW)
            STV(sr + c,
                FN(vsel)(FN(vvisible)(c, vlo, vhi), FN(vexp)(LDV(sr + c) * scale - m) * inv, SPLAT(0.0f)));
    }
}

/* ds (holding dP = dO V^T) becomes dS = P (dP - rowsum(dO o O)) * scale,
 * 0 where P is (dP is not computed above the diagonal). */
ATT_TARGET static void FN(bwd_dscores)(const att_shape *sh, const float *restrict p, float *restrict ds,
                                       const float *restrict di, int i0) {
    const float scale = sh->scale;
    for (int r = 0; r < ATT_B; r++) {
        const float *pr = p + (size_t)r * ATT_B;
        float *dr = ds + (size_t)r * ATT_B, dd = di[i0 + r];
        for (int c = 0; c < ATT_B; c += ATT_VW) {
            VT pv = LDV(pr + c);
            STV(dr + c, FN(vsel)(pv != SPLAT(0.0f), pv * (LDV(dr + c) - dd) * scale, SPLAT(0.0f)));
        }
    }
}

/* The key block j0 against the query block i0 of one query head: dV_j +=
 * P^T dO_i, dQ_i += dS K_j, dK_j += dS^T Q_i. */
ATT_TARGET static void FN(bwd_pair)(const att_shape *sh, att_work *w, const float *stats, int i0, int j0) {
    const int Dp = w->Dp;
    const float *qi = w->qp + (size_t)i0 * Dp, *doi = w->dop + (size_t)i0 * Dp;
    int diag = i0 == j0;
    FN(block)
    (w->s, ATT_B, qi, Dp, 1, w->kt + (size_t)j0 * Dp, ATT_B, Dp, ATT_B, 0, diag ? ATT_TRI_COLS : ATT_FULL);
    FN(bwd_probs)(sh, w->s, stats, i0, j0);
    FN(block)
    (w->dva + (size_t)j0 * Dp, Dp, w->s, 1, ATT_B, doi, Dp, ATT_B, Dp, 1, diag ? ATT_TRI_KLO : ATT_FULL);
    FN(block)
    (w->ds, ATT_B, doi, Dp, 1, w->vt + (size_t)j0 * Dp, ATT_B, Dp, ATT_B, 0, diag ? ATT_TRI_COLS : ATT_FULL);
    FN(bwd_dscores)(sh, w->s, w->ds, w->di, i0);
    FN(block)
    (w->dqa + (size_t)i0 * Dp, Dp, w->ds, ATT_B, 1, w->kp + (size_t)j0 * Dp, Dp, ATT_B, Dp, 1,
     diag ? ATT_TRI_KHI : ATT_FULL);
    FN(block)
    (w->dka + (size_t)j0 * Dp, Dp, w->ds, 1, ATT_B, qi, Dp, ATT_B, Dp, 1, diag ? ATT_TRI_KLO : ATT_FULL);
}

/* One (batch, kv head) with its G query heads, in order: dq of those heads,
 * dk and dv of the kv head (FlashAttention-2's loop: key blocks outside,
 * the query blocks that see them inside). */
ATT_TARGET static void FN(bwd_group)(const att_shape *sh, att_work *w, const att_task *tk) {
    const int nb = sh->Tp / ATT_B, T = sh->T, D = sh->D;
    att_pack_rows(w->kp, tk->k, tk->ldk, sh, w->Dp);
    att_pack_cols(w->kt, tk->k, tk->ldk, sh, w->Dp);
    att_pack_cols(w->vt, tk->v, tk->ldk, sh, w->Dp);
    memset(w->dka, 0, sizeof(float) * sh->Tp * w->Dp);
    memset(w->dva, 0, sizeof(float) * sh->Tp * w->Dp);
    for (int g = 0; g < tk->G; g++) {
        att_pack_rows(w->qp, tk->q + (size_t)g * D, tk->ldq, sh, w->Dp);
        att_pack_rows(w->dop, tk->dout + (size_t)g * D, tk->ldq, sh, w->Dp);
        att_row_dots(w->di, tk->dout + (size_t)g * D, tk->out + (size_t)g * D, tk->ldq, sh);
        memset(w->dqa, 0, sizeof(float) * sh->Tp * w->Dp);
        const float *stats = tk->stats + (size_t)g * 2 * T;
        for (int jb = 0; jb < nb; jb++) {
            int j0 = jb * ATT_B, ihi = nb - 1;
            if (sh->window > 0 && (j0 + ATT_B - 1 + sh->window - 1) / ATT_B < ihi)
                ihi = (j0 + ATT_B - 1 + sh->window - 1) / ATT_B; /* the last row that sees key j0 + B - 1 */
            for (int ib = jb; ib <= ihi; ib++)
                FN(bwd_pair)(sh, w, stats, ib * ATT_B, j0);
        }
        if (tk->dq != NULL)
            att_unpack_add(tk->dq + (size_t)g * D, tk->ldq, w->dqa, sh, w->Dp);
    }
    if (tk->dk != NULL)
        att_unpack_add(tk->dk, tk->ldk, w->dka, sh, w->Dp);
    if (tk->dv != NULL)
        att_unpack_add(tk->dv, tk->ldk, w->dva, sh, w->Dp);
}

#undef VT
#undef VI
#undef SPLAT
#undef LDV
#undef STV
#undef FN
#undef ATT_CAT
#undef ATT_CAT2
