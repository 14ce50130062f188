/* Replaying a spot-availability trace through the planner, the simulator and
 * the recovery cost model, per policy (docs/spot-sim.md). */
#include "autohet/spot_sim.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autohet/plan.h"
#include "autohet/sim.h"
#include "util/clock.h"
#include "util/errors.h"

static const char *policy_names[AH_POLICY_N] = {"autohet", "full-reload", "static"};
static const char *cause_names[AH_DOWN_N] = {"detection", "planning", "restart", "transfer", "waiting"};

const char *ah_spot_policy_name(ah_spot_policy p) {
    return p < AH_POLICY_N ? policy_names[p] : "?";
}
const char *ah_down_cause_name(ah_down_cause c) {
    return c < AH_DOWN_N ? cause_names[c] : "?";
}

void ah_spot_costs_default(ah_spot_costs *c) {
    c->detect_s = 5;
    c->restart_s = 30;
    c->mem_gbs = 10;
    c->cloud_mbs = 100;
    c->ckpt_every = 50;
    c->bytes_per_param = 16;
    c->plan_s_64 = 0.18;
    c->measure_planning = 0;
}

double ah_spot_modelled_plan_s(const ah_spot_costs *c, int gpus) {
    /* the planner benchmark's slowest times (BENCHMARKS.md): 0.18 s at 64 GPUs,
     * 7.8 s at 1,024 = 0.18 s x 16^1.36 */
    return gpus > 0 ? c->plan_s_64 * pow(gpus / 64.0, 1.36) : 0;
}

int ah_spot_node_mix_parse(const char *s, const ah_device_catalog *devices, ah_spot_node_mix *mix, char *err,
                           size_t errlen) {
    memset(mix, 0, sizeof *mix);
    char *copy = strdup(s), *save = NULL;
    int rc = 0;
    for (char *tok = strtok_r(copy, ",", &save); tok && rc == 0; tok = strtok_r(NULL, ",", &save)) {
        if (mix->n == 8) {
            snprintf(err, errlen, "--node: at most 8 node types");
            rc = -1;
            break;
        }
        double w = 1;
        char *eq = strchr(tok, '=');
        if (eq) {
            char *end = NULL;
            *eq = 0;
            w = strtod(eq + 1, &end);
            if (!end || *end || !(w > 0)) {
                snprintf(err, errlen, "--node '%s': the weight after '=' must be a positive number", tok);
                rc = -1;
                break;
            }
        }
        char one[160], e2[256];
        snprintf(one, sizeof one, "1x%.150s", tok);
        ah_cluster c;
        if (ah_cluster_parse_shorthand(one, devices, &c, e2, sizeof e2) != 0) {
            snprintf(err, errlen, "--node '%s': expected GPUSxTYPE like 8xA100-40G (%s)", tok, e2);
            rc = -1;
            break;
        }
        mix->node[mix->n] = c.nodes[0];
        mix->weight[mix->n] = w;
        mix->n++;
        ah_cluster_free(&c);
    }
    free(copy);
    if (rc == 0 && mix->n == 0) {
        snprintf(err, errlen, "--node: no node type given");
        rc = -1;
    }
    return rc;
}

/* the mix entry of a trace node: FNV-1a of its name through MurmurHash3's
 * 64-bit finalizer, into the weights. Without the finalizer the top bits
 * hardly depend on a name's last characters: the AWS trace's node1..node177
 * drew 87:90 for weights 3:1, and a..h all drew the first type. */
