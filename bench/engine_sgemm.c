/* sgemm rate of the linked BLAS on the shapes the engine runs: the start-up
 * probe of autohet train (384^3, NN) and the GPT-2 124M linears (X[N,K] W^T,
 * W[M,K], as kernels.c calls them) at N = B*T = 256 and 2048. One line per
 * shape: "KERNEL SHAPE GFLOP/S" (best of 7 timed rounds of >= 0.1 s), then
 * "KERNEL best GFLOP/S". The threads are OpenMP's (OMP_NUM_THREADS).
 * Built twice by CMake: against OpenBLAS (engine_sgemm; its kernel is
 * OpenBLAS's choice or OPENBLAS_CORETYPE's) and, where libblis-dev is
 * installed, against BLIS (engine_sgemm_blis), and where oneDNN is, through
 * the engine's bf16 products (engine_sgemm_bf16: ah__gemm of --precision bf16,
 * the fp32 -> bf16 rounding of both operands included in the time).
 * usage: engine_sgemm [--quick]   (--quick: 2 timed rounds, the N = 256 shapes) */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef ENGINE_SGEMM_BF16
#include "engine/gemm.h"
#endif

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#ifdef ENGINE_SGEMM_BF16
static ah_matmul_precision prec = AH_MATMUL_FP32; /* bf16 once main has checked it runs here */
#endif

/* GFLOP/s of C[N,M] = A[N,K] B^T (B[M,K]), or A B (B[K,M]) with nn */
static double rate(int N, int K, int M, int nn, int rounds) {
    float *a = malloc(sizeof(float) * (size_t)N * K), *b = malloc(sizeof(float) * (size_t)K * M),
          *c = malloc(sizeof(float) * (size_t)N * M);
    if (!a || !b || !c)
        abort();
    for (size_t i = 0; i < (size_t)N * K; i++)
        a[i] = (float)(i % 7) * 0.01f;
    for (size_t i = 0; i < (size_t)K * M; i++)
        b[i] = (float)(i % 5) * 0.02f;
    double best = 0;
    for (int r = 0; r < rounds; r++) {
        double t0 = now_s(), dt;
        long calls = 0;
        do {
#ifdef ENGINE_SGEMM_BF16
            ah__gemm_p(prec, 0, !nn, N, M, K, a, K, b, nn ? M : K, 0.0f, c, M);
#else
            if (nn)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, M, K, 1.0f, a, K, b, M, 0.0f, c, M);
            else
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, M, K, 1.0f, a, K, b, K, 0.0f, c, M);
#endif
            calls++;
        } while ((dt = now_s() - t0) < 0.1);
        double f = 2.0 * N * (double)K * M * (double)calls / dt;
        if (f > best)
            best = f;
    }
    free(a);
    free(b);
    free(c);
    return best / 1e9;
}

#if defined(ENGINE_SGEMM_BF16)
static const char *kernel_name(void) {
    return "oneDNN-bf16";
}
#elif defined(ENGINE_SGEMM_BLIS)
static const char *kernel_name(void) {
    return "BLIS";
}
#else
static const char *kernel_name(void) {
    return openblas_get_corename();
}
#endif

int main(int argc, char **argv) {
    int rounds = argc > 1 && !strcmp(argv[1], "--quick") ? 2 : 7;
#ifdef ENGINE_SGEMM_BF16
    char why[200];
    if (ah_matmul_precision_parse("bf16", &prec, why, sizeof why) != 0) {
        fprintf(stderr, "engine_sgemm_bf16: %s\n", why);
        return 2;
    }
#endif
    static const struct {
        const char *name;
        int N, K, M, nn;
    } shapes[] = {
        {"probe-384^3", 384, 384, 384, 1},      {"qkv-256x768x2304", 256, 768, 2304, 0},
        {"fc-256x768x3072", 256, 768, 3072, 0}, {"proj-256x3072x768", 256, 3072, 768, 0},
        {"head-256x768x50304", 256, 768, 50304, 0}, {"qkv-2048x768x2304", 2048, 768, 2304, 0},
        {"fc-2048x768x3072", 2048, 768, 3072, 0}, {"head-2048x768x50304", 2048, 768, 50304, 0},
    };
    double best = 0;
    /* --quick: the N = 256 shapes only (one N = 2048 head product is 158 GFLOP) */
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        if (rounds == 2 && shapes[i].N == 2048)
            continue;
        double g = rate(shapes[i].N, shapes[i].K, shapes[i].M, shapes[i].nn, rounds);
        printf("%s %s %.1f\n", kernel_name(), shapes[i].name, g);
        if (g > best)
            best = g;
    }
    printf("%s best %.1f\n", kernel_name(), best);
    return 0;
}
