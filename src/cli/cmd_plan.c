/* autohet plan: model + cluster + batch -> the fastest plan (and baselines). */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "autohet/comm.h"
#include "autohet/plan.h"
#include "autohet/profile_table.h"
#include "autohet/sim.h"
#include "cli/cli.h"
#include "util/errors.h"
#include "util/stats.h"

static void plan_usage(FILE *f) {
    ah_plan_options d;
    ah_plan_options_default(&d);
    fprintf(f,
            "usage: autohet plan --model NAME|config.json --cluster SHORTHAND|inventory.json\n"
            "                    --global-batch G [--seq S] [--micro-batch B] [--tp T[,T..]] [--pp S[,S..]]\n"
            "                    [--dp R[,R..]] [--objective time|cost] [--recompute none|selective|full]\n"
            "                    [--precision bf16|fp16|fp32] [--p2p overlapped|blocking|lockstep] [--dist-optimizer]\n"
            "                    [--profile PATH] [--devices FILE] [--baseline autohet|megatron|proportional]\n"
            "                    [--compare] [--json FILE] [--mem-reserve GIB] [--max-stages N]\n"
            "                    [--max-mixed-stages N] [--max-mixed-types N] [--verify K] [--top K]\n"
            "                    [--model-error C,N] [--pick fastest|robust] [--replans K]\n"
            "                    [--comm-profile FILE] [--calibration FILE] [--quiet]\n\n"
            "Finds the plan with the lowest predicted iteration time (or cost): data-parallel replicas\n"
            "that are pipelines of different depths, GPU types, layer splits and tensor-parallel degrees\n"
            "(each stage its own), and micro-batches split unevenly across replicas, within every GPU's\n"
            "memory.\n\n"
            "  --model          preset (autohet models) or an HF config.json (required)\n"
            "  --cluster        e.g. 2x8xA100-40G,1x8xH800@400:spot (nodes x GPUs x type[@NIC Gbit/s]\n"
            "                   [$PRICE per node-hour][:spot]) or an inventory JSON (docs/cluster-format.md)\n"
            "                   (required)\n"
            "  --global-batch   sequences per iteration (required)\n"
            "  --seq            sequence length (default %d)\n"
            "  --micro-batch    fix the micro-batch size (default: best of 1,2,4,8 dividing the batch)\n"
            "  --tp T[,T..]     tensor-parallel degrees allowed for every stage: 2 puts every stage at 2,\n"
            "                   1,2 lets each replica (and each GPU type of a mixed pipeline) take 1 or 2\n"
            "                   (default: 1,2,4,8, those dividing the heads and fitting a node)\n"
            "  --pp S[,S..]     pipeline depths allowed for every replica, e.g. 4 or 2,4 (default: any\n"
            "                   depth up to --max-stages); with --tp and --micro-batch this reproduces a\n"
            "                   given configuration\n"
            "  --dp R[,R..]     numbers of data-parallel replicas allowed, e.g. 4 or 2,4 (default: any;\n"
            "                   at most %d values)\n"
            "  --objective      time: the lowest iteration time; cost: the lowest dollars per iteration\n"
            "                   (iteration time x hourly prices of the nodes used / 3600; every node needs a\n"
            "                   price) (default time)\n"
            "  --recompute      activation recomputation (default %s)\n"
            "  --precision      training precision (default bf16): bf16/fp16 mixed precision (dense\n"
            "                   half-precision peak, 2-byte activations, 18 B/param of state) or fp32\n"
            "                   (TF32 tensor cores on Ampere and later, 4-byte activations, 16 B/param)\n"
            "  --p2p            pipeline sends overlapped with compute on their own stream (default\n"
            "                   overlapped) or blocking the sender's compute stream until they complete;\n"
            "                   lockstep: other runtimes' pipelines (DeepSpeed's), each stage's forward and\n"
            "                   backward waiting for two blocking whole-activation transfers on the\n"
            "                   replica's slowest boundary (stages paired by parity; one with 2 stages)\n"
            "  --dist-optimizer shard the fp32 master weights and Adam state over the data-parallel\n"
            "                   replicas (Megatron --use-distributed-optimizer; default off)\n"
            "  --profile        measured per-layer profile: a Sailor directory or an autohet profile\n"
            "                   JSON (default: the calibrated analytic model, docs/calibration.md)\n"
            "  --devices        JSON file overriding/extending the GPU catalog (default: built-in catalog)\n"
            "  --baseline       planner to run (default %s)\n"
            "  --compare        run autohet, megatron and proportional and print the speedups (default off)\n"
            "  --json FILE      write the plan document (docs/plan-format.md); with --compare it\n"
            "                   also holds comparison.{megatron,proportional}.iteration_time_s (default: none)\n"
            "  --mem-reserve    GiB kept free per GPU (default %g)\n"
            "  --max-stages     deepest pipeline of one GPU type considered (default %d)\n"
            "  --max-mixed-stages N   deepest pipeline mixing 2 GPU types (default %d; 3 or more types:\n"
            "                   %d stages at most)\n"
            "  --max-mixed-types N    most GPU types in one pipeline (default %d)\n"
            "  --verify K       simulate the K best candidates (the best plan of each of the K best\n"
            "                   (TP degrees, micro-batch, link level) sub-searches): closed form vs\n"
            "                   simulated time, and which plan wins under simulation (every plan is\n"
            "                   simulated, stages of different TP degrees included, with the gradient\n"
            "                   buckets' all-reduces overlapped with the backward as the closed form\n"
            "                   costs them: simulate --overlap-dp; default: no simulation)\n"
            "  --top K          the chosen plan and its best alternatives, K in all, ranked by time:\n"
            "                   the best plan at most half as deep (and half again), with one TP\n"
            "                   degree everywhere, with another micro-batch size; a table, and top[]\n"
            "                   in the --json document, each with \"alternative\", \"error_bar_s\" (half the\n"
            "                   spread of its time with compute and communication off by --model-error either\n"
            "                   way) and \"worst_regret\" (its time over the best of the K's where the errors\n"
            "                   fall worst for it) (default: none)\n"
            "  --model-error C,N  percent compute and communication may be off, for the error bars\n"
            "                   (default: a --calibration's left-out error, else 10,25)\n"
            "  --pick fastest|robust  the plan returned: the fastest predicted (default), or of --top's\n"
            "                   plans (6 unless given) the one of least worst regret\n"
            "  --replans K      also plan ahead every loss of up to K nodes (1..%d; one search per loss\n"
            "                   of different node counts per class) into the --json document's\n"
            "                   \"replans\": `autohet replan` then looks the survivors' plan up in\n"
            "                   milliseconds, the one a full search of them returns (default: none)\n"
            "  --comm-profile   measured links from autohet commbench --json instead of datasheet figures\n"
            "                   (default: datasheet figures)\n"
            "  --calibration    a fit of measured runs (autohet calibrate): per-GPU compute and optimizer\n"
            "                   scales, and the runtime's pipeline transfers (its p2p mode unless --p2p is\n"
            "                   given; docs/calibration.md); default: none. calibrations/ ships one:\n"
            "                   sailor-gh200.calib.json (GH200 under Sailor's DeepSpeed runtime)\n"
            "  --quiet          no tables on stdout (default off); with --verify and without --json the\n"
            "                   verification summary is still printed (one line)\n\n"
            "exit status: 0 success, 2 bad input or nothing fits (one line on stderr)\n",
            d.train.seq, AH_MAX_DP_LIST, ah_recompute_name(d.train.recompute), ah_strategy_name(d.strategy),
            d.mem_reserve_gib, d.max_stages, d.max_mixed_stages, d.max_mixed3_stages, d.max_mixed_types,
            AH_REPLAN_MAX_DEPTH);
}

