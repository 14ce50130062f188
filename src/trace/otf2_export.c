/* OTF2 writer for trace records (see include/autohet/trace_otf2.h). */
#include "autohet/trace_otf2.h"
#include "util/errors.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef AUTOHET_HAVE_OTF2
#include <otf2/otf2.h>

int ah_trace_otf2_available(void) {
    return 1;
}

static OTF2_FlushType pre_flush(void *user, OTF2_FileType type, OTF2_LocationRef loc, void *caller,
                                bool final) {
    (void)user, (void)type, (void)loc, (void)caller, (void) final;
    return OTF2_FLUSH;
}

static OTF2_TimeStamp post_flush(void *user, OTF2_FileType type, OTF2_LocationRef loc) {
    (void)user, (void)type, (void)loc;
    return 0;
}

static const ah_trace_event *sort_ev;
static int per_rank; /* locations per rank: the largest tid + 1 */
static int location(const ah_trace_event *e) {
    return e->rank * per_rank + ah_trace_tid(ah_op_kind_stream(e->kind), e->lane);
}

static int cmp_ev(const void *a, const void *b) {
    const ah_trace_event *x = &sort_ev[*(const int *)a], *y = &sort_ev[*(const int *)b];
    int lx = location(x), ly = location(y);
    if (lx != ly)
        return (lx > ly) - (lx < ly);
    return (x->t0 > y->t0) - (x->t0 < y->t0);
}

/* ------------------------------------------------------------ MPI records */

/* The engine's point-to-point traffic goes over MPI_COMM_WORLD (comm 0); a
 * collective's communicator is the set of ranks that call its site with the
 * same group (lowest rank); equal sets share one definition. */
#define MAX_COMMS 256
typedef struct {
    int n_comms;
    int *members[MAX_COMMS]; /* ranks, ascending */
    int size[MAX_COMMS];
    char name[MAX_COMMS][80];
    int *comm_of; /* per event: its communicator, -1 none */
} otf2_comms;

static int is_collective(ah_op_kind k) {
    return k == AH_OP_TP_ALLREDUCE || k == AH_OP_DP_ALLREDUCE || k == AH_OP_STEP_SYNC;
}

static int is_p2p_message(ah_op_kind k) {
    return k == AH_OP_SEND_ACTIVATION || k == AH_OP_SEND_GRADIENT || k == AH_OP_RECV_ACTIVATION ||
           k == AH_OP_RECV_GRADIENT || k == AH_OP_TIED_SYNC;
}

static int comm_find(const otf2_comms *c, const int *m, int size) {
    for (int k = 0; k < c->n_comms; k++)
        if (c->size[k] == size && !memcmp(c->members[k], m, sizeof(int) * (size_t)size))
            return k;
    return -1;
}

/* comm 0 = world; one per distinct member set of (site, group) */
static void build_comms(const ah_trace_event *ev, int n, int ranks, otf2_comms *c) {
    memset(c, 0, sizeof *c);
    c->comm_of = ah_xcalloc((size_t)n, sizeof(int));
    c->members[0] = ah_xcalloc((size_t)ranks, sizeof(int));
    for (int r = 0; r < ranks; r++)
        c->members[0][r] = r;
    c->size[0] = ranks;
    snprintf(c->name[0], sizeof c->name[0], "MPI_COMM_WORLD");
    c->n_comms = 1;
    char *in = ah_xcalloc((size_t)ranks, 1);
    int *m = ah_xcalloc((size_t)ranks, sizeof(int));
    for (int i = 0; i < n; i++) {
        c->comm_of[i] = is_p2p_message(ev[i].kind) ? 0 : -1;
        if (!is_collective(ev[i].kind))
            continue;
        char site[64], other[64];
        ah_trace_site_name(&ev[i], site, sizeof site);
        memset(in, 0, (size_t)ranks);
        for (int j = 0; j < n; j++) /* every rank calling this site with this group */
            if (ev[j].kind == ev[i].kind && ev[j].group == ev[i].group &&
                !strcmp(ah_trace_site_name(&ev[j], other, sizeof other), site))
                in[ev[j].rank] = 1;
        int size = 0;
        for (int r = 0; r < ranks; r++)
            if (in[r])
                m[size++] = r;
        int k = comm_find(c, m, size);
        if (k < 0 && c->n_comms < MAX_COMMS) {
            k = c->n_comms++;
            c->members[k] = ah_xcalloc((size_t)size, sizeof(int));
            memcpy(c->members[k], m, sizeof(int) * (size_t)size);
            c->size[k] = size;
            snprintf(c->name[k], sizeof c->name[k], "%s group %d", site, ev[i].group);
        }
        c->comm_of[i] = k < 0 ? 0 : k;
    }
    free(in);
    free(m);
}

