/* The recovery assignment (nearest copy first, newest complete step, cloud
 * only for full-reload, restart from the seed when nothing is complete, server
 * ranks for live nodes the plan does not use) and spot-trace parsing. */
#include "test_util.h"

#include "autohet/elastic.h"

#define PLANS AH_FIXTURES "/../plans"

static ah_plan load_plan(const char *name) {
    ah_plan p;
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/%s.json", PLANS, name);
    if (ah_plan_read_json(path, ah_device_catalog_builtin(), &p, err, sizeof err) != 0)
        fail_msg("%s", err);
    return p;
}

/* a holding of `node` in `tier` with layers [lo, hi) at `step` */
static void hold(ah_holding *h, const char *node, int tier, int lo, int hi, int step) {
    memset(h, 0, sizeof *h);
    snprintf(h->node, sizeof h->node, "%s", node);
    h->tier = tier;
    snprintf(h->dir, sizeof h->dir, "/x/%s/%s", ah_tier_name(tier), node);
    ah_manifest_init(&h->m, node, ah_tier_name(tier));
    for (int l = lo; l < hi; l++) {
        ah_manifest_entry e = {l, 0, step, "", 1000 + (uint64_t)l, 0x1234, 0};
        snprintf(e.file, sizeof e.file, "L%03d-tp0-s%d.safetensors", l, step);
        ah_manifest_put(&h->m, &e);
    }
}

static void free_holds(ah_holding *h, int n) {
    for (int i = 0; i < n; i++)
        ah_manifest_free(&h[i].m);
}

static const ah_assign_entry *entry(const ah_assignment *a, int rank, int layer) {
    for (int i = 0; i < a->n; i++)
        if (a->e[i].rank == rank && a->e[i].layer == layer)
            return &a->e[i];
    fail_msg("no entry for rank %d layer %d", rank, layer);
    return NULL;
}

/* the 2x2 plan's memory tiers: n0 L0-2, n1 L3-5, n2 L0-1, n3 L2-5 */
static int hold_2x2_memory(ah_holding *h, int step) {
    hold(&h[0], "n0", AH_TIER_MEMORY, 0, 3, step);
    hold(&h[1], "n1", AH_TIER_MEMORY, 3, 6, step);
    hold(&h[2], "n2", AH_TIER_MEMORY, 0, 2, step);
    hold(&h[3], "n3", AH_TIER_MEMORY, 2, 6, step);
    return 4;
}

static void test_nearest_copy_first(void **state) {
    (void)state;
    ah_holding h[8];
    int nh = hold_2x2_memory(h, 5);
    hold(&h[nh++], "n0", AH_TIER_CLOUD, 0, 6, 5);
    /* the same plan again: every shard from its own memory, cloud as fallback */
    ah_plan same = load_plan("tiny-4node-2x2");
    ah_assignment a;
    char err[256];
    assert_int_equal(ah_recovery_assign(h, nh, &same, AH_RECOVERY_LAYER_BITMAP, &a, err, sizeof err), 0);
    assert_int_equal(a.step, 5);
    assert_int_equal(a.n, 3 + 3 + 2 + 4);
    for (int i = 0; i < a.n; i++) {
        assert_int_equal(a.e[i].tier, AH_TIER_MEMORY);
        assert_int_equal(a.e[i].server, -1);
        assert_int_equal(a.e[i].fallback, 4);
    }
    ah_assignment_free(&a);
    /* the pipeline plan: n0 L0-1, n1 L2, n2 L3-4, n3 L5 */
    ah_plan pipe = load_plan("tiny-4node-pipe");
    assert_int_equal(ah_recovery_assign(h, nh, &pipe, AH_RECOVERY_LAYER_BITMAP, &a, err, sizeof err), 0);
    assert_int_equal(entry(&a, 0, 0)->tier, AH_TIER_MEMORY);
    const ah_assign_entry *l2 = entry(&a, 1, 2); /* n1 lacks L2; n0 and n3 have it */
    assert_int_equal(l2->tier, AH_TIER_PEER);
    assert_true(l2->server == 0 || l2->server == 3);
    for (int l = 3; l < 5; l++) { /* n2 holds L0-1 only: peers n1 / n3 */
        const ah_assign_entry *v = entry(&a, 2, l);
        assert_int_equal(v->tier, AH_TIER_PEER);
        assert_true(v->server == 1 || v->server == 3);
    }
    assert_int_equal(entry(&a, 3, 5)->tier, AH_TIER_MEMORY);
    assert_int_equal(a.n_servers, 0);
    ah_assignment_free(&a);
    /* n1 gone (its holding not offered): L3-5 from n3, none from the cloud */
    ah_holding g[8];
    int ng = 0;
    for (int i = 0; i < nh; i++)
        if (strcmp(h[i].node, "n1") || h[i].tier == AH_TIER_CLOUD)
            g[ng++] = h[i];
    assert_int_equal(ah_recovery_assign(g, ng, &same, AH_RECOVERY_LAYER_BITMAP, &a, err, sizeof err), 0);
    for (int l = 3; l < 6; l++) {
        const ah_assign_entry *v = entry(&a, 1, l);
        assert_int_equal(v->tier, AH_TIER_PEER);
        assert_int_equal(v->server, 3);
    }
    ah_assignment_free(&a);
    free_holds(h, nh);
    ah_plan_free(&same);
    ah_plan_free(&pipe);
}

