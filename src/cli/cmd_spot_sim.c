/* autohet spot-sim: goodput of recovery policies over a spot-availability
 * trace (docs/spot-sim.md). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "autohet/ckpt.h"
#include "autohet/plan.h"
#include "autohet/spot_sim.h"
#include "cli/cli.h"
#include "util/clock.h"
#include "util/atomic_file.h"

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: autohet spot-sim --trace FILE --node SHORTHAND --model NAME|config.json --global-batch G\n"
        "                        --seq S [--policy all|autohet|full-reload|static] [--json FILE] [--svg "
        "FILE]\n"
        "                        [--profile PATH] [--detect S] [--restart S] [--cloud-bandwidth MB/s]\n"
        "                        [--memory-bandwidth GB/s] [--ckpt-every K] [--measure-planning]\n"
        "                        [--replan-tp T|any]\n\n"
        "Replays a spot-availability trace (<time_ms>,<add|remove>,<node> per line, e.g.\n"
        "tests/fixtures/spot-traces/aws-p3-bamboo.csv) through the planner, the simulator and the recovery\n"
        "cost model, and compares policies on the same trace. At every change of the node set (events of "
        "one\n"
        "timestamp together) a policy may stop, pay detection, replanning, a restart and the\n"
        "state transfer of its new plan, lose the iterations it cannot restore, and run at the simulated\n"
        "iteration time of its plan until the next change.\n\n"
        "  --node        each trace node is this node: GPUSxTYPE (8xA100-40G), or a mix drawn from the "
        "node's\n"
        "                name with weights: 8xA100-40G=3,8xV100-16G=1\n"
        "  --policy      autohet: replan + layer-bitmap recovery (own memory, peers over the node NIC, "
        "cloud);\n"
        "                full-reload: Varuna-like, replan + every byte from the last cloud checkpoint;\n"
        "                static: one plan sized for the fewest nodes the trace has, waits when it cannot "
        "run,\n"
        "                restarts from the last cloud checkpoint; all (default)\n"
        "  --replan-tp   TP degree of every stage of every plan (default any: the planner's choice for\n"
        "                each node set, as autohet plan; a plan of other degrees than the state it\n"
        "                recovers from reshards, as in autohet run)\n"
        "  --detect      seconds from a preemption to the job stopped (default 5)\n"
        "  --restart     seconds to relaunch the job (default 30)\n"
        "  --cloud-bandwidth   per node, MB/s (default 100, as the recovery benchmark)\n"
        "  --memory-bandwidth  a node reading its memory tier, GB/s (default 10)\n"
        "  --ckpt-every  cloud checkpoint every K iterations (default 50)\n"
        "  --measure-planning  charge the planner's measured time for each new node set (identical runs\n"
        "                then differ); default: the modelled 0.18 s x (GPUs / 64)^1.36, so that a replay\n"
        "                is a function of its inputs (docs/spot-sim.md)\n"
        "  --json FILE   policies: {NAME: {samples, avg_samples_per_s, downtime_s, downtime_by_cause, ...}}\n"
        "  --svg FILE    samples/s over time per policy, the node count beneath\n\n"
        "exit status: 0 success, 2 bad input (one line on stderr), 1 runtime failure\n");
}

static cJSON *result_json(const ah_spot_result *r, const ah_spot_costs *c, const char *trace,
                          const char *node, const ah_model_config *m, int gb, int seq, double wall_s) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "format", "autohet-spot-sim");
    cJSON_AddNumberToObject(o, "version", 1);
    cJSON *in = cJSON_AddObjectToObject(o, "input");
    cJSON_AddStringToObject(in, "trace", trace);
    cJSON_AddStringToObject(in, "node", node);
    cJSON_AddStringToObject(in, "model", m->name);
    cJSON_AddNumberToObject(in, "global_batch", gb);
    cJSON_AddNumberToObject(in, "seq", seq);
    cJSON *cc = cJSON_AddObjectToObject(o, "costs");
    cJSON_AddNumberToObject(cc, "detect_s", c->detect_s);
    cJSON_AddNumberToObject(cc, "restart_s", c->restart_s);
    cJSON_AddNumberToObject(cc, "memory_gbs", c->mem_gbs);
    cJSON_AddNumberToObject(cc, "cloud_mbs", c->cloud_mbs);
    cJSON_AddNumberToObject(cc, "ckpt_every", c->ckpt_every);
    cJSON_AddNumberToObject(cc, "bytes_per_param", c->bytes_per_param);
    cJSON_AddStringToObject(cc, "planning", c->measure_planning ? "measured" : "modelled");
    cJSON *tr = cJSON_AddObjectToObject(o, "trace");
    cJSON_AddNumberToObject(tr, "duration_s", r->duration_s);
    cJSON_AddNumberToObject(tr, "events", r->n_events);
    cJSON_AddNumberToObject(tr, "changes", r->n_changes);
    cJSON_AddNumberToObject(tr, "max_nodes", r->max_nodes);
    cJSON_AddNumberToObject(tr, "min_nodes", r->min_nodes);
    cJSON_AddNumberToObject(o, "tp", r->tp);
    cJSON *degs = cJSON_AddArrayToObject(o, "tp_degrees");
    for (int k = 0; k <= AH_MAX_TP_LOG2; k++)
        if (r->tp_degrees & (1u << k))
            cJSON_AddItemToArray(degs, cJSON_CreateNumber(1 << k));
    cJSON_AddNumberToObject(o, "static_nodes", r->static_nodes);
    cJSON_AddNumberToObject(o, "plans_computed", r->plans_computed);
    if (c->measure_planning) /* a measured run carries its wall time; a modelled one stays reproducible */
        cJSON_AddNumberToObject(o, "replay_wall_s", wall_s);
    cJSON *pols = cJSON_AddObjectToObject(o, "policies");
    for (int p = 0; p < AH_POLICY_N; p++) {
        const ah_spot_policy_result *pr = &r->pol[p];
        if (!pr->enabled)
            continue;
        cJSON *x = cJSON_AddObjectToObject(pols, ah_spot_policy_name((ah_spot_policy)p));
        cJSON_AddNumberToObject(x, "samples", pr->samples);
        cJSON_AddNumberToObject(x, "avg_samples_per_s", pr->avg_samples_per_s);
        cJSON_AddNumberToObject(x, "downtime_s", pr->downtime_s);
        cJSON *d = cJSON_AddObjectToObject(x, "downtime_by_cause");
        for (int k = 0; k < AH_DOWN_N; k++)
            cJSON_AddNumberToObject(d, ah_down_cause_name((ah_down_cause)k), pr->down_s[k]);
        cJSON_AddNumberToObject(x, "lost_samples", pr->lost_samples);
        cJSON_AddNumberToObject(x, "restarts", pr->restarts);
        cJSON *b = cJSON_AddObjectToObject(x, "bytes_by_tier");
        for (int k = 0; k < AH_TIER_N; k++)
            cJSON_AddNumberToObject(b, ah_tier_name(k), pr->bytes[k]);
        cJSON *ts = cJSON_AddArrayToObject(x, "timeline");
        for (int i = 0; i < pr->n_seg; i++) {
            cJSON *s = cJSON_CreateArray();
            cJSON_AddItemToArray(s, cJSON_CreateNumber(pr->seg[i].t0));
            cJSON_AddItemToArray(s, cJSON_CreateNumber(pr->seg[i].t1));
            cJSON_AddItemToArray(s, cJSON_CreateNumber(pr->seg[i].samples_per_s));
            cJSON_AddItemToArray(ts, s);
        }
    }
    return o;
}

