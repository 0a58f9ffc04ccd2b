/* layout_parse.c - load and validate the agent's layout file (json-c).
 *
 * Parsing fills a private struct wst_layout and moves it into the caller's
 * only once everything has been checked, so a refused file changes nothing.
 * The checks live in layout_rules.c, the field readers in
 * layout_fields.c, the "experts" array in layout_parse_experts.c. A
 * "cuda_ipc" handle is opaque bytes here (hex in the file); importing it is
 * the agent's business, so this file needs no CUDA.
 */
#include "layout_internal.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "array.h"
#include "dtype.h"

wst_status_t wst_layout_fail(struct parse_ctx *c, wst_status_t status,
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

/* ---- regions ------------------------------------------------------------ */

/* A region's "allocation": the entry of "allocations" it names, resolved
 * through 'alloc_by_name' (NULL: the file has no "allocations"). */
static wst_status_t parse_region_alloc(struct parse_ctx *c,
                                       struct json_object *o, const char *where,
                                       const struct wst_layout *l,
                                       const size_t *alloc_by_name,
                                       struct wst_layout_region *r)
{
    char name[WST_LAYOUT_ALLOC_NAME_MAX];
    size_t idx;
    wst_status_t status;

    if (alloc_by_name == NULL)
        return wst_layout_fail(c, WST_ERR_CONFIG,
                               "%s (\"%s\"): field \"allocation\" without a "
                               "top-level \"allocations\"",
                               where, r->name);
    status =
        wst_layout_get_string(c, o, where, "allocation", name, sizeof(name));
    if (status != WST_OK)
        return status;
    idx = wst_layout_find_name(l->allocations, sizeof(*l->allocations),
                               alloc_by_name, l->n_allocations, name);
    if (idx == SIZE_MAX)
        return wst_layout_fail(c, WST_ERR_CONFIG,
                               "%s (\"%s\"): unknown allocation \"%s\"", where,
                               r->name, name);
    r->allocation = (uint32_t)idx + 1;
    return WST_OK;
}

/* A region is placed -- "offset" required -- when it names an allocation
 * or the file has the top-level "shm" or "cuda_ipc". */
static wst_status_t parse_region(struct parse_ctx *c, struct json_object *o,
                                 size_t i, const struct wst_layout *l,
                                 const size_t *alloc_by_name,
                                 struct wst_layout_region *r)
{
    char where[64];
    int placed = l->shm[0] != '\0' || l->has_cuda_ipc;
    wst_status_t status;

    snprintf(where, sizeof(where), "regions[%zu]", i);
    if (!json_object_is_type(o, json_type_object))
        return wst_layout_fail(c, WST_ERR_CONFIG, "%s: must be an object",
                               where);
    status = wst_layout_get_name(c, o, where, "name", r->name);
    if (status == WST_OK && json_object_object_get_ex(o, "allocation", NULL)) {
        status = parse_region_alloc(c, o, where, l, alloc_by_name, r);
        placed = 1;
    }
    if (status == WST_OK)
        status = wst_layout_get_u64(c, o, where, "offset", placed, &r->offset);
    if (status == WST_OK)
        status = wst_layout_get_u64(c, o, where, "bytes", 1, &r->bytes);
    if (status != WST_OK)
        return status;
    if (r->bytes == 0)
        return wst_layout_fail(c, WST_ERR_CONFIG,
                               "%s (\"%s\"): field \"bytes\" is 0", where,
                               r->name);
    return WST_OK;
}

/* ---- wants -------------------------------------------------------------- */

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
        return wst_layout_fail(
            c, WST_ERR_CONFIG,
            "%s: must be an object {\"ep_rank\": r, \"ep_size\": n}", ewhere);
    status = wst_layout_get_u64(c, e, ewhere, "ep_rank", 1, &rank);
    if (status == WST_OK)
        status = wst_layout_get_u64(c, e, ewhere, "ep_size", 1, &size);
    if (status != WST_OK)
        return status;
    if (size < 1 || size > UINT32_MAX)
        return wst_layout_fail(c, WST_ERR_CONFIG,
                               "%s: ep_size %llu must be in 1..%u", ewhere,
                               (unsigned long long)size, UINT32_MAX);
    if (rank >= size)
        return wst_layout_fail(
            c, WST_ERR_CONFIG, "%s: ep_rank %llu must be < ep_size %llu",
            ewhere, (unsigned long long)rank, (unsigned long long)size);
    if (w->tensor.ndim < 2)
        return wst_layout_fail(c, WST_ERR_CONFIG,
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
    char where[64], dtype[WST_NAME_MAX], region[WST_NAME_MAX], hint[160];
    size_t idx;
    wst_status_t status;

    snprintf(where, sizeof(where), "wants[%zu]", i);
    if (!json_object_is_type(o, json_type_object))
        return wst_layout_fail(c, WST_ERR_CONFIG, "%s: must be an object",
                               where);
    status = wst_layout_get_name(c, o, where, "tensor", w->tensor.name);
    if (status == WST_OK)
        status = wst_layout_get_name(c, o, where, "dtype", dtype);
    if (status == WST_OK)
        status = wst_layout_get_dims(c, o, where, "shape", 0, w->tensor.shape,
                                     &w->tensor.ndim);
    if (status == WST_OK)
        status = wst_layout_get_dims(c, o, where, "start", w->tensor.ndim,
                                     w->box.start, NULL);
    if (status == WST_OK)
        status = wst_layout_get_dims(c, o, where, "stop", w->tensor.ndim,
                                     w->box.stop, NULL);
    if (status == WST_OK)
        status = wst_layout_get_name(c, o, where, "region", region);
    if (status == WST_OK)
        status = wst_layout_get_u64(c, o, where, "offset", 1, &w->offset);
    if (status == WST_OK)
        status = wst_layout_get_u64(c, o, where, "row_pitch", 0, &w->row_pitch);
    if (status != WST_OK)
        return status;
    w->box.ndim = w->tensor.ndim;
    w->tensor.dtype = wst_dtype_parse(dtype);
    if (w->tensor.dtype == WST_DTYPE_INVALID) {
        wst_dtype_hint(dtype, hint, sizeof(hint));
        return wst_layout_fail(c, WST_ERR_CONFIG,
                               "%s (\"%s\"): unknown dtype \"%s\" (%s)", where,
                               w->tensor.name, dtype, hint);
    }
    idx = wst_layout_find_name(l->regions, sizeof(*l->regions), by_name,
                               l->n_regions, region);
    if (idx == SIZE_MAX)
        return wst_layout_fail(c, WST_ERR_CONFIG,
                               "%s (\"%s\"): unknown region \"%s\"", where,
                               w->tensor.name, region);
    w->region = (uint32_t)idx;
    status = wst_layout_want_box_check(c, where, w);
    if (status == WST_OK)
        status = parse_expert(c, o, where, w);
    return status;
}

static wst_status_t parse_wants(struct parse_ctx *c, struct json_object *arr,
                                struct wst_layout *l, const size_t *by_name)
{
    struct wst_region_desc *descs = NULL;
    size_t i;
    wst_status_t status = WST_OK;

    descs = calloc(l->n_regions ? l->n_regions : 1, sizeof(*descs));
    if (descs == NULL)
        return wst_layout_fail(c, WST_ERR_NO_MEMORY, "out of memory");
    for (i = 0; i < l->n_regions; i++) {
        memcpy(descs[i].name, l->regions[i].name, WST_NAME_MAX);
        descs[i].length = l->regions[i].bytes;
        descs[i].mem = WST_MEM_HOST;
    }
    for (i = 0; i < l->n_wants && status == WST_OK; i++) {
        status = parse_want(c, json_object_array_get_idx(arr, i), i, l, by_name,
                            &l->wants[i]);
        if (status == WST_OK)
            status =
                wst_layout_check_want(c, i, &l->wants[i], descs, l->n_regions);
    }
    free(descs);
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
            return wst_layout_fail(
                c, WST_ERR_CONFIG,
                "layout: field \"shm_bytes\" without \"shm\"");
        return WST_OK;
    }
    status = wst_layout_get_name(c, root, "layout", "shm", l->shm);
    if (status == WST_OK)
        status = wst_layout_get_u64(c, root, "layout", "shm_bytes", 1,
                                    &l->shm_bytes);
    return status;
}

