/* autohet simulate: play one iteration of a plan document out event by event. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autohet/comm.h"
#include "autohet/plan.h"
#include "autohet/profile_table.h"
#include "autohet/sim.h"
#include "cli/cli.h"

static void sim_usage(FILE *f) {
    fprintf(f,
            "usage: autohet simulate PLAN.json [--schedule 1f1b|gpipe|interleaved [--virtual-stages V]] [--trace FILE] [--svg FILE]\n"
            "                        [--json FILE] [--profile PATH] [--devices FILE] [--comm-profile FILE]\n"
            "                        [--precision bf16|fp16|fp32] [--p2p overlapped|blocking|lockstep]\n"
            "                        [--calibration FILE]\n"
            "                        [--overlap-dp] [--dp-serial] [--ignore-memory] [--quiet]\n\n"
            "Simulates one training iteration of a plan document (the --json output of autohet plan):\n"
            "every forward/backward per micro-batch and stage, the TP all-reduces, activation and\n"
            "gradient transfers sharing links, the layer-wise gradient all-reduce across asymmetric\n"
            "replicas bucket by bucket, the optimizer step, and each GPU's memory over time.\n\n"
            "  --schedule   pipeline schedule: 1f1b (default), gpipe, or interleaved 1F1B (Megatron's\n"
            "               virtual pipeline stages: every stage holds V layer chunks)\n"
            "  --virtual-stages V  interleaved: chunks per stage (default 2)\n"
            "  --trace      Chrome trace-event JSON: open it in ui.perfetto.dev or chrome://tracing\n"
            "  --svg        Gantt chart of the iteration\n"
            "  --json       numbers: iteration time, per-GPU compute / exposed comm / idle / memory\n"
            "  --profile    per-layer profile to cost the plan with (default: the one the plan records)\n"
            "  --devices    GPU catalog override file\n"
            "  --precision  training precision to cost the plan at (default: the plan's train.precision,\n"
            "               bf16 when the plan has none)\n"
            "  --p2p        pipeline sends overlapped with compute or blocking the sender's compute\n"
            "               stream (default: the plan's train.p2p, overlapped when it has none); lockstep:\n"
            "               other runtimes' pipelines (DeepSpeed's), each stage's forward and backward\n"
            "               waiting for two blocking whole-activation transfers on the replica's\n"
            "               slowest boundary (stages paired by parity, as DeepSpeed's schedule; one with 2)\n"
            "  --calibration  a fit of measured runs (autohet calibrate): per-device compute scales by\n"
            "               micro-batch, and the runtime's pipeline transfers (its p2p mode, unless --p2p\n"
            "               is given; docs/calibration.md). calibrations/ ships one: sailor-gh200.calib.json\n"
            "               (GH200 under Sailor's DeepSpeed runtime); default: none\n"
            "  --overlap-dp start each gradient bucket's all-reduce inside the last backward, as soon as\n"
            "               its layers are done (train --overlap-dp); default: blocking after the flush,\n"
            "               once the sends are complete, as train runs them (docs/schedules.md)\n"
            "  --dp-serial  run each GPU's bucket all-reduces one at a time (one NCCL stream) instead\n"
            "               of concurrently; buckets of misaligned stages then wait for each other\n"
            "  --ignore-memory  accept a plan whose GPUs exceed their memory in the simulation\n"
            "               (default: the outputs are written, then one line names the first such GPU\n"
            "               and the exit status is 2)\n"
            "  --quiet      no summary on stdout\n\n"
            "exit status: 0 success, 2 bad input or a plan that does not fit in memory (one line on stderr)\n");
}

/* The first stage whose simulated peak exceeds its GPUs' usable memory:
 * one line in msg and 1, or 0 when every stage fits. */
