/* The commbench set-up and documents (commbench.h): topology, pairs, buffers,
 * sizes, nccl-tests' column values, the comm-profile JSON. */
#include "autohet/commbench.h"

#include <mpi.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "util/errors.h"

void ah_commbench_topology_probe(ah_commbench_topology *t) {
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &t->ranks);
    MPI_Comm shm;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shm);
    int shm_rank, leader_here, leader = 0;
    MPI_Comm_rank(shm, &shm_rank);
    leader_here = shm_rank == 0 ? rank : -1;
    MPI_Allreduce(&leader_here, &leader, 1, MPI_INT, MPI_MAX, shm); /* the node leader's world rank */
    MPI_Comm_free(&shm);
    int *leaders = ah_xcalloc((size_t)t->ranks, sizeof(int));
    MPI_Allgather(&leader, 1, MPI_INT, leaders, 1, MPI_INT, MPI_COMM_WORLD);
    t->node_of = ah_xcalloc((size_t)t->ranks, sizeof(int));
    t->nodes = 0;
    for (int r = 0; r < t->ranks; r++) { /* nodes numbered in order of their first rank */
        int q = 0;
        while (q < r && leaders[q] != leaders[r])
            q++;
        t->node_of[r] = q < r ? t->node_of[q] : t->nodes++;
    }
    free(leaders);
    /* every rank's host name; a node's is its first rank's */
    char mine[AH_COMMBENCH_HOST_LEN] = "", full[MPI_MAX_PROCESSOR_NAME] = "";
    int len = 0;
    MPI_Get_processor_name(full, &len);
    memcpy(mine, full, strnlen(full, sizeof mine - 1)); /* cut to 63 characters, mine stays terminated */
    char *all = ah_xcalloc((size_t)t->ranks, AH_COMMBENCH_HOST_LEN);
    MPI_Allgather(mine, AH_COMMBENCH_HOST_LEN, MPI_CHAR, all, AH_COMMBENCH_HOST_LEN, MPI_CHAR,
                  MPI_COMM_WORLD);
    t->hosts = ah_xcalloc((size_t)t->nodes, AH_COMMBENCH_HOST_LEN);
    for (int r = t->ranks - 1; r >= 0; r--)
        memcpy(ah_commbench_host(t, t->node_of[r]), all + (size_t)r * AH_COMMBENCH_HOST_LEN,
               AH_COMMBENCH_HOST_LEN);
    free(all);
}

void ah_commbench_topology_free(ah_commbench_topology *t) {
    free(t->node_of);
    free(t->hosts);
    t->node_of = NULL;
    t->hosts = NULL;
}

const char *ah_commbench_link_class(const ah_commbench_topology *t, int a, int b) {
    int same = a < 0 ? t->nodes == 1 : t->node_of[a] == t->node_of[b];
    return same ? "intra-node" : "inter-node";
}

/* the lowest pair (i < j) whose class is `same` (1 intra-node, 0 inter-node); 0 if none */
static int lowest_pair(const ah_commbench_topology *t, int same, ah_commbench_pair *p) {
    for (int i = 0; i < t->ranks; i++)
        for (int j = i + 1; j < t->ranks; j++)
            if ((t->node_of[i] == t->node_of[j]) == same) {
                *p = (ah_commbench_pair){i, j};
                return 1;
            }
    return 0;
}

/* The first rank of node k after rank `after` (-1: its first rank); -1 if none. */
static int rank_of_node(const ah_commbench_topology *t, int k, int after) {
    for (int r = after + 1; r < t->ranks; r++)
        if (t->node_of[r] == k)
            return r;
    return -1;
}

/* --pairs hosts: every node's first two ranks, then the first ranks of every two nodes. */
static int host_pairs(const ah_commbench_topology *t, ah_commbench_pair *out, int max, char *msg, size_t n) {
    int np = 0, want = t->nodes * (t->nodes - 1) / 2;
    for (int k = 0; k < t->nodes; k++)
        want += rank_of_node(t, k, rank_of_node(t, k, -1)) >= 0;
    if (want > max) {
        snprintf(msg, n, "--pairs hosts: %d hosts make %d pairs, more than %d (list pairs A-B instead)",
                 t->nodes, want, max);
        return -1;
    }
    for (int k = 0; k < t->nodes; k++) {
        int first = rank_of_node(t, k, -1), second = rank_of_node(t, k, first);
        if (second >= 0)
            out[np++] = (ah_commbench_pair){first, second};
    }
    for (int a = 0; a < t->nodes; a++)
        for (int b = a + 1; b < t->nodes; b++)
            out[np++] = (ah_commbench_pair){rank_of_node(t, a, -1), rank_of_node(t, b, -1)};
    return np;
}

