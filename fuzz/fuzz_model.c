/* libFuzzer: the HF config.json reader (ah_model_load_json). */
#include "fuzz_common.h"

#include "autohet/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ah_model_config m;
    char err[512];
    ah_model_load_json(fuzz_write("config.json", data, size), &m, err, sizeof err);
    return 0;
}
