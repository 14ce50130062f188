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
 * "heartbeat" (stopped, hung, or its host gone).
 *
 * A link throttled to nothing lets a beat through now and then, so it is
 * never silent for the timeout. Two more signals find it ("link"): the
 * beats lost (by sequence number) in a window, and the peers a rank's TCP
 * connections have stalled on (TCP_INFO, named in the beat), settled when
 * ambiguous by a bandwidth probe the ranks count and report. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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
#include "util/proc_stat.h"

#define AH_HEARTBEAT_PERIOD_S 0.5
#define MAX_BEAT_ADDRS 16
/* a TCP connection with data unacknowledged this long stalls: on a LAN an
 * ACK takes well under a millisecond, and a busy receiver's kernel still
 * acknowledges what lands in its buffer */
#define AH_TCP_STALL_MS 1000
/* a bandwidth probe: this many datagrams of this size to a rank's beat socket */
#define AH_PROBE_COUNT 16
#define AH_PROBE_BYTES 1200

/* ---- the rank's side ---- */

static struct {
    unsigned long long token;
    int gen, rank, n_addr, fd;
    struct sockaddr_in addr[MAX_BEAT_ADDRS];
    unsigned long probe_round; /* the controller's latest bandwidth probe, and how many of its datagrams came */
    int probe_got;
} beat;

/* The controller's probe datagrams ("autohet-probe TOKEN ROUND", padded)
 * that reached the beat socket; counted per round, reported in the beats. */
static void count_probes(void) {
    char buf[AH_PROBE_BYTES + 64];
    for (;;) {
        ssize_t n = recv(beat.fd, buf, sizeof buf - 1, MSG_DONTWAIT);
        if (n <= 0)
            return;
        buf[n] = 0;
        unsigned long long token;
        unsigned long round;
        if (sscanf(buf, "autohet-probe %llx %lu", &token, &round) != 2 || token != beat.token)
            continue;
        if (round != beat.probe_round)
            beat.probe_round = round, beat.probe_got = 0;
        beat.probe_got++;
    }
}

/* The peers (IPv4, not loopback) that this process's TCP connections to
 * have stalled on: data sent, no ACK for AH_TCP_STALL_MS. MPI's traffic
 * (the TCP transport and the runtime's own) rides on those connections, so
 * a link that passes a heartbeat now and then but nothing in bulk shows
 * here. Appended to `msg` as " stuck=A,B"; the length. */
static int append_stuck_peers(char *msg, int len, size_t cap) {
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    unsigned peers[RUN_MAX_STUCK_PEERS];
    for (struct dirent *de; d && (de = readdir(d)) && n < RUN_MAX_STUCK_PEERS;) {
        int fd = atoi(de->d_name);
        struct tcp_info ti;
        struct sockaddr_in peer;
        socklen_t tl = sizeof ti, pl = sizeof peer;
        if (fd <= 2 || fd == dirfd(d) || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) != 0 ||
            ti.tcpi_state != TCP_ESTABLISHED || ti.tcpi_unacked == 0 || ti.tcpi_last_ack_recv < AH_TCP_STALL_MS ||
            getpeername(fd, (struct sockaddr *)&peer, &pl) != 0 || peer.sin_family != AF_INET ||
            (ntohl(peer.sin_addr.s_addr) >> 24) == 127)
            continue;
        int seen = 0;
        for (int i = 0; i < n; i++)
            seen |= peers[i] == peer.sin_addr.s_addr;
        if (seen)
            continue;
        peers[n++] = peer.sin_addr.s_addr;
        char a[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &peer.sin_addr, a, sizeof a);
        if (len + (int)strlen(a) + 8 < (int)cap)
            len += snprintf(msg + len, cap - (size_t)len, "%s%s", n == 1 ? " stuck=" : ",", a);
    }
    if (d)
        closedir(d);
    return len;
}

