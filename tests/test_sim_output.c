/* Simulator outputs: Chrome trace (validated structurally), SVG Gantt chart,
 * JSON summary, text report and the name functions. Most tests use a
 * hand-made ah_sim_result so every expected value is known; one runs the
 * real simulator on a small searched plan and validates its trace. */
#include <dirent.h>
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

#include "autohet/sim.h"
#include "autohet/trace.h"

/* ------------------------------------------------------------------ helpers */

static char tmpdir[64];

static int setup_dir(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ah_sim_out_XXXXXX");
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

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s", path);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    assert_true(n >= 0);
    rewind(f);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static cJSON *parse_file(const char *path) {
    char *text = slurp(path);
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root)
        fail_msg("%s: not valid JSON", path);
    return root;
}

static int count_substr(const char *hay, const char *needle) {
    int n = 0;
    size_t l = strlen(needle);
    for (const char *p = strstr(hay, needle); p; p = strstr(p + l, needle))
        n++;
    return n;
}

static int file_exists(const char *path) {
    return access(path, F_OK) == 0;
}

static double num_field(const cJSON *o, const char *key) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(it))
        fail_msg("field \"%s\" missing or not a number", key);
    return it->valuedouble;
}

static const char *str_field(const cJSON *o, const char *key) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(it))
        fail_msg("field \"%s\" missing or not a string", key);
    return it->valuestring;
}

/* ------------------------------------------------------- trace validator */

typedef struct {
    double pid, tid, ts, dur;
    int order;
} x_ev;

static int cmp_x(const void *a, const void *b) {
    const x_ev *x = a, *y = b;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    if (x->tid != y->tid)
        return x->tid < y->tid ? -1 : 1;
    return x->order - y->order;
}

typedef struct {
    double pid, tid; /* tid < 0: a process name */
} name_key;

static int has_name(const name_key *k, int n, double pid, double tid) {
    for (int i = 0; i < n; i++)
        if (k[i].pid == pid && k[i].tid == tid)
            return 1;
    return 0;
}

/* Structural check of a Chrome trace-event file (JSON object format):
 * a top-level "traceEvents" array; every event has ph, pid, tid, name;
 * "X" events have numeric ts >= 0 and dur >= 0 and, per (pid, tid), appear
 * sorted by ts and properly nested or disjoint; every pid used has a
 * process_name and every (pid, tid) of an X or C event a thread_name;
 * counter ("C") events have numeric ts >= 0 and only numeric args.
 * Returns the number of X events. Usable on any trace (the real simulator's
 * output is checked with it below). */
static int validate_trace(const char *path) {
    cJSON *root = parse_file(path);
    assert_true(cJSON_IsObject(root));
    const cJSON *evs = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
    if (!cJSON_IsArray(evs))
        fail_msg("%s: no traceEvents array", path);
    int n = cJSON_GetArraySize(evs);
    x_ev *xs = calloc((size_t)n + 1, sizeof *xs);
    name_key *names = calloc((size_t)n + 1, sizeof *names);
    name_key *used = calloc((size_t)n + 1, sizeof *used);
    assert_non_null(xs);
    assert_non_null(names);
    assert_non_null(used);
    int nx = 0, nn = 0, nu = 0, i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, evs) {
        if (!cJSON_IsObject(e))
            fail_msg("%s: event %d is not an object", path, i);
        const cJSON *ph = cJSON_GetObjectItemCaseSensitive(e, "ph");
        const cJSON *pid = cJSON_GetObjectItemCaseSensitive(e, "pid");
        const cJSON *tid = cJSON_GetObjectItemCaseSensitive(e, "tid");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
        if (!cJSON_IsString(ph) || !cJSON_IsNumber(pid) || !cJSON_IsNumber(tid) || !cJSON_IsString(name))
            fail_msg("%s: event %d lacks ph/pid/tid/name", path, i);
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(e, "args");
        const cJSON *ts = cJSON_GetObjectItemCaseSensitive(e, "ts");
        const char *p = ph->valuestring;
        if (strcmp(p, "M") == 0) {
            if (strcmp(name->valuestring, "process_name") == 0 ||
                strcmp(name->valuestring, "thread_name") == 0) {
                const cJSON *an = cJSON_GetObjectItemCaseSensitive(args, "name");
                if (!cJSON_IsString(an) || !an->valuestring[0])
                    fail_msg("%s: event %d: %s without args.name", path, i, name->valuestring);
                names[nn].pid = pid->valuedouble;
                names[nn].tid = strcmp(name->valuestring, "process_name") == 0 ? -1 : tid->valuedouble;
                nn++;
            }
        } else if (strcmp(p, "X") == 0) {
            const cJSON *dur = cJSON_GetObjectItemCaseSensitive(e, "dur");
            if (!cJSON_IsNumber(ts) || !cJSON_IsNumber(dur) || !(ts->valuedouble >= 0) ||
                !(dur->valuedouble >= 0))
                fail_msg("%s: X event %d (%s): bad ts/dur", path, i, name->valuestring);
            xs[nx++] = (x_ev){pid->valuedouble, tid->valuedouble, ts->valuedouble, dur->valuedouble, i};
            used[nu++] = (name_key){pid->valuedouble, tid->valuedouble};
        } else if (strcmp(p, "C") == 0) {
            if (!cJSON_IsNumber(ts) || !(ts->valuedouble >= 0))
                fail_msg("%s: counter %d (%s): bad ts", path, i, name->valuestring);
            if (!cJSON_IsObject(args) || !args->child)
                fail_msg("%s: counter %d (%s): no args", path, i, name->valuestring);
            const cJSON *a;
            cJSON_ArrayForEach(a, args) {
                if (!cJSON_IsNumber(a))
                    fail_msg("%s: counter %d (%s): arg %s is not a number", path, i, name->valuestring,
                             a->string);
            }
            used[nu++] = (name_key){pid->valuedouble, tid->valuedouble};
        } else if (strcmp(p, "i") == 0 || strcmp(p, "I") == 0) {
            if (!cJSON_IsNumber(ts) || !(ts->valuedouble >= 0))
                fail_msg("%s: instant event %d (%s): bad ts", path, i, name->valuestring);
        } else if (strcmp(p, "s") == 0 || strcmp(p, "f") == 0) {
            if (!cJSON_IsNumber(ts) || !(ts->valuedouble >= 0) ||
                !cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(e, "id")))
                fail_msg("%s: flow event %d (%s): bad ts or id", path, i, name->valuestring);
            used[nu++] = (name_key){pid->valuedouble, tid->valuedouble};
        } else {
            fail_msg("%s: event %d: unexpected phase \"%s\"", path, i, p);
        }
        i++;
    }
    for (int k = 0; k < nu; k++) {
        if (!has_name(names, nn, used[k].pid, -1))
            fail_msg("%s: pid %g has no process_name", path, used[k].pid);
        if (!has_name(names, nn, used[k].pid, used[k].tid))
            fail_msg("%s: pid %g tid %g has no thread_name", path, used[k].pid, used[k].tid);
    }
    /* per thread: sorted by ts, nested or disjoint (1 ns slack for rounding) */
    qsort(xs, (size_t)nx, sizeof *xs, cmp_x);
    const double eps = 1e-3;
    double *stack = calloc((size_t)nx + 1, sizeof *stack);
    assert_non_null(stack);
    int depth = 0;
    for (int k = 0; k < nx; k++) {
        int new_thread = k == 0 || xs[k].pid != xs[k - 1].pid || xs[k].tid != xs[k - 1].tid;
        if (new_thread) {
            depth = 0;
        } else if (xs[k].ts < xs[k - 1].ts) {
            fail_msg("%s: pid %g tid %g: event %d (ts %.3f) before event %d (ts %.3f)", path, xs[k].pid,
                     xs[k].tid, xs[k].order, xs[k].ts, xs[k - 1].order, xs[k - 1].ts);
        }
        double end = xs[k].ts + xs[k].dur;
        while (depth > 0 && stack[depth - 1] <= xs[k].ts + eps)
            depth--;
        if (depth > 0 && end > stack[depth - 1] + eps)
            fail_msg("%s: pid %g tid %g: event %d [%.3f, %.3f] overlaps its predecessor ending at %.3f", path,
                     xs[k].pid, xs[k].tid, xs[k].order, xs[k].ts, end, stack[depth - 1]);
        stack[depth++] = end;
    }
    free(stack);
    free(xs);
    free(names);
    free(used);
    cJSON_Delete(root);
    return nx;
}

