/* gpu_bench MODEL SEQ MICRO_BATCH STEPS PEAK_TFLOPS: training steps of MODEL
 * on the engine's backend ($AUTOHET_BACKEND: cuda in tests/gpu/device_check.sh; cpu for a reference)
 * with random tokens, one micro-batch per step, AdamW and clipping as a
 * one-rank run; the first two steps are warm-up, the rest timed (the loss
 * read at the end of each forward and the sync at the end of each step make
 * every step complete). Prints one line:
 *   bench MODEL seq T mb B steps S: step_s X tokens_per_s Y mfu Z loss0 L0 lossN LN
 * MFU = 3 x the model's forward FLOPs per step / step time / PEAK (0: not
 * reported). Exit 77 where no CUDA device is visible, 1 on a non-finite loss. */
#include <stdlib.h>
#include <string.h>

#include "autohet/model.h"
#include "engine/model.h"
#include "engine/optim.h"
#include "gpu_common.h"
#include "util/clock.h"

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: gpu_bench MODEL SEQ MICRO_BATCH STEPS PEAK_TFLOPS\n");
        return 2;
    }
    const char *be = getenv("AUTOHET_BACKEND");
    if (be == NULL || strcmp(be, "cpu"))
        gpu_backend_or_skip("gpu_bench");
    ah_model_config cfg;
    if (ah_model_preset(argv[1], &cfg) != 0) {
        fprintf(stderr, "gpu_bench: no model preset %s\n", argv[1]);
        return 2;
    }
    int T = atoi(argv[2]), B = atoi(argv[3]), steps = atoi(argv[4]), warm = 2;
    double peak = atof(argv[5]) * 1e12;
    if (T < 1 || B < 1 || steps <= warm) {
        fprintf(stderr, "gpu_bench: SEQ, MICRO_BATCH >= 1 and STEPS > %d\n", warm);
        return 2;
    }
    int L = ah_model_num_layers(&cfg);
    ah_engine_model e;
    char err[320];
    if (ah__engine_model_init(&e, &cfg, T, B, 0, L, 1, 0, 1, 1, err, sizeof err) != 0) {
        fprintf(stderr, "gpu_bench: %s\n", err);
        return 1;
    }
    ah_optim_config oc;
    ah_optim_config_default(&oc);
    ah_eng_acts *acts = gpu_xmalloc((size_t)L * sizeof *acts);
    int *tok = gpu_xmalloc((size_t)T * B * sizeof(int)), *tgt = gpu_xmalloc((size_t)T * B * sizeof(int));
    unsigned s = 1;
    double t0 = 0, loss0 = 0, loss = 0;
    for (int step = 0; step < steps; step++) {
        if (step == warm)
            t0 = ah_wall_clock_s();
        for (int i = 0; i < T * B; i++) {
            s = s * 1103515245u + 12345u;
            tok[i] = (int)((s >> 8) % (unsigned)cfg.vocab);
            tgt[i] = (int)((s >> 4) % (unsigned)cfg.vocab);
        }
        ah__engine_zero_grads(&e);
        ah__engine_forward(&e, tok, ah__dptr_null(), tgt, ah__dptr_null(), &loss, acts);
        ah__engine_backward(&e, tok, tgt, ah__dptr_null(), ah__dptr_null(), 1.0f / (float)(T * B), acts);
        if (cfg.tied_embeddings)
            ah__engine_tied_sum_local(&e);
        float clip = ah__clip_factor(sqrt(ah__engine_grad_sumsq(&e)), oc.grad_clip);
        ah__engine_clip_and_step(&e, clip, ah__lr_at(&oc, step), step + 1, &oc);
        ah__engine_sync(&e);
        loss /= (double)T * B;
        if (step == 0)
            loss0 = loss;
        if (!isfinite(loss)) {
            fprintf(stderr, "gpu_bench: step %d: loss %g\n", step + 1, loss);
            return 1;
        }
    }
    double dt = (ah_wall_clock_s() - t0) / (steps - warm);
    double flops = 3.0 * ah__engine_forward_flops(&e);
    printf("bench %s seq %d mb %d steps %d: step_s %.4f tokens_per_s %.0f mfu %.4f loss0 %.4f lossN %.4f\n", argv[1],
           T, B, steps, dt, (double)T * B / dt, peak > 0 ? flops / dt / peak : 0.0, loss0, loss);
    ah__engine_model_free(&e);
    free(acts), free(tok), free(tgt);
    return 0;
}