enum {
    OPT_MODEL = 1000,
    OPT_CLUSTER,
    OPT_GB,
    OPT_SEQ,
    OPT_MB,
    OPT_TP,
    OPT_PP,
    OPT_DP,
    OPT_OBJECTIVE,
    OPT_RECOMPUTE,
    OPT_PRECISION,
    OPT_P2P,
    OPT_DISTOPT,
    OPT_PROFILE,
    OPT_DEVICES,
    OPT_BASELINE,
    OPT_COMPARE,
    OPT_JSON,
    OPT_RESERVE,
    OPT_MAXST,
    OPT_MAXMIX,
    OPT_MAXMIXT,
    OPT_VERIFY,
    OPT_TOP,
    OPT_MODEL_ERROR,
    OPT_PICK,
    OPT_REPLANS,
    OPT_COMMPROF,
    OPT_CALIB,
    OPT_QUIET,
    OPT_HELP
};

static const struct option plan_opts[] = {
    {"model", required_argument, 0, OPT_MODEL},
    {"cluster", required_argument, 0, OPT_CLUSTER},
    {"global-batch", required_argument, 0, OPT_GB},
    {"seq", required_argument, 0, OPT_SEQ},
    {"micro-batch", required_argument, 0, OPT_MB},
    {"tp", required_argument, 0, OPT_TP},
    {"pp", required_argument, 0, OPT_PP},
    {"dp", required_argument, 0, OPT_DP},
    {"objective", required_argument, 0, OPT_OBJECTIVE},
    {"recompute", required_argument, 0, OPT_RECOMPUTE},
    {"precision", required_argument, 0, OPT_PRECISION},
    {"p2p", required_argument, 0, OPT_P2P},
    {"dist-optimizer", no_argument, 0, OPT_DISTOPT},
    {"profile", required_argument, 0, OPT_PROFILE},
    {"devices", required_argument, 0, OPT_DEVICES},
    {"baseline", required_argument, 0, OPT_BASELINE},
    {"compare", no_argument, 0, OPT_COMPARE},
    {"json", required_argument, 0, OPT_JSON},
    {"mem-reserve", required_argument, 0, OPT_RESERVE},
    {"max-stages", required_argument, 0, OPT_MAXST},
    {"max-mixed-stages", required_argument, 0, OPT_MAXMIX},
    {"max-mixed-types", required_argument, 0, OPT_MAXMIXT},
    {"verify", required_argument, 0, OPT_VERIFY},
    {"top", required_argument, 0, OPT_TOP},
    {"model-error", required_argument, 0, OPT_MODEL_ERROR},
    {"pick", required_argument, 0, OPT_PICK},
    {"replans", required_argument, 0, OPT_REPLANS},
    {"comm-profile", required_argument, 0, OPT_COMMPROF},
    {"calibration", required_argument, 0, OPT_CALIB},
    {"quiet", no_argument, 0, OPT_QUIET},
    {"help", no_argument, 0, OPT_HELP},
    {0, 0, 0, 0},
};

static int int_opt(const char *flag, const char *v, int min, int *out) {
    if (cli_parse_int(v, out) != 0 || *out < min) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s '%s': expected an integer >= %d", flag, v, min);
        return cli_bad_input("plan", msg);
    }
    return 0;
}

/* cost_per_iteration_usd and cost_per_mtoken_usd, when every used node has a price */
/* "2" or "mix" (stages of different TP degrees) for a table column */
static const char *tp_label(const ah_plan *p) {
    static char buf[16];
    int tp = ah_plan_uniform_tp(p);
    if (tp > 0)
        snprintf(buf, sizeof buf, "%d", tp);
    else
        snprintf(buf, sizeof buf, "mix");
    return buf;
}

