/* Replans computed ahead (docs/planner.md "Replans computed ahead"): while a plan runs, the plan a full
 * search makes for the survivors of every loss of up to `depth` of its cluster's nodes, so that a loss is
 * replanned by a lookup.
 *
 * Under the cost model the nodes of one class (same device, GPUs, NIC, price, spot) are interchangeable: the
 * survivors of two losses that take the same number of nodes of every class get the same plan up to a
 * renaming of nodes within classes. So the table has one entry per loss vector (nodes lost per class), made
 * by ah_plan_search on a canonical survivor set (each class's last nodes lost), and a lookup maps that plan
 * onto the actual survivors: a canonical node that survived keeps its place, the others take the class's
 * remaining survivors in order. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "autohet/plan.h"
#include "plan/costs.h"
#include "util/clock.h"
#include "util/errors.h"
#include "util/json_file.h"
#include "util/json_read.h"

typedef struct {
    int *lost;       /* [n_classes] nodes lost per class */
    int *lost_nodes; /* the canonical lost nodes (indices into the table's cluster), n_lost of them */
    int n_lost;
    char *error; /* the search found no plan: why (NULL: a plan) */
    int micro_batch;
    long long value_ns, iteration_ns; /* the search's value and the evaluated iteration time */
    ah_replica *replicas;             /* stages' nodes index the table's cluster */
    int n_replicas;
} rt_entry;

struct ah_replan_table {
    ah_cluster cluster; /* the running plan's cluster (owned copy) */
    int *cls;           /* class of each node */
    int n_classes;
    int *class_size; /* nodes per class */
    int depth;
    double build_s;
    int threads; /* the build's */
    rt_entry *e;
    int n;
};

/* nodes interchangeable under the cost model (the search's kinds also need price and spot for --objective
 * cost) */
static int same_node_class(const ah_node *a, const ah_node *b) {
    const ah_device *x = &a->dev, *y = &b->dev;
    return !strcmp(x->name, y->name) && a->gpus == b->gpus && a->nic_gbit == b->nic_gbit &&
           a->spot == b->spot && a->price_per_hour == b->price_per_hour && x->peak_tflops == y->peak_tflops &&
           x->mem_gib == y->mem_gib && x->mem_bw_gbs == y->mem_bw_gbs && x->intra_bw_gbs == y->intra_bw_gbs &&
           x->efficiency == y->efficiency && x->slowdown == y->slowdown && x->sm_count == y->sm_count &&
           x->fp32_tflops == y->fp32_tflops;
}

static ah_replan_table *table_new(const ah_cluster *c, int depth) {
    ah_replan_table *t = ah_xcalloc(1, sizeof *t);
    t->cluster.n_nodes = c->n_nodes;
    t->cluster.nodes = ah_xcalloc((size_t)c->n_nodes + 1, sizeof(ah_node));
    memcpy(t->cluster.nodes, c->nodes, sizeof(ah_node) * (size_t)c->n_nodes);
    t->cls = ah_xcalloc((size_t)c->n_nodes + 1, sizeof(int));
    t->class_size = ah_xcalloc((size_t)c->n_nodes + 1, sizeof(int));
    for (int i = 0; i < c->n_nodes; i++) {
        int k = 0;
        while (k < t->n_classes) {
            int first = 0;
            while (t->cls[first] != k)
                first++;
            if (same_node_class(&c->nodes[first], &c->nodes[i]))
                break;
            k++;
        }
        if (k == t->n_classes)
            t->n_classes++;
        t->cls[i] = k;
        t->class_size[k]++;
    }
    t->depth = depth;
    return t;
}

static void free_replicas(ah_replica *r, int n) {
    for (int k = 0; r && k < n; k++)
        free(r[k].stages);
    free(r);
}

void ah_replan_table_free(ah_replan_table *t) {
    if (!t)
        return;
    for (int i = 0; i < t->n; i++) {
        free(t->e[i].lost);
        free(t->e[i].lost_nodes);
        free(t->e[i].error);
        free_replicas(t->e[i].replicas, t->e[i].n_replicas);
    }
    free(t->e);
    free(t->cls);
    free(t->class_size);
    free(t->cluster.nodes);
    free(t);
}

