/* One MPI job of `autohet run` (docs/recovery.md): launching it with its
 * environment, tailing its step log, killing a node's ranks or all of them,
 * reaping it; a node's tiers (wipe, push to peers with notice). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <mpi.h> /* OPEN_MPI: the launcher this build's MPI comes with */

#include "autohet/schedule.h"
#include "autohet/ckpt.h"
#include "elastic/run_state.h"
#include "util/step_log.h"
#include "util/clock.h"
#include "util/errors.h"
#include "util/atomic_file.h"
#include "util/proc_stat.h"

void run_sleep(double s) {
    struct timespec ts = {(time_t)s, (long)((s - floor(s)) * 1e9)};
    nanosleep(&ts, NULL);
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *f) {
    (void)sb, (void)flag, (void)f;
    remove(p);
    return 0;
}

void run_rm_rf(const char *path) {
    nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int run_mkdir_p(const char *path) {
    return ah_mkdir_p(path);
}

/* The sgemm peak (FLOP/s) rank 0 of an earlier generation measured and wrote
 * in its pid file ("PID NODE PEAK"), newest first; 0 when none did. */
static double known_sgemm_peak(const run_state *s) {
    for (int g = s->gen - 1; g >= 0; g--) {
        char p[1300];
        snprintf(p, sizeof p, "%s/pids-%d/rank-0", s->run, g);
        FILE *f = fopen(p, "r");
        long pid = 0;
        char node[64];
        double peak = 0;
        int got = f ? fscanf(f, "%ld %63s %lf", &pid, node, &peak) : 0;
        if (f)
            fclose(f);
        if (got == 3 && peak > 0 && peak < 1e18)
            return peak;
    }
    return 0;
}

#define MAX_ARGS 160

/* Open MPI's launcher, by the name it was started under (a path's last part) */
static int is_open_mpi_launcher(const char *path) {
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    return !strcmp(base, "mpirun") || !strcmp(base, "mpiexec") || !strcmp(base, "orterun");
}

/* the launcher command's words (a site wrapper may bring its own arguments) */
static int launcher_words(const char *launcher, char *buf, size_t n, const char **argv) {
    snprintf(buf, n, "%s", launcher);
    int a = 0;
    for (char *w = strtok(buf, " \t"); w && a < 16; w = strtok(NULL, " \t"))
        argv[a++] = w;
    if (a == 0)
        argv[a++] = launcher;
    return a;
}

/* Open MPI's mpirun refuses to start ranks as root unless told it may (its environment variables or
 * --allow-run-as-root): a run would fail the same way at every restart, so it is refused before any
 * work. 0, or -1 with err. */
int run_check_launcher(const char *launcher, char *err, size_t errlen) {
#ifdef OPEN_MPI
    if (geteuid() != 0)
        return 0;
    char buf[1024];
    const char *argv[17];
    int a = launcher_words(launcher, buf, sizeof buf, argv);
    if (!is_open_mpi_launcher(argv[0]))
        return 0; /* a site wrapper: its business */
    for (int i = 1; i < a; i++)
        if (!strcmp(argv[i], "--allow-run-as-root"))
            return 0;
    const char *al = getenv("OMPI_ALLOW_RUN_AS_ROOT"), *co = getenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM");
    if (al && co && !strcmp(al, "1") && !strcmp(co, "1"))
        return 0;
    snprintf(err, errlen,
             "--launcher %s: Open MPI does not start ranks as root unless OMPI_ALLOW_RUN_AS_ROOT=1 and "
             "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 are exported (or --launcher \"%s --allow-run-as-root\")",
             launcher, launcher);
    return -1;
#else
    (void)launcher, (void)err, (void)errlen;
    return 0;
#endif
}

/* mpirun's arguments of a job across hosts: the generation's rankfile; the
 * one-sided component that works over TCP (Open MPI 4.1's default, osc/rdma,
 * fails MPI_Win_create_dynamic between hosts with MPI_ERR_WIN; a user's own
 * OMPI_MCA_osc wins); and the environment the ranks need, which a remote
 * agent (ssh) does not carry */
static int host_args(const char **argv, int a, const char *rankfile, int with_peak) {
    extern char **environ;
    argv[a++] = "--rankfile", argv[a++] = rankfile;
    if (!getenv("OMPI_MCA_osc"))
        argv[a++] = "--mca", argv[a++] = "osc", argv[a++] = "pt2pt";
    argv[a++] = "-x", argv[a++] = "AUTOHET_PID_DIR", argv[a++] = "-x", argv[a++] = "AUTOHET_BEAT";
    if (with_peak)
        argv[a++] = "-x", argv[a++] = "AUTOHET_SGEMM_PEAK";
    static char names[32][64];
    int k = 0;
    for (char **e = environ; *e && k < 32; e++) {
        size_t len = strcspn(*e, "=");
        int wanted = !strncmp(*e, "AUTOHET_", 8) || !strncmp(*e, "OMP_NUM_THREADS=", 16) ||
                     !strncmp(*e, "OPENBLAS_NUM_THREADS=", 21);
        if (!wanted || len >= sizeof names[0] || !strncmp(*e, "AUTOHET_PID_DIR=", 16) || !strncmp(*e, "AUTOHET_BEAT=", 13) ||
            !strncmp(*e, "AUTOHET_SGEMM_PEAK=", 19))
            continue;
        snprintf(names[k], sizeof names[k], "%.*s", (int)len, *e);
        argv[a++] = "-x", argv[a++] = names[k++];
    }
    return a;
}

pid_t run_launch(run_state *s, const char *plan_path, const char *recover, char *err, size_t errlen) {
    const ah_run_options *o = s->o;
    char np[16], steps[16], seed[16], lr[32], wu[16], ev[16], ke[16], me[16], mc[16], eb[16], pids[1200];
    snprintf(np, sizeof np, "%d", ah_plan_slots(&s->plan) + (recover ? s->n_servers : 0));
    snprintf(steps, sizeof steps, "%d", o->steps);
    snprintf(seed, sizeof seed, "%d", o->seed);
    snprintf(lr, sizeof lr, "%.9g", o->lr);
    snprintf(wu, sizeof wu, "%d", o->warmup);
    snprintf(ev, sizeof ev, "%d", o->eval_every);
    snprintf(ke, sizeof ke, "%d", o->ckpt_every);
    snprintf(me, sizeof me, "%d", o->mem_every);
    snprintf(mc, sizeof mc, "%d", o->mem_copies);
    snprintf(eb, sizeof eb, "%d", o->eval_batches);
    snprintf(s->glog_path, sizeof s->glog_path, "%s/gen-%d.log", s->run, s->gen);
    snprintf(pids, sizeof pids, "%s/pids-%d", s->run, s->gen);
    run_mkdir_p(pids);
    char shm[700];
    snprintf(shm, sizeof shm, "%s/.mpi-%d", s->mem, s->gen);
    run_mkdir_p(shm);
    char peak[32] = "";
    double known = known_sgemm_peak(s);
    if (known > 0)
        snprintf(peak, sizeof peak, "%.6g", known);
    const char *argv[MAX_ARGS];
    char words[1024], rankfile[1200];
    int a = launcher_words(o->launcher, words, sizeof words, argv);
    argv[a++] = "-np", argv[a++] = np;
    if (s->multi_host) {
        snprintf(rankfile, sizeof rankfile, "%s/rankfile-%d.txt", s->run, s->gen);
        if (run_place_generation(s, rankfile, recover ? s->n_servers : 0, err, errlen) != 0)
            return -1;
        a = host_args(argv, a, rankfile, peak[0] != 0);
        static char hosts[8192];
        if (run_in_slurm() && run_rankfile_hosts(rankfile, hosts, sizeof hosts) == 0)
            argv[a++] = "--host", argv[a++] = hosts; /* daemons on these hosts only, not the whole allocation */
    } else {
        argv[a++] = "--bind-to", argv[a++] = "none";
    }
    argv[a++] = o->self_exe, argv[a++] = "train";
    if (o->model_arg) /* (else the plan's own model) */
        argv[a++] = "--model", argv[a++] = o->model_arg;
    argv[a++] = "--data", argv[a++] = o->data;
    argv[a++] = "--plan", argv[a++] = plan_path, argv[a++] = "--steps", argv[a++] = steps;
    argv[a++] = "--seed", argv[a++] = seed, argv[a++] = "--lr", argv[a++] = lr, argv[a++] = "--warmup",
    argv[a++] = wu;
    argv[a++] = "--eval-every", argv[a++] = ev, argv[a++] = "--log", argv[a++] = s->glog_path;
    if (o->mode == AH_RECOVERY_LAYER_BITMAP)
        argv[a++] = "--ckpt-mem", argv[a++] = s->mem, argv[a++] = "--mem-every", argv[a++] = me,
        argv[a++] = "--mem-copies", argv[a++] = mc;
    argv[a++] = "--ckpt-dir", argv[a++] = s->disk, argv[a++] = "--ckpt-every", argv[a++] = ke;
    argv[a++] = "--ckpt-cloud", argv[a++] = s->cloud;
    if (o->val_data)
        argv[a++] = "--val-data", argv[a++] = o->val_data;
    if (o->data_dtype)
        argv[a++] = "--data-dtype", argv[a++] = o->data_dtype;
    if (o->devices)
        argv[a++] = "--devices", argv[a++] = o->devices;
    if (o->eval_batches > 0)
        argv[a++] = "--eval-batches", argv[a++] = eb;
    char trace[1200];
    if (o->trace_path) { /* the controller copies the last generation's to o->trace_path */
        snprintf(trace, sizeof trace, "%s/trace-%d.json", s->run, s->gen);
        argv[a++] = "--trace", argv[a++] = trace;
    }
    if (recover)
        argv[a++] = "--recover", argv[a++] = recover;
    else if (o->init_from) /* a start from no checkpoint: the pretrained weights, as the first generation */
        argv[a++] = "--init-from", argv[a++] = o->init_from;
    argv[a] = NULL;
    fflush(stdout);
    fflush(stderr);
    s->t_spawn = ah_wall_clock_s();
    pid_t controller = getpid(), pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "cannot start %s (%s)", o->launcher, strerror(errno));
        return -1;
    }
    if (pid == 0) {
        setpgid(0, 0); /* the job is one process group: stopping it stops every rank */
        /* the job dies with its controller (its ranks with their launcher): never two generations, never a
         * job that trains unsupervised; `autohet run --resume` continues from the tiers */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != controller)
            _exit(127);
        setenv("AUTOHET_PID_DIR", pids, 1);
        setenv("AUTOHET_BEAT", s->beat_env, 1); /* where the ranks' heartbeats go (heartbeat.c) */
        if (peak[0]) /* the ranks need not benchmark sgemm again */
            setenv("AUTOHET_SGEMM_PEAK", peak, 1);
        else
            unsetenv("AUTOHET_SGEMM_PEAK");
        setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 0); /* virtual nodes share this machine's cores */
        /* Open MPI's default PML selection opens and probes every component
         * (cm with its PSM/OFI transports) before it settles on ob1, 0.2 s of
         * every rank's MPI_Init here; ob1 runs over shared memory and TCP alike.
         * A user's own choice wins. */
        setenv("OMPI_MCA_pml", "ob1", 0);
        /* MPI's shared-memory segments of this job go where the controller
         * can remove them: SIGKILLed ranks never clean up after themselves */
        setenv("OMPI_MCA_btl_vader_backing_directory", shm, 1);
        /* and so do the one-sided windows' (the recovery's peer fetch): osc/rdma and osc/sm put their
         * shared-memory segments in /dev/shm unless told; on one host the directory above is there */
        if (!s->multi_host) {
            setenv("OMPI_MCA_osc_rdma_backing_directory", shm, 1);
            setenv("OMPI_MCA_osc_sm_backing_directory", shm, 1);
        }
        execvp(argv[0], (char *const *)argv);
        fprintf(stderr, "autohet run: cannot execute %s (%s)\n", argv[0], strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid);
    s->glog = NULL;
    s->step = s->start_step; /* nothing logged yet: the step it starts from */
    s->t_job_stop = 0;
    s->kill_seen = 0;
    return pid;
}

