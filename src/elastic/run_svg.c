/* The plot of an `autohet run` (--svg FILE): the steps the job logged over wall time, one line per
 * generation (its colour, its plan in the legend), each recovery a band from the loss to the restored
 * state with its numbers in the band's label and tooltip, the run's totals in the header. Read from
 * what the run keeps: RUN/gen-G.log (step, unix_s per line) and the recovery records. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "elastic/run_state.h"
#include "util/atomic_file.h"
#include "util/clock.h"
#include "util/svg.h"

static const char *const colors[] = {"#4e79a7", "#59a14f", "#f28e2b", "#b07aa1", "#76b7b2", "#edc948", "#9c755f"};
#define N_COLORS (int)(sizeof colors / sizeof *colors)

typedef struct {
    double *t;
    int *step;
    int n, cap;
} gen_steps;

/* the steps generation g logged: (unix time, step) per line of RUN/gen-G.log */
static void read_generation(const run_state *s, int g, gen_steps *out) {
    char path[1200], line[4096];
    snprintf(path, sizeof path, "%s/gen-%d.log", s->run, g);
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    while (fgets(line, sizeof line, f)) {
        cJSON *j = cJSON_Parse(line);
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "step"), *u = cJSON_GetObjectItemCaseSensitive(j, "unix_s");
        if (cJSON_IsNumber(st) && cJSON_IsNumber(u) && isfinite(u->valuedouble)) {
            if (out->n == out->cap) {
                out->cap = out->cap ? 2 * out->cap : 64;
                out->t = realloc(out->t, sizeof(double) * (size_t)out->cap);
                out->step = realloc(out->step, sizeof(int) * (size_t)out->cap);
                if (!out->t || !out->step)
                    abort();
            }
            out->t[out->n] = u->valuedouble, out->step[out->n++] = st->valueint;
        }
        cJSON_Delete(j);
    }
    fclose(f);
}

static double num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

typedef struct {
    double L, top, pw, ph, t0, span;
    int steps;
} frame;

static double xpos(const frame *g, double t) { return g->L + (t - g->t0) / g->span * g->pw; }
static double ypos(const frame *g, double step) { return g->top + g->ph - step / g->steps * g->ph; }

/* a round step for about n ticks over span: 1, 2 or 5 times a power of ten */
static double nice_step(double span, int n) {
    double raw = span / n, p = pow(10, floor(log10(raw))), m = raw / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

static void axes(FILE *f, const frame *g) {
    char buf[96];
    ah_svg_rect(f, g->L, g->top, g->pw, g->ph, "fill=\"none\" stroke=\"#ccc\"", NULL);
    double dt = nice_step(g->span, 10);
    for (double t = 0; t <= g->span * (1 + 1e-9); t += dt) {
        double x = g->L + t / g->span * g->pw;
        ah_svg_line(f, x, g->top, x, g->top + g->ph, "stroke=\"#eee\"", NULL);
        snprintf(buf, sizeof buf, "%g s", t);
        ah_svg_text(f, x, g->top + g->ph + 16, "text-anchor=\"middle\"", buf);
    }
    double ds = nice_step(g->steps, 5);
    if (ds < 1)
        ds = 1;
    for (double v = 0; v <= g->steps * (1 + 1e-9); v += ds) {
        snprintf(buf, sizeof buf, "%.0f", v);
        ah_svg_text(f, g->L - 6, ypos(g, v) + 4, "text-anchor=\"end\"", buf);
    }
    ah_svg_text(f, g->L + g->pw / 2, g->top + g->ph + 34, "text-anchor=\"middle\"", "wall time since the run started");
    double ym = g->top + g->ph / 2;
    snprintf(buf, sizeof buf, "transform=\"rotate(-90 18 %.1f)\" text-anchor=\"middle\"", ym);
    ah_svg_text(f, 18, ym, buf, "step");
}

/* each recovery: a band from the loss to the restored state, its number and seconds above it */
static void recovery_bands(FILE *f, const frame *g, const run_state *s, double t_start) {
    int i = 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, s->recs) {
        i++;
        /* (a record of a controller before a --resume: its at_s counts from that controller's start) */
        double at = cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(r, "at_unix_s")) ? num(r, "at_unix_s")
                                                                                      : t_start + num(r, "at_s"),
               sec = num(r, "seconds");
        const cJSON *cause = cJSON_GetObjectItemCaseSensitive(r, "cause");
        char tip[768], label[64];
        snprintf(tip, sizeof tip,
                 "recovery %d: %s; %.3f s to resume at step %.0f (%.0f steps trained again): detection %.3f + "
                 "replan %.3f + relaunch %.3f + restore %.3f s",
                 i, cJSON_IsString(cause) ? cause->valuestring : "?", sec, num(r, "resumed_step"),
                 num(r, "steps_lost"), num(r, "detection_s"), num(r, "replan_s"), num(r, "relaunch_s"),
                 num(r, "restore_s"));
        double x0 = xpos(g, at), w = sec / g->span * g->pw;
        ah_svg_rect(f, x0, g->top, w > 1.5 ? w : 1.5, g->ph, "fill=\"#e15759\" fill-opacity=\"0.25\"", tip);
        snprintf(label, sizeof label, "R%d %.2f s", i, sec);
        ah_svg_text(f, x0 + 2, g->top + 12 + 12 * ((i - 1) % 3), "fill=\"#c0392b\"", label);
    }
}

