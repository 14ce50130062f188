/* autohet hosts: put a plan's nodes on hosts and write the Open MPI rankfile
 * that starts every rank on its node's host (docs/multi-host.md). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "autohet/hosts.h"
#include "autohet/plan.h"
#include "autohet/schedule.h"
#include "cli/cli.h"

static void hosts_usage(FILE *f) {
    fprintf(f,
            "usage: autohet hosts --plan PLAN.json --rankfile OUT [--hostfile FILE | --slurm NODELIST]\n"
            "                     [--plan-out PLAN2.json] [--devices FILE] [--cpus-per-gpu N]\n\n"
            "Puts the plan's nodes on hosts and writes an Open MPI rankfile that starts every rank on its\n"
            "node's host, at the slot of its GPU (ranks numbered as autohet train numbers them: replica by\n"
            "replica, stage by stage, TP rank by TP rank). Prints where every rank runs and the mpirun line.\n\n"
            "Where the hosts come from (the first that applies): --hostfile; --slurm; the nodes' \"host\"\n"
            "fields in the plan (from the inventory's \"host\"); $SLURM_JOB_NODELIST. A host list maps the\n"
            "plan's cluster nodes to hosts in order: node i runs on the i-th host.\n\n"
            "  --plan      the plan document (autohet plan --json)\n"
            "  --rankfile  the rankfile to write: 'rank R=HOST slot=CORES', one line a rank\n"
            "  --hostfile  an Open MPI hostfile: 'NAME [slots=N] [max_slots=M]' a line, '#' comments; a\n"
            "              host's slots must cover the ranks the plan puts on its node\n"
            "  --slurm     a Slurm node list in its compressed form, e.g. 'gpu[01-04,07]'\n"
            "  --plan-out  also write the plan with every node's host, so that autohet train checks at\n"
            "              start that every rank runs on its node's host (the planner's extra top-level\n"
            "              items such as \"comparison\" are not carried over)\n"
            "  --devices   device catalog overrides (as autohet plan's), for a plan of GPU types the\n"
            "              built-in catalog does not know\n"
            "  --cpus-per-gpu  cores a rank is bound to (default 1): the rank of GPU g gets cores g*N to\n"
            "              g*N+N-1 of its host, so that where a node's GPUs are split evenly over its sockets\n"
            "              (cores numbered socket by socket) every rank runs on its GPU's socket; give the\n"
            "              host's cores divided by its GPUs (Open MPI binds every rank of a rankfile)\n\n"
            "exit status: 0 success, 2 bad input (one line on stderr names the file, line and field)\n");
}

typedef struct {
    const char *plan, *rankfile, *hostfile, *slurm, *plan_out, *devices;
    int cpus_per_gpu;
} hosts_args;

static int parse_args(int argc, char **argv, hosts_args *a, char *msg, size_t n) {
    static cli_options opts;
    cli_long_options("plan=p rankfile=r hostfile=H slurm=S plan-out=o devices=F cpus-per-gpu=c", &opts);
    memset(a, 0, sizeof *a);
    a->cpus_per_gpu = 1;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "", opts.opts, NULL)) != -1) {
        switch (c) {
        case 'p': a->plan = optarg; break;
        case 'r': a->rankfile = optarg; break;
        case 'H': a->hostfile = optarg; break;
        case 'S': a->slurm = optarg; break;
        case 'o': a->plan_out = optarg; break;
        case 'F': a->devices = optarg; break;
        case 'c':
            if (cli_int_value("--cpus-per-gpu", optarg, 1, &a->cpus_per_gpu, msg, n) != 0)
                return -1;
            if (a->cpus_per_gpu > 4096) {
                snprintf(msg, n, "--cpus-per-gpu '%s': at most 4096 cores a GPU", optarg);
                return -1;
            }
            break;
        default: return cli_unknown_option("hosts", argv[optind - 1], msg, n);
        }
    }
    const char *why = optind < argc          ? "unexpected argument (see autohet hosts --help)"
                      : !a->plan             ? "--plan is required (see autohet hosts --help)"
                      : !a->rankfile         ? "--rankfile is required: the rankfile to write"
                      : a->hostfile && a->slurm ? "--hostfile and --slurm exclude each other"
                                                : NULL;
    if (why) {
        if (optind < argc)
            snprintf(msg, n, "'%s': %s", argv[optind], why);
        else
            snprintf(msg, n, "%s", why);
        return -1;
    }
    return cli_check_output("--rankfile", a->rankfile, msg, n) || cli_check_output("--plan-out", a->plan_out, msg, n)
               ? -1
               : 0;
}

/* Fills the plan's hosts from the chosen source; *from names it. 0, or -1 with msg. */
static int map_hosts(const hosts_args *a, ah_plan *plan, const char **from, char *msg, size_t n) {
    ah_host_list hl;
    const char *env = getenv("SLURM_JOB_NODELIST");
    int rc;
    if (a->hostfile) {
        *from = a->hostfile;
        rc = ah_hostfile_load(a->hostfile, &hl, msg, n);
    } else if (a->slurm) {
        *from = "--slurm";
        rc = ah_slurm_nodelist_parse(a->slurm, "--slurm", &hl, msg, n);
    } else if (ah_cluster_has_hosts(&plan->cluster)) {
        *from = "the plan's nodes";
        return 0;
    } else if (env && *env) {
        *from = "SLURM_JOB_NODELIST";
        rc = ah_slurm_nodelist_parse(env, "SLURM_JOB_NODELIST", &hl, msg, n);
    } else {
        snprintf(msg, n,
                 "%s names no hosts: give --hostfile FILE or --slurm NODELIST (or run inside a Slurm allocation)",
                 a->plan);
        return -1;
    }
    if (rc != 0)
        return -1;
    rc = ah_hosts_apply(plan, &hl, msg, n);
    ah_host_list_free(&hl);
    return rc;
}

