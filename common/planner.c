/* planner.c - turns this receiver's wants and every sender's haves into a plan.
 *
 * Each side of a copy is a "layout": the element at global N-D index x lives
 * at element offset base + sum_j (x_j - origin_j) * stride_j of its buffer.
 *
 *   have, N-D box   dense strides of the box extents, origin = box start
 *   have, flat box  split into <= 2*ndim-1 N-D boxes; each uses the full
 *                   tensor's row-major strides, origin 0, base = -start
 *                   (unsigned wrap-around makes the sum come out right)
 *   want            dense strides of the box extents, except dim ndim-2
 *                   which is row_pitch / elemsize; origin = box start
 *
 * Coverage: every want keeps a list of still-uncovered boxes. Haves of the
 * tensor are visited in rotated rank order; each intersection becomes runs
 * and is cut out of the uncovered box (leaving <= 2*ndim pieces). What is
 * left at the end is a coverage gap. Haves are found through a table of
 * tensor names (each name's haves in rank order), built in time linear in
 * the haves, so large manifests cost O(haves + wants * haves-per-tensor),
 * not O(wants * haves); a have whose box misses the want's is skipped
 * before its layout is computed.
 *
 * Runs: the largest suffix of dims contiguous in both layouts is one run;
 * the dims outside it are iterated. A dim-0 shard of a [151936, 2048] tensor
 * is therefore one run, not 151936. Where the next dim out steps short runs
 * that follow each other in the destination only, they are the rows of one
 * item: a dim-1 shard of a [7168, 16384] o_proj is one item of 7168 rows,
 * not 7168 items.
 */
#include "planner.h"
#include "planner_internal.h"

#include "array.h"
#include "dtype.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Haves of a tensor are touched this many ahead of their turn (each lies
 * in its sender's array: a cache and TLB miss apiece). */
#define PREFETCH_AHEAD 8u

/* Bounds the layer_bytes table; real models have a few hundred layers. */
#define PLAN_MAX_LAYERS 65536u

/* Logs the reason once and copies it into the caller's buffer. */
__attribute__((format(printf, 3, 4))) wst_status_t
wst_plan_fail(struct planner *p, wst_status_t status, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    WST_ERROR(p->lg, "%s", msg);
    if (p->err != NULL && p->errlen > 0)
        snprintf(p->err, p->errlen, "%s", msg);
    return status;
}

/* Tensor names may arrive unterminated; print at most WST_NAME_MAX bytes. */
int wst_plan_name_len(const char *name)
{
    return (int)strnlen(name, WST_NAME_MAX);
}

static void fmt_dims(char *buf, size_t len, const uint64_t *v, uint32_t n)
{
    size_t used = 0;
    uint32_t d;

    used += (size_t)snprintf(buf, len, "[");
    for (d = 0; d < n && d < WST_MAX_DIMS && used < len; d++)
        used += (size_t)snprintf(buf + used, len - used, "%s%llu",
                                 d ? ", " : "", (unsigned long long)v[d]);
    if (used < len)
        snprintf(buf + used, len - used, "]");
}

/* ---- growable arrays ---------------------------------------------------- */

static wst_status_t box_push(struct box_vec *bv, const struct wst_box *b)
{
    if (wst_array_grow(&bv->v, &bv->cap, bv->n + 1, sizeof(*bv->v)) != WST_OK)
        return WST_ERR_NO_MEMORY;
    bv->v[bv->n++] = *b;
    return WST_OK;
}

static int run_continues(const struct wst_plan_item *last,
                         const struct wst_plan_item *it)
{
    return last->more_rows == 0 && it->more_rows == 0 &&
           last->sender == it->sender && last->have == it->have &&
           last->region == it->region && last->layer == it->layer &&
           last->src_offset + last->length == it->src_offset &&
           last->dst_offset + last->length == it->dst_offset;
}

/* Adds a run to its sender's, extending the sender's open run when it
 * continues it in both source and destination (the common case for rows
 * of a box); a run that cannot extend it closes it (written out on the
 * second pass) and becomes the open one. */
