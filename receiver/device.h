/* device.h - the receiver's GPU side: landing buffers, host-to-device
 * copies and their completions, device digests and device repacks.
 *
 * When live regions are device memory and UCX cannot write device memory
 * (no CUDA support, as in Debian's and Ubuntu's builds), data messages land
 * in a ring of pinned host memory, registered with UCX once, and each
 * landed message is copied to its device destination on a copy stream.
 * A waiter thread (gpu_waiter.h) waits on each copy's event in order and posts
 * the completion to the progress thread, which gives the message's room back,
 * tells the receiver (copied_fn) and lets parked messages in
 * (wst_worker_data_resume).
 *
 *   UCX rndv ──▶ pinned ring ──cudaMemcpyAsync──▶ device region
 *                   ▲  event ──▶ completion thread ──post──▶ progress thread
 *                   └────────────── room free again ◀───────────┘
 *
 * Threads: land/release/copy on the progress thread; digest on the engine
 * thread; repack on the repack thread; each owns its stream.
 */
#ifndef WST_RECEIVER_DEVICE_H
#define WST_RECEIVER_DEVICE_H

#include <stddef.h>
#include <stdint.h>
#include <wstream/status.h>

#include "digest.h"
#include "experts.h"
#include "log.h"
#include "mover.h"
#include "worker.h"

/* Largest data message that lands: the senders' chunk size. */
#define WST_LANDING_MESSAGE_MAX WST_DATA_CHUNK_MAX
/* The pinned ring messages land in, and how many may be in it at once:
 * small messages (a tensor-parallel slice arrives as one message per row)
 * must not each hold a whole chunk's room. */
#define WST_LANDING_BYTES (8 * WST_LANDING_MESSAGE_MAX)
#define WST_LANDING_RECORDS 1024u

/* A landed message's copy is complete: 'tag' is what the receiver gave
 * wst_recv_device_copy (its refit generation). Progress thread. */
typedef void (*wst_recv_copied_fn)(void *arg, const struct wst_data_hdr *hdr,
                                   size_t len, uint64_t tag,
                                   wst_status_t status);

struct wst_recv_device;

/* Creates the GPU side on 'device': streams, events, the landing ring
 * (registered with 'worker'), the completion thread and the digest
 * context. 'log' and 'worker' are borrowed for its lifetime; copied_fn is
 * called with 'arg'. On success *dev_p is owned by the caller: stop it
 * (wst_recv_device_stop) before the worker goes, destroy it after. */
wst_status_t wst_recv_device_create(const struct wst_logger *log,
                                    wst_worker_t *worker, int device,
                                    wst_recv_copied_fn copied_fn, void *arg,
                                    struct wst_recv_device **dev_p);

/* Waits for copies in flight and ends the completion thread; no
 * completion is posted after it returns. Unregisters the ring. */
void wst_recv_device_stop(struct wst_recv_device *dev);
void wst_recv_device_destroy(struct wst_recv_device *dev);

/* Progress thread: room for a 'len'-byte message in the landing ring, or
 * NULL when the ring or its records are full (the caller answers
 * WST_ERR_BUSY and the message is parked). Room is taken in arrival
 * order and given back in that order (landing_ring.h). */
void *wst_recv_device_land(struct wst_recv_device *dev, size_t len);

/* Nonzero when 'ptr' points into the landing ring. */
int wst_recv_device_owns(const struct wst_recv_device *dev, const void *ptr);

/* Progress thread: gives a message's room back without copying (a dropped
 * message) and lets parked messages in. */
void wst_recv_device_release(struct wst_recv_device *dev, void *ptr);

/* Progress thread: copies the 'len' landed bytes at 'ptr' (from
 * wst_recv_device_land) to device memory 'dst'; copied_fn follows once they
 * are there, and their room is free again. On error the room is released
 * here and nothing follows. */
wst_status_t wst_recv_device_copy(struct wst_recv_device *dev, void *ptr,
                                  void *dst, size_t len,
                                  const struct wst_data_hdr *hdr, uint64_t tag);

/* What the landing path did, for a log line per refit: copies (and their
 * bytes) from landing to on the GPU, the time from enqueuing a copy to
 * the completion thread seeing its event, and messages that waited for
 * room in the ring. */
struct wst_landing_stats {
    uint64_t copies;
    uint64_t bytes;
    uint64_t latency_sum_ns;
    uint64_t latency_max_ns;
    uint64_t parked;
};

/* Progress thread: the statistics since the last call, and a fresh
 * start. */
void wst_recv_device_take_stats(struct wst_recv_device *dev,
                                struct wst_landing_stats *stats);

/* Engine thread: adds to 'd' the digest of device run 'data' of 'len'
 * bytes at stream position d->pos, and advances d->pos. Runs are batched:
 * call wst_recv_device_digest_flush before reading d. */
wst_status_t wst_recv_device_digest_add(struct wst_recv_device *dev,
                                        struct wst_digest *d, const void *data,
                                        uint64_t len);
wst_status_t wst_recv_device_digest_flush(struct wst_recv_device *dev,
                                          struct wst_digest *d);

/* Repack thread: replays MoE layer 'ml' from device staging into device
 * live memory through its loader's load_layer_device, and waits for it. */
wst_status_t wst_recv_device_repack(struct wst_recv_device *dev,
                                    const struct wst_moe *moe,
                                    const struct wst_moe_layer *ml,
                                    void *const *region_data, char *err,
                                    size_t errlen);

#endif
