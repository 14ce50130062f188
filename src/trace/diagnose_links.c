/* Links in the diagnosis (autohet/trace_diagnose.h): every transfer between
 * two ranks as one message with its time once both ends were there — a
 * receive from its matched send's post (or its own start, if later; or the
 * sender's next MPI call, if the receive ended after it began and sooner
 * than the sender had been away: a message the sender left inside MPI moves
 * on when it calls MPI again) to its end; a
 * 2-rank all-reduce or the tied exchange from the last arrival to the last
 * end — against what it should take: the comm profile's alpha-beta of that
 * pair of hosts (links{}), else of its link class (the latency fit), else
 * the median of the other pairs' lines of the same kind (point-to-point or
 * all-reduce; each pair's alpha-beta through its median time per size) at
 * its size. A pair whose median transfer is 2x or more of that, and so in
 * 4/5 of the steps or more, is a slow link. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "autohet/link_model.h"
#include "trace/diagnose_internal.h"
#include "util/errors.h"
#include "util/json_file.h"

/* ------------------------------------------------------------ matching */

static const ah_trace_item *sort_items;

static int dir_of(const ah_trace_event *e) {
    return e->kind == AH_OP_SEND_GRADIENT || e->kind == AH_OP_RECV_GRADIENT;
}

/* sends by (from, to, direction, start); receives by (from = peer, to = rank, ...) */
static void p2p_key(const ah_trace_item *v, int k[3]) {
    int send = v->ev.kind == AH_OP_SEND_ACTIVATION || v->ev.kind == AH_OP_SEND_GRADIENT;
    k[0] = send ? v->ev.rank : v->ev.peer;
    k[1] = send ? v->ev.peer : v->ev.rank;
    k[2] = dir_of(&v->ev);
}

static int cmp_p2p(const void *pa, const void *pb) {
    const ah_trace_item *x = &sort_items[*(const int *)pa], *y = &sort_items[*(const int *)pb];
    int a[3], b[3];
    p2p_key(x, a);
    p2p_key(y, b);
    for (int i = 0; i < 3; i++)
        if (a[i] != b[i])
            return a[i] - b[i];
    return (x->ts > y->ts) - (x->ts < y->ts);
}

static int cmp_inst(const void *pa, const void *pb) {
    const ah_trace_item *x = &sort_items[*(const int *)pa], *y = &sort_items[*(const int *)pb];
    int c = strcmp(x->site, y->site);
    if (c)
        return c;
    if (x->ev.group != y->ev.group)
        return x->ev.group - y->ev.group;
    if (x->ev.seq != y->ev.seq)
        return x->ev.seq - y->ev.seq;
    return x->ev.rank - y->ev.rank;
}

/* the k-th send from a to b in one direction is the k-th receive of b from a */
static void match_p2p(dctx *c) {
    const ah_trace_item *e = c->a->items;
    int n = c->a->n_items, ns = 0, nr = 0;
    int *s = ah_xcalloc((size_t)n + 1, sizeof(int)), *r = ah_xcalloc((size_t)n + 1, sizeof(int));
    for (int i = 0; i < n; i++) {
        ah_op_kind k = e[i].ev.kind;
        if (e[i].ev.peer < 0)
            continue;
        if (k == AH_OP_SEND_ACTIVATION || k == AH_OP_SEND_GRADIENT)
            s[ns++] = i;
        else if (ah_diag_is_recv(&e[i]))
            r[nr++] = i;
    }
    sort_items = e;
    qsort(s, (size_t)ns, sizeof(int), cmp_p2p);
    qsort(r, (size_t)nr, sizeof(int), cmp_p2p);
    for (int i = 0, j = 0; i < ns && j < nr;) {
        int c1 = cmp_p2p(&s[i], &r[j]), ks[3], kr[3];
        p2p_key(&e[s[i]], ks);
        p2p_key(&e[r[j]], kr);
        if (ks[0] == kr[0] && ks[1] == kr[1] && ks[2] == kr[2]) {
            c->send_of[r[j++]] = s[i++];
            continue;
        }
        c1 < 0 ? i++ : j++;
    }
    free(s);
    free(r);
}

