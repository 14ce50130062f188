/* Heartbeats of `autohet run`'s ranks (docs/recovery.md, "Liveness"): a host
 * that dies silently (hung, its processes stopped, its network cut) ends no
 * process and sends no signal, so the controller would wait on the job for
 * ever. Every rank runs a thread that sends a UDP datagram to the controller
 * every AH_HEARTBEAT_PERIOD_S, over the network the training traffic uses
 * (a file on a shared disk would prove only that the disk is reachable: a
 * partitioned host kept writing it). A thread, so a rank deep in a step or
 * blocked in MPI still beats; SIGSTOP stops it with the rank.
 *
 * The controller listens on a port of its own on every address it has; the
 * ranks get the port, the addresses and a random token in $AUTOHET_BEAT
 * ("TOKEN PORT ADDR[,ADDR...]") and send to every address (the ones a host
 * cannot reach fail at once). The controller notes, by its own clock, when
 * it last heard each rank of the running generation; one silent for longer
 * than --heartbeat-timeout loses its node: cause "partition" when the rank's
 * process is still seen running on this machine (alive, but unheard), else
 * "heartbeat" (stopped, hung, or its host gone). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "elastic/controller.h"
#include "elastic/run_state.h"
#include "util/clock.h"
#include "util/errors.h"

#define AH_HEARTBEAT_PERIOD_S 0.5
#define MAX_BEAT_ADDRS 16

/* ---- the rank's side ---- */

static struct {
    unsigned long long token;
    int gen, rank, n_addr, fd;
    struct sockaddr_in addr[MAX_BEAT_ADDRS];
} beat;

static void *beat_main(void *arg) {
    (void)arg;
    struct timespec period = {0, (long)(AH_HEARTBEAT_PERIOD_S * 1e9)};
    for (unsigned long seq = 0;; seq++) {
        char msg[96];
        int len = snprintf(msg, sizeof msg, "autohet-beat %llx %d %d %lu", beat.token, beat.gen, beat.rank, seq);
        for (int i = 0; i < beat.n_addr; i++)
            sendto(beat.fd, msg, (size_t)len, MSG_DONTWAIT, (const struct sockaddr *)&beat.addr[i],
                   sizeof beat.addr[i]);
        nanosleep(&period, NULL);
    }
    return NULL;
}

/* $AUTOHET_BEAT into `beat`; 0, or -1 if absent or malformed */
static int parse_beat_env(void) {
    const char *env = getenv("AUTOHET_BEAT"), *dir = getenv("AUTOHET_PID_DIR");
    char addrs[1024];
    int port;
    if (!env || !dir || sscanf(env, "%llx %d %1023s", &beat.token, &port, addrs) != 3 || port <= 0 || port > 65535)
        return -1;
    const char *g = strrchr(dir, '-'); /* RUN/pids-G */
    beat.gen = g ? atoi(g + 1) : 0;
    beat.n_addr = 0;
    for (char *save = NULL, *a = strtok_r(addrs, ",", &save); a && beat.n_addr < MAX_BEAT_ADDRS;
         a = strtok_r(NULL, ",", &save)) {
        struct sockaddr_in *sa = &beat.addr[beat.n_addr];
        memset(sa, 0, sizeof *sa);
        sa->sin_family = AF_INET;
        sa->sin_port = htons((unsigned short)port);
        if (inet_pton(AF_INET, a, &sa->sin_addr) == 1)
            beat.n_addr++;
    }
    return beat.n_addr > 0 ? 0 : -1;
}

void ah_run_heartbeat_start(int rank) {
    static int started;
    if (started || parse_beat_env() != 0)
        return;
    started = 1;
    beat.rank = rank;
    beat.fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    pthread_t th;
    if (beat.fd < 0 || pthread_create(&th, NULL, beat_main, NULL) != 0) {
        fprintf(stderr, "autohet train: cannot start the heartbeat thread\n");
        return;
    }
    pthread_detach(th);
}

/* ---- the controller's side ---- */

