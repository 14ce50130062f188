/* Hugging Face names and layouts of the engine's tensors (engine/hf_map.h). */
#include "engine/hf_map.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static void part(ah_hf_map *m, ah_hf_op op, size_t first, size_t count, int ndim, int64_t d0, int64_t d1,
                 const char *fmt, ...) {
    ah_hf_part *p = &m->p[m->n++];
    memset(p, 0, sizeof *p);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->name, sizeof p->name, fmt, ap);
    va_end(ap);
    p->op = op, p->first = first, p->count = count, p->ndim = ndim;
    p->shape[0] = d0, p->shape[1] = d1;
}

/* the tensor as HF stores it: [rows, cols] weights, [cols] vectors */
static void whole(ah_hf_map *m, const ah_tensor_info *ti, ah_hf_op op, const char *name) {
    size_t n = (size_t)ti->grows * ti->gcols;
    if (ti->grows == 1)
        part(m, op, 0, n, 1, ti->gcols, 0, "%s", name);
    else if (op == AH_HF_TRANSPOSE)
        part(m, op, 0, n, 2, ti->gcols, ti->grows, "%s", name);
    else
        part(m, op, 0, n, 2, ti->grows, ti->gcols, "%s", name);
}

static void gpt2_block(const ah_tensor_info *ti, int b, ah_hf_map *m) {
    static const struct {
        const char *eng, *hf;
        ah_hf_op op;
    } t[] = {{"ln1_w", "ln_1.weight", AH_HF_COPY},         {"ln1_b", "ln_1.bias", AH_HF_COPY},
             {"qkv_w", "attn.c_attn.weight", AH_HF_TRANSPOSE}, {"qkv_b", "attn.c_attn.bias", AH_HF_COPY},
             {"proj_w", "attn.c_proj.weight", AH_HF_TRANSPOSE}, {"proj_b", "attn.c_proj.bias", AH_HF_COPY},
             {"ln2_w", "ln_2.weight", AH_HF_COPY},         {"ln2_b", "ln_2.bias", AH_HF_COPY},
             {"fc_w", "mlp.c_fc.weight", AH_HF_TRANSPOSE}, {"fc_b", "mlp.c_fc.bias", AH_HF_COPY},
             {"fcproj_w", "mlp.c_proj.weight", AH_HF_TRANSPOSE}, {"fcproj_b", "mlp.c_proj.bias", AH_HF_COPY}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(ti->name, t[i].eng)) {
            char name[AH_ST_MAX_NAME];
            snprintf(name, sizeof name, AH_HF_GPT2_PREFIX "h.%d.%s", b, t[i].hf);
            whole(m, ti, t[i].op, name);
        }
}

static void llama_block(const ah_model_config *c, const ah_tensor_info *ti, int b, ah_hf_map *m) {
    static const struct {
        const char *eng, *hf;
        int rope; /* 1: query heads, 2: key/value heads */
    } t[] = {{"rms1_w", "input_layernorm.weight", 0},
             {"q_w", "self_attn.q_proj.weight", 1},
             {"k_w", "self_attn.k_proj.weight", 2},
             {"v_w", "self_attn.v_proj.weight", 0},
             {"o_w", "self_attn.o_proj.weight", 0},
             {"rms2_w", "post_attention_layernorm.weight", 0},
             {"down_w", "mlp.down_proj.weight", 0},
             {"q_b", "self_attn.q_proj.bias", 1},
             {"k_b", "self_attn.k_proj.bias", 2},
             {"v_b", "self_attn.v_proj.bias", 0}};
    char name[AH_ST_MAX_NAME];
    if (!strcmp(ti->name, "gate_up_w")) { /* the engine's [2F, C]: gate rows, then up rows */
        size_t half = (size_t)c->ffn_hidden * ti->gcols;
        part(m, AH_HF_COPY, 0, half, 2, c->ffn_hidden, ti->gcols, "model.layers.%d.mlp.gate_proj.weight", b);
        part(m, AH_HF_COPY, half, half, 2, c->ffn_hidden, ti->gcols, "model.layers.%d.mlp.up_proj.weight", b);
        return;
    }
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(ti->name, t[i].eng)) {
            snprintf(name, sizeof name, "model.layers.%d.%s", b, t[i].hf);
            whole(m, ti, t[i].rope ? AH_HF_ROPE : AH_HF_COPY, name);
            m->p[0].heads = t[i].rope == 1 ? c->n_heads : c->n_kv_heads;
            m->p[0].head_dim = c->hidden / c->n_heads;
        }
}

