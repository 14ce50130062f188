/* Whole-file reading and JSON parsing with one-line errors (see json_file.h). */
#include "util/json_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void vput_err(char *err, size_t errlen, const char *name, const char *fmt, va_list ap) {
    if (err == NULL || errlen == 0)
        return;
    int n = snprintf(err, errlen, "%s: ", name != NULL ? name : "(null)");
    for (char *c = err; *c != '\0'; c++)
        if (*c == '\n' || *c == '\r')
            *c = ' ';
    if (n < 0 || (size_t)n >= errlen)
        return;
    vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
}

__attribute__((format(printf, 4, 5))) static void put_err(char *err, size_t errlen, const char *name,
                                                          const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vput_err(err, errlen, name, fmt, ap);
    va_end(ap);
}

int ah_fail(const ah_err_ctx *cx, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vput_err(cx->err, cx->errlen, cx->name, fmt, ap);
    va_end(ap);
    return -1;
}

int ah_open_regular(const char *path, uint64_t max_bytes, uint64_t *size, char *err, size_t errlen) {
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (path == NULL) {
        put_err(err, errlen, path, "no file given");
        return -1;
    }
    /* O_NONBLOCK: opening a FIFO without a writer would otherwise wait forever */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        put_err(err, errlen, path, "cannot open file (%s)", strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        put_err(err, errlen, path, "cannot stat file (%s)", strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        put_err(err, errlen, path, "not a regular file (%s)",
                S_ISDIR(st.st_mode)    ? "a directory"
                : S_ISFIFO(st.st_mode) ? "a FIFO"
                : S_ISCHR(st.st_mode)  ? "a character device"
                : S_ISBLK(st.st_mode)  ? "a block device"
                : S_ISSOCK(st.st_mode) ? "a socket"
                                       : "a special file");
        close(fd);
        return -1;
    }
    if ((uint64_t)st.st_size > max_bytes) {
        put_err(err, errlen, path, "file is larger than %llu bytes (%lld bytes)", (unsigned long long)max_bytes,
                (long long)st.st_size);
        close(fd);
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        put_err(err, errlen, path, "cannot read file (%s)", strerror(errno));
        close(fd);
        return -1;
    }
    if (size != NULL)
        *size = (uint64_t)st.st_size;
    return fd;
}

FILE *ah_fopen_regular(const char *path, uint64_t max_bytes, char *err, size_t errlen) {
    int fd = ah_open_regular(path, max_bytes, NULL, err, errlen);
    if (fd < 0)
        return NULL;
    FILE *f = fdopen(fd, "rb");
    if (f == NULL) {
        put_err(err, errlen, path, "cannot read file (%s)", strerror(errno));
        close(fd);
    }
    return f;
}

char *ah_read_text_file(const char *path, size_t max_bytes, size_t *len_out, char *err, size_t errlen) {
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (path == NULL || len_out == NULL) {
        put_err(err, errlen, path, "no file given");
        return NULL;
    }
    /* The buffer holds at most max_bytes + 1 bytes of data (one more than
     * allowed, to notice a file that grew past the limit since the size check)
     * plus the terminator. */
    if (max_bytes > SIZE_MAX / 2)
        max_bytes = SIZE_MAX / 2;
    FILE *f = ah_fopen_regular(path, max_bytes, err, errlen);
    if (f == NULL)
        return NULL;
    size_t cap = 0, len = 0;
    char *buf = NULL;
    for (;;) {
        if (len == cap) {
            if (len > max_bytes) {
                put_err(err, errlen, path, "file is larger than %zu bytes", max_bytes);
                break;
            }
            size_t want = cap ? 2 * cap : 4096;
            if (want > max_bytes + 1)
                want = max_bytes + 1;
            char *bigger = realloc(buf, want + 1);
            if (bigger == NULL) {
                put_err(err, errlen, path, "out of memory");
                break;
            }
            buf = bigger;
            cap = want;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) {
            if (ferror(f)) {
                put_err(err, errlen, path, "cannot read file (%s)", strerror(errno));
                break;
            }
            fclose(f);
            buf[len] = '\0';
            *len_out = len;
            return buf;
        }
    }
    fclose(f);
    free(buf);
    return NULL;
}

static int is_space(char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

/* Writes "NAME: malformed JSON near line L, column C<why>" for byte offset pos. */
static void syntax_error(char *err, size_t errlen, const char *name, const char *invalid, const char *text,
                         size_t pos, const char *why) {
    int line = 1, col = 1;
    for (size_t i = 0; i < pos; i++) {
        if (text[i] == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    put_err(err, errlen, name, "%s near line %d, column %d%s", invalid != NULL ? invalid : "malformed JSON",
            line, col, why);
}

/* Whether the parser, stopping at byte offset pos, ran out of text: it stopped
 * at the end, or in a string that is never closed (cJSON then reports the
 * start of the string). */
static int ran_off_end(const char *text, size_t len, size_t pos) {
    if (pos >= len)
        return 1;
    if (pos == 0 || text[pos - 1] != '"')
        return 0;
    for (size_t i = pos; i < len; i++) {
        if (text[i] == '"')
            return 0;
        if (text[i] == '\\')
            i++;
    }
    return 1;
}

cJSON *ah_json_parse_text(const char *name, const char *text, size_t len, int require_object,
                          const char *invalid, char *err, size_t errlen) {
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    const char *nul = memchr(text, '\0', len);
    if (nul != NULL) {
        syntax_error(err, errlen, name, invalid, text, (size_t)(nul - text),
                     " (NUL byte, not a JSON text file)");
        return NULL;
    }
    size_t skip = 0;
    while (skip < len && is_space(text[skip]))
        skip++;
    if (skip == len) {
        syntax_error(err, errlen, name, invalid, text, len, " (file is empty)");
        return NULL;
    }
    /* len + 1 takes in the terminator, so a parser that runs out of text
     * stops at offset len rather than at the last byte. */
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len + 1, &end, 0);
    size_t pos = end != NULL && end >= text && end <= text + len ? (size_t)(end - text) : len;
    if (root == NULL) {
        syntax_error(err, errlen, name, invalid, text, pos,
                     ran_off_end(text, len, pos) ? " (file looks truncated)" : "");
        return NULL;
    }
    while (pos < len && is_space(text[pos]))
        pos++;
    if (pos < len) {
        syntax_error(err, errlen, name, invalid, text, pos, " (unexpected data after the JSON document)");
        cJSON_Delete(root);
        return NULL;
    }
    if (require_object && !cJSON_IsObject(root)) {
        put_err(err, errlen, name, "top-level JSON value must be an object");
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

cJSON *ah_json_parse_file(const char *path, size_t max_bytes, int require_object, char *err, size_t errlen) {
    size_t len = 0;
    char *text = ah_read_text_file(path, max_bytes, &len, err, errlen);
    if (text == NULL)
        return NULL;
    cJSON *root = ah_json_parse_text(path, text, len, require_object, NULL, err, errlen);
    free(text);
    return root;
}

void ah_json_put_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)(s ? s : ""); *c; c++) {
        switch (*c) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (*c < 0x20)
                fprintf(f, "\\u%04x", (unsigned)*c);
            else
                fputc(*c, f);
        }
    }
    fputc('"', f);
}
