/* bounce_ring.h - the sending side's pinned bounce ring: device bytes are
 * copied into a slot of pinned host memory (registered with UCX once) and
 * moved from there when UCX cannot read device memory.
 *
 *   device source ──cudaMemcpyAsync──▶ slot k ──put/am──▶ receiver
 *                   event ──▶ waiter ──post──▶ progress thread ─┘
 *                   slot k free again ◀── the move completes ── wake()
 *
 * One ring per sender, shared by its links: a slot given back calls the
 * ring's wake function, so every link that found none tries again.
 * Threads: every function on the progress thread.
 */
#ifndef WST_MOVERS_BOUNCE_RING_H
#define WST_MOVERS_BOUNCE_RING_H

#include <stdint.h>
#include <ucp/api/ucp.h>
#include <wstream/status.h>

#include "gpu_waiter.h"
#include "log.h"
#include "mover.h"
#include "worker.h"

/* A slot holds one data message: a chunk, or small items gathered. */
#define WST_BOUNCE_SLOT_BYTES WST_DATA_CHUNK_MAX
#define WST_BOUNCE_MIN_SLOTS 2u /* double-buffered at least */
#define WST_BOUNCE_MAX_SLOTS 64u

struct wst_bounce_ring;

struct wst_bounce_ring_params {
    const struct wst_logger *log; /* borrowed for the ring's lifetime */
    wst_worker_t *worker;         /* borrowed: registers the slots */
    int device;                   /* the GPU copied from */
    uint32_t n_slots;             /* WST_BOUNCE_MIN_SLOTS..MAX_SLOTS */
    void (*wake)(void *arg);      /* a slot came free; may be NULL */
    void *wake_arg;
};

/* Creates the ring: pinned slots registered with the worker, a copy stream
 * on 'device' and the waiter. On success *ring_p is owned by the caller:
 * stop it before the worker goes, destroy it after. */
wst_status_t wst_bounce_ring_create(const struct wst_bounce_ring_params *params,
                                    struct wst_bounce_ring **ring_p);
void wst_bounce_ring_stop(struct wst_bounce_ring *ring);
void wst_bounce_ring_destroy(struct wst_bounce_ring *ring);

/* Application thread: copies enqueued after this call wait, on the GPU,
 * for 'event' (a cudaEvent_t recorded after the work that wrote the
 * sources). */
wst_status_t wst_bounce_ring_after(struct wst_bounce_ring *ring, void *event);

/* A free slot's index, or -1 when every slot is taken. */
int wst_bounce_ring_take(struct wst_bounce_ring *ring);
void *wst_bounce_ring_slot(const struct wst_bounce_ring *ring, int slot);
ucp_mem_h wst_bounce_ring_memh(const struct wst_bounce_ring *ring);
/* Gives the slot back and calls the ring's wake function. */
void wst_bounce_ring_give(struct wst_bounce_ring *ring, int slot);

/* Enqueues the copy of 'len' device bytes at 'src' into 'slot' at byte
 * 'offset' (several copies may fill one slot). */
wst_status_t wst_bounce_ring_fill(struct wst_bounce_ring *ring, int slot,
                                  uint64_t offset, const void *src,
                                  uint64_t len);

/* After the slot's last fill: fn(arg, ...) runs on the progress thread once
 * every copy into it is done. */
wst_status_t wst_bounce_ring_filled(struct wst_bounce_ring *ring, int slot,
                                    wst_gpu_waited_fn fn, void *arg);

/* What the ring did, for a log line per refit: slots filled and their
 * bytes, the time from a slot's first copy to its event seen (the
 * device-to-host stage), and how often a link found no free slot. */
struct wst_bounce_stats {
    uint64_t fills;
    uint64_t bytes;
    uint64_t copy_ns_sum;
    uint64_t copy_ns_max;
    uint64_t no_slot;
};

/* The statistics since the last call, and a fresh start. */
void wst_bounce_ring_take_stats(struct wst_bounce_ring *ring,
                                struct wst_bounce_stats *stats);

#endif
