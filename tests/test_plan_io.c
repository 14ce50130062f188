/* Plan document I/O: JSON round trip, validation errors, deep copy, table. */
#include <dirent.h>
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

#include "autohet/plan.h"
#include "autohet/schedule.h"

/* ------------------------------------------------------------------ helpers */

static char tmpdir[64];

static int setup_dir(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ah_plan_io_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_dir(void **state) {
    (void)state;
    DIR *d = opendir(tmpdir);
    if (!d)
        return -1;
    struct dirent *e;
    char path[512];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", tmpdir, e->d_name);
        unlink(path);
    }
    closedir(d);
    return rmdir(tmpdir);
}

static void tmp_path(char *out, size_t n, const char *name) {
    snprintf(out, n, "%s/%s", tmpdir, name);
}

static void write_file(const char *path, const char *text, size_t len) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static char *slurp(const char *path, size_t *len_out) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    assert_true(n >= 0);
    rewind(f);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    if (len_out)
        *len_out = (size_t)n;
    return buf;
}

/* Derived numbers get distinctive non-round values so an exact round trip
 * proves no precision is lost. */
static double val(int k) {
    return 0.001 * k + 1.0 / (k + 3.0);
}

/* gpt3-6.7b (34 layers) on 1x8xH800 + 2x8xA100-40G, TP 4, micro-batch 1,
 * global batch 64: replica 0 = 2 stages on the H800 node (40 micro-batches),
 * replica 1 = 3 stages on the A100 nodes (24 micro-batches). */
static void build_plan(ah_plan *p) {
    char err[256] = "";
    memset(p, 0, sizeof *p);
    p->version = AH_PLAN_FORMAT_VERSION;
    snprintf(p->strategy, sizeof p->strategy, "%s", ah_strategy_name(AH_STRATEGY_AUTOHET));
    assert_int_equal(ah_model_preset("gpt3-6.7b", &p->model), 0);
    p->train.seq = 2048;
    p->train.recompute = AH_RECOMPUTE_SELECTIVE;
    p->train.precision = AH_PRECISION_FP32;
    p->train.p2p = AH_P2P_BLOCKING;
    p->train.dist_optimizer = 1;
    int rc = ah_cluster_parse_shorthand("1x8xH800,2x8xA100-40G@200:spot", ah_device_catalog_builtin(), &p->cluster, err, sizeof err);
    if (rc != 0)
        fail_msg("ah_cluster_parse_shorthand: %s", err);
    assert_int_equal(p->cluster.n_nodes, 3);
    assert_string_equal(p->cluster.nodes[0].dev.name, "H800");
    assert_string_equal(p->cluster.nodes[1].dev.name, "A100-40G");
    p->cluster.nodes[0].price_per_hour = 31.25;
    p->cluster.nodes[2].price_per_hour = 12.5;
    p->micro_batch = 1;
    p->global_batch = 64;
    p->n_replicas = 2;
    p->replicas = calloc(2, sizeof *p->replicas);
    assert_non_null(p->replicas);

    static const struct {
        int node, gpu, lf, ll;
    } layout0[] = {{0, 0, 0, 18}, {0, 4, 18, 34}},
      layout1[] = {{1, 0, 0, 12}, {1, 4, 12, 24}, {2, 0, 24, 34}};
    int k = 1;
    for (int r = 0; r < 2; r++) {
        ah_replica *rep = &p->replicas[r];
        rep->n_stages = r == 0 ? 2 : 3;
        rep->micro_batches = r == 0 ? 40 : 24;
        rep->stages = calloc((size_t)rep->n_stages, sizeof *rep->stages);
        assert_non_null(rep->stages);
        for (int j = 0; j < rep->n_stages; j++) {
            ah_stage *s = &rep->stages[j];
            s->node = r == 0 ? layout0[j].node : layout1[j].node;
            s->gpu_first = r == 0 ? layout0[j].gpu : layout1[j].gpu;
            s->tp = 4;
            s->layer_first = r == 0 ? layout0[j].lf : layout1[j].lf;
            s->layer_last = r == 0 ? layout0[j].ll : layout1[j].ll;
            s->fwd_s = val(k++);
            s->bwd_s = val(k++);
            s->update_s = val(k++);
            s->sync_s = val(k++);
            s->p2p_s = j == rep->n_stages - 1 ? 0.0 : val(k++);
            s->p2p_inter_node = r == 1 && j == 1;
            s->in_flight = rep->n_stages - j;
            s->mem_bytes = 3.0e10 + 12345.0 * k;
            s->mem_cap_bytes = (r == 0 ? 78.0 : 38.0) * 1073741824.0;
        }
        rep->fill_drain_s = val(k++);
        rep->bottleneck_s = val(k++);
        rep->tail_s = val(k++);
        rep->time_s = 1.0 + val(k++);
        rep->bottleneck_stage = r == 0 ? 1 : 2;
    }
    p->replicas[1].stages[0].mem_bytes = 45.0 * 1073741824.0; /* over capacity */
    p->iteration_time_s = 1.23456789012345;
    p->iteration_time_ns = 1234567890;
    p->tokens_per_s = 106168.5512345;
    p->tflops_per_gpu = 123.456789;
    p->mfu = 0.3141592653589793;
    p->bottleneck_replica = 1;
    p->gpus_used = 20;
    p->gpus_total = 24;
    p->dp_bw_gbs = 23.4375;
    p->planning_time_s = 0.0421;
    p->search_value_s = 1.2345;
    p->search_value_ns = 1234500000;
    p->candidates = 123456789012LL;
    snprintf(p->profile_source, sizeof p->profile_source, "analytic");
}

static void assert_dbl_same(double a, double b, const char *what) {
    if (!(a == b) && !(a != a && b != b))
        fail_msg("%s: %.17g != %.17g", what, a, b);
}