static void free_comms(otf2_comms *c) {
    for (int k = 0; k < c->n_comms; k++)
        free(c->members[k]);
    free(c->comm_of);
}

/* MPI records of an event, written between its Enter (at a) and Leave (at b).
 * Sends and receives name the peer's world rank; their tag is the export's
 * own, from the trace's direction and micro-batch (2 mb for activations,
 * 2 mb + 1 for gradients; the tied exchange: TIED_TAG), as the Chrome trace
 * does not carry MPI's tag (the step's own tags: autohet/schedule.h).
 * Returns the records written. */
/* a tag no (direction, micro-batch) pair takes (2 mb + 1 < 2^32 - 1 for any int micro-batch); it was 77, which
 * the gradient of micro-batch 38 also took */
#define TIED_TAG UINT32_MAX
static int write_mpi_records(OTF2_EvtWriter *w, const ah_trace_event *e, const otf2_comms *c, int i, uint64_t a,
                             uint64_t b) {
    int comm = c->comm_of[i];
    if (comm < 0 || (!is_collective(e->kind) && e->peer < 0))
        return 0;
    uint64_t bytes = (uint64_t)(e->bytes > 0 ? e->bytes : 0);
    uint32_t mb = e->micro_batch > 0 ? (uint32_t)e->micro_batch : 0, peer = (uint32_t)e->peer;
    switch (e->kind) {
    case AH_OP_SEND_ACTIVATION:
    case AH_OP_SEND_GRADIENT:
        OTF2_EvtWriter_MpiSend(w, NULL, a, peer, 0, 2 * mb + (e->kind == AH_OP_SEND_GRADIENT), bytes);
        return 1;
    case AH_OP_RECV_ACTIVATION:
    case AH_OP_RECV_GRADIENT:
        OTF2_EvtWriter_MpiRecv(w, NULL, b, peer, 0, 2 * mb + (e->kind == AH_OP_RECV_GRADIENT), bytes);
        return 1;
    case AH_OP_TIED_SYNC: /* MPI_Sendrecv with the partner */
        OTF2_EvtWriter_MpiSend(w, NULL, a, peer, 0, TIED_TAG, bytes);
        OTF2_EvtWriter_MpiRecv(w, NULL, b, peer, 0, TIED_TAG, bytes);
        return 2;
    default:
        OTF2_EvtWriter_MpiCollectiveBegin(w, NULL, a);
        OTF2_EvtWriter_MpiCollectiveEnd(w, NULL, b, OTF2_COLLECTIVE_OP_ALLREDUCE, (OTF2_CommRef)comm,
                                        OTF2_UNDEFINED_UINT32, bytes, bytes);
        return 2;
    }
}

/* the MPI location of each rank (for COMM_LOCATIONS): its p2p thread, else
 * its first location with events */
static void write_comm_defs(OTF2_GlobalDefWriter *g, const otf2_comms *c, const uint64_t *count, int ranks,
                            uint32_t *str) {
    uint64_t *locs = ah_xcalloc((size_t)ranks, sizeof(uint64_t)), *m = ah_xcalloc((size_t)ranks, sizeof(uint64_t));
    for (int r = 0; r < ranks; r++) {
        int p2p = r * per_rank + ah_trace_tid(AH_STREAM_P2P, 0), loc = p2p < (r + 1) * per_rank && count[p2p] ? p2p : -1;
        for (int q = 0; loc < 0 && q < per_rank; q++)
            if (count[r * per_rank + q])
                loc = r * per_rank + q;
        locs[r] = (uint64_t)(loc < 0 ? r * per_rank : loc);
    }
    uint32_t s_locs = (*str)++;
    OTF2_GlobalDefWriter_WriteString(g, s_locs, "MPI ranks");
    OTF2_GlobalDefWriter_WriteGroup(g, 0, s_locs, OTF2_GROUP_TYPE_COMM_LOCATIONS, OTF2_PARADIGM_MPI,
                                    OTF2_GROUP_FLAG_NONE, (uint32_t)ranks, locs);
    for (int k = 0; k < c->n_comms; k++) {
        for (int q = 0; q < c->size[k]; q++)
            m[q] = (uint64_t)c->members[k][q];
        uint32_t s = (*str)++;
        OTF2_GlobalDefWriter_WriteString(g, s, c->name[k]);
        OTF2_GlobalDefWriter_WriteGroup(g, (OTF2_GroupRef)(k + 1), s, OTF2_GROUP_TYPE_COMM_GROUP, OTF2_PARADIGM_MPI,
                                        OTF2_GROUP_FLAG_NONE, (uint32_t)c->size[k], m);
        OTF2_GlobalDefWriter_WriteComm(g, (OTF2_CommRef)k, s, (OTF2_GroupRef)(k + 1),
                                       k ? 0 : OTF2_UNDEFINED_COMM, OTF2_COMM_FLAG_NONE);
    }
    free(locs);
    free(m);
}

