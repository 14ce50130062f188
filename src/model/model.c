/* Model configs (HF config.json loading, name resolution) and the per-layer
 * quantities every other module uses. All formulas below are documented in
 * docs/cost-model.md; h = hidden, a = heads, V = vocab, P = learned positions,
 * f = MLP inner size, b = micro-batch, s = sequence length, t = TP degree. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "autohet/model.h"
#include "util/json_file.h"
#include "util/json_read.h"

/* ------------------------------------------------------------------ names */

const char *ah_arch_name(ah_arch a) {
    switch (a) {
    case AH_ARCH_GPT: return "gpt";
    case AH_ARCH_LLAMA: return "llama";
    case AH_ARCH_BERT: return "bert";
    }
    return "unknown";
}

static const char *const recompute_names[] = {"none", "selective", "full"};

int ah_recompute_parse(const char *s, ah_recompute *out) {
    if (s == NULL)
        return -1;
    for (int i = 0; i < 3; i++) {
        if (strcasecmp(s, recompute_names[i]) == 0) {
            if (out)
                *out = (ah_recompute)i;
            return 0;
        }
    }
    return -1;
}

const char *ah_recompute_name(ah_recompute r) {
    if ((int)r < 0 || (int)r > 2)
        return "unknown";
    return recompute_names[r];
}

/* ------------------------------------------------------------ JSON loading */

/* Largest accepted config.json; real ones are a few KiB. */
#define MAX_CONFIG_BYTES (16u << 20)
/* Upper bound for the other integers (window sizes, repeat counts). */
#define MAX_DIM (1 << 26)

/* Whether obj has key with a value: HF configs write null for "the default",
 * so null counts as absent. */
static int has_value(const cJSON *obj, const char *key) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    return it != NULL && !cJSON_IsNull(it);
}

/* First of the alternative keys that has a value, or NULL. */
static const char *present_key(const cJSON *obj, const char *const *keys) {
    for (; *keys != NULL; keys++)
        if (has_value(obj, *keys))
            return *keys;
    return NULL;
}

/* Reads an integer in [1, max] from one of `keys`. If none is present, uses
 * `dflt`, or fails naming keys[0] when dflt < 0 (required field). */
static int get_pos_int(const ah_err_ctx *cx, const cJSON *obj, const char *const *keys, int dflt, int max,
                       int *out) {
    const char *key = present_key(obj, keys);
    if (key == NULL) {
        if (dflt < 0)
            return ah_jfail(cx, keys[0], "missing");
        *out = dflt;
        return 0;
    }
    return ah_jget_int(cx, obj, "", key, 1, 1, max, out) < 0 ? -1 : 0;
}

typedef struct {
    const char *model_type;
    ah_arch arch;
    int rotary; /* RoPE: no learned position table */
} model_type_info;

static const model_type_info model_types[] = {
    {"gpt2", AH_ARCH_GPT, 0},        {"gpt_neo", AH_ARCH_GPT, 0},   {"opt", AH_ARCH_GPT, 0},
    {"gpt_bigcode", AH_ARCH_GPT, 0}, {"gpt_neox", AH_ARCH_GPT, 1},  {"gptj", AH_ARCH_GPT, 1},
    {"llama", AH_ARCH_LLAMA, 1},     {"mistral", AH_ARCH_LLAMA, 1}, {"qwen2", AH_ARCH_LLAMA, 1},
    {"bert", AH_ARCH_BERT, 0},       {"roberta", AH_ARCH_BERT, 0},
};
#define N_MODEL_TYPES (sizeof model_types / sizeof model_types[0])

static int has_key(const cJSON *obj, const char *key) {
    return cJSON_GetObjectItemCaseSensitive(obj, key) != NULL;
}

/* Architecture from "model_type", or guessed from which keys exist. */
static int detect_arch(const ah_err_ctx *cx, const cJSON *root, model_type_info *info) {
    if (has_value(root, "model_type")) {
        char mt[128];
        if (ah_jget_str(cx, root, "", "model_type", 1, mt, sizeof mt) < 0)
            return -1;
        for (size_t i = 0; i < N_MODEL_TYPES; i++) {
            if (strcasecmp(mt, model_types[i].model_type) == 0) {
                *info = model_types[i];
                return 0;
            }
        }
        return ah_jfail(cx, "model_type",
                        "unsupported value '%.64s' (supported: gpt2, gpt_neo, gpt_neox, gptj, gpt_bigcode, opt, "
                        "llama, mistral, qwen2, bert, roberta)",
                        mt);
    }
    info->model_type = NULL;
    info->rotary = 0;
    if (has_key(root, "n_embd")) {
        info->arch = AH_ARCH_GPT;
    } else if (has_key(root, "type_vocab_size")) {
        info->arch = AH_ARCH_BERT;
    } else if (has_key(root, "num_key_value_heads") || has_key(root, "rms_norm_eps") ||
               has_key(root, "rope_theta")) {
        info->arch = AH_ARCH_LLAMA;
        info->rotary = 1;
    } else if (has_key(root, "hidden_size")) {
        info->arch = AH_ARCH_GPT;
    } else {
        return ah_jfail(cx, "hidden_size",
                        "missing (or 'n_embd'; cannot tell the architecture without 'model_type')");
    }
    return 0;
}

