/* The controller's state in its run directory (docs/recovery.md, "A
 * controller that can die"): RUN/run.json holds the options the run was
 * started with and everything the controller learned since (the live nodes,
 * the generation, the memory-tier paths, the report so far), rewritten
 * atomically at every change, so that `autohet run --resume RUN` can go on
 * from any moment. RUN/.controller.lock is held (flock) for the controller's
 * life: the kernel lets go when the process dies, so a second controller of
 * the same run is refused while the first lives. RUN/controller.beat is
 * touched every second: when the controller was last alive. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "elastic/run_state.h"
#include "util/atomic_file.h"
#include "util/clock.h"
#include "util/json_file.h"

int run_state_lock(run_state *s, char *err, size_t errlen) {
    char p[700];
    snprintf(p, sizeof p, "%s/.controller.lock", s->run);
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "%s: %s", p, strerror(errno));
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        char line[64] = "";
        ssize_t n = pread(fd, line, sizeof line - 1, 0);
        line[n > 0 ? n : 0] = 0;
        line[strcspn(line, "\n")] = 0;
        snprintf(err, errlen, "the controller of %.500s still runs (pid %s): one controller per run", s->run,
                 line[0] ? line : "?");
        close(fd);
        return -1;
    }
    char line[32];
    int len = snprintf(line, sizeof line, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)len, 0) != len) {
        snprintf(err, errlen, "%s: cannot write (%s)", p, strerror(errno));
        close(fd);
        return -1;
    }
    s->lock_fd = fd; /* held until the process ends */
    return 0;
}

void run_state_beat(run_state *s) {
    double now = ah_wall_clock_s();
    if (now - s->beat_written < 1.0)
        return;
    s->beat_written = now;
    char p[700];
    snprintf(p, sizeof p, "%s/controller.beat", s->run);
    int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) {
        futimens(fd, NULL);
        close(fd);
    }
}

double run_state_last_beat(const run_state *s) {
    char p[700];
    struct stat sb;
    snprintf(p, sizeof p, "%s/controller.beat", s->run);
    if (stat(p, &sb) != 0)
        return 0;
    return (double)sb.st_mtim.tv_sec + 1e-9 * (double)sb.st_mtim.tv_nsec;
}

static void add_str(cJSON *o, const char *k, const char *v) {
    if (v)
        cJSON_AddStringToObject(o, k, v);
}

/* a path option made absolute (the resumed controller may start elsewhere); an output not written yet
 * (--report, --trace) by its directory */
static void add_path(cJSON *o, const char *k, const char *v) {
    char real[PATH_MAX], dir[PATH_MAX], full[2 * PATH_MAX];
    if (!v || realpath(v, real)) {
        add_str(o, k, v ? real : NULL);
        return;
    }
    const char *slash = strrchr(v, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - v) : 1, slash ? v : ".");
    if (slash == v)
        snprintf(dir, sizeof dir, "/");
    if (v[0] != '/' && realpath(dir, real)) {
        snprintf(full, sizeof full, "%s/%s", real, slash ? slash + 1 : v);
        add_str(o, k, full);
    } else {
        add_str(o, k, v);
    }
}

static cJSON *options_json(const ah_run_options *o) {
    cJSON *j = cJSON_CreateObject();
    /* a model preset is a name; a config.json a path */
    struct stat sb;
    if (o->model_arg && stat(o->model_arg, &sb) == 0)
        add_path(j, "model", o->model_arg);
    else
        add_str(j, "model", o->model_arg);
    add_path(j, "data", o->data);
    add_path(j, "plan", o->plan_path);
    if (o->cluster_arg && stat(o->cluster_arg, &sb) == 0)
        add_path(j, "cluster", o->cluster_arg);
    else
        add_str(j, "cluster", o->cluster_arg);
    add_path(j, "log", o->log_path);
    add_path(j, "report", o->report_path);
    add_path(j, "trace", o->trace_path);
    add_path(j, "svg", o->svg_path);
    add_str(j, "preempt", o->preempt);
    add_path(j, "spot_trace", o->spot_trace);
    add_str(j, "launcher", o->launcher);
    add_path(j, "hostfile", o->hostfile);
    add_path(j, "val_data", o->val_data);
    add_str(j, "data_dtype", o->data_dtype);
    add_path(j, "devices", o->devices);
    add_path(j, "init_from", o->init_from);
    add_str(j, "recovery", o->mode == AH_RECOVERY_FULL_RELOAD ? "full-reload" : "layer-bitmap");
    const struct {
        const char *k;
        double v;
    } nums[] = {{"time_scale", o->time_scale}, {"notice_s", o->notice_s},       {"cloud_mbs", o->cloud_mbs},
                {"steps", o->steps},           {"seed", o->seed},               {"global_batch", o->global_batch},
                {"micro_batch", o->micro_batch}, {"seq", o->seq},               {"tp", o->tp},
                {"warmup", o->warmup},         {"eval_every", o->eval_every},   {"ckpt_every", o->ckpt_every},
                {"mem_every", o->mem_every},   {"replan_tp", o->replan_tp},     {"lr", o->lr},
                {"heartbeat_s", o->heartbeat_s}, {"max_restarts", o->max_restarts},
                {"mem_copies", o->mem_copies},   {"eval_batches", o->eval_batches}};
    for (size_t i = 0; i < sizeof nums / sizeof *nums; i++)
        cJSON_AddNumberToObject(j, nums[i].k, nums[i].v);
    return j;
}

