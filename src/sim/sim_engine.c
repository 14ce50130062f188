/* The discrete-event engine behind `autohet simulate` (docs/simulator.md).
 *
 * Tasks form a DAG. Compute tasks (forward, backward, optimizer) run on their
 * stage's compute stream in the order of the stage's program; each is followed
 * by its tensor-parallel all-reduce, which blocks the stream. Transfers and
 * collectives are fluid flows: after a fixed latency they move a volume of
 * bytes per GPU at a rate shared max-min fairly with every other active flow
 * on the links they cross. Collectives of a stage run one at a time on its DP
 * stream, in a global bucket order that every participant follows. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autohet/sim.h"
#include "plan/costs.h"
#include "util/errors.h"
#include "util/intervals.h"

enum { TK_COMPUTE = 0, TK_FLOW = 1 };

typedef struct {
    int type; /* TK_COMPUTE or TK_FLOW */
    ah_op_kind kind;
    int stage;  /* compute: owner; p2p: sender; collective: -1 */
    int stage2; /* p2p: receiver */
    int mb, first, last, bucket;
    double dur, tp;    /* compute: compute part and the TP all-reduce after it */
    double chain;      /* compute, lockstep pipelines: the replica's transfer chain it waits for first */
    double volume;     /* flow: bytes per GPU at the links' bandwidth */
    double msg_bytes;  /* p2p: the message's bytes (volume: its measured time's share, ah_msg_cost_of) */
    double latency;    /* flow: fixed part */
    int link0, nlinks; /* flow: range in the link-use pool */
    double cap_rate;   /* flow: the most its rate may reach (one flow's bandwidth on a shared pair), 0 none */
    int part0, nparts; /* collective: range in the participant pool */
    int slices;        /* collective: the slices it stands for (its largest holder degree) */
    int deps_left;
    int succ0, nsucc;
    double start, end;
    int done;
    /* running flow state */
    double remaining, rate;
    int in_bw;        /* latency elapsed, sharing bandwidth */
    double act_alloc; /* a forward: bytes of activations that become alive at its start */
    double act_free;  /* the (last piece of a) backward: bytes it frees at its end */
    int prog_pos;     /* compute: index in its stage's program */
    int src_op;       /* p2p: the compute task that produced what it sends */
} task;

typedef struct {
    int link;
    double weight;
} link_use;

typedef struct {
    double t;
    int task;
    int kind; /* 0 = compute end, 1 = flow latency end */
} heap_item;

typedef struct {
    const ah_plan *p;
    const ah_plan_options *o;
    ah_sim_result *r;
    int record;
    int dp_serial;
    /* tasks and their dependency edges */
    task *t;
    int nt, capt;
    int *deps_from, *deps_to;
    int ne, cape;
    int *succ;
    link_use *lu;
    int nlu, caplu;
    int *parts;
    int nparts, capparts;
    /* per stage (TP group) */
    int S;
    ah_plan_costs *costs;              /* layer times and bytes per (device, degree) */
    const ah_layer_times **lts;        /* per stage: its device's times at its degree */
    const ah_layer_bytes **lbs;        /* per stage: layer bytes at its degree */
    int **prog, *nprog, *capprog, *pc; /* compute program: task ids in order */
    int **dq, *ndq, *capdq, *dqh;      /* DP collectives in the global bucket order */
    int *busy;
    double *mem_now;
    int *in_flight;
    /* links: per stage intra out/in and NIC rail out/in, per node NIC out/in */
    double *cap;
    int nlinks;
    /* flows sharing bandwidth now */
    int *active;
    int nactive;
    heap_item *heap;
    int nheap, capheap;
    /* per stage intervals for the breakdown: communication, compute */
    double **iv, **cv;
    int *niv, *capiv, *ncv, *capcv;
} engine;

#define xrealloc ah_xrealloc
#define GROW(arr, n, cap, extra)                                                                             \
    do {                                                                                                     \
        if ((n) + (extra) > (cap)) {                                                                         \
            (cap) = ((n) + (extra)) * 2 + 16;                                                                \
            (arr) = xrealloc((arr), sizeof(*(arr)) * (size_t)(cap));                                         \
        }                                                                                                    \
    } while (0)

/* ---- heap ---------------------------------------------------------------- */

static void heap_push(engine *e, double t, int task_id, int kind) {
    GROW(e->heap, e->nheap, e->capheap, 1);
    int i = e->nheap++;
    e->heap[i] = (heap_item){t, task_id, kind};
    while (i > 0) {
        int p = (i - 1) / 2;
        if (e->heap[p].t <= e->heap[i].t)
            break;
        heap_item x = e->heap[p];
        e->heap[p] = e->heap[i];
        e->heap[i] = x;
        i = p;
    }
}

static heap_item heap_pop(engine *e) {
    heap_item top = e->heap[0];
    e->heap[0] = e->heap[--e->nheap];
    int i = 0;
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < e->nheap && e->heap[l].t < e->heap[m].t)
            m = l;
        if (r < e->nheap && e->heap[r].t < e->heap[m].t)
            m = r;
        if (m == i)
            break;
        heap_item x = e->heap[m];
        e->heap[m] = e->heap[i];
        e->heap[i] = x;
        i = m;
    }
    return top;
}

/* ---- building the task graph -------------------------------------------- */

static int new_task(engine *e, int type, ah_op_kind kind, int stage) {
    GROW(e->t, e->nt, e->capt, 1);
    task *k = &e->t[e->nt];
    memset(k, 0, sizeof *k);
    k->type = type;
    k->kind = kind;
    k->stage = stage;
    k->stage2 = -1;
    k->mb = -1;
    k->bucket = -1;
    return e->nt++;
}

static void add_dep(engine *e, int from, int to) {
    if (e->ne + 1 > e->cape) {
        e->cape = 2 * e->cape + 64;
        e->deps_from = xrealloc(e->deps_from, sizeof(int) * (size_t)e->cape);
        e->deps_to = xrealloc(e->deps_to, sizeof(int) * (size_t)e->cape);
    }
    e->deps_from[e->ne] = from;
    e->deps_to[e->ne] = to;
    e->ne++;
}

static void use_link(engine *e, int task_id, int link, double weight) {
    GROW(e->lu, e->nlu, e->caplu, 1);
    task *k = &e->t[task_id];
    if (k->nlinks == 0)
        k->link0 = e->nlu;
    /* merge a repeated link into one use */
    for (int i = k->link0; i < k->link0 + k->nlinks; i++)
        if (e->lu[i].link == link) {
            e->lu[i].weight += weight;
            return;
        }
    e->lu[e->nlu++] = (link_use){link, weight};
    k->nlinks++;
}

/* ---- rates: max-min fair progressive filling ----------------------------- */

