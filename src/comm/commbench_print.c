/* The tables of `autohet commbench` (docs/commbench.md): autohet's own
 * columns, OSU micro-benchmarks' (osu_latency, osu_bw, osu_<collective> -f)
 * and nccl-tests'. */
#include <stdio.h>
#include <string.h>

#include "autohet/commbench_print.h"

static const char *osu_title(ah_comm_op op) {
    static const char *t[AH_OP_COUNT] = {"Latency",
                                         "Bandwidth",
                                         "Allreduce Latency",
                                         "Allgather Latency",
                                         "Reduce_scatter Latency",
                                         "Broadcast Latency",
                                         "All-to-All Personalized Exchange Latency"};
    return op >= 0 && op < AH_OP_COUNT ? t[op] : "?";
}

int ah_commbench_format_parse(const char *s, ah_commbench_format *out) {
    static const char *names[] = {"default", "osu", "nccl-tests"};
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, names[i])) {
            *out = (ah_commbench_format)i;
            return 0;
        }
    return -1;
}

void ah_commbench_print_header(ah_commbench_format fmt, const ah_commbench_case *c, const char *cls,
                               int ranks) {
    char who[64];
    if (c->op <= AH_OP_BW)
        snprintf(who, sizeof who, "ranks %d-%d", c->src, c->dst);
    else
        snprintf(who, sizeof who, "%d ranks", ranks);
    if (fmt == AH_FORMAT_OSU) {
        printf("\n# OSU MPI %s Test (autohet commbench, %s, %s)\n", osu_title(c->op), who, cls);
        if (c->op == AH_OP_LATENCY)
            printf("# Size          Latency (us)\n");
        else if (c->op == AH_OP_BW)
            printf("# Size      Bandwidth (MB/s)\n");
        else
            printf("# Size       Avg Latency(us)   Min Latency(us)   Max Latency(us)  Iterations\n");
        return;
    }
    if (fmt == AH_FORMAT_NCCL) {
        printf("\n# nccl-tests columns: %s (autohet commbench, %s, %s)\n", ah_comm_op_name(c->op), who, cls);
        printf("#%62s%35s\n", "out-of-place", "in-place");
        printf("#%11s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "size", "count",
               "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
               "#wrong");
        printf("#%11s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "(B)", "(elements)",
               "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
        return;
    }
    printf("\n# %s (%s, %s)\n", ah_comm_op_name(c->op), who, cls);
    printf("%12s %6s %10s %10s %10s %10s %10s %10s %11s %11s %7s\n", "bytes", "iters", "min us", "avg us",
           "max us", "median us", "ci95 lo", "ci95 hi", "algbw GB/s", "busbw GB/s", "#wrong");
}

/* nccl-tests prints big times without decimals */
static void nccl_time(char *buf, size_t n, double us) {
    snprintf(buf, n, us < 10000 ? "%7.2f" : "%7.0f", us);
}

void ah_commbench_print_row(ah_commbench_format fmt, const ah_commbench_case *c, const ah_comm_result *r,
                            const ah_comm_result *in_place) {
    if (fmt == AH_FORMAT_OSU) {
        if (c->op == AH_OP_LATENCY)
            printf("%-10zu%18.2f\n", r->bytes, r->avg_us);
        else if (c->op == AH_OP_BW) /* OSU's MB is 10^6 bytes */
            printf("%-10zu%18.2f\n", r->bytes, (double)r->bytes / r->avg_us);
        else
            printf("%-10zu%18.2f%18.2f%18.2f%12d\n", r->bytes, r->avg_us, r->min_us, r->max_us, r->iters);
        return;
    }
    if (fmt == AH_FORMAT_NCCL) {
        char t0[32], t1[32] = "N/A";
        nccl_time(t0, sizeof t0, r->avg_us);
        if (in_place)
            nccl_time(t1, sizeof t1, in_place->avg_us);
        printf("%12zu  %12zu  %8s  %6s  %6d  %7s  %6.2f  %6.2f  %6ld  %7s  %6.2f  %6.2f  %6ld\n", r->bytes,
               ah_commbench_count(c->op, r->bytes), ah_commbench_type_name(c->op),
               ah_commbench_redop_name(c->op), ah_commbench_root(c->op), t0, r->algbw_gbs, r->busbw_gbs,
               r->wrong, t1, in_place ? in_place->algbw_gbs : 0, in_place ? in_place->busbw_gbs : 0,
               in_place ? in_place->wrong : 0);
        return;
    }
    printf("%12zu %6d %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f %11.3f %11.3f %7ld\n", r->bytes, r->iters,
           r->min_us, r->avg_us, r->max_us, r->median_us, r->ci_low_us, r->ci_high_us, r->algbw_gbs,
           r->busbw_gbs, r->wrong);
}

/* a regime without a visible bandwidth term has beta = 1e9 GB/s: "inf" */
static const char *beta_text(double gbs, char *buf, size_t n) {
    if (gbs >= 1e6)
        snprintf(buf, n, "inf");
    else
        snprintf(buf, n, "%.3f", gbs);
    return buf;
}

void ah_commbench_print_fit(ah_commbench_format fmt, const ah_comm_fit *line, const ah_comm_piecewise *pw,
                            int n, const char *statistic) {
    (void)fmt; /* '#' lines are comments in every format */
    const char *p = "";
    printf("%s# fit: time = alpha + bytes / beta per regime (%s times, break points from the data):\n", p,
           statistic);
    for (int q = 0; q < pw->n_regimes; q++) {
        const ah_comm_regime *g = &pw->regime[q];
        char bt[32];
        printf("%s#   %zu-%zu B: %.2f us + bytes / %s GB/s, largest relative error %.1f%% (%.3g us) over %d "
               "sizes\n",
               p, g->min_bytes, g->max_bytes, g->fit.alpha_us, beta_text(g->fit.beta_gbs, bt, sizeof bt),
               100 * g->fit.max_rel_error, g->fit.max_abs_error_us, g->fit.n_sizes);
    }
    char bt[32];
    printf("%s#   %d regime%s: largest relative error %.1f%% over %d sizes (one line: %.2f us + bytes / %s "
           "GB/s, "
           "%.1f%%)\n",
           p, pw->n_regimes, pw->n_regimes == 1 ? "" : "s", 100 * pw->max_rel_error, n, line->alpha_us,
           beta_text(line->beta_gbs, bt, sizeof bt), 100 * line->max_rel_error);
}

void ah_commbench_print_summary(ah_commbench_format fmt, long wrong, double busbw_sum, int rows) {
    if (fmt == AH_FORMAT_NCCL) {
        printf("# Out of bounds values : %ld %s\n", wrong, wrong ? "FAILED" : "OK");
        printf("# Avg bus bandwidth    : %g \n", rows ? busbw_sum / rows : 0.0);
    } else if (wrong)
        printf("# correctness check: %ld wrong elements\n", wrong);
}
