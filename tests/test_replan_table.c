/* Replans computed ahead (src/plan/replan_table.c): a lookup returns the plan a full search of the same
 * survivors returns (search value, evaluated iteration time, shape), on a cluster whose node classes are
 * interleaved, for every loss the table holds; losses it does not hold are not answered; the document form
 * round-trips and bad tables are one-line errors naming the field. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cjson/cJSON.h>

#include "autohet/plan.h"
#include "autohet/profile.h"

typedef struct {
    ah_model_config m;
    ah_cluster c;
    ah_profile *prof;
    ah_plan_options o;
    ah_plan plan;
    ah_replan_table *t;
} fixture;

/* 7 nodes of 3 classes in the order A B A C B A C (names n0..n6): classes interleave, so canonical and actual
 * survivors list their classes in different orders */
static void make_fixture(fixture *f, int depth) {
    char err[512];
    memset(f, 0, sizeof *f);
    assert_int_equal(ah_model_resolve("gpt3-1.3b", &f->m, err, sizeof err), 0);
    ah_cluster a, b, c;
    const ah_device_catalog *cat = ah_device_catalog_builtin();
    assert_int_equal(ah_cluster_parse_shorthand("3x4xA100-40G", cat, &a, err, sizeof err), 0);
    assert_int_equal(ah_cluster_parse_shorthand("2x4xH800", cat, &b, err, sizeof err), 0);
    assert_int_equal(ah_cluster_parse_shorthand("2x4xV100-32G", cat, &c, err, sizeof err), 0);
    const char order[] = "ABACBAC";
    int next[3] = {0, 0, 0};
    f->c.n_nodes = 7;
    f->c.nodes = calloc(7, sizeof(ah_node));
    assert_non_null(f->c.nodes);
    for (int i = 0; i < 7; i++) {
        int k = order[i] - 'A';
        const ah_cluster *src = k == 0 ? &a : k == 1 ? &b : &c;
        f->c.nodes[i] = src->nodes[next[k]++];
        snprintf(f->c.nodes[i].name, sizeof f->c.nodes[i].name, "n%d", i);
    }
    ah_cluster_free(&a);
    ah_cluster_free(&b);
    ah_cluster_free(&c);
    f->prof = ah_profile_analytic();
    ah_plan_options_default(&f->o);
    f->o.global_batch = 64;
    assert_int_equal(ah_plan_search(&f->m, &f->c, f->prof, &f->o, &f->plan, err, sizeof err), 0);
    assert_int_equal(ah_replan_table_build(&f->plan, f->prof, &f->o, depth, &f->t, err, sizeof err), 0);
}

static void free_fixture(fixture *f) {
    ah_replan_table_free(f->t);
    ah_plan_free(&f->plan);
    ah_profile_free(f->prof);
    free(f->c.nodes);
}

/* the survivors of losing the nodes whose bits are set in `lost` */
static ah_cluster survivors(const ah_cluster *c, unsigned lost) {
    ah_cluster s = {calloc((size_t)c->n_nodes, sizeof(ah_node)), 0};
    assert_non_null(s.nodes);
    for (int i = 0; i < c->n_nodes; i++)
        if (!(lost & (1u << i)))
            s.nodes[s.n_nodes++] = c->nodes[i];
    return s;
}

/* the lookup against a full search of the same survivors; 1 if the table answered */
static int check_loss(const fixture *f, const ah_replan_table *t, unsigned lost) {
    char err[512];
    ah_cluster s = survivors(&f->c, lost);
    ah_plan got, want;
    int r = ah_replan_table_lookup(t, &f->plan, &s, f->prof, &f->o, &got, err, sizeof err);
    assert_true(r >= 0);
    int found = ah_plan_search(&f->m, &s, f->prof, &f->o, &want, err, sizeof err) == 0;
    if (r == 1) {
        assert_true(found); /* the table answers only where the search found a plan */
        assert_int_equal(got.search_value_ns, want.search_value_ns);
        assert_int_equal(got.iteration_time_ns, want.iteration_time_ns);
        assert_int_equal(got.micro_batch, want.micro_batch);
        assert_int_equal(got.n_replicas, want.n_replicas);
        assert_int_equal(got.gpus_used, want.gpus_used);
        assert_int_equal(got.cluster.n_nodes, s.n_nodes);
        for (int k = 0; k < got.n_replicas; k++)
            assert_int_equal(got.replicas[k].micro_batches, want.replicas[k].micro_batches);
        ah_plan_free(&got);
    }
    if (found)
        ah_plan_free(&want);
    free(s.nodes);
    return r;
}