static void match_instances(dctx *c) {
    const ah_trace_item *e = c->a->items;
    int n = c->a->n_items, m = 0;
    int *idx = ah_xcalloc((size_t)n + 1, sizeof(int));
    for (int i = 0; i < n; i++)
        if (ah_diag_is_collective(&e[i]))
            idx[m++] = i;
    sort_items = e;
    qsort(idx, (size_t)m, sizeof(int), cmp_inst);
    c->inst = ah_xcalloc((size_t)m + 1, sizeof(dinst));
    c->inst_items = idx;
    for (int a = 0, b; a < m; a = b) {
        const ah_trace_item *x = &e[idx[a]];
        for (b = a + 1; b < m && !strcmp(e[idx[b]].site, x->site) && e[idx[b]].ev.group == x->ev.group &&
                        e[idx[b]].ev.seq == x->ev.seq;
             b++)
            ;
        if (b - a < 2)
            continue;
        dinst *in = &c->inst[c->n_inst];
        *in = (dinst){a, b - a, 1e300, -1e300, -1e300, -1};
        for (int k = a; k < b; k++) {
            const ah_trace_item *v = &e[idx[k]];
            in->fa = v->ts < in->fa ? v->ts : in->fa;
            if (v->ts > in->la) {
                in->la = v->ts;
                in->straggler = v->ev.rank;
            }
            in->le = v->ts + v->dur > in->le ? v->ts + v->dur : in->le;
            c->inst_of[idx[k]] = c->n_inst;
        }
        c->n_inst++;
    }
}

void ah_diag_match_transfers(dctx *c) {
    int n = c->a->n_items;
    c->send_of = ah_xcalloc((size_t)n + 1, sizeof(int));
    c->inst_of = ah_xcalloc((size_t)n + 1, sizeof(int));
    for (int i = 0; i < n; i++)
        c->send_of[i] = c->inst_of[i] = -1;
    match_p2p(c);
    match_instances(c);
}

/* ------------------------------------------------------------ observations */

static void add_obs(dctx *c, int a, int b, int coll, ah_op_kind k, int step, double bytes, double us, int item,
                    int inst, double per_inst) {
    ah_diagnosis *d = c->d;
    if (a == b || bytes <= 0)
        return;
    d->obs = ah_xrealloc(d->obs, sizeof(ah_link_obs) * (size_t)(d->n_obs + 1));
    d->obs[d->n_obs++] = (ah_link_obs){a < b ? a : b, a < b ? b : a, coll, k, step, bytes, us > 0 ? us : 0, -1, item,
                                           inst, per_inst};
}

/* a 2-rank all-reduce as messages: recursive doubling exchanges the vector
 * once, the ring (and Rabenseifner) twice half of it */
static void collect_obs(dctx *c) {
    const ah_trace_item *e = c->a->items;
    int n = c->a->n_items, *pos = ah_xcalloc((size_t)n + 1, sizeof(int));
    for (int k = 0; k < n; k++)
        pos[c->order[k]] = k;
    for (int i = 0; i < n; i++)
        if (ah_diag_is_recv(&e[i]) && c->send_of[i] >= 0) {
            double s = e[c->send_of[i]].ts, t0 = e[i].ts > s ? e[i].ts : s, end = e[i].ts + e[i].dur;
            /* a message still in the sender when it left MPI moves on at its next MPI call (progress): if the
             * receive ended after that call began, and sooner after it than the sender had been away, the
             * sender held it and the link's part is from there */
            int snd = c->send_of[i], r = e[snd].ev.rank;
            for (int k = pos[snd] + 1; k < c->rank_first[r + 1]; k++) {
                const ah_trace_item *v = &e[c->order[k]];
                if (!v->comm)
                    continue;
                if (v->ts > t0 && v->ts < end && end - v->ts < v->ts - t0)
                    t0 = v->ts; /* it arrived soon after the sender came back: the sender held it */
                break;
            }
            add_obs(c, e[i].ev.rank, e[i].ev.peer, 0, e[i].ev.kind, c->step[i], e[i].ev.bytes, end - t0, i, -1, 1);
        }
    free(pos);
    for (int k = 0; k < c->n_inst; k++) {
        const dinst *in = &c->inst[k];
        const ah_trace_item *x = &e[c->inst_items[in->first]], *y = &e[c->inst_items[in->first + 1]];
        if (in->n != 2 || x->ev.kind == AH_OP_STEP_SYNC)
            continue;
        double us = in->le - in->la, bytes = x->ev.bytes;
        int coll = x->ev.kind != AH_OP_TIED_SYNC;
        double per = 1;
        if (coll && ah_mpi_allreduce_decide(2, bytes) != AH_MPI_AR_RECURSIVE_DOUBLING) {
            bytes /= 2;
            us /= 2;
            per = 2;
        }
        add_obs(c, x->ev.rank, y->ev.rank, coll, x->ev.kind, c->step[c->inst_items[in->first]], bytes, us, -1, k,
                per);
    }
}

