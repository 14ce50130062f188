/* Layer checkpoints of the executor (docs/checkpoint.md): save to a tier
 * directory, restore from the nearest good copy, and recover from a
 * controller's recovery assignment (own tiers, peers over MPI RMA, cloud). */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "autohet/ckpt.h"
#include "engine/executor_internal.h"
#include "engine/reshard.h"
#include "model/model_json.h"
#include "util/errors.h"
#include "util/json_file.h"
#include "util/atomic_file.h"

/* ---- layer checkpoints (docs/checkpoint.md) ---- */

/* A shard holds these states of each tensor, named PREFIX.TENSOR. */
static const ah_layer_state ckpt_states[3] = {AH_STATE_PARAM, AH_STATE_ADAM_M, AH_STATE_ADAM_V};
static const char *const ckpt_prefix[3] = {"param", "adam_m", "adam_v"};

typedef struct saved_shard {
    int node, layer, tp_rank, tp_degree, step;
    uint64_t bytes, xxh64;
    char file[64];
} saved_shard;

static void node_dir(const ah_executor *x, const char *dir, int node, char *out, size_t n) {
    const ah_cluster *c = &x->plan.cluster;
    char name[64];
    snprintf(name, sizeof name, "%s", node >= 0 && node < c->n_nodes ? c->nodes[node].name : "node");
    for (char *p = name; *p; p++)
        if (*p == '/' || *p == ' ')
            *p = '_';
    snprintf(out, n, "%s/%s", dir, name);
}

static int my_node(const ah_executor *x) {
    return x->plan.replicas[x->replica].stages[x->stage].node;
}

const char *ah_executor_node_name(const ah_executor *x) {
    return x->plan.cluster.nodes[my_node(x)].name;
}

/* rank 0: DIR/state.json, the commit point of the checkpoint of `step`; "model_config" keeps the
 * whole model config, so that export and generate need no --model for a config.json model */
