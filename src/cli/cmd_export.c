/* autohet export: a layer checkpoint (any plan) as a Hugging Face model
 * directory (docs/weights.md). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "autohet/engine.h"
#include "autohet/plan.h"
#include "cli/cli.h"
#include "cli/cli_tokenizer.h"

static void export_usage(FILE *f) {
    fprintf(f,
            "usage: autohet export --ckpt DIR [--step S] [--model NAME|config.json] --out HF_DIR\n"
            "                      [--tokenizer TOKENIZER_JSON|DIR]\n\n"
            "Writes HF_DIR/config.json and HF_DIR/model.safetensors (F32, Hugging Face names: GPT2LMHeadModel\n"
            "or LlamaForCausalLM / Qwen2ForCausalLM; weights only, no AdamW moments) from the layer checkpoint\n"
            "in DIR, written under any plan: each layer's shards are read from the checkpoint's node\n"
            "directories (checksums verified, nearest good copy) and shards of TP > 1 are joined. GPT-2's\n"
            "Conv1D weights are written [in, out], LLaMA's q/k rows in HF's rotate-half order, a tied head\n"
            "is left out (docs/weights.md).\n\n"
            "  --ckpt DIR   a checkpoint of autohet train --ckpt-dir (DIR/state.json, DIR/<node>/...)\n"
            "  --step S     the step to export (default: the committed step of DIR/state.json)\n"
            "  --model      the model the checkpoint was trained as (default: the config state.json\n"
            "               keeps, or for an older checkpoint the preset it names; given, it must agree\n"
            "               with the kept config); the vocabulary is the one trained (256 on text)\n"
            "  --out DIR    the output directory (created; its parent must exist)\n"
            "  --tokenizer  a tokenizer.json (or a directory of tokenizer files) copied beside the weights,\n"
            "               with a tokenizer_config.json, so that transformers loads HF_DIR as is; its ids\n"
            "               must lie below the vocabulary (docs/data.md)\n\n"
            "exit status: 0 success, 2 bad input (one line on stderr), 1 runtime failure\n");
}

/* ah_hf_export() into out, made here when missing; on failure what this
 * made (the directory, files that were not there) is removed. 0, or -1 with err. */
static int export_to(const ah_weights_src *src, const char *out, char *err, size_t n) {
    static const char *const names[2] = {"model.safetensors", "config.json"};
    char path[2][2200];
    int existed[2];
    struct stat sb;
    int made_dir = stat(out, &sb) != 0;
    for (int i = 0; i < 2; i++) {
        snprintf(path[i], sizeof path[i], "%s/%s", out, names[i]);
        existed[i] = access(path[i], F_OK) == 0;
    }
    if (made_dir && mkdir(out, 0755) != 0) {
        snprintf(err, n, "--out %s: cannot create (%s)", out, strerror(errno));
        return -1;
    }
    if (ah_hf_export(src, out, err, n) == 0)
        return 0;
    for (int i = 0; i < 2; i++)
        if (!existed[i])
            unlink(path[i]);
    if (made_dir)
        rmdir(out);
    return -1;
}

int cmd_export(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        export_usage(stdout);
        return 0;
    }
    static cli_options opts;
    cli_long_options("ckpt=c step=s model=m out=o tokenizer=t", &opts);
    const char *ckpt = NULL, *model = NULL, *out = NULL, *tokenizer = NULL;
    int step = -1, c;
    char msg[2048];
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts.opts, NULL)) != -1) {
        switch (c) {
        case 'c': ckpt = optarg; break;
        case 'm': model = optarg; break;
        case 'o': out = optarg; break;
        case 't': tokenizer = optarg; break;
        case 's':
            if (cli_int_value("--step", optarg, 0, &step, msg, sizeof msg) != 0)
                return cli_bad_input("export", msg);
            break;
        default: cli_unknown_option("export", argv[optind - 1], msg, sizeof msg); return cli_bad_input("export", msg);
        }
    }
    if (optind < argc) {
        snprintf(msg, sizeof msg, "unexpected argument '%s' (see autohet export --help)", argv[optind]);
        return cli_bad_input("export", msg);
    }
    if (!ckpt || !out)
        return cli_bad_input("export", "--ckpt and --out are required (see autohet export --help)");
    if (cli_check_output_dir("--out", out, 0, msg, sizeof msg) != 0) /* made last, after every check */
        return cli_bad_input("export", msg);
    ah_ckpt_weights w;
    ah_weights_src src;
    if (ah_ckpt_weights_open(ckpt, step, model, &w, &src, msg, sizeof msg) != 0)
        return cli_bad_input("export", msg);
    if (tokenizer && cli_tokenizer_check(tokenizer, w.cfg.vocab, w.cfg.name, msg, sizeof msg) != 0) {
        ah_ckpt_weights_close(&w);
        return cli_bad_input("export", msg);
    }
    char err[1536];
    int rc = export_to(&src, out, err, sizeof err);
    if (rc == 0 && tokenizer && cli_tokenizer_export(tokenizer, out, w.cfg.max_positions, msg, sizeof msg) != 0) {
        ah_ckpt_weights_close(&w);
        return cli_bad_input("export", msg);
    }
    if (rc == 0)
        printf("autohet export: %s step %d (%s, %d blocks, hidden %d, vocabulary %d) -> %s/model.safetensors%s\n",
               ckpt, w.step, w.cfg.name, w.cfg.n_layers, w.cfg.hidden, w.cfg.vocab, out,
               tokenizer ? " + tokenizer.json" : "");
    ah_ckpt_weights_close(&w);
    if (rc != 0) {
        snprintf(msg, sizeof msg, "--ckpt %s: %s", ckpt, err);
        return cli_bad_input("export", msg);
    }
    return 0;
}