static rt_entry *add_entry(ah_replan_table *t, const int *lost) {
    t->e = ah_xrealloc(t->e, sizeof *t->e * (size_t)(t->n + 1));
    rt_entry *e = &t->e[t->n++];
    memset(e, 0, sizeof *e);
    e->lost = ah_xcalloc((size_t)t->n_classes, sizeof(int));
    memcpy(e->lost, lost, sizeof(int) * (size_t)t->n_classes);
    return e;
}

/* The canonical loss of vector `lost`: each class's last nodes, into e->lost_nodes; keep[i] = node i survives
 */
static void canonical_loss(const ah_replan_table *t, rt_entry *e, unsigned char *keep) {
    int *left = ah_xcalloc((size_t)t->n_classes, sizeof(int));
    memcpy(left, e->lost, sizeof(int) * (size_t)t->n_classes);
    e->lost_nodes = ah_xcalloc((size_t)t->cluster.n_nodes + 1, sizeof(int));
    e->n_lost = 0;
    for (int i = t->cluster.n_nodes - 1; i >= 0; i--) {
        keep[i] = left[t->cls[i]] == 0;
        if (!keep[i]) {
            left[t->cls[i]]--;
            e->lost_nodes[e->n_lost++] = i;
        }
    }
    free(left);
}

/* The search for the canonical survivors of e; its plan's stages re-indexed to the table's cluster. */
static void search_entry(const ah_replan_table *t, const ah_plan *p, const ah_profile *prof,
                         const ah_plan_options *o, rt_entry *e) {
    unsigned char *keep = ah_xcalloc((size_t)t->cluster.n_nodes + 1, 1);
    canonical_loss(t, e, keep);
    ah_cluster surv = {ah_xcalloc((size_t)t->cluster.n_nodes + 1, sizeof(ah_node)), 0};
    int *orig = ah_xcalloc((size_t)t->cluster.n_nodes + 1, sizeof(int));
    for (int i = 0; i < t->cluster.n_nodes; i++)
        if (keep[i]) {
            orig[surv.n_nodes] = i;
            surv.nodes[surv.n_nodes++] = t->cluster.nodes[i];
        }
    char err[512];
    ah_plan q;
    if (surv.n_nodes == 0 || ah_plan_search(&p->model, &surv, prof, o, &q, err, sizeof err) != 0) {
        e->error = strdup(surv.n_nodes == 0 ? "no node survives" : err);
        if (!e->error)
            abort();
    } else {
        e->micro_batch = q.micro_batch;
        e->value_ns = q.search_value_ns;
        e->iteration_ns = q.iteration_time_ns;
        e->n_replicas = q.n_replicas;
        e->replicas = q.replicas;
        for (int k = 0; k < q.n_replicas; k++)
            for (int j = 0; j < q.replicas[k].n_stages; j++)
                q.replicas[k].stages[j].node = orig[q.replicas[k].stages[j].node];
        q.replicas = NULL;
        q.n_replicas = 0;
        ah_plan_free(&q);
    }
    free(orig);
    free(surv.nodes);
    free(keep);
}

/* How many loss vectors of 1..depth nodes (v[c] <= class size): ways[s] over the classes so far, saturated
 * (thousands of classes at depth 8 would overflow) */
#define LOSSES_SATURATED (1LL << 40)
static long long count_losses(const ah_replan_table *t) {
    long long ways[AH_REPLAN_MAX_DEPTH + 1] = {1};
    for (int c = 0; c < t->n_classes; c++)
        for (int s = t->depth; s >= 1; s--)
            for (int k = 1; k <= s && k <= t->class_size[c]; k++)
                if ((ways[s] += ways[s - k]) > LOSSES_SATURATED)
                    ways[s] = LOSSES_SATURATED;
    long long n = 0;
    for (int s = 1; s <= t->depth; s++)
        n += ways[s];
    return n < LOSSES_SATURATED ? n : LOSSES_SATURATED;
}

/* Every loss vector of 1..depth nodes in all (v[c] <= class size), appended to t's entries in order of total
 * then class: recursion over classes with `left` nodes still to lose. */
static void enumerate(ah_replan_table *t, int *v, int c, int left) {
    if (c == t->n_classes) {
        if (left == 0)
            add_entry(t, v);
        return;
    }
    for (int k = 0; k <= left && k <= t->class_size[c]; k++) {
        v[c] = k;
        enumerate(t, v, c + 1, left - k);
    }
    v[c] = 0;
}

