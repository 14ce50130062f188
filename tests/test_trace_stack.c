/* The stack-level breakdown (analyze --stack): Open MPI 4.1's tuned
 * all-reduce decision, the alpha-beta cost of each algorithm, the link
 * model read from a comm profile, and, on a hand-built trace where every
 * component is worked out by hand, skew + mpi + residual = measured per
 * instance, the straggler, the step, per-site sums, and per rank the overlap
 * and idle time by cause. */
#include "test_util.h"

#include "autohet/trace_analysis.h"

/* one regime: t(m) = 2 us + m / (1 GB/s) = 2 + m / 1000 us */
static ah_link_model unit_link(void) {
    ah_link_model m;
    memset(&m, 0, sizeof m);
    m.n = 1;
    m.alpha_us[0] = 2;
    m.beta_GBps[0] = 1;
    return m;
}

static void decision_rules(void **state) {
    (void)state;
    /* communicator size, bytes, the algorithm of the fixed rules */
    static const struct {
        int p;
        double bytes;
        ah_mpi_alg want;
    } rows[] = {
        {2, 4, AH_MPI_AR_RING}, /* fewer than 4 ranks */
        {2, 4000, AH_MPI_AR_RECURSIVE_DOUBLING},
        {2, 4096, AH_MPI_AR_RING},
        {3, 131072, AH_MPI_AR_SEGMENTED_RING},
        {2, 262144, AH_MPI_AR_RABENSEIFNER},
        {4, 8, AH_MPI_AR_RING}, /* 4-7 ranks */
        {4, 16, AH_MPI_AR_RECURSIVE_DOUBLING},
        {7, 8192, AH_MPI_AR_RABENSEIFNER},
        {16, 32, AH_MPI_AR_SEGMENTED_RING}, /* larger communicators */
        {16, 100, AH_MPI_AR_RECURSIVE_DOUBLING},
        {200, 1000, AH_MPI_AR_NONOVERLAPPING},
        {5000, 20000, AH_MPI_AR_RECURSIVE_DOUBLING},
        {5000, 1 << 20, AH_MPI_AR_RABENSEIFNER},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (ah_mpi_allreduce_decide(rows[i].p, rows[i].bytes) != rows[i].want)
            fail_msg("%d ranks, %.0f B: got %s, want %s", rows[i].p, rows[i].bytes,
                     ah_mpi_alg_name(ah_mpi_allreduce_decide(rows[i].p, rows[i].bytes)), ah_mpi_alg_name(rows[i].want));
    assert_int_equal(ah_mpi_allreduce_alg_parse("ring"), AH_MPI_AR_RING);
    assert_int_equal(ah_mpi_allreduce_alg_parse("6"), AH_MPI_AR_RABENSEIFNER);
    assert_int_equal(ah_mpi_allreduce_alg_parse("0"), AH_MPI_AR_DECIDE);
    assert_int_equal(ah_mpi_allreduce_alg_parse("sendrecv"), -1);
    assert_int_equal(ah_mpi_allreduce_alg_parse("7"), -1);
    assert_string_equal(ah_mpi_alg_name(AH_MPI_AR_SEGMENTED_RING), "segmented_ring");
}

static void algorithm_costs(void **state) {
    (void)state;
    ah_link_model m = unit_link();
    ah_mpi_alg ran;
    /* recursive doubling, 2 ranks: one exchange of the vector */
    assert_double_equal(ah_mpi_alg_us(AH_MPI_AR_RECURSIVE_DOUBLING, 2, 4000, 4, 0, &m, &ran), 6, 1e-12);
    /* 3 ranks: one exchange + the extra rank's two messages */
    assert_double_equal(ah_mpi_alg_us(AH_MPI_AR_RECURSIVE_DOUBLING, 3, 4000, 4, 0, &m, &ran), 18, 1e-12);
    /* ring, 2 ranks, 1000 floats: 2 steps of 500 floats = 2 (2 + 2) */
    assert_double_equal(ah_mpi_alg_us(AH_MPI_AR_RING, 2, 4000, 4, 0, &m, &ran), 8, 1e-12);
    assert_int_equal(ran, AH_MPI_AR_RING);
    /* ring with fewer elements than ranks runs recursive doubling: 2 steps of t(8) */
    assert_double_equal(ah_mpi_alg_us(AH_MPI_AR_RING, 4, 8, 4, 0, &m, &ran), 4.016, 1e-12);
    assert_int_equal(ran, AH_MPI_AR_RECURSIVE_DOUBLING);
    /* segmented ring without a segment size is the ring */
    assert_double_equal(ah_mpi_alg_us(AH_MPI_AR_SEGMENTED_RING, 2, 8000, 4, 0, &m, &ran), 12, 1e-12);
    assert_int_equal(ran, AH_MPI_AR_RING);
    /* with 400-byte segments: 2000 / (2 x 100) = 10 phases, each a ring of 400-byte blocks: 10 x 2 x 2.4 */
    assert_double_equal(ah_mpi_alg_us(AH_MPI_AR_SEGMENTED_RING, 2, 8000, 4, 400, &m, &ran), 48, 1e-12);
    assert_int_equal(ran, AH_MPI_AR_SEGMENTED_RING);
    /* Rabenseifner, 3 ranks, 256 KiB: pre 2 t(n/2), post t(n), one halving + one doubling step of n/2 */
    assert_double_equal(ah_mpi_alg_us(AH_MPI_AR_RABENSEIFNER, 3, 262144, 4, 0, &m, &ran), 796.432, 1e-9);
    /* 4 ranks, power of two: 2 (t(n/2) + t(n/4)) */
    assert_double_equal(ah_mpi_alg_us(AH_MPI_AR_RABENSEIFNER, 4, 262144, 4, 0, &m, &ran),
                        2 * (2 + 131.072) + 2 * (2 + 65.536), 1e-9);
    /* fewer elements than the power of two: basic linear, 2 (p - 1) t(n) */
    assert_double_equal(ah_mpi_alg_us(AH_MPI_AR_RABENSEIFNER, 4, 4, 4, 0, &m, &ran), 6 * 2.004, 1e-12);
    assert_int_equal(ran, AH_MPI_AR_BASIC_LINEAR);
    assert_double_equal(ah_mpi_alg_us(AH_MPI_AR_BASIC_LINEAR, 3, 1000, 4, 0, &m, &ran), 12, 1e-12);
    /* non-overlapping: reduce + bcast as binomial trees, ceil(log2 p) levels each */
    assert_double_equal(ah_mpi_alg_us(AH_MPI_AR_NONOVERLAPPING, 3, 1000, 4, 0, &m, &ran), 12, 1e-12);
    assert_double_equal(ah_mpi_alg_us(AH_MPI_AR_NONOVERLAPPING, 4, 1000, 4, 0, &m, &ran), 12, 1e-12);
    assert_double_equal(ah_mpi_alg_us(AH_MPI_SENDRECV, 2, 1000, 4, 0, &m, &ran), 3, 1e-12);
    /* the decision applies first: 2 ranks, 4000 B -> recursive doubling */
    assert_double_equal(ah_mpi_alg_us(AH_MPI_AR_DECIDE, 2, 4000, 4, 0, &m, &ran), 6, 1e-12);
    assert_int_equal(ran, AH_MPI_AR_RECURSIVE_DOUBLING);
}

static void link_model_from_profile(void **state) {
    (void)state;
    char path[64], err[512];
    write_tmp("{\"format\": \"autohet-comm-profile\", \"fits\": ["
              "{\"op\": \"allreduce\", \"link_class\": \"intra-node\", \"alpha_us\": 50, \"beta_GBps\": 0.1},"
              "{\"op\": \"latency\", \"link_class\": \"intra-node\", \"alpha_us\": 3, \"beta_GBps\": 4, \"regimes\": ["
              "{\"max_bytes\": 1024, \"alpha_us\": 1, \"beta_GBps\": 1},"
              "{\"max_bytes\": null, \"alpha_us\": 10, \"beta_GBps\": 4}]}]}",
              path);
    ah_link_model m;
    assert_int_equal(ah_link_model_read(path, &m, err, sizeof err), 0);
    assert_int_equal(m.n, 2);
    assert_double_equal(ah_link_us(&m, 1000), 2, 1e-12);         /* 1 + 1000 / 1000 */
    assert_double_equal(ah_link_us(&m, 1024), 2.024, 1e-12);     /* the boundary is in the first regime */
    assert_double_equal(ah_link_us(&m, 4000000), 1010, 1e-9);    /* 10 + 4e6 / 4000 */
    assert_contains(m.source, "intra-node");
    unlink(path);
    write_tmp("{\"format\": \"autohet-comm-profile\", \"fits\": [{\"op\": \"allreduce\", \"link_class\": "
              "\"intra-node\", \"alpha_us\": 5, \"beta_GBps\": 1}]}",
              path);
    assert_int_equal(ah_link_model_read(path, &m, err, sizeof err), -1);
    assert_contains(err, path);
    assert_contains(err, "latency");
    unlink(path);
    write_tmp("{\"format\": \"autohet-comm-profile\", \"fits\": [{\"op\": \"latency\", \"link_class\": "
              "\"intra-node\", \"alpha_us\": 5, \"beta_GBps\": 0}]}",
              path);
    assert_int_equal(ah_link_model_read(path, &m, err, sizeof err), -1);
    assert_contains(err, "beta_GBps");
    unlink(path);
    write_tmp("{\"format\": \"autohet-plan\", \"fits\": [{\"op\": \"latency\", \"alpha_us\": 5, "
              "\"beta_GBps\": 1}]}",
              path); /* another kind of document: refused by its format, whatever else it holds */
    assert_int_equal(ah_link_model_read(path, &m, err, sizeof err), -1);
    assert_contains(err, "format");
    unlink(path);
    ah_link_model_default(&m);
    assert_double_equal(ah_link_us(&m, 10000), 6, 1e-12); /* 5 us + 10 kB at 10 GB/s */
    /* a large-message regime with a negative intercept (the commbench fit of a busy machine: alpha -13 us
     * from 64 KiB up) does not make a 33 KB message, above the small regime's end, cost less than the
     * latency */
    ah_link_model neg = {.n = 2, .alpha_us = {600, -13}, .beta_GBps = {0.05, 4.8}, .max_bytes = {32768, 0}};
    assert_double_equal(ah_link_us(&neg, 33024), 600, 1e-12);
    assert_double_equal(ah_link_us(&neg, 4.8e6), 987, 1e-9); /* -13 + 4.8e6 / 4800 */
}

static void add(ah_trace_file *t, int rank, ah_op_kind kind, const char *site, double ts, double dur, double bytes,
                int ranks, int group, int seq) {
    ah_trace_item *v = &t->items[t->n++];
    memset(v, 0, sizeof *v);
    v->ts = ts;
    v->dur = dur;
    v->comm = kind != AH_OP_FORWARD && kind != AH_OP_BACKWARD && kind != AH_OP_OPTIMIZER;
    snprintf(v->site, sizeof v->site, "%s", site);
    snprintf(v->name, sizeof v->name, "%s", site);
    v->ev = (ah_trace_event){.t0 = ts * 1e-6, .t1 = (ts + dur) * 1e-6, .bytes = bytes, .rank = rank, .kind = kind,
                             .micro_batch = -1, .layer_first = -1, .layer_last = -1, .bucket = -1, .ranks = ranks,
                             .group = group, .peer = -1, .seq = seq};
    if (rank + 1 > t->n_ranks)
        t->n_ranks = rank + 1;
}

/* Times in us. Link t(m) = 2 + m / 1000.
 * A = "dp_allreduce layers 0-1" on ranks 0, 1 (4000 B, 2 ranks: recursive doubling, mpi = t(4000) = 6):
 *   seq 0: rank 0 [10, 30], rank 1 [14, 31]: measured 21 = skew 4 + mpi 6 + residual 11, straggler 1
 *   seq 1: rank 0 [60, 70], rank 1 [58, 69]: measured 12 = 2 + 6 + 4, straggler 0, step 1
 * B = step_sync on ranks 0-3 (16 B of doubles, 4 ranks: recursive doubling, 2 t(16) = 4.032):
 *   starts 40, 45, 41, 45; ends 50, 50, 50, 52: measured 12 = 5 + 4.032 + 2.968, straggler 1 (tie with 3)
 * compute: rank 0 [0, 10], rank 1 [0, 14] and [31, 40]; every rank an optimizer [53, 55] and [75, 76]
 * rank 0 recv_activation [31, 38] (exposed 7); rank 1 send_activation [35, 36] (hidden under compute);
 * rank 2 send_wait [30, 33]. */
static void build_trace(ah_trace_file *t) {
    memset(t, 0, sizeof *t);
    t->items = calloc(32, sizeof(ah_trace_item));
    const char *A = "dp_allreduce layers 0-1";
    add(t, 0, AH_OP_FORWARD, "forward", 0, 10, 0, 1, 0, 0);
    add(t, 1, AH_OP_FORWARD, "forward", 0, 14, 0, 1, 1, 0);
    add(t, 0, AH_OP_DP_ALLREDUCE, A, 10, 20, 4000, 2, 0, 0);
    add(t, 1, AH_OP_DP_ALLREDUCE, A, 14, 17, 4000, 2, 0, 0);
    add(t, 0, AH_OP_RECV_ACTIVATION, "recv_activation", 31, 7, 64, 2, 0, 0);
    add(t, 1, AH_OP_FORWARD, "forward", 31, 9, 0, 1, 1, 1);
    add(t, 1, AH_OP_SEND_ACTIVATION, "send_activation", 35, 1, 64, 2, 0, 0);
    add(t, 2, AH_OP_SEND_WAIT, "send_wait", 30, 3, 0, 2, 2, 0);
    const double start[4] = {40, 45, 41, 45}, end[4] = {50, 50, 50, 52};
    for (int r = 0; r < 4; r++) {
        add(t, r, AH_OP_STEP_SYNC, "step_sync", start[r], end[r] - start[r], 16, 4, 0, 0);
        add(t, r, AH_OP_OPTIMIZER, "optimizer", 53, 2, 0, 1, r, 0);
        add(t, r, AH_OP_OPTIMIZER, "optimizer", 75, 1, 0, 1, r, 1);
    }
    add(t, 0, AH_OP_DP_ALLREDUCE, A, 60, 10, 4000, 2, 0, 1);
    add(t, 1, AH_OP_DP_ALLREDUCE, A, 58, 11, 4000, 2, 0, 1);
}

typedef struct {
    ah_trace_file t;
    ah_trace_analysis a;
    ah_trace_stack s;
} stack_fixture;

/* the breakdown of the hand-built trace with a forced algorithm (0: the rules) and a profile (NULL: default) */
static void stack_of(stack_fixture *f, int forced_alg, const char *profile) {
    ah_trace_file *t = &f->t;
    ah_trace_analysis *a = &f->a;
    ah_trace_stack *s = &f->s;
    build_trace(t);
    ah_trace_options o = {0};
    char err[512];
    assert_int_equal(ah_trace_analyze(t, &o, a, err, sizeof err), 0);
    ah_stack_options so = {.comm_profile = profile, .mpi_algorithm = forced_alg,
                           .mpi_algorithm_from = forced_alg ? "the test" : NULL};
    if (ah_trace_stack_build(a, &so, s, err, sizeof err) != 0)
        fail_msg("%s", err);
}

static void free_all(stack_fixture *f) {
    ah_trace_stack_free(&f->s);
    ah_trace_analysis_free(&f->a);
    ah_trace_file_free(&f->t);
}

static const char *unit_profile(char *path) {
    write_tmp("{\"format\": \"autohet-comm-profile\", \"fits\": [{\"op\": \"latency\", \"link_class\": "
              "\"intra-node\", \"alpha_us\": 2, \"beta_GBps\": 1}]}",
              path);
    return path;
}

static void hand_built_instances(void **state) {
    (void)state;
    stack_fixture f;
    const ah_trace_stack *s = &f.s;
    char path[64];
    stack_of(&f, 0, unit_profile(path));
    unlink(path);
    /* sites in kind order: the bucket all-reduce (dp) before step_sync */
    assert_int_equal(s->n_sites, 2);
    assert_int_equal(s->n_inst, 3);
    assert_string_equal(s->sites[0].site, "dp_allreduce layers 0-1");
    assert_string_equal(s->sites[1].site, "step_sync");
    const struct {
        double measured, skew, mpi, residual;
        int straggler, step, seq;
        ah_mpi_alg alg;
    } want[3] = {{21, 4, 6, 11, 1, 0, 0, AH_MPI_AR_RECURSIVE_DOUBLING},
                 {12, 2, 6, 4, 0, 1, 1, AH_MPI_AR_RECURSIVE_DOUBLING},
                 {12, 5, 4.032, 2.968, 1, 0, 0, AH_MPI_AR_RECURSIVE_DOUBLING}};
    for (int i = 0; i < 3; i++) {
        const ah_stack_instance *in = &s->inst[i];
        assert_double_equal(in->measured_us, want[i].measured, 1e-12);
        assert_double_equal(in->skew_us, want[i].skew, 1e-12);
        assert_double_equal(in->mpi_us, want[i].mpi, 1e-12);
        assert_double_equal(in->residual_us, want[i].residual, 1e-12);
        assert_double_equal(in->skew_us + in->mpi_us + in->residual_us, in->measured_us, 1e-12);
        assert_int_equal(in->straggler, want[i].straggler);
        assert_int_equal(in->step, want[i].step);
        assert_int_equal(in->seq, want[i].seq);
        assert_int_equal(in->algorithm, want[i].alg);
    }
    /* members by rank with their arrival waits: step_sync waits 5, 0, 4, 0 */
    const ah_stack_instance *b = &s->inst[2];
    assert_int_equal(b->n_members, 4);
    const double waits[4] = {5, 0, 4, 0};
    for (int k = 0; k < 4; k++) {
        assert_int_equal(s->members[b->first_member + k].rank, k);
        assert_double_equal(s->members[b->first_member + k].wait_us, waits[k], 1e-12);
    }
    /* site sums; the straggler of the bucket is a tie (1 and 0 once each): the lowest rank */
    assert_int_equal(s->sites[0].instances, 2);
    assert_double_equal(s->sites[0].measured_us, 33, 1e-12);
    assert_double_equal(s->sites[0].skew_us, 6, 1e-12);
    assert_double_equal(s->sites[0].mpi_us, 12, 1e-12);
    assert_double_equal(s->sites[0].residual_us, 15, 1e-12);
    assert_int_equal(s->sites[0].straggler, 0);
    assert_int_equal(s->sites[0].straggler_count, 1);
    assert_int_equal(s->sites[1].straggler, 1);
    assert_double_equal(s->sites[0].bytes_per_call, 4000, 1e-12);
    char algs[128];
    assert_string_equal(ah_stack_site_algorithms(&s->sites[0], algs, sizeof algs), "recursive_doubling");
    free_all(&f);
}

static void hand_built_ranks(void **state) {
    (void)state;
    stack_fixture f;
    const ah_trace_stack *s = &f.s;
    stack_of(&f, 0, NULL);
    assert_int_equal(s->n_ranks, 4);
    /* rank 0: communication [10,30] + [31,38] + [40,50] + [60,70] = 47 us, none under compute; idle:
     *   receive 7, collective 4 (waiting for rank 1 in seq 0), step 5; the straggler of seq 1
     * rank 1: [14,31] + [35,36] + [45,50] + [58,69] = 34 us, the send (1 us) under compute; idle collective 2
     * rank 2: send_wait [30,33] + step_sync [41,50]; idle step = send_wait 3 + its step_sync wait 4
     * rank 3: step_sync [45,52], no wait */
    static const double want[4][6] = {
        /* comm, hidden, idle recv, idle collective, idle step, straggles */
        {47, 0, 7, 4, 5, 1},
        {34, 1, 0, 2, 0, 2},
        {12, 0, 0, 0, 7, 0},
        {7, 0, 0, 0, 0, 0},
    };
    for (int r = 0; r < 4; r++) {
        const ah_stack_rank *q = &s->ranks[r];
        const double got[6] = {q->comm_us, q->hidden_us, q->idle_recv_us, q->idle_collective_us, q->idle_step_us,
                               q->straggles};
        for (int k = 0; k < 6; k++)
            if (fabs(got[k] - want[r][k]) > 1e-12)
                fail_msg("rank %d, field %d: got %.17g, want %g", r, k, got[k], want[r][k]);
        assert_double_equal(q->overlap_pct, 100 * want[r][1] / want[r][0], 1e-12);
    }
    /* without a profile: the stated default link (5 us, 10 GB/s) */
    assert_double_equal(s->inst[0].mpi_us, 5 + 4000 / 1e4, 1e-12);
    assert_double_equal(s->inst[0].skew_us + s->inst[0].mpi_us + s->inst[0].residual_us, 21, 1e-12);
    assert_contains(s->link.source, "default");
    free_all(&f);
}

static void forced_algorithm(void **state) {
    (void)state;
    stack_fixture f;
    const ah_trace_stack *s = &f.s;
    char path[64];
    /* coll_tuned_allreduce_algorithm 4 (ring): the bucket costs 2 t(2000) = 8, residual 21 - 4 - 8 = 9;
     * step_sync (2 doubles on 4 ranks) runs recursive doubling inside the ring */
    stack_of(&f, AH_MPI_AR_RING, unit_profile(path));
    unlink(path);
    assert_int_equal(s->inst[0].algorithm, AH_MPI_AR_RING);
    assert_double_equal(s->inst[0].mpi_us, 8, 1e-12);
    assert_double_equal(s->inst[0].residual_us, 9, 1e-12);
    assert_int_equal(s->inst[2].algorithm, AH_MPI_AR_RING);
    assert_int_equal(s->inst[2].ran, AH_MPI_AR_RECURSIVE_DOUBLING);
    assert_double_equal(s->inst[2].mpi_us, 4.032, 1e-12);
    char algs[128];
    assert_string_equal(ah_stack_site_algorithms(&s->sites[1], algs, sizeof algs), "ring:recursive_doubling");
    assert_contains(s->mpi_source, "ring");
    assert_contains(s->mpi_source, "the test");
    free_all(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(decision_rules),       cmocka_unit_test(algorithm_costs),
        cmocka_unit_test(link_model_from_profile), cmocka_unit_test(hand_built_instances),
        cmocka_unit_test(hand_built_ranks),     cmocka_unit_test(forced_algorithm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
