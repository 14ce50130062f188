/* The checkpoint runtime's save and commit (ckpt_runtime.h, docs/checkpoint.md
 * "The commit"): every rank writes its layers' shards, then each node's lowest
 * rank and rank 0 commit them in three atomic renames per tier; and
 * state.json, the commit point, with the check a resume makes of it. */
#include <errno.h>
#include <math.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "ckpt/ckpt_runtime_internal.h"
#include "model/model_json.h"
#include "util/atomic_file.h"
#include "util/errors.h"
#include "util/json_file.h"

const char *const ah_ckpt_state_prefix[AH_STORE_N_STATES] = {"param", "adam_m", "adam_v"};

void ah_ckpt_node_dir(const ah_layer_store *ls, const char *dir, int node, char *out, size_t n) {
    char name[64];
    snprintf(name, sizeof name, "%s",
             node >= 0 && node < ls->n_nodes ? ls->node_name(ls->ctx, node) : "node");
    for (char *p = name; *p; p++)
        if (*p == '/' || *p == ' ')
            *p = '_';
    snprintf(out, n, "%s/%s", dir, name);
}

/* rank 0: DIR/state.json, the commit point of the checkpoint of `step`; "model_config" keeps the
 * whole model config, so that export and generate need no --model for a config.json model */
static int write_state(const ah_layer_store *ls, const char *dir, int step, char *err, size_t errlen) {
    cJSON *mc = ah_model_config_to_json(ls->run.cfg);
    char *mcs = mc ? cJSON_PrintUnformatted(mc) : NULL, path[3072];
    cJSON_Delete(mc);
    if (!mcs) {
        snprintf(err, errlen, "checkpoint: out of memory writing state.json");
        return -1;
    }
    size_t cap = strlen(mcs) + 512;
    char *state = ah_xcalloc(cap, 1);
    int len = snprintf(state, cap,
                       "{\"format\": \"autohet-train-state\", \"version\": 1, \"step\": %d, \"seed\": "
                       "%llu, \"model\": \"%s\", \"global_batch\": %d, \"seq\": %d, \"layers\": %d, "
                       "\"total_steps\": %d, \"lr\": %.9g, \"warmup_steps\": %d, \"model_config\": %s}\n",
                       step, (unsigned long long)ls->run.seed, ls->run.cfg->name, ls->run.global_batch,
                       ls->run.seq, ah_model_num_layers(ls->run.cfg), ls->run.total_steps, (double)ls->run.lr,
                       ls->run.warmup_steps, mcs);
    snprintf(path, sizeof path, "%s/state.json", dir);
    int rc = ah_write_file_atomic(path, state, (size_t)len, err, errlen);
    free(state);
    cJSON_free(mcs);
    return rc;
}

/* Drops a manifest's entries at `step` or later: a killed run's uncommitted
 * shards (state.json names an older step). A run of another TP degree that
 * died in the commit of the same step may have left TP ranks this commit does
 * not replace; a later resume must not mistake them for this step's. */
static void drop_uncommitted(ah_manifest *m, int step) {
    int k = 0;
    for (int i = 0; i < m->n; i++)
        if (m->e[i].step < step)
            m->e[k++] = m->e[i];
    m->n = k;
}

/* The rank that commits each node's manifests, leader[node]: the lowest
 * rank with records of that node in `all` (so a process on the node's own
 * host: a host's tiers are written by its own ranks only); -1 for a node
 * without records. from[i]: the rank record i came from. */
static void node_leaders(const ah_layer_store *ls, const ah_saved_shard *all, const int *from, int ns,
                         int *leader) {
    for (int n = 0; n < ls->n_nodes; n++)
        leader[n] = -1;
    for (int i = 0; i < ns; i++) {
        int n = all[i].node;
        if (n >= 0 && n < ls->n_nodes && (leader[n] < 0 || from[i] < leader[n]))
            leader[n] = from[i];
    }
}

/* The committed manifests of the nodes this rank leads, reported to rank 0
 * over MPI, which keeps a copy of each in DIR/.reported/NODE/manifest.json:
 * what a controller reads of the host-local memory and disk tiers (it never
 * opens another host's directories). Collective. */