/* Alternative key spellings, canonical one first. GPT-2 configs use n_*;
 * everything else (LLaMA, BERT, OPT, GPT-Neo(X)) uses the long names. */
static const char *const k2_hidden[] = {"n_embd", "hidden_size", "d_model", NULL};
static const char *const k2_layers[] = {"n_layer", "num_hidden_layers", "num_layers", NULL};
static const char *const k2_heads[] = {"n_head", "num_attention_heads", "num_heads", NULL};
static const char *const k2_ffn[] = {"n_inner", "ffn_dim", "intermediate_size", NULL};
static const char *const k2_pos[] = {"n_positions", "max_position_embeddings", "n_ctx", NULL};
static const char *const kh_hidden[] = {"hidden_size", "n_embd", "d_model", NULL};
static const char *const kh_layers[] = {"num_hidden_layers", "num_layers", "n_layer", NULL};
static const char *const kh_heads[] = {"num_attention_heads", "num_heads", "n_head", NULL};
static const char *const kh_ffn[] = {"intermediate_size", "ffn_dim", "n_inner", NULL};
static const char *const kh_pos[] = {"max_position_embeddings", "n_positions", "n_ctx", NULL};
static const char *const k_kv[] = {"num_key_value_heads", NULL};
static const char *const k_vocab[] = {"vocab_size", NULL};

static int read_dims(const ah_err_ctx *cx, const cJSON *root, const model_type_info *info,
                     ah_model_config *m) {
    int gpt2_style =
        has_key(root, "n_embd") || (info->model_type != NULL && strcmp(info->model_type, "gpt2") == 0);
    int llama = info->arch == AH_ARCH_LLAMA;
    const char *const *kf_ffn = gpt2_style ? k2_ffn : kh_ffn;
    const char *const *kf_pos = gpt2_style ? k2_pos : kh_pos;

    if (get_pos_int(cx, root, gpt2_style ? k2_hidden : kh_hidden, -1, AH_MODEL_MAX_HIDDEN, &m->hidden) ||
        get_pos_int(cx, root, gpt2_style ? k2_layers : kh_layers, -1, AH_MODEL_MAX_LAYERS, &m->n_layers) ||
        get_pos_int(cx, root, gpt2_style ? k2_heads : kh_heads, -1, AH_MODEL_MAX_HEADS, &m->n_heads) ||
        get_pos_int(cx, root, k_vocab, -1, AH_MODEL_MAX_VOCAB, &m->vocab))
        return -1;
    /* GQA only for LLaMA-style models; GPT/BERT formulas assume MHA. */
    m->n_kv_heads = m->n_heads;
    if (llama && get_pos_int(cx, root, k_kv, m->n_heads, AH_MODEL_MAX_HEADS, &m->n_kv_heads))
        return -1;
    /* MLP width: HF default 4h for GPT/BERT (then bounded by the config's own hidden size); LLaMA configs
     * always state it. */
    if (get_pos_int(cx, root, kf_ffn, llama ? -1 : 4 * m->hidden, AH_MODEL_MAX_FFN, &m->ffn_hidden))
        return -1;
    m->max_positions = 0;
    if (!info->rotary && get_pos_int(cx, root, kf_pos, -1, AH_MODEL_MAX_POSITIONS, &m->max_positions))
        return -1;

    const char *hkey = gpt2_style ? "n_embd" : "hidden_size";
    const char *akey = gpt2_style ? "n_head" : "num_attention_heads";
    if (m->hidden % m->n_heads != 0)
        return ah_jfail(cx, hkey, "%d must be divisible by '%s' (%d)", m->hidden, akey, m->n_heads);
    if (m->n_heads % m->n_kv_heads != 0)
        return ah_jfail(cx, akey, "%d must be divisible by 'num_key_value_heads' (%d)", m->n_heads,
                        m->n_kv_heads);
    return 0;
}

static int is_type(const model_type_info *info, const char *mt) {
    return info->model_type != NULL && strcmp(info->model_type, mt) == 0;
}

