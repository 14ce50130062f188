/* The link matrix between hosts (commbench.h): every pair of hosts' latency
 * and bandwidth from the point-to-point fits of one commbench run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autohet/commbench.h"
#include "util/errors.h"

typedef struct {
    double latency_us, bandwidth_gbs, error;
    int pair[2];
    int have_latency, have_bw; /* from the latency fit / from the bw fit */
} link_cell;

/* A fit's small-message alpha, large-message beta and error; 0, or -1 when malformed. */
static int fit_numbers(const cJSON *f, double *alpha, double *beta, double *error) {
    const cJSON *reg = cJSON_GetObjectItemCaseSensitive(f, "regimes");
    int nr = cJSON_IsArray(reg) ? cJSON_GetArraySize(reg) : 0;
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(nr ? cJSON_GetArrayItem(reg, 0) : f, "alpha_us"),
                *b = cJSON_GetObjectItemCaseSensitive(nr ? cJSON_GetArrayItem(reg, nr - 1) : f, "beta_GBps"),
                *e = cJSON_GetObjectItemCaseSensitive(f, "max_rel_error");
    if (!cJSON_IsNumber(a) || !cJSON_IsNumber(b) || !cJSON_IsNumber(e))
        return -1;
    *alpha = a->valuedouble, *beta = b->valuedouble, *error = e->valuedouble;
    return 0;
}

/* Enters one fit into its cell: the first latency fit and the first bw fit of a pair of nodes count. */
static void enter_fit(const ah_commbench_topology *t, const cJSON *f, link_cell *cells) {
    const cJSON *op = cJSON_GetObjectItemCaseSensitive(f, "op"), *pair = cJSON_GetObjectItemCaseSensitive(f, "pair");
    if (!cJSON_IsString(op) || !cJSON_IsArray(pair) || cJSON_GetArraySize(pair) != 2)
        return;
    int is_bw = !strcmp(op->valuestring, "bw");
    if (!is_bw && strcmp(op->valuestring, "latency"))
        return;
    int r[2];
    for (int i = 0; i < 2; i++) {
        const cJSON *v = cJSON_GetArrayItem(pair, i);
        r[i] = cJSON_IsNumber(v) ? v->valueint : -1;
        if (r[i] < 0 || r[i] >= t->ranks)
            return;
    }
    double alpha, beta, error;
    if (fit_numbers(f, &alpha, &beta, &error))
        return;
    int a = t->node_of[r[0]], b = t->node_of[r[1]];
    link_cell *c = &cells[(size_t)a * (size_t)t->nodes + (size_t)b];
    if (is_bw ? c->have_bw : c->have_latency)
        return;
    if (!c->have_latency && !c->have_bw)
        c->pair[0] = r[0], c->pair[1] = r[1];
    if (is_bw) {
        c->bandwidth_gbs = beta; /* the bw fit's bandwidth wins over the latency fit's */
        c->have_bw = 1;
    } else {
        c->latency_us = alpha;
        if (!c->have_bw)
            c->bandwidth_gbs = beta;
        c->have_latency = 1;
    }
    c->error = error > c->error ? error : c->error;
    cells[(size_t)b * (size_t)t->nodes + (size_t)a] = *c;
}

/* One nodes x nodes matrix of a cell field (null where nothing was measured). */
static cJSON *matrix(const ah_commbench_topology *t, const link_cell *cells, int field) {
    cJSON *m = cJSON_CreateArray();
    for (int a = 0; a < t->nodes; a++) {
        cJSON *row = cJSON_CreateArray();
        for (int b = 0; b < t->nodes; b++) {
            const link_cell *c = &cells[(size_t)a * (size_t)t->nodes + (size_t)b];
            cJSON *v = NULL;
            if (field == 0 && c->have_latency)
                v = cJSON_CreateNumber(c->latency_us);
            else if (field == 1 && (c->have_latency || c->have_bw))
                v = cJSON_CreateNumber(c->bandwidth_gbs);
            else if (field == 2 && (c->have_latency || c->have_bw))
                v = cJSON_CreateNumber(c->error);
            else if (field == 3 && (c->have_latency || c->have_bw))
                v = cJSON_CreateIntArray(c->pair, 2);
            cJSON_AddItemToArray(row, v ? v : cJSON_CreateNull());
        }
        cJSON_AddItemToArray(m, row);
    }
    return m;
}

/* shared_bandwidth_GBps and shared_flows (null where not measured), when any pair was measured */
static void add_shared(cJSON *links, const ah_commbench_shared *sh) {
    int n = sh ? sh->nodes : 0, any = 0;
    for (int i = 0; i < n * n; i++)
        any |= sh->flows[i] > 0;
    if (!any)
        return;
    cJSON *g = cJSON_AddArrayToObject(links, "shared_bandwidth_GBps"),
          *o = cJSON_AddArrayToObject(links, "shared_one_flow_GBps"),
          *f = cJSON_AddArrayToObject(links, "shared_flows");
    for (int a = 0; a < n; a++) {
        cJSON *rg = cJSON_CreateArray(), *ro = cJSON_CreateArray(), *rf = cJSON_CreateArray();
        for (int b = 0; b < n; b++) {
            int i = a * n + b, k = sh->flows[i];
            cJSON_AddItemToArray(rg, k > 0 ? cJSON_CreateNumber(sh->gbs[i]) : cJSON_CreateNull());
            cJSON_AddItemToArray(ro, k > 0 ? cJSON_CreateNumber(sh->one_gbs[i]) : cJSON_CreateNull());
            cJSON_AddItemToArray(rf, k > 0 ? cJSON_CreateNumber(k) : cJSON_CreateNull());
        }
        cJSON_AddItemToArray(g, rg);
        cJSON_AddItemToArray(o, ro);
        cJSON_AddItemToArray(f, rf);
    }
    cJSON_AddNumberToObject(links, "shared_message_bytes", (double)sh->bytes);
}