/* The optional "group": {"name": ..., "size": n, "member": m}. */
static wst_status_t parse_group(struct parse_ctx *c, struct json_object *root,
                                struct wst_layout *l)
{
    const char *where = "layout: \"group\"";
    struct json_object *g;
    wst_status_t status;

    if (!json_object_object_get_ex(root, "group", &g))
        return WST_OK;
    if (!json_object_is_type(g, json_type_object))
        return wst_layout_fail(c, WST_ERR_CONFIG,
                               "%s: must be an object {\"name\": ..., "
                               "\"size\": n, \"member\": m}",
                               where);
    status =
        wst_layout_get_string(c, g, where, "name", l->group, sizeof(l->group));
    if (status == WST_OK)
        status = wst_layout_get_u32(c, g, where, "size", 1, &l->group_size);
    if (status == WST_OK)
        status = wst_layout_get_u32(c, g, where, "member", 1, &l->group_member);
    if (status != WST_OK)
        return status;
    if (l->group_size < 1 || l->group_size > WST_LAYOUT_GROUP_SIZE_MAX ||
        l->group_member >= l->group_size)
        return wst_layout_fail(c, WST_ERR_CONFIG,
                               "%s: member %u of size %u (size 1..%d, member "
                               "< size)",
                               where, l->group_member, l->group_size,
                               WST_LAYOUT_GROUP_SIZE_MAX);
    return WST_OK;
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

/* Exactly 128 lowercase hex digits, with a message that says which rule
 * the string broke. */
wst_status_t
wst_layout_read_ipc(struct parse_ctx *c, struct json_object *v,
                    const char *where,
                    unsigned char handle[WST_LAYOUT_CUDA_IPC_BYTES])
{
    const char *s;
    size_t len, bad;

    if (!json_object_is_type(v, json_type_string))
        return wst_layout_fail(c, WST_ERR_CONFIG,
                               "%s: field \"cuda_ipc\" must be a string",
                               where);
    s = json_object_get_string(v);
    len = (size_t)json_object_get_string_len(v);
    if (len != WST_LAYOUT_CUDA_IPC_HEX)
        return wst_layout_fail(
            c, WST_ERR_CONFIG,
            "%s: field \"cuda_ipc\" has %zu characters, expected "
            "%d hex digits (a %d-byte CUDA IPC handle)",
            where, len, WST_LAYOUT_CUDA_IPC_HEX, WST_LAYOUT_CUDA_IPC_BYTES);
    bad = hex_bad_digit(s, len);
    if (bad != len)
        return wst_layout_fail(
            c, WST_ERR_CONFIG,
            "%s: field \"cuda_ipc\": character %zu (byte 0x%02x) "
            "is not a lowercase hex digit",
            where, bad, (unsigned char)s[bad]);
    hex_decode(s, handle);
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
                return wst_layout_fail(
                    c, WST_ERR_CONFIG,
                    "layout: field \"%s\" without \"cuda_ipc\"", companions[i]);
        }
        return WST_OK;
    }
    if (l->shm[0] != '\0')
        return wst_layout_fail(
            c, WST_ERR_CONFIG,
            "layout: fields \"shm\" and \"cuda_ipc\" are exclusive "
            "(the live regions are in host or in device memory)");
    status = wst_layout_read_ipc(c, v, "layout", l->cuda_ipc);
    if (status == WST_OK)
        status = wst_layout_get_u64(c, root, "layout", "cuda_bytes", 1,
                                    &l->cuda_bytes);
    if (status == WST_OK)
        status = wst_layout_get_u32(c, root, "layout", "cuda_device", 0,
                                    &l->cuda_device);
    if (status != WST_OK)
        return status;
    if (l->cuda_bytes == 0)
        return wst_layout_fail(c, WST_ERR_CONFIG,
                               "layout: field \"cuda_bytes\" is 0");
    if (l->cuda_device > INT_MAX)
        return wst_layout_fail(c, WST_ERR_CONFIG,
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
        return wst_layout_fail(c, WST_ERR_CONFIG,
                               "layout: top level must be an object");
    status = wst_layout_get_u64(c, root, "layout", "format", 1, &x);
    if (status != WST_OK)
        return status;
    if (x != WST_LAYOUT_FORMAT)
        return wst_layout_fail(
            c, WST_ERR_CONFIG,
            "layout: unknown format %llu (this build reads %d)",
            (unsigned long long)x, WST_LAYOUT_FORMAT);
    status = wst_layout_get_u64(c, root, "layout", "rank", 1, &x);
    if (status != WST_OK)
        return status;
    if (x > UINT32_MAX)
        return wst_layout_fail(c, WST_ERR_CONFIG,
                               "layout: field \"rank\" is too large");
    l->rank = (uint32_t)x;
    status = parse_group(c, root, l);
    if (status == WST_OK)
        status = parse_shm(c, root, l);
    if (status == WST_OK)
        status = parse_cuda_ipc(c, root, l);
    return status;
}