static int over_memory(const ah_plan *p, const ah_sim_result *r, char *msg, size_t len) {
    const double gib = 1024.0 * 1024.0 * 1024.0;
    for (int i = 0; i < r->n_stages; i++) {
        const ah_sim_stage *st = &r->stages[i];
        if (st->peak_memory_bytes <= st->capacity_bytes)
            continue;
        snprintf(msg, len,
                 "replicas[%d].stages[%d] on %s peaks at %.2f GiB per GPU under %s (%d micro-batches in "
                 "flight), %.2f GiB usable: the plan does not fit (--ignore-memory to accept it)",
                 st->replica, st->stage, p->cluster.nodes[st->node].dev.name, st->peak_memory_bytes / gib,
                 ah_schedule_name(r->schedule), st->peak_in_flight, st->capacity_bytes / gib);
        return 1;
    }
    return 0;
}

/* The profile a plan was made with: "analytic" or "measured:<path>". */
static ah_profile *profile_for(const ah_plan *p, const char *override, const ah_device_catalog *catalog, char *err,
                               size_t errlen) {
    if (override)
        return ah_profile_load_with(override, catalog, err, errlen);
    if (!strncmp(p->profile_source, "measured:", 9))
        return ah_profile_load_with(p->profile_source + 9, catalog, err, errlen);
    return ah_profile_analytic();
}

/* The summary, the --trace / --svg / --json files, then the memory check: the exit status. */
static int report(const ah_plan *plan, const ah_sim_result *r, const char *paths[3], int quiet, int ignore_memory,
                  const char *plan_path) {
    char err[512];
    int rc = 0;
    if (!quiet)
        ah_sim_print_summary(plan, r, stdout);
    for (int i = 0; i < 3 && rc == 0; i++) {
        if (!paths[i])
            continue;
        int w = i == 0   ? ah_sim_write_trace(plan, r, paths[i], err, sizeof err)
                : i == 1 ? ah_sim_write_svg(plan, r, paths[i], err, sizeof err)
                         : ah_sim_write_json(plan, r, paths[i], err, sizeof err);
        if (w != 0) {
            fprintf(stderr, "autohet simulate: %s\n", err);
            rc = 1;
        } else if (!quiet) {
            printf("wrote %s\n", paths[i]);
        }
    }
    char m[512];
    if (rc == 0 && !ignore_memory && over_memory(plan, r, m, sizeof m)) {
        char where[1024];
        snprintf(where, sizeof where, "%s: %s", plan_path, m);
        rc = cli_bad_input("simulate", where);
    }
    return rc;
}

