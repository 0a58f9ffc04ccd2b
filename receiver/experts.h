/* experts.h - the receiver's MoE layers: checks, staging, replay.
 *
 * The receiver keeps one wst_moe for all the routed-expert layers the engine
 * declared (struct wst_expert_layer, receiver.h). Before it listens it calls
 * wst_moe_prepare, which
 *  - runs the refusals of DESIGN.md section 4 that need only the engine's
 *    side (E % ep, linear placement, sharding inside experts, the loader's
 *    shape constraints) and keeps the first one: the receiver reports it
 *    when it plans, so senders hear why and nothing is written;
 *  - numbers the MoE layers in layer order (ordinal k) and gives layer k
 *    staging slot k mod slots; a slot holds one layer's local experts in
 *    checkpoint layout: gate [L, I, H], then up [L, I, H], then down
 *    [L, H, I], back to back;
 *  - allocates the staging pool: slots x the largest layer's slot bytes,
 *    whatever the depth of the model.
 * (on the host, or on a GPU when live memory is there: device.h);
 * wst_moe_replay then replays a verified layer's staged local expert i as
 * global id expert_start + i through the layer's loader into the live w13
 * and w2, in place.
 *
 * Threads: everything but wst_moe_replay runs before the receiver starts;
 * wst_moe_replay only reads the table and may run on any thread.
 */
#ifndef WST_RECEIVER_EXPERTS_H
#define WST_RECEIVER_EXPERTS_H

#include <stddef.h>
#include <stdint.h>

#include "manifest.h"
#include "repack.h"
#include <wstream/receiver.h>

struct wst_moe_layer {
    uint32_t layer;
    const struct wst_repack_loader *loader; /* borrowed from the registry */
    enum wst_dtype dtype;
    uint32_t n_experts; /* E */
    uint32_t ep_rank;
    uint32_t ep_size;
    uint32_t hidden;
    uint32_t inter;
    uint32_t *expert_ids; /* owned; NULL: linear */
    uint32_t n_expert_ids;
    uint32_t inter_tp_rank;
    uint32_t inter_tp_size;
    uint32_t w13_region;
    uint64_t w13_offset;
    uint32_t w2_region;
    uint64_t w2_offset;
    /* set by wst_moe_prepare when nothing is refused */
    uint32_t ordinal;              /* k-th MoE layer, in layer order */
    uint32_t slot;                 /* ordinal mod slots */
    uint64_t expert_start;         /* ep_rank * E / ep_size */
    struct wst_expert_shape shape; /* the local experts */
};

struct wst_moe {
    struct wst_loader_registry loaders;
    struct wst_moe_layer *layers; /* owned; sorted by layer after prepare */
    size_t n_layers, layers_cap;
    uint32_t slots;
    uint64_t slot_bytes;
    void *staging;      /* owned, page aligned; NULL when there are no layers */
    int staging_device; /* GPU ordinal staging lives on, or -1 (host) */
    uint64_t staging_bytes;
    wst_status_t refusal; /* WST_OK, or the first refusal */
    char reason[512];
};

/* An empty table with the built-in loaders and 'slots' staging slots. */
void wst_moe_init(struct wst_moe *m, uint32_t slots);

/* Adds a loader to m->loaders (wst_loader_registry_add). */
wst_status_t wst_moe_add_loader(struct wst_moe *m,
                                const struct wst_repack_loader *loader);

/* Copies one layer's declaration after checking what needs no planning:
 * dtype known, loader registered, sizes nonzero, ep_rank < ep_size,
 * expert_ids consistent with n_expert_ids, inter_tp_rank < inter_tp_size,
 * layer not declared before, and live w13/w2 inside their regions (sizes
 * from the loader when it accepts the shape). WST_ERR_INVALID with 'err'
 * otherwise; the table is unchanged on error. */
wst_status_t wst_moe_add(struct wst_moe *m, const struct wst_expert_layer *e,
                         const struct wst_region_desc *regions,
                         size_t n_regions, char *err, size_t errlen);

/* See the header comment. The staging pool is host memory when 'device'
 * is -1, else device memory on that GPU, and then a loader without
 * load_layer_device is refused. WST_ERR_NO_MEMORY (or the CUDA status) when
 * staging cannot be allocated; refusals are not errors here (m->refusal). */
wst_status_t wst_moe_prepare(struct wst_moe *m, int device);

/* Bytes of one staged expert's gate (or up, or down) of 'ml'. */
uint64_t wst_moe_expert_bytes(const struct wst_moe_layer *ml);

/* The MoE layer of model layer 'layer', or NULL. */
const struct wst_moe_layer *wst_moe_find(const struct wst_moe *m,
                                         uint32_t layer);

/* The three staged wants of MoE layer 'ml' (gate, up, down: grouped, the
 * layer's linear dim-0 range, whole other dims) into its slot of the
 * staging region 'staging_region'. After a prepare without refusal. */
void wst_moe_staging_wants(const struct wst_moe *m,
                           const struct wst_moe_layer *ml,
                           uint32_t staging_region, struct wst_want out[3]);

/* Replays every staged expert of 'ml' into live memory: w13 at
 * region_data[w13_region] + w13_offset, w2 likewise. Borrowed pointers. On
 * a loader error, its status and a message naming the layer and expert. */
wst_status_t wst_moe_replay(const struct wst_moe *m,
                            const struct wst_moe_layer *ml,
                            void *const *region_data, char *err, size_t errlen);

/* Frees the table and the staging pool. */
void wst_moe_release(struct wst_moe *m);

#endif
