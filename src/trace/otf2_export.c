/* OTF2 writer for trace records (see include/autohet/trace_otf2.h). */
#include "autohet/trace_otf2.h"
#include "util/errors.h"

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
    return e->rank * per_rank + ah_trace_tid(ah_trace_kind_stream(e->kind), e->lane);
}

static int cmp_ev(const void *a, const void *b) {
    const ah_trace_event *x = &sort_ev[*(const int *)a], *y = &sort_ev[*(const int *)b];
    int lx = location(x), ly = location(y);
    if (lx != ly)
        return (lx > ly) - (lx < ly);
    return (x->t0 > y->t0) - (x->t0 < y->t0);
}

int ah_trace_write_otf2(const char *dir, const char *name, const ah_trace_event *ev, int n, int ranks,
                        char *err, size_t errlen) {
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
        int tid = ah_trace_tid(ah_trace_kind_stream(ev[i].kind), ev[i].lane);
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
        count[location(&ev[i])] += 2;
        t0 = ev[i].t0 < t0 ? ev[i].t0 : t0;
        t1 = ev[i].t1 > t1 ? ev[i].t1 : t1;
    }
    sort_ev = ev;
    qsort(order, (size_t)n, sizeof(int), cmp_ev);

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
    int cur = -1;
    uint64_t last = 0;
    for (int q = 0; q < n; q++) {
        const ah_trace_event *s = &ev[order[q]];
        int loc = location(s);
        if (loc != cur) {
            if (w)
                OTF2_Archive_CloseEvtWriter(ar, w);
            w = OTF2_Archive_GetEvtWriter(ar, (OTF2_LocationRef)loc);
            cur = loc;
            last = 0;
        }
        uint64_t a = (uint64_t)((s->t0 - t0) * 1e9 + 0.5), b = (uint64_t)((s->t1 - t0) * 1e9 + 0.5);
        if (a < last)
            a = last;
        if (b < a)
            b = a;
        OTF2_EvtWriter_Enter(w, NULL, a, (OTF2_RegionRef)region_of[order[q]]);
        OTF2_EvtWriter_Leave(w, NULL, b, (OTF2_RegionRef)region_of[order[q]]);
        last = b;
    }
    if (w)
        OTF2_Archive_CloseEvtWriter(ar, w);
    OTF2_Archive_CloseEvtFiles(ar);
    /* local definitions (none, but every location needs its file) */
    OTF2_Archive_OpenDefFiles(ar);
    for (int loc = 0; loc < per_rank * ranks; loc++) {
        if (!count[loc])
            continue;
        OTF2_DefWriter *dw = OTF2_Archive_GetDefWriter(ar, (OTF2_LocationRef)loc);
        OTF2_Archive_CloseDefWriter(ar, dw);
    }
    OTF2_Archive_CloseDefFiles(ar);
    /* global definitions: strings, regions, system tree, ranks, locations */
    OTF2_GlobalDefWriter *g = OTF2_Archive_GetGlobalDefWriter(ar);
    OTF2_GlobalDefWriter_WriteClockProperties(g, 1000000000, 0, (uint64_t)((t1 - t0) * 1e9 + 0.5),
                                              OTF2_UNDEFINED_TIMESTAMP);
    uint32_t str = 0;
    OTF2_GlobalDefWriter_WriteString(g, str++, "");
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
    uint32_t s_machine = str++, s_node = str++, s_thread0 = str;
    OTF2_GlobalDefWriter_WriteString(g, s_machine, "autohet run");
    OTF2_GlobalDefWriter_WriteString(g, s_node, "machine");
    for (int tid = 0; tid < per_rank; tid++) { /* thread names as in the Chrome trace */
        char tn[32];
        int lane = tid / AH_TRACE_STREAMS;
        const char *sn = ah_trace_stream_name((ah_trace_stream)(tid % AH_TRACE_STREAMS));
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
    OTF2_Archive_CloseGlobalDefWriter(ar, g);
    if (OTF2_Archive_Close(ar) != OTF2_SUCCESS) {
        snprintf(err, errlen, "OTF2: closing %s/%s.otf2 failed", dir, name);
        goto out;
    }
    rc = 0;
out:
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
                        char *err, size_t errlen) {
    (void)dir, (void)name, (void)ev, (void)n, (void)ranks;
    snprintf(err, errlen,
             "this autohet was built without OTF2 (install libopen-trace-format2-dev and rebuild)");
    return -1;
}

#endif
