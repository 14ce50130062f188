/* Cluster inventories: --cluster shorthand, JSON files, and summaries. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "autohet/cluster.h"
#include "util/json_file.h"
#include "util/json_read.h"

#define MAX_NODES 4096
#define MAX_GPUS_PER_NODE 16
#define MAX_FILE_BYTES (16u << 20)
/* Longest user node name, leaving room for a "-NNNN" count suffix. */
#define MAX_NODE_NAME 58

static void clear_err(char *err, size_t errlen) {
    if (err != NULL && errlen > 0)
        err[0] = '\0';
}

/* "A100-40G, A100-80G, ..." from the catalog in use. */
static const char *known_types(const ah_device_catalog *devices, char *buf, size_t n) {
    size_t off = 0;
    buf[0] = '\0';
    for (int i = 0; i < devices->n && off < n; i++) {
        int w = snprintf(buf + off, n - off, "%s%s", i ? ", " : "", devices->dev[i].name);
        if (w < 0)
            break;
        off += (size_t)w;
    }
    return buf;
}

static int unknown_type(const ah_err_ctx *cx, const ah_device_catalog *devices, const char *where,
                        const char *type) {
    char known[1024];
    return ah_fail(cx, "%sunknown GPU type '%.40s' (known: %s)", where, type,
                   known_types(devices, known, sizeof known));
}

/* --------------------------------------------------------- node storage */

typedef struct {
    ah_cluster *c;
    int cap;
    const ah_device_catalog *devices; /* where GPU types are looked up */
} node_buf;

/* Number of nodes already in c whose type is dev_name (for "<type>-<k>"). */
static int count_type(const ah_cluster *c, const char *dev_name) {
    int k = 0;
    for (int i = 0; i < c->n_nodes; i++)
        k += strcmp(c->nodes[i].dev.name, dev_name) == 0;
    return k;
}

/* Appends `count` copies of *proto. Names: "<base>-<k>" with k counting from
 * `first`; a single copy of a user-named node keeps its name as is. */
static int add_nodes(const ah_err_ctx *cx, node_buf *nb, const ah_node *proto, int count, const char *base,
                     int first, int keep_single_name) {
    ah_cluster *c = nb->c;
    if (count > MAX_NODES - c->n_nodes)
        return ah_fail(cx, "too many nodes (at most %d)", MAX_NODES);
    if (c->n_nodes + count > nb->cap) {
        int cap = nb->cap ? nb->cap : 16;
        while (cap < c->n_nodes + count)
            cap *= 2;
        ah_node *grown = realloc(c->nodes, (size_t)cap * sizeof *grown);
        if (grown == NULL)
            return ah_fail(cx, "out of memory");
        c->nodes = grown;
        nb->cap = cap;
    }
    for (int i = 0; i < count; i++) {
        ah_node *n = &c->nodes[c->n_nodes++];
        *n = *proto;
        if (keep_single_name && count == 1)
            snprintf(n->name, sizeof n->name, "%s", base);
        else
            snprintf(n->name, sizeof n->name, "%s-%d", base, first + i);
    }
    return 0;
}

/* ------------------------------------------------------------ shorthand */

/* Parses a run of decimal digits (capped, so no overflow); -1 if none. */
static long parse_count(const char **p, const char *end) {
    const char *q = *p;
    long v = 0;
    while (q < end && isdigit((unsigned char)*q)) {
        if (v < 1000000)
            v = v * 10 + (*q - '0');
        q++;
    }
    if (q == *p)
        return -1;
    *p = q;
    return v;
}

static int is_x(const char *p, const char *end) {
    return p < end && (*p == 'x' || *p == 'X');
}

/* Trims ASCII whitespace from [*b, *e). */
static void trim(const char **b, const char **e) {
    while (*b < *e && isspace((unsigned char)**b))
        (*b)++;
    while (*e > *b && isspace((unsigned char)(*e)[-1]))
        (*e)--;
}