static void run_add(struct run_sink *rs, const struct wst_plan_item *it)
{
    uint32_t s = it->sender;
    struct wst_plan_item *last = &rs->last[s];

    if (rs->count[s] > 0 && run_continues(last, it)) {
        last->length += it->length;
        return;
    }
    if (rs->count[s] > 0 && rs->out != NULL) {
        if (rs->start[s] + rs->count[s] > rs->start[s + 1]) {
            rs->overflow = 1; /* never: the passes see the same input */
            return;
        }
        rs->out[rs->start[s] + rs->count[s] - 1] = *last;
    }
    /* field by field: a struct copy of 'it', whose offsets were just
     * stored, stalled on store forwarding (a third of the planner's time) */
    last->sender = it->sender;
    last->have = it->have;
    last->src_offset = it->src_offset;
    last->region = it->region;
    last->dst_offset = it->dst_offset;
    last->length = it->length;
    last->layer = it->layer;
    last->staged = it->staged;
    last->more_rows = it->more_rows;
    last->src_stride = it->src_stride;
    rs->count[s]++;
}

/* Writes every sender's open run (second pass), and checks that each
 * sender made the runs it counted. */
static wst_status_t runs_close(struct planner *p, uint32_t n_senders)
{
    struct run_sink *rs = &p->runs;
    uint32_t s;

    for (s = 0; s < n_senders; s++) {
        size_t counted = rs->start[s + 1] - rs->start[s];

        if (rs->overflow || rs->count[s] != counted)
            return wst_plan_fail(p, WST_ERR_INTEGRITY,
                                 "planner: internal error: sender %u: %zu runs "
                                 "counted, %zu%s made",
                                 s, counted, rs->count[s],
                                 rs->overflow ? " or more" : "");
        if (rs->count[s] > 0)
            rs->out[rs->start[s] + rs->count[s] - 1] = rs->last[s];
    }
    return WST_OK;
}

/* ---- box geometry ------------------------------------------------------- */

static int box_intersect(const struct wst_box *a, const struct wst_box *b,
                         struct wst_box *out)
{
    uint32_t d;

    out->ndim = a->ndim;
    for (d = 0; d < a->ndim; d++) {
        out->start[d] = a->start[d] > b->start[d] ? a->start[d] : b->start[d];
        out->stop[d] = a->stop[d] < b->stop[d] ? a->stop[d] : b->stop[d];
        if (out->start[d] >= out->stop[d])
            return 0;
    }
    return 1;
}

/* Appends u minus its sub-box in (at most 2*ndim disjoint pieces): for each
 * dim, the slabs below and above 'in', restricted to 'in' on earlier dims. */
static wst_status_t box_subtract(const struct wst_box *u,
                                 const struct wst_box *in, struct box_vec *out)
{
    struct wst_box cur = *u, piece;
    wst_status_t status = WST_OK;
    uint32_t d;

    for (d = 0; d < u->ndim && status == WST_OK; d++) {
        if (cur.start[d] < in->start[d]) {
            piece = cur;
            piece.stop[d] = in->start[d];
            status = box_push(out, &piece);
        }
        if (status == WST_OK && in->stop[d] < cur.stop[d]) {
            piece = cur;
            piece.start[d] = in->stop[d];
            status = box_push(out, &piece);
        }
        cur.start[d] = in->start[d];
        cur.stop[d] = in->stop[d];
    }
    return status;
}

static void dense_strides(const uint64_t *ext, uint32_t ndim, uint64_t *stride)
{
    uint32_t d = ndim - 1;

    stride[d] = 1;
    while (d-- > 0)
        stride[d] = stride[d + 1] * ext[d + 1];
}

static void box_extents(const struct wst_box *b, uint64_t *ext)
{
    uint32_t d;

    for (d = 0; d < b->ndim; d++)
        ext[d] = b->stop[d] - b->start[d];
}