/* ------------------------------------------------------------ expectations */

typedef struct {
    ah_link_model cls[2]; /* intra-node, inter-node latency fits (n = 0 none) */
    int n_hosts;
    char (*hosts)[128];
    double *alpha_us, *beta; /* links{} [i * n + j], < 0 none */
    double *gain;            /* links{}' shared links: flows at once carry this times one flow (1: not measured) */
} profile;

static int host_index(const profile *p, const char *h) {
    for (int i = 0; h && i < p->n_hosts; i++)
        if (!strcmp(p->hosts[i], h))
            return i;
    return -1;
}

/* links{} of the profile: hosts, latency_us, bandwidth_GBps (entries that are not numbers: none) */
static void read_matrix(const cJSON *links, profile *p) {
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(links, "hosts"),
                *la = cJSON_GetObjectItemCaseSensitive(links, "latency_us"),
                *bw = cJSON_GetObjectItemCaseSensitive(links, "bandwidth_GBps");
    int n = cJSON_IsArray(h) ? cJSON_GetArraySize(h) : 0;
    if (n <= 0 || !cJSON_IsArray(la) || !cJSON_IsArray(bw))
        return;
    p->n_hosts = n;
    p->hosts = ah_xcalloc((size_t)n, sizeof *p->hosts);
    p->alpha_us = ah_xcalloc((size_t)n * n, sizeof(double));
    p->beta = ah_xcalloc((size_t)n * n, sizeof(double));
    p->gain = ah_xcalloc((size_t)n * n, sizeof(double));
    const cJSON *sg = cJSON_GetObjectItemCaseSensitive(links, "shared_bandwidth_GBps"),
                *so = cJSON_GetObjectItemCaseSensitive(links, "shared_one_flow_GBps");
    for (int i = 0; i < n; i++) {
        const cJSON *x = cJSON_GetArrayItem(h, i);
        snprintf(p->hosts[i], sizeof p->hosts[i], "%s", cJSON_IsString(x) ? x->valuestring : "");
        for (int j = 0; j < n; j++) {
            const cJSON *a = cJSON_GetArrayItem(cJSON_GetArrayItem(la, i), j),
                        *b = cJSON_GetArrayItem(cJSON_GetArrayItem(bw, i), j);
            p->alpha_us[i * n + j] = cJSON_IsNumber(a) ? a->valuedouble : -1;
            p->beta[i * n + j] = cJSON_IsNumber(b) && b->valuedouble > 0 ? b->valuedouble : -1;
            const cJSON *g = cJSON_GetArrayItem(cJSON_GetArrayItem(sg, i), j),
                        *o = cJSON_GetArrayItem(cJSON_GetArrayItem(so, i), j);
            p->gain[i * n + j] = ah_link_shared_gain(cJSON_IsNumber(g) ? g->valuedouble : 0,
                                                     cJSON_IsNumber(o) ? o->valuedouble : 0);
        }
    }
}

