/* Why a generation ended that the controller did not stop (docs/recovery.md,
 * "Faults without notice"): from the watchers' records (rank_watch.c) of
 * RUN/pids-G/end-R, which ranks ended first and how.
 *
 *  - a rank killed by SIGKILL (a reclaim without notice, the OOM killer, a
 *    host's processes killed) loses its node: a membership change, replanned
 *    and recovered like a preemption without notice;
 *  - a rank that left no record while the others were torn down vanished
 *    with its watcher (its host died): its node is lost too;
 *  - inside a Slurm allocation, a host that left the job's node list (a node
 *    failed or set down; run_slurm.c) is lost, whatever the ranks recorded;
 *  - any other end (an error exit, a crash signal, the launcher dying) is a
 *    failure on the same nodes: restarted from the last committed step, and
 *    if it happens again the same way at the same step, after --max-restarts
 *    restarts the run stops with the rank's own message (a bug, not a fault).
 *
 * The launcher tears the job down ~1 s after the first death (SIGTERM, which
 * the watchers record as "teardown", then SIGKILL), so the first records by
 * time are the fault; ranks that ended within FAULT_WINDOW_S of the first
 * SIGKILL are one event (every rank of a node killed together). */
#define _GNU_SOURCE
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "elastic/run_state.h"
#include "util/clock.h"
#include "util/errors.h"

#define FAULT_WINDOW_S 0.5
/* After the first kill is seen, the job runs on this long before the
 * controller stops it, so that ranks killed at the same moment (a reclaim of
 * several nodes, `kill -9 A B`) record their own deaths first: a record
 * written after the controller's stop is taken for that stop's doing. */
#define KILL_GATHER_S 0.2

typedef struct {
    int rank;
    char kind[16];
    int code;
    double t;
    char node[64];
    char last[1001];
} rank_end;

/* The node a rank ran on, from its pid file ("PID NODE ..."); "" if none. */
static void rank_node_name(const run_state *s, int rank, char *out, size_t n) {
    char p[1400], name[64] = "";
    long pid = 0;
    snprintf(p, sizeof p, "%s/pids-%d/rank-%d", s->run, s->gen, rank);
    FILE *f = fopen(p, "r");
    if (f && fscanf(f, "%ld %63s", &pid, name) == 2)
        snprintf(out, n, "%s", name);
    else
        out[0] = 0;
    if (f)
        fclose(f);
}

static int read_end(const run_state *s, const char *dir, const char *name, rank_end *e) {
    char p[1500];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "r");
    if (!f)
        return -1;
    long pid;
    int ok = fscanf(f, "%15s %d %lf %ld", e->kind, &e->code, &e->t, &pid) == 4;
    e->last[0] = 0;
    if (ok && fgetc(f) == '\n' && fgets(e->last, sizeof e->last, f))
        e->last[strcspn(e->last, "\n")] = 0;
    fclose(f);
    rank_node_name(s, e->rank, e->node, sizeof e->node);
    return ok ? 0 : -1;
}

/* the watchers' records of generation s->gen; their count */
static int read_ends(const run_state *s, rank_end **out) {
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/pids-%d", s->run, s->gen);
    DIR *d = opendir(dir);
    int n = 0, cap = 0;
    rank_end *v = NULL;
    for (struct dirent *de; d && (de = readdir(d));) {
        int rank;
        char extra;
        if (sscanf(de->d_name, "end-%d%c", &rank, &extra) != 1 || rank < 0)
            continue;
        if (n == cap)
            v = ah_xrealloc(v, sizeof *v * (size_t)(cap = cap ? 2 * cap : 16));
        v[n].rank = rank;
        if (read_end(s, dir, de->d_name, &v[n]) == 0)
            n++;
    }
    if (d)
        closedir(d);
    *out = v;
    return n;
}

static int is_fault(const rank_end *e) {
    return !strcmp(e->kind, "signal") || (!strcmp(e->kind, "exit") && e->code != 0);
}

static const char *signal_name(int sig) {
    static char buf[32];
    const char *a = sigabbrev_np(sig);
    snprintf(buf, sizeof buf, "SIG%s", a ? a : "?");
    return a ? buf : "an unknown signal";
}

static void add_lost(run_state *s, run_fault *f, const char *node, const char *why) {
    int i = run_node_index(s, node);
    size_t len = strlen(f->cause);
    if (i < 0 || !s->alive[i] || f->gone[i])
        return;
    f->gone[i] = 1;
    f->n_lost++;
    snprintf(f->cause + len, sizeof f->cause - len, " lost %s%s%s%s (%s)", node, s->multi_host ? " (host " : "",
             s->multi_host ? s->inv.nodes[i].host : "", s->multi_host ? ")" : "", why);
}

/* The ranks of this generation that left no record and no longer run: gone
 * with their watcher (a host's processes all killed). Their nodes into f. */
static void add_vanished(run_state *s, const rank_end *e, int n, run_fault *f) {
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/pids-%d", s->run, s->gen);
    DIR *d = opendir(dir);
    for (struct dirent *de; d && (de = readdir(d));) {
        int rank, seen = 0;
        char extra, node[64], why[64];
        if (sscanf(de->d_name, "rank-%d%c", &rank, &extra) != 1)
            continue;
        for (int k = 0; k < n && !seen; k++)
            seen = e[k].rank == rank;
        rank_node_name(s, rank, node, sizeof node);
        snprintf(why, sizeof why, "rank %d ended without a trace", rank);
        if (!seen && node[0])
            add_lost(s, f, node, why);
    }
    if (d)
        closedir(d);
}

