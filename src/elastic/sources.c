/* Where preemptions come from in `autohet run` (docs/recovery.md):
 * --preempt NODE@STEP, requests in RUN/control/ (autohet preempt, or a rank
 * that got SIGTERM), and spot-availability traces. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "autohet/ckpt.h"
#include "autohet/cluster.h"
#include "elastic/run_state.h"
#include "util/clock.h"
#include "util/errors.h"
#include "util/json_file.h"
#include "util/atomic_file.h"

int run_node_index(const run_state *s, const char *name) {
    return ah_cluster_node_index(&s->inv, name);
}

int run_parse_preempts(run_state *s, const char *spec, char *err, size_t errlen) {
    char *copy = strdup(spec);
    int rc = 0;
    if (!copy)
        abort();
    /* split by hand: strtok would read "n0@3,,n1@4" as two items */
    for (char *tok = copy, *next = NULL; tok && rc == 0; tok = next) {
        char *comma = strchr(tok, ',');
        next = comma ? comma + 1 : NULL;
        if (comma)
            *comma = 0;
        char *at = strrchr(tok, '@'), *end = NULL;
        errno = 0;
        long st = at ? strtol(at + 1, &end, 10) : -1;
        if (!at || at == tok || !end || *end || end == at + 1 || errno || st < 1 || st > INT_MAX) {
            snprintf(err, errlen, "--preempt '%s': expected NODE@STEP with STEP >= 1", tok);
            rc = -1;
            break;
        }
        if (st >= s->o->steps) {
            snprintf(err, errlen, "--preempt %s: step %ld is not before the last step (--steps %d)", tok, st,
                     s->o->steps);
            rc = -1;
            break;
        }
        *at = 0;
        int ni = run_host_index(s, tok);
        if (ni < 0) {
            snprintf(err, errlen, "--preempt %s@%ld: no node %snamed '%s' in the inventory", tok, st,
                     s->multi_host ? "or host " : "", tok);
            rc = -1;
            break;
        }
        s->pre = ah_xrealloc(s->pre, sizeof *s->pre * (size_t)(s->n_pre + 1));
        snprintf(s->pre[s->n_pre].node, sizeof s->pre[0].node, "%s", s->inv.nodes[ni].name);
        s->pre[s->n_pre].step = (int)st;
        s->pre[s->n_pre].fired = 0;
        s->n_pre++;
    }
    free(copy);
    return rc;
}

/* control requests of `autohet preempt`: RUN/control/preempt-NODE */
int run_poll_control(run_state *s, int *gone, double *notice, int *from_signal) {
    DIR *d = opendir(s->control);
    int any = 0;
    for (struct dirent *de; d && (de = readdir(d));) {
        if (strncmp(de->d_name, "preempt-", 8) || strstr(de->d_name, ".tmp."))
            continue;
        char p[2400];
        snprintf(p, sizeof p, "%s/%s", s->control, de->d_name);
        int i = run_host_index(s, de->d_name + 8);
        FILE *f = fopen(p, "r");
        double nt = 0;
        char source[16] = "";
        if (f && fscanf(f, "%lf %15s", &nt, source) >= 1 && nt > *notice)
            *notice = nt;
        if (!strcmp(source, "signal"))
            *from_signal = 1;
        if (f)
            fclose(f);
        unlink(p);
        if (i >= 0 && s->alive[i])
            gone[i] = 1, any = 1;
        else
            fprintf(stderr, "autohet run: preempt request for '%s': no such live node\n", de->d_name + 8);
    }
    if (d)
        closedir(d);
    return any;
}

/* One trace event on the inventory: the inventory nodes are slots that trace
 * nodes occupy while available. An add takes the first free slot (not one
 * vacated in the same burst), a remove frees its node's slot; adds beyond the
 * inventory are ignored (the trace has more machines than the inventory). */