/* "stage_tp": per replica, its stages' TP degrees ("tp" is 0 when they differ) */
static void add_stage_tp(cJSON *o, const ah_plan *p) {
    cJSON *arr = cJSON_AddArrayToObject(o, "stage_tp");
    for (int k = 0; k < p->n_replicas; k++) {
        cJSON *r = cJSON_CreateArray();
        for (int j = 0; j < p->replicas[k].n_stages; j++)
            cJSON_AddItemToArray(r, cJSON_CreateNumber(p->replicas[k].stages[j].tp));
        cJSON_AddItemToArray(arr, r);
    }
}

static void add_cost_fields(cJSON *o, const ah_plan *p) {
    double ci = ah_plan_cost_per_iteration(p);
    if (ci < 0)
        return;
    cJSON_AddNumberToObject(o, "price_per_hour_usd", ah_plan_price_per_hour(p));
    cJSON_AddNumberToObject(o, "cost_per_iteration_usd", ci);
    cJSON_AddNumberToObject(o, "cost_per_mtoken_usd", ah_plan_cost_per_mtoken(p));
}

static cJSON *comparison_entry(const ah_plan *p, int ok, const char *err, const ah_plan *ref) {
    cJSON *o = cJSON_CreateObject();
    if (!ok) {
        cJSON_AddNullToObject(o, "iteration_time_s");
        cJSON_AddStringToObject(o, "error", err);
        return o;
    }
    cJSON_AddNumberToObject(o, "iteration_time_s", p->iteration_time_s);
    cJSON_AddNumberToObject(o, "tokens_per_s", p->tokens_per_s);
    cJSON_AddNumberToObject(o, "mfu", p->mfu);
    cJSON_AddNumberToObject(o, "tp", ah_plan_uniform_tp(p)); /* 0: per stage */
    add_stage_tp(o, p);
    cJSON_AddNumberToObject(o, "micro_batch", p->micro_batch);
    cJSON_AddNumberToObject(o, "replicas", p->n_replicas);
    cJSON_AddNumberToObject(o, "stages", p->replicas[0].n_stages);
    cJSON_AddNumberToObject(o, "autohet_speedup", p->iteration_time_s / ref->iteration_time_s);
    add_cost_fields(o, p);
    return o;
}

/* Simulate candidates (ah_sim_verify), print closed form vs simulation, return the JSON array. */
static cJSON *verify_plans(ah_plan *plans, int n, const ah_profile *prof, const ah_plan_options *o,
                           int quiet, int summary_only, double *tau_out, double *worst_out) {
    ah_sim_verification v;
    ah_sim_verify(plans, n, prof, o, &v);
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < n; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "rank", i);
        cJSON_AddNumberToObject(e, "tp", ah_plan_uniform_tp(&plans[i])); /* 0: per stage */
        add_stage_tp(e, &plans[i]);
        cJSON_AddNumberToObject(e, "micro_batch", plans[i].micro_batch);
        cJSON_AddNumberToObject(e, "replicas", plans[i].n_replicas);
        cJSON_AddNumberToObject(e, "closed_form_s", plans[i].iteration_time_s);
        if (v.simulated_s[i] > 0) {
            cJSON_AddNumberToObject(e, "simulated_s", v.simulated_s[i]);
            cJSON_AddNumberToObject(e, "model_error", plans[i].iteration_time_s / v.simulated_s[i] - 1.0);
        } else {
            cJSON_AddStringToObject(e, "error", v.errors[i]);
        }
        cJSON_AddBoolToObject(e, "wins_in_simulation", i == v.winner);
        cJSON_AddItemToArray(arr, e);
    }
    if (!quiet) {
        printf("\nVerification: the %d best candidates, closed form vs simulated (1F1B)\n", n);
        printf("  %4s %4s %4s %8s %14s %14s %9s\n", "rank", "TP", "mb", "replicas", "closed form s",
               "simulated s", "error");
        for (int i = 0; i < n; i++)
            if (v.simulated_s[i] > 0)
                printf("  %4d %4s %4d %8d %14.4f %14.4f %8.1f%%%s\n", i, tp_label(&plans[i]),
                       plans[i].micro_batch, plans[i].n_replicas, plans[i].iteration_time_s, v.simulated_s[i],
                       100.0 * (plans[i].iteration_time_s / v.simulated_s[i] - 1.0),
                       i == v.winner ? "  <- fastest in simulation" : "");
            else
                printf("  %4d %4s %4d %8d %14.4f  not simulated (%s)\n", i, tp_label(&plans[i]),
                       plans[i].micro_batch, plans[i].n_replicas, plans[i].iteration_time_s, v.errors[i]);
        printf("  (error = closed form / simulated - 1; negative: the model is optimistic)\n");
        if (v.worst >= 0)
            printf("  worst |error| %.2f%% (rank %d); ranking agreement Kendall tau %.3f over %d candidates\n",
                   100.0 * v.worst_error, v.worst, v.tau, n);
    } else if (summary_only) { /* --quiet without --json: the verification's one line, not nothing */
        char count[48];
        if (v.n_simulated == n)
            snprintf(count, sizeof count, "%d", n);
        else
            snprintf(count, sizeof count, "%d of %d", v.n_simulated, n);
        if (v.worst >= 0)
            printf("Verification: %s candidates simulated (1F1B); worst |error| %.2f%% (rank %d); ranking "
                   "agreement Kendall tau %.3f; fastest in simulation: rank %d\n",
                   count, 100.0 * v.worst_error, v.worst, v.tau, v.winner);
        else
            printf("Verification: none of the %d candidates could be simulated\n", n);
    }
    *tau_out = v.tau;
    *worst_out = v.worst_error;
    ah_sim_verification_free(&v);
    return arr;
}

