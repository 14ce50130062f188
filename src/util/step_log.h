/* A metrics log (JSONL, one `{"step": N, ...}` object a line) continued by a
 * resumed run: the lines of steps it will train again are cut off first, so
 * that the log holds every step once. */
#ifndef AUTOHET_UTIL_STEP_LOG_H
#define AUTOHET_UTIL_STEP_LOG_H
#include <stdio.h>

/* f open for reading and appending ("a+"): keeps the whole lines from the
 * start up to the first whose step is beyond `step` (or a torn last line),
 * cuts the file there, and leaves f at its end. Returns the lines kept, or
 * -1 (errno set) when the file cannot be cut. */
int ah_step_log_keep_through(FILE *f, int step);
/* The step a line of the log is of ("step": N), or -1: the one reading of it (autohet run's copy of its
 * generations' logs, a resumed controller's last step, the cut above). */
int ah_step_log_line_step(const char *line);

#endif
