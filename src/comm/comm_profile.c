/* Reading a comm profile into the cost model (see comm.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autohet/cluster.h"
#include "util/errors.h"

#include "autohet/comm.h"
#include "cluster/link_model_json.h"
#include "util/json_file.h"
#include "util/json_read.h"

/* The fit of `op` for `link_class` (the first one, e.g. of the lowest pair):
 * the latency alpha (us) of its smallest-message regime and the bandwidth
 * beta (GB/s) of its largest-message one; a fit without regimes[] gives its
 * own alpha_us and beta_GBps. (Reading alpha from the large-message regime
 * gave latencies of 0 and 1677 us for links measured at 9.5 and 6.1 us,
 * issue #14.) ah_comm_profile_parse() checked both against a measurement's
 * bounds. 0 if found, -1 none. */
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
            int ok = positive ? x >= AH_LINK_MIN_MEASURED_GBPS && x <= AH_LINK_MAX_GBPS
                              : x >= 0 && x <= AH_LINK_MAX_LATENCY_US;
            if (!cJSON_IsNull(v) && !(cJSON_IsNumber(v) && ok))
                return ah_fail(cx, "links.%s[%d][%d]: expected a number from %g to %g or null", key, a, b,
                               positive ? AH_LINK_MIN_MEASURED_GBPS : 0.0,
                               positive ? AH_LINK_MAX_GBPS : AH_LINK_MAX_LATENCY_US);
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

/* Every field commbench --json and analyze --comm-profile-out write, of any version (1 had
 * two_regime_max_rel_error): a key beyond these is a typo, and the figure it meant would go unread. */
static const char *const top_keys[] = {"format", "version", "ranks", "nodes",  "hosts", "sync",
                                       "source", "trace",   "results", "fits", "links", NULL};
static const char *const fit_keys[] = {"op",      "link_class",       "pair",          "hosts",
                                       "statistic", "alpha_us",       "beta_GBps",     "max_rel_error",
                                       "max_abs_error_us", "sizes",   "regimes",       "single_line",
                                       "rel_error_per_size", "two_regime_max_rel_error", NULL};
static const char *const regime_keys[] = {"min_bytes", "max_bytes", "alpha_us", "beta_GBps", "max_rel_error",
                                          "max_abs_error_us", "sizes", "transfers", NULL};
static const char *const links_keys[] = {"hosts", "latency_us", "bandwidth_GBps", "max_rel_error", "pairs",
                                         "transfers", "shared_bandwidth_GBps", "shared_one_flow_GBps",
                                         "shared_flows", "shared_message_bytes", NULL};

static int known_keys(const ah_err_ctx *cx, const cJSON *obj, const char *path, const char *const *keys) {
    for (const cJSON *k = obj->child; k; k = k->next) {
        int i = 0;
        while (keys[i] && strcmp(keys[i], k->string))
            i++;
        if (!keys[i]) {
            char p[AH_JPATH_LEN];
            ah_jpath_key(p, path, k->string);
            return ah_jfail(cx, p, "unknown field (autohet commbench writes no such field)");
        }
    }
    return 0;
}

/* obj[key], required: a number in [lo, hi] */
static int number_in(const ah_err_ctx *cx, const cJSON *obj, const char *parent, const char *key, double lo,
                     double hi, const char *what) {
    double x;
    char p[AH_JPATH_LEN];
    if (ah_jget_num(cx, obj, parent, key, 1, 0, &x) < 0)
        return -1;
    ah_jpath_key(p, parent, key);
    if (!(x >= lo && x <= hi))
        return ah_jfail(cx, p, "%g out of range [%g, %g] (%s)", x, lo, hi, what);
    return 0;
}

/* A fit's regimes[]: the first one's alpha is the link's latency and the last one's beta its bandwidth, in the
 * bounds of a measurement; the intercepts between are free (ah_comm_fit_line) */