int run_heartbeat_listen(run_state *s, char *err, size_t errlen) {
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    socklen_t len = sizeof sa;
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
        snprintf(err, errlen, "cannot open the heartbeat socket (%s)", strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    unsigned long long token = 0;
    if (getrandom(&token, sizeof token, 0) != (ssize_t)sizeof token)
        token = (unsigned long long)getpid() * 2654435761ULL ^ (unsigned long long)(ah_wall_clock_s() * 1e6);
    int n = snprintf(s->beat_env, sizeof s->beat_env, "%llx %d ", token, ntohs(sa.sin_port)), first = 1;
    struct ifaddrs *ifa = NULL;
    if (getifaddrs(&ifa) == 0) { /* every IPv4 address of this machine: a host reaches the one on its network */
        int k = 0;
        for (struct ifaddrs *i = ifa; i && k < MAX_BEAT_ADDRS; i = i->ifa_next) {
            char a[INET_ADDRSTRLEN];
            if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET ||
                !inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, a, sizeof a) ||
                n + (int)strlen(a) + 2 >= (int)sizeof s->beat_env)
                continue;
            n += snprintf(s->beat_env + n, sizeof s->beat_env - (size_t)n, "%s%s", first ? "" : ",", a);
            first = 0, k++;
        }
        freeifaddrs(ifa);
    }
    if (first)
        snprintf(s->beat_env + n, sizeof s->beat_env - (size_t)n, "127.0.0.1");
    s->beat_fd = fd;
    s->beat_token = token;
    return 0;
}

/* grows the per-rank tables of generation s->gen to hold `rank` */
static void track_rank(run_state *s, int rank, double now) {
    if (s->beat_gen != s->gen) { /* a new job: forget the last one's ranks */
        s->n_beat = 0;
        s->beat_gen = s->gen;
    }
    if (rank < s->n_beat)
        return;
    s->beat_seen = ah_xrealloc(s->beat_seen, sizeof(double) * (size_t)(rank + 1));
    s->beat_heard = ah_xrealloc(s->beat_heard, sizeof(int) * (size_t)(rank + 1));
    for (int r = s->n_beat; r <= rank; r++)
        s->beat_seen[r] = now, s->beat_heard[r] = 0;
    s->n_beat = rank + 1;
}

/* the datagrams that arrived: who was heard */
static void drain_beats(run_state *s, double now) {
    char msg[128];
    for (;;) {
        ssize_t n = recv(s->beat_fd, msg, sizeof msg - 1, MSG_DONTWAIT);
        if (n <= 0)
            break;
        msg[n] = 0;
        unsigned long long token;
        int gen, rank;
        unsigned long seq;
        if (sscanf(msg, "autohet-beat %llx %d %d %lu", &token, &gen, &rank, &seq) != 4 || token != s->beat_token ||
            gen != s->gen || rank < 0 || rank > 1 << 20)
            continue;
        track_rank(s, rank, now);
        double gap = now - s->beat_seen[rank];
        if (s->beat_heard[rank] && gap > s->beat_max_gap)
            s->beat_max_gap = gap; /* the longest silence of a live rank: what the timeout must exceed */
        s->beat_seen[rank] = now, s->beat_heard[rank] = 1;
    }
}

