/* layout_rules.c - the layout file's checks: regions (duplicates,
 * placement in their allocation, overlap), wants, "experts" entries and
 * their layers (the allocations' own rules are in layout_allocs.c).
 *
 * Checks that would be quadratic (duplicate names and layers, name lookup,
 * overlap) run on sorted index arrays: files hold up to 2^20 entries. The
 * rules of an "experts" entry are shared with save, which must refuse what
 * the parser would.
 */
#include "layout_internal.h"

#include <stdlib.h>
#include <stddef.h>
#include <string.h>

#include "dtype.h"

/* ---- sorted indices ----------------------------------------------------- */

/* qsort_r (glibc) comparators over indices into the region array 'arg'. */
static int cmp_region_name(const void *a, const void *b, void *arg)
{
    const struct wst_layout_region *r = arg;

    return strcmp(r[*(const size_t *)a].name, r[*(const size_t *)b].name);
}

/* By allocation, then offset; regions the agent allocates (SIZE_MAX) are
 * never in the array sorted. 'arg' is the layout. */
static int cmp_region_place(const void *a, const void *b, void *arg)
{
    const struct wst_layout *l = arg;
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    size_t ki = wst_layout_region_alloc(l, i),
           kj = wst_layout_region_alloc(l, j);
    uint64_t x = l->regions[i].offset, y = l->regions[j].offset;

    if (ki != kj)
        return ki < kj ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* Both tables the finder serves keep their name first. */
_Static_assert(offsetof(struct wst_layout_region, name) == 0,
               "a region's name is its first member");
_Static_assert(offsetof(struct wst_layout_allocation, name) == 0,
               "an allocation's name is its first member");

size_t wst_layout_find_name(const void *items, size_t stride,
                            const size_t *by_name, size_t n, const char *name)
{
    const char *base = items;
    size_t lo = 0, hi = n, mid;
    int r;

    while (lo < hi) {
        mid = lo + (hi - lo) / 2;
        r = strcmp(base + by_name[mid] * stride, name);
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

/* Regions of one allocation, sorted by offset, may not overlap. */
static wst_status_t check_overlap(struct parse_ctx *c,
                                  const struct wst_layout *l)
{
    const struct wst_layout_region *r = l->regions;
    size_t *by_off, i, k, n = 0;
    char what[WST_LAYOUT_ALLOC_NAME_MAX + 32];
    wst_status_t status = WST_OK;

    by_off = malloc((l->n_regions ? l->n_regions : 1) * sizeof(*by_off));
    if (by_off == NULL)
        return wst_layout_fail(c, WST_ERR_NO_MEMORY, "out of memory");
    for (i = 0; i < l->n_regions; i++) {
        if (wst_layout_region_alloc(l, i) != SIZE_MAX)
            by_off[n++] = i;
    }
    qsort_r(by_off, n, sizeof(*by_off), cmp_region_place, (void *)l);
    for (i = 1; i < n; i++) {
        const struct wst_layout_region *a = &r[by_off[i - 1]];
        const struct wst_layout_region *b = &r[by_off[i]];

        k = wst_layout_region_alloc(l, by_off[i]);
        if (k != wst_layout_region_alloc(l, by_off[i - 1]) ||
            a->offset + a->bytes <= b->offset)
            continue;
        wst_layout_alloc_label(l, k, 0, what, sizeof(what));
        status = wst_layout_fail(c, WST_ERR_CONFIG,
                                 "regions \"%s\" and \"%s\" overlap in %s",
                                 a->name, b->name, what);
        break;
    }
    free(by_off);
    return status;
}

/* Region i inside its allocation, when it has one. */
static wst_status_t check_placed(struct parse_ctx *c,
                                 const struct wst_layout *l, size_t i,
                                 uint64_t end)
{
    size_t k = wst_layout_region_alloc(l, i);
    char what[WST_LAYOUT_ALLOC_NAME_MAX + 32];
    uint64_t limit;

    if (k == SIZE_MAX)
        return WST_OK;
    limit = wst_layout_alloc_bytes(l, k);
    if (end <= limit)
        return WST_OK;
    wst_layout_alloc_label(l, k, 1, what, sizeof(what));
    return wst_layout_fail(c, WST_ERR_CONFIG,
                           "regions[%zu] (\"%s\"): offset + bytes = %llu is "
                           "beyond %s %llu",
                           i, l->regions[i].name, (unsigned long long)end, what,
                           (unsigned long long)limit);
}

wst_status_t wst_layout_check_regions(struct parse_ctx *c,
                                      const struct wst_layout *l,
                                      size_t *by_name)
{
    const struct wst_layout_region *r = l->regions;
    size_t i, n = l->n_regions;
    uint64_t end;
    wst_status_t status;

    for (i = 0; i < n; i++) {
        by_name[i] = i;
        if (__builtin_add_overflow(r[i].offset, r[i].bytes, &end))
            return wst_layout_fail(
                c, WST_ERR_CONFIG,
                "regions[%zu] (\"%s\"): offset + bytes overflows", i,
                r[i].name);
        status = check_placed(c, l, i, end);
        if (status != WST_OK)
            return status;
    }
    qsort_r(by_name, n, sizeof(*by_name), cmp_region_name, (void *)r);
    for (i = 1; i < n; i++) {
        if (strcmp(r[by_name[i - 1]].name, r[by_name[i]].name) == 0)
            return wst_layout_fail(
                c, WST_ERR_CONFIG, "regions[%zu]: duplicate region name \"%s\"",
                by_name[i] > by_name[i - 1] ? by_name[i] : by_name[i - 1],
                r[by_name[i]].name);
    }
    if (wst_layout_alloc_count(l) == 0 || n < 2)
        return WST_OK;
    return check_overlap(c, l);
}

/* ---- wants -------------------------------------------------------------- */

wst_status_t wst_layout_want_box_check(struct parse_ctx *c, const char *where,
                                       const struct wst_want *w)
{
    uint32_t d;

    for (d = 0; d < w->tensor.ndim; d++) {
        if (w->tensor.shape[d] == 0)
            return wst_layout_fail(c, WST_ERR_CONFIG,
                                   "%s (\"%s\"): shape[%u] is 0", where,
                                   w->tensor.name, d);
        if (w->box.start[d] > w->box.stop[d] ||
            w->box.stop[d] > w->tensor.shape[d])
            return wst_layout_fail(
                c, WST_ERR_CONFIG,
                "%s (\"%s\"): start[%u]=%llu stop[%u]=%llu outside "
                "shape[%u]=%llu",
                where, w->tensor.name, d, (unsigned long long)w->box.start[d],
                d, (unsigned long long)w->box.stop[d], d,
                (unsigned long long)w->tensor.shape[d]);
    }
    return WST_OK;
}

wst_status_t wst_layout_check_want(struct parse_ctx *c, size_t i,
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
        return wst_layout_fail(c, WST_ERR_CONFIG,
                               "wants[%zu] (\"%s\"): tensor shape too large", i,
                               w->tensor.name);
    if (w->row_pitch != 0 && (w->row_pitch % esize != 0 || w->row_pitch < row))
        return wst_layout_fail(
            c, WST_ERR_CONFIG,
            "wants[%zu] (\"%s\"): row_pitch %llu must be a multiple of "
            "%zu and >= row bytes %llu",
            i, w->tensor.name, (unsigned long long)w->row_pitch, esize,
            (unsigned long long)row);
    return wst_layout_fail(
        c, WST_ERR_CONFIG,
        "wants[%zu] (\"%s\"): offset %llu + span %llu exceeds region "
        "\"%s\" bytes %llu",
        i, w->tensor.name, (unsigned long long)w->offset,
        (unsigned long long)wst_want_span(w), descs[w->region].name,
        (unsigned long long)descs[w->region].length);
}

/* ---- experts ------------------------------------------------------------ */

/* The semantic rules of an "experts" entry live in wst_layout_check_*
 * helpers that take the status to fail with: the parser calls them with
 * WST_ERR_CONFIG and save with WST_ERR_INVALID, so save refuses exactly what
 * load would. */

wst_status_t wst_layout_check_ids_count(struct parse_ctx *c, wst_status_t bad,
                                        const char *where,
                                        const struct wst_layout_experts *e,
                                        size_t n)
{
    if (e->n_experts % e->ep_size != 0)
        return wst_layout_fail(
            c, bad, "%s: \"expert_ids\" needs ep_size %u to divide experts %u",
            where, e->ep_size, e->n_experts);
    if (n != e->n_experts / e->ep_size)
        return wst_layout_fail(
            c, bad,
            "%s: field \"expert_ids\" has %zu entries, expected "
            "experts/ep_size = %u",
            where, n, e->n_experts / e->ep_size);
    return WST_OK;
}

wst_status_t wst_layout_check_id(struct parse_ctx *c, wst_status_t bad,
                                 const char *where,
                                 const struct wst_layout_experts *e, uint32_t i,
                                 uint64_t id)
{
    if (id >= e->n_experts)
        return wst_layout_fail(c, bad,
                               "%s: expert_ids[%u] = %llu is not < experts %u",
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
        return wst_layout_fail(
            c, bad, "%s %s: region index %u out of range (%zu regions)", where,
            key, region, n_regions);
    if (offset > regions[region].bytes)
        return wst_layout_fail(
            c, bad,
            "%s %s: offset %llu is past the end of region \"%s\" "
            "(%llu bytes)",
            where, key, (unsigned long long)offset, regions[region].name,
            (unsigned long long)regions[region].bytes);
    return WST_OK;
}

wst_status_t wst_layout_check_experts(struct parse_ctx *c, wst_status_t bad,
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
        return wst_layout_fail(c, bad, "%s: loader name must be 1..%d bytes",
                               where, WST_LAYOUT_LOADER_MAX - 1);
    if (wst_dtype_size(e->dtype) == 0)
        return wst_layout_fail(c, bad, "%s: unknown dtype %d", where,
                               (int)e->dtype);
    if (zero != NULL)
        return wst_layout_fail(c, bad, "%s: field \"%s\" is 0", where, zero);
    if (e->ep_rank >= e->ep_size)
        return wst_layout_fail(c, bad, "%s: ep_rank %u must be < ep_size %u",
                               where, e->ep_rank, e->ep_size);
    /* size 0 stands for "no inter_tp", so a rank without it is unsavable */
    if (e->inter_tp_rank >= e->inter_tp_size &&
        (e->inter_tp_size != 0 || e->inter_tp_rank != 0))
        return wst_layout_fail(c, bad, "%s: inter_tp rank %u must be < size %u",
                               where, e->inter_tp_rank, e->inter_tp_size);
    status = check_part(c, bad, where, "w13", e->w13_region, e->w13_offset,
                        regions, n_regions);
    if (status == WST_OK)
        status = check_part(c, bad, where, "w2", e->w2_region, e->w2_offset,
                            regions, n_regions);
    if (status != WST_OK)
        return status;
    if ((e->expert_ids == NULL) != (e->n_expert_ids == 0))
        return wst_layout_fail(
            c, bad, "%s: expert_ids is %s but n_expert_ids is %u", where,
            e->expert_ids == NULL ? "NULL" : "set", e->n_expert_ids);
    if (e->expert_ids == NULL)
        return WST_OK;
    status = wst_layout_check_ids_count(c, bad, where, e, e->n_expert_ids);
    for (i = 0; status == WST_OK && i < e->n_expert_ids; i++)
        status = wst_layout_check_id(c, bad, where, e, i, e->expert_ids[i]);
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

wst_status_t wst_layout_check_layers(struct parse_ctx *c, wst_status_t bad,
                                     const struct wst_layout_experts *x,
                                     size_t n)
{
    size_t *idx, i;
    wst_status_t status = WST_OK;

    if (n < 2)
        return WST_OK;
    idx = malloc(n * sizeof(*idx));
    if (idx == NULL)
        return wst_layout_fail(c, WST_ERR_NO_MEMORY, "out of memory");
    for (i = 0; i < n; i++)
        idx[i] = i;
    qsort_r(idx, n, sizeof(*idx), cmp_experts_layer, (void *)x);
    for (i = 1; i < n; i++) {
        if (x[idx[i - 1]].layer == x[idx[i]].layer) {
            status =
                wst_layout_fail(c, bad,
                                "experts[%zu]: duplicate layer %u (first in "
                                "experts[%zu])",
                                idx[i], x[idx[i]].layer, idx[i - 1]);
            break;
        }
    }
    free(idx);
    return status;
}