/* ------------------------------------------------------------ fixtures */

/* gpt3-1.3b (26 layers) on 1x4xA100-40G + 1x4xH800, TP 2, micro-batch 1,
 * global batch 4: replica 0 = one stage on the A100 node (GPUs 0-1),
 * replica 1 = two stages on the H800 node (GPUs 0-1 and 2-3). */
static void build_plan(ah_plan *p, const char *node0_name) {
    char err[256] = "";
    memset(p, 0, sizeof *p);
    p->version = AH_PLAN_FORMAT_VERSION;
    snprintf(p->strategy, sizeof p->strategy, "autohet");
    assert_int_equal(ah_model_preset("gpt3-1.3b", &p->model), 0);
    assert_int_equal(ah_model_num_layers(&p->model), 26);
    p->train.seq = 2048;
    p->train.recompute = AH_RECOMPUTE_SELECTIVE;
    if (ah_cluster_parse_shorthand("1x4xA100-40G,1x4xH800", ah_device_catalog_builtin(), &p->cluster, err,
                                   sizeof err) != 0)
        fail_msg("ah_cluster_parse_shorthand: %s", err);
    assert_int_equal(p->cluster.n_nodes, 2);
    if (node0_name)
        snprintf(p->cluster.nodes[0].name, sizeof p->cluster.nodes[0].name, "%s", node0_name);
    p->micro_batch = 1;
    p->global_batch = 4;
    p->n_replicas = 2;
    p->replicas = calloc(2, sizeof *p->replicas);
    assert_non_null(p->replicas);
    p->replicas[0].n_stages = 1;
    p->replicas[0].micro_batches = 2;
    p->replicas[0].stages = calloc(1, sizeof(ah_stage));
    assert_non_null(p->replicas[0].stages);
    p->replicas[0].stages[0] = (ah_stage){.node = 0, .gpu_first = 0, .layer_first = 0, .layer_last = 26};
    p->replicas[1].n_stages = 2;
    p->replicas[1].micro_batches = 2;
    p->replicas[1].stages = calloc(2, sizeof(ah_stage));
    assert_non_null(p->replicas[1].stages);
    p->replicas[1].stages[0] = (ah_stage){.node = 1, .gpu_first = 0, .layer_first = 0, .layer_last = 13};
    p->replicas[1].stages[1] = (ah_stage){.node = 1, .gpu_first = 2, .layer_first = 13, .layer_last = 26};
    ah_plan_set_tp(p, 2);
}

#define MS 1e-3

static ah_sim_event ev(ah_op_kind k, ah_stream s, int rep, int stage, int mb, int lf, int ll, double t0,
                       double t1) {
    return (ah_sim_event){.kind = k,
                          .stream = s,
                          .replica = rep,
                          .stage = stage,
                          .micro_batch = mb,
                          .layer_first = lf,
                          .layer_last = ll,
                          .peer_replica = -1,
                          .peer_stage = -1,
                          .bucket = -1,
                          .start_s = t0,
                          .end_s = t1,
                          .bytes = 0};
}

static ah_sim_event xfer(ah_op_kind k, int rep, int stage, int peer_stage, int mb, double t0, double t1) {
    ah_sim_event e = ev(k, AH_STREAM_P2P, rep, stage, mb, -1, -1, t0, t1);
    e.layer_first = e.layer_last = 0;
    e.peer_replica = rep;
    e.peer_stage = peer_stage;
    e.bytes = 4194304;
    return e;
}

static ah_sim_event dp(int rep, int stage, int bucket, int lf, int ll, double t0, double t1) {
    ah_sim_event e = ev(AH_OP_DP_ALLREDUCE, AH_STREAM_DP, rep, stage, -1, lf, ll, t0, t1);
    e.bucket = bucket;
    e.bytes = 1.25e8;
    return e;
}

/* The events, deliberately not in time or track order. Times in ms:
 *   r0 s0 compute: F0 [0,1.2345674) F1 [1.2345674,2.5) B0 [2.5,4.5) B1 [4.5,6.5) opt [7,7.5);
 *         tp: TP-AR mb0 [0.9,1.1)
 *   r1 s0 compute: F0 [0,0.5) F1 [0.5,1) B0 [2,3) B1 [3,4) opt [6.5,7)
 *   r1 s1 compute: F0 [0.6,1.1) B0 [1.1,1.9) F1 [1.9,2.4) B1 [2.4,3) opt [5,5.5)
 *   transfers between r1 s0 and r1 s1, each on both p2p tracks: act0 [0.5,0.6),
 *         act1 [1,1.95), grad0 [1.9,2), grad1 [3,3.1); act1 and grad0 overlap
 *         without nesting, so the trace must put them on two threads
 *   DP bucket 0 L[13,26) on r0 s0 + r1 s1 [4.5,5); bucket 1 L[0,13) on r0 s0 + r1 s0 [5,6.5)
 *   memory: 5 points per stage at 4 instants, not in time order */