static void test_same_as_full_search(void **state) {
    (void)state;
    fixture f;
    make_fixture(&f, 2);
    int depth, n, classes, threads;
    double build_s;
    ah_replan_table_stats(f.t, &depth, &n, &classes, &build_s, &threads);
    assert_int_equal(classes, 3);
    assert_int_equal(depth, 2);
    assert_int_equal(n, 3 + 6); /* loss vectors of 1 node (3) and 2 nodes (3 pairs + 3 doubles) */
    int answered = 0;
    for (unsigned lost = 1; lost < 1u << 7; lost++) {
        int k = __builtin_popcount(lost);
        if (k > 3)
            continue;
        int r = check_loss(&f, f.t, lost);
        if (k <= 2)
            answered += r;
        else
            assert_int_equal(r, 0); /* deeper than the table */
    }
    assert_int_equal(answered, 7 + 21); /* every loss of 1 or 2 of the 7 nodes */
    free_fixture(&f);
}

/* deeper than the table: part of the loss looked up, the rest repaired; a valid plan of the survivors, and no
 * answer for a loss the table holds */
static void test_nearest(void **state) {
    (void)state;
    fixture f;
    make_fixture(&f, 2);
    char err[512];
    int answered = 0;
    for (unsigned lost = 1; lost < 1u << 7; lost++) {
        int k = __builtin_popcount(lost);
        if (k > 3)
            continue;
        ah_cluster s = survivors(&f.c, lost);
        ah_plan p, full;
        int r = ah_replan_table_nearest(f.t, &f.plan, &s, f.prof, &f.o, &p, err, sizeof err);
        if (k <= 2) {
            assert_int_equal(r, 0);
        } else if (r == 1) {
            answered++;
            assert_int_equal(ah_plan_validate(&p, err, sizeof err), 0);
            assert_int_equal(p.cluster.n_nodes, s.n_nodes);
            for (int i = 0; i < s.n_nodes; i++)
                assert_string_equal(p.cluster.nodes[i].name, s.nodes[i].name);
            int mb = 0;
            for (int j = 0; j < p.n_replicas; j++)
                mb += p.replicas[j].micro_batches;
            assert_int_equal(mb * p.micro_batch, p.global_batch);
            /* never better than the search of the survivors by more than the evaluation's own spread */
            assert_int_equal(ah_plan_search(&f.m, &s, f.prof, &f.o, &full, err, sizeof err), 0);
            assert_true(p.iteration_time_s >= 0.9 * full.iteration_time_s);
            ah_plan_free(&full);
            ah_plan_free(&p);
        }
        free(s.nodes);
    }
    assert_true(answered >= 30); /* of the 35 losses of 3 nodes: the repair finds a plan for nearly all */
    free_fixture(&f);
}

static void test_document_round_trip(void **state) {
    (void)state;
    fixture f;
    make_fixture(&f, 1);
    cJSON *j = ah_replan_table_to_json(f.t);
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    cJSON *back = cJSON_Parse(text);
    free(text);
    ah_replan_table *t2;
    char err[512];
    assert_int_equal(ah_replan_table_from_json(back, &f.plan, "p.json", &t2, err, sizeof err), 0);
    cJSON_Delete(back);
    for (int i = 0; i < 7; i++)
        assert_int_equal(check_loss(&f, t2, 1u << i), 1);
    assert_int_equal(check_loss(&f, t2, 3u), 0);
    /* a survivor the table's cluster does not have: not answered */
    ah_cluster s = survivors(&f.c, 1u);
    snprintf(s.nodes[0].name, sizeof s.nodes[0].name, "elsewhere");
    ah_plan p;
    assert_int_equal(ah_replan_table_lookup(t2, &f.plan, &s, f.prof, &f.o, &p, err, sizeof err), 0);
    free(s.nodes);
    ah_replan_table_free(t2);
    free_fixture(&f);
}

/* the document with one edit (jq-like: the entry's key set to a JSON value) must fail naming `field` */
static void expect_bad(const fixture *f, const char *base, int entry, const char *key, const char *value,
                       const char *field) {
    cJSON *j = cJSON_Parse(base);
    cJSON *target = entry < 0 ? j : cJSON_GetArrayItem(cJSON_GetObjectItem(j, "entries"), entry);
    cJSON_ReplaceItemInObject(target, key, cJSON_Parse(value));
    ah_replan_table *t = NULL;
    char err[512] = "";
    assert_int_equal(ah_replan_table_from_json(j, &f->plan, "p.json", &t, err, sizeof err), -1);
    assert_null(t);
    if (!strstr(err, field) || !strstr(err, "p.json")) {
        fprintf(stderr, "expected %s in: %s\n", field, err);
        fail();
    }
    cJSON_Delete(j);
}