/* The rank's process as this machine sees it: 'R'unning/'S'leeping..., 'T' stopped, 0 not here. */
static char rank_process_state(const run_state *s, int rank, int *node) {
    char p[1400], name[64] = "", st[64], buf[512];
    long pid = 0;
    snprintf(p, sizeof p, "%s/pids-%d/rank-%d", s->run, s->gen, rank);
    FILE *f = fopen(p, "r");
    int ok = f && fscanf(f, "%ld %63s", &pid, name) == 2;
    if (f)
        fclose(f);
    *node = ok ? run_node_index(s, name) : -1;
    if (!ok || pid <= 1)
        return 0;
    snprintf(st, sizeof st, "/proc/%ld/stat", pid);
    f = fopen(st, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = 0;
    const char *paren = strrchr(buf, ')');
    return paren && paren[1] == ' ' ? paren[2] : 0;
}

/* Declares node `node` lost for its silent rank `rank` (state: its process as seen here). */
static void lose_node(run_state *s, int rank, int node, char state, double now, int *gone, double *t_last, int *any,
                      char *kind, size_t kindlen) {
    int partition = state && state != 'T' && state != 't' && state != 'Z';
    printf("autohet run: %s: rank %d of node %s%s%s silent for %.1f s (timeout %.1f s)%s: the node is lost\n",
           partition ? "partition" : "heartbeat", rank, s->inv.nodes[node].name, s->multi_host ? ", host " : "",
           s->multi_host ? s->inv.nodes[node].host : "", now - s->beat_seen[rank], s->o->heartbeat_s,
           partition ? " though its process runs" : "");
    fflush(stdout);
    if (!*any || s->beat_seen[rank] < *t_last)
        *t_last = s->beat_seen[rank];
    snprintf(kind, kindlen, "%s", partition ? "partition" : "heartbeat");
    gone[node] = 1, *any = 1;
}

int run_poll_heartbeats(run_state *s, int *gone, double *t_last, char *kind, size_t kindlen) {
    double timeout = s->o->heartbeat_s, now = ah_wall_clock_s();
    if (s->beat_fd <= 0 || s->pid <= 0)
        return 0;
    drain_beats(s, now);
    if (!(timeout > 0) || now - s->beat_polled < 0.1)
        return 0;
    s->beat_polled = now;
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/pids-%d", s->run, s->gen);
    DIR *d = opendir(dir); /* every rank that started (wrote its pid file) must be heard */
    int n_sil = 0, cap = 0, *sil_rank = NULL, *sil_node = NULL, heard_node[MAX_NODES] = {0},
        silent_node[MAX_NODES] = {0};
    char *sil_state = NULL;
    for (struct dirent *de; d && (de = readdir(d));) {
        int rank, node;
        char extra;
        if (sscanf(de->d_name, "rank-%d%c", &rank, &extra) != 1 || rank < 0 || rank > 1 << 20)
            continue;
        track_rank(s, rank, now);
        char state = rank_process_state(s, rank, &node);
        if (node < 0 || !s->alive[node] || gone[node])
            continue;
        if (now - s->beat_seen[rank] <= timeout) {
            heard_node[node] = 1;
            continue;
        }
        if (n_sil == cap) {
            cap = cap ? 2 * cap : 16;
            sil_rank = ah_xrealloc(sil_rank, sizeof(int) * (size_t)cap);
            sil_node = ah_xrealloc(sil_node, sizeof(int) * (size_t)cap);
            sil_state = ah_xrealloc(sil_state, (size_t)cap);
        }
        sil_rank[n_sil] = rank, sil_node[n_sil] = node, sil_state[n_sil++] = state;
        silent_node[node] = 1;
    }
    if (d)
        closedir(d);
    /* every node of the job unheard at once: more likely the controller's own link (or a stall of this
     * machine) than every host cut off; wait for them rather than drop them all (one node alone: drop it) */
    int n_nodes = 0, n_silent = 0, any = 0;
    for (int i = 0; i < s->inv.n_nodes; i++)
        n_nodes += heard_node[i] || silent_node[i], n_silent += silent_node[i] && !heard_node[i];
    if (n_silent > 1 && n_silent == n_nodes) {
        if (now - s->beat_all_silent_said > 10) {
            printf("autohet run: heartbeat: every node of the job silent for over %.1f s: waiting (the controller's "
                   "own link or this machine stalls)\n",
                   timeout);
            fflush(stdout);
            s->beat_all_silent_said = now;
        }
    } else {
        for (int k = 0; k < n_sil; k++)
            if (!gone[sil_node[k]])
                lose_node(s, sil_rank[k], sil_node[k], sil_state[k], now, gone, t_last, &any, kind, kindlen);
    }
    free(sil_rank);
    free(sil_node);
    free(sil_state);
    return any;
}
