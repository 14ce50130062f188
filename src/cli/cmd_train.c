/* autohet train: train a GPT/LLaMA-style model on real text, on one process or
 * over MPI ranks executing a plan document. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "autohet/ckpt.h"
#include "autohet/elastic.h"
#include "autohet/engine.h"
#include "autohet/hosts.h"
#include "autohet/plan.h"
#include "cli/cli.h"
#include "cli/cli_data.h"
#include "util/clock.h"
#include "util/json_file.h"
#include "util/atomic_file.h"

static void train_usage(FILE *f) {
    fprintf(f,
            "usage: [mpirun -np N] autohet train --model NAME|config.json --data PATH [--val-data PATH]\n"
            "                      [--plan PLAN.json]\n"
            "                      [--steps N] [--seed S] [--global-batch G --micro-batch B --seq L]\n"
            "                      [--lr LR] [--warmup N] [--eval-every K] [--log-every K] [--log FILE]\n"
            "                      [--trace FILE] [--ckpt-dir DIR --ckpt-every K] [--ckpt-mem DIR [--mem-every k]]\n"
            "                      [--ckpt-cloud DIR] [--resume DIR | --recover FILE | --init-from HF_DIR]\n"
            "                      [--schedule 1f1b|gpipe|interleaved [--virtual-stages V]] [--overlap-dp]\n"
            "                      [--device cpu|cuda]\n"
            "                      [--precision fp32|bf16] [--data-dtype uint16|uint32] [--eval-batches N]\n"
            "                      [--emulate analytic|PROFILE]\n"
            "                      [--devices FILE]\n\n"
            "Trains on token files (the model's vocabulary) or on the bytes of text (vocabulary 256). Without\n"
            "--plan it runs on one process (one replica, one stage); with --plan every MPI rank takes\n"
            "one GPU slot of the plan (replica, stage, TP rank) and the job computes the same model as\n"
            "one process would.\n\n"
            "  --model        preset (e.g. tiny-gpt, tiny-llama, small-gpt, gpt2-124m) or config.json;\n"
            "                 on text data the vocabulary is replaced by the 256 byte values; optional with\n"
            "                 --plan (the plan's model) or --init-from (its config.json)\n"
            "  --data         tokens: an llm.c token file (magic 20240520, version 1 uint16 / 2 uint32\n"
            "                 tokens), Megatron's PREFIX.bin + PREFIX.idx (the .bin, the .idx or PREFIX),\n"
            "                 a raw .bin (uint16 as nanoGPT's, or --data-dtype), or a directory of .bin\n"
            "                 shards (\"_val\" in a name = validation); else text: a file or a directory of\n"
            "                 them (bytes). Without --val-data or _val shards, 10%% at the end is held out\n"
            "                 for validation (docs/data.md)\n"
            "  --data-dtype   uint16|uint32: the token type of raw .bin files (no header); required for\n"
            "                 raw files when the vocabulary is over 65,536\n"
            "  --val-data     the validation data (a file or directory as --data, of the same kind)\n"
            "  --plan         plan document (autohet plan --json, or hand-written: docs/plan-format.md);\n"
            "                 its tp, micro_batch, global_batch and seq are used\n"
            "  --steps        optimizer steps (default 50; 0: --init-from weights as step 0)\n"
            "  --seed         data order and initialisation (default 1)\n"
            "  --global-batch / --micro-batch / --seq   batch shape without a plan (default 8 / 2 / 128)\n"
            "  --lr, --warmup peak learning rate (default 3e-3) and warm-up steps (default 5); cosine decay\n"
            "  --eval-every   validation loss every K steps (default 10, 0 = never)\n"
            "  --log-every    progress line every K steps (default 1; also at evaluations and the last\n"
            "                 step); the val column is blank on steps without an evaluation\n"
            "  --eval-batches N  validation batches averaged per evaluation (default 1)\n"
            "  --log FILE     one JSON object per step (docs/data.md): step, time_s, unix_s, step_s, loss,\n"
            "                 val_loss + val_batches (evaluated steps only), lr, grad_norm, tokens,\n"
            "                 tokens_per_s, tflops, mfu + peak_tflops (nominal peak), sgemm_util\n"
            "  --devices FILE device catalog overrides (as autohet plan's): the plan's GPU types and the\n"
            "                 MFU's nominal peak\n"
            "  --emulate M    emulated devices: every compute op lasts the time cost model M (analytic, or a\n"
            "                 profile file as plan --profile reads) gives it on its rank's device of the plan\n"
            "                 (computed, then slept to that time), so 8-16 ranks of a pipeline whose devices\n"
            "                 the model makes slow fit on a few cores; the end says how many ops overran\n"
            "  --trace FILE   record every compute op, wait, send, collective and checkpoint of every rank (from the\n"
            "                 second step it trains on, a resumed run's too) into one Chrome trace;\n"
            "                 autohet analyze FILE explains it\n"
            "  --ckpt-dir DIR --ckpt-every K   layer checkpoint every K steps and after the last step:\n"
            "                 a safetensors shard per layer (parameters + AdamW moments) under DIR/<node>/,\n"
            "                 manifests, DIR/state.json\n"
            "  --ckpt-mem DIR [--mem-every k]   memory-tier snapshot (e.g. under /dev/shm) every k steps\n"
            "  --mem-copies N   1 (default) to 4: the snapshot of a layer held on fewer nodes is also sent\n"
            "                 to the next nodes' memory tiers, so that every layer survives the loss of any\n"
            "                 N-1 nodes\n"
            "  --ckpt-cloud DIR  also write each --ckpt-every checkpoint to DIR (the cloud tier)\n"
            "  --resume DIR   continue from the checkpoint in DIR (any plan with the same model, batch and\n"
            "                 TP degree); --steps stays the total\n"
            "  --init-from D  Hugging Face weights (docs/weights.md); --model: D/config.json\n"
            "  --recover FILE restore from a recovery assignment of autohet run (docs/recovery.md); writes\n"
            "                 FILE.result.json (bytes and seconds per tier)\n"
            "  --schedule     pipeline schedule of a step (docs/schedules.md): 1f1b (default), gpipe, or\n"
            "                 interleaved 1F1B, where every stage holds V layer chunks (virtual stages)\n"
            "  --virtual-stages V  chunks per stage with --schedule interleaved (default 2)\n"
            "  --overlap-dp   start each gradient bucket's all-reduce (non-blocking) inside the last backward\n"
            "                 as soon as its layers are done, completed before the step's reduction\n"
            "                 (default: blocking after the flush; docs/schedules.md)\n"
            "  --device       compute backend: cpu (default; $AUTOHET_BACKEND when given) or cuda (one rank\n"
            "                 on one GPU, docs/cuda.md); cuda where none is visible exits 2 before any work\n"
            "  --precision    matmuls of the linear layers: fp32 (default, the reference) or bf16 (CPU:\n"
            "                 bf16 operands, fp32 accumulation, fp32 master weights and optimizer; needs\n"
            "                 AVX512_BF16 and oneDNN, else one line and exit 2; docs/engine.md)\n\n"
            "At the end one summary line: the steps run, tokens, wall time (checkpoints included), mean\n"
            "tokens/s (tokens / summed step times), mean MFU (of the nominal peak, weighted by step time), the\n"
            "final train loss and the last validation loss.\n\n"
            "exit status: 0 success, 2 bad input (one line on stderr), 1 runtime failure\n");
}

/* The plan a run without --plan executes: one replica, one stage, TP 1. */
static void trivial_plan(ah_plan *p, const ah_model_config *m, int gb, int mb, int seq) {
    memset(p, 0, sizeof *p);
    p->version = AH_PLAN_FORMAT_VERSION;
    snprintf(p->strategy, sizeof p->strategy, "single");
    p->model = *m;
    p->train.seq = seq;
    p->micro_batch = mb;
    p->global_batch = gb;
    p->cluster.n_nodes = 1;
    p->cluster.nodes = calloc(1, sizeof(ah_node));
    snprintf(p->cluster.nodes[0].name, sizeof p->cluster.nodes[0].name, "cpu-0");
    p->cluster.nodes[0].dev = *ah_device_find(ah_device_catalog_builtin(), "cpu");
    p->cluster.nodes[0].gpus = 1;
    p->cluster.nodes[0].nic_gbit = p->cluster.nodes[0].dev.nic_gbit;
    p->n_replicas = 1;
    p->replicas = calloc(1, sizeof(ah_replica));
    p->replicas[0].n_stages = 1;
    p->replicas[0].micro_batches = gb / mb;
    p->replicas[0].stages = calloc(1, sizeof(ah_stage));
    p->replicas[0].stages[0].layer_last = ah_model_num_layers(m);
    p->replicas[0].stages[0].tp = 1;
}