/* HF activation_function of a GPT-style config (default: the family's). */
static int read_activation(const ah_err_ctx *cx, const cJSON *root, const model_type_info *info,
                           ah_model_config *m) {
    char act[64];
    snprintf(act, sizeof act, "%s",
             is_type(info, "opt")        ? "relu"
             : is_type(info, "gpt_neox") ? "gelu"
                                         : "gelu_new");
    if (has_value(root, "activation_function") &&
        ah_jget_str(cx, root, "", "activation_function", 1, act, sizeof act) < 0)
        return -1;
    static const char *const tanh_names[] = {"gelu_new", "gelu_pytorch_tanh", NULL};
    m->act = AH_ACT_OTHER;
    for (int i = 0; tanh_names[i] != NULL; i++)
        if (strcmp(act, tanh_names[i]) == 0)
            m->act = AH_ACT_GELU_TANH;
    if (strcmp(act, "relu") == 0)
        m->act = AH_ACT_RELU;
    else if (strcmp(act, "gelu") == 0)
        m->act = AH_ACT_GELU_EXACT;
    return 0;
}

/* OPT: the embedding projection, the 2-row position offset, post-LN. */
static int read_opt(const ah_err_ctx *cx, const cJSON *root, ah_model_config *m) {
    static const char *const k_proj[] = {"word_embed_proj_dim", NULL};
    int proj = m->hidden, before = 1, bias = 1;
    if (get_pos_int(cx, root, k_proj, m->hidden, AH_MODEL_MAX_HIDDEN, &proj))
        return -1;
    m->embed_dim = proj != m->hidden ? proj : 0;
    m->pos_offset = 2; /* OPTLearnedPositionalEmbedding: max_position_embeddings + 2 rows */
    if (has_value(root, "do_layer_norm_before") &&
        ah_jget_bool(cx, root, "", "do_layer_norm_before", 1, &before) < 0)
        return -1;
    m->post_norm = !before;
    if (has_value(root, "enable_bias") && ah_jget_bool(cx, root, "", "enable_bias", 1, &bias) < 0)
        return -1;
    if (!bias)
        return ah_jfail(cx, "enable_bias", "false is not supported (OPT without biases)");
    return 0;
}

/* Marks block i local from the string "local" / "global" it; -1 on another value. */
static int set_attention_kind(const ah_err_ctx *cx, const char *field, const cJSON *it, int i,
                              ah_model_config *m) {
    if (!cJSON_IsString(it) || (strcmp(it->valuestring, "local") && strcmp(it->valuestring, "global")))
        return ah_jfail(cx, field, "expected \"global\" or \"local\" entries");
    if (strcmp(it->valuestring, "local") != 0)
        return 0;
    if (i >= AH_MAX_LOCAL_LAYERS)
        return ah_jfail(cx, field, "local layers beyond block %d are not supported", AH_MAX_LOCAL_LAYERS);
    m->local_layers[i / 8] |= (unsigned char)(1u << (i % 8));
    return 0;
}

/* GPT-Neo's attention_layers (one entry per block), or attention_types
 * ([[["global", "local"], 12]]: patterns repeated), HF's default the latter. */
static int read_neo_layers(const ah_err_ctx *cx, const cJSON *root, ah_model_config *m) {
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(root, "attention_layers");
    int n = 0;
    if (layers != NULL && !cJSON_IsNull(layers)) {
        if (!cJSON_IsArray(layers))
            return ah_jfail(cx, "attention_layers", "expected an array");
        const cJSON *it;
        cJSON_ArrayForEach(it, layers) {
            if (n < m->n_layers && set_attention_kind(cx, "attention_layers", it, n, m))
                return -1;
            n++;
        }
        if (n != m->n_layers)
            return ah_jfail(cx, "attention_layers", "%d entries for %d layers", n, m->n_layers);
        return 0;
    }
    cJSON *dflt = cJSON_Parse("[[[\"global\", \"local\"], 12]]");
    const cJSON *types = cJSON_GetObjectItemCaseSensitive(root, "attention_types");
    types = types != NULL && !cJSON_IsNull(types) ? types : dflt;
    int rc = cJSON_IsArray(types) ? 0 : ah_jfail(cx, "attention_types", "expected an array");
    double described = 0;
    const cJSON *group;
    cJSON_ArrayForEach(group, types) {
        const cJSON *pat = cJSON_GetArrayItem(group, 0), *rep = cJSON_GetArrayItem(group, 1);
        if (rc || !cJSON_IsArray(group) || !cJSON_IsArray(pat) || !cJSON_IsNumber(rep) ||
            rep->valuedouble < 0 || rep->valuedouble > MAX_DIM) {
            rc = rc ? rc
                    : ah_jfail(cx, "attention_types", "expected [[[\"global\", \"local\"], repeats], ...]");
            break;
        }
        /* walk the repeats only up to the model's blocks (a huge count must not take minutes); count the rest */
        for (int r = 0; r < rep->valueint && !rc && n < m->n_layers; r++) {
            const cJSON *it;
            cJSON_ArrayForEach(it, pat) {
                if (!rc && n < m->n_layers)
                    rc = set_attention_kind(cx, "attention_types", it, n, m);
                n++;
            }
        }
        described += (double)rep->valueint * cJSON_GetArraySize(pat);
    }
    cJSON_Delete(dflt);
    if (rc == 0 && described != m->n_layers)
        rc = ah_jfail(cx, "attention_types", "describes %.0f layers, the model has %d", described, m->n_layers);
    return rc;
}

