/* Reading JSON documents field by field (util/json_read.h). */
#include "util/json_read.h"

#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int is_identifier(const char *k) {
    if (!*k || !(isalpha((unsigned char)*k) || *k == '_'))
        return 0;
    for (; *k; k++)
        if (!(isalnum((unsigned char)*k) || *k == '_'))
            return 0;
    return 1;
}

void ah_jpath_map_key(char *out, const char *parent, const char *key) {
    const char *k = key ? key : "";
    if (snprintf(out, AH_JPATH_LEN, "%s[\"%.40s%s\"]", parent ? parent : "", k, strlen(k) > 40 ? "..." : "") <
        0)
        out[0] = '\0';
}

void ah_jpath_key(char *out, const char *parent, const char *key) {
    const char *p = parent ? parent : "", *k = key ? key : "";
    if (!is_identifier(k))
        ah_jpath_map_key(out, p, k);
    else if ((*p ? snprintf(out, AH_JPATH_LEN, "%s.%s", p, k) : snprintf(out, AH_JPATH_LEN, "%s", k)) < 0)
        out[0] = '\0';
}

void ah_jpath_index(char *out, const char *parent, int i) {
    if (snprintf(out, AH_JPATH_LEN, "%s[%d]", parent ? parent : "", i) < 0)
        out[0] = '\0';
}

const char *ah_jpath_item(char *out, const char *list, int idx, const char *key) {
    char item[AH_JPATH_LEN];
    ah_jpath_index(item, list, idx);
    if (key)
        ah_jpath_key(out, item, key);
    else
        memcpy(out, item, sizeof item);
    return out;
}

int ah_jfail(const ah_err_ctx *cx, const char *path, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (path && *path)
        return ah_fail(cx, "%s: %s", path, msg);
    return ah_fail(cx, "%s", msg);
}

const char *ah_json_type_name(const cJSON *v) {
    if (!v)
        return "nothing";
    if (cJSON_IsNull(v))
        return "null";
    if (cJSON_IsBool(v))
        return "a boolean";
    if (cJSON_IsNumber(v))
        return "a number";
    if (cJSON_IsString(v))
        return "a string";
    if (cJSON_IsArray(v))
        return "an array";
    if (cJSON_IsObject(v))
        return "an object";
    return "an invalid value";
}

int ah_jmember(const ah_err_ctx *cx, const cJSON *obj, const char *parent, const char *key, int required,
               const cJSON **out, char *path) {
    ah_jpath_key(path, parent, key);
    *out = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (*out)
        return 1;
    if (required)
        return ah_jfail(cx, path, "missing");
    return 0;
}

/* obj[key] as a whole number in *d (its path in path). */
static int get_integer(const ah_err_ctx *cx, const cJSON *obj, const char *parent, const char *key,
                       int required, double *d, char *path) {
    const cJSON *v;
    int rc = ah_jmember(cx, obj, parent, key, required, &v, path);
    if (rc <= 0)
        return rc;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble != floor(v->valuedouble))
        return ah_jfail(cx, path, "expected an integer, got %s", ah_json_type_name(v));
    *d = v->valuedouble;
    return 1;
}

int ah_jget_int(const ah_err_ctx *cx, const cJSON *obj, const char *parent, const char *key, int required,
                long lo, long hi, int *out) {
    char path[AH_JPATH_LEN];
    double d = 0;
    int rc = get_integer(cx, obj, parent, key, required, &d, path);
    if (rc <= 0)
        return rc;
    if (d < (double)lo || d > (double)hi) {
        if (hi >= INT_MAX)
            return ah_jfail(cx, path, "%.15g out of range (expected >= %ld)", d, lo);
        return ah_jfail(cx, path, "%.15g out of range [%ld, %ld]", d, lo, hi);
    }
    *out = (int)d;
    return 1;
}

int ah_jget_ll(const ah_err_ctx *cx, const cJSON *obj, const char *parent, const char *key, int required,
               long long lo, long long *out) {
    char path[AH_JPATH_LEN];
    double d = 0;
    int rc = get_integer(cx, obj, parent, key, required, &d, path);
    if (rc <= 0)
        return rc;
    if (d < (double)lo || d > 9007199254740992.0 || d < -9007199254740992.0)
        return ah_jfail(cx, path, "%.15g out of range", d);
    *out = (long long)d;
    return 1;
}

