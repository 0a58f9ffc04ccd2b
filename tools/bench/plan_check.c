/* plan_check.c - tiling and source checks of a plan (plan_check.h). */
#include "plan_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"

struct key {
    uint32_t region;
    uint64_t dst, len;
    size_t item;
};

static int key_cmp(const void *pa, const void *pb)
{
    const struct key *a = pa, *b = pb;

    if (a->region != b->region)
        return a->region < b->region ? -1 : 1;
    return a->dst < b->dst ? -1 : (a->dst > b->dst);
}

/* Global index of the element at byte 'off' of want w (dense layout). */
static void want_element(const struct wst_want *w, uint64_t off, uint64_t *x)
{
    uint64_t k = (off - w->offset) / wst_dtype_size(w->tensor.dtype);
    uint32_t d = w->box.ndim;

    while (d-- > 0) {
        uint64_t ext = w->box.stop[d] - w->box.start[d];

        x[d] = w->box.start[d] + k % ext;
        k /= ext;
    }
}

/* Byte offset of element x in an N-D have's shard, or UINT64_MAX when the
 * have does not hold it. */
static uint64_t have_offset(const struct wst_have *h, const uint64_t *x)
{
    uint64_t off = 0;

    for (uint32_t d = 0; d < h->box.ndim; d++) {
        if (x[d] < h->box.start[d] || x[d] >= h->box.stop[d])
            return UINT64_MAX;
        off =
            off * (h->box.stop[d] - h->box.start[d]) + (x[d] - h->box.start[d]);
    }
    return off * wst_dtype_size(h->tensor.dtype);
}

/* The want of 'region' holding byte 'dst' (wants of a region are
 * consecutive in the want array, at increasing offsets). */
static const struct wst_want *find_want(const struct wst_plan_input *in,
                                        const size_t *first, uint32_t region,
                                        uint64_t dst)
{
    for (size_t i = first[region]; i < in->n_wants; i++) {
        const struct wst_want *w = &in->wants[i];

        if (w->region != region)
            break;
        if (dst >= w->offset && dst - w->offset < wst_want_span(w))
            return w;
    }
    return NULL;
}

static wst_status_t check_item(const struct wst_plan_input *in,
                               const struct wst_plan *plan, const size_t *first,
                               const struct wst_plan_item *it, char *err,
                               size_t errlen)
{
    const struct wst_want *w = find_want(in, first, it->region, it->dst_offset);
    const struct wst_have *h;
    uint64_t x0[WST_MAX_DIMS], x1[WST_MAX_DIMS], es, o0, o1, end;
    uint32_t l;

    if (w == NULL || it->sender >= in->n_senders ||
        it->have >= in->n_haves[it->sender]) {
        snprintf(err, errlen,
                 "item at region %u + %llu: no want, or no "
                 "such have",
                 it->region, (unsigned long long)it->dst_offset);
        return WST_ERR_INTEGRITY;
    }
    h = &in->haves[it->sender][it->have];
    es = wst_dtype_size(w->tensor.dtype);
    end = it->dst_offset + wst_plan_item_bytes(it) - es;
    if (h->flat || strcmp(h->tensor.name, w->tensor.name) != 0 ||
        it->length % es != 0 || end - w->offset >= wst_want_span(w) ||
        (it->more_rows != 0 && it->length >= WST_PLAN_ROW_MAX)) {
        snprintf(err, errlen,
                 "item of %s: wrong tensor, not inside one "
                 "want, or rows too long",
                 w->tensor.name);
        return WST_ERR_INTEGRITY;
    }
    /* every row's first and last element */
    for (uint64_t r = 0; r <= it->more_rows; r++) {
        uint64_t dst = it->dst_offset + r * it->length;
        uint64_t src = it->src_offset + r * it->src_stride;

        want_element(w, dst, x0);
        want_element(w, dst + it->length - es, x1);
        o0 = have_offset(h, x0);
        o1 = have_offset(h, x1);
        if (o0 != src || o1 != src + it->length - es) {
            snprintf(err, errlen,
                     "item of %s from sender %u have %u, row %llu: source "
                     "range does not hold the destination's elements",
                     w->tensor.name, it->sender, it->have,
                     (unsigned long long)r);
            return WST_ERR_INTEGRITY;
        }
    }
    l = wst_tensor_layer(w->tensor.name);
    if (it->layer != (l == UINT32_MAX ? plan->n_layers - 1 : l) ||
        (it->staged != 0) != (w->staged != 0)) {
        snprintf(err, errlen, "item of %s: layer %u or staged flag wrong",
                 w->tensor.name, it->layer);
        return WST_ERR_INTEGRITY;
    }
    return WST_OK;
}

/* Items of each region, in destination order, tile it exactly. */
static wst_status_t check_tiling(const struct wst_plan_input *in,
                                 const struct key *k, size_t n, char *err,
                                 size_t errlen)
{
    uint64_t pos = 0;
    uint32_t cur = 0;
    size_t i = 0;

    for (cur = 0; cur < in->n_regions; cur++) {
        for (pos = 0; i < n && k[i].region == cur; i++) {
            if (k[i].dst != pos)
                break;
            pos += k[i].len;
        }
        if (pos != in->regions[cur].length)
            break;
    }
    if (cur == in->n_regions && i == n)
        return WST_OK;
    snprintf(err, errlen,
             "region %u (%s): bytes from %llu not covered "
             "exactly once",
             cur, cur < in->n_regions ? in->regions[cur].name : "?",
             (unsigned long long)pos);
    return WST_ERR_COVERAGE;
}

wst_status_t pc_plan_check(const struct wst_plan_input *in,
                           const struct wst_plan *plan, char *err,
                           size_t errlen)
{
    struct key *k = malloc((plan->n_items + 1) * sizeof(*k));
    size_t *first = calloc(in->n_regions + 1, sizeof(*first));
    wst_status_t st = WST_OK;

    if (k == NULL || first == NULL) {
        snprintf(err, errlen, "no memory to check the plan");
        st = WST_ERR_NO_MEMORY;
        goto out_free;
    }
    for (size_t i = in->n_wants; i-- > 0;)
        first[in->wants[i].region] = i;
    for (size_t i = 0; i < plan->n_items && st == WST_OK; i++) {
        const struct wst_plan_item *it = &plan->items[i];

        k[i] = (struct key){.region = it->region,
                            .dst = it->dst_offset,
                            .len = wst_plan_item_bytes(it),
                            .item = i};
        if (it->region >= in->n_regions) {
            snprintf(err, errlen, "item %zu: region %u out of range", i,
                     it->region);
            st = WST_ERR_INTEGRITY;
        } else {
            st = check_item(in, plan, first, it, err, errlen);
        }
    }
    if (st == WST_OK) {
        qsort(k, plan->n_items, sizeof(*k), key_cmp);
        st = check_tiling(in, k, plan->n_items, err, errlen);
    }
out_free:
    free(k);
    free(first);
    return st;
}
