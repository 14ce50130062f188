/* The checkpoint runtime's recovery (ckpt_runtime.h, docs/recovery.md): every
 * rank restores the shards a controller's recovery assignment gives it from
 * their sources (its own memory or disk tier, a peer over MPI RMA, the cloud)
 * while serving, as the lowest rank of a holder node or as a server-only rank,
 * the shards others get from it; then the server-only ranks wait for rank 0's
 * release. A copy that does not verify falls back to the shard's other copies
 * the assignment names (the own node's tiers, then every cloud copy), in
 * order, until one does (take_all, take_retries, take_fallbacks). */
#include <errno.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "autohet/plan.h"
#include "ckpt/ckpt_runtime_internal.h"
#include "util/errors.h"
#include "util/mpi_agree.h"

/* my entries of a recovery assignment (autohet/ckpt.h owns the format) and my
 * share of the cloud bandwidth */
static int load_assignment(const char *path, int me, int *step, double *cloud_rate, ah_recovery_shard **out,
                           int *n, char *err, size_t errlen) {
    ah_recovery_doc d;
    if (ah_recovery_doc_read(path, &d, err, errlen) != 0)
        return -1;
    *step = d.step;
    *cloud_rate = 0;
    for (int i = 0; i < d.n_ranks; i++)
        if (d.ranks[i].rank == me)
            *cloud_rate = d.ranks[i].cloud_bytes_per_s;
    *out = d.shards;
    *n = d.n_shards;
    d.shards = NULL;
    ah_recovery_doc_free(&d);
    return 0;
}

static double now_s(void) {
    return MPI_Wtime();
}

/* An assignment entry of this rank is its own shard (its TP rank, at its stage's
 * degree or none stated) or one old TP rank's shard of a layer to reshard. */
static int is_own_shard(const ah_layer_store *ls, const ah_recovery_shard *s) {
    return s->tp == ls->tp_rank && (s->tp_degree == 0 || s->tp_degree == ls->tp);
}

/* Layer l of rank me is assigned its own shard once, or every TP rank of one
 * old degree once (a reshard group), nothing else. 0 or -1 (err). */
static int check_layer_entries(const ah_layer_store *ls, const char *assignment, int me, int l,
                               const ah_recovery_shard *e, int n, char *err, size_t errlen) {
    int own = 0, group = 0, deg = -1, seen[AH_MAX_TP] = {0}, mixed = 0;
    for (int i = 0; i < n; i++) {
        if (e[i].rank != me || e[i].layer != l)
            continue;
        if (is_own_shard(ls, &e[i])) {
            own++;
            continue;
        }
        group++;
        if (deg < 0)
            deg = e[i].tp_degree;
        if (e[i].tp_degree != deg || deg < 1 || deg > AH_MAX_TP || e[i].tp >= deg || seen[e[i].tp]++)
            mixed = 1;
    }
    if ((own == 1 && group == 0) || (own == 0 && !mixed && group == deg))
        return 0;
    if (group == 0)
        snprintf(err, errlen, "%s: layer %d of rank %d is assigned %d times", assignment, l, me, own + group);
    else
        snprintf(err, errlen,
                 "%s: layer %d of rank %d: %d shard(s) to reshard from, not every TP rank of one degree once"
                 "%s",
                 assignment, l, me, group, own ? " (and its own shard too)" : "");
    return -1;
}

/* Every layer of mine is assigned exactly once (or as one reshard group), a
 * rank without a plan slot is assigned nothing, every peer shard names a rank
 * of the job. 0 or -1 (err). */
