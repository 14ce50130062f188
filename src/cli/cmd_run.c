/* autohet run: elastic training under preemption (docs/recovery.md);
 * autohet preempt: preempt a node of a running `autohet run`. */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "autohet/plan.h"
#include "cli/cli.h"
#include "cli/cli_data.h"
#include "autohet/elastic.h"

static void run_usage(FILE *f) {
    fprintf(
        f,
        "usage: autohet run (--plan PLAN.json | --cluster INVENTORY [--global-batch G --micro-batch B --seq "
        "L])\n"
        "                   [--tp T] [--replan-tp T|any] --model NAME|config.json --data PATH --steps N [--seed S]\n"
        "                   [--lr LR] [--warmup N] [--eval-every K]\n"
        "                   [--preempt NODE@STEP[,NODE@STEP...]] [--spot-trace FILE --time-scale X]\n"
        "                   [--notice SECONDS] [--recovery layer-bitmap|full-reload] [--cloud-bandwidth "
        "MB/s]\n"
        "                   [--ckpt-every K] [--mem-every k] [--run-dir DIR] [--log FILE] [--report FILE]\n"
        "                   [--trace FILE] [--svg FILE]\n"
        "                   [--launcher CMD] [--hostfile FILE] [--heartbeat-timeout SECONDS]\n"
        "                   [--max-restarts N] [--mem-copies 1-4] [--val-data PATH] [--data-dtype T]\n"
        "                   [--eval-batches N] [--devices FILE] [--init-from HF_DIR]\n"
        "       autohet run --resume RUN_DIR\n\n"
        "Trains like `autohet train` as an MPI job (mpirun on this machine, one virtual node per inventory\n"
        "node: its ranks, its memory tier under /dev/shm, its disk tier under the run directory) and "
        "survives\n"
        "preemptions: the node's ranks are killed (SIGKILL) and its memory and disk tiers wiped; the job is\n"
        "stopped, the planner replans for the surviving nodes, every layer shard of the new plan is fetched\n"
        "from the nearest copy (own memory > own disk > peer memory > peer disk over MPI RMA > cloud) at\n"
        "the newest step every layer has, and training continues. The final parameters equal those of an\n"
        "uninterrupted run.\n\n"
        "  --plan          first plan (its cluster is the inventory, its TP/micro-batch/batch/seq and the\n"
        "                  precision it was costed at are kept; replans computed ahead in it, `autohet plan\n"
        "                  --replans K`, are looked up on a loss)\n"
        "  --cluster       inventory (JSON or shorthand like 4x1xcpu); the planner makes the first plan,\n"
        "                  costed at fp32 as the engine trains; batch shape as autohet train (default\n"
        "                  global batch 8, micro-batch 2, seq 128)\n"
        "  --tp            TP degree of the first plan when planning (default 1)\n"
        "  --replan-tp     TP degree of the plans made after a change of the node set (default any: the\n"
        "                  planner chooses; shards of another degree are resharded on recovery)\n"
        "  --model, --data, --steps, --seed   as autohet train (default 50 steps, seed 1; --model\n"
        "                  optional with --plan: the plan's model; with --init-from: its config.json)\n"
        "  --preempt       preempt NODE once the job has logged step STEP (comma-separated list); across\n"
        "                  hosts NODE may name a host: its ranks are killed on it (through the launcher's\n"
        "                  remote agent) and it gets no rank again\n"
        "  --spot-trace    replay an availability trace (<time_ms>,<add|remove>,<node>; the k-th trace node\n"
        "                  is the k-th inventory node), --time-scale trace seconds per wall second\n"
        "  --notice        preemptions come with this notice: the job is stopped at its next committed\n"
        "                  step and the node pushes its memory-tier layers to a peer before it goes\n"
        "  --recovery      layer-bitmap (default) or full-reload (Varuna-like: every layer from the\n"
        "                  cloud tier at its last persisted step, progress since then lost)\n"
        "  --cloud-bandwidth  each node's bandwidth to the cloud tier in MB/s for reads (default 100;\n"
        "                  0 = unlimited); the cloud tier is RUN_DIR/cloud\n"
        "  --ckpt-every    disk + cloud checkpoint every K steps (default 5); --mem-every: memory tier\n"
        "                  every k steps (default 1; layer-bitmap only)\n"
        "  --run-dir       where plans, logs, disk and cloud tiers go (default: a new /tmp/autohet-run.*)\n"
        "  --log FILE      per-step JSON lines, as autohet train --log (all generations)\n"
        "  --report FILE   JSON: generations and recoveries[] (seconds, detection_s, replan_s, relaunch_s,\n"
        "                  restore_s, bytes_by_tier {memory, disk, peer, cloud}, steps_lost, resumed_step)\n"
        "  --trace FILE    the trace of the generation that trains the last steps (as autohet train\n"
        "                  --trace: every op of every rank from its second step on; autohet analyze FILE\n"
        "                  --diagnose --plan RUN/plan-G.json names what slowed it); each generation that\n"
        "                  trains to its end keeps its own as RUN/trace-G.json, named in --report (one\n"
        "                  lost to a fault leaves none)\n"
        "  --svg FILE      the run as a plot: its steps over wall time, one line per generation, each\n"
        "                  recovery a band with its seconds (written when the run ends, also on failure)\n"
        "  --lr, --warmup, --eval-every   as autohet train\n"
        "  --launcher CMD  MPI launcher (default mpirun); a site wrapper may bring its own words\n"
        "                  ('wrap --site x mpirun'); it gets mpirun's arguments\n"
        "  --hostfile FILE an Open MPI hostfile: inventory node i runs on its i-th host; every generation\n"
        "                  gets a rankfile (RUN/rankfile-G.txt), '--mca osc pt2pt' for peer recovery over\n"
        "                  TCP, and each host its own memory and disk tiers; without it, inside a Slurm\n"
        "                  allocation $SLURM_JOB_NODELIST, or the inventory's \"host\" fields\n"
        "                  (docs/multi-host.md)\n"
        "  --heartbeat-timeout  a rank whose heartbeat (a thread of it sends a UDP datagram to this\n"
        "                  controller every 0.5 s, over the training network) is unheard this long loses\n"
        "                  its node: a host that hangs, whose processes are stopped, or whose network is\n"
        "                  cut (default 20, docs/recovery.md \"Liveness\"; 0: no check); every node\n"
        "                  silent at once is waited for, not dropped. Over one such timeout, a rank\n"
        "                  that loses half its beats, or whose node's TCP connections stall (found\n"
        "                  by TCP_INFO, settled by a bandwidth probe), loses its node too (\"link\")\n"
        "  --resume DIR    continue the run of DIR whose controller ended (killed, its machine lost):\n"
        "                  its old jobs are ended, the run replanned for the live nodes and recovered\n"
        "                  from the tiers, with the options it was started with (RUN/run.json)\n"
        "  --mem-copies N  memory-tier copies of every layer on distinct nodes, 1 to 4 (default 2: the\n"
        "                  snapshot of a layer no data-parallel peer elsewhere holds also goes to the next\n"
        "                  node, so a node lost without notice loses at most the step in flight; 3: a\n"
        "                  second node lost during the recovery too; 1: no buddy copies)\n"
        "  --max-restarts N  a job that fails on the same nodes (a rank's error exit or crash; a rank\n"
        "                  killed by SIGKILL is a lost node instead) restarts from the last committed\n"
        "                  step; the same failure at the same step N+1 times in a row stops the run with\n"
        "                  the rank's own message (default 2; bad input, exit 2, stops at once)\n\n"
        "  --val-data, --data-dtype, --eval-batches, --devices: passed to every generation's autohet\n"
        "                  train (see autohet train --help)\n"
        "  --init-from HF_DIR  Hugging Face weights to start from (docs/weights.md): a generation that\n"
        "                  starts from no checkpoint loads them; later ones recover from the tiers\n\n"
        "exit status: 0 success, 2 bad input (one line on stderr), 1 runtime failure\n");
}

