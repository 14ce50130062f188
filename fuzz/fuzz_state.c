/* libFuzzer: a checkpoint's state.json (ah_ckpt_read_state), against the
 * training settings of the checkpoint the seeds come from. */
#include "fuzz_common.h"

#include "autohet/model.h"
#include "engine/executor.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static ah_model_config cfg;
    static ah_plan plan;
    static ah_optim_config oc;
    if (!cfg.n_layers) {
        if (ah_model_preset("tiny-gpt", &cfg) != 0)
            abort();
        plan.global_batch = 8;
        plan.train.seq = 64;
        ah_optim_config_default(&oc);
        oc.lr = 3e-3f;
        oc.total_steps = 6;
        oc.warmup_steps = 5;
    }
    fuzz_write("state.json", data, size);
    int step = 0;
    char msg[640];
    ah_ckpt_read_state(fuzz_dir(), &cfg, &plan, 3, &oc, &step, msg, sizeof msg);
    return 0;
}