/* GPT-Neo: no q/k/v biases, unscaled attention scores, local layers. */
static int read_neo(const ah_err_ctx *cx, const cJSON *root, ah_model_config *m) {
    static const char *const k_window[] = {"window_size", NULL};
    m->no_qkv_bias = 1;
    m->unscaled_attention = 1;
    if (read_neo_layers(cx, root, m))
        return -1;
    int any_local = 0;
    for (int b = 0; b < m->n_layers && !any_local; b++)
        any_local = ah_model_block_is_local(m, b);
    m->attn_window = 0;
    if (any_local && get_pos_int(cx, root, k_window, 256, MAX_DIM, &m->attn_window))
        return -1;
    return 0;
}

/* What sets a family apart from the plain GPT-2 / LLaMA block. */
static int read_sliding_window(const ah_err_ctx *cx, const cJSON *root, const model_type_info *info,
                               ah_model_config *m);

static int read_family(const ah_err_ctx *cx, const cJSON *root, const model_type_info *info,
                       ah_model_config *m) {
    if (info->arch == AH_ARCH_GPT && read_activation(cx, root, info, m))
        return -1;
    if (is_type(info, "opt") && read_opt(cx, root, m))
        return -1;
    if (is_type(info, "gpt_neo") && read_neo(cx, root, m))
        return -1;
    if (is_type(info, "qwen2"))
        m->qkv_bias = 1; /* Qwen2Attention: q/k/v with bias, o_proj without */
    if (read_sliding_window(cx, root, info, m))
        return -1;
    static const char *const k_eps[] = {"rms_norm_eps", "layer_norm_epsilon", "layer_norm_eps", NULL};
    const char *eps_key = present_key(root, k_eps);
    if (eps_key != NULL) {
        const cJSON *ep = cJSON_GetObjectItemCaseSensitive(root, eps_key);
        if (!cJSON_IsNumber(ep) || !(ep->valuedouble > 0.0) || !(ep->valuedouble < 1.0))
            return ah_jfail(cx, eps_key, "expected a number in (0, 1)");
        m->norm_eps = ep->valuedouble;
    }
    if (info->rotary && has_value(root, "rope_theta")) {
        const cJSON *th = cJSON_GetObjectItemCaseSensitive(root, "rope_theta");
        if (!cJSON_IsNumber(th) || !(th->valuedouble > 1.0) || th->valuedouble > 1e12)
            return ah_jfail(cx, "rope_theta", "expected a number above 1");
        m->rope_theta = th->valuedouble;
    }
    return 0;
}

static int read_tied(const ah_err_ctx *cx, const cJSON *root, ah_arch arch, int *tied) {
    /* HF default: LlamaConfig unties, the others tie. */
    *tied = arch != AH_ARCH_LLAMA;
    if (!has_value(root, "tie_word_embeddings"))
        return 0;
    return ah_jget_bool(cx, root, "", "tie_word_embeddings", 1, tied) < 0 ? -1 : 0;
}

/* "name_or_path" if given, else the file name without ".json"; for the
 * ubiquitous "config.json" the directory name is more telling. */
static void set_name(const cJSON *root, const char *path, ah_model_config *m) {
    static const char *const keys[] = {"name_or_path", "_name_or_path", NULL};
    const char *key = present_key(root, keys);
    const cJSON *it = key != NULL ? cJSON_GetObjectItemCaseSensitive(root, key) : NULL;
    if (it != NULL && cJSON_IsString(it) && it->valuestring[0] != '\0') {
        snprintf(m->name, sizeof m->name, "%s", it->valuestring);
        return;
    }
    const char *end = path + strlen(path);
    while (end > path && end[-1] == '/')
        end--;
    const char *base = end;
    while (base > path && base[-1] != '/')
        base--;
    if ((size_t)(end - base) == strlen("config.json") && strncmp(base, "config.json", 11) == 0 &&
        base > path) {
        const char *dend = base - 1;
        while (dend > path && dend[-1] == '/')
            dend--;
        const char *dir = dend;
        while (dir > path && dir[-1] != '/')
            dir--;
        size_t dlen = (size_t)(dend - dir);
        int dots = (dlen == 1 && dir[0] == '.') || (dlen == 2 && strncmp(dir, "..", 2) == 0);
        if (dlen > 0 && !dots) {
            base = dir;
            end = dend;
        }
    }
    if (end - base > 5 && strncmp(end - 5, ".json", 5) == 0)
        end -= 5;
    snprintf(m->name, sizeof m->name, "%.*s", (int)(end - base), base);
}

/* What neither the cost model nor the engine computes, refused by name
 * rather than mis-modelled: mixture-of-experts layers. (Sliding-window
 * attention is read_sliding_window's, once the family is known.) */
