/* The commbench measurement loop (docs/commbench.md): message sizes, the
 * pairs point-to-point is measured between, warm-up and timed repetitions of
 * one operation over MPI_COMM_WORLD under barrier or window synchronisation,
 * the correctness check of every result, statistics, and the comm-profile
 * JSON of results and fits. `autohet commbench` parses flags, calls these and
 * prints (commbench_print.c). */
#ifndef AUTOHET_COMMBENCH_H
#define AUTOHET_COMMBENCH_H
#include <stddef.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "autohet/comm.h"

#define AH_COMMBENCH_MAX_SIZES 192
#define AH_COMMBENCH_MAX_PAIRS 256

/* The test hook of the correctness check: with this environment variable set
 * to a rank, that rank changes element 0 of its input after filling it, so
 * the check must report #wrong > 0 (tests/cli_commbench.sh). */
#define AH_COMMBENCH_CORRUPT_ENV "AUTOHET_COMMBENCH_CORRUPT_RANK"

#define AH_COMMBENCH_HOST_LEN 64

/* Where the ranks are: node_of[r] = r's node (0.. nodes-1, in order of first
 * rank); host(t, k) = node k's host name (MPI_Get_processor_name of its first
 * rank, cut to 63 characters). Collective. */
typedef struct {
    int ranks, nodes;
    int *node_of;
    char *hosts; /* nodes x AH_COMMBENCH_HOST_LEN */
} ah_commbench_topology;
#define ah_commbench_host(t, k) ((t)->hosts + (size_t)(k)*AH_COMMBENCH_HOST_LEN)
void ah_commbench_topology_probe(ah_commbench_topology *t);
void ah_commbench_topology_free(ah_commbench_topology *t);
/* "intra-node" / "inter-node": of ranks a and b; of all ranks for a < 0 */
const char *ah_commbench_link_class(const ah_commbench_topology *t, int a, int b);

/* Point-to-point pairs: "classes" (the lowest pair of every link class
 * present), "all" (every pair), "hosts" (every pair of hosts: for each node
 * with two ranks or more its first two, then for every two nodes a < b their
 * first ranks), or a list "A-B,C-D". Returns the count, or -1 with msg
 * naming the bad entry (or too many hosts for max pairs). */
typedef struct {
    int src, dst;
} ah_commbench_pair;
int ah_commbench_pairs(const ah_commbench_topology *t, const char *spec, ah_commbench_pair *out, int max,
                       char *msg, size_t n);

/* The message buffers for sizes up to max_bytes. -1 on allocation failure. */
typedef struct {
    char *send, *recv;
    size_t max_bytes;
} ah_commbench_buffers;
int ah_commbench_buffers_alloc(ah_commbench_buffers *b, size_t max_bytes);
void ah_commbench_buffers_free(ah_commbench_buffers *b);

/* The sizes op is measured at: min_bytes x factor^k up to max_bytes (factor
 * 2: powers of two; else rounded to whole units of the op's element type and
 * split over n ranks, duplicates dropped), those the op allows; returns the count. */
int ah_commbench_sizes(ah_comm_op op, size_t min_bytes, size_t max_bytes, int n, double factor, size_t *sizes,
                       int max);
/* Timed repetitions for a size: `base` for small messages, fewer for big ones, at least 3. */
int ah_commbench_iters(size_t bytes, int base);

typedef enum { AH_SYNC_BARRIER = 0, AH_SYNC_WINDOW } ah_commbench_sync;

/* One measurement: op at bytes, out-of-place or in-place (MPI_IN_PLACE; a
 * ping-pong from and into one buffer), between src and dst for
 * point-to-point. */
typedef struct {
    ah_comm_op op;
    size_t bytes;
    int iters, in_place, src, dst;
    ah_commbench_sync sync;
    int batch; /* operations per timed repetition; 0: auto (below) */
} ah_commbench_case;

/* --batch auto: a repetition of a fast point-to-point operation times this
 * many back to back (osu_latency and osu_bw time their whole loop), so that
 * one lasts about this long: a single sub-microsecond ping-pong carries the
 * barrier's exit skew and the clock's overhead. Collectives are timed call
 * by call, as OSU's collective tests do (back-to-back calls let a rank run
 * ahead: a different operation from one collective between computations). */
#define AH_COMMBENCH_BATCH_TARGET_US 20.0
#define AH_COMMBENCH_MAX_BATCH 1000

/* nccl-tests' columns of op: element type ("float", "int8"), reduction
 * ("sum", "none"), root (-1 none) and element count of bytes */
const char *ah_commbench_type_name(ah_comm_op op);
const char *ah_commbench_redop_name(ah_comm_op op);
int ah_commbench_root(ah_comm_op op);
size_t ah_commbench_count(ah_comm_op op, size_t bytes);

/* A case's repetitions gathered over several calls (rounds, `--rounds`):
 * slowest_us[] the valid ones in measurement order (each the slowest
 * participant's time), at most cap; this rank's sum and count for the
 * per-rank means. */
