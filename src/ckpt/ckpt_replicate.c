/* Memory-tier copies off the node (docs/recovery.md, "Redundancy without
 * notice"). A node reclaimed without notice takes its memory and disk tiers
 * with it. A layer that a data-parallel peer on another node also holds
 * survives in that peer's snapshot (the replicas hold the same parameters and
 * AdamW moments: the same reduced gradient, the same optimizer step). A layer
 * held on one node only would be restored from the last cloud checkpoint,
 * up to --ckpt-every steps back. So with two memory copies asked for, every
 * snapshot's shards of such layers are also sent over MPI to a buddy node
 * (the next node of the job, in inventory order), whose lowest rank writes
 * them into its own memory tier and lists them in its manifest in the same
 * two-phase commit: every layer of the committed step then has a copy off
 * each node (the buddy-copy idea of in-memory checkpointing to peers, as
 * Gemini does). Across hosts the bytes travel the training network; the
 * buddy writes them on its own host. */
#include <errno.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "ckpt/ckpt_runtime_internal.h"
#include "util/atomic_file.h"
#include "util/errors.h"

#define AH_TAG_BUDDY 7711

/* Record i needs a buddy copy: no record of another node has its (layer, TP rank, degree), and it is
 * the first of its node's records of that shard. */
static int needs_copy(const ah_saved_shard *all, int ns, int i) {
    for (int j = 0; j < ns; j++) {
        int same = all[j].layer == all[i].layer && all[j].tp_rank == all[i].tp_rank &&
                   all[j].tp_degree == all[i].tp_degree;
        if (same && (all[j].node != all[i].node || j < i))
            return 0;
    }
    return 1;
}

/* The buddy of node n: the next node with records (cyclically), -1 if n is the job's only node; *leader
 * its lowest rank with records (the rank that commits its manifest, as ah_ckpt_commit chooses it). */
static int buddy_of(const ah_layer_store *ls, const ah_saved_shard *all, const int *from, int ns, int n,
                    int *leader) {
    for (int k = 1; k < ls->n_nodes; k++) {
        int b = (n + k) % ls->n_nodes;
        *leader = -1;
        for (int i = 0; i < ns; i++)
            if (all[i].node == b && (*leader < 0 || from[i] < *leader))
                *leader = from[i];
        if (*leader >= 0)
            return b;
    }
    return -1;
}

int ah_ckpt_replicate(const ah_layer_store *ls, const char *dir, const char *nd, const ah_saved_shard *mine,
                      int nl, ah_saved_shard **extra_out, int *n_extra, char *err, size_t errlen) {
    int ns = 0, *from = NULL, rc = 0;
    ah_saved_shard *all = ah_ckpt_gather_records(ls, mine, nl, &ns, &from);
    ah_saved_shard *extra = ah_xcalloc((size_t)ns + 1, sizeof *extra);
    MPI_Request *req = ah_xcalloc((size_t)ns + 1, sizeof(MPI_Request));
    unsigned char **buf = ah_xcalloc((size_t)ns + 1, sizeof(unsigned char *));
    const unsigned char **map = ah_xcalloc((size_t)ns + 1, sizeof(unsigned char *));
    int *incoming = ah_xcalloc((size_t)ns + 1, sizeof(int)), nreq = 0;
    *n_extra = 0;
    for (int i = 0; i < ns; i++) {
        int leader, b = needs_copy(all, ns, i) ? buddy_of(ls, all, from, ns, all[i].node, &leader) : -1;
        if (b < 0 || (from[i] != ls->rank && leader != ls->rank) || all[i].bytes > 2147483647u)
            continue;
        if (from[i] == ls->rank) { /* (a rank of a one-node... buddy: never itself, b != node) */
            char path[3300];
            snprintf(path, sizeof path, "%s/%s", nd, all[i].file);
            if (ah_ckpt_map(path, all[i].bytes, &map[i], err, errlen) != 0) {
                rc = -1; /* the buddy waits for these bytes: nothing else can be sent it, see below */
                break;
            }
            MPI_Isend(map[i], (int)all[i].bytes, MPI_BYTE, leader, AH_TAG_BUDDY, ls->comm, &req[nreq++]);
        }
        if (leader == ls->rank) {
            buf[i] = ah_xcalloc((size_t)all[i].bytes + 1, 1);
            MPI_Irecv(buf[i], (int)all[i].bytes, MPI_BYTE, from[i], AH_TAG_BUDDY, ls->comm, &req[nreq++]);
            incoming[i] = 1;
            extra[*n_extra] = all[i];
            extra[(*n_extra)++].node = b;
        }
    }
    if (rc != 0) { /* its buddy is blocked on this shard (the file this rank just wrote): no way back */
        fprintf(stderr, "autohet: %s\n", err);
        MPI_Abort(ls->comm, 1);
    }
    MPI_Waitall(nreq, req, MPI_STATUSES_IGNORE);
    char bd[3072];
    for (int i = 0, k = 0; i < ns && rc == 0; i++) {
        if (!incoming[i])
            continue;
        ah_saved_shard *e = &extra[k++];
        ah_ckpt_node_dir(ls, dir, e->node, bd, sizeof bd);
        char path[3300];
        snprintf(path, sizeof path, "%s/%s", bd, e->file);
        if (XXH64(buf[i], (size_t)e->bytes, 0) != e->xxh64) {
            snprintf(err, errlen, "checkpoint: buddy copy of %s arrived corrupt", e->file);
            rc = -1;
        } else if (ah_mkdir_p(bd) != 0) {
            snprintf(err, errlen, "checkpoint: cannot create %s (%s)", bd, strerror(errno));
            rc = -1;
        } else {
            rc = ah_write_file_atomic(path, buf[i], (size_t)e->bytes, err, errlen);
        }
    }
    for (int i = 0; i < ns; i++) {
        free(buf[i]);
        if (map[i])
            ah_ckpt_unmap(map[i], all[i].bytes);
    }
    free(buf);
    free(map);
    free(req);
    free(incoming);
    free(all);
    free(from);
    if (rc != 0)
        *n_extra = 0;
    *extra_out = extra;
    return rc;
}