/* The N-D boxes of a have and where each element lives in its shard. */
static size_t have_subboxes(const struct wst_have *h, struct sub_have *out)
{
    const struct wst_tensor_desc *t = &h->tensor;
    struct layout lay = {0};
    struct wst_box boxes[WST_FLAT_MAX_BOXES];
    uint64_t ext[WST_MAX_DIMS];
    size_t n, i;

    if (!h->flat) {
        box_extents(&h->box, ext);
        dense_strides(ext, t->ndim, lay.stride);
        memcpy(lay.origin, h->box.start, sizeof(lay.origin));
        out[0].box = h->box;
        out[0].lay = lay;
        return wst_box_elems(&h->box) ? 1 : 0;
    }
    dense_strides(t->shape, t->ndim, lay.stride);
    lay.base = (uint64_t)0 - h->box.start[0];
    n = wst_flat_boxes(t, h->box.start[0], h->box.stop[0], boxes);
    for (i = 0; i < n; i++) {
        out[i].box = boxes[i];
        out[i].lay = lay;
    }
    return n;
}

static void want_layout(const struct wst_want *w, struct layout *lay)
{
    uint32_t last = w->box.ndim - 1;
    uint64_t ext[WST_MAX_DIMS];

    memset(lay, 0, sizeof(*lay));
    box_extents(&w->box, ext);
    if (w->row_pitch != 0 && last > 0)
        ext[last] = w->row_pitch / wst_dtype_size(w->tensor.dtype);
    dense_strides(ext, w->box.ndim, lay->stride);
    memcpy(lay->origin, w->box.start, sizeof(lay->origin));
}

static uint64_t layout_offset(const struct layout *lay, const uint64_t *x,
                              uint32_t ndim)
{
    uint64_t off = lay->base;
    uint32_t d;

    for (d = 0; d < ndim; d++)
        off += (x[d] - lay->origin[d]) * lay->stride[d];
    return off;
}

/* ---- runs --------------------------------------------------------------- */

struct run_ctx {
    uint32_t sender, have, region, layer, staged;
    uint64_t esize, dst_base; /* dst_base: the want's byte offset */
    const struct layout *src, *dst;
};

/* Bytes from the last run of a block to the next run when the odometer
 * steps dim d (< c) and dims d+1..c-1 start over, in one layout (modulo
 * 2^64, as offsets are). */
static uint64_t step_bytes(const struct layout *lay, const uint64_t *ext,
                           uint32_t d, uint32_t c, uint64_t esize)
{
    uint64_t step = lay->stride[d];
    uint32_t j;

    for (j = d + 1; j < c; j++)
        step -= (ext[j] - 1) * lay->stride[j];
    return step * esize;
}

/* Counting pass, box of k >= 2 runs: when no step of the odometer is
 * contiguous in both layouts (always, for the layouts manifest.h allows,
 * barring coincidences of strides), the box's runs join nothing but
 * possibly the sender's open run with the first: count them without
 * making them. Returns 0 when the runs must be made one by one. */
static int count_runs(struct planner *p, const struct run_ctx *rc,
                      const struct wst_box *in, const uint64_t *ext, uint32_t c,
                      uint64_t run)
{
    struct run_sink *rs = &p->runs;
    uint64_t k = 1, len = run * rc->esize, x[WST_MAX_DIMS];
    struct wst_plan_item it = {.sender = rc->sender,
                               .have = rc->have,
                               .region = rc->region,
                               .layer = rc->layer,
                               .staged = rc->staged,
                               .length = len};
    struct wst_plan_item *last = &rs->last[rc->sender];
    uint32_t d, ndim = in->ndim;

    for (d = 0; d < c; d++) {
        if (step_bytes(rc->src, ext, d, c, rc->esize) == len &&
            step_bytes(rc->dst, ext, d, c, rc->esize) == len)
            return 0;
        k *= ext[d];
    }
    if (k < 2)
        return 0;
    memcpy(x, in->start, sizeof(x));
    it.src_offset = layout_offset(rc->src, x, ndim) * rc->esize;
    it.dst_offset = rc->dst_base + layout_offset(rc->dst, x, ndim) * rc->esize;
    run_add(rs, &it); /* may extend the sender's open run */
    for (d = 0; d < c; d++)
        x[d] = in->stop[d] - 1;
    /* the other k - 1 each open a run; the last stays open, all of it
     * this box's (the first may have extended an older one) */
    last->sender = it.sender;
    last->have = it.have;
    last->region = it.region;
    last->layer = it.layer;
    last->staged = it.staged;
    last->src_offset = layout_offset(rc->src, x, ndim) * rc->esize;
    last->dst_offset =
        rc->dst_base + layout_offset(rc->dst, x, ndim) * rc->esize;
    last->length = len;
    last->more_rows = 0;
    last->src_stride = 0;
    rs->count[rc->sender] += k - 1;
    return 1;
}

