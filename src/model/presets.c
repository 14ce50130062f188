/* Built-in model presets (published architecture hyper-parameters). */
#include <strings.h>
#include <string.h>
#include <stdio.h>

#include "autohet/model.h"

/* Families whose blocks differ from the plain GPT-2 / LLaMA one (as the HF
 * configs of the same names are read: src/model/model.c). */
typedef enum { PLAIN = 0, OPT, NEO } family;

typedef struct {
    const char *name;
    ah_arch arch;
    int hidden, n_layers, n_heads, n_kv_heads, ffn_hidden, vocab, max_positions, tied;
    family fam;
    int embed_dim; /* OPT's word_embed_proj_dim, 0 = hidden */
} preset;

/* GPT-3 sizes from Brown et al. 2020 (Table 2.1); LLaMA from the HF configs;
 * opt-350m and gpt-neo-2.7b match the real Sailor GPU profiles (24 and 32
 * blocks) and facebook/opt-350m (331,196,416 parameters: 512-wide embeddings
 * with project_in/out, post-LN, ReLU) and EleutherAI/gpt-neo-2.7B (no q/k/v
 * biases, unscaled scores, every other layer local with a 256 window).
 * RoPE models have max_positions 0 (no learned positions). */
static const preset presets[] = {
    {"gpt2-124m", AH_ARCH_GPT, 768, 12, 12, 12, 3072, 50257, 1024, 1, PLAIN, 0},
    {"gpt3-1.3b", AH_ARCH_GPT, 2048, 24, 16, 16, 8192, 50257, 2048, 1, PLAIN, 0},
    {"gpt3-2.7b", AH_ARCH_GPT, 2560, 32, 32, 32, 10240, 50257, 2048, 1, PLAIN, 0},
    {"gpt3-6.7b", AH_ARCH_GPT, 4096, 32, 32, 32, 16384, 50257, 2048, 1, PLAIN, 0},
    {"gpt3-13b", AH_ARCH_GPT, 5120, 40, 40, 40, 20480, 50257, 2048, 1, PLAIN, 0},
    {"gpt3-175b", AH_ARCH_GPT, 12288, 96, 96, 96, 49152, 50257, 2048, 1, PLAIN, 0},
    {"llama2-7b", AH_ARCH_LLAMA, 4096, 32, 32, 32, 11008, 32000, 0, 0, PLAIN, 0},
    {"llama2-13b", AH_ARCH_LLAMA, 5120, 40, 40, 40, 13824, 32000, 0, 0, PLAIN, 0},
    {"llama2-70b", AH_ARCH_LLAMA, 8192, 80, 64, 8, 28672, 32000, 0, 0, PLAIN, 0},
    {"llama3-8b", AH_ARCH_LLAMA, 4096, 32, 32, 8, 14336, 128256, 0, 0, PLAIN, 0},
    {"bert-large", AH_ARCH_BERT, 1024, 24, 16, 16, 4096, 30522, 512, 1, PLAIN, 0},
    {"opt-350m", AH_ARCH_GPT, 1024, 24, 16, 16, 4096, 50272, 2048, 1, OPT, 512},
    {"gpt-neo-2.7b", AH_ARCH_GPT, 2560, 32, 20, 20, 10240, 50257, 2048, 1, NEO, 0},
    /* small byte-level models for the CPU training engine, its tests and demos */
    {"tiny-gpt", AH_ARCH_GPT, 64, 4, 4, 4, 256, 256, 256, 1, PLAIN, 0},
    {"tiny-llama", AH_ARCH_LLAMA, 64, 4, 4, 2, 192, 256, 0, 0, PLAIN, 0},
    {"small-gpt", AH_ARCH_GPT, 256, 6, 8, 8, 1024, 256, 512, 1, PLAIN, 0},
};
#define N_PRESETS (sizeof presets / sizeof presets[0])

static const char *const preset_names[] = {
    "gpt2-124m",  "gpt3-1.3b",  "gpt3-2.7b", "gpt3-6.7b",  "gpt3-13b", "gpt3-175b",    "llama2-7b",
    "llama2-13b", "llama2-70b", "llama3-8b", "bert-large", "opt-350m", "gpt-neo-2.7b", "tiny-gpt",
    "tiny-llama", "small-gpt",  NULL,
};
_Static_assert(sizeof preset_names / sizeof preset_names[0] == N_PRESETS + 1,
               "preset_names must list every preset");

static void apply_family(ah_model_config *m, const preset *p) {
    if (p->fam == OPT) {
        m->embed_dim = p->embed_dim;
        m->pos_offset = 2;
        m->post_norm = 1;
        m->act = AH_ACT_RELU;
    } else if (p->fam == NEO) {
        m->no_qkv_bias = 1;
        m->unscaled_attention = 1;
        m->attn_window = 256;
        for (int b = 1; b < m->n_layers; b += 2) /* attention_types [[["global", "local"], 16]] */
            m->local_layers[b / 8] |= (unsigned char)(1u << (b % 8));
    }
}

int ah_model_preset(const char *name, ah_model_config *out) {
    if (name == NULL || out == NULL)
        return -1;
    for (size_t i = 0; i < N_PRESETS; i++) {
        const preset *p = &presets[i];
        if (strcasecmp(name, p->name) != 0)
            continue;
        memset(out, 0, sizeof *out);
        snprintf(out->name, sizeof out->name, "%s", p->name);
        out->arch = p->arch;
        out->hidden = p->hidden;
        out->n_layers = p->n_layers;
        out->n_heads = p->n_heads;
        out->n_kv_heads = p->n_kv_heads;
        out->ffn_hidden = p->ffn_hidden;
        out->vocab = p->vocab;
        out->max_positions = p->max_positions;
        out->tied_embeddings = p->tied;
        apply_family(out, p);
        return 0;
    }
    return -1;
}

const char *const *ah_model_preset_names(void) {
    return preset_names;
}
