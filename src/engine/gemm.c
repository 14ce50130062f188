/* Linear-layer products in fp32 or bf16 (see gemm.h). */
#include "engine/gemm.h"

#include <cblas.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/blas_select.h"
#include "engine/kernels_vec.h"
#include "util/errors.h"

#ifdef AUTOHET_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

const char *ah_matmul_precision_name(ah_matmul_precision p) {
    return p == AH_MATMUL_BF16 ? "bf16" : "fp32";
}

int ah__gemm_bf16_available(char *why, size_t n) {
    ah_cpu_features f;
    ah__cpu_features_detect(&f);
    if (!(f.os_zmm && f.avx512f && f.avx512bf16)) {
        snprintf(why, n, "this CPU has no AVX512_BF16 (cpuid), so bf16 matmuls would be emulated and slower: "
                         "use --precision fp32");
        return 0;
    }
#ifndef AUTOHET_HAVE_DNNL
    snprintf(why, n, "this build has no oneDNN (libdnnl-dev), which runs the bf16 matmuls: use --precision fp32");
    return 0;
#else
    return 1;
#endif
}

int ah_matmul_precision_parse(const char *name, ah_matmul_precision *out, char *why, size_t n) {
    if (!strcmp(name, "fp32")) {
        *out = AH_MATMUL_FP32;
        return 0;
    }
    if (strcmp(name, "bf16") != 0) {
        snprintf(why, n, "expected fp32 or bf16");
        return -1;
    }
    if (!ah__gemm_bf16_available(why, n))
        return -1;
    *out = AH_MATMUL_BF16;
    return 0;
}

#ifdef AUTOHET_HAVE_DNNL
/* Growing scratch for the bf16 copies of the operands (the engine calls from one thread). */
static uint16_t *scratch(int which, size_t elems) {
    static uint16_t *buf[2];
    static size_t cap[2];
    if (elems > cap[which]) {
        free(buf[which]);
        buf[which] = malloc(elems * sizeof(uint16_t));
        if (buf[which] == NULL)
            ah_out_of_memory(elems * sizeof(uint16_t));
        cap[which] = elems;
    }
    return buf[which];
}

/* rows x cols of src (leading dimension ld) to bf16, packed (leading dimension cols) */
static uint16_t *to_bf16(int which, const float *src, int rows, int cols, int ld) {
    uint16_t *dst = scratch(which, (size_t)rows * cols);
    if (ld == cols) {
        ah__vec_par_to_bf16(dst, src, (size_t)rows * cols);
    } else {
        for (int r = 0; r < rows; r++)
            ah__vec_par_to_bf16(dst + (size_t)r * cols, src + (size_t)r * ld, (size_t)cols);
    }
    return dst;
}

/* The bf16 copies of the weights (the B operands of ah__gemm_weight): one per
 * weight region, converted on its first use after a write (the optimizer's
 * update, a load) and reused by every product until the next write, so a
 * step converts each weight once, not once per GEMM and micro-batch. The
 * buffer of a stale copy is reused for the next conversion; it is freed when
 * the weight's memory is (ah__gemm_weights_released). */
typedef struct {
    const float *w; /* the fp32 master: the packed region w[0 .. n) */
    size_t n;
    uint16_t *bf; /* its bf16 rounding, current when fresh */
    int fresh;
} weight_copy;
static weight_copy *g_copies;
static size_t g_n_copies, g_cap_copies;

static int overlaps(const weight_copy *c, const void *p, size_t bytes) {
    const char *lo = (const char *)c->w, *hi = lo + c->n * sizeof(float), *q = (const char *)p;
    return q < hi && q + bytes > lo;
}

static weight_copy *copy_of(const float *w, size_t n) {
    for (size_t i = 0; i < g_n_copies; i++)
        if (g_copies[i].w == w && g_copies[i].n == n)
            return &g_copies[i];
    if (g_n_copies == g_cap_copies) {
        g_cap_copies = g_cap_copies ? 2 * g_cap_copies : 64;
        g_copies = realloc(g_copies, g_cap_copies * sizeof *g_copies);
    }
    uint16_t *bf = malloc(n * sizeof(uint16_t));
    if (g_copies == NULL || bf == NULL)
        ah_out_of_memory(n * sizeof(uint16_t));
    g_copies[g_n_copies] = (weight_copy){.w = w, .n = n, .bf = bf, .fresh = 0};
    return &g_copies[g_n_copies++];
}

/* The current bf16 copy of the packed weight w[0 .. n) */
static const uint16_t *weight_bf16(const float *w, size_t n) {
    weight_copy *c = copy_of(w, n);
    if (!c->fresh) {
        ah__vec_par_to_bf16(c->bf, w, n);
        c->fresh = 1;
    }
    return c->bf;
}
#endif

void ah__gemm_weights_written(const void *p, size_t bytes) {
#ifdef AUTOHET_HAVE_DNNL
    for (size_t i = 0; i < g_n_copies; i++)
        if (overlaps(&g_copies[i], p, bytes))
            g_copies[i].fresh = 0;
#else
    (void)p, (void)bytes;
#endif
}

void ah__gemm_weights_released(const void *p, size_t bytes) {
#ifdef AUTOHET_HAVE_DNNL
    for (size_t i = 0; i < g_n_copies;)
        if (overlaps(&g_copies[i], p, bytes)) {
            free(g_copies[i].bf);
            g_copies[i] = g_copies[--g_n_copies];
        } else {
            i++;
        }
#else
    (void)p, (void)bytes;
#endif
}