static int check_assignment(const ah_layer_store *ls, const char *assignment, int me, int world,
                            const ah_recovery_shard *e, int n, int step, char *err, size_t errlen) {
    int rc = 0;
    int nl = ls ? ls->n_held(ls->ctx) : 0;
    for (int h = 0; h < nl && rc == 0 && !(step == 0 && n == 0); h++) /* step 0, no shards: the seed's init */
        rc = check_layer_entries(ls, assignment, me, ls->held_layer(ls->ctx, h), e, n, err, errlen);
    for (int i = 0; i < n && rc == 0; i++)
        if (e[i].rank == me && (!ls || !ls->holds(ls->ctx, e[i].layer))) {
            snprintf(err, errlen, "%s: rank %d %s but is assigned layer %d", assignment, me,
                     ls ? "does not hold it" : "has no plan slot", e[i].layer);
            rc = -1;
        } else if (e[i].tier == AH_TIER_PEER && (e[i].server < 0 || e[i].server >= world)) {
            snprintf(err, errlen, "%s: shards[%d] is served by rank %d; the job has %d ranks", assignment, i,
                     e[i].server, world);
            rc = -1;
        }
    return rc;
}

/* A shard of a reshard group outlives its source (a reused buffer, an
 * unmapped file): its tensors are copied. */
static ah_ckpt_loaded *keep_copy(const ah_ckpt_loaded *t, int n) {
    ah_ckpt_loaded *c = ah_xcalloc((size_t)n + 1, sizeof *c);
    for (int i = 0; i < n; i++) {
        c[i] = t[i];
        c[i].data = ah_xcalloc(t[i].n + 1, sizeof(float));
        memcpy(c[i].data, t[i].data, t[i].n * sizeof(float));
        c[i].borrowed = 0;
    }
    return c;
}

/* A verified shard of mine: applied when it is my own, else kept (copied)
 * for the reshard of its layer. */
static int take_shard(const ah_layer_store *ls, const ah_recovery_shard *s, const ah_ckpt_loaded *t, int nt,
                      ah_ckpt_loaded **kept, int *kept_n, char *err, size_t errlen) {
    if (is_own_shard(ls, s))
        return ah_ckpt_apply_layer(ls, s->layer, t, nt, err, errlen);
    *kept = keep_copy(t, nt);
    *kept_n = nt;
    return 0;
}

/* Phase 3: every layer of mine assigned as a reshard group is rebuilt from
 * its old TP ranks' shards (reshard.c, the layout's one owner) and applied. */
static int reshard_groups(const ah_layer_store *ls, int me, const ah_recovery_shard *e, int n,
                          ah_ckpt_loaded **kept, const int *kept_n, char *err, size_t errlen) {
    int rc = 0, layers = 0, from = 0;
    for (int h = 0; ls && h < ls->n_held(ls->ctx) && rc == 0; h++) {
        int l = ls->held_layer(ls->ctx, h), T = 0;
        ah_ckpt_loaded *shards[AH_MAX_TP] = {0};
        int counts[AH_MAX_TP] = {0};
        for (int i = 0; i < n; i++)
            if (e[i].rank == me && e[i].layer == l && !is_own_shard(ls, &e[i]))
                T = e[i].tp_degree, shards[e[i].tp] = kept[i], counts[e[i].tp] = kept_n[i];
        if (T == 0)
            continue;
        ah_ckpt_loaded *out = NULL;
        int nout = 0;
        rc = ls->reshard_from_shards(ls->ctx, l, T, shards, counts, &out, &nout, err, errlen);
        if (rc == 0)
            rc = ah_ckpt_apply_layer(ls, l, out, nout, err, errlen);
        ah_ckpt_free(out, nout);
        layers++, from = T > from ? T : from;
    }
    if (rc == 0 && layers)
        fprintf(stderr, "autohet: recovery resharded %d layer(s) of rank %d from TP=%d to TP=%d\n", layers,
                me, from, ls->tp);
    return rc;
}

/* ---- one rank's recovery: every shard from its source, streamed into its layer ---- */

typedef struct {
    const ah_layer_store *ls; /* NULL: a server-only rank */
    const ah_recovery_shard *e;
    int n, me, step;
    MPI_Win win; /* the servers' shards, one-sided; has_win: created */
    int has_win;
    const uint64_t *addr; /* where each peer shard lies in its server's window (0: not served) */
    unsigned char *buf;   /* peer bytes land here, a piece (or a whole shard) at a time */
    size_t cap;
    double cloud_rate, cloud_bytes, cloud_t0;
    ah_ckpt_loaded **kept; /* shards of reshard groups, by entry */
    int *kept_n;
    char (*retry_why)[1024]; /* a peer copy that did not verify: why (its fallbacks come later) */
    const char *assignment;  /* its path: the copies that failed are noted beside it */
    ah_recover_stats *st;
} recovery;