/* Under autohet run, SIGTERM to a rank is a grace-period notice for its node
 * (as a cluster manager or a spot agent sends before it reclaims a machine):
 * the rank keeps training and asks the controller to move the node out. */
static volatile sig_atomic_t term_requested;
static void on_term(int sig) {
    (void)sig;
    term_requested = 1;
}

static void forward_grace_notice(const ah_executor *x) {
    static int done;
    const char *pids = getenv("AUTOHET_PID_DIR");
    if (done || !term_requested || !pids)
        return;
    done = 1;
    char run[2048], err[512];
    snprintf(run, sizeof run, "%s", pids);
    char *slash = strrchr(run, '/');
    if (slash)
        *slash = 0;
    const char *g = getenv("AUTOHET_GRACE_S");
    double grace = g ? atof(g) : 30;
    if (ah_run_request_preempt(run, ah_executor_node_name(x), grace > 0 ? grace : 30, "signal", err,
                               sizeof err) != 0)
        fprintf(stderr, "autohet train: SIGTERM: %s\n", err);
    else
        fprintf(stderr,
                "autohet train: SIGTERM on node %s: asked autohet run to move it out (%.0f s grace)\n",
                ah_executor_node_name(x), grace > 0 ? grace : 30);
}

/* Under autohet run: tell the controller which process is which rank on which
 * node ($AUTOHET_PID_DIR/rank-R: "PID NODE"), so that it can preempt a node. */