/* depth, links and the number of losses; 0, or AH_EXIT_BAD_INPUT with err */
static int check_table(const ah_replan_table *t, const ah_plan_options *o, char *err, size_t errlen) {
    if (t->depth < 1 || t->depth > AH_REPLAN_MAX_DEPTH) {
        snprintf(err, errlen, "depth %d out of range [1, %d]", t->depth, AH_REPLAN_MAX_DEPTH);
        return AH_EXIT_BAD_INPUT;
    }
    if (o->links) {
        snprintf(err, errlen,
                 "not with measured links between hosts (nodes of one type are not interchangeable)");
        return AH_EXIT_BAD_INPUT;
    }
    long long n = count_losses(t);
    if (n > AH_REPLAN_MAX_ENTRIES) {
        snprintf(err, errlen,
                 "%s%lld losses of up to %d nodes to plan ahead over %d node classes (at most %d)",
                 n >= LOSSES_SATURATED ? "over " : "", n, t->depth, t->n_classes, AH_REPLAN_MAX_ENTRIES);
        return AH_EXIT_BAD_INPUT;
    }
    return 0;
}

int ah_replan_table_check(const ah_cluster *c, const ah_plan_options *o, int depth, char *err,
                          size_t errlen) {
    ah_replan_table *t = table_new(c, depth);
    int rc = check_table(t, o, err, errlen);
    ah_replan_table_free(t);
    return rc;
}

int ah_replan_table_build(const ah_plan *p, const ah_profile *prof, const ah_plan_options *o, int depth,
                          ah_replan_table **out, char *err, size_t errlen) {
    *out = NULL;
    double t0 = ah_now_s();
    ah_replan_table *t = table_new(&p->cluster, depth);
    int rc = check_table(t, o, err, errlen);
    if (rc != 0) {
        ah_replan_table_free(t);
        return rc;
    }
    int *v = ah_xcalloc((size_t)t->n_classes, sizeof(int));
    for (int total = 1; total <= depth; total++)
        enumerate(t, v, 0, total);
    free(v);
    /* the searches are independent (each writes its own entry; the search keeps no shared state): one per
     * thread, the longest first would balance better but their lengths are not known ahead */
    int n_entries = t->n;
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < n_entries; i++)
        search_entry(t, p, prof, o, &t->e[i]);
#ifdef _OPENMP
    t->threads = omp_get_max_threads();
#else
    t->threads = 1;
#endif
    t->build_s = ah_now_s() - t0;
    *out = t;
    return 0;
}

void ah_replan_table_stats(const ah_replan_table *t, int *depth, int *n_entries, int *n_classes,
                           double *build_s, int *threads) {
    *threads = t->threads;
    *depth = t->depth;
    *n_entries = t->n;
    *n_classes = t->n_classes;
    *build_s = t->build_s;
}

/* ---- lookup ---- */

/* at[i] = the survivors' index of table node i (-1: lost); 0, or -1 when a survivor is not a node of the
 * table's cluster with its class (then the table does not cover the loss) */
static int survivors_map(const ah_replan_table *t, const ah_cluster *surv, int *at, int *lost) {
    for (int i = 0; i < t->cluster.n_nodes; i++)
        at[i] = -1;
    memcpy(lost, t->class_size, sizeof(int) * (size_t)t->n_classes);
    for (int s = 0; s < surv->n_nodes; s++) {
        int i = ah_cluster_node_index(&t->cluster, surv->nodes[s].name);
        if (i < 0 || at[i] >= 0 || !same_node_class(&t->cluster.nodes[i], &surv->nodes[s]))
            return -1;
        at[i] = s;
        lost[t->cls[i]]--;
    }
    return 0;
}

/* to[i] = the survivors' index of the node that takes table node i's place in e's plan: itself if it
 * survived, else the class's next survivor e's plan leaves unused. Survivors marked in `avoid` (may be NULL)
 * are used last: a loss deeper than the table maps an entry onto survivors some of which are lost too. */
