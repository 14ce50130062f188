/* Reading a comm profile into the cost model (see comm.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autohet/cluster.h"
#include "util/errors.h"

#include "autohet/comm.h"
#include "cluster/link_model_json.h"
#include "util/json_file.h"

/* The fit of `op` for `link_class` (the first one, e.g. of the lowest pair):
 * the latency alpha (us) of its smallest-message regime and the bandwidth
 * beta (GB/s) of its largest-message one; a fit without regimes[] gives its
 * own alpha_us and beta_GBps. (Reading alpha from the large-message regime
 * gave latencies of 0 and 1677 us for links measured at 9.5 and 6.1 us,
 * issue #14.) 0 if found, -1 none, -2 malformed. */
static int find_fit(const cJSON *fits, const char *op, const char *link_class, double *alpha, double *beta) {
    const cJSON *f;
    cJSON_ArrayForEach(f, fits) {
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(f, "op"),
                    *l = cJSON_GetObjectItemCaseSensitive(f, "link_class");
        if (!cJSON_IsString(o) || !cJSON_IsString(l) || strcmp(o->valuestring, op) ||
            strcmp(l->valuestring, link_class))
            continue;
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(f, "alpha_us"),
                    *b = cJSON_GetObjectItemCaseSensitive(f, "beta_GBps");
        const cJSON *reg = cJSON_GetObjectItemCaseSensitive(f, "regimes");
        int nr = cJSON_IsArray(reg) ? cJSON_GetArraySize(reg) : 0;
        if (nr > 0) {
            a = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(reg, 0), "alpha_us");
            b = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(reg, nr - 1), "beta_GBps");
        }
        if (!cJSON_IsNumber(a) || !cJSON_IsNumber(b) || !(a->valuedouble >= 0) ||
            !(a->valuedouble <= AH_LINK_MAX_ABS_US) || !(b->valuedouble >= AH_LINK_MIN_GBPS) ||
            !(b->valuedouble <= AH_LINK_MAX_GBPS))
            return -2;
        *alpha = a->valuedouble;
        *beta = b->valuedouble;
        return 0;
    }
    return -1;
}

/* One n x n matrix of links{}: numbers (>= 0; > 0 when positive) or null (stored as -1). 0, or -1 with err.
 */
static int read_link_matrix(const cJSON *links, const char *key, int n, int positive, double *out,
                            ah_err_ctx *cx) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(links, key);
    if (!cJSON_IsArray(m) || cJSON_GetArraySize(m) != n)
        return ah_fail(cx, "links.%s: expected an array of %d rows (one per host)", key, n);
    for (int a = 0; a < n; a++) {
        const cJSON *row = cJSON_GetArrayItem(m, a);
        if (!cJSON_IsArray(row) || cJSON_GetArraySize(row) != n)
            return ah_fail(cx, "links.%s[%d]: expected an array of %d entries", key, a, n);
        for (int b = 0; b < n; b++) {
            const cJSON *v = cJSON_GetArrayItem(row, b);
            double x = cJSON_IsNumber(v) ? v->valuedouble : -1;
            int ok =
                positive ? x >= AH_LINK_MIN_GBPS && x <= AH_LINK_MAX_GBPS : x >= 0 && x <= AH_LINK_MAX_ABS_US;
            if (!cJSON_IsNull(v) && !(cJSON_IsNumber(v) && ok))
                return ah_fail(cx, "links.%s[%d][%d]: expected a number from %g to %g or null", key, a, b,
                               positive ? AH_LINK_MIN_GBPS : 0.0,
                               positive ? AH_LINK_MAX_GBPS : AH_LINK_MAX_ABS_US);
            out[a * n + b] = x;
        }
    }
    return 0;
}

/* links{}'s optional shared links (commbench --pairs hosts): the gain of flows at once over one flow, both
 * measured the same way, at least 1. Both matrices or neither. 0, or -1 with err. */
static int read_share(const cJSON *links, int n, ah_link_matrix *m, ah_err_ctx *cx) {
    int has_all = cJSON_GetObjectItemCaseSensitive(links, "shared_bandwidth_GBps") != NULL,
        has_one = cJSON_GetObjectItemCaseSensitive(links, "shared_one_flow_GBps") != NULL;
    if (!has_all && !has_one)
        return 0;
    if (!has_all || !has_one)
        return ah_fail(cx, "links.%s: expected with links.%s (the shared links' two measurements)",
                       has_all ? "shared_bandwidth_GBps" : "shared_one_flow_GBps",
                       has_all ? "shared_one_flow_GBps" : "shared_bandwidth_GBps");
    double *all = ah_xcalloc((size_t)n * (size_t)n, sizeof(double)),
           *one = ah_xcalloc((size_t)n * (size_t)n, sizeof(double));
    int rc = read_link_matrix(links, "shared_bandwidth_GBps", n, 1, all, cx);
    if (rc == 0)
        rc = read_link_matrix(links, "shared_one_flow_GBps", n, 1, one, cx);
    if (rc == 0) {
        m->share = ah_xcalloc((size_t)n * (size_t)n, sizeof(double));
        for (int i = 0; i < n * n; i++)
            m->share[i] = ah_link_shared_gain(all[i], one[i]);
    }
    free(all);
    free(one);
    return rc;
}

