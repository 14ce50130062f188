/* Training on the CUDA backend equals the CPU backend (fp32): tiny-gpt (tied
 * embeddings, LayerNorm, GELU, learned positions) and tiny-llama (RMSNorm,
 * SwiGLU, RoPE, grouped-query attention), same seed and batches, two
 * micro-batches per step, clipping and AdamW as the executor does them on one
 * rank: every layer's parameters after the first step within 1e-5 norm-relative,
 * the loss of every one of 10 steps within 1e-4 relative. Exit 77 where no CUDA
 * device is visible; AUTOHET_GPU_TEST_BACKEND=cpu runs the harness CPU against CPU. */
#include <stdlib.h>
#include <string.h>

#include "autohet/model.h"
#include "engine/model.h"
#include "engine/optim.h"
#include "gpu_common.h"

enum { STEPS = 10, T = 64, B = 2, MICRO = 2 };

typedef struct {
    double loss[STEPS];
    float **param1; /* per layer, after step 1 */
    int L;
    size_t *n;
} run_out;

static void batch(int step, int micro, int vocab, int *tok, int *tgt) {
    unsigned s = 12345u + 977u * (unsigned)step + 31u * (unsigned)micro;
    for (int i = 0; i <= T * B; i++) {
        s = s * 1103515245u + 12345u;
        int t = (int)((s >> 8) % (unsigned)vocab);
        if (i < T * B)
            tok[i] = t;
        if (i > 0)
            tgt[i - 1] = t;
    }
}

static int train(const char *backend, const ah_model_config *cfg, run_out *o) {
    setenv("AUTOHET_BACKEND", backend, 1);
    ah_engine_model e;
    char err[320];
    int L = ah_model_num_layers(cfg);
    if (ah__engine_model_init(&e, cfg, T, B, 0, L, 1, 0, 7, 1, err, sizeof err) != 0) {
        printf("FAIL: %s: %s\n", backend, err);
        return -1;
    }
    ah_optim_config oc;
    ah_optim_config_default(&oc);
    oc.lr = 3e-3f, oc.warmup_steps = 2, oc.total_steps = STEPS;
    ah_eng_acts *acts = gpu_xmalloc((size_t)L * sizeof *acts);
    int tok[T * B], tgt[T * B];
    o->L = L;
    o->param1 = gpu_xmalloc((size_t)L * sizeof *o->param1);
    o->n = gpu_xmalloc((size_t)L * sizeof *o->n);
    for (int step = 0; step < STEPS; step++) {
        ah__engine_zero_grads(&e);
        double sum = 0;
        for (int m = 0; m < MICRO; m++) {
            double loss = 0;
            batch(step, m, cfg->vocab, tok, tgt);
            ah__engine_forward(&e, tok, ah__dptr_null(), tgt, ah__dptr_null(), &loss, acts);
            ah__engine_backward(&e, tok, tgt, ah__dptr_null(), ah__dptr_null(), 1.0f / (float)(T * B * MICRO), acts);
            sum += loss;
        }
        if (cfg->tied_embeddings)
            ah__engine_tied_sum_local(&e);
        float clip = ah__clip_factor(sqrt(ah__engine_grad_sumsq(&e)), oc.grad_clip);
        ah__engine_clip_and_step(&e, clip, ah__lr_at(&oc, step), step + 1, &oc);
        o->loss[step] = sum / (T * B * MICRO);
        for (int l = 0; step == 0 && l < L; l++) {
            o->n[l] = ah__engine_layer_floats(&e, l);
            o->param1[l] = gpu_xmalloc(o->n[l] * sizeof(float));
            ah__engine_layer_to_host(&e, l, AH_STATE_PARAM, o->param1[l]);
        }
    }
    free(acts);
    ah__engine_model_free(&e);
    return 0;
}

static int compare_model(const char *name) {
    ah_model_config cfg;
    if (ah_model_preset(name, &cfg) != 0) {
        printf("FAIL: no preset %s\n", name);
        return 1;
    }
    run_out c = {0}, g = {0};
    if (train("cpu", &cfg, &c) != 0 || train(gpu_backend_name(), &cfg, &g) != 0)
        return 1;
    int bad = 0;
    for (int l = 0; l < c.L; l++) {
        double maxd = 0, rel = gpu_rel_diff(c.param1[l], g.param1[l], c.n[l], &maxd);
        int ok = rel <= 1e-5;
        printf("%s layer %d params after step 1: rel %.3g max|d| %.3g %s\n", name, l, rel, maxd, ok ? "ok" : "FAIL");
        bad += !ok;
        free(c.param1[l]), free(g.param1[l]);
    }
    for (int s = 0; s < STEPS; s++) {
        double rel = fabs(c.loss[s] - g.loss[s]) / fabs(c.loss[s]);
        int ok = rel <= 1e-4;
        printf("%s step %2d loss cpu %.7f %s %.7f rel %.3g %s\n", name, s + 1, c.loss[s], gpu_backend_name(),
               g.loss[s], rel, ok ? "ok" : "FAIL");
        bad += !ok;
    }
    free(c.param1), free(g.param1), free(c.n), free(g.n);
    return bad;
}

int main(void) {
    gpu_backend_or_skip("test_gpu_train");
    int bad = compare_model("tiny-gpt") + compare_model("tiny-llama");
    printf("test_gpu_train: %s (%d checks failed)\n", bad ? "FAIL" : "ok", bad);
    return bad ? 1 : 0;
}
