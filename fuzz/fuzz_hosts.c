/* libFuzzer: Open MPI hostfiles (the bytes as a file) and, with the same bytes
 * as a string, Slurm's compressed node lists; a parsed hostfile is then mapped
 * onto a two-node plan's nodes (ah_hosts_apply) and written as a rankfile. */
#include "fuzz_common.h"

#include "autohet/hosts.h"

#define TWO_NODE_PLAN "tests/plans/tiny-2host.json"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static ah_plan plan;
    static int have_plan = -1;
    char err[512];
    if (have_plan < 0)
        have_plan = ah_plan_read_json(TWO_NODE_PLAN, ah_device_catalog_builtin(), &plan, err, sizeof err) == 0;
    ah_host_list l;
    if (ah_hostfile_load(fuzz_write("hosts.txt", data, size), &l, err, sizeof err) == 0) {
        if (have_plan) {
            ah_plan p;
            ah_plan_copy(&p, &plan);
            char out[300];
            snprintf(out, sizeof out, "%s/rankfile", fuzz_dir());
            if (ah_hosts_apply(&p, &l, err, sizeof err) == 0)
                ah_rankfile_write(&p, 1, out, err, sizeof err); /* one core per GPU, the default */
            ah_plan_free(&p);
        }
        ah_host_list_free(&l);
    }
    char *s = fuzz_string(data, size);
    if (ah_slurm_nodelist_parse(s, NULL, &l, err, sizeof err) == 0)
        ah_host_list_free(&l);
    free(s);
    return 0;
}