/* --tp / --pp LIST into the option masks; 0, or the exit status */
static int mask_opt(int c, const char *arg, ah_plan_options *o) {
    int v[64], n = cli_parse_int_list(arg, v, 64);
    const char *flag = c == OPT_TP ? "--tp" : "--pp";
    for (int i = 0; i < n; i++)
        if (v[i] < 1 || v[i] > 64)
            n = -1;
    if (n < 1) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s '%s': expected an integer or a comma list of integers in 1..64", flag, arg);
        return cli_bad_input("plan", msg);
    }
    for (int i = 0; i < n; i++) {
        if (c == OPT_TP)
            o->tp_mask |= v[i] < 32 ? 1u << v[i] : 1u << 31;
        else
            o->pp_mask |= 1ull << (v[i] - 1);
    }
    return 0;
}

/* --dp LIST: ascending, without repeats; 0, or the exit status */
static int dp_opt(const char *arg, ah_plan_options *o) {
    int v[AH_MAX_DP_LIST + 1], n = cli_parse_int_list(arg, v, AH_MAX_DP_LIST + 1);
    for (int i = 0; i < n; i++)
        if (v[i] < 1 || v[i] > 1 << 20)
            n = -1;
    if (n < 1 || n > AH_MAX_DP_LIST) {
        char msg[200];
        snprintf(msg, sizeof msg, "--dp '%s': expected a replica count or a comma list of at most %d counts in 1..%d",
                 arg, AH_MAX_DP_LIST, 1 << 20);
        return cli_bad_input("plan", msg);
    }
    o->n_dp = 0;
    for (int i = 0; i < n; i++) {
        int at = o->n_dp, dup = 0;
        for (int j = 0; j < o->n_dp; j++)
            dup |= o->dp[j] == v[i];
        if (dup)
            continue;
        while (at > 0 && o->dp[at - 1] > v[i]) {
            o->dp[at] = o->dp[at - 1];
            at--;
        }
        o->dp[at] = v[i];
        o->n_dp++;
    }
    return 0;
}

/* --top's error bars and regrets (robustness_of) */
typedef struct {
    double ec, en, *error_bar_s, *regret;
    const char *source;
    int ok, most_robust;
} robustness;

typedef struct {
    const char *model, *cluster, *profile, *devices, *json, *comm, *calibration;
    int compare, quiet, verify, top_k, p2p_given, pick_robust, replans;
    double model_error[2]; /* --model-error: compute, communication (fractions; < 0: not given) */
    ah_plan_options o;
} plan_args;

/* --model-error C,N: percent of compute and of communication time the predictions may be off by */
static int model_error_opt(const char *arg, plan_args *a) {
    char buf[64];
    snprintf(buf, sizeof buf, "%s", arg);
    char *comma = strchr(buf, ',');
    double c, n;
    if (comma)
        *comma = '\0';
    if (!comma || cli_parse_double(buf, &c) != 0 || cli_parse_double(comma + 1, &n) != 0 || !(c >= 0 && c < 100) ||
        !(n >= 0 && n < 100)) {
        char msg[160];
        snprintf(msg, sizeof msg, "--model-error '%s': expected COMPUTE,COMM in percent, each in [0, 100)", arg);
        return cli_bad_input("plan", msg);
    }
    a->model_error[0] = c / 100;
    a->model_error[1] = n / 100;
    return 0;
}

/* an option that sets an enum through a parser; 0, or the exit status */
static int enum_opt(int ok, const char *msg) { return ok ? 0 : cli_bad_input("plan", msg); }

