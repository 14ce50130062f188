/* libFuzzer: a calibration file (autohet calibrate --out, read by simulate/plan --calibration), and the same
 * bytes as the measured runs file of `autohet calibrate RUNS.json` (cmd_calibrate; stdout to /dev/null). */
#include "fuzz_common.h"

#include <math.h>

#include "autohet/calibration.h"
#include "cli/cli.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_quiet_stdout();
    char *argv[] = {"calibrate", (char *)fuzz_write("runs.json", data, size), "--no-validate", "--quiet",
                    NULL};
    cmd_calibrate(4, argv);
    char err[512];
    ah_calibration c;
    if (ah_calibration_load(fuzz_write("calib.json", data, size), &c, err, sizeof err) != 0)
        return 0;
    /* what a loaded file gives: positive finite scales, a transfer time that is a time */
    for (int d = 0; d < c.n_devices; d++) {
        if (c.devices[d].n < 0 || c.devices[d].n > AH_CALIB_MAX_MB)
            abort();
        for (int mb = 1; mb <= 4096; mb *= 2) {
            double s = ah_calibration_compute_scale(&c, c.devices[d].name, mb);
            if (!(s > 0) || !isfinite(s))
                abort();
        }
        if (!(ah_calibration_optimizer_scale(&c, c.devices[d].name) > 0))
            abort();
    }
    for (int inter = 0; inter < 2; inter++) {
        double t = ah_calibration_transfer_s(&c, 1e6, inter, 25.0);
        if (!(t >= 0) || !isfinite(t))
            abort();
    }
    /* scoped to another profile's model: no device scale is left, the pipeline terms are */
    int lockstep = c.lockstep;
    if (ah_calibration_scope(&c, "another model") &&
        (c.n_devices != 0 || ah_calibration_compute_scale(&c, "GH-96", 1) != 1.0 || c.lockstep != lockstep))
        abort();
    return 0;
}