static int read_profile(const char *path, profile *p, char *err, size_t errlen) {
    memset(p, 0, sizeof *p);
    if (!path)
        return 0;
    if (ah_link_model_read_class(path, "intra-node", &p->cls[0], err, errlen) < 0 ||
        ah_link_model_read_class(path, "inter-node", &p->cls[1], err, errlen) < 0)
        return -1;
    cJSON *root = ah_json_parse_file(path, 64u << 20, 1, err, errlen);
    if (!root)
        return -1;
    const cJSON *links = cJSON_GetObjectItemCaseSensitive(root, "links");
    if (cJSON_IsObject(links))
        read_matrix(links, p);
    cJSON_Delete(root);
    return 0;
}

static const char *host_of(const dctx *c, int r) {
    return c->o->hosts && r < c->o->n_ranks ? c->o->hosts[r] : NULL;
}

/* the profile's time for one observation, -1 none */
static double profile_us(const dctx *c, const profile *p, const ah_link_obs *x) {
    const char *ha = host_of(c, x->a), *hb = host_of(c, x->b);
    int i = host_index(p, ha), j = host_index(p, hb);
    if (i >= 0 && j >= 0 && i != j && p->alpha_us[i * p->n_hosts + j] >= 0 && p->beta[i * p->n_hosts + j] > 0)
        return p->alpha_us[i * p->n_hosts + j] + x->bytes / (p->beta[i * p->n_hosts + j] * 1e3);
    int inter = ha && hb && strcmp(ha, hb);
    const ah_link_model *m = p->cls[inter].n ? &p->cls[inter] : p->cls[!inter].n ? &p->cls[!inter] : NULL;
    return m ? ah_link_us(m, x->bytes) : -1;
}

/* a pair's line: the median time of every size, least squares (alpha >= 0; one size or a line that would
 * need a negative alpha: through the origin) */
typedef struct {
    int a, b, collective;
    double alpha, slope; /* us, us per byte */
} pair_line;

static pair_line fit_pair(const ah_diagnosis *d, int a, int b, int coll) {
    pair_line L = {a, b, coll, 0, 0};
    int ns = 0;
    double sx[64], sy[64], tmp[4096];
    for (int k = 0; k < d->n_obs && ns < 64; k++) {
        const ah_link_obs *o = &d->obs[k];
        int seen = 0, t = 0;
        if (o->a != a || o->b != b || o->collective != coll)
            continue;
        for (int q = 0; q < ns; q++)
            seen |= sx[q] == o->bytes;
        if (seen)
            continue;
        for (int q = 0; q < d->n_obs && t < 4096; q++)
            if (d->obs[q].a == a && d->obs[q].b == b && d->obs[q].collective == coll && d->obs[q].bytes == o->bytes)
                tmp[t++] = d->obs[q].us;
        sx[ns] = o->bytes;
        sy[ns++] = ah_diag_median(tmp, t);
    }
    double mx = 0, my = 0, sxx = 0, sxy = 0;
    for (int q = 0; q < ns; q++)
        mx += sx[q] / ns, my += sy[q] / ns;
    for (int q = 0; q < ns; q++)
        sxx += (sx[q] - mx) * (sx[q] - mx), sxy += (sx[q] - mx) * (sy[q] - my);
    L.slope = sxx > 0 ? sxy / sxx : -1;
    L.alpha = my - L.slope * mx;
    if (ns < 2 || !(L.slope > 0) || L.alpha < 0) {
        double num = 0, den = 0;
        for (int q = 0; q < ns; q++)
            num += sx[q] * sy[q], den += sx[q] * sx[q];
        L.alpha = 0, L.slope = den > 0 ? num / den : 0;
    }
    return L;
}

/* The other pairs' time for the observation's size: the median of their lines (every kind of transfer, as
 * messages: one noisy or slow pair among them does not set the expectation). -1 without another pair. */
static double peer_us(const pair_line *lines, int n, const ah_link_obs *x, double *tmp) {
    int m = 0;
    for (int p = 0; p < n; p++)
        if (!(lines[p].a == x->a && lines[p].b == x->b) && lines[p].collective == x->collective)
            tmp[m++] = lines[p].alpha + lines[p].slope * x->bytes;
    return m ? ah_diag_median(tmp, m) : -1;
}