typedef struct {
    const char *trace, *node, *model, *policy, *json, *svg, *profile, *replan_tp;
    int gb, seq, tp;
    ah_spot_costs c;
} spot_args;

/* 0, or -1 with msg */
static int parse_args(int argc, char **argv, spot_args *a, char *msg, size_t n) {
    static cli_options opts;
    cli_long_options(
        "trace=t node=n model=m global-batch=G seq=L policy=p json=j svg=s profile=P detect=d "
        "restart=r cloud-bandwidth=c memory-bandwidth=M ckpt-every=K measure-planning!T replan-tp=Y",
        &opts);
    memset(a, 0, sizeof *a);
    a->policy = "all";
    ah_spot_costs_default(&a->c);
    optind = 1;
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, "", opts.opts, NULL)) != -1) {
        int *iv = NULL;
        double *dv = NULL, dmin = 0;
        switch (ch) {
        case 't': a->trace = optarg; break;
        case 'n': a->node = optarg; break;
        case 'm': a->model = optarg; break;
        case 'p': a->policy = optarg; break;
        case 'j': a->json = optarg; break;
        case 's': a->svg = optarg; break;
        case 'P': a->profile = optarg; break;
        case 'Y': a->replan_tp = optarg; break;
        case 'T': a->c.measure_planning = 1; break;
        case 'G': iv = &a->gb; break;
        case 'L': iv = &a->seq; break;
        case 'K': iv = &a->c.ckpt_every; break;
        case 'd': dv = &a->c.detect_s; break;
        case 'r': dv = &a->c.restart_s; break;
        case 'c': dv = &a->c.cloud_mbs, dmin = 1e-9; break;
        case 'M': dv = &a->c.mem_gbs, dmin = 1e-9; break;
        default: return cli_unknown_option("spot-sim", argv[optind - 1], msg, n);
        }
        if (iv && (cli_parse_int(optarg, iv) != 0 || *iv < 1)) {
            snprintf(msg, n, "%s '%s': expected a positive integer", argv[optind - 2], optarg);
            return -1;
        }
        if (dv && (cli_parse_double(optarg, dv) != 0 || !(*dv >= dmin))) {
            snprintf(msg, n, "%s '%s': expected a number >= %g", argv[optind - 2], optarg, dmin);
            return -1;
        }
    }
    if (optind < argc) {
        snprintf(msg, n, "unexpected argument '%s' (see autohet spot-sim --help)", argv[optind]);
        return -1;
    }
    if (!a->trace || !a->node || !a->model || !a->gb || !a->seq) {
        snprintf(msg, n, "--trace, --node, --model, --global-batch and --seq are required");
        return -1;
    }
    return cli_check_output("--json", a->json, msg, n) || cli_check_output("--svg", a->svg, msg, n) ? -1 : 0;
}

