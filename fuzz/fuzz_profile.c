/* libFuzzer: profiles: autohet's own profile JSON (ah_profile_load) and, with
 * the same bytes as one device file of a directory, a Sailor profile
 * directory (ah_profile_load_sailor_dir). */
#include <sys/stat.h>

#include "fuzz_common.h"

#include "autohet/profile.h"
#include "autohet/profile_table.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512], dir[256], path[300];
    ah_profile *p = ah_profile_load(fuzz_write("profile.json", data, size), err, sizeof err);
    ah_profile_free(p);
    snprintf(dir, sizeof dir, "%s/sailor", fuzz_dir());
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/A100-40.json", dir);
    FILE *f = fopen(path, "wb");
    if (!f)
        abort();
    if (size)
        fwrite(data, 1, size, f);
    fclose(f);
    ah_profile_free(ah_profile_load_sailor_dir(dir, err, sizeof err));
    return 0;
}