static void print_places(const ah_plan *plan, int cpus_per_gpu, FILE *f) {
    int n = ah_plan_slots(plan);
    ah_rank_place *pl = calloc((size_t)n, sizeof *pl);
    if (pl == NULL)
        return;
    ah_plan_rank_places(plan, pl);
    fprintf(f, "%-5s %-7s %-5s %-7s %-16s %-24s %s\n", "rank", "replica", "stage", "tp_rank", "node", "host",
            "slot");
    for (int r = 0; r < n; r++) {
        const ah_node *nd = &plan->cluster.nodes[pl[r].node];
        char slot[32];
        fprintf(f, "%-5d %-7d %-5d %-7d %-16s %-24s %s\n", r, pl[r].replica, pl[r].stage, pl[r].tp_rank, nd->name,
                nd->host, ah_rankfile_slot(pl[r].gpu, cpus_per_gpu, slot, sizeof slot));
    }
    free(pl);
}

int cmd_hosts(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        hosts_usage(stdout);
        return 0;
    }
    hosts_args a;
    char msg[1024];
    if (parse_args(argc, argv, &a, msg, sizeof msg) != 0)
        return cli_bad_input("hosts", msg);
    ah_plan plan;
    /* --plan-out keeps what else the input document held (the planner's
     * comparison, top plans, objective), taken in the same one parse */
    struct cJSON *extra = NULL;
    ah_device_catalog catalog = *ah_device_catalog_builtin();
    if (a.devices && ah_device_load_overrides(&catalog, a.devices, msg, sizeof msg) != 0)
        return cli_bad_input("hosts", msg);
    if (ah_plan_read_json_extras(a.plan, &catalog, &plan, a.plan_out ? &extra : NULL, msg, sizeof msg) != 0)
        return cli_bad_input("hosts", msg);
    const char *from = NULL;
    int named = ah_cluster_has_hosts(&plan.cluster); /* a host list must then agree with them (ah_hosts_apply) */
    int rc = map_hosts(&a, &plan, &from, msg, sizeof msg) || ah_rankfile_write(&plan, a.cpus_per_gpu, a.rankfile, msg, sizeof msg) ||
             (a.plan_out && ah_plan_write_json(&plan, extra, a.plan_out, msg, sizeof msg));
    cJSON_Delete(extra);
    if (rc) {
        ah_plan_free(&plan);
        return cli_bad_input("hosts", msg);
    }
    int ranks = ah_plan_slots(&plan);
    printf("autohet hosts: %s, %d rank%s, hosts from %s\n", a.plan, ranks, ranks == 1 ? "" : "s", from);
    print_places(&plan, a.cpus_per_gpu, stdout);
    printf("wrote %s%s%s\n", a.rankfile, a.plan_out ? " and " : "", a.plan_out ? a.plan_out : "");
    const char *train_plan = a.plan_out ? a.plan_out : a.plan;
    /* (no --model: the plan names its model, a preset or a config.json alike) */
    printf("run: mpirun -np %d --rankfile %s autohet train --plan %s%s%s --data TEXT\n", ranks, a.rankfile, train_plan,
           a.devices ? " --devices " : "", a.devices ? a.devices : "");
    if (!a.plan_out && !named)
        printf("note: %s names no hosts, so autohet train cannot check where its ranks run: give --plan-out\n",
               a.plan);
    ah_plan_free(&plan);
    return 0;
}
