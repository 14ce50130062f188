/* `autohet run`: the plan-aware supervisor of an elastic training job
 * (docs/recovery.md).
 *
 * One generation = one MPI job executing one plan. The controller tails the
 * job's step log, fires preemptions (SIGKILL of a node's ranks and a wipe of
 * its memory and disk tiers: the instance is gone), waits for the job to end,
 * replans for the surviving nodes, computes the recovery assignment from the
 * surviving manifests and starts the next generation with `train --recover`.
 * Everything it measures goes into the report. */
#define _GNU_SOURCE
#include "elastic/run_state.h"

#include <dirent.h>
#include <limits.h>
#include <errno.h>
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

#include "autohet/cluster.h"
#include "autohet/model.h"
#include "autohet/profile.h"
#include "autohet/schedule.h"
#include "util/clock.h"
#include "util/errors.h"
#include "util/json_file.h"
#include "util/step_log.h"
#include "util/atomic_file.h"
#include "autohet/engine.h"

static volatile sig_atomic_t interrupted;
static void on_signal(int sig) {
    (void)sig;
    interrupted = 1;
}

/* ---- planning ---- */

/* --plan's replans computed ahead (`plan --replans K`, docs/planner.md; `extra`: the document's other
 * members): a loss they hold is looked up, not searched (at 1,024 GPUs 20 ms against half a second); the table
 * belongs to the plan as written, kept beside the running one (s->plan changes with every generation). */
static int load_replans(run_state *s, const cJSON *extra, const char *path, char *err, size_t errlen) {
    const cJSON *tj = cJSON_GetObjectItemCaseSensitive(extra, "replans");
    if (!tj)
        return 0;
    ah_plan_copy(&s->replans_of, &s->plan);
    if (ah_replan_table_from_json(tj, &s->replans_of, path, &s->replans, err, errlen) == 0)
        return 0;
    ah_plan_free(&s->replans_of);
    return -1;
}

/* The survivors' plan from the replans computed ahead: 1 with *out, 0 when there is none to use (no table, a
 * forced TP degree, a node set the table does not hold, or an entry that does not evaluate: said on stdout). */
static int replan_ahead(run_state *s, const ah_cluster *sub, ah_plan *out) {
    if (!s->replans || s->po.tp > 0)
        return 0;
    char e[512];
    int got = ah_replan_table_lookup(s->replans, &s->replans_of, sub, s->prof, &s->po, out, e, sizeof e);
    if (got == 1) {
        s->replan_way = "computed ahead";
        return 1;
    }
    if (got == 0 && ah_replan_table_nearest(s->replans, &s->replans_of, sub, s->prof, &s->po, out, e, sizeof e) == 1) {
        s->replan_way = "computed ahead, repaired"; /* deeper than the table: part looked up, the rest repaired */
        return 1;
    }
    if (got < 0)
        printf("autohet run: the replans computed ahead do not give a plan (%s): searching\n", e);
    return 0;
}

static int plan_for_alive(run_state *s, ah_plan *out, char *err, size_t errlen) {
    ah_cluster sub = {ah_xcalloc((size_t)s->inv.n_nodes + 1, sizeof(ah_node)), 0};
    for (int i = 0; i < s->inv.n_nodes; i++)
        if (s->alive[i])
            sub.nodes[sub.n_nodes++] = s->inv.nodes[i];
    int rc = -1;
    s->replan_way = "search";
    if (sub.n_nodes == 0)
        snprintf(err, errlen, "no node is available");
    else if (replan_ahead(s, &sub, out) == 1)
        rc = 0;
    else
        rc = ah_plan_search(&s->cfg, &sub, s->prof, &s->po, out, err, errlen) == 0 ? 0 : -1;
    free(sub.nodes);
    return rc;
}

/* "2 plan ranks + 1 recovery server = 3 MPI ranks, 1 replica (2 stages), TP 1,
 * on 2 of 3 nodes": the plan's ranks and the job's are told apart */
static void describe_plan(const ah_plan *p, int servers, char *buf, size_t n) {
    int ranks = ah_plan_slots(p), used = 0;
    int len = snprintf(buf, n, "%d plan rank%s", ranks, ranks == 1 ? "" : "s");
    if (servers > 0 && len < (int)n)
        len += snprintf(buf + len, n - (size_t)len, " + %d recovery server%s = %d MPI ranks", servers,
                        servers == 1 ? "" : "s", ranks + servers);
    if (len < (int)n)
        len += snprintf(buf + len, n - (size_t)len, ", %d replica%s (", p->n_replicas, p->n_replicas == 1 ? "" : "s");
    for (int k = 0; k < p->n_replicas && len < (int)n; k++)
        len += snprintf(buf + len, n - (size_t)len, "%s%d", k ? "+" : "", p->replicas[k].n_stages);
    for (int i = 0; i < p->cluster.n_nodes; i++)
        for (int k = 0, hit = 0; k < p->n_replicas && !hit; k++)
            for (int j = 0; j < p->replicas[k].n_stages && !hit; j++)
                if (p->replicas[k].stages[j].node == i)
                    hit = 1, used++;
    char tp[48];
    ah_plan_tp_text(p, tp, sizeof tp);
    if (len < (int)n)
        snprintf(buf + len, n - (size_t)len, " stages), TP %s, on %d of %d nodes", tp, used, p->cluster.n_nodes);
}

/* The plan's predicted iteration time: the planner's, or for a hand-written
 * plan without one the cost model's evaluation of it; 0 if it cannot be
 * evaluated. */
static double predicted_iteration_s(const run_state *s) {
    if (s->plan.iteration_time_s > 0)
        return s->plan.iteration_time_s;
    ah_plan copy;
    ah_plan_copy(&copy, &s->plan);
    char err[512];
    double t = ah_plan_evaluate(&copy, s->prof, &s->po, err, sizeof err) == 0 ? copy.iteration_time_s : 0;
    ah_plan_free(&copy);
    return t > 0 ? t : 0;
}

/* ---- the training job ---- */

/* ---- recovery ---- */

/* The copies a recovery found bad (RUN/recover-G.json.bad-R, a path a line, written by the ranks that read
 * them) are left out of the holdings: the next assignment uses other copies, or an older complete step. */
static void drop_bad_copies(const run_state *s, ah_holding *h, int n) {
    DIR *d = opendir(s->run);
    for (struct dirent *de; d && (de = readdir(d));) {
        if (strncmp(de->d_name, "recover-", 8) || !strstr(de->d_name, ".json.bad-"))
            continue;
        char p[1400], line[4200];
        snprintf(p, sizeof p, "%s/%.255s", s->run, de->d_name);
        FILE *f = fopen(p, "r");
        while (f && fgets(line, sizeof line, f)) {
            line[strcspn(line, "\n")] = 0;
            for (int i = 0; i < n; i++) {
                size_t dl = strlen(h[i].dir);
                if (strncmp(line, h[i].dir, dl) || line[dl] != '/')
                    continue;
                int k = 0;
                for (int j = 0; j < h[i].m.n; j++)
                    if (strcmp(h[i].m.e[j].file, line + dl + 1))
                        h[i].m.e[k++] = h[i].m.e[j];
                h[i].m.n = k;
            }
        }
        if (f)
            fclose(f);
    }
    if (d)
        closedir(d);
}

