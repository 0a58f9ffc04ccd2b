/* manifest.c - validation and geometry of tensors, boxes, haves and wants.
 *
 * Everything here is arithmetic on the plain structs of manifest.h. Entries
 * arrive from the wire, so every product and sum is checked for uint64
 * overflow before it is trusted; once an entry has passed its check the
 * planner may compute with it freely.
 */
#include "manifest.h"

#include "dtype.h"

#include <string.h>

/* a * b into *r; returns nonzero on overflow. */
static int mul_overflows(uint64_t a, uint64_t b, uint64_t *r)
{
    return __builtin_mul_overflow(a, b, r);
}

static int add_overflows(uint64_t a, uint64_t b, uint64_t *r)
{
    return __builtin_add_overflow(a, b, r);
}

uint32_t wst_tensor_layer(const char *name)
{
    static const char prefix[] = "model.layers.";
    const char *p;
    uint64_t l = 0;

    if (name == NULL || strncmp(name, prefix, sizeof(prefix) - 1) != 0)
        return UINT32_MAX;
    p = name + sizeof(prefix) - 1;
    if (*p < '0' || *p > '9')
        return UINT32_MAX;
    for (; *p >= '0' && *p <= '9'; p++) {
        l = l * 10 + (uint64_t)(*p - '0');
        /* UINT32_MAX itself is the "global tensor" marker, so refuse it */
        if (l >= UINT32_MAX)
            return UINT32_MAX;
    }
    return *p == '.' ? (uint32_t)l : UINT32_MAX;
}

wst_status_t wst_tensor_desc_check(const struct wst_tensor_desc *t,
                                   uint64_t *elems_p, uint64_t *bytes_p)
{
    uint64_t elems = 1, bytes;
    size_t esize;
    uint32_t d;

    if (t == NULL || memchr(t->name, '\0', WST_NAME_MAX) == NULL ||
        t->name[0] == '\0')
        return WST_ERR_INVALID;
    esize = wst_dtype_size(t->dtype);
    if (esize == 0 || t->ndim < 1 || t->ndim > WST_MAX_DIMS)
        return WST_ERR_INVALID;
    for (d = 0; d < t->ndim; d++) {
        if (t->shape[d] == 0 || mul_overflows(elems, t->shape[d], &elems))
            return WST_ERR_INVALID;
    }
    if (mul_overflows(elems, esize, &bytes))
        return WST_ERR_INVALID;
    if (elems_p != NULL)
        *elems_p = elems;
    if (bytes_p != NULL)
        *bytes_p = bytes;
    return WST_OK;
}

wst_status_t wst_box_check(const struct wst_tensor_desc *t,
                           const struct wst_box *box, int flat)
{
    uint64_t elems = 1;
    uint32_t d;

    if (t == NULL || box == NULL || t->ndim < 1 || t->ndim > WST_MAX_DIMS)
        return WST_ERR_INVALID;
    if (flat) {
        for (d = 0; d < t->ndim; d++) {
            if (mul_overflows(elems, t->shape[d], &elems))
                return WST_ERR_INVALID;
        }
        if (box->ndim != 1 || box->start[0] > box->stop[0] ||
            box->stop[0] > elems)
            return WST_ERR_INVALID;
        return WST_OK;
    }
    if (box->ndim != t->ndim)
        return WST_ERR_INVALID;
    for (d = 0; d < box->ndim; d++) {
        if (box->start[d] > box->stop[d] || box->stop[d] > t->shape[d])
            return WST_ERR_INVALID;
    }
    return WST_OK;
}

uint64_t wst_box_elems(const struct wst_box *box)
{
    uint64_t n = 1;
    uint32_t d;

    for (d = 0; d < box->ndim && d < WST_MAX_DIMS; d++)
        n *= box->stop[d] - box->start[d];
    return n;
}

/* Splits the flat range [a, b) of the sub-tensor spanned by dims d.. into
 * boxes: a partial head slice, a full middle block, a partial tail slice. */
