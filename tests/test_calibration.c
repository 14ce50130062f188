/* The calibration file (autohet/calibration.h): lookups, a written file read back, and one-line errors that
 * name the file and the field. */
#include "test_util.h"

#include "autohet/calibration.h"
#include "autohet/profile.h"

static void test_scale_lookup(void **state) {
    (void)state;
    ah_calibration c;
    memset(&c, 0, sizeof c);
    assert_double_equal(ah_calibration_compute_scale(&c, "A100-40G", 4), 1.0, 0);
    assert_int_equal(ah_calibration_set_scale(&c, "A100-40G", 8, 1.5), 0);
    assert_int_equal(ah_calibration_set_scale(&c, "A100-40G", 1, 0.5), 0);
    assert_int_equal(ah_calibration_set_scale(&c, "A100-40G", 2, 0.75), 0);
    assert_int_equal(c.devices[0].n, 3);
    assert_int_equal(c.devices[0].mb[0], 1); /* kept in order */
    assert_int_equal(c.devices[0].mb[2], 8);
    assert_double_equal(ah_calibration_compute_scale(&c, "A100-40G", 2), 0.75, 0);
    /* between fitted sizes linear in log2(mb): 4 is halfway from 2 to 8 */
    assert_double_equal(ah_calibration_compute_scale(&c, "A100-40G", 4), 1.125, 1e-15);
    assert_double_equal(ah_calibration_compute_scale(&c, "A100-40G", 3), 0.75 + 0.75 * (log2(3.0) - 1) / 2, 1e-15);
    assert_double_equal(ah_calibration_compute_scale(&c, "A100-40G", 6), 0.75 + 0.75 * (log2(6.0) - 1) / 2, 1e-15);
    assert_double_equal(ah_calibration_compute_scale(&c, "A100-40G", 64), 1.5, 0); /* outside: the nearest end */
    assert_double_equal(ah_calibration_compute_scale(&c, "V100-16G", 8), 1.0, 0);
    assert_double_equal(ah_calibration_optimizer_scale(&c, "A100-40G"), 1.0, 0);
    assert_int_equal(ah_calibration_set_optimizer_scale(&c, "A100-40G", 0.25), 0);
    assert_double_equal(ah_calibration_optimizer_scale(&c, "A100-40G"), 0.25, 0);
    /* a transfer: alpha + bytes / (the class's fraction x the link's bandwidth), all of it where unset */
    c.p2p_alpha_s = 1e-3;
    c.p2p_bw_fraction[1] = 0.1;
    assert_double_equal(ah_calibration_transfer_s(&c, 1e9, 1, 100), 1e-3 + 0.1, 1e-15);
    assert_double_equal(ah_calibration_transfer_s(&c, 1e9, 0, 100), 1e-3 + 0.01, 1e-15);
}

/* The profile scales forward, backward and the optimizer step of a named device only. */
static void test_profile_scaled(void **state) {
    (void)state;
    ah_profile *p = ah_profile_analytic();
    ah_model_config m;
    assert_int_equal(ah_model_preset("gpt3-1.3b", &m), 0);
    ah_train_settings ts = {.seq = 2048};
    const ah_device *dev = ah_device_find(ah_device_catalog_builtin(), "A100-40G");
    ah_layer_cost a, b;
    char err[256];
    assert_int_equal(ah_profile_layer_cost(p, &m, &ts, dev, 3, 2, 4, &a, err, sizeof err), 0);
    ah_calibration c;
    memset(&c, 0, sizeof c);
    ah_calibration_set_scale(&c, "A100-40G", 4, 1.25);
    ah_calibration_set_optimizer_scale(&c, "A100-40G", 0.5);
    ah_profile_set_calibration(p, &c);
    assert_int_equal(ah_profile_layer_cost(p, &m, &ts, dev, 3, 2, 4, &b, err, sizeof err), 0);
    assert_double_equal(b.fwd_s, 1.25 * a.fwd_s, 1e-15);
    assert_double_equal(b.bwd_s, 1.25 * a.bwd_s, 1e-15);
    assert_double_equal(b.tp_comm_fwd_s, 1.25 * a.tp_comm_fwd_s, 1e-15);
    assert_double_equal(b.update_s, 0.5 * a.update_s, 1e-15);
    const ah_device *v100 = ah_device_find(ah_device_catalog_builtin(), "V100-16G");
    assert_int_equal(ah_profile_layer_cost(p, &m, &ts, v100, 3, 2, 4, &b, err, sizeof err), 0);
    ah_profile_set_calibration(p, NULL);
    assert_int_equal(ah_profile_layer_cost(p, &m, &ts, v100, 3, 2, 4, &a, err, sizeof err), 0);
    assert_double_equal(b.fwd_s, a.fwd_s, 0);
    ah_profile_free(p);
}

