/* libFuzzer: the plan document reader (ah_plan_read_json). */
#include "fuzz_common.h"

#include "autohet/plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ah_plan p;
    char err[512];
    if (ah_plan_read_json(fuzz_write("plan.json", data, size), ah_device_catalog_builtin(), &p, err, sizeof err) == 0)
        ah_plan_free(&p);
    return 0;
}