cJSON *ah_commbench_links_json(const ah_commbench_topology *t, const cJSON *fits,
                               const ah_commbench_shared *shared) {
    link_cell *cells = ah_xcalloc((size_t)t->nodes * (size_t)t->nodes, sizeof *cells);
    const cJSON *f;
    cJSON_ArrayForEach(f, fits)
        enter_fit(t, f, cells);
    int any = 0;
    for (int i = 0; i < t->nodes * t->nodes; i++)
        any |= cells[i].have_latency || cells[i].have_bw;
    cJSON *links = NULL;
    if (any) {
        links = cJSON_CreateObject();
        cJSON *hosts = cJSON_AddArrayToObject(links, "hosts");
        for (int k = 0; k < t->nodes; k++)
            cJSON_AddItemToArray(hosts, cJSON_CreateString(ah_commbench_host(t, k)));
        cJSON_AddItemToObject(links, "latency_us", matrix(t, cells, 0));
        cJSON_AddItemToObject(links, "bandwidth_GBps", matrix(t, cells, 1));
        cJSON_AddItemToObject(links, "max_rel_error", matrix(t, cells, 2));
        cJSON_AddItemToObject(links, "pairs", matrix(t, cells, 3));
        add_shared(links, shared);
    }
    free(cells);
    return links;
}

void ah_commbench_print_links(const cJSON *links, FILE *f) {
    const cJSON *hosts = cJSON_GetObjectItemCaseSensitive(links, "hosts"),
                *lat = cJSON_GetObjectItemCaseSensitive(links, "latency_us"),
                *bw = cJSON_GetObjectItemCaseSensitive(links, "bandwidth_GBps");
    int n = cJSON_GetArraySize(hosts);
    fprintf(f, "# links between hosts: latency us / bandwidth GB/s (the point-to-point fits; - not measured)\n");
    fprintf(f, "# %-20s", "host");
    for (int b = 0; b < n; b++)
        fprintf(f, " %20.20s", cJSON_GetArrayItem(hosts, b)->valuestring);
    fprintf(f, "\n");
    for (int a = 0; a < n; a++) {
        fprintf(f, "# %-20.20s", cJSON_GetArrayItem(hosts, a)->valuestring);
        for (int b = 0; b < n; b++) {
            const cJSON *l = cJSON_GetArrayItem(cJSON_GetArrayItem(lat, a), b),
                        *w = cJSON_GetArrayItem(cJSON_GetArrayItem(bw, a), b);
            char cell[48] = "-";
            if (cJSON_IsNumber(w) && cJSON_IsNumber(l))
                snprintf(cell, sizeof cell, "%.2f / %.3f", l->valuedouble, w->valuedouble);
            else if (cJSON_IsNumber(w))
                snprintf(cell, sizeof cell, "- / %.3f", w->valuedouble);
            fprintf(f, " %20s", cell);
        }
        fprintf(f, "\n");
    }
    const cJSON *sg = cJSON_GetObjectItemCaseSensitive(links, "shared_bandwidth_GBps"),
                *so = cJSON_GetObjectItemCaseSensitive(links, "shared_one_flow_GBps"),
                *sf = cJSON_GetObjectItemCaseSensitive(links, "shared_flows");
    if (!sg)
        return;
    fprintf(f, "# shared links: flows streaming at once between two hosts (%.0f B messages), aggregate GB/s\n",
            cJSON_GetObjectItemCaseSensitive(links, "shared_message_bytes")->valuedouble);
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++) {
            const cJSON *g = cJSON_GetArrayItem(cJSON_GetArrayItem(sg, a), b),
                        *k = cJSON_GetArrayItem(cJSON_GetArrayItem(sf, a), b),
                        *w = cJSON_GetArrayItem(cJSON_GetArrayItem(so, a), b);
            if (!cJSON_IsNumber(g) || !cJSON_IsNumber(k))
                continue;
            fprintf(f, "# %-20.20s %-20.20s %d flows %.4f GB/s", cJSON_GetArrayItem(hosts, a)->valuestring,
                    cJSON_GetArrayItem(hosts, b)->valuestring, k->valueint, g->valuedouble);
            if (cJSON_IsNumber(w) && w->valuedouble > 0)
                fprintf(f, ", one flow %.4f GB/s: %.2fx", w->valuedouble, g->valuedouble / w->valuedouble);
            fprintf(f, "\n");
        }
}