static void flat_split(const struct wst_tensor_desc *t, uint32_t d, uint64_t a,
                       uint64_t b, struct wst_box *pre, struct wst_box *out,
                       size_t *n)
{
    uint64_t inner = 1, ia, ib, ra, rb;
    uint32_t j;

    if (a >= b)
        return;
    if (d == t->ndim - 1) {
        pre->start[d] = a;
        pre->stop[d] = b;
        out[(*n)++] = *pre;
        return;
    }
    for (j = d + 1; j < t->ndim; j++)
        inner *= t->shape[j];
    ia = a / inner, ra = a % inner, ib = b / inner, rb = b % inner;
    if (ia == ib) {
        pre->start[d] = ia, pre->stop[d] = ia + 1;
        flat_split(t, d + 1, ra, rb, pre, out, n);
        return;
    }
    if (ra != 0) {
        pre->start[d] = ia, pre->stop[d] = ia + 1;
        flat_split(t, d + 1, ra, inner, pre, out, n);
        ia++;
    }
    if (ia < ib) {
        pre->start[d] = ia, pre->stop[d] = ib;
        for (j = d + 1; j < t->ndim; j++)
            pre->start[j] = 0, pre->stop[j] = t->shape[j];
        out[(*n)++] = *pre;
    }
    if (rb != 0) {
        pre->start[d] = ib, pre->stop[d] = ib + 1;
        flat_split(t, d + 1, 0, rb, pre, out, n);
    }
}

size_t wst_flat_boxes(const struct wst_tensor_desc *t, uint64_t start,
                      uint64_t stop, struct wst_box *out)
{
    struct wst_box pre;
    size_t n = 0;

    memset(&pre, 0, sizeof(pre));
    pre.ndim = t->ndim;
    flat_split(t, 0, start, stop, &pre, out, &n);
    return n;
}

/* A have as N-D boxes: itself, or the pieces of its flat range. */
static size_t have_boxes(const struct wst_have *h, struct wst_box *out)
{
    if (h->flat)
        return wst_flat_boxes(&h->tensor, h->box.start[0], h->box.stop[0], out);
    out[0] = h->box;
    return wst_box_elems(&h->box) > 0 ? 1 : 0;
}

/* Nonzero when a and b (same ndim) share an element; its index to x. */
static int boxes_meet(const struct wst_box *a, const struct wst_box *b,
                      uint64_t *x)
{
    uint32_t d;

    for (d = 0; d < a->ndim; d++) {
        uint64_t lo = a->start[d] > b->start[d] ? a->start[d] : b->start[d];
        uint64_t hi = a->stop[d] < b->stop[d] ? a->stop[d] : b->stop[d];
        if (lo >= hi)
            return 0;
        x[d] = lo;
    }
    return 1;
}

int wst_haves_overlap(const struct wst_have *a, const struct wst_have *b,
                      uint64_t *x_p)
{
    struct wst_box ba[WST_FLAT_MAX_BOXES], bb[WST_FLAT_MAX_BOXES];
    size_t na = have_boxes(a, ba), nb = have_boxes(b, bb), i, j;
    uint64_t x[WST_MAX_DIMS];

    for (i = 0; i < na; i++) {
        for (j = 0; j < nb; j++) {
            if (!boxes_meet(&ba[i], &bb[j], x))
                continue;
            if (x_p != NULL)
                memcpy(x_p, x, a->tensor.ndim * sizeof(*x));
            return 1;
        }
    }
    return 0;
}

/* Span of a want in bytes; nonzero return on uint64 overflow (only possible
 * for entries that have not passed wst_want_check). */
static int want_span_overflows(const struct wst_want *w, uint64_t *span_p)
{
    uint32_t last = w->box.ndim - 1, d;
    uint64_t esize = wst_dtype_size(w->tensor.dtype);
    uint64_t rows = 1, row_bytes, pitch, span;

    if (wst_box_elems(&w->box) == 0) {
        *span_p = 0;
        return 0;
    }
    if (mul_overflows(w->box.stop[last] - w->box.start[last], esize,
                      &row_bytes))
        return 1;
    pitch = w->row_pitch != 0 ? w->row_pitch : row_bytes;
    for (d = 0; d < last; d++) {
        if (mul_overflows(rows, w->box.stop[d] - w->box.start[d], &rows))
            return 1;
    }
    if (mul_overflows(rows - 1, pitch, &span) ||
        add_overflows(span, row_bytes, &span))
        return 1;
    *span_p = span;
    return 0;
}

