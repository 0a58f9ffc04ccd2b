/* layout_file.c - load, validate and save the agent's layout file (json-c).
 *
 * Parsing fills a private struct wst_layout and moves it into the caller's
 * only once everything has been checked, so a refused file changes nothing.
 * Checks that would be quadratic (duplicate names, name lookup, overlap)
 * run on sorted index arrays: files hold up to 2^20 entries.
 */
#include "layout_file.h"

#include "dtype.h"

#include <json-c/json.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct parse_ctx {
    char *err;
    size_t errlen;
};

static wst_status_t fail(struct parse_ctx *c, wst_status_t status,
                         const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static wst_status_t fail(struct parse_ctx *c, wst_status_t status,
                         const char *fmt, ...)
{
    va_list ap;

    if (c->err != NULL && c->errlen > 0) {
        va_start(ap, fmt);
        vsnprintf(c->err, c->errlen, fmt, ap);
        va_end(ap);
    }
    return status;
}

/* ---- field readers ------------------------------------------------------ */

/* Reads a JSON integer in [0, INT64_MAX) from 'v'. */
static wst_status_t read_u64(struct parse_ctx *c, struct json_object *v,
                             const char *where, const char *key, uint64_t *out)
{
    int64_t x;

    if (!json_object_is_type(v, json_type_int))
        return fail(c, WST_ERR_CONFIG, "%s: field \"%s\" must be an integer",
                    where, key);
    errno = 0;
    x = json_object_get_int64(v);
    if (x < 0)
        return fail(c, WST_ERR_CONFIG, "%s: field \"%s\" is negative (%lld)",
                    where, key, (long long)x);
    /* json-c clamps values above INT64_MAX to INT64_MAX */
    if (x == INT64_MAX || errno != 0)
        return fail(c, WST_ERR_CONFIG, "%s: field \"%s\" is too large", where,
                    key);
    *out = (uint64_t)x;
    return WST_OK;
}

/* Reads key 'key' of object 'obj' as an integer. A missing key is an error
 * when 'required', otherwise *out is left alone. */
static wst_status_t get_u64(struct parse_ctx *c, struct json_object *obj,
                            const char *where, const char *key, int required,
                            uint64_t *out)
{
    struct json_object *v;

    if (!json_object_object_get_ex(obj, key, &v)) {
        if (!required)
            return WST_OK;
        return fail(c, WST_ERR_CONFIG, "%s: missing field \"%s\"", where, key);
    }
    return read_u64(c, v, where, key, out);
}

/* Copies string field 'key' into 'dst' (WST_NAME_MAX bytes): non-empty,
 * no embedded NUL, fits with its terminator. */
static wst_status_t get_name(struct parse_ctx *c, struct json_object *obj,
                             const char *where, const char *key, char *dst)
{
    struct json_object *v;
    const char *s;
    int len;

    if (!json_object_object_get_ex(obj, key, &v))
        return fail(c, WST_ERR_CONFIG, "%s: missing field \"%s\"", where, key);
    if (!json_object_is_type(v, json_type_string))
        return fail(c, WST_ERR_CONFIG, "%s: field \"%s\" must be a string",
                    where, key);
    s = json_object_get_string(v);
    len = json_object_get_string_len(v);
    if (len <= 0 || (size_t)len >= WST_NAME_MAX || strlen(s) != (size_t)len)
        return fail(c, WST_ERR_CONFIG,
                    "%s: field \"%s\" must be a non-empty string shorter than "
                    "%d bytes without NUL",
                    where, key, WST_NAME_MAX);
    memcpy(dst, s, (size_t)len + 1);
    return WST_OK;
}

/* Gets array field 'key' with at most 'max' elements. */
static wst_status_t get_array(struct parse_ctx *c, struct json_object *obj,
                              const char *where, const char *key, size_t max,
                              struct json_object **arr_p, size_t *n_p)
{
    struct json_object *v;
    size_t n;

    if (!json_object_object_get_ex(obj, key, &v))
        return fail(c, WST_ERR_CONFIG, "%s: missing field \"%s\"", where, key);
    if (!json_object_is_type(v, json_type_array))
        return fail(c, WST_ERR_CONFIG, "%s: field \"%s\" must be an array",
                    where, key);
    n = json_object_array_length(v);
    if (n > max)
        return fail(c, WST_ERR_CONFIG,
                    "%s: field \"%s\" has %zu entries, at most %zu allowed",
                    where, key, n, max);
    *arr_p = v;
    *n_p = n;
    return WST_OK;
}

/* Reads an integer array field of exactly 'n' entries when n != 0, or of
 * 1..WST_MAX_DIMS entries (stored in *n_p) when n == 0. */
static wst_status_t get_dims(struct parse_ctx *c, struct json_object *obj,
                             const char *where, const char *key, uint32_t n,
                             uint64_t *dims, uint32_t *n_p)
{
    struct json_object *arr;
    char field[32];
    size_t len, i;
    wst_status_t status;

    status = get_array(c, obj, where, key, SIZE_MAX, &arr, &len);
    if (status != WST_OK)
        return status;
    if (n == 0 && (len < 1 || len > WST_MAX_DIMS))
        return fail(c, WST_ERR_CONFIG,
                    "%s: field \"%s\" has %zu dims, expected 1..%d", where, key,
                    len, WST_MAX_DIMS);
    if (n != 0 && len != n)
        return fail(c, WST_ERR_CONFIG,
                    "%s: field \"%s\" has %zu dims, shape has %u", where, key,
                    len, n);
    for (i = 0; i < len; i++) {
        snprintf(field, sizeof(field), "%s[%zu]", key, i);
        status = read_u64(c, json_object_array_get_idx(arr, i), where, field,
                          &dims[i]);
        if (status != WST_OK)
            return status;
    }
    if (n_p != NULL)
        *n_p = (uint32_t)len;
    return WST_OK;
}

/* ---- sorted indices ----------------------------------------------------- */

/* qsort_r (glibc) comparators over indices into the region array 'arg'. */
static int cmp_region_name(const void *a, const void *b, void *arg)
{
    const struct wst_layout_region *r = arg;

    return strcmp(r[*(const size_t *)a].name, r[*(const size_t *)b].name);
}

static int cmp_region_offset(const void *a, const void *b, void *arg)
{
    const struct wst_layout_region *r = arg;
    uint64_t x = r[*(const size_t *)a].offset;
    uint64_t y = r[*(const size_t *)b].offset;

    return x < y ? -1 : x > y;
}

/* Region index whose name is 'name' in the name-sorted index 'by_name', or
 * SIZE_MAX. */
static size_t find_region(const struct wst_layout_region *regions,
                          const size_t *by_name, size_t n, const char *name)
{
    size_t lo = 0, hi = n, mid;
    int r;

    while (lo < hi) {
        mid = lo + (hi - lo) / 2;
        r = strcmp(regions[by_name[mid]].name, name);
        if (r == 0)
            return by_name[mid];
        if (r < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return SIZE_MAX;
}

/* ---- regions ------------------------------------------------------------ */

static wst_status_t parse_region(struct parse_ctx *c, struct json_object *o,
                                 size_t i, int has_shm,
                                 struct wst_layout_region *r)
{
    char where[64];
    wst_status_t status;

    snprintf(where, sizeof(where), "regions[%zu]", i);
    if (!json_object_is_type(o, json_type_object))
        return fail(c, WST_ERR_CONFIG, "%s: must be an object", where);
    status = get_name(c, o, where, "name", r->name);
    if (status == WST_OK)
        status = get_u64(c, o, where, "offset", has_shm, &r->offset);
    if (status == WST_OK)
        status = get_u64(c, o, where, "bytes", 1, &r->bytes);
    if (status != WST_OK)
        return status;
    if (r->bytes == 0)
        return fail(c, WST_ERR_CONFIG, "%s (\"%s\"): field \"bytes\" is 0",
                    where, r->name);
    return WST_OK;
}

/* Duplicate names, placement inside the shm and overlaps. 'by_name' gets
 * the name-sorted index (n entries) for want lookups. */
static wst_status_t check_regions(struct parse_ctx *c,
                                  const struct wst_layout *l, size_t *by_name)
{
    const struct wst_layout_region *r = l->regions;
    size_t *by_off = NULL, i, n = l->n_regions;
    uint64_t end;
    wst_status_t status = WST_OK;

    for (i = 0; i < n; i++) {
        by_name[i] = i;
        if (__builtin_add_overflow(r[i].offset, r[i].bytes, &end))
            return fail(c, WST_ERR_CONFIG,
                        "regions[%zu] (\"%s\"): offset + bytes overflows", i,
                        r[i].name);
        if (l->shm[0] != '\0' && end > l->shm_bytes)
            return fail(c, WST_ERR_CONFIG,
                        "regions[%zu] (\"%s\"): offset + bytes = %llu is "
                        "beyond shm_bytes %llu",
                        i, r[i].name, (unsigned long long)end,
                        (unsigned long long)l->shm_bytes);
    }
    qsort_r(by_name, n, sizeof(*by_name), cmp_region_name, (void *)r);
    for (i = 1; i < n; i++) {
        if (strcmp(r[by_name[i - 1]].name, r[by_name[i]].name) == 0)
            return fail(
                c, WST_ERR_CONFIG, "regions[%zu]: duplicate region name \"%s\"",
                by_name[i] > by_name[i - 1] ? by_name[i] : by_name[i - 1],
                r[by_name[i]].name);
    }
    if (l->shm[0] == '\0' || n < 2)
        return WST_OK;
    by_off = malloc(n * sizeof(*by_off));
    if (by_off == NULL)
        return fail(c, WST_ERR_NO_MEMORY, "out of memory");
    for (i = 0; i < n; i++)
        by_off[i] = i;
    qsort_r(by_off, n, sizeof(*by_off), cmp_region_offset, (void *)r);
    for (i = 1; i < n; i++) {
        const struct wst_layout_region *a = &r[by_off[i - 1]];
        const struct wst_layout_region *b = &r[by_off[i]];

        if (a->offset + a->bytes > b->offset) {
            status = fail(c, WST_ERR_CONFIG,
                          "regions \"%s\" and \"%s\" overlap in the shm",
                          a->name, b->name);
            break;
        }
    }
    free(by_off);
    return status;
}

/* ---- wants -------------------------------------------------------------- */

static wst_status_t want_box_check(struct parse_ctx *c, const char *where,
                                   const struct wst_want *w)
{
    uint32_t d;

    for (d = 0; d < w->tensor.ndim; d++) {
        if (w->tensor.shape[d] == 0)
            return fail(c, WST_ERR_CONFIG, "%s (\"%s\"): shape[%u] is 0", where,
                        w->tensor.name, d);
        if (w->box.start[d] > w->box.stop[d] ||
            w->box.stop[d] > w->tensor.shape[d])
            return fail(c, WST_ERR_CONFIG,
                        "%s (\"%s\"): start[%u]=%llu stop[%u]=%llu outside "
                        "shape[%u]=%llu",
                        where, w->tensor.name, d,
                        (unsigned long long)w->box.start[d], d,
                        (unsigned long long)w->box.stop[d], d,
                        (unsigned long long)w->tensor.shape[d]);
    }
    return WST_OK;
}

/* The optional "expert": {"ep_rank": r, "ep_size": n} of a want: present
 * means a grouped expert tensor (dim 0 = global expert id). Runs after the
 * shape is known, so it can name the tensor and check its ndim. */
static wst_status_t parse_expert(struct parse_ctx *c, struct json_object *o,
                                 const char *where, struct wst_want *w)
{
    struct json_object *e;
    char ewhere[WST_NAME_MAX + 96];
    uint64_t rank = 0, size = 0;
    wst_status_t status;

    if (!json_object_object_get_ex(o, "expert", &e))
        return WST_OK;
    snprintf(ewhere, sizeof(ewhere), "%s (\"%s\") expert", where,
             w->tensor.name);
    if (!json_object_is_type(e, json_type_object))
        return fail(c, WST_ERR_CONFIG,
                    "%s: must be an object {\"ep_rank\": r, \"ep_size\": n}",
                    ewhere);
    status = get_u64(c, e, ewhere, "ep_rank", 1, &rank);
    if (status == WST_OK)
        status = get_u64(c, e, ewhere, "ep_size", 1, &size);
    if (status != WST_OK)
        return status;
    if (size < 1 || size > UINT32_MAX)
        return fail(c, WST_ERR_CONFIG, "%s: ep_size %llu must be in 1..%u",
                    ewhere, (unsigned long long)size, UINT32_MAX);
    if (rank >= size)
        return fail(c, WST_ERR_CONFIG,
                    "%s: ep_rank %llu must be < ep_size %llu", ewhere,
                    (unsigned long long)rank, (unsigned long long)size);
    if (w->tensor.ndim < 2)
        return fail(c, WST_ERR_CONFIG,
                    "%s: a grouped expert tensor needs >= 2 dims "
                    "([experts, ...]), shape has %u",
                    ewhere, w->tensor.ndim);
    w->expert.grouped = 1;
    w->expert.ep_rank = (uint32_t)rank;
    w->expert.ep_size = (uint32_t)size;
    return WST_OK;
}

static wst_status_t parse_want(struct parse_ctx *c, struct json_object *o,
                               size_t i, const struct wst_layout *l,
                               const size_t *by_name, struct wst_want *w)
{
    char where[64], dtype[WST_NAME_MAX], region[WST_NAME_MAX];
    size_t idx;
    wst_status_t status;

    snprintf(where, sizeof(where), "wants[%zu]", i);
    if (!json_object_is_type(o, json_type_object))
        return fail(c, WST_ERR_CONFIG, "%s: must be an object", where);
    status = get_name(c, o, where, "tensor", w->tensor.name);
    if (status == WST_OK)
        status = get_name(c, o, where, "dtype", dtype);
    if (status == WST_OK)
        status =
            get_dims(c, o, where, "shape", 0, w->tensor.shape, &w->tensor.ndim);
    if (status == WST_OK)
        status =
            get_dims(c, o, where, "start", w->tensor.ndim, w->box.start, NULL);
    if (status == WST_OK)
        status =
            get_dims(c, o, where, "stop", w->tensor.ndim, w->box.stop, NULL);
    if (status == WST_OK)
        status = get_name(c, o, where, "region", region);
    if (status == WST_OK)
        status = get_u64(c, o, where, "offset", 1, &w->offset);
    if (status == WST_OK)
        status = get_u64(c, o, where, "row_pitch", 0, &w->row_pitch);
    if (status != WST_OK)
        return status;
    w->box.ndim = w->tensor.ndim;
    w->tensor.dtype = wst_dtype_parse(dtype);
    if (w->tensor.dtype == WST_DTYPE_INVALID)
        return fail(c, WST_ERR_CONFIG, "%s (\"%s\"): unknown dtype \"%s\"",
                    where, w->tensor.name, dtype);
    idx = find_region(l->regions, by_name, l->n_regions, region);
    if (idx == SIZE_MAX)
        return fail(c, WST_ERR_CONFIG, "%s (\"%s\"): unknown region \"%s\"",
                    where, w->tensor.name, region);
    w->region = (uint32_t)idx;
    status = want_box_check(c, where, w);
    if (status == WST_OK)
        status = parse_expert(c, o, where, w);
    return status;
}

/* wst_want_check against the regions, with a message that says why. */
static wst_status_t check_want(struct parse_ctx *c, size_t i,
                               const struct wst_want *w,
                               const struct wst_region_desc *descs,
                               size_t n_regions)
{
    size_t esize = wst_dtype_size(w->tensor.dtype);
    uint32_t last = w->tensor.ndim - 1;
    uint64_t row = (w->box.stop[last] - w->box.start[last]) * esize;

    if (wst_want_check(w, descs, n_regions) == WST_OK)
        return WST_OK;
    if (wst_tensor_desc_check(&w->tensor, NULL, NULL) != WST_OK)
        return fail(c, WST_ERR_CONFIG,
                    "wants[%zu] (\"%s\"): tensor shape too large", i,
                    w->tensor.name);
    if (w->row_pitch != 0 && (w->row_pitch % esize != 0 || w->row_pitch < row))
        return fail(c, WST_ERR_CONFIG,
                    "wants[%zu] (\"%s\"): row_pitch %llu must be a multiple of "
                    "%zu and >= row bytes %llu",
                    i, w->tensor.name, (unsigned long long)w->row_pitch, esize,
                    (unsigned long long)row);
    return fail(c, WST_ERR_CONFIG,
                "wants[%zu] (\"%s\"): offset %llu + span %llu exceeds region "
                "\"%s\" bytes %llu",
                i, w->tensor.name, (unsigned long long)w->offset,
                (unsigned long long)wst_want_span(w), descs[w->region].name,
                (unsigned long long)descs[w->region].length);
}

static wst_status_t parse_wants(struct parse_ctx *c, struct json_object *arr,
                                struct wst_layout *l, const size_t *by_name)
{
    struct wst_region_desc *descs = NULL;
    size_t i;
    wst_status_t status = WST_OK;

    descs = calloc(l->n_regions ? l->n_regions : 1, sizeof(*descs));
    if (descs == NULL)
        return fail(c, WST_ERR_NO_MEMORY, "out of memory");
    for (i = 0; i < l->n_regions; i++) {
        memcpy(descs[i].name, l->regions[i].name, WST_NAME_MAX);
        descs[i].length = l->regions[i].bytes;
        descs[i].mem = WST_MEM_HOST;
    }
    for (i = 0; i < l->n_wants && status == WST_OK; i++) {
        status = parse_want(c, json_object_array_get_idx(arr, i), i, l, by_name,
                            &l->wants[i]);
        if (status == WST_OK)
            status = check_want(c, i, &l->wants[i], descs, l->n_regions);
    }
    free(descs);
    return status;
}

/* ---- top level ---------------------------------------------------------- */

static wst_status_t parse_header(struct parse_ctx *c, struct json_object *root,
                                 struct wst_layout *l)
{
    struct json_object *v;
    uint64_t x = 0;
    wst_status_t status;

    if (!json_object_is_type(root, json_type_object))
        return fail(c, WST_ERR_CONFIG, "layout: top level must be an object");
    status = get_u64(c, root, "layout", "format", 1, &x);
    if (status != WST_OK)
        return status;
    if (x != WST_LAYOUT_FORMAT)
        return fail(c, WST_ERR_CONFIG,
                    "layout: unknown format %llu (this build reads %d)",
                    (unsigned long long)x, WST_LAYOUT_FORMAT);
    status = get_u64(c, root, "layout", "rank", 1, &x);
    if (status != WST_OK)
        return status;
    if (x > UINT32_MAX)
        return fail(c, WST_ERR_CONFIG, "layout: field \"rank\" is too large");
    l->rank = (uint32_t)x;
    if (!json_object_object_get_ex(root, "shm", &v)) {
        if (json_object_object_get_ex(root, "shm_bytes", &v))
            return fail(c, WST_ERR_CONFIG,
                        "layout: field \"shm_bytes\" without \"shm\"");
        return WST_OK;
    }
    status = get_name(c, root, "layout", "shm", l->shm);
    if (status == WST_OK)
        status = get_u64(c, root, "layout", "shm_bytes", 1, &l->shm_bytes);
    return status;
}

static wst_status_t parse_root(struct parse_ctx *c, struct json_object *root,
                               struct wst_layout *l)
{
    struct json_object *regions, *wants;
    size_t *by_name = NULL, i;
    wst_status_t status;

    status = parse_header(c, root, l);
    if (status == WST_OK)
        status = get_array(c, root, "layout", "regions", WST_LAYOUT_MAX,
                           &regions, &l->n_regions);
    if (status == WST_OK)
        status = get_array(c, root, "layout", "wants", WST_LAYOUT_MAX, &wants,
                           &l->n_wants);
    if (status != WST_OK)
        return status;
    l->regions = calloc(l->n_regions ? l->n_regions : 1, sizeof(*l->regions));
    l->wants = calloc(l->n_wants ? l->n_wants : 1, sizeof(*l->wants));
    by_name = malloc((l->n_regions ? l->n_regions : 1) * sizeof(*by_name));
    if (l->regions == NULL || l->wants == NULL || by_name == NULL) {
        status = fail(c, WST_ERR_NO_MEMORY, "out of memory");
        goto out_free_index;
    }
    for (i = 0; i < l->n_regions && status == WST_OK; i++)
        status = parse_region(c, json_object_array_get_idx(regions, i), i,
                              l->shm[0] != '\0', &l->regions[i]);
    if (status == WST_OK)
        status = check_regions(c, l, by_name);
    if (status == WST_OK)
        status = parse_wants(c, wants, l, by_name);
out_free_index:
    free(by_name);
    return status;
}

wst_status_t wst_layout_parse(const char *json_text, size_t len,
                              struct wst_layout *out, char *err, size_t errlen)
{
    struct parse_ctx c = {err, errlen};
    struct json_tokener *tok = NULL;
    struct json_object *root = NULL;
    struct wst_layout l;
    wst_status_t status;

    if (json_text == NULL || out == NULL)
        return fail(&c, WST_ERR_INVALID, "layout: NULL argument");
    if (len > INT_MAX)
        return fail(&c, WST_ERR_CONFIG, "layout: text too large (%zu bytes)",
                    len);
    tok = json_tokener_new();
    if (tok == NULL)
        return fail(&c, WST_ERR_NO_MEMORY, "out of memory");
    root = json_tokener_parse_ex(tok, json_text, (int)len);
    if (json_tokener_get_error(tok) != json_tokener_success ||
        (size_t)json_tokener_get_parse_end(tok) != len) {
        enum json_tokener_error e = json_tokener_get_error(tok);

        /* trailing whitespace after a complete document is fine */
        size_t end = json_tokener_get_parse_end(tok);

        while (e == json_tokener_success && end < len &&
               (json_text[end] == ' ' || json_text[end] == '\n' ||
                json_text[end] == '\r' || json_text[end] == '\t'))
            end++;
        if (e != json_tokener_success || end != len) {
            status = fail(
                &c, WST_ERR_CONFIG, "layout: invalid JSON at byte %zu: %s",
                json_tokener_get_parse_end(tok),
                e == json_tokener_success ? "trailing data"
                                          : (e == json_tokener_continue
                                                 ? "unexpected end of text"
                                                 : json_tokener_error_desc(e)));
            goto out_free_tok;
        }
    }
    memset(&l, 0, sizeof(l));
    status = parse_root(&c, root, &l);
    if (status == WST_OK)
        *out = l;
    else
        wst_layout_release(&l);
out_free_tok:
    json_object_put(root);
    json_tokener_free(tok);
    return status;
}

wst_status_t wst_layout_load(const char *path, struct wst_layout *out,
                             char *err, size_t errlen)
{
    struct parse_ctx c = {err, errlen};
    char *text = NULL, *p;
    size_t len = 0, cap = 0, n;
    FILE *f;
    wst_status_t status;

    if (path == NULL || out == NULL)
        return fail(&c, WST_ERR_INVALID, "layout: NULL argument");
    f = fopen(path, "rb");
    if (f == NULL)
        return fail(&c, WST_ERR_IO, "%s: cannot open: %s", path,
                    strerror(errno));
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 65536;
            p = cap > INT_MAX ? NULL : realloc(text, cap);
            if (p == NULL) {
                status =
                    fail(&c, WST_ERR_NO_MEMORY, "%s: file too large", path);
                goto out_close;
            }
            text = p;
        }
        n = fread(text + len, 1, cap - len, f);
        len += n;
        if (n == 0)
            break;
    }
    if (ferror(f)) {
        status = fail(&c, WST_ERR_IO, "%s: read error", path);
        goto out_close;
    }
    status = wst_layout_parse(text, len, out, err, errlen);
    if (status != WST_OK && err != NULL && errlen > 0) {
        /* prefix the message with the file name */
        char *msg = strdup(err);

        if (msg != NULL) {
            snprintf(err, errlen, "%s: %s", path, msg);
            free(msg);
        }
    }
out_close:
    free(text);
    fclose(f);
    return status;
}

/* ---- save --------------------------------------------------------------- */

static struct json_object *new_dims(const uint64_t *dims, uint32_t n)
{
    struct json_object *a = json_object_new_array_ext((int)n);
    uint32_t d;

    for (d = 0; a != NULL && d < n; d++) {
        if (json_object_array_add(a, json_object_new_int64((int64_t)dims[d]))) {
            json_object_put(a);
            return NULL;
        }
    }
    return a;
}

/* Adds an integer array under 'key'; nonzero on failure. */
static int add_dims(struct json_object *o, const char *key,
                    const uint64_t *dims, uint32_t n)
{
    struct json_object *a = new_dims(dims, n);

    return a == NULL || json_object_object_add(o, key, a);
}

/* Adds integer 'v' under 'key'; nonzero on failure. */
static int add_u64(struct json_object *o, const char *key, uint64_t v)
{
    return json_object_object_add(o, key, json_object_new_int64((int64_t)v));
}

static int add_str(struct json_object *o, const char *key, const char *s)
{
    return json_object_object_add(o, key, json_object_new_string(s));
}

/* Adds "expert": {"ep_rank": r, "ep_size": n}; nonzero on failure. */
static int add_expert(struct json_object *o, const struct wst_want_expert *e)
{
    struct json_object *x = json_object_new_object();

    if (x == NULL)
        return 1;
    if (add_u64(x, "ep_rank", e->ep_rank) ||
        add_u64(x, "ep_size", e->ep_size)) {
        json_object_put(x);
        return 1;
    }
    return json_object_object_add(o, "expert", x);
}

static wst_status_t save_check(struct parse_ctx *c, const struct wst_layout *l)
{
    size_t i;
    uint32_t d;

    if (l->shm_bytes >= INT64_MAX)
        return fail(c, WST_ERR_INVALID, "layout: shm_bytes too large");
    for (i = 0; i < l->n_regions; i++) {
        if (l->regions[i].offset >= INT64_MAX ||
            l->regions[i].bytes >= INT64_MAX ||
            !memchr(l->regions[i].name, '\0', WST_NAME_MAX))
            return fail(c, WST_ERR_INVALID, "regions[%zu]: bad entry", i);
    }
    for (i = 0; i < l->n_wants; i++) {
        const struct wst_want *w = &l->wants[i];
        int bad = w->region >= l->n_regions || w->offset >= INT64_MAX ||
                  w->row_pitch >= INT64_MAX || w->tensor.ndim < 1 ||
                  w->tensor.ndim > WST_MAX_DIMS ||
                  w->box.ndim != w->tensor.ndim ||
                  wst_dtype_size(w->tensor.dtype) == 0 ||
                  !memchr(w->tensor.name, '\0', WST_NAME_MAX);

        for (d = 0; !bad && d < w->tensor.ndim; d++)
            bad =
                w->tensor.shape[d] >= INT64_MAX || w->box.stop[d] >= INT64_MAX;
        if (bad)
            return fail(c, WST_ERR_INVALID, "wants[%zu]: bad entry", i);
        if (wst_want_expert_check(w) != WST_OK)
            return fail(c, WST_ERR_INVALID,
                        "wants[%zu]: bad expert descriptor (grouped %d, "
                        "ep_rank %u, ep_size %u)",
                        i, w->expert.grouped, w->expert.ep_rank,
                        w->expert.ep_size);
    }
    return WST_OK;
}

static struct json_object *build_json(const struct wst_layout *l)
{
    struct json_object *root = json_object_new_object(), *arr, *o;
    int bad = root == NULL;
    size_t i;

    bad = bad || add_u64(root, "format", WST_LAYOUT_FORMAT) ||
          add_u64(root, "rank", l->rank);
    if (!bad && l->shm[0] != '\0')
        bad = add_str(root, "shm", l->shm) ||
              add_u64(root, "shm_bytes", l->shm_bytes);
    arr = json_object_new_array_ext((int)l->n_regions);
    bad = bad || json_object_object_add(root, "regions", arr);
    for (i = 0; !bad && i < l->n_regions; i++) {
        o = json_object_new_object();
        bad = json_object_array_add(arr, o) ||
              add_str(o, "name", l->regions[i].name) ||
              add_u64(o, "offset", l->regions[i].offset) ||
              add_u64(o, "bytes", l->regions[i].bytes);
    }
    arr = bad ? NULL : json_object_new_array_ext((int)l->n_wants);
    bad = bad || json_object_object_add(root, "wants", arr);
    for (i = 0; !bad && i < l->n_wants; i++) {
        const struct wst_want *w = &l->wants[i];

        o = json_object_new_object();
        bad = json_object_array_add(arr, o) ||
              add_str(o, "tensor", w->tensor.name) ||
              add_str(o, "dtype", wst_dtype_name(w->tensor.dtype)) ||
              add_dims(o, "shape", w->tensor.shape, w->tensor.ndim) ||
              add_dims(o, "start", w->box.start, w->tensor.ndim) ||
              add_dims(o, "stop", w->box.stop, w->tensor.ndim) ||
              add_str(o, "region", l->regions[w->region].name) ||
              add_u64(o, "offset", w->offset) ||
              add_u64(o, "row_pitch", w->row_pitch);
        if (!bad && w->expert.grouped)
            bad = add_expert(o, &w->expert);
    }
    if (bad) {
        json_object_put(root);
        return NULL;
    }
    return root;
}

static wst_status_t write_file(struct parse_ctx *c, const char *path,
                               const char *text)
{
    char *tmp = NULL;
    size_t len = strlen(text), plen = strlen(path) + 32;
    int fd;
    wst_status_t status = WST_OK;

    tmp = malloc(plen);
    if (tmp == NULL)
        return fail(c, WST_ERR_NO_MEMORY, "out of memory");
    snprintf(tmp, plen, "%s.tmp.%ld", path, (long)getpid());
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        status =
            fail(c, WST_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
        goto out_free_tmp;
    }
    while (len > 0) {
        ssize_t n = write(fd, text, len);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            status = fail(c, WST_ERR_IO, "%s: write: %s", tmp, strerror(errno));
            break;
        }
        text += n;
        len -= (size_t)n;
    }
    if (status == WST_OK && fsync(fd) != 0)
        status = fail(c, WST_ERR_IO, "%s: fsync: %s", tmp, strerror(errno));
    if (close(fd) != 0 && status == WST_OK)
        status = fail(c, WST_ERR_IO, "%s: close: %s", tmp, strerror(errno));
    if (status == WST_OK && rename(tmp, path) != 0)
        status = fail(c, WST_ERR_IO, "%s: rename to %s: %s", tmp, path,
                      strerror(errno));
    if (status != WST_OK)
        unlink(tmp);
out_free_tmp:
    free(tmp);
    return status;
}

wst_status_t wst_layout_save(const char *path, const struct wst_layout *l,
                             char *err, size_t errlen)
{
    struct parse_ctx c = {err, errlen};
    struct json_object *root;
    const char *text;
    wst_status_t status;

    if (path == NULL || l == NULL || (l->n_regions > 0 && l->regions == NULL) ||
        (l->n_wants > 0 && l->wants == NULL))
        return fail(&c, WST_ERR_INVALID, "layout: NULL argument");
    status = save_check(&c, l);
    if (status != WST_OK)
        return status;
    root = build_json(l);
    if (root == NULL)
        return fail(&c, WST_ERR_NO_MEMORY, "out of memory");
    text = json_object_to_json_string_ext(
        root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE);
    if (text == NULL)
        status = fail(&c, WST_ERR_NO_MEMORY, "out of memory");
    else
        status = write_file(&c, path, text);
    json_object_put(root);
    return status;
}

void wst_layout_release(struct wst_layout *l)
{
    if (l == NULL)
        return;
    free(l->regions);
    free(l->wants);
    memset(l, 0, sizeof(*l));
}
