/* Unit tests for src/cluster: device catalog, overrides, inventories. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autohet/cluster.h"
#include "autohet/device.h"
#include "test_util.h"

/* ----------------------------------------------------------- helpers */

/* The catalog the tests read and override: a copy of the built-in one. */
static ah_device_catalog cat;

static int overrides_text(const char *text, char *err, size_t errlen, char *path) {
    write_tmp(text, path);
    int rc = ah_device_load_overrides(&cat, path, err, errlen);
    unlink(path);
    return rc;
}

static int inventory_text(const char *text, ah_cluster *c, char *err, size_t errlen, char *path) {
    write_tmp(text, path);
    int rc = ah_cluster_load_json(path, &cat, c, err, errlen);
    unlink(path);
    return rc;
}

static int reset_catalog(void **state) {
    (void)state;
    cat = *ah_device_catalog_builtin();
    return 0;
}

/* ------------------------------------------------------------ catalog */

static void test_catalog_contents(void **state) {
    (void)state;
    assert_int_equal(cat.n, 18); /* 15 GPU types + 3 CPU devices */
    const ah_device *d = &cat.dev[0];
    assert_string_equal(d->name, "A100-40G");
    assert_double_equal(d->peak_tflops, 312, 0);
    assert_double_equal(d->mem_gib, 40, 0);
    assert_double_equal(d->mem_bw_gbs, 1555, 0);
    assert_double_equal(d->intra_bw_gbs, 300, 0);
    assert_double_equal(d->nic_gbit, 1600, 0);
    d = ah_device_find(&cat, "H800");
    assert_non_null(d);
    assert_double_equal(d->intra_bw_gbs, 200, 0);
    assert_double_equal(d->peak_tflops, 989, 0);
    d = ah_device_find(&cat, "T4");
    assert_double_equal(d->mem_gib, 16, 0);
    assert_double_equal(d->nic_gbit, 50, 0);
    for (int i = 0; i < cat.n; i++) {
        d = &cat.dev[i];
        /* GPUs carry the calibrated GEMM model's figures (docs/calibration.md):
         * an SM count, an fp32 peak below the bf16 one and a fitted max GEMM
         * efficiency; the CPU devices none, and the roofline's 0.5. */
        if (strncmp(d->name, "cpu", 3) == 0) {
            assert_double_equal(d->efficiency, 0.5, 0);
            assert_double_equal(d->sm_count, 0, 0);
        } else {
            assert_true(d->efficiency > 0.5 && d->efficiency <= 1.0);
            assert_true(d->sm_count >= 40 && d->sm_count <= 160);
            assert_true(d->fp32_tflops > 0 && d->fp32_tflops < d->peak_tflops);
        }
        /* real GPUs run at full speed; only the emulated CPU devices are slowed */
        assert_double_equal(d->slowdown, !strcmp(d->name, "cpu-half") ? 2.0 : !strcmp(d->name, "cpu-quarter") ? 4.0 : 1.0, 0);
        /* every canonical name finds itself */
        assert_ptr_equal(ah_device_find(&cat, d->name), d);
    }
}

static void test_aliases(void **state) {
    (void)state;
    static const char *const pairs[][2] = {
        {"a100-40g", "A100-40G"},   {"A100-40", "A100-40G"},   {"A100-40GB", "A100-40G"},
        {"A100_40GB", "A100-40G"},  {"A100", "A100-40G"},      {"NVIDIA A100", "A100-40G"},
        {"A100-80", "A100-80G"},    {"a100_80gb", "A100-80G"}, {"H100", "H100-SXM"},
        {"H100-80G", "H100-SXM"},   {"h100_80gb", "H100-SXM"}, {"h100-sxm", "H100-SXM"},
        {"V100", "V100-16G"},       {"V100-16", "V100-16G"},   {"V100-32", "V100-32G"},
        {"v100_32gb", "V100-32G"},  {"4090", "RTX-4090"},      {"rtx4090", "RTX-4090"},
        {"3090", "RTX-3090"},       {"RTX_3090", "RTX-3090"},  {"TITAN-RTX", "Titan-RTX"},
        {"titan_rtx", "Titan-RTX"}, {"l40s", "L40S"},          {"h20", "H20"},
        {"2080", "RTX-2080"},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        const ah_device *d = ah_device_find(&cat, pairs[i][0]);
        if (d == NULL)
            fail_msg("alias '%s' not found", pairs[i][0]);
        assert_string_equal(d->name, pairs[i][1]);
    }
    assert_null(ah_device_find(&cat, "B200"));
    assert_null(ah_device_find(&cat, ""));
    assert_null(ah_device_find(&cat, "---"));
    assert_null(ah_device_find(&cat, NULL));
    assert_null(ah_device_find(&cat, "A100-40G-A100-40G-A100-40G-A100-40G-A100-40G-A100-40G-A100"));
}

