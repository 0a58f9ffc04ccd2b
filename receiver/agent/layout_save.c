/* layout_save.c - write a struct wst_layout as the agent's layout file:
 * the parser's rules first (layout_rules.c), then JSON (json-c), written
 * whole by wst_atomic_write() (common/atomic_file.h). */
#include "layout_internal.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "atomic_file.h"
#include "dtype.h"

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
/* A new array of room for n entries, added to 'root' under 'key' (which
 * then owns it); NULL when either step fails. */
static struct json_object *add_array(struct json_object *root, const char *key,
                                     size_t n)
{
    struct json_object *arr = json_object_new_array_ext((int)n);

    if (arr != NULL && json_object_object_add(root, key, arr)) {
        json_object_put(arr);
        arr = NULL;
    }
    return arr;
}

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
    struct json_object *arr = add_array(root, "experts", l->n_experts);
    size_t i;

    if (arr == NULL)
        return 1;
    for (i = 0; i < l->n_experts; i++) {
        if (add_experts_entry(arr, l, &l->experts[i]))
            return 1;
    }
    return 0;
}

/* The parser's own rules, failing with WST_ERR_INVALID. Runs after the
 * regions are checked, so region bytes (and offsets <= them) are below
 * INT64_MAX. */
static wst_status_t save_check_experts(struct parse_ctx *c,
                                       const struct wst_layout *l)
{
    char where[64];
    size_t i;
    wst_status_t status;

    if (l->n_experts > WST_LAYOUT_MAX)
        return wst_layout_fail(
            c, WST_ERR_INVALID,
            "layout: %zu experts entries, at most %zu allowed", l->n_experts,
            WST_LAYOUT_MAX);
    for (i = 0; i < l->n_experts; i++) {
        snprintf(where, sizeof(where), "experts[%zu] (layer %u)", i,
                 l->experts[i].layer);
        status = wst_layout_check_experts(c, WST_ERR_INVALID, where, l->regions,
                                          l->n_regions, &l->experts[i]);
        if (status != WST_OK)
            return status;
    }
    return wst_layout_check_layers(c, WST_ERR_INVALID, l->experts,
                                   l->n_experts);
}

/* "allocations": the parser's rules, and one way of naming live memory
 * per file. */
static wst_status_t save_check_allocs(struct parse_ctx *c,
                                      const struct wst_layout *l)
{
    char where[WST_LAYOUT_ALLOC_NAME_MAX + 40];
    size_t *by_name, i;
    wst_status_t status;

    if (l->n_allocations == 0)
        return WST_OK;
    if (l->shm[0] != '\0' || l->has_cuda_ipc)
        return wst_layout_fail(
            c, WST_ERR_INVALID,
            "layout: allocations and the top-level %s (they are exclusive)",
            l->shm[0] != '\0' ? "shm" : "cuda_ipc");
    if (l->n_allocations > WST_LAYOUT_ALLOC_MAX)
        return wst_layout_fail(c, WST_ERR_INVALID,
                               "layout: %zu allocations, at most %d allowed",
                               l->n_allocations, WST_LAYOUT_ALLOC_MAX);
    for (i = 0; i < l->n_allocations; i++) {
        snprintf(where, sizeof(where), "allocations[%zu]", i);
        status = wst_layout_check_alloc(c, WST_ERR_INVALID, where,
                                        &l->allocations[i]);
        if (status != WST_OK)
            return status;
    }
    by_name = malloc(l->n_allocations * sizeof(*by_name));
    if (by_name == NULL)
        return wst_layout_fail(c, WST_ERR_NO_MEMORY, "out of memory");
    status = wst_layout_check_allocs(c, WST_ERR_INVALID, l->allocations,
                                     l->n_allocations, by_name);
    free(by_name);
    return status;
}