static void assert_plan_equal(const ah_plan *a, const ah_plan *b) {
    assert_int_equal(a->version, b->version);
    assert_string_equal(a->strategy, b->strategy);
    /* model */
    assert_string_equal(a->model.name, b->model.name);
    assert_int_equal(a->model.arch, b->model.arch);
    assert_int_equal(a->model.hidden, b->model.hidden);
    assert_int_equal(a->model.n_layers, b->model.n_layers);
    assert_int_equal(a->model.n_heads, b->model.n_heads);
    assert_int_equal(a->model.n_kv_heads, b->model.n_kv_heads);
    assert_int_equal(a->model.ffn_hidden, b->model.ffn_hidden);
    assert_int_equal(a->model.vocab, b->model.vocab);
    assert_int_equal(a->model.max_positions, b->model.max_positions);
    assert_int_equal(a->model.tied_embeddings, b->model.tied_embeddings);
    /* train */
    assert_int_equal(a->train.seq, b->train.seq);
    assert_int_equal(a->train.recompute, b->train.recompute);
    assert_int_equal(a->train.precision, b->train.precision);
    assert_int_equal(a->train.p2p, b->train.p2p);
    assert_int_equal(a->train.dist_optimizer, b->train.dist_optimizer);
    /* cluster */
    assert_int_equal(a->cluster.n_nodes, b->cluster.n_nodes);
    for (int i = 0; i < a->cluster.n_nodes; i++) {
        const ah_node *x = &a->cluster.nodes[i], *y = &b->cluster.nodes[i];
        assert_string_equal(x->name, y->name);
        assert_string_equal(x->dev.name, y->dev.name);
        assert_dbl_same(x->dev.peak_tflops, y->dev.peak_tflops, "dev.peak_tflops");
        assert_dbl_same(x->dev.mem_gib, y->dev.mem_gib, "dev.mem_gib");
        assert_dbl_same(x->dev.mem_bw_gbs, y->dev.mem_bw_gbs, "dev.mem_bw_gbs");
        assert_dbl_same(x->dev.intra_bw_gbs, y->dev.intra_bw_gbs, "dev.intra_bw_gbs");
        assert_dbl_same(x->dev.nic_gbit, y->dev.nic_gbit, "dev.nic_gbit");
        assert_dbl_same(x->dev.efficiency, y->dev.efficiency, "dev.efficiency");
        assert_dbl_same(x->dev.slowdown, y->dev.slowdown, "dev.slowdown");
        assert_int_equal(x->gpus, y->gpus);
        assert_dbl_same(x->nic_gbit, y->nic_gbit, "nic_gbit");
        assert_int_equal(x->spot, y->spot);
        assert_dbl_same(x->price_per_hour, y->price_per_hour, "price_per_hour");
    }
    assert_int_equal(ah_plan_uniform_tp(a), ah_plan_uniform_tp(b));
    assert_int_equal(a->micro_batch, b->micro_batch);
    assert_int_equal(a->global_batch, b->global_batch);
    /* replicas */
    assert_int_equal(a->n_replicas, b->n_replicas);
    for (int r = 0; r < a->n_replicas; r++) {
        const ah_replica *x = &a->replicas[r], *y = &b->replicas[r];
        assert_int_equal(x->n_stages, y->n_stages);
        assert_int_equal(x->micro_batches, y->micro_batches);
        assert_dbl_same(x->fill_drain_s, y->fill_drain_s, "fill_drain_s");
        assert_dbl_same(x->bottleneck_s, y->bottleneck_s, "bottleneck_s");
        assert_dbl_same(x->tail_s, y->tail_s, "tail_s");
        assert_dbl_same(x->time_s, y->time_s, "time_s");
        assert_int_equal(x->bottleneck_stage, y->bottleneck_stage);
        for (int j = 0; j < x->n_stages; j++) {
            const ah_stage *s = &x->stages[j], *t = &y->stages[j];
            assert_int_equal(s->node, t->node);
            assert_int_equal(s->gpu_first, t->gpu_first);
            assert_int_equal(s->layer_first, t->layer_first);
            assert_int_equal(s->tp, t->tp);
            assert_int_equal(s->layer_last, t->layer_last);
            assert_dbl_same(s->fwd_s, t->fwd_s, "fwd_s");
            assert_dbl_same(s->bwd_s, t->bwd_s, "bwd_s");
            assert_dbl_same(s->update_s, t->update_s, "update_s");
            assert_dbl_same(s->sync_s, t->sync_s, "sync_s");
            assert_dbl_same(s->p2p_s, t->p2p_s, "p2p_s");
            assert_int_equal(s->p2p_inter_node, t->p2p_inter_node);
            assert_int_equal(s->in_flight, t->in_flight);
            assert_dbl_same(s->mem_bytes, t->mem_bytes, "mem_bytes");
            assert_dbl_same(s->mem_cap_bytes, t->mem_cap_bytes, "mem_cap_bytes");
        }
    }
    /* derived */
    assert_dbl_same(a->iteration_time_s, b->iteration_time_s, "iteration_time_s");
    assert_true(a->iteration_time_ns == b->iteration_time_ns);
    assert_dbl_same(a->tokens_per_s, b->tokens_per_s, "tokens_per_s");
    assert_dbl_same(a->tflops_per_gpu, b->tflops_per_gpu, "tflops_per_gpu");
    assert_dbl_same(a->mfu, b->mfu, "mfu");
    assert_int_equal(a->bottleneck_replica, b->bottleneck_replica);
    assert_int_equal(a->gpus_used, b->gpus_used);
    assert_int_equal(a->gpus_total, b->gpus_total);
    assert_dbl_same(a->dp_bw_gbs, b->dp_bw_gbs, "dp_bw_gbs");
    assert_dbl_same(a->planning_time_s, b->planning_time_s, "planning_time_s");
    assert_dbl_same(a->search_value_s, b->search_value_s, "search_value_s");
    assert_true(a->search_value_ns == b->search_value_ns);
    assert_true(a->candidates == b->candidates);
    assert_string_equal(a->profile_source, b->profile_source);
}

