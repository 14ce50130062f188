/* Family details of a model config in JSON (model_json.h). */
#include "model/model_json.h"

#include <limits.h>
#include <string.h>

#include "util/json_read.h"

static const char *const act_names[] = {"gelu_new", "relu", "gelu", "other"};

int ah_model_family_to_json(cJSON *o, const ah_model_config *m) {
    const struct {
        const char *key;
        int v;
    } ints[] = {{"embed_dim", m->embed_dim},     {"pos_offset", m->pos_offset},
                {"post_norm", m->post_norm},     {"qkv_bias", m->qkv_bias},
                {"no_qkv_bias", m->no_qkv_bias}, {"unscaled_attention", m->unscaled_attention},
                {"attn_window", m->attn_window}};
    int ok = 1;
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (ints[i].v != 0)
            ok &= cJSON_AddNumberToObject(o, ints[i].key, ints[i].v) != NULL;
    if (m->act > 0 && m->act < 4)
        ok &= cJSON_AddStringToObject(o, "activation", act_names[m->act]) != NULL;
    if (m->rope_theta > 0)
        ok &= cJSON_AddNumberToObject(o, "rope_theta", m->rope_theta) != NULL;
    if (m->norm_eps > 0 && m->norm_eps != 1e-5)
        ok &= cJSON_AddNumberToObject(o, "norm_eps", m->norm_eps) != NULL;
    if (m->attn_window > 0) {
        cJSON *arr = cJSON_AddArrayToObject(o, "local_layers");
        ok &= arr != NULL;
        for (int b = 0; arr != NULL && b < m->n_layers; b++)
            if (ah_model_block_is_local(m, b))
                ok &= cJSON_AddItemToArray(arr, cJSON_CreateNumber(b));
    }
    return ok ? 0 : -1;
}

static int read_local_layers(const ah_err_ctx *cx, const cJSON *o, const char *parent, ah_model_config *m) {
    const cJSON *arr;
    char path[AH_JPATH_LEN];
    int rc = ah_jget_arr(cx, o, parent, "local_layers", 0, &arr, path);
    if (rc <= 0)
        return rc;
    memset(m->local_layers, 0, sizeof m->local_layers);
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        if (!cJSON_IsNumber(it) || it->valuedouble != (double)it->valueint || it->valueint < 0 ||
            it->valueint >= m->n_layers || it->valueint >= AH_MAX_LOCAL_LAYERS)
            return ah_jfail(cx, path, "expected block indices in [0, %d)", m->n_layers);
        m->local_layers[it->valueint / 8] |= (unsigned char)(1u << (it->valueint % 8));
    }
    return 0;
}