/* new complete lines of the job's step log go to --log; returns lines read */
int run_tail_log(run_state *s) {
    if (!s->glog && !(s->glog = fopen(s->glog_path, "r")))
        return 0;
    char line[2048];
    int got = 0;
    for (;;) {
        long pos = ftell(s->glog);
        if (!fgets(line, sizeof line, s->glog))
            break;
        size_t len = strlen(line);
        if (len == 0 || line[len - 1] != '\n') { /* a partial line: read it again later */
            fseek(s->glog, pos, SEEK_SET);
            break;
        }
        int step = ah_step_log_line_step(line);
        if (step >= 0)
            s->step = step;
        /* every step once: a generation resumed after a loss trains (and logs) its lost steps again */
        if (s->log && !(step >= 0 && step <= s->log_skip_through)) {
            fputs(line, s->log);
            fflush(s->log);
            if (step >= 0)
                s->log_skip_through = step;
        }
        got++;
    }
    clearerr(s->glog);
    return got;
}

/* Waits for the job to exit; after `grace` seconds the whole process group is
 * killed. Returns the wait status. */
int run_reap(run_state *s, double grace) {
    int status = 0;
    double t0 = ah_wall_clock_s();
    for (;;) {
        pid_t r = waitpid(s->pid, &status, WNOHANG);
        if (r == s->pid || (r < 0 && errno != EINTR))
            break;
        if (ah_wall_clock_s() - t0 > grace) {
            killpg(s->pid, SIGKILL);
            waitpid(s->pid, &status, 0);
            break;
        }
        run_sleep(0.002);
    }
    run_clean_job(s, grace);
    return status;
}