/* Parses the "@NIC", "$PRICE" and ":spot" suffixes in [p, end). */
static int parse_suffixes(const ah_err_ctx *cx, const char *p, const char *end, int elen, const char *entry,
                          ah_node *node) {
    while (p < end) {
        char mark = *p++;
        const char *q = p;
        while (q < end && *q != '@' && *q != ':' && *q != '$')
            q++;
        char word[64];
        snprintf(word, sizeof word, "%.*s", (int)(q - p), p);
        if (mark == '@') {
            char *stop;
            errno = 0;
            double nic = strtod(word, &stop);
            if (word[0] == '\0' || *stop != '\0' || errno != 0 || !(nic > 0.0 && nic < 1e9))
                return ah_fail(cx,
                               "entry '%.*s': NIC bandwidth '@%s' must be a positive number "
                               "(Gbit/s)",
                               elen, entry, word);
            node->nic_gbit = nic;
        } else if (mark == '$') {
            char *stop;
            errno = 0;
            double price = strtod(word, &stop);
            if (word[0] == '\0' || *stop != '\0' || errno != 0 || !(price > 0.0 && price < 1e9))
                return ah_fail(cx,
                               "entry '%.*s': price '$%s' must be a positive number (dollars per node-hour)",
                               elen, entry, word);
            node->price_per_hour = price;
        } else if (strcasecmp(word, "spot") == 0) {
            node->spot = 1;
        } else {
            return ah_fail(cx, "entry '%.*s': unknown suffix ':%s' (expected ':spot')", elen, entry, word);
        }
        p = q;
    }
    return 0;
}

/* One "NxGxTYPE[@NIC][$PRICE][:spot]" (or "GxTYPE") entry in [b, e). */
static int parse_entry(const ah_err_ctx *cx, const char *b, const char *e, node_buf *nb) {
    int elen = (int)(e - b);
    const char *p = b;
    long nodes = 1, gpus = parse_count(&p, e);
    if (gpus < 0 || !is_x(p, e))
        return ah_fail(cx, "entry '%.*s': expected NODESxGPUSxTYPE, e.g. 2x8xA100-40G", elen, b);
    p++;
    const char *save = p;
    long second = parse_count(&p, e);
    if (second >= 0 && is_x(p, e)) {
        nodes = gpus;
        gpus = second;
        p++;
    } else {
        p = save; /* "GxTYPE": the type itself may start with digits ("8x4090") */
    }
    const char *tb = p;
    while (p < e && *p != '@' && *p != ':' && *p != '$')
        p++;
    const char *te = p;
    trim(&tb, &te);
    if (nodes < 1 || nodes > MAX_NODES)
        return ah_fail(cx, "entry '%.*s': node count must be 1..%d", elen, b, MAX_NODES);
    if (gpus < 1 || gpus > MAX_GPUS_PER_NODE)
        return ah_fail(cx, "entry '%.*s': GPUs per node must be 1..%d", elen, b, MAX_GPUS_PER_NODE);
    if (tb == te)
        return ah_fail(cx, "entry '%.*s': missing GPU type", elen, b);
    char type[64];
    snprintf(type, sizeof type, "%.*s", (int)(te - tb), tb);
    const ah_device *dev = ah_device_find(nb->devices, type);
    if (dev == NULL)
        return unknown_type(cx, nb->devices, "", type);

    ah_node node;
    memset(&node, 0, sizeof node);
    node.dev = *dev;
    node.gpus = (int)gpus;
    node.nic_gbit = dev->nic_gbit;
    if (parse_suffixes(cx, p, e, elen, b, &node))
        return -1;
    return add_nodes(cx, nb, &node, (int)nodes, dev->name, count_type(nb->c, dev->name), 0);
}

