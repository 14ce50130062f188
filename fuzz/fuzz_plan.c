/* libFuzzer: the plan document reader (ah_plan_read_json) and its replans computed ahead
 * (ah_replan_table_from_json). */
#include "fuzz_common.h"

#include <cjson/cJSON.h>

#include "autohet/plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ah_plan p;
    char err[512];
    cJSON *extra = NULL;
    const char *path = fuzz_write("plan.json", data, size);
    if (ah_plan_read_json_extras(path, ah_device_catalog_builtin(), &p, &extra, err, sizeof err) == 0) {
        const cJSON *tj = cJSON_GetObjectItemCaseSensitive(extra, "replans");
        ah_replan_table *t = NULL;
        if (tj && ah_replan_table_from_json(tj, &p, path, &t, err, sizeof err) == 0)
            ah_replan_table_free(t);
        cJSON_Delete(extra);
        ah_plan_free(&p);
    }
    return 0;
}
