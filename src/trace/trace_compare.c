/* A measured trace next to a simulated one of the same plan, both analysed
 * by the same code (autohet/trace_analysis.h): per rank, per op kind and per
 * gradient bucket, seconds per step and the relative error. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autohet/trace_analysis.h"
#include "util/errors.h"

const char *ah_trace_part_name(int part) {
    static const char *names[AH_TRACE_PARTS] = {"compute", "exposed_comm", "bubble", "other", "not_busy"};
    return part >= 0 && part < AH_TRACE_PARTS ? names[part] : "unknown";
}

static ah_trace_pair pair(double measured, double simulated) {
    return (ah_trace_pair){measured, simulated, measured > 0 ? simulated / measured - 1 : NAN};
}

/* the four parts and not-busy of rank r, seconds per step */
static void parts_of(const ah_trace_analysis *a, int r, double *out) {
    const ah_trace_split *s = &a->split[r];
    double per = 1e-6 / a->steps;
    out[AH_TRACE_PART_COMPUTE] = s->compute * per;
    out[AH_TRACE_PART_EXPOSED] = s->exposed * per;
    out[AH_TRACE_PART_BUBBLE] = s->bubble * per;
    out[AH_TRACE_PART_OTHER] = (s->other + s->checkpoint) * per; /* a simulation has no checkpoints */
    out[AH_TRACE_PART_NOT_BUSY] = (s->bubble + s->other + s->checkpoint) * per;
}

static int find_bucket(const ah_trace_analysis *a, int first, int last) {
    for (int b = 0; b < a->n_buckets; b++)
        if (a->buckets[b].first == first && a->buckets[b].last == last)
            return b;
    return -1;
}

static void compare_buckets(const ah_trace_analysis *m, const ah_trace_analysis *s, ah_trace_comparison *c) {
    int cap = m->n_buckets + s->n_buckets + 1, R = c->ranks;
    c->bucket_layers = ah_xcalloc((size_t)cap, sizeof *c->bucket_layers);
    for (int pass = 0; pass < 2; pass++) { /* the measured trace's buckets, then the simulated one's others */
        const ah_trace_analysis *a = pass ? s : m;
        for (int b = 0; b < a->n_buckets; b++) {
            int k = 0;
            while (k < c->n_buckets &&
                   (c->bucket_layers[k][0] != a->buckets[b].first || c->bucket_layers[k][1] != a->buckets[b].last))
                k++;
            if (k == c->n_buckets) {
                c->bucket_layers[k][0] = a->buckets[b].first;
                c->bucket_layers[k][1] = a->buckets[b].last;
                c->n_buckets++;
            }
        }
    }
    c->buckets = ah_xcalloc((size_t)cap, sizeof(ah_trace_pair));
    c->bucket_ranks = ah_xcalloc((size_t)cap * (size_t)R + 1, sizeof(ah_trace_pair));
    for (int k = 0; k < c->n_buckets; k++) {
        int bm = find_bucket(m, c->bucket_layers[k][0], c->bucket_layers[k][1]),
            bs = find_bucket(s, c->bucket_layers[k][0], c->bucket_layers[k][1]);
        c->buckets[k] = pair(bm >= 0 ? m->buckets[bm].mean_s : 0, bs >= 0 ? s->buckets[bs].mean_s : 0);
        for (int r = 0; r < R; r++) {
            double vm = bm >= 0 ? m->buckets[bm].rank_s[r] : -1, vs = bs >= 0 ? s->buckets[bs].rank_s[r] : -1;
            c->bucket_ranks[k * R + r] =
                vm < 0 && vs < 0 ? (ah_trace_pair){NAN, NAN, NAN} : pair(vm < 0 ? 0 : vm, vs < 0 ? 0 : vs);
        }
    }
}

/* a point-to-point site: both traces record a message's bytes (a simulated collective records the volume
 * through each GPU, a measured one its buffer) */
static int p2p_site(const char *site) {
    int k = ah_op_kind_parse(site);
    return k == AH_OP_SEND_ACTIVATION || k == AH_OP_RECV_ACTIVATION || k == AH_OP_SEND_GRADIENT ||
           k == AH_OP_RECV_GRADIENT;
}

/* Point-to-point sites of both traces that move other bytes per call: the simulation is then not of the
 * run's volumes, and its communication errors say nothing about the link model. */
static void compare_volumes(const ah_trace_analysis *m, const ah_trace_analysis *s, ah_trace_comparison *c) {
    c->volumes = ah_xcalloc((size_t)m->n_sites + 1, sizeof *c->volumes);
    for (int i = 0; i < m->n_sites; i++)
        for (int j = 0; j < s->n_sites; j++) {
            const ah_trace_site *a = &m->sites[i], *b = &s->sites[j];
            if (strcmp(a->site, b->site) != 0 || !p2p_site(a->site) || !(a->bytes_per_call > 0 || b->bytes_per_call > 0))
                continue;
            if (fabs(b->bytes_per_call - a->bytes_per_call) > 0.01 * fmax(a->bytes_per_call, b->bytes_per_call)) {
                ah_trace_volume_mismatch *v = &c->volumes[c->n_volumes++];
                snprintf(v->site, sizeof v->site, "%s", a->site);
                v->measured_bytes = a->bytes_per_call;
                v->simulated_bytes = b->bytes_per_call;
            }
        }
}

int ah_trace_compare(const ah_trace_analysis *meas, const ah_trace_analysis *sim, const char *sim_label,
                     ah_trace_comparison *c, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    if (meas->steps <= 0 || sim->steps <= 0) {
        ah_errf(err, errlen, "--sim %s: the %s trace has no complete step to compare", sim_label,
                meas->steps <= 0 ? "measured" : "simulated");
        return -1;
    }
    if (meas->ranks != sim->ranks) {
        ah_errf(err, errlen, "--sim %s: %d ranks, the trace %d (not the same plan)", sim_label, sim->ranks,
                meas->ranks);
        return -1;
    }
    int R = c->ranks = meas->ranks;
    c->iteration = pair(meas->iteration_s, sim->iteration_s);
    c->parts = ah_xcalloc((size_t)R * AH_TRACE_PARTS, sizeof(ah_trace_pair));
    c->kinds = ah_xcalloc((size_t)R * AH_OP_KINDS, sizeof(ah_trace_pair));
    c->kind_seen = ah_xcalloc((size_t)R * AH_OP_KINDS, sizeof(int));
    for (int r = 0; r < R; r++) {
        double pm[AH_TRACE_PARTS], ps[AH_TRACE_PARTS];
        parts_of(meas, r, pm);
        parts_of(sim, r, ps);
        for (int q = 0; q < AH_TRACE_PARTS; q++)
            c->parts[r * AH_TRACE_PARTS + q] = pair(pm[q], ps[q]);
        for (int k = 0; k < AH_OP_KINDS; k++) {
            int i = r * AH_OP_KINDS + k;
            c->kinds[i] = pair(meas->kind_s[i], sim->kind_s[i]);
            c->kind_seen[i] = meas->kind_s[i] > 0 || sim->kind_s[i] > 0;
        }
    }
    compare_buckets(meas, sim, c);
    compare_volumes(meas, sim, c);
    return 0;
}

void ah_trace_comparison_free(ah_trace_comparison *c) {
    free(c->parts);
    free(c->kinds);
    free(c->kind_seen);
    free(c->bucket_layers);
    free(c->buckets);
    free(c->bucket_ranks);
    free(c->volumes);
    memset(c, 0, sizeof *c);
}
