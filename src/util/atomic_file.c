/* Atomic file output (util/atomic_file.h). */
#include "util/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/errors.h"

#define set_err ah_errf

static int fsync_dir_of(const char *path) {
    char *copy = strdup(path);
    if (!copy)
        abort();
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
    free(copy);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

/* PATH.tmp.PID on the heap (free it), or NULL with the error written. */
static char *tmp_name(const char *path, char *err, size_t errlen) {
    size_t n = strlen(path) + 32;
    char *tmp = malloc(n);
    if (!tmp)
        set_err(err, errlen, "%s: out of memory", path);
    else
        snprintf(tmp, n, "%s.tmp.%ld", path, (long)getpid());
    return tmp;
}

/* Renames the synced temporary file over path and makes that durable. */
static int commit(const char *tmp, const char *path, char *err, size_t errlen) {
    if (rename(tmp, path) != 0) {
        set_err(err, errlen, "%s: cannot replace with %s: %s", path, tmp, strerror(errno));
        unlink(tmp);
        return -1;
    }
    fsync_dir_of(path); /* best effort (tmpfs has nothing to sync) */
    return 0;
}

static int write_all(int fd, const char *p, size_t left) {
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        left -= (size_t)w;
    }
    return 0;
}

int ah_write_file_atomic(const char *path, const void *data, size_t size, char *err, size_t errlen) {
    return ah_write_file_atomic_parts(path, &data, &size, 1, err, errlen);
}

/* A target that exists and is not a regular file (/dev/stdout, a FIFO, a
 * device) is written in place: a rename would replace the device node. */
static int write_parts_direct(const char *path, const void *const *parts, const size_t *sizes, int n,
                              char *err, size_t errlen) {
    int fd = open(path, O_WRONLY);
    if (fd < 0) {
        set_err(err, errlen, "%s: cannot open for writing: %s", path, strerror(errno));
        return -1;
    }
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++)
        rc = write_all(fd, parts[i], sizes[i]);
    int saved = errno;
    if (close(fd) != 0 && rc == 0) {
        rc = -1;
        saved = errno;
    }
    if (rc != 0)
        set_err(err, errlen, "%s: write failed: %s", path, strerror(saved));
    return rc;
}

int ah_write_file_atomic_parts(const char *path, const void *const *parts, const size_t *sizes, int n,
                               char *err, size_t errlen) {
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
        return write_parts_direct(path, parts, sizes, n, err, errlen);
    char *tmp = tmp_name(path, err, errlen);
    if (!tmp)
        return -1;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        set_err(err, errlen, "%s: cannot open for writing: %s", tmp, strerror(errno));
        free(tmp);
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (write_all(fd, parts[i], sizes[i]) != 0) {
            set_err(err, errlen, "%s: write failed: %s", tmp, strerror(errno));
            close(fd);
            unlink(tmp);
            free(tmp);
            return -1;
        }
    if (fsync(fd) != 0 || close(fd) != 0) {
        set_err(err, errlen, "%s: write failed: %s", tmp, strerror(errno));
        unlink(tmp);
        free(tmp);
        return -1;
    }
    int rc = commit(tmp, path, err, errlen);
    free(tmp);
    return rc;
}

int ah_out_open(ah_out_file *o, const char *path, char *err, size_t errlen) {
    memset(o, 0, sizeof *o);
    o->path = path;
    if (!path || !*path) {
        set_err(err, errlen, "no output path given");
        return -1;
    }
    if (strcmp(path, "-") == 0) {
        o->f = stdout;
        o->is_stdout = 1;
        return 0;
    }
    struct stat st;
    int direct = stat(path, &st) == 0 && !S_ISREG(st.st_mode);
    if (!direct && !(o->tmp = tmp_name(path, err, errlen)))
        return -1;
    const char *target = o->tmp ? o->tmp : path;
    o->f = fopen(target, "w");
    if (!o->f) {
        set_err(err, errlen, "%s: cannot open for writing: %s", target, strerror(errno));
        free(o->tmp);
        o->tmp = NULL;
        return -1;
    }
    return 0;
}

