/* layout_file.c - load, validate and save the agent's layout file (json-c).
 *
 * Parsing fills a private struct wst_layout and moves it into the caller's
 * only once everything has been checked, so a refused file changes nothing.
 * Checks that would be quadratic (duplicate names and layers, name lookup,
 * overlap) run on sorted index arrays: files hold up to 2^20 entries. The
 * rules of an "experts" entry are shared with save, which must refuse what
 * the parser would. A "cuda_ipc" handle is opaque bytes here (hex in the
 * file); importing it is the agent's business, so this file needs no CUDA.
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

/* Copies string field 'key' into 'dst' ('size' bytes): non-empty, no
 * embedded NUL, fits with its terminator. */
static wst_status_t get_string(struct parse_ctx *c, struct json_object *obj,
                               const char *where, const char *key, char *dst,
                               size_t size)
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
    if (len <= 0 || (size_t)len >= size || strlen(s) != (size_t)len)
        return fail(c, WST_ERR_CONFIG,
                    "%s: field \"%s\" must be a non-empty string shorter than "
                    "%zu bytes without NUL",
                    where, key, size);
    memcpy(dst, s, (size_t)len + 1);
    return WST_OK;
}

/* get_string into a WST_NAME_MAX buffer: tensor, region and dtype names. */
static wst_status_t get_name(struct parse_ctx *c, struct json_object *obj,
                             const char *where, const char *key, char *dst)
{
    return get_string(c, obj, where, key, dst, WST_NAME_MAX);
}

/* get_u64 for a 32-bit field: the value must also fit in uint32_t. */
static wst_status_t get_u32(struct parse_ctx *c, struct json_object *obj,
                            const char *where, const char *key, int required,
                            uint32_t *out)
{
    uint64_t x = *out;
    wst_status_t status;

    status = get_u64(c, obj, where, key, required, &x);
    if (status != WST_OK)
        return status;
    if (x > UINT32_MAX)
        return fail(c, WST_ERR_CONFIG, "%s: field \"%s\" is too large", where,
                    key);
    *out = (uint32_t)x;
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
                                 size_t i, int placed,
                                 struct wst_layout_region *r)
{
    char where[64];
    wst_status_t status;

    snprintf(where, sizeof(where), "regions[%zu]", i);
    if (!json_object_is_type(o, json_type_object))
        return fail(c, WST_ERR_CONFIG, "%s: must be an object", where);
    status = get_name(c, o, where, "name", r->name);
    if (status == WST_OK)
        status = get_u64(c, o, where, "offset", placed, &r->offset);
    if (status == WST_OK)
        status = get_u64(c, o, where, "bytes", 1, &r->bytes);
    if (status != WST_OK)
        return status;
    if (r->bytes == 0)
        return fail(c, WST_ERR_CONFIG, "%s (\"%s\"): field \"bytes\" is 0",
                    where, r->name);
    return WST_OK;
}

/* The allocation the regions live in ("shm" or "cuda_ipc"): its size and
 * name for messages; 0 when the agent allocates each region itself. */
static int placed_in(const struct wst_layout *l, uint64_t *bytes_p,
                     const char **key_p, const char **what_p)
{
    if (l->shm[0] != '\0') {
        *bytes_p = l->shm_bytes;
        *key_p = "shm_bytes";
        *what_p = "the shm";
        return 1;
    }
    if (l->has_cuda_ipc) {
        *bytes_p = l->cuda_bytes;
        *key_p = "cuda_bytes";
        *what_p = "the cuda_ipc allocation";
        return 1;
    }
    return 0;
}

/* Regions sorted by offset may not overlap inside the allocation. */
static wst_status_t check_overlap(struct parse_ctx *c,
                                  const struct wst_layout *l, const char *what)
{
    const struct wst_layout_region *r = l->regions;
    size_t *by_off, i, n = l->n_regions;
    wst_status_t status = WST_OK;

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
                          "regions \"%s\" and \"%s\" overlap in %s", a->name,
                          b->name, what);
            break;
        }
    }
    free(by_off);
    return status;
}

