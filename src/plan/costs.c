#include "plan/costs.h"
#include "util/errors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define xcalloc ah_xcalloc

int ah_layer_times_build(ah_layer_times *t, const ah_profile *prof, const ah_model_config *m,
                         const ah_train_settings *ts, const ah_device *dev, int tp, int mb, char *err,
                         size_t errlen) {
    int L = ah_model_num_layers(m);
    memset(t, 0, sizeof *t);
    t->n_layers = L;
    t->fwd = xcalloc((size_t)L + 1, sizeof(ah_ns));
    t->bwd = xcalloc((size_t)L + 1, sizeof(ah_ns));
    t->w = xcalloc((size_t)L + 1, sizeof(ah_ns));
    t->upd = xcalloc((size_t)L + 1, sizeof(ah_ns));
    t->tpf = xcalloc((size_t)L + 1, sizeof(ah_ns));
    t->tpb = xcalloc((size_t)L + 1, sizeof(ah_ns));
    for (int l = 0; l < L; l++) {
        ah_layer_cost c;
        if (ah_profile_layer_cost(prof, m, ts, dev, l, tp, mb, &c, err, errlen) != 0) {
            ah_layer_times_free(t);
            return -1;
        }
        ah_ns f = ah_to_ns(c.fwd_s), b = ah_to_ns(c.bwd_s);
        t->fwd[l + 1] = t->fwd[l] + f;
        t->bwd[l + 1] = t->bwd[l] + b;
        t->w[l + 1] = t->w[l] + f + b;
        t->upd[l + 1] = t->upd[l] + ah_to_ns(c.update_s);
        /* the TP share never exceeds the rounded op time */
        ah_ns tf = ah_to_ns(c.tp_comm_fwd_s), tb = ah_to_ns(c.tp_comm_bwd_s);
        t->tpf[l + 1] = t->tpf[l] + (tf < f ? tf : f);
        t->tpb[l + 1] = t->tpb[l] + (tb < b ? tb : b);
    }
    return 0;
}

void ah_layer_times_free(ah_layer_times *t) {
    free(t->fwd);
    free(t->bwd);
    free(t->w);
    free(t->upd);
    free(t->tpf);
    free(t->tpb);
    memset(t, 0, sizeof *t);
}

void ah_layer_bytes_build(ah_layer_bytes *b, const ah_model_config *m, const ah_train_settings *ts, int tp,
                          int mb, int shards) {
    const double state = ah_state_bytes_per_param(ts->precision, ts->dist_optimizer ? shards : 1);
    const double sync = ah_dp_sync_bytes_per_param(ts->precision, ts->dist_optimizer) / 2.0;
    int L = ah_model_num_layers(m);
    b->n_layers = L;
    b->static_bytes = xcalloc((size_t)L + 1, sizeof(int64_t));
    b->act_bytes = xcalloc((size_t)L + 1, sizeof(int64_t));
    b->grad_bytes = xcalloc((size_t)L + 1, sizeof(double));
    for (int l = 0; l < L; l++) {
        ah_layer_kind k = ah_model_layer_kind(m, l);
        double params = ah_layer_params(m, k) / tp;
        b->static_bytes[l + 1] = b->static_bytes[l] + (int64_t)(params * state + 0.5);
        b->act_bytes[l + 1] =
            b->act_bytes[l] +
            (int64_t)(ah_layer_act_bytes(m, k, ts->seq, mb, tp, ts->recompute, ts->precision) + 0.5);
        b->grad_bytes[l] = params * sync;
    }
    b->p2p_bytes = ah_model_p2p_bytes(m, ts->seq, mb, ts->precision) / tp;
    /* the fp32 gradient all-reduce's bytes per parameter, whatever the optimizer */
    b->tied_bytes = m->tied_embeddings
                        ? ah_model_tied_params(m) / tp * (ah_dp_sync_bytes_per_param(ts->precision, 0) / 2.0)
                        : 0.0;
}

void ah_layers_memory(const ah_model_config *m, const ah_train_settings *ts, int tp, int mb, int first,
                      int last, double *state, double *act) {
    ah_layer_bytes lb;
    ah_layer_bytes_build(&lb, m, ts, tp, mb, 1);
    *state = (double)ah_range(lb.static_bytes, first, last);
    *act = (double)ah_range(lb.act_bytes, first, last);
    ah_layer_bytes_free(&lb);
}

void ah_layer_bytes_free(ah_layer_bytes *b) {
    free(b->static_bytes);
    free(b->act_bytes);
    free(b->grad_bytes);
    memset(b, 0, sizeof *b);
}

