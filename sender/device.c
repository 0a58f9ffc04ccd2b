/* device.c - the sender's GPU side (see device.h). */
#include "device.h"

#include <stdlib.h>

#include "digest_batch.h"
#include "gpu.h"

struct wst_send_device {
    const struct wst_logger *log;
    int device;
    struct wst_bounce_ring *ring;   /* progress thread; NULL: none */
    struct wst_digest_batch digest; /* pool threads, one at a time
                                       (s->dev_hash_lock) */
};

wst_status_t wst_send_device_create(const struct wst_logger *log,
                                    wst_worker_t *worker, int device,
                                    uint32_t n_slots, void (*wake)(void *),
                                    void *wake_arg,
                                    struct wst_send_device **dev_p)
{
    struct wst_send_device *dev = calloc(1, sizeof(*dev));
    wst_status_t st;

    *dev_p = NULL;
    if (dev == NULL)
        return WST_ERR_NO_MEMORY;
    dev->log = log;
    dev->device = device;
    st = wst_gpu_set_device(log, device);
    if (st == WST_OK)
        st = wst_digest_batch_init(&dev->digest, log, device);
    if (st == WST_OK && n_slots > 0) {
        struct wst_bounce_ring_params p = {
            .log = log,
            .worker = worker,
            .device = device,
            .n_slots = n_slots,
            .wake = wake,
            .wake_arg = wake_arg,
        };
        st = wst_bounce_ring_create(&p, &dev->ring);
    }
    if (st != WST_OK) {
        wst_send_device_stop(dev);
        wst_send_device_destroy(dev);
        return st;
    }
    *dev_p = dev;
    return WST_OK;
}

void wst_send_device_stop(struct wst_send_device *dev)
{
    if (dev != NULL)
        wst_bounce_ring_stop(dev->ring);
}

void wst_send_device_destroy(struct wst_send_device *dev)
{
    if (dev == NULL)
        return;
    wst_bounce_ring_destroy(dev->ring);
    wst_digest_batch_fini(&dev->digest);
    free(dev);
}

int wst_send_device_ordinal(const struct wst_send_device *dev)
{
    return dev->device;
}

struct wst_bounce_ring *wst_send_device_ring(const struct wst_send_device *dev)
{
    return dev != NULL ? dev->ring : NULL;
}

wst_status_t wst_send_device_after(struct wst_send_device *dev, void *event)
{
    wst_status_t st = wst_gpu_set_device(dev->log, dev->device);

    if (st == WST_OK && dev->ring != NULL)
        st = wst_bounce_ring_after(dev->ring, event);
    if (st == WST_OK)
        st = wst_gpu_stream_wait(dev->log, dev->digest.stream, event);
    return st;
}

wst_status_t wst_send_device_digest_add(struct wst_send_device *dev,
                                        struct wst_digest *d, const void *data,
                                        uint64_t len)
{
    return wst_digest_batch_add(&dev->digest, d, data, len);
}

wst_status_t wst_send_device_digest_flush(struct wst_send_device *dev,
                                          struct wst_digest *d)
{
    return wst_digest_batch_flush(&dev->digest, d);
}

void wst_send_device_log_bounce(struct wst_send_device *dev,
                                const struct wst_logger *log)
{
    struct wst_bounce_stats b;

    if (dev == NULL || dev->ring == NULL)
        return;
    wst_bounce_ring_take_stats(dev->ring, &b);
    if (b.fills == 0)
        return;
    WST_INFO(log,
             "bounce: %llu slots filled, %.1f MiB from GPU %d; "
             "device-to-host %.3f ms mean, %.3f ms max per slot; "
             "no free slot %llu times",
             (unsigned long long)b.fills, (double)b.bytes / (1 << 20),
             dev->device, (double)b.copy_ns_sum / (double)b.fills / 1e6,
             (double)b.copy_ns_max / 1e6, (unsigned long long)b.no_slot);
}
