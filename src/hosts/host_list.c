/* Host lists: Open MPI hostfiles and Slurm's compressed node lists. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "autohet/hosts.h"
#include "util/errors.h"
#include "util/json_file.h"

#define MAX_HOSTFILE_BYTES (4u << 20)
#define MAX_SLOTS 1000000

void ah_host_list_free(ah_host_list *l) {
    if (l == NULL)
        return;
    free(l->hosts);
    l->hosts = NULL;
    l->n = 0;
}

static void list_init(ah_host_list *l, const char *source) {
    l->hosts = NULL;
    l->n = 0;
    snprintf(l->source, sizeof l->source, "%s", source ? source : "(hosts)");
}

/* Appends a host (the name already checked); 0, or -1 when the list is full. */
static int list_add(ah_host_list *l, int *cap, const char *name, size_t len, int slots, int line) {
    if (l->n >= AH_MAX_HOSTS)
        return -1;
    if (l->n == *cap) {
        int grown = *cap ? *cap * 2 : 16;
        ah_host *h = ah_xrealloc(l->hosts, (size_t)grown * sizeof *h);
        l->hosts = h;
        *cap = grown;
    }
    ah_host *h = &l->hosts[l->n++];
    memset(h, 0, sizeof *h);
    snprintf(h->name, sizeof h->name, "%.*s", (int)len, name);
    h->slots = slots;
    h->line = line;
    return 0;
}

static const ah_host *sort_base;

static int by_name_then_index(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    int c = strcasecmp(sort_base[i].name, sort_base[j].name);
    return c ? c : (i > j) - (i < j);
}

/* The first host (in list order) whose name (ignoring case) an earlier host
 * has: 1 with *later and *earlier set, else 0. Sorted, so that a list of
 * 65536 hosts is checked in O(n log n). */
static int first_repeat(const ah_host_list *l, int *later, int *earlier) {
    int *idx = ah_xcalloc((size_t)(l->n > 0 ? l->n : 1), sizeof *idx);
    for (int i = 0; i < l->n; i++)
        idx[i] = i;
    sort_base = l->hosts;
    qsort(idx, (size_t)l->n, sizeof *idx, by_name_then_index);
    *later = -1;
    for (int i = 1, group = 0; i < l->n; i++) {
        if (strcasecmp(l->hosts[idx[i]].name, l->hosts[idx[group]].name) != 0) {
            group = i;
            continue;
        }
        if (*later < 0 || idx[i] < *later) {
            *later = idx[i];
            *earlier = idx[group];
        }
    }
    free(idx);
    return *later >= 0;
}

/* ------------------------------------------------------------ hostfiles */

/* "slots=N" and its kin on one hostfile line: sets *slots or *max_slots;
 * 0, or -1 with the reason in why. */