/* Write the reference plan to `name` in the temp dir; return it parsed. */
static cJSON *good_doc(char *path, size_t n) {
    ah_plan p;
    char err[256] = "";
    build_plan(&p);
    tmp_path(path, n, "good.json");
    int rc = ah_plan_write_json(&p, NULL, path, err, sizeof err);
    if (rc != 0)
        fail_msg("write: %s", err);
    ah_plan_free(&p);
    char *text = slurp(path, NULL);
    cJSON *doc = cJSON_Parse(text);
    free(text);
    assert_non_null(doc);
    return doc;
}

static cJSON *at(cJSON *root, const char *a, int i, const char *b, int j) {
    cJSON *x = cJSON_GetObjectItemCaseSensitive(root, a);
    if (i >= 0)
        x = cJSON_GetArrayItem(x, i);
    if (b)
        x = cJSON_GetObjectItemCaseSensitive(x, b);
    if (j >= 0)
        x = cJSON_GetArrayItem(x, j);
    assert_non_null(x);
    return x;
}

/* Write doc to a file, read it as a plan, expect failure whose message names
 * the file and contains each of the given fragments. */
static void expect_read_error(cJSON *doc, const char *name, const char *frag1, const char *frag2) {
    char path[128], err[512] = "";
    tmp_path(path, sizeof path, name);
    char *text = cJSON_Print(doc);
    assert_non_null(text);
    write_file(path, text, strlen(text));
    cJSON_free(text);
    ah_plan p;
    memset(&p, 0xAB, sizeof p); /* uninitialised output must not matter */
    int rc = ah_plan_read_json(path, ah_device_catalog_builtin(), &p, err, sizeof err);
    if (rc != -1)
        fail_msg("%s: expected -1, got %d", name, rc);
    if (strncmp(err, path, strlen(path)) != 0 || strncmp(err + strlen(path), ": ", 2) != 0)
        fail_msg("%s: message does not start with the file name: %s", name, err);
    if (frag1 && !strstr(err, frag1))
        fail_msg("%s: message lacks \"%s\": %s", name, frag1, err);
    if (frag2 && !strstr(err, frag2))
        fail_msg("%s: message lacks \"%s\": %s", name, frag2, err);
    assert_null(strchr(err, '\n'));
    assert_null(p.replicas); /* output left empty */
    assert_null(p.cluster.nodes);
    ah_plan_free(&p);
}

/* -------------------------------------------------------------------- tests */

static void test_strategy_names(void **state) {
    (void)state;
    ah_strategy s = AH_STRATEGY_MEGATRON;
    assert_string_equal(ah_strategy_name(AH_STRATEGY_AUTOHET), "autohet");
    assert_string_equal(ah_strategy_name(AH_STRATEGY_MEGATRON), "megatron");
    assert_string_equal(ah_strategy_name(AH_STRATEGY_PROPORTIONAL), "proportional");
    assert_non_null(ah_strategy_name((ah_strategy)99));
    assert_int_equal(ah_strategy_parse("autohet", &s), 0);
    assert_int_equal(s, AH_STRATEGY_AUTOHET);
    assert_int_equal(ah_strategy_parse("Megatron", &s), 0);
    assert_int_equal(s, AH_STRATEGY_MEGATRON);
    assert_int_equal(ah_strategy_parse("proportional", &s), 0);
    assert_int_equal(s, AH_STRATEGY_PROPORTIONAL);
    assert_int_equal(ah_strategy_parse("zero", &s), -1);
    assert_int_equal(s, AH_STRATEGY_PROPORTIONAL);
    assert_int_equal(ah_strategy_parse(NULL, &s), -1);
    assert_int_equal(ah_strategy_parse("", &s), -1);
}

static void test_round_trip(void **state) {
    (void)state;
    ah_plan p, q;
    char path[128], err[256] = "";
    build_plan(&p);
    tmp_path(path, sizeof path, "plan.json");
    assert_int_equal(ah_plan_write_json(&p, NULL, path, err, sizeof err), 0);
    memset(&q, 0x5A, sizeof q);
    int rc = ah_plan_read_json(path, ah_device_catalog_builtin(), &q, err, sizeof err);
    if (rc != 0)
        fail_msg("read: %s", err);
    assert_plan_equal(&p, &q);

    /* Writing the read plan again gives the identical document. */
    char path2[128];
    tmp_path(path2, sizeof path2, "plan2.json");
    assert_int_equal(ah_plan_write_json(&q, NULL, path2, err, sizeof err), 0);
    char *t1 = slurp(path, NULL), *t2 = slurp(path2, NULL);
    assert_string_equal(t1, t2);
    free(t1);
    free(t2);
    ah_plan_free(&p);
    ah_plan_free(&q);
    ah_plan_free(&q); /* freeing twice is harmless */
}

