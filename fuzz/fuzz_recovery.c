/* libFuzzer: recovery assignments of autohet run (train --recover FILE). */
#include "fuzz_common.h"

#include "ckpt/ckpt_runtime.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    ah_recovery_assignment_check(fuzz_write("recover.json", data, size), 0, err, sizeof err);
    return 0;
}
