/* libFuzzer: safetensors shard headers (ah_ckpt_parse_shard, both the copying
 * and the in-place view). The checksum is the input's own, so every input
 * reaches the header parser. */
#include <xxhash.h>

#include "fuzz_common.h"

#include "autohet/ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint64_t h = XXH64(data, size, 0);
    char err[512];
    ah_ckpt_loaded *t = NULL;
    int n = 0;
    if (ah_ckpt_parse_shard("fuzz", data, size, h, &t, &n, err, sizeof err) == 0) {
        for (int i = 0; i < n; i++) /* every tensor's data must lie in the input */
            if (t[i].n)
                (void)*(volatile float *)&t[i].data[t[i].n - 1];
        ah_ckpt_free(t, n);
    }
    if (ah_ckpt_parse_shard_view("fuzz", data, size, h, &t, &n, err, sizeof err) == 0) {
        for (int i = 0; i < n; i++)
            if (t[i].n)
                (void)*(volatile float *)&t[i].data[t[i].n - 1];
        ah_ckpt_free(t, n);
    }
    return 0;
}