int ah_cluster_parse_shorthand(const char *s, const ah_device_catalog *devices, ah_cluster *c, char *err,
                               size_t errlen) {
    /* Errors name the input as --cluster 'ARG'. */
    char name[216];
    snprintf(name, sizeof name, "--cluster '%.200s'", s ? s : "");
    ah_err_ctx cx = {name, err, errlen};
    clear_err(err, errlen);
    if (c == NULL)
        return ah_fail(&cx, "no cluster to fill");
    c->nodes = NULL;
    c->n_nodes = 0;
    if (s == NULL)
        return ah_fail(&cx, "empty cluster specification");
    if (devices == NULL)
        return ah_fail(&cx, "no device catalog given");
    node_buf nb = {c, 0, devices};
    const char *p = s;
    int rc = 0;
    for (;;) {
        const char *e = strchr(p, ',');
        if (e == NULL)
            e = p + strlen(p);
        const char *b = p, *te = e;
        trim(&b, &te);
        if (b == te)
            rc = ah_fail(&cx, s[strspn(s, " \t\n")] == '\0' ? "empty cluster specification"
                                                            : "empty entry between commas");
        else
            rc = parse_entry(&cx, b, te, &nb);
        if (rc != 0 || *e == '\0')
            break;
        p = e + 1;
    }
    if (rc != 0)
        ah_cluster_free(c);
    return rc;
}

/* -------------------------------------------------------- JSON inventory */

/* First present key of two spellings. */
static const cJSON *get2(const cJSON *o, const char *k1, const char *k2, const char **used) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, k1);
    *used = k1;
    if (it == NULL && k2 != NULL) {
        it = cJSON_GetObjectItemCaseSensitive(o, k2);
        *used = k2;
    }
    return it;
}

static int check_node_fields(const ah_err_ctx *cx, const cJSON *entry, int idx) {
    char ep[AH_JPATH_LEN];
    static const char *const known[] = {"name",     "gpu",  "gpu_type",       "gpus",  "gpus_per_node",
                                        "nic_gbit", "spot", "price_per_hour", "count", "host",
                                        NULL};
    for (const cJSON *it = entry->child; it != NULL; it = it->next) {
        int ok = it->string[0] == '_'; /* "_comment" and friends */
        for (int k = 0; known[k] != NULL && !ok; k++)
            ok = strcmp(it->string, known[k]) == 0;
        if (!ok)
            return ah_jfail(cx, ah_jpath_item(ep, "nodes", idx, NULL), "unknown field '%s'", it->string);
    }
    /* Two spellings of one field: one would silently win over the other. */
    static const char *const both[][2] = {{"gpu", "gpu_type"}, {"gpus", "gpus_per_node"}};
    for (size_t k = 0; k < sizeof both / sizeof both[0]; k++)
        if (cJSON_HasObjectItem(entry, both[k][0]) && cJSON_HasObjectItem(entry, both[k][1]))
            return ah_jfail(cx, ah_jpath_item(ep, "nodes", idx, both[k][1]),
                            "'%s' and '%s' are one field: give one of them", both[k][0], both[k][1]);
    return 0;
}

/* An optional integer field in [lo, hi]; *out keeps its value if absent. */
static int get_int(const ah_err_ctx *cx, const cJSON *entry, int idx, const char *k1, const char *k2, int lo,
                   int hi, int required, int *out) {
    char ep[AH_JPATH_LEN];
    const char *key;
    const cJSON *it = get2(entry, k1, k2, &key);
    if (it == NULL) {
        if (required)
            return ah_jfail(cx, ah_jpath_item(ep, "nodes", idx, NULL), "missing field '%s'", k1);
        return 0;
    }
    double v = cJSON_IsNumber(it) ? it->valuedouble : -1.0;
    if (!(v >= lo && v <= hi && v == (double)(long)v))
        return ah_jfail(cx, ah_jpath_item(ep, "nodes", idx, key), "must be an integer between %d and %d", lo,
                        hi);
    *out = (int)v;
    return 0;
}