/* After the job's launcher ended: its process group and every rank named in
 * the pid files killed, then its shared-memory segments removed. */
void run_clean_job(run_state *s, double grace) {
    if (s->pid > 0)
        killpg(s->pid, SIGKILL); /* stragglers of the group, if any */
    /* and ranks the launcher put in groups of their own, until none runs any
     * more (gone, or exiting: its command line reads empty once its memory
     * is released), so that no dying rank still writes a tier the recovery
     * reads; the kernel may go on freeing their memory meanwhile */
    for (double t1 = ah_wall_clock_s(); run_kill_ranks(s, NULL) > 0 && ah_wall_clock_s() - t1 < grace;)
        run_sleep(0.002);
    s->pid = -1;
    char shm[700];
    snprintf(shm, sizeof shm, "%s/.mpi-%d", s->mem, s->gen);
    run_rm_rf(shm);
}

/* the process is still a rank of this run (its command line names the run
 * directory), not an unrelated process that reused the pid */
static int is_our_rank(const run_state *s, pid_t pid) {
    char p[64], buf[8192];
    snprintf(p, sizeof p, "/proc/%ld/cmdline", (long)pid);
    FILE *f = fopen(p, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    for (size_t i = 0; i < n; i++)
        if (!buf[i])
            buf[i] = ' ';
    buf[n] = 0;
    return strstr(buf, s->run) != NULL;
}

int run_kill_ranks(run_state *s, const char *node) {
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/pids-%d", s->run, s->gen);
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *de; d && (de = readdir(d));) {
        if (strncmp(de->d_name, "rank-", 5))
            continue;
        char p[2400], name[64] = "";
        long pid = 0;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        FILE *f = fopen(p, "r");
        if (f && fscanf(f, "%ld %63s", &pid, name) == 2 && (!node || !strcmp(name, node)) && pid > 1 &&
            is_our_rank(s, (pid_t)pid)) {
            kill((pid_t)pid, SIGKILL);
            n++;
        }
        if (f)
            fclose(f);
    }
    if (d)
        closedir(d);
    return n;
}