static void build_result(ah_sim_result *r) {
    memset(r, 0, sizeof *r);
    r->schedule = AH_SCHED_1F1B;
    r->iteration_time_s = 7.5 * MS;
    r->closed_form_s = 7.2 * MS;
    r->n_replicas = 2;
    r->replica_flush_s = malloc(2 * sizeof(double));
    r->replica_finish_s = malloc(2 * sizeof(double));
    assert_non_null(r->replica_flush_s);
    assert_non_null(r->replica_finish_s);
    r->replica_flush_s[0] = 6.5 * MS;
    r->replica_flush_s[1] = 4.0 * MS;
    r->replica_finish_s[0] = 7.5 * MS;
    r->replica_finish_s[1] = 7.0 * MS;
    r->n_stages = 3;
    r->stages = calloc(3, sizeof *r->stages);
    assert_non_null(r->stages);
    static const int where[3][4] = {{0, 0, 0, 0}, {1, 0, 1, 0}, {1, 1, 1, 2}}; /* replica, stage, node, gpu */
    for (int i = 0; i < 3; i++) {
        ah_sim_stage *s = &r->stages[i];
        s->replica = where[i][0];
        s->stage = where[i][1];
        s->node = where[i][2];
        s->gpu_first = where[i][3];
        s->tp = 2;
        s->compute_s = (5.0 + i) * MS;
        s->exposed_comm_s = (1.0 + 0.25 * i) * MS;
        s->idle_s = r->iteration_time_s - s->compute_s - s->exposed_comm_s;
        s->capacity_bytes = (i == 0 ? 38.0 : 78.0) * 1073741824.0;
        s->static_bytes = 6.0e9 / (i == 0 ? 1 : 2);
        s->peak_memory_bytes = s->static_bytes + 2.5e9 * (i + 1);
        s->peak_in_flight = 2 - (i == 2);
        s->finish_s = r->replica_finish_s[s->replica] - (i == 2 ? 1.5 * MS : 0.0);
        s->n_mem = 5;
        s->mem = malloc(5 * sizeof *s->mem);
        assert_non_null(s->mem);
        /* not in time order on purpose */
        s->mem[0] = (ah_mem_point){0.0, s->static_bytes};
        s->mem[1] = (ah_mem_point){2.5 * MS, s->peak_memory_bytes};
        s->mem[2] = (ah_mem_point){1.0 * MS, s->static_bytes + 1.0e9};
        s->mem[3] = (ah_mem_point){6.5 * MS, s->static_bytes};
        s->mem[4] = (ah_mem_point){1.0 * MS, s->static_bytes + 1.5e9}; /* same instant: this one holds */
    }
    ah_sim_event list[] = {
        ev(AH_OP_OPTIMIZER, AH_STREAM_COMPUTE, 0, 0, -1, 0, 26, 7.0 * MS, 7.5 * MS),
        ev(AH_OP_BACKWARD, AH_STREAM_COMPUTE, 0, 0, 1, 0, 26, 4.5 * MS, 6.5 * MS),
        ev(AH_OP_FORWARD, AH_STREAM_COMPUTE, 0, 0, 0, 0, 26, 0.0, 1.2345674 * MS),
        ev(AH_OP_FORWARD, AH_STREAM_COMPUTE, 0, 0, 1, 0, 26, 1.2345674 * MS, 2.5 * MS),
        ev(AH_OP_BACKWARD, AH_STREAM_COMPUTE, 0, 0, 0, 0, 26, 2.5 * MS, 4.5 * MS),
        ev(AH_OP_TP_ALLREDUCE, AH_STREAM_TP, 0, 0, 0, 0, 26, 0.9 * MS, 1.1 * MS),
        ev(AH_OP_FORWARD, AH_STREAM_COMPUTE, 1, 0, 0, 0, 13, 0.0, 0.5 * MS),
        ev(AH_OP_FORWARD, AH_STREAM_COMPUTE, 1, 0, 1, 0, 13, 0.5 * MS, 1.0 * MS),
        ev(AH_OP_BACKWARD, AH_STREAM_COMPUTE, 1, 0, 0, 0, 13, 2.0 * MS, 3.0 * MS),
        ev(AH_OP_BACKWARD, AH_STREAM_COMPUTE, 1, 0, 1, 0, 13, 3.0 * MS, 4.0 * MS),
        ev(AH_OP_OPTIMIZER, AH_STREAM_COMPUTE, 1, 0, -1, 0, 13, 6.5 * MS, 7.0 * MS),
        ev(AH_OP_FORWARD, AH_STREAM_COMPUTE, 1, 1, 0, 13, 26, 0.6 * MS, 1.1 * MS),
        ev(AH_OP_BACKWARD, AH_STREAM_COMPUTE, 1, 1, 0, 13, 26, 1.1 * MS, 1.9 * MS),
        ev(AH_OP_FORWARD, AH_STREAM_COMPUTE, 1, 1, 1, 13, 26, 1.9 * MS, 2.4 * MS),
        ev(AH_OP_BACKWARD, AH_STREAM_COMPUTE, 1, 1, 1, 13, 26, 2.4 * MS, 3.0 * MS),
        ev(AH_OP_OPTIMIZER, AH_STREAM_COMPUTE, 1, 1, -1, 13, 26, 5.0 * MS, 5.5 * MS),
        /* each transfer on the sender's and the receiver's track */
        xfer(AH_OP_SEND_ACTIVATION, 1, 0, 1, 0, 0.5 * MS, 0.6 * MS),
        xfer(AH_OP_SEND_ACTIVATION, 1, 1, 0, 0, 0.5 * MS, 0.6 * MS),
        xfer(AH_OP_SEND_ACTIVATION, 1, 0, 1, 1, 1.0 * MS, 1.95 * MS),
        xfer(AH_OP_SEND_ACTIVATION, 1, 1, 0, 1, 1.0 * MS, 1.95 * MS),
        xfer(AH_OP_SEND_GRADIENT, 1, 1, 0, 0, 1.9 * MS, 2.0 * MS),
        xfer(AH_OP_SEND_GRADIENT, 1, 0, 1, 0, 1.9 * MS, 2.0 * MS),
        xfer(AH_OP_SEND_GRADIENT, 1, 1, 0, 1, 3.0 * MS, 3.1 * MS),
        xfer(AH_OP_SEND_GRADIENT, 1, 0, 1, 1, 3.0 * MS, 3.1 * MS),
        /* bucket all-reduces on every holder's DP track */
        dp(0, 0, 0, 13, 26, 4.5 * MS, 5.0 * MS),
        dp(1, 1, 0, 13, 26, 4.5 * MS, 5.0 * MS),
        dp(0, 0, 1, 0, 13, 5.0 * MS, 6.5 * MS),
        dp(1, 0, 1, 0, 13, 5.0 * MS, 6.5 * MS),
    };
    r->n_events = (int)(sizeof list / sizeof list[0]);
    r->events = malloc(sizeof list);
    assert_non_null(r->events);
    memcpy(r->events, list, sizeof list);
    r->n_buckets = 2;
    r->buckets = calloc(2, sizeof *r->buckets);
    assert_non_null(r->buckets);
    r->buckets[0] = (ah_sim_bucket){13, 26, 1.25e8, 4.0 * MS, 4.5 * MS, 5.0 * MS, 2, 1};
    r->buckets[1] = (ah_sim_bucket){0, 13, 1.25e8, 4.5 * MS, 5.0 * MS, 6.5 * MS, 2, 1};
    r->flow_updates = 42;
}

/* Frees what build_result allocated (the real ah_sim_result_free would do
 * the same, but the hand-made result must not depend on it). */
static void free_result(ah_sim_result *r) {
    for (int i = 0; r->stages && i < r->n_stages; i++)
        free(r->stages[i].mem);
    free(r->stages);
    free(r->events);
    free(r->buckets);
    free(r->replica_flush_s);
    free(r->replica_finish_s);
    memset(r, 0, sizeof *r);
}

/* ------------------------------------------------------------------ tests */