/* One option c (with optarg). 0, the exit status of bad input, or -1 for --help. */
static int plan_option(int c, const char *arg, const char *argv_opt, plan_args *a) {
    ah_plan_options *o = &a->o;
    switch (c) {
    case OPT_MODEL: a->model = arg; return 0;
    case OPT_CLUSTER: a->cluster = arg; return 0;
    case OPT_GB: return int_opt("--global-batch", arg, 1, &o->global_batch);
    case OPT_SEQ: return int_opt("--seq", arg, 1, &o->train.seq);
    case OPT_MB: return int_opt("--micro-batch", arg, 1, &o->micro_batch);
    case OPT_TP:
    case OPT_PP: return mask_opt(c, arg, o);
    case OPT_DP: return dp_opt(arg, o);
    case OPT_OBJECTIVE:
        if (!strcmp(arg, "time") || !strcmp(arg, "cost")) {
            o->objective = !strcmp(arg, "time") ? AH_OBJECTIVE_TIME : AH_OBJECTIVE_COST;
            return 0;
        } else {
            char msg[160];
            snprintf(msg, sizeof msg, "--objective '%s': expected time or cost", arg);
            return cli_bad_input("plan", msg);
        }
    case OPT_MAXST: return int_opt("--max-stages", arg, 1, &o->max_stages);
    case OPT_MAXMIX: return int_opt("--max-mixed-stages", arg, 0, &o->max_mixed_stages);
    case OPT_MAXMIXT: return int_opt("--max-mixed-types", arg, 0, &o->max_mixed_types);
    case OPT_RECOMPUTE:
        return enum_opt(ah_recompute_parse(arg, &o->train.recompute) == 0,
                        "--recompute: expected none, selective or full");
    case OPT_PRECISION:
        return enum_opt(ah_precision_parse(arg, &o->train.precision) == 0,
                        "--precision: expected bf16, fp16 or fp32");
    case OPT_P2P:
        a->p2p_given = 1;
        return enum_opt(ah_p2p_mode_parse(arg, &o->train.p2p) == 0, "--p2p: expected overlapped, blocking or lockstep");
    case OPT_DISTOPT: o->train.dist_optimizer = 1; return 0;
    case OPT_PROFILE: a->profile = arg; return 0;
    case OPT_DEVICES: a->devices = arg; return 0;
    case OPT_BASELINE:
        return enum_opt(ah_strategy_parse(arg, &o->strategy) == 0,
                        "--baseline: expected autohet, megatron or proportional");
    case OPT_COMPARE: a->compare = 1; return 0;
    case OPT_JSON: a->json = arg; return 0;
    case OPT_RESERVE: /* bounded: the reserve is subtracted from GPU memory in bytes */
        return enum_opt(cli_parse_double(arg, &o->mem_reserve_gib) == 0 && o->mem_reserve_gib >= 0 &&
                            o->mem_reserve_gib <= 65536,
                        "--mem-reserve: expected a number of GiB in [0, 65536]");
    case OPT_COMMPROF: a->comm = arg; return 0;
    case OPT_CALIB: a->calibration = arg; return 0;
    case OPT_VERIFY: return int_opt("--verify", arg, 1, &a->verify);
    case OPT_TOP: return int_opt("--top", arg, 1, &a->top_k);
    case OPT_MODEL_ERROR: return model_error_opt(arg, a);
    case OPT_PICK:
        if (strcmp(arg, "fastest") && strcmp(arg, "robust"))
            return cli_bad_input("plan", "--pick: expected fastest or robust");
        a->pick_robust = !strcmp(arg, "robust");
        return 0;
    case OPT_REPLANS:
        if (int_opt("--replans", arg, 1, &a->replans))
            return AH_EXIT_BAD_INPUT;
        if (a->replans > AH_REPLAN_MAX_DEPTH) {
            char msg[160];
            snprintf(msg, sizeof msg, "--replans '%s': expected a node count in 1..%d", arg, AH_REPLAN_MAX_DEPTH);
            return cli_bad_input("plan", msg);
        }
        return 0;
    case OPT_QUIET: a->quiet = 1; return 0;
    case OPT_HELP:
    case 'h': return -1;
    default: {
        char msg[160];
        cli_unknown_option("plan", argv_opt, msg, sizeof msg);
        return cli_bad_input("plan", msg);
    }
    }
}

/* The flags and their checks. 0, -1 for --help, or the exit status. */
static int parse_plan_args(int argc, char **argv, plan_args *a) {
    memset(a, 0, sizeof *a);
    a->model_error[0] = a->model_error[1] = -1;
    ah_plan_options_default(&a->o);
    optind = 1;
    opterr = 0;
    int c, rc;
    while ((c = getopt_long(argc, argv, "h", plan_opts, NULL)) != -1)
        if ((rc = plan_option(c, optarg, argv[optind - 1], a)) != 0)
            return rc;
    char msg[4400];
    if (optind < argc) {
        snprintf(msg, sizeof msg, "unexpected argument '%s'", argv[optind]);
        return cli_bad_input("plan", msg);
    }
    if (!a->model)
        return cli_bad_input("plan", "--model is required (see autohet plan --help)");
    if (!a->cluster)
        return cli_bad_input("plan", "--cluster is required");
    if (!a->o.global_batch)
        return cli_bad_input("plan", "--global-batch is required");
    if (cli_check_output("--json", a->json, msg, sizeof msg))
        return cli_bad_input("plan", msg);
    if (a->pick_robust && a->o.objective == AH_OBJECTIVE_COST)
        return cli_bad_input("plan", "--pick robust: only with --objective time");
    if (a->replans && !a->json)
        return cli_bad_input("plan", "--replans: needs --json (the replans are kept in the plan document)");
    if (a->pick_robust && a->top_k == 0)
        a->top_k = 6; /* the alternatives it picks among */
    return 0;
}

/* the table, its cost line and the --compare rows */
static void print_plan(const plan_args *a, const ah_plan *plan, const ah_plan *base, const int *base_ok,
                       char base_err[2][512], const char *comm_summary) {
    if (a->comm)
        printf("Measured links (%s): %s\n", a->comm, comm_summary);
    ah_plan_print_table(plan, stdout);
    if (ah_plan_cost_per_iteration(plan) >= 0)
        printf("Cost:                     $%.6f per iteration, $%.4f per 1M tokens (nodes used: $%.2f/h)%s\n",
               ah_plan_cost_per_iteration(plan), ah_plan_cost_per_mtoken(plan), ah_plan_price_per_hour(plan),
               a->o.objective == AH_OBJECTIVE_COST ? "; objective: cost" : "");
    if (!a->compare)
        return;
    printf("\nComparison (same cost model, same cluster, same global batch)\n");
    printf("  %-13s %12s %12s %7s %4s %4s %6s %9s\n", "strategy", "iter time s", "tokens/s", "MFU", "TP", "mb",
           "DP", "speedup");
    const ah_plan *rows[3] = {plan, &base[0], &base[1]};
    const char *names[3] = {"autohet", "megatron", "proportional"};
    for (int i = 0; i < 3; i++) {
        if (i > 0 && !base_ok[i - 1]) {
            printf("  %-13s %s\n", names[i], base_err[i - 1]);
            continue;
        }
        const ah_plan *p = rows[i];
        printf("  %-13s %12.4f %12.0f %6.1f%% %4s %4d %6d %8.2fx\n", names[i], p->iteration_time_s,
               p->tokens_per_s, 100.0 * p->mfu, tp_label(p), p->micro_batch, p->n_replicas,
               p->iteration_time_s / plan->iteration_time_s);
    }
    printf("  (speedup = that strategy's iteration time / autohet's)\n");
}

