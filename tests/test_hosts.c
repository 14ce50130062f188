/* Unit tests for hosts: the inventory's and the plan's "host", hostfiles, Slurm
 * node lists, host matching, plan nodes on hosts and the rankfile. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "autohet/cluster.h"
#include "autohet/hosts.h"
#include "autohet/plan.h"
#include "autohet/schedule.h"
#include "test_util.h"

#define TWO_HOST_PLAN AH_FIXTURES "/../plans/tiny-2host.json"

static int inventory(const char *text, ah_cluster *c, char *err, size_t n) {
    char path[64];
    write_tmp(text, path);
    int rc = ah_cluster_load_json(path, ah_device_catalog_builtin(), c, err, n);
    unlink(path);
    return rc;
}

static void read_two_host_plan(ah_plan *p) {
    char err[512];
    if (ah_plan_read_json(TWO_HOST_PLAN, ah_device_catalog_builtin(), p, err, sizeof err) != 0)
        fail_msg("%s", err);
}

/* --------------------------------------------------------- inventories */

static void test_inventory_hosts(void **state) {
    (void)state;
    ah_cluster c;
    char err[512];
    assert_int_equal(inventory("{\"nodes\": [{\"name\": \"a\", \"gpu\": \"H20\", \"gpus\": 8, \"host\": \"gpu-a01.site\"},"
                               "{\"gpu\": \"H20\", \"gpus\": 8, \"count\": 2}]}",
                               &c, err, sizeof err),
                     0);
    assert_int_equal(c.n_nodes, 3);
    assert_string_equal(c.nodes[0].host, "gpu-a01.site");
    assert_string_equal(c.nodes[1].host, "");
    assert_true(ah_cluster_has_hosts(&c));
    ah_cluster_free(&c);
    assert_int_equal(inventory("{\"nodes\": [{\"gpu\": \"H20\", \"gpus\": 8}]}", &c, err, sizeof err), 0);
    assert_false(ah_cluster_has_hosts(&c));
    ah_cluster_free(&c);

    static const struct {
        const char *text, *want;
    } bad[] = {
        {"{\"nodes\": [{\"gpu\": \"H20\", \"gpus\": 8, \"host\": 3}]}", "nodes[0].host: must be a string"},
        {"{\"nodes\": [{\"gpu\": \"H20\", \"gpus\": 8, \"host\": \"\"}]}", "nodes[0].host: must not be empty"},
        {"{\"nodes\": [{\"gpu\": \"H20\", \"gpus\": 8, \"host\": \"a b\"}]}", "nodes[0].host: must be a hostname"},
        {"{\"nodes\": [{\"gpu\": \"H20\", \"gpus\": 8, \"host\": \"h\", \"count\": 2}]}",
         "nodes[0].host: a host is one machine"},
        {"{\"nodes\": [{\"gpu\": \"H20\", \"gpus\": 8, \"host\": \"h\"}, {\"gpu\": \"H20\", \"gpus\": 8, \"host\": \"H\"}]}",
         "nodes[1].host: host 'H' is already node 'H20-0'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (inventory(bad[i].text, &c, err, sizeof err) != -1)
            fail_msg("case %zu accepted", i);
        assert_contains(err, bad[i].want);
    }
}

/* ---------------------------------------------------------------- plans */

static void test_plan_hosts_round_trip(void **state) {
    (void)state;
    ah_plan p, q;
    char err[512], path[64];
    read_two_host_plan(&p);
    assert_false(ah_cluster_has_hosts(&p.cluster));
    /* a plan without hosts is written without the field, as before */
    cJSON *doc = ah_plan_to_json(&p);
    char *text = cJSON_PrintUnformatted(doc);
    assert_null(strstr(text, "\"host\""));
    cJSON_free(text);
    cJSON_Delete(doc);

    snprintf(p.cluster.nodes[1].host, sizeof p.cluster.nodes[1].host, "gpu-b02");
    write_tmp("", path);
    assert_int_equal(ah_plan_write_json(&p, NULL, path, err, sizeof err), 0);
    assert_int_equal(ah_plan_read_json(path, ah_device_catalog_builtin(), &q, err, sizeof err), 0);
    assert_string_equal(q.cluster.nodes[0].host, "");
    assert_string_equal(q.cluster.nodes[1].host, "gpu-b02");
    ah_plan_free(&q);

    /* the reader's checks of the field */
    snprintf(p.cluster.nodes[0].host, sizeof p.cluster.nodes[0].host, "GPU-b02");
    assert_int_equal(ah_plan_write_json(&p, NULL, path, err, sizeof err), 0);
    assert_int_equal(ah_plan_read_json(path, ah_device_catalog_builtin(), &q, err, sizeof err), -1);
    assert_contains(err, "cluster.nodes[1].host: host \"gpu-b02\" is also cluster.nodes[0]");
    snprintf(p.cluster.nodes[0].host, sizeof p.cluster.nodes[0].host, "bad/name");
    assert_int_equal(ah_plan_write_json(&p, NULL, path, err, sizeof err), 0);
    assert_int_equal(ah_plan_read_json(path, ah_device_catalog_builtin(), &q, err, sizeof err), -1);
    assert_contains(err, "cluster.nodes[0].host: must be a hostname");
    unlink(path);
    ah_plan_free(&p);
}

/* ------------------------------------------------------------ hostfiles */

static void test_hostfile(void **state) {
    (void)state;
    ah_host_list l;
    char err[512];
    assert_int_equal(ah_hostfile_parse("# the cluster\n\nnode1 slots=4\n  node2   slots=2 max_slots=8 # two\n"
                                       "node3\nnode4 max-slots=3\r\nnode5 count=6",
                                       "H", &l, err, sizeof err),
                     0);
    assert_int_equal(l.n, 5);
    assert_string_equal(l.hosts[0].name, "node1");
    assert_int_equal(l.hosts[0].slots, 4);
    assert_int_equal(l.hosts[0].line, 3);
    assert_string_equal(l.hosts[1].name, "node2");
    assert_int_equal(l.hosts[1].slots, 2);
    assert_int_equal(l.hosts[1].line, 4);
    assert_int_equal(l.hosts[2].slots, 0); /* not said */
    assert_int_equal(l.hosts[3].slots, 3); /* max_slots alone */
    assert_string_equal(l.hosts[3].name, "node4");
    assert_int_equal(l.hosts[4].slots, 6);
    ah_host_list_free(&l);

    static const struct {
        const char *text, *want;
    } bad[] = {
        {"a slots=2\nb slots=x\n", "H:2: 'slots=x': slots must be an integer between 1 and 1000000"},
        {"a slots=0\n", "H:1: 'slots=0': slots must be an integer"},
        {"a slots=\n", "H:1: 'slots=': slots must be an integer"},
        {"a\n\n# c\na:2\n", "H:4: host 'a:2': must be a hostname"},
        {"a cpus=3\n", "H:1: 'cpus=3': unknown attribute 'cpus'"},
        {"a 4\n", "H:1: '4': expected KEY=VALUE"},
        {"a slots=4 max_slots=2\n", "H:1: host 'a': slots=4 is more than max_slots=2"},
        {"a\nb\nA slots=2\n", "H:3: host 'A' is already on line 1"},
        {"# nothing\n\n", "H: no hosts"},
        {"", "H: no hosts"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (ah_hostfile_parse(bad[i].text, "H", &l, err, sizeof err) != -1)
            fail_msg("case %zu accepted", i);
        assert_contains(err, bad[i].want);
        assert_null(l.hosts);
    }
    assert_int_equal(ah_hostfile_load("/nonexistent/hosts", &l, err, sizeof err), -1);
    assert_contains(err, "/nonexistent/hosts: cannot open file");
}

/* ------------------------------------------------------ Slurm node lists */

static void expect_hosts(const char *list, const char *const *want, int n) {
    ah_host_list l;
    char err[512];
    if (ah_slurm_nodelist_parse(list, NULL, &l, err, sizeof err) != 0)
        fail_msg("'%s': %s", list, err);
    if (l.n != n)
        fail_msg("'%s': %d hosts, want %d", list, l.n, n);
    for (int i = 0; i < n; i++) {
        assert_string_equal(l.hosts[i].name, want[i]);
        assert_int_equal(l.hosts[i].slots, 0);
    }
    ah_host_list_free(&l);
}

static void test_slurm_nodelist(void **state) {
    (void)state;
    expect_hosts("node1", (const char *const[]){"node1"}, 1);
    expect_hosts("node[01-04,07]", (const char *const[]){"node01", "node02", "node03", "node04", "node07"}, 5);
    expect_hosts("a[8-10],login", (const char *const[]){"a8", "a9", "a10", "login"}, 4);
    expect_hosts("a[098-101]", (const char *const[]){"a098", "a099", "a100", "a101"}, 4);
    expect_hosts("r[1-2]-n[1,3]", (const char *const[]){"r1-n1", "r1-n3", "r2-n1", "r2-n3"}, 4);
    expect_hosts("gpu-[3]x,cpu[1-2].site",
                 (const char *const[]){"gpu-3x", "cpu1.site", "cpu2.site"}, 3);
    ah_host_list big;
    char err[512];
    assert_int_equal(ah_slurm_nodelist_parse("n[0-999]", NULL, &big, err, sizeof err), 0);
    assert_int_equal(big.n, 1000);
    assert_string_equal(big.hosts[999].name, "n999");
    ah_host_list_free(&big);

    static const struct {
        const char *list, *want;
    } bad[] = {
        {"", "SLURM_JOB_NODELIST '': empty host name at character 1"},
        {"a,,b", "empty host name at character 3"},
        {"a,", "empty host name at character 3"},
        {"node[01-", "'[' without ']' at character 5"},
        {"node[01-]", "expected a number after '-' at character 9"},
        {"node[1", "'[' without ']' at character 5"},
        {"node]1", "']' without '[' at character 5"},
        {"n[1-[2]]", "nested '[' at character 5"},
        {"n[5-3]", "range 5-3 goes down at character 3"},
        {"n[x]", "expected a number in '[...]' at character 3"},
        {"n[1;2]", "unexpected ';' in '[...]' at character 4"},
        {"n[1-3],n2", "host 'n2' is listed twice (hosts 2 and 4)"},
        {"n[0-65535],m", "more than 65536 hosts"},
        {"n[0-70000]", "range of more than 65536 hosts"},
        {"a b", "host 'a b': must be a hostname"},
        {"n[0000000001-2]", "a number of more than 9 digits at character 3"},
        {"n[1-44444444444444444444444444]", "a number of more than 9 digits at character 5"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ah_host_list l;
        if (ah_slurm_nodelist_parse(bad[i].list, NULL, &l, err, sizeof err) != -1)
            fail_msg("case %zu ('%s') accepted", i, bad[i].list);
        assert_contains(err, bad[i].want);
        assert_null(l.hosts);
    }
}

/* -------------------------------------------------------- host matching */

static void test_host_matches(void **state) {
    (void)state;
    assert_true(ah_host_matches("gpu01", "gpu01"));
    assert_true(ah_host_matches("GPU01", "gpu01"));
    assert_true(ah_host_matches("gpu01", "gpu01.cluster.site"));
    assert_true(ah_host_matches("gpu01.cluster.site", "gpu01"));
    assert_false(ah_host_matches("gpu01.a.site", "gpu01.b.site"));
    assert_false(ah_host_matches("gpu01", "gpu010"));
    assert_false(ah_host_matches("gpu0", "gpu01.site"));
    assert_false(ah_host_matches("10.0.0.1", "10"));
    assert_true(ah_host_matches("10.0.0.1", "10.0.0.1"));
}

/* ------------------------------------------------- plan nodes on hosts */

static void test_rank_places_follow_the_slot_map(void **state) {
    (void)state;
    ah_plan p;
    read_two_host_plan(&p);
    int n = ah_plan_slots(&p);
    assert_int_equal(n, 4);
    ah_rank_place pl[4];
    ah_plan_rank_places(&p, pl);
    for (int r = 0; r < n; r++) {
        assert_int_equal(pl[r].rank, r);
        assert_int_equal(ah_slot_rank(&p, pl[r].replica, pl[r].stage, pl[r].tp_rank), r);
        const ah_stage *s = &p.replicas[pl[r].replica].stages[pl[r].stage];
        assert_int_equal(pl[r].node, s->node);
        assert_int_equal(pl[r].gpu, s->gpu_first + pl[r].tp_rank);
    }
    /* replica 0: n0 GPU 0 -> n1 GPUs 0-1 (TP 2); replica 1: n0 GPU 1 */
    assert_int_equal(pl[0].node, 0);
    assert_int_equal(pl[1].node, 1);
    assert_int_equal(pl[2].gpu, 1);
    assert_int_equal(pl[3].node, 0);
    assert_int_equal(pl[3].gpu, 1);
    assert_int_equal(ah_plan_node_ranks(&p, 0), 2);
    assert_int_equal(ah_plan_node_ranks(&p, 1), 2);
    ah_plan_free(&p);
}

static int apply(const char *hostfile, ah_plan *p, char *err, size_t n) {
    ah_host_list l;
    if (ah_hostfile_parse(hostfile, "hosts.txt", &l, err, n) != 0)
        fail_msg("%s", err);
    int rc = ah_hosts_apply(p, &l, err, n);
    ah_host_list_free(&l);
    return rc;
}

static void test_hosts_apply_and_rankfile(void **state) {
    (void)state;
    ah_plan p;
    char err[512], path[64];
    read_two_host_plan(&p);
    write_tmp("", path);
    assert_int_equal(ah_rankfile_write(&p, 1, path, err, sizeof err), -1);
    assert_contains(err, "node 'n0' (cluster.nodes[0]) names no host");

    assert_int_equal(apply("hostA slots=2\n", &p, err, sizeof err), -1);
    assert_contains(err, "hosts.txt: 1 host for the plan's 2 nodes: node 'n1' (cluster.nodes[1]) runs 2 ranks");
    assert_int_equal(apply("hostA slots=2\nhostB slots=1\n", &p, err, sizeof err), -1);
    assert_contains(err, "hosts.txt:2: slots=1: host 'hostB' takes 1 rank, the plan puts 2 on node 'n1'");

    assert_int_equal(apply("hostA slots=2\n# b\nhostB\nhostC\n", &p, err, sizeof err), 0);
    assert_string_equal(p.cluster.nodes[0].host, "hostA");
    assert_string_equal(p.cluster.nodes[1].host, "hostB");
    assert_int_equal(ah_rankfile_write(&p, 1, path, err, sizeof err), 0);
    char text[512] = "";
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t got = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[got] = '\0';
    assert_string_equal(text, "rank 0=hostA slot=0\nrank 1=hostB slot=0\nrank 2=hostB slot=1\nrank 3=hostA slot=1\n");

    /* a node that names its host keeps it; a list that disagrees is refused */
    assert_int_equal(apply("hosta.site\nhostB\n", &p, err, sizeof err), 0);
    assert_int_equal(apply("hostB\nhostA\n", &p, err, sizeof err), -1);
    assert_contains(err, "hosts.txt:1: host 'hostB' for node 'n0', which the plan puts on host 'hostA'");
    unlink(path);
    ah_plan_free(&p);

    /* a node the plan does not use needs no host */
    read_two_host_plan(&p);
    p.replicas[0].stages[1].node = 0; /* only the structure matters here */
    assert_int_equal(ah_plan_node_ranks(&p, 1), 0);
    assert_int_equal(apply("hostA slots=4\n", &p, err, sizeof err), 0);
    assert_string_equal(p.cluster.nodes[1].host, "");
    ah_plan_free(&p);
}

static void read_text(const char *path, char *text, size_t n) {
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t got = fread(text, 1, n - 1, f);
    fclose(f);
    text[got] = '\0';
}

/* autohet run: every inventory node gets a host; the rankfile lists the
 * recovery server ranks after the plan's, each on its host's first slot */
static void test_cluster_hosts_and_server_ranks(void **state) {
    (void)state;
    ah_plan p;
    char err[512], path[64], text[512];
    read_two_host_plan(&p);
    ah_host_list l;
    assert_int_equal(ah_hostfile_parse("hostA\n", "hosts.txt", &l, err, sizeof err), 0);
    assert_int_equal(ah_cluster_apply_hosts(&p.cluster, &l, err, sizeof err), -1);
    assert_contains(err, "hosts.txt: 1 host for the inventory's 2 nodes: node 'n1' (cluster.nodes[1]) has no host");
    ah_host_list_free(&l);
    assert_int_equal(ah_hostfile_parse("hostA\nhostB\nhostC\n", "hosts.txt", &l, err, sizeof err), 0);
    assert_int_equal(ah_cluster_apply_hosts(&p.cluster, &l, err, sizeof err), 0);
    ah_host_list_free(&l);
    assert_string_equal(p.cluster.nodes[0].host, "hostA");
    assert_string_equal(p.cluster.nodes[1].host, "hostB");
    assert_int_equal(ah_hostfile_parse("hostB\nhostA\n", "hosts.txt", &l, err, sizeof err), 0);
    assert_int_equal(ah_cluster_apply_hosts(&p.cluster, &l, err, sizeof err), -1);
    assert_contains(err, "hosts.txt:1: host 'hostB' for node 'n0', which the plan puts on host 'hostA'");
    ah_host_list_free(&l);

    const char servers[2][64] = {"hostC", "hostD"};
    write_tmp("", path);
    assert_int_equal(ah_rankfile_write_servers(&p, 1, servers, 2, path, err, sizeof err), 0);
    read_text(path, text, sizeof text);
    assert_string_equal(text, "rank 0=hostA slot=0\nrank 1=hostB slot=0\nrank 2=hostB slot=1\nrank 3=hostA slot=1\n"
                              "rank 4=hostC slot=0\nrank 5=hostD slot=0\n");
    assert_int_equal(ah_rankfile_write_servers(&p, 1, NULL, 0, path, err, sizeof err), 0);
    read_text(path, text, sizeof text);
    assert_string_equal(text, "rank 0=hostA slot=0\nrank 1=hostB slot=0\nrank 2=hostB slot=1\nrank 3=hostA slot=1\n");
    /* cores a rank: the rank of GPU g binds to cores g*N .. g*N+N-1, a server to the first N */
    assert_int_equal(ah_rankfile_write_servers(&p, 16, servers, 1, path, err, sizeof err), 0);
    read_text(path, text, sizeof text);
    assert_string_equal(text, "rank 0=hostA slot=0-15\nrank 1=hostB slot=0-15\nrank 2=hostB slot=16-31\n"
                              "rank 3=hostA slot=16-31\nrank 4=hostC slot=0-15\n");
    unlink(path);
    ah_plan_free(&p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_inventory_hosts),
        cmocka_unit_test(test_plan_hosts_round_trip),
        cmocka_unit_test(test_hostfile),
        cmocka_unit_test(test_slurm_nodelist),
        cmocka_unit_test(test_host_matches),
        cmocka_unit_test(test_rank_places_follow_the_slot_map),
        cmocka_unit_test(test_hosts_apply_and_rankfile),
        cmocka_unit_test(test_cluster_hosts_and_server_ranks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
