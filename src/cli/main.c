/* autohet: heterogeneous 3D-parallel LLM training toolkit. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autohet/plan.h"
#include "cli/cli.h"

#define AUTOHET_VERSION "0.1.0"

typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *summary;
} subcommand;

static const subcommand commands[] = {
    {"plan", cmd_plan, "find the fastest 3D-parallel plan for a model on a heterogeneous cluster"},
    {"replan", cmd_replan, "replan the survivors of a plan's cluster after losing nodes, in milliseconds"},
    {"simulate", cmd_simulate, "simulate one iteration of a plan event by event; Perfetto trace, SVG, JSON"},
    {"calibrate", cmd_calibrate, "fit the simulator to measured iteration times (per-GPU compute, pipeline links)"},
    {"train", cmd_train,
     "train a GPT/LLaMA model on text, on one process or over MPI ranks executing a plan"},
    {"commbench", cmd_commbench,
     "MPI communication benchmarks (OSU / nccl-tests style) with an alpha-beta fit"},
    {"profile", cmd_profile,
     "measure per-layer costs on this machine's backend and write a profile for plan"},
    {"run", cmd_run,
     "elastic training: supervise the MPI job, survive preemptions (replan + layer-bitmap recovery)"},
    {"preempt", cmd_preempt, "preempt a node of a running `autohet run` (as a spot reclaim would)"},
    {"hosts", cmd_hosts, "put a plan's nodes on hosts (hostfile, Slurm) and write the Open MPI rankfile"},
    {"spot-sim", cmd_spot_sim, "goodput of recovery policies over a spot-availability trace (replay)"},
    {"analyze", cmd_analyze,
     "analyze a training trace: compute vs exposed communication vs idle, per rank and per collective"},
    {"export", cmd_export, "write a layer checkpoint (any plan) as Hugging Face config.json + model.safetensors"},
    {"generate", cmd_generate, "sample tokens from a checkpoint or a Hugging Face model directory"},
    {"tokenize", cmd_tokenize, "encode text, jsonl or parquet into llm.c token files with a tokenizer.json"},
    {"devices", cmd_devices, "list the GPU catalog (datasheet figures the cost model uses)"},
    {"models", cmd_models, "list the built-in model presets"},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *f) {
    fprintf(f,
            "autohet %s - plan, predict and measure 3D-parallel LLM training on heterogeneous GPUs\n\n"
            "usage: autohet <command> [options]    (autohet <command> --help for details)\n\n"
            "commands:\n",
            AUTOHET_VERSION);
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nexample:\n"
               "  autohet plan --model gpt3-6.7b --cluster 2x8xA100-40G,1x8xH800,2x8xH20 "
               "--global-batch 512 --seq 2048 --compare\n"
               "\nexit status: 0 success, 2 bad input (one line on stderr names the file/field/flag)\n");
}

/* What a command printed reaches standard output, or the run fails: a full
 * disk under `> FILE` is not a success. Checked once, here, for every command. */
static int finish_stdout(const char *cmd, int rc) {
    errno = 0;
    int flushed = fflush(stdout) == 0;
    if (flushed && !ferror(stdout))
        return rc;
    if (rc == 0) /* a failure has said its one line already */
        fprintf(stderr, "autohet %s: standard output: write failed%s%s\n", cmd, flushed ? "" : ": ",
                flushed ? "" : strerror(errno));
    return rc ? rc : 1;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return AH_EXIT_BAD_INPUT;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return finish_stdout("--help", 0);
    }
    if (!strcmp(argv[1], "--version")) {
        printf("autohet %s\n", AUTOHET_VERSION);
        return finish_stdout("--version", 0);
    }
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (!strcmp(argv[1], commands[i].name))
            return finish_stdout(commands[i].name, commands[i].fn(argc - 1, argv + 1));
    fprintf(stderr, "autohet: unknown command '%s' (try autohet --help)\n", argv[1]);
    return AH_EXIT_BAD_INPUT;
}