static void test_round_trip(void **state) {
    (void)state;
    ah_calibration c, d;
    memset(&c, 0, sizeof c);
    snprintf(c.source, sizeof c.source, "test");
    ah_calibration_set_scale(&c, "GH-96", 1, 0.863);
    ah_calibration_set_scale(&c, "GH-96", 8, 1.046);
    ah_calibration_set_optimizer_scale(&c, "GH-96", 0.2);
    c.lockstep = 1;
    c.p2p_alpha_s = 5e-4;
    c.p2p_bw_fraction[1] = 0.82;
    c.links_scoped = 1; /* fitted on datasheet links */
    char path[] = "/tmp/ahtest_calib_XXXXXX", err[512];
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(ah_calibration_write(path, &c, "{\"runs\": 3}", err, sizeof err), 0);
    assert_int_equal(ah_calibration_load(path, &d, err, sizeof err), 0);
    unlink(path);
    assert_int_equal(d.n_devices, 1);
    assert_string_equal(d.devices[0].name, "GH-96");
    assert_int_equal(d.devices[0].n, 2);
    assert_double_equal(d.devices[0].scale[1], 1.046, 0);
    assert_double_equal(ah_calibration_optimizer_scale(&d, "GH-96"), 0.2, 0);
    assert_int_equal(d.lockstep, 1);
    assert_double_equal(d.p2p_alpha_s, 5e-4, 0);
    assert_double_equal(d.p2p_bw_fraction[1], 0.82, 0);
    assert_double_equal(d.p2p_bw_fraction[0], 0, 0);
    assert_string_equal(d.source, "test");
    /* the fractions correct datasheet links: kept on those, dropped on measured ones (once) */
    assert_int_equal(d.links_scoped, 1);
    assert_int_equal(d.links_measured, 0);
    assert_int_equal(ah_calibration_link_scope(&d, 0), 0);
    assert_double_equal(d.p2p_bw_fraction[1], 0.82, 0);
    assert_int_equal(ah_calibration_link_scope(&d, 1), 1);
    assert_double_equal(d.p2p_bw_fraction[1], 0, 0);
    assert_double_equal(d.p2p_alpha_s, 5e-4, 0); /* the latency stays */
    assert_int_equal(ah_calibration_link_scope(&d, 1), 0);
    /* a file written before links were recorded applies its fractions everywhere */
    c.links_scoped = 0;
    fd = mkstemp(strcpy(path, "/tmp/ahtest_calib_XXXXXX"));
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(ah_calibration_write(path, &c, NULL, err, sizeof err), 0);
    assert_int_equal(ah_calibration_load(path, &d, err, sizeof err), 0);
    unlink(path);
    assert_int_equal(d.links_scoped, 0);
    assert_int_equal(ah_calibration_link_scope(&d, 1), 0);
    assert_double_equal(d.p2p_bw_fraction[1], 0.82, 0);
    /* what the reader would refuse is not written: a scale past 100, a left-out error of 100 % or more */
    fd = mkstemp(strcpy(path, "/tmp/ahtest_calib_XXXXXX"));
    assert_true(fd >= 0);
    close(fd);
    unlink(path);
    ah_calibration_set_scale(&c, "GH-96", 8, 1e6);
    assert_int_equal(ah_calibration_write(path, &c, NULL, err, sizeof err), -1);
    assert_contains(err, "devices[\"GH-96\"].compute_scale[\"8\"]: 1e+06 out of range");
    assert_contains(err, "(not written)");
    assert_int_equal(access(path, F_OK), -1);
    ah_calibration_set_scale(&c, "GH-96", 8, 1.046);
    assert_int_equal(
        ah_calibration_write(path, &c, "{\"left_out\": {\"mean_abs_error\": 1.5}}", err, sizeof err), -1);
    assert_contains(err, "validation.left_out.mean_abs_error: 1.5 out of range [0, 1)");
    assert_int_equal(access(path, F_OK), -1);
}

static void bad(const char *text, const char *want) {
    char path[64], err[512];
    write_tmp(text, path);
    ah_calibration c;
    assert_int_equal(ah_calibration_load(path, &c, err, sizeof err), -1);
    assert_contains(err, path);
    assert_contains(err, want);
    assert_null(strchr(err, '\n'));
    assert_int_equal(c.n_devices, 0); /* nothing half-read */
    unlink(path);
}

