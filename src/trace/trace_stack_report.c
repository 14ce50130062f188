/* The stack breakdown as the "stack" object of analyze --json
 * (autohet/trace_analysis.h, docs/analyze.md). */
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "autohet/trace_analysis.h"

const char *ah_stack_site_algorithms(const ah_stack_site *st, char *buf, size_t n) {
    buf[0] = '\0';
    for (int c = 0; c < AH_MPI_ALGS; c++)
        for (int r = 0; r < AH_MPI_ALGS; r++)
            if (st->alg_pairs & (1ull << (8 * c + r))) {
                size_t u = strlen(buf);
                snprintf(buf + u, n - u, "%s%s%s%s", u ? "+" : "", ah_mpi_alg_name((ah_mpi_alg)c), c == r ? "" : ":",
                         c == r ? "" : ah_mpi_alg_name((ah_mpi_alg)r));
            }
    return buf[0] ? buf : "-";
}

/* keys[i] = values[i], numbers */
static void add_numbers(cJSON *o, const char *const *keys, const double *values, int n) {
    for (int i = 0; i < n; i++)
        cJSON_AddNumberToObject(o, keys[i], values[i]);
}

static void add_parts(cJSON *o, double measured, double skew, double mpi, double residual) {
    static const char *const keys[] = {"measured_us", "skew_us", "mpi_us", "residual_us"};
    add_numbers(o, keys, (double[]){measured, skew, mpi, residual}, 4);
}

static cJSON *model_json(const ah_trace_stack *s) {
    cJSON *m = cJSON_CreateObject(), *reg = cJSON_CreateArray();
    cJSON_AddStringToObject(m, "mpi_decision", s->mpi_source);
    cJSON_AddNumberToObject(m, "coll_tuned_allreduce_algorithm", s->mpi_algorithm);
    cJSON_AddNumberToObject(m, "segment_bytes", s->segment_bytes);
    cJSON_AddStringToObject(m, "links", s->link.source);
    for (int q = 0; q < s->link.n; q++) {
        cJSON *g = cJSON_CreateObject();
        if (q + 1 < s->link.n)
            cJSON_AddNumberToObject(g, "max_bytes", s->link.max_bytes[q]);
        else
            cJSON_AddNullToObject(g, "max_bytes");
        cJSON_AddNumberToObject(g, "alpha_us", s->link.alpha_us[q]);
        cJSON_AddNumberToObject(g, "beta_GBps", s->link.beta_GBps[q]);
        cJSON_AddItemToArray(reg, g);
    }
    cJSON_AddItemToObject(m, "link_regimes", reg);
    cJSON_AddStringToObject(m, "measured", "last completion - first arrival over the instance's ranks");
    return m;
}

static cJSON *instance_json(const ah_trace_stack *s, const ah_stack_instance *in) {
    cJSON *o = cJSON_CreateObject(), *jm = cJSON_CreateArray();
    const ah_stack_site *st = &s->sites[in->site];
    static const char *const keys[] = {"group", "seq", "step", "ranks", "bytes", "first_arrival_us",
                                       "last_arrival_us", "last_end_us", "straggler"};
    cJSON_AddStringToObject(o, "site", st->site);
    cJSON_AddStringToObject(o, "algorithm", ah_mpi_alg_name(in->algorithm));
    cJSON_AddStringToObject(o, "algorithm_ran", ah_mpi_alg_name(in->ran));
    add_numbers(o, keys,
                (double[]){st->group, in->seq, in->step, in->n_members, in->bytes, in->first_arrival_us,
                           in->last_arrival_us, in->last_end_us, in->straggler},
                9);
    add_parts(o, in->measured_us, in->skew_us, in->mpi_us, in->residual_us);
    for (int k = 0; k < in->n_members; k++) {
        const ah_stack_member *mb = &s->members[in->first_member + k];
        static const char *const keys[] = {"rank", "start_us", "end_us", "wait_us"};
        cJSON *x = cJSON_CreateObject();
        add_numbers(x, keys, (double[]){mb->rank, mb->start_us, mb->end_us, mb->wait_us}, 4);
        cJSON_AddItemToArray(jm, x);
    }
    cJSON_AddItemToObject(o, "members", jm);
    return o;
}

struct cJSON *ah_trace_stack_json(const ah_trace_stack *s) {
    cJSON *out = cJSON_CreateObject(), *js = cJSON_CreateArray(), *ji = cJSON_CreateArray(),
          *jr = cJSON_CreateArray();
    cJSON_AddItemToObject(out, "model", model_json(s));
    for (int k = 0; k < s->n_sites; k++) {
        const ah_stack_site *st = &s->sites[k];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "site", st->site);
        cJSON_AddStringToObject(o, "kind", ah_op_kind_name(st->kind));
        cJSON_AddNumberToObject(o, "group", st->group);
        cJSON_AddNumberToObject(o, "ranks", st->ranks);
        cJSON_AddNumberToObject(o, "bytes_per_call", st->bytes_per_call);
        cJSON_AddNumberToObject(o, "instances", st->instances);
        char algs[256];
        cJSON_AddStringToObject(o, "algorithms", ah_stack_site_algorithms(st, algs, sizeof algs));
        add_parts(o, st->measured_us, st->skew_us, st->mpi_us, st->residual_us); /* sums */
        if (st->instances) {
            cJSON_AddNumberToObject(o, "straggler", st->straggler);
            cJSON_AddNumberToObject(o, "straggler_instances", st->straggler_count);
        }
        cJSON_AddItemToArray(js, o);
    }
    for (int i = 0; i < s->n_inst; i++)
        cJSON_AddItemToArray(ji, instance_json(s, &s->inst[i]));
    for (int r = 0; r < s->n_ranks; r++) {
        const ah_stack_rank *q = &s->ranks[r];
        static const char *const keys[] = {"rank",         "comm_us",           "comm_hidden_us",
                                           "overlap_pct",  "idle_recv_us",      "idle_collective_us",
                                           "idle_step_us", "straggler_instances"};
        cJSON *o = cJSON_CreateObject();
        add_numbers(o, keys,
                    (double[]){r, q->comm_us, q->hidden_us, q->overlap_pct, q->idle_recv_us, q->idle_collective_us,
                               q->idle_step_us, q->straggles},
                    8);
        cJSON_AddItemToArray(jr, o);
    }
    cJSON_AddItemToObject(out, "sites", js);
    cJSON_AddItemToObject(out, "instances", ji);
    cJSON_AddItemToObject(out, "ranks", jr);
    return out;
}