/* --top K for people: each alternative's predicted time against the chosen plan's, and its shape */
static void print_alternatives(const ah_plan *alt, char (*why)[96], int n, const robustness *rb) {
    printf("\nAlternatives (--top %d; each the best plan under its constraint, ranked):\n", n);
    printf("  #  iteration s  +- error s   vs chosen  worst regret  replicas  stages    TP     mb  GPUs  constraint\n");
    for (int i = 0; i < n; i++) {
        const ah_plan *p = &alt[i];
        int lo = 1 << 30, hi = 0, tlo = 1 << 30, thi = 0;
        for (int k = 0; k < p->n_replicas; k++) {
            const ah_replica *r = &p->replicas[k];
            lo = r->n_stages < lo ? r->n_stages : lo;
            hi = r->n_stages > hi ? r->n_stages : hi;
            for (int j = 0; j < r->n_stages; j++) {
                tlo = r->stages[j].tp < tlo ? r->stages[j].tp : tlo;
                thi = r->stages[j].tp > thi ? r->stages[j].tp : thi;
            }
        }
        char st[24], tp[24];
        snprintf(st, sizeof st, lo == hi ? "%d" : "%d-%d", lo, hi);
        snprintf(tp, sizeof tp, tlo == thi ? "%d" : "%d-%d", tlo, thi);
        printf("%3d  %11.4f  %10.4f  %+9.1f%%  %11.1f%%  %8d  %-8s  %-5s  %3d  %4d  %s\n", i + 1, p->iteration_time_s,
               rb->error_bar_s[i], 100 * (p->iteration_time_s / alt[0].iteration_time_s - 1), 100 * rb->regret[i],
               p->n_replicas, st, tp, p->micro_batch, p->gpus_used, why[i]);
    }
    printf("  error: compute %.0f %% and communication %.0f %% off either way (%s)\n"
           "  worst regret: time over the best of these plans where the errors fall worst for it\n",
           100 * rb->ec, 100 * rb->en, rb->source);
    if (rb->most_robust > 0)
        printf("  #%d holds best under these errors (worst regret %.1f %% against the chosen plan's %.1f %%)\n",
               rb->most_robust + 1, 100 * rb->regret[rb->most_robust], 100 * rb->regret[0]);
}

static cJSON *plan_extra_json(const plan_args *a, const ah_plan *plan, const ah_plan *base, const int *base_ok,
                              char base_err[2][512], const ah_plan *alt, char (*why)[96], int n_alt,
                              const robustness *rb, int n_top, cJSON *verify_json, double tau, double worst,
                              cJSON *replans) {
    cJSON *extra = cJSON_CreateObject();
    if (replans)
        cJSON_AddItemToObject(extra, "replans", replans);
    if (ah_plan_cost_per_iteration(plan) >= 0 || a->o.objective == AH_OBJECTIVE_COST) {
        cJSON_AddStringToObject(extra, "objective", a->o.objective == AH_OBJECTIVE_COST ? "cost" : "time");
        add_cost_fields(extra, plan);
    }
    if (a->compare) {
        cJSON *cmp = cJSON_AddObjectToObject(extra, "comparison");
        cJSON_AddItemToObject(cmp, "megatron", comparison_entry(&base[0], base_ok[0], base_err[0], plan));
        cJSON_AddItemToObject(cmp, "proportional", comparison_entry(&base[1], base_ok[1], base_err[1], plan));
    }
    if (a->top_k > 0) {
        cJSON *arr = cJSON_AddArrayToObject(extra, "top");
        for (int i = 0; i < n_alt; i++) {
            cJSON *e = ah_plan_to_json(&alt[i]);
            add_cost_fields(e, &alt[i]);
            cJSON_AddStringToObject(e, "alternative", why[i]);
            if (rb->ok) {
                cJSON_AddNumberToObject(e, "error_bar_s", rb->error_bar_s[i]);
                cJSON_AddNumberToObject(e, "worst_regret", rb->regret[i]);
            }
            cJSON_AddItemToArray(arr, e);
        }
        cJSON *me = cJSON_AddObjectToObject(extra, "model_error");
        cJSON_AddNumberToObject(me, "compute", rb->ec);
        cJSON_AddNumberToObject(me, "communication", rb->en);
        cJSON_AddStringToObject(me, "source", rb->source);
        if (rb->ok)
            cJSON_AddNumberToObject(me, "most_robust", rb->most_robust);
    }
    if (verify_json) {
        cJSON_AddItemToObject(extra, "verify", verify_json);
        cJSON *vs = cJSON_AddObjectToObject(extra, "verify_summary");
        cJSON_AddNumberToObject(vs, "candidates", n_top);
        cJSON_AddNumberToObject(vs, "kendall_tau", tau);
        cJSON_AddNumberToObject(vs, "worst_abs_error", worst);
    }
    if (!extra->child) { /* nothing beside the plan */
        cJSON_Delete(extra);
        return NULL;
    }
    return extra;
}

/* The error bars of --top's plans (ah_plan_robustness): the errors from --model-error, else the calibration's
 * left-out error, else the defaults (docs/planner.md "Error bars"). */
