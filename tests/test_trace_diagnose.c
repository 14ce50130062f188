/* The diagnosis (analyze --diagnose) on synthetic traces where the answer is
 * known: two 2-stage pipelines (ranks 0 -> 1 and 2 -> 3), data-parallel
 * all-reduces between the stages' twins (0-2, 1-3) and a step reduction
 * over all four, built step by step with a little noise. A clean run raises
 * no finding (cause or effect); a rank computing 2x slower is the top finding as a
 * slow rank; a link 40x slower than the others is the top finding as a slow
 * link; a rank loading its data 4 ms late per micro-batch is the top finding
 * as an input stall; a pause of every rank every third step is a checkpoint
 * stall, and so are traced checkpoints (every third step, or every step), named
 * with their tier; a rank stopped part of the time (slow compute, stalled transfers)
 * is the top finding as a slow rank, its link explained by it; the comm
 * profile written from the slow-link trace shows that pair slow; and two
 * pipelines sharing one slow host link at its capacity are a saturated link,
 * not slow pairs or ranks. */
#include "test_util.h"

#include <cjson/cJSON.h>

#include "autohet/trace_diagnose.h"

#define R 4
#define STEPS 12
#define ACT_BYTES 32768.0
#define GRAD_BYTES 200000.0

typedef struct {
    int slow_rank;        /* -1 none: this rank computes 2x */
    int link_a, link_b;   /* -1 none: this pair's bandwidth is 1/40 */
    int input_rank;       /* -1 none: this rank waits 4 ms before each forward */
    int ckpt_every;       /* 0 none: every rank pauses 30 ms after every k-th step */
    int stopped_rank;     /* -1 none: this rank computes 2x and its pipeline transfers stall 8 ms each (a
                             process stopped part of the time: it progresses its messages no faster) */
    int saved_every;      /* 0 none: every rank saves a traced checkpoint (disk tier) after every k-th step */
    double saved_us;      /* how long that save takes */
    double host_link_gbs; /* 0: four hosts. Else ranks 0, 2 on host h0 and 1, 3 on h1, whose link carries one flow
                             at this speed (the comm profile `profile` says so) */
    double host_link_slow; /* each transfer between h0 and h1 takes this times its time alone (queued) */
    const char *profile;   /* the comm profile the diagnosis reads, or NULL */
} faults;

typedef struct {
    ah_trace_item *it;
    int n, cap;
    int seq[R][16];
    unsigned noise;
} builder;

static double jitter(builder *b) { /* 0.95 .. 1.05, deterministic */
    b->noise = b->noise * 1103515245u + 12345u;
    return 0.95 + 0.1 * ((b->noise >> 16) & 0x7fff) / 32768.0;
}

static ah_trace_item *add(builder *b, int rank, ah_op_kind k, const char *site, double t0, double t1) {
    if (b->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 256;
        b->it = realloc(b->it, sizeof(ah_trace_item) * (size_t)b->cap);
    }
    ah_trace_item *v = &b->it[b->n++];
    memset(v, 0, sizeof *v);
    v->ts = t0, v->dur = t1 - t0;
    v->comm = ah_op_kind_stream(k) != AH_STREAM_COMPUTE;
    snprintf(v->site, sizeof v->site, "%s", site);
    snprintf(v->name, sizeof v->name, "%s", site);
    v->ev = (ah_trace_event){.t0 = t0 * 1e-6, .t1 = t1 * 1e-6, .rank = rank, .kind = k, .micro_batch = -1,
                             .layer_first = -1, .layer_last = -1, .bucket = -1, .ranks = 1, .group = rank,
                             .peer = -1};
    int site_no = (int)k;
    v->ev.seq = b->seq[rank][site_no]++;
    return v;
}

/* microseconds to move `bytes` between a and b */
static double link_us(const faults *f, int a, int b, double bytes) {
    if (f->host_link_gbs > 0 && a % 2 != b % 2)
        return (5 + bytes / (f->host_link_gbs * 1e3)) * f->host_link_slow;
    double gbs = 2.0;
    if ((a == f->link_a && b == f->link_b) || (a == f->link_b && b == f->link_a))
        gbs /= 40;
    return 5 + bytes / (gbs * 1e3);
}

