/* Transformer layers of the training engine (see model.h). Every buffer is a
 * backend buffer and every op goes through the backend table (backend.h). */
#include "engine/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/data.h"
#include "engine/backend.h"
#include "util/errors.h"

#include <omp.h>

/* AUTOHET_PROFILE=1: wall time per kernel kind, printed at exit (engine tuning);
 * AUTOHET_PROFILE=cpu: the process's CPU time instead, which a shared, loaded
 * machine disturbs less (with one thread it is the op's own compute time). */
enum { K_LINEAR, K_ATTN, K_NORM, K_ACT, K_HEAD, K_MISC, K_ALLOC, K_N };
static const char *k_names[K_N] = {"linear", "attention", "norm", "activation", "head+loss", "misc", "alloc"};
static double k_time[K_N];
static int k_on = -1; /* -1 unread, 0 off, 1 wall time, 2 CPU time */
static void k_report(void) {
    double tot = 0;
    for (int i = 0; i < K_N; i++)
        tot += k_time[i];
    fprintf(stderr, "autohet engine profile (%s s):", k_on == 2 ? "CPU" : "wall");
    for (int i = 0; i < K_N; i++)
        fprintf(stderr, " %s %.3f (%.0f%%)", k_names[i], k_time[i], 100 * k_time[i] / (tot > 0 ? tot : 1));
    fprintf(stderr, "\n");
}
static int k_enabled(void) {
    if (k_on < 0) {
        const char *v = getenv("AUTOHET_PROFILE");
        k_on = v == NULL ? 0 : strcmp(v, "cpu") == 0 ? 2 : 1;
        if (k_on)
            atexit(k_report);
    }
    return k_on;
}
static double k_now(void) {
    if (k_on == 2) {
        struct timespec ts;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
        return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    }
    return omp_get_wtime();
}
#define KT(kind, stmt)                                                                                       \
    do {                                                                                                     \
        double t0_ = k_enabled() ? k_now() : 0;                                                              \
        stmt;                                                                                                \
        if (k_on)                                                                                            \
            k_time[kind] += k_now() - t0_;                                                                   \
    } while (0)

#define xcalloc ah_xcalloc

/* An op of the model's backend: BK(e, linear_fwd, out, ...). */
#define BK(e, op, ...) (e)->be->op((e)->be->ctx, __VA_ARGS__)
#define NOBUF ah__dptr_null()

/* ---- deterministic initialisation ------------------------------------------ */