static void robustness_of(const plan_args *a, const ah_plan *alt, int n, const ah_profile *prof, robustness *rb) {
    rb->error_bar_s = ah_xcalloc((size_t)n + 1, sizeof(double));
    rb->regret = ah_xcalloc((size_t)n + 1, sizeof(double));
    if (a->model_error[0] >= 0) {
        rb->ec = a->model_error[0];
        rb->en = a->model_error[1];
        rb->source = "--model-error";
    } else if (a->o.calibration && a->o.calibration->left_out_error > 0) {
        rb->ec = rb->en = a->o.calibration->left_out_error;
        rb->source = "the calibration's left-out error";
    } else {
        rb->ec = 0.10;
        rb->en = 0.25;
        rb->source = "defaults: the uncalibrated residuals on measured runs";
    }
    rb->ok = ah_plan_robustness(alt, n, prof, &a->o, rb->ec, rb->en, rb->error_bar_s, rb->regret) == 0;
    rb->most_robust = 0;
    for (int i = 1; i < n && rb->ok; i++)
        if (rb->regret[i] < rb->regret[rb->most_robust] - 1e-12)
            rb->most_robust = i;
}

/* --top K: the K cheapest under the cost objective, else the structural alternatives; their error bars */
static void alternatives_of(const plan_args *a, const ah_model_config *model, const ah_cluster *cluster,
                            const ah_profile *prof, const ah_plan *plan, const ah_plan *top, int n_top, ah_plan *alt,
                            char (*why)[96], int *n_alt, robustness *rb) {
    *n_alt = 0;
    if (a->o.objective == AH_OBJECTIVE_COST) { /* the K cheapest (docs/planner.md) */
        for (; *n_alt < n_top && *n_alt < a->top_k; (*n_alt)++) {
            ah_plan_copy(&alt[*n_alt], &top[*n_alt]);
            snprintf(why[*n_alt], sizeof why[*n_alt], "%s", *n_alt ? "the next cheapest" : "the chosen plan");
        }
    } else {
        ah_plan_alternatives(model, cluster, prof, &a->o, plan, a->top_k, alt, why, n_alt);
    }
    robustness_of(a, alt, *n_alt, prof, rb);
}

/* Every GPU type of the cluster has data in the profile: a type without any
 * would be left out of every plan, which would then look like the best use
 * of a smaller cluster. 0, or -1 with err naming the type and its nodes. */
static int profile_covers_cluster(const ah_profile *prof, const ah_model_config *model, const ah_cluster *cluster,
                                  const char *profile_arg, char *err, size_t errlen) {
    for (int i = 0; i < cluster->n_nodes; i++) {
        const ah_device *dev = &cluster->nodes[i].dev;
        int seen = 0;
        for (int j = 0; j < i; j++)
            seen |= !strcmp(cluster->nodes[j].dev.name, dev->name);
        if (seen || ah_profile_has_device(prof, model, dev))
            continue;
        int n = 0;
        for (int j = i; j < cluster->n_nodes; j++)
            n += !strcmp(cluster->nodes[j].dev.name, dev->name);
        snprintf(err, errlen,
                 "--profile %s has no data for GPU '%s' (%d node%s of the cluster, first %s) at this model's %d "
                 "layers: profile it (autohet profile), or leave those nodes out of --cluster",
                 profile_arg ? profile_arg : "(analytic)", dev->name, n, n == 1 ? "" : "s", cluster->nodes[i].name,
                 ah_model_num_layers(model));
        return -1;
    }
    return 0;
}

/* The inputs of a search: devices, model, cluster (with measured links),
 * profile. 0, or the exit status of bad input. */
static int load_plan_inputs(plan_args *a, ah_model_config *model, ah_cluster *cluster, ah_profile **prof,
                            char *comm_summary, size_t cs_len) {
    char err[512];
    ah_device_catalog catalog = *ah_device_catalog_builtin();
    if (a->devices && ah_device_load_overrides(&catalog, a->devices, err, sizeof err) != 0)
        return cli_bad_input("plan", err);
    if (ah_model_resolve(a->model, model, err, sizeof err) != 0)
        return cli_bad_input("plan", err);
    if (ah_cluster_resolve(a->cluster, &catalog, cluster, err, sizeof err) != 0)
        return cli_bad_input("plan", err);
    if (a->comm && ah_comm_profile_apply(a->comm, cluster, &a->o, comm_summary, cs_len, err, sizeof err) != 0) {
        ah_cluster_free(cluster);
        return cli_bad_input("plan", err);
    }
    *prof = a->profile ? ah_profile_load_with(a->profile, &catalog, err, sizeof err) : ah_profile_analytic();
    if (*prof && profile_covers_cluster(*prof, model, cluster, a->profile, err, sizeof err) != 0) {
        ah_profile_free(*prof);
        *prof = NULL;
    }
    static ah_calibration calib; /* outlives the profile and options that point at it */
    if (*prof && a->calibration && ah_calibration_load(a->calibration, &calib, err, sizeof err) != 0) {
        ah_profile_free(*prof);
        *prof = NULL;
    }
    if (!*prof) {
        ah_cluster_free(cluster);
        ah_link_matrix_free((ah_link_matrix *)a->o.links);
        return cli_bad_input("plan", err);
    }
    if (a->calibration && ah_calibration_scope(&calib, ah_profile_table_model(*prof)))
        cli_calibration_scope_note("plan", a->calibration, calib.profile_model, ah_profile_table_model(*prof));
    if (a->calibration && ah_calibration_link_scope(&calib, a->comm != NULL))
        cli_calibration_link_note("plan", a->calibration, calib.links_measured);
    if (a->calibration)
        ah_calibration_apply(&calib, *prof, &a->o, &a->o.train, a->p2p_given);
    return 0;
}