static void write_pid_line(int rank, const char *node, double peak) {
    const char *dir = getenv("AUTOHET_PID_DIR");
    if (!dir)
        return;
    char path[2048], line[160], err[256];
    snprintf(path, sizeof path, "%s/rank-%d", dir, rank);
    /* "PID NODE [SGEMM_PEAK]": autohet run hands the peak to its later generations */
    int len = peak > 0 ? snprintf(line, sizeof line, "%ld %s %.6g\n", (long)getpid(), node, peak)
                       : snprintf(line, sizeof line, "%ld %s\n", (long)getpid(), node);
    if (ah_write_file_atomic(path, line, (size_t)len, err, sizeof err) != 0)
        fprintf(stderr, "autohet train: %s\n", err);
    ah_run_heartbeat_start(rank); /* (once) */
}

/* before every step: the kill test hook (a rank dies mid-run: the job must
 * end, not hang), and a pending SIGTERM forwarded to autohet run */
static void before_step(void *ctx, ah_executor *x, int step) {
    (void)ctx;
    const char *kill_rank = getenv("AUTOHET_TEST_KILL_RANK"), *kill_step = getenv("AUTOHET_TEST_KILL_STEP");
    if (kill_rank && atoi(kill_rank) == ah_executor_rank(x) && kill_step && atoi(kill_step) == step)
        raise(SIGKILL);
    forward_grace_notice(x);
}

/* A recovery server (a world rank beyond the plan's slots): names its node
 * in the pid file for autohet run, serves, and exits when released. */
