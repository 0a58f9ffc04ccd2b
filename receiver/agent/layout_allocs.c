/* layout_allocs.c - the layout file's allocations: the one list the agent
 * imports, the "allocations" array read from JSON, and the rules that
 * parse and save both apply.
 *
 * A file spells its live memory one of two ways: the top-level "shm" or
 * "cuda_ipc" (one block, every region in it), or "allocations" (many
 * blocks, each region naming its own). wst_layout_alloc_get hides the
 * difference, so the checks of regions and the agent's import see one list.
 * The cross-entry rules (names, shm objects and handles unique, one GPU)
 * run on sorted index arrays: a file holds up to WST_LAYOUT_ALLOC_MAX
 * entries.
 */
#include "layout_internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

/* ---- the one list ------------------------------------------------------- */

size_t wst_layout_alloc_count(const struct wst_layout *l)
{
    if (l->n_allocations > 0)
        return l->n_allocations;
    return l->shm[0] != '\0' || l->has_cuda_ipc;
}

void wst_layout_alloc_get(const struct wst_layout *l, size_t k,
                          struct wst_layout_allocation *out)
{
    if (l->n_allocations > 0) {
        *out = l->allocations[k];
        return;
    }
    memset(out, 0, sizeof(*out));
    if (l->shm[0] != '\0') {
        out->kind = WST_LAYOUT_ALLOC_SHM;
        memcpy(out->shm, l->shm, sizeof(out->shm));
        out->bytes = l->shm_bytes;
        return;
    }
    out->kind = WST_LAYOUT_ALLOC_CUDA_IPC;
    memcpy(out->cuda_ipc, l->cuda_ipc, sizeof(out->cuda_ipc));
    out->device = l->cuda_device;
    out->bytes = l->cuda_bytes;
}

size_t wst_layout_region_alloc(const struct wst_layout *l, size_t i)
{
    if (l->n_allocations > 0)
        return l->regions[i].allocation != 0 ? l->regions[i].allocation - 1
                                             : SIZE_MAX;
    return l->shm[0] != '\0' || l->has_cuda_ipc ? 0 : SIZE_MAX;
}

int wst_layout_cuda_device(const struct wst_layout *l, uint32_t *device_p)
{
    size_t k;

    if (l->has_cuda_ipc) {
        *device_p = l->cuda_device;
        return 1;
    }
    for (k = 0; k < l->n_allocations; k++) {
        if (l->allocations[k].kind == WST_LAYOUT_ALLOC_CUDA_IPC) {
            *device_p = l->allocations[k].device;
            return 1;
        }
    }
    return 0;
}

uint64_t wst_layout_alloc_bytes(const struct wst_layout *l, size_t k)
{
    if (l->n_allocations > 0)
        return l->allocations[k].bytes;
    return l->shm[0] != '\0' ? l->shm_bytes : l->cuda_bytes;
}

void wst_layout_alloc_label(const struct wst_layout *l, size_t k, int limit,
                            char *buf, size_t len)
{
    if (l->n_allocations > 0)
        snprintf(buf, len, "allocation \"%s\"%s", l->allocations[k].name,
                 limit ? " bytes" : "");
    else if (l->shm[0] != '\0')
        snprintf(buf, len, "%s", limit ? "shm_bytes" : "the shm");
    else
        snprintf(buf, len, "%s",
                 limit ? "cuda_bytes" : "the cuda_ipc allocation");
}

/* ---- rules -------------------------------------------------------------- */

wst_status_t wst_layout_check_alloc(struct parse_ctx *c, wst_status_t bad,
                                    const char *where,
                                    const struct wst_layout_allocation *a)
{
    if (a->name[0] == '\0' || !memchr(a->name, '\0', sizeof(a->name)))
        return wst_layout_fail(c, bad, "%s: name must be 1..%d bytes", where,
                               WST_LAYOUT_ALLOC_NAME_MAX - 1);
    if (a->kind != WST_LAYOUT_ALLOC_SHM && a->kind != WST_LAYOUT_ALLOC_CUDA_IPC)
        return wst_layout_fail(c, bad, "%s: unknown kind %d", where,
                               (int)a->kind);
    if (a->kind == WST_LAYOUT_ALLOC_SHM &&
        (a->shm[0] == '\0' || !memchr(a->shm, '\0', sizeof(a->shm))))
        return wst_layout_fail(c, bad, "%s: shm name must be 1..%d bytes",
                               where, WST_NAME_MAX - 1);
    if (a->kind == WST_LAYOUT_ALLOC_SHM && a->device != 0)
        return wst_layout_fail(
            c, bad,
            "%s: field \"device\" is for \"cuda_ipc\" entries, not \"shm\"",
            where);
    if (a->bytes == 0)
        return wst_layout_fail(c, bad, "%s: field \"bytes\" is 0", where);
    if (a->bytes >= INT64_MAX)
        return wst_layout_fail(c, bad, "%s: field \"bytes\" is too large",
                               where);
    if (a->device > INT_MAX)
        return wst_layout_fail(c, bad, "%s: field \"device\" is too large",
                               where);
    return WST_OK;
}