static void report_manifests(const ah_layer_store *ls, const char *dir, const int *leader) {
    char *buf = NULL;
    size_t len = 0;
    for (int node = 0; node < ls->n_nodes; node++) {
        if (leader[node] != ls->rank)
            continue;
        char d[3072], path[3200];
        ah_ckpt_node_dir(ls, dir, node, d, sizeof d);
        snprintf(path, sizeof path, "%s/manifest.json", d);
        size_t n = 0;
        char rerr[512];
        char *txt = ah_read_text_file(path, 64u << 20, &n, rerr, sizeof rerr);
        if (!txt)
            continue; /* none yet: nothing to report */
        /* one record: node index, text length, text */
        buf = ah_xrealloc(buf, len + 2 * sizeof(int) + n);
        int head[2] = {node, (int)n};
        memcpy(buf + len, head, sizeof head);
        memcpy(buf + len + sizeof head, txt, n);
        len += sizeof head + n;
        free(txt);
    }
    int cnt = (int)len, *counts = NULL, *displ = NULL, total = 0;
    if (ls->rank == 0)
        counts = ah_xcalloc((size_t)ls->world, sizeof(int)),
        displ = ah_xcalloc((size_t)ls->world, sizeof(int));
    MPI_Gather(&cnt, 1, MPI_INT, counts, 1, MPI_INT, 0, ls->comm);
    char *all = NULL;
    if (ls->rank == 0) {
        for (int r = 0; r < ls->world; r++)
            displ[r] = total, total += counts[r];
        all = ah_xcalloc((size_t)total + 1, 1);
    }
    MPI_Gatherv(buf, cnt, MPI_BYTE, all, counts, displ, MPI_BYTE, 0, ls->comm);
    for (size_t at = 0; ls->rank == 0 && at + 2 * sizeof(int) <= (size_t)total;) {
        int head[2];
        memcpy(head, all + at, sizeof head);
        char rd[3072], nd[3200], path[3300], err[512];
        snprintf(rd, sizeof rd, "%s/.reported", dir);
        ah_ckpt_node_dir(ls, rd, head[0], nd, sizeof nd);
        snprintf(path, sizeof path, "%s/manifest.json", nd);
        if ((mkdir(rd, 0755) == 0 || errno == EEXIST) && (mkdir(nd, 0755) == 0 || errno == EEXIST)) {
            ah_write_file_atomic(path, all + at + sizeof head, (size_t)head[1], err, sizeof err);
            ah_ckpt_sweep(nd, NULL, 0); /* manifest.json.tmp.PID of a rank 0 that was killed writing it */
        }
        at += sizeof head + (size_t)head[1];
    }
    free(all);
    free(buf);
    free(counts);
    free(displ);
}

/* a node's leader, one phase of the commit for every node it leads:
 * phase 0 adds the new step's shards to the node's manifest (which keeps the
 * committed step's); phase 1, once state.json names the new step, drops the
 * older entries of those layers and sweeps the node directory of the shard
 * files no manifest lists and of the temporary files of dead writers. */
static int commit_phase(const ah_layer_store *ls, const char *dir, const char *tier, int step,
                        const ah_saved_shard *all, int ns, const int *leader, int phase, char *err,
                        size_t errlen) {
    int rc = 0;
    for (int node = 0; node < ls->n_nodes && rc == 0; node++) {
        if (leader[node] != ls->rank)
            continue;
        char d[3072];
        ah_ckpt_node_dir(ls, dir, node, d, sizeof d);
        ah_manifest m;
        /* an unreadable manifest is set aside (its shards cannot be trusted
         * without it) so that this node's tier works again */
        if (ah_manifest_load_or_set_aside(d, &m, err, errlen) < 0)
            return -1;
        if (phase == 0) {
            drop_uncommitted(&m, step);
            for (int i = 0; i < ns; i++)
                if (all[i].node == node) {
                    ah_manifest_entry me = {all[i].layer, all[i].tp_rank, all[i].step,     "",
                                            all[i].bytes, all[i].xxh64,   all[i].tp_degree};
                    snprintf(me.file, sizeof me.file, "%s", all[i].file);
                    ah_manifest_put(&m, &me);
                }
        } else {
            ah_manifest_prune(&m, step);
        }
        snprintf(m.node, sizeof m.node, "%s", ls->node_name(ls->ctx, node));
        snprintf(m.tier, sizeof m.tier, "%s", tier);
        rc = ah_manifest_save(d, &m, err, errlen);
        if (rc == 0 && phase == 1)
            ah_ckpt_sweep(d, &m, 0);
        ah_manifest_free(&m);
    }
    return rc;
}