static int node_type(const ah_spot_node_mix *mix, const char *name) {
    uint64_t h = 1469598103934665603ull;
    for (const char *p = name; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    double u = (double)(h >> 11) / 9007199254740992.0, tot = 0, acc = 0;
    for (int i = 0; i < mix->n; i++)
        tot += mix->weight[i];
    for (int i = 0; i < mix->n; i++) {
        acc += mix->weight[i] / tot;
        if (u < acc)
            return i;
    }
    return mix->n - 1;
}

/* ---- node sets, plans and their cache ---- */

typedef struct {
    char name[64];
    int type;
} avail_node;

typedef struct {
    int counts[8];
    int ok;
    ah_plan plan; /* nodes named n0..; renamed when used */
    double iter_s, plan_s;
} plan_entry;

typedef struct {
    const ah_spot_node_mix *mix;
    const ah_model_config *m;
    const ah_profile *prof;
    ah_plan_options po;
    plan_entry *cache;
    int n_cache, cap_cache;
    int plans_computed, sims_computed;
    unsigned tp_degrees; /* bit k: a stage of a computed plan has TP degree 2^k */
    const ah_spot_costs *costs;
} planner_ctx;

static int cmp_avail(const void *a, const void *b) {
    const avail_node *x = a, *y = b;
    if (x->type != y->type)
        return x->type - y->type;
    return strcmp(x->name, y->name);
}

/* The plan for a node set (sorted by type, then name), from the cache by
 * composition; its cluster's nodes get the set's names. NULL: no plan fits. */
static const plan_entry *plan_for(planner_ctx *pc, const avail_node *nodes, int n, ah_plan *out) {
    int counts[8] = {0};
    for (int i = 0; i < n; i++)
        counts[nodes[i].type]++;
    plan_entry *pe = NULL;
    for (int i = 0; i < pc->n_cache && !pe; i++)
        if (!memcmp(pc->cache[i].counts, counts, sizeof counts))
            pe = &pc->cache[i];
    if (!pe) {
        if (pc->n_cache == pc->cap_cache)
            pc->cache =
                ah_xrealloc(pc->cache, sizeof *pc->cache * (size_t)(pc->cap_cache = 2 * pc->cap_cache + 8));
        pe = &pc->cache[pc->n_cache++];
        memset(pe, 0, sizeof *pe);
        memcpy(pe->counts, counts, sizeof counts);
        if (n > 0) {
            ah_cluster c = {ah_xcalloc((size_t)n, sizeof(ah_node)), n};
            for (int i = 0; i < n; i++) {
                c.nodes[i] = pc->mix->node[nodes[i].type];
                snprintf(c.nodes[i].name, sizeof c.nodes[i].name, "n%d", i);
            }
            char err[512];
            double t0 = ah_now_s();
            pe->ok = ah_plan_search(pc->m, &c, pc->prof, &pc->po, &pe->plan, err, sizeof err) == 0;
            /* modelled unless asked to measure: a replay is then a function of its inputs */
            pe->plan_s = pc->costs->measure_planning
                             ? ah_now_s() - t0
                             : ah_spot_modelled_plan_s(pc->costs, ah_cluster_total_gpus(&c));
            pc->plans_computed++;
            if (pe->ok) {
                ah_sim_options so = {.schedule = AH_SCHED_1F1B, .overlap_dp = 1}; /* as the planner costs it */
                ah_sim_result r;
                ah_plan copy;
                ah_plan_copy(&copy, &pe->plan);
                int simulated = ah_simulate(&copy, pc->prof, &pc->po, &so, &r, err, sizeof err) == 0;
                pe->iter_s = simulated ? r.iteration_time_s : pe->plan.iteration_time_s;
                if (simulated)
                    ah_sim_result_free(&r);
                ah_plan_free(&copy);
                pc->sims_computed++;
                for (int k = 0; k < pe->plan.n_replicas; k++)
                    for (int j = 0; j < pe->plan.replicas[k].n_stages; j++)
                        pc->tp_degrees |= 1u << __builtin_ctz((unsigned)pe->plan.replicas[k].stages[j].tp);
            }
            free(c.nodes);
        }
    }
    if (!pe->ok)
        return NULL;
    ah_plan_copy(out, &pe->plan);
    for (int i = 0; i < n; i++)
        snprintf(out->cluster.nodes[i].name, sizeof out->cluster.nodes[i].name, "%s", nodes[i].name);
    return pe;
}

static int in_set(const avail_node *s, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(s[i].name, name))
            return 1;
    return 0;
}

/* ---- one policy's run ---- */