static int refuse_unsupported(const ah_err_ctx *cx, const cJSON *root) {
    static const char *const moe_keys[] = {"num_local_experts", "num_experts", "n_routed_experts",
                                           "moe_num_experts", "num_experts_per_tok", NULL};
    const char *moe = present_key(root, moe_keys);
    if (moe != NULL) {
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, moe);
        if (!cJSON_IsNumber(it) || it->valuedouble > 1 || strcmp(moe, "num_experts_per_tok") == 0)
            return ah_jfail(cx, moe, "mixture-of-experts models are not supported");
    }
    return 0;
}

/* Sliding-window attention (Mistral): every block sees the last
 * sliding_window positions, itself included, as GPT-Neo's local layers do
 * (the engine's windowed attention, forward, backward and the KV cache). A
 * window as wide as the context, or use_sliding_window false (Qwen2's
 * configs), is full attention. Qwen2's windows on only some layers
 * (max_window_layers) are refused, as is a window on another family. */
static int read_sliding_window(const ah_err_ctx *cx, const cJSON *root, const model_type_info *info,
                               ah_model_config *m) {
    if (!has_value(root, "sliding_window"))
        return 0;
    const cJSON *use = cJSON_GetObjectItemCaseSensitive(root, "use_sliding_window");
    if (use != NULL && cJSON_IsFalse(use))
        return 0;
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(root, "sliding_window");
    const cJSON *ctx = cJSON_GetObjectItemCaseSensitive(root, "max_position_embeddings");
    if (!cJSON_IsNumber(w) || w->valuedouble < 1 || w->valuedouble > 1 << 30 || w->valuedouble != (int)w->valuedouble)
        return ah_jfail(cx, "sliding_window", "expected a positive integer or null");
    if (cJSON_IsNumber(ctx) && w->valuedouble >= ctx->valuedouble)
        return 0; /* a window as wide as the context is full attention */
    if (info->arch != AH_ARCH_LLAMA || is_type(info, "qwen2"))
        return ah_jfail(cx, "sliding_window", "sliding-window attention is computed for Mistral-style models "
                                              "(every layer local) only: set it to null or use_sliding_window false");
    if (m->n_layers > AH_MAX_LOCAL_LAYERS)
        return ah_jfail(cx, "sliding_window", "at most %d layers with a window", AH_MAX_LOCAL_LAYERS);
    m->attn_window = (int)w->valuedouble;
    for (int b = 0; b < m->n_layers; b++)
        m->local_layers[b / 8] |= (unsigned char)(1u << (b % 8));
    return 0;
}

int ah_model_load_json(const char *path, ah_model_config *out, char *err, size_t errlen) {
    ah_err_ctx cx = {path ? path : "(null)", err, errlen};
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (path == NULL || out == NULL)
        return ah_fail(&cx, "no file given");
    cJSON *root = ah_json_parse_file(path, MAX_CONFIG_BYTES, 1, err, errlen);
    if (root == NULL)
        return -1;
    ah_model_config m;
    memset(&m, 0, sizeof m);
    model_type_info info = {NULL, AH_ARCH_GPT, 0};
    int rc = refuse_unsupported(&cx, root);
    if (rc == 0)
        rc = detect_arch(&cx, root, &info);
    if (rc == 0)
        rc = read_dims(&cx, root, &info, &m);
    if (rc == 0)
        rc = read_family(&cx, root, &info, &m);
    if (rc == 0)
        rc = read_tied(&cx, root, info.arch, &m.tied_embeddings);
    if (rc == 0) {
        m.arch = info.arch;
        set_name(root, path, &m);
        *out = m;
    }
    cJSON_Delete(root);
    return rc;
}

static int is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && !S_ISDIR(st.st_mode);
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcasecmp(s + n - k, suffix) == 0;
}

int ah_model_resolve(const char *name_or_path, ah_model_config *out, char *err, size_t errlen) {
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (name_or_path != NULL && ah_model_preset(name_or_path, out) == 0)
        return 0;
    /* A file (or something meant as one) gets the loader's precise error. */
    if (name_or_path != NULL && name_or_path[0] != '\0' &&
        (is_file(name_or_path) || ends_with(name_or_path, ".json")))
        return ah_model_load_json(name_or_path, out, err, errlen);
    if (err == NULL || errlen == 0)
        return -1;
    int n =
        snprintf(err, errlen, "unknown model '%s' (not a preset; presets:", name_or_path ? name_or_path : "");
    const char *const *names = ah_model_preset_names();
    for (int i = 0; names[i] != NULL && n >= 0 && (size_t)n < errlen; i++)
        n += snprintf(err + n, errlen - (size_t)n, "%s %s", i ? "," : "", names[i]);
    if (n >= 0 && (size_t)n < errlen)
        snprintf(err + n, errlen - (size_t)n, "; or give a path to config.json)");
    return -1;
}