const ah_layer_times *ah_plan_costs_times(ah_plan_costs *c, const ah_plan *p, const ah_profile *prof,
                                          const ah_device *dev, int tp, char *err, size_t errlen) {
    for (int i = 0; i < c->n_times; i++)
        if (c->times[i].tp == tp && strcmp(c->times[i].name, dev->name) == 0)
            return &c->times[i].t;
    if (c->n_times == AH_PLAN_COSTS_TIMES) {
        snprintf(err, errlen, "plan: more than %d (GPU type, TP degree) pairs", AH_PLAN_COSTS_TIMES);
        return NULL;
    }
    if (ah_layer_times_build(&c->times[c->n_times].t, prof, &p->model, &p->train, dev, tp, p->micro_batch,
                             err, errlen) != 0)
        return NULL;
    c->times[c->n_times].name = dev->name;
    c->times[c->n_times].tp = tp;
    return &c->times[c->n_times++].t;
}

const ah_layer_bytes *ah_plan_costs_bytes(ah_plan_costs *c, const ah_plan *p, int tp) {
    int i = 0;
    while ((1 << i) < tp)
        i++;
    if (!c->built[i]) {
        ah_layer_bytes_build(&c->bytes[i], &p->model, &p->train, tp, p->micro_batch, p->n_replicas);
        c->built[i] = 1;
    }
    return &c->bytes[i];
}

void ah_plan_costs_free(ah_plan_costs *c) {
    for (int i = 0; i < c->n_times; i++)
        ah_layer_times_free(&c->times[i].t);
    for (int i = 0; i <= AH_MAX_TP_LOG2; i++)
        if (c->built[i])
            ah_layer_bytes_free(&c->bytes[i]);
    memset(c, 0, sizeof *c);
}

ah_ns ah_layer_sync_ns(const ah_layer_bytes *b, int l, double bw_gbs, int R) {
    return ah_to_ns(ah_allreduce_factor(R) * b->grad_bytes[l] / (bw_gbs * 1e9));
}

ah_ns ah_local_sync_ns(const ah_layer_bytes *b, int first, int last, int R, double intra_gbs) {
    ah_ns t = 0;
    for (int l = first; l < last; l++)
        t += ah_to_ns(ah_allreduce_factor(R) * b->grad_bytes[l] / (intra_gbs * 1e9));
    return t;
}

ah_ns ah_allreduce_latency_ns(int R, int one_node, const ah_plan_options *o) {
    return ah_to_ns(ah_allreduce_steps(R) * (one_node ? o->alpha_intra_s : o->alpha_inter_s));
}

ah_allreduce_algo ah_allreduce_choose(int R, double slice_bytes, double bw_gbs, int one_node,
                                      const ah_plan_options *o) {
    ah_allreduce_algo ring = {0, R >= 2 ? 2.0 * (R - 1) / R : 0.0, R >= 2 ? 2 * (R - 1) : 0};
    if (R <= AH_RING_EXACT_MAX)
        return ring;
    ah_allreduce_algo tree = {1, 2.0, ah_allreduce_steps(R)};
    double alpha = one_node ? o->alpha_intra_s : o->alpha_inter_s, t = slice_bytes / (bw_gbs * 1e9);
    return tree.factor * t + tree.steps * alpha < ring.factor * t + ring.steps * alpha ? tree : ring;
}

ah_ns *ah_sync_prefix(const ah_layer_bytes *b, double bw_gbs, int R) {
    ah_ns *s = xcalloc((size_t)b->n_layers + 1, sizeof(ah_ns));
    for (int l = 0; l < b->n_layers; l++)
        s[l + 1] = s[l] + ah_layer_sync_ns(b, l, bw_gbs, R);
    return s;
}

ah_ns ah_pipeline_period(const ah_ns *w, const ah_ns *c, int S) {
    ah_ns best = 0;
    for (int j = 0; j < S; j++) {
        ah_ns sum = 0;
        for (int e = j; e < S; e++) {
            sum += w[e] + (e > j ? 2 * c[e - 1] : 0);
            ah_ns len = e - j + 1, mean = (sum + len - 1) / len;
            if (mean > best)
                best = mean;
        }
    }
    return best;
}

ah_ns ah_pipeline_period_mode(const ah_ns *w, const ah_ns *c, int S, ah_p2p_mode mode) {
    if (mode != AH_P2P_BLOCKING)
        return ah_pipeline_period(w, c, S);
    ah_ns best = 0;
    for (int j = 0; j < S; j++) {
        ah_ns x = ah_blocking_stage_ns(w, c, S, j);
        if (x > best)
            best = x;
    }
    return best;
}