/* Reads nodes[idx] into *node (and its repeat count and explicit name). */
static int parse_node(const ah_err_ctx *cx, const ah_device_catalog *devices, const cJSON *entry, int idx,
                      ah_node *node, int *count, const char **name) {
    char ep[AH_JPATH_LEN];
    if (!cJSON_IsObject(entry))
        return ah_jfail(cx, ah_jpath_item(ep, "nodes", idx, NULL), "must be an object");
    if (check_node_fields(cx, entry, idx))
        return -1;
    const char *key;
    const cJSON *gpu = get2(entry, "gpu", "gpu_type", &key);
    if (gpu == NULL)
        return ah_jfail(cx, ah_jpath_item(ep, "nodes", idx, NULL), "missing field 'gpu'");
    if (!cJSON_IsString(gpu))
        return ah_jfail(cx, ah_jpath_item(ep, "nodes", idx, key), "must be a string");
    const ah_device *dev = ah_device_find(devices, gpu->valuestring);
    if (dev == NULL) {
        char where[AH_JPATH_LEN + 2];
        snprintf(where, sizeof where, "%s: ", ah_jpath_item(ep, "nodes", idx, key));
        return unknown_type(cx, devices, where, gpu->valuestring);
    }
    memset(node, 0, sizeof *node);
    node->dev = *dev;
    node->nic_gbit = dev->nic_gbit;
    *count = 1;
    if (get_int(cx, entry, idx, "gpus", "gpus_per_node", 1, MAX_GPUS_PER_NODE, 1, &node->gpus) ||
        get_int(cx, entry, idx, "count", NULL, 1, MAX_NODES, 0, count))
        return -1;

    const cJSON *it = cJSON_GetObjectItemCaseSensitive(entry, "nic_gbit");
    if (it != NULL) {
        if (!cJSON_IsNumber(it) || !(it->valuedouble > 0.0 && it->valuedouble < 1e9))
            return ah_jfail(cx, ah_jpath_item(ep, "nodes", idx, "nic_gbit"), "must be a positive number");
        node->nic_gbit = it->valuedouble;
    }
    it = cJSON_GetObjectItemCaseSensitive(entry, "spot");
    if (it != NULL) {
        if (!cJSON_IsBool(it))
            return ah_jfail(cx, ah_jpath_item(ep, "nodes", idx, "spot"), "must be true or false");
        node->spot = cJSON_IsTrue(it);
    }
    it = cJSON_GetObjectItemCaseSensitive(entry, "price_per_hour");
    if (it != NULL) {
        if (!cJSON_IsNumber(it) || !(it->valuedouble >= 0.0 && it->valuedouble < 1e12))
            return ah_jfail(cx, ah_jpath_item(ep, "nodes", idx, "price_per_hour"),
                            "must be a non-negative number");
        node->price_per_hour = it->valuedouble;
    }
    *name = NULL;
    it = cJSON_GetObjectItemCaseSensitive(entry, "name");
    if (it != NULL) {
        if (!cJSON_IsString(it) || it->valuestring[0] == '\0' || strlen(it->valuestring) > MAX_NODE_NAME)
            return ah_jfail(cx, ah_jpath_item(ep, "nodes", idx, "name"),
                            "must be a string of 1-%d characters", MAX_NODE_NAME);
        *name = it->valuestring;
    }
    it = cJSON_GetObjectItemCaseSensitive(entry, "host");
    if (it != NULL) {
        char why[96];
        if (!cJSON_IsString(it))
            return ah_jfail(cx, ah_jpath_item(ep, "nodes", idx, "host"), "must be a string (a hostname)");
        if (ah_host_name_problem(it->valuestring, why, sizeof why))
            return ah_jfail(cx, ah_jpath_item(ep, "nodes", idx, "host"), "%s", why);
        if (*count > 1)
            return ah_jfail(cx, ah_jpath_item(ep, "nodes", idx, "host"),
                            "a host is one machine: not with \"count\" %d (list the nodes one by one)", *count);
        snprintf(node->host, sizeof node->host, "%s", it->valuestring);
    }
    return 0;
}

/* A host is one machine: the node just added (the last one) must not name
 * the host of an earlier node. */
static int host_taken(const ah_err_ctx *cx, const ah_cluster *c, int idx) {
    char ep[AH_JPATH_LEN];
    const ah_node *last = &c->nodes[c->n_nodes - 1];
    for (int i = 0; last->host[0] != '\0' && i < c->n_nodes - 1; i++)
        if (strcasecmp(c->nodes[i].host, last->host) == 0)
            return ah_jfail(cx, ah_jpath_item(ep, "nodes", idx, "host"), "host '%s' is already node '%s'",
                            last->host, c->nodes[i].name);
    return 0;
}

