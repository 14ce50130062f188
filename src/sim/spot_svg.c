/* The spot-sim plot: samples/s over time per policy, the available node count
 * beneath (one SVG, no dependencies). */
#include <stdio.h>
#include <string.h>

#include "autohet/spot_sim.h"

static const char *colors[AH_POLICY_N] = {"#1f77b4", "#d62728", "#7f7f7f"};

int ah_spot_write_svg(const ah_spot_result *r, const char *title, const char *path, char *err,
                      size_t errlen) {
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open for writing", path);
        return -1;
    }
    const double W = 960, L = 70, R = 20, T = 40, H1 = 250, GAP = 40, H2 = 90, B = 40;
    const double H = T + H1 + GAP + H2 + B, pw = W - L - R;
    double t0 = r->n_points ? r->t[0] : 0, span = r->duration_s > 0 ? r->duration_s : 1, ymax = 0;
    for (int p = 0; p < AH_POLICY_N; p++)
        for (int i = 0; r->pol[p].enabled && i < r->pol[p].n_seg; i++)
            if (r->pol[p].seg[i].samples_per_s > ymax)
                ymax = r->pol[p].seg[i].samples_per_s;
    ymax = ymax > 0 ? ymax * 1.1 : 1;
    int nmax = r->max_nodes > 0 ? r->max_nodes : 1;
#define X(t) (L + ((t)-t0) / span * pw)
#define Y1(v) (T + H1 - (v) / ymax * H1)
#define Y2(v) (T + H1 + GAP + H2 - (double)(v) / nmax * H2)
    fprintf(
        f,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
        "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
        "<text x=\"%.0f\" y=\"22\" font-size=\"15\">%s</text>\n",
        W, H, L, title);
    /* axes and grid */
    for (int k = 0; k <= 4; k++) {
        double v = ymax / 1.1 * k / 4;
        fprintf(f,
                "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.3g</text>\n",
                L, L + pw, Y1(v), Y1(v), L - 6, Y1(v) + 4, v);
    }
    fprintf(f,
            "<text transform=\"translate(16,%.1f) rotate(-90)\" text-anchor=\"middle\">samples/s</text>\n"
            "<text transform=\"translate(16,%.1f) rotate(-90)\" text-anchor=\"middle\">nodes</text>\n",
            T + H1 / 2, T + H1 + GAP + H2 / 2);
    double hours = span / 3600;
    int step_h = hours > 24 ? 4 : hours > 6 ? 1 : 0;
    for (int k = 0; k <= 10; k++) {
        double tt = t0 + span * k / 10;
        fprintf(f,
                "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>"
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.*f h</text>\n",
                X(tt), X(tt), T, T + H1 + GAP + H2, X(tt), H - B + 16, step_h ? 1 : 2, (tt - t0) / 3600);
    }
    /* throughput per policy: a step line */
    int ly = 0;
    for (int p = 0; p < AH_POLICY_N; p++) {
        const ah_spot_policy_result *pr = &r->pol[p];
        if (!pr->enabled)
            continue;
        fprintf(f, "<path fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" d=\"", colors[p]);
        for (int i = 0; i < pr->n_seg; i++) {
            const ah_spot_segment *s = &pr->seg[i];
            fprintf(f, "%s%.1f,%.1f L%.1f,%.1f ", i ? "L" : "M", X(s->t0), Y1(s->samples_per_s), X(s->t1),
                    Y1(s->samples_per_s));
        }
        fprintf(f, "\"/>\n");
        fprintf(f,
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"3\" fill=\"%s\"/><text x=\"%.1f\" "
                "y=\"%.1f\">%s: %.3g samples/s on average, %.1f h down</text>\n",
                L + pw - 330, T + 8 + 16.0 * ly, colors[p], L + pw - 310, T + 12 + 16.0 * ly,
                ah_spot_policy_name((ah_spot_policy)p), pr->avg_samples_per_s, pr->downtime_s / 3600);
        ly++;
    }
    /* available nodes */
    fprintf(f, "<path fill=\"#cfe3cf\" stroke=\"#2ca02c\" d=\"M%.1f,%.1f ", X(t0), Y2(0));
    for (int i = 0; i < r->n_points; i++) {
        double te = i + 1 < r->n_points ? r->t[i + 1] : t0 + span;
        fprintf(f, "L%.1f,%.1f L%.1f,%.1f ", X(r->t[i]), Y2(r->nodes[i]), X(te), Y2(r->nodes[i]));
    }
    fprintf(f, "L%.1f,%.1f Z\"/>\n", X(t0 + span), Y2(0));
    fprintf(f,
            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%d</text><text x=\"%.1f\" y=\"%.1f\" "
            "text-anchor=\"end\">0</text>\n",
            L - 6, Y2(nmax) + 4, nmax, L - 6, Y2(0) + 4);
    fprintf(f, "</svg>\n");
#undef X
#undef Y1
#undef Y2
    if (fclose(f) != 0) {
        snprintf(err, errlen, "%s: write failed", path);
        return -1;
    }
    return 0;
}