/* ----------------------------------------------------------- overrides */

static void test_overrides_update_and_add(void **state) {
    (void)state;
    char err[256], path[64];
    const double a100_eff = ah_device_find(&cat, "A100-40G")->efficiency;
    const char *text = "{\"devices\": [\n"
                       " {\"name\": \"a100_40gb\", \"efficiency\": 0.62, \"slowdown\": 3},\n"
                       " {\"name\": \"B200\", \"peak_tflops\": 2250, \"mem_gib\": 180,"
                       "  \"mem_bw_gbs\": 8000, \"intra_bw_gbs\": 900, \"nic_gbit\": 3200, \"_note\": \"x\"}]}";
    assert_int_equal(overrides_text(text, err, sizeof err, path), 0);
    assert_int_equal(cat.n, 19);
    const ah_device *d = ah_device_find(&cat, "A100-40G");
    assert_double_equal(d->efficiency, 0.62, 0);
    assert_double_equal(d->slowdown, 3, 0);
    assert_double_equal(d->peak_tflops, 312, 0);
    assert_double_equal(d->sm_count, 108, 0); /* absent new fields keep their catalog values */
    d = ah_device_find(&cat, "B200");
    assert_non_null(d);
    assert_double_equal(d->mem_gib, 180, 0);
    assert_double_equal(d->intra_bw_gbs, 900, 0);
    assert_double_equal(d->nic_gbit, 3200, 0);
    assert_double_equal(d->efficiency, 0.5, 0);
    assert_double_equal(d->sm_count, 0, 0); /* no SM count given: plain roofline */

    /* the new type is usable in inventories */
    ah_cluster c;
    assert_int_equal(ah_cluster_parse_shorthand("1x8xB200", &cat, &c, err, sizeof err), 0);
    assert_string_equal(c.nodes[0].dev.name, "B200");
    ah_cluster_free(&c);

    /* the override changed the copy, not the built-in catalog */
    const ah_device_catalog *builtin = ah_device_catalog_builtin();
    assert_int_equal(builtin->n, 18); /* 15 GPU types + 3 CPU devices */
    assert_null(ah_device_find(builtin, "B200"));
    assert_double_equal(ah_device_find(builtin, "A100-40G")->efficiency, a100_eff, 0);
    assert_int_equal(ah_cluster_parse_shorthand("1x8xB200", builtin, &c, err, sizeof err), -1);
    assert_contains(err, "unknown GPU type 'B200'");
}