/* Which entry made node i, and whether it made the name ("count", or no
 * "name": <type>-<k>) rather than copying a given one. */
typedef struct {
    int entry;
    int made;
} node_origin;

/* Node names are how plans, traces and --preempt refer to nodes (the plan
 * reader refuses a repeated one): the nodes entry nodes[idx] just added
 * (from `first` on) must not repeat the name of an earlier one. */
static int name_taken(const ah_err_ctx *cx, const ah_cluster *c, int first, const node_origin *from, int idx,
                      int named) {
    char ep[AH_JPATH_LEN];
    for (int i = first; i < c->n_nodes; i++)
        for (int k = 0; k < first; k++)
            if (strcmp(c->nodes[k].name, c->nodes[i].name) == 0)
                return ah_jfail(cx, ah_jpath_item(ep, "nodes", idx, named ? "name" : NULL),
                                "duplicate node name '%s' (also %snodes[%d])%s", c->nodes[i].name,
                                from[k].made ? "made by " : "", from[k].entry,
                                from[k].made || from[i].made
                                    ? "; with \"count\" N an entry named X makes X-0 ... X-(N-1), and one without "
                                      "a name <type>-<k>"
                                    : "");
    return 0;
}

static int load_nodes(const ah_err_ctx *cx, const cJSON *root, node_buf *nb) {
    const cJSON *nodes = cJSON_GetObjectItemCaseSensitive(root, "nodes");
    if (nodes == NULL)
        return ah_fail(cx, "missing field 'nodes'");
    for (const cJSON *it = root->child; it != NULL; it = it->next)
        if (strcmp(it->string, "nodes") != 0 && it->string[0] != '_') /* "_comment" */
            return ah_fail(cx, "unknown field '%s' (an inventory has only \"nodes\")", it->string);
    if (!cJSON_IsArray(nodes))
        return ah_fail(cx, "field 'nodes' must be an array");
    if (nodes->child == NULL)
        return ah_fail(cx, "field 'nodes' is empty");
    node_origin from[MAX_NODES]; /* add_nodes keeps n_nodes <= MAX_NODES */
    int idx = 0;
    for (const cJSON *e = nodes->child; e != NULL; e = e->next, idx++) {
        ah_node node;
        int count = 1;
        const char *name = NULL;
        if (parse_node(cx, nb->devices, e, idx, &node, &count, &name))
            return -1;
        int first = nb->c->n_nodes;
        int rc = name != NULL
                     ? add_nodes(cx, nb, &node, count, name, 0, 1)
                     : add_nodes(cx, nb, &node, count, node.dev.name, count_type(nb->c, node.dev.name), 0);
        if (rc != 0)
            return -1;
        for (int i = first; i < nb->c->n_nodes; i++)
            from[i] = (node_origin){idx, name == NULL || count > 1};
        if (name_taken(cx, nb->c, first, from, idx, name != NULL) || host_taken(cx, nb->c, idx))
            return -1;
    }
    return 0;
}

int ah_cluster_load_json(const char *path, const ah_device_catalog *devices, ah_cluster *c, char *err,
                         size_t errlen) {
    ah_err_ctx cx = {path ? path : "(null)", err, errlen};
    clear_err(err, errlen);
    if (c == NULL)
        return ah_fail(&cx, "no cluster to fill");
    c->nodes = NULL;
    c->n_nodes = 0;
    if (path == NULL)
        return ah_fail(&cx, "no file given");
    if (devices == NULL)
        return ah_fail(&cx, "no device catalog given");
    cJSON *root = ah_json_parse_file(path, MAX_FILE_BYTES, 1, err, errlen);
    if (root == NULL)
        return -1;
    node_buf nb = {c, 0, devices};
    int rc = load_nodes(&cx, root, &nb);
    cJSON_Delete(root);
    if (rc != 0)
        ah_cluster_free(c);
    return rc;
}

