/* The header of a safetensors file (util/safetensors_header.h). */
#include "util/safetensors_header.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "util/errors.h"

static const struct {
    const char *name;
    ah_st_dtype d;
    int bytes;
} dtypes[] = {{"F32", AH_ST_F32, 4}, {"F16", AH_ST_F16, 2}, {"BF16", AH_ST_BF16, 2}};

const char *ah_st_dtype_name(ah_st_dtype d) {
    return d >= 0 && d <= AH_ST_BF16 ? dtypes[d].name : "?";
}

/* a shape value or offset: an integer JSON number in [0, 2^53] (exact in a double; NaN, inf, negatives,
 * fractions and 1e300 fail) */
static int st_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0) || v->valuedouble > 9007199254740992.0 ||
        v->valuedouble != (double)(uint64_t)v->valuedouble)
        return -1;
    *out = (uint64_t)v->valuedouble;
    return 0;
}

/* one tensor entry checked against the data section (data_len bytes); 0, or -1 with the field's problem
 * in why */
static int tensor_entry(const cJSON *it, uint64_t data_len, ah_st_tensor *t, char *why, size_t n) {
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(it, "dtype"),
                *sh = cJSON_GetObjectItemCaseSensitive(it, "shape"),
                *of = cJSON_GetObjectItemCaseSensitive(it, "data_offsets");
    int bytes = 0;
    if (!cJSON_IsObject(it))
        return snprintf(why, n, "expected an object with dtype, shape and data_offsets"), -1;
    for (size_t k = 0; cJSON_IsString(dt) && k < sizeof dtypes / sizeof dtypes[0]; k++)
        if (!strcmp(dt->valuestring, dtypes[k].name))
            t->dtype = dtypes[k].d, bytes = dtypes[k].bytes;
    if (!bytes)
        return snprintf(why, n, "dtype %s%.16s%s is not supported (F32, F16, BF16)", cJSON_IsString(dt) ? "'" : "",
                        cJSON_IsString(dt) ? dt->valuestring : "missing", cJSON_IsString(dt) ? "'" : ""),
               -1;
    if (!cJSON_IsArray(sh) || cJSON_GetArraySize(sh) > AH_ST_MAX_DIMS)
        return snprintf(why, n, "shape: expected an array of at most %d integers", AH_ST_MAX_DIMS), -1;
    t->ndim = cJSON_GetArraySize(sh);
    uint64_t elems = 1, b, e, need;
    for (int d = 0; d < t->ndim; d++) {
        uint64_t x;
        if (st_uint(cJSON_GetArrayItem(sh, d), &x) != 0 || __builtin_mul_overflow(elems, x, &elems))
            return snprintf(why, n, "shape: dimension %d is not a non-negative integer (or the size overflows)", d),
                   -1;
        t->shape[d] = (int64_t)x;
    }
    if (!cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2 || st_uint(cJSON_GetArrayItem(of, 0), &b) != 0 ||
        st_uint(cJSON_GetArrayItem(of, 1), &e) != 0 || e < b)
        return snprintf(why, n, "data_offsets: expected [begin, end] integers with begin <= end"), -1;
    if (e > data_len)
        return snprintf(why, n, "data_offsets: [%llu, %llu] outside the %llu-byte data section",
                        (unsigned long long)b, (unsigned long long)e, (unsigned long long)data_len),
               -1;
    if (__builtin_mul_overflow(elems, (uint64_t)bytes, &need) || need != e - b || elems > SIZE_MAX / 4)
        return snprintf(why, n, "data_offsets: %llu bytes, the shape needs %llu of %s",
                        (unsigned long long)(e - b), (unsigned long long)need, ah_st_dtype_name(t->dtype)),
               -1;
    t->n = (size_t)elems;
    t->begin = b;
    return 0;
}

static int metadata_ok(const cJSON *m) {
    if (!cJSON_IsObject(m))
        return 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, m) if (!cJSON_IsString(it)) return 0;
    return 1;
}

int ah_st_parse_header(const char *hdr, uint64_t hl, uint64_t data_len, ah_st_tensor **out, int *n, char *err,
                       size_t errlen) {
    *out = NULL;
    *n = 0;
    cJSON *h = cJSON_ParseWithLength(hdr, (size_t)hl);
    if (!cJSON_IsObject(h) || cJSON_GetArraySize(h) > AH_ST_MAX_TENSORS) {
        if (cJSON_IsObject(h))
            snprintf(err, errlen, "header: more than %d entries", AH_ST_MAX_TENSORS);
        else
            snprintf(err, errlen, "header: not a JSON object");
        cJSON_Delete(h);
        return -1;
    }
    ah_st_tensor *t = ah_xcalloc((size_t)cJSON_GetArraySize(h) + 1, sizeof *t);
    int rc = 0, k = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, h) {
        char why[256];
        if (!strcmp(it->string, "__metadata__")) {
            if (!metadata_ok(it)) {
                snprintf(err, errlen, "__metadata__: expected an object of strings");
                rc = -1;
                break;
            }
            continue;
        }
        if (strlen(it->string) >= sizeof t[k].name) {
            snprintf(err, errlen, "tensor '%.60s...': name longer than %d bytes", it->string, AH_ST_MAX_NAME - 1);
            rc = -2;
            break;
        }
        snprintf(t[k].name, sizeof t[k].name, "%s", it->string);
        if (tensor_entry(it, data_len, &t[k], why, sizeof why) != 0) {
            snprintf(err, errlen, "tensor '%s': %s", t[k].name, why);
            rc = -2;
            break;
        }
        k++;
    }
    cJSON_Delete(h);
    if (rc != 0) {
        free(t);
        return rc;
    }
    *out = t;
    *n = k;
    return 0;
}