static int serve_only(const char *assignment, int rank) {
    char err[512], node[64] = "?";
    ah_recovery_doc d;
    if (ah_recovery_doc_read(assignment, &d, err, sizeof err) == 0) {
        for (int i = 0; i < d.n_ranks; i++)
            if (d.ranks[i].rank == rank && d.ranks[i].node[0])
                snprintf(node, sizeof node, "%s", d.ranks[i].node);
        ah_recovery_doc_free(&d);
    }
    write_pid_line(rank, node, 0);
    if (ah_ckpt_serve_recovery(assignment, err, sizeof err) != 0) {
        fprintf(stderr, "autohet train: recovery server rank %d: %s\n", rank, err);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Finalize();
    return 0;
}

static int fail_all(int rank, const char *msg) { return cli_mpi_fail_all("train", rank, msg); }

/* the flags of autohet train */
typedef struct {
    const char *model, *data, *val_data, *plan, *log, *trace, *ckpt_dir, *resume, *mem_dir, *cloud_dir, *recover;
    const char *device; /* --device, NULL when not given */
    const char *init_from; /* --init-from HF_DIR */
    char init_config[2048]; /* HF_DIR/config.json: --model when not given */
    int bf16;           /* --precision bf16 */
    ah_matmul_precision precision; /* --precision */
    int ckpt_every, mem_every, mem_copies, steps, seed, gb, mb, seq, warmup, eval_every, log_every;
    int virtual_stages;
    int overlap_dp;          /* --overlap-dp */
    int eval_batches;        /* --eval-batches: validation batches averaged per evaluation */
    const char *devices;     /* --devices: catalog overrides for the nominal peak (the MFU) */
    const char *emulate;     /* --emulate: "analytic" or a profile file */
    ah_device_catalog catalog; /* the built-in catalog with --devices: the plan's GPU types, the MFU's peaks */
    ah_token_type data_type; /* --data-dtype: raw token files' type */
    ah_schedule schedule;
    double lr;
} train_args;

/* 0, or -1 with msg */
static int parse_args(int argc, char **argv, train_args *a, char *msg, size_t n) {
    static cli_options opts;
    cli_long_options(
        "model=m data=d val-data=D plan=p steps=s seed=S global-batch=G micro-batch=B seq=L lr=r warmup=w "
        "eval-every=e log-every=k log=o trace=t ckpt-dir=C ckpt-every=K resume=R ckpt-mem=M "
        "mem-every=E mem-copies=Q ckpt-cloud=U recover=V schedule=c virtual-stages=v device=X init-from=I "
        "precision=P data-dtype=T eval-batches=b devices=F emulate=Y overlap-dp!O",
        &opts);
    memset(a, 0, sizeof *a);
    a->mem_every = 1, a->mem_copies = 1, a->steps = 50, a->seed = 1, a->warmup = 5, a->eval_every = 10;
    a->log_every = 1, a->lr = 3e-3, a->eval_batches = 1;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "", opts.opts, NULL)) != -1) {
        int *iv = NULL, min = 1;
        switch (c) {
        case 'm': a->model = optarg; break;
        case 'd': a->data = optarg; break;
        case 'D': a->val_data = optarg; break;
        case 'p': a->plan = optarg; break;
        case 'o': a->log = optarg; break;
        case 't': a->trace = optarg; break;
        case 'C': a->ckpt_dir = optarg; break;
        case 'R': a->resume = optarg; break;
        case 'M': a->mem_dir = optarg; break;
        case 'U': a->cloud_dir = optarg; break;
        case 'V': a->recover = optarg; break;
        case 'I': a->init_from = optarg; break;
        case 'F': a->devices = optarg; break;
        case 'Y': a->emulate = optarg; break;
        case 'O': a->overlap_dp = 1; break;
        case 'T':
            if ((a->data_type = ah_token_type_parse(optarg)) == AH_TOKENS_UNSTATED) {
                snprintf(msg, n, "--data-dtype '%s': expected uint16 or uint32", optarg);
                return -1;
            }
            break;
        case 'c':
            if (ah_schedule_parse(optarg, &a->schedule) != 0) {
                snprintf(msg, n, "--schedule '%s': expected 1f1b, gpipe or interleaved", optarg);
                return -1;
            }
            break;
        case 'X':
            if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda")) {
                snprintf(msg, n, "--device '%s': expected cpu or cuda", optarg);
                return -1;
            }
            char why[320];
            if (ah_backend_check(optarg, why, sizeof why) != 0) {
                snprintf(msg, n, "--device %s: %s", optarg, why);
                return -1;
            }
            a->device = optarg;
            setenv("AUTOHET_BACKEND", optarg, 1); /* the engine's backend (ah__backend_default) */
            break;
        case 'P': {
            char why[200];
            if (ah_matmul_precision_parse(optarg, &a->precision, why, sizeof why) != 0) {
                snprintf(msg, n, "--precision %s: %s", optarg, why);
                return -1;
            }
            a->bf16 = a->precision == AH_MATMUL_BF16;
            break;
        }
        case 'v': iv = &a->virtual_stages, min = 2; break;
        case 'b': iv = &a->eval_batches; break;
        case 'E': iv = &a->mem_every; break;
        case 'Q': iv = &a->mem_copies; break;
        case 'K': iv = &a->ckpt_every; break;
        case 's': iv = &a->steps, min = 0; break;
        case 'S': iv = &a->seed, min = 0; break;
        case 'G': iv = &a->gb; break;
        case 'B': iv = &a->mb; break;
        case 'L': iv = &a->seq; break;
        case 'w': iv = &a->warmup, min = 0; break;
        case 'e': iv = &a->eval_every, min = 0; break;
        case 'k': iv = &a->log_every; break;
        case 'r':
            if (cli_parse_double(optarg, &a->lr) != 0 || !(a->lr > 0)) {
                snprintf(msg, n, "--lr '%s': expected a positive number", optarg);
                return -1;
            }
            break;
        default: return cli_unknown_option("train", argv[optind - 1], msg, n);
        }
        if (iv && cli_int_value(argv[optind - 2], optarg, min, iv, msg, n) != 0)
            return -1;
    }
    if (optind < argc) {
        snprintf(msg, n, "unexpected argument '%s' (see autohet train --help)", argv[optind]);
        return -1;
    }
    if (!a->model && a->init_from) { /* the model of the weights */
        snprintf(a->init_config, sizeof a->init_config, "%s/config.json", a->init_from);
        a->model = a->init_config;
    }
    return 0;
}

/* --emulate: how many compute ops of all ranks computed longer than their modelled time (those ran at the
 * machine's speed, not the emulated device's), and how late the others ended on average (their sleep's
 * wake-up: time the emulated device would not lose, which a comparison with the model should know of) */
static void report_overruns(const ah_executor *x, MPI_Comm comm, int rank) {
    ah_emulation_stats st;
    ah_executor_emulation_stats(x, &st);
    long mine[2] = {st.ops, st.overruns}, all[2] = {0, 0};
    double worst_all = 0, late_all = 0;
    MPI_Reduce(mine, all, 2, MPI_LONG, MPI_SUM, 0, comm);
    MPI_Reduce(&st.worst_s, &worst_all, 1, MPI_DOUBLE, MPI_MAX, 0, comm);
    MPI_Reduce(&st.late_s, &late_all, 1, MPI_DOUBLE, MPI_SUM, 0, comm);
    long on_time = all[0] - all[1];
    if (rank == 0)
        printf("emulated devices: %ld compute ops, %ld computed longer than their modelled time%s (worst by %.3f "
               "ms); the others ended %.1f us late on average (the sleep's wake-up)\n",
               all[0], all[1], all[1] ? ": the machine is too slow for the emulated devices" : "", worst_all * 1e3,
               on_time > 0 ? late_all / (double)on_time * 1e6 : 0.0);
}

