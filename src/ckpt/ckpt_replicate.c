/* Memory-tier copies off the node (docs/recovery.md, "Redundancy without
 * notice"). A node reclaimed without notice takes its memory and disk tiers
 * with it. A layer that a data-parallel peer on another node also holds
 * survives in that peer's snapshot (the replicas hold the same parameters and
 * AdamW moments: the same reduced gradient, the same optimizer step). A layer
 * held on one node only would be restored from the last cloud checkpoint,
 * up to --ckpt-every steps back. So with k memory copies asked for, every
 * snapshot's shards held on fewer than k nodes are also sent over MPI to
 * buddy nodes (the next nodes of the job that lack them, in inventory order,
 * cyclically), whose lowest ranks write them into their own memory tiers and
 * list them in their manifests in the same two-phase commit: every layer of
 * the committed step then survives the loss of any k-1 nodes (the buddy-copy
 * idea of in-memory checkpointing to peers, as Gemini does; 3 copies cover
 * a second node lost while the recovery from a first one runs). Across hosts
 * the bytes travel the training network; a buddy writes them on its own
 * host. */
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

/* Record i is the first record of its shard (layer, TP rank, degree); the
 * distinct nodes that hold the shard into held[] (n_nodes flags); their count,
 * or 0 if i is not the first. */
static int shard_holders(const ah_saved_shard *all, int ns, int i, int n_nodes, unsigned char *held) {
    memset(held, 0, (size_t)n_nodes);
    int n = 0;
    for (int j = 0; j < ns; j++) {
        int same = all[j].layer == all[i].layer && all[j].tp_rank == all[i].tp_rank &&
                   all[j].tp_degree == all[i].tp_degree;
        if (same && j < i)
            return 0;
        if (same && all[j].node >= 0 && all[j].node < n_nodes && !held[all[j].node])
            held[all[j].node] = 1, n++;
    }
    return n;
}

/* The lowest rank with records on node b (the rank that commits its manifest, as ah_ckpt_commit chooses
 * it), -1 if none. */
static int node_leader(const ah_saved_shard *all, const int *from, int ns, int b) {
    int leader = -1;
    for (int i = 0; i < ns; i++)
        if (all[i].node == b && (leader < 0 || from[i] < leader))
            leader = from[i];
    return leader;
}

/* One copy to make: record i's shard, from its rank to node `node`'s leader. */
typedef struct {
    int rec, node, leader;
} buddy_copy;

/* The copies every shard needs to be held on `copies` distinct nodes (as far as the job has nodes): to the
 * nodes after its first holder, cyclically, that hold it not and have records. */
static buddy_copy *plan_copies(const ah_layer_store *ls, const ah_saved_shard *all, const int *from, int ns,
                               int copies, int *n_out) {
    buddy_copy *c = ah_xcalloc((size_t)ns * (size_t)(copies > 1 ? copies - 1 : 1) + 1, sizeof *c);
    unsigned char *held = ah_xcalloc((size_t)ls->n_nodes + 1, 1);
    int n = 0;
    for (int i = 0; i < ns; i++) {
        int have = shard_holders(all, ns, i, ls->n_nodes, held);
        for (int k = 1; k < ls->n_nodes && have > 0 && have < copies; k++) {
            int b = (all[i].node + k) % ls->n_nodes, leader = held[b] ? -1 : node_leader(all, from, ns, b);
            if (leader >= 0)
                c[n++] = (buddy_copy){i, b, leader}, have++;
        }
    }
    free(held);
    *n_out = n;
    return c;
}

int ah_ckpt_replicate(const ah_layer_store *ls, const char *dir, const char *nd, const ah_saved_shard *mine,
                      int nl, int copies, ah_saved_shard **extra_out, int *n_extra, char *err, size_t errlen) {
    int ns = 0, *from = NULL, rc = 0, nc = 0;
    ah_saved_shard *all = ah_ckpt_gather_records(ls, mine, nl, &ns, &from);
    buddy_copy *cp = plan_copies(ls, all, from, ns, copies, &nc);
    ah_saved_shard *extra = ah_xcalloc((size_t)nc + 1, sizeof *extra);
    MPI_Request *req = ah_xcalloc((size_t)nc + 1, sizeof(MPI_Request));
    unsigned char **buf = ah_xcalloc((size_t)nc + 1, sizeof(unsigned char *));
    const unsigned char **map = ah_xcalloc((size_t)ns + 1, sizeof(unsigned char *));
    int nreq = 0;
    *n_extra = 0;
    for (int c = 0; c < nc; c++) {
        const ah_saved_shard *r = &all[cp[c].rec];
        int i = cp[c].rec;
        if ((from[i] != ls->rank && cp[c].leader != ls->rank) || r->bytes > 2147483647u)
            continue;
        if (from[i] == ls->rank) { /* (never to itself: a copy goes to a node that does not hold it) */
            if (!map[i]) {
                char path[3300];
                snprintf(path, sizeof path, "%s/%s", nd, r->file);
                if (ah_ckpt_map(path, r->bytes, &map[i], err, errlen) != 0) {
                    rc = -1; /* the buddy waits for these bytes: nothing else can be sent it, see below */
                    break;
                }
            }
            MPI_Isend(map[i], (int)r->bytes, MPI_BYTE, cp[c].leader, AH_TAG_BUDDY, ls->comm, &req[nreq++]);
        }
        if (cp[c].leader == ls->rank) {
            buf[*n_extra] = ah_xcalloc((size_t)r->bytes + 1, 1);
            MPI_Irecv(buf[*n_extra], (int)r->bytes, MPI_BYTE, from[i], AH_TAG_BUDDY, ls->comm, &req[nreq++]);
            extra[*n_extra] = *r;
            extra[(*n_extra)++].node = cp[c].node;
        }
    }
    if (rc != 0) { /* its buddy is blocked on this shard (the file this rank just wrote): no way back */
        fprintf(stderr, "autohet: %s\n", err);
        MPI_Abort(ls->comm, 1);
    }
    MPI_Waitall(nreq, req, MPI_STATUSES_IGNORE);
    char bd[3072];
    for (int k = 0; k < *n_extra && rc == 0; k++) {
        ah_saved_shard *e = &extra[k];
        ah_ckpt_node_dir(ls, dir, e->node, bd, sizeof bd);
        char path[3300];
        snprintf(path, sizeof path, "%s/%s", bd, e->file);
        if (XXH64(buf[k], (size_t)e->bytes, 0) != e->xxh64) {
            snprintf(err, errlen, "checkpoint: buddy copy of %s arrived corrupt", e->file);
            rc = -1;
        } else if (ah_mkdir_p(bd) != 0) {
            snprintf(err, errlen, "checkpoint: cannot create %s (%s)", bd, strerror(errno));
            rc = -1;
        } else {
            rc = ah_write_file_atomic(path, buf[k], (size_t)e->bytes, err, errlen);
        }
    }
    for (int k = 0; k < nc; k++)
        free(buf[k]);
    for (int i = 0; i < ns; i++)
        if (map[i])
            ah_ckpt_unmap(map[i], all[i].bytes);
    free(buf);
    free(map);
    free(req);
    free(cp);
    free(all);
    free(from);
    if (rc != 0)
        *n_extra = 0;
    *extra_out = extra;
    return rc;
}
