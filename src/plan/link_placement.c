/* Placing a plan's stages on the measured links between hosts (o->links).
 * The search sees node classes, not hosts: two nodes of one class are the
 * same to it, but not to a link matrix in which one pair of hosts is slow.
 * So a built plan's nodes are swapped, two of one class at a time (a used
 * node with another used or an unused one), while a swap makes the
 * evaluated iteration time shorter (first improvement, a bounded number of
 * passes). */
#include <string.h>

#include "plan/costs.h"
#include "plan/search.h"

static int same_class(const ah_node *a, const ah_node *b) {
    return !strcmp(a->dev.name, b->dev.name) && a->gpus == b->gpus && a->nic_gbit == b->nic_gbit;
}

static void swap_nodes(ah_plan *p, int a, int b) {
    for (int k = 0; k < p->n_replicas; k++)
        for (int j = 0; j < p->replicas[k].n_stages; j++) {
            ah_stage *s = &p->replicas[k].stages[j];
            s->node = s->node == a ? b : s->node == b ? a : s->node;
        }
}

static int node_used(const ah_plan *p, int i) {
    for (int k = 0; k < p->n_replicas; k++)
        for (int j = 0; j < p->replicas[k].n_stages; j++)
            if (p->replicas[k].stages[j].node == i)
                return 1;
    return 0;
}

void ah_plan_place_on_links(ah_plan *p, const ah_profile *prof, const ah_plan_options *o) {
    if (!o->links)
        return;
    char err[256];
    int n = p->cluster.n_nodes;
    for (int pass = 0; pass < 4; pass++) {
        int improved = 0;
        for (int a = 0; a < n; a++)
            for (int b = a + 1; b < n; b++) {
                const ah_node *na = &p->cluster.nodes[a], *nb = &p->cluster.nodes[b];
                if (!same_class(na, nb) || (!node_used(p, a) && !node_used(p, b)))
                    continue;
                long long before = p->iteration_time_ns;
                swap_nodes(p, a, b);
                if (ah_plan_evaluate(p, prof, o, err, sizeof err) == 0 && p->iteration_time_ns < before) {
                    improved = 1;
                    continue;
                }
                swap_nodes(p, a, b); /* back, and its numbers with it */
                ah_plan_evaluate(p, prof, o, err, sizeof err);
            }
        if (!improved)
            break;
    }
}
