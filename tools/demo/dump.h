/* dump.h - dump directories: a receiver's live tensors next to the whole
 * checkpoint tensors they came from, for an independent checker
 * (tests/tools/check_dump.py).
 *
 * A dump directory DIR holds two sets, DIR/live and DIR/source. Each set is
 * an index.json and one raw little-endian file per tensor:
 *
 *   {"format": 1, "tensors": [
 *     {"name": "...", "file": "0000.bin", "dtype": "bf16",
 *      "shape": [..],              the bytes in the file, row-major
 *      "layout": "checkpoint" | "<loader name>",
 *      "sources": ["..."],         live only: checkpoint tensors it holds
 *      "box": {"start": [..], "stop": [..]},   of the source tensor(s)
 *      "tensor_shape": [..]}]}     global shape of the source tensor(s)
 *
 * source/ holds every checkpoint tensor whole (layout "checkpoint"). live/
 * holds one tensor per dense want (its box, rows packed without pitch) and
 * two per MoE layer, "model.layers.{l}.mlp.experts.w13_weight" (sources
 * gate_proj and up_proj, box [e0,0,0]-[e1,I,H] of [E,I,H]) and "...w2_weight"
 * (source down_proj, box [e0,0,0]-[e1,H,I] of [E,H,I]), in the loader's
 * layout: [L,2I,H] and [L,H,I] for "checkpoint", [L,H/64,2I,64] and
 * [L,I/64,H,64] for "trtllm-bf16"; e0 = ep_rank*L, L = E/ep_size.
 *
 * The checker rebuilds every live tensor from source/ on its own, so a dump
 * tests the whole path (plan, transfer, staging, repack) without trusting
 * any of its code.
 */
#ifndef WST_DUMP_H
#define WST_DUMP_H

#include <stddef.h>
#include <stdint.h>

#include "layout_file.h"
#include "manifest.h"
#include "model.h"
#include <wstream/status.h>

#define WST_DUMP_FORMAT 1

/* One tensor of a set, as index.json describes it. Borrowed by the call
 * it is passed to. */
struct wst_dump_tensor {
    const char *name;   /* unique within the set */
    const char *layout; /* "checkpoint" or a loader name */
    enum wst_dtype dtype;
    uint32_t ndim; /* of the file's shape */
    uint64_t shape[WST_MAX_DIMS];
    const char *const *sources; /* n_sources names; none for source/ */
    uint32_t n_sources;
    /* The box of the source tensor(s) this covers; box.ndim is also the
     * rank of tensor_shape. */
    struct wst_box box;
    uint64_t tensor_shape[WST_MAX_DIMS];
};

/* A set being written: DIR/<which>/ with its files, index.json last. */
typedef struct wst_dump_set wst_dump_set_t;

/* Creates 'dir'/'which' (mkdir -p; files already there are overwritten as
 * tensors are added) and a set writing into it. On success *set_p is the
 * caller's, to be given to wst_dump_set_destroy. WST_ERR_IO when a
 * directory cannot be made, WST_ERR_NO_MEMORY, WST_ERR_INVALID. */
wst_status_t wst_dump_set_create(const char *dir, const char *which,
                                 wst_dump_set_t **set_p, char *err,
                                 size_t errlen);

/* Starts tensor 't' (copied): opens its file. Its bytes follow through
 * wst_dump_set_write, in file order, and wst_dump_set_end closes it. One
 * tensor at a time. WST_ERR_INVALID for a bad description or a tensor
 * already open, WST_ERR_IO. */
wst_status_t wst_dump_set_begin(wst_dump_set_t *set,
                                const struct wst_dump_tensor *t, char *err,
                                size_t errlen);

/* Appends 'bytes' bytes of 'data' (borrowed for the call) to the open
 * tensor. WST_ERR_INVALID past the size its shape says, WST_ERR_IO. */
wst_status_t wst_dump_set_write(wst_dump_set_t *set, const void *data,
                                size_t bytes, char *err, size_t errlen);

/* Closes the open tensor and records it for the index. WST_ERR_INVALID when
 * fewer bytes were written than its shape says, WST_ERR_IO. */
wst_status_t wst_dump_set_end(wst_dump_set_t *set, char *err, size_t errlen);

/* Writes index.json for the tensors ended so far, atomically
 * (wst_atomic_write()), so a reader never sees an index naming files that
 * are not complete. WST_ERR_IO, WST_ERR_NO_MEMORY. */
wst_status_t wst_dump_set_commit(wst_dump_set_t *set, char *err, size_t errlen);

/* Frees the set; a tensor still open is closed and left out. NULL is
 * fine. Does not commit. */
void wst_dump_set_destroy(wst_dump_set_t *set);

/* Writes DIR/live from one engine layout 'l' and its live mapping
 * 'live_base' (regions at l->regions[i].offset), and DIR/source with every
 * tensor of model 'm' whole, generated for (seed, version) with
 * wst_model_fill_shard. Creates DIR, DIR/live, DIR/source (mkdir -p
 * semantics; existing files overwritten). All arguments are borrowed for
 * the call.
 *
 * Dense wants are dumped one entry each (a second want of the same tensor
 * gets "#2" appended to its name, and so on). A grouped expert want is
 * dumped like a dense one when its layer has no "experts" entry (its bytes
 * are then live as they are); otherwise the experts entry stands for it.
 * Experts entries the receiver refuses at plan time (an expert map, a
 * split intermediate dimension, E not divisible by ep, a shape the loader
 * refuses) have no live bytes and are skipped. Nothing is written when the
 * layout is refused here: WST_ERR_UNSUPPORTED_LAYOUT for a loader other
 * than "checkpoint" and "trtllm-bf16" (the checker knows no other),
 * WST_ERR_INVALID for a want or experts entry outside its region. Later:
 * WST_ERR_IO, WST_ERR_NO_MEMORY. 'err' says which. */
wst_status_t wst_dump_write(const char *dir, const struct wst_model *m,
                            const struct wst_layout *l, const void *live_base,
                            uint64_t seed, uint64_t version, char *err,
                            size_t errlen);

#endif