static int check_regimes(const ah_err_ctx *cx, const cJSON *f, const char *fp) {
    const cJSON *reg;
    char rp[AH_JPATH_LEN], qp[AH_JPATH_LEN];
    int has = ah_jget_arr(cx, f, fp, "regimes", 0, &reg, rp);
    if (has <= 0)
        return has;
    int n = cJSON_GetArraySize(reg), q = 0;
    double mx;
    for (const cJSON *g = reg->child; g; g = g->next, q++) {
        if (ah_jitem_obj(cx, g, rp, q, qp) < 0 || known_keys(cx, g, qp, regime_keys) < 0 ||
            (q == 0 ? number_in(cx, g, qp, "alpha_us", 0, AH_LINK_MAX_LATENCY_US, "a latency in us")
                    : number_in(cx, g, qp, "alpha_us", -AH_LINK_MAX_ABS_US, AH_LINK_MAX_ABS_US, "us")) < 0 ||
            number_in(cx, g, qp, "beta_GBps", q == n - 1 ? AH_LINK_MIN_MEASURED_GBPS : AH_LINK_MIN_GBPS,
                      AH_LINK_MAX_GBPS, "a bandwidth in GB/s") < 0 ||
            ah_jget_num(cx, g, qp, "max_bytes", 0, 1, &mx) < 0)
            return -1;
    }
    return 0;
}

/* fits[i]: commbench's op names (collectives the planner does not read included) and link classes, the
 * small-message alpha and large-message beta within what a measurement gives */
static int check_fit(const ah_err_ctx *cx, const cJSON *f, int i) {
    char fp[AH_JPATH_LEN], p[AH_JPATH_LEN], op[32], cls[32];
    if (ah_jitem_obj(cx, f, "fits", i, fp) < 0 || known_keys(cx, f, fp, fit_keys) < 0 ||
        ah_jget_str(cx, f, fp, "op", 1, op, sizeof op) < 0 ||
        ah_jget_str(cx, f, fp, "link_class", 1, cls, sizeof cls) < 0)
        return -1;
    int k = 0;
    while (k < AH_OP_COUNT && strcmp(op, ah_comm_op_name((ah_comm_op)k)))
        k++;
    if (k == AH_OP_COUNT)
        return ah_jfail(cx, ah_jpath_item(p, "fits", i, "op"),
                        "unknown op \"%s\" (expected latency, bw, allreduce, allgather, reduce_scatter, bcast "
                        "or alltoall)",
                        op);
    if (strcmp(cls, "intra-node") && strcmp(cls, "inter-node"))
        return ah_jfail(cx, ah_jpath_item(p, "fits", i, "link_class"),
                        "expected \"intra-node\" or \"inter-node\", got \"%s\"", cls);
    if (number_in(cx, f, fp, "alpha_us", 0, AH_LINK_MAX_LATENCY_US, "a latency in us") < 0 ||
        number_in(cx, f, fp, "beta_GBps", AH_LINK_MIN_MEASURED_GBPS, AH_LINK_MAX_GBPS, "a bandwidth in GB/s") < 0)
        return -1;
    return check_regimes(cx, f, fp);
}

/* The document beyond its format: version, known fields, every fit. 0, or -1 with err. */
static int check_profile(const ah_err_ctx *cx, const cJSON *root) {
    int version;
    const cJSON *fits, *links = cJSON_GetObjectItemCaseSensitive(root, "links");
    char p[AH_JPATH_LEN];
    if (known_keys(cx, root, "", top_keys) < 0 || ah_jget_int(cx, root, "", "version", 0, 1, 2, &version) < 0 ||
        ah_jget_arr(cx, root, "", "fits", 1, &fits, p) < 0 ||
        (cJSON_IsObject(links) && known_keys(cx, links, "links", links_keys) < 0))
        return -1;
    int i = 0;
    for (const cJSON *f = fits->child; f; f = f->next, i++)
        if (check_fit(cx, f, i) < 0)
            return -1;
    return 0;
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
    else
        rc = check_profile(&cx, root);
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
        if (find_fit(fits, "latency", classes[k], &la, &lb) != 0 || find_fit(fits, "bw", classes[k], &ba, &bb) != 0)
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
