/* Spot availability traces: "<time_ms>,<add|remove>,<node>" per line
 * (tests/fixtures/spot-traces/aws-p3-bamboo.csv, Bamboo's AWS P3 trace). */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autohet/elastic.h"
#include "util/errors.h"
#include "util/json_file.h"

int ah_spot_trace_load(const char *path, ah_spot_event **out, int *n, char *err, size_t errlen) {
    *out = NULL;
    *n = 0;
    FILE *f = ah_fopen_regular(path, 256u << 20, err, errlen); /* a FIFO or a device is refused */
    if (!f)
        return -1;
    char line[512];
    int cap = 64, k = 0, lineno = 0, rc = 0;
    ah_spot_event *e = ah_xcalloc((size_t)cap, sizeof *e);
    while (fgets(line, sizeof line, f)) {
        lineno++;
        size_t len = strlen(line);
        while (len && isspace((unsigned char)line[len - 1]))
            line[--len] = 0;
        char *p = line;
        while (isspace((unsigned char)*p))
            p++;
        if (!*p || *p == '#')
            continue;
        char *c1 = strchr(p, ','), *c2 = c1 ? strchr(c1 + 1, ',') : NULL;
        char *end = NULL;
        double ms = c1 ? strtod(p, &end) : -1;
        if (!c1 || !c2 || end != c1 || !(ms >= 0)) {
            snprintf(err, errlen, "%s:%d: expected <time_ms>,<add|remove>,<node>, got '%.80s'", path, lineno,
                     p);
            rc = -1;
            break;
        }
        *c1 = *c2 = 0;
        int add = !strcmp(c1 + 1, "add") ? 1 : !strcmp(c1 + 1, "remove") ? 0 : -1;
        if (add < 0 || !c2[1] || strlen(c2 + 1) >= sizeof e->node) {
            snprintf(err, errlen,
                     "%s:%d: event '%.20s' for node '%.40s': expected add or remove and a node name", path,
                     lineno, c1 + 1, c2 + 1);
            rc = -1;
            break;
        }
        if (k && ms / 1e3 < e[k - 1].t_s) {
            snprintf(err, errlen, "%s:%d: time %.0f ms goes back (events must be in time order)", path,
                     lineno, ms);
            rc = -1;
            break;
        }
        if (k == cap)
            e = ah_xrealloc(e, sizeof *e * (size_t)(cap *= 2));
        e[k].t_s = ms / 1e3;
        e[k].add = add;
        snprintf(e[k].node, sizeof e[k].node, "%s", c2 + 1);
        k++;
    }
    fclose(f);
    if (rc != 0) {
        free(e);
        return -1;
    }
    *out = e;
    *n = k;
    return 0;
}