static void describe_crash(const run_state *s, const rank_end *e, int status, run_fault *f) {
    if (!e) {
        snprintf(f->cause, sizeof f->cause, "exit: the job ended with %s %d and no rank recorded why",
                 WIFEXITED(status) ? "exit status" : "signal",
                 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        snprintf(f->signature, sizeof f->signature, "job %d step %d", status, s->step);
        f->message[0] = 0;
        return;
    }
    char how[64];
    if (!strcmp(e->kind, "signal"))
        snprintf(how, sizeof how, "was ended by %s", signal_name(e->code));
    else
        snprintf(how, sizeof how, "exited with status %d", e->code);
    snprintf(f->cause, sizeof f->cause, "%s: rank %d on %s %s%s%.300s", !strcmp(e->kind, "signal") ? "signal" : "exit",
             e->rank, e->node[0] ? e->node : "?", how, e->last[0] ? ": " : "", e->last);
    /* "the same way": the same end and message whichever rank says it (a replan renumbers the ranks) */
    char said[1001];
    size_t k = 0;
    for (const char *p = e->last; *p && k < sizeof said - 1;) {
        if (!strncmp(p, "rank ", 5) && p[5] >= '0' && p[5] <= '9') {
            for (p += 5; *p >= '0' && *p <= '9'; p++)
                ;
            k += (size_t)snprintf(said + k, sizeof said - k, "rank *");
        } else {
            said[k++] = *p++;
        }
    }
    said[k < sizeof said ? k : sizeof said - 1] = 0;
    snprintf(f->signature, sizeof f->signature, "%s %d step %d: %s", e->kind, e->code, s->step, said);
    snprintf(f->message, sizeof f->message, "%s", e->last);
    f->exit_code = !strcmp(e->kind, "exit") ? e->code : 128 + e->code;
}

int run_diagnose_end(run_state *s, int status, run_fault *f) {
    memset(f, 0, sizeof *f);
    rank_end *e = NULL;
    int n = read_ends(s, &e);
    /* what ended after the controller stopped the job is its stop, not a fault (across hosts the ranks
     * there die as their launcher's daemons go, some by SIGKILL) */
    for (int k = 0; k < n && s->t_job_stop > 0;)
        if (e[k].t > s->t_job_stop && !strcmp(e[k].kind, "signal"))
            e[k] = e[--n];
        else
            k++;
    const rank_end *first = NULL, *first_kill = NULL, *first_any = NULL;
    for (int k = 0; k < n; k++) {
        if (!first_any || e[k].t < first_any->t)
            first_any = &e[k];
        if (is_fault(&e[k]) && (!first || e[k].t < first->t))
            first = &e[k];
        if (!strcmp(e[k].kind, "signal") && e[k].code == SIGKILL && (!first_kill || e[k].t < first_kill->t))
            first_kill = &e[k];
    }
    f->t_fault = first_any ? first_any->t : 0;
    snprintf(f->cause, sizeof f->cause, "%s:", first_kill ? "signal" : "vanished");
    if (run_slurm_lost(s, f) > 0) { /* a node left the allocation: the others' ends are its consequence */
    } else if (first_kill) { /* a reclaim: every rank killed with it loses its node */
        f->t_fault = first_kill->t;
        for (int k = 0; k < n; k++)
            if (!strcmp(e[k].kind, "signal") && e[k].code == SIGKILL && e[k].t <= first_kill->t + FAULT_WINDOW_S) {
                char why[64];
                snprintf(why, sizeof why, "rank %d, SIGKILL", e[k].rank);
                add_lost(s, f, e[k].node, why);
            }
    } else if (!first && n > 0) {
        add_vanished(s, e, n, f);
    } else if (first) { /* a full tier: the node cannot checkpoint any more, as lost as a reclaimed one. The rank
                          * that hit it may be torn down (its record "teardown") when another rank, told only that
                          * "another rank could not write", exits first: its last line still says why. */
        for (int k = 0; k < n; k++)
            if ((is_fault(&e[k]) || !strcmp(e[k].kind, "teardown")) && strstr(e[k].last, "No space left on device")) {
                if (f->n_lost == 0)
                    snprintf(f->cause, sizeof f->cause, "tier:"), f->t_fault = e[k].t;
                char why[96];
                snprintf(why, sizeof why, "rank %d: its tier is full", e[k].rank);
                add_lost(s, f, e[k].node, why);
            }
    }
    for (int k = 0; k < n && first && !first->last[0]; k++) /* the rank that said why, if one did */
        if (is_fault(&e[k]) && e[k].last[0] && e[k].t <= first->t + FAULT_WINDOW_S)
            first = &e[k];
    if (f->n_lost == 0) {
        describe_crash(s, first, status, f);
        if (first)
            f->t_fault = first->t;
    }
    free(e);
    return f->n_lost > 0;
}

int run_poll_ends(run_state *s) {
    double now = ah_wall_clock_s();
    if (s->pid <= 0 || now - s->ends_polled < 0.01)
        return 0;
    s->ends_polled = now;
    rank_end *e = NULL;
    int n = read_ends(s, &e), any = 0;
    /* a rank killed or crashed: the others would wait for it until the launcher's teardown; an error exit
     * is left to the launcher, so that the other ranks' own records (which may say why) are written */
    for (int k = 0; k < n && !any; k++)
        any = !strcmp(e[k].kind, "signal");
    free(e);
    if (!any)
        return 0;
    if (s->kill_seen == 0)
        s->kill_seen = now;
    return now - s->kill_seen >= KILL_GATHER_S;
}