/* qsort_r comparators over indices into the allocation array 'arg': by the
 * key, then by index, so the first of a run of equals is the earliest. */
static int by_index(size_t i, size_t j)
{
    return i < j ? -1 : i > j;
}

static int cmp_alloc_name(const void *a, const void *b, void *arg)
{
    const struct wst_layout_allocation *x = arg;
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    int r = strcmp(x[i].name, x[j].name);

    return r != 0 ? r : by_index(i, j);
}

/* shm objects first (by name), then handles (by bytes): duplicates of
 * either are neighbours. */
static int cmp_alloc_object(const void *a, const void *b, void *arg)
{
    const struct wst_layout_allocation *x = arg;
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    int r;

    if (x[i].kind != x[j].kind)
        return x[i].kind < x[j].kind ? -1 : 1;
    if (x[i].kind == WST_LAYOUT_ALLOC_SHM)
        r = strcmp(x[i].shm, x[j].shm);
    else
        r = memcmp(x[i].cuda_ipc, x[j].cuda_ipc, sizeof(x[i].cuda_ipc));
    return r != 0 ? r : by_index(i, j);
}

static int same_object(const struct wst_layout_allocation *a,
                       const struct wst_layout_allocation *b)
{
    if (a->kind != b->kind)
        return 0;
    if (a->kind == WST_LAYOUT_ALLOC_SHM)
        return strcmp(a->shm, b->shm) == 0;
    return memcmp(a->cuda_ipc, b->cuda_ipc, sizeof(a->cuda_ipc)) == 0;
}

/* Two entries naming one shm object or one handle. 'idx' is scratch. */
static wst_status_t check_objects(struct parse_ctx *c, wst_status_t bad,
                                  const struct wst_layout_allocation *x,
                                  size_t n, size_t *idx)
{
    size_t i, first, later;

    for (i = 0; i < n; i++)
        idx[i] = i;
    qsort_r(idx, n, sizeof(*idx), cmp_alloc_object, (void *)x);
    for (i = 1; i < n; i++) {
        if (!same_object(&x[idx[i - 1]], &x[idx[i]]))
            continue;
        first = idx[i - 1];
        later = idx[i];
        if (x[later].kind == WST_LAYOUT_ALLOC_SHM)
            return wst_layout_fail(
                c, bad,
                "allocations[%zu] (\"%s\"): shm \"%s\" is already "
                "allocations[%zu] (\"%s\")",
                later, x[later].name, x[later].shm, first, x[first].name);
        return wst_layout_fail(c, bad,
                               "allocations[%zu] (\"%s\"): the same cuda_ipc "
                               "handle as allocations[%zu] (\"%s\"); CUDA "
                               "opens a handle once per process",
                               later, x[later].name, first, x[first].name);
    }
    return WST_OK;
}

/* Every cuda_ipc entry on the GPU of the first. */
static wst_status_t check_device(struct parse_ctx *c, wst_status_t bad,
                                 const struct wst_layout_allocation *x,
                                 size_t n)
{
    size_t i, first = SIZE_MAX;

    for (i = 0; i < n; i++) {
        if (x[i].kind != WST_LAYOUT_ALLOC_CUDA_IPC)
            continue;
        if (first == SIZE_MAX)
            first = i;
        else if (x[i].device != x[first].device)
            return wst_layout_fail(
                c, bad,
                "allocations[%zu] (\"%s\"): device %u, but allocations[%zu] "
                "(\"%s\") is on device %u; one agent serves one GPU",
                i, x[i].name, x[i].device, first, x[first].name,
                x[first].device);
    }
    return WST_OK;
}

wst_status_t wst_layout_check_allocs(struct parse_ctx *c, wst_status_t bad,
                                     const struct wst_layout_allocation *x,
                                     size_t n, size_t *by_name)
{
    size_t *idx, i;
    wst_status_t status;

    for (i = 0; i < n; i++)
        by_name[i] = i;
    qsort_r(by_name, n, sizeof(*by_name), cmp_alloc_name, (void *)x);
    for (i = 1; i < n; i++) {
        if (strcmp(x[by_name[i - 1]].name, x[by_name[i]].name) == 0)
            return wst_layout_fail(
                c, bad,
                "allocations[%zu]: duplicate allocation name \"%s\" (first "
                "in allocations[%zu])",
                by_name[i], x[by_name[i]].name, by_name[i - 1]);
    }
    idx = malloc((n ? n : 1) * sizeof(*idx));
    if (idx == NULL)
        return wst_layout_fail(c, WST_ERR_NO_MEMORY, "out of memory");
    status = check_objects(c, bad, x, n, idx);
    free(idx);
    if (status == WST_OK)
        status = check_device(c, bad, x, n);
    return status;
}