static void recompute_rates(engine *e, double *residual, double *wsum, unsigned char *frozen) {
    e->r->flow_updates++;
    int n = e->nactive;
    for (int i = 0; i < n; i++) {
        task *k = &e->t[e->active[i]];
        k->rate = 0;
        frozen[i] = 0;
        for (int u = k->link0; u < k->link0 + k->nlinks; u++)
            residual[e->lu[u].link] = e->cap[e->lu[u].link];
    }
    int left = n;
    double level = 0.0;
    while (left > 0) {
        for (int i = 0; i < n; i++) {
            if (frozen[i])
                continue;
            task *k = &e->t[e->active[i]];
            for (int u = k->link0; u < k->link0 + k->nlinks; u++)
                wsum[e->lu[u].link] = 0;
        }
        for (int i = 0; i < n; i++) {
            if (frozen[i])
                continue;
            task *k = &e->t[e->active[i]];
            for (int u = k->link0; u < k->link0 + k->nlinks; u++)
                wsum[e->lu[u].link] += e->lu[u].weight;
        }
        /* the next link to saturate as all unfrozen rates grow together */
        double inc = INFINITY;
        for (int i = 0; i < n; i++) {
            if (frozen[i])
                continue;
            task *k = &e->t[e->active[i]];
            for (int u = k->link0; u < k->link0 + k->nlinks; u++) {
                int l = e->lu[u].link;
                double d = residual[l] / wsum[l];
                if (d < inc)
                    inc = d;
            }
        }
        for (int i = 0; i < n; i++) /* or the next flow to reach its own cap */
            if (!frozen[i] && e->t[e->active[i]].cap_rate > 0 && e->t[e->active[i]].cap_rate - level < inc)
                inc = e->t[e->active[i]].cap_rate - level;
        if (!isfinite(inc))
            inc = 0; /* flows without links: cannot happen */
        level += inc;
        for (int i = 0; i < n; i++) {
            if (frozen[i])
                continue;
            task *k = &e->t[e->active[i]];
            for (int u = k->link0; u < k->link0 + k->nlinks; u++)
                residual[e->lu[u].link] -= inc * e->lu[u].weight;
        }
        /* freeze the flows on saturated links */
        for (int i = 0; i < n; i++) {
            if (frozen[i])
                continue;
            task *k = &e->t[e->active[i]];
            int sat = k->cap_rate > 0 && level >= k->cap_rate * (1 - 1e-12);
            for (int u = k->link0; u < k->link0 + k->nlinks && !sat; u++) {
                int l = e->lu[u].link;
                sat = residual[l] <= 1e-12 * e->cap[l];
            }
            if (sat) {
                k->rate = level;
                frozen[i] = 1;
                left--;
            }
        }
    }
}

/* ---- intervals ----------------------------------------------------------- */

static void add_interval(double ***arr, int **n, int **cap, int s, double a, double b) {
    if (b <= a)
        return;
    GROW((*arr)[s], (*n)[s], (*cap)[s], 2);
    (*arr)[s][(*n)[s]++] = a;
    (*arr)[s][(*n)[s]++] = b;
}

/* ---- events ------------------------------------------------------------- */

static void record(engine *e, ah_op_kind kind, ah_stream st, int stage, const task *k, double a, double b,
                   int peer, double bytes) {
    if (!e->record)
        return;
    ah_sim_result *r = e->r;
    if (r->n_events == 0 || (r->n_events & (r->n_events - 1)) == 0) {
        size_t cap = r->n_events ? 2 * (size_t)r->n_events : 64;
        r->events = xrealloc(r->events, sizeof(ah_sim_event) * cap);
    }
    ah_sim_event *v = &r->events[r->n_events++];
    v->kind = kind;
    v->stream = st;
    v->replica = r->stages[stage].replica;
    v->stage = r->stages[stage].stage;
    v->micro_batch = k->mb;
    v->layer_first = k->first;
    v->layer_last = k->last;
    v->peer_replica = peer >= 0 ? r->stages[peer].replica : -1;
    v->peer_stage = peer >= 0 ? r->stages[peer].stage : -1;
    v->bucket = k->bucket;
    v->start_s = a;
    v->end_s = b;
    v->bytes = bytes;
}

static void mem_point(engine *e, int s, double t) {
    ah_sim_stage *st = &e->r->stages[s];
    if (st->n_mem == 0 || (st->n_mem & (st->n_mem - 1)) == 0) {
        size_t cap = st->n_mem ? 2 * (size_t)st->n_mem : 16;
        st->mem = xrealloc(st->mem, sizeof(ah_mem_point) * cap);
    }
    st->mem[st->n_mem++] = (ah_mem_point){t, e->mem_now[s]};
    if (e->mem_now[s] > st->peak_memory_bytes) {
        st->peak_memory_bytes = e->mem_now[s];
        st->peak_in_flight = e->in_flight[s];
    }
}

/* ---- running ------------------------------------------------------------- */

static void try_start_compute(engine *e, int s, double now) {
    if (e->busy[s] || e->pc[s] >= e->nprog[s])
        return;
    int id = e->prog[s][e->pc[s]];
    task *k = &e->t[id];
    if (k->deps_left > 0)
        return;
    e->busy[s] = 1;
    e->pc[s]++;
    k->start = now;
    if (k->act_alloc > 0) {
        e->mem_now[s] += k->act_alloc;
        e->in_flight[s]++;
        mem_point(e, s, now);
    }
    heap_push(e, now + k->chain + k->dur + k->tp, id, 0);
}

static int collective_can_start(const engine *e, int id) {
    const task *k = &e->t[id];
    if (k->deps_left > 0 || k->start >= 0)
        return 0;
    if (!e->dp_serial)
        return 1;
    for (int i = k->part0; i < k->part0 + k->nparts; i++) {
        int s = e->parts[i];
        if (e->dqh[s] >= e->ndq[s] || e->dq[s][e->dqh[s]] != id)
            return 0;
    }
    return 1;
}

static void start_flow(engine *e, int id, double now) {
    task *k = &e->t[id];
    k->start = now;
    k->remaining = k->volume;
    heap_push(e, now + k->latency, id, 1);
}

static void task_ready(engine *e, int id, double now) {
    task *k = &e->t[id];
    if (k->type == TK_COMPUTE)
        try_start_compute(e, k->stage, now);
    else if (k->nparts == 0)
        start_flow(e, id, now);
    else if (collective_can_start(e, id))
        start_flow(e, id, now);
}