static void test_names(void **state) {
    (void)state;
    /* the one vocabulary (autohet/ops.h), in the trace records' order, and names that read back */
    static const char *kinds[] = {"forward",         "backward",      "optimizer", "recv_activation",
                                  "recv_gradient",   "send_activation", "send_gradient", "send_wait",
                                  "tp_allreduce",    "dp_allreduce",  "tied_sync", "step_sync", "dp_wait",
                                  "checkpoint"};
    assert_int_equal(AH_OP_KINDS, 14);
    for (int k = 0; k < AH_OP_KINDS; k++) {
        assert_string_equal(ah_op_kind_name((ah_op_kind)k), kinds[k]);
        assert_int_equal(ah_op_kind_parse(kinds[k]), k);
    }
    assert_null(ah_op_kind_name(AH_OP_KINDS));
    assert_int_equal(ah_op_kind_parse("nothing"), -1);
    assert_int_equal(ah_op_kind_stream(AH_OP_SEND_WAIT), AH_STREAM_P2P);
    assert_int_equal(ah_op_kind_stream(AH_OP_TIED_SYNC), AH_STREAM_DP);
    assert_int_equal(ah_op_kind_site(AH_OP_DP_ALLREDUCE), 8);
    assert_int_equal(ah_op_kind_site(AH_OP_FORWARD), -1);
    assert_int_equal(ah_op_kind_stream(AH_OP_CHECKPOINT), AH_STREAM_COMPUTE); /* the training thread's */
    ah_trace_event ck = {.kind = AH_OP_CHECKPOINT, .bucket = AH_CKPT_TRACE_WAIT};
    char site[64];
    assert_string_equal(ah_trace_site_name(&ck, site, sizeof site), "checkpoint wait");
    ck.bucket = -1; /* no tier: the kind alone */
    assert_string_equal(ah_trace_site_name(&ck, site, sizeof site), "checkpoint");
    static const char *streams[] = {"compute", "tp", "p2p", "dp"};
    assert_int_equal(AH_STREAMS, 4);
    for (int s = 0; s < AH_STREAMS; s++)
        assert_string_equal(ah_stream_name((ah_stream)s), streams[s]);
    assert_string_equal(ah_schedule_name(AH_SCHED_1F1B), "1f1b");
    assert_string_equal(ah_schedule_name(AH_SCHED_GPIPE), "gpipe");

    ah_schedule s = AH_SCHED_GPIPE;
    assert_int_equal(ah_schedule_parse("1f1b", &s), 0);
    assert_int_equal(s, AH_SCHED_1F1B);
    assert_int_equal(ah_schedule_parse("GPipe", &s), 0);
    assert_int_equal(s, AH_SCHED_GPIPE);
    assert_int_equal(ah_schedule_parse("1F1B", &s), 0);
    assert_int_equal(s, AH_SCHED_1F1B);
    /* round trip through the name */
    for (int k = 0; k <= 1; k++) {
        assert_int_equal(ah_schedule_parse(ah_schedule_name((ah_schedule)k), &s), 0);
        assert_int_equal(s, k);
    }
    /* failures leave the output alone */
    s = AH_SCHED_GPIPE;
    assert_int_equal(ah_schedule_parse("zb-h1", &s), -1);
    assert_int_equal(ah_schedule_parse("", &s), -1);
    assert_int_equal(ah_schedule_parse("1f1b ", &s), -1);
    assert_int_equal(ah_schedule_parse(NULL, &s), -1);
    assert_int_equal(s, AH_SCHED_GPIPE);
}

/* Find the X event with this exact name on process pid (-1: any) and
 * (optionally) the thread of that name. */
static const cJSON *find_x(const cJSON *evs, const char *name, double pid, const char *thread,
                           const cJSON **thread_meta) {
    const cJSON *e, *hit = NULL;
    int hits = 0;
    cJSON_ArrayForEach(e, evs) {
        if (strcmp(str_field(e, "ph"), "X") != 0 || strcmp(str_field(e, "name"), name) != 0 ||
            (pid >= 0 && num_field(e, "pid") != pid))
            continue;
        const cJSON *m, *tm = NULL;
        cJSON_ArrayForEach(m, evs) {
            if (strcmp(str_field(m, "ph"), "M") == 0 && strcmp(str_field(m, "name"), "thread_name") == 0 &&
                num_field(m, "pid") == num_field(e, "pid") && num_field(m, "tid") == num_field(e, "tid"))
                tm = m;
        }
        assert_non_null(tm);
        const char *tn = str_field(cJSON_GetObjectItemCaseSensitive(tm, "args"), "name");
        if (thread && strcmp(tn, thread) != 0)
            continue;
        hit = e;
        hits++;
        if (thread_meta)
            *thread_meta = tm;
    }
    if (hits != 1)
        fail_msg("X event \"%s\" on pid %g \"%s\": %d matches", name, pid, thread ? thread : "*", hits);
    return hit;
}

static double sort_index(const cJSON *evs, const char *what, double pid, double tid) {
    const cJSON *m;
    cJSON_ArrayForEach(m, evs) {
        if (strcmp(str_field(m, "ph"), "M") == 0 && strcmp(str_field(m, "name"), what) == 0 &&
            num_field(m, "pid") == pid && num_field(m, "tid") == tid)
            return num_field(cJSON_GetObjectItemCaseSensitive(m, "args"), "sort_index");
    }
    fail_msg("no %s for pid %g tid %g", what, pid, tid);
    return -1;
}

static double arg_num(const cJSON *e, const char *k) {
    return num_field(cJSON_GetObjectItemCaseSensitive(e, "args"), k);
}

/* the flow event of phase ph whose pid and ts are given: its id (one match) */
static double flow_id(const cJSON *evs, const char *ph, double pid, double ts) {
    const cJSON *e;
    double id = -1;
    int hits = 0;
    cJSON_ArrayForEach(e, evs) {
        if (!strcmp(str_field(e, "ph"), ph) && num_field(e, "pid") == pid && num_field(e, "ts") == ts) {
            id = num_field(e, "id");
            hits++;
        }
    }
    if (hits != 1)
        fail_msg("flow \"%s\" on pid %g at %g: %d matches", ph, pid, ts, hits);
    return id;
}

/* The hand-built result: stages r0 s0 (node A100), r1 s0 and r1 s1 (node
 * H800), tp 2 each, so engine ranks 0-1, 2-3 and 4-5. */
