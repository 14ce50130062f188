/* `autohet run` across hosts (docs/multi-host.md): which host every
 * inventory node is (a hostfile, $SLURM_JOB_NODELIST or the inventory's
 * `host` fields), every generation's rankfile, killing a lost host's ranks
 * through the launcher's remote agent, and the per-host memory and disk
 * tiers. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "autohet/hosts.h"
#include "elastic/run_state.h"
#include "util/clock.h"
#include "util/errors.h"

int run_setup_hosts(run_state *s, char *err, size_t errlen) {
    ah_host_list hl;
    const char *env = getenv("SLURM_JOB_NODELIST");
    int rc = 1;
    if (s->o->hostfile)
        rc = ah_hostfile_load(s->o->hostfile, &hl, err, errlen);
    else if (env && *env && !ah_cluster_has_hosts(&s->inv))
        rc = ah_slurm_nodelist_parse(env, "SLURM_JOB_NODELIST", &hl, err, errlen);
    if (rc < 0 && s->o->hostfile) { /* (a Slurm list's errors name it already) */
        char why[512];
        snprintf(why, sizeof why, "%s", err);
        snprintf(err, errlen, "--hostfile: %s", why);
    }
    if (rc < 0)
        return -1;
    if (rc == 0) {
        rc = ah_cluster_apply_hosts(&s->inv, &hl, err, errlen);
        for (int i = 0; i < s->inv.n_nodes && rc == 0; i++)
            s->host_slots[i] = hl.hosts[i].slots, s->host_line[i] = hl.hosts[i].line;
        snprintf(s->host_source, sizeof s->host_source, "%s", hl.source);
        ah_host_list_free(&hl);
        if (rc != 0)
            return -1;
    } else {
        snprintf(s->host_source, sizeof s->host_source, "the inventory's hosts");
    }
    s->multi_host = ah_cluster_has_hosts(&s->inv);
    for (int i = 0; i < s->inv.n_nodes && s->multi_host; i++) {
        if (!s->inv.nodes[i].host[0]) {
            snprintf(err, errlen, "inventory node '%s' names no host, others do: give every node a host",
                     s->inv.nodes[i].name);
            return -1;
        }
        for (int j = 0; j < i; j++)
            if (ah_host_matches(s->inv.nodes[j].host, s->inv.nodes[i].host)) {
                snprintf(err, errlen, "nodes '%s' and '%s' are both on host '%s' (a host is one node)",
                         s->inv.nodes[j].name, s->inv.nodes[i].name, s->inv.nodes[i].host);
                return -1;
            }
        if (s->have_plan) /* a --plan's cluster is the inventory */
            snprintf(s->plan.cluster.nodes[i].host, sizeof s->plan.cluster.nodes[i].host, "%s",
                     s->inv.nodes[i].host);
    }
    return 0;
}

int run_host_index(const run_state *s, const char *name) {
    int i = run_node_index(s, name);
    for (int k = 0; k < s->inv.n_nodes && i < 0 && s->multi_host; k++)
        if (ah_host_matches(s->inv.nodes[k].host, name))
            i = k;
    return i;
}

const char *run_host_of(const run_state *s, const char *node) {
    int i = run_node_index(s, node);
    return i >= 0 ? s->inv.nodes[i].host : "";
}

/* ROOT/HOST/NODE for inventory node i */
static void host_tier_dir(const run_state *s, const char *root, int i, char *out, size_t n) {
    snprintf(out, n, "%s/%s/%s", root, s->inv.nodes[i].host, s->inv.nodes[i].name);
}

void run_node_tier_dir(const run_state *s, int memory, int i, char *out, size_t n) {
    if (s->multi_host)
        host_tier_dir(s, memory ? s->host_mem : s->host_disk, i, out, n);
    else
        snprintf(out, n, "%s/%s", memory ? s->mem : s->disk, s->inv.nodes[i].name);
}

