/* Atomic file output: a reader of PATH sees the old file or the whole new
 * one, never a partial write. Each writer writes PATH.tmp.PID next to the
 * target, fsyncs it, renames it over PATH and fsyncs the directory (best
 * effort: tmpfs has nothing to sync). The checkpoint sweep
 * (ah_ckpt_sweep) recognises that temporary name; keep it.
 *
 * Error messages are one line naming the file: "T: cannot open for
 * writing: E", "T: write failed: E", "PATH: cannot replace with T: E". */
#ifndef AH_UTIL_ATOMIC_FILE_H
#define AH_UTIL_ATOMIC_FILE_H

#include <stddef.h>
#include <stdio.h>

/* mkdir -p PATH (0755); 0 when it is a directory afterwards. A PATH that is a
 * symbolic link to a directory not made yet (a tier of `autohet run` across
 * hosts: RUN/memory/NODE points to the host's own path, which only a process
 * on that host makes) gets its target made, on this machine. */
int ah_mkdir_p(const char *path);

/* Writes `size` bytes to `path` atomically (a regular file). A target that
 * exists and is not a regular file (/dev/stdout, a FIFO, a device) is
 * written in place, never replaced. */
int ah_write_file_atomic(const char *path, const void *data, size_t size, char *err, size_t errlen);
/* The same for the concatenation of n parts (no staging copy). */
int ah_write_file_atomic_parts(const char *path, const void *const *parts, const size_t *sizes, int n,
                               char *err, size_t errlen);

/* A document written through stdio. "-" is standard output, and a target
 * that exists and is not a regular file (/dev/stdout, a FIFO) is written
 * directly; anything else atomically as above. */
typedef struct {
    FILE *f; /* write here between open and close */
    const char *path;
    char *tmp; /* the temporary file; NULL when writing directly */
    int is_stdout;
} ah_out_file;

/* Opens o->f for `path`. Returns 0, or -1 with the error written. */
int ah_out_open(ah_out_file *o, const char *path, char *err, size_t errlen);
/* Finishes the file: with ok, commits it (flush, fsync, close, rename) and
 * reports a write error; without, discards it. Returns 0 if committed. */
int ah_out_close(ah_out_file *o, int ok, char *err, size_t errlen);

/* Closes a stream written in place (a log appended step by step): flushes,
 * checks its error flag and fclose(). Returns 0, or -1 with "PATH: write
 * failed: E" written (the stream is closed either way). */
int ah_close_stream(FILE *f, const char *path, char *err, size_t errlen);

/* ah_out_open(), `text` and a newline, ah_out_close(). */
int ah_write_text_output(const char *path, const char *text, char *err, size_t errlen);

/* Copies the regular file `src` to `dst` through ah_out_open()/ah_out_close()
 * (streamed: a file of any size). Returns 0, or -1 with the error written. */
int ah_copy_file_atomic(const char *src, const char *dst, char *err, size_t errlen);

#endif