/* Emits the runs of box 'in': the longest suffix of dims contiguous in both
 * layouts is one run, and the dims before it are iterated odometer-style
 * (or only counted, on the counting pass, where count_runs can). */
static wst_status_t emit_runs(struct planner *p, const struct run_ctx *rc,
                              const struct wst_box *in)
{
    uint32_t ndim = in->ndim, c = ndim - 1, d;
    uint64_t ext[WST_MAX_DIMS], x[WST_MAX_DIMS], run;
    struct wst_plan_item it = {.sender = rc->sender,
                               .have = rc->have,
                               .region = rc->region,
                               .layer = rc->layer,
                               .staged = rc->staged};

    box_extents(in, ext);
    run = ext[c];
    /* a dim of extent 1 never breaks contiguity */
    while (c > 0 && (ext[c - 1] == 1 || (rc->src->stride[c - 1] == run &&
                                         rc->dst->stride[c - 1] == run)))
        run *= ext[--c];
    /* Short runs that follow each other in the destination but not in the
     * source (a column cut of a row-major tensor) become the rows of one
     * item instead of an item each (planner.h). */
    if (c > 0 && ext[c - 1] > 1 && ext[c - 1] - 1 <= UINT32_MAX &&
        run * rc->esize < WST_PLAN_ROW_MAX && rc->dst->stride[c - 1] == run &&
        rc->src->stride[c - 1] > run) {
        it.more_rows = (uint32_t)(ext[c - 1] - 1);
        it.src_stride = rc->src->stride[c - 1] * rc->esize;
        c--;
        if (p->runs.out == NULL && c > 0) {
            /* counting: items of rows never join one another */
            uint64_t k = 1;
            for (d = 0; d < c; d++)
                k *= ext[d];
            it.length = run * rc->esize;
            run_add(&p->runs, &it);
            p->runs.count[rc->sender] += k - 1;
            return WST_OK;
        }
    } else if (p->runs.out == NULL && c > 0 &&
               count_runs(p, rc, in, ext, c, run)) {
        return WST_OK;
    }
    it.length = run * rc->esize;
    memcpy(x, in->start, sizeof(x));
    for (;;) {
        it.src_offset = layout_offset(rc->src, x, ndim) * rc->esize;
        it.dst_offset =
            rc->dst_base + layout_offset(rc->dst, x, ndim) * rc->esize;
        run_add(&p->runs, &it);
        for (d = c; d-- > 0;) {
            if (++x[d] < in->stop[d])
                break;
            x[d] = in->start[d];
        }
        if (d == UINT32_MAX)
            return WST_OK;
    }
}

/* n_layers = largest layer index among the wants + 2 (the extra last layer
 * holds the global tensors), or 1 when there are no layer tensors. */
static wst_status_t count_layers(struct planner *p)
{
    uint32_t l, n = 1;
    size_t i;

    for (i = 0; i < p->in->n_wants; i++) {
        const char *name = p->in->wants[i].tensor.name;

        l = wst_tensor_layer(name);
        if (l == UINT32_MAX)
            continue;
        if (l >= PLAN_MAX_LAYERS - 1)
            return wst_plan_fail(p, WST_ERR_INVALID,
                                 "tensor %s: layer %u exceeds the limit of %u",
                                 name, l, PLAN_MAX_LAYERS - 2);
        if (l + 2 > n)
            n = l + 2;
    }
    p->n_layers = n;
    return WST_OK;
}

