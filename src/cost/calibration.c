/* The calibration file: per-device compute scales by micro-batch and the lockstep pipeline's transfer terms
 * (autohet/calibration.h, docs/calibration.md). */
#include "autohet/calibration.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/atomic_file.h"
#include "util/json_file.h"
#include "util/json_read.h"

#define MAX_FILE_BYTES (1u << 20)

static const ah_calib_device *find_device(const ah_calibration *c, const char *name) {
    for (int i = 0; c && i < c->n_devices; i++)
        if (strcmp(c->devices[i].name, name) == 0)
            return &c->devices[i];
    return NULL;
}

double ah_calibration_compute_scale(const ah_calibration *c, const char *name, int mb) {
    const ah_calib_device *d = name ? find_device(c, name) : NULL;
    if (!d || d->n == 0 || mb < 1)
        return 1.0;
    /* between two fitted sizes: linear in log2(mb); outside them: the nearest end */
    if (mb <= d->mb[0])
        return d->scale[0];
    if (mb >= d->mb[d->n - 1])
        return d->scale[d->n - 1];
    int i = 1;
    while (d->mb[i] < mb)
        i++;
    double lo = log2((double)d->mb[i - 1]), hi = log2((double)d->mb[i]), w = (log2((double)mb) - lo) / (hi - lo);
    return d->scale[i - 1] + w * (d->scale[i] - d->scale[i - 1]);
}

double ah_calibration_optimizer_scale(const ah_calibration *c, const char *name) {
    const ah_calib_device *d = name ? find_device(c, name) : NULL;
    return d && d->optimizer_scale > 0 ? d->optimizer_scale : 1.0;
}

int ah_calibration_scope(ah_calibration *c, const char *profile_model) {
    if (!c || !c->scoped || !profile_model || strcmp(c->profile_model, profile_model) == 0 || c->n_devices == 0)
        return 0;
    c->n_devices = 0;
    return 1;
}

int ah_calibration_link_scope(ah_calibration *c, int measured) {
    if (!c || !c->links_scoped || !c->links_measured == !measured ||
        (c->p2p_bw_fraction[0] == 0 && c->p2p_bw_fraction[1] == 0))
        return 0;
    c->p2p_bw_fraction[0] = c->p2p_bw_fraction[1] = 0; /* 0: all of the link */
    return 1;
}

static ah_calib_device *device_entry(ah_calibration *c, const char *name) {
    ah_calib_device *d = (ah_calib_device *)find_device(c, name);
    if (!d) {
        if (c->n_devices == AH_CALIB_MAX_DEVICES || strlen(name) >= sizeof d->name)
            return NULL;
        d = &c->devices[c->n_devices++];
        memset(d, 0, sizeof *d);
        snprintf(d->name, sizeof d->name, "%s", name);
    }
    return d;
}

int ah_calibration_set_optimizer_scale(ah_calibration *c, const char *name, double scale) {
    ah_calib_device *d = device_entry(c, name);
    if (!d)
        return -1;
    d->optimizer_scale = scale;
    return 0;
}

int ah_calibration_set_scale(ah_calibration *c, const char *name, int mb, double scale) {
    ah_calib_device *d = device_entry(c, name);
    if (!d)
        return -1;
    int i = 0;
    while (i < d->n && d->mb[i] < mb)
        i++;
    if (i < d->n && d->mb[i] == mb) {
        d->scale[i] = scale;
        return 0;
    }
    if (d->n == AH_CALIB_MAX_MB)
        return -1;
    memmove(&d->mb[i + 1], &d->mb[i], sizeof(int) * (size_t)(d->n - i));
    memmove(&d->scale[i + 1], &d->scale[i], sizeof(double) * (size_t)(d->n - i));
    d->mb[i] = mb;
    d->scale[i] = scale;
    d->n++;
    return 0;
}

double ah_calibration_transfer_s(const ah_calibration *c, double bytes, int inter, double link_gbs) {
    double f = c && c->p2p_bw_fraction[inter ? 1 : 0] > 0 ? c->p2p_bw_fraction[inter ? 1 : 0] : 1.0,
           bw = f * link_gbs;
    return (c ? c->p2p_alpha_s : 0.0) + (bw > 0 ? bytes / (bw * 1e9) : 0.0);
}