static void finish_task(engine *e, int id, double now) {
    task *k = &e->t[id];
    k->done = 1;
    k->end = now;
    if (k->type == TK_COMPUTE) {
        int s = k->stage;
        e->busy[s] = 0;
        double c0 = k->start + k->chain, mid = c0 + k->dur;
        if (k->chain > 0) { /* lockstep: the chain of blocking transfers, on the P2P stream */
            record(e, k->kind == AH_OP_FORWARD ? AH_OP_SEND_ACTIVATION : AH_OP_SEND_GRADIENT, AH_STREAM_P2P, s, k,
                   k->start, c0, -1, 0);
            add_interval(&e->iv, &e->niv, &e->capiv, s, k->start, c0);
        }
        record(e, k->kind, AH_STREAM_COMPUTE, s, k, c0, mid, -1, 0);
        add_interval(&e->cv, &e->ncv, &e->capcv, s, c0, mid);
        if (k->tp > 0) {
            record(e, AH_OP_TP_ALLREDUCE, AH_STREAM_TP, s, k, mid, now, -1, 0);
            add_interval(&e->iv, &e->niv, &e->capiv, s, mid, now);
        }
        e->r->stages[s].compute_s += k->dur;
        if (k->act_free > 0) {
            e->mem_now[s] -= k->act_free;
            e->in_flight[s]--;
            mem_point(e, s, now);
        }
        if (k->kind == AH_OP_OPTIMIZER)
            e->r->stages[s].finish_s = now;
    } else if (k->nparts > 0) {
        for (int i = k->part0; i < k->part0 + k->nparts; i++) {
            int s = e->parts[i];
            /* bytes each of the stage's GPUs moved: its T/t slices */
            record(e, k->kind, AH_STREAM_DP, s, k, k->start, now, -1,
                   k->volume * k->slices / e->r->stages[s].tp);
            add_interval(&e->iv, &e->niv, &e->capiv, s, k->start, now);
            e->dqh[s]++;
        }
        if (k->bucket >= 0) {
            e->r->buckets[k->bucket].start_s = k->start;
            e->r->buckets[k->bucket].end_s = now;
        }
    } else {
        record(e, k->kind, AH_STREAM_P2P, k->stage, k, k->start, now, k->stage2, k->msg_bytes);
        record(e, k->kind, AH_STREAM_P2P, k->stage2, k, k->start, now, k->stage, k->msg_bytes);
        add_interval(&e->iv, &e->niv, &e->capiv, k->stage, k->start, now);
        add_interval(&e->iv, &e->niv, &e->capiv, k->stage2, k->start, now);
    }
    for (int i = k->succ0; i < k->succ0 + k->nsucc; i++) {
        int d = e->succ[i];
        if (--e->t[d].deps_left == 0)
            task_ready(e, d, now);
    }
    if (k->type == TK_COMPUTE) {
        try_start_compute(e, k->stage, now);
    } else if (k->nparts > 0) {
        for (int i = k->part0; i < k->part0 + k->nparts; i++) {
            int s = e->parts[i];
            if (e->dqh[s] < e->ndq[s]) {
                int nx = e->dq[s][e->dqh[s]];
                if (collective_can_start(e, nx))
                    start_flow(e, nx, now);
            }
        }
    }
}

static int run(engine *e, char *err, size_t errlen) {
    int n_links = e->nlinks;
    double *residual = calloc((size_t)n_links, sizeof(double));
    double *wsum = calloc((size_t)n_links, sizeof(double));
    unsigned char *frozen = calloc((size_t)e->nt + 1, 1);
    e->active = calloc((size_t)e->nt + 1, sizeof(int));
    if (!residual || !wsum || !frozen || !e->active)
        abort();
    double now = 0.0;
    for (int s = 0; s < e->S; s++)
        try_start_compute(e, s, 0.0);
    for (;;) {
        double next = e->nheap ? e->heap[0].t : INFINITY;
        int fastest = -1;
        for (int i = 0; i < e->nactive; i++) {
            task *k = &e->t[e->active[i]];
            double tf = k->rate > 0 ? now + k->remaining / k->rate : INFINITY;
            if (tf < next) {
                next = tf;
                fastest = i;
            }
        }
        if (!isfinite(next))
            break;
        double dt = next - now;
        for (int i = 0; i < e->nactive; i++) {
            task *k = &e->t[e->active[i]];
            k->remaining -= k->rate * dt;
        }
        if (fastest >= 0)
            e->t[e->active[fastest]].remaining = 0; /* exact, no drift */
        now = next;
        int changed = 0;
        /* flows whose bytes are all through */
        for (int i = 0; i < e->nactive;) {
            task *k = &e->t[e->active[i]];
            if (k->remaining <= 1e-12 * k->volume) {
                e->active[i] = e->active[--e->nactive];
                finish_task(e, (int)(k - e->t), now);
                changed = 1;
            } else {
                i++;
            }
        }
        /* compute ends and flow latencies due now */
        while (e->nheap && e->heap[0].t <= now) {
            heap_item h = heap_pop(e);
            task *k = &e->t[h.task];
            if (h.kind == 0) {
                finish_task(e, h.task, now);
            } else if (k->volume <= 0) {
                finish_task(e, h.task, now);
            } else {
                k->in_bw = 1;
                e->active[e->nactive++] = h.task;
                changed = 1;
            }
        }
        if (changed && e->nactive)
            recompute_rates(e, residual, wsum, frozen);
    }
    free(residual);
    free(wsum);
    free(frozen);
    for (int i = 0; i < e->nt; i++)
        if (!e->t[i].done) {
            snprintf(err, errlen, "simulation stalled: task %d (%s) never ran (internal error)", i,
                     ah_op_kind_name(e->t[i].kind));
            return -1;
        }
    return 0;
}

/* ---- building ------------------------------------------------------------ */

static void push_int(int **arr, int *n, int *cap, int v) {
    GROW(*arr, *n, *cap, 1);
    (*arr)[(*n)++] = v;
}

/* A compute task of stage s over layers [a,b): forward, backward or optimizer. */
static int add_compute(engine *e, ah_op_kind kind, int s, int mb, int a, int b, const ah_layer_times *lt) {
    int id = new_task(e, TK_COMPUTE, kind, s);
    task *k = &e->t[id];
    k->mb = mb;
    k->first = a;
    k->last = b;
    if (kind == AH_OP_FORWARD) {
        k->dur = ah_ns_to_s(ah_range(lt->fwd, a, b) - ah_range(lt->tpf, a, b));
        k->tp = ah_ns_to_s(ah_range(lt->tpf, a, b));
    } else if (kind == AH_OP_BACKWARD) {
        k->dur = ah_ns_to_s(ah_range(lt->bwd, a, b) - ah_range(lt->tpb, a, b));
        k->tp = ah_ns_to_s(ah_range(lt->tpb, a, b));
    } else {
        k->dur = ah_ns_to_s(ah_update_ns(lt->upd, a, b, e->p->train.dist_optimizer ? e->p->n_replicas : 1));
    }
    k->prog_pos = e->nprog[s];
    push_int(&e->prog[s], &e->nprog[s], &e->capprog[s], id);
    return id;
}

/* Link indices: per stage its intra-node link and its NIC rail (out, in), then
 * per node its NIC (out, in). */
static int L_INTRA(int s, int in) {
    return 4 * s + in;
}
static int L_RAIL(int s, int in) {
    return 4 * s + 2 + in;
}
static int L_NIC(const engine *e, int node, int in) {
    return 4 * e->S + 2 * node + in;
}

/* the link between nodes a and b that a measured pair of hosts (o->links) has; only then allocated */
static int L_PAIR(const engine *e, int a, int b) {
    return 4 * e->S + 2 * e->p->cluster.n_nodes + a * e->p->cluster.n_nodes + b;
}