static int load_holdings(run_state *s, ah_holding **out, int *n) {
    int cap = 2 * s->inv.n_nodes + 16, k = 0;
    ah_holding *h = ah_xcalloc((size_t)cap, sizeof *h);
    char err[512];
    for (int i = 0; i < s->inv.n_nodes; i++) {
        if (!s->alive[i])
            continue;
        for (int t = 0; t < 2; t++) {
            ah_holding *v = &h[k];
            snprintf(v->node, sizeof v->node, "%s", s->inv.nodes[i].name);
            v->tier = t == 0 ? AH_TIER_MEMORY : AH_TIER_DISK;
            run_node_tier_dir(s, t == 0, i, v->dir, sizeof v->dir);
            /* across hosts the manifest the node's ranks reported (a copy rank 0 keeps in the run directory):
             * the controller never opens another host's tiers; v->dir is where the host's ranks read */
            char rep[1400];
            snprintf(rep, sizeof rep, "%s/.reported/%s", t == 0 ? s->mem : s->disk, v->node);
            if (ah_manifest_load(s->multi_host ? rep : v->dir, &v->m, err, sizeof err) != 0) {
                fprintf(stderr, "autohet run: %s (ignoring this tier)\n", err);
                ah_manifest_init(&v->m, v->node, ah_tier_name(v->tier));
            }
            k++;
        }
    }
    DIR *d = opendir(s->cloud);
    for (struct dirent *de; d && (de = readdir(d));) {
        if (de->d_name[0] == '.')
            continue;
        if (k == cap)
            h = ah_xrealloc(h, sizeof *h * (size_t)(cap *= 2));
        ah_holding *v = &h[k];
        memset(v, 0, sizeof *v);
        snprintf(v->node, sizeof v->node, "%.63s", de->d_name);
        v->tier = AH_TIER_CLOUD;
        snprintf(v->dir, sizeof v->dir, "%s/%.255s", s->cloud, de->d_name);
        if (ah_manifest_load(v->dir, &v->m, err, sizeof err) != 0) {
            fprintf(stderr, "autohet run: %s (ignoring it)\n", err);
            continue;
        }
        k++;
    }
    if (d)
        closedir(d);
    drop_bad_copies(s, h, k);
    *out = h;
    *n = k;
    return 0;
}

static void free_holdings(ah_holding *h, int n) {
    for (int i = 0; i < n; i++)
        ah_manifest_free(&h[i].m);
    free(h);
}

/* the restore result of the pending recovery, once the new job has written it */
static void finish_recovery(run_state *s) {
    if (!s->pending)
        return;
    char err[512];
    struct stat sb;
    if (stat(s->pending_result, &sb) != 0)
        return;
    cJSON *r = ah_json_parse_file(s->pending_result, 1 << 20, 1, err, sizeof err);
    if (!r)
        return; /* written atomically; a parse failure means a foreign file: ignore */
    cJSON *rec = s->pending;
    s->pending = NULL;
    double t_kill = cJSON_GetObjectItemCaseSensitive(rec, "t_event")->valuedouble;
    double t_spawn = cJSON_GetObjectItemCaseSensitive(rec, "t_spawn")->valuedouble;
    double t0 = cJSON_GetObjectItemCaseSensitive(r, "t_restore_start")->valuedouble;
    double t1 = cJSON_GetObjectItemCaseSensitive(r, "t_restore_end")->valuedouble;
    cJSON_DeleteItemFromObject(rec, "t_event");
    cJSON_DeleteItemFromObject(rec, "t_spawn");
    cJSON_AddNumberToObject(rec, "relaunch_s", t0 - t_spawn);
    cJSON_AddNumberToObject(rec, "restore_s", t1 - t0);
    cJSON_AddNumberToObject(rec, "seconds", t1 - t_kill);
    cJSON_AddItemToObject(rec, "bytes_by_tier",
                          cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(r, "bytes_by_tier"), 1));
    cJSON_AddItemToObject(rec, "seconds_by_tier",
                          cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(r, "seconds_by_tier"), 1));
    cJSON_AddNumberToObject(rec, "fallbacks", cJSON_GetObjectItemCaseSensitive(r, "fallbacks")->valuedouble);
    cJSON_Delete(r);
    run_state_save(s);
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(rec, "bytes_by_tier"),
                *way = cJSON_GetObjectItemCaseSensitive(rec, "replan"); /* absent in an older run's record */
    printf("autohet run: recovery %d: %.3f s to resume at step %d (%d step%s lost): detection %.3f + replan "
           "%.3f (%s) + relaunch %.3f + restore %.3f s; memory %.1f MB, disk %.1f MB, peer %.1f MB, cloud %.1f MB\n",
           cJSON_GetArraySize(s->recs), t1 - t_kill,
           cJSON_GetObjectItemCaseSensitive(rec, "resumed_step")->valueint,
           cJSON_GetObjectItemCaseSensitive(rec, "steps_lost")->valueint,
           cJSON_GetObjectItemCaseSensitive(rec, "steps_lost")->valueint == 1 ? "" : "s",
           cJSON_GetObjectItemCaseSensitive(rec, "detection_s")->valuedouble,
           cJSON_GetObjectItemCaseSensitive(rec, "replan_s")->valuedouble,
           cJSON_IsString(way) ? way->valuestring : "search", t0 - t_spawn, t1 - t0,
           cJSON_GetObjectItemCaseSensitive(b, "memory")->valuedouble / 1e6,
           cJSON_GetObjectItemCaseSensitive(b, "disk")->valuedouble / 1e6,
           cJSON_GetObjectItemCaseSensitive(b, "peer")->valuedouble / 1e6,
           cJSON_GetObjectItemCaseSensitive(b, "cloud")->valuedouble / 1e6);
    fflush(stdout);
}

/* {"memory": [layers...], "peer": [...], ...}: which tier served each layer of the recovery (a layer
 * of several shards is listed under each tier one of them came from) */
static cJSON *layers_by_tier(const ah_assignment *as, int n_layers) {
    cJSON *o = cJSON_CreateObject();
    for (int t = 0; t < AH_TIER_N; t++) {
        cJSON *a = cJSON_AddArrayToObject(o, ah_tier_name(t));
        for (int l = 0; l < n_layers; l++) {
            int hit = 0;
            for (int k = 0; k < as->n && !hit; k++)
                hit = as->e[k].layer == l && as->e[k].tier == t;
            if (hit)
                cJSON_AddItemToArray(a, cJSON_CreateNumber(l));
        }
    }
    return o;
}

/* The layers of plan p that one node alone holds (its DP peers elsewhere hold the same parameters and
 * AdamW moments; a layer of one holder has no copy off that node between cloud checkpoints): into
 * `only` (node index, -1 several), their count. */
static int single_node_layers(const ah_plan *p, int n_layers, int *only) {
    int n = 0;
    for (int l = 0; l < n_layers; l++) {
        only[l] = -2; /* no holder yet */
        for (int k = 0; k < p->n_replicas; k++)
            for (int j = 0; j < p->replicas[k].n_stages; j++) {
                const ah_stage *st = &p->replicas[k].stages[j];
                if (l >= st->layer_first && l < st->layer_last)
                    only[l] = only[l] == -2 || only[l] == st->node ? st->node : -1;
            }
        n += only[l] >= 0;
    }
    return n;
}