ah_ns ah_pipeline_tail(const ah_ns *x, const ah_ns *bwd, const ah_ns *c, int S, ah_ns upd_last, ah_ns tied) {
    if (S < 2)
        tied = 0; /* both copies on one stage: nothing to exchange */
    ah_ns best = x[0] + tied, drain = 0;
    for (int j = 1; j < S; j++) {
        drain += bwd[j - 1] + c[j - 1];
        ah_ns term = x[j] - drain;
        if (j == S - 1 && tied > 0) {
            ah_ns sync = x[j] - upd_last - drain;
            term = (sync > 0 ? sync : 0) + tied + upd_last;
        }
        if (term > best)
            best = term;
    }
    return best;
}

ah_ns ah_tied_exchange_ns(const ah_layer_bytes *lb, int inter_node, ah_pair_link link,
                          const ah_plan_options *o) {
    return lb->tied_bytes > 0 ? ah_p2p_ns(lb->tied_bytes, inter_node, link.intra_gbs, link.nic_share_gbs, o)
                              : 0;
}

ah_msg_cost ah_msg_cost_of(double bytes, int inter_node, double link_gbs, const ah_plan_options *o) {
    const ah_link_model *m = &o->msg_model[inter_node ? 1 : 0];
    double ref = o->msg_ref_gbs[inter_node ? 1 : 0];
    if (m->n < 1 || !(ref > 0) || !(link_gbs > 0))
        return (ah_msg_cost){inter_node ? o->alpha_inter_s : o->alpha_intra_s, bytes};
    int q = 0;
    while (q + 1 < m->n && bytes > m->max_bytes[q])
        q++;
    double alpha = m->alpha_us[q] * 1e-6, t = alpha + bytes / (m->beta_GBps[q] * 1e9 * (link_gbs / ref));
    if (t < m->alpha_us[0] * 1e-6) /* a free-intercept regime on a faster link: not below the latency */
        t = m->alpha_us[0] * 1e-6;
    if (!(t <= 1e9)) /* a link scaled far below the measured one: keep the time representable in ns */
        t = 1e9;
    double lat = alpha < 0 ? 0 : alpha > t ? t : alpha;
    return (ah_msg_cost){lat, (t - lat) * link_gbs * 1e9};
}

ah_ns ah_p2p_ns(double bytes, int inter_node, double intra_bw_gbs, double nic_share_gbs,
                const ah_plan_options *o) {
    double bw = inter_node ? nic_share_gbs : intra_bw_gbs;
    ah_msg_cost c = ah_msg_cost_of(bytes, inter_node, bw, o);
    return ah_to_ns(c.latency_s + c.volume_bytes / (bw * 1e9));
}

static int link_host(const ah_link_matrix *m, const char *host) {
    for (int i = 0; host[0] && i < m->n; i++)
        if (ah_host_matches(m->hosts[i], host))
            return i;
    return -1;
}

int ah_pair_link_measured(const ah_plan_options *o, const ah_node *a, const ah_node *b, double *alpha_s,
                          double *bw_gbs) {
    const ah_link_matrix *m = o->links;
    if (!m)
        return 0;
    int i = link_host(m, a->host), j = link_host(m, b->host);
    if (i < 0 || j < 0 || i == j)
        return 0;
    size_t c = (size_t)i * (size_t)m->n + (size_t)j;
    if (!(m->alpha_s[c] >= 0) || !(m->bw_gbs[c] > 0))
        return 0;
    *alpha_s = m->alpha_s[c], *bw_gbs = m->bw_gbs[c];
    return 1;
}

double ah_pair_link_share(const ah_plan_options *o, const ah_node *a, const ah_node *b) {
    const ah_link_matrix *m = o->links;
    if (!m || !m->share)
        return 1;
    int i = link_host(m, a->host), j = link_host(m, b->host);
    return i < 0 || j < 0 || i == j ? 1 : m->share[(size_t)i * (size_t)m->n + (size_t)j];
}

ah_ns ah_nodes_p2p_ns(double bytes, const ah_node *a, const ah_node *b, int inter_node,
                      const ah_plan_options *o) {
    double alpha, bw;
    if (inter_node && ah_pair_link_measured(o, a, b, &alpha, &bw))
        return ah_to_ns(alpha + bytes / (bw * 1e9));
    ah_pair_link lk =
        ah_pair_link_of(a->dev.intra_bw_gbs, ah_nic_share_gbs(a), b->dev.intra_bw_gbs, ah_nic_share_gbs(b));
    return ah_p2p_ns(bytes, inter_node, lk.intra_gbs, lk.nic_share_gbs, o);
}

ah_ns ah_lockstep_transfer_ns(double bytes, const ah_node *a, const ah_node *b, int inter_node,
                              const ah_plan_options *o) {
    if (!o->calibration)
        return ah_nodes_p2p_ns(bytes, a, b, inter_node, o);
    double alpha, bw;
    if (!(inter_node && ah_pair_link_measured(o, a, b, &alpha, &bw))) {
        ah_pair_link lk =
            ah_pair_link_of(a->dev.intra_bw_gbs, ah_nic_share_gbs(a), b->dev.intra_bw_gbs, ah_nic_share_gbs(b));
        bw = inter_node ? lk.nic_share_gbs : lk.intra_gbs;
    }
    return ah_to_ns(ah_calibration_transfer_s(o->calibration, bytes, inter_node, bw));
}

