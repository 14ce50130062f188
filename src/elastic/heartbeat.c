/* Heartbeats of `autohet run`'s ranks (docs/recovery.md): a host that dies
 * silently (hung, its processes stopped, its network cut) ends no process and
 * sends no signal, so the controller would wait on the job for ever. Every
 * rank runs a thread that touches $AUTOHET_PID_DIR/beat-RANK every
 * AH_HEARTBEAT_PERIOD_S (a thread, so a rank deep in a step or blocked in MPI
 * still beats; SIGSTOP stops it with the rank). The controller notes when
 * each file last changed, by its own clock (the hosts' clocks and a shared
 * filesystem's timestamps need not agree with it), and a rank silent for
 * longer than --heartbeat-timeout loses its node. A rank that exits normally
 * removes its file. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "elastic/controller.h"
#include "elastic/run_state.h"
#include "util/clock.h"
#include "util/errors.h"

#define AH_HEARTBEAT_PERIOD_S 0.5

static char beat_path[2048];

static void remove_beat(void) {
    unlink(beat_path);
}

static void *beat_main(void *arg) {
    (void)arg;
    struct timespec period = {0, (long)(AH_HEARTBEAT_PERIOD_S * 1e9)};
    for (;;) {
        int fd = open(beat_path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd >= 0) {
            futimens(fd, NULL); /* now */
            close(fd);
        }
        nanosleep(&period, NULL);
    }
    return NULL;
}

void ah_run_heartbeat_start(int rank) {
    const char *dir = getenv("AUTOHET_PID_DIR");
    if (!dir || beat_path[0])
        return;
    snprintf(beat_path, sizeof beat_path, "%s/beat-%d", dir, rank);
    pthread_t th;
    if (pthread_create(&th, NULL, beat_main, NULL) != 0) {
        fprintf(stderr, "autohet train: cannot start the heartbeat thread\n");
        beat_path[0] = 0;
        return;
    }
    pthread_detach(th);
    atexit(remove_beat);
}

/* ---- the controller's side ---- */

/* The node named in RUN/pids-GEN/rank-R ("PID NODE ..."): its inventory index, or -1. */
static int rank_node(const run_state *s, int rank) {
    char p[1400], name[64] = "";
    long pid = 0;
    snprintf(p, sizeof p, "%s/pids-%d/rank-%d", s->run, s->gen, rank);
    FILE *f = fopen(p, "r");
    int ok = f && fscanf(f, "%ld %63s", &pid, name) == 2;
    if (f)
        fclose(f);
    return ok ? run_node_index(s, name) : -1;
}

int run_poll_heartbeats(run_state *s, int *gone) {
    double timeout = s->o->heartbeat_s, now = ah_wall_clock_s();
    if (!(timeout > 0) || s->pid <= 0 || now - s->beat_polled < 0.1)
        return 0;
    s->beat_polled = now;
    if (s->beat_gen != s->gen) { /* a new job: forget the last one's ranks */
        s->n_beat = 0;
        s->beat_gen = s->gen;
    }
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/pids-%d", s->run, s->gen);
    DIR *d = opendir(dir);
    int any = 0;
    for (struct dirent *de; d && (de = readdir(d));) {
        int rank;
        char extra;
        if (sscanf(de->d_name, "beat-%d%c", &rank, &extra) != 1 || rank < 0 || rank > 1 << 20)
            continue;
        if (rank >= s->n_beat) {
            s->beat_mtime = ah_xrealloc(s->beat_mtime, sizeof(double) * (size_t)(rank + 1));
            s->beat_seen = ah_xrealloc(s->beat_seen, sizeof(double) * (size_t)(rank + 1));
            for (int r = s->n_beat; r <= rank; r++)
                s->beat_mtime[r] = -1, s->beat_seen[r] = now;
            s->n_beat = rank + 1;
        }
        char p[1500];
        struct stat sb;
        snprintf(p, sizeof p, "%s/%.255s", dir, de->d_name);
        if (stat(p, &sb) != 0)
            continue; /* removed: the rank exited */
        double mt = (double)sb.st_mtim.tv_sec + 1e-9 * (double)sb.st_mtim.tv_nsec;
        if (mt != s->beat_mtime[rank]) {
            s->beat_mtime[rank] = mt, s->beat_seen[rank] = now;
            continue;
        }
        int i = now - s->beat_seen[rank] > timeout ? rank_node(s, rank) : -1;
        if (i >= 0 && s->alive[i] && !gone[i]) {
            printf("autohet run: heartbeat: rank %d of node %s%s%s silent for %.1f s (timeout %.1f s): the node "
                   "is lost\n",
                   rank, s->inv.nodes[i].name, s->multi_host ? ", host " : "", s->multi_host ? s->inv.nodes[i].host : "",
                   now - s->beat_seen[rank], timeout);
            fflush(stdout);
            gone[i] = 1, any = 1;
        }
    }
    if (d)
        closedir(d);
    return any;
}