/* --recover: the assignment is read and checked before any work (a bad one is
 * bad input); 0, or -1 with msg */
static int check_recover(const char *path, char *msg, size_t n) {
    ah_recovery_doc d;
    char err[1024];
    if (!path)
        return 0;
    if (ah_recovery_doc_read(path, &d, err, sizeof err) != 0) {
        snprintf(msg, n, "--recover: %s", err);
        return -1;
    }
    ah_recovery_doc_free(&d);
    return 0;
}

/* the checks of flags that go together, and of outputs before any work (an
 * unwritable one is bad input, not a failure at the first checkpoint or the
 * end of the run: rank 0 checks, all agree); 0, or -1 with msg */
static int check_args(const train_args *a, int rank, char *msg, size_t n) {
    if (a->bf16 && a->device && !strcmp(a->device, "cuda")) {
        snprintf(msg, n, "--precision bf16: the CPU backend's option; --device cuda computes in fp32");
        return -1;
    }
    const char *why = !a->model && !a->plan ? "--model is required without --plan (see autohet train --help)"
                      : !a->data ? "--data is required: a token file, a directory of shards, or text"
                      : (a->ckpt_dir != NULL) != (a->ckpt_every > 0) ? "--ckpt-dir and --ckpt-every go together"
                      : a->cloud_dir && !a->ckpt_dir
                          ? "--ckpt-cloud is written at the --ckpt-dir/--ckpt-every steps: give those too"
                      : a->resume && a->recover ? "--resume and --recover exclude each other"
                      : a->mem_copies < 1 || a->mem_copies > 4 ? "--mem-copies: expected 1 to 4"
                      : a->init_from && (a->resume || a->recover)
                          ? "--init-from starts a run: it excludes --resume and --recover"
                      : a->steps == 0 && !(a->init_from && a->ckpt_dir)
                          ? "--steps 0 writes the --init-from weights as the checkpoint of step 0: give "
                            "--init-from and --ckpt-dir"
                      : a->virtual_stages && a->schedule != AH_SCHED_INTERLEAVED
                          ? "--virtual-stages goes with --schedule interleaved"
                          : NULL;
    if (why) {
        snprintf(msg, n, "%s", why);
        return -1;
    }
    struct stat sb;
    if (a->init_from && (stat(a->init_from, &sb) != 0 || !S_ISDIR(sb.st_mode))) {
        snprintf(msg, n, "--init-from %s: not a directory (a Hugging Face model directory)", a->init_from);
        return -1;
    }
    int ok = 1;
    if (rank == 0)
        ok = !(check_recover(a->recover, msg, n) || cli_check_output("--log", a->log, msg, n) ||
               cli_check_output("--trace", a->trace, msg, n) ||
               cli_check_output_dir("--ckpt-dir", a->ckpt_dir, 1, msg, n) ||
               cli_check_output_dir("--ckpt-mem", a->mem_dir, 1, msg, n) ||
               cli_check_output_dir("--ckpt-cloud", a->cloud_dir, 1, msg, n));
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    return ok ? 0 : -1;
}

/* the model, the plan (or the trivial one) and the data; 0, or -1 with msg */
static int load_inputs(train_args *a, int world, ah_model_config *cfg, ah_plan *plan, ah_dataset *data,
                       char *msg, size_t n) {
    if (a->model && ah_model_resolve(a->model, cfg, msg, n) != 0)
        return -1;
    char why[512];
    a->catalog = *ah_device_catalog_builtin();
    if (a->devices && ah_device_load_overrides(&a->catalog, a->devices, why, sizeof why) != 0) {
        snprintf(msg, n, "--devices %s", why);
        return -1;
    }
    if (a->plan) {
        if (ah_plan_read_json(a->plan, &a->catalog, plan, msg, n) != 0)
            return -1;
        if (!a->model) /* the plan's own model (a preset, a config.json, or its full description) */
            *cfg = plan->model;
        if ((a->gb && a->gb != plan->global_batch) || (a->mb && a->mb != plan->micro_batch) ||
            (a->seq && a->seq != plan->train.seq))
            snprintf(msg, n,
                     "--global-batch/--micro-batch/--seq disagree with %s (global batch %d, micro-batch %d, "
                     "seq %d)",
                     a->plan, plan->global_batch, plan->micro_batch, plan->train.seq);
        else if (plan->model.n_layers != cfg->n_layers || plan->model.hidden != cfg->hidden)
            snprintf(msg, n, "%s was made for %s (%d blocks, hidden %d), --model %s has %d blocks, hidden %d",
                     a->plan, plan->model.name, plan->model.n_layers, plan->model.hidden, cfg->name,
                     cfg->n_layers, cfg->hidden);
        else
            msg[0] = 0;
        if (msg[0]) {
            ah_plan_free(plan);
            return -1;
        }
    } else {
        a->gb = a->gb ? a->gb : 8;
        a->mb = a->mb ? a->mb : 2;
        a->seq = a->seq ? a->seq : 128;
        if (a->gb % a->mb) {
            snprintf(msg, n, "--global-batch %d is not divisible by --micro-batch %d", a->gb, a->mb);
            return -1;
        }
        if (world != 1) {
            snprintf(msg, n, "without --plan, run on one rank (give a plan to use several)");
            return -1;
        }
        if (ah_model_check_seq(cfg, a->seq, "--seq", msg, n) != 0)
            return -1;
        trivial_plan(plan, cfg, a->gb, a->mb, a->seq);
    }
    if (cli_load_data(a->data, a->val_data, a->data_type, cfg, plan->train.seq, data, msg, n) != 0) {
        ah_plan_free(plan);
        return -1;
    }
    plan->model.vocab = cfg->vocab; /* the vocabulary the engine trains */
    return 0;
}