/* A flow on the measured pair a-b whose link carries more with flows at once than one flow does
 * (ah_pair_link_share > 1): the pair's capacity is that much more, each flow still one flow's bandwidth. */
static void cap_on_pair(engine *e, int id, int a, int b, double bw_gbs) {
    task *k = &e->t[id];
    if (ah_pair_link_share(e->o, &e->p->cluster.nodes[a], &e->p->cluster.nodes[b]) > 1 &&
        (k->cap_rate <= 0 || bw_gbs * 1e9 < k->cap_rate))
        k->cap_rate = bw_gbs * 1e9;
}

/* A send between stages on nodes a and b of a measured pair (ah_pair_link_measured): on that pair's
 * link alone, at its latency (the closed form's ah_nodes_p2p_ns); 0 when the pair was not measured. */
static int use_measured_pair(engine *e, int id, int a, int b, double weight) {
    double alpha, bw;
    if (a == b || !ah_pair_link_measured(e->o, &e->p->cluster.nodes[a], &e->p->cluster.nodes[b], &alpha, &bw))
        return 0;
    e->t[id].latency = alpha;
    use_link(e, id, L_PAIR(e, a, b), weight);
    cap_on_pair(e, id, a, b, bw);
    return 1;
}

/* the link between two stages' GPUs as the closed form sees it (NVLink of the slower node, the smaller NIC share) */
static ah_pair_link stages_link(const engine *e, const ah_sim_stage *a, const ah_sim_stage *b) {
    const ah_node *na = &e->p->cluster.nodes[a->node], *nb = &e->p->cluster.nodes[b->node];
    return ah_pair_link_of(na->dev.intra_bw_gbs, ah_nic_share_gbs(na), nb->dev.intra_bw_gbs, ah_nic_share_gbs(nb));
}

static int add_p2p(engine *e, ah_op_kind kind, int from, int to, int mb, double bytes) {
    const ah_sim_stage *a = &e->r->stages[from], *b = &e->r->stages[to];
    int id = new_task(e, TK_FLOW, kind, from);
    task *k = &e->t[id];
    k->stage2 = to;
    k->mb = mb;
    k->volume = k->msg_bytes = bytes;
    ah_pair_link lk = stages_link(e, a, b);
    int inter = a->node != b->node;
    if (e->p->train.p2p == AH_P2P_LOCKSTEP) { /* its time is in the chain its stages' compute waits for */
        k->volume = 0;
        return id;
    }
    /* the closed form's message cost (the measured time of this size), its volume shared on the links */
    ah_msg_cost mc = ah_msg_cost_of(bytes, inter, inter ? lk.nic_share_gbs : lk.intra_gbs, e->o);
    if (!inter) {
        k->latency = mc.latency_s;
        k->volume = mc.volume_bytes;
        use_link(e, id, L_INTRA(from, 0), 1);
        use_link(e, id, L_INTRA(to, 1), 1);
    } else if (!use_measured_pair(e, id, a->node, b->node, 1)) {
        k->latency = mc.latency_s;
        k->volume = mc.volume_bytes;
        use_link(e, id, L_RAIL(from, 0), 1);
        use_link(e, id, L_RAIL(to, 1), 1);
        use_link(e, id, L_NIC(e, a->node, 0), a->tp);
        use_link(e, id, L_NIC(e, b->node, 1), b->tp);
    }
    return id;
}

static int holders_one_node(const engine *e, const int *holders, int np) {
    int one_node = 1;
    for (int i = 1; i < np; i++)
        one_node &= e->r->stages[holders[i]].node == e->r->stages[holders[0]].node;
    return one_node;
}

/* The latency and volume of a send-receive of one slice each between two stages: the message cost of what
 * the busier GPU sends (w slices) on the pair's link (NVLink on one node, else the NIC share), per slice. */
static void price_exchange(const engine *e, task *k, const int *holders, double slice_bytes, int T, int inter) {
    const ah_sim_stage *a = &e->r->stages[holders[0]], *b = &e->r->stages[holders[1]];
    ah_pair_link lk = stages_link(e, a, b);
    double w = (double)T / (a->tp < b->tp ? a->tp : b->tp);
    ah_msg_cost mc = ah_msg_cost_of(slice_bytes * w, inter, inter ? lk.nic_share_gbs : lk.intra_gbs, e->o);
    k->latency = mc.latency_s;
    k->volume = mc.volume_bytes / w;
}

/* All-reduces among `holders` by algorithm `a` (a bucket's: ah_allreduce_choose),
 * a.factor of the buffer through every GPU, on the slowest link it crosses.
 * With T the largest holder degree the gradients are cut into T slices
 * (rule 2 of per-stage TP), each all-reduced among its owners, one GPU per
 * holder, all at once: a holder of degree t carries T/t of them on each of
 * its GPUs and T through its node's NIC. The T slice rings are symmetric,
 * so one flow of one slice's volume with those link weights plays them all
 * (uniform degrees: one slice per GPU, the plain ring). */
static int add_ring(engine *e, ah_op_kind kind, const int *holders, int np, double slice_bytes, int T,
                    ah_allreduce_algo a) {
    int id = new_task(e, TK_FLOW, kind, -1);
    task *k = &e->t[id];
    k->slices = T;
    k->volume = a.factor * slice_bytes;
    int one_node = holders_one_node(e, holders, np);
    k->latency = ah_allreduce_algo_latency_s(a, one_node, e->o);
    k->part0 = e->nparts;
    k->nparts = np;
    /* a send-receive (the tied exchange) at the measured time of its message, as the closed form prices it
     * (ah_tied_exchange_ns); between nodes from GPU to NIC, no NVLink hop; between a measured pair of hosts
     * on that pair's link */
    int exchange = np == 2 && a.steps == 1, cross = exchange && !one_node;
    int pair = cross && use_measured_pair(e, id, e->r->stages[holders[0]].node, e->r->stages[holders[1]].node,
                                          (double)T / e->r->stages[holders[0]].tp);
    if (exchange && !pair)
        price_exchange(e, k, holders, slice_bytes, T, cross);
    for (int i = 0; i < np; i++) {
        int s = holders[i];
        double per_gpu = (double)T / e->r->stages[s].tp;
        push_int(&e->parts, &e->nparts, &e->capparts, s);
        if (!cross) {
            use_link(e, id, L_INTRA(s, 0), per_gpu);
            use_link(e, id, L_INTRA(s, 1), per_gpu);
        }
        if (!one_node && !pair && e->o->links) { /* the ring's hop to the next holder on a measured pair */
            double alpha, bw;
            int a0 = e->r->stages[s].node, b0 = e->r->stages[holders[(i + 1) % np]].node;
            if (a0 != b0 &&
                ah_pair_link_measured(e->o, &e->p->cluster.nodes[a0], &e->p->cluster.nodes[b0], &alpha, &bw)) {
                use_link(e, id, L_PAIR(e, a0, b0), per_gpu);
                cap_on_pair(e, id, a0, b0, bw);
            }
        }
        if (!one_node && !pair) {
            int node = e->r->stages[s].node;
            use_link(e, id, L_RAIL(s, 0), per_gpu);
            use_link(e, id, L_RAIL(s, 1), per_gpu);
            use_link(e, id, L_NIC(e, node, 0), T);
            use_link(e, id, L_NIC(e, node, 1), T);
        }
    }
    return id;
}

