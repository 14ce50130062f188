/* libFuzzer: spot availability traces (<time_ms>,<add|remove>,<node> lines). */
#include "fuzz_common.h"

#include "autohet/elastic.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ah_spot_event *e = NULL;
    int n = 0;
    char err[512];
    if (ah_spot_trace_load(fuzz_write("trace.csv", data, size), &e, &n, err, sizeof err) == 0)
        free(e);
    return 0;
}
