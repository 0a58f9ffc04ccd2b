/* device.c - the sender's GPU side (see device.h). */
#include "device.h"

#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "digest_batch.h"
#include "gpu.h"
#include "pinned.h"

/* One slot's current fill. */
struct slot {
    struct wst_tx_device *dev;
    int idx;
    wst_gpu_event_t event;
    uint64_t bytes;       /* copied into it so far */
    uint64_t first_ns;    /* its first copy was enqueued */
    wst_gpu_waited_fn fn; /* after its copies */
    void *arg;
};

struct wst_tx_device {
    const struct wst_logger *log;
    wst_worker_t *worker;
    int device;

    /* progress thread */
    wst_gpu_stream_t copy_stream;
    struct wst_gpu_waiter *waiter;
    struct wst_pinned ring; /* [n_slots][WST_BOUNCE_SLOT_BYTES] */
    uint32_t n_slots;
    uint64_t free_slots; /* bit i: slot i is free */
    struct slot slots[WST_BOUNCE_MAX_SLOTS];
    struct wst_bounce_stats stats;

    /* application thread */
    struct wst_digest_batch digest;
};

static wst_status_t create_ring(struct wst_tx_device *dev, uint32_t n_slots)
{
    wst_status_t st =
        wst_pinned_create(&dev->ring, dev->log, dev->worker,
                          (size_t)n_slots * WST_BOUNCE_SLOT_BYTES);

    if (st != WST_OK)
        return st;
    for (uint32_t i = 0; i < n_slots; i++) {
        dev->slots[i].dev = dev;
        dev->slots[i].idx = (int)i;
        st = wst_gpu_event_create(dev->log, 0, &dev->slots[i].event);
        if (st != WST_OK)
            return st;
    }
    dev->n_slots = n_slots;
    dev->free_slots = n_slots == 64 ? ~0ull : (1ull << n_slots) - 1;
    return WST_OK;
}

wst_status_t wst_tx_device_create(const struct wst_logger *log,
                                  wst_worker_t *worker, int device,
                                  uint32_t n_slots,
                                  struct wst_tx_device **dev_p)
{
    struct wst_tx_device *dev = calloc(1, sizeof(*dev));
    wst_status_t st;

    *dev_p = NULL;
    if (dev == NULL)
        return WST_ERR_NO_MEMORY;
    if (n_slots > WST_BOUNCE_MAX_SLOTS ||
        (n_slots > 0 && n_slots < WST_BOUNCE_MIN_SLOTS)) {
        free(dev);
        return WST_ERR_INVALID;
    }
    dev->log = log;
    dev->worker = worker;
    dev->device = device;
    st = wst_gpu_set_device(log, device);
    if (st == WST_OK)
        st = wst_gpu_stream_create(log, &dev->copy_stream);
    if (st == WST_OK)
        st = wst_digest_batch_init(&dev->digest, log, device);
    if (st == WST_OK && n_slots > 0)
        st = create_ring(dev, n_slots);
    if (st == WST_OK && n_slots > 0)
        /* One entry per slot, plus one: a slot given back inside its own
         * completion (a move that finished at once) may be filled again
         * before that completion's entry is free. */
        st = wst_gpu_waiter_create(log, worker, device, n_slots + 1,
                                   &dev->waiter);
    if (st != WST_OK) {
        wst_tx_device_stop(dev);
        wst_tx_device_destroy(dev);
        return st;
    }
    *dev_p = dev;
    return WST_OK;
}

void wst_tx_device_stop(struct wst_tx_device *dev)
{
    if (dev == NULL)
        return;
    wst_gpu_waiter_stop(dev->waiter);
    wst_pinned_unregister(&dev->ring);
}

void wst_tx_device_destroy(struct wst_tx_device *dev)
{
    if (dev == NULL)
        return;
    wst_gpu_waiter_destroy(dev->waiter);
    for (uint32_t i = 0; i < WST_BOUNCE_MAX_SLOTS; i++)
        wst_gpu_event_destroy(dev->slots[i].event);
    wst_digest_batch_fini(&dev->digest);
    wst_gpu_stream_destroy(dev->copy_stream);
    wst_pinned_free(&dev->ring);
    free(dev);
}