/* --replans K: the table of replans (ah_replan_table_build) as the document's "replans"; 0 or the exit status */
static int plan_ahead(const plan_args *a, const ah_plan *plan, const ah_profile *prof, cJSON **out) {
    char err[512];
    ah_replan_table *t;
    if (ah_replan_table_build(plan, prof, &a->o, a->replans, &t, err, sizeof err) != 0) {
        char msg[600];
        snprintf(msg, sizeof msg, "--replans %d: %s", a->replans, err);
        return cli_bad_input("plan", msg);
    }
    int depth, n, classes, threads;
    double build_s;
    ah_replan_table_stats(t, &depth, &n, &classes, &build_s, &threads);
    if (!a->quiet)
        printf("Replans computed ahead: %d losses of up to %d node%s (%d node classes) in %.2f s on %d thread%s\n", n,
               depth, depth == 1 ? "" : "s", classes, build_s, threads, threads == 1 ? "" : "s");
    *out = ah_replan_table_to_json(t);
    ah_replan_table_free(t);
    return 0;
}

int cmd_plan(int argc, char **argv) {
    plan_args a;
    int rc = parse_plan_args(argc, argv, &a);
    if (rc < 0) {
        plan_usage(stdout);
        return 0;
    }
    if (rc)
        return rc;
    ah_model_config model;
    ah_cluster cluster = {0};
    ah_profile *prof = NULL;
    char comm_summary[256] = "", err[512];
    if ((rc = load_plan_inputs(&a, &model, &cluster, &prof, comm_summary, sizeof comm_summary)) != 0)
        return rc;
    if (a.replans && ah_replan_table_check(&cluster, &a.o, a.replans, err, sizeof err) != 0) {
        char msg[600];
        snprintf(msg, sizeof msg, "--replans %d: %s", a.replans, err);
        ah_profile_free(prof);
        ah_cluster_free(&cluster);
        ah_link_matrix_free((ah_link_matrix *)a.o.links);
        return cli_bad_input("plan", msg);
    }
    int exit_code = 0;
    ah_plan plan, base[2];
    int base_ok[2] = {0, 0};
    char base_err[2][512] = {"", ""};
    /* the next-best sub-searches: what --verify simulates, and --top's K cheapest under the cost objective
     * (the time objective's alternatives are searched after) */
    int top_cost = a.o.objective == AH_OBJECTIVE_COST ? a.top_k : 0;
    int k = a.verify > top_cost ? a.verify : top_cost, n_top = 0;
    ah_plan *top = ah_xcalloc((size_t)(k < 1 ? 1 : k), sizeof(ah_plan));
    if (ah_plan_search_top(&model, &cluster, prof, &a.o, k < 1 ? 1 : k, top, &n_top, err, sizeof err) != 0) {
        free(top);
        exit_code = cli_bad_input("plan", err);
        goto out;
    }
    plan = top[0];
    if (a.compare) {
        ah_strategy bs[2] = {AH_STRATEGY_MEGATRON, AH_STRATEGY_PROPORTIONAL};
        for (int i = 0; i < 2; i++) {
            ah_plan_options ob = a.o;
            ob.strategy = bs[i];
            ob.objective = AH_OBJECTIVE_TIME; /* the baselines are fastest-plan planners */
            base_ok[i] = ah_plan_search(&model, &cluster, prof, &ob, &base[i], base_err[i], sizeof base_err[i]) == 0;
        }
    }
    int n_alt = 0;
    ah_plan *alt = ah_xcalloc((size_t)a.top_k + 1, sizeof(ah_plan));
    char(*why)[96] = ah_xcalloc((size_t)a.top_k + 1, sizeof *why);
    robustness rb = {0};
    if (a.top_k > 0)
        alternatives_of(&a, &model, &cluster, prof, &plan, top, n_top, alt, why, &n_alt, &rb);
    /* --pick robust: the alternative of least worst regret (docs/planner.md "Error bars") */
    const ah_plan *chosen = a.pick_robust && rb.ok && rb.most_robust > 0 ? &alt[rb.most_robust] : &plan;
    if (!a.quiet) {
        print_plan(&a, chosen, base, base_ok, base_err, comm_summary);
        if (chosen != &plan)
            printf("(--pick robust: alternative #%d below, worst regret %.1f %% against %.1f %% for the fastest)\n",
                   rb.most_robust + 1, 100 * rb.regret[rb.most_robust], 100 * rb.regret[0]);
    }
    if (a.top_k > 0 && !a.quiet)
        print_alternatives(alt, why, n_alt, &rb);
    double tau = 1, worst = 0;
    cJSON *verify_json = a.verify ? verify_plans(top, n_top, prof, &a.o, a.quiet, !a.json, &tau, &worst) : NULL;
    cJSON *replans = NULL;
    if (a.replans && (exit_code = plan_ahead(&a, chosen, prof, &replans)) != 0)
        a.json = NULL;
    if (a.json) {
        cJSON *extra = plan_extra_json(&a, chosen, base, base_ok, base_err, alt, why, n_alt, &rb, n_top, verify_json,
                                       tau, worst, replans);
        verify_json = NULL;
        if (ah_plan_write_json(chosen, extra, a.json, err, sizeof err) != 0) {
            fprintf(stderr, "autohet plan: %s\n", err);
            exit_code = 1;
        }
        cJSON_Delete(extra);
    }
    for (int i = 0; i < 2; i++)
        if (base_ok[i])
            ah_plan_free(&base[i]);
    cJSON_Delete(verify_json);
    for (int i = 0; i < n_top; i++)
        ah_plan_free(&top[i]);
    free(top);
    for (int i = 0; i < n_alt; i++)
        ah_plan_free(&alt[i]);
    free(alt);
    free(why);
    free(rb.error_bar_s);
    free(rb.regret);
out:
    ah_profile_free(prof);
    ah_cluster_free(&cluster);
    ah_link_matrix_free((ah_link_matrix *)a.o.links);
    return exit_code;
}
