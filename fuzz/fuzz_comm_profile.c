/* libFuzzer: the communication profile (autohet commbench --json) applied to
 * a cluster (ah_comm_profile_apply). */
#include "fuzz_common.h"

#include "autohet/cluster.h"
#include "autohet/comm.h"
#include "autohet/plan.h"
#include "plan/costs.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512], summary[256];
    ah_cluster c = {0};
    if (ah_cluster_parse_shorthand("2x8xA100-40G,1x4xH800", ah_device_catalog_builtin(), &c, err,
                                   sizeof err) != 0)
        abort();
    ah_plan_options o;
    ah_plan_options_default(&o);
    if (ah_comm_profile_apply(fuzz_write("comm.json", data, size), &c, &o, summary, sizeof summary, err,
                              sizeof err) == 0) {
        /* every message size through the measured model: a time, never negative */
        for (double bytes = 1; bytes < 1e12; bytes *= 7.3)
            for (int inter = 0; inter < 2; inter++)
                if (ah_p2p_ns(bytes, inter, c.nodes[0].dev.intra_bw_gbs, ah_nic_share_gbs(&c.nodes[0]), &o) <
                    0)
                    abort();
    }
    ah_link_matrix_free((ah_link_matrix *)o.links);
    ah_cluster_free(&c);
    return 0;
}
