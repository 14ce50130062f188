/* export --tokenizer (cli_tokenizer.h). */
#include "cli/cli_tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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