/* --data as autohet train loads it (the same loader and messages), before
 * anything is launched or created: the model, the plan's sequence length (or
 * --seq), the data. 0, or -1 with one line in msg. */
static int check_data(const ah_run_options *o, char *msg, size_t n) {
    ah_model_config cfg;
    if (o->model_arg && ah_model_resolve(o->model_arg, &cfg, msg, n) != 0)
        return -1;
    int seq = o->seq;
    if (o->plan_path) {
        ah_plan plan;
        if (ah_plan_read_json(o->plan_path, ah_device_catalog_builtin(), &plan, msg, n) != 0)
            return -1;
        seq = plan.train.seq;
        if (!o->model_arg)
            cfg = plan.model;
        ah_plan_free(&plan);
    }
    /* (the plan reader checked the plan's own model; --model may be another) */
    if (o->model_arg && ah_model_check_seq(&cfg, seq, o->plan_path ? "the plan's seq" : "--seq", msg, n) != 0)
        return -1;
    ah_dataset data;
    ah_token_type dtype = o->data_dtype ? ah_token_type_parse(o->data_dtype) : AH_TOKENS_UNSTATED;
    if (cli_load_data(o->data, o->val_data, dtype, &cfg, seq, &data, msg, n) != 0)
        return -1;
    ah_dataset_free(&data);
    struct stat sb;
    if (o->init_from && (stat(o->init_from, &sb) != 0 || !S_ISDIR(sb.st_mode))) {
        snprintf(msg, n, "--init-from %s: not a directory (a Hugging Face model directory)", o->init_from);
        return -1;
    }
    ah_device_catalog cat = *ah_device_catalog_builtin();
    char why[400];
    if (o->devices && ah_device_load_overrides(&cat, o->devices, why, sizeof why) != 0) {
        snprintf(msg, n, "--devices %s", why);
        return -1;
    }
    return 0;
}