typedef struct {
    double *slowest_us;
    int n_valid, cap, iters, invalid, participates, my_count, batch;
    double my_sum;
} ah_commbench_samples;
void ah_commbench_samples_init(ah_commbench_samples *s, int cap);
void ah_commbench_samples_free(ah_commbench_samples *s);
/* Measures a case into s (collective): warm-up, then c->iters more
 * repetitions; per repetition the time of its slowest participant (per
 * operation: a repetition of a batch divides by it). Barrier: each repetition
 * starts after MPI_Barrier and is timed locally. Window (ReproMPI): the
 * clocks are synchronised to rank 0's, every repetition starts at its own
 * global time (windows twice the warm-up's slowest repetition), and is timed
 * from that start to the rank's end; a repetition a rank began late is
 * dropped (s->invalid). */
void ah_commbench_sample(const ah_commbench_case *c, const ah_commbench_buffers *b, ah_commbench_samples *s);
/* The statistics of everything in s (collective): fills out (wrong left 0),
 * rep_us (may be NULL) gets the valid repetitions in measurement order;
 * returns their count. */
int ah_commbench_summarize(const ah_commbench_case *c, const ah_commbench_samples *s, ah_comm_result *out,
                           double *rep_us);

/* One repetition of a case after a barrier (the check's run) */
void ah_commbench_run_once(const ah_commbench_case *c, const ah_commbench_buffers *b);

/* The correctness check (collective): fills every rank's input with values
 * depending on rank and index, runs the case once, compares every element of
 * every rank's result with the value it must have; returns the mismatches
 * summed over the ranks (the same on every rank). */
long ah_commbench_check(const ah_commbench_case *c, const ah_commbench_buffers *b);

/* The comm-profile document parts: one results[] entry (rep_us: its
 * repetitions, n_reps of them), one fits[] entry (the piecewise model, its
 * error per size, and the single line; statistic: the results[] field the
 * fitted times us[] are, "median_us" or "p25_us"). */
cJSON *ah_commbench_result_json(const ah_comm_result *r, const char *link_class, const ah_commbench_case *c,
                                const double *rep_us, int n_reps);
cJSON *ah_commbench_fit_json(ah_comm_op op, const char *link_class, const ah_commbench_case *c,
                             const ah_comm_fit *line, const ah_comm_piecewise *pw, const size_t *sizes,
                             const double *us, int n, const char *statistic);
/* Shared links (--pairs hosts, commbench_shared.c): for every two hosts a < b
 * with two ranks or more each, k = the fewer ranks of the two hosts' pairs (the
 * i-th rank of a to the i-th of b) stream a window of 4 messages of `bytes`
 * at once after a barrier, and one pair alone the same way: gbs[a n + b]
 * (symmetric) = k x 4 x bytes / the slowest pair's time, one_gbs[] the one
 * pair's, each the median of 3 repetitions after a warm-up; flows[] = k; 0
 * where not measured (a host with one rank). Collective. */
typedef struct {
    int nodes;
    size_t bytes;
    double *gbs, *one_gbs;
    int *flows;
} ah_commbench_shared;
void ah_commbench_shared_measure(const ah_commbench_topology *t, const ah_commbench_buffers *buf,
                                 size_t bytes, ah_commbench_shared *out);
void ah_commbench_shared_free(ah_commbench_shared *s);

/* {format, version, ranks, nodes, hosts, sync, results, fits, links}; takes
 * ownership of both arrays; links (the host matrix, below) when fits has
 * point-to-point entries; shared (may be NULL) adds its matrices to links */
cJSON *ah_commbench_profile_json(const ah_commbench_topology *t, const char *sync, cJSON *results,
                                 cJSON *fits, const ah_commbench_shared *shared);

/* The link matrix between hosts from the point-to-point fits
 * (commbench_links.c): {"hosts": [...], "latency_us": [[...]],
 * "bandwidth_GBps": [[...]], "max_rel_error": [[...]], "pairs": [[...]]},
 * entry [a][b] (symmetric) from the first fitted pair of ranks on nodes a and
 * b ([a][a]: two ranks of node a), null where none was measured. Latency:
 * the `latency` fit's small-message alpha; bandwidth: the `bw` fit's
 * large-message beta, or the `latency` fit's when bw was not run; error: the
 * larger piecewise-fit error of the two. NULL when fits has no
 * point-to-point fit. */
/* With shared (may be NULL) measured somewhere: "shared_bandwidth_GBps",
 * "shared_one_flow_GBps" and "shared_flows" (null where not measured) and
 * "shared_message_bytes". */
cJSON *ah_commbench_links_json(const ah_commbench_topology *t, const cJSON *fits,
                               const ah_commbench_shared *shared);
/* The matrix as text: "# links: latency us / bandwidth GB/s" and one row a host; then the shared links. */
void ah_commbench_print_links(const cJSON *links, FILE *f);

#endif