/* ---- "allocations" ------------------------------------------------------ */

/* Which of "shm" and "cuda_ipc" the entry has, then its fields. */
static wst_status_t parse_alloc_body(struct parse_ctx *c, struct json_object *o,
                                     const char *where,
                                     struct wst_layout_allocation *a)
{
    struct json_object *ipc;
    int has_shm = json_object_object_get_ex(o, "shm", NULL);
    int has_ipc = json_object_object_get_ex(o, "cuda_ipc", &ipc);
    wst_status_t status;

    if (has_shm && has_ipc)
        return wst_layout_fail(
            c, WST_ERR_CONFIG,
            "%s: fields \"shm\" and \"cuda_ipc\" are exclusive", where);
    if (!has_shm && !has_ipc)
        return wst_layout_fail(c, WST_ERR_CONFIG,
                               "%s: needs field \"shm\" or \"cuda_ipc\"",
                               where);
    if (has_shm) {
        a->kind = WST_LAYOUT_ALLOC_SHM;
        if (json_object_object_get_ex(o, "device", NULL))
            return wst_layout_fail(c, WST_ERR_CONFIG,
                                   "%s: field \"device\" is for \"cuda_ipc\" "
                                   "entries, not \"shm\"",
                                   where);
        status = wst_layout_get_name(c, o, where, "shm", a->shm);
    } else {
        a->kind = WST_LAYOUT_ALLOC_CUDA_IPC;
        status = wst_layout_read_ipc(c, ipc, where, a->cuda_ipc);
        if (status == WST_OK)
            status = wst_layout_get_u32(c, o, where, "device", 0, &a->device);
    }
    if (status == WST_OK)
        status = wst_layout_get_u64(c, o, where, "bytes", 1, &a->bytes);
    return status;
}

static wst_status_t parse_alloc(struct parse_ctx *c, struct json_object *o,
                                size_t i, struct wst_layout_allocation *a)
{
    char where[WST_LAYOUT_ALLOC_NAME_MAX + 40];
    wst_status_t status;

    snprintf(where, sizeof(where), "allocations[%zu]", i);
    if (!json_object_is_type(o, json_type_object))
        return wst_layout_fail(c, WST_ERR_CONFIG, "%s: must be an object",
                               where);
    status =
        wst_layout_get_string(c, o, where, "name", a->name, sizeof(a->name));
    if (status != WST_OK)
        return status;
    snprintf(where, sizeof(where), "allocations[%zu] (\"%s\")", i, a->name);
    status = parse_alloc_body(c, o, where, a);
    if (status == WST_OK)
        status = wst_layout_check_alloc(c, WST_ERR_CONFIG, where, a);
    return status;
}

/* "allocations" next to the top-level block it replaces. */
static wst_status_t check_one_way(struct parse_ctx *c,
                                  const struct wst_layout *l)
{
    if (l->shm[0] == '\0' && !l->has_cuda_ipc)
        return WST_OK;
    return wst_layout_fail(
        c, WST_ERR_CONFIG,
        "layout: field \"allocations\" and the top-level \"%s\" are "
        "exclusive (make it an entry of \"allocations\")",
        l->shm[0] != '\0' ? "shm" : "cuda_ipc");
}

wst_status_t wst_layout_parse_allocs(struct parse_ctx *c,
                                     struct json_object *root,
                                     struct wst_layout *l, size_t **by_name_p)
{
    struct json_object *arr;
    size_t n = 0, i, *by_name = NULL;
    wst_status_t status;

    *by_name_p = NULL;
    if (!json_object_object_get_ex(root, "allocations", NULL))
        return WST_OK;
    status = check_one_way(c, l);
    if (status == WST_OK)
        status = wst_layout_get_array(c, root, "layout", "allocations",
                                      WST_LAYOUT_ALLOC_MAX, &arr, &n);
    if (status != WST_OK)
        return status;
    by_name = malloc((n ? n : 1) * sizeof(*by_name));
    if (by_name == NULL)
        return wst_layout_fail(c, WST_ERR_NO_MEMORY, "out of memory");
    if (n > 0) {
        l->allocations = calloc(n, sizeof(*l->allocations));
        if (l->allocations == NULL) {
            status = wst_layout_fail(c, WST_ERR_NO_MEMORY, "out of memory");
            goto err_free_index;
        }
        l->n_allocations = n;
    }
    for (i = 0; i < n && status == WST_OK; i++)
        status = parse_alloc(c, json_object_array_get_idx(arr, i), i,
                             &l->allocations[i]);
    if (status == WST_OK)
        status = wst_layout_check_allocs(c, WST_ERR_CONFIG, l->allocations, n,
                                         by_name);
    if (status != WST_OK)
        goto err_free_index;
    *by_name_p = by_name;
    return WST_OK;

err_free_index:
    free(by_name);
    return status;
}
