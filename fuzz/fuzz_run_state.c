/* libFuzzer: the run directory's state of autohet run (RUN/run.json, read by `autohet run --resume`). */
#include "fuzz_common.h"

#include <cjson/cJSON.h>

#include "elastic/run_state.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    fuzz_write("run.json", data, size);
    ah_run_options o;
    cJSON *doc = NULL;
    if (run_state_read_options(fuzz_dir(), &o, &doc, err, sizeof err) == 0) {
        run_state *s = calloc(1, sizeof *s); /* no nodes, no preemptions: the document's own fields only */
        run_state_restore(s, doc);
        cJSON_Delete(s->gens);
        cJSON_Delete(s->recs);
        free(s);
        cJSON_Delete(doc);
    }
    return 0;
}
