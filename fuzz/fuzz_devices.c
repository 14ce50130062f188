/* libFuzzer: device catalog overrides (--devices FILE); the catalog is reset
 * after each input so that inputs do not see each other's devices. */
#include "fuzz_common.h"

#include "autohet/device.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    ah_device_load_overrides(fuzz_write("devices.json", data, size), err, sizeof err);
    ah_device_catalog_reset();
    return 0;
}