/* N(0, std) from a 64-bit key (Box-Muller on two hashed uniforms). */
static float normal_from(uint64_t key, float std) {
    uint64_t a = ah_hash64(key), b = ah_hash64(key ^ 0xd1b54a32d192ed03ull);
    double u1 = ((double)(a >> 11) + 0.5) / 9007199254740992.0;
    double u2 = (double)(b >> 11) / 9007199254740992.0;
    return (float)(std * sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

static void fill(float *dst, size_t n, float v) {
    for (size_t i = 0; i < n; i++)
        dst[i] = v;
}

/* ---- layer layout ------------------------------------------------------------ */

typedef struct {
    ah_eng_layer *L;
    size_t off, goff;
} layout;

/* A tensor whose local shard is [lrows x lcols] of the full [grows x gcols];
 * row_of maps local rows to global rows (NULL = rows row0..), col0 is the
 * first global column. */
static void add_tensor(layout *lo, const char *name, int lrows, int lcols, int grows, int gcols,
                       const int *row_of, int row0, int col0, int decay, int replicated) {
    ah_tensor_info *t = &lo->L->t[lo->L->n_tensors++];
    t->name = name;
    t->offset = lo->off;
    t->size = (size_t)lrows * lcols;
    t->decay = decay;
    t->replicated = replicated;
    t->lrows = lrows;
    t->lcols = lcols;
    t->grows = grows;
    t->gcols = gcols;
    t->col0 = col0;
    t->row_of = xcalloc((size_t)lrows + 1, sizeof(int));
    for (int r = 0; r < lrows; r++)
        t->row_of[r] = row_of ? row_of[r] : row0 + r;
    t->goffset = lo->goff;
    lo->off += t->size;
    lo->goff += (size_t)grows * gcols;
}

static ah_dptr P(const ah_eng_layer *L, int i) {
    return ah__dptr_at(L->param, L->t[i].offset);
}
static ah_dptr G(const ah_eng_layer *L, int i) {
    return ah__dptr_at(L->grad, L->t[i].offset);
}

/* Tensor indices per layer kind. */
enum { E_WTE = 0, E_WPE, E_PROJ };
enum { H_NW = 0, H_NB, H_LM, H_PROJ };
/* GPT block */
enum { B_LN1W = 0, B_LN1B, B_QKVW, B_QKVB, B_PROJW, B_PROJB, B_LN2W, B_LN2B, B_FCW, B_FCB, B_FCPW, B_FCPB };
/* LLaMA block */
enum { Q_RMS1 = 0, Q_QW, Q_KW, Q_VW, Q_OW, Q_RMS2, Q_GUW, Q_DOWNW, Q_QB, Q_KB, Q_VB };

static int is_llama(const ah_engine_model *e) {
    return e->cfg.arch == AH_ARCH_LLAMA;
}
static int head_dim(const ah_engine_model *e) {
    return e->cfg.hidden / e->cfg.n_heads;
}
/* Width of the token embeddings and the LM head's rows (OPT's word_embed_proj_dim). */
static int embed_width(const ah_engine_model *e) {
    return ah_model_embed_width(&e->cfg);
}
/* OPT's project_in / project_out between the embedding width and hidden. */
static int has_proj(const ah_engine_model *e) {
    return embed_width(e) != e->cfg.hidden;
}

/* The tensors of layer l with their shard geometry; fills L->t. */
static void describe_layer(const ah_engine_model *e, ah_eng_layer *L, int l) {
    const ah_model_config *c = &e->cfg;
    int C = c->hidden, V = c->vocab, Fg = c->ffn_hidden, D = head_dim(e), t = e->tp, r = e->tp_rank,
        E = embed_width(e), Pn = c->max_positions + c->pos_offset, hn = !is_llama(e) && !c->post_norm;
    int Hl = c->n_heads / t, Hkvl = c->n_kv_heads / t, Fl = Fg / t;
    layout lo = {L, 0, 0};
    L->index = l;
    L->kind = ah_model_layer_kind(c, l);
    int *rows = xcalloc((size_t)3 * C + (size_t)2 * Fg + 1, sizeof(int));
    if (L->kind == AH_LAYER_EMBED) {
        add_tensor(&lo, "wte", V, E, V, E, NULL, 0, 0, 1, 1);
        if (!is_llama(e)) /* OPT: pos_offset rows before position 0 */
            add_tensor(&lo, "wpe", Pn, C, Pn, C, NULL, 0, 0, 1, 1);
        if (has_proj(e))
            add_tensor(&lo, "proj_in", C, E, C, E, NULL, 0, 0, 1, 1);
    } else if (L->kind == AH_LAYER_HEAD) {
        /* no final norm after post-LN blocks (OPT do_layer_norm_before false) */
        add_tensor(&lo, "norm_w", c->post_norm ? 0 : 1, C, c->post_norm ? 0 : 1, C, NULL, 0, 0, 0, 1);
        add_tensor(&lo, "norm_b", hn, C, hn, C, NULL, 0, 0, 0, 1);
        add_tensor(&lo, "lm_head", V, E, V, E, NULL, 0, 0, 1, 1);
        /* the weight rows [V, Vp) of the padded vocabulary right after lm_head:
         * zeros, never a gradient, in no checkpoint, not in the full layout */
        lo.off += (size_t)(ah_model_padded_vocab(c) - V) * E;
        if (has_proj(e))
            add_tensor(&lo, "proj_out", E, C, E, C, NULL, 0, 0, 1, 1);
    } else if (!is_llama(e)) {
        /* qkv: q rows [0,C), k rows [C,2C), v rows [2C,3C) of the global [3C, C] */
        for (int part = 0; part < 3; part++)
            for (int i = 0; i < Hl * D; i++)
                rows[part * Hl * D + i] = part * C + r * Hl * D + i;
        add_tensor(&lo, "ln1_w", 1, C, 1, C, NULL, 0, 0, 0, 1);
        add_tensor(&lo, "ln1_b", 1, C, 1, C, NULL, 0, 0, 0, 1);
        add_tensor(&lo, "qkv_w", 3 * Hl * D, C, 3 * C, C, rows, 0, 0, 1, 0);
        /* the bias is a [1, 3C] row: its columns follow the same head split */
        ah_tensor_info *qb = &L->t[L->n_tensors];
        int nb = c->no_qkv_bias ? 0 : 1; /* GPT-Neo: no q/k/v biases (an empty tensor keeps the indices) */
        add_tensor(&lo, "qkv_b", nb, 3 * Hl * D, nb, 3 * C, NULL, 0, 0, 0, 0);
        qb->col0 = -1; /* special: column map = rows[] */
        add_tensor(&lo, "proj_w", C, Hl * D, C, C, NULL, 0, r * Hl * D, 1, 0);
        add_tensor(&lo, "proj_b", 1, C, 1, C, NULL, 0, 0, 0, 1);
        add_tensor(&lo, "ln2_w", 1, C, 1, C, NULL, 0, 0, 0, 1);
        add_tensor(&lo, "ln2_b", 1, C, 1, C, NULL, 0, 0, 0, 1);
        add_tensor(&lo, "fc_w", Fl, C, Fg, C, NULL, r * Fl, 0, 1, 0);
        add_tensor(&lo, "fc_b", 1, Fl, 1, Fg, NULL, 0, r * Fl, 0, 0);
        add_tensor(&lo, "fcproj_w", C, Fl, C, Fg, NULL, 0, r * Fl, 1, 0);
        add_tensor(&lo, "fcproj_b", 1, C, 1, C, NULL, 0, 0, 0, 1);
    } else {
        add_tensor(&lo, "rms1_w", 1, C, 1, C, NULL, 0, 0, 0, 1);
        add_tensor(&lo, "q_w", Hl * D, C, c->n_heads * D, C, NULL, r * Hl * D, 0, 1, 0);
        add_tensor(&lo, "k_w", Hkvl * D, C, c->n_kv_heads * D, C, NULL, r * Hkvl * D, 0, 1, 0);
        add_tensor(&lo, "v_w", Hkvl * D, C, c->n_kv_heads * D, C, NULL, r * Hkvl * D, 0, 1, 0);
        add_tensor(&lo, "o_w", C, Hl * D, C, c->n_heads * D, NULL, 0, r * Hl * D, 1, 0);
        add_tensor(&lo, "rms2_w", 1, C, 1, C, NULL, 0, 0, 0, 1);
        /* gate rows [0,F) and up rows [F,2F) of the global [2F, C] */
        for (int i = 0; i < Fl; i++) {
            rows[i] = r * Fl + i;
            rows[Fl + i] = Fg + r * Fl + i;
        }
        add_tensor(&lo, "gate_up_w", 2 * Fl, C, 2 * Fg, C, rows, 0, 0, 1, 0);
        add_tensor(&lo, "down_w", C, Fl, C, Fg, NULL, 0, r * Fl, 1, 0);
        if (c->qkv_bias) { /* Qwen2: [1, heads * D] rows split by heads like the weights */
            add_tensor(&lo, "q_b", 1, Hl * D, 1, c->n_heads * D, NULL, 0, r * Hl * D, 0, 0);
            add_tensor(&lo, "k_b", 1, Hkvl * D, 1, c->n_kv_heads * D, NULL, 0, r * Hkvl * D, 0, 0);
            add_tensor(&lo, "v_b", 1, Hkvl * D, 1, c->n_kv_heads * D, NULL, 0, r * Hkvl * D, 0, 0);
        }
    }
    /* column map of the GPT qkv bias: the same split as the qkv rows */
    for (int i = 0; i < L->n_tensors; i++)
        if (L->t[i].col0 == -1) {
            free(L->t[i].row_of);
            L->t[i].row_of = xcalloc((size_t)L->t[i].lcols + 1, sizeof(int));
            for (int q = 0; q < L->t[i].lcols; q++)
                L->t[i].row_of[q] = rows[q]; /* used as a column map, see col_of() */
        }
    L->n = lo.off;
    free(rows);
}

void ah__engine_layer_describe(const ah_model_config *cfg, int l, int tp, int tp_rank, ah_eng_layer *out) {
    ah_engine_model e = {.cfg = *cfg, .tp = tp, .tp_rank = tp_rank};
    memset(out, 0, sizeof *out);
    describe_layer(&e, out, l);
}

void ah__engine_layer_info_free(ah_eng_layer *L) {
    for (int k = 0; k < L->n_tensors; k++)
        free(L->t[k].row_of);
    memset(L, 0, sizeof *L);
}

/* Runs of a layer buffer, merged where they touch. */
typedef struct {
    ah_float_run *r;
    int n, cap;
} run_list;

static void run_add(run_list *l, size_t off, size_t n) {
    if (l->n && l->r[l->n - 1].off + l->r[l->n - 1].n == off) {
        l->r[l->n - 1].n += n;
        return;
    }
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->r = ah_xrealloc(l->r, sizeof(ah_float_run) * (size_t)l->cap);
    }
    l->r[l->n++] = (ah_float_run){off, n};
}

/* the local (row, column) of `mine` holding global element g of its full
 * tensor; inv: global row (or, for a column-mapped tensor, column) -> local */
static size_t local_offset(const ah_tensor_info *mine, const int *inv, size_t g) {
    int colmap = mine->col0 == -1;
    int R = (int)(g / (size_t)mine->gcols), Cg = (int)(g % (size_t)mine->gcols);
    int r = colmap ? 0 : inv[R], c = colmap ? inv[Cg] : Cg - mine->col0;
    if (r < 0 || c < 0 || c >= mine->lcols) {
        fprintf(stderr, "autohet: tensor %s: a TP slice outside this rank's shard\n", mine->name);
        abort();
    }
    return mine->offset + (size_t)r * mine->lcols + c;
}

int ah__engine_slice_runs(const ah_eng_layer *mine, const ah_eng_layer *part, ah_float_run **out) {
    run_list l = {0};
    for (int i = 0; i < part->n_tensors; i++) {
        const ah_tensor_info *p = &part->t[i], *m = &mine->t[i];
        if (p->replicated || p->size == 0)
            continue;
        int colmap = m->col0 == -1, n_inv = colmap ? m->gcols : m->grows;
        int *inv = xcalloc((size_t)n_inv + 1, sizeof(int));
        for (int k = 0; k < n_inv; k++)
            inv[k] = -1;
        for (int k = 0; k < (colmap ? m->lcols : m->lrows); k++)
            inv[m->row_of[k]] = k;
        for (int r = 0; r < p->lrows; r++)
            for (int c = 0; c < p->lcols; c++)
                run_add(&l, local_offset(m, inv, ah__tensor_global_index(p, r, c)), 1);
        free(inv);
    }
    *out = l.r;
    return l.n;
}

int ah__engine_replicated_runs(const ah_eng_layer *mine, ah_float_run **out) {
    run_list l = {0};
    for (int i = 0; i < mine->n_tensors; i++)
        if (mine->t[i].replicated && mine->t[i].size > 0)
            run_add(&l, mine->t[i].offset, mine->t[i].size);
    *out = l.r;
    return l.n;
}

/* Global (row, col) of local element (r, c) of tensor ti. */
size_t ah__tensor_global_index(const ah_tensor_info *ti, int r, int c) {
    if (ti->col0 == -1) /* qkv bias: a single row with a column map */
        return (size_t)ti->row_of[c];
    return (size_t)ti->row_of[r] * (size_t)ti->gcols + (size_t)(ti->col0 + c);
}

static void build_layer(ah_engine_model *e, ah_eng_layer *L, int l, uint64_t seed, int init) {
    describe_layer(e, L, l);
    L->param = ah__be_alloc(e->be, L->n);
    L->grad = ah__be_alloc(e->be, L->n);
    L->m = ah__be_alloc(e->be, L->n);
    L->v = ah__be_alloc(e->be, L->n);
    if (!init)
        return;
    float *host = xcalloc(L->n + 1, sizeof(float)); /* computed here, then uploaded */
    float std = 0.02f, std_res = 0.02f / sqrtf(2.0f * (float)e->cfg.n_layers);
    for (int i = 0; i < L->n_tensors; i++) {
        ah_tensor_info *ti = &L->t[i];
        const char *nm = ti->name;
        float *dst = host + ti->offset;
        int is_norm = strstr(nm, "ln") == nm || strstr(nm, "rms") == nm || strstr(nm, "norm") == nm;
        if (is_norm) {
            if (strstr(nm, "_w"))
                fill(dst, ti->size, 1.0f);
            continue;
        }
        if (strstr(nm, "_b")) /* biases start at 0 */
            continue;
        float sd = std;
        if (!strcmp(nm, "proj_w") || !strcmp(nm, "fcproj_w") || !strcmp(nm, "o_w") || !strcmp(nm, "down_w"))
            sd = std_res;
        if (!strcmp(nm, "wpe"))
            sd = 0.01f;
        /* tied embeddings: the head's copy starts equal to the embedding (same key) */
        int layer_key = l, tensor_key = i;
        if (!strcmp(nm, "lm_head") && e->cfg.tied_embeddings) {
            layer_key = 0;
            tensor_key = 0;
        }
        uint64_t base = ah_hash64(seed ^ ah_hash64(((uint64_t)layer_key << 20) ^ (uint64_t)tensor_key));
        for (int r = 0; r < ti->lrows; r++)
            for (int c = 0; c < ti->lcols; c++)
                dst[(size_t)r * ti->lcols + c] =
                    normal_from(base ^ ah_hash64(ah__tensor_global_index(ti, r, c)), sd);
    }
    ah__be_to_device(e->be, L->param, host, L->n);
    free(host);
}

size_t ah__engine_layer_full_size(const ah_engine_model *e, int l) {
    const ah_eng_layer *L = &e->layers[l - e->first];
    const ah_tensor_info *ti = &L->t[L->n_tensors - 1];
    return ti->goffset + (size_t)ti->grows * ti->gcols;
}

void ah__engine_layer_to_full(const ah_engine_model *e, int l, int which, float *full) {
    const ah_eng_layer *L = &e->layers[l - e->first];
    float *src = xcalloc(L->n + 1, sizeof(float));
    ah__engine_layer_to_host(e, l, which ? AH_STATE_GRAD : AH_STATE_PARAM, src);
    for (int i = 0; i < L->n_tensors; i++) {
        const ah_tensor_info *ti = &L->t[i];
        if (ti->replicated && e->tp_rank != 0)
            continue;
        for (int r = 0; r < ti->lrows; r++)
            for (int c = 0; c < ti->lcols; c++)
                full[ti->goffset + ah__tensor_global_index(ti, r, c)] =
                    src[ti->offset + (size_t)r * ti->lcols + c];
    }
    free(src);
}

/* The config field of a model detail the engine does not compute, or NULL:
 * such a model is refused by name, never trained as a different one. */
static const char *unsupported_detail(const ah_model_config *c, char *buf, size_t n) {
    if (c->arch == AH_ARCH_GPT && c->act != AH_ACT_GELU_TANH && c->act != AH_ACT_RELU)
        snprintf(buf, n, "activation_function '%s' (the engine's GPT blocks compute gelu_new or relu)",
                 ah_activation_name((ah_activation)c->act));
    else
        return NULL;
    return buf;
}

int ah__engine_model_init(ah_engine_model *e, const ah_model_config *cfg, int T, int B, int first, int last,
                         int tp, int tp_rank, uint64_t seed, int init, char *err, size_t errlen) {
    return ah__engine_model_init_prec(e, cfg, T, B, first, last, tp, tp_rank, seed, init, AH_MATMUL_FP32, err, errlen);
}

int ah__engine_model_init_prec(ah_engine_model *e, const ah_model_config *cfg, int T, int B, int first, int last,
                              int tp, int tp_rank, uint64_t seed, int init, ah_matmul_precision prec, char *err,
                              size_t errlen) {
    memset(e, 0, sizeof *e);
    if (cfg->arch == AH_ARCH_BERT) {
        snprintf(err, errlen, "model %s: the training engine runs decoder-only GPT/LLaMA models", cfg->name);
        return -1;
    }
    char why[160];
    if (unsupported_detail(cfg, why, sizeof why) != NULL) {
        snprintf(err, errlen, "model %s: %s is not supported by the training engine", cfg->name, why);
        return -1;
    }
    if (tp < 1 || cfg->n_heads % tp || cfg->n_kv_heads % tp || cfg->ffn_hidden % tp ||
        cfg->hidden % cfg->n_heads) {
        snprintf(err, errlen,
                 "model %s: tensor-parallel degree %d must divide the %d heads, %d KV heads and MLP size %d",
                 cfg->name, tp, cfg->n_heads, cfg->n_kv_heads, cfg->ffn_hidden);
        return -1;
    }
    if (cfg->arch == AH_ARCH_GPT && T > cfg->max_positions) {
        snprintf(err, errlen, "model %s: sequence length %d exceeds its %d learned positions", cfg->name, T,
                 cfg->max_positions);
        return -1;
    }
    int L = ah_model_num_layers(cfg);
    if (first < 0 || last > L || first >= last) {
        snprintf(err, errlen, "layers [%d,%d) outside the model's %d layers", first, last, L);
        return -1;
    }
    e->be = ah__backend_default(prec, err, errlen);
    if (e->be == NULL)
        return -1;
    e->cfg = *cfg;
    e->T = T;
    e->B = B;
    e->tp = tp;
    e->tp_rank = tp_rank;
    e->first = first;
    e->last = last;
    e->rope_theta = cfg->rope_theta > 0 ? (float)cfg->rope_theta : 10000.0f;
    e->norm_eps = cfg->norm_eps > 0 ? (float)cfg->norm_eps : 1e-5f;
    e->layers = xcalloc((size_t)(last - first), sizeof(ah_eng_layer));
    for (int l = first; l < last; l++)
        build_layer(e, &e->layers[l - first], l, seed, init);
    return 0;
}

void ah__engine_model_free(ah_engine_model *e) {
    for (int i = 0; e->layers && i < e->last - e->first; i++) {
        for (int k = 0; k < e->layers[i].n_tensors; k++)
            free(e->layers[i].t[k].row_of);
        ah__be_free(e->be, e->layers[i].param);
        ah__be_free(e->be, e->layers[i].grad);
        ah__be_free(e->be, e->layers[i].m);
        ah__be_free(e->be, e->layers[i].v);
    }
    free(e->layers);
    memset(e, 0, sizeof *e);
}

void ah__engine_zero_grads(ah_engine_model *e) {
    for (int i = 0; i < e->last - e->first; i++)
        ah__be_zero(e->be, e->layers[i].grad, e->layers[i].n);
}

int ah__engine_hidden(const ah_engine_model *e) {
    return e->cfg.hidden;
}

static void tp_allreduce(ah_engine_model *e, ah_dptr buf, size_t n) {
    if (e->tp > 1 && e->comm.allreduce) {
        ah__be_sync(e->be);
        e->comm.allreduce(buf, n, e->comm.ctx);
    }
}

/* A backend buffer of n floats (zeroed), and its release. */
static ah_dptr dalloc(const ah_engine_model *e, size_t n) {
    return ah__be_alloc(e->be, n);
}
static void dfree(const ah_engine_model *e, ah_dptr d) {
    ah__be_free(e->be, d);
}
/* Host token ids uploaded to a backend buffer (a null handle for NULL). */
static ah_dptr upload_ids(const ah_engine_model *e, const int *ids) {
    if (ids == NULL)
        return NOBUF;
    size_t n = (size_t)e->B * e->T;
    ah_dptr d = ah__be_alloc(e->be, n);
    ah__be_to_device(e->be, d, ids, n);
    return d;
}

/* ---- activation arenas -------------------------------------------------------- */

typedef struct {
    ah_dptr base;
    size_t off;
} arena;

/* The next n elements of the arena. Over a null base it hands out null
 * slices and only counts, so a layout function also sizes its buffer. */
static ah_dptr take(arena *a, size_t n) {
    ah_dptr p = ah__dptr_is_null(a->base) ? NOBUF : ah__dptr_at(a->base, a->off);
    a->off += n;
    return p;
}

/* Elements the backend's attention forward keeps per (batch, head) for the backward. */
static size_t attn_saved(const ah_engine_model *e) {
    return e->be->attention_saved(e->be->ctx, e->T);
}

void ah__engine_acts_free(ah_engine_model *e, ah_eng_acts *acts) {
    for (int i = 0; i < e->last - e->first; i++) {
        dfree(e, acts[i].buf);
        acts[i].buf = NOBUF;
    }
}

/* ---- layers: forward --------------------------------------------------------- */

/* The learned position rows of positions 0..T-1 (after OPT's offset rows). */
static ah_dptr positions(const ah_engine_model *e, ah_dptr wpe) {
    return ah__dptr_at(wpe, (size_t)e->cfg.pos_offset * e->cfg.hidden);
}

static void embed_fwd(ah_engine_model *e, ah_eng_layer *L, ah_dptr tok, ah_dptr out, ah_eng_acts *a) {
    int N = e->B * e->T, C = e->cfg.hidden, E = embed_width(e);
    ah_dptr wpe = is_llama(e) ? NOBUF : positions(e, P(L, E_WPE));
    if (!has_proj(e)) {
        BK(e, embedding_fwd, out, tok, P(L, E_WTE), wpe, N, e->T, C);
        return;
    }
    /* OPT: project_in(wte[tok]) + wpe; the E-wide rows are kept for the backward */
    ah_dptr g = ah__dptr_at(a->buf, 1);
    BK(e, embedding_fwd, g, tok, P(L, E_WTE), NOBUF, N, e->T, E);
    KT(K_LINEAR, BK(e, linear_fwd, out, g, P(L, E_PROJ), NOBUF, N, E, C););
    for (int b = 0; b < e->B; b++)
        BK(e, add, ah__dptr_at(out, (size_t)b * e->T * C), wpe, (size_t)e->T * C);
}

static void embed_bwd(ah_engine_model *e, ah_eng_layer *L, ah_dptr tok, ah_dptr dout, ah_eng_acts *a) {
    int N = e->B * e->T, C = e->cfg.hidden, E = embed_width(e);
    ah_dptr gwpe = is_llama(e) ? NOBUF : positions(e, G(L, E_WPE));
    if (!has_proj(e)) {
        BK(e, embedding_bwd, G(L, E_WTE), gwpe, dout, tok, N, e->T, C);
        return;
    }
    for (int b = 0; b < e->B; b++)
        BK(e, add, gwpe, ah__dptr_at(dout, (size_t)b * e->T * C), (size_t)e->T * C);
    ah_dptr dg = dalloc(e, (size_t)N * E);
    KT(K_LINEAR,
       BK(e, linear_bwd, dg, G(L, E_PROJ), NOBUF, dout, ah__dptr_at(a->buf, 1), P(L, E_PROJ), N, E, C););
    BK(e, embedding_bwd, G(L, E_WTE), NOBUF, dg, tok, N, e->T, E);
    dfree(e, dg);
}

/* The attention window of block layer L: GPT-Neo's local layers, Mistral's sliding window (every layer), else 0
 * (all earlier keys). */
static int block_window(const ah_engine_model *e, const ah_eng_layer *L) {
    return ah_model_block_is_local(&e->cfg, L->index - 1) ? e->cfg.attn_window : 0;
}

/* The saved tensors of a GPT block (pre-LN: ln1/ln2 are the norm outputs;
 * post-LN (OPT): they hold the residual sums s1 = x + attn, s2 = x_mid + mlp
 * that the norms read, and x_mid = LN1(s1)). */
typedef struct {
    ah_dptr x_in, ln1, m1, r1, q, k, v, att, y, x_mid, ln2, m2, r2, fc, ge;
    size_t n; /* elements the layout takes: the block's activation buffer */
} gpt_acts;

static gpt_acts gpt_slices(const ah_engine_model *e, ah_dptr base) {
    const ah_model_config *c = &e->cfg;
    size_t N = (size_t)e->B * e->T, C = c->hidden, Cl = (size_t)c->n_heads / e->tp * head_dim(e),
           Fl = c->ffn_hidden / e->tp;
    arena ar = {base, 0};
    gpt_acts s;
    s.x_in = take(&ar, N * C), s.ln1 = take(&ar, N * C), s.m1 = take(&ar, N), s.r1 = take(&ar, N);
    s.q = take(&ar, N * Cl), s.k = take(&ar, N * Cl), s.v = take(&ar, N * Cl);
    s.att = take(&ar, (size_t)e->B * (c->n_heads / e->tp) * attn_saved(e));
    s.y = take(&ar, N * Cl), s.x_mid = take(&ar, N * C), s.ln2 = take(&ar, N * C), s.m2 = take(&ar, N);
    s.r2 = take(&ar, N), s.fc = take(&ar, N * Fl), s.ge = take(&ar, N * Fl);
    s.n = ar.off;
    return s;
}

/* out = attention sublayer of h (the TP partial sums reduced, the output bias added). */
static void gpt_attn_fwd(ah_engine_model *e, ah_eng_layer *L, const gpt_acts *s, ah_dptr h, ah_dptr out) {
    const ah_model_config *c = &e->cfg;
    int N = e->B * e->T, C = c->hidden, D = head_dim(e), Hl = c->n_heads / e->tp, Cl = Hl * D;
    ah_dptr w = P(L, B_QKVW), b = P(L, B_QKVB), nob = NOBUF;
    int nb = c->no_qkv_bias;
    KT(K_LINEAR, BK(e, linear_fwd, s->q, h, w, nb ? nob : b, N, C, Cl););
    KT(K_LINEAR,
       BK(e, linear_fwd, s->k, h, ah__dptr_at(w, (size_t)Cl * C), nb ? nob : ah__dptr_at(b, Cl), N, C, Cl););
    KT(K_LINEAR, BK(e, linear_fwd, s->v, h, ah__dptr_at(w, (size_t)2 * Cl * C),
                    nb ? nob : ah__dptr_at(b, 2 * (size_t)Cl), N, C, Cl););
    if (c->unscaled_attention) /* GPT-Neo's q.k: q * sqrt(D) cancels the kernel's 1/sqrt(D) */
        KT(K_ATTN, BK(e, scale, s->q, sqrtf((float)D), (size_t)N * Cl););
    KT(K_ATTN,
       BK(e, attention_fwd, s->y, s->att, s->q, s->k, s->v, e->B, e->T, Hl, Hl, D, block_window(e, L)););
    KT(K_LINEAR, BK(e, linear_fwd, out, s->y, P(L, B_PROJW), NOBUF, N, Cl, C););
    tp_allreduce(e, out, (size_t)N * C);
    KT(K_MISC, BK(e, add_bias_rows, out, P(L, B_PROJB), N, C););
}

/* out = MLP sublayer of h (GELU, or ReLU for OPT). */
static void gpt_mlp_fwd(ah_engine_model *e, ah_eng_layer *L, const gpt_acts *s, ah_dptr h, ah_dptr out) {
    int N = e->B * e->T, C = e->cfg.hidden, Fl = e->cfg.ffn_hidden / e->tp;
    KT(K_LINEAR, BK(e, linear_fwd, s->fc, h, P(L, B_FCW), P(L, B_FCB), N, C, Fl););
    if (e->cfg.act == AH_ACT_RELU)
        KT(K_ACT, BK(e, relu_fwd, s->ge, s->fc, (size_t)N * Fl););
    else
        KT(K_ACT, BK(e, gelu_fwd, s->ge, s->fc, (size_t)N * Fl););
    KT(K_LINEAR, BK(e, linear_fwd, out, s->ge, P(L, B_FCPW), NOBUF, N, Fl, C););
    tp_allreduce(e, out, (size_t)N * C);
    KT(K_MISC, BK(e, add_bias_rows, out, P(L, B_FCPB), N, C););
}

static void gpt_block_fwd(ah_engine_model *e, ah_eng_layer *L, ah_dptr in, ah_dptr out, ah_eng_acts *a) {
    int N = e->B * e->T, C = e->cfg.hidden;
    size_t NC = (size_t)N * C;
    gpt_acts s = gpt_slices(e, a->buf);
    ah__be_copy(e->be, s.x_in, in, NC);
    if (e->cfg.post_norm) { /* OPT (do_layer_norm_before false): x = LN(x + sublayer(x)) */
        gpt_attn_fwd(e, L, &s, s.x_in, s.ln1);
        KT(K_MISC, BK(e, add, s.ln1, s.x_in, NC););
        KT(K_NORM,
           BK(e, layernorm_fwd, s.x_mid, s.m1, s.r1, s.ln1, P(L, B_LN1W), P(L, B_LN1B), N, C, e->norm_eps););
        gpt_mlp_fwd(e, L, &s, s.x_mid, s.ln2);
        KT(K_MISC, BK(e, add, s.ln2, s.x_mid, NC););
        KT(K_NORM,
           BK(e, layernorm_fwd, out, s.m2, s.r2, s.ln2, P(L, B_LN2W), P(L, B_LN2B), N, C, e->norm_eps););
        return;
    }
    KT(K_NORM,
       BK(e, layernorm_fwd, s.ln1, s.m1, s.r1, s.x_in, P(L, B_LN1W), P(L, B_LN1B), N, C, e->norm_eps););
    gpt_attn_fwd(e, L, &s, s.ln1, s.x_mid);
    KT(K_MISC, BK(e, add, s.x_mid, s.x_in, NC););
    KT(K_NORM,
       BK(e, layernorm_fwd, s.ln2, s.m2, s.r2, s.x_mid, P(L, B_LN2W), P(L, B_LN2B), N, C, e->norm_eps););
    gpt_mlp_fwd(e, L, &s, s.ln2, out);
    KT(K_MISC, BK(e, add, out, s.x_mid, NC););
}

/* The saved tensors of a LLaMA block: the one place their layout in the
 * activation buffer is written (the forward fills it, the backward reads it). */
typedef struct {
    ah_dptr x_in, n1, r1, q, k, v, att, y, x_mid, n2, r2, gu, sw;
    size_t n; /* elements the layout takes */
} llama_acts;

static llama_acts llama_slices(const ah_engine_model *e, ah_dptr base) {
    const ah_model_config *c = &e->cfg;
    size_t N = (size_t)e->B * e->T, C = c->hidden, D = head_dim(e), Hl = c->n_heads / e->tp,
           Hkvl = c->n_kv_heads / e->tp, Fl = c->ffn_hidden / e->tp;
    arena ar = {base, 0};
    llama_acts s;
    s.x_in = take(&ar, N * C), s.n1 = take(&ar, N * C), s.r1 = take(&ar, N);
    s.q = take(&ar, N * Hl * D), s.k = take(&ar, N * Hkvl * D), s.v = take(&ar, N * Hkvl * D);
    s.att = take(&ar, (size_t)e->B * Hl * attn_saved(e));
    s.y = take(&ar, N * Hl * D), s.x_mid = take(&ar, N * C), s.n2 = take(&ar, N * C), s.r2 = take(&ar, N);
    s.gu = take(&ar, 2 * N * Fl), s.sw = take(&ar, N * Fl);
    s.n = ar.off;
    return s;
}

/* A block's activation buffer: the end of its saved-tensor layout, the
 * slice functions being the one owner of what a block keeps. */
static size_t block_acts(const ah_engine_model *e) {
    return is_llama(e) ? llama_slices(e, NOBUF).n : gpt_slices(e, NOBUF).n;
}

static size_t layer_acts(const ah_engine_model *e, ah_layer_kind k) {
    size_t N = (size_t)e->B * e->T, C = e->cfg.hidden, V = ah_model_padded_vocab(&e->cfg);
    size_t proj = has_proj(e) ? N * (size_t)embed_width(e) : 0; /* OPT: the E-wide embeddings / head input */
    if (k == AH_LAYER_EMBED)
        return 1 + proj;
    if (k == AH_LAYER_HEAD)
        return 2 * N * C + 2 * N + N * V + N + proj;
    return block_acts(e);
}

static void llama_block_fwd(ah_engine_model *e, ah_eng_layer *L, ah_dptr in, ah_dptr out, ah_eng_acts *a) {
    const ah_model_config *c = &e->cfg;
    int N = e->B * e->T, C = c->hidden, D = head_dim(e), Hl = c->n_heads / e->tp,
        Hkvl = c->n_kv_heads / e->tp, Fl = c->ffn_hidden / e->tp;
    const llama_acts s = llama_slices(e, a->buf);
    ah_dptr x_in = s.x_in, n1 = s.n1, r1 = s.r1, q = s.q, k = s.k, v = s.v, att = s.att, y = s.y, x_mid = s.x_mid,
            n2 = s.n2, r2 = s.r2, gu = s.gu, sw = s.sw;
    ah__be_copy(e->be, x_in, in, (size_t)N * C);
    KT(K_NORM, BK(e, rmsnorm_fwd, n1, r1, x_in, P(L, Q_RMS1), N, C, e->norm_eps););
    int qb = c->qkv_bias;
    KT(K_LINEAR, BK(e, linear_fwd, q, n1, P(L, Q_QW), qb ? P(L, Q_QB) : NOBUF, N, C, Hl * D););
    KT(K_LINEAR, BK(e, linear_fwd, k, n1, P(L, Q_KW), qb ? P(L, Q_KB) : NOBUF, N, C, Hkvl * D););
    KT(K_LINEAR, BK(e, linear_fwd, v, n1, P(L, Q_VW), qb ? P(L, Q_VB) : NOBUF, N, C, Hkvl * D););
    KT(K_ATTN, BK(e, rope_fwd, q, N, e->T, Hl, D, e->rope_theta););
    KT(K_ATTN, BK(e, rope_fwd, k, N, e->T, Hkvl, D, e->rope_theta););
    KT(K_ATTN, BK(e, attention_fwd, y, att, q, k, v, e->B, e->T, Hl, Hkvl, D, block_window(e, L)););
    KT(K_LINEAR, BK(e, linear_fwd, x_mid, y, P(L, Q_OW), NOBUF, N, Hl * D, C););
    tp_allreduce(e, x_mid, (size_t)N * C);
    KT(K_MISC, BK(e, add, x_mid, x_in, (size_t)N * C););
    KT(K_NORM, BK(e, rmsnorm_fwd, n2, r2, x_mid, P(L, Q_RMS2), N, C, e->norm_eps););
    KT(K_LINEAR, BK(e, linear_fwd, gu, n2, P(L, Q_GUW), NOBUF, N, C, 2 * Fl););
    KT(K_ACT, BK(e, swiglu_fwd, sw, gu, N, Fl););
    KT(K_LINEAR, BK(e, linear_fwd, out, sw, P(L, Q_DOWNW), NOBUF, N, Fl, C););
    tp_allreduce(e, out, (size_t)N * C);
    KT(K_MISC, BK(e, add, out, x_mid, (size_t)N * C););
}

static double head_fwd(ah_engine_model *e, ah_eng_layer *L, ah_dptr in, ah_dptr targets, ah_eng_acts *a) {
    int N = e->B * e->T, C = e->cfg.hidden, V = e->cfg.vocab, Vp = ah_model_padded_vocab(&e->cfg),
        E = embed_width(e);
    arena ar = {a->buf, 0};
    ah_dptr x_in = take(&ar, (size_t)N * C), nf = take(&ar, (size_t)N * C), mean = take(&ar, N),
            rstd = take(&ar, N), probs = take(&ar, (size_t)N * Vp), losses = take(&ar, N);
    ah__be_copy(e->be, x_in, in, (size_t)N * C);
    if (is_llama(e))
        KT(K_NORM, BK(e, rmsnorm_fwd, nf, rstd, x_in, P(L, H_NW), N, C, e->norm_eps););
    else if (e->cfg.post_norm)
        ah__be_copy(e->be, nf, x_in, (size_t)N * C);
    else
        KT(K_NORM, BK(e, layernorm_fwd, nf, mean, rstd, x_in, P(L, H_NW), P(L, H_NB), N, C, e->norm_eps););
    ah_dptr hin = nf; /* the LM head's input: OPT's project_out(nf) */
    if (has_proj(e)) {
        hin = take(&ar, (size_t)N * E);
        KT(K_LINEAR, BK(e, linear_fwd, hin, nf, P(L, H_PROJ), NOBUF, N, C, E););
    }
    ah_dptr logits = dalloc(e, (size_t)N * Vp);
    KT(K_LINEAR, BK(e, linear_fwd, logits, hin, P(L, H_LM), NOBUF, N, E, Vp););
    double loss;
    KT(K_HEAD, loss = BK(e, crossentropy_fwd, losses, probs, logits, targets, N, V, Vp););
    dfree(e, logits);
    return loss;
}

int ah__engine_forward(ah_engine_model *e, const int *tokens, ah_dptr in, const int *targets, ah_dptr out,
                      double *loss, ah_eng_acts *acts) {
    size_t NC = (size_t)e->B * e->T * e->cfg.hidden;
    ah_dptr cur = dalloc(e, NC), nxt = dalloc(e, NC);
    ah_dptr dtok = e->first == 0 ? upload_ids(e, tokens) : NOBUF;
    ah_dptr dtgt = ah_model_layer_kind(&e->cfg, e->last - 1) == AH_LAYER_HEAD ? upload_ids(e, targets) : NOBUF;
    if (!ah__dptr_is_null(in))
        ah__be_copy(e->be, cur, in, NC);
    for (int l = e->first; l < e->last; l++) {
        ah_eng_layer *L = &e->layers[l - e->first];
        ah_eng_acts *a = &acts[l - e->first];
        a->n = layer_acts(e, L->kind);
        a->buf = dalloc(e, a->n);
        if (L->kind == AH_LAYER_EMBED) {
            embed_fwd(e, L, dtok, cur, a);
        } else if (L->kind == AH_LAYER_HEAD) {
            *loss = head_fwd(e, L, cur, dtgt, a);
        } else {
            if (is_llama(e))
                llama_block_fwd(e, L, cur, nxt, a);
            else
                gpt_block_fwd(e, L, cur, nxt, a);
            ah_dptr t = cur;
            cur = nxt;
            nxt = t;
        }
    }
    if (!ah__dptr_is_null(out) && ah_model_layer_kind(&e->cfg, e->last - 1) != AH_LAYER_HEAD)
        ah__be_copy(e->be, out, cur, NC);
    dfree(e, cur);
    dfree(e, nxt);
    dfree(e, dtok);
    dfree(e, dtgt);
    return 0;
}

/* ---- layers: backward -------------------------------------------------------- */

/* dh (overwritten) = the gradient through the attention sublayer of its input
 * h for the gradient dout of its output; parameter gradients accumulate. */
static void gpt_attn_bwd(ah_engine_model *e, ah_eng_layer *L, const gpt_acts *s, ah_dptr h, ah_dptr dout,
                         ah_dptr dh) {
    const ah_model_config *c = &e->cfg;
    int N = e->B * e->T, C = c->hidden, D = head_dim(e), Hl = c->n_heads / e->tp, Cl = Hl * D;
    size_t NCl = (size_t)N * Cl;
    ah_dptr dy = dalloc(e, NCl), dq = dalloc(e, NCl), dk = dalloc(e, NCl), dv = dalloc(e, NCl);
    KT(K_MISC, BK(e, bias_grad_acc, G(L, B_PROJB), dout, N, C););
    KT(K_LINEAR, BK(e, linear_bwd, dy, G(L, B_PROJW), NOBUF, dout, s->y, P(L, B_PROJW), N, Cl, C););
    KT(K_ATTN, BK(e, attention_bwd, dq, dk, dv, dy, s->y, s->att, s->q, s->k, s->v, e->B, e->T, Hl, Hl, D,
                  block_window(e, L)););
    if (c->unscaled_attention)
        KT(K_ATTN, BK(e, scale, dq, sqrtf((float)D), NCl););
    ah__be_zero(e->be, dh, (size_t)N * C);
    ah_dptr w = P(L, B_QKVW), gw = G(L, B_QKVW), gb = G(L, B_QKVB), nob = NOBUF;
    int nb = c->no_qkv_bias;
    size_t wk = (size_t)Cl * C, wv = (size_t)2 * Cl * C;
    KT(K_LINEAR, BK(e, linear_bwd, dh, gw, nb ? nob : gb, dq, h, w, N, C, Cl););
    KT(K_LINEAR, BK(e, linear_bwd, dh, ah__dptr_at(gw, wk), nb ? nob : ah__dptr_at(gb, Cl), dk, h,
                    ah__dptr_at(w, wk), N, C, Cl););
    KT(K_LINEAR, BK(e, linear_bwd, dh, ah__dptr_at(gw, wv), nb ? nob : ah__dptr_at(gb, 2 * (size_t)Cl), dv, h,
                    ah__dptr_at(w, wv), N, C, Cl););
    tp_allreduce(e, dh, (size_t)N * C);
    dfree(e, dy), dfree(e, dq), dfree(e, dk), dfree(e, dv);
}

/* The same through the MLP sublayer. */
static void gpt_mlp_bwd(ah_engine_model *e, ah_eng_layer *L, const gpt_acts *s, ah_dptr h, ah_dptr dout,
                        ah_dptr dh) {
    int N = e->B * e->T, C = e->cfg.hidden, Fl = e->cfg.ffn_hidden / e->tp;
    size_t NF = (size_t)N * Fl;
    ah_dptr dge = dalloc(e, NF), dfc = dalloc(e, NF);
    KT(K_MISC, BK(e, bias_grad_acc, G(L, B_FCPB), dout, N, C););
    KT(K_LINEAR, BK(e, linear_bwd, dge, G(L, B_FCPW), NOBUF, dout, s->ge, P(L, B_FCPW), N, Fl, C););
    if (e->cfg.act == AH_ACT_RELU)
        KT(K_ACT, BK(e, relu_bwd, dfc, dge, s->fc, NF););
    else
        KT(K_ACT, BK(e, gelu_bwd, dfc, dge, s->fc, NF););
    ah__be_zero(e->be, dh, (size_t)N * C);
    KT(K_LINEAR, BK(e, linear_bwd, dh, G(L, B_FCW), G(L, B_FCB), dfc, h, P(L, B_FCW), N, C, Fl););
    tp_allreduce(e, dh, (size_t)N * C);
    dfree(e, dge), dfree(e, dfc);
}

/* dout -> din (both [N, C]); din is overwritten. */
static void gpt_block_bwd(ah_engine_model *e, ah_eng_layer *L, ah_dptr dout, ah_dptr din, ah_eng_acts *a) {
    int N = e->B * e->T, C = e->cfg.hidden;
    size_t NC = (size_t)N * C;
    gpt_acts s = gpt_slices(e, a->buf);
    ah_dptr dmid = dalloc(e, NC), dh = dalloc(e, NC);
    if (e->cfg.post_norm) {
        /* out = LN2(s2), s2 = x_mid + mlp(x_mid), x_mid = LN1(s1), s1 = x_in + attn(x_in) */
        KT(K_NORM, BK(e, layernorm_bwd, dmid, G(L, B_LN2W), G(L, B_LN2B), dout, s.ln2, P(L, B_LN2W), s.m2,
                      s.r2, N, C););
        gpt_mlp_bwd(e, L, &s, s.x_mid, dmid, dh);
        KT(K_MISC, BK(e, add, dh, dmid, NC););
        ah__be_zero(e->be, din, NC);
        KT(K_NORM,
           BK(e, layernorm_bwd, din, G(L, B_LN1W), G(L, B_LN1B), dh, s.ln1, P(L, B_LN1W), s.m1, s.r1, N, C););
        gpt_attn_bwd(e, L, &s, s.x_in, din, dh);
        KT(K_MISC, BK(e, add, din, dh, NC););
    } else {
        ah__be_copy(e->be, dmid, dout, NC);
        gpt_mlp_bwd(e, L, &s, s.ln2, dout, dh);
        KT(K_NORM, BK(e, layernorm_bwd, dmid, G(L, B_LN2W), G(L, B_LN2B), dh, s.x_mid, P(L, B_LN2W), s.m2,
                      s.r2, N, C););
        gpt_attn_bwd(e, L, &s, s.ln1, dmid, dh);
        ah__be_copy(e->be, din, dmid, NC);
        KT(K_NORM, BK(e, layernorm_bwd, din, G(L, B_LN1W), G(L, B_LN1B), dh, s.x_in, P(L, B_LN1W), s.m1, s.r1,
                      N, C););
    }
    dfree(e, dmid);
    dfree(e, dh);
}

static void llama_block_bwd(ah_engine_model *e, ah_eng_layer *L, ah_dptr dout, ah_dptr din, ah_eng_acts *a) {
    const ah_model_config *c = &e->cfg;
    int N = e->B * e->T, C = c->hidden, D = head_dim(e), Hl = c->n_heads / e->tp,
        Hkvl = c->n_kv_heads / e->tp, Fl = c->ffn_hidden / e->tp;
    const llama_acts s = llama_slices(e, a->buf);
    ah_dptr x_in = s.x_in, n1 = s.n1, r1 = s.r1, q = s.q, k = s.k, v = s.v, att = s.att, y = s.y, x_mid = s.x_mid,
            n2 = s.n2, r2 = s.r2, gu = s.gu, sw = s.sw;
    size_t NC = (size_t)N * C;
    ah_dptr dmid = dalloc(e, NC), dn = dalloc(e, NC);
    ah_dptr dsw = dalloc(e, (size_t)N * Fl), dgu = dalloc(e, (size_t)2 * N * Fl);
    ah_dptr dy = dalloc(e, (size_t)N * Hl * D), dq = dalloc(e, (size_t)N * Hl * D),
            dk = dalloc(e, (size_t)N * Hkvl * D), dv = dalloc(e, (size_t)N * Hkvl * D);
    ah__be_copy(e->be, dmid, dout, NC);
    KT(K_LINEAR, BK(e, linear_bwd, dsw, G(L, Q_DOWNW), NOBUF, dout, sw, P(L, Q_DOWNW), N, Fl, C););
    KT(K_ACT, BK(e, swiglu_bwd, dgu, dsw, gu, N, Fl););
    KT(K_LINEAR, BK(e, linear_bwd, dn, G(L, Q_GUW), NOBUF, dgu, n2, P(L, Q_GUW), N, C, 2 * Fl););
    tp_allreduce(e, dn, NC);
    KT(K_NORM, BK(e, rmsnorm_bwd, dmid, G(L, Q_RMS2), dn, x_mid, P(L, Q_RMS2), r2, N, C););
    KT(K_LINEAR, BK(e, linear_bwd, dy, G(L, Q_OW), NOBUF, dmid, y, P(L, Q_OW), N, Hl * D, C););
    KT(K_ATTN, BK(e, attention_bwd, dq, dk, dv, dy, y, att, q, k, v, e->B, e->T, Hl, Hkvl, D, block_window(e, L)););
    KT(K_ATTN, BK(e, rope_bwd, dq, N, e->T, Hl, D, e->rope_theta););
    KT(K_ATTN, BK(e, rope_bwd, dk, N, e->T, Hkvl, D, e->rope_theta););
    ah__be_zero(e->be, dn, NC);
    int qb = c->qkv_bias;
    KT(K_LINEAR,
       BK(e, linear_bwd, dn, G(L, Q_QW), qb ? G(L, Q_QB) : NOBUF, dq, n1, P(L, Q_QW), N, C, Hl * D););
    KT(K_LINEAR,
       BK(e, linear_bwd, dn, G(L, Q_KW), qb ? G(L, Q_KB) : NOBUF, dk, n1, P(L, Q_KW), N, C, Hkvl * D););
    KT(K_LINEAR,
       BK(e, linear_bwd, dn, G(L, Q_VW), qb ? G(L, Q_VB) : NOBUF, dv, n1, P(L, Q_VW), N, C, Hkvl * D););
    tp_allreduce(e, dn, NC);
    ah__be_copy(e->be, din, dmid, NC);
    KT(K_NORM, BK(e, rmsnorm_bwd, din, G(L, Q_RMS1), dn, x_in, P(L, Q_RMS1), r1, N, C););
    ah_dptr scratch[] = {dmid, dn, dsw, dgu, dy, dq, dk, dv};
    for (size_t i = 0; i < sizeof scratch / sizeof scratch[0]; i++)
        dfree(e, scratch[i]);
}

static void head_bwd(ah_engine_model *e, ah_eng_layer *L, ah_dptr targets, ah_dptr din, float scale,
                     ah_eng_acts *a) {
    int N = e->B * e->T, C = e->cfg.hidden, V = e->cfg.vocab, Vp = ah_model_padded_vocab(&e->cfg),
        E = embed_width(e);
    arena ar = {a->buf, 0};
    ah_dptr x_in = take(&ar, (size_t)N * C), nf = take(&ar, (size_t)N * C), mean = take(&ar, N),
            rstd = take(&ar, N), probs = take(&ar, (size_t)N * Vp);
    take(&ar, N); /* the losses */
    ah_dptr dlogits = dalloc(e, (size_t)N * Vp), dnf = dalloc(e, (size_t)N * C);
    KT(K_HEAD, BK(e, crossentropy_bwd, dlogits, probs, targets, N, V, Vp, scale););
    if (has_proj(e)) { /* through the LM head to the E-wide input, then project_out */
        ah_dptr hin = take(&ar, (size_t)N * E), dh = dalloc(e, (size_t)N * E);
        KT(K_LINEAR, BK(e, linear_bwd, dh, G(L, H_LM), NOBUF, dlogits, hin, P(L, H_LM), N, E, Vp););
        KT(K_LINEAR, BK(e, linear_bwd, dnf, G(L, H_PROJ), NOBUF, dh, nf, P(L, H_PROJ), N, C, E););
        dfree(e, dh);
    } else {
        KT(K_LINEAR, BK(e, linear_bwd, dnf, G(L, H_LM), NOBUF, dlogits, nf, P(L, H_LM), N, C, Vp););
    }
    ah__be_zero(e->be, din, (size_t)N * C);
    if (e->cfg.post_norm)
        ah__be_copy(e->be, din, dnf, (size_t)N * C);
    else if (is_llama(e))
        KT(K_NORM, BK(e, rmsnorm_bwd, din, G(L, H_NW), dnf, x_in, P(L, H_NW), rstd, N, C););
    else
        KT(K_NORM,
           BK(e, layernorm_bwd, din, G(L, H_NW), G(L, H_NB), dnf, x_in, P(L, H_NW), mean, rstd, N, C););
    dfree(e, dlogits);
    dfree(e, dnf);
}

int ah__engine_backward_range(ah_engine_model *e, const int *tokens, const int *targets, ah_dptr dout, ah_dptr din,
                              float loss_scale, ah_eng_acts *acts, int lo, int hi) {
    size_t NC = (size_t)e->B * e->T * e->cfg.hidden;
    ah_dptr cur = dalloc(e, NC), nxt = dalloc(e, NC);
    ah_dptr dtok = lo == 0 ? upload_ids(e, tokens) : NOBUF;
    ah_dptr dtgt = ah_model_layer_kind(&e->cfg, hi - 1) == AH_LAYER_HEAD ? upload_ids(e, targets) : NOBUF;
    if (!ah__dptr_is_null(dout))
        ah__be_copy(e->be, cur, dout, NC);
    for (int l = hi - 1; l >= lo; l--) {
        ah_eng_layer *L = &e->layers[l - e->first];
        ah_eng_acts *a = &acts[l - e->first];
        if (L->kind == AH_LAYER_HEAD) {
            head_bwd(e, L, dtgt, cur, loss_scale, a);
        } else if (L->kind == AH_LAYER_EMBED) {
            embed_bwd(e, L, dtok, cur, a);
        } else {
            if (is_llama(e))
                llama_block_bwd(e, L, cur, nxt, a);
            else
                gpt_block_bwd(e, L, cur, nxt, a);
            ah_dptr t = cur;
            cur = nxt;
            nxt = t;
        }
        dfree(e, a->buf);
        a->buf = NOBUF;
        if (e->after_layer)
            e->after_layer(e->after_layer_arg);
    }
    if (!ah__dptr_is_null(din) && ah_model_layer_kind(&e->cfg, lo) != AH_LAYER_EMBED)
        ah__be_copy(e->be, din, cur, NC);
    dfree(e, cur);
    dfree(e, nxt);
    dfree(e, dtok);
    dfree(e, dtgt);
    return 0;
}

int ah__engine_backward(ah_engine_model *e, const int *tokens, const int *targets, ah_dptr dout, ah_dptr din,
                       float loss_scale, ah_eng_acts *acts) {
    return ah__engine_backward_range(e, tokens, targets, dout, din, loss_scale, acts, e->first, e->last);
}

/* ---- state for the executor: transports, tied copies, norm, update, I/O ---- */

void ah__engine_sync(ah_engine_model *e) {
    ah__be_sync(e->be);
}

static const ah_eng_layer *held(const ah_engine_model *e, int l) {
    return &e->layers[l - e->first];
}

ah_dptr ah__engine_layer_state(const ah_engine_model *e, int l, ah_layer_state which) {
    const ah_eng_layer *L = held(e, l);
    switch (which) {
    case AH_STATE_GRAD:
        return L->grad;
    case AH_STATE_ADAM_M:
        return L->m;
    case AH_STATE_ADAM_V:
        return L->v;
    default:
        return L->param;
    }
}

size_t ah__engine_layer_floats(const ah_engine_model *e, int l) {
    return held(e, l)->n;
}

void ah__engine_layer_to_host(const ah_engine_model *e, int l, ah_layer_state which, float *dst) {
    ah__be_to_host(e->be, dst, ah__engine_layer_state(e, l, which), held(e, l)->n);
}

void ah__engine_tensor_from_host(ah_engine_model *e, int l, ah_layer_state which, int tensor, const float *src) {
    const ah_tensor_info *ti = &held(e, l)->t[tensor];
    ah__be_to_device(e->be, ah__dptr_at(ah__engine_layer_state(e, l, which), ti->offset), src, ti->size);
}

void ah__engine_tensor_range_from_host(ah_engine_model *e, int l, ah_layer_state which, int tensor, size_t first,
                                      size_t count, const float *src) {
    const ah_tensor_info *ti = &held(e, l)->t[tensor];
    if (first > ti->size || count > ti->size - first)
        abort(); /* a caller's bug, never input: the checkpoint reader bounds every piece */
    ah__be_to_device(e->be, ah__dptr_at(ah__engine_layer_state(e, l, which), ti->offset + first), src, count);
}

size_t ah__engine_tied_size(const ah_engine_model *e) {
    return (size_t)e->cfg.vocab * (size_t)embed_width(e);
}

ah_dptr ah__engine_tied_grad(const ah_engine_model *e, int head) {
    const ah_eng_layer *L = held(e, head ? e->last - 1 : e->first);
    return G(L, head ? H_LM : E_WTE);
}

void ah__engine_tied_sum_local(ah_engine_model *e) {
    ah_dptr emb = ah__engine_tied_grad(e, 0), head = ah__engine_tied_grad(e, 1);
    size_t n = ah__engine_tied_size(e);
    BK(e, add, emb, head, n);
    ah__be_copy(e->be, head, emb, n);
}

void ah__engine_tied_add(ah_engine_model *e, int head, ah_dptr other) {
    /* x + y == y + x in IEEE arithmetic: both sides get the same sum */
    BK(e, add, ah__engine_tied_grad(e, head), other, ah__engine_tied_size(e));
}

double ah__engine_grad_sumsq(const ah_engine_model *e) {
    double s = 0;
    for (int l = e->first; l < e->last; l++) {
        const ah_eng_layer *L = held(e, l);
        for (int i = 0; i < L->n_tensors; i++) {
            if (L->t[i].replicated && e->tp_rank != 0)
                continue;
            if (L->kind == AH_LAYER_HEAD && i == H_LM && e->cfg.tied_embeddings)
                continue;
            s += BK(e, sumsq, G(L, i), L->t[i].size);
        }
    }
    return s;
}

void ah__engine_clip_and_step(ah_engine_model *e, float clip, float lr, int t, const ah_optim_config *oc) {
    for (int l = e->first; l < e->last; l++) {
        const ah_eng_layer *L = held(e, l);
        for (int i = 0; i < L->n_tensors; i++) {
            const ah_tensor_info *ti = &L->t[i];
            BK(e, adamw, ah__dptr_at(L->param, ti->offset), ah__dptr_at(L->grad, ti->offset),
               ah__dptr_at(L->m, ti->offset), ah__dptr_at(L->v, ti->offset), ti->size, lr, t, oc, ti->decay, clip);
        }
    }
}

double ah__engine_forward_flops(const ah_engine_model *e) {
    double f = 0;
    for (int l = e->first; l < e->last; l++)
        f += ah_layer_fwd_flops(&e->cfg, ah_model_layer_kind(&e->cfg, l), e->T, e->B);
    return f;
}
