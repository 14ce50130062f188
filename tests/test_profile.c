/* Tests for the cost profiles: analytic roofline, Sailor import, autohet
 * profile JSON (builder / writer / loader). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <cjson/cJSON.h>

#include "autohet/device.h"
#include "autohet/model.h"
#include "autohet/profile.h"
#include "autohet/profile_table.h"
#include "test_util.h"

#define SAILOR_NEO AH_FIXTURES "/sailor/GPT-Neo-2.7"
#define SAILOR_OPT AH_FIXTURES "/sailor/OPT-350"
#define ALPHA 5e-6

static void assert_close(double got, double want) {
    double tol = 1e-12 + 1e-9 * fabs(want);
    if (fabs(got - want) > tol)
        fail_msg("got %.17g, want %.17g", got, want);
}

static ah_model_config model(const char *name) {
    ah_model_config m;
    assert_int_equal(ah_model_preset(name, &m), 0);
    return m;
}

static const ah_device *device(const char *name) {
    const ah_device *d = ah_device_find(ah_device_catalog_builtin(), name);
    assert_non_null(d);
    return d;
}

/* The catalog device without its SM count: costed by the plain roofline (the
 * path of the CPU devices and of new devices given without sm_count), whose
 * formulas the analytic tests below check by hand. The calibrated GEMM model
 * of real GPUs is tested in test_calib.c. */
static const ah_device *roofline_device(const char *name) {
    static ah_device copies[4];
    static int next;
    ah_device *d = &copies[next++ % 4];
    *d = *device(name);
    d->sm_count = 0;
    return d;
}

static ah_layer_cost cost(const ah_profile *p, const ah_model_config *m, int seq, ah_recompute rc,
                          const ah_device *d, int layer, int tp, int mb) {
    ah_train_settings ts = {.seq = seq, .recompute = rc};
    ah_layer_cost c;
    char err[512] = "";
    if (ah_profile_layer_cost(p, m, &ts, d, layer, tp, mb, &c, err, sizeof err) != 0)
        fail_msg("layer_cost failed: %s", err);
    return c;
}

/* Expect failure; return the error line. */
static const char *cost_err(const ah_profile *p, const ah_model_config *m, int seq, const ah_device *d,
                            int layer, int tp, int mb) {
    static char err[512];
    ah_train_settings ts = {.seq = seq, .recompute = AH_RECOMPUTE_NONE};
    ah_layer_cost c;
    err[0] = '\0';
    assert_int_equal(ah_profile_layer_cost(p, m, &ts, d, layer, tp, mb, &c, err, sizeof err), -1);
    assert_true(strlen(err) > 0);
    assert_null(strchr(err, '\n'));
    return err;
}

/* Hand-computed pieces of the analytic model. */
static double hand_compute(const ah_model_config *m, const ah_device *d, ah_layer_kind k, int seq, int mb,
                           int tp) {
    double flops = ah_layer_fwd_flops(m, k, seq, mb);
    double bytes = ah_layer_fwd_bytes(m, k, seq, mb, tp);
    double tc = flops / (tp * d->peak_tflops * 1e12 * d->efficiency);
    double tm = bytes / (d->mem_bw_gbs * 1e9);
    return tc > tm ? tc : tm;
}

static double hand_allreduce(const ah_model_config *m, const ah_device *d, int seq, int mb, int tp) {
    double n = 2.0 * mb * seq * (double)m->hidden;
    return 2.0 * (tp - 1) / tp * n / (d->intra_bw_gbs * 1e9) + 2.0 * (tp - 1) * ALPHA;
}

/* ------------------------------------------------------------------ analytic */

static void test_analytic_block_tp1(void **state) {
    (void)state;
    ah_profile *p = ah_profile_analytic();
    assert_non_null(p);
    assert_string_equal(ah_profile_source(p), "analytic");
    ah_model_config m = model("gpt3-2.7b");
    const ah_device *d = roofline_device("A100-40G");
    assert_true(d->slowdown == 1.0);

    double flops = ah_layer_fwd_flops(&m, AH_LAYER_BLOCK, 2048, 1);
    double bytes = ah_layer_fwd_bytes(&m, AH_LAYER_BLOCK, 2048, 1, 1);
    double t_flops = flops / (d->peak_tflops * 1e12 * d->efficiency);
    double t_bytes = bytes / (d->mem_bw_gbs * 1e9);
    assert_true(t_flops > t_bytes); /* a 2.7B block at s=2048 is compute-bound */

    ah_layer_cost c = cost(p, &m, 2048, AH_RECOMPUTE_NONE, d, 1, 1, 1);
    assert_close(c.fwd_s, t_flops);
    assert_close(c.bwd_s, 2.0 * t_flops);
    double params = ah_layer_params(&m, AH_LAYER_BLOCK);
    assert_close(c.update_s, params * 32.0 / (d->mem_bw_gbs * 1e9));
    /* Plausible magnitude: milliseconds, like Sailor's measured 5 ms. */
    assert_true(c.fwd_s > 5e-4 && c.fwd_s < 5e-2);

    /* Every block costs the same. */
    ah_layer_cost c2 = cost(p, &m, 2048, AH_RECOMPUTE_NONE, d, 32, 1, 1);
    assert_close(c2.fwd_s, c.fwd_s);
    ah_profile_free(p);
}

