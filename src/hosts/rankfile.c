/* Plan nodes on hosts, and the Open MPI rankfile that puts every rank there. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "autohet/hosts.h"
#include "autohet/schedule.h"
#include "util/atomic_file.h"
#include "util/errors.h"

int ah_plan_node_ranks(const ah_plan *p, int node) {
    int n = 0;
    for (int k = 0; k < p->n_replicas; k++)
        for (int j = 0; j < p->replicas[k].n_stages; j++)
            if (p->replicas[k].stages[j].node == node)
                n += p->replicas[k].stages[j].tp;
    return n;
}

void ah_plan_rank_places(const ah_plan *p, ah_rank_place *out) {
    for (int k = 0; k < p->n_replicas; k++)
        for (int j = 0; j < p->replicas[k].n_stages; j++) {
            const ah_stage *s = &p->replicas[k].stages[j];
            for (int t = 0; t < s->tp; t++) {
                int r = ah_slot_rank(p, k, j, t);
                out[r] = (ah_rank_place){r, k, j, t, s->node, s->gpu_first + t};
            }
        }
}

/* "LIST:LINE" for host i of the list (a Slurm list has no lines). */
static const char *host_where(const ah_host_list *l, int i, char *buf, size_t n) {
    if (l->hosts[i].line > 0)
        snprintf(buf, n, "%s:%d", l->source, l->hosts[i].line);
    else
        snprintf(buf, n, "%s (host %d)", l->source, i + 1);
    return buf;
}

/* Puts node nd on host h (at `where` of its list), whose slots must cover
 * the node's `ranks`; a node that names another host is refused. 0 or -1. */
static int apply_host(ah_node *nd, const ah_host *h, int ranks, const char *where, char *err, size_t errlen) {
    if (h->slots > 0 && h->slots < ranks) {
        ah_errf(err, errlen, "%s: slots=%d: host '%s' takes %d rank%s, the plan puts %d on node '%s'", where,
                h->slots, h->name, h->slots, h->slots == 1 ? "" : "s", ranks, nd->name);
        return -1;
    }
    if (nd->host[0] && !ah_host_matches(nd->host, h->name)) {
        ah_errf(err, errlen, "%s: host '%s' for node '%s', which the plan puts on host '%s'", where, h->name,
                nd->name, nd->host);
        return -1;
    }
    if (!nd->host[0])
        snprintf(nd->host, sizeof nd->host, "%s", h->name);
    return 0;
}

int ah_hosts_apply(ah_plan *p, const ah_host_list *hosts, char *err, size_t errlen) {
    char where[320];
    for (int i = 0; i < p->cluster.n_nodes; i++) {
        ah_node *nd = &p->cluster.nodes[i];
        int ranks = ah_plan_node_ranks(p, i);
        if (i >= hosts->n) {
            if (ranks == 0)
                continue; /* a node the plan does not use needs no host */
            ah_errf(err, errlen,
                    "%s: %d host%s for the plan's %d nodes: node '%s' (cluster.nodes[%d]) runs %d rank%s and has "
                    "no host (node i runs on the i-th host)",
                    hosts->source, hosts->n, hosts->n == 1 ? "" : "s", p->cluster.n_nodes, nd->name, i, ranks,
                    ranks == 1 ? "" : "s");
            return -1;
        }
        if (apply_host(nd, &hosts->hosts[i], ranks, host_where(hosts, i, where, sizeof where), err, errlen) != 0)
            return -1;
    }
    return 0;
}

int ah_cluster_apply_hosts(ah_cluster *c, const ah_host_list *hosts, char *err, size_t errlen) {
    char where[320];
    if (hosts->n < c->n_nodes) {
        ah_errf(err, errlen,
                "%s: %d host%s for the inventory's %d nodes: node '%s' (cluster.nodes[%d]) has no host (node i "
                "runs on the i-th host)",
                hosts->source, hosts->n, hosts->n == 1 ? "" : "s", c->n_nodes, c->nodes[hosts->n].name, hosts->n);
        return -1;
    }
    for (int i = 0; i < c->n_nodes; i++)
        if (apply_host(&c->nodes[i], &hosts->hosts[i], 0, host_where(hosts, i, where, sizeof where), err, errlen))
            return -1;
    return 0;
}

/* The first node a rank runs on that names no host, or -1. */
static int hostless_node(const ah_plan *p) {
    for (int i = 0; i < p->cluster.n_nodes; i++)
        if (!p->cluster.nodes[i].host[0] && ah_plan_node_ranks(p, i) > 0)
            return i;
    return -1;
}

int ah_rankfile_write(const ah_plan *p, int cpus_per_gpu, const char *path, char *err, size_t errlen) {
    return ah_rankfile_write_servers(p, cpus_per_gpu, NULL, 0, path, err, errlen);
}

const char *ah_rankfile_slot(int gpu, int cpus_per_gpu, char *buf, size_t n) {
    if (cpus_per_gpu <= 1)
        snprintf(buf, n, "%d", gpu);
    else
        snprintf(buf, n, "%d-%d", gpu * cpus_per_gpu, gpu * cpus_per_gpu + cpus_per_gpu - 1);
    return buf;
}

int ah_rankfile_write_servers(const ah_plan *p, int cpus_per_gpu, const char (*server_hosts)[64], int n_servers,
                              const char *path, char *err, size_t errlen) {
    int bad = hostless_node(p);
    if (bad >= 0) {
        ah_errf(err, errlen,
                "plan: node '%s' (cluster.nodes[%d]) names no host (give a hostfile, a Slurm node list, or "
                "\"host\" in the inventory)",
                p->cluster.nodes[bad].name, bad);
        return -1;
    }
    int n = ah_plan_slots(p);
    ah_rank_place *pl = ah_xcalloc((size_t)n + 1, sizeof *pl);
    ah_plan_rank_places(p, pl);
    size_t cap = (size_t)(n + n_servers) * 128 + 1, off = 0;
    char *text = ah_xcalloc(cap, 1);
    for (int r = 0; r < n + n_servers; r++) {
        /* a server rank runs where the plan puts no rank: the first slot is free */
        const char *host = r < n ? p->cluster.nodes[pl[r].node].host : server_hosts[r - n];
        char slot[32];
        ah_rankfile_slot(r < n ? pl[r].gpu : 0, cpus_per_gpu, slot, sizeof slot);
        int w = snprintf(text + off, cap - off, "rank %d=%s slot=%s\n", r, host, slot);
        off += w > 0 ? (size_t)w : 0;
    }
    free(pl);
    if (off > 0)
        text[off - 1] = '\0'; /* ah_write_text_output ends the last line */
    int rc = ah_write_text_output(path, text, err, errlen);
    free(text);
    return rc;
}
