/* Plan documents as JSON (schema: docs/plan-format.md).
 *
 * Writing serialises the whole ah_plan, structure and derived numbers, so the
 * document is self-contained. Reading parses and validates the structure
 * (cluster, model, train settings, replicas, stages) and also loads the
 * derived numbers, so a consumer that does not re-evaluate still sees them.
 * Every reading error is one line "<file>: <json path>: <what is wrong>". */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cjson/cJSON.h>

#include "util/errors.h"
#include "autohet/plan.h"
#include "util/atomic_file.h"
#include "util/json_file.h"
#include "util/json_read.h"
#include "util/num_text.h"
#include "model/model_json.h"

#define PLAN_FORMAT_NAME "autohet-plan"
#define MAX_PLAN_FILE_BYTES ((size_t)256 << 20)

#define set_err ah_errf

/* ------------------------------------------------------------------------ */
/* Writing                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct {
    int bad; /* an allocation failed */
} wctx;

static void wnum(wctx *w, cJSON *o, const char *k, double v) {
    if (!cJSON_AddNumberToObject(o, k, v))
        w->bad = 1;
}
static void wbool(wctx *w, cJSON *o, const char *k, int v) {
    if (!cJSON_AddBoolToObject(o, k, v ? 1 : 0))
        w->bad = 1;
}
static void wstr(wctx *w, cJSON *o, const char *k, const char *v) {
    if (!cJSON_AddStringToObject(o, k, v ? v : ""))
        w->bad = 1;
}
static cJSON *wobj(wctx *w, cJSON *o, const char *k) {
    cJSON *c = cJSON_AddObjectToObject(o, k);
    if (!c)
        w->bad = 1;
    return c;
}
static cJSON *warr(wctx *w, cJSON *o, const char *k) {
    cJSON *c = cJSON_AddArrayToObject(o, k);
    if (!c)
        w->bad = 1;
    return c;
}
static void wpush(wctx *w, cJSON *arr, cJSON *item) {
    if (!item || !arr || !cJSON_AddItemToArray(arr, item)) {
        cJSON_Delete(item);
        w->bad = 1;
    }
}

static void write_model(wctx *w, cJSON *o, const ah_model_config *m) {
    wstr(w, o, "name", m->name);
    wstr(w, o, "arch", ah_arch_name(m->arch));
    wnum(w, o, "hidden", m->hidden);
    wnum(w, o, "n_layers", m->n_layers);
    wnum(w, o, "n_heads", m->n_heads);
    wnum(w, o, "n_kv_heads", m->n_kv_heads);
    wnum(w, o, "ffn_hidden", m->ffn_hidden);
    wnum(w, o, "vocab", m->vocab);
    wnum(w, o, "max_positions", m->max_positions);
    wbool(w, o, "tied_embeddings", m->tied_embeddings);
    wnum(w, o, "num_layers_total", (double)m->n_layers + 2.0);
    wnum(w, o, "params", ah_model_total_params(m));
    if (o != NULL && ah_model_family_to_json(o, m) != 0) /* OPT, Qwen2, GPT-Neo details */
        w->bad = 1;
}

static void write_node(wctx *w, cJSON *o, const ah_node *n) {
    wstr(w, o, "name", n->name);
    wstr(w, o, "gpu_type", n->dev.name);
    wnum(w, o, "gpus", n->gpus);
    wnum(w, o, "nic_gbit", n->nic_gbit);
    wbool(w, o, "spot", n->spot);
    wnum(w, o, "price_per_hour", n->price_per_hour);
    if (n->host[0]) /* optional: plans without hosts are written as before */
        wstr(w, o, "host", n->host);
    /* Informational snapshot of the device figures the plan was made with;
     * readers take the figures from the catalog by gpu_type. */
    cJSON *d = wobj(w, o, "device");
    if (!d)
        return;
    wnum(w, d, "peak_tflops", n->dev.peak_tflops);
    wnum(w, d, "mem_gib", n->dev.mem_gib);
    wnum(w, d, "mem_bw_gbs", n->dev.mem_bw_gbs);
    wnum(w, d, "intra_bw_gbs", n->dev.intra_bw_gbs);
    wnum(w, d, "nic_gbit", n->dev.nic_gbit);
    wnum(w, d, "efficiency", n->dev.efficiency);
    wnum(w, d, "slowdown", n->dev.slowdown);
}

static void write_stage(wctx *w, cJSON *o, const ah_plan *p, const ah_stage *s, int id) {
    const ah_node *n = NULL;
    if (p->cluster.nodes && s->node >= 0 && s->node < p->cluster.n_nodes)
        n = &p->cluster.nodes[s->node];
    wnum(w, o, "id", id);
    if (n)
        wstr(w, o, "node", n->name);
    else if (!cJSON_AddNullToObject(o, "node"))
        w->bad = 1;
    wnum(w, o, "node_index", s->node);
    if (n)
        wstr(w, o, "gpu_type", n->dev.name);
    else if (!cJSON_AddNullToObject(o, "gpu_type"))
        w->bad = 1;
    wnum(w, o, "tp", s->tp);
    cJSON *g = warr(w, o, "gpus");
    for (int i = 0; g && i < s->tp; i++)
        wpush(w, g, cJSON_CreateNumber((double)s->gpu_first + i));
    cJSON *l = warr(w, o, "layers");
    if (l) {
        wpush(w, l, cJSON_CreateNumber(s->layer_first));
        wpush(w, l, cJSON_CreateNumber(s->layer_last));
    }
    wnum(w, o, "fwd_s", s->fwd_s);
    wnum(w, o, "bwd_s", s->bwd_s);
    wnum(w, o, "update_s", s->update_s);
    wnum(w, o, "sync_s", s->sync_s);
    wnum(w, o, "p2p_s", s->p2p_s);
    wbool(w, o, "p2p_inter_node", s->p2p_inter_node);
    wnum(w, o, "in_flight", s->in_flight);
    wnum(w, o, "memory_bytes", s->mem_bytes);
    wnum(w, o, "memory_capacity_bytes", s->mem_cap_bytes);
}