static void test_analytic_tp2(void **state) {
    (void)state;
    ah_profile *p = ah_profile_analytic();
    ah_model_config m = model("gpt3-2.7b");
    const ah_device *d = roofline_device("A100-40G");
    int s = 2048;

    double c1 = hand_compute(&m, d, AH_LAYER_BLOCK, s, 1, 1);
    double flops = ah_layer_fwd_flops(&m, AH_LAYER_BLOCK, s, 1);
    double bytes2 = ah_layer_fwd_bytes(&m, AH_LAYER_BLOCK, s, 1, 2);
    assert_true(flops / (2 * d->peak_tflops * 1e12 * d->efficiency) > bytes2 / (d->mem_bw_gbs * 1e9));
    double c2 = c1 / 2.0; /* still compute-bound: compute halves */
    double ar = 2.0 * (1.0 / 2.0) * (2.0 * 1 * s * 2560) / (d->intra_bw_gbs * 1e9) + 2.0 * ALPHA;
    assert_close(ar, hand_allreduce(&m, d, s, 1, 2));

    ah_layer_cost c = cost(p, &m, s, AH_RECOMPUTE_NONE, d, 5, 2, 1);
    assert_close(c.fwd_s, c2 + 2 * ar);
    assert_close(c.bwd_s, 2 * c2 + 2 * ar);
    assert_close(c.update_s, ah_layer_params(&m, AH_LAYER_BLOCK) / 2 * 32.0 / (d->mem_bw_gbs * 1e9));

    /* Head: one all-reduce each way. */
    int head = ah_model_num_layers(&m) - 1;
    double ch = hand_compute(&m, d, AH_LAYER_HEAD, s, 1, 2);
    c = cost(p, &m, s, AH_RECOMPUTE_NONE, d, head, 2, 1);
    assert_close(c.fwd_s, ch + ar);
    assert_close(c.bwd_s, 2 * ch + ar);

    /* Embedding: memory-bound (0 FLOPs), one all-reduce in forward only. */
    assert_true(ah_layer_fwd_flops(&m, AH_LAYER_EMBED, s, 1) == 0.0);
    double ce = ah_layer_fwd_bytes(&m, AH_LAYER_EMBED, s, 1, 2) / (d->mem_bw_gbs * 1e9);
    assert_true(ce > 0);
    c = cost(p, &m, s, AH_RECOMPUTE_NONE, d, 0, 2, 1);
    assert_close(c.fwd_s, ce + ar);
    assert_close(c.bwd_s, 2 * ce);
    assert_close(c.update_s, ah_layer_params(&m, AH_LAYER_EMBED) / 2 * 32.0 / (d->mem_bw_gbs * 1e9));

    /* tp=4, mb=4 follows the same formula. */
    double c4 = hand_compute(&m, d, AH_LAYER_BLOCK, s, 4, 4);
    double ar4 = hand_allreduce(&m, d, s, 4, 4);
    c = cost(p, &m, s, AH_RECOMPUTE_NONE, d, 3, 4, 4);
    assert_close(c.fwd_s, c4 + 2 * ar4);
    assert_close(c.bwd_s, 2 * c4 + 2 * ar4);
    ah_profile_free(p);
}

static void test_analytic_recompute(void **state) {
    (void)state;
    ah_profile *p = ah_profile_analytic();
    ah_model_config m = model("gpt3-2.7b");
    const ah_device *d = roofline_device("A100-40G");
    int s = 2048;

    ah_layer_cost none = cost(p, &m, s, AH_RECOMPUTE_NONE, d, 1, 1, 2);
    ah_layer_cost full = cost(p, &m, s, AH_RECOMPUTE_FULL, d, 1, 1, 2);
    ah_layer_cost sel = cost(p, &m, s, AH_RECOMPUTE_SELECTIVE, d, 1, 1, 2);
    assert_close(none.bwd_s, 2 * none.fwd_s);
    assert_close(full.fwd_s, none.fwd_s);
    assert_close(full.bwd_s, 3 * none.fwd_s);
    double attn = 4.0 * 2 * (double)s * s * 2560 / (d->peak_tflops * 1e12 * d->efficiency);
    assert_close(sel.bwd_s, none.bwd_s + attn);
    assert_true(sel.bwd_s < full.bwd_s);

    /* With TP the recomputed forward brings its all-reduces along. */
    double c2 = hand_compute(&m, d, AH_LAYER_BLOCK, s, 2, 2);
    double ar = hand_allreduce(&m, d, s, 2, 2);
    full = cost(p, &m, s, AH_RECOMPUTE_FULL, d, 1, 2, 2);
    assert_close(full.bwd_s, 3 * c2 + 4 * ar);
    sel = cost(p, &m, s, AH_RECOMPUTE_SELECTIVE, d, 1, 2, 2);
    assert_close(sel.bwd_s, 2 * c2 + 2 * ar + attn / 2);

    /* The embedding and the head are not recomputed. */
    int head = ah_model_num_layers(&m) - 1;
    assert_close(cost(p, &m, s, AH_RECOMPUTE_FULL, d, head, 2, 2).bwd_s,
                 cost(p, &m, s, AH_RECOMPUTE_NONE, d, head, 2, 2).bwd_s);
    assert_close(cost(p, &m, s, AH_RECOMPUTE_FULL, d, 0, 1, 2).bwd_s,
                 cost(p, &m, s, AH_RECOMPUTE_NONE, d, 0, 1, 2).bwd_s);
    ah_profile_free(p);
}