static void test_override_errors(void **state) {
    (void)state;
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"{\"devices\": [{\"name\": \"T4\"}, {\"name\": \"A10\"},\n"
         " {\"name\": \"H20\", \"mem_gib\": -96}]}",
         "devices[2].mem_gib: must be a positive number"},
        {"{\"devices\": [{\"name\": \"H20\", \"mem_gib\": \"96\"}]}",
         "devices[0].mem_gib: must be a positive number"},
        {"{\"devices\": [{\"name\": \"B200\", \"peak_tflops\": 2250, \"mem_gib\": 180}]}",
         "devices[0].mem_bw_gbs: is required for new device 'B200'"},
        {"{\"devices\": [{\"name\": \"H20\", \"efficiency\": 1.5}]}",
         "devices[0].efficiency: must be a number in (0, 1]"},
        {"{\"devices\": [{\"name\": \"H20\", \"mem_gb\": 1}]}", "devices[0]: unknown field 'mem_gb'"},
        {"{\"devices\": [{\"peak_tflops\": 1}]}", "devices[0]: missing field 'name'"},
        {"{\"devices\": [{\"name\": \"a,b\", \"peak_tflops\": 1}]}", "devices[0].name: must be"},
        {"{\"devices\": [{\"name\": 5}]}", "devices[0].name: must be"},
        {"{\"devices\": [7]}", "devices[0]: must be an object"},
        /* one device twice: the second entry would silently replace the first one's figures */
        {"{\"devices\": [{\"name\": \"X1\", \"peak_tflops\": 100, \"mem_gib\": 10, \"mem_bw_gbs\": 100},\n"
         " {\"name\": \"X1\", \"peak_tflops\": 200, \"mem_gib\": 10, \"mem_bw_gbs\": 100}]}",
         "devices[1].name: device 'X1' given twice (also devices[0]): give each device once"},
        {"{\"devices\": [{\"name\": \"H20\", \"efficiency\": 0.6}, {\"name\": \"T4\"}, {\"name\": \"h20\"}]}",
         "devices[2].name: device 'H20' given twice (also devices[0]; 'h20' is that device)"},
        {"{\"devices\": [{\"name\": \"A100-40G\", \"efficiency\": 0.6}, {\"name\": \"A100\", \"efficiency\": 0.7}]}",
         "devices[1].name: device 'A100-40G' given twice (also devices[0]; 'A100' is that device)"},
        {"{\"devices\": {}}", "field 'devices' must be an array"},
        {"{\"gpus\": []}", "missing field 'devices'"},
        /* a misspelt top-level key is no silent no-op ("_comment" and friends are) */
        {"{\"_comment\": \"x\", \"devices\": [{\"name\": \"T4\"}], \"device\": []}",
         "unknown field 'device' (a devices file has only \"devices\")"},
        {"{\"devices\": [\n{\"name\": \"T4\"\n", "malformed JSON near line 3"},
        {"[]", "top-level JSON value must be an object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[512], path[64];
        if (overrides_text(cases[i].text, err, sizeof err, path) != -1)
            fail_msg("case %zu accepted", i);
        assert_contains(err, path);
        assert_contains(err, cases[i].want);
    }
    char err[256];
    assert_int_equal(ah_device_load_overrides(&cat, "/nonexistent/devices.json", err, sizeof err), -1);
    assert_contains(err, "/nonexistent/devices.json: cannot open file");
}

static void test_override_is_atomic(void **state) {
    (void)state;
    char err[256], path[64];
    const char *text = "{\"devices\": [{\"name\": \"H20\", \"mem_gib\": 141},"
                       "{\"name\": \"NEW1\", \"peak_tflops\": 1, \"mem_gib\": 1, \"mem_bw_gbs\": 1},"
                       "{\"name\": \"T4\", \"slowdown\": 0}]}";
    assert_int_equal(overrides_text(text, err, sizeof err, path), -1);
    assert_contains(err, "devices[2].slowdown: must be a positive number");
    assert_double_equal(ah_device_find(&cat, "H20")->mem_gib, 96, 0);
    assert_null(ah_device_find(&cat, "NEW1"));
    assert_int_equal(cat.n, 18); /* 15 GPU types + 3 CPU devices */
}

static void test_override_catalog_full(void **state) {
    (void)state;
    char text[16384], err[256], path[64];
    size_t off = (size_t)snprintf(text, sizeof text, "{\"devices\": [");
    for (int i = 0; i < 51; i++)
        off += (size_t)snprintf(text + off, sizeof text - off,
                                "%s{\"name\": \"GPU%d\", \"peak_tflops\": 1, \"mem_gib\": 1, "
                                "\"mem_bw_gbs\": 1}",
                                i ? "," : "", i);
    snprintf(text + off, sizeof text - off, "]}");
    assert_int_equal(overrides_text(text, err, sizeof err, path), -1);
    assert_contains(err, "devices[46]: catalog is full (64 devices at most)"); /* 18 built in + 46 */
    assert_int_equal(cat.n, 18); /* 15 GPU types + 3 CPU devices */
}