int ah_model_check_seq(const ah_model_config *m, int seq, const char *what, char *buf, size_t n) {
    if (m->max_positions <= 0 || seq <= m->max_positions)
        return 0;
    if (buf != NULL && n > 0)
        snprintf(buf, n,
                 "%s%s%d exceeds the %d learned positions of model %s (its position table: "
                 "max_position_embeddings / n_positions)",
                 what, what[0] ? " " : "", seq, m->max_positions, m->name);
    return -1;
}

/* ------------------------------------------------------------ layer math */

int ah_model_num_layers(const ah_model_config *m) {
    return m->n_layers + 2;
}

ah_layer_kind ah_model_layer_kind(const ah_model_config *m, int layer) {
    if (layer <= 0)
        return AH_LAYER_EMBED;
    if (layer >= m->n_layers + 1)
        return AH_LAYER_HEAD;
    return AH_LAYER_BLOCK;
}

/* Width of the K and V projections under GQA: h * kv_heads / heads. */
static double kv_width(const ah_model_config *m) {
    if (m->n_heads <= 0)
        return m->hidden;
    return (double)m->hidden * m->n_kv_heads / m->n_heads;
}

/* Parameters (E = embedding width, h unless OPT's word_embed_proj_dim;
 * O = OPT's 2 extra position rows):
 *  GPT/BERT block = 4h^2 + 4h          attention QKV + output projection, with biases
 *                                      (GPT-Neo: no q/k/v biases, 4h^2 + h)
 *                 + 2hf + f + h        MLP up/down with biases
 *                 + 4h                 two LayerNorms (gain + bias)
 *  LLaMA block    = 2h^2 + 2*h*h_kv    Q, O and the (GQA-narrowed) K, V; no biases
 *                                      (Qwen2: + h + 2 h_kv q/k/v biases)
 *                 + 3hf                SwiGLU gate, up, down
 *                 + 2h                 two RMSNorm gains
 *  Embedding: GPT V*E + (P+O)*h (+ E*h project_in when E != h); BERT adds 2h
 *             token types and a 2h LayerNorm; LLaMA V*h (RoPE has no parameters).
 *  Head: final norm (2h LayerNorm, h RMSNorm; none for post-LN OPT)
 *        (+ h*E project_out when E != h) + V*E LM matrix, counted even when
 *        tied (Megatron keeps a copy on the last stage).
 *        BERT MLM head: h^2 + h transform + 2h LayerNorm + V*h decoder + V bias. */
static double block_params(const ah_model_config *m) {
    double h = m->hidden, f = m->ffn_hidden, kv = kv_width(m);
    if (m->arch == AH_ARCH_LLAMA)
        return 2.0 * h * h + 2.0 * h * kv + 3.0 * h * f + 2.0 * h + (m->qkv_bias ? h + 2.0 * kv : 0.0);
    return 4.0 * h * h + (m->no_qkv_bias ? h : 4.0 * h) + 2.0 * h * f + f + h + 4.0 * h;
}

double ah_layer_params(const ah_model_config *m, ah_layer_kind k) {
    double h = m->hidden, V = m->vocab, P = m->max_positions + m->pos_offset, E = ah_model_embed_width(m);
    double proj = E != h ? E * h : 0.0;
    switch (k) {
    case AH_LAYER_EMBED:
        if (m->arch == AH_ARCH_LLAMA)
            return V * h;
        return V * E + P * h + proj + (m->arch == AH_ARCH_BERT ? 4.0 * h : 0.0);
    case AH_LAYER_BLOCK: return block_params(m);
    case AH_LAYER_HEAD:
        if (m->arch == AH_ARCH_BERT)
            return h * h + h + 2.0 * h + V * h + V;
        if (m->arch == AH_ARCH_LLAMA)
            return h + V * h;
        return (m->post_norm ? 0.0 : 2.0 * h) + proj + V * E;
    }
    return 0.0;
}

int ah_model_embed_width(const ah_model_config *m) {
    return m->embed_dim > 0 && m->arch == AH_ARCH_GPT ? m->embed_dim : m->hidden;
}

int ah_model_block_is_local(const ah_model_config *m, int b) {
    if (b < 0 || b >= AH_MAX_LOCAL_LAYERS)
        return 0;
    return (m->local_layers[b / 8] >> (b % 8)) & 1;
}

double ah_model_tied_params(const ah_model_config *m) {
    return (double)m->vocab * ah_model_embed_width(m);
}

const char *ah_activation_name(ah_activation a) {
    switch (a) {
    case AH_ACT_GELU_TANH: return "gelu_new";
    case AH_ACT_RELU: return "relu";
    case AH_ACT_GELU_EXACT: return "gelu";
    case AH_ACT_OTHER: break;
    }
    return "other";
}