/* devices{NAME: {compute_scale: {"B": scale}, optimizer_scale}} */
static int load_devices(const ah_err_ctx *cx, const cJSON *devs, const char *path, ah_calibration *c) {
    char dp[AH_JPATH_LEN], sp[AH_JPATH_LEN], bp[AH_JPATH_LEN];
    for (const cJSON *d = devs->child; d; d = d->next) {
        ah_jpath_map_key(dp, path, d->string);
        if (!cJSON_IsObject(d))
            return ah_jfail(cx, dp, "expected an object, got %s", ah_json_type_name(d));
        for (const cJSON *k = d->child; k; k = k->next)
            if (strcmp(k->string, "compute_scale") != 0 && strcmp(k->string, "optimizer_scale") != 0) {
                ah_jpath_key(sp, dp, k->string);
                return ah_jfail(cx, sp, "unknown field (expected compute_scale or optimizer_scale)");
            }
        const cJSON *cs;
        if (ah_jget_obj(cx, d, dp, "compute_scale", 1, &cs, sp) < 0)
            return -1;
        if (strlen(d->string) >= sizeof c->devices[0].name)
            return ah_jfail(cx, dp, "device name longer than %zu characters", sizeof c->devices[0].name - 1);
        double opt = 1.0;
        if (ah_jget_num(cx, d, dp, "optimizer_scale", 0, 0, &opt) < 0)
            return -1;
        ah_jpath_key(bp, dp, "optimizer_scale");
        if (!(opt >= AH_CALIB_SCALE_MIN && opt <= AH_CALIB_SCALE_MAX))
            return ah_jfail(cx, bp, "%g out of range [%g, %g] (a scale of the optimizer step's time)", opt,
                            AH_CALIB_SCALE_MIN, AH_CALIB_SCALE_MAX);
        if (ah_calibration_set_optimizer_scale(c, d->string, opt) != 0)
            return ah_jfail(cx, dp, "more than %d devices", AH_CALIB_MAX_DEVICES);
        for (const cJSON *b = cs->child; b; b = b->next) {
            ah_jpath_map_key(bp, sp, b->string);
            char *end;
            long mb = strtol(b->string, &end, 10);
            if (*b->string == '\0' || *end != '\0' || mb < 1 || mb > 1 << 20)
                return ah_jfail(cx, bp, "expected a micro-batch size (an integer >= 1) as the key");
            if (!cJSON_IsNumber(b))
                return ah_jfail(cx, bp, "expected a number, got %s", ah_json_type_name(b));
            if (!(b->valuedouble >= AH_CALIB_SCALE_MIN && b->valuedouble <= AH_CALIB_SCALE_MAX))
                return ah_jfail(cx, bp, "%g out of range [%g, %g] (a scale of the compute time)", b->valuedouble,
                                AH_CALIB_SCALE_MIN, AH_CALIB_SCALE_MAX);
            if (ah_calibration_set_scale(c, d->string, (int)mb, b->valuedouble) != 0)
                return ah_jfail(cx, bp, "more than %d devices or %d micro-batch sizes", AH_CALIB_MAX_DEVICES,
                                AH_CALIB_MAX_MB);
        }
    }
    return 0;
}

/* pipeline{p2p: "lockstep"|"overlapped", alpha_s, bw_fraction{intra_node, inter_node}} */
static int load_pipeline(const ah_err_ctx *cx, const cJSON *pl, const char *path, ah_calibration *c) {
    char mode[32] = "overlapped", p[AH_JPATH_LEN];
    if (ah_jget_str(cx, pl, path, "p2p", 1, mode, sizeof mode) < 0)
        return -1;
    ah_jpath_key(p, path, "p2p");
    if (strcmp(mode, "lockstep") != 0 && strcmp(mode, "overlapped") != 0)
        return ah_jfail(cx, p, "expected \"lockstep\" or \"overlapped\", got \"%s\"", mode);
    c->lockstep = strcmp(mode, "lockstep") == 0;
    if (ah_jget_num(cx, pl, path, "alpha_s", 0, 0, &c->p2p_alpha_s) < 0)
        return -1;
    ah_jpath_key(p, path, "alpha_s");
    if (!(c->p2p_alpha_s >= 0 && c->p2p_alpha_s <= AH_CALIB_MAX_ALPHA_S))
        return ah_jfail(cx, p, "%g out of range [0, %g] (seconds per transfer)", c->p2p_alpha_s,
                        AH_CALIB_MAX_ALPHA_S);
    const cJSON *bw;
    int has = ah_jget_obj(cx, pl, path, "bw_fraction", 0, &bw, p);
    if (has < 0)
        return -1;
    static const char *cls[2] = {"intra_node", "inter_node"};
    for (int i = 0; has && i < 2; i++) {
        char q[AH_JPATH_LEN];
        if (ah_jget_num(cx, bw, p, cls[i], 0, 0, &c->p2p_bw_fraction[i]) < 0)
            return -1;
        ah_jpath_key(q, p, cls[i]);
        double f = c->p2p_bw_fraction[i];
        if (!(f == 0 || (f >= AH_CALIB_MIN_BW_FRACTION && f <= 1)))
            return ah_jfail(cx, q, "expected a fraction of the link's bandwidth in [%g, 1] or 0 (all of it), got %g",
                            AH_CALIB_MIN_BW_FRACTION, f);
    }
    char links[16] = "";
    int has_links = ah_jget_str(cx, pl, path, "links", 0, links, sizeof links);
    if (has_links < 0)
        return -1;
    ah_jpath_key(p, path, "links");
    if (has_links && strcmp(links, "measured") != 0 && strcmp(links, "datasheet") != 0)
        return ah_jfail(cx, p, "expected \"datasheet\" or \"measured\", got \"%s\"", links);
    c->links_scoped = has_links;
    c->links_measured = has_links && strcmp(links, "measured") == 0;
    return 0;
}

