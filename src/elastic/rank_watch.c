/* How a rank of `autohet run` ended (docs/recovery.md, "Faults without
 * notice"). A rank killed by SIGKILL (a reclaim, the OOM killer) writes
 * nothing, and the launcher tears the rest of the job down at once, so the
 * controller could only learn that *something* died. Under autohet run every
 * rank is therefore started by a small watcher process (a fork of the rank
 * before MPI_Init, so the launcher's pid for the rank is the watcher's): the
 * rank runs as its child with its stderr through a pipe, and when the rank
 * ends the watcher records how in $AUTOHET_PID_DIR/end-R:
 *
 *   KIND CODE T_WALL PID NODE\nLAST_STDERR_LINE\n
 *
 * KIND: "exit" (CODE the exit status), "signal" (CODE the signal), or
 * "teardown" (the launcher stopped the rank because another one ended);
 * T_WALL when it ended (CLOCK_REALTIME: comparable across hosts to NTP's
 * accuracy, far below the launcher's ~1 s teardown). The watcher then ends
 * the same way, so the launcher sees what it always saw. The controller reads
 * the records (run_read_ends) to tell who died first and why. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "elastic/controller.h"
#include "util/atomic_file.h"
#include "util/clock.h"

static volatile sig_atomic_t teardown, forward_sig;
static pid_t launcher_pid;

static void on_stop_signal(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    if (si && si->si_pid == launcher_pid)
        teardown = 1; /* the launcher ends the job: not this rank's fault */
    else
        forward_sig = sig;
}

/* the rank's number from the launcher's environment; -1 if none */
static int launcher_rank(void) {
    const char *names[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        const char *v = getenv(names[i]);
        char *end;
        long r = v ? strtol(v, &end, 10) : -1;
        if (v && *v && !*end && r >= 0 && r < 1 << 24)
            return (int)r;
    }
    return -1;
}

static void write_end(const char *dir, int rank, const char *kind, int code, pid_t child, const char *last) {
    char path[2100], text[1200];
    snprintf(path, sizeof path, "%s/end-%d", dir, rank);
    int len = snprintf(text, sizeof text, "%s %d %.6f %ld\n%.1000s\n", kind, code, ah_wall_clock_s(), (long)child,
                       last);
    char err[256];
    if (ah_write_file_atomic(path, text, (size_t)len, err, sizeof err) != 0)
        fprintf(stderr, "autohet train: %s\n", err);
}

/* copies what the rank wrote to stderr through, keeping its last complete
 * line; the bytes read (0 at the end of the stream) */
static ssize_t pass_stderr(int fd, char *last, size_t lastn, char *cur, size_t *curlen) {
    char buf[4096];
    ssize_t n = read(fd, buf, sizeof buf);
    for (ssize_t off = 0; n > 0 && off < n;) {
        ssize_t w = write(2, buf + off, (size_t)(n - off));
        if (w <= 0)
            break;
        off += w;
    }
    for (ssize_t i = 0; i < n; i++) {
        if (buf[i] == '\n') {
            if (*curlen > 0) {
                cur[*curlen] = 0;
                snprintf(last, lastn, "%s", cur);
            }
            *curlen = 0;
        } else if (*curlen < lastn - 1) {
            cur[(*curlen)++] = buf[i];
        }
    }
    return n;
}

/* ends the watcher the way the rank ended */
static void exit_like(int status) {
    if (WIFSIGNALED(status)) {
        struct rlimit none = {0, 0};
        setrlimit(RLIMIT_CORE, &none);
        prctl(PR_SET_PDEATHSIG, 0);
        signal(WTERMSIG(status), SIG_DFL);
        raise(WTERMSIG(status));
    }
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
}

static void watch(pid_t child, int fd, const char *dir, int rank) {
    char last[1001] = "", cur[1001];
    size_t curlen = 0;
    int status = 0, open_fd = 1, killed = 0;
    for (;;) {
        if (teardown && !killed) {
            /* what the rank has written and not yet been passed on: its last line may say why it was ending */
            for (struct pollfd p = {fd, POLLIN, 0}; open_fd && poll(&p, 1, 0) > 0;)
                if (pass_stderr(fd, last, sizeof last, cur, &curlen) <= 0)
                    open_fd = 0, close(fd);
            write_end(dir, rank, "teardown", SIGTERM, child, last); /* first: the launcher's SIGKILL follows */
            kill(child, SIGKILL);
            killed = 1;
        }
        if (forward_sig) {
            kill(child, forward_sig);
            forward_sig = 0;
        }
        if (open_fd) {
            struct pollfd p = {fd, POLLIN, 0};
            if (poll(&p, 1, 200) > 0 && pass_stderr(fd, last, sizeof last, cur, &curlen) == 0)
                open_fd = 0, close(fd); /* the rank's stderr closed: it is ending */
        }
        pid_t r = waitpid(child, &status, open_fd ? WNOHANG : 0);
        if (r == child)
            break;
        if (r < 0 && errno != EINTR)
            _exit(1);
    }
    if (!killed) {
        if (WIFSIGNALED(status))
            write_end(dir, rank, "signal", WTERMSIG(status), child, last);
        else if (WEXITSTATUS(status) != 0)
            write_end(dir, rank, "exit", WEXITSTATUS(status), child, last);
        else
            write_end(dir, rank, "exit", 0, child, last);
    }
    exit_like(killed ? SIGTERM : status);
}

void ah_run_watch_rank(void) {
    const char *dir = getenv("AUTOHET_PID_DIR");
    int rank = launcher_rank();
    if (!dir || rank < 0 || getenv("AUTOHET_WATCHED"))
        return;
    int sv[2];
    if (pipe2(sv, O_CLOEXEC) != 0)
        return; /* run unwatched: the controller then only sees the launcher's status */
    launcher_pid = getppid();
    fflush(stdout);
    fflush(stderr);
    pid_t watcher = getpid(), child = fork();
    if (child < 0) {
        close(sv[0]), close(sv[1]);
        return;
    }
    if (child == 0) { /* the rank */
        setenv("AUTOHET_WATCHED", "1", 1);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != watcher)
            _exit(1);
        dup2(sv[1], 2);
        close(sv[0]), close(sv[1]);
        return;
    }
    close(sv[1]);
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* the launcher gone: the watcher, and with it the rank */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_stop_signal;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGUSR2, &sa, NULL);
    signal(SIGPIPE, SIG_IGN); /* a launcher that stopped reading must not kill the watcher */
    watch(child, sv[0], dir, rank);
}