/* The job's nominal peak FLOP/s, the MFU's denominator: every GPU slot of the
 * plan at its device's catalog peak (a->catalog: --devices overrides the
 * built-in one), bf16 tensor peak under --precision bf16, else the fp32 peak
 * (the bf16 figure where the catalog has none, as for the CPU devices). 0 (no
 * MFU) for --device cuda without a plan, whose GPU the trivial plan does not
 * name. */
static double job_peak_flops(const train_args *a, const ah_plan *plan) {
    double peak = 0;
    if (!a->plan && a->device && !strcmp(a->device, "cuda"))
        return 0;
    for (int r = 0; r < plan->n_replicas; r++)
        for (int s = 0; s < plan->replicas[r].n_stages; s++) {
            const ah_stage *st = &plan->replicas[r].stages[s];
            const ah_device *cd = &plan->cluster.nodes[st->node].dev;
            const ah_device *d = ah_device_find(&a->catalog, cd->name);
            d = d ? d : cd;
            double tf = a->bf16 || d->fp32_tflops <= 0 ? d->peak_tflops : d->fp32_tflops;
            peak += st->tp * tf * 1e12;
        }
    return peak;
}

static void trainer_config(const train_args *a, const ah_model_config *cfg, const ah_plan *plan,
                           const ah_optim_config *oc, ah_trainer_config *tc) {
    ah_trainer_config_default(tc);
    tc->steps = a->steps, tc->eval_every = a->eval_every, tc->log_every = a->log_every;
    tc->eval_batches = a->eval_batches;
    tc->tokens_per_step = (long long)plan->global_batch * plan->train.seq;
    tc->ckpt_dir = a->ckpt_dir, tc->mem_dir = a->mem_dir, tc->cloud_dir = a->cloud_dir;
    tc->mem_copies = a->mem_copies;
    tc->ckpt_every = a->ckpt_every, tc->mem_every = a->mem_every;
    tc->resume_dir = a->resume, tc->recover_path = a->recover, tc->trace_path = a->trace;
    tc->cfg = cfg, tc->plan = plan, tc->seed = a->seed, tc->oc = oc;
    tc->before_step = before_step;
}

/* "3 ranks (2 plan slots + 1 recovery server)" or "2 ranks" */
static void describe_ranks(int world, int slots, char *buf, size_t n) {
    int servers = world > slots ? world - slots : 0;
    int len = snprintf(buf, n, "%d rank%s", world, world == 1 ? "" : "s");
    if (servers && len > 0 && (size_t)len < n)
        snprintf(buf + len, n - (size_t)len, " (%d plan slot%s + %d recovery server%s)", slots,
                 slots == 1 ? "" : "s", servers, servers == 1 ? "" : "s");
}

/* test hook: dump the final parameters (full layout) of replica
 * $AUTOHET_DUMP_REPLICA (default 0) */
static void dump_params(ah_executor *x, int rank) {
    const char *dump = getenv("AUTOHET_DUMP_PARAMS"), *rep = getenv("AUTOHET_DUMP_REPLICA");
    if (!dump)
        return;
    float *all = NULL;
    size_t n = 0;
    if (ah_executor_gather_params(x, rep ? atoi(rep) : 0, &all, &n) != 0) {
        if (rank == 0)
            fprintf(stderr, "autohet train: AUTOHET_DUMP_REPLICA=%s: the plan has no such replica\n", rep);
        return;
    }
    if (rank == 0) {
        char err[600];
        if (ah_write_file_atomic(dump, all, n * sizeof(float), err, sizeof err) != 0)
            fprintf(stderr, "autohet train: AUTOHET_DUMP_PARAMS: %s\n", err);
        free(all);
    }
}