static void test_analytic_slowdown_and_has(void **state) {
    (void)state;
    ah_profile *p = ah_profile_analytic();
    ah_model_config m = model("gpt3-2.7b");
    ah_device slow = *device("A100-40G");
    const ah_device *fast = device("A100-40G");
    slow.slowdown = 3.0;
    for (int layer = 0; layer < ah_model_num_layers(&m); layer += 11) {
        ah_layer_cost a = cost(p, &m, 2048, AH_RECOMPUTE_FULL, fast, layer, 2, 4);
        ah_layer_cost b = cost(p, &m, 2048, AH_RECOMPUTE_FULL, &slow, layer, 2, 4);
        assert_close(b.fwd_s, 3 * a.fwd_s);
        assert_close(b.bwd_s, 3 * a.bwd_s);
        assert_close(b.update_s, 3 * a.update_s);
    }
    /* Faster device, shorter time. */
    const ah_device *v100 = device("V100-16G");
    assert_true(cost(p, &m, 2048, AH_RECOMPUTE_NONE, v100, 1, 1, 1).fwd_s >
                cost(p, &m, 2048, AH_RECOMPUTE_NONE, fast, 1, 1, 1).fwd_s);

    /* Covers everything. */
    assert_int_equal(ah_profile_has(p, &m, fast, 8, 64), 1);
    assert_int_equal(ah_profile_has(p, &m, v100, 1, 1), 1);
    assert_int_equal(ah_profile_is_measured(p), 0);

    /* Bad arguments are errors, not garbage. */
    assert_contains(cost_err(p, &m, 2048, fast, 34, 1, 1), "out of range");
    assert_contains(cost_err(p, &m, 2048, fast, 1, 0, 1), "tp=0");
    ah_profile_free(p);
}

/* ------------------------------------------------------------------ Sailor */

static void test_sailor_neo(void **state) {
    (void)state;
    char err[512] = "";
    ah_profile *p = ah_profile_load_sailor_dir(SAILOR_NEO, err, sizeof err);
    if (!p)
        fail_msg("%s", err);
    assert_string_equal(ah_profile_source(p), "measured:" SAILOR_NEO);
    assert_int_equal(ah_profile_is_measured(p), 1);
    assert_int_equal(ah_profile_table_seq(p), 2048);
    assert_int_equal(ah_profile_table_num_layers(p), 34);
    assert_int_equal(ah_profile_table_num_devices(p), 3);
    assert_int_equal(ah_profile_table_num_skipped(p), 0);
    assert_string_equal(ah_profile_table_device(p, 0), "A100-40G");
    assert_string_equal(ah_profile_table_model(p), "GPT-Neo-2.7");
    assert_string_equal(ah_profile_table_origin(p), "sailor:" SAILOR_NEO);

    ah_model_config m = model("gpt-neo-2.7b");
    const ah_device *a100 = device("A100-40G");
    ah_layer_cost c = cost(p, &m, 2048, AH_RECOMPUTE_NONE, a100, 1, 2, 2);
    assert_true(c.fwd_s == 0.0058);
    assert_true(c.bwd_s == 0.012454);
    assert_true(c.update_s == 0.003361);
    /* Recomputation does not change measured times. */
    ah_layer_cost cf = cost(p, &m, 2048, AH_RECOMPUTE_FULL, a100, 1, 2, 2);
    assert_true(cf.bwd_s == c.bwd_s);
    /* Slowdown scales them. */
    ah_device slow = *a100;
    slow.slowdown = 2.5;
    ah_layer_cost cs = cost(p, &m, 2048, AH_RECOMPUTE_NONE, &slow, 1, 2, 2);
    assert_close(cs.fwd_s, 2.5 * 0.0058);
    assert_close(cs.bwd_s, 2.5 * 0.012454);
    assert_close(cs.update_s, 2.5 * 0.003361);

    /* Present / absent devices and (mb, tp). */
    const ah_device *v100 = device("V100-16G");
    assert_int_equal(ah_profile_has(p, &m, v100, 2, 2), 1);
    assert_int_equal(ah_profile_has(p, &m, v100, 1, 8), 0); /* V100 mb=8 has tp 2,4 only */
    assert_int_equal(ah_profile_has(p, &m, v100, 2, 8), 1);
    assert_int_equal(ah_profile_has(p, &m, device("A100-80G"), 2, 64), 1);
    assert_int_equal(ah_profile_has(p, &m, device("A100-80G"), 4, 1), 0);
    const ah_device *h800 = ah_device_find(ah_device_catalog_builtin(), "H800");
    ah_device fake;
    if (!h800) { /* not in the catalog: a hand-made device of that name */
        fake = *a100;
        snprintf(fake.name, sizeof fake.name, "H800");
        h800 = &fake;
    }
    assert_int_equal(ah_profile_has(p, &m, h800, 1, 1), 0);
    const char *e = cost_err(p, &m, 2048, h800, 1, 1, 1);
    assert_contains(e, "H800");
    assert_contains(e, "A100-40G");
    assert_contains(e, "V100-16G");
    e = cost_err(p, &m, 2048, v100, 1, 1, 8);
    assert_contains(e, "mb=8");
    assert_contains(e, "tp=1");
    assert_contains(e, "8/2"); /* lists what exists */
    ah_profile_free(p);
}