/* --replan-tp into a->tp (0: any), checked against the model and the node
 * types: a degree no node fits would leave every policy waiting. 0, or -1
 * with msg. */
static int parse_replan_tp(spot_args *a, const ah_model_config *m, const ah_spot_node_mix *mix, char *msg,
                           size_t n) {
    a->tp = 0;
    if (!a->replan_tp || !strcmp(a->replan_tp, "any"))
        return 0;
    char why[256];
    int fits = 0;
    if (cli_parse_int(a->replan_tp, &a->tp) != 0 || a->tp < 1 || a->tp > 8 || (a->tp & (a->tp - 1))) {
        snprintf(msg, n, "--replan-tp '%s': expected any or 1, 2, 4 or 8 (the degrees the planner searches)",
                 a->replan_tp);
        return -1;
    }
    if (ah_stage_tp_problem(m, a->tp, why, sizeof why) != 0) {
        snprintf(msg, n, "--replan-tp %s: %s", a->replan_tp, why);
        return -1;
    }
    for (int i = 0; i < mix->n; i++)
        fits |= mix->node[i].gpus >= a->tp;
    if (!fits) {
        snprintf(msg, n,
                 "--replan-tp %d: no node type of --node has %d GPUs (TP groups stay inside one node)", a->tp,
                 a->tp);
        return -1;
    }
    return 0;
}

/* --policy into enabled[]; 0, or -1 */
static int parse_policy(const char *policy, int *enabled) {
    int any = 0;
    for (int p = 0; p < AH_POLICY_N; p++)
        any |= enabled[p] = !strcmp(policy, "all") || !strcmp(policy, ah_spot_policy_name((ah_spot_policy)p));
    return any ? 0 : -1;
}

static void print_result(const ah_spot_result *r, const spot_args *a, const ah_model_config *m,
                         double wall_s) {
    const ah_spot_costs *c = &a->c;
    char tps[64] = "", *p = tps;
    for (int k = 0; k <= AH_MAX_TP_LOG2; k++)
        if (r->tp_degrees & (1u << k))
            p += snprintf(p, sizeof tps - (size_t)(p - tps), "%s%d", p == tps ? "" : ",", 1 << k);
    char tp_text[96];
    if (r->tp)
        snprintf(tp_text, sizeof tp_text, "TP %d", r->tp);
    else
        snprintf(tp_text, sizeof tp_text, "TP any (%s used)", tps[0] ? tps : "none");
    printf("autohet spot-sim: %s, global batch %d x seq %d, %s; trace %s: %d events, %d changes over %.2f h, "
           "%d-%d nodes of %s\n",
           m->name, a->gb, a->seq, tp_text, a->trace, r->n_events, r->n_changes, r->duration_s / 3600,
           r->min_nodes, r->max_nodes, a->node);
    printf("costs: detection %.0f s, restart %.0f s, memory %.0f GB/s, peers at the node NIC, cloud %.0f "
           "MB/s per node, cloud checkpoint every %d iterations, %.0f B/param of state, planning %s; static "
           "plan on %d nodes\n\n",
           c->detect_s, c->restart_s, c->mem_gbs, c->cloud_mbs, c->ckpt_every, c->bytes_per_param,
           c->measure_planning ? "measured" : "modelled", r->static_nodes);
    printf("%-12s %14s %12s %10s %9s %9s %9s %9s %9s %12s %9s\n", "policy", "samples", "samples/s", "down h",
           "detect h", "plan h", "restart h", "xfer h", "wait h", "lost samp.", "restarts");
    for (int p = 0; p < AH_POLICY_N; p++) {
        const ah_spot_policy_result *pr = &r->pol[p];
        if (!pr->enabled)
            continue;
        printf("%-12s %14.0f %12.2f %10.2f %9.3f %9.3f %9.3f %9.3f %9.3f %12.0f %9d\n",
               ah_spot_policy_name((ah_spot_policy)p), pr->samples, pr->avg_samples_per_s,
               pr->downtime_s / 3600, pr->down_s[AH_DOWN_DETECT] / 3600, pr->down_s[AH_DOWN_PLAN] / 3600,
               pr->down_s[AH_DOWN_RESTART] / 3600, pr->down_s[AH_DOWN_TRANSFER] / 3600,
               pr->down_s[AH_DOWN_WAIT] / 3600, pr->lost_samples, pr->restarts);
    }
    printf("\nreplayed in %.3f s (%d plans computed)\n", wall_s, r->plans_computed);
}