static void test_document_fields(void **state) {
    (void)state;
    char path[128];
    cJSON *doc = good_doc(path, sizeof path);
    assert_string_equal(cJSON_GetObjectItem(doc, "format")->valuestring, "autohet-plan");
    assert_int_equal(cJSON_GetObjectItem(doc, "version")->valueint, AH_PLAN_FORMAT_VERSION);
    assert_string_equal(cJSON_GetObjectItem(doc, "strategy")->valuestring, "autohet");
    cJSON *m = cJSON_GetObjectItem(doc, "model");
    assert_int_equal(cJSON_GetObjectItem(m, "num_layers_total")->valueint, 34);
    assert_true(cJSON_GetObjectItem(m, "params")->valuedouble > 6.0e9);
    assert_string_equal(cJSON_GetObjectItem(m, "arch")->valuestring, "gpt");
    cJSON *t = cJSON_GetObjectItem(doc, "train");
    assert_string_equal(cJSON_GetObjectItem(t, "recompute")->valuestring, "selective");
    assert_int_equal(cJSON_GetObjectItem(t, "global_batch")->valueint, 64);
    assert_int_equal(cJSON_GetObjectItem(t, "micro_batch")->valueint, 1);
    cJSON *n2 = at(doc, "cluster", -1, NULL, -1);
    n2 = cJSON_GetArrayItem(cJSON_GetObjectItem(n2, "nodes"), 2);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(n2, "spot")));
    assert_int_equal(cJSON_GetObjectItem(n2, "nic_gbit")->valueint, 200);
    assert_string_equal(cJSON_GetObjectItem(n2, "gpu_type")->valuestring, "A100-40G");
    cJSON *b = cJSON_GetObjectItem(doc, "bottleneck");
    assert_int_equal(cJSON_GetObjectItem(b, "replica")->valueint, 1);
    assert_int_equal(cJSON_GetObjectItem(b, "stage")->valueint, 2);
    cJSON *r1 = at(doc, "replicas", 1, NULL, -1);
    assert_int_equal(cJSON_GetObjectItem(r1, "id")->valueint, 1);
    assert_int_equal(cJSON_GetObjectItem(r1, "micro_batches")->valueint, 24);
    assert_int_equal(cJSON_GetObjectItem(r1, "samples")->valueint, 24);
    cJSON *s = at(doc, "replicas", 1, "stages", 2);
    assert_int_equal(cJSON_GetObjectItem(s, "id")->valueint, 2);
    assert_int_equal(cJSON_GetObjectItem(s, "node_index")->valueint, 2);
    assert_string_equal(cJSON_GetObjectItem(s, "gpu_type")->valuestring, "A100-40G");
    cJSON *g = cJSON_GetObjectItem(s, "gpus");
    assert_int_equal(cJSON_GetArraySize(g), 4);
    for (int i = 0; i < 4; i++)
        assert_int_equal(cJSON_GetArrayItem(g, i)->valueint, i);
    cJSON *l = cJSON_GetObjectItem(s, "layers");
    assert_int_equal(cJSON_GetArrayItem(l, 0)->valueint, 24);
    assert_int_equal(cJSON_GetArrayItem(l, 1)->valueint, 34);
    assert_true(cJSON_IsBool(cJSON_GetObjectItem(s, "p2p_inter_node")));
    cJSON_Delete(doc);
}

static void test_stage_by_node_name(void **state) {
    (void)state;
    char path[128], err[256] = "";
    cJSON *doc = good_doc(path, sizeof path);
    /* node name only, no node_index: still resolves */
    cJSON *s = at(doc, "replicas", 1, "stages", 2);
    cJSON_DeleteItemFromObject(s, "node_index");
    /* hand-written plans may omit the derived numbers entirely */
    cJSON_DeleteItemFromObject(doc, "iteration_time_s");
    cJSON_DeleteItemFromObject(doc, "bottleneck");
    cJSON_DeleteItemFromObject(s, "fwd_s");
    cJSON_AddStringToObject(doc, "future_field", "ignored"); /* unknown keys are ignored */
    tmp_path(path, sizeof path, "byname.json");
    char *text = cJSON_Print(doc);
    write_file(path, text, strlen(text));
    cJSON_free(text);
    cJSON_Delete(doc);
    ah_plan p;
    int rc = ah_plan_read_json(path, ah_device_catalog_builtin(), &p, err, sizeof err);
    if (rc != 0)
        fail_msg("read: %s", err);
    assert_int_equal(p.replicas[1].stages[2].node, 2);
    assert_true(p.replicas[1].stages[2].fwd_s == 0.0);
    assert_true(p.iteration_time_s == 0.0);
    ah_plan_free(&p);
}

/* Reads doc back from a file (fails the test on an error). */
static void read_doc(cJSON *doc, const char *name, ah_plan *p) {
    char path[128], err[256] = "";
    tmp_path(path, sizeof path, name);
    char *text = cJSON_Print(doc);
    write_file(path, text, strlen(text));
    cJSON_free(text);
    if (ah_plan_read_json(path, ah_device_catalog_builtin(), p, err, sizeof err) != 0)
        fail_msg("read %s: %s", name, err);
}

/* A version-1 document (one tp for the plan, none per stage) reads as every
 * stage at that TP; a version-2 plan with stages of TP 1, 2 and 4 round-trips
 * and has no top-level tp. */
static void test_stage_tp_versions(void **state) {
    (void)state;
    char path[128];
    cJSON *doc = good_doc(path, sizeof path);
    cJSON_ReplaceItemInObject(doc, "version", cJSON_CreateNumber(1));
    for (int r = 0; r < 2; r++)
        for (int j = 0; j < (r ? 3 : 2); j++)
            cJSON_DeleteItemFromObject(at(doc, "replicas", r, "stages", j), "tp");
    ah_plan p;
    read_doc(doc, "v1.json", &p);
    cJSON_Delete(doc);
    assert_int_equal(p.version, 1);
    assert_int_equal(ah_plan_uniform_tp(&p), 4);
    assert_int_equal(p.replicas[1].stages[2].tp, 4);

    /* mixed: replica 1 runs TP 1, 2, 4 on node 1 GPUs 0, 2-3, 4-7 */
    p.replicas[1].stages[0].tp = 1;
    p.replicas[1].stages[0].gpu_first = 0;
    p.replicas[1].stages[1].tp = 2;
    p.replicas[1].stages[1].node = 1;
    p.replicas[1].stages[1].gpu_first = 2;
    p.replicas[1].stages[2].node = 1;
    p.replicas[1].stages[2].gpu_first = 4;
    char err[256] = "";
    if (ah_plan_validate(&p, err, sizeof err) != 0)
        fail_msg("validate: %s", err);
    assert_int_equal(ah_plan_uniform_tp(&p), 0);
    assert_int_equal(ah_plan_max_tp(&p), 4);
    char text[48];
    ah_plan_tp_text(&p, text, sizeof text);
    assert_string_equal(text, "1-4 per stage");
    cJSON *out = ah_plan_to_json(&p);
    assert_non_null(out);
    assert_null(cJSON_GetObjectItem(out, "tp"));
    assert_int_equal(cJSON_GetObjectItem(out, "version")->valueint, AH_PLAN_FORMAT_VERSION);
    ah_plan q;
    read_doc(out, "mixed.json", &q);
    cJSON_Delete(out);
    for (int r = 0; r < 2; r++)
        for (int j = 0; j < p.replicas[r].n_stages; j++) {
            assert_int_equal(q.replicas[r].stages[j].tp, p.replicas[r].stages[j].tp);
            assert_int_equal(q.replicas[r].stages[j].gpu_first, p.replicas[r].stages[j].gpu_first);
        }
    /* the rank map follows the stages' TP degrees */
    assert_int_equal(ah_plan_slots(&q), 4 + 4 + 1 + 2 + 4);
    ah_plan_free(&p);
    ah_plan_free(&q);
}