ah_ns ah_lockstep_chain_of(ah_ns slowest, int boundaries) {
    return boundaries < 1 ? 0 : (boundaries == 1 ? 1 : 2) * slowest;
}

ah_ns ah_lockstep_boundary_ns(const ah_plan *p, const ah_replica *r, int j, double whole,
                              const ah_plan_options *o) {
    const ah_stage *s = &r->stages[j], *n = &r->stages[j + 1];
    int tmin = s->tp < n->tp ? s->tp : n->tp;
    return ah_lockstep_transfer_ns(whole / (tmin > 0 ? tmin : 1), &p->cluster.nodes[s->node],
                                   &p->cluster.nodes[n->node], s->node != n->node, o);
}

ah_ns ah_lockstep_chain_ns(const ah_plan *p, const ah_replica *r, double whole, const ah_plan_options *o) {
    ah_ns slowest = 0;
    for (int j = 0; j + 1 < r->n_stages; j++) {
        ah_ns t = ah_lockstep_boundary_ns(p, r, j, whole, o);
        slowest = t > slowest ? t : slowest;
    }
    return ah_lockstep_chain_of(slowest, r->n_stages - 1);
}

double ah_ring_measured_gbs(const ah_plan_options *o, const ah_cluster *c, const int *nodes, int n) {
    double slowest = 0;
    for (int i = 0; o->links && n > 1 && i < n; i++) {
        int a = nodes[i], b = nodes[(i + 1) % n];
        double alpha, bw;
        if (a != b && ah_pair_link_measured(o, &c->nodes[a], &c->nodes[b], &alpha, &bw) &&
            (slowest == 0 || bw < slowest))
            slowest = bw;
    }
    return slowest;
}

double ah_nic_share_gbs(const ah_node *n) {
    return n->nic_gbit / 8.0 / (double)n->gpus;
}

double ah_dp_link_gbs(const ah_node *n) {
    double share = ah_nic_share_gbs(n);
    return share < n->dev.intra_bw_gbs ? share : n->dev.intra_bw_gbs;
}

double ah_dp_bandwidth_gbs(const ah_cluster *c, const unsigned char *used) {
    int n = 0, last = -1;
    double bw = 0.0;
    for (int i = 0; i < c->n_nodes; i++) {
        if (used && !used[i])
            continue;
        double s = ah_dp_link_gbs(&c->nodes[i]);
        if (n == 0 || s < bw)
            bw = s;
        n++;
        last = i;
    }
    if (n == 1)
        return c->nodes[last].dev.intra_bw_gbs;
    return bw;
}

int64_t ah_usable_bytes(const ah_device *d, const ah_plan_options *o) {
    const double gib = 1024.0 * 1024.0 * 1024.0;
    return (int64_t)((d->mem_gib - o->mem_reserve_gib) * gib);
}

int ah_plan_stage_op_times(const ah_plan *p, const ah_profile *prof, int replica, int stage, ah_stage_op_times *out,
                           char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (replica < 0 || replica >= p->n_replicas || stage < 0 || stage >= p->replicas[replica].n_stages) {
        snprintf(err, errlen, "no stage %d of replica %d in the plan", stage, replica);
        return -1;
    }
    const ah_stage *st = &p->replicas[replica].stages[stage];
    ah_plan_costs c;
    memset(&c, 0, sizeof c);
    const ah_layer_times *lt = ah_plan_costs_times(&c, p, prof, &p->cluster.nodes[st->node].dev, st->tp, err, errlen);
    if (!lt) {
        ah_plan_costs_free(&c);
        return -1;
    }
    out->first = st->layer_first;
    out->last = st->layer_last;
    out->fwd_s = ah_xcalloc((size_t)lt->n_layers + 1, sizeof(double));
    out->bwd_s = ah_xcalloc((size_t)lt->n_layers + 1, sizeof(double));
    for (int l = 0; l <= lt->n_layers; l++) {
        out->fwd_s[l] = ah_ns_to_s(lt->fwd[l]);
        out->bwd_s[l] = ah_ns_to_s(lt->bwd[l]);
    }
    out->update_s = ah_ns_to_s(
        ah_update_ns(lt->upd, st->layer_first, st->layer_last, p->train.dist_optimizer ? p->n_replicas : 1));
    ah_plan_costs_free(&c);
    return 0;
}

void ah_stage_op_times_free(ah_stage_op_times *t) {
    free(t->fwd_s);
    free(t->bwd_s);
    memset(t, 0, sizeof *t);
}