/* runs the trainer on this rank's executor; the exit status */
static int train(ah_executor *x, MPI_Comm comm, ah_trainer_config *tc, FILE *log) {
    int rank = ah_executor_rank(x);
    tc->progress = rank == 0 ? stdout : NULL;
    tc->log = log;
    ah_trainer_summary sum;
    char err[1024];
    int rc = ah_trainer_run(x, tc, &sum, err, sizeof err);
    if (rc != 0) {
        if (sum.err_on_every_rank)
            fprintf(stderr, "autohet train: rank %d: %s\n", rank, err);
        else if (rank == 0)
            fprintf(stderr, "autohet train: %s\n", err);
        fflush(stderr);
        if (!sum.err_on_every_rank)
            MPI_Barrier(comm); /* no rank exits (and gets the job killed) before the message is out */
        return rc;
    }
    dump_params(x, rank);
    if (rank == 0) {
        char line[512];
        ah_trainer_format_summary(&sum, line, sizeof line);
        printf("autohet train: %s\n", line);
    }
    return 0;
}

/* --init-from (collective): the HF weights into every rank's layers; with
 * --steps 0 they become the checkpoint of step 0. 0, or -1 with msg */
static int init_from(const train_args *a, ah_executor *x, int rank, char *msg, size_t n) {
    double t0 = MPI_Wtime();
    if (ah_executor_init_from_hf(x, a->init_from, msg, n) != 0 ||
        (a->steps == 0 &&
         ah_executor_save(x, a->ckpt_dir, 0, msg, n) != 0))
        return -1;
    if (rank == 0)
        printf("autohet train: weights from %s (%.3f s)%s%s\n", a->init_from, MPI_Wtime() - t0,
               a->steps == 0 ? "; checkpoint of step 0 -> " : "", a->steps == 0 ? a->ckpt_dir : "");
    return 0;
}

