/* Writing a Hugging Face model directory from full-layer parameters
 * (ah_hf_export, engine/hf_weights.h): config.json + model.safetensors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "engine/hf_map.h"
#include "engine/hf_weights.h"
#include "util/atomic_file.h"
#include "util/errors.h"

/* config.json as transformers writes it for GPT2LMHeadModel / LlamaForCausalLM
 * (Qwen2ForCausalLM with q/k/v biases) */
static char *config_json(const ah_model_config *c) {
    cJSON *o = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(o, "architectures");
    int llama = c->arch == AH_ARCH_LLAMA;
    int mistral = llama && c->attn_window > 0 && !c->qkv_bias; /* a sliding window: MistralForCausalLM */
    const char *arch = !llama     ? "GPT2LMHeadModel"
                       : mistral  ? "MistralForCausalLM"
                       : c->qkv_bias ? "Qwen2ForCausalLM"
                                     : "LlamaForCausalLM";
    cJSON_AddItemToArray(a, cJSON_CreateString(arch));
    cJSON_AddStringToObject(o, "_name_or_path", c->name);
    cJSON_AddStringToObject(o, "model_type", !llama ? "gpt2" : mistral ? "mistral" : c->qkv_bias ? "qwen2" : "llama");
    cJSON_AddNumberToObject(o, "vocab_size", c->vocab);
    double eps = c->norm_eps > 0 ? c->norm_eps : 1e-5;
    if (!llama) {
        cJSON_AddNumberToObject(o, "n_embd", c->hidden);
        cJSON_AddNumberToObject(o, "n_layer", c->n_layers);
        cJSON_AddNumberToObject(o, "n_head", c->n_heads);
        cJSON_AddNumberToObject(o, "n_inner", c->ffn_hidden);
        cJSON_AddNumberToObject(o, "n_positions", c->max_positions);
        cJSON_AddNumberToObject(o, "n_ctx", c->max_positions);
        cJSON_AddStringToObject(o, "activation_function", c->act == AH_ACT_RELU ? "relu" : "gelu_new");
        cJSON_AddNumberToObject(o, "layer_norm_epsilon", eps);
    } else {
        cJSON_AddNumberToObject(o, "hidden_size", c->hidden);
        cJSON_AddNumberToObject(o, "num_hidden_layers", c->n_layers);
        cJSON_AddNumberToObject(o, "num_attention_heads", c->n_heads);
        cJSON_AddNumberToObject(o, "num_key_value_heads", c->n_kv_heads);
        cJSON_AddNumberToObject(o, "intermediate_size", c->ffn_hidden);
        cJSON_AddStringToObject(o, "hidden_act", "silu");
        cJSON_AddNumberToObject(o, "rms_norm_eps", eps);
        cJSON_AddNumberToObject(o, "rope_theta", c->rope_theta > 0 ? c->rope_theta : 10000.0);
        /* RoPE has no position table: the engine's length is the run's; HF wants a number */
        int max_pos = c->max_positions > 0 ? c->max_positions : 2048;
        if (mistral && max_pos <= c->attn_window) /* (a window as wide as the context would read as none) */
            max_pos = 8 * c->attn_window;
        cJSON_AddNumberToObject(o, "max_position_embeddings", max_pos);
        if (c->qkv_bias)
            cJSON_AddFalseToObject(o, "use_sliding_window");
        if (mistral)
            cJSON_AddNumberToObject(o, "sliding_window", c->attn_window);
    }
    cJSON_AddBoolToObject(o, "tie_word_embeddings", c->tied_embeddings);
    cJSON_AddStringToObject(o, "torch_dtype", "float32");
    char *s = cJSON_Print(o);
    cJSON_Delete(o);
    return s;
}

typedef struct {
    ah_ckpt_tensor *t;
    char (*names)[AH_ST_MAX_NAME];
    float **data;
    int n, cap;
} hf_tensors;

