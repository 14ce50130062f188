/* /proc/PID/stat reader (util/proc_stat.h). */
#include "util/proc_stat.h"

#include <stdio.h>
#include <string.h>

int ah_proc_stat(long pid, char *state, long *ppid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    /* "pid (comm) S ppid ...": comm may hold spaces and parentheses, so the fields follow the last ')' */
    const char *close = strrchr(buf, ')');
    char st;
    long pp;
    if (!close || sscanf(close + 1, " %c %ld", &st, &pp) != 2)
        return -1;
    if (state)
        *state = st;
    if (ppid)
        *ppid = pp;
    return 0;
}