/* test hook (tests/cli_ckpt.sh, tests/kill_harness.sh): AUTOHET_TEST_KILL_COMMIT=
 * POINT@STEP kills rank 0 with SIGKILL at POINT (manifests: after the new
 * step was added to the manifests; state: after state.json names it) of the
 * commit of STEP, the windows a crash must survive */
static void test_kill_point(const char *point, int step) {
    const char *v = getenv("AUTOHET_TEST_KILL_COMMIT"), *at = v ? strchr(v, '@') : NULL;
    if (at && (size_t)(at - v) == strlen(point) && !strncmp(v, point, strlen(point)) && atoi(at + 1) == step)
        raise(SIGKILL);
}

ah_saved_shard *ah_ckpt_gather_records(const ah_layer_store *ls, const ah_saved_shard *mine, int nl, int *ns,
                                       int **from) {
    int cnt = nl * (int)sizeof(ah_saved_shard), total = 0;
    int *counts = ah_xcalloc((size_t)ls->world, sizeof(int)), *displ = ah_xcalloc((size_t)ls->world, sizeof(int));
    MPI_Allgather(&cnt, 1, MPI_INT, counts, 1, MPI_INT, ls->comm);
    for (int r = 0; r < ls->world; r++)
        displ[r] = total, total += counts[r];
    ah_saved_shard *all = ah_xcalloc((size_t)total + 1, 1);
    MPI_Allgatherv((void *)mine, cnt, MPI_BYTE, all, counts, displ, MPI_BYTE, ls->comm);
    *ns = total / (int)sizeof(ah_saved_shard);
    *from = ah_xcalloc((size_t)*ns + 1, sizeof(int));
    for (int r = 0, i = 0; r < ls->world; r++)
        for (int k = 0; k < counts[r] / (int)sizeof(ah_saved_shard); k++)
            (*from)[i++] = r;
    free(counts);
    free(displ);
    return all;
}

/* Commits a checkpoint whose shards every rank has written (`mine`, `nl`
 * records; bad_in: this rank failed). Collective. Rank 0 gathers the records
 * and commits with atomic renames such that at every instant the step that
 * state.json names restores: (1) each node's manifest lists the new step's
 * shards beside the committed step's, (2) state.json names the new step, (3)
 * the manifests drop the older step, whose files are then deleted. A kill
 * before (2) leaves the previous step committed and listed; after it, the new
 * one. The other ranks wait in the final broadcast meanwhile, so no one
 * writes into DIR while rank 0 sweeps it. */
int ah_ckpt_commit(const ah_layer_store *ls, const char *dir, const char *tier, int step,
                   const ah_saved_shard *mine, int nl, int bad_in, char *err, size_t errlen) {
    int bad = bad_in != 0, any_bad = 0;
    MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, ls->comm);
    if (any_bad) {
        if (!bad)
            snprintf(err, errlen, "checkpoint: another rank could not write its layers");
        return -1;
    }
    /* every rank learns every record, so each node's leader knows its node's */
    int ns = 0, *from = NULL;
    ah_saved_shard *all = ah_ckpt_gather_records(ls, mine, nl, &ns, &from);
    int *leader = ah_xcalloc((size_t)ls->n_nodes + 1, sizeof(int));
    node_leaders(ls, all, from, ns, leader);
    int reported = !strcmp(tier, "memory") || !strcmp(tier, "disk"); /* the host-local tiers */
    int rc = commit_phase(ls, dir, tier, step, all, ns, leader, 0, err, errlen), any = 0;
    MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MIN, ls->comm);
    if (any == 0 && reported)
        report_manifests(ls, dir, leader);
    if (any == 0 && ls->rank == 0) {
        test_kill_point("manifests", step);
        any = write_state(ls, dir, step, err, errlen);
        if (any == 0)
            test_kill_point("state", step);
    }
    MPI_Bcast(&any, 1, MPI_INT, 0, ls->comm);
    if (any == 0) {
        rc = commit_phase(ls, dir, tier, step, all, ns, leader, 1, err, errlen);
        MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MIN, ls->comm);
    }
    if (any == 0 && reported)
        report_manifests(ls, dir, leader);
    if (any == 0 && ls->rank == 0)
        ah_ckpt_sweep(dir, NULL, 0); /* state.json.tmp.* of a commit that was killed */
    if (any != 0 && rc == 0)
        snprintf(err, errlen, "checkpoint: another rank could not write its node's manifest or state.json");
    free(all);
    free(from);
    free(leader);
    return any != 0 ? -1 : 0;
}