static void test_bad_tables(void **state) {
    (void)state;
    fixture f;
    make_fixture(&f, 2);
    cJSON *j = ah_replan_table_to_json(f.t);
    char *base = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    expect_bad(&f, base, -1, "depth", "0", "replans.depth");
    expect_bad(&f, base, -1, "depth", "99", "replans.depth");
    expect_bad(&f, base, -1, "entries", "{}", "replans.entries");
    expect_bad(&f, base, 0, "lost", "[\"n9\"]", "replans.entries[0].lost[0]");
    expect_bad(&f, base, 0, "lost", "[\"n1\",\"n1\"]", "replans.entries[0].lost[1]");
    expect_bad(&f, base, 0, "lost", "[\"n1\",\"n2\",\"n3\"]", "replans.entries[0].lost");
    expect_bad(&f, base, 0, "lost", "[7]", "replans.entries[0].lost[0]");
    expect_bad(&f, base, 1, "lost", "[\"n6\"]",
               "replans.entries[1]"); /* entry 0 lost a C node: same vector */
    expect_bad(&f, base, 0, "micro_batch", "0", "replans.entries[0].micro_batch");
    expect_bad(&f, base, 0, "search_value_ns", "\"x\"", "replans.entries[0].search_value_ns");
    expect_bad(&f, base, 0, "replicas", "[]", "replans.entries[0].replicas: expected");
    expect_bad(&f, base, 0, "replicas", "\"\"", "replans.entries[0].replicas: expected");
    expect_bad(&f, base, 0, "replicas", "\"64:0/1/0/0\"", "replans.entries[0].replicas: replica 0 stage 0");
    expect_bad(&f, base, 0, "replicas", "\"64:6/1/0/0/26\"",
               "replica 0 stage 0: node index 6");                                       /* n6: lost */
    expect_bad(&f, base, 0, "replicas", "\"64:0/8/0/0/26\"", "replica 0 stage 0: TP 8"); /* 4-GPU node */
    expect_bad(&f, base, 0, "replicas", "\"64:0/1/0/5/5\"", "replica 0 stage 0: layers [5, 5)");
    expect_bad(&f, base, 0, "replicas", "\"32:0/1/0/0/26;0:1/1/0/0/26\"", "replica 1: expected MB:");
    expect_bad(&f, base, 0, "replicas", "\"32:0/1/0/0/26,\"", "replica 0 stage 1");
    expect_bad(&f, base, 0, "replicas", "\"32:0/1/0/0/26;\"", "replica 1: expected MB:");
    expect_bad(&f, base, 0, "replicas", "\"32:0/1/0/0/26x\"", "replica 0 stage 0");
    expect_bad(&f, base, 0, "replicas", "\"32:0/1/0/0/99999999999\"", "replica 0 stage 0");
    free(base);
    /* limits of the build */
    ah_replan_table *t;
    char err[512];
    assert_int_equal(ah_replan_table_build(&f.plan, f.prof, &f.o, 0, &t, err, sizeof err), 2);
    assert_int_equal(
        ah_replan_table_build(&f.plan, f.prof, &f.o, AH_REPLAN_MAX_DEPTH + 1, &t, err, sizeof err), 2);
    free_fixture(&f);
}

/* a table too big to compute ahead is refused with the count, not started */
static void test_too_many_losses(void **state) {
    (void)state;
    fixture f;
    make_fixture(&f, 1);
    /* 40 nodes of 40 classes (each its own NIC): 40 + 780 + 9880 losses of up to 3 nodes */
    ah_plan big;
    ah_plan_copy(&big, &f.plan);
    free(big.cluster.nodes);
    big.cluster.n_nodes = 40;
    big.cluster.nodes = calloc(40, sizeof(ah_node));
    for (int i = 0; i < 40; i++) {
        big.cluster.nodes[i] = f.c.nodes[0];
        big.cluster.nodes[i].nic_gbit = 100 + i;
        snprintf(big.cluster.nodes[i].name, sizeof big.cluster.nodes[i].name, "b%d", i);
    }
    ah_replan_table *t = NULL;
    char err[512];
    assert_int_equal(ah_replan_table_build(&big, f.prof, &f.o, 3, &t, err, sizeof err), 2);
    assert_null(t);
    assert_non_null(strstr(err, "10700 losses"));
    ah_plan_free(&big);
    free_fixture(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_as_full_search), cmocka_unit_test(test_nearest),
        cmocka_unit_test(test_document_round_trip), cmocka_unit_test(test_bad_tables),
        cmocka_unit_test(test_too_many_losses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
