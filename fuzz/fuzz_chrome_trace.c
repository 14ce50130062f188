/* libFuzzer: Chrome traces of train / simulate --trace, through `autohet
 * analyze FILE --sim FILE --json OUT` itself: the reader, the analysis and the
 * comparison of src/trace/ (autohet/trace_analysis.h); stdout goes to
 * /dev/null. */
#include "fuzz_common.h"

#include "cli/cli.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_quiet_stdout();
    char out[300];
    const char *path = fuzz_write("trace.json", data, size);
    snprintf(out, sizeof out, "%s/analysis.json", fuzz_dir());
    char *argv[] = {"analyze", (char *)path, "--json", out, NULL};
    cmd_analyze(4, argv);
    char *argv_sim[] = {"analyze", (char *)path, "--sim", (char *)path, "--json", out, NULL};
    cmd_analyze(6, argv_sim);
    return 0;
}