static uint32_t want_layer(const struct planner *p, const struct wst_want *w)
{
    uint32_t l = wst_tensor_layer(w->tensor.name);

    return l == UINT32_MAX ? p->n_layers - 1 : l;
}

static int same_shape(const struct wst_tensor_desc *a,
                      const struct wst_tensor_desc *b)
{
    return a->ndim == b->ndim &&
           memcmp(a->shape, b->shape, a->ndim * sizeof(a->shape[0])) == 0;
}

/* Every have of the tensor must agree with the want on dtype and shape,
 * whether or not it ends up chosen: a disagreement means the two sides
 * describe different models. */
static wst_status_t check_haves_agree(struct planner *p,
                                      const struct wst_want *w, size_t lo,
                                      size_t hi)
{
    const struct wst_tensor_desc *wt = &w->tensor, *ht;
    char a[256], b[256];
    size_t i;

    for (i = lo; i < hi; i++) {
        ht = &wst_plan_ref_have(p, &p->refs[i])->tensor;
        if (ht->dtype != wt->dtype)
            return wst_plan_fail(p, WST_ERR_DTYPE_MISMATCH,
                                 "tensor %s: sender %u has dtype %s, want %s",
                                 wt->name, p->refs[i].sender,
                                 wst_dtype_name(ht->dtype),
                                 wst_dtype_name(wt->dtype));
        if (!same_shape(ht, wt)) {
            fmt_dims(a, sizeof(a), ht->shape, ht->ndim);
            fmt_dims(b, sizeof(b), wt->shape, wt->ndim);
            return wst_plan_fail(p, WST_ERR_SHAPE_MISMATCH,
                                 "tensor %s: sender %u has shape %s, want %s",
                                 wt->name, p->refs[i].sender, a, b);
        }
    }
    return WST_OK;
}

/* ---- coverage ----------------------------------------------------------- */

/* Whether the want misses the have, by the dim-0 range copied in its ref
 * (the have itself is not touched). */
static int ref_misses(const struct have_ref *r, const struct wst_box *want)
{
    return r->hi0 <= want->start[0] || want->stop[0] <= r->lo0;
}

/* Takes from one have whatever of the want is still uncovered. */
static wst_status_t take_from_have(struct planner *p, struct run_ctx *rc,
                                   const struct wst_box *want_box,
                                   const struct have_ref *r)
{
    const struct wst_have *h;
    struct sub_have subs[WST_FLAT_MAX_BOXES];
    struct box_vec tmp;
    struct wst_box in;
    wst_status_t status = WST_OK;
    size_t n_subs, k, i;

    /* most haves of a sharded tensor miss a sharded want altogether */
    if (ref_misses(r, want_box))
        return WST_OK;
    h = wst_plan_ref_have(p, r);
    if (!h->flat && !box_intersect(want_box, &h->box, &in))
        return WST_OK;
    n_subs = have_subboxes(h, subs);
    rc->sender = r->sender;
    rc->have = r->have;
    for (k = 0; k < n_subs && p->cur.n > 0 && status == WST_OK; k++) {
        rc->src = &subs[k].lay;
        p->next.n = 0;
        for (i = 0; i < p->cur.n && status == WST_OK; i++) {
            if (!box_intersect(&p->cur.v[i], &subs[k].box, &in)) {
                status = box_push(&p->next, &p->cur.v[i]);
                continue;
            }
            status = emit_runs(p, rc, &in);
            if (status == WST_OK)
                status = box_subtract(&p->cur.v[i], &in, &p->next);
        }
        tmp = p->cur, p->cur = p->next, p->next = tmp;
    }
    return status;
}

/* Names the row-major first element left uncovered: the smallest start. */
static wst_status_t report_gap(struct planner *p, const struct wst_want *w,
                               size_t wi)
{
    const struct wst_box *first = &p->cur.v[0];
    char idx[256];
    size_t i;

    for (i = 1; i < p->cur.n; i++) {
        uint32_t d = 0;

        while (d < w->box.ndim && p->cur.v[i].start[d] == first->start[d])
            d++;
        if (d < w->box.ndim && p->cur.v[i].start[d] < first->start[d])
            first = &p->cur.v[i];
    }
    fmt_dims(idx, sizeof(idx), first->start, w->box.ndim);
    return wst_plan_fail(p, WST_ERR_COVERAGE,
                         "tensor %s: no sender has element %s (want %zu of "
                         "receiver %u)",
                         w->tensor.name, idx, wi, p->in->receiver_rank);
}

