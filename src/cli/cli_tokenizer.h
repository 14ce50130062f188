/* export --tokenizer: a Hugging Face tokenizer beside exported weights, so
 * that transformers loads the directory as is (docs/data.md, "Export"). */
#ifndef AUTOHET_CLI_TOKENIZER_H
#define AUTOHET_CLI_TOKENIZER_H
#include <stddef.h>

/* The tokenizer files of `arg` (a tokenizer.json, or a directory holding one
 * and, optionally, tokenizer_config.json, special_tokens_map.json,
 * added_tokens.json, vocab.json, merges.txt, tokenizer.model), checked: the
 * tokenizer.json is a JSON object with a "model" object and no token id at or
 * above vocab (msg names both vocabularies and the model). 0, or -1 with one
 * line in msg. */
int cli_tokenizer_check(const char *arg, int vocab, const char *model, char *msg, size_t n);
/* Copies the files into out; writes a tokenizer_config.json
 * ({"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": ...})
 * when arg has none. max_positions 0: no model_max_length. 0, or -1 with msg. */
int cli_tokenizer_export(const char *arg, const char *out, int max_positions, char *msg, size_t n);
/* generate --prompt: the ids Hugging Face tokenizers' Tokenizer.encode(text)
 * gives (python3 with tokenizers, or $AUTOHET_PYTHON), at most max of them
 * into out. The count, or -1 with one line in msg. */
int cli_tokenizer_encode(const char *tokenizer_json, const char *text, int *out, int max, char *msg,
                         size_t n);
/* generate --prompt, as the tokens come: a transformers text-generation
 * pipeline's generated_text on stdout (the prompt, then the decoded ids,
 * special tokens skipped, past the decoded prompt ids), written as each id
 * arrives (the prompt with the first text) and a newline at the close.
 * open: the prompt's n_prompt ids (NULL with one line in msg); token: one
 * sampled id (an ah_gen_config on_token); close: waits for the text to be
 * out, or (ok 0: generation failed) stops the helper before it writes more.
 * 0, or -1 with one line in msg. */
typedef struct cli_text_stream cli_text_stream;
cli_text_stream *cli_tokenizer_stream_open(const char *tokenizer_json, const char *prompt, const int *ids,
                                           int n_prompt, char *msg, size_t n);
void cli_tokenizer_stream_token(void *stream, int id);
int cli_tokenizer_stream_close(cli_text_stream *s, int ok, char *msg, size_t n);

#endif