static int parse_attr(const char *word, int *slots, int *max_slots, char *why, size_t n) {
    const char *eq = strchr(word, '=');
    if (eq == NULL) {
        snprintf(why, n, "'%.60s': expected KEY=VALUE (slots=N or max_slots=N)", word);
        return -1;
    }
    size_t klen = (size_t)(eq - word);
    int *out = NULL;
    if ((klen == 5 && strncmp(word, "slots", 5) == 0) || (klen == 5 && strncmp(word, "count", 5) == 0))
        out = slots;
    else if (klen == 9 && (strncmp(word, "max_slots", 9) == 0 || strncmp(word, "max-slots", 9) == 0))
        out = max_slots;
    if (out == NULL) {
        snprintf(why, n, "'%.60s': unknown attribute '%.*s' (expected slots or max_slots)", word, (int)klen, word);
        return -1;
    }
    char *end;
    errno = 0;
    long v = strtol(eq + 1, &end, 10);
    if (eq[1] == '\0' || *end != '\0' || errno != 0 || v < 1 || v > MAX_SLOTS) {
        snprintf(why, n, "'%.60s': %.*s must be an integer between 1 and %d", word, (int)klen, word, MAX_SLOTS);
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* One line (comment cut off) of a hostfile; 0, or -1 with the reason in why. */
static int parse_line(ah_host_list *l, int *cap, char *text, int line, char *why, size_t n) {
    char *save = NULL, *name = strtok_r(text, " \t\r\v\f", &save);
    if (name == NULL)
        return 0; /* blank */
    char problem[96];
    if (ah_host_name_problem(name, problem, sizeof problem)) {
        snprintf(why, n, "host '%.64s': %s", name, problem);
        return -1;
    }
    int slots = 0, max_slots = 0;
    for (char *w = strtok_r(NULL, " \t\r\v\f", &save); w != NULL; w = strtok_r(NULL, " \t\r\v\f", &save))
        if (parse_attr(w, &slots, &max_slots, why, n))
            return -1;
    if (max_slots && slots > max_slots) {
        snprintf(why, n, "host '%s': slots=%d is more than max_slots=%d", name, slots, max_slots);
        return -1;
    }
    if (slots == 0)
        slots = max_slots;
    if (list_add(l, cap, name, strlen(name), slots, line)) {
        snprintf(why, n, "more than %d hosts", AH_MAX_HOSTS);
        return -1;
    }
    return 0;
}

int ah_hostfile_parse(const char *text, const char *source, ah_host_list *out, char *err, size_t errlen) {
    list_init(out, source);
    int cap = 0, line = 1;
    const char *p = text ? text : "";
    while (*p) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        char *buf = ah_xcalloc(len + 1, 1);
        memcpy(buf, p, len);
        buf[len] = '\0';
        char *hash = strchr(buf, '#');
        if (hash)
            *hash = '\0';
        char why[256];
        int rc = parse_line(out, &cap, buf, line, why, sizeof why);
        free(buf);
        if (rc) {
            ah_errf(err, errlen, "%s:%d: %s", out->source, line, why);
            ah_host_list_free(out);
            return -1;
        }
        if (!eol)
            break;
        p = eol + 1;
        line++;
    }
    if (out->n == 0) {
        ah_errf(err, errlen, "%s: no hosts (one a line: 'NAME slots=N')", out->source);
        return -1;
    }
    int later, earlier;
    if (first_repeat(out, &later, &earlier)) {
        ah_errf(err, errlen,
                "%s:%d: host '%s' is already on line %d (one line a host: the order maps plan nodes to hosts)",
                out->source, out->hosts[later].line, out->hosts[later].name, out->hosts[earlier].line);
        ah_host_list_free(out);
        return -1;
    }
    return 0;
}

int ah_hostfile_load(const char *path, ah_host_list *out, char *err, size_t errlen) {
    list_init(out, path);
    size_t len = 0;
    char *text = ah_read_text_file(path, MAX_HOSTFILE_BYTES, &len, err, errlen);
    if (text == NULL)
        return -1;
    int rc = -1;
    if (memchr(text, '\0', len) != NULL)
        ah_errf(err, errlen, "%s: a NUL byte: not a text hostfile", path);
    else
        rc = ah_hostfile_parse(text, path, out, err, errlen);
    free(text);
    return rc;
}

/* ------------------------------------------------------ Slurm node lists */

typedef struct {
    const char *list, *source;
    ah_host_list *out;
    int cap;
    char *err;
    size_t errlen;
} slurm_ctx;

static int slurm_fail(const slurm_ctx *s, const char *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int slurm_fail(const slurm_ctx *s, const char *at, const char *fmt, ...) {
    char why[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    ah_errf(s->err, s->errlen, "%s '%.120s': %s at character %d", s->source, s->list, why,
            (int)(at - s->list) + 1);
    return -1;
}

#define MAX_DIGITS 9 /* a range bound of at most 9 digits: exact in a long, and short enough to print */

/* A run of digits: its value and length; -1 if none, -2 if longer than MAX_DIGITS. */
static long digits(const char **p, int *width) {
    const char *q = *p;
    long v = 0;
    while (isdigit((unsigned char)*q) && q - *p < MAX_DIGITS + 1)
        v = v * 10 + (*q++ - '0');
    *width = (int)(q - *p);
    if (*width == 0)
        return -1;
    if (*width > MAX_DIGITS)
        return -2;
    *p = q;
    return v;
}

/* Expands the name [b, e) whose bracket groups are still to do, with the
 * text before b already in prefix; appends every host it makes. */
static int expand(slurm_ctx *s, const char *b, const char *e, char *prefix, size_t plen) {
    const char *open = memchr(b, '[', (size_t)(e - b));
    const char *stop = open ? open : e;
    size_t add = (size_t)(stop - b);
    if (plen + add > 63)
        return slurm_fail(s, b, "host name longer than 63 characters");
    memcpy(prefix + plen, b, add);
    plen += add;
    prefix[plen] = '\0';
    if (open == NULL) {
        char problem[96];
        if (plen == 0)
            return slurm_fail(s, b, "empty host name");
        if (ah_host_name_problem(prefix, problem, sizeof problem))
            return slurm_fail(s, b, "host '%s': %s", prefix, problem);
        if (list_add(s->out, &s->cap, prefix, plen, 0, 0))
            return slurm_fail(s, b, "more than %d hosts", AH_MAX_HOSTS);
        return 0;
    }
    const char *close = memchr(open, ']', (size_t)(e - open));
    if (close == NULL)
        return slurm_fail(s, open, "'[' without ']'");
    for (const char *p = open + 1;;) {
        const char *at = p;
        int w1, w2 = 0;
        long lo = digits(&p, &w1), hi = lo;
        if (lo < 0)
            return slurm_fail(s, at, lo == -1 ? "expected a number in '[...]'" : "a number of more than 9 digits");
        if (*p == '-') {
            p++;
            hi = digits(&p, &w2);
            if (hi < 0)
                return slurm_fail(s, p, hi == -1 ? "expected a number after '-'" : "a number of more than 9 digits");
            if (hi < lo)
                return slurm_fail(s, at, "range %ld-%ld goes down", lo, hi);
        }
        if (*p != ',' && *p != ']')
            return slurm_fail(s, p, "unexpected '%c' in '[...]'", *p);
        if (hi - lo >= AH_MAX_HOSTS)
            return slurm_fail(s, at, "range of more than %d hosts", AH_MAX_HOSTS);
        for (long v = lo; v <= hi; v++) {
            char num[24];
            int len = snprintf(num, sizeof num, "%0*ld", w1, v); /* at most 9 digits: fits */
            if (len < 0 || (size_t)len >= sizeof num || plen + (size_t)len > 63)
                return slurm_fail(s, at, "host name longer than 63 characters");
            memcpy(prefix + plen, num, (size_t)len + 1);
            if (expand(s, close + 1, e, prefix, plen + (size_t)len))
                return -1;
        }
        if (*p == ']')
            break;
        p++;
    }
    return 0;
}

/* The end of the name at p: the first comma outside brackets, or the end
 * of the list; NULL after an error about the brackets. */
static const char *name_end(const slurm_ctx *s, const char *p) {
    int depth = 0;
    for (; *p && (depth > 0 || *p != ','); p++) {
        if (*p == '[' && depth++ > 0) {
            slurm_fail(s, p, "nested '['");
            return NULL;
        }
        if (*p == ']' && depth-- == 0) {
            slurm_fail(s, p, "']' without '['");
            return NULL;
        }
    }
    return p;
}

int ah_slurm_nodelist_parse(const char *list, const char *source, ah_host_list *out, char *err, size_t errlen) {
    list_init(out, source ? source : "SLURM_JOB_NODELIST");
    slurm_ctx s = {list ? list : "", out->source, out, 0, err, errlen};
    const char *p = s.list;
    for (;;) {
        const char *e = name_end(&s, p);
        char prefix[64];
        int rc = e == NULL ? -1 : e == p ? slurm_fail(&s, p, "empty host name") : expand(&s, p, e, prefix, 0);
        if (rc) {
            ah_host_list_free(out);
            return -1;
        }
        if (*e == '\0')
            break;
        p = e + 1;
    }
    int later, earlier;
    if (first_repeat(out, &later, &earlier)) {
        ah_errf(err, errlen, "%s '%.120s': host '%s' is listed twice (hosts %d and %d)", s.source, s.list,
                out->hosts[later].name, earlier + 1, later + 1);
        ah_host_list_free(out);
        return -1;
    }
    return 0;
}
