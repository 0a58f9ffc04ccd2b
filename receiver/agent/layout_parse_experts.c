/* layout_parse_experts.c - the layout file's optional "experts" array:
 * one MoE layer's routed experts per entry, parsed and checked. */
#include "layout_internal.h"

#include <stdio.h>
#include <stdlib.h>

#include <json-c/json.h>

#include "dtype.h"

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
        return wst_layout_fail(c, WST_ERR_CONFIG, "%s: missing field \"%s\"",
                               where, key);
    if (!json_object_is_type(p, json_type_object))
        return wst_layout_fail(
            c, WST_ERR_CONFIG,
            "%s: field \"%s\" must be an object {\"region\": name, "
            "\"offset\": bytes}",
            where, key);
    snprintf(pwhere, sizeof(pwhere), "%s %s", where, key);
    status = wst_layout_get_name(c, p, pwhere, "region", name);
    if (status == WST_OK)
        status = wst_layout_get_u64(c, p, pwhere, "offset", 1, offset_p);
    if (status != WST_OK)
        return status;
    idx = wst_layout_find_name(l->regions, sizeof(*l->regions), by_name,
                               l->n_regions, name);
    if (idx == SIZE_MAX)
        return wst_layout_fail(c, WST_ERR_CONFIG, "%s: unknown region \"%s\"",
                               pwhere, name);
    *region_p = (uint32_t)idx;
    return WST_OK;
}

/* The optional "inter_tp": {"rank": r, "size": n}. Size 0 is refused here
 * because in the struct it means "absent"; rank < size is
 * wst_layout_check_experts'. */
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
        return wst_layout_fail(
            c, WST_ERR_CONFIG,
            "%s: must be an object {\"rank\": r, \"size\": n}", twhere);
    status = wst_layout_get_u32(c, t, twhere, "rank", 1, &e->inter_tp_rank);
    if (status == WST_OK)
        status = wst_layout_get_u32(c, t, twhere, "size", 1, &e->inter_tp_size);
    if (status == WST_OK && e->inter_tp_size == 0)
        status =
            wst_layout_fail(c, WST_ERR_CONFIG, "%s: size must be >= 1", twhere);
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
    status =
        wst_layout_get_array(c, o, where, "expert_ids", UINT32_MAX, &arr, &n);
    if (status == WST_OK)
        status = wst_layout_check_ids_count(c, WST_ERR_CONFIG, where, e, n);
    if (status != WST_OK)
        return status;
    e->expert_ids = malloc(n * sizeof(*e->expert_ids));
    if (e->expert_ids == NULL)
        return wst_layout_fail(c, WST_ERR_NO_MEMORY, "out of memory");
    e->n_expert_ids = (uint32_t)n;
    for (i = 0; status == WST_OK && i < n; i++) {
        snprintf(field, sizeof(field), "expert_ids[%u]", i);
        status = wst_layout_read_u64(c, json_object_array_get_idx(arr, i),
                                     where, field, &x);
        if (status == WST_OK)
            status = wst_layout_check_id(c, WST_ERR_CONFIG, where, e, i, x);
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
    char where[64], dtype[WST_NAME_MAX], hint[160];
    wst_status_t status;

    snprintf(where, sizeof(where), "experts[%zu]", i);
    if (!json_object_is_type(o, json_type_object))
        return wst_layout_fail(c, WST_ERR_CONFIG, "%s: must be an object",
                               where);
    status = wst_layout_get_u32(c, o, where, "layer", 1, &e->layer);
    if (status != WST_OK)
        return status;
    /* from here on, messages name the layer too */
    snprintf(where, sizeof(where), "experts[%zu] (layer %u)", i, e->layer);
    status = wst_layout_get_string(c, o, where, "loader", e->loader,
                                   sizeof(e->loader));
    if (status == WST_OK)
        status = wst_layout_get_name(c, o, where, "dtype", dtype);
    if (status == WST_OK)
        status = wst_layout_get_u32(c, o, where, "experts", 1, &e->n_experts);
    if (status == WST_OK)
        status = wst_layout_get_u32(c, o, where, "ep_rank", 1, &e->ep_rank);
    if (status == WST_OK)
        status = wst_layout_get_u32(c, o, where, "ep_size", 1, &e->ep_size);
    if (status == WST_OK)
        status = wst_layout_get_u32(c, o, where, "hidden", 1, &e->hidden);
    if (status == WST_OK)
        status = wst_layout_get_u32(c, o, where, "inter", 1, &e->inter);
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
    if (e->dtype == WST_DTYPE_INVALID) {
        wst_dtype_hint(dtype, hint, sizeof(hint));
        return wst_layout_fail(c, WST_ERR_CONFIG,
                               "%s: unknown dtype \"%s\" (%s)", where, dtype,
                               hint);
    }
    status = wst_layout_check_experts(c, WST_ERR_CONFIG, where, l->regions,
                                      l->n_regions, e);
    if (status == WST_OK)
        status = parse_expert_ids(c, o, where, e);
    return status;
}

wst_status_t wst_layout_parse_experts(struct parse_ctx *c,
                                      struct json_object *root,
                                      struct wst_layout *l,
                                      const size_t *by_name)
{
    struct json_object *arr;
    size_t n = 0, i;
    wst_status_t status;

    if (!json_object_object_get_ex(root, "experts", &arr))
        return WST_OK;
    status = wst_layout_get_array(c, root, "layout", "experts", WST_LAYOUT_MAX,
                                  &arr, &n);
    if (status != WST_OK || n == 0)
        return status;
    l->experts = calloc(n, sizeof(*l->experts));
    if (l->experts == NULL)
        return wst_layout_fail(c, WST_ERR_NO_MEMORY, "out of memory");
    l->n_experts = n;
    for (i = 0; i < n && status == WST_OK; i++)
        status = parse_experts_entry(c, json_object_array_get_idx(arr, i), i, l,
                                     by_name, &l->experts[i]);
    if (status == WST_OK)
        status = wst_layout_check_layers(c, WST_ERR_CONFIG, l->experts, n);
    return status;
}
