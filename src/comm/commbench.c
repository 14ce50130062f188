/* The commbench set-up and documents (commbench.h): topology, pairs, buffers,
 * sizes, nccl-tests' column values, the comm-profile JSON. */
#include "comm/commbench.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
}

void ah_commbench_topology_free(ah_commbench_topology *t) {
    free(t->node_of);
    t->node_of = NULL;
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

int ah_commbench_pairs(const ah_commbench_topology *t, const char *spec, ah_commbench_pair *out, int max,
                       char *msg, size_t n) {
    int np = 0;
    if (!spec || !strcmp(spec, "classes")) {
        for (int same = 1; same >= 0; same--)
            np += lowest_pair(t, same, &out[np]);
        return np;
    }
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
            snprintf(msg, n,
                     "--pairs: '%s' is not a pair A-B of two different ranks below %d (or classes, all)", tok,
                     t->ranks);
            return -1;
        }
        out[np++] = (ah_commbench_pair){a, b};
    }
    return np;
}

int ah_commbench_buffers_alloc(ah_commbench_buffers *b, size_t max_bytes) {
    b->max_bytes = max_bytes;
    b->send = malloc(max_bytes + 64);
    b->recv = malloc(max_bytes + 64);
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
 * must split into whole floats over the ranks where the op splits it. */
static int size_valid(ah_comm_op op, size_t bytes, int n) {
    size_t unit = sizeof(float);
    if (op == AH_OP_ALLGATHER || op == AH_OP_ALLTOALL || op == AH_OP_REDUCE_SCATTER)
        unit *= (size_t)n;
    return op <= AH_OP_BW || (bytes >= unit && bytes % unit == 0);
}

int ah_commbench_sizes(ah_comm_op op, size_t min_bytes, size_t max_bytes, int n, size_t *sizes, int max) {
    int ns = 0;
    for (size_t b = min_bytes; b <= max_bytes && ns < max; b *= 2)
        if (size_valid(op, b, n))
            sizes[ns++] = b;
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
    cJSON_AddNumberToObject(r, "min_us", res->min_us);
    cJSON_AddNumberToObject(r, "avg_us", res->avg_us);
    cJSON_AddNumberToObject(r, "max_us", res->max_us);
    cJSON_AddNumberToObject(r, "median_us", res->median_us);
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
    return g;
}

cJSON *ah_commbench_fit_json(ah_comm_op op, const char *link_class, const ah_commbench_case *c,
                             const ah_comm_fit *line, const ah_comm_piecewise *pw, const size_t *sizes,
                             const double *us, int n) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "op", ah_comm_op_name(op));
    cJSON_AddStringToObject(j, "link_class", link_class);
    if (op <= AH_OP_BW) {
        int pair[2] = {c->src, c->dst};
        cJSON_AddItemToObject(j, "pair", cJSON_CreateIntArray(pair, 2));
    }
    cJSON_AddStringToObject(j, "statistic", "median_us");
    /* the summary: latency of the smallest sizes, bandwidth of the largest */
    cJSON_AddNumberToObject(j, "alpha_us", pw->regime[0].fit.alpha_us);
    cJSON_AddNumberToObject(j, "beta_GBps", pw->regime[pw->n_regimes - 1].fit.beta_gbs);
    cJSON_AddNumberToObject(j, "max_rel_error", pw->max_rel_error);
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

cJSON *ah_commbench_profile_json(const ah_commbench_topology *t, const char *sync, cJSON *results, cJSON *fits) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", "autohet-comm-profile");
    cJSON_AddNumberToObject(root, "version", 2);
    cJSON_AddNumberToObject(root, "ranks", t->ranks);
    cJSON_AddNumberToObject(root, "nodes", t->nodes);
    cJSON_AddStringToObject(root, "sync", sync);
    cJSON_AddItemToObject(root, "results", results);
    cJSON_AddItemToObject(root, "fits", fits);
    return root;
}