int ah_jget_num(const ah_err_ctx *cx, const cJSON *obj, const char *parent, const char *key, int required,
                int allow_null, double *out) {
    char path[AH_JPATH_LEN];
    const cJSON *v;
    int rc = ah_jmember(cx, obj, parent, key, required, &v, path);
    if (rc <= 0)
        return rc;
    if (allow_null && cJSON_IsNull(v)) {
        *out = NAN;
        return 1;
    }
    if (!cJSON_IsNumber(v))
        return ah_jfail(cx, path, "expected a number, got %s", ah_json_type_name(v));
    *out = v->valuedouble;
    return 1;
}

int ah_jget_bool(const ah_err_ctx *cx, const cJSON *obj, const char *parent, const char *key, int required,
                 int *out) {
    char path[AH_JPATH_LEN];
    const cJSON *v;
    int rc = ah_jmember(cx, obj, parent, key, required, &v, path);
    if (rc <= 0)
        return rc;
    if (!cJSON_IsBool(v))
        return ah_jfail(cx, path, "expected true or false, got %s", ah_json_type_name(v));
    *out = cJSON_IsTrue(v) ? 1 : 0;
    return 1;
}

int ah_jget_str(const ah_err_ctx *cx, const cJSON *obj, const char *parent, const char *key, int required,
                char *buf, size_t bufsz) {
    char path[AH_JPATH_LEN];
    const cJSON *v;
    int rc = ah_jmember(cx, obj, parent, key, required, &v, path);
    if (rc <= 0)
        return rc;
    if (!cJSON_IsString(v) || !v->valuestring)
        return ah_jfail(cx, path, "expected a string, got %s", ah_json_type_name(v));
    size_t n = strlen(v->valuestring);
    if (n >= bufsz)
        return ah_jfail(cx, path, "string too long (%zu characters, at most %zu)", n, bufsz - 1);
    memcpy(buf, v->valuestring, n + 1);
    return 1;
}

/* ah_jmember() of a container: is(*out) must hold, else "expected WHAT". */
static int get_container(const ah_err_ctx *cx, const cJSON *obj, const char *parent, const char *key,
                         int required, const cJSON **out, char *path, cJSON_bool (*is)(const cJSON *),
                         const char *what) {
    int rc = ah_jmember(cx, obj, parent, key, required, out, path);
    if (rc <= 0)
        return rc;
    if (!is(*out))
        return ah_jfail(cx, path, "expected %s, got %s", what, ah_json_type_name(*out));
    return 1;
}

int ah_jget_obj(const ah_err_ctx *cx, const cJSON *obj, const char *parent, const char *key, int required,
                const cJSON **out, char *path) {
    return get_container(cx, obj, parent, key, required, out, path, cJSON_IsObject, "an object");
}

int ah_jget_arr(const ah_err_ctx *cx, const cJSON *obj, const char *parent, const char *key, int required,
                const cJSON **out, char *path) {
    return get_container(cx, obj, parent, key, required, out, path, cJSON_IsArray, "an array");
}

int ah_jget_list(const ah_err_ctx *cx, const cJSON *obj, const char *parent, const char *key, const char *why,
                 size_t elem_size, const cJSON **arr, void **elems, int *n, char *path) {
    if (ah_jget_arr(cx, obj, parent, key, 1, arr, path) < 0)
        return -1;
    int count = cJSON_GetArraySize(*arr);
    if (count <= 0)
        return ah_jfail(cx, path, "empty (%s)", why);
    *elems = calloc((size_t)count, elem_size);
    if (!*elems)
        return ah_jfail(cx, path, "out of memory");
    *n = count; /* only with the block: a caller's cleanup may walk it */
    return 1;
}

int ah_jitem_obj(const ah_err_ctx *cx, const cJSON *item, const char *parent, int i, char *path) {
    ah_jpath_index(path, parent, i);
    if (!cJSON_IsObject(item))
        return ah_jfail(cx, path, "expected an object, got %s", ah_json_type_name(item));
    return 0;
}