static double compute(builder *b, const faults *f, int r, ah_op_kind k, double t, int first, int last) {
    int slow = r == f->slow_rank || r == f->stopped_rank;
    double d = (k == AH_OP_FORWARD ? 1000 : 2000) * (r % 2 ? 1.5 : 1) * jitter(b) * (slow ? 2 : 1);
    ah_trace_item *v = add(b, r, k, ah_op_kind_name(k), t, t + d);
    v->ev.layer_first = first, v->ev.layer_last = last;
    return t + d;
}

static void p2p(builder *b, const faults *f, int from, int to, int grad, double *t) {
    ah_op_kind sk = grad ? AH_OP_SEND_GRADIENT : AH_OP_SEND_ACTIVATION,
                  rk = grad ? AH_OP_RECV_GRADIENT : AH_OP_RECV_ACTIVATION;
    ah_trace_item *s = add(b, from, sk, ah_op_kind_name(sk), t[from], t[from] + 3);
    s->ev.peer = to, s->ev.bytes = ACT_BYTES, s->ev.ranks = 2, s->ev.group = from < to ? from : to;
    double stall = from == f->stopped_rank || to == f->stopped_rank ? 8000 : 0;
    double arrive = t[from] + link_us(f, from, to, ACT_BYTES) + stall, end = arrive > t[to] ? arrive : t[to] + 2;
    ah_trace_item *v = add(b, to, rk, ah_op_kind_name(rk), t[to], end);
    v->ev.peer = from, v->ev.bytes = ACT_BYTES, v->ev.ranks = 2, v->ev.group = s->ev.group;
    t[from] += 3;
    t[to] = end;
}

static void allreduce(builder *b, const faults *f, const int *ranks, int n, ah_op_kind k, const char *site,
                      double bytes, double *t) {
    double last = 0;
    for (int i = 0; i < n; i++)
        last = t[ranks[i]] > last ? t[ranks[i]] : last;
    double end = last + (n == 2 ? 2 * link_us(f, ranks[0], ranks[1], bytes / 2) : 20);
    for (int i = 0; i < n; i++) {
        ah_trace_item *v = add(b, ranks[i], k, site, t[ranks[i]], end);
        v->ev.bytes = bytes, v->ev.ranks = n, v->ev.group = ranks[0];
        t[ranks[i]] = end;
    }
}

static void one_step(builder *b, const faults *f, double *t, int step) {
    for (int a = 0; a < R; a += 2) { /* a pipeline: a -> a + 1, two micro-batches */
        for (int m = 0; m < 2; m++) {
            t[a] += 100 + (a == f->input_rank ? 4000 : 0); /* fetching the micro-batch */
            t[a] = compute(b, f, a, AH_OP_FORWARD, t[a], 0, 3);
            p2p(b, f, a, a + 1, 0, t);
            t[a + 1] += 100 + (a + 1 == f->input_rank ? 4000 : 0);
            t[a + 1] = compute(b, f, a + 1, AH_OP_FORWARD, t[a + 1], 3, 6);
            t[a + 1] = compute(b, f, a + 1, AH_OP_BACKWARD, t[a + 1], 3, 6);
            p2p(b, f, a + 1, a, 1, t);
            t[a] = compute(b, f, a, AH_OP_BACKWARD, t[a], 0, 3);
        }
    }
    static const int dp0[2] = {0, 2}, dp1[2] = {1, 3}, all[4] = {0, 1, 2, 3};
    allreduce(b, f, dp0, 2, AH_OP_DP_ALLREDUCE, "dp_allreduce layers 0-2", GRAD_BYTES, t);
    allreduce(b, f, dp1, 2, AH_OP_DP_ALLREDUCE, "dp_allreduce layers 3-5", GRAD_BYTES, t);
    allreduce(b, f, all, 4, AH_OP_STEP_SYNC, "step_sync", 16, t);
    for (int r = 0; r < R; r++) {
        ah_trace_item *v = add(b, r, AH_OP_OPTIMIZER, "optimizer", t[r], t[r] + 300);
        t[r] = v->ts + v->dur + (f->ckpt_every && (step + 1) % f->ckpt_every == 0 ? 30000 : 50);
        if (f->saved_every && (step + 1) % f->saved_every == 0) { /* as the engine records it */
            ah_trace_item *k = add(b, r, AH_OP_CHECKPOINT, "checkpoint disk", t[r], t[r] + f->saved_us * jitter(b));
            k->ev.bucket = AH_CKPT_TRACE_DISK, k->ev.bytes = 1e6;
            t[r] = k->ts + k->dur + 20;
        }
    }
}

