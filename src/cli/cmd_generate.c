/* autohet generate: sample tokens from a checkpoint or a Hugging Face model
 * directory (docs/weights.md). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autohet/engine.h"
#include "autohet/plan.h"
#include "cli/cli.h"
#include "cli/cli_tokenizer.h"

static void generate_usage(FILE *f) {
    fprintf(f,
            "usage: autohet generate (--ckpt DIR [--step S] [--model M] | --init-from HF_DIR)\n"
            "                        (--prompt-tokens 1,2,3 | --tokenizer TOKENIZER_JSON --prompt TEXT)\n"
            "                        [--max-new-tokens N] [--temperature T]\n"
            "                        [--top-k K] [--seed S] [--no-kv-cache]\n\n"
            "Continues the prompt with N tokens on one process and prints every token id (prompt first);\n"
            "for a byte-level model (vocabulary 256) also the text.\n\n"
            "  --ckpt DIR       a layer checkpoint of any plan (as autohet export reads it); --step,\n"
            "                   --model as there\n"
            "  --init-from DIR  a Hugging Face model directory (as autohet train --init-from reads it)\n"
            "  --prompt-tokens  comma-separated token ids below the vocabulary\n"
            "  --prompt TEXT    with --tokenizer: the ids Hugging Face tokenizers gives TEXT (python3 with\n"
            "                   tokenizers, or $AUTOHET_PYTHON); without it, for a byte-level model\n"
            "                   (vocabulary 256) only, TEXT's bytes; stdout is then only the text a transformers\n"
            "                   text-generation pipeline returns as generated_text, and a newline\n"
            "  --max-new-tokens tokens to add (default 16)\n"
            "  --temperature    0 (default): greedy; else sample softmax(logits / T)\n"
            "  --top-k          sample among the K most likely tokens (default 0: all)\n"
            "  --seed           the sampler's seed (default 1): the same seed gives the same tokens\n"
            "  --no-kv-cache    run the whole sequence through every block for each token (the slow\n"
            "                   reference the KV cache is tested against; the same greedy tokens)\n\n"
            "exit status: 0 success, 2 bad input (one line on stderr), 1 runtime failure\n");
}

typedef struct {
    const char *ckpt, *model, *init_from, *prompt;
    const char *text, *tokenizer; /* --prompt TEXT --tokenizer TOKENIZER_JSON */
    int step, max_new, top_k, seed, no_cache;
    double temperature;
} gen_args;

static int parse(int argc, char **argv, gen_args *a, char *msg, size_t n) {
    static cli_options opts;
    cli_long_options("ckpt=c step=s model=m init-from=i prompt-tokens=p max-new-tokens=n temperature=t top-k=k "
                     "seed=S no-kv-cache!K prompt=P tokenizer=T",
                     &opts);
    memset(a, 0, sizeof *a);
    a->step = -1, a->max_new = 16, a->seed = 1;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "", opts.opts, NULL)) != -1) {
        int *iv = NULL;
        switch (c) {
        case 'c': a->ckpt = optarg; break;
        case 'm': a->model = optarg; break;
        case 'i': a->init_from = optarg; break;
        case 'p': a->prompt = optarg; break;
        case 'P': a->text = optarg; break;
        case 'T': a->tokenizer = optarg; break;
        case 's': iv = &a->step; break;
        case 'n': iv = &a->max_new; break;
        case 'k': iv = &a->top_k; break;
        case 'S': iv = &a->seed; break;
        case 'K': a->no_cache = 1; break;
        case 't':
            if (cli_parse_double(optarg, &a->temperature) != 0 || !(a->temperature >= 0) || a->temperature > 1e6) {
                snprintf(msg, n, "--temperature '%s': expected a number in [0, 1e6]", optarg);
                return -1;
            }
            break;
        default: return cli_unknown_option("generate", argv[optind - 1], msg, n);
        }
        if (iv && cli_int_value(argv[optind - 2], optarg, 0, iv, msg, n) != 0)
            return -1;
    }
    const char *why = optind < argc                   ? "unexpected argument (see autohet generate --help)"
                      : !a->ckpt == !a->init_from     ? "give one of --ckpt DIR and --init-from HF_DIR"
                      : !a->prompt == !a->text        ? "give one of --prompt-tokens IDS and --prompt TEXT"
                      : a->init_from && (a->model || a->step >= 0) ? "--model and --step go with --ckpt"
                                                                   : NULL;
    if (why && optind < argc)
        snprintf(msg, n, "unexpected argument '%s' (see autohet generate --help)", argv[optind]);
    else if (why)
        snprintf(msg, n, "%s", why);
    return why ? -1 : 0;
}

/* --prompt TEXT on a byte-level model: each byte of TEXT is its id; n_max at most. The count (0: none). */
static int byte_ids(const char *text, int *ids, int n_max) {
    int n = 0;
    for (const unsigned char *c = (const unsigned char *)text; *c && n < n_max; c++)
        ids[n++] = *c;
    return text[n] ? 0 : n;
}

/* streams a byte-level model's text: the prompt with the first new byte (a generation that fails before it
 * writes nothing), then each byte as it comes */
typedef struct {
    const char *prompt; /* NULL once written */
} byte_stream;

static void put_byte(void *ctx, int id) {
    byte_stream *b = ctx;
    if (b->prompt)
        fputs(b->prompt, stdout), b->prompt = NULL;
    if (id >= 0)
        putchar(id);
    fflush(stdout);
}