static void *beat_main(void *arg) {
    (void)arg;
    struct timespec period = {0, (long)(AH_HEARTBEAT_PERIOD_S * 1e9)};
    for (unsigned long seq = 0;; seq++) {
        char msg[256];
        int len = snprintf(msg, sizeof msg, "autohet-beat %llx %d %d %lu", beat.token, beat.gen, beat.rank, seq);
        len = append_stuck_peers(msg, len, sizeof msg);
        count_probes();
        if (beat.probe_round)
            len += snprintf(msg + len, sizeof msg - (size_t)len, " probe=%lu:%d", beat.probe_round, beat.probe_got);
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

/* grows the per-rank table of generation s->gen to hold `rank` */
static void track_rank(run_state *s, int rank, double now) {
    if (s->beat_gen != s->gen) { /* a new job: forget the last one's ranks */
        s->n_beat = 0;
        s->beat_gen = s->gen;
    }
    if (rank < s->n_beat)
        return;
    s->beat = ah_xrealloc(s->beat, sizeof *s->beat * (size_t)(rank + 1));
    for (int r = s->n_beat; r <= rank; r++)
        s->beat[r] = (run_beat_rank){.seen = now, .loss = -1, .node = -1};
    s->n_beat = rank + 1;
}

/* The beats a loss window spans: one heartbeat timeout's worth, at least 8
 * (a share of fewer says little), at most the 64 a rank's record keeps. */
static unsigned long loss_window(const run_state *s) {
    double n = s->o->heartbeat_s / AH_HEARTBEAT_PERIOD_S;
    return n > 64 ? 64 : n > 8 ? (unsigned long)n : 8;
}

void run_beat_heard(run_beat_rank *b, unsigned long seq, double now, unsigned long window) {
    unsigned long w = window < 64 ? window : 64;
    /* the first beat heard, or the rank's counter restarted (a beat older than the window is no late one) */
    if (!b->heard || seq < b->seq_first || seq + w < b->seq_last)
        b->seq_first = b->seq_last = seq, b->got_bits = 0, b->loss = -1;
    if (seq > b->seq_last) {
        unsigned long d = seq - b->seq_last;
        b->got_bits = d >= 64 ? 0 : b->got_bits << d;
        b->seq_last = seq;
    }
    if (b->seq_last - seq < 64)
        b->got_bits |= 1ull << (b->seq_last - seq), b->heard_at[seq % 64] = now;
    b->seen = now, b->heard = 1;
    if (b->seq_last - b->seq_first + 1 < w)
        return;
    unsigned long long in_window = w == 64 ? ~0ull : (1ull << w) - 1, lost = ~b->got_bits & in_window;
    b->loss = 1.0 - (double)__builtin_popcountll(b->got_bits & in_window) / (double)w;
    b->loss_t0 = now;
    if (!lost)
        return;
    /* the losses began after the last beat heard before the window's oldest lost one (bit i: seq_last - i) */
    unsigned long first_lost = b->seq_last - (unsigned long)(63 - __builtin_clzll(lost));
    for (unsigned long q = first_lost; q-- > b->seq_first && b->seq_last - q < 64;)
        if ((b->got_bits >> (b->seq_last - q)) & 1) {
            b->loss_t0 = b->heard_at[q % 64];
            break;
        }
}

/* Beat `seq` of rank `b` arrived: its silence and its loss over the last window of beats (run_beat_heard). The
 * sequence numbers, not arrival times, measure loss: a rank slowed by a busy CPU beats late but loses nothing;
 * only the network drops datagrams. */
static void heard_beat(run_state *s, run_beat_rank *b, unsigned long seq, double now) {
    double gap = now - b->seen;
    if (b->heard && gap > s->beat_max_gap)
        s->beat_max_gap = gap; /* the longest silence of a live rank: what the timeout must exceed */
    run_beat_heard(b, seq, now, loss_window(s));
}

int run_beat_parse(const char *msg, run_beat_msg *m) {
    memset(m, 0, sizeof *m);
    if (sscanf(msg, "autohet-beat %llx %d %d %lu", &m->token, &m->gen, &m->rank, &m->seq) != 4 || m->rank < 0 ||
        m->rank > 1 << 20)
        return -1;
    const char *p = strstr(msg, " stuck="); /* " stuck=A,B": append_stuck_peers */
    for (p = p ? p + 7 : NULL; p && *p && m->n_stuck < RUN_MAX_STUCK_PEERS;) {
        char a[INET_ADDRSTRLEN];
        size_t len = strcspn(p, ", \n");
        struct in_addr in;
        if (len > 0 && len < sizeof a) {
            memcpy(a, p, len), a[len] = 0;
            if (inet_pton(AF_INET, a, &in) == 1)
                m->stuck[m->n_stuck++] = in.s_addr;
        }
        p += len;
        if (*p != ',')
            break;
        p++;
    }
    const char *pr = strstr(msg, " probe=");
    if (!pr || sscanf(pr, " probe=%lu:%d", &m->probe_round, &m->probe_got) != 2 || m->probe_got < 0 ||
        m->probe_got > AH_PROBE_COUNT)
        m->probe_round = 0, m->probe_got = 0;
    return 0;
}

/* the datagrams that arrived: who was heard */
static void drain_beats(run_state *s, double now) {
    char msg[320];
    for (;;) {
        struct sockaddr_in from;
        socklen_t fl = sizeof from;
        ssize_t n = recvfrom(s->beat_fd, msg, sizeof msg - 1, MSG_DONTWAIT, (struct sockaddr *)&from, &fl);
        if (n <= 0)
            break;
        msg[n] = 0;
        run_beat_msg m;
        if (run_beat_parse(msg, &m) != 0 || m.token != s->beat_token || m.gen != s->gen)
            continue;
        track_rank(s, m.rank, now);
        run_beat_rank *b = &s->beat[m.rank];
        heard_beat(s, b, m.seq, now);
        b->last = m;
        if (!m.n_stuck)
            b->stuck_since = 0;
        else if (b->stuck_since == 0)
            b->stuck_since = now;
        if (fl >= sizeof from && from.sin_family == AF_INET && (ntohl(from.sin_addr.s_addr) >> 24) != 127)
            b->addr = from.sin_addr.s_addr, b->port = from.sin_port;
    }
}

/* The rank's process as this machine sees it: 'R'unning/'S'leeping..., 'T' stopped, 0 not here. */
static char rank_process_state(const run_state *s, int rank, int *node) {
    char p[1400], name[64] = "";
    long pid = 0;
    snprintf(p, sizeof p, "%s/pids-%d/rank-%d", s->run, s->gen, rank);
    FILE *f = fopen(p, "r");
    int ok = f && fscanf(f, "%ld %63s", &pid, name) == 2;
    if (f)
        fclose(f);
    *node = ok ? run_node_index(s, name) : -1;
    if (!ok || pid <= 1)
        return 0;
    char state;
    return ah_proc_stat(pid, &state, NULL) == 0 ? state : 0;
}

/* Declares node `node` lost for its silent rank `rank` (state: its process as seen here). */
static void lose_node(run_state *s, int rank, int node, char state, double now, int *gone, double *t_last, int *any,
                      char *kind, size_t kindlen) {
    int partition = state && state != 'T' && state != 't' && state != 'Z';
    printf("autohet run: %s: rank %d of node %s%s%s silent for %.1f s (timeout %.1f s)%s: the node is lost\n",
           partition ? "partition" : "heartbeat", rank, s->inv.nodes[node].name, s->multi_host ? ", host " : "",
           s->multi_host ? s->inv.nodes[node].host : "", now - s->beat[rank].seen, s->o->heartbeat_s,
           partition ? " though its process runs" : "");
    fflush(stdout);
    if (!*any || s->beat[rank].seen < *t_last)
        *t_last = s->beat[rank].seen;
    snprintf(kind, kindlen, "%s", partition ? "partition" : "heartbeat");
    gone[node] = 1, *any = 1;
}

/* A node one of whose ranks lost over half its heartbeats in its last loss
 * window, while the ranks of as many other nodes or more lost under a tenth:
 * its link fails (throttled to nothing, dropping), though not silent enough
 * for the timeout. node_loss[i]: the worst window loss of node i's ranks, -1
 * unmeasured; node_rank[i]: that rank. Every node lossy at once is this
 * machine's own link: no one is dropped. */
#define AH_LINK_LOSS_BAD 0.5
#define AH_LINK_LOSS_CLEAN 0.1
static void lose_failing_links(run_state *s, const double *node_loss, const int *node_rank, int *gone, double *t_last,
                               int *any, char *kind, size_t kindlen) {
    int n_bad = 0, n_clean = 0;
    for (int i = 0; i < s->inv.n_nodes; i++)
        if (node_loss[i] >= 0 && !gone[i])
            n_bad += node_loss[i] >= AH_LINK_LOSS_BAD, n_clean += node_loss[i] < AH_LINK_LOSS_CLEAN;
    if (n_bad == 0 || n_clean < n_bad)
        return;
    for (int i = 0; i < s->inv.n_nodes; i++) {
        if (!(node_loss[i] >= AH_LINK_LOSS_BAD) || gone[i])
            continue;
        const run_beat_rank *b = &s->beat[node_rank[i]];
        printf("autohet run: link: rank %d of node %s%s%s lost %.0f%% of its heartbeats over %.1f s (%d other node%s "
               "under %.0f%%): its link fails; the node is lost\n",
               node_rank[i], s->inv.nodes[i].name, s->multi_host ? ", host " : "",
               s->multi_host ? s->inv.nodes[i].host : "", 100 * node_loss[i], b->seen - b->loss_t0, n_clean,
               n_clean == 1 ? "" : "s", 100 * AH_LINK_LOSS_CLEAN);
        fflush(stdout);
        if (!*any || b->loss_t0 < *t_last)
            *t_last = b->loss_t0; /* detection counts from when the losses began */
        snprintf(kind, kindlen, "link");
        gone[i] = 1, *any = 1;
    }
}

/* the node whose ranks' beats come from address `addr` (-1: none) */
static int node_of_addr(const run_state *s, unsigned addr) {
    for (int r = 0; r < s->n_beat; r++)
        if (s->beat[r].addr == addr && s->beat[r].node >= 0)
            return s->beat[r].node;
    return -1;
}

/* The worst share of heartbeats lost by node `node`'s ranks: over their last loss window, or all their
 * beats so far while they have fewer. */
static double node_beat_loss(const run_state *s, int node) {
    double worst = 0;
    for (int r = 0; r < s->n_beat; r++) {
        const run_beat_rank *b = &s->beat[r];
        if (b->node != node || !b->heard)
            continue;
        double loss = b->loss;
        if (loss < 0) { /* every beat since the first is in the record (fewer than a window < 64) */
            unsigned long span = b->seq_last - b->seq_first + 1;
            loss = 1.0 - (double)__builtin_popcountll(b->got_bits) / (double)span;
        }
        worst = loss > worst ? loss : worst;
    }
    return worst;
}

/* A bandwidth probe of node `node`: AH_PROBE_COUNT datagrams of
 * AH_PROBE_BYTES to each of its ranks' beat sockets, round s->probe_round. */
static void send_probe(run_state *s, int node) {
    s->probed[node] = s->probe_round;
    char buf[AH_PROBE_BYTES];
    memset(buf, '.', sizeof buf);
    int len = snprintf(buf, sizeof buf, "autohet-probe %llx %lu ", s->beat_token, s->probe_round);
    buf[len] = '.';
    for (int r = 0; r < s->n_beat; r++) {
        const run_beat_rank *b = &s->beat[r];
        if (b->node != node || !b->addr || !b->port)
            continue;
        struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = b->port, .sin_addr.s_addr = b->addr};
        for (int k = 0; k < AH_PROBE_COUNT; k++)
            sendto(s->beat_fd, buf, sizeof buf, MSG_DONTWAIT, (const struct sockaddr *)&to, sizeof to);
    }
}

/* How much of the current probe round node `node`'s ranks missed (the
 * worst rank), or -1 while it is under way or the node was not probed in it
 * (the stalled connections changed since: a new round is due): a rank whose
 * beats did not report the round within 2 s received none of it (or its
 * report was lost). */
static double probe_loss(const run_state *s, int node, double now) {
    if (!s->probe_round || s->probed[node] != s->probe_round || now - s->probe_t < 2 * AH_HEARTBEAT_PERIOD_S + 0.2)
        return -1;
    double worst = -1;
    for (int r = 0; r < s->n_beat; r++) {
        const run_beat_rank *b = &s->beat[r];
        if (b->node != node || !b->addr)
            continue;
        double miss = b->last.probe_round == s->probe_round ? 1.0 - (double)b->last.probe_got / AH_PROBE_COUNT
                      : now - s->probe_t >= 2.0                 ? 1.0
                                                                : -1;
        if (miss < 0)
            return -1;
        if (miss > worst)
            worst = miss;
    }
    return worst;
}

/* Of the nodes on stalled connections (edge: nn x nn), the one whose link
 * fails, or -1: the one on more stalled edges than any other, if on two or
 * more (a bad link stalls every connection through it; a healthy peer has
 * only the one to the bad node). Else, of the nodes on the most (the two
 * ends of one connection stalled both ways), the one alone that loses its
 * heartbeats or a bandwidth probe: the controller sends each such node's
 * ranks a burst of datagrams, which a link throttled to nothing drops
 * though it lets a heartbeat through now and then. */
static int pick_stalled_node(run_state *s, const unsigned char *edge, int nn, double now, char *why, size_t whylen) {
    int best_deg = 0, n_best = 0, *deg = ah_xcalloc((size_t)nn, sizeof(int));
    for (int i = 0; i < nn; i++) {
        for (int j = 0; j < nn; j++)
            deg[i] += edge[i * nn + j];
        if (deg[i] > best_deg)
            best_deg = deg[i], n_best = 0;
        n_best += deg[i] == best_deg;
    }
    int pick = -1, n_bad = 0, undecided = 0;
    for (int i = 0; i < nn && best_deg > 0; i++) {
        if (deg[i] != best_deg)
            continue;
        if (n_best == 1 && best_deg >= 2) {
            pick = i, n_bad = 1;
            break;
        }
        double probe = probe_loss(s, i, now);
        undecided |= probe < 0;
        size_t wl = strlen(why);
        if (wl + 80 < whylen) {
            snprintf(why + wl, whylen - wl, "%s%s: %.0f%% of heartbeats lost, probe ", wl ? "; " : "",
                     s->inv.nodes[i].name, 100 * node_beat_loss(s, i));
            wl = strlen(why);
            snprintf(why + wl, whylen - wl, probe < 0 ? "pending" : "%.0f%% lost", 100 * probe);
        }
        if (node_beat_loss(s, i) >= AH_LINK_LOSS_CLEAN || probe >= AH_LINK_LOSS_BAD)
            pick = i, n_bad++;
    }
    if (n_bad != 1 || (undecided && n_best > 1))
        pick = -1; /* the ends of one connection: decided by the probe (again, when it named none or both) */
    if (pick < 0 && best_deg > 0 && (!s->probe_round || now - s->probe_t > 5.0)) {
        s->probe_round++, s->probe_t = now; /* a new probe of the candidates */
        for (int i = 0; i < nn; i++)
            if (deg[i] == best_deg)
                send_probe(s, i);
    }
    free(deg);
    return pick;
}

/* Links that pass a heartbeat now and then but nothing in bulk (a link
 * throttled to nothing): ranks' TCP connections to a peer stalled for the
 * heartbeat timeout. Each stalled connection is an edge between two nodes;
 * the node on more stalled edges than any other, at least two, is the one
 * whose link fails (a bad link stalls every connection through it; one
 * healthy peer's, only the one to the bad node). Its node is lost. */
static void lose_stalled_links(run_state *s, double now, int *gone, double *t_last, int *any, char *kind,
                               size_t kindlen) {
    double timeout = s->o->heartbeat_s;
    int nn = s->inv.n_nodes, sustained = 0;
    for (int r = 0; r < s->n_beat; r++)
        sustained |= s->beat[r].last.n_stuck > 0 && s->beat[r].stuck_since > 0 && now - s->beat[r].stuck_since >= timeout;
    if (!sustained || !s->multi_host)
        return;
    unsigned char *edge = ah_xcalloc((size_t)nn * (size_t)nn, 1);
    double *since = ah_xcalloc((size_t)nn, sizeof(double));
    for (int r = 0; r < s->n_beat; r++) {
        const run_beat_rank *b = &s->beat[r];
        if (b->node < 0 || !s->alive[b->node] || gone[b->node] || !b->last.n_stuck || now - b->stuck_since < timeout)
            continue;
        for (int k = 0; k < b->last.n_stuck; k++) {
            int q = node_of_addr(s, b->last.stuck[k]);
            if (q < 0 || q == b->node || !s->alive[q] || gone[q])
                continue;
            edge[b->node * nn + q] = edge[q * nn + b->node] = 1;
            for (int e = 0; e < 2; e++) {
                int v = e ? q : b->node;
                if (since[v] == 0 || b->stuck_since < since[v])
                    since[v] = b->stuck_since;
            }
        }
    }
    char why[600] = "";
    int best = pick_stalled_node(s, edge, nn, now, why, sizeof why), best_deg = 0;
    for (int j = 0; best >= 0 && j < nn; j++)
        best_deg += edge[best * nn + j];
    if (best >= 0) {
        char peers[400] = "";
        for (int j = 0, len = 0; j < nn && len < (int)sizeof peers - 80; j++)
            if (edge[best * nn + j])
                len += snprintf(peers + len, sizeof peers - (size_t)len, "%s%s", len ? ", " : "", s->inv.nodes[j].name);
        printf("autohet run: link: node %s%s%s: its TCP connections with %d other node%s (%s) stalled (data "
               "unacknowledged for over %.1f s) for %.1f s%s%s%s: its link fails; the node is lost\n",
               s->inv.nodes[best].name, s->multi_host ? ", host " : "", s->multi_host ? s->inv.nodes[best].host : "",
               best_deg, best_deg == 1 ? "" : "s", peers, AH_TCP_STALL_MS / 1000.0, now - since[best],
               why[0] ? " (" : "", why, why[0] ? ")" : "");
        fflush(stdout);
        double t0 = since[best] - AH_TCP_STALL_MS / 1000.0; /* the stall began before it was first reported */
        if (!*any || t0 < *t_last)
            *t_last = t0;
        snprintf(kind, kindlen, "link");
        gone[best] = 1, *any = 1;
    } else if (now - s->beat_stall_said > 10) {
        printf("autohet run: link: TCP connections between nodes stalled for over %.1f s, no node singled out (%s): "
               "waiting\n", timeout, why);
        fflush(stdout);
        s->beat_stall_said = now;
    }
    free(edge);
    free(since);
}

int run_poll_heartbeats(run_state *s, int *gone, double *t_last, char *kind, size_t kindlen) {
    double timeout = s->o->heartbeat_s, now = ah_wall_clock_s();
    if (s->beat_fd <= 0 || s->pid <= 0)
        return 0;
    if (s->beat_gen != s->gen) /* a new job: none of its ranks heard yet */
        s->n_beat = 0, s->beat_gen = s->gen;
    drain_beats(s, now);
    if (!(timeout > 0) || now - s->beat_polled < 0.1)
        return 0;
    s->beat_polled = now;
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/pids-%d", s->run, s->gen);
    DIR *d = opendir(dir); /* every rank that started (wrote its pid file) must be heard */
    int n_sil = 0, cap = 0, *sil_rank = NULL, *sil_node = NULL, heard_node[MAX_NODES] = {0},
        silent_node[MAX_NODES] = {0}, loss_rank[MAX_NODES];
    double node_loss[MAX_NODES];
    for (int i = 0; i < MAX_NODES; i++)
        node_loss[i] = -1;
    char *sil_state = NULL;
    for (struct dirent *de; d && (de = readdir(d));) {
        int rank, node;
        char extra;
        if (sscanf(de->d_name, "rank-%d%c", &rank, &extra) != 1 || rank < 0 || rank > 1 << 20)
            continue;
        track_rank(s, rank, now);
        char state = rank_process_state(s, rank, &node);
        s->beat[rank].node = node;
        if (node < 0 || !s->alive[node] || gone[node])
            continue;
        if (now - s->beat[rank].seen <= timeout) {
            heard_node[node] = 1;
            if (s->beat[rank].loss > node_loss[node])
                node_loss[node] = s->beat[rank].loss, loss_rank[node] = rank;
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
    if (!any)
        lose_failing_links(s, node_loss, loss_rank, gone, t_last, &any, kind, kindlen);
    if (!any)
        lose_stalled_links(s, now, gone, t_last, &any, kind, kindlen);
    free(sil_rank);
    free(sil_node);
    free(sil_state);
    return any;
}