int ah_out_close(ah_out_file *o, int ok, char *err, size_t errlen) {
    if (o->is_stdout) {
        if (fflush(stdout) != 0 || ferror(stdout)) {
            if (ok)
                set_err(err, errlen, "-: cannot write to standard output: %s", strerror(errno));
            return -1;
        }
        return ok ? 0 : -1;
    }
    const char *target = o->tmp ? o->tmp : o->path;
    int werr = fflush(o->f) != 0 || ferror(o->f) || (o->tmp && fsync(fileno(o->f)) != 0);
    int saved = errno;
    if (fclose(o->f) != 0 && !werr) {
        werr = 1;
        saved = errno;
    }
    o->f = NULL;
    if (ok && werr) {
        set_err(err, errlen, "%s: write failed: %s", target, strerror(saved));
        ok = 0;
    }
    if (ok && o->tmp && commit(o->tmp, o->path, err, errlen) != 0)
        ok = 0;
    if (!ok && o->tmp)
        unlink(o->tmp);
    free(o->tmp);
    o->tmp = NULL;
    return ok ? 0 : -1;
}

int ah_close_stream(FILE *f, const char *path, char *err, size_t errlen) {
    int saved = 0, bad = fflush(f) != 0;
    if (bad)
        saved = errno;
    bad |= ferror(f) != 0; /* an earlier write failed: its errno is gone */
    if (fclose(f) != 0 && !bad) {
        bad = 1;
        saved = errno;
    }
    if (bad && saved)
        set_err(err, errlen, "%s: write failed: %s", path, strerror(saved));
    else if (bad)
        set_err(err, errlen, "%s: write failed", path);
    return bad ? -1 : 0;
}

int ah_write_text_output(const char *path, const char *text, char *err, size_t errlen) {
    ah_out_file o;
    if (ah_out_open(&o, path, err, errlen) < 0)
        return -1;
    int ok = fputs(text, o.f) != EOF && fputc('\n', o.f) != EOF;
    if (!ok && o.is_stdout)
        set_err(err, errlen, "-: cannot write to standard output: %s", strerror(errno));
    else if (!ok)
        set_err(err, errlen, "%s: write failed: %s", o.tmp ? o.tmp : path, strerror(errno));
    return ah_out_close(&o, ok, err, errlen) == 0 && ok ? 0 : -1;
}

int ah_copy_file_atomic(const char *src, const char *dst, char *err, size_t errlen) {
    FILE *in = fopen(src, "rb");
    if (!in) {
        set_err(err, errlen, "%s: cannot open: %s", src, strerror(errno));
        return -1;
    }
    ah_out_file o;
    if (ah_out_open(&o, dst, err, errlen) < 0) {
        fclose(in);
        return -1;
    }
    char buf[1 << 16];
    size_t k;
    int ok = 1;
    while (ok && (k = fread(buf, 1, sizeof buf, in)) > 0)
        ok = fwrite(buf, 1, k, o.f) == k;
    if (ok && ferror(in)) {
        set_err(err, errlen, "%s: read failed", src);
        ok = 0;
    } else if (!ok) {
        set_err(err, errlen, "%s: write failed: %s", o.tmp ? o.tmp : dst, strerror(errno));
    }
    fclose(in);
    return ah_out_close(&o, ok, err, errlen) == 0 && ok ? 0 : -1;
}

static int mkdir_parents(const char *path) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(tmp, 0755);
            *p = '/';
        }
    return mkdir(tmp, 0755) == 0 || errno == EEXIST ? 0 : -1;
}

int ah_mkdir_p(const char *path) {
    struct stat sb;
    if (mkdir_parents(path) != 0)
        return -1;
    if (stat(path, &sb) == 0)
        return S_ISDIR(sb.st_mode) ? 0 : -1;
    char target[4096];
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n <= 0 || target[0] != '/') /* (the run's links are absolute) */
        return -1;
    target[n] = 0;
    return mkdir_parents(target) == 0 && stat(path, &sb) == 0 && S_ISDIR(sb.st_mode) ? 0 : -1;
}