int ah_commbench_pairs(const ah_commbench_topology *t, const char *spec, ah_commbench_pair *out, int max,
                       char *msg, size_t n) {
    int np = 0;
    if (!spec || !strcmp(spec, "classes")) {
        for (int same = 1; same >= 0; same--)
            np += lowest_pair(t, same, &out[np]);
        return np;
    }
    if (!strcmp(spec, "hosts"))
        return host_pairs(t, out, max, msg, n);
    if (!strcmp(spec, "all")) {
        for (int i = 0; i < t->ranks; i++)
            for (int j = i + 1; j < t->ranks && np < max; j++)
                out[np++] = (ah_commbench_pair){i, j};
        return np;
    }
    char list[1024];
    snprintf(list, sizeof list, "%s", spec);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        int a, b, used = 0;
        if (sscanf(tok, "%d-%d%n", &a, &b, &used) != 2 || tok[used] || a < 0 || b < 0 || a == b ||
            a >= t->ranks || b >= t->ranks || np >= max) {
            snprintf(
                msg, n,
                "--pairs: '%s' is not a pair A-B of two different ranks below %d (or classes, all, hosts)",
                tok, t->ranks);
            return -1;
        }
        out[np++] = (ah_commbench_pair){a, b};
    }
    return np;
}

/* A message buffer on transparent huge pages where the kernel offers them
 * (THP "madvise" mode): under a hypervisor a copy over 4 KiB pages pays a
 * two-level page walk per TLB miss, and which runs got huge backing made
 * the same size differ up to 5x from run to run (docs/commbench.md). */
static char *buffer_alloc(size_t bytes) {
    size_t huge = (size_t)2 << 20, len = (bytes + huge - 1) / huge * huge;
    void *p = NULL;
    if (posix_memalign(&p, huge, len) != 0)
        return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, len, MADV_HUGEPAGE); /* advice: nothing to do if refused */
#endif
    return p;
}

int ah_commbench_buffers_alloc(ah_commbench_buffers *b, size_t max_bytes) {
    b->max_bytes = max_bytes;
    b->send = buffer_alloc(max_bytes + 64);
    b->recv = buffer_alloc(max_bytes + 64);
    if (!b->send || !b->recv) {
        ah_commbench_buffers_free(b);
        return -1;
    }
    memset(b->send, 1, max_bytes + 64);
    memset(b->recv, 0, max_bytes + 64);
    return 0;
}

void ah_commbench_buffers_free(ah_commbench_buffers *b) {
    free(b->send);
    free(b->recv);
    b->send = b->recv = NULL;
}

const char *ah_commbench_type_name(ah_comm_op op) {
    return op <= AH_OP_BW ? "int8" : "float";
}

const char *ah_commbench_redop_name(ah_comm_op op) {
    return op == AH_OP_ALLREDUCE || op == AH_OP_REDUCE_SCATTER ? "sum" : "none";
}

int ah_commbench_root(ah_comm_op op) {
    return op == AH_OP_BCAST ? 0 : -1;
}

size_t ah_commbench_count(ah_comm_op op, size_t bytes) {
    return op <= AH_OP_BW ? bytes : bytes / sizeof(float);
}

/* Collectives move floats (so that every reduction can be checked); a size
 * must split into whole floats over the ranks where the op splits it: the
 * op's unit, sizes are whole multiples of it. */
static size_t size_unit(ah_comm_op op, int n) {
    if (op <= AH_OP_BW)
        return 1;
    size_t unit = sizeof(float);
    if (op == AH_OP_ALLGATHER || op == AH_OP_ALLTOALL || op == AH_OP_REDUCE_SCATTER)
        unit *= (size_t)n;
    return unit;
}