/* Says which layers live on one node only: a loss of it without notice restores them from the cloud */
static void report_redundancy(const run_state *s, cJSON *g) {
    int n_layers = ah_model_num_layers(&s->cfg), *only = ah_xcalloc((size_t)n_layers, sizeof *only);
    int n = single_node_layers(&s->plan, n_layers, only);
    cJSON *a = cJSON_AddArrayToObject(g, "single_node_layers");
    char list[512] = "";
    int len = 0;
    for (int l = 0; l < n_layers; l++)
        if (only[l] >= 0) {
            cJSON_AddItemToArray(a, cJSON_CreateNumber(l));
            if (len < (int)sizeof list - 80)
                len += snprintf(list + len, sizeof list - (size_t)len, "%s%d (%s)", len ? ", " : "", l,
                                s->plan.cluster.nodes[only[l]].name);
        }
    if (n > 0 && s->o->mode == AH_RECOVERY_LAYER_BITMAP && s->o->mem_copies > 1)
        printf("autohet run: generation %d: %d layer%s on one node only: %s; %s memory snapshot%s also go%s to "
               "the next %s at every snapshot (--mem-copies %d)\n",
               s->gen, n, n == 1 ? "" : "s", list, n == 1 ? "its" : "their", n == 1 ? "" : "s", n == 1 ? "es" : "",
               s->o->mem_copies > 2 ? "nodes" : "node", s->o->mem_copies);
    else if (n > 0 && s->o->mode == AH_RECOVERY_LAYER_BITMAP)
        printf("autohet run: generation %d: %d layer%s on one node only: %s; a loss of that node without notice "
               "restores %s from the last cloud checkpoint (every %d steps)\n",
               s->gen, n, n == 1 ? "" : "s", list, n == 1 ? "it" : "them", s->o->ckpt_every);
    free(only);
}

/* Starts generation s->gen for the current s->plan (after writing it); with
 * `recover` a recovery assignment. 0 or -1 with err. */
static int start_generation(run_state *s, const char *recover, char *err, size_t errlen) {
    char path[1200], desc[256];
    snprintf(path, sizeof path, "%s/plan-%d.json", s->run, s->gen);
    if (ah_plan_write_json(&s->plan, NULL, path, err, errlen) != 0)
        return -1;
    describe_plan(&s->plan, recover ? s->n_servers : 0, desc, sizeof desc);
    double predicted = predicted_iteration_s(s);
    char pred[96];
    if (predicted > 0)
        snprintf(pred, sizeof pred, "predicted %.3f s/iteration%s", predicted,
                 s->plan.iteration_time_s > 0 ? "" : " (evaluated: the plan has none)");
    else
        snprintf(pred, sizeof pred, "iteration time not predicted");
    char hosts[2048] = "";
    if (s->multi_host)
        run_plan_hosts(s, hosts, sizeof hosts);
    printf("autohet run: generation %d: %s; %s (plan %s)%s%s\n", s->gen, desc, pred, path,
           s->multi_host ? "; hosts " : "", hosts);
    fflush(stdout);
    cJSON *g = cJSON_CreateObject();
    cJSON_AddNumberToObject(g, "generation", s->gen);
    cJSON_AddStringToObject(g, "plan", path);
    cJSON_AddStringToObject(g, "summary", desc);
    cJSON_AddNumberToObject(g, "ranks", ah_plan_slots(&s->plan));
    cJSON_AddNumberToObject(g, "recovery_servers", recover ? s->n_servers : 0);
    if (predicted > 0)
        cJSON_AddNumberToObject(g, "predicted_iteration_s", predicted);
    else
        cJSON_AddNullToObject(g, "predicted_iteration_s");
    if (s->multi_host)
        cJSON_AddStringToObject(g, "hosts", hosts);
    report_redundancy(s, g);
    cJSON_AddItemToArray(s->gens, g);
    s->pid = run_launch(s, path, recover, err, errlen);
    run_state_save(s); /* the generation and its job: what a resumed controller ends first */
    return s->pid > 0 ? 0 : -1;
}

/* The node set changes: `gone` nodes were preempted (their ranks already
 * killed, their tiers wiped) at t_event; `added` join. Stops the job, replans,
 * assigns and relaunches. 0, or -1 with err (nothing can run). */
static int change_nodes(run_state *s, const char *cause, double t_event, int step_at_event, char *err,
                        size_t errlen) {
    if (s->pid > 0)
        run_reap(s, 5.0);
    double t_detect = ah_wall_clock_s();
    if (s->glog) {
        run_tail_log(s); /* steps the job finished before it went down */
        fclose(s->glog);
        s->glog = NULL;
    }
    ah_plan np;
    double r0 = ah_wall_clock_s();
    if (plan_for_alive(s, &np, err, errlen) != 0) {
        if (s->trace && s->next_trace < s->n_trace) { /* the trace may bring nodes back */
            printf("autohet run: %s after step %d; no plan (%s): waiting for nodes\n", cause, step_at_event,
                   err);
            fflush(stdout);
            return 0;
        }
        return -1;
    }
    double r1 = ah_wall_clock_s();
    ah_holding *h = NULL;
    int nh = 0;
    run_clear_pins(s);
    load_holdings(s, &h, &nh);
    ah_assignment as;
    if (ah_recovery_assign(h, nh, &np, s->o->mode, &as, err, errlen) != 0)
        printf("autohet run: %s: restarting from step 0 (the initialisation from the seed)\n", err);
    char rpath[1200];
    snprintf(rpath, sizeof rpath, "%s/recover-%d.json", s->run, s->gen + 1);
    int rc = ah_recovery_write(rpath, h, &np, &as, s->o->cloud_mbs * 1e6, err, errlen);
    int step = as.step;
    cJSON *served = layers_by_tier(&as, ah_model_num_layers(&s->cfg));
    s->n_servers = as.n_servers;
    for (int k = 0; k < as.n_servers && k < MAX_NODES; k++) /* where the rankfile puts them */
        snprintf(s->server_host[k], sizeof s->server_host[k], "%s", run_host_of(s, as.server_node[k]));
    ah_assignment_free(&as);
    free_holdings(h, nh);
    double r2 = ah_wall_clock_s();
    if (rc != 0) {
        cJSON_Delete(served);
        ah_plan_free(&np);
        return -1;
    }
    cJSON *rec = cJSON_CreateObject();
    cJSON_AddItemToObject(rec, "layers_by_tier", served);
    cJSON_AddStringToObject(rec, "cause", cause);
    cJSON_AddStringToObject(rec, "mode",
                            s->o->mode == AH_RECOVERY_FULL_RELOAD ? "full-reload" : "layer-bitmap");
    cJSON_AddNumberToObject(rec, "generation", s->gen + 1);
    cJSON_AddNumberToObject(rec, "at_s", t_event - s->t_start);
    cJSON_AddNumberToObject(rec, "at_unix_s", t_event);
    cJSON_AddNumberToObject(rec, "last_step_before", step_at_event);
    cJSON_AddNumberToObject(rec, "resumed_step", step);
    cJSON_AddNumberToObject(rec, "first_step", step + 1);
    cJSON_AddNumberToObject(rec, "steps_lost", step_at_event > step ? step_at_event - step : 0);
    cJSON_AddNumberToObject(rec, "detection_s", t_detect - t_event);
    cJSON_AddNumberToObject(rec, "replan_s", r1 - r0);
    cJSON_AddStringToObject(rec, "replan", s->replan_way);
    cJSON_AddNumberToObject(rec, "assign_s", r2 - r1);
    cJSON_AddNumberToObject(rec, "t_event", t_event);
    ah_plan_free(&s->plan);
    s->plan = np;
    s->gen++;
    printf("autohet run: %s after step %d; resuming from step %d\n", cause, step_at_event, step);
    s->start_step = step;
    if (start_generation(s, rpath, err, errlen) != 0) {
        cJSON_Delete(rec);
        return -1;
    }
    cJSON_AddNumberToObject(rec, "t_spawn", s->t_spawn);
    cJSON_AddItemToArray(s->recs, rec);
    if (s->pending) { /* the previous recovery never finished: the node set changed again first */
        cJSON_DeleteItemFromObject(s->pending, "t_event");
        cJSON_DeleteItemFromObject(s->pending, "t_spawn");
        cJSON_AddBoolToObject(s->pending, "interrupted", 1);
    }
    s->pending = rec;
    snprintf(s->pending_result, sizeof s->pending_result, "%s.result.json", rpath);
    return 0;
}

