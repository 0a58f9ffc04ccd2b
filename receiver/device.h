/* device.h - the receiver's GPU side: device digests and device repacks.
 * (Data for device regions lands through the am mover's landing ring,
 * common/movers/landing.h.)
 *
 * Threads: digest on the engine thread; repack on the repack thread; each
 * owns its stream.
 */
#ifndef WST_RECEIVER_DEVICE_H
#define WST_RECEIVER_DEVICE_H

#include <stddef.h>
#include <stdint.h>
#include <wstream/status.h>

#include "digest.h"
#include "experts.h"
#include "log.h"

struct wst_recv_device;

/* Creates the GPU side on 'device': the repack stream and event, the
 * digest context. 'log' is borrowed for its lifetime. On success *dev_p is
 * owned by the caller (wst_recv_device_destroy, NULL is fine). */
wst_status_t wst_recv_device_create(const struct wst_logger *log, int device,
                                    struct wst_recv_device **dev_p);
void wst_recv_device_destroy(struct wst_recv_device *dev);

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