typedef struct {
    ah_spot_policy pol;
    ah_spot_policy_result *res;
    int have_plan;
    ah_plan plan; /* the plan running or being restored */
    int have_held;
    ah_plan held; /* the last plan that ran: its nodes hold its layers in memory */
    int have_cloud;
    ah_plan cloud;  /* the plan that wrote the last cloud checkpoint: the cloud holds its stages' shards */
    int cloud_step; /* ... of that checkpoint */
    double rate;    /* samples/s of `plan` */
    double iter_s;
    double iter; /* iterations done */
    double last_t;
    double rec_t0, phase[AH_DOWN_N]; /* the recovery in progress (phases in cause order) */
    double up_at;                    /* when it is running again; < 0 waiting for nodes */
} pstate;

static void add_segment(ah_spot_policy_result *r, double t0, double t1, double rate) {
    if (t1 <= t0)
        return;
    if (r->n_seg && r->seg[r->n_seg - 1].t1 == t0 && r->seg[r->n_seg - 1].samples_per_s == rate) {
        r->seg[r->n_seg - 1].t1 = t1;
        return;
    }
    if (r->n_seg == r->cap_seg)
        r->seg = ah_xrealloc(r->seg, sizeof *r->seg * (size_t)(r->cap_seg = 2 * r->cap_seg + 64));
    r->seg[r->n_seg++] = (ah_spot_segment){t0, t1, rate};
}

/* account the time from ps->last_t to t: recovery phases, then running (and
 * the cloud checkpoints every K iterations it writes) */
static void advance(pstate *ps, double t, int ckpt_every) {
    double a = ps->last_t;
    if (t <= a)
        return;
    if (!ps->have_plan || ps->up_at < 0) { /* waiting for a plan */
        ps->res->down_s[AH_DOWN_WAIT] += t - a;
        add_segment(ps->res, a, t, 0);
    } else {
        if (a < ps->up_at) { /* recovering */
            double off = ps->rec_t0;
            for (int c = 0; c < AH_DOWN_N; c++) {
                double lo = off > a ? off : a, hi = off + ps->phase[c] < t ? off + ps->phase[c] : t;
                if (hi > lo)
                    ps->res->down_s[c] += hi - lo;
                off += ps->phase[c];
            }
            double e = ps->up_at < t ? ps->up_at : t;
            add_segment(ps->res, a, e, 0);
            if (ps->up_at <= t) { /* restored: its nodes now hold its layers */
                if (ps->have_held)
                    ah_plan_free(&ps->held);
                ah_plan_copy(&ps->held, &ps->plan);
                ps->have_held = 1;
            }
            a = e;
        }
        if (t > a) {
            double i0 = ps->iter, i1 = i0 + (t - a) / ps->iter_s;
            int ck = (int)floor(i1 + 1e-9) / ckpt_every * ckpt_every;
            if (ck > 0 && ck > i0 + 1e-9) { /* this plan wrote (at least) the checkpoint of step ck */
                if (ps->have_cloud)
                    ah_plan_free(&ps->cloud);
                ah_plan_copy(&ps->cloud, &ps->plan);
                ps->have_cloud = 1;
                ps->cloud_step = ck;
            }
            ps->iter = i1;
            ps->res->samples += (t - a) * ps->rate;
            add_segment(ps->res, a, t, ps->rate);
        }
    }
    ps->last_t = t;
}

static double layer_bytes(const ah_model_config *m, int l, int tp, double bpp) {
    return ah_layer_params(m, ah_model_layer_kind(m, l)) * bpp / tp;
}

/* bytes of state each node's stages of plan p hold, into per_node (by plan
 * node index): every layer once per node, however many of its replicas'
 * stages there hold it (one download, copied locally) */
static void state_per_node(const ah_plan *p, double bpp, double *per_node) {
    int L = ah_model_num_layers(&p->model), nn = p->cluster.n_nodes;
    unsigned char *seen = ah_xcalloc((size_t)L * (size_t)nn + 1, 1);
    for (int i = 0; i < nn; i++)
        per_node[i] = 0;
    for (int k = 0; k < p->n_replicas; k++)
        for (int j = 0; j < p->replicas[k].n_stages; j++) {
            const ah_stage *s = &p->replicas[k].stages[j];
            for (int l = s->layer_first; l < s->layer_last; l++)
                if (!seen[(size_t)s->node * (size_t)L + (size_t)l]++)
                    per_node[s->node] += layer_bytes(&p->model, l, 1, bpp);
        }
    free(seen);
}