static int size_valid(ah_comm_op op, size_t bytes, int n) {
    size_t unit = size_unit(op, n);
    return bytes >= unit && bytes % unit == 0;
}

int ah_commbench_sizes(ah_comm_op op, size_t min_bytes, size_t max_bytes, int n, double factor, size_t *sizes,
                       int max) {
    int ns = 0;
    if (factor <= 1.0)
        factor = 2.0;
    if (factor == 2.0) { /* powers of two from min_bytes, as OSU and nccl-tests -f 2 */
        for (size_t b = min_bytes; b <= max_bytes && ns < max; b *= 2)
            if (size_valid(op, b, n))
                sizes[ns++] = b;
        return ns;
    }
    /* min * factor^k rounded to the op's unit; a factor within 1% of a root
     * of two, 2^(1/m), is taken as exactly that, so every power of two in the
     * range is among the sizes */
    size_t unit = size_unit(op, n);
    double m = round(1.0 / log2(factor));
    if (!(m >= 1 && fabs(pow(2.0, 1.0 / m) / factor - 1) < 0.01))
        m = 0; /* not a root of two */
    for (int k = 0; ns < max; k++) {
        double x = (double)min_bytes * (m >= 1 ? pow(2.0, k / m) : pow(factor, k));
        if (x > (double)max_bytes * (1 + 1e-9))
            break;
        size_t b = (size_t)(x + 0.5);
        b = (b + unit / 2) / unit * unit;
        if (b > max_bytes || (ns > 0 && b <= sizes[ns - 1]) || !size_valid(op, b, n))
            continue;
        sizes[ns++] = b;
    }
    return ns;
}

int ah_commbench_iters(size_t bytes, int base) {
    long it = (long)base;
    if (bytes > 65536)
        it = (long)((double)base * 65536.0 / (double)bytes);
    return it < 3 ? 3 : (int)it;
}

cJSON *ah_commbench_result_json(const ah_comm_result *res, const char *link_class, const ah_commbench_case *c,
                                const double *rep_us, int n_reps) {
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "op", ah_comm_op_name(res->op));
    cJSON_AddStringToObject(r, "link_class", link_class);
    if (c->op <= AH_OP_BW) {
        int pair[2] = {c->src, c->dst};
        cJSON_AddItemToObject(r, "pair", cJSON_CreateIntArray(pair, 2));
    }
    cJSON_AddBoolToObject(r, "in_place", c->in_place);
    cJSON_AddNumberToObject(r, "bytes", (double)res->bytes);
    cJSON_AddNumberToObject(r, "count", (double)ah_commbench_count(c->op, res->bytes));
    cJSON_AddStringToObject(r, "type", ah_commbench_type_name(c->op));
    cJSON_AddStringToObject(r, "redop", ah_commbench_redop_name(c->op));
    cJSON_AddNumberToObject(r, "root", ah_commbench_root(c->op));
    cJSON_AddNumberToObject(r, "iters", res->iters);
    cJSON_AddNumberToObject(r, "batch", res->batch);
    cJSON_AddNumberToObject(r, "min_us", res->min_us);
    cJSON_AddNumberToObject(r, "avg_us", res->avg_us);
    cJSON_AddNumberToObject(r, "max_us", res->max_us);
    cJSON_AddNumberToObject(r, "median_us", res->median_us);
    cJSON_AddNumberToObject(r, "p25_us", res->p25_us);
    cJSON_AddNumberToObject(r, "ci_low_us", res->ci_low_us);
    cJSON_AddNumberToObject(r, "ci_high_us", res->ci_high_us);
    cJSON_AddNumberToObject(r, "ci_level", 0.95);
    cJSON_AddNumberToObject(r, "invalid_reps", res->invalid);
    cJSON_AddNumberToObject(r, "algbw_GBps", res->algbw_gbs);
    cJSON_AddNumberToObject(r, "busbw_GBps", res->busbw_gbs);
    cJSON_AddNumberToObject(r, "wrong", (double)res->wrong);
    cJSON *reps = cJSON_AddArrayToObject(r, "reps_us");
    for (int i = 0; rep_us && i < n_reps; i++)
        cJSON_AddItemToArray(reps, cJSON_CreateNumber(rep_us[i]));
    return r;
}