int ah_model_padded_vocab(const ah_model_config *m) {
    return (m->vocab + AH_VOCAB_PAD - 1) / AH_VOCAB_PAD * AH_VOCAB_PAD;
}

/* Embedding + N blocks + head, minus the head's copy of a tied V*h matrix. */
double ah_model_total_params(const ah_model_config *m) {
    double total = ah_layer_params(m, AH_LAYER_EMBED) + m->n_layers * ah_layer_params(m, AH_LAYER_BLOCK) +
                   ah_layer_params(m, AH_LAYER_HEAD);
    if (m->tied_embeddings)
        total -= ah_model_tied_params(m);
    return total;
}

/* Forward FLOPs (2 per multiply-add), b sequences of length s:
 *  GPT/BERT block = 2bs(4h^2 + 2hf) + 4bs^2h   (GEMMs + QK^T and attention*V)
 *  LLaMA block    = 2bs(2h^2 + 2h*h_kv + 3hf) + 4bs^2h
 *  head           = 2bshV   (LM projection; norms and the BERT transform ignored)
 *  embedding      = 0       (a gather)
 *  OPT's narrower embedding (E < h, word_embed_proj_dim): the head is
 *  2bsEh (project_out) + 2bsEV and the embedding 2bsEh (project_in), as the
 *  cost model's GEMM list (src/cost/gemm_model.c) counts them. */
double ah_layer_fwd_flops(const ah_model_config *m, ah_layer_kind k, int seq, int mb) {
    double h = m->hidden, f = m->ffn_hidden, V = m->vocab, s = seq, b = mb, E = ah_model_embed_width(m);
    double proj = E < h ? 2.0 * b * s * E * h : 0.0;
    switch (k) {
    case AH_LAYER_EMBED: return proj;
    case AH_LAYER_BLOCK: {
        double gemm = m->arch == AH_ARCH_LLAMA ? 2.0 * h * h + 2.0 * h * kv_width(m) + 3.0 * h * f
                                               : 4.0 * h * h + 2.0 * h * f;
        return 2.0 * b * s * gemm + 4.0 * b * s * s * h;
    }
    case AH_LAYER_HEAD: return proj + 2.0 * b * s * E * V;
    }
    return 0.0;
}

/* Forward HBM traffic per GPU at TP t (bf16 = 2 bytes), for the roofline:
 *  block: weights (params/t)*2 + activations ~16 bsh tensors read/written
 *         16bsh*2/t + attention scores 2*b*a*s^2*2/t (written, then read)
 *  embedding: gather + write of the b*s*h output, bsh*2*2
 *  head: weights V*h*2/t + fp32 logits written and read, bsV*4/t*2 */
double ah_layer_fwd_bytes(const ah_model_config *m, ah_layer_kind k, int seq, int mb, int tp) {
    double h = m->hidden, V = m->vocab, s = seq, b = mb, a = m->n_heads;
    double t = tp > 0 ? tp : 1;
    switch (k) {
    case AH_LAYER_EMBED: return b * s * h * 2.0 * 2.0;
    case AH_LAYER_BLOCK:
        return ah_layer_params(m, k) / t * 2.0 + 16.0 * b * s * h * 2.0 / t + 2.0 * b * a * s * s * 2.0 / t;
    case AH_LAYER_HEAD: return V * h * 2.0 / t + b * s * V * 4.0 / t * 2.0;
    }
    return 0.0;
}

/* Activation bytes kept per in-flight micro-batch per GPU (Korthikanti et al.
 * 2022, "Reducing Activation Recomputation in Large Transformer Models",
 * tensor parallel without sequence parallelism):
 *  none:      sbh(10 + 24/t + 5as/(ht))
 *  selective: sbh(10 + 24/t)          (attention scores/softmax recomputed)
 *  full:      2sbh                    (only the block input is kept)
 * 24/t = 5/t for the TP-split attention tensors + 19/t for the MLP (2sbh
 * input, 8sbh + 8sbh for the 4h-wide GEMM output and GeLU, sbh dropout mask).
 * For LLaMA the MLP part scales with f/(4h): 24/t -> (5 + 19f/(4h))/t; the
 * SwiGLU gate/up pair is approximated by the same per-element accounting.
 *  embedding: 2sbh (its output);  head: 2sbh + 4sbV/t (fp32 logits for the loss). */
/* The coefficients are bf16 bytes (Korthikanti et al.); another precision
 * scales them by its element size over 2 (the 1-byte dropout masks are scaled
 * too, a small overestimate for fp32); the head's fp32 logits stay 4 bytes. */