/* the shards of stage s's layers at `step` into manifest m: every TP rank of
 * the stage's degree, sized and recorded at that degree, as the manifests of
 * `autohet run` are. seen[layer][degree] skips a layer m already has at the
 * degree (another replica's stage). */
static void put_stage_shards(ah_manifest *m, const ah_model_config *model, const ah_stage *s, int step,
                             double bpp, unsigned char *seen) {
    for (int l = s->layer_first; l < s->layer_last; l++) {
        unsigned char *have =
            &seen[(size_t)l * (AH_MAX_TP_LOG2 + 1) + (size_t)__builtin_ctz((unsigned)s->tp)];
        if (*have)
            continue;
        *have = 1;
        for (int t = 0; t < s->tp; t++) {
            ah_manifest_entry e = {l, t, step, "", (uint64_t)layer_bytes(model, l, s->tp, bpp), 0, s->tp};
            ah_manifest_put(m, &e);
        }
    }
}

/* One holding into h: the shards of plan p's stages on plan node `node` (-1:
 * every stage) at `step`. */
static void put_holding(ah_holding *h, const char *name, int tier, const ah_plan *p, int node, int step,
                        double bpp) {
    snprintf(h->node, sizeof h->node, "%s", name);
    h->tier = tier;
    ah_manifest_init(&h->m, name, ah_tier_name(tier));
    int L = ah_model_num_layers(&p->model);
    unsigned char *seen = ah_xcalloc((size_t)L * (AH_MAX_TP_LOG2 + 1) + 1, 1);
    for (int k = 0; k < p->n_replicas; k++)
        for (int j = 0; j < p->replicas[k].n_stages; j++)
            if (node < 0 || p->replicas[k].stages[j].node == node)
                put_stage_shards(&h->m, &p->model, &p->replicas[k].stages[j], step, bpp, seen);
    free(seen);
}

/* What a layer-bitmap recovery finds: the memory tier of every node of the
 * held plan still in `set` (its stages' shards at the current iteration) and
 * the cloud (the stages' shards of the plan that wrote the last checkpoint).
 * Returns how many holdings, into *out. */
static int recovery_holdings(const pstate *ps, const avail_node *set, int n, double bpp, ah_holding **out) {
    int cur = (int)floor(ps->iter + 1e-9), nh = 0;
    ah_holding *h = ah_xcalloc((size_t)(ps->have_held ? ps->held.cluster.n_nodes : 0) + 1, sizeof *h);
    for (int i = 0; ps->have_held && i < ps->held.cluster.n_nodes; i++)
        if (in_set(set, n, ps->held.cluster.nodes[i].name)) /* else preempted: its memory is gone */
            put_holding(&h[nh++], ps->held.cluster.nodes[i].name, AH_TIER_MEMORY, &ps->held, i, cur, bpp);
    if (ps->have_cloud)
        put_holding(&h[nh++], "cloud", AH_TIER_CLOUD, &ps->cloud, -1, ps->cloud_step, bpp);
    *out = h;
    return nh;
}

/* The slowest node's time to receive the shards of assignment a (new plan
 * np), the bytes per tier added to bytes[]. A shard several ranks of one
 * node need crosses the network once, then is copied locally. */
static double assignment_time(const ah_assignment *a, const ah_plan *np, const ah_spot_costs *c,
                              double *bytes) {
    int nn = np->cluster.n_nodes, L = ah_model_num_layers(&np->model);
    const size_t slots = 2 * AH_MAX_TP - 1; /* shard (tp rank t of degree T): slot T - 1 + t */
    double *t_node = ah_xcalloc((size_t)nn + 1, sizeof(double));
    unsigned char *got = ah_xcalloc((size_t)nn * (size_t)L * slots + 1, 1);
    for (int i = 0; i < a->n; i++) {
        const ah_assign_entry *e = &a->e[i];
        int node = ah_plan_rank_node(np, e->rank, NULL, NULL, NULL), tier = e->tier, deg = e->degree;
        size_t gi = ((size_t)node * (size_t)L + (size_t)e->layer) * slots + (size_t)(deg - 1 + e->tp);
        if (tier != AH_TIER_MEMORY && got[gi]++)
            tier = AH_TIER_MEMORY;
        double bw = tier == AH_TIER_PEER    ? np->cluster.nodes[node].nic_gbit / 8 * 1e9
                    : tier == AH_TIER_CLOUD ? c->cloud_mbs * 1e6
                                            : c->mem_gbs * 1e9;
        t_node[node] += e->bytes / bw;
        bytes[tier] += e->bytes;
    }
    double worst = 0;
    for (int i = 0; i < nn; i++)
        worst = t_node[i] > worst ? t_node[i] : worst;
    free(got);
    free(t_node);
    return worst;
}

