/* Alternatives to the chosen plan (`autohet plan --top K`, autohet/plan.h):
 * not the next-best sub-searches, which on most pools are small plans on
 * part of the cluster, but the best plan of each structural choice a user
 * would weigh against it — a shallower pipeline (fewer stages are often
 * safer: less pipeline communication on the critical path, where the cost
 * model is least sure, docs/calibration.md), another TP degree everywhere,
 * another micro-batch size — each found by the same exact planner under
 * that constraint, then ranked by predicted time. */
#include <stdio.h>
#include <stdlib.h>

#include "autohet/plan.h"
#include "plan/search.h"

static int deepest(const ah_plan *p) {
    int d = 0;
    for (int k = 0; k < p->n_replicas; k++)
        d = p->replicas[k].n_stages > d ? p->replicas[k].n_stages : d;
    return d;
}

/* the plan's TP degrees as a bit mask */
static unsigned degrees(const ah_plan *p) {
    unsigned m = 0;
    for (int k = 0; k < p->n_replicas; k++)
        for (int j = 0; j < p->replicas[k].n_stages; j++)
            m |= p->replicas[k].stages[j].tp < 32 ? 1u << p->replicas[k].stages[j].tp : 0;
    return m;
}

typedef struct {
    ah_plan *plan;
    char (*why)[96];
    int n, cap;
} pool;

/* adds a searched plan unless the pool holds the same one (then it is freed) */
static void add(pool *q, ah_plan *p, const char *why) {
    int dup = 0;
    for (int i = 0; i < q->n && !dup; i++)
        dup = ah_plan_same_layout(&q->plan[i], p);
    if (dup || q->n == q->cap) {
        ah_plan_free(p);
        return;
    }
    q->plan[q->n] = *p;
    snprintf(q->why[q->n], sizeof q->why[q->n], "%s", why);
    q->n++;
}

static void try_search(pool *q, const ah_model_config *m, const ah_cluster *c, const ah_profile *prof,
                       const ah_plan_options *o, const char *why) {
    ah_plan p;
    char err[512];
    if (ah_plan_search(m, c, prof, o, &p, err, sizeof err) == 0)
        add(q, &p, why);
}

static int faster(const ah_plan *a, const ah_plan *b) {
    return a->iteration_time_s < b->iteration_time_s;
}

int ah_plan_alternatives(const ah_model_config *m, const ah_cluster *c, const ah_profile *prof,
                         const ah_plan_options *o, const ah_plan *best, int k, ah_plan *out, char (*why)[96],
                         int *n_out) {
    enum { CAP = 32 };
    pool q = {calloc(CAP, sizeof(ah_plan)), calloc(CAP, sizeof *q.why), 0, CAP};
    if (!q.plan || !q.why)
        abort();
    ah_plan first;
    ah_plan_copy(&first, best);
    add(&q, &first, "the chosen plan");
    /* shallower pipelines: at most half the chosen depth, then half again */
    for (int cap = deepest(best) / 2; cap >= 1; cap /= 2) {
        ah_plan_options x = *o;
        unsigned long long allowed = cap >= 64 ? ~0ull : (1ull << cap) - 1;
        x.pp_mask = (o->pp_mask ? o->pp_mask : ~0ull) & allowed;
        if (!x.pp_mask)
            continue;
        char w[96];
        snprintf(w, sizeof w, "at most %d pipeline stage%s", cap, cap == 1 ? "" : "s");
        try_search(&q, m, c, prof, &x, w);
    }
    /* one TP degree everywhere, each the chosen plan does not use alone */
    unsigned have = degrees(best);
    for (int t = 1; t <= 8 && o->tp == 0; t *= 2) {
        if (have == 1u << t || (o->tp_mask && !(o->tp_mask & (1u << t))))
            continue;
        ah_plan_options x = *o;
        x.tp_mask = 1u << t;
        char w[96];
        snprintf(w, sizeof w, "TP %d on every stage", t);
        try_search(&q, m, c, prof, &x, w);
    }
    /* another micro-batch size */
    for (int b = 1; b <= 8 && o->micro_batch == 0; b *= 2) {
        if (b == best->micro_batch)
            continue;
        ah_plan_options x = *o;
        x.micro_batch = b;
        char w[96];
        snprintf(w, sizeof w, "micro-batch %d", b);
        try_search(&q, m, c, prof, &x, w);
    }
    /* ranked by predicted time after the chosen plan (its label travels with it) */
    int *idx = calloc((size_t)q.n, sizeof(int));
    if (!idx)
        abort();
    for (int i = 0; i < q.n; i++)
        idx[i] = i;
    for (int i = 1; i < q.n; i++) /* insertion sort of the few candidates, the chosen plan first */
        for (int j = i; j > 1 && faster(&q.plan[idx[j]], &q.plan[idx[j - 1]]); j--) {
            int t = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = t;
        }
    *n_out = 0;
    for (int i = 0; i < q.n; i++) {
        if (*n_out < k) {
            out[*n_out] = q.plan[idx[i]];
            snprintf(why[*n_out], sizeof why[*n_out], "%s", q.why[idx[i]]);
            (*n_out)++;
        } else {
            ah_plan_free(&q.plan[idx[i]]);
        }
    }
    free(idx);
    free(q.plan);
    free(q.why);
    return 0;
}