/* the diagnosis of a synthetic run with faults f (d owns its findings; hosts h0..h3) */
static void diagnose(const faults *f, ah_diagnosis *d, ah_diag_options *o) {
    static const char *hosts[R] = {"h0", "h1", "h2", "h3"}, *two_hosts[R] = {"h0", "h1", "h0", "h1"};
    builder b = {0};
    b.noise = 7;
    double t[R] = {0, 0, 0, 0};
    for (int s = 0; s < STEPS; s++)
        one_step(&b, f, t, s);
    ah_trace_file tf = {.items = b.it, .n = b.n, .n_ranks = R};
    ah_trace_options ao = {0};
    ah_trace_analysis a;
    char err[512];
    assert_int_equal(ah_trace_analyze(&tf, &ao, &a, err, sizeof err), 0);
    *o = (ah_diag_options){.n_ranks = R, .hosts = f->host_link_gbs > 0 ? two_hosts : hosts, .comm_profile = f->profile};
    assert_int_equal(ah_trace_diagnose(&a, o, d, err, sizeof err), 0);
    ah_trace_analysis_free(&a);
    free(b.it);
}

static int top_cause(const ah_diagnosis *d) {
    if (getenv("AH_TEST_VERBOSE"))
        ah_diagnosis_print(stderr, d, NULL);
    return d->n > 0 && d->f[0].significant && d->f[0].cause ? 0 : -1;
}

static void clean_run(void **state) {
    (void)state;
    faults f = {-1, -1, -1, -1, 0, -1, 0, 0, 0, 0, NULL};
    ah_diagnosis d;
    ah_diag_options o;
    diagnose(&f, &d, &o);
    if (getenv("AH_TEST_VERBOSE"))
        ah_diagnosis_print(stderr, &d, NULL);
    for (int i = 0; i < d.n; i++) /* no finding at all: no cause, and no bubble or exposed all-reduce beyond the
                                     schedule's own (its blocking all-reduces take their expected time) */
        if (d.f[i].significant)
            fail_msg("clean run: %s on rank %d, %.3f ms (%s)", ah_diag_kind_name(d.f[i].kind), d.f[i].ranks[0],
                     d.f[i].cost_s * 1e3, d.f[i].evidence);
    assert_int_equal(d.steps, STEPS);
    ah_diagnosis_free(&d);
}

static void slow_rank(void **state) {
    (void)state;
    faults f = {3, -1, -1, -1, 0, -1, 0, 0, 0, 0, NULL};
    ah_diagnosis d;
    ah_diag_options o;
    diagnose(&f, &d, &o);
    assert_int_equal(top_cause(&d), 0);
    assert_string_equal(ah_diag_kind_name(d.f[0].kind), "slow_rank");
    assert_int_equal(d.f[0].ranks[0], 3);
    /* rank 3 computes 2x its peer rank 1: the expected is rank 1's compute, the cost the difference */
    assert_true(d.f[0].measured_s > 1.8 * d.f[0].expected_s && d.f[0].measured_s < 2.2 * d.f[0].expected_s);
    assert_double_equal(d.f[0].cost_s, d.f[0].measured_s - d.f[0].expected_s, 1e-12);
    assert_int_equal(d.f[0].n_steps, STEPS);
    ah_diagnosis_free(&d);
}

/* the diagnosis of a run whose link a-b (a < b) is 40x slower: its top finding is that slow link */
static void diagnose_slow_link(int a, int b, ah_diagnosis *d, ah_diag_options *o) {
    faults f = {-1, a, b, -1, 0, -1, 0, 0, 0, 0, NULL};
    diagnose(&f, d, o);
    assert_int_equal(top_cause(d), 0);
    assert_string_equal(ah_diag_kind_name(d->f[0].kind), "slow_link");
    assert_int_equal(d->f[0].link[0], a);
    assert_int_equal(d->f[0].link[1], b);
}