static void test_trace(void **state) {
    (void)state;
    ah_plan p;
    build_plan(&p, NULL);
    ah_sim_result r;
    build_result(&r);
    char path[256], tmp[300], err[256] = "";
    tmp_path(path, sizeof path, "trace.json");
    if (ah_sim_write_trace(&p, &r, path, err, sizeof err) != 0)
        fail_msg("ah_sim_write_trace: %s", err);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    assert_false(file_exists(tmp));

    /* every event is there once per GPU of its stage, and the file is a valid trace */
    assert_int_equal(validate_trace(path), 2 * r.n_events);

    cJSON *root = parse_file(path);
    assert_string_equal(str_field(root, "displayTimeUnit"), "ms");
    const cJSON *other = cJSON_GetObjectItemCaseSensitive(root, "otherData");
    assert_true(cJSON_IsObject(other));
    assert_string_equal(str_field(other, "schedule"), "1f1b");
    assert_string_equal(str_field(other, "format"), "autohet-trace");
    assert_string_equal(str_field(other, "source"), "simulator");
    const cJSON *evs = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");

    /* processes: one per engine rank, named after its slot and node */
    static const int slot[6][4] = {{0, 0, 0, 0}, {0, 0, 1, 0}, {1, 0, 0, 1},
                                   {1, 0, 1, 1}, {1, 1, 0, 1}, {1, 1, 1, 1}};
    int procs = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, evs) {
        if (strcmp(str_field(e, "ph"), "M") != 0 || strcmp(str_field(e, "name"), "process_name") != 0)
            continue;
        procs++;
        int pid = (int)num_field(e, "pid");
        assert_true(pid >= 0 && pid < 6);
        const ah_node *nd = &p.cluster.nodes[slot[pid][3]];
        char want[200];
        snprintf(want, sizeof want, "rank %d (replica %d, stage %d, tp %d) on %s (%s)", pid, slot[pid][0],
                 slot[pid][1], slot[pid][2], nd->name, nd->dev.name);
        assert_string_equal(str_field(cJSON_GetObjectItemCaseSensitive(e, "args"), "name"), want);
        assert_true(sort_index(evs, "process_sort_index", pid, 0) == pid);
    }
    assert_int_equal(procs, 6);

    /* compute event: name, exact microseconds, category, args; the same on both GPUs of the stage */
    for (int pid = 0; pid < 2; pid++) {
        const cJSON *f0 = find_x(evs, "forward mb0", pid, "compute", NULL);
        assert_true(num_field(f0, "tid") == 0);
        assert_true(num_field(f0, "ts") == 0.0);
        assert_true(num_field(f0, "dur") == 1234.567); /* 1.2345674 ms, to the nanosecond */
        assert_string_equal(str_field(f0, "cat"), "compute");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(f0, "args");
        assert_string_equal(str_field(args, "kind"), "forward");
        assert_string_equal(str_field(args, "site"), "forward");
        assert_true(num_field(args, "micro_batch") == 0);
        const cJSON *ly = cJSON_GetObjectItemCaseSensitive(args, "layers");
        assert_int_equal(cJSON_GetArraySize(ly), 2);
        assert_true(cJSON_GetArrayItem(ly, 0)->valuedouble == 0 &&
                    cJSON_GetArrayItem(ly, 1)->valuedouble == 26);
        assert_true(num_field(args, "bytes") == 0 && num_field(args, "bucket") == -1 &&
                    num_field(args, "peer") == -1);
    }
    const cJSON *f1 = find_x(evs, "forward mb1", 0, "compute", NULL);
    assert_true(num_field(f1, "ts") == 1234.567);
    assert_true(num_field(f1, "dur") == 1265.433);
    find_x(evs, "backward mb1", 0, "compute", NULL);
    const cJSON *opt = find_x(evs, "optimizer", 0, "compute", NULL);
    assert_string_equal(str_field(cJSON_GetObjectItemCaseSensitive(opt, "args"), "kind"), "optimizer");
    assert_true(num_field(opt, "ts") == 7000.0 && num_field(opt, "dur") == 500.0);
    for (int pid = 0; pid < 2; pid++) { /* one communicator: the stage's first rank */
        const cJSON *tpar = find_x(evs, "tp_allreduce mb0", pid, "tp", NULL);
        assert_string_equal(str_field(tpar, "cat"), "communication");
        assert_true(arg_num(tpar, "ranks") == 2 && arg_num(tpar, "group") == 0);
    }

    /* a transfer: a send on the sender, a receive on the receiver, linked by a flow */
    for (int q = 0; q < 2; q++) {
        const cJSON *sa = find_x(evs, "send_activation mb0", 2 + q, "p2p", NULL);
        const cJSON *ra = find_x(evs, "recv_activation mb0", 4 + q, "p2p", NULL);
        assert_true(num_field(sa, "ts") == 500.0 && num_field(ra, "ts") == 500.0);
        assert_true(num_field(sa, "dur") == 100.0 && num_field(ra, "dur") == 100.0);
        assert_true(arg_num(sa, "bytes") == 4194304 && arg_num(sa, "peer") == 4 + q &&
                    arg_num(ra, "peer") == 2 + q);
        /* the arrow ends where the data arrived: the receive's end, 1 ns inside it */
        assert_true(flow_id(evs, "s", 2 + q, 500.0) == flow_id(evs, "f", 4 + q, 599.999));
    }
    find_x(evs, "send_gradient mb0", 4, NULL, NULL);
    find_x(evs, "recv_gradient mb0", 2, NULL, NULL);
    const cJSON *sg = find_x(evs, "send_gradient mb1", 4, "p2p", NULL);
    assert_true(arg_num(sg, "peer") == 2);
    find_x(evs, "recv_gradient mb1", 2, "p2p", NULL);
    int n_s = 0, n_f = 0;
    cJSON_ArrayForEach(e, evs) {
        n_s += !strcmp(str_field(e, "ph"), "s");
        n_f += !strcmp(str_field(e, "ph"), "f");
    }
    assert_int_equal(n_s, 8); /* 4 transfers x 2 GPUs */
    assert_int_equal(n_f, 8);
    /* act mb1 [1.0,1.95) and grad mb0 [1.9,2.0) overlap without nesting: one
     * of them moved to a second p2p thread of the same rank */
    find_x(evs, "send_activation mb1", 2, "p2p", NULL);
    const cJSON *m2 = NULL, *rg = find_x(evs, "recv_gradient mb0", 2, NULL, &m2);
    assert_string_equal(str_field(cJSON_GetObjectItemCaseSensitive(m2, "args"), "name"), "p2p #2");
    assert_true(num_field(rg, "tid") == 6);

    /* DP all-reduce on every holder's dp thread, one communicator per tp rank */
    const cJSON *d0 = find_x(evs, "dp_allreduce layers 13-25", 0, "dp", NULL);
    const cJSON *d5 = find_x(evs, "dp_allreduce layers 13-25", 5, "dp", NULL);
    find_x(evs, "dp_allreduce layers 0-12", 2, "dp", NULL);
    assert_true(arg_num(d0, "bucket") == 0 && arg_num(d0, "bytes") == 1.25e8 && arg_num(d0, "ranks") == 2);
    assert_true(arg_num(d0, "group") == 0 && arg_num(d5, "group") == 1);
    assert_true(num_field(d0, "ts") == 4500.0 && num_field(d0, "dur") == 500.0);

    /* a rank's threads: compute, tp, p2p, dp */
    double i_c = sort_index(evs, "thread_sort_index", 2, 0), i_p = sort_index(evs, "thread_sort_index", 2, 2),
           i_p2 = sort_index(evs, "thread_sort_index", 2, 6),
           i_d = sort_index(evs, "thread_sort_index", 2, 3);
    assert_true(i_c < i_p && i_p < i_p2 && i_p2 < i_d);

    /* memory counters: one track per stage on each of its ranks, all points, in time order */
    int counters = 0;
    double last_ts = -1;
    cJSON_ArrayForEach(e, evs) {
        if (strcmp(str_field(e, "ph"), "C") != 0)
            continue;
        counters++;
        if (strcmp(str_field(e, "name"), "memory GiB r1 s1") == 0 && num_field(e, "pid") == 4) {
            double ts = num_field(e, "ts");
            assert_true(ts > last_ts);
            last_ts = ts;
            double gib = num_field(cJSON_GetObjectItemCaseSensitive(e, "args"), "used");
            if (ts == 2500.0)
                assert_true(fabs(gib - r.stages[2].peak_memory_bytes / 1073741824.0) < 1e-8);
            if (ts == 1000.0)
                assert_true(fabs(gib - (r.stages[2].static_bytes + 1.5e9) / 1073741824.0) < 1e-8);
        }
    }
    assert_int_equal(counters, 24); /* one per instant, on both GPUs of a stage */
    assert_true(last_ts == 6500.0);

    cJSON_Delete(root);
    free_result(&r);
    ah_plan_free(&p);
}

