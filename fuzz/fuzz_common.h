/* Shared by the libFuzzer harnesses (fuzz/README.md): every parser of autohet
 * reads a file, so a harness writes its input to a file of its own temporary
 * directory (under /dev/shm when there is one) and calls the loader on it. */
#ifndef AH_FUZZ_COMMON_H
#define AH_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* the harness's temporary directory, made on first use and kept for the process */
static inline const char *fuzz_dir(void) {
    static char dir[64];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "%s/ahfuzz_XXXXXX", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
        if (!mkdtemp(dir))
            abort();
    }
    return dir;
}

/* writes data to fuzz_dir()/name and returns the path (static storage) */
static inline const char *fuzz_write(const char *name, const uint8_t *data, size_t size) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
    FILE *f = fopen(path, "wb");
    if (!f)
        abort();
    if (size && fwrite(data, 1, size, f) != size)
        abort();
    fclose(f);
    return path;
}

/* the input as a NUL-terminated string (free() it) */
static inline char *fuzz_string(const uint8_t *data, size_t size) {
    char *s = malloc(size + 1);
    if (!s)
        abort();
    memcpy(s, data, size);
    s[size] = 0;
    return s;
}

/* stdout to /dev/null, once: harnesses that drive a whole subcommand (it prints tables) */
static inline void fuzz_quiet_stdout(void) {
    static int quiet;
    if (!quiet && !freopen("/dev/null", "w", stdout))
        abort();
    quiet = 1;
}

#endif