static int add_collective(engine *e, int bucket, const int *holders, int np, double slice_bytes, int T) {
    ah_allreduce_algo a =
        ah_allreduce_choose(np, slice_bytes, e->p->dp_bw_gbs, holders_one_node(e, holders, np), e->o);
    int id = add_ring(e, AH_OP_DP_ALLREDUCE, holders, np, slice_bytes, T, a);
    e->t[id].bucket = bucket;
    e->t[id].first = e->r->buckets[bucket].first;
    e->t[id].last = e->r->buckets[bucket].last;
    return id;
}

/* The tied-embedding exchange of one replica: its first and last stage
 * all-reduce the (vocab-parallel) V x h gradient, cut into T = the larger
 * degree's slices like a bucket; one step of latency (a send-receive). */
static int add_tied(engine *e, int s0, int s1, double bytes_tp1) {
    int holders[2] = {s0, s1};
    int T = e->r->stages[s0].tp > e->r->stages[s1].tp ? e->r->stages[s0].tp : e->r->stages[s1].tp;
    ah_allreduce_algo send_receive = {0, 1.0, 1};
    int id = add_ring(e, AH_OP_TIED_SYNC, holders, 2, bytes_tp1 / T, T, send_receive);
    task *k = &e->t[id];
    k->first = 0;
    k->last = ah_model_num_layers(&e->p->model);
    return id;
}

static void engine_free(engine *e) {
    for (int s = 0; s < e->S; s++) {
        if (e->prog)
            free(e->prog[s]);
        if (e->dq)
            free(e->dq[s]);
        if (e->iv)
            free(e->iv[s]);
        if (e->cv)
            free(e->cv[s]);
    }
    free(e->prog);
    free(e->nprog);
    free(e->capprog);
    free(e->pc);
    free(e->dq);
    free(e->ndq);
    free(e->capdq);
    free(e->dqh);
    free(e->busy);
    free(e->mem_now);
    free(e->in_flight);
    free(e->cap);
    free(e->active);
    free(e->heap);
    free(e->iv);
    free(e->cv);
    free(e->niv);
    free(e->capiv);
    free(e->ncv);
    free(e->capcv);
    free(e->t);
    free(e->deps_from);
    free(e->deps_to);
    free(e->succ);
    free(e->lu);
    free(e->parts);
}

#define CALLOC(ptr, n) ((ptr) = calloc((size_t)(n) + 1, sizeof(*(ptr))))

/* Stage records, layer times and bytes per (device, stage degree) as the
 * planner costs them, and the links of every stage and node. */
static int setup_stages(engine *e, const ah_profile *prof, char *err, size_t errlen) {
    const ah_plan *p = e->p;
    for (int k = 0, s = 0; k < p->n_replicas; k++)
        for (int j = 0; j < p->replicas[k].n_stages; j++, s++) {
            const ah_stage *st = &p->replicas[k].stages[j];
            const ah_node *nd = &p->cluster.nodes[st->node];
            ah_sim_stage *ss = &e->r->stages[s];
            ss->replica = k;
            ss->stage = j;
            ss->node = st->node;
            ss->gpu_first = st->gpu_first;
            ss->tp = st->tp;
            ss->capacity_bytes = st->mem_cap_bytes;
            e->lbs[s] = ah_plan_costs_bytes(e->costs, p, st->tp);
            ss->static_bytes = (double)ah_range(e->lbs[s]->static_bytes, st->layer_first, st->layer_last);
            e->mem_now[s] = ss->static_bytes;
            mem_point(e, s, 0.0);
            e->lts[s] = ah_plan_costs_times(e->costs, p, prof, &nd->dev, st->tp, err, errlen);
            if (!e->lts[s])
                return -1;
            /* links of this stage: per-GPU intra-node link and NIC rail */
            e->cap[L_INTRA(s, 0)] = e->cap[L_INTRA(s, 1)] = nd->dev.intra_bw_gbs * 1e9;
            e->cap[L_RAIL(s, 0)] = e->cap[L_RAIL(s, 1)] = ah_nic_share_gbs(nd) * 1e9;
        }
    for (int i = 0; i < p->cluster.n_nodes; i++)
        e->cap[L_NIC(e, i, 0)] = e->cap[L_NIC(e, i, 1)] = p->cluster.nodes[i].nic_gbit / 8.0 * 1e9;
    for (int a = 0; e->o->links && a < p->cluster.n_nodes; a++)
        for (int b = 0; b < p->cluster.n_nodes; b++) {
            double alpha, bw;
            if (a != b &&
                ah_pair_link_measured(e->o, &p->cluster.nodes[a], &p->cluster.nodes[b], &alpha, &bw))
                e->cap[L_PAIR(e, a, b)] =
                    bw * 1e9 * ah_pair_link_share(e->o, &p->cluster.nodes[a], &p->cluster.nodes[b]);
        }
    return 0;
}

/* Task ids of the compute ops, by (stage, chunk, micro-batch): the forward, and the first and last piece
 * of the backward (a program with overlap_dp cuts a chunk's last backward at its buckets). chunk_of[q R + k]:
 * the last backward (piece) over bucket q's layers in replica k, after which its gradients are final. */
typedef struct {
    int **fwd, **bfirst, **blast; /* [stage][chunk * m + mb] */
    int *chunk_of;
    int **op_task; /* [stage][op index]: the compute task of a forward or backward op, else -1 */
} compute_ids;

/* The compute tasks of every stage of replica k, in the order of its program. */
static void add_programs(engine *e, const ah_schedule_plan *sp, int k, compute_ids *ci) {
    const ah_layer_times **lts = e->lts;
    int R = sp->n_replicas, S = e->p->replicas[k].n_stages;
    int m = e->p->replicas[k].micro_batches;
    double chain = 0; /* lockstep: the replica's transfer chain, before each forward and each first backward piece */
    if (e->p->train.p2p == AH_P2P_LOCKSTEP)
        chain = ah_ns_to_s(ah_lockstep_chain_ns(e->p, &e->p->replicas[k], ah_plan_costs_bytes(e->costs, e->p, 1)->p2p_bytes, e->o));
    for (int j = 0; j < S; j++) {
        int s = sp->first_stage[k] + j;
        const ah_program *pg = &sp->programs[s];
        ci->fwd[s] = ah_xcalloc((size_t)(m * sp->V), sizeof(int));
        ci->bfirst[s] = ah_xcalloc((size_t)(m * sp->V), sizeof(int));
        ci->blast[s] = ah_xcalloc((size_t)(m * sp->V), sizeof(int));
        ci->op_task[s] = ah_xcalloc((size_t)pg->n_ops + 1, sizeof(int));
        for (int i = 0; i < m * sp->V; i++)
            ci->bfirst[s][i] = -1;
        for (int i = 0; i < pg->n_ops; i++) {
            const ah_op *op = &pg->ops[i];
            ci->op_task[s][i] = -1;
            if (op->kind != AH_OP_FORWARD && op->kind != AH_OP_BACKWARD)
                continue;
            const ah_chunk *ch = &sp->chunks[k][op->chunk * S + j];
            int idx = op->chunk * m + op->mb, id = add_compute(e, op->kind, s, op->mb, op->first, op->last, lts[s]);
            double act = (double)ah_range(e->lbs[s]->act_bytes, ch->first, ch->last);
            ci->op_task[s][i] = id;
            if (op->kind == AH_OP_FORWARD) {
                e->t[id].act_alloc = act;
                e->t[id].chain = chain;
                ci->fwd[s][idx] = id;
                continue;
            }
            if (ci->bfirst[s][idx] < 0) {
                ci->bfirst[s][idx] = id;
                e->t[id].chain = chain;
            }
            ci->blast[s][idx] = id;
            if (op->first == ch->first) /* the chunk's backward is done: its activations are freed */
                e->t[id].act_free = act;
            for (int q = 0; q < sp->n_buckets; q++)
                if (sp->buckets[q].holder[k] == j && sp->buckets[q].first < op->last && sp->buckets[q].last > op->first) {
                    ci->chunk_of[q * R + k] = id;
                    e->t[id].bucket = q;
                }
        }
    }
}