static void test_trace_errors(void **state) {
    (void)state;
    ah_plan p;
    build_plan(&p, NULL);
    ah_sim_result r;
    build_result(&r);
    char path[256], err[256] = "";

    /* unwritable target: error names the path, nothing left behind */
    assert_int_equal(ah_sim_write_trace(&p, &r, "/nonexistent-dir/t.json", err, sizeof err), -1);
    assert_non_null(strstr(err, "/nonexistent-dir/t.json"));
    assert_int_equal(ah_sim_write_svg(&p, &r, "/nonexistent-dir/t.svg", err, sizeof err), -1);
    assert_int_equal(ah_sim_write_json(&p, &r, "/nonexistent-dir/t.json", err, sizeof err), -1);

    /* an event on a stage that does not exist is rejected; an existing file
     * is not replaced */
    tmp_path(path, sizeof path, "bad.json");
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("old", f);
    fclose(f);
    r.events[3].stage = 5;
    err[0] = '\0';
    assert_int_equal(ah_sim_write_trace(&p, &r, path, err, sizeof err), -1);
    assert_non_null(strstr(err, "r0 s5"));
    char *text = slurp(path);
    assert_string_equal(text, "old");
    free(text);
    r.events[3].stage = 0;
    r.events[3].end_s = NAN;
    assert_int_equal(ah_sim_write_trace(&p, &r, path, err, sizeof err), -1);
    assert_non_null(strstr(err, "non-finite"));
    r.events[3].end_s = 2.5 * MS;
    assert_int_equal(ah_sim_write_trace(&p, &r, path, err, sizeof err), 0);
    assert_int_equal(validate_trace(path), 2 * r.n_events);

    free_result(&r);
    ah_plan_free(&p);
}

static void test_trace_without_events(void **state) {
    (void)state;
    ah_plan p;
    build_plan(&p, NULL);
    ah_sim_result r;
    build_result(&r);
    free(r.events);
    r.events = NULL;
    r.n_events = 0;
    char path[256], err[256] = "";
    tmp_path(path, sizeof path, "empty.json");
    assert_int_equal(ah_sim_write_trace(&p, &r, path, err, sizeof err), 0);
    assert_int_equal(validate_trace(path), 0);
    /* the SVG still draws the rows and markers */
    tmp_path(path, sizeof path, "empty.svg");
    assert_int_equal(ah_sim_write_svg(&p, &r, path, err, sizeof err), 0);
    char *svg = slurp(path);
    assert_non_null(strstr(svg, "r1 s1 H800"));
    free(svg);
    free_result(&r);
    ah_plan_free(&p);
}

/* Every '&' in the text starts an entity reference. */
static void assert_entities_ok(const char *s) {
    for (const char *p = strchr(s, '&'); p; p = strchr(p + 1, '&')) {
        if (strncmp(p, "&amp;", 5) && strncmp(p, "&lt;", 4) && strncmp(p, "&gt;", 4) &&
            strncmp(p, "&quot;", 6) && strncmp(p, "&apos;", 6))
            fail_msg("unescaped '&' at \"%.20s\"", p);
    }
}

static void test_svg(void **state) {
    (void)state;
    ah_plan p;
    build_plan(&p, "rack&1<a>");
    ah_sim_result r;
    build_result(&r);
    char path[256], tmp[300], err[256] = "";
    tmp_path(path, sizeof path, "gantt.svg");
    if (ah_sim_write_svg(&p, &r, path, err, sizeof err) != 0)
        fail_msg("ah_sim_write_svg: %s", err);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    assert_false(file_exists(tmp));
    char *svg = slurp(path);
    assert_int_equal(strncmp(svg, "<svg", 4), 0);
    assert_non_null(strstr(svg, "xmlns=\"http://www.w3.org/2000/svg\""));
    size_t len = strlen(svg);
    assert_true(len > 7 && strcmp(svg + len - 7, "</svg>\n") == 0);
    /* one rect per event at least (plus lane backgrounds and legend swatches) */
    int rects = count_substr(svg, "<rect");
    assert_true(rects >= r.n_events + 2 * r.n_stages + 6);
    /* every event has a tooltip with its name */
    assert_non_null(strstr(svg, "<title>send act mb0 -&gt; r1 s1: start 500 us"));
    assert_non_null(strstr(svg, "<title>recv act mb0 &lt;- r1 s0"));
    assert_non_null(strstr(svg, "<title>DP-AR bucket 1 L[0,13)"));
    /* title with the iteration time and the schedule */
    assert_non_null(strstr(svg, "Simulated iteration 7.5 ms (schedule 1f1b, gpt3-1.3b)"));
    assert_null(strstr(svg, "showing the first"));
    /* legend */
    static const char *legend[] = {">forward<",       ">backward<",  ">TP all-reduce<", ">send (act / grad)<",
                                   ">DP all-reduce<", ">optimizer<", ">replica flush<", ">iteration end<"};
    for (size_t k = 0; k < sizeof legend / sizeof legend[0]; k++)
        if (!strstr(svg, legend[k]))
            fail_msg("legend entry %s missing", legend[k]);
    /* row labels, with the node name escaped */
    assert_non_null(strstr(svg, ">r0 s0 A100-40G rack&amp;1&lt;a&gt;</text>"));
    assert_null(strstr(svg, "rack&1"));
    assert_null(strstr(svg, "1<a>"));
    char want[128];
    snprintf(want, sizeof want, ">r1 s1 H800 %s</text>", p.cluster.nodes[1].name);
    assert_non_null(strstr(svg, want));
    assert_entities_ok(svg);
    /* markers: one flush per replica, the iteration end, a time axis in ms */
    assert_int_equal(count_substr(svg, "<line class=\"flush\""), 2 + 1 /* legend */);
    assert_non_null(strstr(svg, "flush r1 at 4 ms"));
    assert_non_null(strstr(svg, ">iteration 7.5 ms</text>"));
    assert_non_null(strstr(svg, ">0 ms</text>"));
    assert_non_null(strstr(svg, ">7 ms</text>"));
    /* balanced tags of the elements used */
    assert_int_equal(count_substr(svg, "<text"), count_substr(svg, "</text>"));
    assert_int_equal(count_substr(svg, "<title>"), count_substr(svg, "</title>"));
    free(svg);
    free_result(&r);
    ah_plan_free(&p);
}

/* 70 stages: the chart draws the first 64 and says so. */
static void test_svg_many_stages(void **state) {
    (void)state;
    ah_plan p;
    build_plan(&p, NULL);
    ah_sim_result r;
    memset(&r, 0, sizeof r);
    r.iteration_time_s = 2.0;
    r.closed_form_s = 2.0;
    r.n_replicas = 1;
    r.n_stages = 70;
    r.stages = calloc(70, sizeof *r.stages);
    r.n_events = 70;
    r.events = calloc(70, sizeof *r.events);
    assert_non_null(r.stages);
    assert_non_null(r.events);
    for (int i = 0; i < 70; i++) {
        r.stages[i] = (ah_sim_stage){.replica = 0, .stage = i, .node = 1, .gpu_first = 0, .tp = 2};
        r.events[i] = ev(AH_OP_FORWARD, AH_STREAM_COMPUTE, 0, i, 0, 0, 1, 0.02 * i, 0.02 * i + 0.5);
    }
    char path[256], err[256] = "";
    tmp_path(path, sizeof path, "many.svg");
    assert_int_equal(ah_sim_write_svg(&p, &r, path, err, sizeof err), 0);
    char *svg = slurp(path);
    assert_non_null(strstr(svg, "showing the first 64 of 70 stages"));
    assert_non_null(strstr(svg, ">r0 s63 H800 "));
    assert_null(strstr(svg, ">r0 s64 H800 "));
    assert_int_equal(count_substr(svg, "<rect class=\"k0\""), 64 + 1 /* legend */);
    /* 2 s: the axis is in seconds */
    assert_non_null(strstr(svg, ">2.0 s</text>"));
    free(svg);
    free_result(&r);
    ah_plan_free(&p);
}