/* --json and --svg; 0 or 1 */
static int write_outputs(const ah_spot_result *r, const spot_args *a, const ah_model_config *m,
                         double wall_s) {
    char msg[768];
    if (a->json) {
        cJSON *o = result_json(r, &a->c, a->trace, a->node, m, a->gb, a->seq, wall_s);
        char *txt = cJSON_Print(o);
        int rc = ah_write_file_atomic(a->json, txt, strlen(txt), msg, sizeof msg);
        free(txt);
        cJSON_Delete(o);
        if (rc != 0) {
            fprintf(stderr, "autohet spot-sim: --json: %s\n", msg);
            return 1;
        }
    }
    if (a->svg) {
        char title[256];
        snprintf(title, sizeof title, "%s on %s spot nodes (%.1f h trace)", m->name, a->node,
                 r->duration_s / 3600);
        if (ah_spot_write_svg(r, title, a->svg, msg, sizeof msg) != 0) {
            fprintf(stderr, "autohet spot-sim: --svg: %s\n", msg);
            return 1;
        }
    }
    return 0;
}

int cmd_spot_sim(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    spot_args a;
    char msg[4400];
    if (parse_args(argc, argv, &a, msg, sizeof msg) != 0)
        return cli_bad_input("spot-sim", msg);
    int enabled[AH_POLICY_N] = {0};
    if (parse_policy(a.policy, enabled) != 0)
        return cli_bad_input("spot-sim", "--policy: expected all, autohet, full-reload or static");
    ah_spot_node_mix mix;
    ah_model_config m;
    if (ah_spot_node_mix_parse(a.node, ah_device_catalog_builtin(), &mix, msg, sizeof msg) != 0 ||
        ah_model_resolve(a.model, &m, msg, sizeof msg) != 0 ||
        parse_replan_tp(&a, &m, &mix, msg, sizeof msg) != 0)
        return cli_bad_input("spot-sim", msg);
    ah_spot_event *ev = NULL;
    int n = 0;
    if (ah_spot_trace_load(a.trace, &ev, &n, msg, sizeof msg) != 0)
        return cli_bad_input("spot-sim", msg);
    ah_profile *prof = a.profile ? ah_profile_load(a.profile, msg, sizeof msg) : ah_profile_analytic();
    for (int i = 0; prof && i < mix.n; i++)
        if (!ah_profile_has_device(prof, &m, &mix.node[i].dev)) { /* never a smaller cluster in silence */
            snprintf(msg, sizeof msg, "--profile %s has no data for GPU '%s' of --node at this model's %d layers",
                     a.profile, mix.node[i].dev.name, ah_model_num_layers(&m));
            ah_profile_free(prof);
            prof = NULL;
        }
    if (!prof) {
        free(ev);
        return cli_bad_input("spot-sim", msg);
    }
    ah_spot_result r;
    double t0 = ah_now_s();
    int rc = ah_spot_replay(ev, n, &mix, &m, prof, a.gb, a.seq, a.tp, &a.c, enabled, &r, msg, sizeof msg);
    double wall_s = ah_now_s() - t0;
    free(ev);
    ah_profile_free(prof);
    if (rc != 0)
        return cli_bad_input("spot-sim", msg);
    print_result(&r, &a, &m, wall_s);
    rc = write_outputs(&r, &a, &m, wall_s);
    ah_spot_result_free(&r);
    return rc;
}