/* Starts loading the box of a have a few turns ahead (PREFETCH_AHEAD):
 * half of take_from_have was waiting for haves. */
/* Only haves the want does not miss: the others are never touched. */
static void prefetch_next(const struct planner *p, size_t r,
                          const struct wst_box *want)
{
    const struct wst_have *h;

    if (ref_misses(&p->refs[r], want))
        return;
    h = wst_plan_ref_have(p, &p->refs[r]);
    __builtin_prefetch(&h->box.start[0]);
    __builtin_prefetch(&h->flat);
}

static wst_status_t cover_want(struct planner *p, size_t wi)
{
    const struct wst_want *w = &p->in->wants[wi];
    struct layout dst;
    struct run_ctx rc = {.region = w->region,
                         .layer = want_layer(p, w),
                         .staged = w->staged != 0,
                         .esize = wst_dtype_size(w->tensor.dtype),
                         .dst_base = w->offset,
                         .dst = &dst};
    size_t lo, hi, m, k, r;
    uint32_t rot;
    wst_status_t status;

    if (wst_box_elems(&w->box) == 0)
        return WST_OK;
    wst_plan_find_refs(p, w->tensor.name, &lo, &hi);
    /* checked on the counting pass; the writing pass sees the same input */
    status = p->runs.out == NULL ? check_haves_agree(p, w, lo, hi) : WST_OK;
    if (status != WST_OK)
        return status;
    want_layout(w, &dst);
    p->cur.n = 0;
    status = box_push(&p->cur, &w->box);
    /* rotate so replicated tensors spread over senders, want by want */
    rot = p->in->n_senders ? (uint32_t)((p->in->receiver_rank + (uint64_t)wi) %
                                        p->in->n_senders)
                           : 0;
    for (m = lo; m < hi && p->refs[m].sender < rot; m++)
        ;
    for (k = 0; k < hi - lo && p->cur.n > 0 && status == WST_OK; k++) {
        r = m + k < hi ? m + k : lo + (m + k - hi);
        prefetch_next(p, lo + (r - lo + PREFETCH_AHEAD) % (hi - lo), &w->box);
        status = take_from_have(p, &rc, &w->box, &p->refs[r]);
    }
    if (status != WST_OK)
        return wst_plan_fail(p, status, "tensor %s: no memory for runs",
                             w->tensor.name);
    return p->cur.n > 0 ? report_gap(p, w, wi) : WST_OK;
}

/* ---- plan assembly ------------------------------------------------------ */

static int cmp_u64(uint64_t a, uint64_t b)
{
    return a < b ? -1 : (a > b);
}

/* (sender, layer, region, dst_offset) is the contract; the rest only makes
 * the order total so qsort's instability cannot change the hash. */
static int item_cmp(const void *pa, const void *pb)
{
    const struct wst_plan_item *a = pa, *b = pb;
    int r;

    if ((r = cmp_u64(a->sender, b->sender)) != 0 ||
        (r = cmp_u64(a->layer, b->layer)) != 0 ||
        (r = cmp_u64(a->region, b->region)) != 0 ||
        (r = cmp_u64(a->dst_offset, b->dst_offset)) != 0 ||
        (r = cmp_u64(a->have, b->have)) != 0 ||
        (r = cmp_u64(a->src_offset, b->src_offset)) != 0)
        return r;
    return cmp_u64(a->length, b->length);
}

/* Runs of different want entries can meet in both memories (e.g. q, k, v
 * shards of one fused region); merge them once sorted. */
