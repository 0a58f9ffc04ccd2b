/* tx.h - the sending half of a mover: how one sender's plan items reach one
 * receiver, whatever carries them.
 *
 * The sender's pump walks its plan items in plan order (layer by layer) and
 * knows nothing of how bytes travel. It holds a cursor, and asks its
 * sending half to
 *  - post what it can of the items from the cursor up to a limit inside
 *    the cursor's layer (the limit stops at the first staged item still
 *    waiting for its credit), advancing the cursor past what it posted;
 *  - fence a layer once every item of it is posted: make its bytes visible
 *    at the receiver, and say so through fenced().
 * Implementations, one file each (NCCL transports in the manner of
 * src/transport/ there):
 *  - chunks.c: put or am over a UCX data endpoint (wire.h): items cut into
 *    chunks of at most WST_DATA_CHUNK_MAX (or their source's chunk: device
 *    memory the receiver's UCX writes itself), small neighbouring items
 *    gathered into one message, bounded by a window of bytes in flight;
 *    device sources go through a bounce stage (bounce.h) first;
 *  - nccl.c: a whole layer as one grouped ncclSend exchange.
 *
 *   pump ──post(cursor, limit)──▶ tx ──▶ wire / bounce / nccl
 *     ▲  ──fence(layer)────────▶    │
 *     └── moved / fenced / wake ◀───┘   (events, progress thread)
 *
 * Threads: every call and every event on the progress thread; an event may
 * fire inside the call that caused it (the pump must tolerate re-entry).
 * After destroy no event fires.
 */
#ifndef WST_MOVERS_TX_H
#define WST_MOVERS_TX_H

#include <stddef.h>
#include <stdint.h>
#include <ucp/api/ucp.h>
#include <wstream/status.h>

#include "planner.h"

/* Where the pump stands: the next item, and bytes of it already posted. */
struct wst_tx_cursor {
    size_t item;
    uint64_t offset;
};

/* Where one plan item's bytes are read: its shard's address plus the item's
 * src_offset, the shard's registration (or NULL) and its GPU (-1: host);
 * and the largest message they go in, the receiver's word for the item's
 * region (mover.h; 0: WST_DATA_CHUNK_MAX). */
struct wst_tx_src {
    const void *ptr;
    ucp_mem_h memh;
    int device;
    uint64_t chunk;
};

/* A sending half's view of the plan, borrowed for the tx's lifetime (the
 * sender keeps it until it destroys the tx): this sender's items for this
 * receiver in plan order, each with its source. */
struct wst_tx_plan {
    const struct wst_plan_item *items;
    const struct wst_tx_src *srcs;
    size_t n_items;
    uint32_t n_layers;
    const size_t *layer_first; /* [n_layers + 1]: item bounds per layer */
};

/* Events to the owner, with 'arg'. */
struct wst_tx_events {
    void *arg;
    /* 'bytes' posted earlier have left this side (status WST_OK) or failed:
     * room in the window again, so the pump may post more. */
    void (*moved)(void *arg, uint64_t bytes, wst_status_t status);
    /* Every byte of 'layer' is visible at the receiver, or it failed. */
    void (*fenced)(void *arg, uint32_t layer, wst_status_t status);
    /* A resource shared with other links (a bounce slot) came free, or a
     * staged copy finished: the pump may post again. */
    void (*wake)(void *arg);
};

struct wst_tx;

struct wst_tx_ops {
    const char *name;
    /* A refit of 'version' starts: the cursor is back at item 0. */
    wst_status_t (*begin)(struct wst_tx *tx, uint64_t version);
    /* Posts what it can of items [cur->item, limit) (all in one layer) and
     * advances *cur past it; *posted_p is nonzero when anything was posted.
     * Nothing posted (room, slots or a whole layer still missing) is not an
     * error: an event says when to try again. */
    wst_status_t (*post)(struct wst_tx *tx, struct wst_tx_cursor *cur,
                         size_t limit, int *posted_p);
    /* Every item of 'layer' has been posted; fenced() follows once they are
     * all visible at the receiver. Layers are fenced in order, one at a
     * time. */
    wst_status_t (*fence)(struct wst_tx *tx, uint32_t layer);
    /* Moves in flight complete (their memory stays valid until then) and no
     * event fires any more. */
    void (*destroy)(struct wst_tx *tx);
};

/* Every implementation starts with this. */
struct wst_tx {
    const struct wst_tx_ops *ops;
    struct wst_tx_events ev;
    const struct wst_tx_plan *plan;
    uint64_t version;
};

/* NULL is fine. */
static inline void wst_tx_destroy(struct wst_tx *tx)
{
    if (tx != NULL)
        tx->ops->destroy(tx);
}

#endif