static cJSON *fit_object(const ah_comm_fit *f) {
    cJSON *g = cJSON_CreateObject();
    cJSON_AddNumberToObject(g, "alpha_us", f->alpha_us);
    cJSON_AddNumberToObject(g, "beta_GBps", f->beta_gbs);
    cJSON_AddNumberToObject(g, "max_rel_error", f->max_rel_error);
    cJSON_AddNumberToObject(g, "max_abs_error_us", f->max_abs_error_us);
    return g;
}

cJSON *ah_commbench_fit_json(ah_comm_op op, const char *link_class, const ah_commbench_case *c,
                             const ah_comm_fit *line, const ah_comm_piecewise *pw, const size_t *sizes,
                             const double *us, int n, const char *statistic) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "op", ah_comm_op_name(op));
    cJSON_AddStringToObject(j, "link_class", link_class);
    if (op <= AH_OP_BW) {
        int pair[2] = {c->src, c->dst};
        cJSON_AddItemToObject(j, "pair", cJSON_CreateIntArray(pair, 2));
    }
    cJSON_AddStringToObject(j, "statistic", statistic);
    /* the summary: latency of the smallest sizes, bandwidth of the largest */
    cJSON_AddNumberToObject(j, "alpha_us", pw->regime[0].fit.alpha_us);
    cJSON_AddNumberToObject(j, "beta_GBps", pw->regime[pw->n_regimes - 1].fit.beta_gbs);
    cJSON_AddNumberToObject(j, "max_rel_error", pw->max_rel_error);
    cJSON_AddNumberToObject(j, "max_abs_error_us", pw->max_abs_error_us);
    cJSON_AddNumberToObject(j, "sizes", n);
    cJSON *reg = cJSON_AddArrayToObject(j, "regimes");
    for (int q = 0; q < pw->n_regimes; q++) {
        cJSON *g = fit_object(&pw->regime[q].fit);
        cJSON_AddNumberToObject(g, "min_bytes", (double)pw->regime[q].min_bytes);
        if (q + 1 < pw->n_regimes)
            cJSON_AddNumberToObject(g, "max_bytes", (double)pw->regime[q].max_bytes);
        else
            cJSON_AddNullToObject(g, "max_bytes");
        cJSON_AddNumberToObject(g, "sizes", pw->regime[q].fit.n_sizes);
        cJSON_AddItemToArray(reg, g);
    }
    cJSON_AddItemToObject(j, "single_line", fit_object(line));
    cJSON *errs = cJSON_AddArrayToObject(j, "rel_error_per_size");
    for (int i = 0; i < n; i++) {
        double pred = ah_comm_piecewise_us(pw, sizes[i]);
        double pl = line->alpha_us + (double)sizes[i] / (line->beta_gbs * 1e3);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "bytes", (double)sizes[i]);
        cJSON_AddNumberToObject(e, "measured_us", us[i]);
        cJSON_AddNumberToObject(e, "predicted_us", pred);
        cJSON_AddNumberToObject(e, "rel_error", (pred - us[i]) / us[i]);
        cJSON_AddNumberToObject(e, "single_line_rel_error", (pl - us[i]) / us[i]);
        cJSON_AddItemToArray(errs, e);
    }
    return j;
}

cJSON *ah_commbench_profile_json(const ah_commbench_topology *t, const char *sync, cJSON *results,
                                 cJSON *fits, const ah_commbench_shared *shared) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", "autohet-comm-profile");
    cJSON_AddNumberToObject(root, "version", 2);
    cJSON_AddNumberToObject(root, "ranks", t->ranks);
    cJSON_AddNumberToObject(root, "nodes", t->nodes);
    cJSON *hosts = cJSON_AddArrayToObject(root, "hosts");
    for (int k = 0; k < t->nodes; k++)
        cJSON_AddItemToArray(hosts, cJSON_CreateString(ah_commbench_host(t, k)));
    cJSON_AddStringToObject(root, "sync", sync);
    cJSON_AddItemToObject(root, "results", results);
    cJSON_AddItemToObject(root, "fits", fits);
    cJSON *links = ah_commbench_links_json(t, fits, shared);
    if (links)
        cJSON_AddItemToObject(root, "links", links);
    return root;
}