static void write_replica(wctx *w, cJSON *o, const ah_plan *p, const ah_replica *r, int id) {
    wnum(w, o, "id", id);
    wnum(w, o, "micro_batches", r->micro_batches);
    wnum(w, o, "samples", (double)r->micro_batches * (double)p->micro_batch);
    wnum(w, o, "time_s", r->time_s);
    wnum(w, o, "fill_drain_s", r->fill_drain_s);
    wnum(w, o, "bottleneck_s", r->bottleneck_s);
    wnum(w, o, "tail_s", r->tail_s);
    wnum(w, o, "bottleneck_stage", r->bottleneck_stage);
    cJSON *st = warr(w, o, "stages");
    for (int j = 0; st && r->stages && j < r->n_stages; j++) {
        cJSON *so = cJSON_CreateObject();
        if (so)
            write_stage(w, so, p, &r->stages[j], j);
        wpush(w, st, so);
    }
}

/* The top-level keys of the plan document ah_plan_to_json writes: the one
 * list by which the writer checks its document and refuses colliding extra
 * items, and the reader tells a document's other items ("comparison",
 * "top", ...) from the plan's. */
static const char *const PLAN_KEYS[] = {"format",
                                        "version",
                                        "strategy",
                                        "model",
                                        "train",
                                        "cluster",
                                        "tp",
                                        "micro_batch",
                                        "global_batch",
                                        "iteration_time_s",
                                        "iteration_time_ns",
                                        "tokens_per_s",
                                        "tflops_per_gpu",
                                        "hw_tflops_per_gpu",
                                        "mfu",
                                        "planning_time_s",
                                        "search_value_s",
                                        "search_value_ns",
                                        "candidates",
                                        "gpus_used",
                                        "gpus_total",
                                        "dp_bw_gbs",
                                        "bottleneck",
                                        "profile_source",
                                        "replicas"};

/* Whether key is a field of p's document: "tp" only when every stage has the
 * same degree (ah_plan_to_json writes it only then). */
static int plan_owns_key(const ah_plan *p, const char *key) {
    if (strcmp(key, "tp") == 0)
        return ah_plan_uniform_tp(p) > 0;
    for (size_t i = 0; i < sizeof PLAN_KEYS / sizeof PLAN_KEYS[0]; i++)
        if (strcmp(PLAN_KEYS[i], key) == 0)
            return 1;
    return 0;
}