/* ------------------------------------------------------------ findings */

static void link_finding(dctx *c, int a, int b, double *ratio, int nr) {
    const ah_diagnosis *d = c->d;
    double meas = 0, exp_s = 0, cost = 0, worst = -1;
    int n = 0, worst_k = -1;
    unsigned char *flag = ah_xcalloc((size_t)c->S, 1);
    for (int k = 0; k < d->n_obs; k++) {
        const ah_link_obs *o = &d->obs[k];
        if (o->a != a || o->b != b || o->expected_us < 0)
            continue;
        meas += o->us * 1e-6, exp_s += o->expected_us * 1e-6, n++;
        double ex = (o->us - o->expected_us) * 1e-6;
        cost += ex; /* signed: a link as fast as expected on average loses nothing, however noisy */
        if (ex > worst)
            worst = ex, worst_k = k;
    }
    double med = ah_diag_median(ratio, nr);
    /* the steps where the pair's median transfer took 2x its expected time or more */
    int slow_steps = 0;
    double *sr = ah_xcalloc((size_t)d->n_obs + 1, sizeof(double));
    for (int s = 0; s < c->S; s++) {
        int m = 0;
        for (int k = 0; k < d->n_obs; k++)
            if (d->obs[k].a == a && d->obs[k].b == b && d->obs[k].step == s && d->obs[k].expected_us > 0)
                sr[m++] = d->obs[k].us / d->obs[k].expected_us;
        flag[s] = m > 0 && ah_diag_median(sr, m) >= 2;
        slow_steps += flag[s];
    }
    free(sr);
    if (n > 0 && cost > 0 && worst_k >= 0) {
        ah_finding *f = ah_diag_add(c, AH_DIAG_SLOW_LINK);
        f->ranks[f->n_ranks++] = a;
        f->ranks[f->n_ranks++] = b;
        f->link[0] = a, f->link[1] = b;
        snprintf(f->op, sizeof f->op, "%s", ah_op_kind_name(d->obs[worst_k].kind));
        ah_diag_set_steps(f, flag, c->S);
        f->measured_s = meas, f->expected_s = exp_s, f->cost_s = cost;
        const char *ha = host_of(c, a), *hb = host_of(c, b);
        snprintf(f->evidence, sizeof f->evidence,
                 "%d transfer(s) between rank %d%s%s%s and rank %d%s%s%s took %.3f ms where %s gives %.3f ms: "
                 "median %.2fx the expected time per transfer, 2x or more in %d of %d step(s)",
                 n, a, ha ? " (" : "", ha ? ha : "", ha ? ")" : "", b, hb ? " (" : "", hb ? hb : "", hb ? ")" : "",
                 meas * 1e3, d->expected_from, exp_s * 1e3, med, slow_steps, c->S);
        f->share = c->wall_s > 0 ? cost / c->wall_s : 0;
        f->significant = med >= 2 && 3 * slow_steps >= 2 * c->S && f->share >= d->threshold;
    }
    free(flag);
}

/* ------------------------------------------------------------ saturated host links */

/* A link between two hosts is saturated when the transfers between them, each at the time expected of it alone
 * (the comm profile, else the other pairs), would keep it busy this share of the traced time or more in one
 * direction: they queue behind each other, and each takes longer than alone. */
#define SATURATED_LOAD 0.7

/* 1 when ranks a, b sit on hosts h0, h1 in either order (different hosts) */
static int on_hosts(const dctx *c, int a, int b, const char *h0, const char *h1) {
    const char *ha = host_of(c, a), *hb = host_of(c, b);
    return ha && hb && strcmp(ha, hb) &&
           ((!strcmp(ha, h0) && !strcmp(hb, h1)) || (!strcmp(ha, h1) && !strcmp(hb, h0)));
}

int ah_diag_same_hosts(const dctx *c, const ah_finding *x, const ah_finding *y) {
    const char *h0 = x->link[0] >= 0 ? host_of(c, x->link[0]) : NULL,
               *h1 = x->link[1] >= 0 ? host_of(c, x->link[1]) : NULL;
    return h0 && h1 && y->link[0] >= 0 && y->link[1] >= 0 && on_hosts(c, y->link[0], y->link[1], h0, h1);
}