/* Preempts the nodes flagged in `gone` (SIGKILL + wipe) and adds those in
 * `added`; restarts the job when the plan is affected. */
static int apply_change(run_state *s, const int *gone, const int *added, const char *why, char *err,
                        size_t errlen) {
    /* detection is timed from the fault: for a silent rank when it was last heard */
    double t_event = s->change_t_event > 0 ? s->change_t_event : ah_wall_clock_s();
    s->change_t_event = 0;
    int step_at = s->step, affected = 0;
    char cause[512] = "";
    int len = snprintf(cause, sizeof cause, "%s:", why);
    for (int i = 0; i < s->inv.n_nodes; i++) {
        const char *name = s->inv.nodes[i].name;
        if (gone[i] && s->alive[i]) {
            /* a node the plan does not use may still run a recovery server
             * rank, and while a recovery is under way any node may be
             * serving shards: stop the job rather than let it read a node
             * that is being wiped (it is replanned without the node) */
            int killed = s->pid > 0 ? (s->multi_host ? run_kill_host(s, name) : run_kill_ranks(s, name)) : 0;
            if (s->pid > 0 && (killed > 0 || s->pending ||
                               (s->have_plan && ah_plan_uses_node(&s->plan, name))))
                affected = 1;
            run_wipe_node(s, name);
            s->alive[i] = 0;
            len += snprintf(cause + len, sizeof cause - (size_t)len, " lost %s", name);
            if (s->multi_host)
                len += snprintf(cause + len, sizeof cause - (size_t)len, " (host %s)", s->inv.nodes[i].host);
        } else if (added[i] && !s->alive[i]) {
            if (s->multi_host && run_host_tiers_node(s, i) != 0)
                fprintf(stderr, "autohet run: host %s: cannot make its tier directories (%s)\n",
                        s->inv.nodes[i].host, strerror(errno));
            s->alive[i] = 1;
            affected = 1;
            len += snprintf(cause + len, sizeof cause - (size_t)len, " added %s", name);
        }
        if (len >= (int)sizeof cause - 1)
            break;
    }
    run_state_save(s); /* the nodes lost, before anything else happens */
    if (affected && s->pid > 0)
        killpg(s->pid, SIGKILL); /* the controller stops the job on a change of the node set */
    if (!affected) {
        if (len > (int)strlen(why) + 1)
            printf("autohet run: %s (no rank there: the job continues)\n", cause);
        return 0;
    }
    return change_nodes(s, cause, t_event, step_at, err, errlen);
}

/* the model, data, plan or inventory, hosts and preemption sources of the run */
static int setup_inputs(run_state *s, const ah_run_options *o, char *err, size_t errlen) {
    s->o = o;
    s->pid = -1;
    s->t_start = ah_wall_clock_s();
    if (o->model_arg && ah_model_resolve(o->model_arg, &s->cfg, err, errlen) != 0)
        return -1;
    if (run_check_launcher(o->launcher, err, errlen) != 0)
        return -1;
    s->catalog = *ah_device_catalog_builtin();
    if (o->devices && ah_device_load_overrides(&s->catalog, o->devices, err, errlen) != 0)
        return -1;
    struct stat ds;
    if (stat(o->data, &ds) != 0) {
        snprintf(err, errlen, "--data %.400s: %s", o->data, strerror(errno));
        return -1;
    }
    ah_plan_options_default(&s->po);
    if (o->plan_path) {
        cJSON *extra = NULL;
        if (ah_plan_read_json_extras(o->plan_path, &s->catalog, &s->plan, &extra, err, errlen) != 0)
            return -1;
        s->have_plan = 1;
        int bad_replans = load_replans(s, extra, o->plan_path, err, errlen) != 0;
        cJSON_Delete(extra);
        if (bad_replans)
            return -1;
        if (!o->model_arg) /* the plan's own model, as autohet train takes it */
            s->cfg = s->plan.model;
        /* the inventory is the plan's cluster */
        s->inv.n_nodes = s->plan.cluster.n_nodes;
        s->inv.nodes = ah_xcalloc((size_t)s->inv.n_nodes + 1, sizeof(ah_node));
        memcpy(s->inv.nodes, s->plan.cluster.nodes, sizeof(ah_node) * (size_t)s->inv.n_nodes);
        s->po.micro_batch = s->plan.micro_batch;
        s->po.global_batch = s->plan.global_batch;
        s->po.train.seq = s->plan.train.seq;
        s->po.train.precision = s->plan.train.precision; /* replans cost what the plan was searched for */
        s->po.mem_reserve_gib = s->plan.mem_reserve_gib;
        s->cfg.vocab = ah_dataset_vocab(ah_dataset_kind_of(o->data), s->cfg.vocab); /* as autohet train */
    } else {
        s->cfg.vocab = ah_dataset_vocab(ah_dataset_kind_of(o->data), s->cfg.vocab);
        if (ah_cluster_resolve(o->cluster_arg, &s->catalog, &s->inv, err, errlen) != 0)
            return -1;
        s->po.tp = o->tp;
        s->po.micro_batch = o->micro_batch;
        s->po.global_batch = o->global_batch;
        s->po.train.seq = o->seq;
        /* the engine trains fp32 tensors (--precision bf16 is its matmuls' operands only): the plans it
         * searches cost 4-byte activations and fp32 state, as its memory check does (executor_memory.c) */
        s->po.train.precision = AH_PRECISION_FP32;
    }
    if (s->inv.n_nodes > MAX_NODES) {
        snprintf(err, errlen, "the inventory has %d nodes; autohet run supervises at most %d", s->inv.n_nodes,
                 MAX_NODES);
        return -1;
    }
    for (int i = 0; i < s->inv.n_nodes; i++)
        s->alive[i] = 1;
    if (run_setup_hosts(s, err, errlen) != 0)
        return -1;
    s->prof = ah_profile_analytic();
    if (o->preempt && run_parse_preempts(s, o->preempt, err, errlen) != 0)
        return -1;
    if (o->spot_trace) {
        if (ah_spot_trace_load(o->spot_trace, &s->trace, &s->n_trace, err, errlen) != 0)
            return -1;
        /* the nodes available at time 0 are the first inventory nodes */
        int gone[MAX_NODES] = {0}, added[MAX_NODES] = {0};
        for (int i = 0; i < s->inv.n_nodes; i++)
            s->alive[i] = 0;
        while (s->next_trace < s->n_trace && s->trace[s->next_trace].t_s == 0)
            run_trace_event(s, &s->trace[s->next_trace++], gone, added);
        for (int i = 0; i < s->inv.n_nodes; i++)
            s->alive[i] = added[i];
    }
    return 0;
}