cJSON *ah_plan_to_json(const ah_plan *p) {
    if (!p)
        return NULL;
    wctx w = {0};
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return NULL;

    wstr(&w, root, "format", PLAN_FORMAT_NAME);
    wnum(&w, root, "version", AH_PLAN_FORMAT_VERSION);
    wstr(&w, root, "strategy", p->strategy);

    cJSON *m = wobj(&w, root, "model");
    if (m)
        write_model(&w, m, &p->model);

    cJSON *t = wobj(&w, root, "train");
    if (t) {
        wnum(&w, t, "seq", p->train.seq);
        wstr(&w, t, "recompute", ah_recompute_name(p->train.recompute));
        wstr(&w, t, "precision", ah_precision_name(p->train.precision));
        wstr(&w, t, "p2p", ah_p2p_mode_name(p->train.p2p));
        cJSON_AddBoolToObject(t, "dist_optimizer", p->train.dist_optimizer != 0);
        wnum(&w, t, "mem_reserve_gib", p->mem_reserve_gib);
        wnum(&w, t, "global_batch", p->global_batch);
        wnum(&w, t, "micro_batch", p->micro_batch);
    }

    cJSON *c = wobj(&w, root, "cluster");
    cJSON *nodes = c ? warr(&w, c, "nodes") : NULL;
    for (int i = 0; nodes && p->cluster.nodes && i < p->cluster.n_nodes; i++) {
        cJSON *no = cJSON_CreateObject();
        if (no)
            write_node(&w, no, &p->cluster.nodes[i]);
        wpush(&w, nodes, no);
    }

    int tp = ah_plan_uniform_tp(p);
    if (tp > 0)
        wnum(&w, root, "tp", tp); /* info: every stage's TP degree (absent when stages differ) */
    wnum(&w, root, "micro_batch", p->micro_batch);
    wnum(&w, root, "global_batch", p->global_batch);

    wnum(&w, root, "iteration_time_s", p->iteration_time_s);
    wnum(&w, root, "iteration_time_ns", (double)p->iteration_time_ns);
    wnum(&w, root, "tokens_per_s", p->tokens_per_s);
    wnum(&w, root, "tflops_per_gpu", p->tflops_per_gpu);
    wnum(&w, root, "hw_tflops_per_gpu", p->hw_tflops_per_gpu);
    wnum(&w, root, "mfu", p->mfu);
    wnum(&w, root, "planning_time_s", p->planning_time_s);
    wnum(&w, root, "search_value_s", p->search_value_s);
    wnum(&w, root, "search_value_ns", (double)p->search_value_ns);
    wnum(&w, root, "candidates", (double)p->candidates);
    wnum(&w, root, "gpus_used", p->gpus_used);
    wnum(&w, root, "gpus_total", p->gpus_total);
    wnum(&w, root, "dp_bw_gbs", p->dp_bw_gbs);
    if (p->replicas && p->bottleneck_replica >= 0 && p->bottleneck_replica < p->n_replicas) {
        cJSON *b = wobj(&w, root, "bottleneck");
        if (b) {
            wnum(&w, b, "replica", p->bottleneck_replica);
            wnum(&w, b, "stage", p->replicas[p->bottleneck_replica].bottleneck_stage);
        }
    } else if (!cJSON_AddNullToObject(root, "bottleneck")) {
        w.bad = 1;
    }
    wstr(&w, root, "profile_source", p->profile_source);

    cJSON *reps = warr(&w, root, "replicas");
    for (int r = 0; reps && p->replicas && r < p->n_replicas; r++) {
        cJSON *ro = cJSON_CreateObject();
        if (ro)
            write_replica(&w, ro, p, &p->replicas[r], r);
        wpush(&w, reps, ro);
    }

    if (w.bad) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

/* cJSON prints doubles with 15 significant digits unless that reads back
 * "close enough", which can lose the last bit. The plan file promises exact
 * round trips, so every number is replaced by a raw item holding its
 * shortest representation that strtod() reads back bit for bit. Non-finite
 * numbers become null. */
static int exact_numbers(cJSON *parent) {
    for (cJSON *it = parent->child; it; it = it->next) {
        if (cJSON_IsArray(it) || cJSON_IsObject(it)) {
            if (exact_numbers(it) < 0)
                return -1;
            continue;
        }
        if (!cJSON_IsNumber(it))
            continue;
        char buf[AH_NUM_EXACT_LEN];
        ah_num_exact(buf, it->valuedouble);
        cJSON *raw = cJSON_CreateRaw(buf);
        if (!raw)
            return -1;
        /* move the key over; the replaced item is freed without it */
        raw->string = it->string;
        raw->type |= it->type & cJSON_StringIsConst;
        it->string = NULL;
        if (!cJSON_ReplaceItemViaPointer(parent, it, raw)) {
            it->string = raw->string;
            raw->string = NULL;
            cJSON_Delete(raw);
            return -1;
        }
        it = raw;
    }
    return 0;
}

int ah_plan_write_json(const ah_plan *p, const struct cJSON *extra, const char *path, char *err,
                       size_t errlen) {
    if (!path || !*path) {
        set_err(err, errlen, "plan output: no path given");
        return -1;
    }
    if (!p) {
        set_err(err, errlen, "%s: no plan to write", path);
        return -1;
    }
    if (extra && !cJSON_IsObject(extra)) {
        set_err(err, errlen, "%s: extra items must be a JSON object", path);
        return -1;
    }
    cJSON *root = ah_plan_to_json(p);
    if (!root) {
        set_err(err, errlen, "%s: out of memory building the plan document", path);
        return -1;
    }
    for (const cJSON *it = root->child; it; it = it->next) {
        if (!plan_owns_key(p, it->string)) { /* PLAN_KEYS fell behind ah_plan_to_json */
            set_err(err, errlen, "%s: internal: plan field \"%s\" is not in the plan's key list", path,
                    it->string);
            cJSON_Delete(root);
            return -1;
        }
    }
    if (extra) {
        for (const cJSON *it = extra->child; it; it = it->next) {
            if (!it->string)
                continue;
            if (plan_owns_key(p, it->string)) {
                set_err(err, errlen, "%s: extra item \"%s\" collides with a plan field", path, it->string);
                cJSON_Delete(root);
                return -1;
            }
            cJSON *dup = cJSON_Duplicate(it, 1);
            if (!dup || !cJSON_AddItemToObject(root, it->string, dup)) {
                cJSON_Delete(dup);
                cJSON_Delete(root);
                set_err(err, errlen, "%s: out of memory building the plan document", path);
                return -1;
            }
        }
    }
    if (exact_numbers(root) < 0) {
        cJSON_Delete(root);
        set_err(err, errlen, "%s: out of memory building the plan document", path);
        return -1;
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) {
        set_err(err, errlen, "%s: out of memory printing the plan document", path);
        return -1;
    }
    int rc = ah_write_text_output(path, text, err, errlen);
    cJSON_free(text);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Reading                                                                   */
/* ------------------------------------------------------------------------ */

static int read_model(const ah_err_ctx *c, const cJSON *root, ah_model_config *m) {
    char mp[AH_JPATH_LEN], path[AH_JPATH_LEN];
    const cJSON *o;
    if (ah_jget_obj(c, root, "", "model", 1, &o, mp) < 0)
        return -1;
    if (ah_jget_str(c, o, mp, "name", 1, m->name, sizeof m->name) < 0)
        return -1;
    /* a hand-written plan may name a preset and give nothing else */
    if (!cJSON_GetObjectItemCaseSensitive(o, "arch") && ah_model_preset(m->name, m) == 0)
        return 0;
    /* or a config.json by path (relative to the plan's directory) */
    size_t nlen = strlen(m->name);
    if (!cJSON_GetObjectItemCaseSensitive(o, "arch") && nlen > 5 && !strcmp(m->name + nlen - 5, ".json")) {
        char file[2048], why[1024];
        const char *slash = m->name[0] == '/' ? NULL : strrchr(c->name, '/');
        snprintf(file, sizeof file, "%.*s%s", slash ? (int)(slash - c->name + 1) : 0, c->name, m->name);
        if (ah_model_load_json(file, m, why, sizeof why) == 0)
            return 0;
        ah_jpath_key(path, mp, "name");
        return ah_jfail(c, path, "%s", why);
    }
    char arch[32];
    if (ah_jget_str(c, o, mp, "arch", 1, arch, sizeof arch) < 0)
        return -1;
    int found = 0;
    for (int a = AH_ARCH_GPT; a <= AH_ARCH_BERT; a++) {
        const char *nm = ah_arch_name((ah_arch)a);
        if (nm && strcasecmp(nm, arch) == 0) {
            m->arch = (ah_arch)a;
            found = 1;
        }
    }
    if (!found) {
        ah_jpath_key(path, mp, "arch");
        return ah_jfail(c, path, "unknown architecture \"%s\" (expected %s, %s or %s)", arch,
                        ah_arch_name(AH_ARCH_GPT), ah_arch_name(AH_ARCH_LLAMA), ah_arch_name(AH_ARCH_BERT));
    }
    /* the bounds of every model reader (autohet/model.h) */
    if (ah_jget_int(c, o, mp, "hidden", 1, 1, AH_MODEL_MAX_HIDDEN, &m->hidden) < 0 ||
        ah_jget_int(c, o, mp, "n_layers", 1, 1, AH_MODEL_MAX_LAYERS, &m->n_layers) < 0 ||
        ah_jget_int(c, o, mp, "n_heads", 1, 1, AH_MODEL_MAX_HEADS, &m->n_heads) < 0)
        return -1;
    m->n_kv_heads = m->n_heads;
    if (ah_jget_int(c, o, mp, "n_kv_heads", 0, 1, AH_MODEL_MAX_HEADS, &m->n_kv_heads) < 0 ||
        ah_jget_int(c, o, mp, "ffn_hidden", 1, 1, AH_MODEL_MAX_FFN, &m->ffn_hidden) < 0 ||
        ah_jget_int(c, o, mp, "vocab", 1, 1, AH_MODEL_MAX_VOCAB, &m->vocab) < 0 ||
        ah_jget_int(c, o, mp, "max_positions", 0, 0, AH_MODEL_MAX_POSITIONS, &m->max_positions) < 0 ||
        ah_jget_bool(c, o, mp, "tied_embeddings", 0, &m->tied_embeddings) < 0)
        return -1;
    int total = 0;
    int rc = ah_jget_int(c, o, mp, "num_layers_total", 0, 0, INT_MAX, &total);
    if (rc < 0)
        return -1;
    if (rc > 0 && total != m->n_layers + 2) {
        ah_jpath_key(path, mp, "num_layers_total");
        return ah_jfail(c, path, "%d does not equal n_layers + 2 = %d", total, m->n_layers + 2);
    }
    double params;
    if (ah_jget_num(c, o, mp, "params", 0, 1, &params) < 0) /* derived; type-checked only */
        return -1;
    return ah_model_family_from_json(c, o, mp, m);
}

static int read_train(const ah_err_ctx *c, const cJSON *root, ah_plan *p) {
    char tp[AH_JPATH_LEN], path[AH_JPATH_LEN];
    const cJSON *o;
    if (ah_jget_obj(c, root, "", "train", 1, &o, tp) < 0)
        return -1;
    if (ah_jget_int(c, o, tp, "seq", 1, 1, INT_MAX, &p->train.seq) < 0)
        return -1;
    char rcname[32];
    int rc = ah_jget_str(c, o, tp, "recompute", 0, rcname, sizeof rcname);
    if (rc < 0)
        return -1;
    p->train.recompute = AH_RECOMPUTE_NONE;
    if (rc > 0) {
        ah_recompute r;
        if (ah_recompute_parse(rcname, &r) != 0) {
            ah_jpath_key(path, tp, "recompute");
            return ah_jfail(c, path, "unknown recomputation \"%s\" (expected none, selective or full)",
                            rcname);
        }
        p->train.recompute = r;
    }
    /* absent: bf16, overlapped sends, no distributed optimizer (older plans) */
    char name[32];
    p->train.precision = AH_PRECISION_BF16;
    if ((rc = ah_jget_str(c, o, tp, "precision", 0, name, sizeof name)) < 0)
        return -1;
    if (rc > 0 && ah_precision_parse(name, &p->train.precision) != 0) {
        ah_jpath_key(path, tp, "precision");
        return ah_jfail(c, path, "unknown precision \"%s\" (expected bf16, fp16 or fp32)", name);
    }
    p->train.p2p = AH_P2P_OVERLAPPED;
    if ((rc = ah_jget_str(c, o, tp, "p2p", 0, name, sizeof name)) < 0)
        return -1;
    if (rc > 0 && ah_p2p_mode_parse(name, &p->train.p2p) != 0) {
        ah_jpath_key(path, tp, "p2p");
        return ah_jfail(c, path, "unknown p2p mode \"%s\" (expected overlapped or blocking)", name);
    }
    p->train.dist_optimizer = 0;
    if (ah_jget_bool(c, o, tp, "dist_optimizer", 0, &p->train.dist_optimizer) < 0)
        return -1;
    /* the memory held back per GPU that the plan's capacities leave out (absent: the planner's default) */
    p->mem_reserve_gib = 2.0;
    if (ah_jget_num(c, o, tp, "mem_reserve_gib", 0, 0, &p->mem_reserve_gib) < 0)
        return -1;
    if (!(p->mem_reserve_gib >= 0 && p->mem_reserve_gib <= 65536)) {
        ah_jpath_key(path, tp, "mem_reserve_gib");
        return ah_jfail(c, path, "%g: expected GiB from 0 to 65536", p->mem_reserve_gib);
    }
    return 0;
}

/* train.global_batch / train.micro_batch duplicate the top-level values. */
static int check_train_dup(const ah_err_ctx *c, const cJSON *root, const char *key, int value) {
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, "train");
    int v = 0;
    int rc = ah_jget_int(c, o, "train", key, 0, 1, INT_MAX, &v);
    if (rc < 0)
        return -1;
    if (rc > 0 && v != value) {
        char path[AH_JPATH_LEN];
        ah_jpath_key(path, "train", key);
        return ah_jfail(c, path, "%d does not match top-level %s %d", v, key, value);
    }
    return 0;
}

/* The optional "host" of cluster.nodes[i] (docs/multi-host.md): a hostname no earlier node names. */
static int read_node_host(const ah_err_ctx *c, const cJSON *it, const char *ip, ah_cluster *cl, int i) {
    char path[AH_JPATH_LEN], why[96];
    ah_node *nd = &cl->nodes[i];
    int rc = ah_jget_str(c, it, ip, "host", 0, nd->host, sizeof nd->host);
    if (rc <= 0)
        return rc;
    ah_jpath_key(path, ip, "host");
    if (ah_host_name_problem(nd->host, why, sizeof why))
        return ah_jfail(c, path, "%s", why);
    for (int k = 0; k < i; k++)
        if (strcasecmp(cl->nodes[k].host, nd->host) == 0)
            return ah_jfail(c, path, "host \"%s\" is also cluster.nodes[%d]", nd->host, k);
    return 0;
}

static int read_cluster(const ah_err_ctx *c, const ah_device_catalog *devices, const cJSON *root,
                        ah_cluster *cl) {
    char cp[AH_JPATH_LEN], np[AH_JPATH_LEN], ip[AH_JPATH_LEN], path[AH_JPATH_LEN];
    const cJSON *o, *nodes;
    if (ah_jget_obj(c, root, "", "cluster", 1, &o, cp) < 0)
        return -1;
    void *elems;
    if (ah_jget_list(c, o, cp, "nodes", "a plan needs at least one node", sizeof *cl->nodes, &nodes, &elems,
                     &cl->n_nodes, np) < 0)
        return -1;
    cl->nodes = elems;
    int i = 0;
    for (const cJSON *it = nodes->child; it; it = it->next, i++) {
        ah_node *nd = &cl->nodes[i];
        if (ah_jitem_obj(c, it, np, i, ip) < 0)
            return -1;
        if (ah_jget_str(c, it, ip, "name", 1, nd->name, sizeof nd->name) < 0)
            return -1;
        for (int k = 0; k < i; k++) {
            if (strcmp(cl->nodes[k].name, nd->name) == 0) {
                ah_jpath_key(path, ip, "name");
                return ah_jfail(c, path, "duplicate node name \"%s\" (also cluster.nodes[%d])", nd->name, k);
            }
        }
        char gpu[64];
        if (ah_jget_str(c, it, ip, "gpu_type", 1, gpu, sizeof gpu) < 0)
            return -1;
        const ah_device *d = ah_device_find(devices, gpu);
        if (!d) {
            ah_jpath_key(path, ip, "gpu_type");
            return ah_jfail(c, path, "unknown GPU type \"%s\" (not in the device catalog)", gpu);
        }
        nd->dev = *d;
        if (ah_jget_int(c, it, ip, "gpus", 1, 1, INT_MAX, &nd->gpus) < 0)
            return -1;
        nd->nic_gbit = d->nic_gbit;
        if (ah_jget_num(c, it, ip, "nic_gbit", 0, 0, &nd->nic_gbit) < 0)
            return -1;
        if (!(nd->nic_gbit >= 0) || !isfinite(nd->nic_gbit)) {
            ah_jpath_key(path, ip, "nic_gbit");
            return ah_jfail(c, path, "expected a non-negative bandwidth in Gbit/s");
        }
        if (ah_jget_bool(c, it, ip, "spot", 0, &nd->spot) < 0 ||
            ah_jget_num(c, it, ip, "price_per_hour", 0, 0, &nd->price_per_hour) < 0)
            return -1;
        if (read_node_host(c, it, ip, cl, i) < 0)
            return -1;
    }
    return 0;
}

/* A stage's TP degree: a power of two dividing the attention and KV heads
 * (the engine splits heads across the group; so does the cost model). */
static int read_stage_tp(const ah_err_ctx *c, const cJSON *so, const char *sp, const ah_plan *p, int plan_tp,
                         ah_stage *s) {
    char path[AH_JPATH_LEN];
    int rc = ah_jget_int(c, so, sp, "tp", plan_tp > 0 ? 0 : 1, 1, AH_MAX_TP, &s->tp);
    if (rc < 0)
        return -1;
    if (rc == 0)
        s->tp = plan_tp;
    ah_jpath_key(path, sp, "tp");
    if (plan_tp > 0 && p->version == 1 && s->tp != plan_tp)
        return ah_jfail(c, path,
                        "%d differs from the plan's tp %d (version 1 has one TP degree; use version 2)",
                        s->tp, plan_tp);
    char why[160];
    if (ah_stage_tp_problem(&p->model, s->tp, why, sizeof why) != 0)
        return ah_jfail(c, path, "%s", why);
    if (plan_tp > 0 && s->tp != plan_tp) /* the writer gives a top-level tp only when every stage has it */
        return ah_jfail(c, path,
                        "%d contradicts the plan's top-level tp %d (leave tp out at the top when stages "
                        "differ)",
                        s->tp, plan_tp);
    return 0;
}

static int read_stage(const ah_err_ctx *c, const ah_device_catalog *devices, const cJSON *so, const char *sp,
                      ah_plan *p, int plan_tp, ah_stage *s) {
    char path[AH_JPATH_LEN];
    const cJSON *v;
    const ah_cluster *cl = &p->cluster;
    if (!cJSON_IsObject(so))
        return ah_jfail(c, sp, "expected an object, got %s", ah_json_type_name(so));

    /* node: node_index (authoritative) and/or node name */
    int have_idx = ah_jget_int(c, so, sp, "node_index", 0, INT_MIN, INT_MAX, &s->node);
    if (have_idx < 0)
        return -1;
    if (have_idx > 0 && (s->node < 0 || s->node >= cl->n_nodes)) {
        ah_jpath_key(path, sp, "node_index");
        return ah_jfail(c, path, "node index %d out of range (the cluster has %d node%s)", s->node,
                        cl->n_nodes, cl->n_nodes == 1 ? "" : "s");
    }
    int rc = ah_jmember(c, so, sp, "node", 0, &v, path);
    if (rc > 0 && !(have_idx > 0 && cJSON_IsNull(v))) {
        if (!cJSON_IsString(v) || !v->valuestring)
            return ah_jfail(c, path, "expected a node name, got %s", ah_json_type_name(v));
        int k = ah_cluster_node_index(cl, v->valuestring);
        if (k < 0)
            return ah_jfail(c, path, "no node named \"%s\" in cluster.nodes", v->valuestring);
        if (have_idx > 0 && k != s->node)
            return ah_jfail(c, path, "\"%s\" is cluster.nodes[%d] but node_index is %d", v->valuestring, k,
                            s->node);
        s->node = k;
    } else if (have_idx == 0) {
        ah_jpath_key(path, sp, "node_index");
        return ah_jfail(c, path, "missing (a stage needs node_index or node)");
    }
    const ah_node *nd = &cl->nodes[s->node];

    char gpu[64];
    rc = ah_jget_str(c, so, sp, "gpu_type", 0, gpu, sizeof gpu);
    if (rc < 0)
        return -1;
    if (rc > 0) {
        const ah_device *d = ah_device_find(devices, gpu);
        if (!d || strcmp(d->name, nd->dev.name) != 0) {
            ah_jpath_key(path, sp, "gpu_type");
            return ah_jfail(c, path, "\"%s\" does not match node \"%s\" (%s)", gpu, nd->name, nd->dev.name);
        }
    }

    /* gpus: [g0, g0+1, ..., g0+tp-1] within the node */
    if (read_stage_tp(c, so, sp, p, plan_tp, s) < 0)
        return -1;
    char gp[AH_JPATH_LEN];
    if (ah_jget_arr(c, so, sp, "gpus", 1, &v, gp) < 0)
        return -1;
    int ng = cJSON_GetArraySize(v);
    if (ng != s->tp)
        return ah_jfail(c, gp, "expected %d GPU indices (tp = %d), got %d", s->tp, s->tp, ng);
    int i = 0;
    for (const cJSON *g = v->child; g; g = g->next, i++) {
        double d = cJSON_IsNumber(g) ? g->valuedouble : NAN;
        if (!isfinite(d) || d != floor(d) || d < 0 || d >= (double)nd->gpus) {
            ah_jpath_index(path, gp, i);
            if (!cJSON_IsNumber(g))
                return ah_jfail(c, path, "expected a GPU index, got %s", ah_json_type_name(g));
            return ah_jfail(c, path, "GPU %g out of range (node \"%s\" has %d GPUs)", d, nd->name, nd->gpus);
        }
        if (i == 0)
            s->gpu_first = (int)d;
        else if ((int)d != s->gpu_first + i)
            return ah_jfail(c, gp, "expected consecutive GPU indices %d..%d", s->gpu_first,
                            s->gpu_first + s->tp - 1);
    }

    /* layers: [first, last_exclusive] */
    char lp[AH_JPATH_LEN];
    if (ah_jmember(c, so, sp, "layers", 1, &v, lp) < 0)
        return -1;
    int total = p->model.n_layers + 2;
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2 || !cJSON_IsNumber(v->child) ||
        !cJSON_IsNumber(v->child->next) || v->child->valuedouble != floor(v->child->valuedouble) ||
        v->child->next->valuedouble != floor(v->child->next->valuedouble))
        return ah_jfail(c, lp, "expected [first, last_exclusive]");
    double f = v->child->valuedouble, l = v->child->next->valuedouble;
    if (!(f >= 0 && f < l && l <= total))
        return ah_jfail(c, lp, "[%g, %g) is not a non-empty range within [0, %d)", f, l, total);
    s->layer_first = (int)f;
    s->layer_last = (int)l;

    /* derived */
    if (ah_jget_num(c, so, sp, "fwd_s", 0, 1, &s->fwd_s) < 0 ||
        ah_jget_num(c, so, sp, "bwd_s", 0, 1, &s->bwd_s) < 0 ||
        ah_jget_num(c, so, sp, "update_s", 0, 1, &s->update_s) < 0 ||
        ah_jget_num(c, so, sp, "sync_s", 0, 1, &s->sync_s) < 0 ||
        ah_jget_num(c, so, sp, "p2p_s", 0, 1, &s->p2p_s) < 0 ||
        ah_jget_bool(c, so, sp, "p2p_inter_node", 0, &s->p2p_inter_node) < 0 ||
        ah_jget_int(c, so, sp, "in_flight", 0, 0, INT_MAX, &s->in_flight) < 0 ||
        ah_jget_num(c, so, sp, "memory_bytes", 0, 1, &s->mem_bytes) < 0 ||
        ah_jget_num(c, so, sp, "memory_capacity_bytes", 0, 1, &s->mem_cap_bytes) < 0)
        return -1;
    return 0;
}