/* ah_ckpt_stream sources: a mapped file, or a shard in a peer's RMA window */
static const unsigned char *fetch_mapped(void *ctx, uint64_t off, uint64_t len, char *err, size_t errlen) {
    (void)len, (void)err, (void)errlen;
    return (const unsigned char *)ctx + off;
}

typedef struct {
    recovery *rv;
    int server;
    uint64_t addr;
} peer_src;

static unsigned char *peer_buffer(recovery *rv, uint64_t len) {
    if (len + 1 > rv->cap) {
        free(rv->buf);
        rv->cap = (size_t)len + 1;
        rv->buf = ah_xcalloc(rv->cap, 1);
    }
    return rv->buf;
}

static const unsigned char *fetch_peer(void *ctx, uint64_t off, uint64_t len, char *err, size_t errlen) {
    (void)err, (void)errlen;
    peer_src *p = ctx;
    unsigned char *b = peer_buffer(p->rv, len);
    /* in gets of at most 1 MiB: Open MPI 4.1's osc/rdma refuses larger ones
     * that start inside an attached region (MPI_ERR_RMA_RANGE, fatal) */
    for (uint64_t done = 0; done < len;) {
        uint64_t piece = len - done < (1u << 20) ? len - done : (1u << 20);
        MPI_Get(b + done, (int)piece, MPI_BYTE, p->server, (MPI_Aint)(p->addr + off + done), (int)piece,
                MPI_BYTE, p->rv->win);
        MPI_Win_flush(p->server, p->rv->win);
        done += piece;
    }
    return b;
}

/* ah_ckpt_stream sink: the tensors of a shard of layer l, matched to the layer's
 * (state, tensor) by name, written into it piece by piece */
typedef struct {
    const ah_layer_store *ls;
    int l;
    int *state, *tensor; /* per shard tensor: its destination, -1: not this layer's */
} layer_sink;

static int sink_begin(void *ctx, const ah_ckpt_loaded *t, int nt, char *err, size_t errlen) {
    layer_sink *k = ctx;
    ah_store_tensor ti[AH_STORE_MAX_TENSORS];
    size_t n_floats;
    int n_tensors = k->ls->tensors(k->ls->ctx, k->l, ti, &n_floats);
    k->state = ah_xcalloc((size_t)nt + 1, sizeof(int));
    k->tensor = ah_xcalloc((size_t)nt + 1, sizeof(int));
    for (int i = 0; i < nt; i++)
        k->state[i] = k->tensor[i] = -1;
    /* the checks and messages of ah_ckpt_apply_layer, in its order */
    for (int q = 0; q < n_tensors; q++)
        for (int s = 0; s < AH_STORE_N_STATES; s++) {
            char name[96];
            snprintf(name, sizeof name, "%s.%s", ah_ckpt_state_prefix[s], ti[q].name);
            int found = -1;
            for (int i = 0; i < nt && found < 0; i++)
                if (!strcmp(t[i].name, name))
                    found = i;
            if (found < 0) {
                snprintf(err, errlen, "checkpoint layer %d: no tensor %s (a different model?)", k->l, name);
                return -1;
            }
            if (t[found].n != ti[q].size) {
                snprintf(err, errlen,
                         "checkpoint layer %d: %s has %zu values, this plan's shard needs %zu "
                         "(a different TP degree or model)",
                         k->l, name, t[found].n, ti[q].size);
                return -1;
            }
            k->state[found] = s, k->tensor[found] = q;
        }
    return 0;
}

static void sink_piece(void *ctx, int i, size_t first, size_t count, const float *data) {
    layer_sink *k = ctx;
    if (k->state[i] >= 0)
        k->ls->from_host(k->ls->ctx, k->l, (ah_store_state)k->state[i], k->tensor[i], first, count, data);
}