/* a new run directory (empty or new) and its tiers */
static int setup_fresh_dirs(run_state *s, const ah_run_options *o, char *err, size_t errlen) {
    /* tiers: memory under /dev/shm (tmpfs, gone with the "instance"), disk and
     * cloud under the run directory */
    if (o->run_dir) {
        snprintf(s->run, sizeof s->run, "%s", o->run_dir);
        DIR *d = opendir(s->run);
        int nonempty = 0;
        for (struct dirent *de; d && (de = readdir(d));)
            nonempty |= de->d_name[0] != '.';
        if (d)
            closedir(d);
        if (nonempty) {
            snprintf(
                err, errlen,
                "--run-dir %.400s is not empty (a run starts from empty tiers): remove it or choose another",
                s->run);
            return -1;
        }
        if (run_mkdir_p(s->run) != 0) {
            snprintf(err, errlen, "--run-dir %.400s: cannot create (%s)", s->run, strerror(errno));
            return -1;
        }
    } else {
        snprintf(s->run, sizeof s->run, "/tmp/autohet-run.XXXXXX");
        if (!mkdtemp(s->run)) {
            snprintf(err, errlen, "cannot create a run directory under /tmp (%s)", strerror(errno));
            return -1;
        }
    }
    char real[PATH_MAX];
    if (realpath(s->run, real))
        snprintf(s->run, sizeof s->run, "%.500s", real);
    struct stat sb;
    const char *base = strrchr(s->run, '/') ? strrchr(s->run, '/') + 1 : s->run;
    if (stat("/dev/shm", &sb) == 0 && S_ISDIR(sb.st_mode))
        snprintf(s->mem, sizeof s->mem, "/dev/shm/autohet-%.200s-%ld", base, (long)getpid());
    else
        snprintf(s->mem, sizeof s->mem, "%.500s/memory", s->run);
    snprintf(s->disk, sizeof s->disk, "%.500s/disk", s->run);
    snprintf(s->cloud, sizeof s->cloud, "%.500s/cloud", s->run);
    snprintf(s->control, sizeof s->control, "%.500s/control", s->run);
    if (s->multi_host && run_host_tiers(s, base, err, errlen) != 0)
        return -1;
    if (run_mkdir_p(s->mem) || run_mkdir_p(s->disk) || run_mkdir_p(s->cloud) || run_mkdir_p(s->control)) {
        snprintf(err, errlen, "cannot create the tier directories under %s (%s)", s->run, strerror(errno));
        return -1;
    }
    return 0;
}

/* --log and the report, appended to by a resumed run */
static int open_outputs(run_state *s, const char *mode, char *err, size_t errlen) {
    const ah_run_options *o = s->o;
    s->log_skip_through = -1;
    if (o->log_path && !(s->log = fopen(o->log_path, mode))) {
        snprintf(err, errlen, "--log %s: cannot open for writing (%s)", o->log_path, strerror(errno));
        return -1;
    }
    if (!s->gens) {
        s->gens = cJSON_CreateArray();
        s->recs = cJSON_CreateArray();
    }
    s->report = cJSON_CreateObject();
    return 0;
}

static int setup(run_state *s, const ah_run_options *o, char *err, size_t errlen) {
    if (setup_inputs(s, o, err, errlen) != 0 || setup_fresh_dirs(s, o, err, errlen) != 0 ||
        run_state_lock(s, err, errlen) != 0 || open_outputs(s, "w", err, errlen) != 0 ||
        run_heartbeat_listen(s, err, errlen) != 0)
        return -1;
    return run_state_save(s) == 0 ? 0 : (snprintf(err, errlen, "cannot write %s/run.json", s->run), -1);
}

/* 0, or -1 with the error printed */
static int write_report(run_state *s, int final_step, int ok) {
    if (!s->o->report_path)
        return 0;
    cJSON *r = s->report;
    cJSON_AddStringToObject(r, "format", "autohet-run-report");
    cJSON_AddNumberToObject(r, "version", 1);
    cJSON_AddStringToObject(r, "model", s->cfg.name);
    cJSON_AddStringToObject(r, "recovery",
                            s->o->mode == AH_RECOVERY_FULL_RELOAD ? "full-reload" : "layer-bitmap");
    cJSON_AddNumberToObject(r, "cloud_bandwidth_mbs", s->o->cloud_mbs);
    cJSON_AddNumberToObject(r, "steps", s->o->steps);
    cJSON_AddNumberToObject(r, "final_step", final_step);
    cJSON_AddBoolToObject(r, "completed", ok);
    cJSON_AddNumberToObject(r, "wall_s", ah_wall_clock_s() - s->t_start);
    cJSON_AddStringToObject(r, "run_dir", s->run);
    cJSON *hb = cJSON_AddObjectToObject(r, "heartbeat");
    cJSON_AddNumberToObject(hb, "timeout_s", s->o->heartbeat_s);
    cJSON_AddNumberToObject(hb, "max_gap_s", s->beat_max_gap); /* the longest silence of a rank heard again */
    cJSON_AddItemToObject(r, "generations", s->gens);
    cJSON_AddItemToObject(r, "recoveries", s->recs);
    s->gens = s->recs = NULL;
    char *txt = cJSON_Print(r), err[512];
    int rc = ah_write_file_atomic(s->o->report_path, txt, strlen(txt), err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "autohet run: --report: %s\n", err);
    free(txt);
    return rc;
}

/* a preemption with notice in progress: the job runs on until its next
 * committed step (or the notice runs out), then stops gracefully */
typedef struct {
    int gone[MAX_NODES], on, step;
    char why[64];
    double end;
} notice_state;

/* A failure on the same nodes: restarted from the last committed step unless
 * it is the same failure, at the same step, for the (max_restarts+1)-th time
 * in a row, or bad input (exit 2), which no restart mends. 1 restart, 0 stop. */
static int may_restart(run_state *s, const run_fault *f) {
    if (!strcmp(f->signature, s->fail_signature))
        s->fail_repeats++;
    else
        s->fail_repeats = 1, snprintf(s->fail_signature, sizeof s->fail_signature, "%s", f->signature);
    /* (a recovery's exit 2 is a copy it could not use, which the next assignment leaves out) */
    int bad_input = f->exit_code == AH_EXIT_BAD_INPUT && !s->pending;
    return !bad_input && s->fail_repeats <= s->o->max_restarts;
}

/* The job ended with `status`. Returns 1 done (success), 0 go on (replanned
 * after a fault), or minus the exit status autohet run stops with. */
