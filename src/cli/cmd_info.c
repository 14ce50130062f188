/* autohet devices / autohet models: what the built-in catalogs contain. */
#include <stdio.h>
#include <string.h>

#include "autohet/device.h"
#include "autohet/model.h"
#include "cli/cli.h"

int cmd_devices(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        printf("usage: autohet devices [--devices FILE]\n\n"
               "Lists the GPU catalog: dense bf16/fp16 peak, memory, memory bandwidth, per-GPU\n"
               "intra-node link bandwidth, default node NIC, and the efficiency factor of the\n"
               "analytic cost model. --devices applies an override file first.\n\n"
               "exit status: 0 success, 2 bad input (one line on stderr)\n");
        return 0;
    }
    ah_device_catalog cat = *ah_device_catalog_builtin();
    const char *file = NULL;
    char err[512];
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--devices") != 0 || i + 1 >= argc) {
            cli_unknown_option("devices", argv[i], err, sizeof err);
            return cli_bad_input("devices", err);
        }
        /* one override file: a second would silently win or stack */
        if (file != NULL)
            return cli_bad_input("devices", "--devices given twice (give one override file)");
        file = argv[++i];
    }
    if (file != NULL && ah_device_load_overrides(&cat, file, err, sizeof err) != 0)
        return cli_bad_input("devices", err);
    printf("%-12s %10s %8s %10s %11s %10s %6s %9s\n", "gpu", "TFLOP/s", "GiB", "mem GB/s", "link GB/s",
           "NIC Gb/s", "eff", "slowdown");
    for (int i = 0; i < cat.n; i++) {
        const ah_device *d = &cat.dev[i];
        /* %g: a figure of the user's own (0.008 TFLOP/s, 2.5 GB/s) shows as given, not rounded to 0.0 or 2 */
        printf("%-12s %10.4g %8.4g %10.5g %11.5g %10.5g %6.3g %9.3g\n", d->name, d->peak_tflops, d->mem_gib,
               d->mem_bw_gbs, d->intra_bw_gbs, d->nic_gbit, d->efficiency, d->slowdown);
    }
    return 0;
}

int cmd_models(int argc, char **argv) {
    if (argc > 1) {
        if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
            printf("usage: autohet models\n\nLists the built-in model presets (usable as --model NAME).\n\n"
                   "exit status: 0 success, 2 bad input (one line on stderr)\n");
            return 0;
        }
        char err[160];
        snprintf(err, sizeof err, "takes no arguments (got '%.100s')", argv[1]);
        return cli_bad_input("models", err);
    }
    printf("%-14s %6s %7s %7s %6s %4s %7s %8s %10s\n", "preset", "arch", "hidden", "layers", "heads", "kv",
           "ffn", "vocab", "params");
    for (const char *const *n = ah_model_preset_names(); *n; n++) {
        ah_model_config m;
        if (ah_model_preset(*n, &m) != 0)
            continue;
        printf("%-14s %6s %7d %7d %6d %4d %7d %8d %9.2fB\n", *n, ah_arch_name(m.arch), m.hidden, m.n_layers,
               m.n_heads, m.n_kv_heads, m.ffn_hidden, m.vocab, ah_model_total_params(&m) / 1e9);
    }
    return 0;
}