static wst_status_t save_check(struct parse_ctx *c, const struct wst_layout *l)
{
    size_t i;
    uint32_t d;
    wst_status_t status;

    if (l->shm_bytes >= INT64_MAX)
        return wst_layout_fail(c, WST_ERR_INVALID,
                               "layout: shm_bytes too large");
    if (l->has_cuda_ipc && l->shm[0] != '\0')
        return wst_layout_fail(
            c, WST_ERR_INVALID,
            "layout: both shm and cuda_ipc (they are exclusive)");
    if (l->has_cuda_ipc && (l->cuda_bytes == 0 || l->cuda_bytes >= INT64_MAX))
        return wst_layout_fail(c, WST_ERR_INVALID,
                               "layout: cuda_bytes is 0 or too large");
    if (l->has_cuda_ipc && l->cuda_device > INT_MAX)
        return wst_layout_fail(c, WST_ERR_INVALID,
                               "layout: cuda_device too large");
    status = save_check_allocs(c, l);
    if (status != WST_OK)
        return status;
    for (i = 0; i < l->n_regions; i++) {
        if (l->regions[i].offset >= INT64_MAX ||
            l->regions[i].bytes >= INT64_MAX ||
            !memchr(l->regions[i].name, '\0', WST_NAME_MAX))
            return wst_layout_fail(c, WST_ERR_INVALID,
                                   "regions[%zu]: bad entry", i);
        if (l->regions[i].allocation > l->n_allocations)
            return wst_layout_fail(
                c, WST_ERR_INVALID,
                "regions[%zu] (\"%s\"): allocation %u out of range (%zu "
                "allocations)",
                i, l->regions[i].name, l->regions[i].allocation,
                l->n_allocations);
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
            return wst_layout_fail(c, WST_ERR_INVALID, "wants[%zu]: bad entry",
                                   i);
        if (wst_want_expert_check(w) != WST_OK)
            return wst_layout_fail(
                c, WST_ERR_INVALID,
                "wants[%zu]: bad expert descriptor (grouped %d, "
                "ep_rank %u, ep_size %u)",
                i, w->expert.grouped, w->expert.ep_rank, w->expert.ep_size);
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

/* Adds one entry of "allocations" to 'arr'; nonzero on failure. */
static int add_allocation(struct json_object *arr,
                          const struct wst_layout_allocation *a)
{
    char hex[WST_LAYOUT_CUDA_IPC_HEX + 1];
    struct json_object *o = json_object_new_object();

    if (o == NULL)
        return 1;
    if (json_object_array_add(arr, o)) {
        json_object_put(o);
        return 1;
    }
    /* 'o' belongs to 'arr' now; on failure the caller frees the root */
    if (add_str(o, "name", a->name))
        return 1;
    if (a->kind == WST_LAYOUT_ALLOC_SHM)
        return add_str(o, "shm", a->shm) || add_u64(o, "bytes", a->bytes);
    wst_layout_ipc_encode(a->cuda_ipc, hex);
    return add_str(o, "cuda_ipc", hex) || add_u64(o, "bytes", a->bytes) ||
           add_u64(o, "device", a->device);
}

/* Adds "allocations" (only called when there are entries, so files
 * without them look as before); nonzero on failure. */
static int add_allocations(struct json_object *root, const struct wst_layout *l)
{
    struct json_object *arr = add_array(root, "allocations", l->n_allocations);
    size_t i;

    if (arr == NULL)
        return 1;
    for (i = 0; i < l->n_allocations; i++) {
        if (add_allocation(arr, &l->allocations[i]))
            return 1;
    }
    return 0;
}

static struct json_object *build_json(const struct wst_layout *l)
{
    struct json_object *root = json_object_new_object(), *arr, *o;
    int bad = root == NULL;
    size_t i;

    bad = bad || add_u64(root, "format", WST_LAYOUT_FORMAT) ||
          add_u64(root, "rank", l->rank);
    if (!bad && l->group[0] != '\0') {
        o = json_object_new_object();
        bad = json_object_object_add(root, "group", o) ||
              add_str(o, "name", l->group) ||
              add_u64(o, "size", l->group_size) ||
              add_u64(o, "member", l->group_member);
    }
    if (!bad && l->shm[0] != '\0')
        bad = add_str(root, "shm", l->shm) ||
              add_u64(root, "shm_bytes", l->shm_bytes);
    if (!bad && l->has_cuda_ipc)
        bad = add_cuda_ipc(root, l);
    if (!bad && l->n_allocations > 0)
        bad = add_allocations(root, l);
    arr = json_object_new_array_ext((int)l->n_regions);
    bad = bad || json_object_object_add(root, "regions", arr);
    for (i = 0; !bad && i < l->n_regions; i++) {
        const struct wst_layout_region *r = &l->regions[i];

        o = json_object_new_object();
        bad = json_object_array_add(arr, o) || add_str(o, "name", r->name) ||
              (r->allocation != 0 &&
               add_str(o, "allocation",
                       l->allocations[r->allocation - 1].name)) ||
              add_u64(o, "offset", r->offset) || add_u64(o, "bytes", r->bytes);
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

wst_status_t wst_layout_save(const char *path, const struct wst_layout *l,
                             char *err, size_t errlen)
{
    struct parse_ctx c = {err, errlen};
    struct json_object *root;
    const char *text;
    wst_status_t status;

    if (path == NULL || l == NULL || (l->n_regions > 0 && l->regions == NULL) ||
        (l->n_wants > 0 && l->wants == NULL) ||
        (l->n_allocations > 0 && l->allocations == NULL) ||
        (l->n_experts > 0 && l->experts == NULL))
        return wst_layout_fail(&c, WST_ERR_INVALID, "layout: NULL argument");
    status = save_check(&c, l);
    if (status != WST_OK)
        return status;
    root = build_json(l);
    if (root == NULL)
        return wst_layout_fail(&c, WST_ERR_NO_MEMORY, "out of memory");
    text = json_object_to_json_string_ext(
        root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE);
    if (text == NULL)
        status = wst_layout_fail(&c, WST_ERR_NO_MEMORY, "out of memory");
    else
        status = wst_atomic_write(path, text, strlen(text), 0644, err, errlen);
    json_object_put(root);
    return status;
}