static int read_replicas(const ah_err_ctx *c, const ah_device_catalog *devices, const cJSON *root, ah_plan *p,
                         int plan_tp) {
    char rp[AH_JPATH_LEN], ip[AH_JPATH_LEN], stp[AH_JPATH_LEN], sp[AH_JPATH_LEN], path[AH_JPATH_LEN];
    const cJSON *arr;
    void *elems;
    if (ah_jget_list(c, root, "", "replicas", "a plan needs at least one replica", sizeof *p->replicas, &arr,
                     &elems, &p->n_replicas, rp) < 0)
        return -1;
    p->replicas = elems;
    int r = 0;
    for (const cJSON *ro = arr->child; ro; ro = ro->next, r++) {
        ah_replica *rep = &p->replicas[r];
        if (ah_jitem_obj(c, ro, rp, r, ip) < 0 ||
            ah_jget_int(c, ro, ip, "micro_batches", 1, 1, INT_MAX, &rep->micro_batches) < 0)
            return -1;
        const cJSON *stages;
        if (ah_jget_list(c, ro, ip, "stages", "a replica needs at least one stage", sizeof *rep->stages,
                         &stages, &elems, &rep->n_stages, stp) < 0)
            return -1;
        rep->stages = elems;
        int ns = rep->n_stages;
        int j = 0;
        for (const cJSON *so = stages->child; so; so = so->next, j++) {
            ah_jpath_index(sp, stp, j);
            if (read_stage(c, devices, so, sp, p, plan_tp, &rep->stages[j]) < 0)
                return -1;
        }
        if (ah_jget_num(c, ro, ip, "time_s", 0, 1, &rep->time_s) < 0 ||
            ah_jget_num(c, ro, ip, "fill_drain_s", 0, 1, &rep->fill_drain_s) < 0 ||
            ah_jget_num(c, ro, ip, "bottleneck_s", 0, 1, &rep->bottleneck_s) < 0 ||
            ah_jget_num(c, ro, ip, "tail_s", 0, 1, &rep->tail_s) < 0 ||
            ah_jget_int(c, ro, ip, "bottleneck_stage", 0, 0, ns - 1, &rep->bottleneck_stage) < 0)
            return -1;
    }

    /* Cross-stage structure: each replica covers all layers once, in order. */
    int total = p->model.n_layers + 2;
    long long samples = 0;
    for (r = 0; r < p->n_replicas; r++) {
        const ah_replica *rep = &p->replicas[r];
        for (int j = 0; j < rep->n_stages; j++) {
            const ah_stage *s = &rep->stages[j];
            int expect = j == 0 ? 0 : rep->stages[j - 1].layer_last;
            if (s->layer_first != expect) {
                snprintf(path, sizeof path, "replicas[%d].stages[%d].layers", r, j);
                return ah_jfail(c, path,
                                "starts at layer %d, expected %d (stages must cover layers "
                                "0..%d contiguously, in order)",
                                s->layer_first, expect, total - 1);
            }
        }
        if (rep->stages[rep->n_stages - 1].layer_last != total) {
            snprintf(path, sizeof path, "replicas[%d].stages[%d].layers", r, rep->n_stages - 1);
            return ah_jfail(c, path, "last stage ends at layer %d, expected %d (num_layers_total)",
                            rep->stages[rep->n_stages - 1].layer_last, total);
        }
        samples += (long long)rep->micro_batches * p->micro_batch;
        if (samples > INT_MAX)
            break; /* already wrong; avoid overflow */
    }
    if (samples != p->global_batch)
        return ah_jfail(c, "replicas",
                        "micro_batches x micro_batch sum to %lld sequences, expected "
                        "global_batch %d",
                        samples, p->global_batch);

    /* No GPU is used by two stages. */
    for (r = 0; r < p->n_replicas; r++) {
        for (int j = 0; j < p->replicas[r].n_stages; j++) {
            const ah_stage *s = &p->replicas[r].stages[j];
            for (int r2 = 0; r2 <= r; r2++) {
                int jmax = r2 == r ? j : p->replicas[r2].n_stages;
                for (int j2 = 0; j2 < jmax; j2++) {
                    const ah_stage *t = &p->replicas[r2].stages[j2];
                    if (t->node == s->node && t->gpu_first < s->gpu_first + s->tp &&
                        s->gpu_first < t->gpu_first + t->tp) {
                        snprintf(path, sizeof path, "replicas[%d].stages[%d].gpus", r, j);
                        return ah_jfail(c, path,
                                        "GPUs %d-%d of node \"%s\" are already used by "
                                        "replicas[%d].stages[%d]",
                                        s->gpu_first, s->gpu_first + s->tp - 1,
                                        p->cluster.nodes[s->node].name, r2, j2);
                    }
                }
            }
        }
    }
    return 0;
}

