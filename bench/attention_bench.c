/* The attention kernel alone, forward + backward, the flash-style kernel
 * (src/engine/attention.c) against the engine's earlier attention
 * (tests/attention_reference.c), side by side: rounds alternate between the
 * two, the medians of the rounds are reported, with the largest difference of
 * the outputs and gradients (norm-relative).
 *   attention_bench [--B N] [--T T[,T..]] [--heads H] [--kv-heads H] [--head-dim D] [--window W]
 *                   [--runs N] [--kernel avx512|avx2|base]
 * Prints one line per T: T ms_old ms_new speedup maxrel. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_reference.h"
#include "engine/kernels.h"

static float *rnd(size_t n, float scale, unsigned long long *s) {
    float *p = malloc((n ? n : 1) * sizeof(float));
    if (p == NULL)
        exit(1);
    for (size_t i = 0; i < n; i++) {
        *s = *s * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = scale * (2.0f * (float)((*s >> 40) & 0xFFFFFF) / 16777216.0f - 1.0f);
    }
    return p;
}

static double rel(const float *a, const float *b, size_t n) {
    double d2 = 0, b2 = 0;
    for (size_t i = 0; i < n; i++)
        d2 += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), b2 += (double)b[i] * b[i];
    return b2 > 0 ? sqrt(d2 / b2) : sqrt(d2);
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct {
    int B, T, H, Hkv, D, W;
} shape;

/* One round of one kernel: seconds for forward + backward; the results in o, dq, dk, dv. */
static double round_of(int flash, const shape *s, const float *q, const float *k, const float *v,
                       const float *g, float *o, float *sv, float *dq, float *dk, float *dv) {
    size_t nq = (size_t)s->B * s->T * s->H * s->D, nk = (size_t)s->B * s->T * s->Hkv * s->D;
    memset(dq, 0, nq * sizeof(float)), memset(dk, 0, nk * sizeof(float)), memset(dv, 0, nk * sizeof(float));
    double t0 = omp_get_wtime();
    if (flash) {
        ah__attention_fwd_window(o, sv, q, k, v, s->B, s->T, s->H, s->Hkv, s->D, s->W);
        ah__attention_bwd(dq, dk, dv, g, o, sv, q, k, v, s->B, s->T, s->H, s->Hkv, s->D, s->W);
    } else {
        ah_attention_fwd_window_reference(o, sv, q, k, v, s->B, s->T, s->H, s->Hkv, s->D, s->W);
        ah_attention_bwd_reference(dq, dk, dv, g, sv, q, k, v, s->B, s->T, s->H, s->Hkv, s->D);
    }
    return omp_get_wtime() - t0;
}

static void bench_one(const shape *s, int runs) {
    unsigned long long seed = 42;
    size_t nq = (size_t)s->B * s->T * s->H * s->D, nk = (size_t)s->B * s->T * s->Hkv * s->D;
    float *q = rnd(nq, 1.5f, &seed), *k = rnd(nk, 1.5f, &seed), *v = rnd(nk, 1.0f, &seed),
          *g = rnd(nq, 1.0f, &seed);
    float *res[2][4];
    float *sv[2] = {malloc((size_t)s->B * s->H * s->T * s->T * sizeof(float)),
                    malloc((size_t)s->B * s->H * ah__attention_stats_per_head(s->T) * sizeof(float))};
    for (int f = 0; f < 2; f++) {
        res[f][0] = malloc(nq * sizeof(float)), res[f][1] = malloc(nq * sizeof(float));
        res[f][2] = malloc(nk * sizeof(float)), res[f][3] = malloc(nk * sizeof(float));
    }
    double *t[2] = {calloc((size_t)runs, sizeof(double)), calloc((size_t)runs, sizeof(double))};
    for (int r = -1; r < runs; r++) /* round -1 warms up */
        for (int f = 0; f < 2; f++) {
            double dt = round_of(f, s, q, k, v, g, res[f][0], sv[f], res[f][1], res[f][2], res[f][3]);
            if (r >= 0)
                t[f][r] = dt;
        }
    double worst = 0;
    for (int i = 0; i < 4; i++) {
        double e = rel(res[1][i], res[0][i], i < 2 ? nq : nk);
        worst = e > worst ? e : worst;
    }
    qsort(t[0], (size_t)runs, sizeof(double), cmp), qsort(t[1], (size_t)runs, sizeof(double), cmp);
    double m0 = t[0][runs / 2], m1 = t[1][runs / 2];
    printf("%d %.3f %.3f %.2f %.2e\n", s->T, m0 * 1e3, m1 * 1e3, m0 / m1, worst);
    fflush(stdout);
    for (int f = 0; f < 2; f++) {
        for (int i = 0; i < 4; i++)
            free(res[f][i]);
        free(sv[f]), free(t[f]);
    }
    free(q), free(k), free(v), free(g);
}

int main(int argc, char **argv) {
    shape s = {1, 1024, 12, 12, 64, 0};
    char tlist[256] = "64,256,1024";
    int runs = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (strcmp(a, "--B") == 0)
            s.B = atoi(v);
        else if (strcmp(a, "--T") == 0)
            snprintf(tlist, sizeof tlist, "%s", v);
        else if (strcmp(a, "--heads") == 0)
            s.H = s.Hkv = atoi(v);
        else if (strcmp(a, "--kv-heads") == 0)
            s.Hkv = atoi(v);
        else if (strcmp(a, "--head-dim") == 0)
            s.D = atoi(v);
        else if (strcmp(a, "--window") == 0)
            s.W = atoi(v);
        else if (strcmp(a, "--runs") == 0)
            runs = atoi(v);
        else if (strcmp(a, "--kernel") == 0) {
            if (ah__attention_force_kernel(v) != 0) {
                fprintf(stderr, "attention_bench: --kernel %s: unknown or not supported by this CPU\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "attention_bench: unknown flag %s\n", a);
            return 2;
        }
    }
    if (s.B < 1 || s.H < 1 || s.Hkv < 1 || s.H % s.Hkv != 0 || s.D < 1 || runs < 1) {
        fprintf(stderr,
                "attention_bench: --B, --heads, --kv-heads (dividing --heads), --head-dim, --runs: >= 1\n");
        return 2;
    }
    printf("# attention fwd+bwd, B %d, heads %d/%d, head dim %d, window %d, %d threads, kernel %s, median of "
           "%d\n",
           s.B, s.H, s.Hkv, s.D, s.W, omp_get_max_threads(), ah__attention_kernel(), runs);
    printf("# T ms_reference ms_flash speedup max_rel_diff\n");
    for (char *tok = strtok(tlist, ","); tok; tok = strtok(NULL, ",")) {
        s.T = atoi(tok);
        if (s.T < 1) {
            fprintf(stderr, "attention_bench: --T %s: expected positive lengths\n", tok);
            return 2;
        }
        bench_one(&s, runs);
    }
    return 0;
}
