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
    printf("| the profiled runtime's backward element-wise traffic, per fused-kernel count (not used by the planner: 1) | %.3f |\n\n",
           p->c.ew_bwd);
}

/* The profile's own name for the points costed as `type`. */
static const char *label_of(const ah_calib_set *set, const char *type) {
    for (int j = 0; j < set->n_pts; j++)
        if (strcmp(set->pts[j].type, type) == 0)
            return set->pts[j].label;
    return type;
}

static void print_row(const ah_calib_set *set, const char *type, const ah_calib_params *p,
                      const char *label) {
    int cls = ah_gpu_arch_of(type);
    const char *own = label_of(set, type);
    if (strcmp(own, type) != 0)
        printf("| %s profile as %s | %s%s | %.3f |", own, type, ah_gpu_arch_name(cls), label, p->eff[cls]);
    else
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

/* Every type's TP = 1 block forwards against its datasheet floor, and for an
 * identified profile the same under its label's datasheet (docs/calibration.md). */
static void print_floor(const ah_calib_set *set, const ah_calib_set *labeled, const char *const *types,
                        int nt) {
    printf(
        "Datasheet floor: each TP = 1 block forward against the same block at 100%% of the card's fp32 peak\n"
        "and memory bandwidth (GEMM FLOPs / peak + element-wise bytes / bandwidth, nothing else). A ratio\n"
        "below 1 is a time that card cannot produce.\n\n");
    printf("| profile | costed as | block forwards | measured / floor (median) | below the floor "
           "|\n|---|---|---|---|---|\n");
    for (int i = 0; i < nt; i++) {
        const char *label = label_of(set, types[i]);
        ah_calib_floor f = ah_calib_floor_check(set, types[i]);
        printf("| %s | %s | %d | %.2f | %.0f%% |\n", label, types[i], f.n, f.median_ratio,
               100 * f.frac_below);
        if (strcmp(label, types[i]) != 0) {
            ah_calib_floor g = ah_calib_floor_check(labeled, label);
            printf("| %s | %s (its label) | %d | %.2f | %.0f%% |\n", label, label, g.n, g.median_ratio,
                   100 * g.frac_below);
        }
    }
    printf("\n");
}

/* The held-out row of every identified profile under its own label. */
static void print_labeled_rows(const ah_calib_set *labeled, const char *const *types, int nt,
                               const ah_calib_set *set) {
    for (int i = 0; i < nt; i++)
        for (int j = 0; j < set->n_pts; j++) {
            const ah_calib_point *p = &set->pts[j];
            if (strcmp(p->type, types[i]) != 0 || strcmp(p->label, p->type) == 0)
                continue;
            ah_calib_params q;
            if (ah_calib_fit(labeled, p->label, &q) == 0)
                print_row(labeled, p->label, &q, " (as labelled)");
            break;
        }
}

int main(int argc, char **argv) {
    if (argc != 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: calib_bench SAILOR_DIR\n");
        return 2;
    }
    ah_calib_set set;
    char err[512];
    ah_calib_set labeled;
    if (ah_calib_load(argv[1], 0, &set, err, sizeof err) != 0 ||
        ah_calib_load(argv[1], 1, &labeled, err, sizeof err) != 0) {
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
    printf(
        "Leave-one-type-out: median / p90 relative error (%%) of the held-out type's per-layer times.\n\n");
    print_header();
    for (int i = 0; i < nt; i++) {
        ah_calib_params p;
        if (ah_calib_fit(&set, types[i], &p) != 0)
            continue;
        int cls = ah_gpu_arch_of(types[i]);
        print_row(&set, types[i], &p, cls >= 0 && p.fitted[cls] ? "" : " (unseen: median)");
    }
    print_labeled_rows(&labeled, types, nt, &set);
    printf("\nIn-sample (fit on all types), for comparison:\n\n");
    print_header();
    for (int i = 0; i < nt; i++)
        print_row(&set, types[i], &all, "");
    printf("\n%d embedding/head points left out (models whose head holds no LM-head GEMM).\n\n",
           set.n_edge_dropped);
    print_floor(&set, &labeled, types, nt);
    ah_calib_free(&set);
    ah_calib_free(&labeled);
    return 0;
}
