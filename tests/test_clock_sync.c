/* Clock synchronisation (src/trace/clock_sync.c) on synthetic ping-pongs: a
 * remote clock 1000 s ahead of rank 0's and drifting 20 ppm, rounds with
 * known one-way latencies. The best round is the one with the smallest round
 * trip; its offset is exact when the two directions took as long, off by
 * half their difference (within the residual rtt / 2) otherwise; two
 * measurements give the drift; mapping local readings onto rank 0's timeline
 * recovers the true times and inverts ah_clock_to_local. */
#include "test_util.h"

#include "trace/clock_sync.h"

#define TRUE_OFFSET 1000.0
#define TRUE_DRIFT 20e-6
#define T0 50.0

/* the remote clock at rank 0's time g */
static double remote_at(double g) {
    return g + TRUE_OFFSET + TRUE_DRIFT * (g - T0);
}

/* a round sent at rank 0's time g with one-way times out and back (seconds) */
static ah_clock_round round_at(double g, double out, double back) {
    return (ah_clock_round){g, remote_at(g + out), g + out + back};
}

static void best_round_is_the_shortest(void **state) {
    (void)state;
    ah_clock_round r[5] = {round_at(T0, 30e-6, 5e-6), round_at(T0 + 1e-3, 2e-6, 2e-6),
                           round_at(T0 + 2e-3, 1e-6, 9e-6), round_at(T0 + 3e-3, 2e-6, 2e-6),
                           round_at(T0 + 4e-3, 50e-6, 60e-6)};
    ah_clock_estimate e;
    assert_int_equal(ah_clock_best_round(r, 5, &e), 0);
    /* round 1 (rtt 4 us; round 3 ties and comes later): symmetric, so exact up to the drift over 2 us */
    assert_double_equal(e.rtt_s, 4e-6, 1e-12);
    assert_double_equal(e.residual_s, 2e-6, 1e-12);
    assert_double_equal(e.t_ref, T0 + 1e-3 + 2e-6, 1e-12);
    assert_double_equal(e.offset_s, TRUE_OFFSET + TRUE_DRIFT * (e.t_ref - T0), 1e-9);
    assert_int_equal(e.rounds, 5);
}

static void asymmetric_best_round_within_residual(void **state) {
    (void)state;
    /* 1 us out, 3 us back: the midpoint is 1 us late, the offset 1 us low, within rtt / 2 = 2 us */
    ah_clock_round r[2] = {round_at(T0, 1e-6, 3e-6), round_at(T0 + 1, 10e-6, 10e-6)};
    ah_clock_estimate e;
    assert_int_equal(ah_clock_best_round(r, 2, &e), 0);
    double truth = remote_at(e.t_ref) - e.t_ref;
    assert_double_equal(e.offset_s - truth, -1e-6, 1e-9);
    assert_true(fabs(e.offset_s - truth) <= e.residual_s);
}

static void unusable_rounds(void **state) {
    (void)state;
    ah_clock_round r[3] = {{1, 2, 0.5}, {NAN, 1, 2}, {1, INFINITY, 2}}; /* receive before send, NaN, inf */
    ah_clock_estimate e;
    assert_int_equal(ah_clock_best_round(r, 3, &e), -1);
    assert_int_equal(ah_clock_best_round(r, 0, &e), -1);
    r[2].t_remote = 1.5;
    assert_int_equal(ah_clock_best_round(r, 3, &e), 0);
    assert_double_equal(e.offset_s, 0, 1e-12);
}

/* two measurements 100 s apart, 200 rounds each with latencies of 2-40 us */
static void drift_and_mapping(void **state) {
    (void)state;
    ah_clock_round r[200];
    ah_clock_estimate a, b;
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 200; i++) {
            double out = 2e-6 + 1e-6 * ((i * 37) % 38), back = 2e-6 + 1e-6 * ((i * 11 + 5) % 38);
            r[i] = round_at(T0 + 100.0 * k + 1e-4 * i, out, back);
        }
        assert_int_equal(ah_clock_best_round(r, 200, k ? &b : &a), 0);
    }
    ah_clock_map m;
    ah_clock_fit(&a, &b, &m);
    assert_true(m.residual_s >= a.residual_s && m.residual_s >= b.residual_s);
    assert_double_equal(m.drift, TRUE_DRIFT, 2 * m.residual_s / 100.0);
    /* every event on rank 0's timeline within the residual, from the start to the end measurement */
    for (double g = a.t_ref; g <= b.t_ref; g += 7.3) {
        double local = remote_at(g), mapped = ah_clock_to_ref(&m, local);
        assert_true(fabs(mapped - g) <= m.residual_s + 1e-9);
        assert_double_equal(ah_clock_to_local(&m, mapped), local, 1e-9);
        assert_double_equal(ah_clock_to_ref(&m, ah_clock_to_local(&m, g)), g, 1e-9);
    }
    assert_double_equal(ah_clock_offset_at(&m, m.t_end), m.offset_end_s, 1e-9);
}

/* one measurement: no drift; rank 0 against itself: the identity */
static void single_measurement_and_identity(void **state) {
    (void)state;
    ah_clock_estimate a = {.t_ref = 10, .offset_s = -3.5, .rtt_s = 2e-6, .residual_s = 1e-6, .rounds = 9};
    ah_clock_map m;
    ah_clock_fit(&a, NULL, &m);
    assert_double_equal(m.drift, 0, 0);
    assert_double_equal(ah_clock_to_ref(&m, 106.5), 110, 1e-12);
    assert_int_equal(m.rounds, 9);
    ah_clock_estimate z = {0};
    ah_clock_fit(&z, &z, &m);
    assert_double_equal(ah_clock_to_ref(&m, 12345.678), 12345.678, 0);
    /* an end measurement not after the start gives no drift */
    ah_clock_estimate early = a;
    early.offset_s = 7;
    ah_clock_fit(&a, &early, &m);
    assert_double_equal(m.drift, 0, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(best_round_is_the_shortest),
        cmocka_unit_test(asymmetric_best_round_within_residual),
        cmocka_unit_test(unusable_rounds),
        cmocka_unit_test(drift_and_mapping),
        cmocka_unit_test(single_measurement_and_identity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