/* ----------------------------------------------------------- shorthand */

static void test_shorthand_mixed(void **state) {
    (void)state;
    ah_cluster c;
    char err[256];
    assert_int_equal(
        ah_cluster_parse_shorthand("2x8xA100-40G,1x8xH800@400:spot,4x8xH20", &cat, &c, err, sizeof err), 0);
    assert_int_equal(c.n_nodes, 7);
    assert_int_equal(ah_cluster_total_gpus(&c), 56);
    assert_string_equal(c.nodes[0].name, "A100-40G-0");
    assert_string_equal(c.nodes[1].name, "A100-40G-1");
    assert_double_equal(c.nodes[0].nic_gbit, 1600, 0);
    assert_false(c.nodes[0].spot);
    assert_string_equal(c.nodes[2].name, "H800-0");
    assert_string_equal(c.nodes[2].dev.name, "H800");
    assert_double_equal(c.nodes[2].nic_gbit, 400, 0);
    assert_true(c.nodes[2].spot);
    for (int i = 3; i < 7; i++) {
        assert_string_equal(c.nodes[i].dev.name, "H20");
        assert_double_equal(c.nodes[i].nic_gbit, 3200, 0);
        assert_false(c.nodes[i].spot);
        assert_double_equal(c.nodes[i].price_per_hour, 0, 0);
    }
    assert_string_equal(c.nodes[6].name, "H20-3");
    char desc[128];
    ah_cluster_describe(&c, desc, sizeof desc);
    assert_string_equal(desc, "2x8xA100-40G + 1x8xH800 + 4x8xH20");
    ah_cluster_free(&c);
    assert_null(c.nodes);
    assert_int_equal(c.n_nodes, 0);
}

static void test_shorthand_forms(void **state) {
    (void)state;
    ah_cluster c;
    char err[256], desc[128];
    assert_int_equal(ah_cluster_parse_shorthand("8xT4", &cat, &c, err, sizeof err), 0);
    assert_int_equal(c.n_nodes, 1);
    assert_int_equal(c.nodes[0].gpus, 8);
    ah_cluster_free(&c);

    assert_int_equal(
        ah_cluster_parse_shorthand(" 1x8xa100_40gb , 2X4X4090:SPOT@25.5, 8x4090 ", &cat, &c, err, sizeof err), 0);
    assert_int_equal(c.n_nodes, 4);
    assert_string_equal(c.nodes[0].dev.name, "A100-40G");
    assert_string_equal(c.nodes[1].dev.name, "RTX-4090");
    assert_int_equal(c.nodes[1].gpus, 4);
    assert_true(c.nodes[2].spot);
    assert_double_equal(c.nodes[2].nic_gbit, 25.5, 0);
    assert_string_equal(c.nodes[3].name, "RTX-4090-2");
    assert_int_equal(c.nodes[3].gpus, 8);
    assert_false(c.nodes[3].spot);
    ah_cluster_describe(&c, desc, sizeof desc);
    assert_string_equal(desc, "1x8xA100-40G + 2x4xRTX-4090 + 1x8xRTX-4090");
    ah_cluster_free(&c);

    /* same type in two entries keeps counting names */
    assert_int_equal(ah_cluster_parse_shorthand("1x8xH20,1x8xA10,1x8xH20", &cat, &c, err, sizeof err), 0);
    assert_string_equal(c.nodes[2].name, "H20-1");
    ah_cluster_free(&c);
}

