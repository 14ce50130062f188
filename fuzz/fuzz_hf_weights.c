/* libFuzzer: Hugging Face weights in (docs/weights.md): the input as a
 * safetensors file (ah__st_open, every tensor read as fp32), then as the
 * model.safetensors of a tiny GPT-2 directory, whose every layer is mapped
 * into the engine's layout (ah_hf_open, ah__hf_read_layer). */
#include "fuzz_common.h"

#include "engine/hf_weights.h"
#include "engine/safetensors.h"

/* the config of fuzz/seeds/hf-tiny-gpt2.safetensors */
static const char config[] = "{\"model_type\": \"gpt2\", \"vocab_size\": 16, \"n_positions\": 8, \"n_embd\": 8, "
                             "\"n_layer\": 1, \"n_head\": 2, \"tie_word_embeddings\": true}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    fuzz_write("config.json", (const uint8_t *)config, sizeof config - 1);
    const char *path = fuzz_write("model.safetensors", data, size);
    ah_st_file f;
    if (ah__st_open(path, &f, err, sizeof err) == 0) {
        for (int i = 0; i < f.n; i++) {
            float *v = malloc(f.t[i].n * sizeof(float) + 1);
            ah__st_read_f32(&f, &f.t[i], v);
            free(v);
        }
        ah__st_close(&f);
    }
    ah_hf_dir h;
    if (ah_hf_open(fuzz_dir(), &h, err, sizeof err) == 0) {
        for (int l = 0; l < ah_model_num_layers(&h.cfg); l++) {
            ah_ckpt_loaded *t;
            int n;
            if (ah__hf_read_layer(&h, &h.cfg, l, &t, &n, err, sizeof err) == 0)
                ah_ckpt_free(t, n);
        }
        ah_hf_close(&h);
    }
    return 0;
}