/* one region per call site: compute sites are user functions, the rest MPI */
static void write_region_defs(OTF2_GlobalDefWriter *g, char (*regions)[64], int n_regions, uint32_t *next_str) {
    uint32_t str = *next_str;
    for (int k = 0; k < n_regions; k++) {
        OTF2_GlobalDefWriter_WriteString(g, str, regions[k]);
        int comm = strcmp(regions[k], "forward") && strcmp(regions[k], "backward") &&
                   strcmp(regions[k], "optimizer");
        OTF2_RegionRole role = !comm                              ? OTF2_REGION_ROLE_FUNCTION
                               : !strncmp(regions[k], "recv_", 5) ? OTF2_REGION_ROLE_POINT2POINT
                               : !strncmp(regions[k], "send_", 5) ? OTF2_REGION_ROLE_POINT2POINT
                                                                  : OTF2_REGION_ROLE_COLL_ALL2ALL;
        OTF2_GlobalDefWriter_WriteRegion(g, (OTF2_RegionRef)k, str, str, 0, role,
                                         comm ? OTF2_PARADIGM_MPI : OTF2_PARADIGM_USER, OTF2_REGION_FLAG_NONE,
                                         0, 0, 0);
        str++;
    }
    *next_str = str;
}

/* ------------------------------------------------------------- clocks */

/* An event time (seconds from the trace's origin) as an OTF2 timestamp: with a
 * clock correction, the rank's own CLOCK_MONOTONIC in ns (the ClockOffset
 * definitions map it onto rank 0's, as Score-P's traces do); without, ns from
 * the earliest record. */
static uint64_t stamp(const ah_trace_clock *clk, int rank, double t, double t0) {
    if (!clk || !clk->present)
        return (uint64_t)((t - t0) * 1e9 + 0.5);
    double ns = ah_trace_clock_local(clk, rank, t) * 1e9;
    return ns > 0 ? (uint64_t)llround(ns) : 0;
}

/* The rank's offsets to rank 0's clock at the two measurements, as OTF2
 * ClockOffset records of the location: time (its own clock), global - local,
 * and the residual (the half round trip bounding the offset's error) as the
 * standard deviation. */
static void write_clock_offsets(OTF2_DefWriter *dw, const ah_trace_clock *clk, int rank) {
    if (!clk || !clk->present || rank >= clk->n)
        return;
    const ah_trace_clock_rank *q = &clk->ranks[rank];
    double when[2] = {q->sync_start_s, q->sync_end_s};
    for (int k = 0; k < (q->sync_end_s > q->sync_start_s ? 2 : 1); k++) {
        uint64_t local = stamp(clk, rank, when[k], 0);
        int64_t global = llround((clk->origin_s + when[k]) * 1e9);
        OTF2_DefWriter_WriteClockOffset(dw, local, global - (int64_t)local, q->residual_s * 1e9);
    }
}