static void place_entry(const ah_replan_table *t, const rt_entry *e, const int *at,
                        const unsigned char *avoid, int *to) {
    int N = t->cluster.n_nodes;
    unsigned char *used = ah_xcalloc((size_t)N + 1, 1), *taken = ah_xcalloc((size_t)N + 1, 1);
    for (int k = 0; k < e->n_replicas; k++)
        for (int j = 0; j < e->replicas[k].n_stages; j++)
            used[e->replicas[k].stages[j].node] = 1;
    for (int i = 0; i < N; i++) {
        to[i] = -1;
        if (used[i] && at[i] >= 0 && !(avoid && avoid[i])) {
            to[i] = at[i];
            taken[i] = 1;
        }
    }
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < N; i++) {
            if (!used[i] || to[i] >= 0)
                continue;
            int s = 0;
            while (s < N &&
                   !(t->cls[s] == t->cls[i] && at[s] >= 0 && !taken[s] && (pass || !(avoid && avoid[s]))))
                s++;
            if (s < N) { /* by pass 1 always: the class has as many survivors as e's canonical survivors */
                to[i] = at[s];
                taken[s] = 1;
            }
        }
    free(used);
    free(taken);
}

/* e's plan on the survivors (at: as survivors_map's), evaluated; 1, or -1 with err */
static int map_entry(const ah_replan_table *t, const rt_entry *e, const ah_plan *old, const ah_cluster *surv,
                     const int *at, const unsigned char *avoid, const ah_profile *prof,
                     const ah_plan_options *o, ah_plan *out, char *err, size_t errlen) {
    int N = t->cluster.n_nodes;
    int *to = ah_xcalloc((size_t)N + 1, sizeof(int));
    place_entry(t, e, at, avoid, to);
    snprintf(out->strategy, sizeof out->strategy, "%s", old->strategy);
    out->version = old->version;
    out->model = old->model;
    out->train = old->train;
    out->mem_reserve_gib = old->mem_reserve_gib;
    out->global_batch = old->global_batch;
    out->micro_batch = e->micro_batch;
    snprintf(out->profile_source, sizeof out->profile_source, "%s", old->profile_source);
    out->cluster.n_nodes = surv->n_nodes;
    out->cluster.nodes = ah_xcalloc((size_t)surv->n_nodes + 1, sizeof(ah_node));
    memcpy(out->cluster.nodes, surv->nodes, sizeof(ah_node) * (size_t)surv->n_nodes);
    out->n_replicas = e->n_replicas;
    out->replicas = ah_xcalloc((size_t)e->n_replicas, sizeof(ah_replica));
    for (int k = 0; k < e->n_replicas; k++) {
        ah_replica *r = &out->replicas[k];
        r->n_stages = e->replicas[k].n_stages;
        r->micro_batches = e->replicas[k].micro_batches;
        r->stages = ah_xcalloc((size_t)r->n_stages, sizeof(ah_stage));
        for (int j = 0; j < r->n_stages; j++) {
            r->stages[j] = e->replicas[k].stages[j];
            r->stages[j].node = to[r->stages[j].node];
        }
    }
    free(to);
    if (ah_plan_validate(out, err, errlen) != 0 || ah_plan_evaluate(out, prof, o, err, errlen) != 0) {
        ah_plan_free(out);
        return -1;
    }
    out->search_value_ns = e->value_ns;
    out->search_value_s = ah_ns_to_s(e->value_ns);
    return 1;
}

/* the entry of loss vector `lost` that has a plan, or NULL */
static const rt_entry *entry_of(const ah_replan_table *t, const int *lost) {
    for (int i = 0; i < t->n; i++)
        if (!memcmp(t->e[i].lost, lost, sizeof(int) * (size_t)t->n_classes) && !t->e[i].error)
            return &t->e[i];
    return NULL;
}

int ah_replan_table_lookup(const ah_replan_table *t, const ah_plan *old, const ah_cluster *surv,
                           const ah_profile *prof, const ah_plan_options *o, ah_plan *out, char *err,
                           size_t errlen) {
    memset(out, 0, sizeof *out);
    double t0 = ah_now_s();
    int *at = ah_xcalloc((size_t)t->cluster.n_nodes + 1, sizeof(int)),
        *lost = ah_xcalloc((size_t)t->n_classes, sizeof(int));
    const rt_entry *e = survivors_map(t, surv, at, lost) == 0 ? entry_of(t, lost) : NULL;
    int rc = e ? map_entry(t, e, old, surv, at, NULL, prof, o, out, err, errlen) : 0;
    free(lost);
    free(at);
    if (rc == 1)
        out->planning_time_s = ah_now_s() - t0;
    return rc;
}