void run_clear_pins(run_state *s) {
    /* across hosts a host's tiers are its own: its ranks' next commit sweeps the pins of the writers that
     * are gone (ah_ckpt_sweep) */
    for (int i = 0; i < s->inv.n_nodes && !s->multi_host; i++) {
        char d[700];
        snprintf(d, sizeof d, "%s/%s", s->mem, s->inv.nodes[i].name);
        DIR *dh = opendir(d);
        for (struct dirent *de; dh && (de = readdir(dh));)
            if (!strncmp(de->d_name, ".pin-", 5)) {
                char p[1000];
                snprintf(p, sizeof p, "%s/%.255s", d, de->d_name);
                unlink(p);
            }
        if (dh)
            closedir(dh);
    }
}

/* A preempted node's memory and disk tiers are gone at once: renamed aside
 * (".gone-*", which no manifest loader or restore lists), so the recovery
 * cannot see them; deleting their files (a few hundred ms of tmpfs and ext4
 * work here, nothing a real cluster spends when an instance vanishes) waits
 * until the recovery has finished (run_purge_gone). */
void run_wipe_node(run_state *s, const char *node) {
    const char *tiers[2] = {s->mem, s->disk};
    for (int k = 0; k < 2; k++) {
        char p[2400], aside[2400];
        snprintf(p, sizeof p, "%s/%s", tiers[k], node);
        snprintf(aside, sizeof aside, "%s/.gone-%d-%s", tiers[k], s->n_gone, node);
        if (rename(p, aside) != 0) /* missing: nothing to wipe; else delete it now */
            run_rm_rf(p);
    }
    if (s->multi_host) /* the links above pointed to the host's own directories */
        run_wipe_host(s, node);
    for (int k = 0; k < 2; k++) { /* and what its ranks reported of them */
        char p[2400];
        snprintf(p, sizeof p, "%s/.reported/%s", tiers[k], node);
        run_rm_rf(p);
    }
    s->n_gone++;
}

