/* Calibration benchmark: fits the GEMM model to the Sailor profiles under a
 * directory (all GPU types), then validates leave-one-type-out: for every GPU
 * type, fit without it and report the median / p90 relative error of its
 * per-layer times. Prints markdown (docs/calibration.md, BENCHMARKS.md).
 *
 *     calib_bench SAILOR_DIR      e.g. /work/shared/data/profiles/sailor */
#include <stdio.h>
#include <string.h>

#include "autohet/device.h"
#include "cost/calib.h"

#define MAX_TYPES 16

static int collect_types(const ah_calib_set *set, const char *types[MAX_TYPES]) {
    int n = 0;
    for (int i = 0; i < set->n_pts; i++) {
        int seen = 0;
        for (int j = 0; j < n && !seen; j++)
            seen = strcmp(types[j], set->pts[i].type) == 0;
        if (!seen && n < MAX_TYPES)
            types[n++] = set->pts[i].type;
    }
    return n;
}

static void cell(ah_calib_err e) {
    if (e.n == 0)
        printf(" — |");
    else
        printf(" %.1f / %.1f |", 100 * e.median, 100 * e.p90);
}

static void print_fit(const ah_calib_params *p) {
    printf("| constant | fitted (all types) |\n|---|---|\n");
    for (int c = 0; c < AH_CALIB_NCLASS; c++)
        printf("| max GEMM efficiency, %s | %.3f%s |\n", ah_gpu_arch_name(c), p->eff[c],
               p->fitted[c] ? "" : " (no data: median)");
    printf("| kernel launch overhead | %.2f µs |\n", p->c.launch_s * 1e6);
    printf("| element-wise bandwidth efficiency | %.3f |\n", p->c.ew_eff);
    printf("| backward / forward element-wise traffic | %.3f |\n\n", p->c.ew_bwd);
}

static void print_row(const ah_calib_set *set, const char *type, const ah_calib_params *p, const char *label) {
    int cls = ah_gpu_arch_of(type);
    printf("| %s | %s%s | %.3f |", type, ah_gpu_arch_name(cls), label, p->eff[cls]);
    cell(ah_calib_errors(set, p, type, AH_SEL_BLOCK_TP1, 0));
    cell(ah_calib_errors(set, p, type, AH_SEL_BLOCK_TP1, 1));
    cell(ah_calib_errors(set, p, type, AH_SEL_BLOCK_ALL, 0));
    cell(ah_calib_errors(set, p, type, AH_SEL_BLOCK_ALL, 1));
    cell(ah_calib_errors(set, p, type, AH_SEL_EMBED, 0));
    cell(ah_calib_errors(set, p, type, AH_SEL_HEAD, 0));
    cell(ah_calib_errors(set, p, type, AH_SEL_HEAD, 1));
    printf("\n");
}

static void print_header(void) {
    printf("| held-out GPU | architecture | efficiency used | blocks TP=1 fwd | blocks TP=1 bwd "
           "| blocks all TP fwd | blocks all TP bwd | embedding fwd | head fwd | head bwd |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|\n");
}

int main(int argc, char **argv) {
    if (argc != 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: calib_bench SAILOR_DIR\n");
        return 2;
    }
    ah_calib_set set;
    char err[512];
    if (ah_calib_load(argv[1], &set, err, sizeof err) != 0) {
        fprintf(stderr, "calib_bench: %s\n", err);
        return 2;
    }
    ah_calib_params all;
    if (ah_calib_fit(&set, NULL, &all) != 0) {
        fprintf(stderr, "calib_bench: %s: no TP=1 transformer-block times to fit\n", argv[1]);
        ah_calib_free(&set);
        return 2;
    }
    print_fit(&all);

    const char *types[MAX_TYPES];
    int nt = collect_types(&set, types);
    printf("Leave-one-type-out: median / p90 relative error (%%) of the held-out type's per-layer times.\n\n");
    print_header();
    for (int i = 0; i < nt; i++) {
        ah_calib_params p;
        if (ah_calib_fit(&set, types[i], &p) != 0)
            continue;
        int cls = ah_gpu_arch_of(types[i]);
        print_row(&set, types[i], &p, cls >= 0 && p.fitted[cls] ? "" : " (unseen: median)");
    }
    printf("\nIn-sample (fit on all types), for comparison:\n\n");
    print_header();
    for (int i = 0; i < nt; i++)
        print_row(&set, types[i], &all, "");
    printf("\n%d embedding/head points left out (models whose head holds no LM-head GEMM).\n",
           set.n_edge_dropped);
    ah_calib_free(&set);
    return 0;
}
