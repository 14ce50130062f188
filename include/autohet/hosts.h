/* Hosts: which machine every plan node is, Open MPI rankfiles that put every
 * rank on its node's host, and the start-up check that it runs there
 * (docs/multi-host.md).
 *
 * A plan node names its host in the inventory or the plan (ah_node.host);
 * otherwise a host list, from an Open MPI hostfile or a Slurm node list,
 * maps the plan's cluster nodes to hosts in order: node i is the i-th host. */
#ifndef AUTOHET_HOSTS_H
#define AUTOHET_HOSTS_H
#include <stddef.h>

#include <mpi.h>

#include "autohet/plan.h"

typedef struct {
    char name[64];
    int slots; /* processes the host takes (slots=N); 0 when the list does not say */
    int line;  /* its line in the hostfile (1-based); 0 for a Slurm node list */
} ah_host;

typedef struct {
    ah_host *hosts;
    int n;
    char source[256]; /* what errors name: the hostfile's path, or "SLURM_JOB_NODELIST" */
} ah_host_list;

#define AH_MAX_HOSTS 65536

/* An Open MPI hostfile: one host a line, "NAME [slots=N] [max_slots=M]"
 * ("count=N" is an alias of slots, "max-slots" of max_slots), '#' starts a
 * comment, blank lines are skipped. A host listed twice is an error (the
 * order of hosts is the node mapping). 0, or -1 with one line
 * "FILE:LINE: what is wrong" in err. */
int ah_hostfile_parse(const char *text, const char *source, ah_host_list *out, char *err, size_t errlen);
int ah_hostfile_load(const char *path, ah_host_list *out, char *err, size_t errlen);
/* A Slurm node list in its compressed form (SLURM_JOB_NODELIST):
 * "node[01-04,07],gpu-a[1-2]-b[1-2],login1" (ranges keep their zero
 * padding; several bracket groups in one name multiply out, the last one
 * fastest, as `scontrol show hostnames` prints them). Slots are not known
 * (0). `source` names the list in errors. 0, or -1 with
 * "SOURCE 'LIST': what is wrong at character K". */
int ah_slurm_nodelist_parse(const char *list, const char *source, ah_host_list *out, char *err, size_t errlen);
void ah_host_list_free(ah_host_list *l);

/* Where a rank of a plan runs: its slot (replica, stage, TP rank), the node
 * of that stage and the GPU, which is also its slot on the host. */
typedef struct {
    int rank, replica, stage, tp_rank;
    int node; /* index into plan->cluster.nodes */
    int gpu;  /* GPU index in the node = the rankfile slot */
} ah_rank_place;

/* Gives every node of p's cluster the host of `hosts` in order (node i, the
 * i-th host; nodes past the list's end get none). Errors (one line naming
 * the list, its line and the field, 0 or -1): a node the plan uses has no
 * host (fewer hosts than nodes), a host's slots are fewer than the ranks
 * the plan puts on its node, a node that already names another host. */
int ah_hosts_apply(ah_plan *p, const ah_host_list *hosts, char *err, size_t errlen);
/* The same for an inventory (`autohet run --hostfile`): every node gets the
 * host of its position (fewer hosts than nodes is an error naming the first
 * node without one); slots are checked per plan by ah_hosts_apply. */
int ah_cluster_apply_hosts(ah_cluster *c, const ah_host_list *hosts, char *err, size_t errlen);
/* The ranks of p in rank order (out holds ah_plan_slots(p) entries),
 * numbered as the engine does (ah_slot_rank: replica, stage, TP rank). */
void ah_plan_rank_places(const ah_plan *p, ah_rank_place *out);
/* Ranks the plan puts on node `node` (the sum of its stages' TP degrees). */
int ah_plan_node_ranks(const ah_plan *p, int node);
/* Writes the Open MPI rankfile of p ("rank R=HOST slot=CORES", one line a
 * rank) to path: the rank of GPU g on its node gets cpus_per_gpu cores from
 * g * cpus_per_gpu on ("slot=g" at 1, "slot=A-B" above), so that on a node
 * whose GPUs are split evenly over its sockets, cores numbered socket by
 * socket, every rank runs on its GPU's socket. Every node a rank runs on
 * must name a host. 0, or -1 with err ("plan: node 'n1' (cluster.nodes[1])
 * names no host ..." or the write error). */
int ah_rankfile_write(const ah_plan *p, int cpus_per_gpu, const char *path, char *err, size_t errlen);
/* The same followed by n_servers recovery server ranks (world ranks from
 * the plan's slot count on, `autohet train --recover`), server k on host
 * server_hosts[k] at slot 0 (servers run where the plan puts no rank). */
int ah_rankfile_write_servers(const ah_plan *p, int cpus_per_gpu, const char (*server_hosts)[64], int n_servers,
                              const char *path, char *err, size_t errlen);
/* The rankfile slot of the GPU's rank: "g" or "first-last" core (buf of n). */
const char *ah_rankfile_slot(int gpu, int cpus_per_gpu, char *buf, size_t n);

/* The start-up check of `autohet train`: every rank of comm below the
 * plan's slot count compares its host with its node's host (nodes that name
 * none are not checked; an expected IP address matches an address of one of
 * the rank's interfaces). Collective over comm when p names any host; a
 * plan without hosts returns 0 at once without communicating. 0 when every
 * rank is where the plan says, else -1 on every rank, with one line in err
 * on rank 0: "rank R runs on host 'ACTUAL', the plan puts it on host
 * 'EXPECTED' (node N, replica K stage J TP rank T)". */
int ah_hosts_check_placement(MPI_Comm comm, const ah_plan *p, char *err, size_t errlen);

#endif
