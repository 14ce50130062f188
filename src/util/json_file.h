/* Internal: read a whole file, and parse a JSON file, with one-line errors
 * that name the file. Shared by every module that loads JSON input; ah_fail()
 * writes the same kind of error for a loader's own checks.
 *
 * Every error is written as one line "NAME: message" into err (when err is
 * not NULL and errlen > 0; it is cut short to fit and stays terminated).
 * NAME is the path (or the name given to ah_json_parse_text); line breaks in
 * it are written as spaces. The messages are:
 *   cannot open file (<strerror>)
 *   not a regular file (a FIFO | a directory | a character device | ...)
 *   cannot read file (<strerror>)
 *   file is larger than N bytes
 *   out of memory
 *   malformed JSON near line L, column C
 *     followed by " (file looks truncated)" when the parser ran out of text
 *     (stopped at the end, or in a string that is never closed),
 *     " (file is empty)" when the text holds only white space,
 *     " (unexpected data after the JSON document)" when a complete value is
 *     followed by more than white space, or " (NUL byte, not a JSON text
 *     file)" when the text holds a NUL byte
 *   top-level JSON value must be an object */
#ifndef AH_UTIL_JSON_FILE_H
#define AH_UTIL_JSON_FILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

/* Where a loader writes its errors: each is one line "NAME: message" in
 * err[errlen] (nothing when err is NULL or errlen is 0). */
typedef struct {
    const char *name; /* the file path, or whatever names the input */
    char *err;
    size_t errlen;
} ah_err_ctx;

/* Writes "NAME: message" as one line (line breaks in NAME become spaces, the
 * text is cut short to fit). Always returns -1. */
int ah_fail(const ah_err_ctx *cx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The one place an input file is opened: refuses what is not a regular file
 * (a FIFO, /dev/zero, a directory: these would block forever or never end)
 * and a file of more than max_bytes bytes, before reading anything. Returns
 * an fd open for reading (blocking) and its size in *size (may be NULL), or
 * -1 with "PATH: cannot open file (...)", "PATH: not a regular file (a
 * FIFO)" or "PATH: file is larger than N bytes (M bytes)" written. */
int ah_open_regular(const char *path, uint64_t max_bytes, uint64_t *size, char *err, size_t errlen);
/* ah_open_regular() as a stdio stream (fclose() it), or NULL with err. */
FILE *ah_fopen_regular(const char *path, uint64_t max_bytes, char *err, size_t errlen);

/* Reads the whole file at `path` into a NUL-terminated heap buffer (free()
 * it) and stores its length (without the terminator) in *len. A file of more
 * than max_bytes bytes is an error. Returns NULL with the error written. */
char *ah_read_text_file(const char *path, size_t max_bytes, size_t *len, char *err, size_t errlen);

/* Parses text[0..len) as exactly one JSON value; text[len] must be '\0'.
 * With require_object, a top-level value other than an object is an error.
 * Errors name `name`; a syntax error begins with `invalid` in place of
 * "malformed JSON" when that is not NULL. Returns the value (cJSON_Delete()
 * it) or NULL with the error written. */
cJSON *ah_json_parse_text(const char *name, const char *text, size_t len, int require_object,
                          const char *invalid, char *err, size_t errlen);

/* ah_read_text_file() and then ah_json_parse_text() naming the path. */
cJSON *ah_json_parse_file(const char *path, size_t max_bytes, int require_object, char *err, size_t errlen);

/* Writes s as a JSON string (quoted, escaped; NULL as "") to f: the streaming writers of large
 * documents (simulator and engine traces), which do not build a cJSON tree. */
void ah_json_put_string(FILE *f, const char *s);

#endif