int ah_trace_write_otf2(const char *dir, const char *name, const ah_trace_event *ev, int n, int ranks,
                        const ah_trace_clock *clk, char *err, size_t errlen) {
    if (n <= 0 || ranks <= 0) {
        snprintf(err, errlen, "OTF2: no events to write");
        return -1;
    }
    per_rank = 1;
    for (int i = 0; i < n; i++) {
        if (ev[i].rank < 0 || ev[i].rank >= ranks || ev[i].lane < 0 || ev[i].lane > 4096) {
            snprintf(err, errlen, "OTF2: record %d is on rank %d lane %d, outside %d ranks", i, ev[i].rank,
                     ev[i].lane, ranks);
            return -1;
        }
        int tid = ah_trace_tid(ah_op_kind_stream(ev[i].kind), ev[i].lane);
        per_rank = tid + 1 > per_rank ? tid + 1 : per_rank;
    }
    /* regions: distinct call sites */
    char(*regions)[64] = ah_xcalloc((size_t)n, sizeof *regions);
    int *region_of = ah_xcalloc((size_t)n, sizeof(int)), *order = ah_xcalloc((size_t)n, sizeof(int));
    uint64_t *count = ah_xcalloc((size_t)ranks * (size_t)per_rank, sizeof(uint64_t));
    int n_regions = 0;
    double t0 = ev[0].t0, t1 = ev[0].t1;
    for (int i = 0; i < n; i++) {
        char site[64];
        ah_trace_site_name(&ev[i], site, sizeof site);
        int k = 0;
        while (k < n_regions && strcmp(regions[k], site))
            k++;
        if (k == n_regions)
            snprintf(regions[n_regions++], sizeof regions[0], "%s", site);
        region_of[i] = k;
        order[i] = i;
        t0 = ev[i].t0 < t0 ? ev[i].t0 : t0;
        t1 = ev[i].t1 > t1 ? ev[i].t1 : t1;
    }
    sort_ev = ev;
    qsort(order, (size_t)n, sizeof(int), cmp_ev);
    otf2_comms comms;
    build_comms(ev, n, ranks, &comms);

    int rc = -1;
    OTF2_Archive *ar = OTF2_Archive_Open(dir, name, OTF2_FILEMODE_WRITE, 1024 * 1024, 4 * 1024 * 1024,
                                         OTF2_SUBSTRATE_POSIX, OTF2_COMPRESSION_NONE);
    if (!ar) {
        snprintf(err, errlen, "OTF2: cannot create archive %s/%s.otf2", dir, name);
        goto out;
    }
    OTF2_FlushCallbacks fcb = {.otf2_pre_flush = pre_flush, .otf2_post_flush = post_flush};
    if (OTF2_Archive_SetFlushCallbacks(ar, &fcb, NULL) != OTF2_SUCCESS ||
        OTF2_Archive_SetSerialCollectiveCallbacks(ar) != OTF2_SUCCESS ||
        OTF2_Archive_OpenEvtFiles(ar) != OTF2_SUCCESS) {
        snprintf(err, errlen, "OTF2: cannot open event files under %s", dir);
        OTF2_Archive_Close(ar);
        goto out;
    }
    /* events, location by location, in time order; a location's operations are
     * sequential, so a rounding overlap is clipped to keep Enter/Leave nested */
    OTF2_EvtWriter *w = NULL;
    int cur = -1, closed = 1;
    uint64_t last = 0;
    for (int q = 0; q < n; q++) {
        const ah_trace_event *s = &ev[order[q]];
        int loc = location(s);
        if (loc != cur) {
            if (w)
                closed &= OTF2_Archive_CloseEvtWriter(ar, w) == OTF2_SUCCESS;
            w = OTF2_Archive_GetEvtWriter(ar, (OTF2_LocationRef)loc);
            cur = loc;
            last = 0;
        }
        uint64_t a = stamp(clk, s->rank, s->t0, t0), b = stamp(clk, s->rank, s->t1, t0);
        if (a < last)
            a = last;
        if (b < a)
            b = a;
        OTF2_EvtWriter_Enter(w, NULL, a, (OTF2_RegionRef)region_of[order[q]]);
        count[loc] += 2 + (uint64_t)write_mpi_records(w, s, &comms, order[q], a, b);
        OTF2_EvtWriter_Leave(w, NULL, b, (OTF2_RegionRef)region_of[order[q]]);
        last = b;
    }
    if (w)
        closed &= OTF2_Archive_CloseEvtWriter(ar, w) == OTF2_SUCCESS;
    closed &= OTF2_Archive_CloseEvtFiles(ar) == OTF2_SUCCESS;
    /* local definitions (none, but every location needs its file) */
    closed &= OTF2_Archive_OpenDefFiles(ar) == OTF2_SUCCESS;
    for (int loc = 0; loc < per_rank * ranks; loc++) {
        if (!count[loc])
            continue;
        OTF2_DefWriter *dw = OTF2_Archive_GetDefWriter(ar, (OTF2_LocationRef)loc);
        write_clock_offsets(dw, clk, loc / per_rank);
        closed &= OTF2_Archive_CloseDefWriter(ar, dw) == OTF2_SUCCESS;
    }
    closed &= OTF2_Archive_CloseDefFiles(ar) == OTF2_SUCCESS;
    /* global definitions: strings, regions, system tree, ranks, locations */
    OTF2_GlobalDefWriter *g = OTF2_Archive_GetGlobalDefWriter(ar);
    if (clk && clk->present) /* on rank 0's clock, 1 us of slack for the rounding of the corrections */
        OTF2_GlobalDefWriter_WriteClockProperties(
            g, 1000000000, (uint64_t)llround((clk->origin_s + t0) * 1e9) - 1000,
            (uint64_t)((t1 - t0) * 1e9 + 0.5) + 2000, OTF2_UNDEFINED_TIMESTAMP);
    else
        OTF2_GlobalDefWriter_WriteClockProperties(g, 1000000000, 0, (uint64_t)((t1 - t0) * 1e9 + 0.5),
                                                  OTF2_UNDEFINED_TIMESTAMP);
    uint32_t str = 0;
    OTF2_GlobalDefWriter_WriteString(g, str++, "");
    write_region_defs(g, regions, n_regions, &str);
    uint32_t s_machine = str++, s_node = str++, s_thread0 = str;
    OTF2_GlobalDefWriter_WriteString(g, s_machine, "autohet run");
    OTF2_GlobalDefWriter_WriteString(g, s_node, "machine");
    for (int tid = 0; tid < per_rank; tid++) { /* thread names as in the Chrome trace */
        char tn[32];
        int lane = tid / AH_STREAMS;
        const char *sn = ah_stream_name((ah_stream)(tid % AH_STREAMS));
        if (lane)
            snprintf(tn, sizeof tn, "%s #%d", sn, lane + 1);
        else
            snprintf(tn, sizeof tn, "%s", sn);
        OTF2_GlobalDefWriter_WriteString(g, str++, tn);
    }
    OTF2_GlobalDefWriter_WriteSystemTreeNode(g, 0, s_machine, s_node, OTF2_UNDEFINED_SYSTEM_TREE_NODE);
    for (int r = 0; r < ranks; r++) {
        char label[32];
        snprintf(label, sizeof label, "rank %d", r);
        uint32_t s_rank = str++;
        OTF2_GlobalDefWriter_WriteString(g, s_rank, label);
        OTF2_GlobalDefWriter_WriteLocationGroup(g, (OTF2_LocationGroupRef)r, s_rank,
                                                OTF2_LOCATION_GROUP_TYPE_PROCESS, 0,
                                                OTF2_UNDEFINED_LOCATION_GROUP);
        for (int c = 0; c < per_rank; c++)
            if (count[per_rank * r + c])
                OTF2_GlobalDefWriter_WriteLocation(g, (OTF2_LocationRef)(per_rank * r + c), s_thread0 + (uint32_t)c,
                                                   OTF2_LOCATION_TYPE_CPU_THREAD, count[per_rank * r + c],
                                                   (OTF2_LocationGroupRef)r);
    }
    write_comm_defs(g, &comms, count, ranks, &str);
    closed &= OTF2_Archive_CloseGlobalDefWriter(ar, g) == OTF2_SUCCESS;
    if (OTF2_Archive_Close(ar) != OTF2_SUCCESS || !closed) { /* a write error (a full disk) is not success */
        snprintf(err, errlen, "OTF2: closing %s/%s.otf2 failed", dir, name);
        goto out;
    }
    rc = 0;
out:
    free_comms(&comms);
    free(regions);
    free(region_of);
    free(order);
    free(count);
    return rc;
}

#else

int ah_trace_otf2_available(void) {
    return 0;
}

int ah_trace_write_otf2(const char *dir, const char *name, const ah_trace_event *ev, int n, int ranks,
                        const ah_trace_clock *clk, char *err, size_t errlen) {
    (void)dir, (void)name, (void)ev, (void)n, (void)ranks, (void)clk;
    snprintf(err, errlen,
             "this autohet was built without OTF2 (install libopen-trace-format2-dev and rebuild)");
    return -1;
}

#endif