/* Layer-bitmap recovery for the new plan np from the held plan's survivors
 * (memory, every iteration) and the cloud (every K), through the recovery
 * assignment of `autohet run`: shards of another TP degree are resharded
 * from every TP rank of one recorded degree. Returns the transfer time and
 * sets the step restored. */
static double bitmap_transfer(pstate *ps, const ah_plan *np, const avail_node *set, int n,
                              const ah_spot_costs *c, double *step) {
    ah_holding *h = NULL;
    int nh = recovery_holdings(ps, set, n, c->bytes_per_param, &h);
    ah_assignment a;
    char err[256];
    ah_recovery_assign(h, nh, np, AH_RECOVERY_LAYER_BITMAP, &a, err, sizeof err); /* 1: step 0, nothing */
    *step = a.step;
    double worst = assignment_time(&a, np, c, ps->res->bytes);
    ah_assignment_free(&a);
    for (int i = 0; i < nh; i++)
        ah_manifest_free(&h[i].m);
    free(h);
    return worst;
}

/* the whole state of the new plan from the cloud, each node in parallel */
static double cloud_transfer(pstate *ps, const ah_plan *np, const ah_spot_costs *c) {
    double *per = ah_xcalloc((size_t)np->cluster.n_nodes + 1, sizeof(double)), worst = 0;
    state_per_node(np, c->bytes_per_param, per);
    for (int i = 0; i < np->cluster.n_nodes; i++) {
        worst = per[i] / (c->cloud_mbs * 1e6) > worst ? per[i] / (c->cloud_mbs * 1e6) : worst;
        ps->res->bytes[AH_TIER_CLOUD] += per[i];
    }
    free(per);
    return worst;
}

/* A change of the node set reaches a policy at time t. */
static void on_change(pstate *ps, planner_ctx *pc, double t, const avail_node *set, int n,
                      const int *removed_any_used, int added, int static_n, const ah_spot_costs *c, int gb) {
    advance(ps, t, c->ckpt_every);
    int lost_used = 0;
    if (ps->have_plan)
        lost_used = *removed_any_used;
    int affected = !ps->have_plan || ps->up_at < 0 || lost_used;
    if (ps->pol != AH_POLICY_STATIC && added)
        affected = 1;
    if (!affected)
        return;
    /* the node set the policy plans for */
    avail_node *use = ah_xcalloc((size_t)n + 1, sizeof *use);
    int nu = 0;
    if (ps->pol == AH_POLICY_STATIC) {
        if (n >= static_n) { /* keep the nodes it had, fill up with others */
            for (int i = 0; i < n && nu < static_n; i++)
                if (ps->have_plan && ah_plan_uses_node(&ps->plan, set[i].name))
                    use[nu++] = set[i];
            for (int i = 0; i < n && nu < static_n; i++)
                if (!(ps->have_plan && ah_plan_uses_node(&ps->plan, set[i].name)))
                    use[nu++] = set[i];
            qsort(use, (size_t)nu, sizeof *use, cmp_avail);
        }
    } else {
        memcpy(use, set, sizeof *use * (size_t)n);
        nu = n;
    }
    ah_plan np;
    const plan_entry *pe = nu > 0 ? plan_for(pc, use, nu, &np) : NULL;
    free(use);
    if (!pe) { /* nothing can run: wait for the next change */
        if (ps->have_plan)
            ah_plan_free(&ps->plan);
        ps->have_plan = 0;
        ps->up_at = -1;
        return;
    }
    /* where the state comes from, and what is lost */
    double step = 0, xfer = 0;
    int cur = (int)floor(ps->iter + 1e-9), ck = cur / c->ckpt_every * c->ckpt_every;
    if (ps->pol == AH_POLICY_AUTOHET) {
        xfer = bitmap_transfer(ps, &np, set, n, c, &step);
    } else {
        int graceful =
            !lost_used && ps->have_plan && ps->up_at >= 0; /* only additions: checkpoint now, restart */
        step = graceful ? cur : ck;
        xfer = cur > 0 ? cloud_transfer(ps, &np, c) * (graceful ? 2 : 1) : 0;
    }
    if (ps->iter > step) {
        ps->res->lost_samples += (ps->iter - step) * gb;
        ps->res->samples -= (ps->iter - step) * gb;
        ps->iter = step;
    }
    if (ps->have_plan)
        ah_plan_free(&ps->plan);
    ps->plan = np;
    ps->have_plan = 1;
    ps->iter_s = pe->iter_s;
    ps->rate = gb / pe->iter_s;
    ps->rec_t0 = t;
    memset(ps->phase, 0, sizeof ps->phase);
    ps->phase[AH_DOWN_DETECT] = lost_used ? c->detect_s : 0;
    ps->phase[AH_DOWN_PLAN] = pe->plan_s;
    ps->phase[AH_DOWN_RESTART] = c->restart_s;
    ps->phase[AH_DOWN_TRANSFER] = xfer;
    ps->up_at = t;
    for (int k = 0; k < AH_DOWN_N; k++)
        ps->up_at += ps->phase[k];
    ps->res->restarts++;
}