static void test_extra_items(void **state) {
    (void)state;
    ah_plan p, q;
    char path[128], err[256] = "";
    build_plan(&p);
    tmp_path(path, sizeof path, "extra.json");
    cJSON *extra = cJSON_CreateObject();
    cJSON *cmp = cJSON_AddObjectToObject(extra, "comparison");
    cJSON_AddNumberToObject(cmp, "megatron_iteration_time_s", 2.5);
    assert_int_equal(ah_plan_write_json(&p, extra, path, err, sizeof err), 0);
    char *text = slurp(path, NULL);
    cJSON *doc = cJSON_Parse(text);
    free(text);
    cJSON *c2 = cJSON_GetObjectItem(doc, "comparison");
    assert_non_null(c2);
    assert_true(cJSON_GetObjectItem(c2, "megatron_iteration_time_s")->valuedouble == 2.5);
    cJSON_Delete(doc);
    assert_int_equal(ah_plan_read_json(path, ah_device_catalog_builtin(), &q, err, sizeof err), 0);
    assert_plan_equal(&p, &q);
    ah_plan_free(&q);

    /* an extra key that collides with a plan field is refused */
    cJSON_AddNumberToObject(extra, "tp", 8);
    err[0] = '\0';
    assert_int_equal(ah_plan_write_json(&p, extra, path, err, sizeof err), -1);
    assert_non_null(strstr(err, "tp"));
    cJSON_Delete(extra);

    /* unwritable location */
    assert_int_equal(ah_plan_write_json(&p, NULL, "/nonexistent-dir/x/plan.json", err, sizeof err), -1);
    assert_non_null(strstr(err, "/nonexistent-dir/x/plan.json"));
    ah_plan_free(&p);
}

static void test_to_json(void **state) {
    (void)state;
    ah_plan p;
    build_plan(&p);
    cJSON *doc = ah_plan_to_json(&p);
    assert_non_null(doc);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(doc, "replicas")), 2);
    cJSON_Delete(doc);
    assert_null(ah_plan_to_json(NULL));
    /* an unevaluated, empty plan still serialises */
    ah_plan e;
    memset(&e, 0, sizeof e);
    doc = ah_plan_to_json(&e);
    assert_non_null(doc);
    cJSON_Delete(doc);
    ah_plan_free(&p);
}