int run_host_tiers_node(run_state *s, int i) {
    const char *roots[2] = {s->host_mem, s->host_disk}, *links[2] = {s->mem, s->disk};
    for (int k = 0; k < 2; k++) {
        char dir[1400], link[1400];
        host_tier_dir(s, roots[k], i, dir, sizeof dir);
        snprintf(link, sizeof link, "%s/%s", links[k], s->inv.nodes[i].name);
        unlink(link);
        /* the directory itself is made on its host by the node's ranks (ah_mkdir_p follows the link) */
        if (symlink(dir, link) != 0)
            return -1;
    }
    return 0;
}

int run_host_tiers(run_state *s, const char *base, char *err, size_t errlen) {
    struct stat sb;
    const char *shm = stat("/dev/shm", &sb) == 0 && S_ISDIR(sb.st_mode) ? "/dev/shm" : "/tmp";
    if (!s->host_mem[0]) /* (a resumed run keeps its own) */
        snprintf(s->host_mem, sizeof s->host_mem, "%s/autohet-%.200s-%ld-memory", shm, base, (long)getpid());
    if (!s->host_disk[0])
        snprintf(s->host_disk, sizeof s->host_disk, "/tmp/autohet-%.200s-%ld-disk", base, (long)getpid());
    /* the engine writes every node's tiers under one directory: RUN/memory/NODE
     * and RUN/disk/NODE point to the node's host's own paths */
    snprintf(s->mem, sizeof s->mem, "%.500s/memory", s->run);
    snprintf(s->disk, sizeof s->disk, "%.500s/disk", s->run);
    if (run_mkdir_p(s->mem) || run_mkdir_p(s->disk)) {
        snprintf(err, errlen, "cannot create the tier directories under %s (%s)", s->run, strerror(errno));
        return -1;
    }
    for (int i = 0; i < s->inv.n_nodes; i++)
        if (run_host_tiers_node(s, i) != 0) {
            snprintf(err, errlen, "cannot create host %s's tier directories under %s and %s (%s)",
                     s->inv.nodes[i].host, s->host_mem, s->host_disk, strerror(errno));
            return -1;
        }
    return 0;
}

void run_wipe_host(run_state *s, const char *node) {
    int i = run_node_index(s, node);
    const char *roots[2] = {s->host_mem, s->host_disk};
    for (int k = 0; k < 2 && i >= 0; k++) {
        char p[1400], aside[1400];
        snprintf(p, sizeof p, "%s/%s", roots[k], s->inv.nodes[i].host);
        snprintf(aside, sizeof aside, "%s/.gone-%d-%s", roots[k], s->n_gone, s->inv.nodes[i].host);
        if (rename(p, aside) != 0)
            run_rm_rf(p);
    }
}

void run_plan_hosts(const run_state *s, char *buf, size_t n) {
    int len = 0;
    buf[0] = 0;
    for (int i = 0; i < s->plan.cluster.n_nodes && len < (int)n; i++)
        if (ah_plan_node_ranks(&s->plan, i) > 0)
            len += snprintf(buf + len, n - (size_t)len, "%s%s", len ? " " : "", s->plan.cluster.nodes[i].host);
}

int run_place_generation(run_state *s, const char *rankfile, int n_servers, char *err, size_t errlen) {
    ah_cluster *c = &s->plan.cluster;
    ah_host_list sub = {ah_xcalloc((size_t)c->n_nodes + 1, sizeof(ah_host)), c->n_nodes, ""};
    snprintf(sub.source, sizeof sub.source, "%s", s->host_source);
    for (int j = 0; j < c->n_nodes; j++) {
        int i = run_node_index(s, c->nodes[j].name);
        snprintf(sub.hosts[j].name, sizeof sub.hosts[j].name, "%s", i >= 0 ? s->inv.nodes[i].host : "");
        sub.hosts[j].slots = i >= 0 ? s->host_slots[i] : 0;
        sub.hosts[j].line = i >= 0 ? s->host_line[i] : 0;
    }
    int rc = ah_hosts_apply(&s->plan, &sub, err, errlen);
    free(sub.hosts);
    if (rc != 0)
        return -1;
    for (int j = 0; j < c->n_nodes; j++) { /* the hosts whose tiers run_remove_host_tiers removes */
        int i = run_node_index(s, c->nodes[j].name);
        if (i >= 0 && ah_plan_node_ranks(&s->plan, j) > 0)
            s->host_used[i] = 1;
    }
    for (int k = 0; k < n_servers; k++) {
        int i = run_host_index(s, s->server_host[k]);
        if (i >= 0)
            s->host_used[i] = 1;
    }
    return ah_rankfile_write_servers(&s->plan, 1, (const char (*)[64])s->server_host, n_servers, rankfile, err,
                                     errlen);
}