int run_state_save(run_state *s) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "format", "autohet-run-state");
    cJSON_AddNumberToObject(j, "version", 1);
    cJSON_AddNumberToObject(j, "controller_pid", (double)getpid());
    cJSON_AddItemToObject(j, "options", options_json(s->o));
    cJSON_AddStringToObject(j, "memory_tier", s->mem);
    cJSON_AddStringToObject(j, "host_memory_tier", s->host_mem);
    cJSON_AddStringToObject(j, "host_disk_tier", s->host_disk);
    cJSON_AddNumberToObject(j, "t_start", s->t_start);
    cJSON_AddNumberToObject(j, "generation", s->gen);
    cJSON_AddNumberToObject(j, "job_pid", s->pid);
    cJSON_AddNumberToObject(j, "start_step", s->start_step);
    cJSON_AddNumberToObject(j, "step", s->step);
    cJSON_AddBoolToObject(j, "finished", s->finished);
    cJSON_AddNumberToObject(j, "next_trace", s->next_trace);
    cJSON *alive = cJSON_AddArrayToObject(j, "alive");
    for (int i = 0; i < s->inv.n_nodes; i++)
        cJSON_AddItemToArray(alive, cJSON_CreateBool(s->alive[i]));
    cJSON *fired = cJSON_AddArrayToObject(j, "preempts_fired");
    for (int i = 0; i < s->n_pre; i++)
        cJSON_AddItemToArray(fired, cJSON_CreateBool(s->pre[i].fired));
    cJSON_AddStringToObject(j, "fail_signature", s->fail_signature);
    cJSON_AddNumberToObject(j, "fail_repeats", s->fail_repeats);
    cJSON_AddItemToObject(j, "generations", cJSON_Duplicate(s->gens, 1));
    cJSON_AddItemToObject(j, "recoveries", cJSON_Duplicate(s->recs, 1));
    char *txt = cJSON_Print(j), p[700], err[512];
    snprintf(p, sizeof p, "%s/run.json", s->run);
    int rc = ah_write_file_atomic(p, txt, strlen(txt), err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "autohet run: saving the run's state: %s\n", err);
    free(txt);
    cJSON_Delete(j);
    return rc;
}

static const char *opt_str(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int opt_num(const cJSON *o, const char *k, double lo, double hi, double *out, char *err, size_t errlen) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi) {
        snprintf(err, errlen, "options.%s: missing or out of range", k);
        return -1;
    }
    *out = v->valuedouble;
    return 0;
}