void ah__hf_map_tensor(const ah_model_config *cfg, int l, const ah_tensor_info *ti, int tied_from_embedding,
                      ah_hf_map *m) {
    memset(m, 0, sizeof *m);
    if ((size_t)ti->grows * ti->gcols == 0)
        return;
    int llama = cfg->arch == AH_ARCH_LLAMA;
    const char *wte = llama ? "model.embed_tokens.weight" : AH_HF_GPT2_PREFIX "wte.weight";
    ah_layer_kind k = ah_model_layer_kind(cfg, l);
    if (k == AH_LAYER_EMBED) {
        whole(m, ti, AH_HF_COPY, !strcmp(ti->name, "wte") ? wte : AH_HF_GPT2_PREFIX "wpe.weight");
    } else if (k == AH_LAYER_BLOCK) {
        if (llama)
            llama_block(cfg, ti, l - 1, m);
        else
            gpt2_block(ti, l - 1, m);
    } else if (!strcmp(ti->name, "lm_head")) {
        if (!cfg->tied_embeddings)
            whole(m, ti, AH_HF_COPY, "lm_head.weight");
        else if (tied_from_embedding)
            whole(m, ti, AH_HF_COPY, wte);
    } else if (!strcmp(ti->name, "norm_w")) {
        whole(m, ti, AH_HF_COPY, llama ? "model.norm.weight" : AH_HF_GPT2_PREFIX "ln_f.weight");
    } else if (!strcmp(ti->name, "norm_b")) {
        whole(m, ti, AH_HF_COPY, AH_HF_GPT2_PREFIX "ln_f.bias");
    }
}

/* the HF unit (row of a weight, element of a bias) holding engine unit u of a
 * RoPE tensor: pairs (2i, 2i+1) of a head are HF's (i, i + D/2) */
static size_t rope_src(size_t u, int D) {
    size_t h = u / (size_t)D, w = u % (size_t)D, i = w / 2, j = w % 2;
    return h * (size_t)D + i + j * (size_t)(D / 2);
}

static void convert(const ah_hf_part *p, int gcols, const float *hf, float *eng, int to_engine) {
    float *e = eng + p->first;
    if (p->op == AH_HF_COPY) {
        memcpy(to_engine ? e : (float *)hf, to_engine ? hf : e, p->count * sizeof(float));
    } else if (p->op == AH_HF_TRANSPOSE) {
        size_t rows = p->count / (size_t)gcols;
        for (size_t r = 0; r < rows; r++)
            for (size_t c = 0; c < (size_t)gcols; c++) {
                float *a = &e[r * gcols + c], *b = (float *)&hf[c * rows + r];
                if (to_engine)
                    *a = *b;
                else
                    *b = *a;
            }
    } else {
        size_t units = (size_t)p->heads * p->head_dim, w = p->count / units;
        for (size_t u = 0; u < units; u++) {
            float *a = &e[u * w], *b = (float *)&hf[rope_src(u, p->head_dim) * w];
            memcpy(to_engine ? a : b, to_engine ? b : a, w * sizeof(float));
        }
    }
}

void ah__hf_part_to_engine(const ah_hf_part *p, int gcols, const float *hf, float *eng) {
    convert(p, gcols, hf, eng, 1);
}

void ah__hf_part_from_engine(const ah_hf_part *p, int gcols, const float *eng, float *hf) {
    convert(p, gcols, hf, (float *)eng, 0);
}