/* microseconds the transfers between hosts h0 and h1 need at their expected speed (less where the profile
 * measured the link to carry more with flows at once), busy[0] from h0 to h1, busy[1] back (a point-to-point
 * message one way, from its sender; an all-reduce's exchange both ways) */
static void host_link_busy(const dctx *c, const char *h0, const char *h1, double busy[2]) {
    const ah_diagnosis *d = c->d;
    busy[0] = busy[1] = 0;
    for (int k = 0; k < d->n_obs; k++) {
        const ah_link_obs *o = &d->obs[k];
        double us = c->obs_busy_us[k];
        if (us <= 0 || !on_hosts(c, o->a, o->b, h0, h1))
            continue;
        if (o->item < 0) {
            busy[0] += us, busy[1] += us;
            continue;
        }
        int to = c->a->items[o->item].ev.rank, from = to == o->a ? o->b : o->a;
        busy[strcmp(host_of(c, from), h0) ? 1 : 0] += us;
    }
}

/* One finding for the pair of hosts of slow link i (the first slow link of that pair), if the link between them
 * is saturated: it costs what the pair's slow links lost, over their steps. */
static void saturated_pair(dctx *c, int i) {
    ah_diagnosis *d = c->d;
    const char *h0 = host_of(c, d->f[i].link[0]), *h1 = host_of(c, d->f[i].link[1]);
    double busy[2];
    host_link_busy(c, h0, h1, busy);
    double load = (busy[0] > busy[1] ? busy[0] : busy[1]) / (c->wall_s * 1e6);
    if (!(c->wall_s > 0) || load < SATURATED_LOAD)
        return;
    double cost = 0, meas = 0, exp_s = 0, worst = -1;
    int ranks[AH_DIAG_MAX_RANKS], nr = 0, links = 0, worst_i = i;
    unsigned char *steps = ah_xcalloc((size_t)c->S, 1);
    for (int j = 0; j < d->n; j++) {
        const ah_finding *f = &d->f[j];
        if (f->kind != AH_DIAG_SLOW_LINK || !on_hosts(c, f->link[0], f->link[1], h0, h1))
            continue;
        links++;
        cost += f->cost_s, meas += f->measured_s, exp_s += f->expected_s;
        if (f->cost_s > worst)
            worst = f->cost_s, worst_i = j;
        for (int e = 0; e < 2; e++) {
            int dup = 0;
            for (int q = 0; q < nr; q++)
                dup |= ranks[q] == f->link[e];
            if (!dup && nr < AH_DIAG_MAX_RANKS)
                ranks[nr++] = f->link[e];
        }
    }
    for (int k = 0; k < d->n_obs; k++) /* the steps where a transfer between the hosts took longer than alone */
        if (d->obs[k].expected_us > 0 && d->obs[k].us > d->obs[k].expected_us &&
            on_hosts(c, d->obs[k].a, d->obs[k].b, h0, h1))
            steps[d->obs[k].step] = 1;
    int la = d->f[worst_i].link[0], lb = d->f[worst_i].link[1];
    ah_finding *g = ah_diag_add(c, AH_DIAG_SATURATED_LINK); /* d->f may move: nothing above is kept */
    memcpy(g->ranks, ranks, sizeof(int) * (size_t)nr);
    g->n_ranks = nr;
    g->link[0] = la, g->link[1] = lb;
    snprintf(g->op, sizeof g->op, "communication");
    ah_diag_set_steps(g, steps, c->S);
    free(steps);
    g->cost_s = cost, g->measured_s = meas, g->expected_s = exp_s;
    snprintf(g->evidence, sizeof g->evidence,
             "the link between hosts %s and %s carries %.3f ms (%s to %s) and %.3f ms (back) of transfers at their "
             "expected speed (%s) in %.3f ms: busy %.0f%% of the time one way, so they queue behind each other; "
             "its %d slow pair(s) of ranks lost %.3f ms to that load, not to a slow rank or pair",
             h0, h1, busy[0] / 1e3, h0, h1, busy[1] / 1e3, d->expected_from, c->wall_s * 1e3, 100 * load, links,
             cost * 1e3);
    g->share = cost / c->wall_s;
    g->significant = cost > 0 && g->share >= d->threshold;
}

