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
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "autohet/ckpt.h"
#include "autohet/elastic.h"
#include "autohet/plan.h"
#include "cli/cli.h"
#include "elastic/controller.h"
#include "engine/data.h"
#include "engine/executor.h"
#include "engine/optim.h"
#include "util/clock.h"
#include "util/json_file.h"
#include "util/atomic_file.h"

static void train_usage(FILE *f) {
    fprintf(f,
            "usage: [mpirun -np N] autohet train --model NAME|config.json --data PATH [--plan PLAN.json]\n"
            "                      [--steps N] [--seed S] [--global-batch G --micro-batch B --seq L]\n"
            "                      [--lr LR] [--warmup N] [--eval-every K] [--log-every K] [--log FILE]\n\n"
            "Trains on byte-level tokens (vocabulary 256) of a text file or a directory of them. Without\n"
            "--plan it runs on one process (one replica, one stage); with --plan every MPI rank takes\n"
            "one GPU slot of the plan (replica, stage, TP rank) and the job computes the same model as\n"
            "one process would.\n\n"
            "  --model        preset (e.g. tiny-gpt, tiny-llama, small-gpt, gpt2-124m) or config.json;\n"
            "                 the vocabulary is replaced by the 256 byte values\n"
            "  --data         text file or directory (10%% held out for validation)\n"
            "  --plan         plan document (autohet plan --json, or hand-written: docs/plan-format.md);\n"
            "                 its tp, micro_batch, global_batch and seq are used\n"
            "  --steps        optimizer steps (default 50)\n"
            "  --seed         data order and initialisation (default 1)\n"
            "  --global-batch / --micro-batch / --seq   batch shape without a plan (default 8 / 2 / 128)\n"
            "  --lr, --warmup peak learning rate (default 3e-3) and warm-up steps (default 5); cosine decay\n"
            "  --eval-every   validation loss every K steps (default 10, 0 = never)\n"
            "  --log-every    progress line every K steps (default 1)\n"
            "  --log FILE     one JSON object per step: step, loss, val_loss, lr, grad_norm, step_s,\n"
            "                 tokens_per_s, tflops, mfu\n"
            "  --trace FILE   record every compute op, wait, send and collective of every rank (from the\n"
            "                 second step on) into one Chrome trace; autohet analyze FILE explains it\n"
            "  --ckpt-dir DIR --ckpt-every K   layer checkpoint every K steps: safetensors shard per layer\n"
            "                 (parameters + AdamW moments) under DIR/<node>/, manifests, DIR/state.json\n"
            "  --ckpt-mem DIR [--mem-every k]   memory-tier snapshot (e.g. under /dev/shm) every k steps\n"
            "                 (default 1), same layout\n"
            "  --ckpt-cloud DIR  also write each --ckpt-every checkpoint to DIR (the cloud tier)\n"
            "  --resume DIR   continue from the checkpoint in DIR (any plan with the same model, batch and\n"
            "                 TP degree); --steps stays the total\n"
            "  --recover FILE restore from a recovery assignment of autohet run (docs/recovery.md); writes\n"
            "                 FILE.result.json (bytes and seconds per tier)\n\n"
            "exit status: 0 success, 2 bad input (one line on stderr), 1 runtime failure\n");
}