/* A whole shard of entry s in memory (bytes at p): verified, then applied or
 * kept for its reshard. 0; -1 (e2) a bad copy; -2 (err) it does not fit. */
static int take_whole(recovery *rv, int i, const char *what, const unsigned char *p, const ah_shard_src *src,
                      char *e2, size_t n2, char *err, size_t errlen) {
    ah_ckpt_loaded *t = NULL;
    int nt = 0;
    if (ah_ckpt_parse_shard_view(what, p, src->bytes, src->xxh64, &t, &nt, e2, n2) != 0)
        return -1;
    int rc = take_shard(rv->ls, &rv->e[i], t, nt, &rv->kept[i], &rv->kept_n[i], err, errlen) == 0 ? 0 : -2;
    ah_ckpt_free(t, nt);
    return rc;
}

/* Entry i's shard from src through fetch (p: the whole shard when it is at
 * hand, else NULL and fetched whole when needed): an own shard streams into
 * its layer, hashed as it is copied (the layer is used only once the digest
 * matched; a bad copy is overwritten by the next one, tensor by tensor); a
 * reshard group's shard, or a layout that does not stream, is verified whole
 * first. 0; -1 (e2) a bad copy; -2 (err) it does not fit. */
static int take_entry(recovery *rv, int i, const char *what, const ah_shard_src *src,
                      const unsigned char *(*fetch)(void *, uint64_t, uint64_t, char *, size_t), void *fctx,
                      const unsigned char *p, char *e2, size_t n2, char *err, size_t errlen) {
    if (is_own_shard(rv->ls, &rv->e[i])) {
        layer_sink k = {rv->ls, rv->e[i].layer, NULL, NULL};
        ah_ckpt_stream s = {fetch, sink_begin, sink_piece, fctx, &k};
        int r = ah_ckpt_stream_shard(what, src->bytes, src->xxh64, &s, e2, n2);
        free(k.state);
        free(k.tensor);
        if (r == -2)
            snprintf(err, errlen, "%s", e2);
        if (r != 1)
            return r;
    }
    if (!p && !(p = fetch(fctx, 0, src->bytes, e2, n2)))
        return -1;
    return take_whole(rv, i, what, p, src, e2, n2, err, errlen);
}

/* Entry i from a file of `tier` (own memory or disk, the cloud: paced to the
 * rank's share of the node's bandwidth, a read of B bytes ending no earlier
 * than B / rate after the first). Same returns as take_entry. */
static int take_from_file(recovery *rv, int i, const ah_shard_src *src, int tier, char *e2, size_t n2,
                          char *err, size_t errlen) {
    double t0 = now_s();
    if (tier == AH_TIER_CLOUD && rv->cloud_bytes == 0)
        rv->cloud_t0 = t0;
    const unsigned char *map = NULL; /* mapped in place: the pages are read once, into the layer */
    int rc = ah_ckpt_map(src->path, src->bytes, &map, e2, n2) == 0 ? 0 : -1;
    if (rc == 0)
        rc =
            take_entry(rv, i, src->path, src, fetch_mapped, (void *)(uintptr_t)map, map, e2, n2, err, errlen);
    ah_ckpt_unmap(map, src->bytes);
    if (tier == AH_TIER_CLOUD) {
        rv->cloud_bytes += (double)src->bytes;
        double due = rv->cloud_rate > 0 ? rv->cloud_t0 + rv->cloud_bytes / rv->cloud_rate : 0, now = now_s();
        if (due > now)
            usleep((useconds_t)((due - now) * 1e6));
    }
    rv->st->bytes[tier] += (double)src->bytes;
    rv->st->seconds[tier] += now_s() - t0;
    return rc;
}

/* Entry i from its peer's window, one-sided (RDMA on InfiniBand/RoCE). */
static int take_from_peer(recovery *rv, int i, char *e2, size_t n2, char *err, size_t errlen) {
    const ah_recovery_shard *s = &rv->e[i];
    char what[1400];
    snprintf(what, sizeof what, "%s (from rank %d)", s->src.path, s->server);
    if (!rv->addr[i]) {
        snprintf(e2, n2, "%.400s: the holder could not read it", what);
        return -1;
    }
    double t0 = now_s();
    peer_src p = {rv, s->server, rv->addr[i]};
    int rc = take_entry(rv, i, what, &s->src, fetch_peer, &p, NULL, e2, n2, err, errlen);
    rv->st->bytes[AH_TIER_PEER] += (double)s->src.bytes;
    rv->st->seconds[AH_TIER_PEER] += now_s() - t0;
    return rc;
}

