/* The commbench measurement loop (docs/commbench.md): message sizes, warm-up
 * and timed iterations of one operation over MPI_COMM_WORLD, min/avg/max over
 * the ranks, bandwidths, and the comm-profile JSON of results and fits.
 * `autohet commbench` parses flags, calls these and prints. */
#ifndef AUTOHET_COMM_COMMBENCH_H
#define AUTOHET_COMM_COMMBENCH_H
#include <stddef.h>

#include <cjson/cJSON.h>

#include "autohet/comm.h"

#define AH_COMMBENCH_MAX_SIZES 64

/* Where the ranks are: nodes = distinct shared-memory nodes; p2p_same_node:
 * ranks 0 and 1 share one. Collective. */
typedef struct {
    int ranks, nodes, p2p_same_node;
} ah_commbench_topology;
void ah_commbench_topology_probe(ah_commbench_topology *t);
/* "intra-node" / "inter-node" of op's participants (point-to-point: ranks 0 and 1) */
const char *ah_commbench_link_class(const ah_commbench_topology *t, ah_comm_op op);

/* The message buffers for sizes up to max_bytes. NULL pair on allocation failure. */
typedef struct {
    char *send, *recv;
    size_t max_bytes;
} ah_commbench_buffers;
int ah_commbench_buffers_alloc(ah_commbench_buffers *b, size_t max_bytes);
void ah_commbench_buffers_free(ah_commbench_buffers *b);

/* The sizes op is measured at: powers of two from min_bytes to max_bytes that
 * the op can split over n ranks; returns the count (at most max). */
int ah_commbench_sizes(ah_comm_op op, size_t min_bytes, size_t max_bytes, int n, size_t *sizes, int max);
/* Timed iterations for a size: `base` for small messages, fewer for big ones, at least 3. */
int ah_commbench_iters(size_t bytes, int base);
/* Measures op at `bytes` (collective): iters/10 + 2 warm-up iterations, then
 * `iters` timed ones; min/avg/max over the participating ranks, algbw, busbw
 * (fit_us left 0). */
void ah_commbench_measure(ah_comm_op op, size_t bytes, int iters, const ah_commbench_buffers *b,
                          ah_comm_result *out);

/* The comm-profile document parts: one results[] entry, one fits[] entry
 * (single fit with its error per size, and the two-regime fit). */
cJSON *ah_commbench_result_json(const ah_comm_result *r, const char *link_class);
cJSON *ah_commbench_fit_json(ah_comm_op op, const char *link_class, const ah_comm_fit *f,
                             const ah_comm_fit2 *f2, const size_t *sizes, const double *avg_us, int n);
/* {format, version, ranks, nodes, results, fits}; takes ownership of both arrays */
cJSON *ah_commbench_profile_json(const ah_commbench_topology *t, cJSON *results, cJSON *fits);

#endif