/* DIR/state.json of a checkpoint (written by write_state above): the step to continue from, after checking
 * that it was written for this model, batch shape and seed. */
int ah_ckpt_read_state(const char *dir, const ah_ckpt_run *run, int *step, char *msg, size_t n) {
    const ah_model_config *cfg = run->cfg;
    int seed = (int)run->seed;
    char path[3072], err[512];
    snprintf(path, sizeof path, "%s/state.json", dir);
    cJSON *o = ah_json_parse_file(path, 1 << 20, 1, err, sizeof err);
    if (!o) {
        snprintf(msg, n, "--resume: %s", err);
        return -1;
    }
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "step"),
                *sd = cJSON_GetObjectItemCaseSensitive(o, "seed"),
                *md = cJSON_GetObjectItemCaseSensitive(o, "model"),
                *gb = cJSON_GetObjectItemCaseSensitive(o, "global_batch"),
                *sq = cJSON_GetObjectItemCaseSensitive(o, "seq"),
                *ts = cJSON_GetObjectItemCaseSensitive(o, "total_steps"),
                *lr = cJSON_GetObjectItemCaseSensitive(o, "lr"),
                *wu = cJSON_GetObjectItemCaseSensitive(o, "warmup_steps");
    int rc = 0;
    if (!cJSON_IsNumber(st) || !(st->valuedouble >= 0 && st->valuedouble <= 2147483647.0) ||
        st->valuedouble != (double)st->valueint || !cJSON_IsNumber(sd) || !cJSON_IsString(md) ||
        !cJSON_IsNumber(gb) || !cJSON_IsNumber(sq)) {
        snprintf(msg, n, "--resume: %.300s: needs step, seed, model, global_batch, seq", path);
        rc = -1;
    } else if (strcmp(md->valuestring, cfg->name) || gb->valueint != run->global_batch ||
               sq->valueint != run->seq || sd->valueint != seed) {
        snprintf(msg, n,
                 "--resume: %.300s was written for model %.60s, global batch %d, seq %d, seed %d; this run "
                 "has %.60s, %d, "
                 "%d, %d",
                 path, md->valuestring, gb->valueint, sq->valueint, sd->valueint, cfg->name,
                 run->global_batch, run->seq, seed);
        rc = -1;
    } else if (!cJSON_IsNumber(ts) || !cJSON_IsNumber(lr) || !cJSON_IsNumber(wu) ||
               ts->valueint != run->total_steps || wu->valueint != run->warmup_steps ||
               fabs(lr->valuedouble - run->lr) > 1e-6 * run->lr) {
        snprintf(
            msg, n,
            "--resume: %.300s: the learning-rate schedule differs (--steps %d, --lr %g, warm-up %d there); "
            "resume with the same --steps/--lr/--warmup",
            path, cJSON_IsNumber(ts) ? ts->valueint : -1, cJSON_IsNumber(lr) ? lr->valuedouble : -1,
            cJSON_IsNumber(wu) ? wu->valueint : -1);
        rc = -1;
    } else if (st->valueint > run->total_steps) {
        snprintf(msg, n, "--resume: %.300s is at step %d, beyond --steps %d", path, st->valueint,
                 run->total_steps);
        rc = -1;
    } else {
        *step = st->valueint;
    }
    cJSON_Delete(o);
    return rc;
}

/* Layer l's shard of `step` into node directory nd: the host copies of its
 * parameters and moments, written tensor by tensor; *s = its record. */