/* A copy that failed (its checksum, its size, unreadable) is noted in ASSIGNMENT.bad-RANK, one path a line:
 * the controller leaves it out of its next assignment (a later one may then pick an older complete step). */
static void note_bad_copy(const recovery *rv, const char *path) {
    if (!rv->assignment)
        return;
    char p[4200];
    snprintf(p, sizeof p, "%s.bad-%d", rv->assignment, rv->me);
    FILE *f = fopen(p, "a");
    if (f) {
        fprintf(f, "%s\n", path);
        fclose(f);
    }
}

/* Entry i's other copies in order, after its source (`why`) failed: 0 once one verifies, -1 when
 * none does (e2 says the last reason). */
static int take_fallbacks(recovery *rv, int i, const char *why, char *e2, size_t n2, char *err, size_t errlen) {
    const ah_recovery_shard *s = &rv->e[i];
    char last[1024];
    snprintf(last, sizeof last, "%s", why);
    for (int f = 0; f < s->n_fallback; f++) {
        fprintf(stderr, "autohet: %s; trying the next copy (%s %s)\n", last, ah_tier_name(s->fallback_tier[f]),
                s->fallback[f].path);
        rv->st->fallbacks++;
        char e3[1024] = "";
        if (take_from_file(rv, i, &s->fallback[f], s->fallback_tier[f], e3, sizeof e3, err, errlen) == 0)
            return 0;
        note_bad_copy(rv, s->fallback[f].path);
        snprintf(last, sizeof last, "%s", e3);
    }
    snprintf(e2, n2, "%s", last);
    return -1;
}

/* Every entry of mine, own tiers and peers alike, as they come; a peer shard
 * that does not verify but has other copies is left for later (retry[]), a
 * bad file copy falls back to its other copies at once. 0 or -1 (err). */
static int take_all(recovery *rv, int *retry, char *err, size_t errlen) {
    int rc = 0;
    for (int i = 0; i < rv->n && rc == 0; i++) {
        const ah_recovery_shard *s = &rv->e[i];
        if (s->rank != rv->me)
            continue;
        char e2[1024] = "";
        int r;
        if (s->tier == AH_TIER_PEER) {
            r = take_from_peer(rv, i, e2, sizeof e2, err, errlen);
            if (r == -1)
                note_bad_copy(rv, s->src.path);
            if (r == -1 && s->n_fallback > 0) { /* after the window is closed */
                snprintf(rv->retry_why[i], sizeof rv->retry_why[i], "%s", e2);
                retry[i] = 1;
                r = 0;
            }
        } else {
            r = take_from_file(rv, i, &s->src, s->tier, e2, sizeof e2, err, errlen);
            if (r == -1)
                note_bad_copy(rv, s->src.path);
            if (r == -1 && s->n_fallback > 0) {
                char why[1024];
                snprintf(why, sizeof why, "%s", e2);
                r = take_fallbacks(rv, i, why, e2, sizeof e2, err, errlen);
            }
        }
        if (r == -1)
            snprintf(err, errlen, "layer %d (TP rank %d) at step %d: no good copy of %d (%s)", s->layer, s->tp,
                     rv->step, 1 + s->n_fallback, e2);
        rc = r == 0 ? 0 : -1;
    }
    return rc;
}

/* the cloud copies of the peer shards that did not verify */
static int take_retries(recovery *rv, const int *retry, char *err, size_t errlen) {
    int rc = 0;
    for (int i = 0; i < rv->n && rc == 0; i++) {
        if (!retry[i])
            continue;
        const ah_recovery_shard *s = &rv->e[i];
        char e2[1024] = "";
        int r = take_fallbacks(rv, i, rv->retry_why[i], e2, sizeof e2, err, errlen);
        if (r == -1)
            snprintf(err, errlen, "layer %d (TP rank %d) at step %d: no good copy of %d (%s)", s->layer, s->tp,
                     rv->step, 1 + s->n_fallback, e2);
        rc = r == 0 ? 0 : -1;
    }
    return rc;
}

