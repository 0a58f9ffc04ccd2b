/* layout_fields.c - the layout file's JSON field readers: integers, names,
 * arrays and dims, checked, with a message that names the field. */
#include "layout_internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <json-c/json.h>

wst_status_t wst_layout_read_u64(struct parse_ctx *c, struct json_object *v,
                                 const char *where, const char *key,
                                 uint64_t *out)
{
    int64_t x;

    if (!json_object_is_type(v, json_type_int))
        return wst_layout_fail(c, WST_ERR_CONFIG,
                               "%s: field \"%s\" must be an integer", where,
                               key);
    errno = 0;
    x = json_object_get_int64(v);
    if (x < 0)
        return wst_layout_fail(c, WST_ERR_CONFIG,
                               "%s: field \"%s\" is negative (%lld)", where,
                               key, (long long)x);
    /* json-c clamps values above INT64_MAX to INT64_MAX */
    if (x == INT64_MAX || errno != 0)
        return wst_layout_fail(c, WST_ERR_CONFIG,
                               "%s: field \"%s\" is too large", where, key);
    *out = (uint64_t)x;
    return WST_OK;
}

wst_status_t wst_layout_get_u64(struct parse_ctx *c, struct json_object *obj,
                                const char *where, const char *key,
                                int required, uint64_t *out)
{
    struct json_object *v;

    if (!json_object_object_get_ex(obj, key, &v)) {
        if (!required)
            return WST_OK;
        return wst_layout_fail(c, WST_ERR_CONFIG, "%s: missing field \"%s\"",
                               where, key);
    }
    return wst_layout_read_u64(c, v, where, key, out);
}

wst_status_t wst_layout_get_string(struct parse_ctx *c, struct json_object *obj,
                                   const char *where, const char *key,
                                   char *dst, size_t size)
{
    struct json_object *v;
    const char *s;
    int len;

    if (!json_object_object_get_ex(obj, key, &v))
        return wst_layout_fail(c, WST_ERR_CONFIG, "%s: missing field \"%s\"",
                               where, key);
    if (!json_object_is_type(v, json_type_string))
        return wst_layout_fail(c, WST_ERR_CONFIG,
                               "%s: field \"%s\" must be a string", where, key);
    s = json_object_get_string(v);
    len = json_object_get_string_len(v);
    if (len <= 0 || (size_t)len >= size || strlen(s) != (size_t)len)
        return wst_layout_fail(
            c, WST_ERR_CONFIG,
            "%s: field \"%s\" must be a non-empty string shorter than "
            "%zu bytes without NUL",
            where, key, size);
    memcpy(dst, s, (size_t)len + 1);
    return WST_OK;
}

wst_status_t wst_layout_get_name(struct parse_ctx *c, struct json_object *obj,
                                 const char *where, const char *key, char *dst)
{
    return wst_layout_get_string(c, obj, where, key, dst, WST_NAME_MAX);
}

wst_status_t wst_layout_get_u32(struct parse_ctx *c, struct json_object *obj,
                                const char *where, const char *key,
                                int required, uint32_t *out)
{
    uint64_t x = *out;
    wst_status_t status;

    status = wst_layout_get_u64(c, obj, where, key, required, &x);
    if (status != WST_OK)
        return status;
    if (x > UINT32_MAX)
        return wst_layout_fail(c, WST_ERR_CONFIG,
                               "%s: field \"%s\" is too large", where, key);
    *out = (uint32_t)x;
    return WST_OK;
}

wst_status_t wst_layout_get_array(struct parse_ctx *c, struct json_object *obj,
                                  const char *where, const char *key,
                                  size_t max, struct json_object **arr_p,
                                  size_t *n_p)
{
    struct json_object *v;
    size_t n;

    if (!json_object_object_get_ex(obj, key, &v))
        return wst_layout_fail(c, WST_ERR_CONFIG, "%s: missing field \"%s\"",
                               where, key);
    if (!json_object_is_type(v, json_type_array))
        return wst_layout_fail(c, WST_ERR_CONFIG,
                               "%s: field \"%s\" must be an array", where, key);
    n = json_object_array_length(v);
    if (n > max)
        return wst_layout_fail(
            c, WST_ERR_CONFIG,
            "%s: field \"%s\" has %zu entries, at most %zu allowed", where, key,
            n, max);
    *arr_p = v;
    *n_p = n;
    return WST_OK;
}

wst_status_t wst_layout_get_dims(struct parse_ctx *c, struct json_object *obj,
                                 const char *where, const char *key, uint32_t n,
                                 uint64_t *dims, uint32_t *n_p)
{
    struct json_object *arr;
    char field[32];
    size_t len, i;
    wst_status_t status;

    status = wst_layout_get_array(c, obj, where, key, SIZE_MAX, &arr, &len);
    if (status != WST_OK)
        return status;
    if (n == 0 && (len < 1 || len > WST_MAX_DIMS))
        return wst_layout_fail(c, WST_ERR_CONFIG,
                               "%s: field \"%s\" has %zu dims, expected 1..%d",
                               where, key, len, WST_MAX_DIMS);
    if (n != 0 && len != n)
        return wst_layout_fail(c, WST_ERR_CONFIG,
                               "%s: field \"%s\" has %zu dims, shape has %u",
                               where, key, len, n);
    for (i = 0; i < len; i++) {
        snprintf(field, sizeof(field), "%s[%zu]", key, i);
        status = wst_layout_read_u64(c, json_object_array_get_idx(arr, i),
                                     where, field, &dims[i]);
        if (status != WST_OK)
            return status;
    }
    if (n_p != NULL)
        *n_p = (uint32_t)len;
    return WST_OK;
}