int ah_model_family_from_json(const ah_err_ctx *cx, const cJSON *o, const char *parent, ah_model_config *m) {
    struct {
        const char *key;
        int *v;
    } ints[] = {{"embed_dim", &m->embed_dim},     {"pos_offset", &m->pos_offset},
                {"post_norm", &m->post_norm},     {"qkv_bias", &m->qkv_bias},
                {"no_qkv_bias", &m->no_qkv_bias}, {"unscaled_attention", &m->unscaled_attention},
                {"attn_window", &m->attn_window}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (ah_jget_int(cx, o, parent, ints[i].key, 0, 0, 1 << 26, ints[i].v) < 0)
            return -1;
    char act[16] = "gelu_new", path[AH_JPATH_LEN];
    if (ah_jget_str(cx, o, parent, "activation", 0, act, sizeof act) < 0)
        return -1;
    m->act = -1;
    for (int i = 0; i < 4; i++)
        if (strcmp(act, act_names[i]) == 0)
            m->act = i;
    if (m->act < 0) {
        ah_jpath_key(path, parent, "activation");
        return ah_jfail(cx, path, "unknown activation \"%s\" (expected gelu_new, relu, gelu or other)", act);
    }
    m->rope_theta = 0;
    m->norm_eps = 0;
    if (ah_jget_num(cx, o, parent, "rope_theta", 0, 0, &m->rope_theta) < 0 ||
        ah_jget_num(cx, o, parent, "norm_eps", 0, 0, &m->norm_eps) < 0)
        return -1;
    return read_local_layers(cx, o, parent, m);
}

cJSON *ah_model_config_to_json(const ah_model_config *m) {
    cJSON *o = cJSON_CreateObject();
    const struct {
        const char *key;
        int v;
    } dims[] = {{"hidden", m->hidden},
                {"n_layers", m->n_layers},
                {"n_heads", m->n_heads},
                {"n_kv_heads", m->n_kv_heads},
                {"ffn_hidden", m->ffn_hidden},
                {"vocab", m->vocab},
                {"max_positions", m->max_positions}};
    int ok = o && cJSON_AddStringToObject(o, "name", m->name) &&
             cJSON_AddStringToObject(o, "arch", ah_arch_name(m->arch));
    for (size_t i = 0; ok && i < sizeof dims / sizeof dims[0]; i++)
        ok = cJSON_AddNumberToObject(o, dims[i].key, dims[i].v) != NULL;
    ok = ok && cJSON_AddBoolToObject(o, "tied_embeddings", m->tied_embeddings) &&
         ah_model_family_to_json(o, m) == 0;
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static int read_arch(const ah_err_ctx *cx, const cJSON *o, const char *parent, ah_model_config *m) {
    char arch[32], path[AH_JPATH_LEN];
    if (ah_jget_str(cx, o, parent, "arch", 1, arch, sizeof arch) < 0)
        return -1;
    for (int a = AH_ARCH_GPT; a <= AH_ARCH_BERT; a++)
        if (!strcmp(arch, ah_arch_name((ah_arch)a))) {
            m->arch = (ah_arch)a;
            return 0;
        }
    ah_jpath_key(path, parent, "arch");
    return ah_jfail(cx, path, "unknown architecture \"%s\"", arch);
}

int ah_model_config_from_json(const ah_err_ctx *cx, const cJSON *o, const char *parent, ah_model_config *m) {
    char path[AH_JPATH_LEN];
    memset(m, 0, sizeof *m);
    if (ah_jget_str(cx, o, parent, "name", 1, m->name, sizeof m->name) < 0 ||
        read_arch(cx, o, parent, m) != 0 ||
        ah_jget_int(cx, o, parent, "hidden", 1, 1, AH_MODEL_MAX_HIDDEN, &m->hidden) < 0 ||
        ah_jget_int(cx, o, parent, "n_layers", 1, 1, AH_MODEL_MAX_LAYERS, &m->n_layers) < 0 ||
        ah_jget_int(cx, o, parent, "n_heads", 1, 1, m->hidden < AH_MODEL_MAX_HEADS ? m->hidden : AH_MODEL_MAX_HEADS,
                    &m->n_heads) < 0 ||
        ah_jget_int(cx, o, parent, "n_kv_heads", 1, 1, m->n_heads, &m->n_kv_heads) < 0 ||
        ah_jget_int(cx, o, parent, "ffn_hidden", 1, 1, AH_MODEL_MAX_FFN, &m->ffn_hidden) < 0 ||
        ah_jget_int(cx, o, parent, "vocab", 1, 1, AH_MODEL_MAX_VOCAB, &m->vocab) < 0 ||
        ah_jget_int(cx, o, parent, "max_positions", 1, 0, AH_MODEL_MAX_POSITIONS, &m->max_positions) < 0 ||
        ah_jget_bool(cx, o, parent, "tied_embeddings", 1, &m->tied_embeddings) < 0 ||
        ah_model_family_from_json(cx, o, parent, m) != 0)
        return -1;
    const char *key = m->hidden % m->n_heads ? "n_heads" : m->n_heads % m->n_kv_heads ? "n_kv_heads" : NULL;
    if (key) {
        ah_jpath_key(path, parent, key);
        return ah_jfail(cx, path, "%d does not divide %d", key[2] == 'h' ? m->n_heads : m->n_kv_heads,
                        key[2] == 'h' ? m->hidden : m->n_heads);
    }
    if (m->arch == AH_ARCH_GPT && m->max_positions < 1) {
        ah_jpath_key(path, parent, "max_positions");
        return ah_jfail(cx, path, "a GPT model needs learned positions (>= 1)");
    }
    return 0;
}