/* ---- the plan document's "replans" ---- */

/* An entry's replicas as one string, "MB:STAGE,STAGE;MB:STAGE" with STAGE = node/tp/first_gpu/first_layer/
 * last_layer (node: an index into the cluster): a few kilobytes an entry where a JSON array per stage made
 * the document of 209 entries take 90 ms to read (half a million cJSON items). */
static char *replicas_text(const rt_entry *e) {
    size_t cap = 64, n = 0;
    for (int k = 0; k < e->n_replicas; k++)
        cap += 16 + 60 * (size_t)e->replicas[k].n_stages;
    char *out = ah_xcalloc(cap, 1);
    for (int k = 0; k < e->n_replicas; k++) {
        const ah_replica *r = &e->replicas[k];
        n += (size_t)snprintf(out + n, cap - n, "%s%d:", k ? ";" : "", r->micro_batches);
        for (int j = 0; j < r->n_stages; j++) {
            const ah_stage *g = &r->stages[j];
            n += (size_t)snprintf(out + n, cap - n, "%s%d/%d/%d/%d/%d", j ? "," : "", g->node, g->tp,
                                  g->gpu_first, g->layer_first, g->layer_last);
        }
    }
    return out;
}

struct cJSON *ah_replan_table_to_json(const ah_replan_table *t) {
    cJSON *j = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(j, "entries");
    cJSON_AddNumberToObject(j, "depth", t->depth);
    cJSON_AddNumberToObject(j, "build_s", t->build_s);
    cJSON_AddNumberToObject(j, "build_threads", t->threads);
    for (int i = 0; i < t->n; i++) {
        const rt_entry *e = &t->e[i];
        cJSON *eo = cJSON_CreateObject(), *names = cJSON_AddArrayToObject(eo, "lost");
        for (int k = e->n_lost - 1; k >= 0; k--)
            cJSON_AddItemToArray(names, cJSON_CreateString(t->cluster.nodes[e->lost_nodes[k]].name));
        if (e->error) {
            cJSON_AddStringToObject(eo, "error", e->error);
        } else {
            cJSON_AddNumberToObject(eo, "search_value_ns", (double)e->value_ns);
            cJSON_AddNumberToObject(eo, "iteration_time_ns", (double)e->iteration_ns);
            cJSON_AddNumberToObject(eo, "micro_batch", e->micro_batch);
            char *text = replicas_text(e);
            cJSON_AddStringToObject(eo, "replicas", text);
            free(text);
        }
        cJSON_AddItemToArray(arr, eo);
    }
    return j;
}

/* the next integer of a replicas string, followed by `sep` (or the end when sep is 0); -1 when malformed */
static int next_int(const char **q, char sep, long *out) {
    char *end;
    if (**q < '0' || **q > '9')
        return -1;
    *out = strtol(*q, &end, 10);
    if (*out > 1000000000 || (sep ? *end != sep : (*end && *end != ',' && *end != ';')))
        return -1;
    *q = end + (sep ? 1 : 0);
    return 0;
}

/* one stage node/tp/first_gpu/first_layer/last_layer of replica k, checked against the cluster and model */
static int read_stage(const ah_err_ctx *c, const char **q, const char *rp, int k, int j,
                      const ah_replan_table *t, const ah_plan *p, const unsigned char *gone, ah_stage *g) {
    long f[5];
    for (int i = 0; i < 5; i++)
        if (next_int(q, i < 4 ? '/' : 0, &f[i]) < 0)
            return ah_jfail(c, rp, "replica %d stage %d: expected node/tp/first_gpu/first_layer/last_layer",
                            k, j);
    if (f[0] >= t->cluster.n_nodes || gone[f[0]])
        return ah_jfail(c, rp, "replica %d stage %d: node index %ld is not a surviving node of the cluster",
                        k, j, f[0]);
    const ah_node *nd = &t->cluster.nodes[f[0]];
    if (f[1] < 1 || (f[1] & (f[1] - 1)) || f[2] + f[1] > nd->gpus)
        return ah_jfail(c, rp, "replica %d stage %d: TP %ld from GPU %ld does not fit node \"%s\" (%d GPUs)",
                        k, j, f[1], f[2], nd->name, nd->gpus);
    if (f[3] >= f[4] || f[4] > p->model.n_layers + 2)
        return ah_jfail(c, rp, "replica %d stage %d: layers [%ld, %ld) not a non-empty range within [0, %d)",
                        k, j, f[3], f[4], p->model.n_layers + 2);
    memset(g, 0, sizeof *g);
    g->node = (int)f[0];
    g->tp = (int)f[1];
    g->gpu_first = (int)f[2];
    g->layer_first = (int)f[3];
    g->layer_last = (int)f[4];
    return 0;
}