/* A barrier that sleeps while it waits: a rank done with its share leaves the
 * cores to those still restoring (MPI_Barrier spins; ranks share cores here). */
static void sleeping_barrier(MPI_Comm comm) {
    MPI_Request req;
    MPI_Ibarrier(comm, &req);
    for (int done = 0;;) {
        MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        if (done)
            break;
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
}

/* a region of this rank's memory in the dynamic window: the key (its
 * address) others name it by in their gets */
static uint64_t window_expose(MPI_Win win, const void *base, size_t bytes) {
    MPI_Aint a;
    MPI_Win_attach(win, (void *)(uintptr_t)base, (MPI_Aint)bytes);
    MPI_Get_address(base, &a);
    return (uint64_t)a;
}

/* Servers map the shards they serve (no copy) and attach them to a dynamic RMA
 * window; the addresses are shared. Collective. Returns maps[] by entry. */
static const unsigned char **expose_peer_shards(recovery *rv, uint64_t *addr) {
    const unsigned char **maps = ah_xcalloc((size_t)rv->n + 1, sizeof(*maps));
    for (int i = 0; i < rv->n; i++) {
        const ah_recovery_shard *s = &rv->e[i];
        if (s->tier != AH_TIER_PEER || s->server != rv->me)
            continue;
        int dup = -1;
        for (int j = 0; j < i && dup < 0; j++)
            if (maps[j] && !strcmp(rv->e[j].src.path, s->src.path))
                dup = j;
        char e2[512];
        if (dup >= 0)
            addr[i] = addr[dup];
        else if (ah_ckpt_map(s->src.path, s->src.bytes, &maps[i], e2, sizeof e2) == 0)
            addr[i] = window_expose(rv->win, maps[i], s->src.bytes);
        else
            fprintf(stderr, "autohet: serving a peer shard: %s\n", e2); /* the owner falls back */
    }
    MPI_Allreduce(MPI_IN_PLACE, addr, rv->n, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    return maps;
}

/* Phase 1: every rank takes its shards (own tiers, peers one-sided, the
 * cloud) while serving those it holds for others, and waits for the others
 * asleep; then the servers let go. Phase 2: cloud copies of bad peer
 * shards. Phase 3: reshard groups. Returns this rank's rc. */
static int recover_shards(recovery *rv, char *err, size_t errlen) {
    /* every rank reads the same assignment, so all agree whether a window is
     * needed; a job without peer shards (e.g. shrunk to one rank, where Open
     * MPI's one-sided components refuse a window) makes none */
    int any_peer = 0;
    for (int i = 0; i < rv->n && !any_peer; i++)
        any_peer = rv->e[i].tier == AH_TIER_PEER;
    /* a dynamic window over every world rank: servers beside the training ranks take part */
    rv->has_win = any_peer;
    if (rv->has_win)
        MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &rv->win);
    uint64_t *addr = ah_xcalloc((size_t)rv->n + 1, sizeof(uint64_t));
    const unsigned char **maps = any_peer ? expose_peer_shards(rv, addr) : NULL;
    rv->addr = addr;
    int *retry = ah_xcalloc((size_t)rv->n + 1, sizeof(int));
    rv->retry_why = ah_xcalloc((size_t)rv->n + 1, sizeof *rv->retry_why);
    if (rv->has_win) /* a passive epoch to every rank: gets need nothing of their targets */
        MPI_Win_lock_all(MPI_MODE_NOCHECK, rv->win);
    int rc = take_all(rv, retry, err, errlen);
    if (rv->has_win) {
        MPI_Win_unlock_all(rv->win);
        sleeping_barrier(MPI_COMM_WORLD); /* every get is done: the servers may let go */
        for (int i = 0; i < rv->n; i++)
            if (maps[i]) {
                MPI_Win_detach(rv->win, (void *)(uintptr_t)maps[i]);
                ah_ckpt_unmap(maps[i], rv->e[i].src.bytes);
            }
        MPI_Win_free(&rv->win);
    }
    free(maps);
    free(addr);
    if (rc == 0)
        rc = take_retries(rv, retry, err, errlen);
    free(retry);
    free(rv->retry_why);
    rv->retry_why = NULL;
    if (rc == 0)
        rc = reshard_groups(rv->ls, rv->me, rv->e, rv->n, rv->kept, rv->kept_n, err, errlen);
    return rc;
}

/* The recovery as every world rank plays it; ls == NULL: a server-only rank.
 * The ranks of the plan are world ranks 0..N-1, servers come after them. */
static int recover_core(const ah_layer_store *ls, const char *assignment, int *step_out, ah_recover_stats *st,
                        char *err, size_t errlen) {
    int me, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    memset(st, 0, sizeof *st);
    double t_start = now_s();
    recovery rv = {.ls = ls, .me = me, .st = st, .assignment = assignment};
    ah_recovery_shard *e = NULL;
    int rc = load_assignment(assignment, me, &rv.step, &rv.cloud_rate, &e, &rv.n, err, errlen);
    if (rc == 0)
        rc = check_assignment(ls, assignment, me, world, e, rv.n, rv.step, err, errlen);
    /* every rank must agree on the peer windows before the collective */
    int bad = rc != 0, any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any) {
        if (!bad)
            snprintf(err, errlen, "another rank could not read the recovery assignment");
        free(e);
        return -1;
    }
    rv.e = e;
    rv.kept = ah_xcalloc((size_t)rv.n + 1, sizeof *rv.kept);
    rv.kept_n = ah_xcalloc((size_t)rv.n + 1, sizeof(int));
    rc = recover_shards(&rv, err, errlen);
    for (int i = 0; i < rv.n; i++)
        ah_ckpt_free(rv.kept[i], rv.kept_n[i]);
    free(rv.kept);
    free(rv.kept_n);
    free(rv.buf);
    free(e);

    st->total_s = now_s() - t_start;
    /* bytes summed over ranks, times of the slowest rank */
    MPI_Allreduce(MPI_IN_PLACE, st->bytes, AH_TIER_N, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, st->seconds, AH_TIER_N, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &st->total_s, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &st->fallbacks, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (ah_mpi_agree_on_failure(MPI_COMM_WORLD, rc, err, errlen) != 0)
        return -1;
    *step_out = rv.step;
    return 0;
}

int ah_recovery_assignment_check(const char *path, int rank, char *err, size_t errlen) {
    ah_recovery_shard *e = NULL;
    int n = 0, step = 0;
    double rate = 0;
    int rc = load_assignment(path, rank, &step, &rate, &e, &n, err, errlen);
    free(e);
    return rc;
}

int ah_ckpt_recover(const ah_layer_store *ls, const char *assignment, int *step, ah_recover_stats *st,
                    char *err, size_t errlen) {
    return recover_core(ls, assignment, step, st, err, errlen);
}

/* ---- the server-only ranks: serve, then wait for rank 0's release ---- */

#define SERVER_RELEASE_TAG 7707

int ah_ckpt_serve_recovery(const char *assignment, char *err, size_t errlen) {
    ah_recover_stats st;
    int step;
    if (recover_core(NULL, assignment, &step, &st, err, errlen) != 0)
        return -1;
    for (int flag = 0; !flag;) { /* sleeping, not spinning, until rank 0 releases it */
        MPI_Iprobe(0, SERVER_RELEASE_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
        if (!flag)
            usleep(20000);
    }
    int done;
    MPI_Recv(&done, 1, MPI_INT, 0, SERVER_RELEASE_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    return 0;
}

void ah_ckpt_release_servers(int first, int world) {
    for (int r = first; r < world; r++) {
        int done = 1;
        MPI_Send(&done, 1, MPI_INT, r, SERVER_RELEASE_TAG, MPI_COMM_WORLD);
    }
}