/* A send or receive of a program (stage s, op index i): for sorting by tag */
typedef struct {
    int s, i, tag;
} p2p_ref;

static int cmp_tag(const void *pa, const void *pb) {
    const p2p_ref *x = pa, *y = pb;
    return (x->tag > y->tag) - (x->tag < y->tag);
}

/* The activation and gradient transfers of replica k, read from its stages' programs: every send is a flow
 * of its op's bytes (per rank: the closed form's rule 1 of per-stage TP, as the schedule was built),
 * matched with the receive of the same tag in its peer stage's program; the flow follows the compute that
 * made it (a send and its compute share chunk and micro-batch: the forward, or the backward's last piece)
 * and precedes the compute that needs it (the forward, or the backward's first piece). Flows are made in
 * tag order (chunk boundary, micro-batch, activation before gradient). */
static void add_transfers(engine *e, const ah_schedule_plan *sp, int k, const compute_ids *ci) {
    int base = sp->first_stage[k], S = e->p->replicas[k].n_stages, ns = 0, nr = 0, cap = 0;
    for (int j = 0; j < S; j++)
        cap += sp->programs[base + j].n_ops;
    p2p_ref *snd = ah_xcalloc((size_t)cap + 1, sizeof(p2p_ref)), *rcv = ah_xcalloc((size_t)cap + 1, sizeof(p2p_ref));
    for (int j = 0; j < S; j++) {
        const ah_program *pg = &sp->programs[base + j];
        for (int i = 0; i < pg->n_ops; i++) {
            ah_op_kind kd = pg->ops[i].kind;
            if (kd == AH_OP_SEND_ACTIVATION || kd == AH_OP_SEND_GRADIENT)
                snd[ns++] = (p2p_ref){base + j, i, pg->ops[i].tag};
            else if (kd == AH_OP_RECV_ACTIVATION || kd == AH_OP_RECV_GRADIENT)
                rcv[nr++] = (p2p_ref){base + j, i, pg->ops[i].tag};
        }
    }
    qsort(snd, (size_t)ns, sizeof(p2p_ref), cmp_tag);
    qsort(rcv, (size_t)nr, sizeof(p2p_ref), cmp_tag);
    if (ns != nr)
        abort(); /* every send has its receive (src/schedule/program.c) */
    int m = e->p->replicas[k].micro_batches;
    for (int q = 0; q < ns; q++) {
        const ah_op *op = &sp->programs[snd[q].s].ops[snd[q].i], *rv = &sp->programs[rcv[q].s].ops[rcv[q].i];
        if (rv->tag != op->tag) /* tags are unique within a step: the q-th receive by tag is this send's */
            abort();
        int from = snd[q].s, to = rcv[q].s, grad = op->kind == AH_OP_SEND_GRADIENT;
        int prod = (grad ? ci->blast : ci->fwd)[from][op->chunk * m + op->mb];
        int cons = (grad ? ci->bfirst : ci->fwd)[to][rv->chunk * m + rv->mb];
        int f = add_p2p(e, op->kind, from, to, op->mb, op->bytes);
        add_dep(e, prod, f);
        add_dep(e, f, cons);
        e->t[f].src_op = prod;
    }
    free(snd);
    free(rcv);
}

/* One all-reduce task per bucket among its holders; per replica its tied exchange (the tied_sync op of its
 * first stage's program, when it moves bytes); the step reduction among every stage (a world all-reduce of
 * 16 bytes, none for a single rank). */
typedef struct {
    int *bucket, *tied, step;
    int **sends, *n_sends; /* per stage: its send flows (what its send_wait waits for) */
} sync_tasks;

static void add_sync_tasks(engine *e, const ah_schedule_plan *sp, sync_tasks *st) {
    const ah_plan *p = e->p;
    int R = sp->n_replicas;
    st->bucket = ah_xcalloc((size_t)sp->n_buckets + 1, sizeof(int));
    st->tied = ah_xcalloc((size_t)R + 1, sizeof(int));
    int *hs = ah_xcalloc((size_t)(e->S > R ? e->S : R) + 1, sizeof(int));
    for (int q = sp->n_buckets - 1; q >= 0; q--) {
        for (int k = 0; k < R; k++)
            hs[k] = sp->first_stage[k] + sp->buckets[q].holder[k];
        st->bucket[q] = add_collective(e, q, hs, R, e->r->buckets[q].bytes, e->r->buckets[q].slices);
    }
    double tied_tp1 = ah_plan_costs_bytes(e->costs, p, 1)->tied_bytes;
    for (int k = 0; k < R; k++) {
        const ah_program *pg = &sp->programs[sp->first_stage[k]];
        st->tied[k] = -1;
        for (int i = 0; i < pg->n_ops && st->tied[k] < 0; i++)
            if (pg->ops[i].kind == AH_OP_TIED_SYNC && pg->ops[i].bytes > 0)
                st->tied[k] = add_tied(e, sp->first_stage[k], sp->first_stage[k] + pg->ops[i].peer_stage, tied_tp1);
    }
    int ranks = 0;
    for (int s = 0; s < e->S; s++) {
        hs[s] = s;
        ranks += e->r->stages[s].tp;
    }
    st->step = -1;
    if (ranks > 1) {
        ah_allreduce_algo a = ah_allreduce_choose(ranks, 16, p->dp_bw_gbs, holders_one_node(e, hs, e->S), e->o);
        st->step = add_ring(e, AH_OP_STEP_SYNC, hs, e->S, 16, 1, a);
    }
    free(hs);
}

/* A rank's place in its program while the sync ops are wired: the last op it blocked on, the tasks its next
 * blocking op waits for (a send_wait's sends, a dp_wait's all-reduces) and the all-reduces it started. */
