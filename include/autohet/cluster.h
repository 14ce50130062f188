/* Cluster inventory: nodes of GPUs, their links, spot status. */
#ifndef AUTOHET_CLUSTER_H
#define AUTOHET_CLUSTER_H
#include <stddef.h>
#include "autohet/device.h"

typedef struct {
    char name[64];
    ah_device dev;         /* copy of the catalog entry */
    int gpus;              /* GPUs in this node */
    double nic_gbit;       /* inter-node NIC bandwidth of the node, Gbit/s */
    int spot;              /* 1 if a spot/preemptible instance */
    double price_per_hour; /* optional, 0 if unknown */
    char host[64];         /* the machine this node is (its hostname); "" when not named */
} ah_node;

typedef struct {
    ah_node *nodes;
    int n_nodes;
} ah_cluster;

/* "2x8xA100-40G,1x8xH800,4x8xH20" = nodes x GPUs-per-node x type. Optional
 * suffixes per entry: "@NIC" (Gbit/s), "$PRICE" (dollars per node-hour) and
 * ":spot", e.g. "2x8xA100-40G@200$12.5:spot".
 * Node names are generated: "<type>-<k>". */
int ah_cluster_parse_shorthand(const char *s, const ah_device_catalog *devices, ah_cluster *c, char *err,
                               size_t errlen);
/* {"nodes":[{"name":"n0","gpu":"A100-40G","gpus":8,"nic_gbit":200,
 *            "spot":true,"price_per_hour":12.3,"host":"gpu-a01"}, ...]}
 * ("count": k on an entry repeats it k times with names name-0..k-1; such an
 * entry names no host, since a host is one machine). */
int ah_cluster_load_json(const char *path, const ah_device_catalog *devices, ah_cluster *c, char *err,
                         size_t errlen);
/* A path to an existing file (or one ending in .json) is loaded as JSON,
 * anything else is parsed as shorthand. GPU types are looked up in devices. */
int ah_cluster_resolve(const char *arg, const ah_device_catalog *devices, ah_cluster *c, char *err,
                       size_t errlen);
void ah_cluster_free(ah_cluster *c);
/* Why `host` cannot be a node's host name (empty, longer than 63
 * characters, or a character other than letters, digits, '-', '_' and '.'),
 * as "must be ..." in buf; 0 when it can. The one check of the inventory,
 * the plan reader, hostfiles and Slurm node lists. */
int ah_host_name_problem(const char *host, char *buf, size_t n);
/* 1 if any node of c names its host. */
int ah_cluster_has_hosts(const ah_cluster *c);
int ah_cluster_total_gpus(const ah_cluster *c);
/* The index of the node named `name` in c, or -1. */
int ah_cluster_node_index(const ah_cluster *c, const char *name);
/* Human summary like "2x8xA100-40G + 1x8xH800" into buf. */
void ah_cluster_describe(const ah_cluster *c, char *buf, size_t n);

/* Whether a rank whose machine calls itself `actual` (gethostname) is on
 * the host `expected`: the same name ignoring case, or the same up to the
 * first '.' (a short name against a fully qualified one). */
int ah_host_matches(const char *expected, const char *actual);
/* Whether s is an IPv4 or IPv6 literal (the short-name rule of
 * ah_host_matches does not apply to one): 1 with its bytes in bin (16) and
 * AF_INET / AF_INET6 in *family, else 0. */
int ah_host_address(const char *s, unsigned char *bin, int *family);

#endif