static void test_malformed(void **state) {
    (void)state;
    char path[128];
    cJSON *doc;

    /* missing "replicas" */
    doc = good_doc(path, sizeof path);
    cJSON_DeleteItemFromObject(doc, "replicas");
    expect_read_error(doc, "no-replicas.json", ": replicas: missing", NULL);
    cJSON_Delete(doc);

    /* node_index out of range */
    doc = good_doc(path, sizeof path);
    cJSON_ReplaceItemInObject(at(doc, "replicas", 1, "stages", 0), "node_index", cJSON_CreateNumber(7));
    expect_read_error(doc, "bad-node.json", ": replicas[1].stages[0].node_index: ", "out of range");
    cJSON_Delete(doc);

    /* wrong version */
    doc = good_doc(path, sizeof path);
    cJSON_ReplaceItemInObject(doc, "version", cJSON_CreateNumber(3));
    expect_read_error(doc, "v3.json", ": version: ", "unsupported");
    cJSON_Delete(doc);

    /* per-stage tp (version 2): not a power of two, not dividing the heads */
    doc = good_doc(path, sizeof path);
    cJSON_ReplaceItemInObject(at(doc, "replicas", 0, "stages", 1), "tp", cJSON_CreateNumber(3));
    expect_read_error(doc, "tp3.json", ": replicas[0].stages[1].tp: ", "power of two");
    cJSON_Delete(doc);
    doc = good_doc(path, sizeof path);
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(doc, "model"), "n_heads", cJSON_CreateNumber(34));
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(doc, "model"), "n_kv_heads", cJSON_CreateNumber(34));
    expect_read_error(doc, "tp-heads.json", ": replicas[0].stages[0].tp: ", "does not divide");
    cJSON_Delete(doc);
    /* version 2 without any tp; version 1 without the plan's tp, or with a stage's own */
    doc = good_doc(path, sizeof path);
    cJSON_DeleteItemFromObject(doc, "tp");
    cJSON_DeleteItemFromObject(at(doc, "replicas", 1, "stages", 2), "tp");
    expect_read_error(doc, "no-tp.json", ": replicas[1].stages[2].tp: ", "missing");
    cJSON_Delete(doc);
    doc = good_doc(path, sizeof path);
    cJSON_ReplaceItemInObject(doc, "version", cJSON_CreateNumber(1));
    cJSON_DeleteItemFromObject(doc, "tp");
    expect_read_error(doc, "v1-no-tp.json", ": tp: ", "missing");
    cJSON_Delete(doc);
    doc = good_doc(path, sizeof path);
    cJSON_ReplaceItemInObject(doc, "version", cJSON_CreateNumber(1));
    cJSON_ReplaceItemInObject(at(doc, "replicas", 0, "stages", 0), "tp", cJSON_CreateNumber(2));
    expect_read_error(doc, "v1-stage-tp.json", ": replicas[0].stages[0].tp: ", "version 1");
    cJSON_Delete(doc);
    /* version 2: a top-level tp is every stage's; a stage of another degree contradicts it */
    doc = good_doc(path, sizeof path);
    cJSON_ReplaceItemInObject(at(doc, "replicas", 1, "stages", 1), "tp", cJSON_CreateNumber(2));
    expect_read_error(doc, "v2-stage-tp.json",
                      ": replicas[1].stages[1].tp: ", "contradicts the plan's top-level tp 4");
    cJSON_Delete(doc);

    /* gpus length != tp */
    doc = good_doc(path, sizeof path);
    cJSON_DeleteItemFromArray(cJSON_GetObjectItem(at(doc, "replicas", 0, "stages", 1), "gpus"), 3);
    expect_read_error(doc, "short-gpus.json", ": replicas[0].stages[1].gpus: ", "tp = 4");
    cJSON_Delete(doc);

    /* layers of the wrong shape */
    doc = good_doc(path, sizeof path);
    cJSON_ReplaceItemInObject(at(doc, "replicas", 1, "stages", 0), "layers", cJSON_CreateString("0-12"));
    expect_read_error(doc, "layers-shape.json",
                      ": replicas[1].stages[0].layers: expected [first, last_exclusive]", NULL);
    cJSON_Delete(doc);

    /* layers outside [0, num_layers_total) */
    doc = good_doc(path, sizeof path);
    {
        int v[2] = {24, 35};
        cJSON_ReplaceItemInObject(at(doc, "replicas", 1, "stages", 2), "layers", cJSON_CreateIntArray(v, 2));
    }
    expect_read_error(doc, "layers-range.json", ": replicas[1].stages[2].layers: ", "[0, 34)");
    cJSON_Delete(doc);

    /* layers leave a gap */
    doc = good_doc(path, sizeof path);
    {
        int v[2] = {13, 24};
        cJSON_ReplaceItemInObject(at(doc, "replicas", 1, "stages", 1), "layers", cJSON_CreateIntArray(v, 2));
    }
    expect_read_error(doc, "layers-gap.json", ": replicas[1].stages[1].layers: ", "expected 12");
    cJSON_Delete(doc);

    /* GPUs beyond the node */
    doc = good_doc(path, sizeof path);
    {
        int v[4] = {6, 7, 8, 9};
        cJSON_ReplaceItemInObject(at(doc, "replicas", 1, "stages", 2), "gpus", cJSON_CreateIntArray(v, 4));
    }
    expect_read_error(doc, "gpus-range.json", ": replicas[1].stages[2].gpus[2]: ", "8 GPUs");
    cJSON_Delete(doc);

    /* non-consecutive GPUs */
    doc = good_doc(path, sizeof path);
    {
        int v[4] = {0, 1, 2, 4};
        cJSON_ReplaceItemInObject(at(doc, "replicas", 1, "stages", 2), "gpus", cJSON_CreateIntArray(v, 4));
    }
    expect_read_error(doc, "gpus-gap.json", ": replicas[1].stages[2].gpus: ", "consecutive");
    cJSON_Delete(doc);

    /* two stages on the same GPUs */
    doc = good_doc(path, sizeof path);
    cJSON_ReplaceItemInObject(at(doc, "replicas", 1, "stages", 2), "node_index", cJSON_CreateNumber(1));
    cJSON_DeleteItemFromObject(at(doc, "replicas", 1, "stages", 2), "node");
    expect_read_error(doc, "overlap.json", ": replicas[1].stages[2].gpus: ", "replicas[1].stages[0]");
    cJSON_Delete(doc);

    /* node name and index disagree */
    doc = good_doc(path, sizeof path);
    cJSON_ReplaceItemInObject(at(doc, "replicas", 0, "stages", 0), "node",
                              cJSON_CreateString("no-such-node"));
    expect_read_error(doc, "node-name.json", ": replicas[0].stages[0].node: ", "no-such-node");
    cJSON_Delete(doc);

    /* stage gpu_type disagrees with its node */
    doc = good_doc(path, sizeof path);
    cJSON_ReplaceItemInObject(at(doc, "replicas", 0, "stages", 0), "gpu_type", cJSON_CreateString("H20"));
    expect_read_error(doc, "stage-gpu.json", ": replicas[0].stages[0].gpu_type: ", "H800");
    cJSON_Delete(doc);

    /* unknown GPU type in the cluster */
    doc = good_doc(path, sizeof path);
    cJSON_ReplaceItemInObject(
        cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "cluster"), "nodes"), 1), "gpu_type",
        cJSON_CreateString("Z9000"));
    expect_read_error(doc, "gpu-type.json", ": cluster.nodes[1].gpu_type: ", "Z9000");
    cJSON_Delete(doc);

    /* wrong types */
    doc = good_doc(path, sizeof path);
    cJSON_ReplaceItemInObject(doc, "tp", cJSON_CreateString("4"));
    expect_read_error(doc, "tp-type.json", ": tp: expected an integer", NULL);
    cJSON_Delete(doc);

    doc = good_doc(path, sizeof path);
    cJSON_ReplaceItemInObject(doc, "replicas", cJSON_CreateObject());
    expect_read_error(doc, "replicas-type.json", ": replicas: expected an array", NULL);
    cJSON_Delete(doc);

    doc = good_doc(path, sizeof path);
    cJSON_ReplaceItemInObject(at(doc, "replicas", 0, NULL, -1), "micro_batches", cJSON_CreateNumber(2.5));
    expect_read_error(doc, "mb-type.json", ": replicas[0].micro_batches: ", "integer");
    cJSON_Delete(doc);

    doc = good_doc(path, sizeof path);
    cJSON_ReplaceItemInObject(at(doc, "replicas", 0, "stages", 0), "fwd_s", cJSON_CreateString("fast"));
    expect_read_error(doc, "fwd-type.json", ": replicas[0].stages[0].fwd_s: ", "number");
    cJSON_Delete(doc);

    doc = good_doc(path, sizeof path);
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(doc, "model"), "hidden", cJSON_CreateNull());
    expect_read_error(doc, "hidden-null.json", ": model.hidden: ", NULL);
    cJSON_Delete(doc);

    /* missing keys */
    doc = good_doc(path, sizeof path);
    cJSON_DeleteItemFromObject(cJSON_GetObjectItem(doc, "model"), "n_layers");
    expect_read_error(doc, "no-layers.json", ": model.n_layers: missing", NULL);
    cJSON_Delete(doc);

    doc = good_doc(path, sizeof path);
    cJSON_DeleteItemFromObject(doc, "format");
    expect_read_error(doc, "no-format.json", ": format: missing", NULL);
    cJSON_Delete(doc);

    doc = good_doc(path, sizeof path);
    cJSON_ReplaceItemInObject(doc, "format", cJSON_CreateString("sailor-plan"));
    expect_read_error(doc, "format.json", ": format: ", NULL);
    cJSON_Delete(doc);

    doc = good_doc(path, sizeof path);
    cJSON_DeleteItemFromObject(at(doc, "replicas", 1, "stages", 1), "node_index");
    cJSON_DeleteItemFromObject(at(doc, "replicas", 1, "stages", 1), "node");
    expect_read_error(doc, "no-node.json", ": replicas[1].stages[1].node_index: missing", NULL);
    cJSON_Delete(doc);

    /* inconsistent numbers */
    doc = good_doc(path, sizeof path);
    cJSON_ReplaceItemInObject(at(doc, "replicas", 0, NULL, -1), "micro_batches", cJSON_CreateNumber(41));
    expect_read_error(doc, "mb-sum.json", ": replicas: ", "global_batch 64");
    cJSON_Delete(doc);

    doc = good_doc(path, sizeof path);
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(doc, "train"), "global_batch", cJSON_CreateNumber(128));
    expect_read_error(doc, "train-gb.json", ": train.global_batch: ", NULL);
    cJSON_Delete(doc);

    doc = good_doc(path, sizeof path);
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(doc, "bottleneck"), "stage", cJSON_CreateNumber(5));
    expect_read_error(doc, "bneck.json", ": bottleneck.stage: ", NULL);
    cJSON_Delete(doc);

    /* not an object at all */
    doc = cJSON_CreateArray();
    expect_read_error(doc, "array.json", "expected a JSON object", NULL);
    cJSON_Delete(doc);
}