static int job_ended(run_state *s, int status, int *final_step) {
    char err[1024];
    run_clean_job(s, 5.0); /* nothing of it survives: ranks in groups of their own, shared memory */
    run_tail_log(s);
    finish_recovery(s);
    *final_step = s->step > *final_step ? s->step : *final_step;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 1;
    run_fault f;
    double t_now = ah_wall_clock_s();
    int lost = run_diagnose_end(s, status, &f);
    double t_fault = f.t_fault > 0 && f.t_fault <= t_now ? f.t_fault : t_now;
    int step_at = s->step;
    if (lost) { /* the instances are gone, their tiers with them */
        for (int i = 0; i < s->inv.n_nodes; i++)
            if (f.gone[i] && s->alive[i])
                run_wipe_node(s, s->inv.nodes[i].name), s->alive[i] = 0;
    } else if (!may_restart(s, &f)) {
        fprintf(stderr, "autohet run: generation %d: %s\n", s->gen, f.cause);
        fprintf(stderr, "autohet run: stopping: the same failure %d time%s in a row at step %d%s%s\n",
                s->fail_repeats, s->fail_repeats == 1 ? "" : "s", step_at,
                s->fail_repeats <= s->o->max_restarts ? " (bad input: a restart cannot mend it)" : " (--max-restarts ",
                s->fail_repeats <= s->o->max_restarts ? "" : "reached)");
        return f.exit_code > 1 && f.exit_code < 126 ? -f.exit_code : -1;
    }
    if (change_nodes(s, f.cause, t_fault, step_at, err, sizeof err) == 0)
        return 0;
    fprintf(stderr, "autohet run: recovery failed: %s\n", err);
    return -1;
}

/* The node-set changes requested since the last poll (--preempt, autohet
 * preempt / SIGTERM requests, the spot trace) into gone/added; *notice the
 * notice they come with, why their source. 1 if any. */
static int poll_changes(run_state *s, int *gone, int *added, double *notice, char *why, size_t whylen) {
    int any = 0;
    *notice = s->o->notice_s;
    for (int i = 0; i < s->n_pre; i++) {
        int ni = run_node_index(s, s->pre[i].node);
        if (!s->pre[i].fired && s->step >= s->pre[i].step && ni >= 0) {
            s->pre[i].fired = 1;
            if (s->alive[ni])
                gone[ni] = 1, any = 1, snprintf(why, whylen, "preempt");
        }
    }
    double cmd_notice = 0;
    int from_signal = 0;
    if (run_poll_control(s, gone, &cmd_notice, &from_signal))
        any = 1, *notice = cmd_notice,
        snprintf(why, whylen, "%s", from_signal ? "grace-period signal" : "preempt command");
    if (run_poll_trace(s, gone, added))
        any = 1, snprintf(why, whylen, "spot trace");
    double t_heard = 0;
    char kind[32];
    if (run_poll_heartbeats(s, gone, &t_heard, kind, sizeof kind)) /* a silent host: no notice to give */
        any = 1, *notice = 0, snprintf(why, whylen, "%s", kind), s->change_t_event = t_heard;
    return any;
}

/* Removals with notice are held back (into ns) while the job runs on;
 * gone[] is cleared of them. */
static void hold_for_notice(run_state *s, notice_state *ns, int *gone, double notice, const char *why) {
    int removals = 0;
    for (int i = 0; i < s->inv.n_nodes; i++)
        removals |= gone[i];
    if (!(notice > 0 && removals && s->pid > 0))
        return;
    for (int i = 0; i < s->inv.n_nodes; i++)
        ns->gone[i] |= gone[i], gone[i] = 0;
    if (ns->on)
        return;
    ns->on = 1, ns->step = s->step, ns->end = ah_wall_clock_s() + notice;
    snprintf(ns->why, sizeof ns->why, "%s", why);
    printf("autohet run: %s with %.1f s notice: stopping after the next committed step\n", why, notice);
    fflush(stdout);
}

/* Once the noticed job committed its next step (or the notice ran out): stop
 * it, push the leaving nodes' memory tiers to peers, replan. 0, or -1 with err. */
static int stop_after_notice(run_state *s, notice_state *ns, char *err, size_t errlen) {
    if (!ns->on || (s->step <= ns->step && ah_wall_clock_s() < ns->end))
        return 0;
    ns->on = 0;
    double t_stop = ah_wall_clock_s();
    int step_at = s->step;
    killpg(s->pid, SIGKILL);
    run_reap(s, 5.0);
    run_tail_log(s);
    double pushed = run_push_to_peers(s, ns->gone);
    char cause[512];
    int len = snprintf(cause, sizeof cause, "%s with notice:", ns->why);
    for (int i = 0; i < s->inv.n_nodes; i++)
        if (ns->gone[i] && s->alive[i] && len < (int)sizeof cause - 80) {
            len += snprintf(cause + len, sizeof cause - (size_t)len, " lost %s", s->inv.nodes[i].name);
            run_wipe_node(s, s->inv.nodes[i].name);
            s->alive[i] = 0;
        }
    memset(ns->gone, 0, sizeof ns->gone);
    printf("autohet run: pushed %.1f MB of memory-tier layers to peers before the nodes left\n", pushed / 1e6);
    if (change_nodes(s, cause, t_stop, step_at, err, errlen) != 0)
        return -1;
    if (s->pending)
        cJSON_AddNumberToObject(s->pending, "pushed_bytes", pushed);
    return 0;
}

/* Supervises the generations until the run ends; the exit status. */
static int supervise(run_state *s, int *final_step) {
    char err[1024];
    notice_state ns;
    memset(&ns, 0, sizeof ns);
    for (;;) {
        run_sleep(0.002);
        run_state_beat(s);
        run_tail_log(s);
        finish_recovery(s);
        if (!s->pending && s->n_gone)
            run_purge_gone(s); /* the recovery is done: delete the preempted nodes' tiers */
        if (s->step > *final_step)
            *final_step = s->step;
        if (interrupted) {
            fprintf(stderr, "autohet run: interrupted; stopping the job\n");
            if (s->pid > 0) {
                killpg(s->pid, SIGKILL);
                run_reap(s, 1);
            }
            return 130;
        }
        if (s->pid <= 0 && (!s->trace || s->next_trace >= s->n_trace)) {
            fprintf(stderr,
                    "autohet run: no plan can run on the nodes left and the trace brings no more; stopping at "
                    "step %d of %d\n",
                    *final_step, s->o->steps);
            return 1;
        }
        int status = 0, ended = 0;
        if (run_poll_ends(s)) { /* a rank died: stop the job now, not after the launcher's ~1 s teardown */
            s->t_job_stop = ah_wall_clock_s();
            killpg(s->pid, SIGKILL);
            while (waitpid(s->pid, &status, 0) < 0 && errno == EINTR)
                ;
            if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
                status = 1 << 8; /* it had just ended by itself, but a rank failed */
            ended = 1;
        } else if (s->pid > 0 && waitpid(s->pid, &status, WNOHANG) == s->pid) {
            ended = 1;
        }
        if (ended) {
            int r = job_ended(s, status, final_step);
            if (r != 0)
                return r == 1 ? 0 : -r;
            continue;
        }
        int gone[MAX_NODES] = {0}, added[MAX_NODES] = {0};
        double notice;
        char why[64] = "";
        int any = poll_changes(s, gone, added, &notice, why, sizeof why);
        if (any)
            hold_for_notice(s, &ns, gone, notice, why);
        if (stop_after_notice(s, &ns, err, sizeof err) != 0) {
            fprintf(stderr, "autohet run: recovery failed: %s\n", err);
            return 1;
        }
        for (int i = 0; i < s->inv.n_nodes && !any; i++)
            any = added[i];
        if (any && apply_change(s, gone, added, why, err, sizeof err) != 0) {
            fprintf(stderr, "autohet run: recovery failed: %s\n", err);
            return 1;
        }
    }
}

