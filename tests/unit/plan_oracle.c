/* plan_oracle.c - see plan_oracle.h. */
#include "plan_oracle.h"

#include <string.h>

#include "dtype.h"

uint64_t oracle_flat_index(const struct wst_tensor_desc *t, const uint64_t *x)
{
    uint64_t f = 0;

    for (uint32_t d = 0; d < t->ndim; d++)
        f = f * t->shape[d] + x[d];
    return f;
}

int oracle_have_owns(const struct wst_have *h, const uint64_t *x)
{
    uint64_t f = oracle_flat_index(&h->tensor, x);

    if (h->flat)
        return f >= h->box.start[0] && f < h->box.stop[0];
    for (uint32_t d = 0; d < h->box.ndim; d++)
        if (x[d] < h->box.start[d] || x[d] >= h->box.stop[d])
            return 0;
    return 1;
}

uint64_t oracle_have_offset(const struct wst_have *h, const uint64_t *x)
{
    uint64_t es = wst_dtype_size(h->tensor.dtype), off = 0;

    if (h->flat)
        return (oracle_flat_index(&h->tensor, x) - h->box.start[0]) * es;
    for (uint32_t d = 0; d < h->box.ndim; d++)
        off = off * (h->box.stop[d] - h->box.start[d]) + x[d] - h->box.start[d];
    return off * es;
}

uint64_t oracle_want_offset(const struct wst_want *w, const uint64_t *x)
{
    uint64_t es = wst_dtype_size(w->tensor.dtype), rows = 0;
    uint32_t last = w->box.ndim - 1;
    uint64_t pitch = w->row_pitch
                         ? w->row_pitch
                         : (w->box.stop[last] - w->box.start[last]) * es;

    for (uint32_t d = 0; d < last; d++)
        rows =
            rows * (w->box.stop[d] - w->box.start[d]) + x[d] - w->box.start[d];
    return w->offset + rows * pitch + (x[last] - w->box.start[last]) * es;
}

int oracle_box_next(const struct wst_box *b, uint64_t *x)
{
    uint32_t d = b->ndim;

    while (d-- > 0) {
        if (++x[d] < b->stop[d])
            return 1;
        x[d] = b->start[d];
    }
    return 0;
}

int64_t oracle_chosen_source(const struct wst_plan_input *in, size_t wi,
                             const uint64_t *x)
{
    const struct wst_want *w = &in->wants[wi];
    uint32_t n_s = in->n_senders, k, snd;
    size_t h;

    for (k = 0; k < n_s; k++) {
        snd = (uint32_t)((in->receiver_rank + wi + k) % n_s);
        for (h = 0; h < in->n_haves[snd]; h++) {
            if (strcmp(in->haves[snd][h].tensor.name, w->tensor.name) == 0 &&
                oracle_have_owns(&in->haves[snd][h], x))
                return (int64_t)snd * 256 + (int64_t)h;
        }
    }
    return -1;
}

int oracle_has_gap(const struct wst_plan_input *in)
{
    uint64_t x[WST_MAX_DIMS];
    size_t wi;

    for (wi = 0; wi < in->n_wants; wi++) {
        if (wst_box_elems(&in->wants[wi].box) == 0)
            continue;
        memcpy(x, in->wants[wi].box.start, sizeof(x));
        do {
            if (oracle_chosen_source(in, wi, x) < 0)
                return 1;
        } while (oracle_box_next(&in->wants[wi].box, x));
    }
    return 0;
}