/* entries[i].replicas: the string replicas_text writes */
static int read_replicas(const ah_err_ctx *c, const cJSON *eo, const char *ep, const ah_replan_table *t,
                         const ah_plan *p, const unsigned char *gone, rt_entry *e) {
    char rp[AH_JPATH_LEN];
    const cJSON *v;
    if (ah_jmember(c, eo, ep, "replicas", 1, &v, rp) < 0)
        return -1;
    if (!cJSON_IsString(v) || !v->valuestring || !*v->valuestring)
        return ah_jfail(c, rp, "expected \"MB:node/tp/first_gpu/first_layer/last_layer,...;MB:...\", got %s",
                        cJSON_IsString(v) ? "an empty string" : ah_json_type_name(v));
    const char *q = v->valuestring;
    for (const char *x = q; *x; x++)
        e->n_replicas += *x == ';';
    e->n_replicas++;
    e->replicas = ah_xcalloc((size_t)e->n_replicas, sizeof(ah_replica));
    for (int k = 0; k < e->n_replicas; k++) {
        ah_replica *r = &e->replicas[k];
        long mb;
        if (next_int(&q, ':', &mb) < 0 || mb < 1)
            return ah_jfail(c, rp, "replica %d: expected MB: (its micro-batches) before its stages", k);
        r->micro_batches = (int)mb;
        for (const char *x = q; *x && *x != ';'; x++)
            r->n_stages += *x == ',';
        r->n_stages++;
        r->stages = ah_xcalloc((size_t)r->n_stages, sizeof(ah_stage));
        for (int j = 0; j < r->n_stages; j++) {
            if (read_stage(c, &q, rp, k, j, t, p, gone, &r->stages[j]) < 0)
                return -1;
            if (*q == ',' || (*q == ';' && j == r->n_stages - 1))
                q++;
        }
    }
    if (*q)
        return ah_jfail(c, rp, "unexpected text after the last replica");
    return 0;
}

/* entries[i].lost: names of the cluster's nodes, each once, into e (vector and nodes); gone[] marks them */
static int read_lost(const ah_err_ctx *c, const cJSON *eo, const char *ep, const ah_replan_table *t,
                     rt_entry *e, unsigned char *gone) {
    char lp[AH_JPATH_LEN], path[AH_JPATH_LEN];
    const cJSON *arr;
    if (ah_jget_arr(c, eo, ep, "lost", 1, &arr, lp) < 0)
        return -1;
    int n = cJSON_GetArraySize(arr);
    if (n < 1 || n > t->depth)
        return ah_jfail(c, lp, "expected 1..%d node names (the table's depth), got %d", t->depth, n);
    e->lost = ah_xcalloc((size_t)t->n_classes, sizeof(int));
    e->lost_nodes = ah_xcalloc((size_t)n, sizeof(int));
    int k = 0;
    for (const cJSON *v = arr->child; v; v = v->next, k++) {
        ah_jpath_index(path, lp, k);
        if (!cJSON_IsString(v))
            return ah_jfail(c, path, "expected a node name, got %s", ah_json_type_name(v));
        int i = ah_cluster_node_index(&t->cluster, v->valuestring);
        if (i < 0)
            return ah_jfail(c, path, "no node \"%s\" in cluster.nodes", v->valuestring);
        if (gone[i])
            return ah_jfail(c, path, "\"%s\" named twice", v->valuestring);
        gone[i] = 1;
        e->lost[t->cls[i]]++;
        e->lost_nodes[e->n_lost++] = i;
    }
    return 0;
}