static void coalesce_items(struct item_vec *iv)
{
    size_t i, n = 0;

    for (i = 0; i < iv->n; i++) {
        struct wst_plan_item *last = n ? &iv->v[n - 1] : NULL;
        const struct wst_plan_item *it = &iv->v[i];

        if (last != NULL && last->more_rows == 0 && it->more_rows == 0 &&
            last->sender == it->sender && last->have == it->have &&
            last->region == it->region && last->layer == it->layer &&
            last->src_offset + last->length == it->src_offset &&
            last->dst_offset + last->length == it->dst_offset)
            last->length += it->length;
        else
            iv->v[n++] = *it;
    }
    iv->n = n;
}

static int items_sorted(const struct wst_plan_item *v, size_t n)
{
    size_t i;

    for (i = 1; i < n; i++)
        if (item_cmp(&v[i - 1], &v[i]) > 0)
            return 0;
    return 1;
}

/* Puts each sender's slice in plan order. Runs were made want by want in
 * (layer, region, offset) order, so a slice is usually in order already:
 * the check is linear, and the sort, where a sender's layout needs one,
 * covers that sender only. */
static void sort_slices(struct planner *p)
{
    const struct run_sink *rs = &p->runs;
    uint32_t s;

    for (s = 0; s < p->in->n_senders; s++) {
        struct wst_plan_item *v = rs->out + rs->start[s];

        if (!items_sorted(v, rs->count[s]))
            qsort(v, rs->count[s], sizeof(*v), item_cmp);
    }
}

/* Takes the runs of the second pass as the plan's items. */
static wst_status_t plan_assemble(struct planner *p, size_t total,
                                  struct wst_plan **plan_p)
{
    uint32_t n_senders = p->in->n_senders, n_layers = p->n_layers;
    size_t n_cells = (size_t)n_senders * n_layers, i;
    struct item_vec items = {.v = p->runs.out, .n = total, .cap = total};
    struct wst_plan *plan;

    sort_slices(p);
    coalesce_items(&items);
    plan = calloc(1, sizeof(*plan));
    if (plan == NULL)
        goto err_no_memory;
    plan->sender_first = calloc((size_t)n_senders + 1, sizeof(size_t));
    if (plan->sender_first == NULL)
        goto err_free_plan;
    plan->layer_bytes = calloc(n_cells ? n_cells : 1, sizeof(uint64_t));
    if (plan->layer_bytes == NULL)
        goto err_free_sender_first;
    for (i = 0; i < items.n; i++) {
        const struct wst_plan_item *it = &items.v[i];

        plan->sender_first[it->sender + 1]++;
        plan->layer_bytes[(size_t)it->sender * n_layers + it->layer] +=
            wst_plan_item_bytes(it);
        plan->total_bytes += wst_plan_item_bytes(it);
    }
    for (i = 0; i < n_senders; i++)
        plan->sender_first[i + 1] += plan->sender_first[i];
    plan->n_senders = n_senders;
    plan->n_layers = n_layers;
    plan->n_items = items.n;
    plan->items = items.v; /* ownership moves to the plan */
    p->runs.out = NULL;
    plan->hash =
        wst_plan_hash_items(n_senders, n_layers, plan->items, plan->n_items);
    *plan_p = plan;
    return WST_OK;

err_free_sender_first:
    free(plan->sender_first);
err_free_plan:
    free(plan);
err_no_memory:
    return wst_plan_fail(p, WST_ERR_NO_MEMORY,
                         "planner: no memory for %zu items", items.n);
}

/* Want order for making runs: (layer, region, offset), the plan's own
 * order after the sender, so that each sender's runs come out sorted. */
struct want_key {
    uint32_t layer, region;
    uint64_t offset;
    size_t index;
};

static int want_key_cmp(const void *pa, const void *pb)
{
    const struct want_key *a = pa, *b = pb;
    int r;

    if ((r = cmp_u64(a->layer, b->layer)) != 0 ||
        (r = cmp_u64(a->region, b->region)) != 0 ||
        (r = cmp_u64(a->offset, b->offset)) != 0)
        return r;
    return cmp_u64(a->index, b->index);
}

/* Covers every want, in want_key order; which sender is chosen depends on
 * the want's own index only, so the order changes no item. */