typedef struct {
    int prev;
    int *wait, n_wait, cap_wait;
    int *started, n_started, cap_started;
} rank_pos;

/* the rank blocks on task id next: after its previous blocking op and whatever it waits for */
static void block_on(engine *e, rank_pos *r, int id) {
    if (r->prev >= 0)
        add_dep(e, r->prev, id);
    for (int i = 0; i < r->n_wait; i++)
        add_dep(e, r->wait[i], id);
    r->n_wait = 0;
    r->prev = id;
}

/* The sync ops of stage s's program in its order: blocking collectives (the tied exchange, a bucket's
 * all-reduce, the step reduction) start once the rank reaches them and hold it until done; a nonblocking
 * all-reduce starts after the backward piece before it and is waited for at dp_wait; send_wait waits for the
 * stage's sends; the optimizer is the program's last op. Collectives join the stage's DP queue in program
 * order (the order --dp-serial runs them in). */
static void wire_program(engine *e, const ah_schedule_plan *sp, int s, const compute_ids *ci, const sync_tasks *st) {
    const ah_program *pg = &sp->programs[s];
    int k = e->r->stages[s].replica;
    rank_pos r = {.prev = -1};
    for (int i = 0; i < pg->n_ops; i++) {
        const ah_op *op = &pg->ops[i];
        int col = -1;
        switch (op->kind) {
        case AH_OP_FORWARD:
        case AH_OP_BACKWARD: block_on(e, &r, ci->op_task[s][i]); break;
        case AH_OP_SEND_WAIT:
            for (int t = 0; t < st->n_sends[s]; t++) {
                GROW(r.wait, r.n_wait, r.cap_wait, 1);
                r.wait[r.n_wait++] = st->sends[s][t];
            }
            break;
        case AH_OP_DP_WAIT:
            for (int t = 0; t < r.n_started; t++) {
                GROW(r.wait, r.n_wait, r.cap_wait, 1);
                r.wait[r.n_wait++] = r.started[t];
            }
            r.n_started = 0;
            break;
        case AH_OP_TIED_SYNC: col = st->tied[k]; break;
        case AH_OP_STEP_SYNC: col = st->step; break;
        case AH_OP_DP_ALLREDUCE: col = st->bucket[op->bucket]; break;
        case AH_OP_OPTIMIZER: {
            const ah_stage *sg = &e->p->replicas[k].stages[e->r->stages[s].stage];
            block_on(e, &r, add_compute(e, AH_OP_OPTIMIZER, s, -1, sg->layer_first, sg->layer_last, e->lts[s]));
            break;
        }
        default: break; /* sends and receives: add_transfers */
        }
        if (col < 0)
            continue;
        push_int(&e->dq[s], &e->ndq[s], &e->capdq[s], col);
        if (op->kind == AH_OP_DP_ALLREDUCE && op->nonblocking) {
            add_dep(e, r.prev, col);
            GROW(r.started, r.n_started, r.cap_started, 1);
            r.started[r.n_started++] = col;
        } else {
            block_on(e, &r, col);
        }
    }
    free(r.wait);
    free(r.started);
}

/* The sync ops of every program; blocking sends occupying the sender's compute stream. */
static void add_sync_and_updates(engine *e, const ah_schedule_plan *sp, const compute_ids *ci) {
    const ah_plan *p = e->p;
    sync_tasks st;
    add_sync_tasks(e, sp, &st);
    st.sends = ah_xcalloc((size_t)e->S + 1, sizeof(int *));
    st.n_sends = ah_xcalloc((size_t)e->S + 1, sizeof(int));
    int *cap = ah_xcalloc((size_t)e->S + 1, sizeof(int));
    for (int t = 0; t < e->nt; t++)
        if (e->t[t].type == TK_FLOW && e->t[t].nparts == 0 &&
            (e->t[t].kind == AH_OP_SEND_ACTIVATION || e->t[t].kind == AH_OP_SEND_GRADIENT))
            push_int(&st.sends[e->t[t].stage], &st.n_sends[e->t[t].stage], &cap[e->t[t].stage], t);
    for (int s = 0; s < e->S; s++) {
        wire_program(e, sp, s, ci, &st);
        free(st.sends[s]);
    }
    free(cap);
    free(st.sends);
    free(st.n_sends);
    free(st.bucket);
    free(st.tied);
    /* blocking sends occupy the sender's compute stream: its next op waits
     * for the transfer to complete (docs/cost-model.md, "Pipeline sends") */
    if (p->train.p2p != AH_P2P_BLOCKING)
        return;
    int nt = e->nt;
    for (int i = 0; i < nt; i++) {
        const task *k = &e->t[i];
        if (k->type != TK_FLOW || k->nparts > 0 || (k->kind != AH_OP_SEND_ACTIVATION && k->kind != AH_OP_SEND_GRADIENT))
            continue;
        int s = k->stage, next = e->t[k->src_op].prog_pos + 1;
        if (next < e->nprog[s])
            add_dep(e, i, e->prog[s][next]);
    }
}

/* dependency edges -> successor lists */
static void link_successors(engine *e) {
    for (int i = 0; i < e->ne; i++) {
        e->t[e->deps_to[i]].deps_left++;
        e->t[e->deps_from[i]].nsucc++;
    }
    e->succ = calloc((size_t)e->ne + 1, sizeof(int));
    if (!e->succ)
        abort();
    int off = 0;
    for (int i = 0; i < e->nt; i++) {
        e->t[i].succ0 = off;
        off += e->t[i].nsucc;
        e->t[i].nsucc = 0;
        e->t[i].start = -1;
    }
    for (int i = 0; i < e->ne; i++) {
        task *f = &e->t[e->deps_from[i]];
        e->succ[f->succ0 + f->nsucc++] = e->deps_to[i];
    }
}

/* iteration time, per-stage breakdown, flush times, bucket ready times */
static void collect_results(engine *e, const ah_schedule_plan *sp, const compute_ids *ci) {
    const ah_plan *p = e->p;
    ah_sim_result *r = e->r;
    int R = sp->n_replicas;
    double iter = 0;
    for (int i = 0; i < e->nt; i++) {
        if (e->t[i].end > iter)
            iter = e->t[i].end;
        if (e->t[i].kind == AH_OP_STEP_SYNC) /* one task, every stage taking part */
            r->step_sync_s = e->t[i].end - e->t[i].start;
    }
    r->iteration_time_s = iter;
    for (int s = 0; s < e->S; s++) {
        ah_sim_stage *ss = &r->stages[s];
        int k = ss->replica;
        for (int idx = 0; idx < p->replicas[k].micro_batches * sp->V; idx++)
            if (e->t[ci->blast[s][idx]].end > r->replica_flush_s[k])
                r->replica_flush_s[k] = e->t[ci->blast[s][idx]].end;
        if (ss->finish_s > r->replica_finish_s[k])
            r->replica_finish_s[k] = ss->finish_s;
        int nc = ah_intervals_merge(e->cv[s], e->ncv[s] / 2);
        int nm = ah_intervals_merge(e->iv[s], e->niv[s] / 2);
        ss->exposed_comm_s = ah_intervals_minus(e->iv[s], nm, e->cv[s], nc);
        ss->idle_s = iter - ss->compute_s - ss->exposed_comm_s;
        if (ss->idle_s < 0)
            ss->idle_s = 0;
    }
    for (int q = 0; q < r->n_buckets; q++) {
        double ready = 0;
        for (int k = 0; k < R; k++)
            if (e->t[ci->chunk_of[q * R + k]].end > ready)
                ready = e->t[ci->chunk_of[q * R + k]].end;
        r->buckets[q].ready_s = ready;
    }
}

