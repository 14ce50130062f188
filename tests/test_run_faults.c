/* How `autohet run` reads the end of a generation from its ranks' watcher records (src/elastic/faults.c), and
 * how it measures a rank's heartbeat loss (src/elastic/heartbeat.c): a
 * full memory tier is a lost node even when the rank that hit it was torn down by the launcher because
 * another rank, told only that "another rank could not write its layers", exited first (the race behind a
 * chaos `tier-full` trial that restarted on the same nodes until --max-restarts). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "elastic/run_state.h"
#include "util/proc_stat.h"

static char dir[64];

static void put(const char *name, const char *text) {
    char p[256];
    snprintf(p, sizeof p, "%s/pids-0/%s", dir, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

/* 4 nodes n0..n3 alive; ranks 0,1 on n0, 2 on n1, 3 on n2, 4 on n3 */
static void make_run(run_state *s, ah_node *nodes) {
    snprintf(dir, sizeof dir, "/tmp/ah_run_faults_XXXXXX");
    assert_non_null(mkdtemp(dir));
    char p[128];
    snprintf(p, sizeof p, "%s/pids-0", dir);
    assert_int_equal(mkdir(p, 0755), 0);
    memset(s, 0, sizeof *s);
    snprintf(s->run, sizeof s->run, "%s", dir);
    for (int i = 0; i < 4; i++) {
        memset(&nodes[i], 0, sizeof nodes[i]);
        snprintf(nodes[i].name, sizeof nodes[i].name, "n%d", i);
        s->alive[i] = 1;
    }
    s->inv.nodes = nodes;
    s->inv.n_nodes = 4;
    const char *on[5] = {"n0", "n0", "n1", "n2", "n3"};
    for (int r = 0; r < 5; r++) {
        char name[32], text[64];
        snprintf(name, sizeof name, "rank-%d", r);
        snprintf(text, sizeof text, "%d %s\n", 1000 + r, on[r]);
        put(name, text);
    }
}

static void clean_run(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* what every rank but the full one says when the snapshot's all-reduce reports a failed write */
static const char *const OTHER_RANK_FAILED =
    "exit 1 100.10 1001\nautohet train: rank 1: checkpoint: another rank could not write its layers\n";

static void test_full_tier_torn_down(void **state) {
    (void)state;
    run_state s;
    ah_node nodes[4];
    make_run(&s, nodes);
    put("end-1", OTHER_RANK_FAILED);
    put("end-4",
        "exit 1 100.11 1004\nautohet train: rank 4: checkpoint: another rank could not write its layers\n");
    put("end-2",
        "teardown 15 100.12 1002\nautohet train: rank 2: checkpoint: /dev/shm/autohet-x/n1/L004-tp0-s30."
        "safetensors.tmp.1002: write failed: No space left on device\n");
    put("end-0", "teardown 15 100.12 1000\n\n");
    put("end-3", "teardown 15 100.12 1003\n\n");
    run_fault f;
    assert_int_equal(run_diagnose_end(&s, 1 << 8, &f), 1);
    assert_int_equal(f.n_lost, 1);
    assert_int_equal(f.gone[1], 1);
    assert_non_null(strstr(f.cause, "tier:"));
    assert_non_null(strstr(f.cause, "lost n1 (rank 2: its tier is full)"));
    clean_run();
}

/* an error exit that says nothing of a full tier is a crash, not a lost node (restarted on the same nodes) */
static void test_error_exit_is_no_loss(void **state) {
    (void)state;
    run_state s;
    ah_node nodes[4];
    make_run(&s, nodes);
    put("end-1", OTHER_RANK_FAILED);
    put("end-2", "teardown 15 100.12 1002\nautohet train: rank 2: step 30\n");
    run_fault f;
    assert_int_equal(run_diagnose_end(&s, 1 << 8, &f), 0);
    assert_int_equal(f.n_lost, 0);
    clean_run();
}

/* A rank's heartbeats (every 0.5 s) through a link that starts letting only one in five through at beat 20,
 * each late (queued behind the throttle): the loss over the last 8 beats shows at the second beat through
 * (half lost), with the losses dated from beat 20's arrival; a window fixed from the rank's first beat (0-7,
 * 8-15, 16-23, ...) would still have held beats 16-20 then and shown 3 of 8 lost. Late beats alone lose
 * nothing; a restarted counter starts over. */
static void test_beat_loss_window(void **state) {
    (void)state;
    run_beat_rank b = {.loss = -1};
    for (unsigned long q = 0; q <= 20; q++) {
        run_beat_heard(&b, q, 0.5 * (double)q, 8);
        if (q < 7)
            assert_true(b.loss < 0); /* fewer than a window so far */
        else
            assert_true(b.loss == 0);
    }
    run_beat_heard(&b, 25, 12.5 + 2.0, 8); /* through the throttle, 2 s late */
    assert_true(b.loss == 0.5);            /* window 18..25: 18, 19, 20, 25 heard */
    assert_true(b.loss_t0 == 10.0);        /* beat 20's arrival: the losses began after it */
    run_beat_heard(&b, 30, 15.0 + 2.0, 8);
    assert_true(b.loss == 0.75); /* window 23..30: 25, 30 */
    assert_true(b.loss_t0 == 10.0);
    run_beat_rank late = {.loss = -1}; /* every beat heard, late and in bursts: no loss */
    for (unsigned long q = 0; q < 16; q++)
        run_beat_heard(&late, q, 3.0 * (double)(q / 4), 8);
    assert_true(late.loss == 0);
    run_beat_heard(&late, 30, 20.0, 8); /* beats 16-29 lost */
    assert_true(late.loss == 7.0 / 8);
    run_beat_heard(&late, 0, 21.0, 8); /* its counter restarted (a new process) */
    assert_true(late.loss < 0 && late.seq_first == 0 && late.seq_last == 0);
}

/* The process states the supervisors read (a zombie is a gone rank): this process, a child that exited and was
 * not reaped yet (Z), and a pid that names no process */
static void test_proc_stat(void **state) {
    (void)state;
    char st = 0;
    long ppid = 0;
    assert_int_equal(ah_proc_stat((long)getpid(), &st, &ppid), 0);
    assert_int_equal(st, 'R');
    assert_int_equal(ppid, (long)getppid());
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0)
        _exit(0);
    for (int i = 0; i < 30000 && !(ah_proc_stat((long)child, &st, &ppid) == 0 && st == 'Z'); i++)
        usleep(1000); /* until the child has exited (30 s at most): Z until it is reaped */
    assert_int_equal(st, 'Z');
    assert_int_equal(ppid, (long)getpid());
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_int_equal(ah_proc_stat((long)child, &st, NULL), -1); /* reaped: gone */
    assert_int_equal(ah_proc_stat(-5, &st, NULL), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_tier_torn_down),
        cmocka_unit_test(test_error_exit_is_no_loss),
        cmocka_unit_test(test_beat_loss_window),
        cmocka_unit_test(test_proc_stat),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