int cmd_train(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        train_usage(stdout);
        return 0;
    }
    ah_blas_select_kernels(argc, argv); /* may re-execute this program once, with OPENBLAS_CORETYPE set */
    train_args a;
    char msg[4400];
    int bad = parse_args(argc, argv, &a, msg, sizeof msg) != 0;
    if (getenv("AUTOHET_PID_DIR")) {
        ah_run_watch_rank(); /* returns in the rank; its watcher records how it ends */
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* under autohet run: die with the launcher, never train orphaned */
        signal(SIGTERM, on_term);
    }
    int thread_level;
    /* funneled: only the main thread calls MPI (OpenMP and the checkpoint writer do not) */
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &thread_level);
    double t_init = ah_wall_clock_s();
    int rank, world, sharing;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    int threads = ah_blas_share_cores(MPI_COMM_WORLD, &sharing); /* before any OpenMP region or BLAS call */
    if (bad || check_args(&a, rank, msg, sizeof msg) != 0)
        return fail_all(rank, msg);
    if (a.device && !strcmp(a.device, "cuda") && world > 1) /* MPI cannot move device buffers here */
        return fail_all(rank, "--device cuda runs on one rank until the NCCL transport lands (docs/cuda.md)");
    ah_model_config cfg;
    ah_plan plan;
    ah_dataset data;
    if (load_inputs(&a, world, &cfg, &plan, &data, msg, sizeof msg) != 0)
        return fail_all(rank, msg);
    if (ah_hosts_check_placement(MPI_COMM_WORLD, &plan, msg, sizeof msg) != 0) { /* a plan naming hosts */
        ah_dataset_free(&data);
        ah_plan_free(&plan);
        return fail_all(rank, msg);
    }
    ah_optim_config oc;
    ah_trainer_lr_schedule(a.lr, a.warmup, a.steps, &oc);
    ah_trainer_config tc;
    trainer_config(&a, &cfg, &plan, &oc, &tc);
    tc.t_init = t_init;
    tc.peak_flops = job_peak_flops(&a, &plan);
    /* ranks beyond the plan's slots are recovery servers of surviving nodes the plan does not use */
    MPI_Comm comm = MPI_COMM_WORLD;
    int slots = ah_plan_slots(&plan);
    if (a.recover && world > slots) {
        MPI_Comm_split(MPI_COMM_WORLD, rank >= slots, rank, &comm);
        if (rank >= slots) {
            ah_dataset_free(&data);
            ah_plan_free(&plan);
            return serve_only(a.recover, rank);
        }
    }
    /* a later generation of autohet run is told the peak its first generation measured on this
     * machine (it only scales the MFU): a relaunch after a preemption does not benchmark again */
    const char *known_peak = getenv("AUTOHET_SGEMM_PEAK");
    double peak = known_peak && strtod(known_peak, NULL) > 0 ? strtod(known_peak, NULL) : ah_measure_sgemm_peak();
    ah_executor_config xc;
    ah_executor_config_default(&xc);
    xc.comm = comm, xc.plan = &plan, xc.model = &cfg, xc.data = &data, xc.optim = &oc;
    xc.seed = (uint64_t)a.seed, xc.init_params = ah_trainer_initialises_params(&tc);
    xc.peak_flops_per_rank = peak, xc.schedule = a.schedule, xc.virtual_stages = a.virtual_stages;
    xc.overlap_dp = a.overlap_dp;
    xc.precision = a.precision;
    ah_profile *emu = NULL;
    if (a.emulate) {
        char why[400];
        emu = !strcmp(a.emulate, "analytic") ? ah_profile_analytic() : ah_profile_load(a.emulate, why, sizeof why);
        if (!emu) {
            snprintf(msg, sizeof msg, "--emulate %s: %s", a.emulate, why);
            ah_dataset_free(&data);
            ah_plan_free(&plan);
            return fail_all(rank, msg);
        }
        xc.emulate = emu;
    }
    ah_executor *x = ah_executor_create(&xc, msg, sizeof msg);
    FILE *log = NULL;
    int log_ok = 1;
    /* a resumed run continues its log (the trainer cuts the steps it trains again) */
    if (x && rank == 0 && a.log && !(log = fopen(a.log, a.resume ? "a+" : "w"))) {
        snprintf(msg, sizeof msg, "--log %s: cannot open for writing (%s)", a.log, strerror(errno));
        log_ok = 0;
    }
    if (x)
        MPI_Bcast(&log_ok, 1, MPI_INT, 0, comm);
    int rc = 0, set_up = x && log_ok;
    if (set_up) {
        char ranks[128], tp_text[48], kernels[200];
        ah_blas_kernel_text(kernels, sizeof kernels);
        if (a.bf16) /* the linear layers' products; attention and the rest stay on the BLAS above */
            snprintf(kernels + strlen(kernels), sizeof kernels - strlen(kernels), ", bf16 matmuls (oneDNN)");
        if (threads > 0 && sharing > 1)
            snprintf(kernels + strlen(kernels), sizeof kernels - strlen(kernels),
                     "; %d thread%s per rank (%d ranks share rank 0's cores; OMP_NUM_THREADS overrides)", threads,
                     threads == 1 ? "" : "s", sharing);
        describe_ranks(world, slots, ranks, sizeof ranks);
        ah_plan_tp_text(&plan, tp_text, sizeof tp_text);
        if (rank == 0)
            printf("autohet train: %s (%d blocks, hidden %d, %s), %s, %d replica%s, TP %s, global batch %d x "
                   "seq %d, micro-batch %d, vocabulary %d; data %s (%zu train %s, %zu validation%s%s; unigram "
                   "entropy %.3f nats); nominal peak %.4g TFLOP/s; sgemm peak %.1f GFLOP/s/rank (probed), %s\n",
                   cfg.name, cfg.n_layers, cfg.hidden, ah_arch_name(cfg.arch), ranks, plan.n_replicas,
                   plan.n_replicas == 1 ? "" : "s", tp_text, plan.global_batch, plan.train.seq,
                   plan.micro_batch, cfg.vocab, a.data, data.n_train,
                   data.kind == AH_DATA_TOKENS ? "tokens" : "bytes", data.n - data.n_train,
                   a.val_data ? " from " : "", a.val_data ? a.val_data : "", ah_dataset_unigram_entropy(&data),
                   tc.peak_flops / 1e12, peak / 1e9, kernels);
        /* the engine's tensors are fp32 on either backend: a plan costed at half precision halves its sends */
        if (rank == 0 && a.plan && plan.train.precision != AH_PRECISION_FP32)
            printf("note: %s is costed at %s (2-byte activations and gradients); this engine sends fp32 ones "
                   "(--precision is its matmuls' operands): autohet simulate %s --precision fp32 prices what it "
                   "sends\n",
                   a.plan, ah_precision_name(plan.train.precision), a.plan);
        write_pid_line(rank, ah_executor_node_name(x), peak);
        if (a.init_from && init_from(&a, x, rank, msg, sizeof msg) != 0)
            set_up = 0; /* bad input: every rank exits 2 below */
        else
            rc = train(x, comm, &tc, log);
        if (emu && rc == 0)
            report_overruns(x, comm, rank);
    }
    /* a full disk: never a silent short log */
    if (log && ah_close_stream(log, a.log, msg, sizeof msg) != 0) {
        fprintf(stderr, "autohet train: --log %s\n", msg);
        rc = rc ? rc : 1;
    }
    ah_executor_free(x);
    ah_profile_free(emu);
    ah_dataset_free(&data);
    ah_plan_free(&plan);
    if (comm != MPI_COMM_WORLD && (!set_up || rc == AH_EXIT_BAD_INPUT))
        MPI_Comm_free(&comm);
    if (!set_up) /* every rank ends with exit 2, no MPI_Abort banner */
        return fail_all(rank, msg);
    if (rc == AH_EXIT_BAD_INPUT) { /* reported by train() */
        MPI_Finalize();
        return rc;
    }
    if (rank == 0 && rc == 0) /* release the recovery servers */
        ah_ckpt_release_servers(slots, world);
    if (comm != MPI_COMM_WORLD)
        MPI_Comm_free(&comm);
    MPI_Finalize();
    return rc ? 1 : 0;
}