static void test_shorthand_errors(void **state) {
    (void)state;
    static const struct {
        const char *spec, *want;
    } cases[] = {
        {"2x8xB200", "--cluster '2x8xB200': unknown GPU type 'B200' (known: A100-40G, A100-80G"},
        {"", "--cluster '': empty cluster specification"},
        {"  ", "empty cluster specification"},
        {"2x8xH20,,1x8xH20", "empty entry between commas"},
        {"2x8xH20,", "empty entry between commas"},
        {"0x8xA100", "node count must be 1..4096"},
        {"5000x8xA100", "node count must be 1..4096"},
        {"99999999999999999999x8xA100", "node count must be 1..4096"},
        {"2x0xA100", "GPUs per node must be 1..16"},
        {"2x17xA100", "GPUs per node must be 1..16"},
        {"2x8x", "entry '2x8x': missing GPU type"},
        {"2x8x@100", "missing GPU type"},
        {"A100", "entry 'A100': expected NODESxGPUSxTYPE"},
        {"x8xA100", "expected NODESxGPUSxTYPE"},
        {"2x8xA100:spott", "unknown suffix ':spott' (expected ':spot')"},
        {"2x8xA100@fast", "NIC bandwidth '@fast' must be a positive number"},
        {"2x8xA100@-5", "NIC bandwidth '@-5' must be a positive number"},
        {"2x8xA100@", "NIC bandwidth '@' must be a positive number"},
        {"4096x8xH20,1x8xH20", "too many nodes (at most 4096)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ah_cluster c;
        char err[512];
        if (ah_cluster_parse_shorthand(cases[i].spec, &cat, &c, err, sizeof err) != -1)
            fail_msg("case '%s' accepted", cases[i].spec);
        assert_contains(err, cases[i].want);
        assert_null(c.nodes);
        assert_int_equal(c.n_nodes, 0);
    }
    ah_cluster c;
    char err[64];
    assert_int_equal(ah_cluster_parse_shorthand(NULL, &cat, &c, err, sizeof err), -1);
    assert_contains(err, "empty cluster specification");
}

/* ------------------------------------------------------ JSON inventory */

static void test_inventory_example(void **state) {
    (void)state;
    ah_cluster c;
    char err[256], desc[128];
    assert_int_equal(ah_cluster_load_json(EXAMPLES "/inventory-mixed.json", &cat, &c, err, sizeof err), 0);
    assert_int_equal(c.n_nodes, 5);
    assert_int_equal(ah_cluster_total_gpus(&c), 40);
    assert_string_equal(c.nodes[0].name, "a100-0");
    assert_string_equal(c.nodes[1].name, "a100-1");
    assert_double_equal(c.nodes[1].price_per_hour, 32.77, 0);
    assert_double_equal(c.nodes[1].nic_gbit, 400, 0);
    assert_string_equal(c.nodes[2].name, "h800-0");
    assert_true(c.nodes[2].spot);
    assert_string_equal(c.nodes[3].dev.name, "H20");
    assert_double_equal(c.nodes[3].nic_gbit, 3200, 0); /* catalog default */
    assert_false(c.nodes[3].spot);
    assert_true(c.nodes[4].spot);
    ah_cluster_describe(&c, desc, sizeof desc);
    assert_string_equal(desc, "2x8xA100-40G + 1x8xH800 + 2x8xH20");
    ah_cluster_free(&c);
}

static void test_inventory_defaults_and_spellings(void **state) {
    (void)state;
    ah_cluster c;
    char err[256], path[64];
    const char *text = "{\"nodes\": [{\"gpu_type\": \"v100\", \"gpus_per_node\": 4, \"count\": 3},"
                       "{\"gpu\": \"V100-16G\", \"gpus\": 8},"
                       "{\"gpu\": \"T4\", \"gpus\": 1, \"name\": \"edge\", \"spot\": true,"
                       " \"price_per_hour\": 0.35}]}";
    assert_int_equal(inventory_text(text, &c, err, sizeof err, path), 0);
    assert_int_equal(c.n_nodes, 5);
    assert_int_equal(ah_cluster_total_gpus(&c), 3 * 4 + 8 + 1);
    assert_string_equal(c.nodes[0].name, "V100-16G-0");
    assert_string_equal(c.nodes[2].name, "V100-16G-2");
    assert_string_equal(c.nodes[3].name, "V100-16G-3");
    assert_double_equal(c.nodes[0].nic_gbit, 100, 0);
    assert_false(c.nodes[0].spot);
    assert_double_equal(c.nodes[0].price_per_hour, 0, 0);
    assert_string_equal(c.nodes[4].name, "edge");
    assert_true(c.nodes[4].spot);
    assert_double_equal(c.nodes[4].price_per_hour, 0.35, 0);
    char desc[128];
    ah_cluster_describe(&c, desc, sizeof desc);
    assert_string_equal(desc, "3x4xV100-16G + 1x8xV100-16G + 1x1xT4");
    /* truncated summaries stay terminated */
    char small[10];
    ah_cluster_describe(&c, small, sizeof small);
    assert_string_equal(small, "3x4xV100-");
    ah_cluster_free(&c);
}

static void test_inventory_errors(void **state) {
    (void)state;
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"{\"nodes\": [{\"gpu\": \"H20\", \"gpus\": 8}, {\"gpu\": \"X\", \"gpus\": 8}]}",
         "nodes[1].gpu: unknown GPU type 'X' (known: A100-40G"},
        {"{\"nodes\": [{\"gpu_type\": \"X\", \"gpus\": 8}]}", "nodes[0].gpu_type: unknown GPU type"},
        {"{\"nodes\": [{\"gpus\": 8}]}", "nodes[0]: missing field 'gpu'"},
        {"{\"nodes\": [{\"gpu\": 3, \"gpus\": 8}]}", "nodes[0].gpu: must be a string"},
        {"{\"nodes\": [{\"gpu\": \"H20\"}]}", "nodes[0]: missing field 'gpus'"},
        {"{\"nodes\": [{\"gpu\": \"H20\", \"gpus\": 17}]}",
         "nodes[0].gpus: must be an integer between 1 and 16"},
        {"{\"nodes\": [{\"gpu\": \"H20\", \"gpus_per_node\": 2.5}]}",
         "nodes[0].gpus_per_node: must be an integer between 1 and 16"},
        {"{\"nodes\": [{\"gpu\": \"H20\", \"gpus\": 8, \"count\": 0}]}",
         "nodes[0].count: must be an integer between 1 and 4096"},
        {"{\"nodes\": [{\"gpu\": \"H20\", \"gpus\": 8, \"count\": 4000},"
         "{\"gpu\": \"H20\", \"gpus\": 8, \"count\": 100}]}",
         "too many nodes (at most 4096)"},
        {"{\"nodes\": [{\"gpu\": \"H20\", \"gpus\": 8, \"nic_gbit\": 0}]}",
         "nodes[0].nic_gbit: must be a positive number"},
        {"{\"nodes\": [{\"gpu\": \"H20\", \"gpus\": 8, \"spot\": 1}]}",
         "nodes[0].spot: must be true or false"},
        {"{\"nodes\": [{\"gpu\": \"H20\", \"gpus\": 8, \"price_per_hour\": -1}]}",
         "nodes[0].price_per_hour: must be a non-negative number"},
        {"{\"nodes\": [{\"gpu\": \"H20\", \"gpus\": 8, \"name\": \"\"}]}", "nodes[0].name: must be a string"},
        {"{\"nodes\": [{\"gpu\": \"H20\", \"gpus\": 8, \"nic\": 100}]}", "nodes[0]: unknown field 'nic'"},
        {"{\"nodes\": [{\"gpu\": \"H20\", \"gpus\": 8}], \"extra\": 1}",
         "unknown field 'extra' (an inventory has only \"nodes\")"},
        {"{\"nodes\": [{\"gpu\": \"A100-80G\", \"gpu_type\": \"H100\", \"gpus\": 8}]}",
         "nodes[0].gpu_type: 'gpu' and 'gpu_type' are one field"},
        {"{\"nodes\": [{\"gpu\": \"H20\", \"gpus\": 8, \"gpus_per_node\": 4}]}",
         "nodes[0].gpus_per_node: 'gpus' and 'gpus_per_node' are one field"},
        /* node names are unique, whether given, made by "count" or from the type */
        {"{\"nodes\": [{\"name\": \"a\", \"gpu\": \"A100-80G\", \"gpus\": 8},"
         "{\"name\": \"a\", \"gpu\": \"H100\", \"gpus\": 8}]}",
         "nodes[1].name: duplicate node name 'a' (also nodes[0])"},
        {"{\"nodes\": [{\"name\": \"a\", \"gpu\": \"H20\", \"gpus\": 8, \"count\": 2},"
         "{\"name\": \"a-1\", \"gpu\": \"H20\", \"gpus\": 8}]}",
         "nodes[1].name: duplicate node name 'a-1' (also made by nodes[0])"},
        {"{\"nodes\": [{\"gpu\": \"H20\", \"gpus\": 8}, {\"name\": \"x\", \"gpu\": \"T4\", \"gpus\": 1},"
         "{\"name\": \"H20-0\", \"gpu\": \"T4\", \"gpus\": 1}]}",
         "nodes[2].name: duplicate node name 'H20-0' (also made by nodes[0])"},
        {"{\"nodes\": [{\"name\": \"H20-1\", \"gpu\": \"T4\", \"gpus\": 1},"
         "{\"gpu\": \"H20\", \"gpus\": 8, \"count\": 2}]}",
         "nodes[1]: duplicate node name 'H20-1' (also nodes[0]); with \"count\""},
        {"{\"nodes\": [3]}", "nodes[0]: must be an object"},
        {"{\"nodes\": []}", "field 'nodes' is empty"},
        {"{\"nodes\": {}}", "field 'nodes' must be an array"},
        {"{\"machines\": []}", "missing field 'nodes'"},
        {"{\"nodes\": [\n{\"gpu\": \"H20\",\n\"gpus\": 8,,}]}", "malformed JSON near line 3"},
        {"\"nodes\"", "top-level JSON value must be an object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ah_cluster c;
        char err[512], path[64];
        if (inventory_text(cases[i].text, &c, err, sizeof err, path) != -1)
            fail_msg("case %zu accepted", i);
        assert_contains(err, path);
        assert_contains(err, cases[i].want);
        assert_null(c.nodes);
        assert_int_equal(c.n_nodes, 0);
    }
}