void ah_diag_saturated_links(dctx *c) {
    ah_diagnosis *d = c->d;
    int n0 = d->n;
    for (int i = 0; i < n0; i++) {
        if (d->f[i].kind != AH_DIAG_SLOW_LINK || d->f[i].cost_s <= 0)
            continue;
        const char *h0 = host_of(c, d->f[i].link[0]), *h1 = host_of(c, d->f[i].link[1]);
        int first = h0 && h1 && strcmp(h0, h1);
        for (int j = 0; first && j < i; j++) /* one finding per pair of hosts */
            first = !(d->f[j].kind == AH_DIAG_SLOW_LINK && d->f[j].cost_s > 0 &&
                      on_hosts(c, d->f[j].link[0], d->f[j].link[1], h0, h1));
        if (first)
            saturated_pair(c, i);
    }
}

/* a slow link on a pair of hosts a significant saturated_link finding names */
static int on_saturated(const dctx *c, const ah_finding *f) {
    for (int i = 0; i < c->d->n; i++)
        if (c->d->f[i].kind == AH_DIAG_SATURATED_LINK && c->d->f[i].significant &&
            ah_diag_same_hosts(c, &c->d->f[i], f))
            return 1;
    return 0;
}

/* The rank whose links lost the most time, when all of them (two or more) lose a significant time, each 1.5x
 * its expected time or more and none less than a quarter of the worst's cost, is itself slow (stopped,
 * descheduled, or its host's network; not necessarily a late arrival: stopped inside an all-reduce that every
 * member had entered, it holds up the transfer, not the arrivals):
 * one slow_rank finding of its communication, costing what its links lost; the link findings at it are then
 * explained by it (trace_diagnose.c). */
void ah_diag_common_ends(dctx *c) {
    ah_diagnosis *d = c->d;
    int n0 = d->n, top = -1;
    double best = 0;
    for (int r = 0; r < c->R; r++) { /* the rank whose links lost the most: the only candidate */
        double t = 0;
        for (int i = 0; i < n0; i++)
            if (d->f[i].kind == AH_DIAG_SLOW_LINK && (d->f[i].link[0] == r || d->f[i].link[1] == r))
                t += d->f[i].cost_s;
        if (t > best)
            best = t, top = r;
    }
    for (int r = top; r >= 0 && r == top; r++) {
        int links = 0, slow = 0, seen[AH_DIAG_MAX_RANKS * 4];
        double cost = 0, meas = 0, exp_s = 0;
        char list[320] = "";
        for (int k = 0; k < d->n_obs && links < AH_DIAG_MAX_RANKS * 4; k++) {
            int other = d->obs[k].a == r ? d->obs[k].b : d->obs[k].b == r ? d->obs[k].a : -1, dup = 0;
            for (int q = 0; q < links; q++)
                dup |= seen[q] == other;
            if (other >= 0 && !dup)
                seen[links++] = other;
        }
        double lo = 1e300, hi = 0;
        for (int i = 0; i < n0; i++) {
            const ah_finding *f = &d->f[i];
            if (f->kind != AH_DIAG_SLOW_LINK || (f->link[0] != r && f->link[1] != r) || f->share < d->threshold ||
                f->measured_s < 1.5 * f->expected_s || on_saturated(c, f))
                continue;
            slow++;
            lo = f->cost_s < lo ? f->cost_s : lo;
            hi = f->cost_s > hi ? f->cost_s : hi;
            cost += f->cost_s, meas += f->measured_s, exp_s += f->expected_s;
            size_t u = strlen(list);
            snprintf(list + u, sizeof list - u, "%s%d-%d %.3f ms for %.3f expected", u ? ", " : "", f->link[0],
                     f->link[1], f->measured_s * 1e3, f->expected_s * 1e3);
        }
        if (links < 2 || slow < links || lo < 0.25 * hi) /* one link far slower than the rest: that link */
            continue;
        ah_finding *f = ah_diag_add(c, AH_DIAG_SLOW_RANK);
        f->ranks[f->n_ranks++] = r;
        snprintf(f->op, sizeof f->op, "communication");
        unsigned char *all = ah_xcalloc((size_t)c->S, 1);
        for (int k = 0; k < d->n_obs; k++)
            if ((d->obs[k].a == r || d->obs[k].b == r) && d->obs[k].us > 2 * d->obs[k].expected_us)
                all[d->obs[k].step] = 1;
        ah_diag_set_steps(f, all, c->S);
        free(all);
        f->cost_s = cost, f->measured_s = meas, f->expected_s = exp_s;
        snprintf(f->evidence, sizeof f->evidence,
                 "every link of rank %d is slow (%s): the common end, not a link (a stopped or descheduled rank, "
                 "or its host's network)",
                 r, list);
        f->share = c->wall_s > 0 ? cost / c->wall_s : 0;
        f->significant = f->share >= d->threshold;
    }
}