/* Every number in every Sailor file is loaded as written. */
static void check_dir_against_files(const char *dir, const char *const *files, int n_files) {
    char err[512] = "";
    ah_profile *p = ah_profile_load(dir, err, sizeof err);
    if (!p)
        fail_msg("%s", err);
    for (int i = 0; i < n_files; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s.json", dir, files[i]);
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        static char buf[1 << 17];
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[len] = '\0';
        cJSON *root = cJSON_Parse(buf);
        assert_non_null(root);
        int checked = 0;
        for (cJSON *jm = root->child; jm; jm = jm->next)
            for (cJSON *jt = jm->child; jt; jt = jt->next)
                for (cJSON *jl = jt->child; jl; jl = jl->next) {
                    ah_layer_cost c;
                    assert_int_equal(ah_profile_table_get(p, files[i], atoi(jm->string), atoi(jt->string),
                                                          atoi(jl->string), &c),
                                     0);
                    assert_true(c.fwd_s == cJSON_GetArrayItem(jl, 0)->valuedouble);
                    assert_true(c.bwd_s == cJSON_GetArrayItem(jl, 1)->valuedouble);
                    assert_true(c.update_s == cJSON_GetArrayItem(jl, 2)->valuedouble);
                    checked++;
                }
        assert_true(checked > 0);
        cJSON_Delete(root);
    }
    ah_profile_free(p);
}

static void test_sailor_all_values(void **state) {
    (void)state;
    const char *neo[] = {"A100-40", "A100-80", "V100-16"};
    check_dir_against_files(SAILOR_NEO, neo, 3);
    const char *opt[] = {"A100-40", "A100-80", "V100-16", "RTX-3090", "Titan-RTX", "RTX-2080"};
    char err[512];
    ah_profile *p = ah_profile_load_sailor_dir(SAILOR_OPT, err, sizeof err);
    if (!p)
        fail_msg("%s", err);
    /* All six file names map to catalog GPUs. */
    assert_int_equal(ah_profile_table_num_devices(p), 6);
    assert_int_equal(ah_profile_table_num_skipped(p), 0);
    assert_int_equal(ah_profile_table_num_layers(p), 26);
    ah_profile_free(p);
    check_dir_against_files(SAILOR_OPT, opt, 6);
}

static void test_sailor_mismatches(void **state) {
    (void)state;
    char err[512] = "";
    ah_profile *p = ah_profile_load(SAILOR_OPT, err, sizeof err);
    if (!p)
        fail_msg("%s", err);
    const ah_device *a100 = device("A100-40G");
    /* Wrong layer count: gpt3-2.7b has 34 layers, the OPT-350 profile 26. */
    ah_model_config gpt = model("gpt3-2.7b");
    const char *e = cost_err(p, &gpt, 2048, a100, 1, 1, 1);
    assert_contains(e, "26");
    assert_contains(e, "34");
    assert_contains(e, "gpt3-2.7b");
    assert_int_equal(ah_profile_has(p, &gpt, a100, 1, 1), 0);

    /* The right model works; another sequence length does not. */
    ah_model_config opt = model("opt-350m");
    assert_int_equal(ah_profile_has(p, &opt, a100, 1, 1), 1);
    ah_layer_cost c = cost(p, &opt, 2048, AH_RECOMPUTE_NONE, a100, 1, 1, 1);
    assert_true(c.fwd_s == 0.002786);
    e = cost_err(p, &opt, 1024, a100, 1, 1, 1);
    assert_contains(e, "2048");
    assert_contains(e, "1024");
    ah_profile_free(p);
}