static void test_truncated_and_garbage(void **state) {
    (void)state;
    char path[128], bad[128], err[512];
    cJSON *doc = good_doc(path, sizeof path);
    cJSON_Delete(doc);
    size_t len;
    char *text = slurp(path, &len);
    tmp_path(bad, sizeof bad, "truncated.json");

    /* the brief's case: cut in half */
    write_file(bad, text, len / 2);
    ah_plan p;
    err[0] = '\0';
    assert_int_equal(ah_plan_read_json(bad, ah_device_catalog_builtin(), &p, err, sizeof err), -1);
    assert_non_null(strstr(err, bad));
    assert_non_null(strstr(err, "line "));
    assert_non_null(strstr(err, "truncated"));

    /* every cut (strided, plus the whole tail) fails cleanly */
    size_t body = len;
    while (body > 0 && (text[body - 1] == '\n' || text[body - 1] == ' '))
        body--;
    for (size_t cut = 0; cut < body; cut += (cut + 80 < body ? 13 : 1)) {
        write_file(bad, text, cut);
        err[0] = '\0';
        memset(&p, 0xCD, sizeof p);
        int rc = ah_plan_read_json(bad, ah_device_catalog_builtin(), &p, err, sizeof err);
        if (rc != -1)
            fail_msg("cut at %zu: expected -1", cut);
        assert_non_null(strstr(err, bad));
        assert_null(p.replicas);
    }

    /* trailing garbage, empty file, NUL bytes, missing file */
    char *g = malloc(len + 8);
    memcpy(g, text, len);
    memcpy(g + len, "{}", 2);
    write_file(bad, g, len + 2);
    assert_int_equal(ah_plan_read_json(bad, ah_device_catalog_builtin(), &p, err, sizeof err), -1);
    assert_non_null(strstr(err, "after the JSON document"));
    free(g);
    write_file(bad, "", 0);
    assert_int_equal(ah_plan_read_json(bad, ah_device_catalog_builtin(), &p, err, sizeof err), -1);
    assert_non_null(strstr(err, "empty"));
    write_file(bad, "{\"a\"\0}", 6);
    assert_int_equal(ah_plan_read_json(bad, ah_device_catalog_builtin(), &p, err, sizeof err), -1);
    assert_non_null(strstr(err, bad));
    tmp_path(bad, sizeof bad, "does-not-exist.json");
    assert_int_equal(ah_plan_read_json(bad, ah_device_catalog_builtin(), &p, err, sizeof err), -1);
    assert_non_null(strstr(err, bad));
    assert_int_equal(ah_plan_read_json(NULL, ah_device_catalog_builtin(), &p, err, sizeof err), -1);
    free(text);
}

/* Replace (or delete) every value in the document with every wrong type in
 * turn: reading must return 0 or -1 (never crash or leak), and errors must
 * name the file. */
static int mutate_count;

static void try_doc(cJSON *root, const char *file) {
    char *text = cJSON_PrintUnformatted(root);
    assert_non_null(text);
    write_file(file, text, strlen(text));
    cJSON_free(text);
    ah_plan p;
    char err[512] = "";
    int rc = ah_plan_read_json(file, ah_device_catalog_builtin(), &p, err, sizeof err);
    assert_true(rc == 0 || rc == -1);
    if (rc == -1) {
        assert_non_null(strstr(err, file));
        assert_null(p.replicas);
    } else {
        /* accepted: must still be structurally sound */
        assert_true(p.n_replicas > 0);
        for (int r = 0; r < p.n_replicas; r++)
            for (int j = 0; j < p.replicas[r].n_stages; j++) {
                const ah_stage *s = &p.replicas[r].stages[j];
                assert_true(s->node >= 0 && s->node < p.cluster.n_nodes);
                assert_true(s->tp > 0 && s->gpu_first + s->tp <= p.cluster.nodes[s->node].gpus);
            }
    }
    ah_plan_free(&p);
    mutate_count++;
}

