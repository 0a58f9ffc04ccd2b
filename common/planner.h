/* planner.h - the receiver-side planner: wants x haves -> plan items.
 *
 * Input: this receiver's want entries and regions, and the have manifest of
 * every sender rank 0..n_senders-1. Output: a plan, the list of contiguous
 * copies (items) that together write every wanted byte exactly once.
 *
 * Rules (DESIGN.md section 2, REFIT_LAYOUTS.md section 5):
 *  - transfers are the non-empty intersections of want boxes and have boxes;
 *  - every wanted element comes from exactly one sender; where several
 *    senders own it, the choice is deterministic and spreads replicated
 *    tensors over senders: haves of a tensor are considered in rank order
 *    rotated by (receiver_rank + index of the want entry) mod n_senders, and
 *    each takes what earlier ones left uncovered;
 *  - a box that is not contiguous in source or destination memory becomes
 *    several runs; runs adjacent in both source and destination coalesce;
 *  - items are sorted by (sender, layer, region, dst_offset), which is the
 *    order the sender executes them and the order digests are computed in;
 *  - refusals, each naming the tensor in 'err': a have whose dtype differs
 *    from the want (WST_ERR_DTYPE_MISMATCH) or whose global shape differs
 *    (WST_ERR_SHAPE_MISMATCH); a wanted element no sender has
 *    (WST_ERR_COVERAGE); invalid entries (WST_ERR_INVALID).
 *
 * Grouped experts (want.expert.grouped, manifest.h): before any
 * intersection, every grouped want is checked, in this order, and refused
 * with a message naming the tensor: E = shape[0] not divisible by ep_size
 * (WST_ERR_EXPERT_DIVISIBILITY); a box that is not the whole of some dim
 * d >= 1 (WST_ERR_EXPERT_SHARDING, naming d); a dim-0 range other than
 * [ep_rank*E/ep_size, (ep_rank+1)*E/ep_size) (WST_ERR_NON_LINEAR_PLACEMENT,
 * naming both ranges; this is what refuses round-robin placement). Haves of
 * grouped tensors may be any box (EP ranges, FSDP slices of any dim, flat
 * shards); coverage works on them as on any tensor.
 *
 * Layers: layer(item) = wst_tensor_layer(name) for layer tensors; global
 * tensors (layer UINT32_MAX) go to layer n_layers-1, where n_layers = 1 +
 * (largest layer index among the wants, or -1 if none) + 1. n_layers is at
 * least 1.
 *
 * The input key (wst_plan_input_key) covers the expert descriptor of
 * grouped wants; dense wants hash as they did before it existed.
 *
 * Staged wants (want.staged, set by the receiver for the boxes of routed
 * experts it stages) give staged items; they sort like any item, and the
 * receiver puts its staging region last so a layer's staged items come
 * after its dense ones.
 *
 * The plan hash is a 64-bit hash over n_senders, n_layers and every item in
 * order; equal inputs give equal hashes on every machine (it does not depend
 * on pointer values or struct padding).
 */
#ifndef WST_PLANNER_H
#define WST_PLANNER_H

#include "log.h"
#include "manifest.h"

/* A copy of one or more rows. Row r (0 <= r <= more_rows) is 'length'
 * bytes from src_offset + r * src_stride in the source to dst_offset +
 * r * length in the destination: the rows lie apart in the source and
 * follow each other in the destination, so an item's destination is
 * always one contiguous range of wst_plan_item_bytes() bytes. An item of
 * one row (more_rows 0, src_stride 0) is a plain contiguous copy.
 *
 * The planner makes rows of the column cuts of an engine's row-parallel
 * layers (o_proj and down_proj cut on dim 1: thousands of short rows per
 * tensor, one item each before): only rows shorter than
 * WST_PLAN_ROW_MAX, so that every data message of such an item carries
 * whole rows. For the digest (digest.h) every row is a run of its own,
 * as if it were an item: a layer digests as it did with one item a row. */
struct wst_plan_item {
    uint32_t sender;     /* sender rank */
    uint32_t have;       /* index into that sender's have manifest */
    uint64_t src_offset; /* bytes into that have's shard buffer */
    uint32_t region;     /* receiver region index */
    uint32_t more_rows;  /* rows after the first; 0: one contiguous run */
    uint64_t dst_offset; /* bytes into the region */
    uint64_t length;     /* bytes of a row, > 0 */
    uint32_t layer;      /* 0..n_layers-1 */
    uint32_t staged;     /* 1: lands in expert staging (want.staged); the
                            sender waits for the layer's credit */
    uint64_t src_stride; /* bytes from a row's start to the next's in the
                            source, >= length; 0 when more_rows is 0 */
};

/* Rows of a strided item are shorter than this (a digest chunk): a
 * message then never cuts a row, and each row is one digest part. */
#define WST_PLAN_ROW_MAX (64u * 1024u)

/* Bytes an item moves, all rows. */
static inline uint64_t wst_plan_item_bytes(const struct wst_plan_item *it)
{
    return it->length * ((uint64_t)it->more_rows + 1);
}

struct wst_plan {
    uint64_t hash;
    uint32_t n_senders;
    uint32_t n_layers;
    size_t n_items;
    struct wst_plan_item *items; /* owned; sorted as described above */
    size_t *sender_first;  /* owned; [n_senders + 1]: items of sender s are
                              items[sender_first[s] .. sender_first[s+1]) */
    uint64_t *layer_bytes; /* owned; [n_senders * n_layers]: bytes sender s
                              sends in layer l at [s * n_layers + l] */
    uint64_t total_bytes;
};

struct wst_plan_input {
    const struct wst_want *wants;
    size_t n_wants;
    const struct wst_region_desc *regions;
    size_t n_regions;
    const struct wst_have *const *haves; /* [n_senders] arrays */
    const size_t *n_haves;               /* [n_senders] */
    uint32_t n_senders;
    uint32_t receiver_rank;
};

/* Builds a plan. On success *plan_p owns a new plan (free with
 * wst_plan_destroy). On failure nothing is allocated, the reason is logged
 * through 'lg' (may be NULL) and copied into err[0..errlen) (err may be NULL).
 * Inputs are borrowed for the duration of the call. */
wst_status_t wst_plan_build(const struct wst_plan_input *in,
                            const struct wst_logger *lg,
                            struct wst_plan **plan_p, char *err, size_t errlen);

void wst_plan_destroy(struct wst_plan *plan);

/* Hash of a plan's items as defined above (used by wst_plan_build and to
 * check plans that arrive from the wire). */
uint64_t wst_plan_hash_items(uint32_t n_senders, uint32_t n_layers,
                             const struct wst_plan_item *items, size_t n);

/* Hash identifying a planning input (wants, regions and all haves), the key
 * of the plan cache: same key, same plan. */
uint64_t wst_plan_input_key(const struct wst_plan_input *in);

#endif