static void slow_link(void **state) {
    (void)state;
    ah_diagnosis d;
    ah_diag_options o;
    diagnose_slow_link(0, 1, &d, &o);
    /* 48 messages of 32 KiB at 1/40 of the other pipeline's bandwidth */
    assert_true(d.f[0].measured_s > 20 * d.f[0].expected_s);
    assert_contains(d.f[0].evidence, "rank 0 (h0)");
    /* the profile of the run: pair h0-h1 at about 0.05 GB/s, the others at about 2 */
    char path[64];
    write_tmp("{}", path);
    char err[512];
    assert_int_equal(ah_diagnosis_write_comm_profile(path, "synthetic", &d, &o, err, sizeof err), 0);
    FILE *fp = fopen(path, "r");
    char *text = calloc(1, 1 << 20);
    assert_true(fread(text, 1, (1 << 20) - 1, fp) > 0);
    fclose(fp);
    cJSON *p = cJSON_Parse(text);
    const cJSON *bw = cJSON_GetObjectItem(cJSON_GetObjectItem(p, "links"), "bandwidth_GBps");
    double b01 = cJSON_GetArrayItem(cJSON_GetArrayItem(bw, 0), 1)->valuedouble,
           b23 = cJSON_GetArrayItem(cJSON_GetArrayItem(bw, 2), 3)->valuedouble,
           b02 = cJSON_GetArrayItem(cJSON_GetArrayItem(bw, 0), 2)->valuedouble;
    assert_true(b01 > 0.03 && b01 < 0.08);
    assert_true(b23 > 1.2 && b23 < 3);
    assert_true(b02 > 1.2 && b02 < 3);
    assert_string_equal(cJSON_GetObjectItem(p, "format")->valuestring, "autohet-comm-profile");
    cJSON_Delete(p);
    free(text);
    unlink(path);
    ah_diagnosis_free(&d);
}

static void input_stall(void **state) {
    (void)state;
    faults f = {-1, -1, -1, 2, 0, -1, 0, 0, 0, 0, NULL};
    ah_diagnosis d;
    ah_diag_options o;
    diagnose(&f, &d, &o);
    assert_int_equal(top_cause(&d), 0);
    assert_string_equal(ah_diag_kind_name(d.f[0].kind), "input_stall");
    assert_int_equal(d.f[0].ranks[0], 2);
    /* 2 micro-batches x 4 ms x 12 steps more than the median rank */
    assert_double_equal(d.f[0].cost_s, 2 * 4e-3 * STEPS, 6e-3);
    ah_diagnosis_free(&d);
}

/* the diagnosis of a run with faults f (into d): its top cause a checkpoint stall over n_steps steps costing
 * cost (within tol) */
static void diagnose_checkpoint(const faults *f, ah_diagnosis *d, int n_steps, double cost, double tol) {
    ah_diag_options o;
    diagnose(f, d, &o);
    assert_int_equal(top_cause(d), 0);
    assert_string_equal(ah_diag_kind_name(d->f[0].kind), "checkpoint_stall");
    assert_int_equal(d->f[0].n_steps, n_steps);
    assert_double_equal(d->f[0].cost_s, cost, tol);
}

static void checkpoint_stall(void **state) {
    (void)state;
    faults f = {-1, -1, -1, -1, 3, -1, 0, 0, 0, 0, NULL};
    ah_diagnosis d;
    /* steps 3, 6, 9 start 30 ms late (the pause after step 11 is past the trace) */
    diagnose_checkpoint(&f, &d, 3, 3 * 30e-3, 1e-3);
    assert_int_equal(d.f[0].n_ranks, 4);
    assert_int_equal(d.f[0].steps[0], 3);
    ah_diagnosis_free(&d);
}

/* the same pauses traced as the engine records its checkpoints: named with their tier, their whole time the
 * cost (the untraced shape would need the median step's gap as its baseline) */