/* The plan a run without --plan executes: one replica, one stage, TP 1. */
static void trivial_plan(ah_plan *p, const ah_model_config *m, int gb, int mb, int seq) {
    memset(p, 0, sizeof *p);
    p->version = AH_PLAN_FORMAT_VERSION;
    snprintf(p->strategy, sizeof p->strategy, "single");
    p->model = *m;
    p->train.seq = seq;
    p->tp = 1;
    p->micro_batch = mb;
    p->global_batch = gb;
    p->cluster.n_nodes = 1;
    p->cluster.nodes = calloc(1, sizeof(ah_node));
    snprintf(p->cluster.nodes[0].name, sizeof p->cluster.nodes[0].name, "cpu-0");
    p->cluster.nodes[0].dev = *ah_device_find("cpu");
    p->cluster.nodes[0].gpus = 1;
    p->cluster.nodes[0].nic_gbit = p->cluster.nodes[0].dev.nic_gbit;
    p->n_replicas = 1;
    p->replicas = calloc(1, sizeof(ah_replica));
    p->replicas[0].n_stages = 1;
    p->replicas[0].micro_batches = gb / mb;
    p->replicas[0].stages = calloc(1, sizeof(ah_stage));
    p->replicas[0].stages[0].layer_last = ah_model_num_layers(m);
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
static void write_pid_file(const ah_executor *x, int rank) {
    const char *dir = getenv("AUTOHET_PID_DIR");
    if (!dir)
        return;
    char path[2048], line[160], err[256];
    snprintf(path, sizeof path, "%s/rank-%d", dir, rank);
    int len = snprintf(line, sizeof line, "%ld %s\n", (long)getpid(), ah_executor_node_name(x));
    if (ah_write_file_atomic(path, line, (size_t)len, err, sizeof err) != 0)
        fprintf(stderr, "autohet train: %s\n", err);
}

#define SERVER_RELEASE_TAG 7707

/* the step a recovery assignment restores (0: the initialisation from the
 * seed, which the ranks then compute themselves), -1 unreadable */
static int assignment_step(const char *path) {
    char err[512];
    cJSON *o = ah_json_parse_file(path, 64u << 20, 1, err, sizeof err);
    const cJSON *st = o ? cJSON_GetObjectItemCaseSensitive(o, "step") : NULL;
    int step = cJSON_IsNumber(st) ? st->valueint : -1;
    cJSON_Delete(o);
    return step;
}

/* A recovery server: a process on a surviving node that the new plan does not
 * use. It exposes that node's shards for the new owners' one-sided gets, then
 * idles (sleeping, not spinning) until rank 0 releases it at the end. */
static int serve_only(const char *assignment, int rank) {
    char err[512], node[64] = "?";
    cJSON *o = ah_json_parse_file(assignment, 64u << 20, 1, err, sizeof err);
    const cJSON *it, *ranks = o ? cJSON_GetObjectItemCaseSensitive(o, "ranks") : NULL;
    cJSON_ArrayForEach(it, ranks) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(it, "rank"),
                    *n = cJSON_GetObjectItemCaseSensitive(it, "node");
        if (cJSON_IsNumber(r) && r->valueint == rank && cJSON_IsString(n))
            snprintf(node, sizeof node, "%s", n->valuestring);
    }
    cJSON_Delete(o);
    const char *dir = getenv("AUTOHET_PID_DIR");
    if (dir) {
        char path[2048], line[160];
        snprintf(path, sizeof path, "%s/rank-%d", dir, rank);
        int len = snprintf(line, sizeof line, "%ld %s\n", (long)getpid(), node);
        ah_write_file_atomic(path, line, (size_t)len, err, sizeof err);
    }
    int rc = ah_recover_serve(assignment, err, sizeof err);
    if (rc != 0) {
        fprintf(stderr, "autohet train: recovery server rank %d: %s\n", rank, err);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (int flag = 0; !flag;) {
        MPI_Iprobe(0, SERVER_RELEASE_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
        if (!flag)
            usleep(20000);
    }
    int done;
    MPI_Recv(&done, 1, MPI_INT, 0, SERVER_RELEASE_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Finalize();
    return 0;
}

/* Report an input error from rank 0 only, and end every rank with exit 2. */
static int fail_all(int rank, const char *msg) {
    if (rank == 0)
        fprintf(stderr, "autohet train: %s\n", msg);
    MPI_Finalize();
    return AH_EXIT_BAD_INPUT;
}

int cmd_train(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            train_usage(stdout);
            return 0;
        }
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},       {"data", required_argument, 0, 'd'},
        {"plan", required_argument, 0, 'p'},        {"steps", required_argument, 0, 's'},
        {"seed", required_argument, 0, 'S'},        {"global-batch", required_argument, 0, 'G'},
        {"micro-batch", required_argument, 0, 'B'}, {"seq", required_argument, 0, 'L'},
        {"lr", required_argument, 0, 'r'},          {"warmup", required_argument, 0, 'w'},
        {"eval-every", required_argument, 0, 'e'},  {"log-every", required_argument, 0, 'k'},
        {"log", required_argument, 0, 'o'},         {"trace", required_argument, 0, 't'},
        {"ckpt-dir", required_argument, 0, 'C'},    {"ckpt-every", required_argument, 0, 'K'},
        {"resume", required_argument, 0, 'R'},      {"ckpt-mem", required_argument, 0, 'M'},
        {"mem-every", required_argument, 0, 'E'},   {"ckpt-cloud", required_argument, 0, 'U'},
        {"recover", required_argument, 0, 'V'},     {0, 0, 0, 0},
    };
    const char *model_arg = NULL, *data_arg = NULL, *plan_arg = NULL, *log_path = NULL, *trace_path = NULL,
               *ckpt_dir = NULL, *resume_dir = NULL, *mem_dir = NULL, *cloud_dir = NULL, *recover_path = NULL;
    int ckpt_every = 0, mem_every = 1;
    int steps = 50, seed = 1, gb = 0, mb = 0, seq = 0, warmup = 5, eval_every = 10, log_every = 1;
    double lr = 3e-3;
    char msg[640];
    int bad = 0;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1 && !bad) {
        int *iv = NULL, min = 1;
        switch (c) {
        case 'm': model_arg = optarg; break;
        case 'd': data_arg = optarg; break;
        case 'p': plan_arg = optarg; break;
        case 'o': log_path = optarg; break;
        case 't': trace_path = optarg; break;
        case 'C': ckpt_dir = optarg; break;
        case 'R': resume_dir = optarg; break;
        case 'M': mem_dir = optarg; break;
        case 'U': cloud_dir = optarg; break;
        case 'V': recover_path = optarg; break;
        case 'E': iv = &mem_every; break;
        case 'K': iv = &ckpt_every; break;
        case 's': iv = &steps; break;
        case 'S': iv = &seed, min = 0; break;
        case 'G': iv = &gb; break;
        case 'B': iv = &mb; break;
        case 'L': iv = &seq; break;
        case 'w': iv = &warmup, min = 0; break;
        case 'e': iv = &eval_every, min = 0; break;
        case 'k': iv = &log_every; break;
        case 'r':
            if (cli_parse_double(optarg, &lr) != 0 || !(lr > 0)) {
                snprintf(msg, sizeof msg, "--lr '%s': expected a positive number", optarg);
                bad = 1;
            }
            break;
        default:
            snprintf(msg, sizeof msg, "unknown or incomplete option '%s' (see autohet train --help)",
                     argv[optind - 1]);
            bad = 1;
        }
        if (iv && (cli_parse_int(optarg, iv) != 0 || *iv < min)) {
            snprintf(msg, sizeof msg, "%s '%s': expected an integer >= %d", argv[optind - 2], optarg, min);
            bad = 1;
        }
    }
    if (getenv("AUTOHET_PID_DIR")) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* under autohet run: die with the launcher, never train orphaned */
        signal(SIGTERM, on_term);
    }
    int thread_level;
    /* funneled: only the main thread calls MPI (OpenMP and the checkpoint writer do not) */
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &thread_level);
    double t_init = ah_wall_clock_s();
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (bad)
        return fail_all(rank, msg);
    if (!model_arg)
        return fail_all(rank, "--model is required (see autohet train --help)");
    if (!data_arg)
        return fail_all(rank, "--data is required: a text file or a directory of them");
    if ((ckpt_dir != NULL) != (ckpt_every > 0))
        return fail_all(rank, "--ckpt-dir and --ckpt-every go together");
    if (cloud_dir && !ckpt_dir)
        return fail_all(rank, "--ckpt-cloud is written at the --ckpt-dir/--ckpt-every steps: give those too");
    if (resume_dir && recover_path)
        return fail_all(rank, "--resume and --recover exclude each other");
    /* outputs before any work: an unwritable one is bad input, not a failure at
     * the first checkpoint or the end of the run (rank 0 checks, all agree) */
    int outputs_ok = 1;
    if (rank == 0)
        outputs_ok = !(cli_check_output("--log", log_path, msg, sizeof msg) ||
                       cli_check_output("--trace", trace_path, msg, sizeof msg) ||
                       cli_check_output_dir("--ckpt-dir", ckpt_dir, 1, msg, sizeof msg) ||
                       cli_check_output_dir("--ckpt-mem", mem_dir, 1, msg, sizeof msg) ||
                       cli_check_output_dir("--ckpt-cloud", cloud_dir, 1, msg, sizeof msg));
    MPI_Bcast(&outputs_ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (!outputs_ok)
        return fail_all(rank, msg);

    ah_model_config cfg;
    char err[512];
    if (ah_model_resolve(model_arg, &cfg, err, sizeof err) != 0)
        return fail_all(rank, err);
    cfg.vocab = 256; /* byte-level tokens */
    ah_plan plan;
    if (plan_arg) {
        if (ah_plan_read_json(plan_arg, &plan, err, sizeof err) != 0)
            return fail_all(rank, err);
        if ((gb && gb != plan.global_batch) || (mb && mb != plan.micro_batch) ||
            (seq && seq != plan.train.seq)) {
            snprintf(msg, sizeof msg,
                     "--global-batch/--micro-batch/--seq disagree with %s (global batch %d, micro-batch %d, "
                     "seq %d)",
                     plan_arg, plan.global_batch, plan.micro_batch, plan.train.seq);
            ah_plan_free(&plan);
            return fail_all(rank, msg);
        }
        if (plan.model.n_layers != cfg.n_layers || plan.model.hidden != cfg.hidden) {
            snprintf(msg, sizeof msg,
                     "%s was made for %s (%d blocks, hidden %d), --model %s has %d blocks, hidden %d",
                     plan_arg, plan.model.name, plan.model.n_layers, plan.model.hidden, cfg.name,
                     cfg.n_layers, cfg.hidden);
            ah_plan_free(&plan);
            return fail_all(rank, msg);
        }
    } else {
        gb = gb ? gb : 8;
        mb = mb ? mb : 2;
        seq = seq ? seq : 128;
        if (gb % mb) {
            snprintf(msg, sizeof msg, "--global-batch %d is not divisible by --micro-batch %d", gb, mb);
            return fail_all(rank, msg);
        }
        if (world != 1)
            return fail_all(rank, "without --plan, run on one rank (give a plan to use several)");
        trivial_plan(&plan, &cfg, gb, mb, seq);
    }
    ah_dataset data;
    if (ah_dataset_load(&data, data_arg, 0.1, plan.train.seq, err, sizeof err) != 0) {
        ah_plan_free(&plan);
        return fail_all(rank, err);
    }
    ah_optim_config oc;
    ah_optim_config_default(&oc);
    oc.lr = (float)lr;
    oc.min_lr = (float)(lr / 10);
    oc.warmup_steps = warmup < steps ? warmup : steps / 2;
    oc.total_steps = steps;
    /* ranks beyond the plan's slots are recovery servers of surviving nodes the plan does not use */
    MPI_Comm comm = MPI_COMM_WORLD;
    int slots = ah_plan_world_size(&plan);
    if (recover_path && world > slots) {
        MPI_Comm_split(MPI_COMM_WORLD, rank >= slots, rank, &comm);
        if (rank >= slots) {
            ah_dataset_free(&data);
            ah_plan_free(&plan);
            return serve_only(recover_path, rank);
        }
    }
    double peak = ah_measure_sgemm_peak();
    ah_executor *x = ah_executor_create(comm, &plan, &cfg, &data, &oc, (uint64_t)seed,
                                        !resume_dir && (!recover_path || assignment_step(recover_path) == 0),
                                        peak, err, sizeof err);
    if (!x) {
        ah_dataset_free(&data);
        ah_plan_free(&plan);
        return fail_all(rank, err);
    }
    FILE *log = NULL;
    int log_ok = 1;
    if (rank == 0 && log_path && !(log = fopen(log_path, "w"))) {
        snprintf(msg, sizeof msg, "--log %s: cannot open for writing (%s)", log_path, strerror(errno));
        log_ok = 0;
    }
    MPI_Bcast(&log_ok, 1, MPI_INT, 0, comm);
    if (!log_ok) { /* every rank ends with exit 2, no MPI_Abort banner */
        ah_executor_free(x);
        ah_dataset_free(&data);
        ah_plan_free(&plan);
        return fail_all(rank, msg);
    }
    if (rank == 0)
        printf("autohet train: %s (%d blocks, hidden %d, %s), %d rank%s, %d replica%s, TP %d, global batch "
               "%d x seq "
               "%d, micro-batch %d; data %s (%zu bytes, unigram entropy %.3f nats); sgemm peak %.1f "
               "GFLOP/s/rank\n",
               cfg.name, cfg.n_layers, cfg.hidden, ah_arch_name(cfg.arch), world, world == 1 ? "" : "s",
               plan.n_replicas, plan.n_replicas == 1 ? "" : "s", plan.tp, plan.global_batch, plan.train.seq,
               plan.micro_batch, data_arg, data.n, ah_dataset_unigram_entropy(&data), peak / 1e9);
    write_pid_file(x, rank);
    const char *kill_rank = getenv("AUTOHET_TEST_KILL_RANK"), *kill_step = getenv("AUTOHET_TEST_KILL_STEP");
    int rc = 0, first_step = 0;
    if (resume_dir) {
        if (ah_ckpt_read_state(resume_dir, &cfg, &plan, seed, &oc, &first_step, msg, sizeof msg) != 0) {
            ah_executor_free(x);
            ah_dataset_free(&data);
            ah_plan_free(&plan);
            return fail_all(rank, msg);
        }
        double r0 = MPI_Wtime();
        if (ah_executor_restore(x, resume_dir, first_step, err, sizeof err) != 0) {
            if (rank == 0) {
                fprintf(stderr, "autohet train: --resume %s: %s\n", resume_dir, err);
                fflush(stderr);
            }
            MPI_Barrier(
                MPI_COMM_WORLD); /* no rank exits (and gets the job killed) before the message is out */
            ah_executor_free(x);
            ah_dataset_free(&data);
            ah_plan_free(&plan);
            return 1;
        }
        if (rank == 0)
            printf("resumed from %s at step %d (%.3f s)\n", resume_dir, first_step, MPI_Wtime() - r0);
    }
    if (recover_path) {
        double r0 = ah_wall_clock_s();
        ah_recover_stats rs;
        if (ah_executor_recover(x, recover_path, &first_step, &rs, err, sizeof err) != 0) {
            if (rank == 0) {
                fprintf(stderr, "autohet train: --recover %s: %s\n", recover_path, err);
                fflush(stderr);
            }
            MPI_Barrier(MPI_COMM_WORLD);
            ah_executor_free(x);
            ah_dataset_free(&data);
            ah_plan_free(&plan);
            return 1;
        }
        double r1 = ah_wall_clock_s();
        if (rank == 0) {
            printf("recovered step %d in %.3f s: memory %.1f MB, disk %.1f MB, peer %.1f MB, cloud %.1f MB\n",
                   first_step, r1 - r0, rs.bytes[0] / 1e6, rs.bytes[1] / 1e6, rs.bytes[2] / 1e6,
                   rs.bytes[3] / 1e6);
            char out[3072], js[1024];
            snprintf(out, sizeof out, "%s.result.json", recover_path);
            int len =
                snprintf(js, sizeof js,
                         "{\"step\": %d, \"t_init\": %.6f, \"t_restore_start\": %.6f, \"t_restore_end\": "
                         "%.6f, \"bytes_by_tier\": {\"memory\": %.0f, \"disk\": %.0f, \"peer\": %.0f, "
                         "\"cloud\": %.0f}, \"seconds_by_tier\": {\"memory\": %.6f, \"disk\": %.6f, "
                         "\"peer\": %.6f, \"cloud\": %.6f}, \"fallbacks\": %d}\n",
                         first_step, t_init, r0, r1, rs.bytes[0], rs.bytes[1], rs.bytes[2], rs.bytes[3],
                         rs.seconds[0], rs.seconds[1], rs.seconds[2], rs.seconds[3], rs.fallbacks);
            if (ah_write_file_atomic(out, js, (size_t)len, err, sizeof err) != 0)
                fprintf(stderr, "autohet train: %s\n", err);
        }
    }
    for (int s = first_step; s < steps && rc == 0; s++) {
        /* test hook: a rank dies mid-run (the job must end, not hang) */
        if (kill_rank && atoi(kill_rank) == rank && kill_step && atoi(kill_step) == s)
            raise(SIGKILL);
        forward_grace_notice(x);
        ah_step_stats st;
        if (trace_path && s == (steps > 1 ? 1 : 0))
            ah_executor_trace_enable(x); /* skip the warm-up step */
        int eval = eval_every > 0 && ((s + 1) % eval_every == 0 || s + 1 == steps);
        rc = ah_executor_step(x, s, eval, &st, err, sizeof err);
        if (rc == 0 && mem_dir && (s + 1) % mem_every == 0)
            rc = ah_executor_save(x, mem_dir, "memory", s + 1, err, sizeof err);
        /* with a memory tier, the disk and cloud copies are made from its snapshot by a
         * thread of each rank while training goes on, and committed at a later step
         * boundary once every rank's copy is done */
        int bg = mem_dir && ckpt_dir;
        if (rc == 0 && bg) {
            int c = ah_executor_persist_poll(x, 0, err, sizeof err);
            rc = c < 0 ? -1 : 0;
            if (c == 1 && rank == 0)
                printf("checkpoint: persisted to %s%s%s in the background\n", ckpt_dir,
                       cloud_dir ? " + " : "", cloud_dir ? cloud_dir : "");
        }
        if (rc == 0 && ckpt_dir && ckpt_every > 0 && (s + 1) % ckpt_every == 0) {
            if (bg && (s + 1) % mem_every == 0) {
                int c = ah_executor_persist_poll(x, 1, err, sizeof err); /* the previous copy first */
                if (c >= 0 && rank == 0 && c == 1)
                    printf("checkpoint: persisted to %s in the background\n", ckpt_dir);
                c = c < 0 ? -1 : ah_executor_persist_start(x, ckpt_dir, cloud_dir, s + 1, err, sizeof err);
                if (c == 1)
                    snprintf(err, sizeof err, "checkpoint: no memory snapshot of step %d to persist", s + 1);
                rc = c != 0 ? -1 : 0;
            } else {
                double c0 = MPI_Wtime();
                rc = ah_executor_save(x, ckpt_dir, "disk", s + 1, err, sizeof err);
                if (rc == 0 && cloud_dir)
                    rc = ah_executor_save(x, cloud_dir, "cloud", s + 1, err, sizeof err);
                if (rc == 0 && rank == 0)
                    printf("checkpoint: step %d -> %s%s%s (%.3f s)\n", s + 1, ckpt_dir,
                           cloud_dir ? " + " : "", cloud_dir ? cloud_dir : "", MPI_Wtime() - c0);
            }
        }
        if (rc != 0 || rank != 0)
            continue;
        if ((s + 1) % log_every == 0 || s + 1 == steps || eval) {
            printf("step %4d/%d | loss %.4f", s + 1, steps, st.loss);
            if (st.val_loss >= 0)
                printf(" | val %.4f", st.val_loss);
            printf(" | lr %.2e | grad norm %.3f | %.0f tok/s | %.2f GFLOP/s | MFU %.1f%% | %.0f ms\n", st.lr,
                   st.grad_norm, st.tokens_per_s, st.tflops * 1e3, 100 * st.mfu, st.step_s * 1e3);
            fflush(stdout);
        }
        if (log) {
            fprintf(log,
                    "{\"step\": %d, \"loss\": %.9g, \"val_loss\": %.9g, \"lr\": %.6g, \"grad_norm\": %.9g, "
                    "\"step_s\": %.6f, \"tokens_per_s\": %.3f, \"tflops\": %.6g, \"mfu\": %.6g}\n",
                    s + 1, st.loss, st.val_loss, st.lr, st.grad_norm, st.step_s, st.tokens_per_s, st.tflops,
                    st.mfu);
            fflush(log);
        }
    }
    if (rc == 0 && mem_dir && ckpt_dir) { /* the copy in flight, if any */
        int c = ah_executor_persist_poll(x, 1, err, sizeof err);
        rc = c < 0 ? -1 : 0;
        if (c == 1 && rank == 0)
            printf("checkpoint: persisted to %s in the background\n", ckpt_dir);
    }
    if (rc != 0)
        fprintf(stderr, "autohet train: rank %d: %s\n", rank, err);
    if (rc == 0 && trace_path) {
        if (ah_executor_write_trace(x, trace_path, err, sizeof err) != 0) {
            if (rank == 0)
                fprintf(stderr, "autohet train: %s\n", err);
            rc = 1;
        } else if (rank == 0) {
            printf("trace written to %s (autohet analyze %s)\n", trace_path, trace_path);
        }
    }
    /* test hook: dump the final parameters (replica 0, full layout) */
    const char *dump = getenv("AUTOHET_DUMP_PARAMS");
    if (rc == 0 && dump) {
        float *all = NULL;
        size_t n = 0;
        ah_executor_gather_params(x, &all, &n);
        if (rank == 0) {
            FILE *f = fopen(dump, "wb");
            if (f) {
                fwrite(all, sizeof(float), n, f);
                fclose(f);
            }
            free(all);
        }
    }
    if (log)
        fclose(log);
    ah_executor_free(x);
    ah_dataset_free(&data);
    ah_plan_free(&plan);
    if (rank == 0 && rc == 0) /* release the recovery servers */
        for (int r = slots; r < world; r++) {
            int done = 1;
            MPI_Send(&done, 1, MPI_INT, r, SERVER_RELEASE_TAG, MPI_COMM_WORLD);
        }
    if (comm != MPI_COMM_WORLD)
        MPI_Comm_free(&comm);
    MPI_Finalize();
    return rc ? 1 : 0;
}