/* the launcher's remote agent: Open MPI's plm_rsh_agent; else, inside a Slurm allocation, a job step of
 * one task on the host (srun --overlap: beside the job's own step, which holds the host's CPUs); else ssh */
static int agent_argv(char *buf, size_t n, const char **argv, int max) {
    const char *a = getenv("OMPI_MCA_plm_rsh_agent");
    if (run_in_slurm())
        a = "srun --overlap --quiet -N1 -n1 -w";
    snprintf(buf, n, "%s", a && *a ? a : "ssh");
    char *colon = strchr(buf, ':'); /* "ssh : rsh": the first one */
    if (colon)
        *colon = 0;
    int k = 0;
    for (char *tok = strtok(buf, " \t"); tok && k < max; tok = strtok(NULL, " \t"))
        argv[k++] = tok;
    return k;
}


/* Runs the shell command `cmd` on `host` through the launcher's remote agent
 * (killed after timeout_s: an agent that hangs); its exit status, -1 if it
 * could not run or timed out. The agent's name into *agent (for messages). */
static int run_on_host(const char *host, const char *cmd, double timeout_s, char *agent, size_t agent_len) {
    char abuf[1024];
    const char *argv[20];
    int a = agent_argv(abuf, sizeof abuf, argv, 12);
    snprintf(agent, agent_len, "%s", argv[0]);
    argv[a++] = host;
    if (run_in_slurm()) /* srun runs a program, not a shell line */
        argv[a++] = "/bin/sh", argv[a++] = "-c";
    argv[a++] = cmd, argv[a] = NULL;
    return run_exec(argv, NULL, 0, timeout_s);
}

int run_exec(const char *const *argv, char *out, size_t cap, double timeout_s) {
    int p[2] = {-1, -1};
    if (out && (cap == 0 || pipe(p) != 0))
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        if (out)
            dup2(p[1], 1), close(p[0]), close(p[1]);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    size_t got = 0;
    if (out) { /* read what it writes as it comes, without blocking: the deadline holds for a silent hang too */
        close(p[1]);
        fcntl(p[0], F_SETFL, O_NONBLOCK);
        out[0] = 0;
    }
    int status = 0;
    for (double t0 = ah_wall_clock_s(); pid > 0 && waitpid(pid, &status, WNOHANG) == 0;) {
        ssize_t r;
        while (out && got + 1 < cap && (r = read(p[0], out + got, cap - 1 - got)) > 0)
            got += (size_t)r;
        if (ah_wall_clock_s() - t0 > timeout_s) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            if (out)
                close(p[0]), out[got] = 0;
            return -1;
        }
        run_sleep(0.002);
    }
    if (out) { /* what it wrote before it exited */
        ssize_t r;
        while (got + 1 < cap && (r = read(p[0], out + got, cap - 1 - got)) > 0)
            got += (size_t)r;
        out[got] = 0;
        close(p[0]);
    }
    return pid > 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* 'PATH' quoted for the remote shell (paths with a quote are refused) */
static int quote_path(char *out, size_t n, const char *path) {
    size_t len = strlen(path);
    if (strchr(path, '\'') || len + 3 > n)
        return -1;
    out[0] = '\'';
    memcpy(out + 1, path, len);
    out[len + 1] = '\'', out[len + 2] = 0;
    return 0;
}