static int read_plan(const ah_err_ctx *c, const ah_device_catalog *devices, const cJSON *root, ah_plan *p) {
    char path[AH_JPATH_LEN];
    const cJSON *v;
    if (!cJSON_IsObject(root))
        return ah_jfail(c, "", "expected a JSON object, got %s", ah_json_type_name(root));

    int rc = ah_jmember(c, root, "", "format", 1, &v, path);
    if (rc < 0)
        return -1;
    if (!cJSON_IsString(v) || strcmp(v->valuestring, PLAN_FORMAT_NAME) != 0)
        return ah_jfail(c, "format", "expected \"%s\" (not an autohet plan document)", PLAN_FORMAT_NAME);
    rc = ah_jmember(c, root, "", "version", 1, &v, path);
    if (rc < 0)
        return -1;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
        return ah_jfail(c, "version", "expected an integer, got %s", ah_json_type_name(v));
    if (v->valuedouble != 1 && v->valuedouble != AH_PLAN_FORMAT_VERSION)
        return ah_jfail(c, "version", "unsupported plan format version %g (this reader supports 1 and %d)",
                        v->valuedouble, AH_PLAN_FORMAT_VERSION);
    p->version = (int)v->valuedouble;

    rc = ah_jget_str(c, root, "", "strategy", 0, p->strategy, sizeof p->strategy);
    if (rc < 0)
        return -1;
    if (rc == 0)
        snprintf(p->strategy, sizeof p->strategy, "%s", ah_strategy_name(AH_STRATEGY_AUTOHET));

    if (read_model(c, root, &p->model) < 0 || read_train(c, root, p) < 0)
        return -1;
    /* a plan the engine could not train (it refuses a sequence beyond the position table) */
    char why[256];
    if (ah_model_check_seq(&p->model, p->train.seq, "", why, sizeof why) != 0)
        return ah_jfail(c, "train.seq", "%s", why);
    if (read_cluster(c, devices, root, &p->cluster) < 0)
        return -1;

    /* version 1: one TP degree for the plan; version 2: per stage (a
     * top-level tp, when given, is every stage's default) */
    int plan_tp = 0;
    if (ah_jget_int(c, root, "", "tp", p->version == 1, 1, AH_MAX_TP, &plan_tp) < 0 ||
        ah_jget_int(c, root, "", "micro_batch", 1, 1, INT_MAX, &p->micro_batch) < 0 ||
        ah_jget_int(c, root, "", "global_batch", 1, 1, INT_MAX, &p->global_batch) < 0 ||
        check_train_dup(c, root, "micro_batch", p->micro_batch) < 0 ||
        check_train_dup(c, root, "global_batch", p->global_batch) < 0)
        return -1;

    if (read_replicas(c, devices, root, p, plan_tp) < 0)
        return -1;

    /* derived top-level numbers */
    if (ah_jget_num(c, root, "", "iteration_time_s", 0, 1, &p->iteration_time_s) < 0 ||
        ah_jget_num(c, root, "", "tokens_per_s", 0, 1, &p->tokens_per_s) < 0 ||
        ah_jget_num(c, root, "", "tflops_per_gpu", 0, 1, &p->tflops_per_gpu) < 0 ||
        ah_jget_num(c, root, "", "hw_tflops_per_gpu", 0, 1, &p->hw_tflops_per_gpu) < 0 ||
        ah_jget_num(c, root, "", "mfu", 0, 1, &p->mfu) < 0 ||
        ah_jget_num(c, root, "", "planning_time_s", 0, 1, &p->planning_time_s) < 0 ||
        ah_jget_num(c, root, "", "search_value_s", 0, 1, &p->search_value_s) < 0 ||
        ah_jget_ll(c, root, "", "iteration_time_ns", 0, -1, &p->iteration_time_ns) < 0 ||
        ah_jget_ll(c, root, "", "search_value_ns", 0, LLONG_MIN, &p->search_value_ns) < 0 ||
        ah_jget_ll(c, root, "", "candidates", 0, 0, &p->candidates) < 0 ||
        ah_jget_int(c, root, "", "gpus_used", 0, 0, INT_MAX, &p->gpus_used) < 0 ||
        ah_jget_int(c, root, "", "gpus_total", 0, 0, INT_MAX, &p->gpus_total) < 0 ||
        ah_jget_num(c, root, "", "dp_bw_gbs", 0, 1, &p->dp_bw_gbs) < 0 ||
        ah_jget_str(c, root, "", "profile_source", 0, p->profile_source, sizeof p->profile_source) < 0)
        return -1;

    rc = ah_jmember(c, root, "", "bottleneck", 0, &v, path);
    if (rc > 0 && !cJSON_IsNull(v)) {
        if (!cJSON_IsObject(v))
            return ah_jfail(c, path, "expected {\"replica\": r, \"stage\": s}, got %s", ah_json_type_name(v));
        int br = 0, bs = 0;
        if (ah_jget_int(c, v, path, "replica", 1, 0, p->n_replicas - 1, &br) < 0)
            return -1;
        rc = ah_jget_int(c, v, path, "stage", 1, 0, p->replicas[br].n_stages - 1, &bs);
        if (rc < 0)
            return -1;
        p->bottleneck_replica = br;
        p->replicas[br].bottleneck_stage = bs;
    }
    return 0;
}