void run_purge_gone(run_state *s) {
    const char *tiers[4] = {s->mem, s->disk, s->host_mem, s->host_disk};
    for (int k = 0; k < (s->multi_host ? 4 : 2) && s->n_gone; k++) {
        DIR *d = opendir(tiers[k]);
        for (struct dirent *de; d && (de = readdir(d));)
            if (!strncmp(de->d_name, ".gone-", 6)) {
                char p[2400];
                snprintf(p, sizeof p, "%s/%.255s", tiers[k], de->d_name);
                run_rm_rf(p);
            }
        if (d)
            closedir(d);
    }
    s->n_gone = 0;
}

/* With notice, a leaving node pushes its memory-tier shards to a peer that
 * stays (round-robin over the nodes with ranks), which lists them in its own
 * memory manifest. The job is stopped, so no one else writes the manifests.
 * Returns the bytes pushed. Not across hosts (their tiers are their own). */
double run_push_to_peers(run_state *s, const int *gone) {
    int peers[MAX_NODES], np = 0, rr = 0;
    if (s->multi_host) { /* the controller does not copy between hosts' tiers (docs/multi-host.md) */
        printf("autohet run: notice across hosts: no push to peers (the layers come from the survivors' own "
               "tiers, peers and the cloud)\n");
        return 0;
    }
    for (int i = 0; i < s->inv.n_nodes; i++)
        if (s->alive[i] && !gone[i] && ah_plan_uses_node(&s->plan, s->inv.nodes[i].name))
            peers[np++] = i;
    for (int i = 0; i < s->inv.n_nodes && !np; i++)
        if (s->alive[i] && !gone[i])
            peers[np++] = i;
    double bytes = 0;
    char err[512];
    for (int i = 0; i < s->inv.n_nodes && np; i++) {
        if (!gone[i] || !s->alive[i])
            continue;
        char src[700];
        snprintf(src, sizeof src, "%s/%s", s->mem, s->inv.nodes[i].name);
        ah_manifest m;
        if (ah_manifest_load(src, &m, err, sizeof err) != 0)
            continue;
        for (int k = 0; k < m.n; k++) {
            const ah_manifest_entry *e = &m.e[k];
            const char *peer = s->inv.nodes[peers[rr++ % np]].name;
            char dst[700], from[1000], to[1000];
            snprintf(dst, sizeof dst, "%s/%s", s->mem, peer);
            run_mkdir_p(dst);
            ah_manifest pm;
            if (ah_manifest_load(dst, &pm, err, sizeof err) != 0)
                continue;
            const ah_manifest_entry *have = NULL; /* the peer's newest copy of this shard (same degree) */
            for (int q = 0; q < pm.n; q++)
                if (pm.e[q].layer == e->layer && pm.e[q].tp_rank == e->tp_rank &&
                    pm.e[q].tp_degree == e->tp_degree && (!have || pm.e[q].step > have->step))
                    have = &pm.e[q];
            if (!have || have->step < e->step) {
                snprintf(from, sizeof from, "%s/%s", src, e->file);
                snprintf(to, sizeof to, "%s/%s", dst, e->file);
                const unsigned char *map = NULL; /* size checked before anything is mapped */
                if (ah_ckpt_map(from, e->bytes, &map, err, sizeof err) == 0 &&
                    ah_write_file_atomic(to, map, e->bytes, err, sizeof err) == 0) {
                    ah_manifest_put(&pm, e);
                    ah_manifest_prune(&pm, e->step);
                    if (ah_manifest_save(dst, &pm, err, sizeof err) == 0)
                        bytes += (double)e->bytes;
                } else {
                    fprintf(stderr, "autohet run: pushing a shard: %s\n", err);
                }
                ah_ckpt_unmap(map, e->bytes);
            }
            ah_manifest_free(&pm);
        }
        ah_manifest_free(&m);
    }
    return bytes;
}