/* Over 200k events: adjacent same-kind events closer than a pixel merge. */
static void test_svg_merges_dense_events(void **state) {
    (void)state;
    ah_plan p;
    build_plan(&p, NULL);
    ah_sim_result r;
    memset(&r, 0, sizeof r);
    const int n = 200100;
    r.iteration_time_s = n * 1e-6;
    r.n_replicas = 1;
    r.n_stages = 1;
    r.stages = calloc(1, sizeof *r.stages);
    r.events = calloc((size_t)n, sizeof *r.events);
    assert_non_null(r.stages);
    assert_non_null(r.events);
    r.stages[0] = (ah_sim_stage){.replica = 0, .stage = 0, .node = 0, .gpu_first = 0, .tp = 2};
    for (int i = 0; i < n; i++) /* 0.9 us events 1 us apart: forwards, then backwards */
        r.events[i] = ev(i < n / 2 ? AH_OP_FORWARD : AH_OP_BACKWARD, AH_STREAM_COMPUTE, 0, 0, i, 0, 26,
                         i * 1e-6, (i + 0.9) * 1e-6);
    r.n_events = n;
    char path[256], err[256] = "";
    tmp_path(path, sizeof path, "dense.svg");
    assert_int_equal(ah_sim_write_svg(&p, &r, path, err, sizeof err), 0);
    char *svg = slurp(path);
    assert_non_null(strstr(svg, "merged"));
    assert_int_equal(count_substr(svg, "<rect class=\"k0\""), 1 + 1 /* legend */);
    assert_int_equal(count_substr(svg, "<rect class=\"k1\""), 1 + 1);
    free(svg);
    free_result(&r);
    ah_plan_free(&p);
}

static void test_json(void **state) {
    (void)state;
    ah_plan p;
    build_plan(&p, "n\"0\\x");
    ah_sim_result r;
    build_result(&r);
    char path[256], tmp[300], err[256] = "";
    tmp_path(path, sizeof path, "sim.json");
    if (ah_sim_write_json(&p, &r, path, err, sizeof err) != 0)
        fail_msg("ah_sim_write_json: %s", err);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    assert_false(file_exists(tmp));
    cJSON *root = parse_file(path);
    assert_string_equal(str_field(root, "format"), "autohet-sim");
    assert_true(num_field(root, "version") == 1);
    assert_string_equal(str_field(root, "schedule"), "1f1b");
    /* numbers read back exactly */
    assert_true(num_field(root, "iteration_time_s") == r.iteration_time_s);
    assert_true(num_field(root, "closed_form_s") == r.closed_form_s);
    assert_true(num_field(root, "model_error") == r.closed_form_s / r.iteration_time_s - 1.0);
    assert_true(num_field(root, "model_error") < 0);

    const cJSON *reps = cJSON_GetObjectItemCaseSensitive(root, "replicas");
    assert_int_equal(cJSON_GetArraySize(reps), 2);
    for (int k = 0; k < 2; k++) {
        const cJSON *o = cJSON_GetArrayItem(reps, k);
        assert_true(num_field(o, "id") == k);
        assert_true(num_field(o, "flush_s") == r.replica_flush_s[k]);
        assert_true(num_field(o, "finish_s") == r.replica_finish_s[k]);
        assert_true(num_field(o, "stages") == k + 1);
    }

    const cJSON *stages = cJSON_GetObjectItemCaseSensitive(root, "stages");
    assert_int_equal(cJSON_GetArraySize(stages), r.n_stages);
    int tp_sum = 0;
    for (int i = 0; i < r.n_stages; i++) {
        const cJSON *o = cJSON_GetArrayItem(stages, i);
        const ah_sim_stage *s = &r.stages[i];
        tp_sum += s->tp;
        assert_true(num_field(o, "replica") == s->replica);
        assert_true(num_field(o, "stage") == s->stage);
        assert_string_equal(str_field(o, "node"), p.cluster.nodes[s->node].name);
        assert_string_equal(str_field(o, "gpu_type"), p.cluster.nodes[s->node].dev.name);
        const cJSON *g = cJSON_GetObjectItemCaseSensitive(o, "gpus");
        assert_int_equal(cJSON_GetArraySize(g), s->tp);
        assert_true(cJSON_GetArrayItem(g, 1)->valuedouble == s->gpu_first + 1);
        assert_true(num_field(o, "compute_s") == s->compute_s);
        assert_true(num_field(o, "exposed_comm_s") == s->exposed_comm_s);
        assert_true(num_field(o, "idle_s") == s->idle_s);
        assert_true(num_field(o, "peak_memory_bytes") == s->peak_memory_bytes);
        assert_true(num_field(o, "capacity_bytes") == s->capacity_bytes);
        assert_true(num_field(o, "static_bytes") == s->static_bytes);
        assert_true(num_field(o, "peak_in_flight") == s->peak_in_flight);
        assert_true(num_field(o, "finish_s") == s->finish_s);
    }
    assert_string_equal(str_field(cJSON_GetArrayItem(stages, 0), "node"), "n\"0\\x");

    /* one entry per GPU: sum over stages of tp */
    const cJSON *gpus = cJSON_GetObjectItemCaseSensitive(root, "gpus");
    assert_int_equal(cJSON_GetArraySize(gpus), tp_sum);
    assert_int_equal(tp_sum, 6);
    static const int want_gpu[6][3] = {{0, 0, 0}, {0, 0, 1}, {1, 0, 0}, {1, 0, 1}, {1, 1, 2}, {1, 1, 3}};
    for (int g = 0; g < 6; g++) {
        const cJSON *o = cJSON_GetArrayItem(gpus, g);
        const ah_sim_stage *s = &r.stages[g / 2];
        assert_true(num_field(o, "replica") == want_gpu[g][0]);
        assert_true(num_field(o, "stage") == want_gpu[g][1]);
        assert_true(num_field(o, "gpu") == want_gpu[g][2]);
        assert_string_equal(str_field(o, "node"), p.cluster.nodes[s->node].name);
        assert_true(num_field(o, "compute_s") == s->compute_s);
        assert_true(num_field(o, "exposed_comm_s") == s->exposed_comm_s);
        assert_true(num_field(o, "idle_s") == s->idle_s);
        assert_true(num_field(o, "peak_memory_bytes") == s->peak_memory_bytes);
        assert_true(num_field(o, "capacity_bytes") == s->capacity_bytes);
    }

    const cJSON *bks = cJSON_GetObjectItemCaseSensitive(root, "buckets");
    assert_int_equal(cJSON_GetArraySize(bks), 2);
    const cJSON *b1 = cJSON_GetArrayItem(bks, 1);
    const cJSON *ly = cJSON_GetObjectItemCaseSensitive(b1, "layers");
    assert_true(cJSON_GetArrayItem(ly, 0)->valuedouble == 0 && cJSON_GetArrayItem(ly, 1)->valuedouble == 13);
    assert_true(num_field(b1, "bytes") == 1.25e8);
    assert_true(num_field(b1, "holders") == 2);
    assert_true(num_field(b1, "ready_s") == r.buckets[1].ready_s);
    assert_true(num_field(b1, "start_s") == r.buckets[1].start_s);
    assert_true(num_field(b1, "end_s") == r.buckets[1].end_s);
    cJSON_Delete(root);

    /* a non-finite number becomes null, the document stays valid */
    r.stages[1].idle_s = NAN;
    assert_int_equal(ah_sim_write_json(&p, &r, path, err, sizeof err), 0);
    root = parse_file(path);
    const cJSON *s1 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "stages"), 1);
    assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(s1, "idle_s")));
    cJSON_Delete(root);

    free_result(&r);
    ah_plan_free(&p);
}

