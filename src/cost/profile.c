/* Cost profiles: common entry points and dispatch between the analytic
 * roofline model (profile_analytic.c) and measured tables (profile_table.c). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "autohet/profile.h"
#include "autohet/profile_table.h"
#include "cost/profile_internal.h"
#include "util/errors.h"

void ah_cost_err_(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    char buf[1024];
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    ah_errf(err, errlen, "%s", buf);
}

ah_profile *ah_profile_alloc_(ah_profile_kind kind, const char *source) {
    ah_profile *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->kind = kind;
    p->model = strdup("");
    p->origin = strdup("");
    if (!p->model || !p->origin || ah_profile_set_source_(p, source) != 0) {
        ah_profile_free(p);
        return NULL;
    }
    return p;
}

int ah_profile_set_source_(ah_profile *p, const char *source) {
    char *s = strdup(source ? source : "");
    if (!s)
        return -1;
    free(p->source);
    p->source = s;
    return 0;
}

ah_profile *ah_profile_analytic(void) {
    return ah_profile_alloc_(AH_PROFILE_ANALYTIC, "analytic");
}

void ah_profile_free(ah_profile *p) {
    if (!p)
        return;
    ah_ptab_release_(p);
    free(p->source);
    free(p->model);
    free(p->origin);
    free(p);
}

const char *ah_profile_source(const ah_profile *p) {
    if (!p || !p->source)
        return "";
    return p->source;
}

ah_profile *ah_profile_load(const char *path, char *err, size_t errlen) {
    return ah_profile_load_with(path, ah_device_catalog_builtin(), err, errlen);
}

ah_profile *ah_profile_load_with(const char *path, const ah_device_catalog *catalog, char *err, size_t errlen) {
    if (!path || !*path) {
        ah_cost_err_(err, errlen, "profile: no path given");
        return NULL;
    }
    struct stat st;
    if (stat(path, &st) != 0) {
        ah_cost_err_(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    if (S_ISDIR(st.st_mode))
        return ah_profile_load_sailor_dir_with(path, catalog, err, errlen);
    return ah_table_load_json_(path, err, errlen);
}

int ah_profile_layer_cost(const ah_profile *p, const ah_model_config *m, const ah_train_settings *ts,
                          const ah_device *dev, int layer, int tp, int mb, ah_layer_cost *out, char *err,
                          size_t errlen) {
    if (!p || !m || !ts || !dev || !out) {
        ah_cost_err_(err, errlen, "profile: missing argument");
        return -1;
    }
    int n = ah_model_num_layers(m);
    if (layer < 0 || layer >= n) {
        ah_cost_err_(err, errlen, "layer %d out of range 0..%d for model %s", layer, n - 1, m->name);
        return -1;
    }
    if (tp < 1 || mb < 1) {
        ah_cost_err_(err, errlen, "invalid tp=%d mb=%d (both must be >= 1)", tp, mb);
        return -1;
    }
    if (ts->seq < 1) {
        ah_cost_err_(err, errlen, "invalid sequence length %d", ts->seq);
        return -1;
    }
    if (!(dev->slowdown > 0.0)) {
        ah_cost_err_(err, errlen, "device %s: slowdown must be > 0 (got %g)", dev->name, dev->slowdown);
        return -1;
    }
    int rc = p->kind == AH_PROFILE_ANALYTIC ? ah_analytic_layer_cost_(m, ts, dev, layer, tp, mb, out, err, errlen)
                                            : ah_table_layer_cost_(p, m, ts, dev, layer, tp, mb, out, err, errlen);
    if (rc == 0 && p->calib) { /* the calibration's compute scale (forward and backward, TP shares included) and optimizer scale */
        double sc = ah_calibration_compute_scale(p->calib, dev->name, mb);
        out->fwd_s *= sc;
        out->bwd_s *= sc;
        out->tp_comm_fwd_s *= sc;
        out->tp_comm_bwd_s *= sc;
        out->update_s *= ah_calibration_optimizer_scale(p->calib, dev->name);
    }
    return rc;
}

void ah_profile_set_calibration(ah_profile *p, const ah_calibration *c) {
    if (p)
        p->calib = c;
}

int ah_profile_has(const ah_profile *p, const ah_model_config *m, const ah_device *dev, int tp, int mb) {
    if (!p || !m || !dev || tp < 1 || mb < 1)
        return 0;
    if (p->kind == AH_PROFILE_ANALYTIC)
        return 1;
    return ah_table_has_(p, m, dev, tp, mb);
}

int ah_profile_has_device(const ah_profile *p, const ah_model_config *m, const ah_device *dev) {
    if (!p || !m || !dev)
        return 0;
    if (p->kind == AH_PROFILE_ANALYTIC)
        return 1;
    return ah_table_has_device_(p, m, dev);
}
