/* The spot-sim plot (one SVG, no dependencies): one panel per policy with its
 * samples/s over time, so that policies running at the same rate do not draw
 * over each other; each panel's header carries its numbers (average, downtime,
 * restarts, lost samples) above its frame and a dashed line marks its average; the available
 * node count is the last panel. The time axis is shared. */
#include <stdio.h>
#include <string.h>

#include "autohet/spot_sim.h"
#include "util/atomic_file.h"
#include "util/svg.h"

static const char *colors[AH_POLICY_N] = {"#1f77b4", "#d62728", "#7f7f7f"};

/* the plot's geometry: panels of height PH stacked from y = top */
typedef struct {
    double W, L, R, top, PH, GAP, NH, B, pw, t0, span, ymax;
    int nmax, npanels;
} layout;

static double xpos(const layout *g, double t) { return g->L + (t - g->t0) / g->span * g->pw; }
static double panel_y0(const layout *g, int k) { return g->top + k * (g->PH + g->GAP); }
static double ypos(const layout *g, int k, double v) { return panel_y0(g, k) + g->PH - v / g->ymax * g->PH; }

static void time_axis(FILE *f, const layout *g, double bottom) {
    double hours = g->span / 3600;
    int digits = hours > 6 ? 1 : 2;
    for (int k = 0; k <= 10; k++) {
        double tt = g->t0 + g->span * k / 10;
        fprintf(f,
                "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>"
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.*f h</text>\n",
                xpos(g, tt), xpos(g, tt), g->top, bottom, xpos(g, tt), bottom + 16, digits, (tt - g->t0) / 3600);
    }
}

/* one policy's panel k: frame, y ticks, its step line, its average, its numbers */
static void policy_panel(FILE *f, const layout *g, int k, int p, const ah_spot_policy_result *pr) {
    double y0 = panel_y0(g, k);
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#ccc\"/>\n",
            g->L, y0, g->pw, g->PH);
    for (int q = 0; q <= 2; q++) {
        double v = g->ymax / 1.1 * q / 2;
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.3g</text>\n", g->L - 6,
                ypos(g, k, v) + 4, v);
    }
    fprintf(f, "<path fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" d=\"", colors[p]);
    for (int i = 0; i < pr->n_seg; i++) {
        const ah_spot_segment *s = &pr->seg[i];
        fprintf(f, "%s%.1f,%.1f L%.1f,%.1f ", i ? "L" : "M", xpos(g, s->t0), ypos(g, k, s->samples_per_s),
                xpos(g, s->t1), ypos(g, k, s->samples_per_s));
    }
    fprintf(f, "\"/>\n");
    double ya = ypos(g, k, pr->avg_samples_per_s); /* the average: dashed, its value in the header */
    fprintf(f,
            "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-opacity=\"0.6\" "
            "stroke-dasharray=\"5,4\"/>\n",
            g->L, g->L + g->pw, ya, ya, colors[p]);
    /* the header above the frame: nothing of the plot is drawn there */
    fprintf(f,
            "<text x=\"%.1f\" y=\"%.1f\"><tspan font-weight=\"bold\" fill=\"%s\">%s</tspan>: %.4g samples/s on "
            "average, %.0f samples, %.2f h down, %d restarts, %.0f samples lost</text>\n",
            g->L, y0 - 6, colors[p], ah_spot_policy_name((ah_spot_policy)p), pr->avg_samples_per_s, pr->samples,
            pr->downtime_s / 3600, pr->restarts, pr->lost_samples);
}

/* the available node count, panel k */
static void nodes_panel(FILE *f, const layout *g, int k, const ah_spot_result *r) {
    double y0 = panel_y0(g, k), base = y0 + g->NH;
#define YN(v) (base - (double)(v) / g->nmax * g->NH)
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">available nodes: %d to %d over %.2f h, %d changes</text>\n", g->L,
            y0 - 6, r->min_nodes, r->max_nodes, r->duration_s / 3600, r->n_changes);
    fprintf(f, "<path fill=\"#cfe3cf\" stroke=\"#2ca02c\" d=\"M%.1f,%.1f ", xpos(g, g->t0), base);
    for (int i = 0; i < r->n_points; i++) {
        double te = i + 1 < r->n_points ? r->t[i + 1] : g->t0 + g->span;
        fprintf(f, "L%.1f,%.1f L%.1f,%.1f ", xpos(g, r->t[i]), YN(r->nodes[i]), xpos(g, te), YN(r->nodes[i]));
    }
    fprintf(f, "L%.1f,%.1f Z\"/>\n", xpos(g, g->t0 + g->span), base);
    fprintf(f,
            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%d</text><text x=\"%.1f\" y=\"%.1f\" "
            "text-anchor=\"end\">0</text>\n",
            g->L - 6, YN(g->nmax) + 4, g->nmax, g->L - 6, base + 4);
#undef YN
}

static layout make_layout(const ah_spot_result *r) {
    layout g = {.W = 960, .L = 70, .R = 20, .top = 58, .PH = 110, .GAP = 34, .NH = 80, .B = 40};
    g.pw = g.W - g.L - g.R;
    g.t0 = r->n_points ? r->t[0] : 0;
    g.span = r->duration_s > 0 ? r->duration_s : 1;
    for (int p = 0; p < AH_POLICY_N; p++) {
        g.npanels += r->pol[p].enabled;
        for (int i = 0; r->pol[p].enabled && i < r->pol[p].n_seg; i++)
            if (r->pol[p].seg[i].samples_per_s > g.ymax)
                g.ymax = r->pol[p].seg[i].samples_per_s;
    }
    g.ymax = g.ymax > 0 ? g.ymax * 1.1 : 1; /* one scale for all panels: heights compare */
    g.nmax = r->max_nodes > 0 ? r->max_nodes : 1;
    return g;
}

int ah_spot_write_svg(const ah_spot_result *r, const char *title, const char *path, char *err,
                      size_t errlen) {
    ah_out_file o;
    if (ah_out_open(&o, path, err, errlen) != 0)
        return -1;
    FILE *f = o.f;
    layout g = make_layout(r);
    double bottom = panel_y0(&g, g.npanels) + g.NH, H = bottom + g.B;
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
            "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
            "<text x=\"%.0f\" y=\"22\" font-size=\"15\">",
            g.W, H, g.L);
    ah_xml_escape(f, title); /* a model or node name is the user's */
    fprintf(f, "</text>\n<text transform=\"translate(16,%.1f) rotate(-90)\" text-anchor=\"middle\">samples/s</text>\n",
            g.top + (bottom - g.NH - g.GAP - g.top) / 2);
    time_axis(f, &g, bottom);
    int k = 0;
    for (int p = 0; p < AH_POLICY_N; p++)
        if (r->pol[p].enabled)
            policy_panel(f, &g, k++, p, &r->pol[p]);
    nodes_panel(f, &g, k, r);
    fprintf(f, "</svg>\n");
    return ah_out_close(&o, 1, err, errlen);
}
