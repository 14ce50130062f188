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

int cli_tokenizer_check(const char *arg, int vocab, char *msg, size_t n) {
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
        snprintf(msg, n, "--tokenizer %s: token id %ld (\"%.40s\") is not below the model's vocabulary %d",
                 path, max, token, vocab);
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
 * print N_PROMPT PROMPT (ids on stdin) -> generated_text as transformers'
 * TextGenerationPipeline makes it (return_full_text). One line on stderr and
 * exit 2 for bad input. */
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
    "    ids = [int(x) for x in sys.stdin.read().split(',') if x]\n"
    "    n = int(sys.argv[3])\n"
    "    full = tok.decode(ids, skip_special_tokens=True)\n"
    "    head = tok.decode(ids[:n], skip_special_tokens=True)\n"
    "    sys.stdout.write(sys.argv[4] + full[len(head):] + '\\n')\n";

/* Runs the helper with args; feeds `in` (may be NULL) to its stdin; its
 * stdout into out (size cap; NULL: inherited). 0, or -1 with msg (the
 * helper's own line when it wrote one). */
static int run_helper(const char *const *args, const char *in, char *out, size_t cap, char *msg, size_t n) {
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
        if (out)
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
    void (*old)(int) = signal(SIGPIPE, SIG_IGN);
    size_t len = in ? strlen(in) : 0;
    for (size_t off = 0; off < len;) {
        ssize_t w = write(pin[1], in + off, len - off);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    close(pin[1]);
    signal(SIGPIPE, old);
    size_t got = 0;
    ssize_t r;
    while (out && got + 1 < cap && (r = read(pout[0], out + got, cap - 1 - got)) > 0)
        got += (size_t)r;
    if (out)
        out[got] = '\0';
    close(pout[0]);
    char line[1024] = "";
    ssize_t e = read(perr[0], line, sizeof line - 1);
    line[e > 0 ? e : 0] = '\0';
    line[strcspn(line, "\n")] = '\0';
    close(perr[0]);
    int status = 0;
    waitpid(pid, &status, 0);
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
    if (buf == NULL || run_helper(args, NULL, buf, cap, msg, n) != 0) {
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

int cli_tokenizer_print(const char *tokenizer_json, const char *prompt, const int *ids, int n_ids,
                        int n_prompt, char *msg, size_t n) {
    char np[16];
    snprintf(np, sizeof np, "%d", n_prompt);
    const char *args[] = {"print", tokenizer_json, np, prompt, NULL};
    char *in = malloc((size_t)n_ids * 12 + 1);
    if (in == NULL) {
        snprintf(msg, n, "--tokenizer: out of memory");
        return -1;
    }
    size_t len = 0;
    for (int i = 0; i < n_ids; i++)
        len += (size_t)sprintf(in + len, "%s%d", i ? "," : "", ids[i]);
    int rc = run_helper(args, in, NULL, 0, msg, n);
    free(in);
    return rc;
}
