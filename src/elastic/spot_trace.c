/* Spot availability traces: "<time_ms>,<add|remove>,<node>" per line
 * (tests/fixtures/spot-traces/aws-p3-bamboo.csv, Bamboo's AWS P3 trace). */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autohet/elastic.h"
#include "util/errors.h"
#include "util/json_file.h"

#define AH_SPOT_MAX_MS (10.0 * 365 * 86400 * 1000) /* 10 years: a later time is a corrupt trace */

/* A time field: a decimal number of milliseconds (digits, a fraction, an exponent), finite, within
 * 0..AH_SPOT_MAX_MS. Not hex, inf or nan, which strtod also reads. 0 with *ms, or -1. */
static int parse_time_ms(const char *s, double *ms) {
    if (!isdigit((unsigned char)*s) || s[strspn(s, "0123456789.eE+-")])
        return -1;
    char *end = NULL;
    *ms = strtod(s, &end);
    return *end || !isfinite(*ms) || *ms < 0 || *ms > AH_SPOT_MAX_MS ? -1 : 0;
}

/* One event line (trimmed, not a comment) into *e. 0, or -1 with err naming path:lineno. */
static int parse_event(char *p, const char *path, int lineno, ah_spot_event *e, char *err, size_t errlen) {
    char *c1 = strchr(p, ','), *c2 = c1 ? strchr(c1 + 1, ',') : NULL;
    if (!c1 || !c2 || strchr(c2 + 1, ',')) {
        ah_errf(err, errlen, "%s:%d: expected <time_ms>,<add|remove>,<node> (3 fields), got '%.80s'", path, lineno,
                p);
        return -1;
    }
    *c1 = *c2 = 0;
    double ms;
    if (parse_time_ms(p, &ms) != 0) {
        ah_errf(err, errlen, "%s:%d: time '%.40s': expected milliseconds, a decimal number from 0 to %.0f (10 years)",
                path, lineno, p, AH_SPOT_MAX_MS);
        return -1;
    }
    int add = !strcmp(c1 + 1, "add") ? 1 : !strcmp(c1 + 1, "remove") ? 0 : -1;
    if (add < 0 || !c2[1] || strlen(c2 + 1) >= sizeof e->node) {
        ah_errf(err, errlen, "%s:%d: event '%.20s' for node '%.40s': expected add or remove and a node name", path,
                lineno, c1 + 1, c2 + 1);
        return -1;
    }
    e->t_s = ms / 1e3;
    e->add = add;
    snprintf(e->node, sizeof e->node, "%s", c2 + 1);
    return 0;
}

/* The trace's node set so far: live[] indexes the add events of the nodes available, added_at[] their lines.
 * An add of an available node or a remove of one that is not is a trace that contradicts itself. 0, or -1. */
static int apply_event(const ah_spot_event *e, int k, int *live, int *added_at, int *n_live, const char *path,
                       int lineno, char *err, size_t errlen) {
    int at = -1;
    for (int i = 0; i < *n_live && at < 0; i++)
        if (!strcmp(e[live[i]].node, e[k].node))
            at = i;
    if (e[k].add && at >= 0) {
        ah_errf(err, errlen, "%s:%d: add of node '%s', which line %d added and no line has removed since", path,
                lineno, e[k].node, added_at[at]);
        return -1;
    }
    if (!e[k].add && at < 0) {
        ah_errf(err, errlen,
                "%s:%d: remove of node '%s', which is not available at that time (never added, or already removed)",
                path, lineno, e[k].node);
        return -1;
    }
    if (e[k].add) {
        live[*n_live] = k;
        added_at[(*n_live)++] = lineno;
    } else {
        live[at] = live[--*n_live];
        added_at[at] = added_at[*n_live];
    }
    return 0;
}

int ah_spot_trace_load(const char *path, ah_spot_event **out, int *n, char *err, size_t errlen) {
    *out = NULL;
    *n = 0;
    FILE *f = ah_fopen_regular(path, 256u << 20, err, errlen); /* a FIFO or a device is refused */
    if (!f)
        return -1;
    char line[512];
    int cap = 64, k = 0, lineno = 0, rc = 0, n_live = 0;
    ah_spot_event *e = ah_xcalloc((size_t)cap, sizeof *e);
    int *live = ah_xcalloc((size_t)cap, sizeof *live), *added_at = ah_xcalloc((size_t)cap, sizeof *added_at);
    while (rc == 0 && fgets(line, sizeof line, f)) {
        lineno++;
        size_t len = strlen(line);
        if (len == sizeof line - 1 && line[len - 1] != '\n' && !feof(f)) {
            ah_errf(err, errlen, "%s:%d: line longer than %zu characters", path, lineno, sizeof line - 2);
            rc = -1;
            break;
        }
        while (len && isspace((unsigned char)line[len - 1]))
            line[--len] = 0;
        char *p = line;
        while (isspace((unsigned char)*p))
            p++;
        if (!*p || *p == '#')
            continue;
        if (k == cap) {
            cap *= 2;
            e = ah_xrealloc(e, sizeof *e * (size_t)cap);
            live = ah_xrealloc(live, sizeof *live * (size_t)cap);
            added_at = ah_xrealloc(added_at, sizeof *added_at * (size_t)cap);
        }
        if (parse_event(p, path, lineno, &e[k], err, errlen) != 0) {
            rc = -1;
        } else if (k && e[k].t_s < e[k - 1].t_s) {
            ah_errf(err, errlen, "%s:%d: time %.0f ms goes back (events must be in time order)", path, lineno,
                    e[k].t_s * 1e3);
            rc = -1;
        } else {
            rc = apply_event(e, k, live, added_at, &n_live, path, lineno, err, errlen);
            k++;
        }
    }
    fclose(f);
    free(live);
    free(added_at);
    if (rc != 0) {
        free(e);
        return -1;
    }
    *out = e;
    *n = k;
    return 0;
}