/* validation{runs, excluded, as_is, in_sample, left_out: {mean_abs_error, worst_abs_error}}: what calibrate
 * measured. Each error is |simulated / measured - 1| over the runs, the worst no smaller than the mean; the
 * left-out mean becomes the planner's error bars (plan --top), so it is below 1 as --model-error's. */
static int load_validation(const ah_err_ctx *cx, const cJSON *val, const char *path, ah_calibration *c) {
    int runs = 0, excluded = 0;
    char p[AH_JPATH_LEN], q[AH_JPATH_LEN];
    if (ah_jget_int(cx, val, path, "runs", 0, 1, 4096, &runs) < 0 ||
        ah_jget_int(cx, val, path, "excluded", 0, 0, runs > 0 ? runs : 4096, &excluded) < 0)
        return -1;
    static const char *const sets[3] = {"as_is", "in_sample", "left_out"};
    for (int k = 0; k < 3; k++) {
        const cJSON *e;
        double mean = 0, worst = 0;
        int has = ah_jget_obj(cx, val, path, sets[k], 0, &e, p), has_mean = 0, has_worst = 0;
        if (has < 0 || (has && ((has_mean = ah_jget_num(cx, e, p, "mean_abs_error", 0, 0, &mean)) < 0 ||
                                (has_worst = ah_jget_num(cx, e, p, "worst_abs_error", 0, 0, &worst)) < 0)))
            return -1;
        ah_jpath_key(q, p, "mean_abs_error");
        if (k == 2 && !(mean >= 0 && mean < 1))
            return ah_jfail(cx, q, "%g out of range [0, 1) (a fraction: 0.05 is 5 %%)", mean);
        if (!(mean >= 0 && mean <= AH_CALIB_MAX_ERROR))
            return ah_jfail(cx, q, "%g out of range [0, %g] (a fraction: 0.05 is 5 %%)", mean, AH_CALIB_MAX_ERROR);
        ah_jpath_key(q, p, "worst_abs_error");
        if (has_worst && !(worst >= 0 && worst <= AH_CALIB_MAX_ERROR))
            return ah_jfail(cx, q, "%g out of range [0, %g] (a fraction: 0.05 is 5 %%)", worst, AH_CALIB_MAX_ERROR);
        if (has_mean && has_worst && worst < mean)
            return ah_jfail(cx, q, "%g is below mean_abs_error %g (the worst run's error is at least the mean)",
                            worst, mean);
        if (k == 2)
            c->left_out_error = mean;
    }
    return 0;
}

/* what a file of another autohet format is, for the error naming it */
static const char *format_kind(const char *fmt) {
    static const char *const kinds[][2] = {
        {"autohet-comm-profile", "a comm profile (autohet commbench --json: give it to --comm-profile)"},
        {"autohet-profile", "a layer profile (autohet profile: give it to --profile)"},
        {"autohet-plan", "a plan (autohet plan --json)"},
        {"autohet-sim", "a simulation (autohet simulate --json)"},
    };
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (strcmp(fmt, kinds[i][0]) == 0)
            return kinds[i][1];
    return NULL;
}

