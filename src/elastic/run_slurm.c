/* autohet run inside a Slurm allocation (docs/multi-host.md, "Inside Slurm"):
 * what the allocation says that the ranks cannot.
 *
 *  - Which hosts the job still has. Submitted with --no-kill, a job whose node
 *    fails (or is set down) keeps running on the others and its node list
 *    shrinks; the failed node's tasks die and Open MPI takes the whole
 *    generation down with them, so from the ranks' records alone every rank
 *    "vanished". The node list of the job (squeue) names the host that left.
 *  - Which hosts a generation uses: Open MPI's Slurm launcher starts a daemon
 *    on every node of the allocation unless --host says otherwise, and one on
 *    a node that left fails the launch.
 *  - How to run a command on a host: a job step of one task (srun --overlap),
 *    run_hosts.c. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autohet/hosts.h"
#include "elastic/run_state.h"

int run_in_slurm(void) {
    const char *a = getenv("OMPI_MCA_plm_rsh_agent"), *j = getenv("SLURM_JOB_ID");
    return !(a && *a) && j && *j;
}

int run_slurm_lost(run_state *s, run_fault *f) {
    if (!run_in_slurm() || !s->multi_host)
        return 0;
    const char *argv[] = {"squeue", "-h", "-j", getenv("SLURM_JOB_ID"), "-o", "%N", NULL};
    char out[8192], err[256];
    if (run_exec(argv, out, sizeof out, 10) != 0)
        return 0; /* Slurm does not answer: the ranks' records decide */
    out[strcspn(out, "\n")] = 0;
    ah_host_list now = {0};
    if (!out[0] || ah_slurm_nodelist_parse(out, "squeue", &now, err, sizeof err) != 0)
        return 0;
    int lost = 0;
    for (int i = 0; i < s->inv.n_nodes; i++) {
        int still = 0;
        for (int k = 0; k < now.n && !still; k++)
            still = !strcmp(now.hosts[k].name, s->inv.nodes[i].host);
        if (still || !s->alive[i] || f->gone[i])
            continue;
        if (!lost)
            snprintf(f->cause, sizeof f->cause, "slurm:");
        size_t len = strlen(f->cause);
        snprintf(f->cause + len, sizeof f->cause - len, " lost %s (host %s) (left the job's allocation: %s)",
                 s->inv.nodes[i].name, s->inv.nodes[i].host, out);
        f->gone[i] = 1, f->n_lost++, lost++;
    }
    ah_host_list_free(&now);
    return lost;
}

int run_rankfile_hosts(const char *rankfile, char *out, size_t n) {
    enum { MAX = 4096 };
    static char host[MAX][128];
    static int count[MAX];
    int k = 0;
    FILE *f = fopen(rankfile, "r");
    char line[512], h[128];
    while (f && fgets(line, sizeof line, f)) {
        if (sscanf(line, "rank %*d=%127[^ \t\n]", h) != 1)
            continue;
        int q = 0;
        while (q < k && strcmp(host[q], h))
            q++;
        if (q == k && k == MAX)
            break;
        if (q == k)
            snprintf(host[k], sizeof host[k], "%s", h), count[k++] = 0;
        count[q]++;
    }
    if (f)
        fclose(f);
    size_t len = 0;
    out[0] = 0;
    for (int q = 0; q < k && len < n; q++) /* HOST:SLOTS, the ranks the rankfile puts there */
        len += (size_t)snprintf(out + len, n - len, "%s%s:%d", q ? "," : "", host[q], count[q]);
    return k > 0 && len < n ? 0 : -1;
}