static void print_start(const run_state *s, const char *how) {
    if (s->multi_host)
        printf("autohet run: %s, %d nodes on hosts from %s, run directory %s%s (tiers per host: memory "
               "%s/HOST, disk %s/HOST)\n",
               s->cfg.name, s->inv.n_nodes, s->host_source, s->run, how, s->host_mem, s->host_disk);
    else
        printf("autohet run: %s, %d nodes, run directory %s%s (memory tier %s)\n", s->cfg.name, s->inv.n_nodes,
               s->run, how, s->mem);
    fflush(stdout);
}

/* The generations' traces (--trace): each that trained its last step wrote RUN/trace-G.json (a generation
 * lost to a fault holds its events in memory and leaves none); the report's entries name them and, when
 * the run completed, the last one, the generation that trained the run's final steps, is copied to the
 * --trace file. 0, or -1 with the error printed. */
static int finish_traces(run_state *s, int completed) {
    if (!s->o->trace_path)
        return 0;
    char path[1200], last[1200] = "";
    int last_gen = -1;
    const cJSON *g;
    cJSON_ArrayForEach(g, s->gens) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(g, "generation");
        struct stat sb;
        if (!cJSON_IsNumber(n))
            continue;
        snprintf(path, sizeof path, "%s/trace-%d.json", s->run, n->valueint);
        if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
            continue;
        if (!cJSON_GetObjectItemCaseSensitive(g, "trace"))
            cJSON_AddStringToObject((cJSON *)g, "trace", path);
        if (n->valueint > last_gen)
            last_gen = n->valueint, snprintf(last, sizeof last, "%s", path);
    }
    if (!completed)
        return 0;
    if (last_gen < 0) {
        fprintf(stderr, "autohet run: --trace %s: no generation trained a step to trace; not written\n",
                s->o->trace_path);
        return 0;
    }
    char err[1024];
    if (ah_copy_file_atomic(last, s->o->trace_path, err, sizeof err) != 0) {
        fprintf(stderr, "autohet run: --trace: %s\n", err);
        return -1;
    }
    printf("autohet run: trace of generation %d written to %s (autohet analyze %s --diagnose --plan "
           "%s/plan-%d.json)\n",
           last_gen, s->o->trace_path, s->o->trace_path, s->run, last_gen);
    return 0;
}

void run_recovery_totals(const run_state *s, double *seconds, int *redone) {
    *seconds = 0, *redone = 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, s->recs) {
        const cJSON *sec = cJSON_GetObjectItemCaseSensitive(r, "seconds"),
                    *lost = cJSON_GetObjectItemCaseSensitive(r, "steps_lost");
        *seconds += cJSON_IsNumber(sec) ? sec->valuedouble : 0;
        *redone += cJSON_IsNumber(lost) && lost->valueint > 0 ? lost->valueint : 0;
    }
}

/* The run's last line: its steps and wall time, and what its recoveries cost. */
static void print_finish(const run_state *s, int final_step) {
    int n = cJSON_GetArraySize(s->recs), redone;
    double rec_s;
    run_recovery_totals(s, &rec_s, &redone);
    char cost[128] = "";
    if (n > 0)
        snprintf(cost, sizeof cost, " (%.2f s recovering, %d step%s trained again)", rec_s, redone,
                 redone == 1 ? "" : "s");
    printf("autohet run: finished %d steps in %.1f s with %d recover%s%s\n", final_step,
           ah_wall_clock_s() - s->t_start, n, n == 1 ? "y" : "ies", cost);
}

static int any_node_alive(const run_state *s) {
    for (int i = 0; i < s->inv.n_nodes; i++)
        if (s->alive[i])
            return 1;
    return 0;
}

/* Supervises the generations to the end of the run, then reports. The exit status. */
static int run_to_end(run_state *s) {
    int final_step = s->step, rc = supervise(s, &final_step);
    if (s->glog)
        fclose(s->glog);
    s->glog = NULL;
    if (s->pid > 0) {
        killpg(s->pid, SIGKILL);
        run_reap(s, 1);
    }
    if (rc == 0)
        print_finish(s, final_step);
    if (rc == 130 || (rc != 0 && !any_node_alive(s))) { /* the run can go on: its tiers and state stay */
        s->keep_tiers = 1;
        run_state_save(s);
        if (rc != 130)
            fprintf(stderr,
                    "autohet run: every node is lost; the durable tiers keep the last committed step: once the "
                    "nodes are back, the run goes on with: autohet run --resume %s\n",
                    s->run);
        else
            fprintf(stderr, "autohet run: the run can go on with: autohet run --resume %s\n", s->run);
    }
    if (finish_traces(s, rc == 0) != 0 && rc == 0)
        rc = 1;
    char err[1024];
    if (s->o->svg_path && run_write_svg(s, s->o->svg_path, final_step, err, sizeof err) != 0) {
        fprintf(stderr, "autohet run: --svg: %s\n", err);
        rc = rc == 0 ? 1 : rc;
    }
    if (write_report(s, final_step, rc == 0) != 0 && rc == 0)
        rc = 1;
    if (rc == 0) { /* (after the report: a controller killed before it is resumed, and writes it) */
        s->finished = 1;
        run_state_save(s);
    }
    run_purge_gone(s);
    return rc;
}

/* frees the run; rc, or 1 if --log could not be completed */
static int run_free(run_state *s, int rc) {
    if (s->mem[0] && !s->keep_tiers)
        run_rm_rf(s->mem); /* the memory tier is volatile: it goes with the run */
    if (!s->keep_tiers)
        run_remove_host_tiers(s); /* and across hosts both host-local tiers (the cloud tier stays) */
    char err[1024];
    if (s->log && ah_close_stream(s->log, s->o->log_path, err, sizeof err) != 0) {
        fprintf(stderr, "autohet run: --log %s\n", err);
        rc = rc ? rc : 1;
    }
    if (s->have_plan)
        ah_plan_free(&s->plan);
    if (s->replans) {
        ah_replan_table_free(s->replans);
        ah_plan_free(&s->replans_of);
    }
    cJSON_Delete(s->report);
    cJSON_Delete(s->gens);
    cJSON_Delete(s->recs);
    ah_profile_free(s->prof);
    ah_cluster_free(&s->inv);
    free(s->pre);
    free(s->trace);
    free(s->beat);
    if (s->beat_fd > 0)
        close(s->beat_fd);
    free(s);
    return rc;
}

