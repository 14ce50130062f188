/* export --tokenizer (cli_tokenizer.h). */
#include "cli/cli_tokenizer.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "util/atomic_file.h"
#include "util/json_file.h"

#define MAX_TOKENIZER_BYTES ((size_t)256 << 20)

/* the files of a tokenizer directory that transformers reads, tokenizer.json first */
static const char *const files[] = {
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "vocab.json",
    "merges.txt",     "tokenizer.model"};
enum { N_FILES = sizeof files / sizeof *files };

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* path of file k of arg (a directory) or arg itself (k = 0, a file) */
static void file_path(const char *arg, int k, char *path, size_t n) {
    if (is_dir(arg))
        snprintf(path, n, "%s/%s", arg, files[k]);
    else
        snprintf(path, n, "%s", k == 0 ? arg : "");
}

/* The largest id of the tokenizer (its model's vocabulary and added tokens)
 * and the token that has it; -1 with msg when the document is not one. */
static long max_id(const cJSON *doc, const char *path, const char **token, char *msg, size_t n) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(doc, "model");
    const cJSON *vocab = cJSON_IsObject(model) ? cJSON_GetObjectItemCaseSensitive(model, "vocab") : NULL;
    if (!cJSON_IsObject(model) || !(cJSON_IsObject(vocab) || cJSON_IsArray(vocab))) {
        snprintf(msg, n, "--tokenizer %s: not a tokenizer.json of Hugging Face tokenizers (no model.vocab)",
                 path);
        return -1;
    }
    long max = -1;
    *token = "";
    if (cJSON_IsArray(vocab)) /* Unigram: [[piece, score], ...], the id is the index */
        max = (long)cJSON_GetArraySize(vocab) - 1;
    const cJSON *e, *words = cJSON_IsObject(vocab) ? vocab : NULL;
    cJSON_ArrayForEach(e, words) {
        if (cJSON_IsNumber(e) && e->valuedouble > (double)max)
            max = (long)e->valuedouble, *token = e->string;
    }
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(doc, "added_tokens")) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(e, "content");
        if (cJSON_IsNumber(id) && id->valuedouble > (double)max)
            max = (long)id->valuedouble, *token = cJSON_IsString(content) ? content->valuestring : "";
    }
    return max;
}

int cli_tokenizer_check(const char *arg, int vocab, const char *model, char *msg, size_t n) {
    char path[4096], err[1024];
    file_path(arg, 0, path, sizeof path);
    cJSON *doc = ah_json_parse_file(path, MAX_TOKENIZER_BYTES, 1, err, sizeof err);
    if (doc == NULL) {
        snprintf(msg, n, "--tokenizer %s", err);
        return -1;
    }
    const char *token;
    long max = max_id(doc, path, &token, msg, n);
    int rc = max < 0 ? -1 : 0;
    if (rc == 0 && max >= vocab) {
        snprintf(msg, n,
                 "--tokenizer %s: its vocabulary (%ld ids) does not match model %s's (%d): token id %ld (\"%.40s\") "
                 "is not below the model's vocabulary %d",
                 path, max + 1, model, vocab, max, token, vocab);
        rc = -1;
    }
    cJSON_Delete(doc);
    return rc;
}

static int copy_file(const char *from, const char *to, char *msg, size_t n) {
    char err[1024];
    size_t len = 0;
    char *data = ah_read_text_file(from, MAX_TOKENIZER_BYTES, &len, err, sizeof err);
    if (data == NULL || ah_write_file_atomic(to, data, len, err, sizeof err) != 0) {
        snprintf(msg, n, "--tokenizer %s", err);
        free(data);
        return -1;
    }
    free(data);
    return 0;
}

