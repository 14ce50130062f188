/* The start-up check of `autohet train`: every rank runs on its plan node's host. */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "autohet/hosts.h"
#include "autohet/schedule.h"
#include "util/errors.h"

#define NAME_LEN 256

/* Whether one of this machine's interfaces has the address `expected`. */
static int has_address(const char *expected) {
    unsigned char want[16];
    int family;
    if (!ah_host_address(expected, want, &family))
        return 0;
    struct ifaddrs *all = NULL;
    if (getifaddrs(&all) != 0)
        return 0;
    int found = 0;
    for (const struct ifaddrs *i = all; i && !found; i = i->ifa_next) {
        if (i->ifa_addr == NULL || i->ifa_addr->sa_family != family)
            continue;
        if (family == AF_INET)
            found = memcmp(&((const struct sockaddr_in *)(const void *)i->ifa_addr)->sin_addr, want, 4) == 0;
        else
            found = memcmp(&((const struct sockaddr_in6 *)(const void *)i->ifa_addr)->sin6_addr, want, 16) == 0;
    }
    freeifaddrs(all);
    return found;
}

/* This rank's verdict: "" when it is where the plan says (or the plan does
 * not say), else its actual host name. */
static void own_verdict(const ah_plan *p, int rank, char *actual) {
    char name[NAME_LEN] = "";
    actual[0] = '\0';
    ah_slot s;
    if (rank >= ah_plan_slots(p) || ah_rank_slot(p, rank, &s) != 0)
        return; /* a recovery server: on no plan node */
    const ah_node *nd = &p->cluster.nodes[p->replicas[s.replica].stages[s.stage].node];
    if (!nd->host[0])
        return;
    if (gethostname(name, sizeof name - 1) != 0)
        snprintf(name, sizeof name, "(unknown: gethostname failed)");
    name[NAME_LEN - 1] = '\0';
    if (!ah_host_matches(nd->host, name) && !has_address(nd->host))
        snprintf(actual, NAME_LEN, "%s", name[0] ? name : "(empty hostname)");
}

int ah_hosts_check_placement(MPI_Comm comm, const ah_plan *p, char *err, size_t errlen) {
    if (!ah_cluster_has_hosts(&p->cluster))
        return 0;
    int rank, world;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &world);
    char mine[NAME_LEN];
    own_verdict(p, rank, mine);
    char *all = rank == 0 ? ah_xcalloc((size_t)world, NAME_LEN) : NULL;
    MPI_Gather(mine, NAME_LEN, MPI_CHAR, all, NAME_LEN, MPI_CHAR, 0, comm);
    int bad = -1;
    for (int r = 0; rank == 0 && r < world && bad < 0; r++)
        if (all[(size_t)r * NAME_LEN] != '\0')
            bad = r;
    if (bad >= 0) {
        ah_slot s;
        ah_rank_slot(p, bad, &s);
        const ah_stage *st = &p->replicas[s.replica].stages[s.stage];
        const ah_node *nd = &p->cluster.nodes[st->node];
        ah_errf(err, errlen,
                "rank %d runs on host '%s', the plan puts it on host '%s' (node '%s', replica %d stage %d TP rank "
                "%d): launch with the rankfile of `autohet hosts`",
                bad, all + (size_t)bad * NAME_LEN, nd->host, nd->name, s.replica, s.stage, s.tp_rank);
    }
    free(all);
    MPI_Bcast(&bad, 1, MPI_INT, 0, comm);
    return bad >= 0 ? -1 : 0;
}