uint64_t wst_want_span(const struct wst_want *w)
{
    uint64_t span;

    if (w->box.ndim < 1 || w->box.ndim > WST_MAX_DIMS)
        return 0;
    return want_span_overflows(w, &span) ? UINT64_MAX : span;
}

static wst_status_t want_pitch_check(const struct wst_want *w)
{
    uint64_t esize = wst_dtype_size(w->tensor.dtype);
    uint32_t last = w->box.ndim - 1;
    uint64_t row_bytes;

    if (w->row_pitch == 0)
        return WST_OK;
    if (mul_overflows(w->box.stop[last] - w->box.start[last], esize,
                      &row_bytes) ||
        w->row_pitch % esize != 0 || w->row_pitch < row_bytes)
        return WST_ERR_INVALID;
    return WST_OK;
}

wst_status_t wst_want_expert_check(const struct wst_want *w)
{
    const struct wst_want_expert *e;

    if (w == NULL)
        return WST_ERR_INVALID;
    e = &w->expert;
    if (!e->grouped)
        return e->ep_rank == 0 && e->ep_size == 0 ? WST_OK : WST_ERR_INVALID;
    if (e->ep_size < 1 || e->ep_rank >= e->ep_size || w->tensor.ndim < 2)
        return WST_ERR_INVALID;
    return WST_OK;
}

wst_status_t wst_want_expert_range(const struct wst_want *w, uint64_t *start_p,
                                   uint64_t *stop_p)
{
    uint64_t per;

    if (w == NULL || !w->expert.grouped || wst_want_expert_check(w) != WST_OK ||
        w->tensor.ndim > WST_MAX_DIMS)
        return WST_ERR_INVALID;
    if (w->tensor.shape[0] % w->expert.ep_size != 0)
        return WST_ERR_EXPERT_DIVISIBILITY;
    /* ep_rank < ep_size, so neither product can exceed shape[0] */
    per = w->tensor.shape[0] / w->expert.ep_size;
    if (start_p != NULL)
        *start_p = w->expert.ep_rank * per;
    if (stop_p != NULL)
        *stop_p = (w->expert.ep_rank + 1) * per;
    return WST_OK;
}

wst_status_t wst_want_check(const struct wst_want *w,
                            const struct wst_region_desc *regions,
                            size_t n_regions)
{
    uint64_t span, end;
    wst_status_t status;

    if (w == NULL)
        return WST_ERR_INVALID;
    status = wst_tensor_desc_check(&w->tensor, NULL, NULL);
    if (status == WST_OK)
        status = wst_box_check(&w->tensor, &w->box, 0);
    if (status == WST_OK)
        status = want_pitch_check(w);
    if (status == WST_OK)
        status = wst_want_expert_check(w);
    if (status != WST_OK)
        return status;
    if (regions == NULL || w->region >= n_regions)
        return WST_ERR_INVALID;
    if (want_span_overflows(w, &span) || add_overflows(w->offset, span, &end) ||
        end > regions[w->region].length)
        return WST_ERR_INVALID;
    return WST_OK;
}

wst_status_t wst_have_check(const struct wst_have *h)
{
    wst_status_t status;

    if (h == NULL)
        return WST_ERR_INVALID;
    status = wst_tensor_desc_check(&h->tensor, NULL, NULL);
    if (status == WST_OK)
        status = wst_box_check(&h->tensor, &h->box, h->flat);
    if (status != WST_OK)
        return status;
    if (h->mem != WST_MEM_HOST && h->mem != WST_MEM_CUDA)
        return WST_ERR_INVALID;
    return WST_OK;
}
