/* Reading JSON documents field by field with one-line errors that name the
 * file and the field: "FILE: PATH: what is wrong", PATH written as in jq
 * (replicas[2].stages[0].node, devices["A100-40G"]["1"]): a key that is
 * an identifier follows a '.', any other key goes in ["..."] (cut to 40
 * characters). An empty PATH (the document itself) gives "FILE: message".
 *
 * Errors go to an ah_err_ctx (util/json_file.h), whose name is the file.
 * Paths live in caller buffers of AH_JPATH_LEN characters; a longer path is
 * cut short (only in the error text).
 *
 * The getters read obj[key] into *out: they return 1 if it was there and
 * valid, 0 if it is absent and not required (*out untouched), -1 with the
 * error written ("missing", "expected an integer, got a string", "20 out of
 * range [1, 16]", ...). */
#ifndef AH_UTIL_JSON_READ_H
#define AH_UTIL_JSON_READ_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "util/json_file.h"

#define AH_JPATH_LEN 256

/* out = parent.key (or parent["key"]); parent may be "" (the document). */
void ah_jpath_key(char *out, const char *parent, const char *key);
/* out = parent["key"] for a key that is data (a map's key: a GPU name, a
 * micro-batch size), whatever it looks like. */
void ah_jpath_map_key(char *out, const char *parent, const char *key);
/* out = parent[i] */
void ah_jpath_index(char *out, const char *parent, int i);

/* out = list[idx], or list[idx].key unless key is NULL; returns out. */
const char *ah_jpath_item(char *out, const char *list, int idx, const char *key);

/* Writes "FILE: PATH: message" (or "FILE: message" for an empty or NULL
 * path). Always returns -1. */
int ah_jfail(const ah_err_ctx *cx, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* "a string", "an array", "null", ... ("nothing" for NULL). */
const char *ah_json_type_name(const cJSON *v);

/* obj[key] into *out with its path in path[AH_JPATH_LEN] (any type). */
int ah_jmember(const ah_err_ctx *cx, const cJSON *obj, const char *parent, const char *key, int required,
               const cJSON **out, char *path);
/* An integer in [lo, hi] (hi >= INT_MAX: no upper bound in the message). */
int ah_jget_int(const ah_err_ctx *cx, const cJSON *obj, const char *parent, const char *key, int required,
                long lo, long hi, int *out);
/* An integer >= lo, exact up to 2^53 (nanoseconds, counts). */
int ah_jget_ll(const ah_err_ctx *cx, const cJSON *obj, const char *parent, const char *key, int required,
               long long lo, long long *out);
/* A number; with allow_null, null reads as NaN (writers emit null for
 * non-finite numbers). */
int ah_jget_num(const ah_err_ctx *cx, const cJSON *obj, const char *parent, const char *key, int required,
                int allow_null, double *out);
/* true or false as 1 or 0. */
int ah_jget_bool(const ah_err_ctx *cx, const cJSON *obj, const char *parent, const char *key, int required,
                 int *out);
/* A string copied into buf[bufsz] (too long is an error). */
int ah_jget_str(const ah_err_ctx *cx, const cJSON *obj, const char *parent, const char *key, int required,
                char *buf, size_t bufsz);
/* An object or an array: *out is the item, path its path. */
int ah_jget_obj(const ah_err_ctx *cx, const cJSON *obj, const char *parent, const char *key, int required,
                const cJSON **out, char *path);
int ah_jget_arr(const ah_err_ctx *cx, const cJSON *obj, const char *parent, const char *key, int required,
                const cJSON **out, char *path);

/* A required, non-empty array obj[key] and a zeroed heap block of one
 * elem_size element per item (*elems, free() it; *n items). An empty array
 * is "PATH: empty (WHY)". */
int ah_jget_list(const ah_err_ctx *cx, const cJSON *obj, const char *parent, const char *key, const char *why,
                 size_t elem_size, const cJSON **arr, void **elems, int *n, char *path);
/* Item i of an array at `parent`: path = parent[i]; it must be an object. */
int ah_jitem_obj(const ah_err_ctx *cx, const cJSON *item, const char *parent, int i, char *path);

#endif
