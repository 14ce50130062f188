/* The registry of compute backends (see backend.h). The CPU backend is always
 * there; a CUDA backend built into the library defines ah__backend_cuda() in
 * its own file and is found through the weak reference below, so adding it
 * changes no file outside its own (and the build). */
#include "engine/backend.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/errors.h"

const ah_backend *ah__backend_cuda(void) __attribute__((weak));
const char *ah__backend_cuda_why(void) __attribute__((weak));

const ah_backend *ah__backend_get(const char *name) {
    if (name == NULL)
        return NULL;
    if (!strcmp(name, "cpu"))
        return ah__backend_cpu();
    if (!strcmp(name, "cuda") && ah__backend_cuda)
        return ah__backend_cuda();
    return NULL;
}

int ah_backend_check(const char *name, char *err, size_t errlen) {
    if (ah__backend_get(name) != NULL)
        return 0;
    if (name != NULL && !strcmp(name, "cuda")) {
        if (!ah__backend_cuda)
            snprintf(err, errlen, "built without CUDA");
        else
            snprintf(err, errlen, "no CUDA device visible (%s)", ah__backend_cuda_why ? ah__backend_cuda_why() : "");
    } else {
        snprintf(err, errlen, "no compute backend '%.64s' (cpu%s)", name ? name : "", ah__backend_cuda ? ", cuda" : "");
    }
    return -1;
}

const ah_backend *ah__backend_default(ah_matmul_precision prec, char *err, size_t errlen) {
    const char *name = getenv("AUTOHET_BACKEND");
    if (name == NULL || !*name)
        name = "cpu";
    if (!strcmp(name, "cpu"))
        return ah__backend_cpu_prec(prec);
    const ah_backend *be = ah__backend_get(name);
    if (be == NULL && !strcmp(name, "cuda")) {
        char why[320];
        ah_backend_check(name, why, sizeof why);
        snprintf(err, errlen, "AUTOHET_BACKEND=cuda: %s", why);
    } else if (be == NULL)
        snprintf(err, errlen, "AUTOHET_BACKEND=%.64s: no such compute backend in this build (available: cpu%s)",
                 name, ah__backend_cuda ? ", cuda" : "");
    else if (prec != AH_MATMUL_FP32) { /* the precision is the CPU backend's context */
        snprintf(err, errlen, "AUTOHET_BACKEND=%.64s: computes in fp32 (precision %s is the CPU backend's)", name,
                 ah_matmul_precision_name(prec));
        return NULL;
    }
    return be;
}

/* ---- memory accounting: an open-addressing table from buffer to its size */

typedef struct {
    const void *p;
    size_t bytes;
} mem_slot;

static mem_slot *mem_tab;
static size_t mem_cap, mem_used; /* capacity (a power of two), live entries */
static double mem_live, mem_peak;

static size_t mem_hash(const void *p, size_t cap) {
    uint64_t h = (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 17) & (cap - 1);
}

static void mem_insert(mem_slot *tab, size_t cap, const void *p, size_t bytes) {
    size_t i = mem_hash(p, cap);
    while (tab[i].p)
        i = (i + 1) & (cap - 1);
    tab[i] = (mem_slot){p, bytes};
}

void ah__be_mem_track_alloc(ah_dptr d, size_t bytes) {
    if (ah__dptr_is_null(d))
        return;
    if (2 * (mem_used + 1) > mem_cap) { /* grow at half full */
        size_t cap = mem_cap ? 2 * mem_cap : 1024;
        mem_slot *tab = calloc(cap, sizeof *tab);
        if (!tab)
            ah_out_of_memory(cap * sizeof *tab);
        for (size_t i = 0; i < mem_cap; i++)
            if (mem_tab[i].p)
                mem_insert(tab, cap, mem_tab[i].p, mem_tab[i].bytes);
        free(mem_tab);
        mem_tab = tab;
        mem_cap = cap;
    }
    mem_insert(mem_tab, mem_cap, d.p, bytes);
    mem_used++;
    mem_live += (double)bytes;
    if (mem_live > mem_peak)
        mem_peak = mem_live;
}

void ah__be_mem_track_free(ah_dptr d) {
    if (ah__dptr_is_null(d) || mem_cap == 0)
        return;
    size_t i = mem_hash(d.p, mem_cap);
    while (mem_tab[i].p && mem_tab[i].p != (const void *)d.p)
        i = (i + 1) & (mem_cap - 1);
    if (!mem_tab[i].p)
        return; /* not allocated through ah__be_alloc */
    mem_live -= (double)mem_tab[i].bytes;
    mem_tab[i].p = NULL;
    mem_used--;
    /* re-insert the rest of the cluster so that lookups stay correct */
    for (size_t j = (i + 1) & (mem_cap - 1); mem_tab[j].p; j = (j + 1) & (mem_cap - 1)) {
        mem_slot e = mem_tab[j];
        mem_tab[j].p = NULL;
        mem_insert(mem_tab, mem_cap, e.p, e.bytes);
    }
}

ah_be_mem ah__be_mem_stats(void) {
    return (ah_be_mem){mem_live, mem_peak};
}

void ah__be_mem_reset_peak(void) {
    mem_peak = mem_live;
}