/* The items of root that are not fields of p, moved into a new object. */
static cJSON *take_extras(cJSON *root, const ah_plan *p) {
    cJSON *extra = cJSON_CreateObject();
    for (cJSON *it = root->child, *next; extra && it; it = next) {
        next = it->next;
        if (!it->string || plan_owns_key(p, it->string))
            continue;
        cJSON *item = cJSON_DetachItemViaPointer(root, it);
        if (!cJSON_AddItemToObject(extra, item->string, item)) {
            cJSON_Delete(item);
            cJSON_Delete(extra);
            extra = NULL;
        }
    }
    return extra;
}

int ah_plan_read_json_extras(const char *path, const ah_device_catalog *devices, ah_plan *out,
                             struct cJSON **extra, char *err, size_t errlen) {
    if (out)
        memset(out, 0, sizeof *out);
    if (extra)
        *extra = NULL;
    if (!path || !out || !devices) {
        set_err(err, errlen, "plan: no file, device catalog or output given");
        return -1;
    }
    ah_err_ctx c = {path, err, errlen};

    cJSON *root = ah_json_parse_file(path, MAX_PLAN_FILE_BYTES, 0, err, errlen);
    if (!root)
        return -1;

    ah_plan p;
    memset(&p, 0, sizeof p);
    int rc = read_plan(&c, devices, root, &p);
    if (rc == 0 && extra && !(*extra = take_extras(root, &p))) {
        set_err(err, errlen, "%s: out of memory", path);
        rc = -1;
    }
    cJSON_Delete(root);
    if (rc < 0) {
        ah_plan_free(&p);
        return -1;
    }
    *out = p;
    return 0;
}

int ah_plan_read_json(const char *path, const ah_device_catalog *devices, ah_plan *out, char *err,
                      size_t errlen) {
    return ah_plan_read_json_extras(path, devices, out, NULL, err, errlen);
}