static wst_status_t cover_wants(struct planner *p)
{
    size_t n = p->in->n_wants, i;
    struct want_key *keys = malloc((n ? n : 1) * sizeof(*keys));
    wst_status_t status = WST_OK;

    if (keys == NULL)
        return wst_plan_fail(p, WST_ERR_NO_MEMORY,
                             "planner: no memory to order %zu wants", n);
    for (i = 0; i < n; i++) {
        const struct wst_want *w = &p->in->wants[i];

        keys[i] = (struct want_key){.layer = want_layer(p, w),
                                    .region = w->region,
                                    .offset = w->offset,
                                    .index = i};
    }
    qsort(keys, n, sizeof(*keys), want_key_cmp);
    for (i = 0; i < n && status == WST_OK; i++)
        status = cover_want(p, keys[i].index);
    free(keys);
    return status;
}

static wst_status_t runs_init(struct planner *p)
{
    size_t n = p->in->n_senders ? p->in->n_senders : 1;
    struct run_sink *rs = &p->runs;

    rs->last = malloc(n * sizeof(*rs->last));
    rs->count = calloc(n, sizeof(*rs->count));
    rs->start = calloc(n + 1, sizeof(*rs->start));
    if (rs->last == NULL || rs->count == NULL || rs->start == NULL)
        return wst_plan_fail(p, WST_ERR_NO_MEMORY,
                             "planner: no memory for %u senders",
                             p->in->n_senders);
    return WST_OK;
}

/* After the counting pass: each sender's slice of one exact array, and the
 * counts back to 0 for the writing pass. */
static wst_status_t runs_alloc(struct planner *p, size_t *total_p)
{
    struct run_sink *rs = &p->runs;
    size_t total = 0;
    uint32_t s;

    for (s = 0; s < p->in->n_senders; s++) {
        rs->start[s] = total;
        total += rs->count[s];
        rs->count[s] = 0;
    }
    rs->start[p->in->n_senders] = total;
    rs->out = malloc((total ? total : 1) * sizeof(*rs->out));
    if (rs->out == NULL)
        return wst_plan_fail(p, WST_ERR_NO_MEMORY,
                             "planner: no memory for %zu items", total);
    wst_plan_advise_huge(rs->out, total * sizeof(*rs->out));
    *total_p = total;
    return WST_OK;
}

static void runs_free(struct run_sink *rs)
{
    free(rs->out); /* NULL once the plan owns it */
    free(rs->last);
    free(rs->count);
    free(rs->start);
}

wst_status_t wst_plan_build(const struct wst_plan_input *in,
                            const struct wst_logger *lg,
                            struct wst_plan **plan_p, char *err, size_t errlen)
{
    struct planner p = {.in = in, .lg = lg, .err = err, .errlen = errlen};
    wst_status_t status;
    size_t total = 0;

    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (in == NULL || plan_p == NULL)
        return wst_plan_fail(&p, WST_ERR_INVALID, "planner: missing input");
    status = wst_plan_validate_input(&p);
    if (status == WST_OK)
        status =
            wst_plan_index_haves(&p); /* checks the haves, as validate_input */
    if (status == WST_OK)
        status = wst_plan_check_expert_wants(&p);
    if (status == WST_OK)
        status = count_layers(&p);
    if (status != WST_OK)
        goto out_free_index;
    status = runs_init(&p);
    if (status != WST_OK)
        goto out_free_runs;
    status = cover_wants(&p); /* counts */
    if (status == WST_OK)
        status = runs_alloc(&p, &total);
    if (status == WST_OK)
        status = cover_wants(&p); /* writes */
    if (status == WST_OK)
        status = runs_close(&p, in->n_senders);
    if (status == WST_OK)
        status = plan_assemble(&p, total, plan_p);
out_free_runs:
    runs_free(&p.runs);
    free(p.cur.v);
    free(p.next.v);
out_free_index:
    free(p.refs);
    free(p.slots);
    free(p.first);
    return status;
}
void wst_plan_destroy(struct wst_plan *plan)
{
    if (plan == NULL)
        return;
    free(plan->items);
    free(plan->sender_first);
    free(plan->layer_bytes);
    free(plan);
}