static void test_newest_complete_step(void **state) {
    (void)state;
    ah_plan p = load_plan("tiny-4node-2x2");
    ah_holding h[8];
    char err[256];
    ah_assignment a;
    /* memory at step 7 on n0 and n3 only (L0-5 covered except nothing: n0 L0-2, n3 L2-5), cloud at 5 */
    hold(&h[0], "n0", AH_TIER_MEMORY, 0, 3, 7);
    hold(&h[1], "n3", AH_TIER_MEMORY, 2, 5, 7); /* L5 missing at 7 */
    hold(&h[2], "n1", AH_TIER_CLOUD, 0, 6, 5);
    assert_int_equal(ah_recovery_assign(h, 3, &p, AH_RECOVERY_LAYER_BITMAP, &a, err, sizeof err), 0);
    assert_int_equal(a.step, 5); /* 7 is incomplete */
    for (int i = 0; i < a.n; i++)
        assert_int_equal(a.e[i].tier, AH_TIER_CLOUD);
    ah_assignment_free(&a);
    ah_manifest_free(&h[1].m);
    hold(&h[1], "n3", AH_TIER_MEMORY, 2, 6, 7); /* now complete at 7 */
    assert_int_equal(ah_recovery_assign(h, 3, &p, AH_RECOVERY_LAYER_BITMAP, &a, err, sizeof err), 0);
    assert_int_equal(a.step, 7);
    assert_int_equal(entry(&a, 1, 4)->tier, AH_TIER_PEER); /* n1 holds nothing at 7 */
    assert_int_equal(entry(&a, 1, 4)->fallback, -1);       /* the cloud is at 5 */
    ah_assignment_free(&a);
    /* full-reload ignores the newer memory copies */
    assert_int_equal(ah_recovery_assign(h, 3, &p, AH_RECOVERY_FULL_RELOAD, &a, err, sizeof err), 0);
    assert_int_equal(a.step, 5);
    for (int i = 0; i < a.n; i++)
        assert_int_equal(a.e[i].tier, AH_TIER_CLOUD);
    ah_assignment_free(&a);
    /* nothing complete: step 0, no shards, the reason */
    assert_int_equal(ah_recovery_assign(h, 1, &p, AH_RECOVERY_LAYER_BITMAP, &a, err, sizeof err), 1);
    assert_int_equal(a.step, 0);
    assert_int_equal(a.n, 0);
    assert_contains(err, "layer 3");
    ah_assignment_free(&a);
    free_holds(h, 3);
    ah_plan_free(&p);
}

static void test_server_for_unused_node(void **state) {
    (void)state;
    ah_plan p = load_plan("tiny-2x2"); /* nodes n0, n1, 4 ranks */
    ah_holding h[2];
    char err[256];
    ah_assignment a;
    hold(&h[0], "n0", AH_TIER_DISK, 0, 3, 4);
    hold(&h[1], "n9", AH_TIER_MEMORY, 0, 6, 4); /* alive, but not in the plan */
    assert_int_equal(ah_recovery_assign(h, 2, &p, AH_RECOVERY_LAYER_BITMAP, &a, err, sizeof err), 0);
    assert_int_equal(entry(&a, 0, 1)->tier, AH_TIER_DISK); /* own disk beats a peer's memory */
    const ah_assign_entry *v = entry(&a, 1, 4);
    assert_int_equal(v->tier, AH_TIER_PEER);
    assert_int_equal(v->server, 4); /* the first rank after the plan's 4 */
    assert_int_equal(a.n_servers, 1);
    assert_string_equal(a.server_node[0], "n9");
    ah_assignment_free(&a);
    free_holds(h, 2);
    ah_plan_free(&p);
}

static void test_spot_trace(void **state) {
    (void)state;
    ah_spot_event *e = NULL;
    int n = 0;
    char err[256], p[64];
    write_tmp("# bursts\n0,add,node1\n0,add,node2\n\n1500,remove,node1\n1500,remove,node2\n2000,add,node1\n",
              p);
    assert_int_equal(ah_spot_trace_load(p, &e, &n, err, sizeof err), 0);
    assert_int_equal(n, 5);
    assert_double_equal(e[2].t_s, 1.5, 1e-12);
    assert_int_equal(e[3].add, 0);
    assert_string_equal(e[4].node, "node1");
    free(e);
    unlink(p);
    write_tmp("0,add,a\n12,oops,a\n", p);
    assert_int_equal(ah_spot_trace_load(p, &e, &n, err, sizeof err), -1);
    assert_contains(err, ":2:");
    unlink(p);
    write_tmp("10,add,a\n5,remove,a\n", p);
    assert_int_equal(ah_spot_trace_load(p, &e, &n, err, sizeof err), -1);
    assert_contains(err, "goes back");
    unlink(p);
    write_tmp("x,add,a\n", p);
    assert_int_equal(ah_spot_trace_load(p, &e, &n, err, sizeof err), -1);
    assert_contains(err, ":1:");
    unlink(p);
    /* the real trace (Bamboo's AWS P3, copied into the fixtures): 344 events in time order */
    assert_int_equal(
        ah_spot_trace_load(AH_FIXTURES "/spot-traces/aws-p3-bamboo.csv", &e, &n, err, sizeof err), 0);
    assert_int_equal(n, 344); /* the data README says 343; the file has 344 event lines */
    int adds = 0;
    for (int i = 0; i < n; i++)
        adds += e[i].add;
    assert_true(adds > 0 && adds < n);
    free(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nearest_copy_first),
        cmocka_unit_test(test_newest_complete_step),
        cmocka_unit_test(test_server_for_unused_node),
        cmocka_unit_test(test_spot_trace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
