/* libFuzzer: device catalog overrides (--devices FILE), each input applied to
 * a fresh copy of the built-in catalog. */
#include "fuzz_common.h"

#include "autohet/device.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    ah_device_catalog catalog = *ah_device_catalog_builtin();
    ah_device_load_overrides(&catalog, fuzz_write("devices.json", data, size), err, sizeof err);
    return 0;
}