static int read_entry(const ah_err_ctx *c, const cJSON *eo, const char *ep, ah_replan_table *t,
                      const ah_plan *p) {
    t->e = ah_xrealloc(t->e, sizeof *t->e * (size_t)(t->n + 1));
    rt_entry *e = &t->e[t->n++];
    memset(e, 0, sizeof *e);
    unsigned char *gone = ah_xcalloc((size_t)t->cluster.n_nodes + 1, 1);
    char msg[512];
    int rc = read_lost(c, eo, ep, t, e, gone);
    for (int i = 0; rc == 0 && i < t->n - 1; i++)
        if (!memcmp(t->e[i].lost, e->lost, sizeof(int) * (size_t)t->n_classes))
            rc = ah_jfail(c, ep, "the same nodes lost per class as replans.entries[%d]", i);
    int has_error = rc == 0 ? ah_jget_str(c, eo, ep, "error", 0, msg, sizeof msg) : 0;
    if (rc == 0 && has_error < 0)
        rc = -1;
    if (rc == 0 && has_error > 0) {
        e->error = strdup(msg);
        if (!e->error)
            abort();
    } else if (rc == 0) {
        if (ah_jget_ll(c, eo, ep, "search_value_ns", 1, 0, &e->value_ns) < 0 ||
            ah_jget_ll(c, eo, ep, "iteration_time_ns", 1, 0, &e->iteration_ns) < 0 ||
            ah_jget_int(c, eo, ep, "micro_batch", 1, 1, p->global_batch, &e->micro_batch) < 0 ||
            read_replicas(c, eo, ep, t, p, gone, e) < 0)
            rc = -1;
    }
    free(gone);
    return rc;
}