static void test_resolve(void **state) {
    (void)state;
    ah_cluster c;
    char err[256];
    assert_int_equal(ah_cluster_resolve(EXAMPLES "/inventory-mixed.json", &cat, &c, err, sizeof err), 0);
    assert_int_equal(c.n_nodes, 5);
    ah_cluster_free(&c);
    assert_int_equal(ah_cluster_resolve("2x8xH20", &cat, &c, err, sizeof err), 0);
    assert_int_equal(ah_cluster_total_gpus(&c), 16);
    ah_cluster_free(&c);
    assert_int_equal(ah_cluster_resolve("/nonexistent/inv.json", &cat, &c, err, sizeof err), -1);
    assert_contains(err, "/nonexistent/inv.json: cannot open file");
    assert_int_equal(ah_cluster_resolve("2x8xB200", &cat, &c, err, sizeof err), -1);
    assert_contains(err, "unknown GPU type 'B200'");

    ah_cluster empty = {NULL, 0};
    char desc[16];
    ah_cluster_describe(&empty, desc, sizeof desc);
    assert_string_equal(desc, "(empty)");
    assert_int_equal(ah_cluster_total_gpus(&empty), 0);
    ah_cluster_free(&empty);
    ah_cluster_free(NULL);
}

int main(void) {
    cat = *ah_device_catalog_builtin();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_catalog_contents, reset_catalog),
        cmocka_unit_test(test_aliases),
        cmocka_unit_test_teardown(test_overrides_update_and_add, reset_catalog),
        cmocka_unit_test_teardown(test_override_errors, reset_catalog),
        cmocka_unit_test_teardown(test_override_is_atomic, reset_catalog),
        cmocka_unit_test_teardown(test_override_catalog_full, reset_catalog),
        cmocka_unit_test(test_shorthand_mixed),
        cmocka_unit_test(test_shorthand_forms),
        cmocka_unit_test(test_shorthand_errors),
        cmocka_unit_test(test_inventory_example),
        cmocka_unit_test(test_inventory_defaults_and_spellings),
        cmocka_unit_test(test_inventory_errors),
        cmocka_unit_test(test_resolve),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
