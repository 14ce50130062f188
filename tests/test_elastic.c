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

/* a holding of `node` in `tier` with every TP rank of degree deg of layers [lo, hi) at `step` */
static void hold_deg(ah_holding *h, const char *node, int tier, int lo, int hi, int step, int deg) {
    hold(h, node, tier, 0, 0, step);
    for (int l = lo; l < hi; l++)
        for (int t = 0; t < deg; t++) {
            ah_manifest_entry e = {l, t, step, "", 100 * (uint64_t)deg + (uint64_t)t, 0x1234, deg};
            ah_ckpt_shard_name(e.file, sizeof e.file, l, t, deg, step);
            ah_manifest_put(&h->m, &e);
        }
}

/* rank's entries for layer: how many, and the TP ranks they list as a bit mask */
static int entries_of(const ah_assignment *a, int rank, int layer, unsigned *tp_mask, int *degree) {
    int n = 0;
    *tp_mask = 0;
    for (int i = 0; i < a->n; i++)
        if (a->e[i].rank == rank && a->e[i].layer == layer) {
            n++;
            *tp_mask |= 1u << a->e[i].tp;
            if (n > 1 && a->e[i].degree != *degree)
                fail_msg("rank %d layer %d mixes TP degrees %d and %d", rank, layer, *degree, a->e[i].degree);
            *degree = a->e[i].degree;
        }
    return n;
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

/* Every copy is a fallback: a full reload reads one cloud copy and lists the other cloud copies of the
 * same shard after it; layer-bitmap lists the rank's own node's disk copy, then the cloud's */
static void test_every_copy_a_fallback(void **state) {
    (void)state;
    ah_holding h[8];
    int nh = 0;
    hold(&h[nh++], "n0", AH_TIER_CLOUD, 0, 3, 5);
    hold(&h[nh++], "n2", AH_TIER_CLOUD, 0, 2, 5);
    hold(&h[nh++], "n1", AH_TIER_CLOUD, 3, 6, 5);
    hold(&h[nh++], "n3", AH_TIER_CLOUD, 2, 6, 5);
    ah_plan p = load_plan("tiny-4node-2x2");
    ah_assignment a;
    char err[256];
    assert_int_equal(ah_recovery_assign(h, nh, &p, AH_RECOVERY_FULL_RELOAD, &a, err, sizeof err), 0);
    for (int i = 0; i < a.n; i++) { /* every layer has two cloud copies: one read, the other behind it */
        assert_int_equal(a.e[i].tier, AH_TIER_CLOUD);
        assert_int_equal(a.e[i].n_fallback, 1);
        assert_int_not_equal(a.e[i].fallback[0], a.e[i].holding);
        assert_int_equal(h[a.e[i].fallback[0]].tier, AH_TIER_CLOUD);
    }
    ah_assignment_free(&a);
    hold(&h[nh++], "n0", AH_TIER_MEMORY, 0, 3, 5);
    hold(&h[nh++], "n0", AH_TIER_DISK, 0, 3, 5);
    assert_int_equal(ah_recovery_assign(h, nh, &p, AH_RECOVERY_LAYER_BITMAP, &a, err, sizeof err), 0);
    const ah_assign_entry *e = entry(&a, 0, 0); /* n0's rank: own memory, then own disk, then both clouds */
    assert_int_equal(e->tier, AH_TIER_MEMORY);
    assert_int_equal(e->n_fallback, 3);
    assert_int_equal(h[e->fallback[0]].tier, AH_TIER_DISK);
    assert_int_equal(h[e->fallback[1]].tier, AH_TIER_CLOUD);
    assert_int_equal(h[e->fallback[2]].tier, AH_TIER_CLOUD);
    ah_assignment_free(&a);
    free_holds(h, nh);
    ah_plan_free(&p);
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
        assert_int_equal(a.e[i].n_fallback, 1);
        assert_int_equal(a.e[i].fallback[0], 4);
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
    assert_int_equal(entry(&a, 1, 4)->n_fallback, 0);       /* the cloud is at 5 */
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

/* A plan whose stages have different TP degrees (stage 0 at TP 2 on n0, ranks 0-1; stage 1 at TP 1
 * on n1, rank 2) recovering from checkpoints of other degrees: each rank gets its own degree's shard
 * when one exists, else every TP rank of one complete degree, never a mix. */
static void test_mixed_degrees(void **state) {
    (void)state;
    ah_plan p = load_plan("tiny-ckpt-2stage-tp2-tp1");
    ah_holding h[4];
    char err[256];
    ah_assignment a;
    unsigned mask;
    int deg;
    /* a uniform TP=2 run's memory tier on n0 (n1 wiped) */
    hold_deg(&h[0], "n0", AH_TIER_MEMORY, 0, 6, 5, 2);
    assert_int_equal(ah_recovery_assign(h, 1, &p, AH_RECOVERY_LAYER_BITMAP, &a, err, sizeof err), 0);
    assert_int_equal(a.step, 5);
    for (int l = 0; l < 3; l++) { /* stage 0 has degree 2: its own shard, own memory */
        assert_int_equal(entries_of(&a, 0, l, &mask, &deg), 1);
        assert_int_equal(mask, 1u);
        assert_int_equal(entries_of(&a, 1, l, &mask, &deg), 1);
        assert_int_equal(mask, 2u);
        assert_int_equal(deg, 2);
        assert_int_equal(entry(&a, 1, l)->tier, AH_TIER_MEMORY);
    }
    for (int l = 3; l < 6; l++) { /* stage 1 has degree 1: both TP=2 shards, over RMA from n0's rank 0 */
        assert_int_equal(entries_of(&a, 2, l, &mask, &deg), 2);
        assert_int_equal(mask, 3u);
        assert_int_equal(deg, 2);
        for (int i = 0; i < a.n; i++)
            if (a.e[i].rank == 2 && a.e[i].layer == l) {
                assert_int_equal(a.e[i].tier, AH_TIER_PEER);
                assert_int_equal(a.e[i].server, 0);
            }
    }
    assert_int_equal(a.n, 3 * 2 + 3 * 2);
    ah_assignment_free(&a);
    /* the cloud holds layer 4 at degree 1 too: rank 2 takes that one shard, not two to reshard */
    hold_deg(&h[1], "n1", AH_TIER_CLOUD, 4, 5, 5, 1);
    assert_int_equal(ah_recovery_assign(h, 2, &p, AH_RECOVERY_LAYER_BITMAP, &a, err, sizeof err), 0);
    assert_int_equal(entries_of(&a, 2, 4, &mask, &deg), 1);
    assert_int_equal(deg, 1);
    assert_int_equal(entry(&a, 2, 4)->tier, AH_TIER_CLOUD);
    assert_int_equal(entries_of(&a, 2, 3, &mask, &deg), 2);
    ah_assignment_free(&a);
    free_holds(h, 2);
    /* the same (layer, TP rank) keys at two degrees: n0's memory has TP rank 0 of 2 of layer 3 only,
     * the cloud all four TP ranks of degree 4 of every layer; layer 3 comes from degree 4 alone */
    hold_deg(&h[0], "n0", AH_TIER_MEMORY, 0, 6, 5, 2);
    ah_manifest_entry *e = (ah_manifest_entry *)ah_manifest_find_shard(&h[0].m, 3, 1, 2, 5);
    *e = h[0].m.e[--h[0].m.n]; /* drop (3, 1 of 2) */
    hold_deg(&h[1], "c", AH_TIER_CLOUD, 0, 6, 5, 4);
    assert_int_equal(ah_recovery_assign(h, 2, &p, AH_RECOVERY_LAYER_BITMAP, &a, err, sizeof err), 0);
    assert_int_equal(entries_of(&a, 2, 3, &mask, &deg), 4);
    assert_int_equal(mask, 15u);
    assert_int_equal(deg, 4);
    assert_int_equal(entries_of(&a, 2, 4, &mask, &deg), 2); /* n0's complete degree 2: nearer than the cloud */
    assert_int_equal(deg, 2);
    /* stage 0 (degree 2) finds its own shards of layers 0-2 in its memory tier */
    assert_int_equal(entries_of(&a, 1, 2, &mask, &deg), 1);
    assert_int_equal(entry(&a, 1, 2)->tier, AH_TIER_MEMORY);
    ah_assignment_free(&a);
    /* full-reload: the cloud's degree 4, resharded by all three ranks */
    assert_int_equal(ah_recovery_assign(h, 2, &p, AH_RECOVERY_FULL_RELOAD, &a, err, sizeof err), 0);
    assert_int_equal(entries_of(&a, 0, 0, &mask, &deg), 4);
    assert_int_equal(deg, 4);
    assert_int_equal(a.n, 6 * 4 + 3 * 4);
    ah_assignment_free(&a);
    free_holds(h, 2);
    /* no complete degree of layer 3 at step 7 (TP rank 0 of 2 only): the older complete step 5 */
    hold_deg(&h[0], "n0", AH_TIER_MEMORY, 0, 6, 7, 2);
    e = (ah_manifest_entry *)ah_manifest_find_shard(&h[0].m, 3, 1, 2, 7);
    *e = h[0].m.e[--h[0].m.n];
    hold_deg(&h[1], "c", AH_TIER_CLOUD, 0, 6, 5, 2);
    assert_int_equal(ah_recovery_assign(h, 2, &p, AH_RECOVERY_LAYER_BITMAP, &a, err, sizeof err), 0);
    assert_int_equal(a.step, 5);
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
    /* times strtod reads but a trace cannot mean (inf, past 10 years, hex), a 4th field, and a trace that
     * contradicts itself (a node added twice, a node removed that it does not have) name their line */
    static const char *const bad[][2] = {
        {"0,add,a\n1e400,remove,a\n", ":2: time '1e400'"},
        {"0,add,a\n1e18,remove,a\n", ":2: time '1e18'"},
        {"0,add,a\n0x10,remove,a\n", ":2: time '0x10'"},
        {"0,add,a,extra\n", ":1: expected <time_ms>,<add|remove>,<node> (3 fields)"},
        {"0,add,a\n# c\n0,add,a\n", ":3: add of node 'a', which line 1 added"},
        {"0,add,a\n1000,remove,b\n", ":2: remove of node 'b', which is not available"},
        {"0,add,a\n1,remove,a\n2,remove,a\n", ":3: remove of node 'a', which is not available"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        write_tmp(bad[i][0], p);
        assert_int_equal(ah_spot_trace_load(p, &e, &n, err, sizeof err), -1);
        assert_contains(err, bad[i][1]);
        assert_null(e);
        unlink(p);
    }
    write_tmp("0,add,a\n1,remove,a\n2.5,add,a\n", p); /* a node back after its removal */
    assert_int_equal(ah_spot_trace_load(p, &e, &n, err, sizeof err), 0);
    assert_int_equal(n, 3);
    assert_double_equal(e[2].t_s, 0.0025, 1e-15);
    free(e);
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
        cmocka_unit_test(test_every_copy_a_fallback),
        cmocka_unit_test(test_newest_complete_step),
        cmocka_unit_test(test_server_for_unused_node),
        cmocka_unit_test(test_mixed_degrees),
        cmocka_unit_test(test_spot_trace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