static wst_status_t parse_root(struct parse_ctx *c, struct json_object *root,
                               struct wst_layout *l)
{
    struct json_object *regions, *wants;
    size_t *by_name = NULL, *alloc_by_name = NULL, i;
    wst_status_t status;

    status = parse_header(c, root, l);
    if (status == WST_OK)
        status = wst_layout_parse_allocs(c, root, l, &alloc_by_name);
    if (status == WST_OK)
        status = wst_layout_get_array(c, root, "layout", "regions",
                                      WST_LAYOUT_MAX, &regions, &l->n_regions);
    if (status == WST_OK)
        status = wst_layout_get_array(c, root, "layout", "wants",
                                      WST_LAYOUT_MAX, &wants, &l->n_wants);
    if (status != WST_OK)
        goto out_free_index;
    l->regions = calloc(l->n_regions ? l->n_regions : 1, sizeof(*l->regions));
    l->wants = calloc(l->n_wants ? l->n_wants : 1, sizeof(*l->wants));
    by_name = malloc((l->n_regions ? l->n_regions : 1) * sizeof(*by_name));
    if (l->regions == NULL || l->wants == NULL || by_name == NULL) {
        status = wst_layout_fail(c, WST_ERR_NO_MEMORY, "out of memory");
        goto out_free_index;
    }
    for (i = 0; i < l->n_regions && status == WST_OK; i++)
        status = parse_region(c, json_object_array_get_idx(regions, i), i, l,
                              alloc_by_name, &l->regions[i]);
    if (status == WST_OK)
        status = wst_layout_check_regions(c, l, by_name);
    if (status == WST_OK)
        status = parse_wants(c, wants, l, by_name);
    if (status == WST_OK)
        status = wst_layout_parse_experts(c, root, l, by_name);
out_free_index:
    free(by_name);
    free(alloc_by_name);
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
        return wst_layout_fail(&c, WST_ERR_INVALID, "layout: NULL argument");
    if (len > INT_MAX)
        return wst_layout_fail(&c, WST_ERR_CONFIG,
                               "layout: text too large (%zu bytes)", len);
    tok = json_tokener_new();
    if (tok == NULL)
        return wst_layout_fail(&c, WST_ERR_NO_MEMORY, "out of memory");
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
            status = wst_layout_fail(
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
    char *text = NULL;
    size_t len = 0, cap = 0, n;
    FILE *f;
    wst_status_t status;

    if (path == NULL || out == NULL)
        return wst_layout_fail(&c, WST_ERR_INVALID, "layout: NULL argument");
    f = fopen(path, "rb");
    if (f == NULL)
        return wst_layout_fail(&c, WST_ERR_IO, "%s: cannot open: %s", path,
                               strerror(errno));
    for (;;) {
        /* at least 64 KiB more each time; no file over 1 GiB */
        if (len == cap &&
            (len > INT_MAX / 2 ||
             wst_array_grow(&text, &cap, len + 65536, 1) != WST_OK)) {
            status = wst_layout_fail(&c, WST_ERR_NO_MEMORY,
                                     "%s: file too large", path);
            goto out_close;
        }
        n = fread(text + len, 1, cap - len, f);
        len += n;
        if (n == 0)
            break;
    }
    if (ferror(f)) {
        status = wst_layout_fail(&c, WST_ERR_IO, "%s: read error", path);
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

void wst_layout_release(struct wst_layout *l)
{
    size_t i;

    if (l == NULL)
        return;
    /* a parse that failed part-way leaves later entries zeroed (NULL ids) */
    for (i = 0; l->experts != NULL && i < l->n_experts; i++)
        free(l->experts[i].expert_ids);
    free(l->experts);
    free(l->allocations);
    free(l->regions);
    free(l->wants);
    memset(l, 0, sizeof(*l));
}
