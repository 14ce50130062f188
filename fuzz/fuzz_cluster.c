/* libFuzzer: the cluster shorthand (NODESxGPUSxTYPE[@NIC][:spot],...) and,
 * with the same bytes as a file, the inventory JSON. */
#include "fuzz_common.h"

#include "autohet/cluster.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512], *s = fuzz_string(data, size);
    ah_cluster c = {0};
    if (ah_cluster_parse_shorthand(s, ah_device_catalog_builtin(), &c, err, sizeof err) == 0)
        ah_cluster_free(&c);
    free(s);
    ah_cluster d = {0};
    if (ah_cluster_load_json(fuzz_write("inventory.json", data, size), ah_device_catalog_builtin(), &d, err, sizeof err) == 0)
        ah_cluster_free(&d);
    return 0;
}
