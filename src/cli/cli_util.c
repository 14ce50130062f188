/* Helpers shared by the subcommands (cli.h): one-line bad-input errors,
 * strict option values, output paths checked before any work. Apart from
 * main.c so that the fuzz harnesses can link the commands. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "autohet/plan.h"
#include "cli/cli.h"

int cli_bad_input(const char *cmd, const char *msg) {
    fprintf(stderr, "autohet %s: %s\n", cmd, msg);
    return AH_EXIT_BAD_INPUT;
}

int cli_wants_help(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
            return 1;
    return 0;
}

int cli_unknown_option(const char *cmd, const char *arg, char *msg, size_t n) {
    snprintf(msg, n, "unknown or incomplete option '%s' (see autohet %s --help)", arg, cmd);
    return -1;
}

int cli_int_value(const char *flag, const char *value, int min, int *out, char *msg, size_t n) {
    if (cli_parse_int(value, out) == 0 && *out >= min)
        return 0;
    snprintf(msg, n, "%s '%s': expected an integer >= %d", flag, value, min);
    return -1;
}

int cli_mpi_fail_all(const char *cmd, int rank, const char *msg) {
    if (rank == 0)
        fprintf(stderr, "autohet %s: %s\n", cmd, msg);
    MPI_Finalize();
    return AH_EXIT_BAD_INPUT;
}

int cli_long_options(const char *spec, cli_options *o) {
    snprintf(o->names, sizeof o->names, "%s", spec);
    int n = 0;
    for (char *save = NULL, *tok = strtok_r(o->names, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        char *mark = strpbrk(tok, "=!");
        if (!mark || !mark[1] || n == CLI_MAX_OPTIONS)
            return -1;
        o->opts[n++] = (struct option){tok, *mark == '=' ? required_argument : no_argument, 0, mark[1]};
        *mark = 0;
    }
    o->opts[n] = (struct option){0, 0, 0, 0};
    return n;
}

int cli_parse_int(const char *s, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < -2147483647L || v > 2147483647L)
        return -1;
    *out = (int)v;
    return 0;
}

int cli_parse_int_list(const char *s, int *out, int max) {
    int n = 0;
    const char *p = s;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[32];
        if (len == 0 || len >= sizeof item || n == max)
            return -1; /* an empty item ("1,,2", a trailing comma) is an error, not skipped */
        memcpy(item, p, len);
        item[len] = 0;
        if (cli_parse_int(item, &out[n]) != 0)
            return -1;
        n++;
        if (!comma)
            return n;
        p = comma + 1;
    }
}

int cli_parse_double(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v)) /* inf and nan are no option's value */
        return -1;
    *out = v;
    return 0;
}

/* the directory part of path ("." for a bare name) */
static void parent_of(const char *path, char *out, size_t n) {
    snprintf(out, n, "%s", path);
    char *slash = strrchr(out, '/');
    if (!slash)
        snprintf(out, n, ".");
    else if (slash == out)
        out[1] = 0;
    else
        *slash = 0;
}

/* access() says yes to root everywhere but on a read-only file system: a
 * file is made next to the target (as the atomic writer does) and removed.
 * A target that exists and is not a regular file (a FIFO, /dev/stdout) is
 * written in place and not probed. */
static int probe_create(const char *flag, const char *path, const char *dir, char *msg, size_t n) {
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
        return 0;
    char probe[4200];
    snprintf(probe, sizeof probe, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0 && errno != EEXIST) {
        snprintf(msg, n, "%s '%s': cannot create a file in %s (%s)", flag, path, dir, strerror(errno));
        return -1;
    }
    if (fd >= 0) {
        close(fd);
        unlink(probe);
    }
    return 0;
}

int cli_check_output(const char *flag, const char *path, char *msg, size_t n) {
    char dir[4096];
    struct stat sb;
    if (!path)
        return 0;
    parent_of(path, dir, sizeof dir);
    if (!path[0] || (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))) {
        snprintf(msg, n, "%s '%s': is a directory, expected a file to write", flag, path);
        return -1;
    }
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode) || access(dir, W_OK | X_OK) != 0) {
        snprintf(msg, n, "%s '%s': %s is not a writable directory", flag, path, dir);
        return -1;
    }
    if (access(path, F_OK) == 0 && access(path, W_OK) != 0) {
        snprintf(msg, n, "%s '%s': the file is not writable", flag, path);
        return -1;
    }
    return probe_create(flag, path, dir, msg, n);
}

int cli_check_output_dir(const char *flag, const char *path, int create, char *msg, size_t n) {
    char dir[4096];
    struct stat sb;
    if (!path)
        return 0;
    if (stat(path, &sb) == 0) {
        if (!S_ISDIR(sb.st_mode) || access(path, W_OK | X_OK) != 0) {
            snprintf(msg, n, "%s '%s': not a writable directory", flag, path);
            return -1;
        }
        return 0;
    }
    parent_of(path, dir, sizeof dir);
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode) || access(dir, W_OK | X_OK) != 0) {
        snprintf(msg, n, "%s '%s': %s is not a writable directory (only the last component is created)", flag,
                 path, dir);
        return -1;
    }
    if (create && mkdir(path, 0755) != 0 && errno != EEXIST) {
        snprintf(msg, n, "%s '%s': cannot create (%s)", flag, path, strerror(errno));
        return -1;
    }
    return 0;
}

int cli_check_list(const char *flag, const char *value, char *msg, size_t n) {
    if (!value)
        return 0;
    size_t len = strlen(value);
    if (len == 0 || value[0] == ',' || value[len - 1] == ',' || strstr(value, ",,")) {
        snprintf(msg, n, "%s '%s': expected a comma-separated list without empty items", flag, value);
        return -1;
    }
    return 0;
}

void cli_calibration_link_note(const char *cmd, const char *path, int fitted_measured) {
    fprintf(stderr,
            "autohet %s: %s: its bandwidth fractions correct %s links, not the %s ones used here: transfers get "
            "all of each link (its latency applies)\n",
            cmd, path, fitted_measured ? "measured" : "datasheet", fitted_measured ? "datasheet" : "measured");
}

void cli_calibration_scope_note(const char *cmd, const char *path, const char *fitted, const char *used) {
    fprintf(stderr,
            "autohet %s: %s: its device scales correct the profile of %s, not that of %s (the profile is the "
            "model's): only its pipeline terms apply\n",
            cmd, path, fitted[0] ? fitted : "the analytic model", used[0] ? used : "the analytic model");
}
