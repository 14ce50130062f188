/* The background persist of the checkpoint runtime (ckpt_runtime.h,
 * docs/recovery.md): memory-tier snapshot -> disk + cloud.
 *
 * The committed memory-tier shards of one step are pinned (hard links, so the
 * next snapshot may replace them) and copied by a thread of the rank to its
 * node's disk and cloud directories while training goes on: a request, like
 * Megatron-Core's async save request, whose finalize commits the copy
 * (manifests, state.json) at a later step boundary, when every rank's thread
 * is done. Until then the previous disk/cloud checkpoint is the committed one;
 * how many steps a copy may lag behind is decided by its caller (trainer.c
 * starts the next copy only after polling the previous one with wait = 1). */
#include <errno.h>
#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/ckpt_runtime_internal.h"
#include "util/atomic_file.h"
#include "util/errors.h"

/* One disk + cloud copy in flight: its thread, what it copies, and whether it
 * failed (reported at the finalize, collectively). */
typedef struct {
    pthread_t th;
    int running; /* the thread was started and not joined yet */
    int step, n, failed;
    atomic_int done;
    char dir[2][512], nd[2][3072], err[512];
    char (*pin)[3200];
    ah_saved_shard *rec;
} persist_req;

struct ah_ckpt_persist {
    /* the last memory-tier snapshot of this rank's layers (what a persist copies) */
    ah_saved_shard *last;
    int last_n, last_step;
    char last_dir[3072];
    persist_req *req; /* a disk + cloud copy in flight, or NULL */
    int copies;       /* memory copies of each snapshot on distinct nodes (ckpt_replicate.c), 1-4 */
};

ah_ckpt_persist *ah_ckpt_persist_new(void) {
    ah_ckpt_persist *p = ah_xcalloc(1, sizeof(ah_ckpt_persist));
    p->copies = 1;
    return p;
}

void ah_ckpt_persist_set_copies(ah_ckpt_persist *p, int copies) {
    p->copies = copies < 1 ? 1 : copies > AH_MAX_MEM_COPIES ? AH_MAX_MEM_COPIES : copies;
}

int ah_ckpt_persist_copies(const ah_ckpt_persist *p) {
    return p ? p->copies : 1;
}

void ah_ckpt_persist_remember(ah_ckpt_persist *p, ah_saved_shard *rec, int n, int step, const char *nd) {
    free(p->last);
    p->last = rec;
    p->last_n = n;
    p->last_step = step;
    snprintf(p->last_dir, sizeof p->last_dir, "%s", nd);
}

static void *persist_main(void *arg) {
    persist_req *j = arg;
    for (int i = 0; i < j->n && !j->failed; i++) {
        const unsigned char *map = NULL;
        if (ah_ckpt_map(j->pin[i], j->rec[i].bytes, &map, j->err, sizeof j->err) != 0) {
            j->failed = 1;
            break;
        }
        for (int k = 0; k < 2 && !j->failed; k++) {
            if (!j->dir[k][0])
                continue;
            char path[3400];
            snprintf(path, sizeof path, "%s/%s", j->nd[k], j->rec[i].file);
            if (ah_write_file_atomic(path, map, j->rec[i].bytes, j->err, sizeof j->err) != 0)
                j->failed = 1;
        }
        ah_ckpt_unmap(map, j->rec[i].bytes);
    }
    for (int i = 0; i < j->n; i++)
        unlink(j->pin[i]);
    atomic_store(&j->done, 1);
    return NULL;
}

static void req_free(persist_req *j) {
    free(j->pin);
    free(j->rec);
    free(j);
}

void ah_ckpt_persist_abandon(ah_ckpt_persist *p) {
    if (!p || !p->req)
        return;
    if (p->req->running)
        pthread_join(p->req->th, NULL);
    req_free(p->req);
    p->req = NULL;
}

void ah_ckpt_persist_free(ah_ckpt_persist *p) {
    if (!p)
        return;
    ah_ckpt_persist_abandon(p);
    free(p->last);
    free(p);
}

/* the request of a copy of snapshot p->last to the disk and cloud tiers: their
 * node directories made, the snapshot's shards pinned; j->failed on a failure */