int wst_tx_device_ordinal(const struct wst_tx_device *dev)
{
    return dev->device;
}

wst_status_t wst_tx_device_after(struct wst_tx_device *dev, void *event)
{
    wst_status_t st = wst_gpu_set_device(dev->log, dev->device);

    if (st == WST_OK)
        st = wst_gpu_stream_wait(dev->log, dev->copy_stream, event);
    if (st == WST_OK)
        st = wst_gpu_stream_wait(dev->log, dev->digest.stream, event);
    return st;
}

int wst_tx_device_slot_take(struct wst_tx_device *dev)
{
    if (dev->free_slots == 0) {
        dev->stats.no_slot++;
        return -1;
    }
    int i = __builtin_ctzll(dev->free_slots);
    dev->free_slots &= ~(1ull << i);
    dev->slots[i].bytes = 0;
    return i;
}

void *wst_tx_device_slot(const struct wst_tx_device *dev, int slot)
{
    return dev->ring.mem + (size_t)slot * WST_BOUNCE_SLOT_BYTES;
}

ucp_mem_h wst_tx_device_slot_memh(const struct wst_tx_device *dev)
{
    return dev->ring.memh;
}

void wst_tx_device_slot_give(struct wst_tx_device *dev, int slot)
{
    dev->free_slots |= 1ull << slot;
}

wst_status_t wst_tx_device_fill(struct wst_tx_device *dev, int slot,
                                uint64_t offset, const void *src, uint64_t len)
{
    struct slot *sl = &dev->slots[slot];

    if (offset + len > WST_BOUNCE_SLOT_BYTES || len == 0)
        return WST_ERR_INVALID;
    if (sl->bytes == 0)
        sl->first_ns = wst_now_ns();
    sl->bytes += len;
    return wst_gpu_copy_async(dev->log,
                              (char *)wst_tx_device_slot(dev, slot) + offset,
                              src, len, dev->copy_stream);
}

/* Progress thread: the slot's copies are done. */
static void slot_waited(void *arg, wst_status_t status, uint64_t done_ns)
{
    struct slot *sl = arg;
    struct wst_tx_device *dev = sl->dev;
    uint64_t ns = done_ns - sl->first_ns;

    dev->stats.fills++;
    dev->stats.bytes += sl->bytes;
    dev->stats.copy_ns_sum += ns;
    if (ns > dev->stats.copy_ns_max)
        dev->stats.copy_ns_max = ns;
    sl->fn(sl->arg, status, done_ns);
}

wst_status_t wst_tx_device_filled(struct wst_tx_device *dev, int slot,
                                  wst_gpu_waited_fn fn, void *arg)
{
    struct slot *sl = &dev->slots[slot];
    wst_status_t st =
        wst_gpu_event_record(dev->log, sl->event, dev->copy_stream);

    sl->fn = fn;
    sl->arg = arg;
    /* Enough waiter entries for every slot: never busy. */
    if (st == WST_OK)
        st = wst_gpu_waiter_add(dev->waiter, sl->event, slot_waited, sl);
    return st;
}

void wst_tx_device_take_stats(struct wst_tx_device *dev,
                              struct wst_bounce_stats *stats)
{
    *stats = dev->stats;
    memset(&dev->stats, 0, sizeof(dev->stats));
}

wst_status_t wst_tx_device_digest_add(struct wst_tx_device *dev,
                                      struct wst_digest *d, const void *data,
                                      uint64_t len)
{
    return wst_digest_batch_add(&dev->digest, d, data, len);
}

wst_status_t wst_tx_device_digest_flush(struct wst_tx_device *dev,
                                        struct wst_digest *d)
{
    return wst_digest_batch_flush(&dev->digest, d);
}