#ifdef AUTOHET_HAVE_DNNL
static void dnnl_check(dnnl_status_t s, const char *what) {
    if (s != dnnl_success) {
        fprintf(stderr, "autohet gemm: oneDNN %s failed (status %d)\n", what, (int)s);
        abort();
    }
}

static dnnl_engine_t g_eng;
static dnnl_stream_t g_stream;

/* A 2-D bf16/f32 descriptor of dims {d0, d1} whose element (i, j) is at i*s0 + j*s1 */
static void desc(dnnl_memory_desc_t *md, int d0, int d1, long s0, long s1, dnnl_data_type_t dt) {
    dnnl_dims_t dims = {d0, d1}, strides = {s0, s1};
    dnnl_check(dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides), "memory_desc_init");
}

/* C = op(a) op(b) + beta C on bf16 operands packed as ah__gemm's A and B would be (leading
 * dimension: their column count) */
static void matmul_bf16(int ta, int tb, int M, int N, int K, const uint16_t *a, const uint16_t *b, float beta,
                        float *C, int ldc) {
    if (g_eng == NULL) {
        dnnl_check(dnnl_engine_create(&g_eng, dnnl_cpu, 0), "engine_create");
        dnnl_check(dnnl_stream_create(&g_stream, g_eng, dnnl_stream_default_flags), "stream_create");
    }
    dnnl_memory_desc_t ad, bd, cd;
    desc(&ad, M, K, ta ? 1 : K, ta ? M : 1, dnnl_bf16);
    desc(&bd, K, N, tb ? 1 : N, tb ? K : 1, dnnl_bf16);
    desc(&cd, M, N, ldc, 1, dnnl_f32);
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    if (beta != 0.0f) { /* C += A B: a sum post-op */
        dnnl_check(dnnl_primitive_attr_create(&attr), "attr_create");
        dnnl_check(dnnl_post_ops_create(&po), "post_ops_create");
        dnnl_check(dnnl_post_ops_append_sum(po, beta), "append_sum");
        dnnl_check(dnnl_primitive_attr_set_post_ops(attr, po), "set_post_ops");
    }
    dnnl_matmul_desc_t mmd;
    dnnl_check(dnnl_matmul_desc_init(&mmd, &ad, &bd, NULL, &cd), "matmul_desc_init");
    dnnl_primitive_desc_t pd;
    dnnl_check(dnnl_primitive_desc_create(&pd, &mmd, attr, g_eng, NULL), "primitive_desc_create");
    dnnl_primitive_t prim; /* oneDNN's primitive cache makes a repeated shape cheap */
    dnnl_check(dnnl_primitive_create(&prim, pd), "primitive_create");
    dnnl_memory_t am, bm, cm;
    dnnl_check(dnnl_memory_create(&am, &ad, g_eng, (void *)a), "memory_create");
    dnnl_check(dnnl_memory_create(&bm, &bd, g_eng, (void *)b), "memory_create");
    dnnl_check(dnnl_memory_create(&cm, &cd, g_eng, C), "memory_create");
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
    dnnl_check(dnnl_primitive_execute(prim, g_stream, 3, args), "execute");
    dnnl_check(dnnl_stream_wait(g_stream), "stream_wait");
    dnnl_memory_destroy(am);
    dnnl_memory_destroy(bm);
    dnnl_memory_destroy(cm);
    dnnl_primitive_destroy(prim);
    dnnl_primitive_desc_destroy(pd);
    if (attr) {
        dnnl_post_ops_destroy(po);
        dnnl_primitive_attr_destroy(attr);
    }
}

/* op(A)[m,k]: A is [M,K] (ta = 0) or [K,M] (ta = 1) in memory; likewise B */
static void gemm_bf16(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                      float beta, float *C, int ldc) {
    const uint16_t *a = ta ? to_bf16(0, A, K, M, lda) : to_bf16(0, A, M, K, lda);
    const uint16_t *b = tb ? to_bf16(1, B, N, K, ldb) : to_bf16(1, B, K, N, ldb);
    matmul_bf16(ta, tb, M, N, K, a, b, beta, C, ldc);
}
#endif

void ah__gemm_p(ah_matmul_precision p, int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B,
               int ldb, float beta, float *C, int ldc) {
#ifdef AUTOHET_HAVE_DNNL
    if (p == AH_MATMUL_BF16) {
        gemm_bf16(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
        return;
    }
#else
    (void)p;
#endif
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, A,
                lda, B, ldb, beta, C, ldc);
}

void ah__gemm(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb, float beta,
             float *C, int ldc) {
    ah__gemm_p(AH_MATMUL_FP32, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

void ah__gemm_weight_p(ah_matmul_precision p, int ta, int tb, int M, int N, int K, const float *A, int lda,
                      const float *W, int ldw, float beta, float *C, int ldc) {
#ifdef AUTOHET_HAVE_DNNL
    /* a packed W (no row padding) is one region: its bf16 copy serves W and W^T alike */
    if (p == AH_MATMUL_BF16 && ldw == (tb ? K : N)) {
        const uint16_t *a = ta ? to_bf16(0, A, K, M, lda) : to_bf16(0, A, M, K, lda);
        matmul_bf16(ta, tb, M, N, K, a, weight_bf16(W, (size_t)K * N), beta, C, ldc);
        return;
    }
#endif
    ah__gemm_p(p, ta, tb, M, N, K, A, lda, W, ldw, beta, C, ldc);
}

void ah__gemm_weight(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *W, int ldw,
                    float beta, float *C, int ldc) {
    ah__gemm_weight_p(AH_MATMUL_FP32, ta, tb, M, N, K, A, lda, W, ldw, beta, C, ldc);
}
