/* A process's state and parent as the kernel reports them (/proc/PID/stat),
 * for the supervisors that tell a live process from a zombie or a gone one. */
#ifndef AH_UTIL_PROC_STAT_H
#define AH_UTIL_PROC_STAT_H

/* state: R, S, D, Z (a zombie), X (dead), ...; ppid: its parent. Either may be
 * NULL. Returns 0, or -1 when the process has no readable stat (gone). */
int ah_proc_stat(long pid, char *state, long *ppid);

#endif