static void traced_checkpoint(void **state) {
    (void)state;
    faults f = {-1, -1, -1, -1, 0, -1, 3, 30000, 0, 0, NULL};
    ah_diagnosis d;
    /* before steps 3, 6, 9 (the save after step 11 delays no traced step); the saves' time, jitter +-5% */
    diagnose_checkpoint(&f, &d, 3, 3 * 30e-3, 3 * 30e-3 * 0.06);
    assert_string_equal(d.f[0].op, "checkpoint disk");
    assert_contains(d.f[0].evidence, "traced: disk");
    assert_int_equal(d.f[0].n_ranks, 4);
    assert_int_equal(d.f[0].steps[0], 3);
    ah_diagnosis_free(&d);
}

/* a traced checkpoint after every step, 4 ms each: every step pays it, so no step stands out by its shape (an
 * untraced pause like it has no baseline to stand out from); traced, it is the cost */
static void checkpoint_every_step(void **state) {
    (void)state;
    faults f = {-1, -1, -1, -1, 0, -1, 1, 4000, 0, 0, NULL};
    ah_diagnosis d;
    diagnose_checkpoint(&f, &d, STEPS - 1, (STEPS - 1) * 4e-3, (STEPS - 1) * 4e-3 * 0.06);
    ah_diagnosis_free(&d);
}

/* a data-parallel pair's link 40x slower: the link is the cause, and the all-reduce time it adds to the
 * blocking all-reduces of ranks 0 and 2 is an exposed_dp effect explained by it (ranks 1 and 3, whose
 * all-reduces take less than the slow pair's line would say, offset none of it) */
static void slow_dp_link(void **state) {
    (void)state;
    ah_diagnosis d;
    ah_diag_options o;
    diagnose_slow_link(0, 2, &d, &o);
    int dp = -1;
    for (int i = 0; i < d.n; i++)
        if (d.f[i].kind == AH_DIAG_EXPOSED_DP)
            dp = i;
    assert_true(dp > 0);
    assert_true(d.f[dp].significant);
    assert_int_equal(d.f[dp].explained_by, 0);
    assert_true(d.f[dp].measured_s > 5 * d.f[dp].expected_s);
    ah_diagnosis_free(&d);
}

/* a rank stopped part of the time (the harness's SIGSTOP duty cycle): it computes 2x its peer, and every
 * pipeline transfer with it stalls 8 ms, more time lost on that link than in its compute. A link cannot slow
 * a rank's compute, the stopped rank slows its transfers: the rank is the top cause, the link explained by
 * it (with only the compute rule, the link ranked first: a CI run's netns trials named link 0-1 for rank 1) */
static void stopped_rank(void **state) {
    (void)state;
    faults f = {-1, -1, -1, -1, 0, 3, 0, 0, 0, 0, NULL};
    ah_diagnosis d;
    ah_diag_options o;
    diagnose(&f, &d, &o);
    assert_int_equal(top_cause(&d), 0);
    assert_string_equal(ah_diag_kind_name(d.f[0].kind), "slow_rank");
    assert_string_equal(d.f[0].op, "compute");
    assert_int_equal(d.f[0].ranks[0], 3);
    int link = -1;
    for (int i = 0; i < d.n; i++)
        if (d.f[i].kind == AH_DIAG_SLOW_LINK && d.f[i].significant)
            link = i;
    assert_true(link > 0);
    assert_int_equal(d.f[link].link[0], 2);
    assert_int_equal(d.f[link].link[1], 3);
    assert_true(d.f[link].cost_s > d.f[0].cost_s); /* the link lost more: ranked by cost alone it came first */
    assert_int_equal(d.f[link].explained_by, 0);
    ah_diagnosis_free(&d);
}

/* Two pipelines (0 -> 1, 2 -> 3) whose stages sit on two hosts (0, 2 on h0; 1, 3 on h1): all their transfers
 * cross the one link between h0 and h1, which the comm profile says carries a flow at 1 MB/s (32 KiB in 32.8 ms,
 * the compute 15 ms a step). Transfers taking 1.1x that, the link is busy about 80 % of the time one way: the top
 * cause is the saturated link, naming both hosts, and the pairs' slow links are explained by it. At 2 GB/s
 * (busy well under 70 %) the same 1.1x is no saturated link, nor at 1 MB/s on a link measured to carry twice
 * that with flows at once (busy about 41 %). */