int run_kill_host(run_state *s, const char *node) {
    char dir[1200], pids[4096] = "";
    int n = 0, len = 0;
    snprintf(dir, sizeof dir, "%s/pids-%d", s->run, s->gen);
    DIR *d = opendir(dir);
    for (struct dirent *de; d && (de = readdir(d)) && len < (int)sizeof pids - 32;) {
        char p[1500], name[64] = "";
        long pid = 0;
        if (strncmp(de->d_name, "rank-", 5))
            continue;
        snprintf(p, sizeof p, "%s/%.255s", dir, de->d_name);
        FILE *f = fopen(p, "r");
        if (f && fscanf(f, "%ld %63s", &pid, name) == 2 && !strcmp(name, node) && pid > 1)
            len += snprintf(pids + len, sizeof pids - (size_t)len, " %ld", pid), n++;
        if (f)
            fclose(f);
    }
    if (d)
        closedir(d);
    if (n == 0)
        return 0;
    /* on the host: SIGKILL the listed processes that are still ranks of this
     * run (their command line names the run directory) */
    char cmd[6000], agent[256];
    int quoted = !strchr(s->run, '\'');
    snprintf(cmd, sizeof cmd, "for p in%s; do %s%s%skill -9 $p 2>/dev/null; done; true", pids,
             quoted ? "grep -aqF -- '" : "", quoted ? s->run : "", quoted ? "' /proc/$p/cmdline 2>/dev/null && " : "");
    if (run_on_host(run_host_of(s, node), cmd, 10, agent, sizeof agent) < 0) /* the launcher's stop kills them */
        fprintf(stderr, "autohet run: killing the ranks on host %s: the agent %s did not return\n",
                run_host_of(s, node), agent);
    printf("autohet run: host %s: SIGKILL to %d rank%s of node %s through %s\n", run_host_of(s, node), n,
           n == 1 ? "" : "s", node, agent);
    fflush(stdout);
    return n;
}

void run_remove_host_tiers(run_state *s) {
    /* on every surviving host through the agent: its node's directories, then the host's and the roots' if
     * empty; on a lost host that still answers, the roots (its tiers were set aside there when it was lost) */
    for (int i = 0; i < s->inv.n_nodes && s->host_mem[0]; i++) {
        char p[4][1400], q[4][1400], cmd[8192], agent[256];
        host_tier_dir(s, s->host_mem, i, p[0], sizeof p[0]);
        host_tier_dir(s, s->host_disk, i, p[1], sizeof p[1]);
        snprintf(p[2], sizeof p[2], "%s/%s", s->host_mem, s->inv.nodes[i].host);
        snprintf(p[3], sizeof p[3], "%s/%s", s->host_disk, s->inv.nodes[i].host);
        int ok = s->host_used[i] && !strchr(s->host_mem, '\'') && !strchr(s->host_disk, '\'');
        for (int k = 0; k < 4 && ok; k++)
            ok = quote_path(q[k], sizeof q[k], p[k]) == 0;
        if (!ok || (!s->alive[i] && run_in_slurm())) /* a host that left the allocation takes no job step */
            continue;
        if (s->alive[i])
            snprintf(cmd, sizeof cmd, "rm -rf %s %s; rmdir %s %s '%s' '%s' 2>/dev/null; true", q[0], q[1], q[2],
                     q[3], s->host_mem, s->host_disk);
        else /* a lost host that still answers (its tiers were set aside there): the run's roots on it go */
            snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'; true", s->host_mem, s->host_disk);
        if (run_on_host(s->inv.nodes[i].host, cmd, s->alive[i] ? 10 : 3, agent, sizeof agent) != 0 && s->alive[i])
            fprintf(stderr, "autohet run: host %s: removing its tiers through %s failed\n", s->inv.nodes[i].host,
                    agent);
    }
    /* what is left on this machine (the roots; the hosts' directories where they share its filesystem) */
    if (s->host_mem[0])
        run_rm_rf(s->host_mem);
    if (s->host_disk[0])
        run_rm_rf(s->host_disk);
}