/* Duplicate names, placement inside the shm or cuda_ipc allocation and
 * overlaps. 'by_name' gets the name-sorted index (n entries) for want
 * lookups. */
static wst_status_t check_regions(struct parse_ctx *c,
                                  const struct wst_layout *l, size_t *by_name)
{
    const struct wst_layout_region *r = l->regions;
    const char *key = NULL, *what = NULL;
    size_t i, n = l->n_regions;
    uint64_t end, limit = 0;
    int placed = placed_in(l, &limit, &key, &what);

    for (i = 0; i < n; i++) {
        by_name[i] = i;
        if (__builtin_add_overflow(r[i].offset, r[i].bytes, &end))
            return fail(c, WST_ERR_CONFIG,
                        "regions[%zu] (\"%s\"): offset + bytes overflows", i,
                        r[i].name);
        if (placed && end > limit)
            return fail(c, WST_ERR_CONFIG,
                        "regions[%zu] (\"%s\"): offset + bytes = %llu is "
                        "beyond %s %llu",
                        i, r[i].name, (unsigned long long)end, key,
                        (unsigned long long)limit);
    }
    qsort_r(by_name, n, sizeof(*by_name), cmp_region_name, (void *)r);
    for (i = 1; i < n; i++) {
        if (strcmp(r[by_name[i - 1]].name, r[by_name[i]].name) == 0)
            return fail(
                c, WST_ERR_CONFIG, "regions[%zu]: duplicate region name \"%s\"",
                by_name[i] > by_name[i - 1] ? by_name[i] : by_name[i - 1],
                r[by_name[i]].name);
    }
    if (!placed || n < 2)
        return WST_OK;
    return check_overlap(c, l, what);
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

/* ---- experts ------------------------------------------------------------ */

/* The semantic rules of an "experts" entry live in check_* helpers that take
 * the status to fail with: the parser calls them with WST_ERR_CONFIG and
 * save with WST_ERR_INVALID, so save refuses exactly what load would. */

/* "expert_ids" must hold one id per local expert: experts/ep_size of them.
 * Needs ep_size != 0 (check_experts runs first). */
static wst_status_t check_ids_count(struct parse_ctx *c, wst_status_t bad,
                                    const char *where,
                                    const struct wst_layout_experts *e,
                                    size_t n)
{
    if (e->n_experts % e->ep_size != 0)
        return fail(c, bad,
                    "%s: \"expert_ids\" needs ep_size %u to divide experts %u",
                    where, e->ep_size, e->n_experts);
    if (n != e->n_experts / e->ep_size)
        return fail(c, bad,
                    "%s: field \"expert_ids\" has %zu entries, expected "
                    "experts/ep_size = %u",
                    where, n, e->n_experts / e->ep_size);
    return WST_OK;
}

/* 'id' is 64-bit so the parser can name a value that fits no uint32_t. */
static wst_status_t check_id(struct parse_ctx *c, wst_status_t bad,
                             const char *where,
                             const struct wst_layout_experts *e, uint32_t i,
                             uint64_t id)
{
    if (id >= e->n_experts)
        return fail(c, bad, "%s: expert_ids[%u] = %llu is not < experts %u",
                    where, i, (unsigned long long)id, e->n_experts);
    return WST_OK;
}

/* A live buffer must start inside its region; whether the whole tensor fits
 * depends on the loader's layout and is the receiver's check. */
static wst_status_t check_part(struct parse_ctx *c, wst_status_t bad,
                               const char *where, const char *key,
                               uint32_t region, uint64_t offset,
                               const struct wst_layout_region *regions,
                               size_t n_regions)
{
    if (region >= n_regions)
        return fail(c, bad, "%s %s: region index %u out of range (%zu regions)",
                    where, key, region, n_regions);
    if (offset > regions[region].bytes)
        return fail(c, bad,
                    "%s %s: offset %llu is past the end of region \"%s\" "
                    "(%llu bytes)",
                    where, key, (unsigned long long)offset,
                    regions[region].name,
                    (unsigned long long)regions[region].bytes);
    return WST_OK;
}

/* Everything about one entry except duplicate layers (check_layers). The
 * loader, dtype and id-pointer checks only fire on save: the parser cannot
 * produce those values. */
static wst_status_t check_experts(struct parse_ctx *c, wst_status_t bad,
                                  const char *where,
                                  const struct wst_layout_region *regions,
                                  size_t n_regions,
                                  const struct wst_layout_experts *e)
{
    const char *zero = e->n_experts == 0 ? "experts"
                       : e->ep_size == 0 ? "ep_size"
                       : e->hidden == 0  ? "hidden"
                       : e->inter == 0   ? "inter"
                                         : NULL;
    wst_status_t status;
    uint32_t i;

    if (e->loader[0] == '\0' || !memchr(e->loader, '\0', sizeof(e->loader)))
        return fail(c, bad, "%s: loader name must be 1..%d bytes", where,
                    WST_LAYOUT_LOADER_MAX - 1);
    if (wst_dtype_size(e->dtype) == 0)
        return fail(c, bad, "%s: unknown dtype %d", where, (int)e->dtype);
    if (zero != NULL)
        return fail(c, bad, "%s: field \"%s\" is 0", where, zero);
    if (e->ep_rank >= e->ep_size)
        return fail(c, bad, "%s: ep_rank %u must be < ep_size %u", where,
                    e->ep_rank, e->ep_size);
    /* size 0 stands for "no inter_tp", so a rank without it is unsavable */
    if (e->inter_tp_rank >= e->inter_tp_size &&
        (e->inter_tp_size != 0 || e->inter_tp_rank != 0))
        return fail(c, bad, "%s: inter_tp rank %u must be < size %u", where,
                    e->inter_tp_rank, e->inter_tp_size);
    status = check_part(c, bad, where, "w13", e->w13_region, e->w13_offset,
                        regions, n_regions);
    if (status == WST_OK)
        status = check_part(c, bad, where, "w2", e->w2_region, e->w2_offset,
                            regions, n_regions);
    if (status != WST_OK)
        return status;
    if ((e->expert_ids == NULL) != (e->n_expert_ids == 0))
        return fail(c, bad, "%s: expert_ids is %s but n_expert_ids is %u",
                    where, e->expert_ids == NULL ? "NULL" : "set",
                    e->n_expert_ids);
    if (e->expert_ids == NULL)
        return WST_OK;
    status = check_ids_count(c, bad, where, e, e->n_expert_ids);
    for (i = 0; status == WST_OK && i < e->n_expert_ids; i++)
        status = check_id(c, bad, where, e, i, e->expert_ids[i]);
    return status;
}

/* qsort_r comparator over indices into the experts array 'arg': by layer,
 * then by index, so the first of a run of equal layers is the earliest. */
static int cmp_experts_layer(const void *a, const void *b, void *arg)
{
    const struct wst_layout_experts *x = arg;
    size_t i = *(const size_t *)a, j = *(const size_t *)b;

    if (x[i].layer != x[j].layer)
        return x[i].layer < x[j].layer ? -1 : 1;
    return i < j ? -1 : i > j;
}

/* At most one entry per layer, checked on a sorted index (2^20 entries). */
static wst_status_t check_layers(struct parse_ctx *c, wst_status_t bad,
                                 const struct wst_layout_experts *x, size_t n)
{
    size_t *idx, i;
    wst_status_t status = WST_OK;

    if (n < 2)
        return WST_OK;
    idx = malloc(n * sizeof(*idx));
    if (idx == NULL)
        return fail(c, WST_ERR_NO_MEMORY, "out of memory");
    for (i = 0; i < n; i++)
        idx[i] = i;
    qsort_r(idx, n, sizeof(*idx), cmp_experts_layer, (void *)x);
    for (i = 1; i < n; i++) {
        if (x[idx[i - 1]].layer == x[idx[i]].layer) {
            status = fail(c, bad,
                          "experts[%zu]: duplicate layer %u (first in "
                          "experts[%zu])",
                          idx[i], x[idx[i]].layer, idx[i - 1]);
            break;
        }
    }
    free(idx);
    return status;
}

/* "w13" / "w2": {"region": name, "offset": bytes}, the region resolved to
 * its index. */
static wst_status_t parse_part(struct parse_ctx *c, struct json_object *o,
                               const char *where, const char *key,
                               const struct wst_layout *l,
                               const size_t *by_name, uint32_t *region_p,
                               uint64_t *offset_p)
{
    struct json_object *p;
    char pwhere[96], name[WST_NAME_MAX];
    size_t idx;
    wst_status_t status;

    if (!json_object_object_get_ex(o, key, &p))
        return fail(c, WST_ERR_CONFIG, "%s: missing field \"%s\"", where, key);
    if (!json_object_is_type(p, json_type_object))
        return fail(c, WST_ERR_CONFIG,
                    "%s: field \"%s\" must be an object {\"region\": name, "
                    "\"offset\": bytes}",
                    where, key);
    snprintf(pwhere, sizeof(pwhere), "%s %s", where, key);
    status = get_name(c, p, pwhere, "region", name);
    if (status == WST_OK)
        status = get_u64(c, p, pwhere, "offset", 1, offset_p);
    if (status != WST_OK)
        return status;
    idx = find_region(l->regions, by_name, l->n_regions, name);
    if (idx == SIZE_MAX)
        return fail(c, WST_ERR_CONFIG, "%s: unknown region \"%s\"", pwhere,
                    name);
    *region_p = (uint32_t)idx;
    return WST_OK;
}

/* The optional "inter_tp": {"rank": r, "size": n}. Size 0 is refused here
 * because in the struct it means "absent"; rank < size is check_experts'. */
static wst_status_t parse_inter_tp(struct parse_ctx *c, struct json_object *o,
                                   const char *where,
                                   struct wst_layout_experts *e)
{
    struct json_object *t;
    char twhere[96];
    wst_status_t status;

    if (!json_object_object_get_ex(o, "inter_tp", &t))
        return WST_OK;
    snprintf(twhere, sizeof(twhere), "%s inter_tp", where);
    if (!json_object_is_type(t, json_type_object))
        return fail(c, WST_ERR_CONFIG,
                    "%s: must be an object {\"rank\": r, \"size\": n}", twhere);
    status = get_u32(c, t, twhere, "rank", 1, &e->inter_tp_rank);
    if (status == WST_OK)
        status = get_u32(c, t, twhere, "size", 1, &e->inter_tp_size);
    if (status == WST_OK && e->inter_tp_size == 0)
        status = fail(c, WST_ERR_CONFIG, "%s: size must be >= 1", twhere);
    return status;
}

/* The optional "expert_ids". Its length is checked before allocating, and
 * the array goes into 'e' at once so that wst_layout_release frees it
 * whatever fails later. */
static wst_status_t parse_expert_ids(struct parse_ctx *c, struct json_object *o,
                                     const char *where,
                                     struct wst_layout_experts *e)
{
    struct json_object *arr, *v;
    char field[32];
    size_t n;
    uint32_t i;
    uint64_t x = 0;
    wst_status_t status;

    if (!json_object_object_get_ex(o, "expert_ids", &v))
        return WST_OK;
    status = get_array(c, o, where, "expert_ids", UINT32_MAX, &arr, &n);
    if (status == WST_OK)
        status = check_ids_count(c, WST_ERR_CONFIG, where, e, n);
    if (status != WST_OK)
        return status;
    e->expert_ids = malloc(n * sizeof(*e->expert_ids));
    if (e->expert_ids == NULL)
        return fail(c, WST_ERR_NO_MEMORY, "out of memory");
    e->n_expert_ids = (uint32_t)n;
    for (i = 0; status == WST_OK && i < n; i++) {
        snprintf(field, sizeof(field), "expert_ids[%u]", i);
        status =
            read_u64(c, json_object_array_get_idx(arr, i), where, field, &x);
        if (status == WST_OK)
            status = check_id(c, WST_ERR_CONFIG, where, e, i, x);
        if (status == WST_OK)
            e->expert_ids[i] = (uint32_t)x; /* < n_experts, so it fits */
    }
    return status;
}

static wst_status_t parse_experts_entry(struct parse_ctx *c,
                                        struct json_object *o, size_t i,
                                        const struct wst_layout *l,
                                        const size_t *by_name,
                                        struct wst_layout_experts *e)
{
    char where[64], dtype[WST_NAME_MAX];
    wst_status_t status;

    snprintf(where, sizeof(where), "experts[%zu]", i);
    if (!json_object_is_type(o, json_type_object))
        return fail(c, WST_ERR_CONFIG, "%s: must be an object", where);
    status = get_u32(c, o, where, "layer", 1, &e->layer);
    if (status != WST_OK)
        return status;
    /* from here on, messages name the layer too */
    snprintf(where, sizeof(where), "experts[%zu] (layer %u)", i, e->layer);
    status = get_string(c, o, where, "loader", e->loader, sizeof(e->loader));
    if (status == WST_OK)
        status = get_name(c, o, where, "dtype", dtype);
    if (status == WST_OK)
        status = get_u32(c, o, where, "experts", 1, &e->n_experts);
    if (status == WST_OK)
        status = get_u32(c, o, where, "ep_rank", 1, &e->ep_rank);
    if (status == WST_OK)
        status = get_u32(c, o, where, "ep_size", 1, &e->ep_size);
    if (status == WST_OK)
        status = get_u32(c, o, where, "hidden", 1, &e->hidden);
    if (status == WST_OK)
        status = get_u32(c, o, where, "inter", 1, &e->inter);
    if (status == WST_OK)
        status = parse_part(c, o, where, "w13", l, by_name, &e->w13_region,
                            &e->w13_offset);
    if (status == WST_OK)
        status = parse_part(c, o, where, "w2", l, by_name, &e->w2_region,
                            &e->w2_offset);
    if (status == WST_OK)
        status = parse_inter_tp(c, o, where, e);
    if (status != WST_OK)
        return status;
    e->dtype = wst_dtype_parse(dtype);
    if (e->dtype == WST_DTYPE_INVALID)
        return fail(c, WST_ERR_CONFIG, "%s: unknown dtype \"%s\"", where,
                    dtype);
    status =
        check_experts(c, WST_ERR_CONFIG, where, l->regions, l->n_regions, e);
    if (status == WST_OK)
        status = parse_expert_ids(c, o, where, e);
    return status;
}

/* The optional top-level "experts". An absent or empty array leaves
 * l->experts NULL. */
static wst_status_t parse_experts(struct parse_ctx *c, struct json_object *root,
                                  struct wst_layout *l, const size_t *by_name)
{
    struct json_object *arr;
    size_t n = 0, i;
    wst_status_t status;

    if (!json_object_object_get_ex(root, "experts", &arr))
        return WST_OK;
    status = get_array(c, root, "layout", "experts", WST_LAYOUT_MAX, &arr, &n);
    if (status != WST_OK || n == 0)
        return status;
    l->experts = calloc(n, sizeof(*l->experts));
    if (l->experts == NULL)
        return fail(c, WST_ERR_NO_MEMORY, "out of memory");
    l->n_experts = n;
    for (i = 0; i < n && status == WST_OK; i++)
        status = parse_experts_entry(c, json_object_array_get_idx(arr, i), i, l,
                                     by_name, &l->experts[i]);
    if (status == WST_OK)
        status = check_layers(c, WST_ERR_CONFIG, l->experts, n);
    return status;
}

/* ---- top level ---------------------------------------------------------- */

static wst_status_t parse_shm(struct parse_ctx *c, struct json_object *root,
                              struct wst_layout *l)
{
    struct json_object *v;
    wst_status_t status;

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

/* Value of lowercase hex digit 'ch', or -1. Uppercase is refused: the
 * format has one spelling, so files compare and grep as text. */
static int hex_value(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    return -1;
}

/* Index of the first character of 'hex' ('len' long) that is no lowercase
 * hex digit, or 'len'. */
static size_t hex_bad_digit(const char *hex, size_t len)
{
    size_t i;

    for (i = 0; i < len; i++) {
        if (hex_value(hex[i]) < 0)
            break;
    }
    return i;
}

static void hex_decode(const char *hex,
                       unsigned char handle[WST_LAYOUT_CUDA_IPC_BYTES])
{
    size_t i;

    for (i = 0; i < WST_LAYOUT_CUDA_IPC_BYTES; i++)
        handle[i] = (unsigned char)(hex_value(hex[2 * i]) << 4 |
                                    hex_value(hex[2 * i + 1]));
}

wst_status_t
wst_layout_ipc_decode(const char *hex,
                      unsigned char handle[WST_LAYOUT_CUDA_IPC_BYTES])
{
    if (hex == NULL || handle == NULL)
        return WST_ERR_INVALID;
    if (strnlen(hex, WST_LAYOUT_CUDA_IPC_HEX + 1) != WST_LAYOUT_CUDA_IPC_HEX ||
        hex_bad_digit(hex, WST_LAYOUT_CUDA_IPC_HEX) != WST_LAYOUT_CUDA_IPC_HEX)
        return WST_ERR_CONFIG;
    hex_decode(hex, handle);
    return WST_OK;
}

void wst_layout_ipc_encode(
    const unsigned char handle[WST_LAYOUT_CUDA_IPC_BYTES],
    char hex[WST_LAYOUT_CUDA_IPC_HEX + 1])
{
    static const char digits[] = "0123456789abcdef";
    size_t i;

    for (i = 0; i < WST_LAYOUT_CUDA_IPC_BYTES; i++) {
        hex[2 * i] = digits[handle[i] >> 4];
        hex[2 * i + 1] = digits[handle[i] & 15];
    }
    hex[WST_LAYOUT_CUDA_IPC_HEX] = '\0';
}

/* The "cuda_ipc" string: exactly 128 lowercase hex digits, with a message
 * that says which rule it broke. */
static wst_status_t parse_ipc_handle(struct parse_ctx *c, struct json_object *v,
                                     struct wst_layout *l)
{
    const char *s;
    size_t len, bad;

    if (!json_object_is_type(v, json_type_string))
        return fail(c, WST_ERR_CONFIG,
                    "layout: field \"cuda_ipc\" must be a string");
    s = json_object_get_string(v);
    len = (size_t)json_object_get_string_len(v);
    if (len != WST_LAYOUT_CUDA_IPC_HEX)
        return fail(c, WST_ERR_CONFIG,
                    "layout: field \"cuda_ipc\" has %zu characters, expected "
                    "%d hex digits (a %d-byte CUDA IPC handle)",
                    len, WST_LAYOUT_CUDA_IPC_HEX, WST_LAYOUT_CUDA_IPC_BYTES);
    bad = hex_bad_digit(s, len);
    if (bad != len)
        return fail(c, WST_ERR_CONFIG,
                    "layout: field \"cuda_ipc\": character %zu (byte 0x%02x) "
                    "is not a lowercase hex digit",
                    bad, (unsigned char)s[bad]);
    hex_decode(s, l->cuda_ipc);
    return WST_OK;
}

/* "cuda_ipc" with "cuda_bytes" and "cuda_device": the engine's device
 * allocation. Its companions alone, or next to "shm", are refused. */
static wst_status_t parse_cuda_ipc(struct parse_ctx *c,
                                   struct json_object *root,
                                   struct wst_layout *l)
{
    static const char *const companions[] = {"cuda_bytes", "cuda_device"};
    struct json_object *v;
    wst_status_t status;
    size_t i;

    if (!json_object_object_get_ex(root, "cuda_ipc", &v)) {
        for (i = 0; i < 2; i++) {
            if (json_object_object_get_ex(root, companions[i], NULL))
                return fail(c, WST_ERR_CONFIG,
                            "layout: field \"%s\" without \"cuda_ipc\"",
                            companions[i]);
        }
        return WST_OK;
    }
    if (l->shm[0] != '\0')
        return fail(c, WST_ERR_CONFIG,
                    "layout: fields \"shm\" and \"cuda_ipc\" are exclusive "
                    "(the live regions are in host or in device memory)");
    status = parse_ipc_handle(c, v, l);
    if (status == WST_OK)
        status = get_u64(c, root, "layout", "cuda_bytes", 1, &l->cuda_bytes);
    if (status == WST_OK)
        status = get_u32(c, root, "layout", "cuda_device", 0, &l->cuda_device);
    if (status != WST_OK)
        return status;
    if (l->cuda_bytes == 0)
        return fail(c, WST_ERR_CONFIG, "layout: field \"cuda_bytes\" is 0");
    if (l->cuda_device > INT_MAX)
        return fail(c, WST_ERR_CONFIG,
                    "layout: field \"cuda_device\" is too large");
    l->has_cuda_ipc = 1;
    return WST_OK;
}

static wst_status_t parse_header(struct parse_ctx *c, struct json_object *root,
                                 struct wst_layout *l)
{
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
    status = parse_shm(c, root, l);
    if (status == WST_OK)
        status = parse_cuda_ipc(c, root, l);
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
        status =
            parse_region(c, json_object_array_get_idx(regions, i), i,
                         l->shm[0] != '\0' || l->has_cuda_ipc, &l->regions[i]);
    if (status == WST_OK)
        status = check_regions(c, l, by_name);
    if (status == WST_OK)
        status = parse_wants(c, wants, l, by_name);
    if (status == WST_OK)
        status = parse_experts(c, root, l, by_name);
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

/* The parser's own rules, failing with WST_ERR_INVALID. Runs after the
 * regions are checked, so region bytes (and offsets <= them) are below
 * INT64_MAX. */
/* Adds {"rank": r, "size": n} under "inter_tp"; nonzero on failure. */
static int add_inter_tp(struct json_object *o,
                        const struct wst_layout_experts *e)
{
    struct json_object *x = json_object_new_object();

    if (x == NULL)
        return 1;
    if (add_u64(x, "rank", e->inter_tp_rank) ||
        add_u64(x, "size", e->inter_tp_size)) {
        json_object_put(x);
        return 1;
    }
    return json_object_object_add(o, "inter_tp", x);
}

/* Adds {"region": name, "offset": bytes} under 'key'; nonzero on failure. */
static int add_part(struct json_object *o, const char *key, const char *region,
                    uint64_t offset)
{
    struct json_object *x = json_object_new_object();

    if (x == NULL)
        return 1;
    if (add_str(x, "region", region) || add_u64(x, "offset", offset)) {
        json_object_put(x);
        return 1;
    }
    return json_object_object_add(o, key, x);
}

/* Adds the uint32 array "expert_ids"; nonzero on failure. */
static int add_ids(struct json_object *o, const uint32_t *ids, uint32_t n)
{
    struct json_object *a =
        json_object_new_array_ext(n > INT_MAX ? INT_MAX : (int)n);
    uint32_t i;

    if (a == NULL)
        return 1;
    for (i = 0; i < n; i++) {
        if (json_object_array_add(a, json_object_new_int64(ids[i]))) {
            json_object_put(a);
            return 1;
        }
    }
    return json_object_object_add(o, "expert_ids", a);
}

static int add_experts_entry(struct json_object *arr,
                             const struct wst_layout *l,
                             const struct wst_layout_experts *e)
{
    struct json_object *o = json_object_new_object();

    if (o == NULL)
        return 1;
    if (json_object_array_add(arr, o)) {
        json_object_put(o);
        return 1;
    }
    /* 'o' belongs to 'arr' now; on failure the caller frees the root */
    return add_u64(o, "layer", e->layer) || add_str(o, "loader", e->loader) ||
           add_str(o, "dtype", wst_dtype_name(e->dtype)) ||
           add_u64(o, "experts", e->n_experts) ||
           add_u64(o, "ep_rank", e->ep_rank) ||
           add_u64(o, "ep_size", e->ep_size) ||
           add_u64(o, "hidden", e->hidden) || add_u64(o, "inter", e->inter) ||
           (e->n_expert_ids > 0 &&
            add_ids(o, e->expert_ids, e->n_expert_ids)) ||
           (e->inter_tp_size != 0 && add_inter_tp(o, e)) ||
           add_part(o, "w13", l->regions[e->w13_region].name, e->w13_offset) ||
           add_part(o, "w2", l->regions[e->w2_region].name, e->w2_offset);
}

/* Adds the "experts" array (only called when there are entries, so files
 * without MoE layers look as before); nonzero on failure. */
static int add_experts(struct json_object *root, const struct wst_layout *l)
{
    struct json_object *arr = json_object_new_array_ext((int)l->n_experts);
    size_t i;

    if (arr == NULL)
        return 1;
    if (json_object_object_add(root, "experts", arr)) {
        json_object_put(arr);
        return 1;
    }
    for (i = 0; i < l->n_experts; i++) {
        if (add_experts_entry(arr, l, &l->experts[i]))
            return 1;
    }
    return 0;
}

static wst_status_t save_check_experts(struct parse_ctx *c,
                                       const struct wst_layout *l)
{
    char where[64];
    size_t i;
    wst_status_t status;

    if (l->n_experts > WST_LAYOUT_MAX)
        return fail(c, WST_ERR_INVALID,
                    "layout: %zu experts entries, at most %zu allowed",
                    l->n_experts, WST_LAYOUT_MAX);
    for (i = 0; i < l->n_experts; i++) {
        snprintf(where, sizeof(where), "experts[%zu] (layer %u)", i,
                 l->experts[i].layer);
        status = check_experts(c, WST_ERR_INVALID, where, l->regions,
                               l->n_regions, &l->experts[i]);
        if (status != WST_OK)
            return status;
    }
    return check_layers(c, WST_ERR_INVALID, l->experts, l->n_experts);
}

static wst_status_t save_check(struct parse_ctx *c, const struct wst_layout *l)
{
    size_t i;
    uint32_t d;

    if (l->shm_bytes >= INT64_MAX)
        return fail(c, WST_ERR_INVALID, "layout: shm_bytes too large");
    if (l->has_cuda_ipc && l->shm[0] != '\0')
        return fail(c, WST_ERR_INVALID,
                    "layout: both shm and cuda_ipc (they are exclusive)");
    if (l->has_cuda_ipc && (l->cuda_bytes == 0 || l->cuda_bytes >= INT64_MAX))
        return fail(c, WST_ERR_INVALID, "layout: cuda_bytes is 0 or too large");
    if (l->has_cuda_ipc && l->cuda_device > INT_MAX)
        return fail(c, WST_ERR_INVALID, "layout: cuda_device too large");
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
    return save_check_experts(c, l);
}

/* Adds "cuda_ipc" (hex), "cuda_bytes" and "cuda_device"; nonzero on
 * failure. */
static int add_cuda_ipc(struct json_object *root, const struct wst_layout *l)
{
    char hex[WST_LAYOUT_CUDA_IPC_HEX + 1];

    wst_layout_ipc_encode(l->cuda_ipc, hex);
    return add_str(root, "cuda_ipc", hex) ||
           add_u64(root, "cuda_bytes", l->cuda_bytes) ||
           add_u64(root, "cuda_device", l->cuda_device);
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
    if (!bad && l->has_cuda_ipc)
        bad = add_cuda_ipc(root, l);
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
    if (!bad && l->n_experts > 0)
        bad = add_experts(root, l);
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
        (l->n_wants > 0 && l->wants == NULL) ||
        (l->n_experts > 0 && l->experts == NULL))
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
    size_t i;

    if (l == NULL)
        return;
    /* a parse that failed part-way leaves later entries zeroed (NULL ids) */
    for (i = 0; l->experts != NULL && i < l->n_experts; i++)
        free(l->experts[i].expert_ids);
    free(l->experts);
    free(l->regions);
    free(l->wants);
    memset(l, 0, sizeof(*l));
}