static int engine_alloc(engine *e, ah_sim_result *r, int S) {
    CALLOC(r->replica_flush_s, e->p->n_replicas);
    CALLOC(r->replica_finish_s, e->p->n_replicas);
    CALLOC(r->stages, S);
    CALLOC(e->prog, S);
    CALLOC(e->nprog, S);
    CALLOC(e->capprog, S);
    CALLOC(e->pc, S);
    CALLOC(e->dq, S);
    CALLOC(e->ndq, S);
    CALLOC(e->capdq, S);
    CALLOC(e->dqh, S);
    CALLOC(e->busy, S);
    CALLOC(e->mem_now, S);
    CALLOC(e->in_flight, S);
    CALLOC(e->iv, S);
    CALLOC(e->cv, S);
    CALLOC(e->niv, S);
    CALLOC(e->capiv, S);
    CALLOC(e->ncv, S);
    CALLOC(e->capcv, S);
    e->nlinks = 4 * S + 2 * e->p->cluster.n_nodes +
                (e->o->links ? e->p->cluster.n_nodes * e->p->cluster.n_nodes : 0); /* L_PAIR */
    CALLOC(e->cap, e->nlinks);
    return !r->replica_flush_s || !r->replica_finish_s || !r->stages || !e->prog || !e->nprog ||
           !e->capprog || !e->pc || !e->dq || !e->ndq || !e->capdq || !e->dqh || !e->busy || !e->mem_now ||
           !e->in_flight || !e->iv || !e->cv || !e->niv || !e->capiv || !e->ncv || !e->capcv || !e->cap;
}

/* The simulator's buckets from the schedule's: bytes of one slice (the
 * bucket's TP-1 bytes over its largest holder degree T) and T. */
static void set_buckets(engine *e, const ah_schedule_plan *sp) {
    ah_sim_result *r = e->r;
    int R = sp->n_replicas;
    r->n_buckets = sp->n_buckets;
    r->buckets = ah_xcalloc((size_t)sp->n_buckets + 1, sizeof(ah_sim_bucket));
    for (int q = 0; q < sp->n_buckets; q++) {
        int T = 1;
        for (int k = 0; k < R; k++) {
            int t = r->stages[sp->first_stage[k] + sp->buckets[q].holder[k]].tp;
            T = t > T ? t : T;
        }
        r->buckets[q] = (ah_sim_bucket){.first = sp->buckets[q].first,
                                        .last = sp->buckets[q].last,
                                        .bytes = sp->buckets[q].bytes / T,
                                        .slices = T,
                                        .n_holders = R};
    }
}

/* The task graph of the plan's schedule, run. */
static int play(engine *e, const ah_sim_options *so, char *err, size_t errlen) {
    const ah_plan *p = e->p;
    int S = e->S, R = p->n_replicas;
    /* byte counts at TP 1; the builder divides by the stages' degrees */
    const ah_layer_bytes *lb1 = ah_plan_costs_bytes(e->costs, p, 1);
    ah_schedule_options sopt = {.schedule = so->schedule,
                                .virtual_stages = so->virtual_stages,
                                .act_bytes = lb1->p2p_bytes,
                                .grad_bytes = lb1->grad_bytes,
                                .tied_bytes = lb1->tied_bytes,
                                .split_by_tp = 1,
                                .overlap_dp = so->overlap_dp};
    ah_schedule_plan sp;
    if (ah_schedule_build(p, &sopt, &sp, err, errlen) != 0)
        return -1;
    set_buckets(e, &sp);
    compute_ids ci = {ah_xcalloc((size_t)S, sizeof(int *)),
                      ah_xcalloc((size_t)S, sizeof(int *)),
                      ah_xcalloc((size_t)S, sizeof(int *)),
                      ah_xcalloc((size_t)(sp.n_buckets + 1) * (size_t)R, sizeof(int)),
                      ah_xcalloc((size_t)S, sizeof(int *))};
    for (int k = 0; k < R; k++) {
        add_programs(e, &sp, k, &ci);
        add_transfers(e, &sp, k, &ci);
    }
    add_sync_and_updates(e, &sp, &ci);
    link_successors(e);
    int rc = run(e, err, errlen);
    if (rc == 0)
        collect_results(e, &sp, &ci);
    for (int s = 0; s < S; s++) {
        free(ci.fwd[s]);
        free(ci.bfirst[s]);
        free(ci.blast[s]);
        free(ci.op_task[s]);
    }
    free(ci.fwd);
    free(ci.bfirst);
    free(ci.blast);
    free(ci.chunk_of);
    free(ci.op_task);
    ah_schedule_plan_free(&sp);
    return rc;
}

int ah_simulate(ah_plan *p, const ah_profile *prof, const ah_plan_options *o, const ah_sim_options *so,
                ah_sim_result *r, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    if (ah_plan_evaluate(p, prof, o, err, errlen) != 0)
        return -1;
    engine e;
    memset(&e, 0, sizeof e);
    e.p = p;
    e.o = o;
    e.r = r;
    e.record = so->record_events;
    e.dp_serial = so->dp_serial;
    r->schedule = so->schedule;
    r->closed_form_s = p->iteration_time_s;
    r->n_replicas = p->n_replicas;
    int S = 0;
    for (int k = 0; k < p->n_replicas; k++)
        S += p->replicas[k].n_stages;
    e.S = S;
    r->n_stages = S;
    if (engine_alloc(&e, r, S))
        abort();
    ah_plan_costs costs;
    memset(&costs, 0, sizeof costs);
    e.costs = &costs;
    e.lts = ah_xcalloc((size_t)S + 1, sizeof *e.lts);
    e.lbs = ah_xcalloc((size_t)S + 1, sizeof *e.lbs);
    int rc = setup_stages(&e, prof, err, errlen);
    if (rc == 0)
        rc = play(&e, so, err, errlen);
    free(e.lts);
    free(e.lbs);
    ah_plan_costs_free(&costs);
    engine_free(&e);
    if (rc != 0)
        ah_sim_result_free(r);
    return rc;
}

void ah_sim_result_free(ah_sim_result *r) {
    for (int s = 0; s < r->n_stages; s++)
        free(r->stages[s].mem);
    free(r->stages);
    free(r->replica_flush_s);
    free(r->replica_finish_s);
    free(r->buckets);
    free(r->events);
    memset(r, 0, sizeof *r);
}