static void test_summary(void **state) {
    (void)state;
    ah_plan p;
    build_plan(&p, NULL);
    ah_sim_result r;
    build_result(&r);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    ah_sim_print_summary(&p, &r, f);
    fclose(f);
    assert_non_null(buf);
    assert_non_null(strstr(buf, "0.007500 s")); /* iteration time */
    assert_non_null(strstr(buf, "0.007200 s")); /* closed form */
    assert_non_null(strstr(buf, "-4.00%"));     /* model error */
    assert_non_null(strstr(buf, "1f1b"));
    /* tail: last bucket end 6.5 ms - last flush 6.5 ms */
    assert_non_null(strstr(buf, "2 buckets, tail after the last flush 0.000000 s"));
    assert_non_null(strstr(buf, "replica 1: flush 0.004000 s, finish 0.007000 s"));
    /* stage rows: compute 5 ms of 7.5 = 66.7%, memory in GiB / capacity */
    assert_non_null(strstr(buf, "66.7%"));
    assert_non_null(strstr(buf, "/ 38.00"));
    assert_non_null(strstr(buf, p.cluster.nodes[1].name));
    assert_non_null(strstr(buf, "H800"));
    free(buf);
    free_result(&r);
    ah_plan_free(&p);
}

/* The real simulator on a small searched plan: its trace must pass the same
 * validation, and the JSON must have one entry per GPU of the plan. */
static void check_real_simulator(const char *cluster, int global_batch, ah_schedule sched, int dp_serial,
                                 int min_replicas) {
    char err[256] = "";
    ah_model_config m;
    assert_int_equal(ah_model_preset("gpt3-1.3b", &m), 0);
    ah_cluster c;
    if (ah_cluster_parse_shorthand(cluster, ah_device_catalog_builtin(), &c, err, sizeof err) != 0)
        fail_msg("%s", err);
    ah_profile *prof = ah_profile_analytic();
    assert_non_null(prof);
    ah_plan_options o;
    ah_plan_options_default(&o);
    o.global_batch = global_batch;
    ah_plan plan;
    if (ah_plan_search(&m, &c, prof, &o, &plan, err, sizeof err) != 0)
        fail_msg("ah_plan_search: %s", err);
    assert_true(plan.n_replicas >= min_replicas);
    ah_sim_options so = {.schedule = sched, .record_events = 1, .dp_serial = dp_serial};
    ah_sim_result r;
    if (ah_simulate(&plan, prof, &o, &so, &r, err, sizeof err) != 0)
        fail_msg("ah_simulate: %s", err);
    assert_true(r.n_events > 0);
    assert_true(r.iteration_time_s > 0);

    char path[256];
    tmp_path(path, sizeof path, "real_trace.json");
    if (ah_sim_write_trace(&plan, &r, path, err, sizeof err) != 0)
        fail_msg("ah_sim_write_trace: %s", err);
    int want_x = 0; /* every event on each GPU of its stage's TP group */
    for (int k = 0; k < r.n_events; k++)
        want_x += plan.replicas[r.events[k].replica].stages[r.events[k].stage].tp;
    assert_int_equal(validate_trace(path), want_x);

    tmp_path(path, sizeof path, "real.json");
    if (ah_sim_write_json(&plan, &r, path, err, sizeof err) != 0)
        fail_msg("ah_sim_write_json: %s", err);
    cJSON *root = parse_file(path);
    int gpus = 0;
    for (int k = 0; k < plan.n_replicas; k++)
        for (int j = 0; j < plan.replicas[k].n_stages; j++)
            gpus += plan.replicas[k].stages[j].tp;
    const cJSON *ga = cJSON_GetObjectItemCaseSensitive(root, "gpus");
    assert_int_equal(cJSON_GetArraySize(ga), gpus);
    assert_int_equal(gpus, plan.gpus_used);
    assert_true(num_field(root, "iteration_time_s") == r.iteration_time_s);
    const cJSON *g;
    cJSON_ArrayForEach(g, ga) {
        assert_true(num_field(g, "compute_s") > 0);
        assert_true(num_field(g, "exposed_comm_s") >= 0);
        assert_true(num_field(g, "idle_s") >= 0);
        assert_true(num_field(g, "peak_memory_bytes") > 0);
        assert_true(num_field(g, "capacity_bytes") > 0);
    }
    cJSON_Delete(root);

    tmp_path(path, sizeof path, "real.svg");
    if (ah_sim_write_svg(&plan, &r, path, err, sizeof err) != 0)
        fail_msg("ah_sim_write_svg: %s", err);
    char *svg = slurp(path);
    assert_int_equal(strncmp(svg, "<svg", 4), 0);
    if (r.n_stages <= 64)
        assert_true(count_substr(svg, "<rect") >= r.n_events);
    free(svg);

    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    ah_sim_print_summary(&plan, &r, f);
    fclose(f);
    char want[64];
    snprintf(want, sizeof want, "%.6f s", r.iteration_time_s);
    assert_non_null(strstr(buf, want));
    free(buf);

    ah_sim_result_free(&r);
    ah_plan_free(&plan);
    ah_profile_free(prof);
    ah_cluster_free(&c);
}

static void test_real_simulator(void **state) {
    (void)state;
    check_real_simulator("1x8xA100-40G,1x8xH800", 32, AH_SCHED_1F1B, 0, 1);
}

/* Two replicas: DP bucket all-reduces on the dp threads, concurrent (they
 * may overlap on one stage) or serial, under both schedules. */
static void test_real_simulator_dp(void **state) {
    (void)state;
    check_real_simulator("2x8xA100-40G,1x8xH800", 64, AH_SCHED_1F1B, 0, 2);
    check_real_simulator("2x8xA100-40G,1x8xH800", 64, AH_SCHED_1F1B, 1, 2);
    check_real_simulator("2x8xA100-40G,1x8xH800", 64, AH_SCHED_GPIPE, 0, 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_trace),
        cmocka_unit_test(test_trace_errors),
        cmocka_unit_test(test_trace_without_events),
        cmocka_unit_test(test_svg),
        cmocka_unit_test(test_svg_many_stages),
        cmocka_unit_test(test_svg_merges_dense_events),
        cmocka_unit_test(test_json),
        cmocka_unit_test(test_summary),
        cmocka_unit_test(test_real_simulator),
        cmocka_unit_test(test_real_simulator_dp),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