/* pid is this process or one of its ancestors (a resume's own shell and timeout name the run too) */
static int is_self_or_ancestor(pid_t pid) {
    for (pid_t p = getpid(); p > 1;) {
        if (p == pid)
            return 1;
        long ppid;
        if (ah_proc_stat((long)p, NULL, &ppid) != 0)
            return 0;
        p = (pid_t)ppid;
    }
    return 0;
}

int run_kill_run_processes(run_state *s) {
    DIR *d = opendir("/proc");
    int n = 0;
    for (struct dirent *de; d && (de = readdir(d));) {
        char *end;
        long pid = strtol(de->d_name, &end, 10);
        if (*end || pid <= 1 || is_self_or_ancestor((pid_t)pid) || !is_our_rank(s, (pid_t)pid))
            continue;
        char p[64], argv0[512] = "";
        snprintf(p, sizeof p, "/proc/%ld/cmdline", pid);
        FILE *f = fopen(p, "r");
        if (f) {
            size_t k = fread(argv0, 1, sizeof argv0 - 1, f);
            argv0[k] = 0; /* the first NUL ends argv[0] */
            fclose(f);
        }
        const char *base = strrchr(argv0, '/') ? strrchr(argv0, '/') + 1 : argv0;
        /* the run's own programs only: autohet (ranks, watchers) and the MPI launcher */
        if (strstr(base, "autohet") || is_open_mpi_launcher(base) || !strcmp(base, "orted") ||
            !strcmp(base, "prterun")) {
            kill((pid_t)pid, SIGKILL);
            n++;
        }
    }
    if (d)
        closedir(d);
    return n;
}

void run_remove_job_shm(run_state *s) {
    DIR *d = opendir(s->mem);
    for (struct dirent *de; d && (de = readdir(d));)
        if (!strncmp(de->d_name, ".mpi-", 5)) {
            char p[1000];
            snprintf(p, sizeof p, "%s/%.255s", s->mem, de->d_name);
            run_rm_rf(p);
        }
    if (d)
        closedir(d);
}