int run_state_read_options(const char *dir, ah_run_options *o, cJSON **doc, char *err, size_t errlen) {
    char p[700], why[512];
    snprintf(p, sizeof p, "%s/run.json", dir);
    cJSON *j = ah_json_parse_file(p, 64 << 20, 1, why, sizeof why);
    if (!j) {
        snprintf(err, errlen, "--resume %.300s: not a run directory of autohet run (%.300s)", dir, why);
        return -1;
    }
    const cJSON *opts = cJSON_GetObjectItemCaseSensitive(j, "options");
    const char *fmt = opt_str(j, "format");
    if (!fmt || strcmp(fmt, "autohet-run-state") || !cJSON_IsObject(opts)) {
        snprintf(err, errlen, "%s: format: expected an autohet-run-state document", p);
        cJSON_Delete(j);
        return -1;
    }
    memset(o, 0, sizeof *o);
    o->model_arg = opt_str(opts, "model"), o->data = opt_str(opts, "data");
    o->plan_path = opt_str(opts, "plan"), o->cluster_arg = opt_str(opts, "cluster");
    o->log_path = opt_str(opts, "log"), o->report_path = opt_str(opts, "report");
    o->trace_path = opt_str(opts, "trace"), o->svg_path = opt_str(opts, "svg");
    o->preempt = opt_str(opts, "preempt"), o->spot_trace = opt_str(opts, "spot_trace");
    o->launcher = opt_str(opts, "launcher"), o->hostfile = opt_str(opts, "hostfile");
    o->val_data = opt_str(opts, "val_data"), o->data_dtype = opt_str(opts, "data_dtype");
    o->devices = opt_str(opts, "devices"), o->init_from = opt_str(opts, "init_from");
    const cJSON *eb = cJSON_GetObjectItemCaseSensitive(opts, "eval_batches"); /* (absent before it existed) */
    o->eval_batches = cJSON_IsNumber(eb) && eb->valuedouble >= 0 && eb->valuedouble <= 1e6 ? (int)eb->valuedouble : 0;
    const char *mode = opt_str(opts, "recovery");
    o->mode = mode && !strcmp(mode, "full-reload") ? AH_RECOVERY_FULL_RELOAD : AH_RECOVERY_LAYER_BITMAP;
    double v[17];
    const char *ints[] = {"steps", "seed", "global_batch", "micro_batch", "seq", "tp", "warmup", "eval_every",
                          "ckpt_every", "mem_every", "replan_tp", "max_restarts", "mem_copies"};
    for (int i = 0; i < 13; i++)
        if (opt_num(opts, ints[i], 0, 1e9, &v[i], err, errlen) != 0) {
            cJSON_Delete(j);
            return -1;
        }
    int *iv[] = {&o->steps,      &o->seed, &o->global_batch, &o->micro_batch, &o->seq,       &o->tp,
                 &o->warmup,     &o->eval_every, &o->ckpt_every, &o->mem_every, &o->replan_tp, &o->max_restarts,
                 &o->mem_copies};
    for (int i = 0; i < 13; i++)
        *iv[i] = (int)v[i];
    const char *dbl[] = {"time_scale", "notice_s", "cloud_mbs", "lr", "heartbeat_s"};
    double *dv[] = {&o->time_scale, &o->notice_s, &o->cloud_mbs, &o->lr, &o->heartbeat_s};
    for (int i = 0; i < 5; i++)
        if (opt_num(opts, dbl[i], 0, 1e12, dv[i], err, errlen) != 0) {
            cJSON_Delete(j);
            return -1;
        }
    if (o->data_dtype && strcmp(o->data_dtype, "uint16") && strcmp(o->data_dtype, "uint32")) {
        snprintf(err, errlen, "%s: options.data_dtype: expected uint16 or uint32", p);
        cJSON_Delete(j);
        return -1;
    }
    if (!(o->model_arg || o->plan_path) || !o->data || !o->launcher || !o->plan_path == !o->cluster_arg) {
        snprintf(err, errlen, "%s: options: data, launcher, one of plan/cluster and, with a cluster, model are required",
                 p);
        cJSON_Delete(j);
        return -1;
    }
    o->run_dir = dir;
    *doc = j;
    return 0;
}

static int num_of(const cJSON *j, const char *k, int dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);
    return cJSON_IsNumber(v) ? v->valueint : dflt;
}

void run_state_restore(run_state *s, const cJSON *j) {
    const char *mem = opt_str(j, "memory_tier"), *hm = opt_str(j, "host_memory_tier"),
               *hd = opt_str(j, "host_disk_tier");
    if (mem)
        snprintf(s->mem, sizeof s->mem, "%s", mem);
    if (hm)
        snprintf(s->host_mem, sizeof s->host_mem, "%s", hm);
    if (hd)
        snprintf(s->host_disk, sizeof s->host_disk, "%s", hd);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "t_start");
    if (cJSON_IsNumber(t))
        s->t_start = t->valuedouble;
    s->gen = num_of(j, "generation", 0);
    s->start_step = num_of(j, "start_step", 0);
    s->step = num_of(j, "step", 0);
    s->next_trace = num_of(j, "next_trace", s->next_trace);
    if (s->next_trace > s->n_trace)
        s->next_trace = s->n_trace;
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "alive");
    for (int i = 0; i < s->inv.n_nodes && i < cJSON_GetArraySize(a); i++)
        s->alive[i] = cJSON_IsTrue(cJSON_GetArrayItem(a, i));
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(j, "preempts_fired");
    for (int i = 0; i < s->n_pre && i < cJSON_GetArraySize(f); i++)
        s->pre[i].fired = cJSON_IsTrue(cJSON_GetArrayItem(f, i));
    const char *sig = opt_str(j, "fail_signature");
    snprintf(s->fail_signature, sizeof s->fail_signature, "%s", sig ? sig : "");
    s->fail_repeats = num_of(j, "fail_repeats", 0);
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(j, "generations"),
                *r = cJSON_GetObjectItemCaseSensitive(j, "recoveries");
    cJSON_Delete(s->gens);
    cJSON_Delete(s->recs);
    s->gens = cJSON_IsArray(g) ? cJSON_Duplicate(g, 1) : cJSON_CreateArray();
    s->recs = cJSON_IsArray(r) ? cJSON_Duplicate(r, 1) : cJSON_CreateArray();
    cJSON *rec;
    cJSON_ArrayForEach(rec, s->recs) { /* a recovery whose restore never reported: its controller ended first */
        if (cJSON_GetObjectItemCaseSensitive(rec, "t_event")) {
            cJSON_DeleteItemFromObject(rec, "t_event");
            cJSON_DeleteItemFromObject(rec, "t_spawn");
            cJSON_AddBoolToObject(rec, "interrupted", 1);
        }
    }
}
