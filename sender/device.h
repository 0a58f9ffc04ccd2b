/* device.h - the sender's GPU side: device shards read through a pinned
 * bounce ring, and digested on the GPU.
 *
 * When shards live in device memory and UCX cannot read device memory (no
 * CUDA support, as in Debian's and Ubuntu's builds), each chunk is copied
 * into a slot of a ring of pinned host memory, registered with UCX once,
 * and sent from there; the waiter (gpu_waiter.h) tells the progress thread
 * when a slot is full. With several slots, copies of later chunks overlap
 * the network moving earlier ones:
 *
 *   device shard ──cudaMemcpyAsync──▶ slot k ──UCX (am/put)──▶ receiver
 *                   event ──▶ waiter ──post──▶ progress thread ─┘
 *                   slot k free again ◀── the move completes
 *
 * Threads: slots and copies on the progress thread; the ready event and
 * digests on the application thread (inside push). Each owns its stream.
 */
#ifndef WST_SENDER_DEVICE_H
#define WST_SENDER_DEVICE_H

#include <stddef.h>
#include <stdint.h>
#include <ucp/api/ucp.h>
#include <wstream/status.h>

#include "digest.h"
#include "gpu_waiter.h"
#include "log.h"
#include "mover.h"
#include "worker.h"

/* A slot holds one data message: a chunk, or small items gathered. */
#define WST_BOUNCE_SLOT_BYTES WST_DATA_CHUNK_MAX
#define WST_BOUNCE_MIN_SLOTS 2u /* double-buffered at least */
#define WST_BOUNCE_MAX_SLOTS 64u

struct wst_tx_device;

/* Creates the GPU side on 'device': streams, the waiter and, when
 * n_slots > 0, the bounce ring of n_slots slots (pinned, registered with
 * 'worker'). 'log' and 'worker' are borrowed for its lifetime. On success
 * *dev_p is owned by the caller: stop it before the worker goes, destroy
 * it after. */
wst_status_t wst_tx_device_create(const struct wst_logger *log,
                                  wst_worker_t *worker, int device,
                                  uint32_t n_slots,
                                  struct wst_tx_device **dev_p);
void wst_tx_device_stop(struct wst_tx_device *dev);
void wst_tx_device_destroy(struct wst_tx_device *dev);

int wst_tx_device_ordinal(const struct wst_tx_device *dev);

/* Application thread: every read of device shards enqueued after this
 * call (copies and digests) waits, on the GPU, for 'event' (a cudaEvent_t
 * the application recorded after the work that wrote the shards). */
wst_status_t wst_tx_device_after(struct wst_tx_device *dev, void *event);

/* Progress thread: a free slot's index, or -1 when every slot is taken
 * (a slot given back is the time to try again). */
int wst_tx_device_slot_take(struct wst_tx_device *dev);
void *wst_tx_device_slot(const struct wst_tx_device *dev, int slot);
ucp_mem_h wst_tx_device_slot_memh(const struct wst_tx_device *dev);
void wst_tx_device_slot_give(struct wst_tx_device *dev, int slot);

/* Progress thread: enqueues the copy of 'len' device bytes at 'src' into
 * 'slot' at byte 'offset' (several copies may fill one slot). */
wst_status_t wst_tx_device_fill(struct wst_tx_device *dev, int slot,
                                uint64_t offset, const void *src, uint64_t len);

/* Progress thread: after the slot's last fill; fn(arg, ...) runs on the
 * progress thread once every copy into it is done. */
wst_status_t wst_tx_device_filled(struct wst_tx_device *dev, int slot,
                                  wst_gpu_waited_fn fn, void *arg);

/* What the bounce path did, for a log line per refit: slots filled and
 * their bytes, the time from a slot's first copy to its event seen (the
 * device-to-host stage), and how often the pump found no free slot. */
struct wst_bounce_stats {
    uint64_t fills;
    uint64_t bytes;
    uint64_t copy_ns_sum;
    uint64_t copy_ns_max;
    uint64_t no_slot;
};

/* Progress thread: the statistics since the last call, and a fresh
 * start. */
void wst_tx_device_take_stats(struct wst_tx_device *dev,
                              struct wst_bounce_stats *stats);

/* Application thread: adds device run 'data' of 'len' bytes to 'd' at
 * d->pos (and advances it); flush before reading d. */
wst_status_t wst_tx_device_digest_add(struct wst_tx_device *dev,
                                      struct wst_digest *d, const void *data,
                                      uint64_t len);
wst_status_t wst_tx_device_digest_flush(struct wst_tx_device *dev,
                                        struct wst_digest *d);

#endif
