/* The piecewise one-message model of a comm profile's latency fit
 * (autohet/link_model.h): read once for the planner, the simulator and
 * autohet analyze --stack. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cluster/link_model_json.h"
#include "util/errors.h"
#include "util/json_file.h"

void ah_link_model_default(ah_link_model *m) {
    memset(m, 0, sizeof *m);
    m->n = 1;
    m->alpha_us[0] = 5;
    m->beta_GBps[0] = 10;
    snprintf(m->source, sizeof m->source, "default: alpha 5 us, beta 10 GB/s (no --comm-profile)");
}

/* the regimes[] (or the fit's own alpha_us / beta_GBps) of one latency fit */
static int read_fit(const cJSON *f, ah_link_model *m) {
    const cJSON *reg = cJSON_GetObjectItemCaseSensitive(f, "regimes");
    int nr = cJSON_IsArray(reg) ? cJSON_GetArraySize(reg) : 0;
    if (nr > AH_LINK_MAX_REGIMES)
        return -1;
    m->n = nr > 0 ? nr : 1;
    for (int q = 0; q < m->n; q++) {
        const cJSON *g = nr > 0 ? cJSON_GetArrayItem(reg, q) : f,
                    *a = cJSON_GetObjectItemCaseSensitive(g, "alpha_us"),
                    *b = cJSON_GetObjectItemCaseSensitive(g, "beta_GBps"),
                    *mx = cJSON_GetObjectItemCaseSensitive(g, "max_bytes");
        /* the first regime's alpha is the latency; later regimes' intercepts are free (ah_comm_fit_line) */
        if (!cJSON_IsNumber(a) || !cJSON_IsNumber(b) ||
            !(q > 0 ? isfinite(a->valuedouble) : a->valuedouble >= 0) ||
            !(fabs(a->valuedouble) <= AH_LINK_MAX_ABS_US) || !(b->valuedouble >= AH_LINK_MIN_GBPS) ||
            !(b->valuedouble <= AH_LINK_MAX_GBPS) || (q + 1 < m->n && !cJSON_IsNumber(mx)) ||
            (q > 0 && q + 1 < m->n && !(mx->valuedouble > m->max_bytes[q - 1])))
            return -1;
        m->alpha_us[q] = a->valuedouble;
        m->beta_GBps[q] = b->valuedouble;
        m->max_bytes[q] = q + 1 < m->n ? mx->valuedouble : INFINITY;
    }
    return 0;
}

/* the fit of op_name for link_class (NULL: intra-node, else the first) */
static const cJSON *find_fit(const cJSON *fits, const char *op_name, const char *link_class) {
    const cJSON *f, *use = NULL;
    cJSON_ArrayForEach(f, fits) {
        const cJSON *op = cJSON_GetObjectItemCaseSensitive(f, "op"),
                    *lc = cJSON_GetObjectItemCaseSensitive(f, "link_class");
        if (!cJSON_IsString(op) || strcmp(op->valuestring, op_name))
            continue;
        int match = cJSON_IsString(lc) && !strcmp(lc->valuestring, link_class ? link_class : "intra-node");
        if (match)
            return f;
        if (!use && !link_class)
            use = f;
    }
    return use;
}

int ah_link_model_from_fits(const cJSON *fits, const char *link_class, ah_link_model *m) {
    return ah_link_model_from_op_fit(fits, "latency", link_class, m);
}

int ah_link_model_from_op_fit(const cJSON *fits, const char *op_name, const char *link_class, ah_link_model *m) {
    memset(m, 0, sizeof *m);
    const cJSON *use = find_fit(fits, op_name, link_class);
    if (!use)
        return 1;
    if (read_fit(use, m) != 0) {
        memset(m, 0, sizeof *m);
        return -1;
    }
    const cJSON *lc = cJSON_GetObjectItemCaseSensitive(use, "link_class");
    snprintf(m->source, sizeof m->source, "%s fit, %s, %d regime(s)", op_name,
             cJSON_IsString(lc) ? lc->valuestring : "?", m->n);
    return 0;
}

int ah_link_model_read_class(const char *path, const char *link_class, ah_link_model *m, char *err,
                             size_t errlen) {
    memset(m, 0, sizeof *m);
    cJSON *root = ah_comm_profile_parse(path, err, errlen);
    if (!root)
        return -1;
    int rc = ah_link_model_from_fits(cJSON_GetObjectItemCaseSensitive(root, "fits"), link_class, m);
    if (rc < 0) {
        ah_errf(
            err, errlen,
            "--comm-profile %s: fits[]: the latency fit needs alpha_us >= 0 (first regime) and within 1e9, "
            "beta_GBps from 1e-6 to 1e12 and increasing max_bytes of every regime but the last (at most %d "
            "regimes)",
            path, AH_LINK_MAX_REGIMES);
    } else if (rc == 0) {
        char what[sizeof m->source];
        snprintf(what, sizeof what, "%s", m->source);
        snprintf(m->source, sizeof m->source, "%.80s: %.70s", path, what);
    }
    cJSON_Delete(root);
    return rc;
}

int ah_link_model_read(const char *path, ah_link_model *m, char *err, size_t errlen) {
    int rc = ah_link_model_read_class(path, NULL, m, err, errlen);
    if (rc == 1)
        ah_errf(err, errlen,
                "--comm-profile %s: fits[]: no \"latency\" fit (--stack costs the MPI algorithm "
                "message by message: run autohet commbench with --ops latency,allreduce)",
                path);
    return rc == 0 ? 0 : -1;
}

double ah_link_us(const ah_link_model *m, double bytes) {
    int q = 0;
    while (q + 1 < m->n && bytes > m->max_bytes[q])
        q++;
    double t = m->alpha_us[q] + bytes / (m->beta_GBps[q] * 1e3);
    /* a later regime's line has a free intercept, fitted on its own sizes only: between the previous
     * regime's end and its first size it can fall below the latency (negative, from a profile measured on
     * a busy machine); a message costs at least the smallest one's latency, as ah_msg_cost_of says */
    return t < m->alpha_us[0] ? m->alpha_us[0] : t;
}

double ah_link_shared_gain(double all_gbs, double one_gbs) {
    return all_gbs > 0 && one_gbs > 0 && all_gbs > one_gbs ? all_gbs / one_gbs : 1;
}