static persist_req *req_new(const ah_ckpt_persist *p, const ah_layer_store *ls, const char *disk,
                            const char *cloud, int step) {
    persist_req *j = ah_xcalloc(1, sizeof *j);
    j->step = step;
    j->n = p->last_n;
    j->rec = ah_xcalloc((size_t)j->n + 1, sizeof *j->rec);
    j->pin = ah_xcalloc((size_t)j->n + 1, sizeof *j->pin);
    memcpy(j->rec, p->last, sizeof *j->rec * (size_t)j->n);
    const char *dirs[2] = {disk, cloud};
    for (int k = 0; k < 2; k++) {
        if (!dirs[k])
            continue;
        snprintf(j->dir[k], sizeof j->dir[k], "%s", dirs[k]);
        ah_ckpt_node_dir(ls, dirs[k], ls->node, j->nd[k], sizeof j->nd[k]);
        if (ah_mkdir_p(dirs[k]) != 0 || ah_mkdir_p(j->nd[k]) != 0) {
            snprintf(j->err, sizeof j->err, "checkpoint: cannot create %.400s (%s)", j->nd[k],
                     strerror(errno));
            j->failed = 1;
        }
    }
    for (int i = 0; i < j->n && !j->failed; i++) {
        char src[3200];
        snprintf(src, sizeof src, "%s/%s", p->last_dir, j->rec[i].file);
        snprintf(j->pin[i], sizeof j->pin[i], "%s/.pin-%ld-%s", p->last_dir, (long)getpid(), j->rec[i].file);
        if (link(src, j->pin[i]) != 0) {
            snprintf(j->err, sizeof j->err, "checkpoint: cannot pin %.400s (%s)", src, strerror(errno));
            j->failed = 1;
        }
    }
    return j;
}

int ah_ckpt_persist_start(ah_ckpt_persist *p, const ah_layer_store *ls, const char *disk, const char *cloud,
                          int step, char *err, size_t errlen) {
    if (!p->last || p->last_step != step || p->req)
        return 1; /* no memory snapshot of this step (or one in flight): the caller saves synchronously */
    persist_req *j = req_new(p, ls, disk, cloud, step);
    p->req = j;
    if (j->failed) { /* reported at the commit, collectively */
        atomic_store(&j->done, 1);
        return 0;
    }
    j->running = 1;
    if (pthread_create(&j->th, NULL, persist_main, j) != 0) {
        snprintf(err, errlen, "checkpoint: cannot start the background writer");
        p->req = NULL;
        req_free(j);
        return -1;
    }
    return 0;
}

/* The finalize of a request every rank's thread has finished (j: this rank's,
 * NULL when it has none): the copy committed in both tiers. Collective. 1, or
 * -1 with err on every rank. */
static int req_finalize(persist_req *j, const ah_layer_store *ls, char *err, size_t errlen) {
    int bad = 0, step = 0, n = 0;
    ah_saved_shard *rec = NULL;
    char dir[2][512] = {"", ""};
    if (j) {
        if (j->running) {
            pthread_join(j->th, NULL);
            j->running = 0;
        }
        bad = j->failed;
        step = j->step, n = j->n, rec = j->rec;
        memcpy(dir, j->dir, sizeof dir);
        if (bad)
            snprintf(err, errlen, "%s", j->err);
    }
    MPI_Allreduce(MPI_IN_PLACE, &step, 1, MPI_INT, MPI_MAX, ls->comm);
    int rc = 0;
    const char *tiers[2] = {"disk", "cloud"};
    int has[2] = {dir[0][0] != 0, dir[1][0] != 0};
    MPI_Allreduce(MPI_IN_PLACE, has, 2, MPI_INT, MPI_MAX, ls->comm);
    for (int k = 0; k < 2 && rc == 0; k++)
        if (has[k])
            rc = ah_ckpt_commit(ls, dir[k], tiers[k], step, rec, n, bad, err, errlen);
    return rc == 0 ? 1 : -1;
}

int ah_ckpt_persist_step(const ah_ckpt_persist *p) {
    return p && p->req ? p->req->step : -1;
}

int ah_ckpt_persist_poll(ah_ckpt_persist *p, const ah_layer_store *ls, int wait, char *err, size_t errlen) {
    persist_req *j = p->req;
    if (j && wait && j->running) {
        pthread_join(j->th, NULL);
        j->running = 0;
    }
    int v[2] = {j ? atomic_load(&j->done) : 1, j ? -1 : 0}, r[2];
    MPI_Allreduce(v, r, 2, MPI_INT, MPI_MIN, ls->comm);
    /* the persist lag: a copy not yet done on every rank stays in flight and
     * the previous disk/cloud checkpoint stays the committed one */
    if (r[1] == 0 || r[0] == 0)
        return 0; /* nothing in flight, or not everyone is done */
    int rc = req_finalize(j, ls, err, errlen);
    if (j) {
        req_free(j);
        p->req = NULL;
    }
    return rc;
}