static void test_bad_files(void **state) {
    (void)state;
    bad("{\"version\": 1}", "format");
    bad("{\"format\": \"autohet-plan\", \"version\": 1}", "format: \"autohet-plan\": this is a plan");
    bad("{\"format\": \"autohet-other\", \"version\": 1}", "expected \"autohet-calibration\"");
    /* another kind of file is named as such, before its version (2 for a comm profile) is judged */
    bad("{\"format\": \"autohet-comm-profile\", \"version\": 2, \"fits\": []}",
        "format: \"autohet-comm-profile\": this is a comm profile (autohet commbench --json: give it to "
        "--comm-profile), not a calibration");
    bad("{\"format\": \"autohet-calibration\", \"version\": 2}", "version");
    bad("{\"format\": \"autohet-calibration\", \"version\": 1, \"devices\": {\"A\": {\"compute_scale\": "
        "{\"x\": 1}}}}",
        "devices[\"A\"].compute_scale[\"x\"]");
    bad("{\"format\": \"autohet-calibration\", \"version\": 1, \"devices\": {\"A\": {\"compute_scale\": "
        "{\"4\": -1}}}}",
        "devices[\"A\"].compute_scale[\"4\"]: -1 out of range [0.01, 100]");
    /* every figure within what a fit gives (docs/calibration.md): a scale of 1e6 or a 500 % left-out error
     * came through, the latter as a plan's "compute 500 %" with zero error bars */
    bad("{\"format\": \"autohet-calibration\", \"version\": 1, \"devices\": {\"A\": {\"compute_scale\": "
        "{\"1\": 1e6}}}}",
        "devices[\"A\"].compute_scale[\"1\"]: 1e+06 out of range [0.01, 100]");
    bad("{\"format\": \"autohet-calibration\", \"version\": 1, \"devices\": {\"A\": {\"compute_scale\": "
        "{\"1\": 1}, \"optimizer_scale\": 1000}}}",
        "devices[\"A\"].optimizer_scale: 1000 out of range [0.01, 100]");
    bad("{\"format\": \"autohet-calibration\", \"version\": 1, \"pipeline\": {\"p2p\": \"lockstep\", "
        "\"alpha_s\": 5}}",
        "pipeline.alpha_s: 5 out of range [0, 1]");
    bad("{\"format\": \"autohet-calibration\", \"version\": 1, \"pipeline\": {\"p2p\": \"lockstep\", "
        "\"bw_fraction\": {\"inter_node\": 1e-9}}}",
        "pipeline.bw_fraction.inter_node: expected a fraction of the link's bandwidth in [0.01, 1] or 0");
    bad("{\"format\": \"autohet-calibration\", \"version\": 1, \"validation\": {\"left_out\": "
        "{\"mean_abs_error\": 5, \"worst_abs_error\": 6}}}",
        "validation.left_out.mean_abs_error: 5 out of range [0, 1)");
    bad("{\"format\": \"autohet-calibration\", \"version\": 1, \"validation\": {\"as_is\": "
        "{\"mean_abs_error\": -0.1}}}",
        "validation.as_is.mean_abs_error: -0.1 out of range [0, 100]");
    bad("{\"format\": \"autohet-calibration\", \"version\": 1, \"validation\": {\"in_sample\": "
        "{\"mean_abs_error\": 0.2, \"worst_abs_error\": 0.1}}}",
        "validation.in_sample.worst_abs_error: 0.1 is below mean_abs_error 0.2");
    bad("{\"format\": \"autohet-calibration\", \"version\": 1, \"validation\": {\"runs\": 0}}",
        "validation.runs");
    bad("{\"format\": \"autohet-calibration\", \"version\": 1, \"validation\": {\"runs\": 3, \"excluded\": 4}}",
        "validation.excluded");
    bad("{\"format\": \"autohet-calibration\", \"version\": 1, \"devices\": {\"A\": {\"compute_scale\": {}, "
        "\"speed\": 2}}}",
        "devices[\"A\"].speed");
    bad("{\"format\": \"autohet-calibration\", \"version\": 1, \"devices\": {\"A\": {\"compute_scale\": "
        "{\"1\": 1}, "
        "\"optimizer_scale\": 0}}}",
        "optimizer_scale");
    bad("{\"format\": \"autohet-calibration\", \"version\": 1, \"pipeline\": {\"p2p\": \"fast\"}}",
        "pipeline.p2p");
    bad("{\"format\": \"autohet-calibration\", \"version\": 1, \"pipeline\": {\"p2p\": \"lockstep\", "
        "\"alpha_s\": -1}}",
        "pipeline.alpha_s");
    bad("{\"format\": \"autohet-calibration\", \"version\": 1, \"pipeline\": {\"p2p\": \"lockstep\", "
        "\"bw_fraction\": {\"inter_node\": \"fast\"}}}",
        "pipeline.bw_fraction.inter_node");
    bad("{\"format\": \"autohet-calibration\", \"version\": 1, \"pipeline\": {\"p2p\": \"lockstep\", "
        "\"bw_fraction\": {\"intra_node\": 1.5}}}",
        "pipeline.bw_fraction.intra_node");
    bad("{\"format\": \"autohet-calibration\", \"version\": 1, \"pipeline\": {\"p2p\": \"lockstep\", "
        "\"links\": \"guessed\"}}",
        "pipeline.links");
    bad("[1, 2]", "object");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scale_lookup),
        cmocka_unit_test(test_profile_scaled),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_bad_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
