/* manifest.h - tensors, boxes, have entries, want entries and regions.
 *
 * These plain structs are what the planner consumes and what the codec
 * (proto/codec.h) converts to and from wire messages. They hold no pointers
 * except where noted, so arrays of them are owned by whoever allocated the
 * array and can be copied with memcpy.
 *
 * A box is [start, stop) per dimension of a tensor's global shape. A flat box
 * (FSDP1-style) is one [start, stop) range over the tensor's row-major
 * flattened view; it is only valid in a have entry. Boxes may be empty.
 *
 * Memory layout of the bytes a box describes:
 *  - have, N-D box: dense row-major array of the box's extents, at the start
 *    of the registered shard buffer;
 *  - have, flat box: the flattened elements [start, stop) contiguously;
 *  - want: row-major array of the box's extents at 'offset' bytes into the
 *    destination region; rows (last dimension) are 'row_pitch' bytes apart
 *    (0 means dense: box extent of the last dim times the element size),
 *    and outer dimensions are dense multiples of that.
 */
#ifndef WST_MANIFEST_H
#define WST_MANIFEST_H

#include <stddef.h>
#include <stdint.h>
#include <wstream/status.h>

#define WST_MAX_DIMS 8
#define WST_NAME_MAX 256 /* bytes, including the terminating NUL */

struct wst_tensor_desc {
    char name[WST_NAME_MAX];
    enum wst_dtype dtype;
    uint32_t ndim; /* 1..WST_MAX_DIMS */
    uint64_t shape[WST_MAX_DIMS];
};

struct wst_box {
    uint32_t ndim; /* equals the tensor's ndim, or 1 for a flat box */
    uint64_t start[WST_MAX_DIMS];
    uint64_t stop[WST_MAX_DIMS];
};

/* One shard a sender owns: a box of one tensor in one buffer. A sender may
 * list several haves of one tensor (slices, each its own buffer; the
 * sender keeps them disjoint); plan items name a have, not a tensor. */
struct wst_have {
    struct wst_tensor_desc tensor;
    struct wst_box box;
    int flat; /* nonzero: box is 1-D over the flattened tensor */
    enum wst_mem_type mem;
};

/* What makes a want an expert want. Grouped expert tensors travel as
 * "model.layers.{l}.mlp.experts.{proj}.weight" of shape [E, rows, cols],
 * dim 0 the global expert id (DESIGN.md section 2). A receiver at ep rank r
 * of ep_size holds the E/ep_size experts starting at r*E/ep_size (linear
 * placement), so its want box must be exactly that range of dim 0 and the
 * whole of every other dim; the planner refuses anything else (planner.h).
 * All zero: a dense want. */
struct wst_want_expert {
    int grouped;      /* nonzero: dim 0 is the global expert id */
    uint32_t ep_rank; /* < ep_size */
    uint32_t ep_size; /* >= 1 */
};

/* One box of a checkpoint tensor a receiver needs, and where it goes. */
struct wst_want {
    struct wst_tensor_desc tensor;
    struct wst_box box; /* N-D, never flat */
    uint32_t region;    /* index into the receiver's region table */
    uint64_t offset;    /* bytes into the region of the box origin */
    uint64_t row_pitch; /* bytes between rows; 0 = dense */
    /* zeroed for dense tensors */
    struct wst_want_expert expert;
    /* nonzero: 'region' is the receiver's expert staging; its items wait
     * for the layer's credit (DESIGN.md section 3) */
    int staged;
};

/* One block of destination memory. */
struct wst_region_desc {
    char name[WST_NAME_MAX];
    uint64_t length; /* bytes */
    enum wst_mem_type mem;
};

/* Layer index of a checkpoint tensor name: l for "model.layers.{l}.*",
 * otherwise UINT32_MAX (a global tensor: embeddings, final norm, lm_head).
 * The planner puts global tensors in one extra layer after the last. */
uint32_t wst_tensor_layer(const char *name);

/* Checks a tensor description: NUL-terminated non-empty name, known dtype,
 * 1 <= ndim <= WST_MAX_DIMS, nonzero dims, total bytes without overflow.
 * On success stores the element count and byte size (either may be NULL). */
wst_status_t wst_tensor_desc_check(const struct wst_tensor_desc *t,
                                   uint64_t *elems_p, uint64_t *bytes_p);

/* Checks a box against its tensor: ndim matches (1 for flat), start <= stop
 * <= extent (flat: <= element count). */
wst_status_t wst_box_check(const struct wst_tensor_desc *t,
                           const struct wst_box *box, int flat);

/* Number of elements in a box (0 for empty). Box must have passed
 * wst_box_check, so the product cannot overflow. */
uint64_t wst_box_elems(const struct wst_box *box);

/* A flat range splits into at most 2*ndim-1 N-D boxes. */
#define WST_FLAT_MAX_BOXES (2 * WST_MAX_DIMS)

/* The N-D boxes (ndim of the tensor) that together hold elements
 * [start, stop) of t's row-major flattened view, disjoint and in row-major
 * order: a partial head, a full middle block and a partial tail per dim.
 * Writes at most WST_FLAT_MAX_BOXES to 'out' and returns their number (0
 * for an empty range). The range must have passed wst_box_check. */
size_t wst_flat_boxes(const struct wst_tensor_desc *t, uint64_t start,
                      uint64_t stop, struct wst_box *out);

/* Whether two haves of one tensor (the same ndim and shape; either may be
 * flat) hold a common element. When they do, its N-D index (tensor ndim
 * entries) goes to x_p (may be NULL). Both must have passed wst_have_check.
 * Empty boxes overlap nothing. */
int wst_haves_overlap(const struct wst_have *a, const struct wst_have *b,
                      uint64_t *x_p);

/* Bytes of destination memory a want entry spans in its region, from
 * 'offset' to one past its last byte (accounts for row_pitch). 0 if empty. */
uint64_t wst_want_span(const struct wst_want *w);

/* Checks an expert descriptor on its own: all zero for a dense want; for a
 * grouped one, ep_size >= 1, ep_rank < ep_size and a tensor of ndim >= 2.
 * Placement rules (divisibility, dim-0 range) are the planner's refusals. */
wst_status_t wst_want_expert_check(const struct wst_want *w);

/* The dim-0 range [*start_p, *stop_p) that linear placement gives a grouped
 * want: [ep_rank*E/ep_size, (ep_rank+1)*E/ep_size), E = shape[0]. Returns
 * WST_ERR_INVALID for a dense want or a bad descriptor and
 * WST_ERR_EXPERT_DIVISIBILITY when ep_size does not divide E; outputs are
 * written only on success. */
wst_status_t wst_want_expert_range(const struct wst_want *w, uint64_t *start_p,
                                   uint64_t *stop_p);

/* Full validation of a want entry against its region table: tensor, box,
 * row_pitch (0, or a multiple of the element size >= the row bytes), expert
 * descriptor (wst_want_expert_check), region index in range and offset +
 * span within the region without overflow. */
wst_status_t wst_want_check(const struct wst_want *w,
                            const struct wst_region_desc *regions,
                            size_t n_regions);

/* Full validation of a have entry: tensor, box, memory type. */
wst_status_t wst_have_check(const struct wst_have *h);

#endif