/* the ids, and the text of a byte-level model (printable ASCII, else \xNN) */
static void print_tokens(const int *t, int n, int n_prompt, int vocab) {
    printf("tokens:");
    for (int i = 0; i < n; i++)
        printf("%s%d", i == 0 ? " " : i == n_prompt ? " | " : ",", t[i]);
    printf("\n");
    if (vocab != 256)
        return;
    printf("text: ");
    for (int i = 0; i < n; i++) {
        if (i == n_prompt)
            printf("|");
        if (t[i] >= 32 && t[i] < 127 && t[i] != '\\' && t[i] != '|')
            putchar(t[i]);
        else
            printf("\\x%02x", t[i]);
    }
    printf("\n");
}

/* The prompt's ids, checked against the opened model before any generation (msg names the flag given):
 * np ids of --prompt-tokens (parsed before the model opened), --prompt TEXT with --tokenizer (its
 * vocabulary, read from the file, must fit the model's before anything is encoded) or the bytes of TEXT
 * for a byte-level model. The count, or -1. */
static int prompt_ids(const gen_args *a, const ah_model_config *c, int np, int *ids, int max, char *msg,
                      size_t n) {
    if (a->text && a->tokenizer) {
        if (cli_tokenizer_check(a->tokenizer, c->vocab, c->name, msg, n) != 0 ||
            (np = cli_tokenizer_encode(a->tokenizer, a->text, ids, max, msg, n)) <= 0)
            return -1;
    } else if (a->text && c->vocab != 256) {
        snprintf(msg, n,
                 "--prompt TEXT needs --tokenizer TOKENIZER_JSON: the model's vocabulary is %d (without a "
                 "tokenizer only a byte-level model, vocabulary 256, takes TEXT's bytes)",
                 c->vocab);
        return -1;
    } else if (a->text && (np = byte_ids(a->text, ids, max)) == 0) {
        snprintf(msg, n, "--prompt: expected 1 to %d bytes of text", max);
        return -1;
    }
    int most = c->arch == AH_ARCH_GPT ? c->max_positions : AH_GEN_MAX_POSITIONS;
    if (np + a->max_new - 1 > most) {
        snprintf(msg, n, "%s (%d %s%s) + --max-new-tokens %d: %d positions, model %s has %d%s",
                 a->text ? "--prompt" : "--prompt-tokens", np, a->text && !a->tokenizer ? "byte" : "id", &"s"[np == 1],
                 a->max_new, np + a->max_new - 1, c->name, most, c->arch == AH_ARCH_GPT ? "" : " here (RoPE)");
        return -1;
    }
    return np;
}

int cmd_generate(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        generate_usage(stdout);
        return 0;
    }
    gen_args a;
    char msg[2048], err[1536];
    if (parse(argc, argv, &a, msg, sizeof msg) != 0)
        return cli_bad_input("generate", msg);
    if (a.max_new > 65536)
        return cli_bad_input("generate", "--max-new-tokens: at most 65536");
    int bytes = a.text && !a.tokenizer; /* byte-level: TEXT's bytes are the ids */
    int prompt[4096], np = 0;
    if (!a.text && (np = cli_parse_int_list(a.prompt, prompt, 4096)) <= 0) {
        snprintf(msg, sizeof msg, "--prompt-tokens '%.200s': expected 1 to 4096 comma-separated ids", a.prompt);
        return cli_bad_input("generate", msg);
    }
    ah_ckpt_weights w;
    ah_hf_dir h;
    ah_hf_src_ctx hc;
    ah_weights_src src;
    int rc = a.ckpt ? ah_ckpt_weights_open(a.ckpt, a.step, a.model, &w, &src, err, sizeof err)
                    : ah_hf_open(a.init_from, &h, err, sizeof err);
    int opened = rc == 0;
    if (rc == 0 && a.init_from)
        ah_hf_source(&hc, &h, &h.cfg, &src);
    int bad_prompt = rc == 0 && (np = prompt_ids(&a, &src.cfg, np, prompt, 4096, msg, sizeof msg)) < 0;
    if (bad_prompt)
        rc = -1;
    int *out = rc == 0 ? calloc((size_t)np + (size_t)a.max_new, sizeof(int)) : NULL;
    ah_gen_config g = {a.max_new, a.temperature, a.top_k, (uint64_t)a.seed, a.no_cache, NULL, NULL};
    /* with --prompt the text goes out as the tokens come (the helper holds the prompt's ids) */
    cli_text_stream *ts = rc == 0 && a.text && !bytes
                              ? cli_tokenizer_stream_open(a.tokenizer, a.text, prompt, np, msg, sizeof msg)
                              : NULL;
    int printed = bad_prompt || (rc == 0 && a.text && !bytes && !ts) ? -1 : 0;
    if (ts)
        g.on_token = cli_tokenizer_stream_token, g.on_token_ctx = ts;
    byte_stream bs = {a.text};
    if (rc == 0 && bytes)
        g.on_token = put_byte, g.on_token_ctx = &bs;
    if (rc == 0 && printed == 0 && (rc = ah_generate(&src, prompt, np, &g, out, err, sizeof err)) == 0 && !a.text)
        print_tokens(out, np + a.max_new, np, src.cfg.vocab);
    if (rc == 0 && bytes) {
        put_byte(&bs, -1); /* the prompt, if no byte came (--max-new-tokens 0) */
        putchar('\n');
    }
    if (ts && cli_tokenizer_stream_close(ts, rc == 0, msg, sizeof msg) != 0 && rc == 0)
        printed = -1;
    if (a.ckpt && opened)
        ah_ckpt_weights_close(&w);
    if (a.init_from && opened)
        ah_hf_close(&h);
    free(out);
    if (printed != 0)
        return cli_bad_input("generate", msg);
    if (rc != 0) {
        snprintf(msg, sizeof msg, "%s %s: %s", a.ckpt ? "--ckpt" : "--init-from", a.ckpt ? a.ckpt : a.init_from, err);
        return cli_bad_input("generate", msg);
    }
    return 0;
}