/* one polyline per generation, and its legend entry beneath the frame */
static void generation_lines(FILE *f, const frame *g, const run_state *s, gen_steps *gs, int n_gen) {
    double ly = g->top + g->ph + 52;
    const cJSON *gen = s->gens ? s->gens->child : NULL;
    for (int k = 0; k < n_gen; k++, gen = gen ? gen->next : NULL) {
        const char *c = colors[k % N_COLORS];
        char attrs[96], legend[400];
        if (gs[k].n > 0) {
            double *xs = malloc(sizeof(double) * (size_t)gs[k].n * 2), *ys = xs + gs[k].n;
            if (!xs)
                abort();
            for (int i = 0; i < gs[k].n; i++)
                xs[i] = xpos(g, gs[k].t[i]), ys[i] = ypos(g, gs[k].step[i]);
            snprintf(attrs, sizeof attrs, "stroke=\"%s\" stroke-width=\"2\"", c);
            ah_svg_polyline(f, xs, ys, gs[k].n, attrs);
            free(xs);
        }
        const cJSON *sum = cJSON_GetObjectItemCaseSensitive(gen, "summary");
        snprintf(legend, sizeof legend, "generation %d: %s; steps %d-%d", k,
                 cJSON_IsString(sum) ? sum->valuestring : "", gs[k].n ? gs[k].step[0] : 0,
                 gs[k].n ? gs[k].step[gs[k].n - 1] : 0);
        snprintf(attrs, sizeof attrs, "fill=\"%s\"", c);
        ah_svg_rect(f, g->L, ly + 16 * k - 9, 10, 10, attrs, NULL);
        ah_svg_text(f, g->L + 16, ly + 16 * k, NULL, legend);
    }
}

int run_write_svg(const run_state *s, const char *path, int final_step, char *err, size_t errlen) {
    int n_gen = s->gen + 1;
    gen_steps *gs = calloc((size_t)n_gen, sizeof *gs);
    if (!gs)
        abort();
    double now = ah_wall_clock_s(), t0 = s->t_start, rec_s;
    for (int k = 0; k < n_gen; k++) {
        read_generation(s, k, &gs[k]);
        for (int i = 0; i < gs[k].n; i++)
            t0 = gs[k].t[i] < t0 ? gs[k].t[i] : t0; /* a resumed run's earlier generations */
    }
    int redone;
    run_recovery_totals(s, &rec_s, &redone);
    frame g = {70, 56, 800, 300, t0, now - t0 > 1e-3 ? now - t0 : 1e-3, s->o->steps > 0 ? s->o->steps : 1};
    double H = g.top + g.ph + 60 + 16 * n_gen;
    ah_out_file o;
    int rc = ah_out_open(&o, path, err, errlen);
    if (rc == 0) {
        FILE *f = o.f;
        char head[256], sub[256], title[520];
        int nr = cJSON_GetArraySize(s->recs);
        snprintf(head, sizeof head, "autohet run: %s, step %d of %d in %.1f s", s->cfg.name, final_step, s->o->steps,
                 now - s->t_start);
        snprintf(sub, sizeof sub, "%d recover%s (%.2f s recovering, %d step%s trained again), %d generation%s", nr,
                 nr == 1 ? "y" : "ies", rec_s, redone, redone == 1 ? "" : "s", n_gen, n_gen == 1 ? "" : "s");
        snprintf(title, sizeof title, "%s; %s", head, sub);
        ah_svg_open(f, g.L + g.pw + 30, H, "font-family=\"sans-serif\" font-size=\"11\"");
        ah_svg_title(f, title);
        ah_svg_rect(f, 0, 0, g.L + g.pw + 30, H, "fill=\"white\"", NULL);
        ah_svg_text(f, g.L, 20, "font-size=\"13\" font-weight=\"bold\"", head);
        ah_svg_text(f, g.L, 38, NULL, sub);
        axes(f, &g);
        recovery_bands(f, &g, s, s->t_start);
        generation_lines(f, &g, s, gs, n_gen);
        ah_svg_close(f);
        rc = ah_out_close(&o, !ferror(f), err, errlen);
    }
    for (int k = 0; k < n_gen; k++)
        free(gs[k].t), free(gs[k].step);
    free(gs);
    return rc;
}
