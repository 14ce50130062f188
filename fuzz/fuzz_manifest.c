/* libFuzzer: tier manifests (ah_manifest_load). The input is loaded as it is
 * (the checksum must reject almost every mutation) and once more with its
 * manifest_xxh64 digits made right, so that the entries' checks are reached. */
#define _GNU_SOURCE
#include <xxhash.h>

#include "fuzz_common.h"

#include "autohet/ckpt.h"

static void load(const char *dir) {
    ah_manifest m;
    char err[512];
    if (ah_manifest_load(dir, &m, err, sizeof err) == 0) {
        uint8_t bits[64];
        ah_manifest_bitmap(&m, 0, 0, 512, bits);
        ah_manifest_prune(&m, m.n ? m.e[0].step : 0);
        ah_manifest_free(&m);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_write("manifest.json", data, size);
    load(fuzz_dir());
    /* the checksum as the writer computes it: XXH64 of the text with the 16
     * digits after the last "manifest_xxh64" key written as '0' */
    static const char key[] = "\"manifest_xxh64\"";
    char *t = fuzz_string(data, size), *last = NULL;
    for (char *p = t; (p = memmem(p, size - (size_t)(p - t), key, sizeof key - 1)) != NULL; p++)
        last = p;
    char *q = last ? last + sizeof key - 1 : NULL;
    while (q && q < t + size && (*q == ' ' || *q == '\t' || *q == '\n' || *q == ':'))
        q++;
    if (q && t + size - q >= 18 && *q == '"') {
        memset(q + 1, '0', 16);
        char hex[17];
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)XXH64(t, size, 0));
        memcpy(q + 1, hex, 16);
        fuzz_write("manifest.json", (const uint8_t *)t, size);
        load(fuzz_dir());
    }
    free(t);
    return 0;
}