static int write_layer_shard(const ah_layer_store *ls, const char *nd, int l, int step, ah_saved_shard *s,
                             char *err, size_t errlen) {
    ah_store_tensor ti[AH_STORE_MAX_TENSORS];
    size_t n = 0;
    int n_tensors = ls->tensors(ls->ctx, l, ti, &n);
    ah_ckpt_tensor t[AH_STORE_N_STATES * AH_STORE_MAX_TENSORS];
    char names[AH_STORE_N_STATES * AH_STORE_MAX_TENSORS][96];
    int nt = 0;
    /* host copies of the layer's parameters and moments, the shard's data */
    float *host = ah_xcalloc(3 * n + 1, sizeof(float));
    for (int k = 0; k < AH_STORE_N_STATES; k++)
        ls->to_host(ls->ctx, l, (ah_store_state)k, host + (size_t)k * n);
    for (int q = 0; q < n_tensors; q++) {
        const ah_store_tensor *tq = &ti[q];
        const float *src[3] = {host, host + n, host + 2 * n};
        for (int k = 0; k < AH_STORE_N_STATES; k++) {
            snprintf(names[nt], sizeof names[nt], "%s.%s", ah_ckpt_state_prefix[k], tq->name);
            int matrix = (size_t)tq->rows * (size_t)tq->cols == tq->size;
            t[nt] = (ah_ckpt_tensor){names[nt],
                                     src[k] + tq->offset,
                                     matrix ? 2 : 1,
                                     {matrix ? tq->rows : (int64_t)tq->size, tq->cols}};
            nt++;
        }
    }
    char st[16], ly[16], tp[16], dg[16];
    snprintf(st, sizeof st, "%d", step);
    snprintf(ly, sizeof ly, "%d", l);
    snprintf(tp, sizeof tp, "%d", ls->tp_rank);
    snprintf(dg, sizeof dg, "%d", ls->tp);
    const char *meta[4][2] = {{"layer", ly}, {"tp_rank", tp}, {"tp_degree", dg}, {"step", st}};
    *s = (ah_saved_shard){ls->node, l, ls->tp_rank, ls->tp, step, 0, 0, ""};
    ah_ckpt_shard_name(s->file, sizeof s->file, l, ls->tp_rank, ls->tp, step);
    char path[3200];
    snprintf(path, sizeof path, "%s/%s", nd, s->file);
    int rc =
        ah_ckpt_write_shard(path, t, nt, (const char *const(*)[2])meta, 4, &s->bytes, &s->xxh64, err, errlen);
    free(host);
    return rc;
}

int ah_ckpt_save(const ah_layer_store *ls, const char *dir, const char *tier, int step, ah_ckpt_persist *p,
                 char *err, size_t errlen) {
    int nl = ls->n_held(ls->ctx), rc = 0;
    ah_saved_shard *mine = ah_xcalloc((size_t)nl + 1, sizeof(ah_saved_shard));
    char nd[3072];
    ah_ckpt_node_dir(ls, dir, ls->node, nd, sizeof nd);
    if (ah_mkdir_p(dir) != 0 || ah_mkdir_p(nd) != 0) /* nd: a host's own path across hosts */
        rc = -1;
    if (rc != 0)
        snprintf(err, errlen, "checkpoint: cannot create %s (%s)", nd, strerror(errno));
    for (int h = 0; h < nl && rc == 0; h++)
        rc = write_layer_shard(ls, nd, ls->held_layer(ls->ctx, h), step, &mine[h], err, errlen);
    int n_extra = 0;
    if (!strcmp(tier, "memory") && p && ah_ckpt_persist_copies(p) > 1) { /* (the same on every rank) */
        int bad = rc != 0, any_bad = 0;
        MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, ls->comm);
        ah_saved_shard *extra = NULL;
        if (!any_bad && ah_ckpt_replicate(ls, dir, nd, mine, nl, ah_ckpt_persist_copies(p), &extra, &n_extra, err, errlen) != 0)
            rc = -1;
        if (n_extra > 0) { /* the copies this rank received are committed as its node's */
            mine = ah_xrealloc(mine, sizeof *mine * (size_t)(nl + n_extra + 1));
            memcpy(mine + nl, extra, sizeof *mine * (size_t)n_extra);
        }
        free(extra);
    }
    int rc2 = ah_ckpt_commit(ls, dir, tier, step, mine, nl + n_extra, rc, err, errlen);
    if (rc2 == 0 && !strcmp(tier, "memory") && p) { /* what a background persist of this step copies */
        ah_ckpt_persist_remember(p, mine, nl, step, nd);
        return 0;
    }
    free(mine);
    return rc2;
}