/* ------------------------------------------------------------------ temp files */

typedef struct {
    char dir[64];
    char files[8][128];
    int n;
} tmpdir;

static void tmp_make(tmpdir *t) {
    memset(t, 0, sizeof *t);
    snprintf(t->dir, sizeof t->dir, "/tmp/ah_test_profile_XXXXXX");
    assert_non_null(mkdtemp(t->dir));
}

static const char *tmp_write(tmpdir *t, const char *name, const char *text) {
    assert_true(t->n < 8);
    char dir[sizeof t->dir];
    memcpy(dir, t->dir, sizeof dir);
    char *path = t->files[t->n++];
    snprintf(path, sizeof t->files[0], "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

static void tmp_remove(tmpdir *t) {
    for (int i = 0; i < t->n; i++)
        unlink(t->files[i]);
    assert_int_equal(rmdir(t->dir), 0);
}

/* Load a one-file Sailor dir; expect an error equal to want (or containing it). */
static void sailor_expect_error(const char *name, const char *text, const char *want, int exact) {
    tmpdir t;
    tmp_make(&t);
    tmp_write(&t, name, text);
    char err[512] = "";
    ah_profile *p = ah_profile_load(t.dir, err, sizeof err);
    if (p)
        fail_msg("loaded %s without error: %s", name, text);
    assert_null(strchr(err, '\n'));
    if (exact)
        assert_string_equal(err, want);
    else
        assert_contains(err, want);
    tmp_remove(&t);
}

static void test_sailor_errors(void **state) {
    (void)state;
    sailor_expect_error("A100-40.json", "{ \"1\": {\"1\": ", "A100-40.json: invalid JSON", 0);
    sailor_expect_error("A100-40.json", "", "A100-40.json: invalid JSON", 0);
    sailor_expect_error("A100-40.json", "{\"2\":{\"4\":{\"0\":[1,2,3],\"1\":[1,2]}}}",
                        "A100-40.json: [\"2\"][\"4\"][\"1\"]: expected 3 numbers", 1);
    sailor_expect_error("A100-40.json", "{\"2\":{\"4\":{\"0\":[1,\"x\",3]}}}",
                        "A100-40.json: [\"2\"][\"4\"][\"0\"]: expected 3 numbers", 1);
    sailor_expect_error("V100-16.json", "{\"1\":{\"1\":{\"0\":[1,2,3],\"2\":[1,2,3]}}}",
                        "V100-16.json: [\"1\"][\"1\"][\"2\"]: layer index out of range", 0);
    sailor_expect_error("V100-16.json", "{\"1\":{\"1\":{\"0\":[1,2,3],\"1\":[1,-2,3]}}}",
                        "V100-16.json: [\"1\"][\"1\"][\"1\"]: times must be finite and >= 0", 1);
    sailor_expect_error("V100-16.json", "{\"1\":{\"1\":{\"0\":[1,2,1e999]}}}",
                        "V100-16.json: [\"1\"][\"1\"][\"0\"]: times must be finite", 0);
    sailor_expect_error("V100-16.json", "{\"1\":{\"1\":{\"0\":[1,2,3],\"1\":[1,2,3]},\"2\":{\"0\":[1,2,3]}}}",
                        "V100-16.json: [\"1\"][\"2\"]: 1 layers, but other entries have 2", 1);
    sailor_expect_error("V100-16.json", "{\"x\":{}}",
                        "V100-16.json: [\"x\"]: micro-batch size must be a positive integer", 1);
    sailor_expect_error("V100-16.json", "{\"1\":{\"0\":{\"0\":[1,2,3]}}}",
                        "V100-16.json: [\"1\"][\"0\"]: TP degree must be a positive integer", 1);
    sailor_expect_error("V100-16.json", "[1,2,3]", "V100-16.json: expected an object", 0);
    sailor_expect_error("Foo-GPU.json", "{}", "no file name maps to a known GPU (skipped: Foo-GPU.json)", 0);

    /* Layer counts must agree across files too. */
    tmpdir t;
    tmp_make(&t);
    tmp_write(&t, "A100-40.json", "{\"1\":{\"1\":{\"0\":[1,2,3],\"1\":[1,2,3]}}}");
    tmp_write(&t, "V100-16.json", "{\"1\":{\"1\":{\"0\":[1,2,3]}}}");
    char err[512] = "";
    assert_null(ah_profile_load_sailor_dir(t.dir, err, sizeof err));
    assert_contains(err, "V100-16.json: [\"1\"][\"1\"]: 1 layers, but other entries have 2");
    tmp_remove(&t);

    /* Two names for the same GPU. */
    tmp_make(&t);
    tmp_write(&t, "A100-40.json", "{\"1\":{\"1\":{\"0\":[1,2,3]}}}");
    tmp_write(&t, "A100-40G.json", "{\"1\":{\"1\":{\"0\":[1,2,3]}}}");
    assert_null(ah_profile_load_sailor_dir(t.dir, err, sizeof err));
    assert_contains(err, "A100-40G.json: maps to GPU A100-40G, already loaded from A100-40.json");
    tmp_remove(&t);

    /* Empty directory, missing directory. */
    tmp_make(&t);
    assert_null(ah_profile_load_sailor_dir(t.dir, err, sizeof err));
    assert_contains(err, "no <GPU>.json profile files");
    tmp_remove(&t);
    assert_null(ah_profile_load("/nonexistent/ah-profile", err, sizeof err));
    assert_contains(err, "/nonexistent/ah-profile");
}

static void test_sailor_unknown_skipped(void **state) {
    (void)state;
    tmpdir t;
    tmp_make(&t);
    tmp_write(&t, "A100-40.json", "{\"1\":{\"1\":{\"0\":[1,2,3],\"1\":[4,5,6]}}}");
    tmp_write(&t, "Mystery-9000.json", "not even json");
    tmp_write(&t, "notes.txt", "ignored");
    char err[512] = "";
    ah_profile *p = ah_profile_load_sailor_dir(t.dir, err, sizeof err);
    if (!p)
        fail_msg("%s", err);
    assert_int_equal(ah_profile_table_num_devices(p), 1);
    assert_int_equal(ah_profile_table_num_skipped(p), 1);
    assert_string_equal(ah_profile_table_skipped(p, 0), "Mystery-9000.json");
    ah_layer_cost c;
    assert_int_equal(ah_profile_table_get(p, "A100-40G", 1, 1, 1, &c), 0);
    assert_true(c.fwd_s == 4 && c.bwd_s == 5 && c.update_s == 6);
    assert_int_equal(ah_profile_table_get(p, "A100-40", 1, 1, 1, &c), 0); /* alias */
    assert_int_equal(ah_profile_table_get(p, "A100-40G", 1, 2, 1, &c), -1);
    ah_profile_free(p);
    tmp_remove(&t);
}

/* ------------------------------------------------------------------ autohet JSON */

static void assert_same_tables(const ah_profile *a, const ah_profile *b) {
    assert_int_equal(ah_profile_table_num_devices(a), ah_profile_table_num_devices(b));
    assert_int_equal(ah_profile_table_num_layers(a), ah_profile_table_num_layers(b));
    assert_int_equal(ah_profile_table_seq(a), ah_profile_table_seq(b));
    assert_string_equal(ah_profile_table_model(a), ah_profile_table_model(b));
    assert_string_equal(ah_profile_table_origin(a), ah_profile_table_origin(b));
    for (int i = 0; i < ah_profile_table_num_devices(a); i++) {
        const char *dev = ah_profile_table_device(a, i);
        assert_string_equal(dev, ah_profile_table_device(b, i));
        assert_int_equal(ah_profile_table_num_entries(a, i), ah_profile_table_num_entries(b, i));
        for (int j = 0; j < ah_profile_table_num_entries(a, i); j++) {
            int mb, tp, mb2, tp2;
            assert_int_equal(ah_profile_table_entry(a, i, j, &mb, &tp), 0);
            assert_int_equal(ah_profile_table_entry(b, i, j, &mb2, &tp2), 0);
            assert_int_equal(mb, mb2);
            assert_int_equal(tp, tp2);
            for (int l = 0; l < ah_profile_table_num_layers(a); l++) {
                ah_layer_cost x, y;
                assert_int_equal(ah_profile_table_get(a, dev, mb, tp, l, &x), 0);
                assert_int_equal(ah_profile_table_get(b, dev, mb, tp, l, &y), 0);
                assert_true(x.fwd_s == y.fwd_s); /* bit-exact */
                assert_true(x.bwd_s == y.bwd_s);
                assert_true(x.update_s == y.update_s);
            }
        }
    }
}

static void test_builder_round_trip(void **state) {
    (void)state;
    ah_model_config m = model("opt-350m");
    int n = ah_model_num_layers(&m);
    ah_profile *p = ah_profile_table_new("opt-350m", 1024);
    assert_non_null(p);
    assert_string_equal(ah_profile_source(p), "measured:(in-memory)");
    assert_int_equal(ah_profile_table_set_origin(p, "autohet profile test"), 0);
    const int mbs[] = {4, 1}, tps[] = {2, 1};
    for (int e = 0; e < 2; e++)
        for (int l = 0; l < n; l++) {
            ah_layer_cost c = {.fwd_s = 0.1 * (l + 1) / 3.0 * mbs[e],
                               .bwd_s = 1e-7 * (l + 1) + 1.0 / 7.0 / tps[e],
                               .update_s = l == 0 ? 0.0 : 123.456789012345678 / (l + 3)};
            assert_int_equal(ah_profile_table_set(p, "A100-40", mbs[e], tps[e], l, n, c), 0);
            c.fwd_s *= 1.5;
            assert_int_equal(ah_profile_table_set(p, "V100-16G", mbs[e], tps[e], l, n, c), 0);
        }
    /* Rejected: other layer count, layer out of range, negative, NaN. */
    ah_layer_cost ok = {.fwd_s = 1, .bwd_s = 2, .update_s = 3},
                  neg = {.fwd_s = 1, .bwd_s = -2, .update_s = 3},
                  nan_c = {.fwd_s = NAN, .bwd_s = 1, .update_s = 1};
    assert_int_equal(ah_profile_table_set(p, "A100-40G", 1, 1, 0, n + 1, ok), -1);
    assert_int_equal(ah_profile_table_set(p, "A100-40G", 1, 1, n, n, ok), -1);
    assert_int_equal(ah_profile_table_set(p, "A100-40G", 1, 1, 0, n, neg), -1);
    assert_int_equal(ah_profile_table_set(p, "A100-40G", 1, 1, 0, n, nan_c), -1);
    assert_int_equal(ah_profile_table_set(p, "", 1, 1, 0, n, ok), -1);
    assert_int_equal(ah_profile_table_set(p, "A100-40G", 0, 1, 0, n, ok), -1);
    assert_int_equal(ah_profile_table_num_devices(p), 2);
    assert_string_equal(ah_profile_table_device(p, 0), "A100-40G"); /* alias resolved */
    int mb, tp;
    assert_int_equal(ah_profile_table_entry(p, 0, 0, &mb, &tp), 0); /* sorted by (mb, tp) */
    assert_int_equal(mb, 1);
    assert_int_equal(tp, 1);

    tmpdir t;
    tmp_make(&t);
    char path[128];
    snprintf(path, sizeof path, "%s/prof.json", t.dir);
    snprintf(t.files[t.n++], 128, "%s", path);
    char err[512] = "";
    if (ah_profile_table_write(p, path, err, sizeof err) != 0)
        fail_msg("%s", err);
    ah_profile *q = ah_profile_load(path, err, sizeof err);
    if (!q)
        fail_msg("%s", err);
    char want_src[160];
    snprintf(want_src, sizeof want_src, "measured:%s", path);
    assert_string_equal(ah_profile_source(q), want_src);
    assert_same_tables(p, q);
    assert_string_equal(ah_profile_table_origin(q), "autohet profile test");

    /* Loaded profile answers layer_cost at its own seq. */
    const ah_device *v100 = device("V100-16G");
    ah_layer_cost want, got = cost(q, &m, 1024, AH_RECOMPUTE_NONE, v100, 3, 2, 4);
    assert_int_equal(ah_profile_table_get(p, "V100-16G", 4, 2, 3, &want), 0);
    assert_true(got.fwd_s == want.fwd_s && got.bwd_s == want.bwd_s && got.update_s == want.update_s);
    assert_int_equal(ah_profile_has(q, &m, v100, 2, 4), 1);
    assert_int_equal(ah_profile_has(q, &m, v100, 2, 2), 0);
    assert_contains(cost_err(q, &m, 2048, v100, 3, 2, 4), "seq 1024");
    ah_profile_free(q);
    ah_profile_free(p);
    tmp_remove(&t);
}

static void test_sailor_to_autohet_round_trip(void **state) {
    (void)state;
    char err[512] = "";
    ah_profile *p = ah_profile_load(SAILOR_OPT, err, sizeof err);
    if (!p)
        fail_msg("%s", err);
    tmpdir t;
    tmp_make(&t);
    char path[128];
    snprintf(path, sizeof path, "%s/opt.json", t.dir);
    snprintf(t.files[t.n++], 128, "%s", path);
    if (ah_profile_table_write(p, path, err, sizeof err) != 0)
        fail_msg("%s", err);
    ah_profile *q = ah_profile_load(path, err, sizeof err);
    if (!q)
        fail_msg("%s", err);
    assert_same_tables(p, q);
    ah_model_config m = model("opt-350m");
    ah_layer_cost c = cost(q, &m, 2048, AH_RECOMPUTE_NONE, device("RTX-3090"), 2, 8, 4);
    assert_true(c.fwd_s == 0.080919);
    ah_profile_free(q);
    ah_profile_free(p);
    tmp_remove(&t);
}

static void test_builder_incomplete_and_analytic(void **state) {
    (void)state;
    ah_model_config m = model("opt-350m");
    int n = ah_model_num_layers(&m);
    ah_profile *p = ah_profile_table_new("opt-350m", 2048);
    ah_layer_cost c = {.fwd_s = 1e-3, .bwd_s = 2e-3, .update_s = 3e-4};
    assert_int_equal(ah_profile_table_set(p, "A100-40G", 1, 1, 0, n, c), 0);
    assert_int_equal(ah_profile_table_set(p, "A100-40G", 1, 1, 5, n, c), 0);
    const ah_device *a100 = device("A100-40G");
    assert_int_equal(ah_profile_has(p, &m, a100, 1, 1), 0); /* incomplete entry */
    assert_contains(cost_err(p, &m, 2048, a100, 1, 1, 1), "layer 1");
    ah_layer_cost got = cost(p, &m, 2048, AH_RECOMPUTE_NONE, a100, 5, 1, 1);
    assert_true(got.fwd_s == 1e-3);
    char err[512] = "";
    assert_int_equal(ah_profile_table_write(p, "/tmp/ah_never_written.json", err, sizeof err), -1);
    assert_contains(err, "layer 1 has no cost");
    assert_int_equal(access("/tmp/ah_never_written.json", F_OK), -1);
    ah_profile_free(p);

    ah_profile *a = ah_profile_analytic();
    assert_int_equal(ah_profile_table_set(a, "A100-40G", 1, 1, 0, n, c), -1);
    assert_int_equal(ah_profile_table_write(a, "/tmp/ah_never_written.json", err, sizeof err), -1);
    assert_contains(err, "analytic");
    assert_int_equal(ah_profile_table_num_devices(a), 0);
    ah_profile_free(a);
    ah_profile_free(NULL);
    assert_null(ah_profile_table_new("x", 0));
}

static void autohet_expect_error(const char *text, const char *want) {
    tmpdir t;
    tmp_make(&t);
    const char *path = tmp_write(&t, "p.json", text);
    char err[512] = "";
    ah_profile *p = ah_profile_load(path, err, sizeof err);
    if (p)
        fail_msg("loaded without error: %s", text);
    assert_null(strchr(err, '\n'));
    assert_contains(err, path);
    assert_contains(err, want);
    tmp_remove(&t);
}

#define HDR "\"format\":\"autohet-profile\",\"version\":1,\"model\":\"m\",\"seq\":2048"

static void test_autohet_json_errors(void **state) {
    (void)state;
    autohet_expect_error("{", "invalid JSON");
    autohet_expect_error("{\"version\":1}", "format: expected \"autohet-profile\"");
    autohet_expect_error("{\"format\":\"autohet-profile\",\"version\":2}",
                         "version: unsupported version 2");
    autohet_expect_error("{\"format\":\"autohet-profile\",\"version\":1,\"seq\":2048}",
                         "model: expected a string");
    autohet_expect_error("{\"format\":\"autohet-profile\",\"version\":1,\"model\":\"m\",\"seq\":0}",
                         "seq");
    autohet_expect_error("{" HDR "}", "devices: expected an object");
    autohet_expect_error("{" HDR ",\"devices\":{}}", "devices: no devices");
    autohet_expect_error("{" HDR ",\"source\":3,\"devices\":{}}", "source: expected a string");
    autohet_expect_error("{" HDR ",\"devices\":{\"A100-40G\":{\"1\":{\"1\":{\"0\":[1,2]}}}}}",
                         ": devices[\"A100-40G\"][\"1\"][\"1\"][\"0\"]: expected 3 numbers");
    autohet_expect_error("{" HDR ",\"devices\":{\"A100-40G\":{\"1\":{\"1\":{\"0\":[1,2,3]}}},"
                         "\"A100-40\":{\"1\":{\"1\":{\"0\":[1,2,3]}}}}}",
                         "devices[\"A100-40\"]: same GPU (A100-40G) as an earlier entry");

    /* A valid minimal file, with a GPU name the catalog does not know. */
    tmpdir t;
    tmp_make(&t);
    const char *path = tmp_write(
        &t, "ok.json", "{" HDR ",\"devices\":{\"MyGPU-1\":{\"1\":{\"1\":{\"0\":[1,2,3],\"1\":[4,5,6]}}}}}");
    char err[512] = "";
    ah_profile *p = ah_profile_load(path, err, sizeof err);
    if (!p)
        fail_msg("%s", err);
    ah_layer_cost c;
    assert_int_equal(ah_profile_table_get(p, "mygpu-1", 1, 1, 1, &c), 0);
    assert_true(c.update_s == 6);
    assert_string_equal(ah_profile_table_origin(p), "");
    ah_profile_free(p);
    tmp_remove(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_analytic_block_tp1),
        cmocka_unit_test(test_analytic_tp2),
        cmocka_unit_test(test_analytic_recompute),
        cmocka_unit_test(test_analytic_slowdown_and_has),
        cmocka_unit_test(test_sailor_neo),
        cmocka_unit_test(test_sailor_all_values),
        cmocka_unit_test(test_sailor_mismatches),
        cmocka_unit_test(test_sailor_errors),
        cmocka_unit_test(test_sailor_unknown_skipped),
        cmocka_unit_test(test_builder_round_trip),
        cmocka_unit_test(test_sailor_to_autohet_round_trip),
        cmocka_unit_test(test_builder_incomplete_and_analytic),
        cmocka_unit_test(test_autohet_json_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