/* links{} (commbench --pairs hosts): the matrix between hosts into *out (NULL when absent). 0, or -1. */
static int read_links(const cJSON *root, ah_link_matrix **out, ah_err_ctx *cx) {
    *out = NULL;
    const cJSON *links = cJSON_GetObjectItemCaseSensitive(root, "links");
    if (!links || cJSON_IsNull(links))
        return 0;
    const cJSON *hosts = cJSON_GetObjectItemCaseSensitive(links, "hosts");
    int n = cJSON_IsArray(hosts) ? cJSON_GetArraySize(hosts) : 0;
    if (!cJSON_IsObject(links) || n < 1)
        return ah_fail(cx, "links.hosts: expected an array of host names");
    ah_link_matrix *m = ah_xcalloc(1, sizeof *m);
    m->n = n;
    m->hosts = ah_xcalloc((size_t)n, sizeof *m->hosts);
    m->alpha_s = ah_xcalloc((size_t)n * (size_t)n, sizeof(double));
    m->bw_gbs = ah_xcalloc((size_t)n * (size_t)n, sizeof(double));
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        const cJSON *h = cJSON_GetArrayItem(hosts, i);
        char why[128];
        if (!cJSON_IsString(h) || ah_host_name_problem(h->valuestring, why, sizeof why))
            rc = ah_fail(cx, "links.hosts[%d]: %s", i, cJSON_IsString(h) ? why : "expected a host name");
        else
            snprintf(m->hosts[i], sizeof m->hosts[i], "%s", h->valuestring);
    }
    if (rc == 0)
        rc = read_link_matrix(links, "latency_us", n, 0, m->alpha_s, cx);
    if (rc == 0)
        rc = read_link_matrix(links, "bandwidth_GBps", n, 1, m->bw_gbs, cx);
    for (int i = 0; i < n * n; i++)
        m->alpha_s[i] = m->alpha_s[i] >= 0 ? m->alpha_s[i] * 1e-6 : -1;
    if (rc == 0)
        rc = read_share(links, n, m, cx);
    if (rc != 0) {
        ah_link_matrix_free(m);
        return -1;
    }
    *out = m;
    return 0;
}

void ah_link_matrix_free(ah_link_matrix *m) {
    if (!m)
        return;
    free(m->hosts);
    free(m->alpha_s);
    free(m->bw_gbs);
    free(m->share);
    free(m);
}

cJSON *ah_comm_profile_parse(const char *path, char *err, size_t errlen) {
    ah_err_ctx cx = {path, err, errlen};
    cJSON *root = ah_json_parse_file(path, 64u << 20, 1, err, errlen);
    if (!root)
        return NULL;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    int rc = 0;
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "autohet-comm-profile"))
        rc = ah_fail(&cx,
                     "format: expected \"autohet-comm-profile\" (the --json output of autohet commbench)");
    else if (!cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(root, "fits")))
        rc = ah_fail(&cx, "fits: expected an array");
    if (rc != 0) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

int ah_comm_profile_apply(const char *path, ah_cluster *c, ah_plan_options *o, char *summary,
                          size_t summary_len, char *err, size_t errlen) {
    ah_err_ctx cx = {path, err, errlen};
    cJSON *root = ah_comm_profile_parse(path, err, errlen);
    if (!root)
        return -1;
    int rc = 0;
    const cJSON *fits = cJSON_GetObjectItemCaseSensitive(root, "fits");
    int applied = 0;
    summary[0] = '\0';
    const char *classes[2] = {"intra-node", "inter-node"};
    for (int k = 0; k < 2 && rc == 0; k++) {
        double la, lb, ba, bb;
        int fl = find_fit(fits, "latency", classes[k], &la, &lb),
            fb = find_fit(fits, "bw", classes[k], &ba, &bb);
        if (fl == -2 || fb == -2) {
            rc = ah_fail(&cx,
                         "fits[]: the %s %s fit needs alpha_us from 0 to 1e9 and beta_GBps from 1e-6 to 1e12",
                         classes[k], fl == -2 ? "latency" : "bw");
            break;
        }
        if (fl != 0 || fb != 0)
            continue;
        for (int i = 0; i < c->n_nodes; i++) {
            if (k == 0)
                c->nodes[i].dev.intra_bw_gbs = bb;
            else
                c->nodes[i].nic_gbit = bb * 8.0 * c->nodes[i].gpus; /* bb is per GPU */
        }
        if (k == 0)
            o->alpha_intra_s = la * 1e-6;
        else
            o->alpha_inter_s = la * 1e-6;
        /* a message's time by its size: the latency fit's regimes, measured at bandwidth bb */
        if (ah_link_model_from_fits(fits, classes[k], &o->msg_model[k]) < 0) {
            rc = ah_fail(&cx,
                         "fits[]: the %s latency fit's regimes need alpha_us >= 0 (first), beta_GBps > 0 and "
                         "increasing max_bytes",
                         classes[k]);
            break;
        }
        o->msg_ref_gbs[k] = bb;
        size_t used = strlen(summary);
        snprintf(summary + used, summary_len - used,
                 "%s%s link %.2f GB/s, latency %.2f us (a message by its size: %d regime%s)",
                 applied ? "; " : "", classes[k], bb, la, o->msg_model[k].n,
                 o->msg_model[k].n == 1 ? "" : "s");
        applied++;
    }
    if (rc == 0 && applied == 0)
        rc = ah_fail(&cx,
                     "fits[]: no latency + bw fits for intra-node or inter-node links (run commbench with "
                     "--ops latency,bw or all)");
    ah_link_matrix *links = NULL;
    if (rc == 0)
        rc = read_links(root, &links, &cx);
    if (links) {
        ah_link_matrix_free((ah_link_matrix *)o->links);
        o->links = links;
        size_t used = strlen(summary);
        int shared = 0;
        for (int i = 0; links->share && i < links->n * links->n; i++)
            shared += links->share[i] > 1;
        snprintf(summary + used, summary_len - used, "; links between %d hosts (per pair%s)", links->n,
                 shared ? ", with their shared capacity" : "");
    }
    cJSON_Delete(root);
    return rc;
}