int ah_diag_links(dctx *c, char *err, size_t errlen) {
    ah_diagnosis *d = c->d;
    profile p;
    if (read_profile(c->o->comm_profile, &p, err, errlen) != 0)
        return -1;
    collect_obs(c);
    pair_line *lines = ah_xcalloc((size_t)d->n_obs + 1, sizeof(pair_line));
    double *tmp = ah_xcalloc((size_t)d->n_obs + 1, sizeof(double));
    int n_lines = 0, from_profile = 0;
    for (int k = 0; k < d->n_obs; k++) {
        int seen = 0;
        for (int q = 0; q < n_lines; q++)
            seen |= lines[q].a == d->obs[k].a && lines[q].b == d->obs[k].b && lines[q].collective == d->obs[k].collective;
        if (!seen)
            lines[n_lines++] = fit_pair(d, d->obs[k].a, d->obs[k].b, d->obs[k].collective);
    }
    for (int k = 0; k < d->n_obs; k++) {
        ah_link_obs *o = &d->obs[k];
        o->expected_us = c->o->comm_profile ? profile_us(c, &p, o) : -1;
        from_profile += o->expected_us >= 0;
        if (o->expected_us < 0)
            o->expected_us = peer_us(lines, n_lines, o, tmp);
    }
    snprintf(d->expected_from, sizeof d->expected_from, "%s",
             from_profile ? "the comm profile's alpha-beta" : "the median of the other pairs' alpha-beta lines");
    c->obs_busy_us = ah_xcalloc((size_t)d->n_obs + 1, sizeof(double));
    for (int k = 0; k < d->n_obs; k++) { /* a link measured to carry more at once is that much less busy */
        int i = host_index(&p, host_of(c, d->obs[k].a)), j = host_index(&p, host_of(c, d->obs[k].b));
        double gain = i >= 0 && j >= 0 && i != j && p.gain ? p.gain[i * p.n_hosts + j] : 1;
        c->obs_busy_us[k] = d->obs[k].expected_us > 0 ? d->obs[k].expected_us / gain : 0;
    }
    double *ratio = ah_xcalloc((size_t)d->n_obs + 1, sizeof(double));
    for (int k = 0; k < d->n_obs; k++) {
        int a = d->obs[k].a, b = d->obs[k].b, seen = 0, nr = 0;
        for (int q = 0; q < k; q++)
            seen |= d->obs[q].a == a && d->obs[q].b == b;
        if (seen)
            continue;
        for (int q = k; q < d->n_obs; q++)
            if (d->obs[q].a == a && d->obs[q].b == b && d->obs[q].expected_us > 0)
                ratio[nr++] = d->obs[q].us / d->obs[q].expected_us;
        link_finding(c, a, b, ratio, nr);
    }
    free(ratio);
    free(lines);
    free(tmp);
    free(p.hosts);
    free(p.alpha_us);
    free(p.beta);
    free(p.gain);
    return 0;
}
