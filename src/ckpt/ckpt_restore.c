/* The checkpoint runtime's resume (ckpt_runtime.h, docs/checkpoint.md): every
 * held layer from the nearest good copy in a checkpoint directory, resharded
 * when it was written under another TP degree; and the copy of a loaded shard
 * into a layer, which the recovery uses too. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/ckpt_runtime_internal.h"
#include "util/errors.h"
#include "util/mpi_agree.h"

int ah_ckpt_apply_layer(const ah_layer_store *ls, int l, const ah_ckpt_loaded *t, int nt, char *err,
                        size_t errlen) {
    ah_store_tensor ti[AH_STORE_MAX_TENSORS];
    size_t n_floats;
    int n_tensors = ls->tensors(ls->ctx, l, ti, &n_floats), rc = 0;
    for (int q = 0; q < n_tensors && rc == 0; q++) {
        for (int k = 0; k < AH_STORE_N_STATES && rc == 0; k++) {
            char name[96];
            snprintf(name, sizeof name, "%s.%s", ah_ckpt_state_prefix[k], ti[q].name);
            int found = 0;
            for (int i = 0; i < nt; i++)
                if (!strcmp(t[i].name, name)) {
                    found = 1;
                    if (t[i].n != ti[q].size) {
                        snprintf(err, errlen,
                                 "checkpoint layer %d: %s has %zu values, this plan's shard needs %zu "
                                 "(a different TP degree or model)",
                                 l, name, t[i].n, ti[q].size);
                        rc = -1;
                    } else {
                        ls->from_host(ls->ctx, l, (ah_store_state)k, q, 0, ti[q].size, t[i].data);
                    }
                }
            if (!found && rc == 0) {
                snprintf(err, errlen, "checkpoint layer %d: no tensor %s (a different model?)", l, name);
                rc = -1;
            }
        }
    }
    return rc;
}

/* Restores held layer l at `step`: this TP rank's own shard when it exists
 * with this plan's sizes, else (a checkpoint of another TP degree) the layer
 * resharded from every old TP rank's shard; *t_old = that degree, 0 when
 * not resharded. 0 or -1 (err). */
static int restore_held_layer(const ah_layer_store *ls, const char *const *dp, int nd, int l, int step,
                              int *t_old, char *err, size_t errlen) {
    ah_ckpt_loaded *t = NULL, *rt = NULL;
    int nt = 0, nrt = 0, rc;
    char own[512] = "";
    int got = ah_ckpt_restore_shard(dp, nd, l, ls->tp_rank, ls->tp, step, &t, &nt, own, sizeof own);
    if (got >= 0 && !ls->reshard_mismatch(ls->ctx, l, t, nt)) {
        rc = ah_ckpt_apply_layer(ls, l, t, nt, err, errlen);
    } else {
        rc = ls->reshard_from_dirs(ls->ctx, l, dp, nd, step, &rt, &nrt, t_old, err, errlen);
        if (rc == 1 && got < 0) /* the checkpoint has this TP degree: the own shard's error stands */
            snprintf(err, errlen, "%s", own), rc = -1;
        else if (rc == 1) /* ... and the own shard's sizes are wrong: apply says which */
            rc = ah_ckpt_apply_layer(ls, l, t, nt, err, errlen);
        else if (rc == 0)
            rc = ah_ckpt_apply_layer(ls, l, rt, nrt, err, errlen);
    }
    ah_ckpt_free(t, nt);
    ah_ckpt_free(rt, nrt);
    return rc;
}

/* The tiers of a checkpoint directory, nearest first: my node's directory,
 * then every other node directory under DIR (also nodes that are no longer
 * in the plan: their disks survived). *nd of them; -1 (err) when DIR cannot
 * be opened (*dirs holds my node's directory still). */
static int tier_dirs(const ah_layer_store *ls, const char *dir, char (**dirs)[3072], int *nd, char *err,
                     size_t errlen) {
    int rc = 0, n = 0, cap = 8;
    char(*d)[3072] = ah_xcalloc((size_t)cap, sizeof *d);
    ah_ckpt_node_dir(ls, dir, ls->node, d[n++], sizeof d[0]);
    DIR *dh = opendir(dir);
    if (!dh) {
        snprintf(err, errlen, "checkpoint %s: cannot open (%s)", dir, strerror(errno));
        rc = -1;
    }
    for (struct dirent *de; dh && (de = readdir(dh));) {
        char p[3072];
        struct stat sb;
        if (de->d_name[0] == '.' || snprintf(p, sizeof p, "%s/%s", dir, de->d_name) >= (int)sizeof p ||
            stat(p, &sb) != 0 || !S_ISDIR(sb.st_mode) || !strcmp(p, d[0]))
            continue;
        if (n == cap) {
            cap *= 2;
            d = ah_xrealloc(d, sizeof *d * (size_t)cap);
        }
        snprintf(d[n++], sizeof d[0], "%s", p);
    }
    if (dh)
        closedir(dh);
    *dirs = d;
    *nd = n;
    return rc;
}

/* The temporaries of DIR/.reported/NODE/ (every node's reported manifest) of a killed writer. */
static void sweep_reported(const char *dir) {
    char rd[3072];
    snprintf(rd, sizeof rd, "%s/.reported", dir);
    DIR *d = opendir(rd);
    for (struct dirent *de; d && (de = readdir(d));) {
        if (de->d_name[0] == '.')
            continue;
        char nd[3400];
        snprintf(nd, sizeof nd, "%s/%s", rd, de->d_name);
        ah_ckpt_sweep(nd, NULL, 1);
    }
    if (d)
        closedir(d);
}

int ah_ckpt_restore(const ah_layer_store *ls, const char *dir, int step, char *err, size_t errlen) {
    int nd = 0;
    char(*dirs)[3072] = NULL;
    int rc = tier_dirs(ls, dir, &dirs, &nd, err, errlen);
    const char **dp = ah_xcalloc((size_t)nd + 1, sizeof(char *));
    for (int i = 0; i < nd; i++)
        dp[i] = dirs[i];
    /* nobody writes into DIR while the ranks restore: the temporary files of a
     * killed writer go now (state.json.tmp.PID, a shard's .tmp.PID) */
    if (ls->rank == 0) {
        for (int i = -1; i < nd; i++)
            ah_ckpt_sweep(i < 0 ? dir : dp[i], NULL, 1);
        sweep_reported(dir); /* a reported manifest's .tmp.PID: no commit may follow (resumed at the end) */
    }
    int resharded = 0, from_tp = 0;
    for (int h = 0; h < ls->n_held(ls->ctx) && rc == 0; h++) {
        int t_old = 0;
        rc = restore_held_layer(ls, dp, nd, ls->held_layer(ls->ctx, h), step, &t_old, err, errlen);
        if (t_old)
            resharded++, from_tp = t_old > from_tp ? t_old : from_tp;
    }
    if (rc == 0 && resharded && ls->rank == 0)
        fprintf(stderr, "autohet: resharded %d layer(s) of rank 0 from TP=%d to TP=%d\n", resharded, from_tp,
                ls->tp);
    free(dirs);
    free(dp);
    if (ah_mpi_agree_on_failure(ls->comm, rc, err, errlen) != 0)
        return -1;
    return 0;
}