double ah_layer_act_bytes(const ah_model_config *m, ah_layer_kind k, int seq, int mb, int tp,
                          ah_recompute rc, ah_precision_mode prec) {
    double h = m->hidden, V = m->vocab, s = seq, b = mb, a = m->n_heads;
    double t = tp > 0 ? tp : 1;
    double x = ah_precision_bytes_of(prec)->elem / 2.0;
    double sbh = s * b * h * x;
    switch (k) {
    case AH_LAYER_EMBED: return 2.0 * sbh;
    case AH_LAYER_HEAD: return 2.0 * sbh + 4.0 * s * b * V / t;
    case AH_LAYER_BLOCK: break;
    }
    if (rc == AH_RECOMPUTE_FULL)
        return 2.0 * sbh;
    double tp_part = 24.0;
    if (m->arch == AH_ARCH_LLAMA)
        tp_part = 5.0 + 19.0 * m->ffn_hidden / (4.0 * h);
    double per = 10.0 + tp_part / t;
    if (rc == AH_RECOMPUTE_NONE)
        per += 5.0 * a * s / (h * t);
    return sbh * per;
}

/* One b x s x h activation tensor. */
double ah_model_p2p_bytes(const ah_model_config *m, int seq, int mb, ah_precision_mode prec) {
    return ah_precision_bytes_of(prec)->elem * mb * (double)seq * m->hidden;
}

double ah_model_hw_flops_per_sequence(const ah_model_config *m, int seq, ah_recompute rc) {
    double extra = 0.0;
    if (rc == AH_RECOMPUTE_FULL)
        extra = m->n_layers * ah_layer_fwd_flops(m, AH_LAYER_BLOCK, seq, 1);
    else if (rc == AH_RECOMPUTE_SELECTIVE)
        extra = m->n_layers * 4.0 * (double)seq * seq * m->hidden;
    return ah_model_flops_per_sequence(m, seq) + extra;
}

/* bf16 / fp16 mixed precision: 2-byte weights and activations, fp32
 * gradients (Megatron accumulates them in fp32), fp32 master, Adam m + v;
 * the optimizer step reads master, m, v, grad (16 B), writes master, m, v
 * (12 B) and the 2-byte weight, ~32 B with overheads. fp32: no master copy;
 * the step reads weight, m, v, grad and writes weight, m, v (28 B), ~30 B
 * with the same overhead. */
static const ah_precision_bytes precision_bytes[3] = {
    {2.0, 2.0, 4.0, 4.0, 8.0, 32.0}, /* bf16 */
    {2.0, 2.0, 4.0, 4.0, 8.0, 32.0}, /* fp16 */
    {4.0, 4.0, 4.0, 0.0, 8.0, 30.0}, /* fp32 */
};
static const char *precision_names[3] = {"bf16", "fp16", "fp32"};
static const char *p2p_names[3] = {"overlapped", "blocking", "lockstep"};

const ah_precision_bytes *ah_precision_bytes_of(ah_precision_mode p) {
    return &precision_bytes[(int)p >= 0 && (int)p < 3 ? (int)p : 0];
}

double ah_state_bytes_per_param(ah_precision_mode p, int shards) {
    const ah_precision_bytes *b = ah_precision_bytes_of(p);
    return b->weight + b->grad + (b->master + b->adam) / (shards > 1 ? shards : 1);
}

double ah_dp_sync_bytes_per_param(ah_precision_mode p, int dist_optimizer) {
    const ah_precision_bytes *b = ah_precision_bytes_of(p);
    return dist_optimizer ? b->grad + b->weight : 2.0 * b->grad;
}

/* Index of s in names[0..n) (case-insensitive), or -1. */
static int name_index(const char *const *names, int n, const char *s) {
    for (int i = 0; s && i < n; i++)
        if (strcasecmp(s, names[i]) == 0)
            return i;
    return -1;
}

int ah_precision_parse(const char *s, ah_precision_mode *out) {
    int i = name_index(precision_names, 3, s);
    if (i >= 0 && out)
        *out = (ah_precision_mode)i;
    return i >= 0 ? 0 : -1;
}

const char *ah_precision_name(ah_precision_mode p) {
    return (int)p >= 0 && (int)p < 3 ? precision_names[p] : "unknown";
}

int ah_p2p_mode_parse(const char *s, ah_p2p_mode *out) {
    int i = name_index(p2p_names, 3, s);
    if (i >= 0 && out)
        *out = (ah_p2p_mode)i;
    return i >= 0 ? 0 : -1;
}

const char *ah_p2p_mode_name(ah_p2p_mode p) {
    return (int)p >= 0 && (int)p < 3 ? p2p_names[p] : "unknown";
}

/* 3 x forward (forward + 2x backward) of every layer for one sequence. */
double ah_model_flops_per_sequence(const ah_model_config *m, int seq) {
    double fwd = ah_layer_fwd_flops(m, AH_LAYER_EMBED, seq, 1) +
                 m->n_layers * ah_layer_fwd_flops(m, AH_LAYER_BLOCK, seq, 1) +
                 ah_layer_fwd_flops(m, AH_LAYER_HEAD, seq, 1);
    return 3.0 * fwd;
}