/* Without --model, --init-from's config.json: the model of the weights, as autohet train takes it. */
static void model_of_weights(ah_run_options *o) {
    static char config[1100]; /* (the options point at it for the whole run) */
    if (!o->model_arg && o->init_from) {
        snprintf(config, sizeof config, "%.1000s/config.json", o->init_from);
        o->model_arg = config;
    }
}

/* every output can be written, before any work (0, or -1 with msg) */
static int check_outputs(const ah_run_options *o, char *msg, size_t n) {
    return cli_check_output("--log", o->log_path, msg, n) || cli_check_output("--report", o->report_path, msg, n) ||
                   cli_check_output("--trace", o->trace_path, msg, n) || cli_check_output("--svg", o->svg_path, msg, n) ||
                   cli_check_output_dir("--run-dir", o->run_dir, 0, msg, n)
               ? -1
               : 0;
}

int cmd_run(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        run_usage(stdout);
        return 0;
    }
    static cli_options opts;
    cli_long_options(
        "plan=p cluster=c model=m data=d steps=s seed=S preempt=P spot-trace=T time-scale=x "
        "notice=n recovery=R cloud-bandwidth=b log=o report=r run-dir=D global-batch=G "
        "micro-batch=B seq=L tp=t replan-tp=Y lr=l warmup=w eval-every=e ckpt-every=K mem-every=k launcher=X hostfile=H heartbeat-timeout=Z max-restarts=M resume=E mem-copies=Q "
        "val-data=v data-dtype=y devices=F init-from=I eval-batches=a trace=u svg=g",
        &opts);
    ah_run_options o = {0};
    o.steps = 50, o.seed = 1, o.tp = 1, o.warmup = 5, o.eval_every = 10, o.ckpt_every = 5, o.mem_every = 1;
    o.lr = 3e-3, o.cloud_mbs = 100, o.time_scale = 1, o.launcher = "mpirun", o.heartbeat_s = 20;
    o.max_restarts = 2, o.mem_copies = 2;
    o.mode = AH_RECOVERY_LAYER_BITMAP;
    char msg[512];
    const char *resume = NULL;
    int n_flags = 0;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "", opts.opts, NULL)) != -1) {
        int *iv = NULL, min = 1;
        n_flags++;
        double *dv = NULL, dmin = 0;
        switch (c) {
        case 'p': o.plan_path = optarg; break;
        case 'c': o.cluster_arg = optarg; break;
        case 'm': o.model_arg = optarg; break;
        case 'd': o.data = optarg; break;
        case 'P': o.preempt = optarg; break;
        case 'T': o.spot_trace = optarg; break;
        case 'o': o.log_path = optarg; break;
        case 'r': o.report_path = optarg; break;
        case 'u': o.trace_path = optarg; break;
        case 'g': o.svg_path = optarg; break;
        case 'D': o.run_dir = optarg; break;
        case 'X': o.launcher = optarg; break;
        case 'H': o.hostfile = optarg; break;
        case 'v': o.val_data = optarg; break;
        case 'F': o.devices = optarg; break;
        case 'I': o.init_from = optarg; break;
        case 'a': iv = &o.eval_batches; break;
        case 'y':
            if (ah_token_type_parse(optarg) == AH_TOKENS_UNSTATED)
                return cli_bad_input("run", "--data-dtype: expected uint16 or uint32");
            o.data_dtype = optarg;
            break;
        case 's': iv = &o.steps; break;
        case 'S': iv = &o.seed, min = 0; break;
        case 'G': iv = &o.global_batch; break;
        case 'B': iv = &o.micro_batch; break;
        case 'L': iv = &o.seq; break;
        case 't': iv = &o.tp; break;
        case 'w': iv = &o.warmup, min = 0; break;
        case 'e': iv = &o.eval_every, min = 0; break;
        case 'K': iv = &o.ckpt_every; break;
        case 'M': iv = &o.max_restarts, min = 0; break;
        case 'Q': iv = &o.mem_copies; break;
        case 'E': resume = optarg; break;
        case 'k': iv = &o.mem_every; break;
        case 'x': dv = &o.time_scale, dmin = 1e-9; break;
        case 'n': dv = &o.notice_s; break;
        case 'b': dv = &o.cloud_mbs; break;
        case 'Z': dv = &o.heartbeat_s; break;
        case 'l': dv = &o.lr, dmin = 1e-12; break;
        case 'Y':
            if (strcmp(optarg, "any") != 0 &&
                (cli_int_value("--replan-tp", optarg, 1, &o.replan_tp, msg, sizeof msg) != 0 ||
                 (o.replan_tp & (o.replan_tp - 1)) != 0 || o.replan_tp > AH_MAX_TP)) {
                snprintf(msg, sizeof msg, "--replan-tp '%s': expected any or a power of two <= %d", optarg,
                         AH_MAX_TP);
                return cli_bad_input("run", msg);
            }
            break;
        case 'R':
            if (!strcmp(optarg, "layer-bitmap"))
                o.mode = AH_RECOVERY_LAYER_BITMAP;
            else if (!strcmp(optarg, "full-reload"))
                o.mode = AH_RECOVERY_FULL_RELOAD;
            else
                return cli_bad_input("run", "--recovery: expected layer-bitmap or full-reload");
            break;
        default: return cli_unknown_option("run", argv[optind - 1], msg, sizeof msg), cli_bad_input("run", msg);
        }
        if (iv && cli_int_value(argv[optind - 2], optarg, min, iv, msg, sizeof msg) != 0)
            return cli_bad_input("run", msg);
        if (dv && (cli_parse_double(optarg, dv) != 0 || !(*dv >= dmin))) {
            snprintf(msg, sizeof msg, "%s '%s': expected a number >= %g", argv[optind - 2], optarg, dmin);
            return cli_bad_input("run", msg);
        }
    }
    if (optind < argc) {
        snprintf(msg, sizeof msg, "unexpected argument '%s' (see autohet run --help)", argv[optind]);
        return cli_bad_input("run", msg);
    }
    static char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return cli_bad_input("run", "cannot find the autohet executable (/proc/self/exe)");
    self[n] = 0;
    if (resume) {
        if (n_flags != 1) /* the run directory holds the plan, the options and the state */
            return cli_bad_input("run", "--resume RUN_DIR takes no other flags (the run directory holds them)");
        return ah_run_resume(resume, self);
    }
    if (!o.data)
        return cli_bad_input("run", "--data is required (see autohet run --help)");
    model_of_weights(&o);
    if (!o.model_arg && !o.plan_path)
        return cli_bad_input("run", "--model is required with --cluster (a --plan names its model; --init-from "
                                    "its config.json)");
    if (!o.plan_path == !o.cluster_arg)
        return cli_bad_input("run", "give exactly one of --plan and --cluster");
    if (o.cluster_arg) { /* the batch shape of autohet train without a plan */
        o.global_batch = o.global_batch ? o.global_batch : 8;
        o.micro_batch = o.micro_batch ? o.micro_batch : 2;
        o.seq = o.seq ? o.seq : 128;
        if (o.global_batch % o.micro_batch)
            return cli_bad_input("run", "--global-batch must be a multiple of --micro-batch");
    } else if (o.global_batch || o.micro_batch || o.seq) { /* beside a plan: must agree with it, as in train */
        ah_plan plan;
        if (ah_plan_read_json(o.plan_path, ah_device_catalog_builtin(), &plan, msg, sizeof msg) != 0)
            return cli_bad_input("run", msg);
        int agree = (!o.global_batch || o.global_batch == plan.global_batch) &&
                    (!o.micro_batch || o.micro_batch == plan.micro_batch) && (!o.seq || o.seq == plan.train.seq);
        snprintf(msg, sizeof msg,
                 "--global-batch/--micro-batch/--seq disagree with %s (global batch %d, micro-batch %d, seq %d)",
                 o.plan_path, plan.global_batch, plan.micro_batch, plan.train.seq);
        ah_plan_free(&plan);
        if (!agree)
            return cli_bad_input("run", msg);
        o.global_batch = o.micro_batch = o.seq = 0; /* the plan's own */
    }
    if (o.mem_copies < 1 || o.mem_copies > 4)
        return cli_bad_input("run", "--mem-copies: expected 1 to 4");
    if (o.spot_trace && o.preempt)
        return cli_bad_input("run", "--spot-trace and --preempt exclude each other");
    if (check_outputs(&o, msg, sizeof msg) != 0)
        return cli_bad_input("run", msg);
    if (check_data(&o, msg, sizeof msg) != 0)
        return cli_bad_input("run", msg);
    o.self_exe = self;
    return ah_run(&o);
}