int cli_tokenizer_export(const char *arg, const char *out, int max_positions, char *msg, size_t n) {
    char from[4096], to[4096];
    int have_config = 0;
    for (int k = 0; k < N_FILES; k++) {
        file_path(arg, k, from, sizeof from);
        struct stat st;
        if (!from[0] || stat(from, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        snprintf(to, sizeof to, "%s/%s", out, files[k]);
        if (copy_file(from, to, msg, n) != 0)
            return -1;
        have_config |= k == 1;
    }
    if (have_config)
        return 0;
    char config[256], err[1024];
    int len = max_positions > 0 ? snprintf(config, sizeof config,
                                           "{\n  \"tokenizer_class\": \"PreTrainedTokenizerFast\",\n  "
                                           "\"model_max_length\": %d\n}\n",
                                           max_positions)
                                : snprintf(config, sizeof config,
                                           "{\n  \"tokenizer_class\": \"PreTrainedTokenizerFast\"\n}\n");
    snprintf(to, sizeof to, "%s/tokenizer_config.json", out);
    if (ah_write_file_atomic(to, config, (size_t)len, err, sizeof err) != 0) {
        snprintf(msg, n, "--out %s", err);
        return -1;
    }
    return 0;
}

/* The Python side of generate --prompt: encode TEXT -> "id,id,..." on stdout;
 * stream PROMPT: the prompt's ids on stdin's first line, then each new id on a
 * line of its own as it is sampled -> generated_text as transformers'
 * TextGenerationPipeline makes it (return_full_text), the prompt at once and
 * the decoded continuation as it comes (held back while it ends in an
 * incomplete UTF-8 sequence, as transformers' TextStreamer does), a newline
 * at the end. One line on stderr and exit 2 for bad input. */
static const char helper[] =
    "import sys\n"
    "try:\n"
    "    from tokenizers import Tokenizer\n"
    "except ImportError:\n"
    "    sys.stderr.write('the Python package tokenizers is not installed (pip install tokenizers; "
    "scripts/deps.sh)\\n'); sys.exit(2)\n"
    "mode, path = sys.argv[1], sys.argv[2]\n"
    "try:\n"
    "    tok = Tokenizer.from_file(path)\n"
    "except Exception as e:\n"
    "    sys.stderr.write(path + ': not a tokenizer.json: ' + (str(e).splitlines() or [''])[0] + '\\n'); "
    "sys.exit(2)\n"
    "if mode == 'encode':\n"
    "    sys.stdout.write(','.join(str(i) for i in tok.encode(sys.argv[3]).ids))\n"
    "else:\n"
    "    ids = [int(x) for x in sys.stdin.readline().split(',') if x]\n"
    "    head = tok.decode(ids, skip_special_tokens=True)\n"
    "    out, said, pending = sys.stdout, '', sys.argv[3]\n"
    "    for line in sys.stdin:\n"
    "        ids.append(int(line))\n"
    "        new = tok.decode(ids, skip_special_tokens=True)[len(head):]\n"
    "        if not new.endswith('\\ufffd') and new.startswith(said):\n"
    "            out.write(pending + new[len(said):]); out.flush(); said, pending = new, ''\n"
    "    new = tok.decode(ids, skip_special_tokens=True)[len(head):]\n"
    "    out.write(pending + (new[len(said):] if new.startswith(said) else '') + '\\n')\n";

typedef struct {
    pid_t pid;
    int in, out, err; /* its stdin, stdout (-1: inherited), stderr */
} helper_proc;

/* Starts the helper with args, its stdout captured (capture) or inherited. 0, or -1 with msg. */
static int helper_start(const char *const *args, int capture, helper_proc *h, char *msg, size_t n) {
    int pin[2], pout[2], perr[2];
    if (pipe(pin) != 0 || pipe(pout) != 0 || pipe(perr) != 0) {
        snprintf(msg, n, "--tokenizer: cannot make a pipe: %s", strerror(errno));
        return -1;
    }
    const char *py = getenv("AUTOHET_PYTHON") ? getenv("AUTOHET_PYTHON") : "python3";
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(msg, n, "--tokenizer: cannot start %s: %s", py, strerror(errno));
        for (int i = 0; i < 2; i++)
            close(pin[i]), close(pout[i]), close(perr[i]);
        return -1;
    }
    if (pid == 0) {
        dup2(pin[0], 0);
        if (capture)
            dup2(pout[1], 1);
        dup2(perr[1], 2);
        for (int i = 0; i < 2; i++)
            close(pin[i]), close(pout[i]), close(perr[i]);
        char *argv[8] = {(char *)py, "-c", (char *)helper};
        for (int i = 0; args[i] && i < 4; i++)
            argv[3 + i] = (char *)args[i];
        execvp(py, argv);
        fprintf(stderr, "cannot run %s: %s\n", py, strerror(errno));
        _exit(2);
    }
    close(pin[0]), close(pout[1]), close(perr[1]);
    if (!capture)
        close(pout[0]);
    *h = (helper_proc){pid, pin[1], capture ? pout[0] : -1, perr[0]};
    return 0;
}

/* writes len bytes to the helper's stdin (a helper that died: ignored, its exit says why) */
static void helper_write(const helper_proc *h, const char *in, size_t len) {
    void (*old)(int) = signal(SIGPIPE, SIG_IGN);
    for (size_t off = 0; off < len;) {
        ssize_t w = write(h->in, in + off, len - off);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    signal(SIGPIPE, old);
}

/* Closes its stdin, reads its stdout into out (cap; when captured), waits. 0, or -1 with msg (the helper's
 * own line when it wrote one). */
static int helper_finish(helper_proc *h, char *out, size_t cap, char *msg, size_t n) {
    close(h->in);
    size_t got = 0;
    ssize_t r;
    while (h->out >= 0 && got + 1 < cap && (r = read(h->out, out + got, cap - 1 - got)) > 0)
        got += (size_t)r;
    if (h->out >= 0) {
        out[got] = '\0';
        close(h->out);
    }
    char line[1024] = "";
    ssize_t e = read(h->err, line, sizeof line - 1);
    line[e > 0 ? e : 0] = '\0';
    line[strcspn(line, "\n")] = '\0';
    close(h->err);
    int status = 0;
    waitpid(h->pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        snprintf(msg, n, "--tokenizer: %s", line[0] ? line : "the tokenizers helper failed");
        return -1;
    }
    return 0;
}

int cli_tokenizer_encode(const char *tokenizer_json, const char *text, int *out, int max, char *msg,
                         size_t n) {
    const char *args[] = {"encode", tokenizer_json, text, NULL};
    size_t cap = (size_t)max * 12 + 64;
    char *buf = malloc(cap);
    helper_proc h;
    if (buf == NULL || helper_start(args, 1, &h, msg, n) != 0 || helper_finish(&h, buf, cap, msg, n) != 0) {
        free(buf);
        return buf ? -1 : (snprintf(msg, n, "--prompt: out of memory"), -1);
    }
    int count = 0;
    for (char *p = buf; *p && count <= max;) {
        long v = strtol(p, &p, 10);
        if (count < max)
            out[count] = (int)v;
        count++;
        p += *p == ',';
    }
    free(buf);
    if (count == 0 || count > max) {
        snprintf(msg, n, "--prompt: %d tokens with %s (1 to %d)", count, tokenizer_json, max);
        return -1;
    }
    return count;
}

struct cli_text_stream {
    helper_proc h;
};

cli_text_stream *cli_tokenizer_stream_open(const char *tokenizer_json, const char *prompt, const int *ids,
                                           int n_prompt, char *msg, size_t n) {
    const char *args[] = {"stream", tokenizer_json, prompt, NULL};
    cli_text_stream *s = calloc(1, sizeof *s);
    char *in = malloc((size_t)n_prompt * 12 + 2);
    if (s == NULL || in == NULL)
        snprintf(msg, n, "--tokenizer: out of memory");
    if (s == NULL || in == NULL || helper_start(args, 0, &s->h, msg, n) != 0) {
        free(s);
        free(in);
        return NULL;
    }
    size_t len = 0;
    for (int i = 0; i < n_prompt; i++)
        len += (size_t)sprintf(in + len, "%s%d", i ? "," : "", ids[i]);
    in[len++] = '\n';
    helper_write(&s->h, in, len);
    free(in);
    return s;
}

void cli_tokenizer_stream_token(void *stream, int id) {
    char line[16];
    int len = snprintf(line, sizeof line, "%d\n", id);
    helper_write(&((cli_text_stream *)stream)->h, line, (size_t)len);
}

int cli_tokenizer_stream_close(cli_text_stream *s, int ok, char *msg, size_t n) {
    if (!ok) /* nothing of it on stdout: the helper writes the prompt with the first text */
        kill(s->h.pid, SIGKILL);
    int rc = helper_finish(&s->h, NULL, 0, msg, n);
    free(s);
    return rc;
}