int ah_replan_table_from_json(const struct cJSON *j, const ah_plan *p, const char *file,
                              ah_replan_table **out, char *err, size_t errlen) {
    *out = NULL;
    ah_err_ctx c = {file, err, errlen};
    char ap[AH_JPATH_LEN], ep[AH_JPATH_LEN];
    const cJSON *arr;
    int depth;
    if (!cJSON_IsObject(j))
        return ah_jfail(&c, "replans", "expected an object, got %s", ah_json_type_name(j));
    if (ah_jget_int(&c, j, "replans", "depth", 1, 1, AH_REPLAN_MAX_DEPTH, &depth) < 0 ||
        ah_jget_arr(&c, j, "replans", "entries", 1, &arr, ap) < 0)
        return -1;
    ah_replan_table *t = table_new(&p->cluster, depth);
    double b = 0;
    int rc = ah_jget_num(&c, j, "replans", "build_s", 0, 0, &b) < 0 ? -1 : 0;
    t->build_s = b;
    int i = 0;
    for (const cJSON *eo = arr->child; eo && rc == 0; eo = eo->next, i++) {
        rc = ah_jitem_obj(&c, eo, ap, i, ep) < 0 ? -1 : read_entry(&c, eo, ep, t, p);
    }
    if (rc != 0) {
        ah_replan_table_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

/* ---- beyond the table ---- */

/* sub[i] = table node i is one of the first v[c] lost nodes of its class c (cluster order) */
static void pick_sub_loss(const ah_replan_table *t, const int *at, const int *v, unsigned char *sub) {
    int *left = ah_xcalloc((size_t)t->n_classes, sizeof(int));
    memcpy(left, v, sizeof(int) * (size_t)t->n_classes);
    for (int i = 0; i < t->cluster.n_nodes; i++) {
        sub[i] = at[i] < 0 && left[t->cls[i]] > 0;
        left[t->cls[i]] -= sub[i];
    }
    free(left);
}

/* Every sub-loss v <= w of `depth` nodes (at most MAX_SUB_LOSSES), appended to subs (n_classes ints each) */
#define MAX_SUB_LOSSES 64
static void sub_losses(const ah_replan_table *t, const int *w, int *v, int c, int left, int *subs, int *n) {
    if (*n == MAX_SUB_LOSSES)
        return;
    if (c == t->n_classes) {
        if (left == 0)
            memcpy(subs + (size_t)(*n)++ * (size_t)t->n_classes, v, sizeof(int) * (size_t)t->n_classes);
        return;
    }
    for (int k = left < w[c] ? left : w[c]; k >= 0; k--) {
        v[c] = k;
        sub_losses(t, w, v, c + 1, left - k, subs, n);
    }
    v[c] = 0;
}

/* The entry of sub-loss v mapped onto the survivors of v alone (mid), the rest of the loss used last; its
 * damage = the micro-batches of its replicas that still touch a lost node. 1 with *p, 0 no entry, -1 error.
 */
static int map_sub_loss(const ah_replan_table *t, const ah_plan *old, const int *at, const int *v,
                        const ah_profile *prof, const ah_plan_options *o, ah_plan *p, int *damage) {
    const rt_entry *e = entry_of(t, v);
    if (!e)
        return 0;
    int N = t->cluster.n_nodes;
    unsigned char *sub = ah_xcalloc((size_t)N + 1, 1), *avoid = ah_xcalloc((size_t)N + 1, 1);
    unsigned char *avoid_mid = ah_xcalloc((size_t)N + 1, 1);
    int *at_mid = ah_xcalloc((size_t)N + 1, sizeof(int));
    pick_sub_loss(t, at, v, sub);
    ah_cluster mid = {ah_xcalloc((size_t)N + 1, sizeof(ah_node)), 0};
    for (int i = 0; i < N; i++) {
        at_mid[i] = sub[i] ? -1 : mid.n_nodes;
        avoid[i] = !sub[i] && at[i] < 0;
        if (!sub[i]) {
            avoid_mid[mid.n_nodes] = avoid[i];
            mid.nodes[mid.n_nodes++] = t->cluster.nodes[i];
        }
    }
    char err[512];
    int rc = map_entry(t, e, old, &mid, at_mid, avoid, prof, o, p, err, sizeof err);
    *damage = 0;
    for (int k = 0; rc == 1 && k < p->n_replicas; k++) {
        int hit = 0;
        for (int j = 0; j < p->replicas[k].n_stages; j++)
            hit |= avoid_mid[p->replicas[k].stages[j].node];
        *damage += hit ? p->replicas[k].micro_batches : 0;
    }
    free(mid.nodes);
    free(at_mid);
    free(avoid_mid);
    free(avoid);
    free(sub);
    return rc;
}

int ah_replan_table_nearest(const ah_replan_table *t, const ah_plan *old, const ah_cluster *surv,
                            const ah_profile *prof, const ah_plan_options *o, ah_plan *out, char *err,
                            size_t errlen) {
    memset(out, 0, sizeof *out);
    int N = t->cluster.n_nodes, K = t->n_classes, total = 0, n = 0;
    int *at = ah_xcalloc((size_t)N + 1, sizeof(int)), *w = ah_xcalloc((size_t)K, sizeof(int));
    int *v = ah_xcalloc((size_t)K, sizeof(int)),
        *subs = ah_xcalloc((size_t)MAX_SUB_LOSSES * (size_t)K, sizeof(int));
    if (survivors_map(t, surv, at, w) == 0) {
        for (int c = 0; c < K; c++)
            total += w[c];
        if (total > t->depth)
            sub_losses(t, w, v, 0, t->depth, subs, &n);
    }
    /* the sub-loss whose entry keeps the most micro-batches on replicas the rest of the loss leaves whole */
    ah_plan best = {0};
    int best_damage = -1;
    for (int j = 0; j < n; j++) {
        ah_plan p;
        int damage;
        memset(&p, 0, sizeof p);
        if (map_sub_loss(t, old, at, subs + (size_t)j * (size_t)K, prof, o, &p, &damage) != 1)
            continue;
        if (best_damage < 0 || damage < best_damage ||
            (damage == best_damage && p.iteration_time_ns < best.iteration_time_ns)) {
            if (best_damage >= 0)
                ah_plan_free(&best);
            best = p;
            best_damage = damage;
        } else {
            ah_plan_free(&p);
        }
    }
    int found = 0;
    if (best_damage >= 0) {
        found = ah_plan_repair(&best, surv, prof, o, out, err, errlen) == 0;
        ah_plan_free(&best);
    }
    free(subs);
    free(v);
    free(at);
    free(w);
    return found;
}
