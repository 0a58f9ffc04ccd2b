/* pack_cpu.c - strided descriptions of boxes, and the CPU twins of the pack
 * and unpack kernels.
 *
 * wst_strided_from_box describes a box of a row-major tensor as loops around
 * one contiguous run, in three steps:
 *
 *   1. every dimension whose box extent is above 1 becomes a loop of that
 *      count, with the tensor's byte stride of that dimension (an extent of
 *      1 only moves the origin);
 *   2. the run starts as one element; while the innermost loop's stride
 *      equals the run's length, that loop is contiguous with it and folds
 *      into it (the run grows outward over dimensions the box covers
 *      whole);
 *   3. a loop folds into the loop outside it when the outer stride equals
 *      the inner count times the inner stride: the pair walks evenly spaced
 *      positions in the same order as one loop of the product.
 *
 *   [4096, 14336] cols [5376, 7168)  ->  4096 x { stride 28672 } run 3584 B
 *   [128, 768, 2048] dim 0 [16, 32)  ->  no loop, run 48 MiB
 *
 * The twins walk the loops as an odometer and memcpy one run per position;
 * they are the reference, so they stay simple rather than fast.
 */
#include "pack.h"

#include <string.h>

/* *p *= f unless the product overflows (then *p is left alone). */
static int mul_ok(uint64_t *p, uint64_t f)
{
    if (f != 0 && *p > UINT64_MAX / f) {
        return 0;
    }
    *p *= f;
    return 1;
}

static int add_ok(uint64_t *p, uint64_t a)
{
    if (*p > UINT64_MAX - a) {
        return 0;
    }
    *p += a;
    return 1;
}

/* Arguments, the box inside the shape, and a tensor whose byte size fits in
 * 64 bits (so every stride and offset computed from it fits too). */
static wst_status_t box_check(uint32_t ndim, const uint64_t *shape,
                              const uint64_t *start, const uint64_t *extent,
                              size_t elem_size)
{
    uint64_t bytes = elem_size;

    if (shape == NULL || start == NULL || extent == NULL || elem_size == 0 ||
        ndim == 0 || ndim > WST_PACK_MAX_DIMS) {
        return WST_ERR_INVALID;
    }
    for (uint32_t d = 0; d < ndim; d++) {
        /* extent <= shape first, so shape - extent cannot wrap. */
        if (extent[d] == 0 || extent[d] > shape[d] ||
            start[d] > shape[d] - extent[d]) {
            return WST_ERR_INVALID;
        }
        if (!mul_ok(&bytes, shape[d])) {
            return WST_ERR_INVALID;
        }
    }
    return WST_OK;
}

/* Step 3 of the file comment: appends loop (count, stride) to s, folding it
 * into the loop before it when the two are evenly spaced. */
static void loop_append(struct wst_strided *s, uint64_t count, uint64_t stride)
{
    uint32_t last = s->ndim - 1;

    if (s->ndim > 0 && s->stride[last] == count * stride) {
        s->count[last] *= count;
        s->stride[last] = stride;
        return;
    }
    s->count[s->ndim] = count;
    s->stride[s->ndim] = stride;
    s->ndim++;
}

wst_status_t wst_strided_from_box(uint32_t ndim, const uint64_t *shape,
                                  const uint64_t *start, const uint64_t *extent,
                                  size_t elem_size, struct wst_strided *s,
                                  uint64_t *offset_p)
{
    uint64_t stride[WST_PACK_MAX_DIMS]; /* tensor byte strides */
    struct wst_strided out;
    uint64_t offset = 0;
    uint32_t inner; /* dims [inner, ndim) are in the run */
    wst_status_t status;

    if (s == NULL || offset_p == NULL) {
        return WST_ERR_INVALID;
    }
    status = box_check(ndim, shape, start, extent, elem_size);
    if (status != WST_OK) {
        return status;
    }
    /* No overflow below: every product is at most the tensor's size. */
    stride[ndim - 1] = elem_size;
    for (uint32_t d = ndim - 1; d > 0; d--) {
        stride[d - 1] = stride[d] * shape[d];
    }
    for (uint32_t d = 0; d < ndim; d++) {
        offset += start[d] * stride[d];
    }
    /* Step 2, with step 1's dropping of extent-1 dimensions: a dimension
     * joins the run when its stride is the run's length so far. */
    out.run_bytes = elem_size;
    inner = ndim;
    while (inner > 0 &&
           (extent[inner - 1] == 1 || stride[inner - 1] == out.run_bytes)) {
        inner--;
        out.run_bytes *= extent[inner];
    }
    out.ndim = 0;
    for (uint32_t d = 0; d < inner; d++) {
        if (extent[d] > 1) {
            loop_append(&out, extent[d], stride[d]);
        }
    }
    for (uint32_t d = out.ndim; d < WST_PACK_MAX_DIMS; d++) {
        out.count[d] = 1;
        out.stride[d] = 0;
    }
    *s = out;
    *offset_p = offset;
    return WST_OK;
}

wst_status_t wst_strided_check(const struct wst_strided *s,
                               uint64_t *dense_bytes_p, uint64_t *span_bytes_p)
{
    uint64_t dense, span;

    if (s == NULL || s->ndim > WST_PACK_MAX_DIMS || s->run_bytes == 0) {
        return WST_ERR_INVALID;
    }
    dense = s->run_bytes;
    span = s->run_bytes;
    for (uint32_t d = 0; d < s->ndim; d++) {
        uint64_t reach = s->count[d] - 1; /* last index times stride */

        if (s->count[d] == 0 || !mul_ok(&dense, s->count[d]) ||
            !mul_ok(&reach, s->stride[d]) || !add_ok(&span, reach)) {
            return WST_ERR_INVALID;
        }
    }
    if (dense_bytes_p != NULL) {
        *dense_bytes_p = dense;
    }
    if (span_bytes_p != NULL) {
        *span_bytes_p = span;
    }
    return WST_OK;
}

/* Copies one run per position, in order: the odometer idx[] counts
 * positions with the last dimension fastest, 'off' follows it on the
 * strided side, and the dense side advances one run per position. 'pack'
 * says which of dst and src is the dense side. */
static void walk(unsigned char *dst, const unsigned char *src,
                 const struct wst_strided *s, int pack)
{
    uint64_t idx[WST_PACK_MAX_DIMS] = {0};
    uint64_t positions = 1;
    uint64_t off = 0;

    for (uint32_t d = 0; d < s->ndim; d++) {
        positions *= s->count[d];
    }
    for (uint64_t p = 0; p < positions; p++) {
        uint64_t dense_off = p * s->run_bytes;

        memcpy(dst + (pack ? dense_off : off), src + (pack ? off : dense_off),
               s->run_bytes);
        for (uint32_t d = s->ndim; d-- > 0;) {
            off += s->stride[d];
            if (++idx[d] < s->count[d]) {
                break;
            }
            off -= s->count[d] * s->stride[d];
            idx[d] = 0;
        }
    }
}

void wst_pack_cpu(void *dense, const void *strided, const struct wst_strided *s)
{
    walk(dense, strided, s, 1);
}

void wst_unpack_cpu(void *strided, const void *dense,
                    const struct wst_strided *s)
{
    walk(strided, dense, s, 0);
}
