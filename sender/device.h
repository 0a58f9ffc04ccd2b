/* device.h - the sender's GPU side: device shards digested on the GPU,
 * and read through the pinned bounce ring (common/movers/bounce_ring.h)
 * when UCX cannot read device memory.
 *
 * Threads: the ready event and digests on the application thread (inside
 * push); the ring on the progress thread.
 */
#ifndef WST_SENDER_DEVICE_H
#define WST_SENDER_DEVICE_H

#include <stddef.h>
#include <stdint.h>
#include <wstream/status.h>

#include "bounce_ring.h"
#include "digest.h"
#include "log.h"
#include "worker.h"

struct wst_send_device;

/* Creates the GPU side on 'device': the digest stream and, when
 * n_slots > 0, the bounce ring of n_slots slots (pinned, registered with
 * 'worker'), whose freed slots call wake(wake_arg). 'log' and 'worker' are
 * borrowed for its lifetime. On success *dev_p is owned by the caller:
 * stop it before the worker goes, destroy it after. */
wst_status_t wst_send_device_create(const struct wst_logger *log,
                                    wst_worker_t *worker, int device,
                                    uint32_t n_slots, void (*wake)(void *),
                                    void *wake_arg,
                                    struct wst_send_device **dev_p);
void wst_send_device_stop(struct wst_send_device *dev);
void wst_send_device_destroy(struct wst_send_device *dev);

int wst_send_device_ordinal(const struct wst_send_device *dev);

/* The bounce ring (owned by dev), or NULL when it has none. */
struct wst_bounce_ring *wst_send_device_ring(const struct wst_send_device *dev);

/* Application thread: every read of device shards enqueued after this
 * call (copies and digests) waits, on the GPU, for 'event' (a cudaEvent_t
 * the application recorded after the work that wrote the shards). */
wst_status_t wst_send_device_after(struct wst_send_device *dev, void *event);

/* Application thread: adds device run 'data' of 'len' bytes to 'd' at
 * d->pos (and advances it); flush before reading d. */
wst_status_t wst_send_device_digest_add(struct wst_send_device *dev,
                                        struct wst_digest *d, const void *data,
                                        uint64_t len);
wst_status_t wst_send_device_digest_flush(struct wst_send_device *dev,
                                          struct wst_digest *d);

/* Progress thread: one line on what the bounce ring did since the last
 * call (nothing when it did nothing). */
void wst_send_device_log_bounce(struct wst_send_device *dev,
                                const struct wst_logger *log);

#endif