int run_trace_event(run_state *s, const ah_spot_event *ev, int *gone, int *added) {
    int slot = -1;
    for (int i = 0; i < s->inv.n_nodes && slot < 0; i++)
        if (!strcmp(s->trace_map[i], ev->node))
            slot = i;
    if (!ev->add) {
        if (slot < 0)
            return 0;
        s->trace_map[slot][0] = 0;
        if (added[slot])
            added[slot] = 0; /* added and removed within one burst: never there */
        else
            gone[slot] = 1;
        return 1;
    }
    if (slot >= 0)
        return 0;
    for (int i = 0; i < s->inv.n_nodes; i++)
        if (!s->trace_map[i][0] && !gone[i] && !s->alive[i]) {
            snprintf(s->trace_map[i], sizeof s->trace_map[i], "%s", ev->node);
            added[i] = 1;
            return 1;
        }
    return 0;
}

/* trace events due by now (all events of one timestamp together: a burst is one change) */
int run_poll_trace(run_state *s, int *gone, int *added) {
    if (!s->trace)
        return 0;
    double t = (ah_wall_clock_s() - s->t_start) * s->o->time_scale;
    int any = 0;
    while (s->next_trace < s->n_trace && s->trace[s->next_trace].t_s <= t)
        any |= run_trace_event(s, &s->trace[s->next_trace++], gone, added);
    return any;
}

/* What RUN/run.json and the inventory (RUN/plan-0.json) say against preempting `node`: a finished run, a name
 * that is neither a node nor a host of the inventory, a node already gone. 0 when nothing does (or the files
 * are not there yet: a run that just started), else -1 with err. */
static int check_preempt_target(const char *run_dir, const char *node, char *err, size_t errlen) {
    char p[1300], why[256];
    snprintf(p, sizeof p, "%s/run.json", run_dir);
    cJSON *st = access(p, F_OK) == 0 ? ah_json_parse_file(p, 1 << 24, 1, why, sizeof why) : NULL;
    snprintf(p, sizeof p, "%s/plan-0.json", run_dir);
    cJSON *plan = access(p, F_OK) == 0 ? ah_json_parse_file(p, 1 << 26, 1, why, sizeof why) : NULL;
    int rc = 0;
    if (st && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(st, "finished"))) {
        snprintf(err, errlen, "the run in %s has finished: no node to preempt", run_dir);
        rc = -1;
    }
    const cJSON *nodes = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(plan, "cluster"), "nodes");
    const cJSON *alive = cJSON_GetObjectItemCaseSensitive(st, "alive");
    /* across hosts a node may be named by its host, which the plan names unless a hostfile or Slurm gave it */
    const char *host_mem = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(st, "host_memory_tier"));
    int multi = host_mem && host_mem[0], hosts_known = 1, found = -1, live = 0, i = 0, len = 0;
    char names[200] = "";
    for (const cJSON *n = cJSON_IsArray(nodes) ? nodes->child : NULL; n && rc == 0; n = n->next, i++) {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(n, "name"));
        const char *host = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(n, "host"));
        hosts_known &= host && host[0];
        if ((name && !strcmp(name, node)) || (multi && host && host[0] && ah_host_matches(host, node))) {
            found = i;
            live |= !cJSON_IsArray(alive) || cJSON_IsTrue(cJSON_GetArrayItem(alive, i));
        }
        if (name && len < (int)sizeof names - 1)
            len += snprintf(names + len, sizeof names - (size_t)len, "%s%s", i ? ", " : "", name);
    }
    if (rc == 0 && cJSON_IsArray(nodes) && found < 0 && (!multi || hosts_known)) {
        snprintf(err, errlen, "no node or host '%s' in the run's inventory (%s)", node, names);
        rc = -1;
    } else if (rc == 0 && found >= 0 && !live) {
        snprintf(err, errlen, "%s is gone from the run already", node);
        rc = -1;
    }
    cJSON_Delete(st);
    cJSON_Delete(plan);
    return rc;
}

int ah_run_request_preempt(const char *run_dir, const char *node, double notice_s, const char *source,
                           char *err, size_t errlen) {
    char dir[1100], path[1300], txt[64];
    snprintf(dir, sizeof dir, "%s/control", run_dir);
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        snprintf(err, errlen, "%s is not the run directory of a running autohet run (no control/)", run_dir);
        return -1;
    }
    if (check_preempt_target(run_dir, node, err, errlen) != 0)
        return -1;
    snprintf(path, sizeof path, "%s/preempt-%s", dir, node);
    int len = snprintf(txt, sizeof txt, "%g %.15s\n", notice_s, source);
    return ah_write_file_atomic(path, txt, (size_t)len, err, errlen);
}