/* a comm profile (into path): every link at 2 GB/s but h0-h1 at 1 MB/s a flow; gain > 1: the shared links say
 * flows at once carry that many times one flow between h0 and h1 */
static void write_host_profile(char *path, double gain) {
    char shared[256] = "", text[1024];
    if (gain > 1)
        snprintf(shared, sizeof shared,
                 ", \"shared_flows\": [[null, 2], [2, null]], \"shared_bandwidth_GBps\": [[null, %g], [%g, null]],"
                 " \"shared_one_flow_GBps\": [[null, 0.001], [0.001, null]]",
                 0.001 * gain, 0.001 * gain);
    snprintf(text, sizeof text,
             "{\"format\": \"autohet-comm-profile\", \"version\": 2, \"fits\": ["
             "{\"op\": \"latency\", \"link_class\": \"intra-node\", \"alpha_us\": 5, \"beta_GBps\": 2,"
             " \"max_rel_error\": 0},"
             "{\"op\": \"latency\", \"link_class\": \"inter-node\", \"alpha_us\": 5, \"beta_GBps\": 2,"
             " \"max_rel_error\": 0}],"
             "\"links\": {\"hosts\": [\"h0\", \"h1\"], \"latency_us\": [[null, 5], [5, null]],"
             "\"bandwidth_GBps\": [[null, 0.001], [0.001, null]]%s}}",
             shared);
    write_tmp(text, path);
}

static void saturated_link(void **state) {
    (void)state;
    char prof[64], prof2[64];
    write_host_profile(prof, 1);
    write_host_profile(prof2, 2);
    faults f = {-1, -1, -1, -1, 0, -1, 0, 0, 0.001, 1.1, prof};
    ah_diagnosis d;
    ah_diag_options o;
    diagnose(&f, &d, &o);
    assert_int_equal(top_cause(&d), 0);
    assert_string_equal(ah_diag_kind_name(d.f[0].kind), "saturated_link");
    assert_contains(d.f[0].evidence, "the link between hosts h0 and h1");
    assert_contains(d.f[0].evidence, "queue behind each other");
    assert_true(d.f[0].cost_s > 0 && d.f[0].measured_s > 1.05 * d.f[0].expected_s);
    assert_int_equal(d.f[0].n_steps, STEPS);
    int slow_links = 0;
    for (int i = 1; i < d.n; i++) {
        assert_true(d.f[i].kind != AH_DIAG_SLOW_RANK || !d.f[i].significant); /* no rank blamed for the load */
        if (d.f[i].kind == AH_DIAG_BUBBLE && d.f[i].significant) /* the pipelines wait on the link */
            assert_int_equal(d.f[i].explained_by, 0);
        if (d.f[i].kind == AH_DIAG_SLOW_LINK && d.f[i].cost_s > 0) {
            slow_links++;
            if (d.f[i].significant)
                assert_int_equal(d.f[i].explained_by, 0);
        }
    }
    assert_true(slow_links >= 2); /* both pipelines' pairs */
    ah_diagnosis_free(&d);
    f.host_link_gbs = 2.0; /* the same 1.1x on a link busy a small share of the time */
    diagnose(&f, &d, &o);
    for (int i = 0; i < d.n; i++)
        assert_true(d.f[i].kind != AH_DIAG_SATURATED_LINK);
    ah_diagnosis_free(&d);
    /* the first case, the link measured to carry 2x one flow with flows at once: busy about 41 %, not saturated */
    f.host_link_gbs = 0.001, f.profile = prof2;
    diagnose(&f, &d, &o);
    for (int i = 0; i < d.n; i++)
        assert_true(d.f[i].kind != AH_DIAG_SATURATED_LINK);
    ah_diagnosis_free(&d);
    unlink(prof);
    unlink(prof2);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(clean_run), cmocka_unit_test(slow_rank),
                                       cmocka_unit_test(slow_link), cmocka_unit_test(slow_dp_link),
                                       cmocka_unit_test(input_stall),
                                       cmocka_unit_test(checkpoint_stall), cmocka_unit_test(traced_checkpoint),
                                       cmocka_unit_test(checkpoint_every_step), cmocka_unit_test(stopped_rank),
                                       cmocka_unit_test(saturated_link)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
