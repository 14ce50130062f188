/* libFuzzer: Chrome traces of train --trace, through `autohet analyze FILE
 * --json OUT` itself (its parser lives in the command); its stdout goes to
 * /dev/null. */
#include "fuzz_common.h"

#include "cli/cli.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int quiet;
    if (!quiet) {
        if (!freopen("/dev/null", "w", stdout))
            abort();
        quiet = 1;
    }
    char out[300];
    const char *path = fuzz_write("trace.json", data, size);
    snprintf(out, sizeof out, "%s/analysis.json", fuzz_dir());
    char *argv[] = {"analyze", (char *)path, "--json", out, NULL};
    cmd_analyze(4, argv);
    return 0;
}
