/* Internals the planner's search shares between its rooms (libuv style: ah__ names, not in any public
 * header): search_autohet.c (classes, templates, the solve) and search_expand.c (phase 2, the bounded
 * expansion of long mixed shapes). */
#ifndef AUTOHET_PLAN_SEARCH_INTERNAL_H
#define AUTOHET_PLAN_SEARCH_INTERNAL_H
#include "plan/search.h"

/* The knapsack tables of one feasibility check and their scratch. */
typedef struct {
    long long *V;   /* per class: best micro-batch ah__capacity with u units, u = 0..units */
    int *choice;    /* template index used last at u, -1 = leave a unit idle */
    long long *cap; /* per template */
    /* --dp only (R > 0): the same knapsack with the replica count as a second
     * dimension, per class (units + 1) x (R + 1) */
    int R;                        /* largest replica count tracked */
    int offR[AH_MAX_KINDS + 1];   /* per class: start of its table */
    long long *VR;                /* best ah__capacity with <= u units and exactly r replicas, -1 = none */
    int *chR;                     /* template used last at (u, r), -1 = a unit idle */
    long long *conv;              /* K x (R + 1): classes 0..k combined, exactly r replicas */
    int *conv_arg;                /* replicas class k contributes at that optimum */
    int sel_counts[AH_MAX_KINDS]; /* the feasible combination found: pure replicas per class */
    /* per subset of classes (K <= COMP_MAX_K): the convolution of the other
     * classes at all their units, built lazily for the current tables */
    long long *comp;
    unsigned *comp_gen;
    unsigned gen;
    long long *tmp;        /* 2 x (R + 1) scratch */
    int *plist, *best_at;  /* class_tables scratch: n_tpl, and the most slots of a kind + 1 */
    int n_mixed, *mixed;   /* the mixed templates of the knapsack (not node-local) */
    long long *mixed_rmax; /* per mixed template: the most copies its slots allow */
} ah__workspace;

#define COMP_MAX_K 8

/* Mixed shapes: a callback per shape of the walk (ah__mixed_shapes). */
typedef void (*ah__shape_fn)(ah_search_ctx *x, const int *shape, int stages, void *arg);

typedef struct {
    int lo, hi;
    int uniform; /* only shapes whose kinds share one degree */
    ah__shape_fn fn;
    void *arg;
} ah__shape_walk;

/* Whether a pipeline of this many stages is allowed (--pp). */
int ah__depth_allowed(const ah_plan_options *o, int stages);
/* Whether copies of the shape's node-local template fit (a node of each class with room for two copies). */
int ah__local_possible(const ah_search_ctx *x, const int *shape);
/* Add a shape's templates: normal layout (normal = 1) and node-local (local = 1), each in both class orders
 * if mixed; b0[order]: their B0 when known, else NULL. */
void ah__add_templates(ah_search_ctx *x, const int *shape, int normal, int local, const ah_ns *b0);
/* Walk the mixed shapes of sw's depth range, calling sw->fn on each. */
void ah__mixed_shapes(ah_search_ctx *x, const ah__shape_walk *sw, int kind, int deg, int *shape, int stages,
                      int kinds);
/* Whether every stage of a shape has one degree. */
int ah__shape_uniform(const ah_search_ctx *x, const int *shape);
/* The deepest mixed shape searched. */
int ah__mixed_limit(const ah_search_ctx *x);
/* Micro-batches a copy of t runs with its pipeline done within P (saturated at M); 0 if its tail (this solve
 * pass's) exceeds max_tail. */
long long ah__capacity(const ah_search_ctx *x, const ah_template *t, ah_ns P, ah_ns max_tail);
/* The scratch of ah__knapsack_tables (plist, best_at) for the current templates. */
void ah__workspace_scratch(const ah_search_ctx *x, ah__workspace *w);
/* Unbounded knapsack per kind over its single-kind templates (weight = slots, value = w->cap). */
void ah__knapsack_tables(const ah_search_ctx *x, ah__workspace *w, const int *offset);

#endif