static void preempt_usage(FILE *f) {
    fprintf(f, "usage: autohet preempt --run-dir DIR NODE|HOST [--notice SECONDS]\n\n"
               "Preempts NODE of the `autohet run` whose run directory is DIR (printed when it starts), or the\n"
               "node on HOST when the run spans hosts (--hostfile, Slurm, the inventory's hosts): its\n"
               "ranks are killed and its memory and disk tiers wiped, as when a spot instance is reclaimed.\n"
               "With --notice the job stops at its next committed step and the node first pushes its\n"
               "memory-tier layers to a peer.\n\n"
               "exit status: 0 request delivered, 2 bad input (no such node or host in the run's\n"
               "inventory, a node gone already, a run that has finished)\n");
}

int cmd_preempt(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        preempt_usage(stdout);
        return 0;
    }
    static const struct option opts[] = {
        {"run-dir", required_argument, 0, 'D'}, {"notice", required_argument, 0, 'n'}, {0, 0, 0, 0}};
    const char *dir = NULL;
    double notice = 0;
    char msg[1200];
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'D')
            dir = optarg;
        else if (c == 'n' && cli_parse_double(optarg, &notice) == 0 && notice >= 0)
            continue;
        else if (c == 'n') {
            snprintf(msg, sizeof msg, "--notice '%s': expected seconds >= 0", optarg);
            return cli_bad_input("preempt", msg);
        } else {
            snprintf(msg, sizeof msg, "bad option '%s' (see autohet preempt --help)", argv[optind - 1]);
            return cli_bad_input("preempt", msg);
        }
    }
    if (!dir || optind != argc - 1)
        return cli_bad_input("preempt", "expected --run-dir DIR and one NODE (see autohet preempt --help)");
    if (ah_run_request_preempt(dir, argv[optind], notice, "command", msg, sizeof msg) != 0)
        return cli_bad_input("preempt", msg);
    printf("autohet preempt: asked the run in %s to preempt %s%s\n", dir, argv[optind],
           notice > 0 ? " (with notice)" : "");
    return 0;
}