static int write_state(const ah_executor *x, const char *dir, int step, char *err, size_t errlen) {
    cJSON *mc = ah_model_config_to_json(&x->cfg);
    char *mcs = mc ? cJSON_PrintUnformatted(mc) : NULL, path[3072];
    cJSON_Delete(mc);
    if (!mcs) {
        snprintf(err, errlen, "checkpoint: out of memory writing state.json");
        return -1;
    }
    size_t cap = strlen(mcs) + 512;
    char *state = ah_xcalloc(cap, 1);
    int len =
        snprintf(state, cap,
                 "{\"format\": \"autohet-train-state\", \"version\": 1, \"step\": %d, \"seed\": "
                 "%llu, \"model\": \"%s\", \"global_batch\": %d, \"seq\": %d, \"layers\": %d, "
                 "\"total_steps\": %d, \"lr\": %.9g, \"warmup_steps\": %d, \"model_config\": %s}\n",
                 step, (unsigned long long)x->seed, x->cfg.name, x->plan.global_batch, x->plan.train.seq,
                 ah_model_num_layers(&x->cfg), x->oc.total_steps, (double)x->oc.lr, x->oc.warmup_steps, mcs);
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
static void node_leaders(const ah_executor *x, const saved_shard *all, const int *from, int ns, int *leader) {
    for (int n = 0; n < x->plan.cluster.n_nodes; n++)
        leader[n] = -1;
    for (int i = 0; i < ns; i++) {
        int n = all[i].node;
        if (n >= 0 && n < x->plan.cluster.n_nodes && (leader[n] < 0 || from[i] < leader[n]))
            leader[n] = from[i];
    }
}

/* The committed manifests of the nodes this rank leads, reported to rank 0
 * over MPI, which keeps a copy of each in DIR/.reported/NODE/manifest.json:
 * what a controller reads of the host-local memory and disk tiers (it never
 * opens another host's directories). Collective. */
static void report_manifests(ah_executor *x, const char *dir, const int *leader) {
    char *buf = NULL;
    size_t len = 0;
    for (int node = 0; node < x->plan.cluster.n_nodes; node++) {
        if (leader[node] != x->rank)
            continue;
        char d[3072], path[3200];
        node_dir(x, dir, node, d, sizeof d);
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
    if (x->rank == 0)
        counts = ah_xcalloc((size_t)x->world, sizeof(int)), displ = ah_xcalloc((size_t)x->world, sizeof(int));
    MPI_Gather(&cnt, 1, MPI_INT, counts, 1, MPI_INT, 0, x->comm);
    char *all = NULL;
    if (x->rank == 0) {
        for (int r = 0; r < x->world; r++)
            displ[r] = total, total += counts[r];
        all = ah_xcalloc((size_t)total + 1, 1);
    }
    MPI_Gatherv(buf, cnt, MPI_BYTE, all, counts, displ, MPI_BYTE, 0, x->comm);
    for (size_t at = 0; x->rank == 0 && at + 2 * sizeof(int) <= (size_t)total;) {
        int head[2];
        memcpy(head, all + at, sizeof head);
        char rd[3072], nd[3200], path[3300], err[512];
        snprintf(rd, sizeof rd, "%s/.reported", dir);
        node_dir(x, rd, head[0], nd, sizeof nd);
        snprintf(path, sizeof path, "%s/manifest.json", nd);
        if ((mkdir(rd, 0755) == 0 || errno == EEXIST) && (mkdir(nd, 0755) == 0 || errno == EEXIST))
            ah_write_file_atomic(path, all + at + sizeof head, (size_t)head[1], err, sizeof err);
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
static int commit_phase(ah_executor *x, const char *dir, const char *tier, int step, const saved_shard *all,
                        int ns, const int *leader, int phase, char *err, size_t errlen) {
    int rc = 0;
    for (int node = 0; node < x->plan.cluster.n_nodes && rc == 0; node++) {
        if (leader[node] != x->rank)
            continue;
        char d[3072];
        node_dir(x, dir, node, d, sizeof d);
        ah_manifest m;
        /* an unreadable manifest is set aside (its shards cannot be trusted
         * without it) so that this node's tier works again */
        if (ah_manifest_load_or_set_aside(d, &m, err, errlen) < 0)
            return -1;
        if (phase == 0) {
            drop_uncommitted(&m, step);
            for (int i = 0; i < ns; i++)
                if (all[i].node == node) {
                    ah_manifest_entry me = {all[i].layer, all[i].tp_rank, all[i].step, "",
                                            all[i].bytes, all[i].xxh64,   all[i].tp_degree};
                    snprintf(me.file, sizeof me.file, "%s", all[i].file);
                    ah_manifest_put(&m, &me);
                }
        } else {
            ah_manifest_prune(&m, step);
        }
        snprintf(m.node, sizeof m.node, "%s", x->plan.cluster.nodes[node].name);
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

/* Commits a checkpoint whose shards every rank has written (`mine`, `nl`
 * records; bad_in: this rank failed). Collective. Rank 0 gathers the records
 * and commits with atomic renames such that at every instant the step that
 * state.json names restores: (1) each node's manifest lists the new step's
 * shards beside the committed step's, (2) state.json names the new step, (3)
 * the manifests drop the older step, whose files are then deleted. A kill
 * before (2) leaves the previous step committed and listed; after it, the new
 * one. The other ranks wait in the final broadcast meanwhile, so no one
 * writes into DIR while rank 0 sweeps it. */
static int commit_shards(ah_executor *x, const char *dir, const char *tier, int step, const saved_shard *mine,
                         int nl, int bad_in, char *err, size_t errlen) {
    int bad = bad_in != 0, any_bad = 0;
    MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, x->comm);
    if (any_bad) {
        if (!bad)
            snprintf(err, errlen, "checkpoint: another rank could not write its layers");
        return -1;
    }
    /* every rank learns every record, so each node's leader knows its node's */
    int cnt = nl * (int)sizeof(saved_shard), total = 0;
    int *counts = ah_xcalloc((size_t)x->world, sizeof(int)), *displ = ah_xcalloc((size_t)x->world, sizeof(int));
    MPI_Allgather(&cnt, 1, MPI_INT, counts, 1, MPI_INT, x->comm);
    for (int r = 0; r < x->world; r++)
        displ[r] = total, total += counts[r];
    saved_shard *all = ah_xcalloc((size_t)total + 1, 1);
    MPI_Allgatherv((void *)mine, cnt, MPI_BYTE, all, counts, displ, MPI_BYTE, x->comm);
    int ns = total / (int)sizeof(saved_shard);
    int *from = ah_xcalloc((size_t)ns + 1, sizeof(int));
    int *leader = ah_xcalloc((size_t)x->plan.cluster.n_nodes + 1, sizeof(int));
    for (int r = 0, i = 0; r < x->world; r++)
        for (int k = 0; k < counts[r] / (int)sizeof(saved_shard); k++)
            from[i++] = r;
    node_leaders(x, all, from, ns, leader);
    int reported = !strcmp(tier, "memory") || !strcmp(tier, "disk"); /* the host-local tiers */
    int rc = commit_phase(x, dir, tier, step, all, ns, leader, 0, err, errlen), any = 0;
    MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MIN, x->comm);
    if (any == 0 && reported)
        report_manifests(x, dir, leader);
    if (any == 0 && x->rank == 0) {
        test_kill_point("manifests", step);
        any = write_state(x, dir, step, err, errlen);
        if (any == 0)
            test_kill_point("state", step);
    }
    MPI_Bcast(&any, 1, MPI_INT, 0, x->comm);
    if (any == 0) {
        rc = commit_phase(x, dir, tier, step, all, ns, leader, 1, err, errlen);
        MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MIN, x->comm);
    }
    if (any == 0 && reported)
        report_manifests(x, dir, leader);
    if (any == 0 && x->rank == 0)
        ah_ckpt_sweep(dir, NULL, 0); /* state.json.tmp.* of a commit that was killed */
    if (any != 0 && rc == 0)
        snprintf(err, errlen, "checkpoint: another rank could not write its node's manifest or state.json");
    free(all);
    free(from);
    free(leader);
    free(counts);
    free(displ);
    return any != 0 ? -1 : 0;
}

/* DIR/state.json of a checkpoint (written by write_state above): the step to continue from, after checking
 * that it was written for this model, batch shape and seed. */
int ah_ckpt_read_state(const char *dir, const ah_model_config *cfg, const ah_plan *plan, int seed,
                       const ah_optim_config *oc, int *step, char *msg, size_t n) {
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
    } else if (strcmp(md->valuestring, cfg->name) || gb->valueint != plan->global_batch ||
               sq->valueint != plan->train.seq || sd->valueint != seed) {
        snprintf(msg, n,
                 "--resume: %.300s was written for model %.60s, global batch %d, seq %d, seed %d; this run "
                 "has %.60s, %d, "
                 "%d, %d",
                 path, md->valuestring, gb->valueint, sq->valueint, sd->valueint, cfg->name,
                 plan->global_batch, plan->train.seq, seed);
        rc = -1;
    } else if (!cJSON_IsNumber(ts) || !cJSON_IsNumber(lr) || !cJSON_IsNumber(wu) ||
               ts->valueint != oc->total_steps || wu->valueint != oc->warmup_steps ||
               fabs(lr->valuedouble - oc->lr) > 1e-6 * oc->lr) {
        snprintf(
            msg, n,
            "--resume: %.300s: the learning-rate schedule differs (--steps %d, --lr %g, warm-up %d there); "
            "resume with the same --steps/--lr/--warmup",
            path, cJSON_IsNumber(ts) ? ts->valueint : -1, cJSON_IsNumber(lr) ? lr->valuedouble : -1,
            cJSON_IsNumber(wu) ? wu->valueint : -1);
        rc = -1;
    } else if (st->valueint > oc->total_steps) {
        snprintf(msg, n, "--resume: %.300s is at step %d, beyond --steps %d", path, st->valueint,
                 oc->total_steps);
        rc = -1;
    } else {
        *step = st->valueint;
    }
    cJSON_Delete(o);
    return rc;
}

int ah_executor_save(ah_executor *x, const char *dir, const char *tier, int step, char *err, size_t errlen) {
    int nl = ah_exec_n_held(x), rc = 0;
    saved_shard *mine = ah_xcalloc((size_t)nl + 1, sizeof(saved_shard));
    char nd[3072];
    node_dir(x, dir, my_node(x), nd, sizeof nd);
    if (ah_mkdir_p(dir) != 0 || ah_mkdir_p(nd) != 0) /* nd: a host's own path across hosts */
        rc = -1;
    if (rc != 0)
        snprintf(err, errlen, "checkpoint: cannot create %s (%s)", nd, strerror(errno));
    for (int h = 0; h < nl && rc == 0; h++) {
        int l = ah_exec_held_layer(x, h);
        ah_engine_model *e = ah_exec_model_of(x, l);
        ah_eng_layer *Ly = &e->layers[l - e->first];
        ah_ckpt_tensor t[3 * AH_MAX_TENSORS];
        char names[3 * AH_MAX_TENSORS][96];
        int nt = 0;
        /* host copies of the layer's parameters and moments, the shard's data */
        float *host = ah_xcalloc(3 * Ly->n + 1, sizeof(float));
        for (int k = 0; k < 3; k++)
            ah_engine_layer_to_host(e, l, ckpt_states[k], host + (size_t)k * Ly->n);
        for (int q = 0; q < Ly->n_tensors; q++) {
            const ah_tensor_info *ti = &Ly->t[q];
            const float *src[3] = {host, host + Ly->n, host + 2 * Ly->n};
            for (int k = 0; k < 3; k++) {
                snprintf(names[nt], sizeof names[nt], "%s.%s", ckpt_prefix[k], ti->name);
                int matrix = (size_t)ti->lrows * (size_t)ti->lcols == ti->size;
                t[nt] = (ah_ckpt_tensor){names[nt],
                                         src[k] + ti->offset,
                                         matrix ? 2 : 1,
                                         {matrix ? ti->lrows : (int64_t)ti->size, ti->lcols}};
                nt++;
            }
        }
        char st[16], ly[16], tp[16], dg[16];
        snprintf(st, sizeof st, "%d", step);
        snprintf(ly, sizeof ly, "%d", l);
        snprintf(tp, sizeof tp, "%d", x->tp_rank);
        snprintf(dg, sizeof dg, "%d", x->tp);
        const char *meta[4][2] = {{"layer", ly}, {"tp_rank", tp}, {"tp_degree", dg}, {"step", st}};
        saved_shard *s = &mine[h];
        *s = (saved_shard){my_node(x), l, x->tp_rank, x->tp, step, 0, 0, ""};
        ah_ckpt_shard_name(s->file, sizeof s->file, l, x->tp_rank, x->tp, step);
        char path[3200];
        snprintf(path, sizeof path, "%s/%s", nd, s->file);
        rc = ah_ckpt_write_shard(path, t, nt, (const char *const(*)[2])meta, 4, &s->bytes, &s->xxh64, err,
                                 errlen);
        free(host);
    }
    int rc2 = commit_shards(x, dir, tier, step, mine, nl, rc, err, errlen);
    if (rc2 == 0 && !strcmp(tier, "memory")) { /* what a background persist of this step copies */
        free(x->last_mem);
        x->last_mem = mine;
        x->last_mem_n = nl;
        x->last_mem_step = step;
        snprintf(x->last_mem_dir, sizeof x->last_mem_dir, "%s", nd);
        return 0;
    }
    free(mine);
    return rc2;
}

/* ---- background persist: memory-tier snapshot -> disk + cloud ---- */

/* The committed memory-tier shards of one step are pinned (hard links, so the
 * next snapshot may replace them) and copied by a thread of the rank to its
 * node's disk and cloud directories while training goes on; the ranks commit
 * the copy (manifests, state.json) at a later step boundary, when every
 * rank's thread is done. */
struct ah_persist_job {
    pthread_t th;
    int running; /* the thread was started and not joined yet */
    int step, n, failed;
    atomic_int done;
    char dir[2][512], nd[2][3072], err[512];
    char (*pin)[3200];
    saved_shard *rec;
};

static void *persist_main(void *arg) {
    struct ah_persist_job *j = arg;
    for (int i = 0; i < j->n && !j->failed; i++) {
        const unsigned char *map = NULL;
        if (ah_ckpt_map(j->pin[i], j->rec[i].bytes, &map, j->err, sizeof j->err) != 0) {
            j->failed = 1;
            break;
        }
        for (int k = 0; k < 2 && !j->failed; k++) {
            if (!j->dir[k][0])
                continue;
            char path[3400];
            snprintf(path, sizeof path, "%s/%s", j->nd[k], j->rec[i].file);
            if (ah_write_file_atomic(path, map, j->rec[i].bytes, j->err, sizeof j->err) != 0)
                j->failed = 1;
        }
        ah_ckpt_unmap(map, j->rec[i].bytes);
    }
    for (int i = 0; i < j->n; i++)
        unlink(j->pin[i]);
    atomic_store(&j->done, 1);
    return NULL;
}

static void persist_free(struct ah_persist_job *j) {
    free(j->pin);
    free(j->rec);
    free(j);
}

void ah_executor_persist_abandon(ah_executor *x) {
    if (!x->persist)
        return;
    if (x->persist->running)
        pthread_join(x->persist->th, NULL);
    persist_free(x->persist);
    x->persist = NULL;
}

int ah_executor_persist_start(ah_executor *x, const char *disk, const char *cloud, int step, char *err,
                              size_t errlen) {
    if (!x->last_mem || x->last_mem_step != step || x->persist)
        return 1; /* no memory snapshot of this step (or one in flight): the caller saves synchronously */
    struct ah_persist_job *j = ah_xcalloc(1, sizeof *j);
    j->step = step;
    j->n = x->last_mem_n;
    j->rec = ah_xcalloc((size_t)j->n + 1, sizeof *j->rec);
    j->pin = ah_xcalloc((size_t)j->n + 1, sizeof *j->pin);
    memcpy(j->rec, x->last_mem, sizeof *j->rec * (size_t)j->n);
    const char *dirs[2] = {disk, cloud};
    for (int k = 0; k < 2; k++) {
        if (!dirs[k])
            continue;
        snprintf(j->dir[k], sizeof j->dir[k], "%s", dirs[k]);
        node_dir(x, dirs[k], my_node(x), j->nd[k], sizeof j->nd[k]);
        if (ah_mkdir_p(dirs[k]) != 0 || ah_mkdir_p(j->nd[k]) != 0) {
            snprintf(j->err, sizeof j->err, "checkpoint: cannot create %.400s (%s)", j->nd[k],
                     strerror(errno));
            j->failed = 1;
        }
    }
    for (int i = 0; i < j->n && !j->failed; i++) {
        char src[3200];
        snprintf(src, sizeof src, "%s/%s", x->last_mem_dir, j->rec[i].file);
        snprintf(j->pin[i], sizeof j->pin[i], "%s/.pin-%ld-%s", x->last_mem_dir, (long)getpid(),
                 j->rec[i].file);
        if (link(src, j->pin[i]) != 0) {
            snprintf(j->err, sizeof j->err, "checkpoint: cannot pin %.400s (%s)", src, strerror(errno));
            j->failed = 1;
        }
    }
    x->persist = j;
    if (j->failed) { /* reported at the commit, collectively */
        atomic_store(&j->done, 1);
        return 0;
    }
    j->running = 1;
    if (pthread_create(&j->th, NULL, persist_main, j) != 0) {
        snprintf(err, errlen, "checkpoint: cannot start the background writer");
        x->persist = NULL;
        persist_free(j);
        return -1;
    }
    return 0;
}

int ah_executor_persist_poll(ah_executor *x, int wait, char *err, size_t errlen) {
    struct ah_persist_job *j = x->persist;
    if (j && wait && j->running) {
        pthread_join(j->th, NULL);
        j->running = 0;
    }
    int v[2] = {j ? atomic_load(&j->done) : 1, j ? -1 : 0}, r[2];
    MPI_Allreduce(v, r, 2, MPI_INT, MPI_MIN, x->comm);
    if (r[1] == 0 || r[0] == 0)
        return 0; /* nothing in flight, or not everyone is done */
    int bad = 0, step = 0, n = 0;
    saved_shard *rec = NULL;
    char dir[2][512] = {"", ""};
    if (j) {
        if (j->running) {
            pthread_join(j->th, NULL);
            j->running = 0;
        }
        bad = j->failed;
        step = j->step, n = j->n, rec = j->rec;
        memcpy(dir, j->dir, sizeof dir);
        if (bad)
            snprintf(err, errlen, "%s", j->err);
    }
    MPI_Allreduce(MPI_IN_PLACE, &step, 1, MPI_INT, MPI_MAX, x->comm);
    int rc = 0;
    const char *tiers[2] = {"disk", "cloud"};
    int has[2] = {dir[0][0] != 0, dir[1][0] != 0};
    MPI_Allreduce(MPI_IN_PLACE, has, 2, MPI_INT, MPI_MAX, x->comm);
    for (int k = 0; k < 2 && rc == 0; k++)
        if (has[k])
            rc = commit_shards(x, dir[k], tiers[k], step, rec, n, bad, err, errlen);
    if (j) {
        persist_free(j);
        x->persist = NULL;
    }
    return rc == 0 ? 1 : -1;
}

/* Collective over comm: 0 when rc is 0 on every rank; otherwise -1 on every
 * rank, with err = "rank R: <its reason>" of the first failing rank. */
int ah_exec_agree_on_failure(MPI_Comm comm, int rc, char *err, size_t errlen) {
    int me, world;
    MPI_Comm_rank(comm, &me);
    MPI_Comm_size(comm, &world);
    int first_bad = rc != 0 ? me : world, who = world;
    MPI_Allreduce(&first_bad, &who, 1, MPI_INT, MPI_MIN, comm);
    if (who == world)
        return 0;
    char msg[512];
    snprintf(msg, sizeof msg, "rank %d: %s", who, err);
    MPI_Bcast(msg, (int)sizeof msg, MPI_CHAR, who, comm);
    snprintf(err, errlen, "%s", msg);
    return -1;
}

/* copy a loaded shard's parameters and AdamW moments into layer l */
static int apply_layer(ah_executor *x, int l, const ah_ckpt_loaded *t, int nt, char *err, size_t errlen) {
    ah_engine_model *e = ah_exec_model_of(x, l);
    const ah_eng_layer *Ly = &e->layers[l - e->first];
    int rc = 0;
    for (int q = 0; q < Ly->n_tensors && rc == 0; q++) {
        const ah_tensor_info *ti = &Ly->t[q];
        for (int k = 0; k < 3 && rc == 0; k++) {
            char name[96];
            snprintf(name, sizeof name, "%s.%s", ckpt_prefix[k], ti->name);
            int found = 0;
            for (int i = 0; i < nt; i++)
                if (!strcmp(t[i].name, name)) {
                    found = 1;
                    if (t[i].n != ti->size) {
                        snprintf(err, errlen,
                                 "checkpoint layer %d: %s has %zu values, this plan's shard needs %zu "
                                 "(a different TP degree or model)",
                                 l, name, t[i].n, ti->size);
                        rc = -1;
                    } else {
                        ah_engine_tensor_from_host(e, l, ckpt_states[k], q, t[i].data);
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
static int restore_held_layer(ah_executor *x, const char *const *dp, int nd, int l, int step, int *t_old,
                              char *err, size_t errlen) {
    ah_engine_model *e = ah_exec_model_of(x, l);
    ah_ckpt_loaded *t = NULL, *rt = NULL;
    int nt = 0, nrt = 0, rc;
    char own[512] = "";
    int got = ah_ckpt_restore_shard(dp, nd, l, x->tp_rank, x->tp, step, &t, &nt, own, sizeof own);
    if (got >= 0 && !ah_reshard_mismatch(e, l, t, nt)) {
        rc = apply_layer(x, l, t, nt, err, errlen);
    } else {
        rc = ah_reshard_layer(e, l, dp, nd, step, &rt, &nrt, t_old, err, errlen);
        if (rc == 1 && got < 0) /* the checkpoint has this TP degree: the own shard's error stands */
            snprintf(err, errlen, "%s", own), rc = -1;
        else if (rc == 1) /* ... and the own shard's sizes are wrong: apply_layer says which */
            rc = apply_layer(x, l, t, nt, err, errlen);
        else if (rc == 0)
            rc = apply_layer(x, l, rt, nrt, err, errlen);
    }
    ah_ckpt_free(t, nt);
    ah_ckpt_free(rt, nrt);
    return rc;
}

int ah_executor_restore(ah_executor *x, const char *dir, int step, char *err, size_t errlen) {
    /* tiers: my node's directory first, then every other node directory under
     * DIR (also nodes that are no longer in the plan: their disks survived) */
    int rc = 0, nd = 0, cap = 8;
    char(*dirs)[3072] = ah_xcalloc((size_t)cap, sizeof *dirs);
    node_dir(x, dir, my_node(x), dirs[nd++], sizeof dirs[0]);
    DIR *dh = opendir(dir);
    if (!dh) {
        snprintf(err, errlen, "checkpoint %s: cannot open (%s)", dir, strerror(errno));
        rc = -1;
    }
    for (struct dirent *de; dh && (de = readdir(dh));) {
        char p[3072];
        struct stat sb;
        if (de->d_name[0] == '.' || snprintf(p, sizeof p, "%s/%s", dir, de->d_name) >= (int)sizeof p ||
            stat(p, &sb) != 0 || !S_ISDIR(sb.st_mode) || !strcmp(p, dirs[0]))
            continue;
        if (nd == cap) {
            cap *= 2;
            dirs = ah_xrealloc(dirs, sizeof *dirs * (size_t)cap);
        }
        snprintf(dirs[nd++], sizeof dirs[0], "%s", p);
    }
    if (dh)
        closedir(dh);
    const char **dp = ah_xcalloc((size_t)nd + 1, sizeof(char *));
    for (int i = 0; i < nd; i++)
        dp[i] = dirs[i];
    /* nobody writes into DIR while the ranks restore: the temporary files of a
     * killed writer go now (state.json.tmp.PID, a shard's .tmp.PID) */
    if (x->rank == 0)
        for (int i = -1; i < nd; i++)
            ah_ckpt_sweep(i < 0 ? dir : dp[i], NULL, 1);
    int resharded = 0, from_tp = 0;
    for (int h = 0; h < ah_exec_n_held(x) && rc == 0; h++) {
        int t_old = 0;
        rc = restore_held_layer(x, dp, nd, ah_exec_held_layer(x, h), step, &t_old, err, errlen);
        if (t_old)
            resharded++, from_tp = t_old > from_tp ? t_old : from_tp;
    }
    if (rc == 0 && resharded && x->rank == 0)
        fprintf(stderr, "autohet: resharded %d layer(s) of rank 0 from TP=%d to TP=%d\n", resharded, from_tp,
                x->tp);
    free(dirs);
    free(dp);
    if (ah_exec_agree_on_failure(x->comm, rc, err, errlen) != 0)
        return -1;
    return 0;
}

/* ---- recovery from a controller's assignment (docs/recovery.md) ---- */


/* my entries of a recovery assignment (autohet/ckpt.h owns the format) and my
 * share of the cloud bandwidth */
static int load_assignment(const char *path, int me, int *step, double *cloud_rate, ah_recovery_shard **out,
                           int *n, char *err, size_t errlen) {
    ah_recovery_doc d;
    if (ah_recovery_doc_read(path, &d, err, errlen) != 0)
        return -1;
    *step = d.step;
    *cloud_rate = 0;
    for (int i = 0; i < d.n_ranks; i++)
        if (d.ranks[i].rank == me)
            *cloud_rate = d.ranks[i].cloud_bytes_per_s;
    *out = d.shards;
    *n = d.n_shards;
    d.shards = NULL;
    ah_recovery_doc_free(&d);
    return 0;
}

static double now_s(void) {
    return MPI_Wtime();
}

/* An assignment entry of rank x is its own shard (its TP rank, at its stage's
 * degree or none stated) or one old TP rank's shard of a layer to reshard. */
static int is_own_shard(const ah_executor *x, const ah_recovery_shard *s) {
    return s->tp == x->tp_rank && (s->tp_degree == 0 || s->tp_degree == x->tp);
}

/* Layer l of rank me is assigned its own shard once, or every TP rank of one
 * old degree once (a reshard group), nothing else. 0 or -1 (err). */
static int check_layer_entries(const ah_executor *x, const char *assignment, int me, int l,
                               const ah_recovery_shard *e, int n, char *err, size_t errlen) {
    int own = 0, group = 0, deg = -1, seen[AH_MAX_TP] = {0}, mixed = 0;
    for (int i = 0; i < n; i++) {
        if (e[i].rank != me || e[i].layer != l)
            continue;
        if (is_own_shard(x, &e[i])) {
            own++;
            continue;
        }
        group++;
        if (deg < 0)
            deg = e[i].tp_degree;
        if (e[i].tp_degree != deg || deg < 1 || deg > AH_MAX_TP || e[i].tp >= deg || seen[e[i].tp]++)
            mixed = 1;
    }
    if ((own == 1 && group == 0) || (own == 0 && !mixed && group == deg))
        return 0;
    if (group == 0)
        snprintf(err, errlen, "%s: layer %d of rank %d is assigned %d times", assignment, l, me, own + group);
    else
        snprintf(err, errlen,
                 "%s: layer %d of rank %d: %d shard(s) to reshard from, not every TP rank of one degree once"
                 "%s",
                 assignment, l, me, group, own ? " (and its own shard too)" : "");
    return -1;
}

/* Every layer of mine is assigned exactly once (or as one reshard group), a
 * rank without a plan slot is assigned nothing, every peer shard names a rank
 * of the job. 0 or -1 (err). */
static int check_assignment(const ah_executor *x, const char *assignment, int me, int world, const ah_recovery_shard *e,
                            int n, int step, char *err, size_t errlen) {
    int rc = 0;
    int nl = x ? ah_exec_n_held(x) : 0;
    for (int h = 0; h < nl && rc == 0 && !(step == 0 && n == 0); h++) /* step 0, no shards: the seed's init */
        rc = check_layer_entries(x, assignment, me, ah_exec_held_layer(x, h), e, n, err, errlen);
    for (int i = 0; i < n && rc == 0; i++)
        if (e[i].rank == me && (!x || !ah_exec_model_of(x, e[i].layer))) {
            snprintf(err, errlen, "%s: rank %d %s but is assigned layer %d", assignment, me,
                     x ? "does not hold it" : "has no plan slot", e[i].layer);
            rc = -1;
        } else if (e[i].tier == AH_TIER_PEER && (e[i].server < 0 || e[i].server >= world)) {
            snprintf(err, errlen, "%s: shards[%d] is served by rank %d; the job has %d ranks", assignment, i,
                     e[i].server, world);
            rc = -1;
        }
    return rc;
}

/* A shard of a reshard group outlives its source (a reused buffer, an
 * unmapped file): its tensors are copied. */
static ah_ckpt_loaded *keep_copy(const ah_ckpt_loaded *t, int n) {
    ah_ckpt_loaded *c = ah_xcalloc((size_t)n + 1, sizeof *c);
    for (int i = 0; i < n; i++) {
        c[i] = t[i];
        c[i].data = ah_xcalloc(t[i].n + 1, sizeof(float));
        memcpy(c[i].data, t[i].data, t[i].n * sizeof(float));
        c[i].borrowed = 0;
    }
    return c;
}

/* A verified shard of mine: applied when it is my own, else kept (copied)
 * for the reshard of its layer. */
static int take_shard(ah_executor *x, const ah_recovery_shard *s, const ah_ckpt_loaded *t, int nt,
                      ah_ckpt_loaded **kept, int *kept_n, char *err, size_t errlen) {
    if (is_own_shard(x, s))
        return apply_layer(x, s->layer, t, nt, err, errlen);
    *kept = keep_copy(t, nt);
    *kept_n = nt;
    return 0;
}

/* Phase 3: every layer of mine assigned as a reshard group is rebuilt from
 * its old TP ranks' shards (reshard.c, the layout's one owner) and applied. */
static int reshard_groups(ah_executor *x, int me, const ah_recovery_shard *e, int n, ah_ckpt_loaded **kept,
                          const int *kept_n, char *err, size_t errlen) {
    int rc = 0, layers = 0, from = 0;
    for (int h = 0; x && h < ah_exec_n_held(x) && rc == 0; h++) {
        int l = ah_exec_held_layer(x, h), T = 0;
        ah_ckpt_loaded *shards[AH_MAX_TP] = {0};
        int counts[AH_MAX_TP] = {0};
        for (int i = 0; i < n; i++)
            if (e[i].rank == me && e[i].layer == l && !is_own_shard(x, &e[i]))
                T = e[i].tp_degree, shards[e[i].tp] = kept[i], counts[e[i].tp] = kept_n[i];
        if (T == 0)
            continue;
        ah_ckpt_loaded *out = NULL;
        int nout = 0;
        rc = ah_reshard_from_shards(ah_exec_model_of(x, l), l, T, shards, counts, &out, &nout, err, errlen);
        if (rc == 0)
            rc = apply_layer(x, l, out, nout, err, errlen);
        ah_ckpt_free(out, nout);
        layers++, from = T > from ? T : from;
    }
    if (rc == 0 && layers)
        fprintf(stderr, "autohet: recovery resharded %d layer(s) of rank %d from TP=%d to TP=%d\n", layers, me,
                from, x->tp);
    return rc;
}

/* ---- one rank's recovery: every shard from its source, streamed into its layer ---- */

typedef struct {
    ah_executor *x; /* NULL: a server-only rank */
    const ah_recovery_shard *e;
    int n, me, step;
    ah_transport *t;
    ah_window *win;
    const uint64_t *addr;        /* where each peer shard lies in its server's window (0: not served) */
    unsigned char *buf;          /* peer bytes land here, a piece (or a whole shard) at a time */
    size_t cap;
    double cloud_rate, cloud_bytes, cloud_t0;
    ah_ckpt_loaded **kept;       /* shards of reshard groups, by entry */
    int *kept_n;
    ah_recover_stats *st;
} recovery;

/* ah_ckpt_stream sources: a mapped file, or a shard in a peer's RMA window */
static const unsigned char *fetch_mapped(void *ctx, uint64_t off, uint64_t len, char *err, size_t errlen) {
    (void)len, (void)err, (void)errlen;
    return (const unsigned char *)ctx + off;
}

typedef struct {
    recovery *rv;
    int server;
    uint64_t addr;
} peer_src;

static unsigned char *peer_buffer(recovery *rv, uint64_t len) {
    if (len + 1 > rv->cap) {
        free(rv->buf);
        rv->cap = (size_t)len + 1;
        rv->buf = ah_xcalloc(rv->cap, 1);
    }
    return rv->buf;
}

static const unsigned char *fetch_peer(void *ctx, uint64_t off, uint64_t len, char *err, size_t errlen) {
    (void)err, (void)errlen;
    peer_src *p = ctx;
    unsigned char *b = peer_buffer(p->rv, len);
    /* in gets of at most 1 MiB: Open MPI 4.1's osc/rdma refuses larger ones
     * that start inside an attached region (MPI_ERR_RMA_RANGE, fatal) */
    for (uint64_t done = 0; done < len;) {
        uint64_t piece = len - done < (1u << 20) ? len - done : (1u << 20);
        p->rv->t->get(p->rv->t->ctx, p->rv->win, b + done, (size_t)piece, p->server, p->addr + off + done);
        done += piece;
    }
    return b;
}

/* ah_ckpt_stream sink: the tensors of a shard of layer l, matched to the layer's
 * (state, tensor) by name, written into it piece by piece */
typedef struct {
    ah_executor *x;
    int l;
    int *state, *tensor; /* per shard tensor: its destination, -1: not this layer's */
} layer_sink;

static int sink_begin(void *ctx, const ah_ckpt_loaded *t, int nt, char *err, size_t errlen) {
    layer_sink *k = ctx;
    const ah_eng_layer *Ly = &ah_exec_model_of(k->x, k->l)->layers[k->l - ah_exec_model_of(k->x, k->l)->first];
    k->state = ah_xcalloc((size_t)nt + 1, sizeof(int));
    k->tensor = ah_xcalloc((size_t)nt + 1, sizeof(int));
    for (int i = 0; i < nt; i++)
        k->state[i] = k->tensor[i] = -1;
    /* the checks and messages of apply_layer, in its order */
    for (int q = 0; q < Ly->n_tensors; q++)
        for (int s = 0; s < 3; s++) {
            char name[96];
            snprintf(name, sizeof name, "%s.%s", ckpt_prefix[s], Ly->t[q].name);
            int found = -1;
            for (int i = 0; i < nt && found < 0; i++)
                if (!strcmp(t[i].name, name))
                    found = i;
            if (found < 0) {
                snprintf(err, errlen, "checkpoint layer %d: no tensor %s (a different model?)", k->l, name);
                return -1;
            }
            if (t[found].n != Ly->t[q].size) {
                snprintf(err, errlen,
                         "checkpoint layer %d: %s has %zu values, this plan's shard needs %zu "
                         "(a different TP degree or model)",
                         k->l, name, t[found].n, Ly->t[q].size);
                return -1;
            }
            k->state[found] = s, k->tensor[found] = q;
        }
    return 0;
}

static void sink_piece(void *ctx, int i, size_t first, size_t count, const float *data) {
    layer_sink *k = ctx;
    if (k->state[i] >= 0)
        ah_engine_tensor_range_from_host(ah_exec_model_of(k->x, k->l), k->l, ckpt_states[k->state[i]],
                                         k->tensor[i], first, count, data);
}

/* A whole shard of entry s in memory (bytes at p): verified, then applied or
 * kept for its reshard. 0; -1 (e2) a bad copy; -2 (err) it does not fit. */
static int take_whole(recovery *rv, int i, const char *what, const unsigned char *p, const ah_shard_src *src,
                      char *e2, size_t n2, char *err, size_t errlen) {
    ah_ckpt_loaded *t = NULL;
    int nt = 0;
    if (ah_ckpt_parse_shard_view(what, p, src->bytes, src->xxh64, &t, &nt, e2, n2) != 0)
        return -1;
    int rc = take_shard(rv->x, &rv->e[i], t, nt, &rv->kept[i], &rv->kept_n[i], err, errlen) == 0 ? 0 : -2;
    ah_ckpt_free(t, nt);
    return rc;
}

/* Entry i's shard from src through fetch (p: the whole shard when it is at
 * hand, else NULL and fetched whole when needed): an own shard streams into
 * its layer, hashed as it is copied (the layer is used only once the digest
 * matched; a bad copy is overwritten by the next one, tensor by tensor); a
 * reshard group's shard, or a layout that does not stream, is verified whole
 * first. 0; -1 (e2) a bad copy; -2 (err) it does not fit. */
static int take_entry(recovery *rv, int i, const char *what, const ah_shard_src *src,
                      const unsigned char *(*fetch)(void *, uint64_t, uint64_t, char *, size_t), void *fctx,
                      const unsigned char *p, char *e2, size_t n2, char *err, size_t errlen) {
    if (is_own_shard(rv->x, &rv->e[i])) {
        layer_sink k = {rv->x, rv->e[i].layer, NULL, NULL};
        ah_ckpt_stream s = {fetch, sink_begin, sink_piece, fctx, &k};
        int r = ah_ckpt_stream_shard(what, src->bytes, src->xxh64, &s, e2, n2);
        free(k.state);
        free(k.tensor);
        if (r == -2)
            snprintf(err, errlen, "%s", e2);
        if (r != 1)
            return r;
    }
    if (!p && !(p = fetch(fctx, 0, src->bytes, e2, n2)))
        return -1;
    return take_whole(rv, i, what, p, src, e2, n2, err, errlen);
}

/* Entry i from a file of `tier` (own memory or disk, the cloud: paced to the
 * rank's share of the node's bandwidth, a read of B bytes ending no earlier
 * than B / rate after the first). Same returns as take_entry. */
static int take_from_file(recovery *rv, int i, const ah_shard_src *src, int tier, char *e2, size_t n2, char *err,
                          size_t errlen) {
    double t0 = now_s();
    if (tier == AH_TIER_CLOUD && rv->cloud_bytes == 0)
        rv->cloud_t0 = t0;
    const unsigned char *map = NULL; /* mapped in place: the pages are read once, into the layer */
    int rc = ah_ckpt_map(src->path, src->bytes, &map, e2, n2) == 0 ? 0 : -1;
    if (rc == 0)
        rc = take_entry(rv, i, src->path, src, fetch_mapped, (void *)(uintptr_t)map, map, e2, n2, err, errlen);
    ah_ckpt_unmap(map, src->bytes);
    if (tier == AH_TIER_CLOUD) {
        rv->cloud_bytes += (double)src->bytes;
        double due = rv->cloud_rate > 0 ? rv->cloud_t0 + rv->cloud_bytes / rv->cloud_rate : 0, now = now_s();
        if (due > now)
            usleep((useconds_t)((due - now) * 1e6));
    }
    rv->st->bytes[tier] += (double)src->bytes;
    rv->st->seconds[tier] += now_s() - t0;
    return rc;
}

/* Entry i from its peer's window, one-sided (RDMA on InfiniBand/RoCE). */
static int take_from_peer(recovery *rv, int i, char *e2, size_t n2, char *err, size_t errlen) {
    const ah_recovery_shard *s = &rv->e[i];
    char what[1400];
    snprintf(what, sizeof what, "%s (from rank %d)", s->src.path, s->server);
    if (!rv->addr[i]) {
        snprintf(e2, n2, "%.400s: the holder could not read it", what);
        return -1;
    }
    double t0 = now_s();
    peer_src p = {rv, s->server, rv->addr[i]};
    int rc = take_entry(rv, i, what, &s->src, fetch_peer, &p, NULL, e2, n2, err, errlen);
    rv->st->bytes[AH_TIER_PEER] += (double)s->src.bytes;
    rv->st->seconds[AH_TIER_PEER] += now_s() - t0;
    return rc;
}

/* Every entry of mine, own tiers and peers alike, as they come; a peer shard
 * that does not verify but has a cloud copy is left for later (retry[]), a
 * bad file copy falls back to its cloud copy at once. 0 or -1 (err). */
static int take_all(recovery *rv, int *retry, char *err, size_t errlen) {
    int rc = 0;
    for (int i = 0; i < rv->n && rc == 0; i++) {
        const ah_recovery_shard *s = &rv->e[i];
        if (s->rank != rv->me)
            continue;
        char e2[1024] = "";
        int r;
        if (s->tier == AH_TIER_PEER) {
            r = take_from_peer(rv, i, e2, sizeof e2, err, errlen);
            if (r == -1 && s->fallback.path[0]) {
                fprintf(stderr, "autohet: %s; using the cloud copy\n", e2);
                retry[i] = 1;
                r = 0;
            }
        } else {
            r = take_from_file(rv, i, &s->src, s->tier, e2, sizeof e2, err, errlen);
            if (r == -1 && s->fallback.path[0]) {
                fprintf(stderr, "autohet: %s; using the cloud copy\n", e2);
                rv->st->fallbacks++;
                r = take_from_file(rv, i, &s->fallback, AH_TIER_CLOUD, e2, sizeof e2, err, errlen);
            }
        }
        if (r == -1)
            snprintf(err, errlen, "layer %d (TP rank %d) at step %d: no good copy (%s)", s->layer, s->tp, rv->step,
                     e2);
        rc = r == 0 ? 0 : -1;
    }
    return rc;
}

/* the cloud copies of the peer shards that did not verify */
static int take_retries(recovery *rv, const int *retry, char *err, size_t errlen) {
    int rc = 0;
    for (int i = 0; i < rv->n && rc == 0; i++) {
        if (!retry[i])
            continue;
        const ah_recovery_shard *s = &rv->e[i];
        char e2[1024] = "";
        rv->st->fallbacks++;
        int r = take_from_file(rv, i, &s->fallback, AH_TIER_CLOUD, e2, sizeof e2, err, errlen);
        if (r == -1)
            snprintf(err, errlen, "layer %d (TP rank %d) at step %d: no good copy (%s)", s->layer, s->tp, rv->step,
                     e2);
        rc = r == 0 ? 0 : -1;
    }
    return rc;
}

/* A barrier that sleeps while it waits: a rank done with its share leaves the
 * cores to those still restoring (MPI_Barrier spins; ranks share cores here). */
static void sleeping_barrier(MPI_Comm comm) {
    MPI_Request req;
    MPI_Ibarrier(comm, &req);
    for (int done = 0;;) {
        MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        if (done)
            break;
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
}

/* Servers map the shards they serve (no copy) and attach them to a dynamic RMA
 * window; the addresses are shared. Collective. Returns maps[] by entry. */
static const unsigned char **expose_peer_shards(recovery *rv, uint64_t *addr) {
    const unsigned char **maps = ah_xcalloc((size_t)rv->n + 1, sizeof(*maps));
    for (int i = 0; i < rv->n; i++) {
        const ah_recovery_shard *s = &rv->e[i];
        if (s->tier != AH_TIER_PEER || s->server != rv->me)
            continue;
        int dup = -1;
        for (int j = 0; j < i && dup < 0; j++)
            if (maps[j] && !strcmp(rv->e[j].src.path, s->src.path))
                dup = j;
        char e2[512];
        if (dup >= 0)
            addr[i] = addr[dup];
        else if (ah_ckpt_map(s->src.path, s->src.bytes, &maps[i], e2, sizeof e2) == 0)
            addr[i] = rv->t->window_expose(rv->t->ctx, rv->win, maps[i], s->src.bytes);
        else
            fprintf(stderr, "autohet: serving a peer shard: %s\n", e2); /* the owner falls back */
    }
    rv->t->allreduce(rv->t->ctx, rv->t->world, addr, (size_t)rv->n, AH_DT_U64, AH_RED_MAX);
    return maps;
}

/* Phase 1: every rank takes its shards (own tiers, peers one-sided, the
 * cloud) while serving those it holds for others, and waits for the others
 * asleep; then the servers let go. Phase 2: cloud copies of bad peer
 * shards. Phase 3: reshard groups. Returns this rank's rc. */
static int recover_shards(recovery *rv, char *err, size_t errlen) {
    /* every rank reads the same assignment, so all agree whether a window is
     * needed; a job without peer shards (e.g. shrunk to one rank, where Open
     * MPI's one-sided components refuse a window) makes none */
    int any_peer = 0;
    for (int i = 0; i < rv->n && !any_peer; i++)
        any_peer = rv->e[i].tier == AH_TIER_PEER;
    MPI_Comm wc = MPI_COMM_WORLD; /* servers beside the training ranks take part */
    rv->t = ah_transport_mpi(&wc);
    rv->win = any_peer ? rv->t->window_create(rv->t->ctx, rv->t->world) : NULL;
    uint64_t *addr = ah_xcalloc((size_t)rv->n + 1, sizeof(uint64_t));
    const unsigned char **maps = any_peer ? expose_peer_shards(rv, addr) : NULL;
    rv->addr = addr;
    int *retry = ah_xcalloc((size_t)rv->n + 1, sizeof(int));
    if (rv->win)
        rv->t->window_open(rv->t->ctx, rv->win);
    int rc = take_all(rv, retry, err, errlen);
    if (rv->win) {
        rv->t->window_close(rv->t->ctx, rv->win);
        sleeping_barrier(MPI_COMM_WORLD); /* every get is done: the servers may let go */
        for (int i = 0; i < rv->n; i++)
            if (maps[i]) {
                rv->t->window_hide(rv->t->ctx, rv->win, maps[i]);
                ah_ckpt_unmap(maps[i], rv->e[i].src.bytes);
            }
        rv->t->window_free(rv->t->ctx, rv->win);
    }
    ah_transport_free(rv->t);
    free(maps);
    free(addr);
    if (rc == 0)
        rc = take_retries(rv, retry, err, errlen);
    free(retry);
    if (rc == 0)
        rc = reshard_groups(rv->x, rv->me, rv->e, rv->n, rv->kept, rv->kept_n, err, errlen);
    return rc;
}

/* The recovery as every world rank plays it; x == NULL: a server-only rank.
 * The ranks of the plan are world ranks 0..N-1, servers come after them. */
static int recover_core(ah_executor *x, const char *assignment, int *step_out, ah_recover_stats *st,
                        char *err, size_t errlen) {
    int me, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    memset(st, 0, sizeof *st);
    double t_start = now_s();
    recovery rv = {.x = x, .me = me, .st = st};
    ah_recovery_shard *e = NULL;
    int rc = load_assignment(assignment, me, &rv.step, &rv.cloud_rate, &e, &rv.n, err, errlen);
    if (rc == 0)
        rc = check_assignment(x, assignment, me, world, e, rv.n, rv.step, err, errlen);
    /* every rank must agree on the peer windows before the collective */
    int bad = rc != 0, any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any) {
        if (!bad)
            snprintf(err, errlen, "another rank could not read the recovery assignment");
        free(e);
        return -1;
    }
    rv.e = e;
    rv.kept = ah_xcalloc((size_t)rv.n + 1, sizeof *rv.kept);
    rv.kept_n = ah_xcalloc((size_t)rv.n + 1, sizeof(int));
    rc = recover_shards(&rv, err, errlen);
    for (int i = 0; i < rv.n; i++)
        ah_ckpt_free(rv.kept[i], rv.kept_n[i]);
    free(rv.kept);
    free(rv.kept_n);
    free(rv.buf);
    free(e);

    st->total_s = now_s() - t_start;
    /* bytes summed over ranks, times of the slowest rank */
    MPI_Allreduce(MPI_IN_PLACE, st->bytes, AH_TIER_N, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, st->seconds, AH_TIER_N, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &st->total_s, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &st->fallbacks, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (ah_exec_agree_on_failure(MPI_COMM_WORLD, rc, err, errlen) != 0)
        return -1;
    *step_out = rv.step;
    return 0;
}

int ah_recovery_assignment_check(const char *path, int rank, char *err, size_t errlen) {
    ah_recovery_shard *e = NULL;
    int n = 0, step = 0;
    double rate = 0;
    int rc = load_assignment(path, rank, &step, &rate, &e, &n, err, errlen);
    free(e);
    return rc;
}

int ah_executor_recover(ah_executor *x, const char *assignment, int *step, ah_recover_stats *st, char *err,
                        size_t errlen) {
    return recover_core(x, assignment, step, st, err, errlen);
}

int ah_recover_serve(const char *assignment, char *err, size_t errlen) {
    ah_recover_stats st;
    int step;
    return recover_core(NULL, assignment, &step, &st, err, errlen);
}