int ah_cluster_resolve(const char *arg, const ah_device_catalog *devices, ah_cluster *c, char *err,
                       size_t errlen) {
    struct stat st;
    if (arg != NULL) {
        size_t n = strlen(arg);
        int is_json = n >= 5 && strcasecmp(arg + n - 5, ".json") == 0;
        if (is_json || (stat(arg, &st) == 0 && !S_ISDIR(st.st_mode)))
            return ah_cluster_load_json(arg, devices, c, err, errlen);
    }
    return ah_cluster_parse_shorthand(arg, devices, c, err, errlen);
}

void ah_cluster_free(ah_cluster *c) {
    if (c == NULL)
        return;
    free(c->nodes);
    c->nodes = NULL;
    c->n_nodes = 0;
}

int ah_host_name_problem(const char *host, char *buf, size_t n) {
    size_t len = host ? strlen(host) : 0;
    const char *why = NULL;
    if (len == 0)
        why = "must not be empty";
    else if (len > sizeof(((ah_node *)0)->host) - 1)
        why = "must be at most 63 characters";
    for (size_t i = 0; why == NULL && i < len; i++)
        if (!isalnum((unsigned char)host[i]) && host[i] != '-' && host[i] != '_' && host[i] != '.')
            why = "must be a hostname: letters, digits, '-', '_' and '.' only";
    if (why != NULL && buf != NULL && n > 0)
        snprintf(buf, n, "%s", why);
    return why != NULL;
}

int ah_cluster_has_hosts(const ah_cluster *c) {
    for (int i = 0; c != NULL && i < c->n_nodes; i++)
        if (c->nodes[i].host[0] != '\0')
            return 1;
    return 0;
}

int ah_cluster_node_index(const ah_cluster *c, const char *name) {
    for (int i = 0; c != NULL && i < c->n_nodes; i++)
        if (strcmp(c->nodes[i].name, name) == 0)
            return i;
    return -1;
}

int ah_cluster_total_gpus(const ah_cluster *c) {
    int total = 0;
    for (int i = 0; c != NULL && i < c->n_nodes; i++)
        total += c->nodes[i].gpus;
    return total;
}

/* Runs of consecutive nodes with the same GPU type and count. */
void ah_cluster_describe(const ah_cluster *c, char *buf, size_t n) {
    if (buf == NULL || n == 0)
        return;
    buf[0] = '\0';
    if (c == NULL || c->n_nodes == 0) {
        snprintf(buf, n, "(empty)");
        return;
    }
    size_t off = 0;
    for (int i = 0; i < c->n_nodes && off < n;) {
        const ah_node *a = &c->nodes[i];
        int run = 1;
        while (i + run < c->n_nodes && c->nodes[i + run].gpus == a->gpus &&
               strcmp(c->nodes[i + run].dev.name, a->dev.name) == 0)
            run++;
        int w = snprintf(buf + off, n - off, "%s%dx%dx%s", off ? " + " : "", run, a->gpus, a->dev.name);
        if (w < 0)
            break;
        off += (size_t)w;
        i += run;
    }
}

/* ---- host names (autohet/cluster.h) ---- */

int ah_host_address(const char *s, unsigned char *bin, int *family) {
    if (inet_pton(AF_INET, s, bin) == 1) {
        *family = AF_INET;
        return 1;
    }
    if (inet_pton(AF_INET6, s, bin) == 1) {
        *family = AF_INET6;
        return 1;
    }
    return 0;
}

int ah_host_matches(const char *expected, const char *actual) {
    if (strcasecmp(expected, actual) == 0)
        return 1;
    unsigned char bin[16];
    int family;
    if (ah_host_address(expected, bin, &family) || ah_host_address(actual, bin, &family))
        return 0;
    size_t e = strcspn(expected, "."), a = strcspn(actual, ".");
    return e == a && strncasecmp(expected, actual, e) == 0 && (expected[e] == '\0' || actual[a] == '\0');
}