/* Applies the events of one timestamp, from ev[i] on, to the node set (grown
 * as needed) and returns the index after them. The names of the nodes that
 * went are appended to `removed` (nr), *added says whether one came. */
static int apply_burst(const ah_spot_event *ev, int n, int i, const ah_spot_node_mix *mix, avail_node **set,
                       int *na, int *cap, char (*removed)[64], int *nr, int *added) {
    int j = i;
    for (; j < n && ev[j].t_s == ev[i].t_s; j++) {
        int at = -1;
        for (int k = 0; k < *na && at < 0; k++)
            if (!strcmp((*set)[k].name, ev[j].node))
                at = k;
        if (ev[j].add && at < 0) {
            if (*na == *cap)
                *set = ah_xrealloc(*set, sizeof **set * (size_t)(*cap *= 2));
            snprintf((*set)[*na].name, sizeof(*set)[*na].name, "%s", ev[j].node);
            (*set)[*na].type = node_type(mix, ev[j].node);
            (*na)++;
            *added = 1;
        } else if (!ev[j].add && at >= 0) {
            if (removed)
                snprintf(removed[(*nr)++], sizeof removed[0], "%s", (*set)[at].name);
            (*set)[at] = (*set)[--*na];
        }
    }
    return j;
}

int ah_spot_replay(const ah_spot_event *ev, int n, const ah_spot_node_mix *mix, const ah_model_config *m,
                   const ah_profile *prof, int gb, int seq, int tp, const ah_spot_costs *c,
                   const int *enabled, ah_spot_result *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (n == 0) {
        snprintf(err, errlen, "the trace has no events");
        return -1;
    }
    planner_ctx pc = {mix, m, prof, {0}, NULL, 0, 0, 0, 0, 0, c};
    ah_plan_options_default(&pc.po);
    pc.po.tp = tp; /* every plan alike: 0, the planner's choice for each node set, as `autohet plan` */
    pc.po.global_batch = gb;
    pc.po.train.seq = seq;
    /* what would stop every search alike (a profile of another seq, options the model refuses) stops the
     * replay before it starts: not a trace-long wait, which is for node sets no plan fits */
    ah_cluster types = {ah_xcalloc((size_t)mix->n, sizeof(ah_node)), mix->n};
    for (int i = 0; i < mix->n; i++)
        types.nodes[i] = mix->node[i];
    int bad = ah_plan_check_inputs(m, &types, prof, &pc.po, err, errlen);
    free(types.nodes);
    if (bad)
        return -1;
    /* the change points: the node set after each timestamp's events */
    int cap = 64, na = 0;
    avail_node *set = ah_xcalloc((size_t)cap, sizeof *set);
    int n_changes = 0, min_nodes = -1, max_nodes = 0;
    double *ct = ah_xcalloc((size_t)n + 1, sizeof(double));
    int *cn = ah_xcalloc((size_t)n + 1, sizeof(int));
    for (int i = 0; i < n;) {
        int added = 0, j = apply_burst(ev, n, i, mix, &set, &na, &cap, NULL, NULL, &added);
        ct[n_changes] = ev[i].t_s;
        cn[n_changes] = na;
        n_changes++;
        if (na > max_nodes)
            max_nodes = na;
        if (na > 0 && (min_nodes < 0 || na < min_nodes))
            min_nodes = na;
        i = j;
    }
    out->duration_s = ev[n - 1].t_s - ev[0].t_s;
    out->n_events = n;
    out->n_changes = n_changes;
    out->max_nodes = max_nodes;
    out->min_nodes = min_nodes < 0 ? 0 : min_nodes;
    out->static_nodes = out->min_nodes;
    out->t = ct;
    out->nodes = cn;
    out->n_points = n_changes;
    if (max_nodes == 0) {
        free(set);
        free(ct);
        free(cn);
        memset(out, 0, sizeof *out);
        snprintf(err, errlen, "the trace never has a node available");
        return -1;
    }
    /* replay: the same changes to every policy */
    pstate ps[AH_POLICY_N];
    memset(ps, 0, sizeof ps);
    for (int p = 0; p < AH_POLICY_N; p++) {
        ps[p].pol = (ah_spot_policy)p;
        ps[p].res = &out->pol[p];
        ps[p].res->enabled = enabled[p];
        ps[p].last_t = ev[0].t_s;
        ps[p].up_at = -1;
    }
    na = 0;
    for (int i = 0; i < n;) {
        double t = ev[i].t_s;
        char(*removed)[64] = ah_xcalloc((size_t)n + 1, sizeof *removed);
        int nr = 0, added = 0, j = apply_burst(ev, n, i, mix, &set, &na, &cap, removed, &nr, &added);
        avail_node *sorted = ah_xcalloc((size_t)na + 1, sizeof *sorted);
        memcpy(sorted, set, sizeof *sorted * (size_t)na);
        qsort(sorted, (size_t)na, sizeof *sorted, cmp_avail);
        for (int p = 0; p < AH_POLICY_N; p++) {
            if (!enabled[p])
                continue;
            int used = 0;
            for (int r = 0; r < nr && ps[p].have_plan && !used; r++)
                used = ah_plan_uses_node(&ps[p].plan, removed[r]);
            on_change(&ps[p], &pc, t, sorted, na, &used, added, out->static_nodes, c, gb);
        }
        free(sorted);
        free(removed);
        i = j;
    }
    double t_end = ev[n - 1].t_s;
    for (int p = 0; p < AH_POLICY_N; p++) {
        if (!enabled[p])
            continue;
        advance(&ps[p], t_end, c->ckpt_every);
        ah_spot_policy_result *r = &out->pol[p];
        for (int k = 0; k < AH_DOWN_N; k++)
            r->downtime_s += r->down_s[k];
        r->avg_samples_per_s = out->duration_s > 0 ? r->samples / out->duration_s : 0;
        if (ps[p].have_plan)
            ah_plan_free(&ps[p].plan);
        if (ps[p].have_held)
            ah_plan_free(&ps[p].held);
        if (ps[p].have_cloud)
            ah_plan_free(&ps[p].cloud);
    }
    out->tp = tp;
    out->tp_degrees = pc.tp_degrees;
    out->plans_computed = pc.plans_computed;
    out->sims_computed = pc.sims_computed;
    for (int i = 0; i < pc.n_cache; i++)
        if (pc.cache[i].ok)
            ah_plan_free(&pc.cache[i].plan);
    free(pc.cache);
    free(set);
    return 0;
}

void ah_spot_result_free(ah_spot_result *r) {
    for (int p = 0; p < AH_POLICY_N; p++)
        free(r->pol[p].seg);
    free(r->t);
    free(r->nodes);
    memset(r, 0, sizeof *r);
}