/* A calibration document into c: 0, or -1 with err (c zeroed). */
static int load_doc(const ah_err_ctx *cx, const cJSON *root, ah_calibration *c) {
    memset(c, 0, sizeof *c);
    char fmt[32] = "", p[AH_JPATH_LEN];
    int version = 0, rc = 0;
    const cJSON *devs = NULL, *pl = NULL, *val = NULL;
    /* the kind first: another format's version says nothing about a calibration's */
    if (ah_jget_str(cx, root, "", "format", 1, fmt, sizeof fmt) < 0)
        rc = -1;
    else if (strcmp(fmt, "autohet-calibration") != 0 && format_kind(fmt))
        rc = ah_jfail(cx, "format", "\"%s\": this is %s, not a calibration (autohet calibrate --out)", fmt,
                      format_kind(fmt));
    else if (strcmp(fmt, "autohet-calibration") != 0)
        rc = ah_jfail(cx, "format", "expected \"autohet-calibration\" (autohet calibrate --out), got \"%s\"", fmt);
    else if (ah_jget_int(cx, root, "", "version", 1, 1, 1, &version) < 0)
        rc = -1;
    else if (ah_jget_str(cx, root, "", "source", 0, c->source, sizeof c->source) < 0 ||
             ah_jget_str(cx, root, "", "profile_model", 0, c->profile_model, sizeof c->profile_model) < 0 ||
             ah_jget_obj(cx, root, "", "devices", 0, &devs, p) < 0 ||
             (devs && load_devices(cx, devs, p, c)) ||
             ah_jget_obj(cx, root, "", "pipeline", 0, &pl, p) < 0 || (pl && load_pipeline(cx, pl, p, c)))
        rc = -1;
    else if (ah_jget_obj(cx, root, "", "validation", 0, &val, p) < 0 || (val && load_validation(cx, val, p, c)))
        rc = -1;
    if (rc == 0)
        c->scoped = cJSON_GetObjectItemCaseSensitive(root, "profile_model") != NULL;
    if (rc)
        memset(c, 0, sizeof *c);
    return rc;
}

int ah_calibration_load(const char *path, ah_calibration *c, char *err, size_t errlen) {
    ah_err_ctx cx = {path ? path : "(null)", err, errlen};
    memset(c, 0, sizeof *c);
    cJSON *root = ah_json_parse_file(path, MAX_FILE_BYTES, 1, err, errlen);
    if (!root)
        return -1;
    int rc = load_doc(&cx, root, c);
    cJSON_Delete(root);
    return rc;
}

int ah_calibration_write(const char *path, const ah_calibration *c, const char *extra, char *err,
                         size_t errlen) {
    cJSON *o = cJSON_CreateObject(), *devs = cJSON_CreateObject(), *pl = cJSON_CreateObject(),
          *bw = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "format", "autohet-calibration");
    cJSON_AddNumberToObject(o, "version", 1);
    cJSON_AddStringToObject(o, "source", c->source);
    if (c->scoped)
        cJSON_AddStringToObject(o, "profile_model", c->profile_model);
    for (int i = 0; i < c->n_devices; i++) {
        cJSON *d = cJSON_CreateObject(), *cs = cJSON_CreateObject();
        for (int j = 0; j < c->devices[i].n; j++) {
            char key[16];
            snprintf(key, sizeof key, "%d", c->devices[i].mb[j]);
            cJSON_AddNumberToObject(cs, key, c->devices[i].scale[j]);
        }
        cJSON_AddItemToObject(d, "compute_scale", cs);
        cJSON_AddNumberToObject(d, "optimizer_scale", ah_calibration_optimizer_scale(c, c->devices[i].name));
        cJSON_AddItemToObject(devs, c->devices[i].name, d);
    }
    cJSON_AddItemToObject(o, "devices", devs);
    cJSON_AddStringToObject(pl, "p2p", c->lockstep ? "lockstep" : "overlapped");
    cJSON_AddNumberToObject(pl, "alpha_s", c->p2p_alpha_s);
    cJSON_AddNumberToObject(bw, "intra_node", c->p2p_bw_fraction[0]);
    cJSON_AddNumberToObject(bw, "inter_node", c->p2p_bw_fraction[1]);
    cJSON_AddItemToObject(pl, "bw_fraction", bw);
    if (c->links_scoped)
        cJSON_AddStringToObject(pl, "links", c->links_measured ? "measured" : "datasheet");
    cJSON_AddItemToObject(o, "pipeline", pl);
    if (extra) {
        cJSON *x = cJSON_Parse(extra);
        if (x)
            cJSON_AddItemToObject(o, "validation", x);
    }
    /* read back as a reader would: a fit never writes what ah_calibration_load refuses */
    ah_err_ctx cx = {path, err, errlen};
    ah_calibration back;
    if (load_doc(&cx, o, &back) != 0) {
        size_t used = err ? strlen(err) : 0;
        if (err && used + 1 < errlen)
            snprintf(err + used, errlen - used, " (not written)");
        cJSON_Delete(o);
        return -1;
    }
    char *text = cJSON_Print(o);
    int rc = text ? ah_write_text_output(path, text, err, errlen) : -1;
    if (!text && err && errlen)
        snprintf(err, errlen, "%s: out of memory", path);
    free(text);
    cJSON_Delete(o);
    return rc;
}