static void mutate_all(cJSON *root, cJSON *node, const char *file) {
    for (cJSON *it = node->child; it; it = it->next) {
        if (cJSON_IsArray(it) || cJSON_IsObject(it))
            mutate_all(root, it, file);
        cJSON *repl[] = {cJSON_CreateNull(),     cJSON_CreateTrue(),        cJSON_CreateString("x"),
                         cJSON_CreateNumber(-1), cJSON_CreateNumber(1e300), cJSON_CreateNumber(0.5),
                         cJSON_CreateNumber(3),  cJSON_CreateArray(),       cJSON_CreateObject()};
        for (size_t k = 0; k < sizeof repl / sizeof repl[0]; k++) {
            /* swap `it` for the replacement (keeping its key), then back */
            assert_non_null(repl[k]);
            if (it->string) {
                repl[k]->string = strdup(it->string);
                assert_non_null(repl[k]->string);
            }
            cJSON *saved = cJSON_Duplicate(it, 1);
            assert_non_null(saved);
            assert_true(cJSON_ReplaceItemViaPointer(node, it, repl[k]));
            try_doc(root, file);
            assert_true(cJSON_ReplaceItemViaPointer(node, repl[k], saved));
            it = saved;
        }
        /* and remove it altogether: renaming the key to one readers ignore
         * is the same as deleting it (and keeps the list intact) */
        if (it->string) {
            char *key = it->string;
            char gone[] = "x-removed";
            it->string = gone;
            try_doc(root, file);
            it->string = key;
        }
    }
}

static void test_mutations(void **state) {
    (void)state;
    char path[128], file[128];
    cJSON *doc = good_doc(path, sizeof path);
    tmp_path(file, sizeof file, "mutated.json");
    mutate_count = 0;
    mutate_all(doc, doc, file);
    assert_true(mutate_count > 500);
    cJSON_Delete(doc);
}

static void test_copy_is_deep(void **state) {
    (void)state;
    ah_plan a, ref, c;
    build_plan(&a);
    build_plan(&ref);
    memset(&c, 0x77, sizeof c);
    ah_plan_copy(&c, &a);
    assert_ptr_not_equal(c.replicas, a.replicas);
    assert_ptr_not_equal(c.cluster.nodes, a.cluster.nodes);
    assert_ptr_not_equal(c.replicas[1].stages, a.replicas[1].stages);
    /* scribble over and free the source: the copy is unaffected */
    a.replicas[1].stages[0].layer_last = 99;
    snprintf(a.cluster.nodes[0].name, sizeof a.cluster.nodes[0].name, "changed");
    ah_plan_free(&a);
    assert_null(a.replicas);
    assert_plan_equal(&c, &ref);
    /* a copy of a copy, then free in the other order */
    ah_plan d;
    ah_plan_copy(&d, &c);
    ah_plan_free(&c);
    assert_plan_equal(&d, &ref);
    ah_plan_free(&d);
    /* empty plans copy to empty plans */
    ah_plan e, f;
    memset(&e, 0, sizeof e);
    ah_plan_copy(&f, &e);
    assert_null(f.replicas);
    assert_null(f.cluster.nodes);
    ah_plan_free(&f);
    ah_plan_free(&ref);
    ah_plan_free(NULL);
}

static void test_table(void **state) {
    (void)state;
    ah_plan p;
    build_plan(&p);
    FILE *f = tmpfile();
    assert_non_null(f);
    ah_plan_print_table(&p, f);
    long n = ftell(f);
    assert_true(n > 0);
    rewind(f);
    char *buf = calloc(1, (size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);

    assert_non_null(strstr(buf, "Plan (autohet): gpt3-6.7b, seq 2048"));
    assert_non_null(strstr(buf, "global batch 64 = 64 micro-batches x 1"));
    assert_non_null(strstr(buf, "TP=4"));
    assert_non_null(strstr(buf, "20/24 GPUs used"));
    assert_non_null(strstr(buf, "Predicted iteration time: 1.2346 s"));
    assert_non_null(strstr(buf, "MFU:"));
    assert_non_null(strstr(buf, "31.4%"));
    assert_non_null(strstr(buf, "(model, 3x fwd); ") && strstr(buf, "(hardware, with recomputation)"));
    assert_non_null(strstr(buf, "replica 1 stage 2"));
    /* exactly one stage row carries the '*' marker: replica 1's third stage,
     * on the second A100 node, layers [24,34) */
    int marked = 0;
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        if (strstr(line, "[24,34)") && strstr(line, " 2* ")) {
            assert_non_null(strstr(line, p.cluster.nodes[2].name));
            marked++;
        } else if (strstr(line, "* ") && strstr(line, "[") && strstr(line, ")") && !strstr(line, "=")) {
            fail_msg("unexpected marker on: %s", line);
        }
    }
    assert_int_equal(marked, 1);
    free(buf);

    /* over-capacity stage is flagged; empty plan does not crash */
    f = tmpfile();
    ah_plan_print_table(&p, f);
    rewind(f);
    char line[1024];
    int warned = 0;
    while (fgets(line, sizeof line, f))
        warned += strstr(line, "WARNING: 1 stage exceeds GPU memory") != NULL;
    fclose(f);
    assert_int_equal(warned, 1);
    ah_plan e;
    memset(&e, 0, sizeof e);
    f = tmpfile();
    ah_plan_print_table(&e, f);
    ah_plan_print_table(NULL, f);
    fclose(f);
    ah_plan_free(&p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_strategy_names),  cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_document_fields), cmocka_unit_test(test_stage_by_node_name),
        cmocka_unit_test(test_extra_items),     cmocka_unit_test(test_to_json),
        cmocka_unit_test(test_malformed),       cmocka_unit_test(test_truncated_and_garbage),
        cmocka_unit_test(test_mutations),       cmocka_unit_test(test_copy_is_deep),
        cmocka_unit_test(test_table),           cmocka_unit_test(test_stage_tp_versions),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
