/* Small shared helpers: one-line error messages and allocation that ends the
 * process with one line instead of returning NULL. */
#ifndef AUTOHET_UTIL_ERRORS_H
#define AUTOHET_UTIL_ERRORS_H
#include <stddef.h>

/* printf into err (if err and errlen allow it), newlines turned into spaces so
 * the message stays one line. */
void ah_errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* calloc/realloc that never return NULL (they end the process: ah_out_of_memory). */
void *ah_xcalloc(size_t n, size_t size);
void *ah_xrealloc(void *p, size_t size);

/* An allocation of `bytes` failed where no caller can recover (ah_xcalloc, the CPU backend's buffers):
 * one line on stderr, "autohet: out of memory (N bytes)" and the context of ah_oom_context, then exit
 * with its code (1, an internal failure, unless set). Never abort(): no core dump, no SIGABRT. */
_Noreturn void ah_out_of_memory(size_t bytes);
/* What the process is doing, for that line ("profile: model M, block at --tp 1 --mb 8"; NULL: nothing),
 * and the exit code it ends with (autohet profile: 2, the configuration does not fit this machine). */
void ah_oom_context(int exit_code, const char *context);

#endif
