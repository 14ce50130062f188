/* libFuzzer: a checkpoint's state.json (ah_ckpt_read_state), against the
 * training settings of the checkpoint the seeds come from. */
#include "fuzz_common.h"

#include "autohet/model.h"
#include "ckpt/ckpt_runtime.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static ah_model_config cfg;
    static ah_ckpt_run run;
    if (!cfg.n_layers) {
        if (ah_model_preset("tiny-gpt", &cfg) != 0)
            abort();
        run = (ah_ckpt_run){.cfg = &cfg,
                            .seed = 3,
                            .global_batch = 8,
                            .seq = 64,
                            .total_steps = 6,
                            .warmup_steps = 5,
                            .lr = 3e-3f};
    }
    fuzz_write("state.json", data, size);
    int step = 0;
    char msg[640];
    ah_ckpt_read_state(fuzz_dir(), &run, &step, msg, sizeof msg);
    return 0;
}