int ah_run(const ah_run_options *o) {
    run_state *s = ah_xcalloc(1, sizeof *s);
    s->lock_fd = -1;
    char err[1024];
    int rc = 0;
    if (setup(s, o, err, sizeof err) != 0) {
        fprintf(stderr, "autohet run: %s\n", err);
        rc = AH_EXIT_BAD_INPUT;
        goto out;
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    print_start(s, "");
    if (!s->have_plan) {
        if (plan_for_alive(s, &s->plan, err, sizeof err) != 0) {
            fprintf(stderr, "autohet run: planning: %s\n", err);
            rc = AH_EXIT_BAD_INPUT;
            goto out;
        }
        s->have_plan = 1;
    }
    /* replans may choose any TP degree (or the forced one): recovery reshards */
    s->po.tp = o->replan_tp;
    char rankfile[700];
    snprintf(rankfile, sizeof rankfile, "%.500s/rankfile-0.txt", s->run);
    if (s->multi_host && run_place_generation(s, rankfile, 0, err, sizeof err) != 0) {
        fprintf(stderr, "autohet run: %s\n", err); /* the hosts cannot take the first plan */
        rc = AH_EXIT_BAD_INPUT;
        goto out;
    }
    if (start_generation(s, NULL, err, sizeof err) != 0) {
        fprintf(stderr, "autohet run: %s\n", err);
        rc = 1;
        goto out;
    }
    rc = run_to_end(s);
out:
    return run_free(s, rc);
}

/* A resumed run's directories: the run's own, its tiers where the state says */
static int setup_resumed_dirs(run_state *s, char *err, size_t errlen) {
    const char *base = strrchr(s->run, '/') ? strrchr(s->run, '/') + 1 : s->run;
    snprintf(s->disk, sizeof s->disk, "%.500s/disk", s->run);
    snprintf(s->cloud, sizeof s->cloud, "%.500s/cloud", s->run);
    snprintf(s->control, sizeof s->control, "%.500s/control", s->run);
    if (s->multi_host && run_host_tiers(s, base, err, errlen) != 0)
        return -1;
    if (!s->mem[0] || run_mkdir_p(s->mem) || run_mkdir_p(s->disk) || run_mkdir_p(s->cloud) ||
        run_mkdir_p(s->control)) {
        snprintf(err, errlen, "cannot make the tier directories of %s (%s)", s->run, strerror(errno));
        return -1;
    }
    return 0;
}

/* --log as the killed controller left it: a line it was writing when it died is cut off (a resumed run
 * appends whole lines after the last whole one) */
static void drop_torn_line(const char *path) {
    FILE *f = path ? fopen(path, "a+") : NULL;
    if (f && ah_step_log_keep_through(f, INT_MAX) < 0)
        fprintf(stderr, "autohet run: --resume: cannot cut the torn last line of %s\n", path);
    if (f)
        fclose(f);
}

/* The last step --log holds (a resumed run appends only later ones); -1 if none */
static int last_logged_step(const char *path) {
    FILE *f = path ? fopen(path, "r") : NULL;
    char line[2048];
    int last = -1;
    while (f && fgets(line, sizeof line, f)) {
        int step = ah_step_log_line_step(line);
        if (step > last)
            last = step;
    }
    if (f)
        fclose(f);
    return last;
}

/* Every process of the run that the dead controller left (ranks of any
 * generation, their launcher): SIGKILL until none is left. Across hosts the
 * ranks on each host through the launcher's agent. */
static void end_orphans(run_state *s, int old_gen) {
    int n = 0;
    for (int g = old_gen; g <= s->gen; g++) { /* the generation it may have launched after its last save */
        int keep = s->gen;
        s->gen = g;
        for (int i = 0; i < s->inv.n_nodes && s->multi_host; i++)
            n += run_kill_host(s, s->inv.nodes[i].name);
        s->gen = keep;
    }
    for (double t0 = ah_wall_clock_s(); ah_wall_clock_s() - t0 < 10;) {
        int k = run_kill_run_processes(s);
        n += k;
        if (k == 0)
            break;
        run_sleep(0.01);
    }
    run_remove_job_shm(s);
    printf("autohet run: resume: %d process%s of the old controller's jobs ended\n", n, n == 1 ? "" : "es");
}

static int resume_setup(run_state *s, const ah_run_options *o, const cJSON *doc, char *err, size_t errlen) {
    char real[PATH_MAX];
    snprintf(s->run, sizeof s->run, "%.500s", realpath(o->run_dir, real) ? real : o->run_dir);
    s->o = o;
    s->pid = -1;
    if (run_state_lock(s, err, errlen) != 0)
        return -1;
    s->t_start = ah_wall_clock_s();
    if (setup_inputs(s, o, err, errlen) != 0)
        return -1;
    run_state_restore(s, doc);
    drop_torn_line(o->log_path);
    if (setup_resumed_dirs(s, err, errlen) != 0 || open_outputs(s, "a", err, errlen) != 0 ||
        run_heartbeat_listen(s, err, errlen) != 0)
        return -1;
    s->log_skip_through = last_logged_step(o->log_path);
    char p[1300]; /* the plan of the last generation (a node change replans anyway) */
    snprintf(p, sizeof p, "%s/plan-%d.json", s->run, s->gen);
    ah_plan last;
    if (ah_plan_read_json(p, &s->catalog, &last, err, errlen) == 0) {
        if (s->have_plan)
            ah_plan_free(&s->plan);
        s->plan = last, s->have_plan = 1;
    }
    s->po.tp = o->replan_tp;
    return 0;
}

int ah_run_resume(const char *run_dir, const char *self_exe) {
    ah_run_options o;
    cJSON *doc = NULL;
    char err[1024];
    if (run_state_read_options(run_dir, &o, &doc, err, sizeof err) != 0) {
        fprintf(stderr, "autohet run: %s\n", err);
        return AH_EXIT_BAD_INPUT;
    }
    o.self_exe = self_exe;
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(doc, "finished"))) { /* (a requeued job, say) */
        const char *mem = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(doc, "memory_tier"));
        /* its controller died before it removed it (only a path of the shape setup_fresh_dirs gives) */
        if (mem && (!strncmp(mem, "/dev/shm/autohet-", 17) || strstr(mem, "/memory")) && access(mem, F_OK) == 0)
            run_rm_rf(mem);
        printf("autohet run: %s finished its %d steps already: nothing to resume (its model: %s/cloud)\n", run_dir,
               o.steps, run_dir);
        cJSON_Delete(doc);
        return 0;
    }
    run_state *s = ah_xcalloc(1, sizeof *s);
    s->lock_fd = -1;
    s->keep_tiers = 1; /* until the run goes on, nothing of it is removed */
    int rc = AH_EXIT_BAD_INPUT;
    if (resume_setup(s, &o, doc, err, sizeof err) != 0) {
        fprintf(stderr, "autohet run: --resume: %s\n", err);
        goto out;
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    print_start(s, " (resumed)");
    double t_last = run_state_last_beat(s);
    int old_gen = s->gen, old_pid = (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(doc, "controller_pid"));
    while (1) { /* a generation it launched after its last save has a plan file */
        char p[1300];
        snprintf(p, sizeof p, "%s/plan-%d.json", s->run, s->gen + 1);
        if (access(p, F_OK) != 0)
            break;
        s->gen++;
    }
    end_orphans(s, old_gen);
    snprintf(s->glog_path, sizeof s->glog_path, "%s/gen-%d.log", s->run, s->gen);
    s->step = s->start_step;
    run_tail_log(s); /* the steps its job logged: what a resume loses is counted from the last */
    s->keep_tiers = 0;
    char cause[256];
    if (!any_node_alive(s)) { /* the controller stopped with every node lost: the user resumes once they are back */
        for (int i = 0; i < s->inv.n_nodes; i++)
            s->alive[i] = 1;
        snprintf(cause, sizeof cause,
                 "controller: resumed by autohet run --resume on the inventory's nodes (every node had been lost)");
    } else
        snprintf(cause, sizeof cause, "controller: resumed by autohet run --resume (the controller, pid %d, ended)",
                 old_pid);
    if (change_nodes(s, cause, t_last > 0 ? t_last : ah_wall_clock_s(), s->step, err, sizeof err) != 0) {
        fprintf(stderr, "autohet run: recovery failed: %s\n", err);
        rc = 1;
        goto out;
    }
    rc = run_to_end(s);
out:
    rc = run_free(s, rc);
    cJSON_Delete(doc);
    return rc;
}
