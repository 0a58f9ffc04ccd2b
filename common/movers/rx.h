/* rx.h - the receiving half of a mover: how one sender's plan items land in
 * this receiver's memory, whatever carries them.
 *
 * The receiver's refit state machine knows layers, credits and digests,
 * not movers. Per sender it holds one receiving half and tells it
 *  - begin(version): the engine has paused; bytes of this version may
 *    land from now on;
 *  - allow(layer_bound): staged items (routed experts) of layers below
 *    the bound have their staging slot (their credit);
 *  - abort(): the refit failed; nothing may be written any more.
 * and hears back, on the progress thread,
 *  - landed(layer, bytes, hashed, sum): bytes of a layer are in their
 *    destination; 'hashed' of them (all or none) were hashed as they
 *    landed, their chunk hashes adding up to 'sum' (wst_digest_part, with
 *    each item's stream position in its layer), so the layer's digest
 *    check need not read them again;
 *  - failed(status, reason): the refit cannot go on.
 * A mover whose bytes the receiver cannot see arrive (put: one-sided) does
 * not count them (counts_bytes 0): its layer is visible when the sender
 * says LAYER_DONE after its fence.
 *
 * Data that arrives as messages on the worker (am) comes in through
 * data_dest / data_done, routed by the receiver from the header's rank to
 * the sender's receiving half once the header's token is the one that
 * rank's plan carried (receiver/data.c: others are dropped unseen here);
 * a half without data_dest takes no messages (any is a protocol error:
 * data outside its plan).
 *
 * Implementations: put_rx.c (nothing to do), am_rx.c (messages into their
 * destination, or through the landing ring into device memory), nccl_rx.c
 * (one grouped ncclRecv exchange per layer).
 *
 * Threads: every call and event on the progress thread; an event may fire
 * inside the call that caused it. After destroy no event fires.
 */
#ifndef WST_MOVERS_RX_H
#define WST_MOVERS_RX_H

#include <stddef.h>
#include <stdint.h>
#include <wstream/status.h>

#include "manifest.h"
#include "planner.h"
#include "worker.h"

/* A destination region as the receiver holds it. */
struct wst_rx_region {
    char *base;
    uint64_t length;
    enum wst_mem_type mem;
    /* Device memory this process cannot export by CUDA IPC (mapped from
     * its engine): UCX must not be handed it as a rendezvous destination
     * (landing.h, the device ring). */
    int no_export;
    /* Senders were given its remote key: in a put plan its bytes come by
     * put, never as messages (am_rx.h's put share). */
    int keyed;
};

/* A receiving half's view of the plan, borrowed for its lifetime: this
 * sender's items in plan order, the receiver's regions. */
struct wst_rx_plan {
    const struct wst_plan_item *items;
    size_t n_items;
    uint32_t n_layers;
    const size_t *layer_first; /* [n_layers + 1]: item bounds per layer */
    const struct wst_rx_region *regions;
    size_t n_regions;
};

struct wst_rx_events {
    void *arg;
    void (*landed)(void *arg, uint32_t layer, uint64_t bytes, uint64_t hashed,
                   uint64_t sum);
    void (*failed)(void *arg, wst_status_t status, const char *reason);
};

struct wst_rx;

struct wst_rx_ops {
    const char *name;
    int counts_bytes; /* landed() reports every byte */
    wst_status_t (*begin)(struct wst_rx *rx, uint64_t version);
    void (*allow)(struct wst_rx *rx, uint32_t layer_bound);
    /* Messages (am): where 'len' bytes under 'hdr' go (*dest_p), or
     * WST_ERR_BUSY to park the message until room frees up; any other
     * error drops it (and the refit has failed). 'rndv': UCX moves the
     * bytes itself (device memory too, with a CUDA-aware UCX); otherwise
     * they are copied with memcpy, so *dest_p must be host memory. */
    wst_status_t (*data_dest)(struct wst_rx *rx, const struct wst_data_hdr *hdr,
                              size_t len, int rndv, void **dest_p);
    /* The message data_dest placed is in (or failed). */
    void (*data_done)(struct wst_rx *rx, const struct wst_data_hdr *hdr,
                      void *dest, size_t len, wst_status_t status);
    void (*abort)(struct wst_rx *rx);
    void (*destroy)(struct wst_rx *rx);
};

/* Every implementation starts with this. */
struct wst_rx {
    const struct wst_rx_ops *ops;
    struct wst_rx_events ev;
    const struct wst_rx_plan *plan;
    uint64_t version;
    int receiving;        /* begun, not aborted */
    uint32_t layer_bound; /* staged items below it may land */
};

/* Whether item k may land now: in a refit that is receiving, and, when
 * staged, with its credit. */
static inline int wst_rx_item_allowed(const struct wst_rx *rx, size_t k)
{
    const struct wst_plan_item *it = &rx->plan->items[k];

    return rx->receiving && (!it->staged || it->layer < rx->layer_bound);
}

/* Where byte 'offset' of item 'it' lands. */
static inline void *wst_rx_item_dest(const struct wst_rx_plan *pl,
                                     const struct wst_plan_item *it,
                                     uint64_t offset)
{
    return pl->regions[it->region].base + it->dst_offset + offset;
}

/* NULL is fine. */
static inline void wst_rx_destroy(struct wst_rx *rx)
{
    if (rx != NULL)
        rx->ops->destroy(rx);
}

#endif