static void add_tensor(hf_tensors *o, const ah_hf_part *p, float *data) {
    if (o->n == o->cap) {
        o->cap = o->cap ? 2 * o->cap : 64;
        o->t = ah_xrealloc(o->t, sizeof *o->t * (size_t)o->cap);
        o->names = ah_xrealloc(o->names, sizeof *o->names * (size_t)o->cap);
        o->data = ah_xrealloc(o->data, sizeof *o->data * (size_t)o->cap);
    }
    snprintf(o->names[o->n], sizeof o->names[0], "%s", p->name);
    o->data[o->n] = data;
    ah_ckpt_tensor *t = &o->t[o->n++];
    memset(t, 0, sizeof *t);
    t->data = data, t->ndim = p->ndim;
    for (int d = 0; d < p->ndim; d++)
        t->shape[d] = p->shape[d];
}

/* the HF tensors of layer l (its full parameters t) into o; 0 or -1 with err */
static int layer_tensors(const ah_model_config *cfg, int l, const ah_ckpt_loaded *t, int nt, hf_tensors *o,
                         char *err, size_t errlen) {
    ah_eng_layer L;
    ah__engine_layer_describe(cfg, l, 1, 0, &L);
    int rc = 0;
    for (int q = 0; q < L.n_tensors && rc == 0; q++) {
        const ah_tensor_info *ti = &L.t[q];
        ah_hf_map m;
        ah__hf_map_tensor(cfg, l, ti, 0, &m);
        char name[128];
        snprintf(name, sizeof name, "param.%s", ti->name);
        const ah_ckpt_loaded *src = NULL;
        for (int i = 0; i < nt && !src; i++)
            src = strcmp(t[i].name, name) ? NULL : &t[i];
        size_t full = (size_t)ti->grows * ti->gcols;
        if (m.n > 0 && (!src || src->n != full)) {
            snprintf(err, errlen, "layer %d: %s %s%zu values, the model %s needs %zu", l, name,
                     src ? "has " : "is missing: ", src ? src->n : 0, cfg->name, full);
            rc = -1;
        }
        for (int i = 0; i < m.n && rc == 0; i++) {
            float *hf = ah_xcalloc(m.p[i].count + 1, sizeof(float));
            ah__hf_part_from_engine(&m.p[i], ti->gcols, src->data, hf);
            add_tensor(o, &m.p[i], hf);
        }
    }
    ah__engine_layer_info_free(&L);
    return rc;
}

int ah_hf_export(const ah_weights_src *src, const char *out_dir, char *err, size_t errlen) {
    const ah_model_config *cfg = &src->cfg;
    if (ah__hf_supported(cfg, err, errlen) != 0)
        return -1;
    hf_tensors o = {0};
    int rc = 0;
    for (int l = 0; l < ah_model_num_layers(cfg) && rc == 0; l++) {
        ah_ckpt_loaded *t = NULL;
        int nt = 0;
        rc = src->layer(src->ctx, l, &t, &nt, err, errlen);
        if (rc == 0)
            rc = layer_tensors(cfg, l, t, nt, &o, err, errlen);
        ah_ckpt_free(t, nt);
    }
    char path[2048];
    if (rc == 0) {
        for (int i = 0; i < o.n; i++)
            o.t[i].name = o.names[i];
        static const char *const meta[][2] = {{"format", "pt"}};
        uint64_t bytes, xxh;
        snprintf(path, sizeof path, "%s/model.safetensors", out_dir);
        rc = ah_ckpt_write_shard(path, o.t, o.n, meta, 1, &bytes, &xxh, err, errlen);
    }
    if (rc == 0) {
        char *js = config_json(cfg);
        snprintf(path, sizeof path, "%s/config.json", out_dir);
        rc = ah_write_file_atomic(path, js, strlen(js), err, errlen);
        free(js);
    }
    for (int i = 0; i < o.n; i++)
        free(o.data[i]);
    free(o.t);
    free(o.names);
    free(o.data);
    return rc;
}
