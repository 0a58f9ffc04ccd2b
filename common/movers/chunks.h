/* chunks.h - the sending half of the put and am movers: plan items cut
 * into chunks, small ones gathered, device ones bounced, within a window.
 */
#ifndef WST_MOVERS_CHUNKS_H
#define WST_MOVERS_CHUNKS_H

#include "bounce_ring.h"
#include "log.h"
#include "mover.h"
#include "wire.h"
#include "tx.h"
#include "worker.h"

/* The largest message of gathered small items. */
#define WST_GATHER_BYTES (1u << 20)

struct wst_tx_chunks_params {
    const struct wst_logger *log;   /* borrowed for the tx's lifetime */
    wst_worker_t *worker;           /* borrowed: registers gather buffers */
    struct wst_wire *wire;          /* put or am; owned by the tx from now */
    struct wst_bounce_ring *ring;   /* borrowed; NULL: host sources only */
    const struct wst_tx_plan *plan; /* borrowed for the tx's lifetime */
    uint64_t window;                /* bytes in flight at most (one piece
                                       always goes) */
    /* The receiver takes scatter messages (WST_CAP_SCATTER, an am wire):
     * small host items of a layer go together even when their
     * destinations do not follow each other. */
    int scatter;
    struct wst_tx_events events;
};

/* On success *tx_p is owned by the caller (wst_tx_destroy); on failure
 * the wire is not taken. */
wst_status_t wst_tx_chunks_create(const struct wst_tx_chunks_params *params,
                                  struct wst_tx **tx_p);

#endif