int cmd_simulate(int argc, char **argv) {
    static const struct option opts[] = {
        {"schedule", required_argument, 0, 's'},
        {"virtual-stages", required_argument, 0, 'V'},
        {"trace", required_argument, 0, 't'},
        {"svg", required_argument, 0, 'g'},
        {"json", required_argument, 0, 'j'},
        {"profile", required_argument, 0, 'p'},
        {"devices", required_argument, 0, 'd'},
        {"quiet", no_argument, 0, 'q'},
        {"ignore-memory", no_argument, 0, 'M'},
        {"dp-serial", no_argument, 0, 'S'},
        {"overlap-dp", no_argument, 0, 'O'},
        {"comm-profile", required_argument, 0, 'C'},
        {"precision", required_argument, 0, 'P'},
        {"p2p", required_argument, 0, 'B'},
        {"calibration", required_argument, 0, 'K'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    const char *trace = NULL, *svg = NULL, *json = NULL, *profile = NULL, *devices = NULL, *comm = NULL,
               *calib_path = NULL;
    int quiet = 0, c, precision = -1, p2p = -1, ignore_memory = 0, virtual_given = 0;
    ah_sim_options so = {.schedule = AH_SCHED_1F1B, .record_events = 0};
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 's':
            if (ah_schedule_parse(optarg, &so.schedule) != 0)
                return cli_bad_input("simulate", "--schedule: expected 1f1b, gpipe or interleaved");
            break;
        case 'V': {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*optarg == '\0' || *end || v < 2 || v > 64)
                return cli_bad_input("simulate", "--virtual-stages: expected an integer from 2 to 64");
            so.virtual_stages = (int)v;
            virtual_given = 1;
            break;
        }
        case 't': trace = optarg; break;
        case 'g': svg = optarg; break;
        case 'j': json = optarg; break;
        case 'p': profile = optarg; break;
        case 'd': devices = optarg; break;
        case 'q': quiet = 1; break;
        case 'M': ignore_memory = 1; break;
        case 'S': so.dp_serial = 1; break;
        case 'O': so.overlap_dp = 1; break;
        case 'C': comm = optarg; break;
        case 'K': calib_path = optarg; break;
        case 'P': {
            ah_precision_mode pm;
            if (ah_precision_parse(optarg, &pm) != 0)
                return cli_bad_input("simulate", "--precision: expected bf16, fp16 or fp32");
            precision = (int)pm;
            break;
        }
        case 'B': {
            ah_p2p_mode pm;
            if (ah_p2p_mode_parse(optarg, &pm) != 0)
                return cli_bad_input("simulate", "--p2p: expected overlapped, blocking or lockstep");
            p2p = (int)pm;
            break;
        }
        case 'h': sim_usage(stdout); return 0;
        default: {
            char msg[160];
            cli_unknown_option("simulate", argv[optind - 1], msg, sizeof msg);
            return cli_bad_input("simulate", msg);
        }
        }
    }
    if (optind != argc - 1)
        return cli_bad_input("simulate", "expected exactly one PLAN.json (see --help)");
    if (virtual_given && so.schedule != AH_SCHED_INTERLEAVED) /* as autohet train: not silently ignored */
        return cli_bad_input("simulate", "--virtual-stages goes with --schedule interleaved");
    {
        char m[4400];
        if (cli_check_output("--trace", trace, m, sizeof m) || cli_check_output("--svg", svg, m, sizeof m) ||
            cli_check_output("--json", json, m, sizeof m))
            return cli_bad_input("simulate", m);
    }
    char err[512];
    ah_device_catalog catalog = *ah_device_catalog_builtin();
    if (devices && ah_device_load_overrides(&catalog, devices, err, sizeof err) != 0)
        return cli_bad_input("simulate", err);
    static ah_calibration calib; /* outlives the profile that points at it */
    if (calib_path && ah_calibration_load(calib_path, &calib, err, sizeof err) != 0)
        return cli_bad_input("simulate", err);
    ah_plan plan;
    if (ah_plan_read_json(argv[optind], &catalog, &plan, err, sizeof err) != 0)
        return cli_bad_input("simulate", err);
    if (precision >= 0)
        plan.train.precision = (ah_precision_mode)precision;
    if (p2p >= 0)
        plan.train.p2p = (ah_p2p_mode)p2p;
    ah_profile *prof = profile_for(&plan, profile, &catalog, err, sizeof err);
    if (!prof) {
        ah_plan_free(&plan);
        return cli_bad_input("simulate", err);
    }
    if (calib_path && ah_calibration_scope(&calib, ah_profile_table_model(prof)))
        cli_calibration_scope_note("simulate", calib_path, calib.profile_model, ah_profile_table_model(prof));
    if (calib_path && ah_calibration_link_scope(&calib, comm != NULL))
        cli_calibration_link_note("simulate", calib_path, calib.links_measured);
    ah_plan_options o;
    ah_plan_options_default(&o);
    ah_calibration_apply(calib_path ? &calib : NULL, prof, &o, &plan.train, p2p >= 0);
    ah_plan_options_take_plan(&o, &plan); /* its settings, the capacities it was planned with */
    char comm_summary[256];
    if (comm &&
        ah_comm_profile_apply(comm, &plan.cluster, &o, comm_summary, sizeof comm_summary, err, sizeof err)) {
        ah_profile_free(prof);
        ah_plan_free(&plan);
        return cli_bad_input("simulate", err);
    }
    if (comm && !quiet)
        printf("Measured links (%s): %s\n", comm, comm_summary);
    so.record_events = trace || svg;
    ah_sim_result r;
    int rc = 0;
    if (ah_simulate(&plan, prof, &o, &so, &r, err, sizeof err) != 0) {
        rc = cli_bad_input("simulate", err);
    } else {
        const char *paths[3] = {trace, svg, json};
        rc = report(&plan, &r, paths, quiet, ignore_memory, argv[optind]);
        ah_sim_result_free(&r);
    }
    ah_link_matrix_free((ah_link_matrix *)o.links);
    ah_profile_free(prof);
    ah_plan_free(&plan);
    return rc;
}
