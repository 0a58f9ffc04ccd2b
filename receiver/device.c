/* device.c - the receiver's GPU side (see device.h). */
#include "device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "digest_batch.h"
#include "errbuf.h"
#include "gpu.h"
#include "gpu_waiter.h"
#include "landing_ring.h"
#include "pinned.h"

/* One landed message's copy to the GPU; recs[i] goes with the ring's
 * piece i (landing_ring.h) and events[i]. */
struct copy_rec {
    struct wst_recv_device *dev;
    uint32_t idx; /* in recs[], events[] and the ring's pieces */
    struct wst_data_hdr hdr;
    size_t len;
    uint64_t tag;
    uint64_t enqueued_ns; /* copy enqueued */
};

struct wst_recv_device {
    const struct wst_logger *log;
    wst_worker_t *worker;
    int device;
    wst_recv_copied_fn copied_fn;
    void *arg;

    /* landing (progress thread): the ring's memory and pieces */
    struct wst_pinned ring;
    struct wst_landing_ring room;
    struct wst_landing_piece pieces[WST_LANDING_RECORDS];
    struct copy_rec recs[WST_LANDING_RECORDS];
    wst_gpu_event_t events[WST_LANDING_RECORDS];
    struct wst_landing_stats stats; /* since the last take */
    uint64_t parked_base;           /* the worker's parked count then */
    wst_gpu_stream_t copy_stream;
    struct wst_gpu_waiter *waiter; /* copies' events, in order */

    /* engine thread */
    struct wst_digest_batch verify;

    /* repack thread */
    wst_gpu_stream_t repack_stream;
    wst_gpu_event_t repacked;
};

/* Progress thread: a copy is done; its room is free again. */
static void copied(void *arg, wst_status_t status, uint64_t done_ns)
{
    struct copy_rec *rec = arg;
    struct wst_recv_device *dev = rec->dev;
    uint64_t ns = done_ns - rec->enqueued_ns;

    dev->stats.copies++;
    dev->stats.bytes += rec->len;
    dev->stats.latency_sum_ns += ns;
    if (ns > dev->stats.latency_max_ns)
        dev->stats.latency_max_ns = ns;
    dev->copied_fn(dev->arg, &rec->hdr, rec->len, rec->tag, status);
    wst_landing_ring_done(&dev->room, rec->idx);
    wst_worker_data_resume(dev->worker);
}

static wst_status_t create_streams(struct wst_recv_device *dev)
{
    wst_status_t st = wst_gpu_stream_create(dev->log, &dev->copy_stream);

    if (st == WST_OK)
        st = wst_gpu_stream_create(dev->log, &dev->repack_stream);
    if (st == WST_OK)
        st = wst_gpu_event_create(dev->log, 0, &dev->repacked);
    for (uint32_t i = 0; st == WST_OK && i < WST_LANDING_RECORDS; i++)
        st = wst_gpu_event_create(dev->log, 0, &dev->events[i]);
    if (st == WST_OK)
        st = wst_digest_batch_init(&dev->verify, dev->log, dev->device);
    return st;
}

static wst_status_t create_ring(struct wst_recv_device *dev)
{
    wst_status_t st =
        wst_pinned_create(&dev->ring, dev->log, dev->worker, WST_LANDING_BYTES);

    if (st != WST_OK)
        return st;
    wst_landing_ring_init(&dev->room, dev->ring.mem, WST_LANDING_BYTES,
                          dev->pieces, WST_LANDING_RECORDS);
    for (uint32_t i = 0; i < WST_LANDING_RECORDS; i++) {
        dev->recs[i].dev = dev;
        dev->recs[i].idx = i;
    }
    return WST_OK;
}

wst_status_t wst_recv_device_create(const struct wst_logger *log,
                                    wst_worker_t *worker, int device,
                                    wst_recv_copied_fn copied_fn, void *arg,
                                    struct wst_recv_device **dev_p)
{
    struct wst_recv_device *dev = calloc(1, sizeof(*dev));
    wst_status_t st;

    *dev_p = NULL;
    if (dev == NULL)
        return WST_ERR_NO_MEMORY;
    dev->log = log;
    dev->worker = worker;
    dev->device = device;
    dev->copied_fn = copied_fn;
    dev->arg = arg;
    st = wst_gpu_set_device(log, device);
    if (st == WST_OK)
        st = create_streams(dev);
    if (st == WST_OK)
        st = create_ring(dev);
    if (st == WST_OK)
        st = wst_gpu_waiter_create(log, worker, device, WST_LANDING_RECORDS,
                                   &dev->waiter);
    if (st != WST_OK) {
        wst_recv_device_stop(dev);
        wst_recv_device_destroy(dev);
        return st;
    }
    *dev_p = dev;
    return WST_OK;
}

void wst_recv_device_stop(struct wst_recv_device *dev)
{
    if (dev == NULL)
        return;
    wst_gpu_waiter_stop(dev->waiter);
    wst_pinned_unregister(&dev->ring);
}

void wst_recv_device_destroy(struct wst_recv_device *dev)
{
    if (dev == NULL)
        return;
    wst_gpu_waiter_destroy(dev->waiter);
    wst_digest_batch_fini(&dev->verify);
    for (uint32_t i = 0; i < WST_LANDING_RECORDS; i++)
        wst_gpu_event_destroy(dev->events[i]);
    wst_gpu_event_destroy(dev->repacked);
    wst_gpu_stream_destroy(dev->copy_stream);
    wst_gpu_stream_destroy(dev->repack_stream);
    wst_pinned_free(&dev->ring);
    free(dev);
}

void *wst_recv_device_land(struct wst_recv_device *dev, size_t len)
{
    int64_t i = len <= WST_LANDING_MESSAGE_MAX
                    ? wst_landing_ring_take(&dev->room, len)
                    : -1;

    return i >= 0 ? dev->pieces[i].bytes : NULL;
}

int wst_recv_device_owns(const struct wst_recv_device *dev, const void *ptr)
{
    const unsigned char *p = ptr;

    return p >= dev->ring.mem && p < dev->ring.mem + WST_LANDING_BYTES;
}

void wst_recv_device_release(struct wst_recv_device *dev, void *ptr)
{
    int64_t i = wst_landing_ring_find(&dev->room, ptr);

    if (i >= 0)
        wst_landing_ring_done(&dev->room, (uint32_t)i);
    wst_worker_data_resume(dev->worker);
}

wst_status_t wst_recv_device_copy(struct wst_recv_device *dev, void *ptr,
                                  void *dst, size_t len,
                                  const struct wst_data_hdr *hdr, uint64_t tag)
{
    int64_t i = wst_landing_ring_find(&dev->room, ptr);
    struct copy_rec *rec = i >= 0 ? &dev->recs[i] : NULL;
    /* Each calling thread makes the device current: streams belong to it. */
    wst_status_t st =
        rec != NULL ? wst_gpu_set_device(dev->log, dev->device) : WST_ERR_STATE;

    if (st == WST_OK)
        st = wst_gpu_copy_async(dev->log, dst, ptr, len, dev->copy_stream);
    if (st == WST_OK)
        st = wst_gpu_event_record(dev->log, dev->events[rec->idx],
                                  dev->copy_stream);
    if (st == WST_OK) {
        rec->hdr = *hdr;
        rec->len = len;
        rec->tag = tag;
        rec->enqueued_ns = wst_now_ns();
        /* The waiter has a record for every ring piece: never busy. */
        st =
            wst_gpu_waiter_add(dev->waiter, dev->events[rec->idx], copied, rec);
    }
    if (st != WST_OK) {
        wst_recv_device_release(dev, ptr);
        return st;
    }
    return WST_OK;
}

void wst_recv_device_take_stats(struct wst_recv_device *dev,
                                struct wst_landing_stats *stats)
{
    uint64_t parked = wst_worker_parked_total(dev->worker);

    *stats = dev->stats;
    stats->parked = parked - dev->parked_base;
    memset(&dev->stats, 0, sizeof(dev->stats));
    dev->parked_base = parked;
}

wst_status_t wst_recv_device_digest_flush(struct wst_recv_device *dev,
                                          struct wst_digest *d)
{
    return wst_digest_batch_flush(&dev->verify, d);
}

wst_status_t wst_recv_device_digest_add(struct wst_recv_device *dev,
                                        struct wst_digest *d, const void *data,
                                        uint64_t len)
{
    return wst_digest_batch_add(&dev->verify, d, data, len);
}

wst_status_t wst_recv_device_repack(struct wst_recv_device *dev,
                                    const struct wst_moe *moe,
                                    const struct wst_moe_layer *ml,
                                    void *const *region_data, char *err,
                                    size_t errlen)
{
    const struct wst_expert_shape *s = &ml->shape;
    uint64_t per = wst_moe_expert_bytes(ml); /* one expert's gate */
    const char *slot = (const char *)moe->staging + ml->slot * moe->slot_bytes;
    char *w13 = (char *)region_data[ml->w13_region] + ml->w13_offset;
    char *w2 = (char *)region_data[ml->w2_region] + ml->w2_offset;
    wst_status_t st;

    /* Staged expert i is global expert_start + i and the engine's local i
     * (linear placement, checked when planning): the whole layer goes in
     * one call, in order. */
    st = wst_gpu_set_device(dev->log, dev->device);
    if (st == WST_OK)
        st = ml->loader->load_layer_device(ml->loader, s, slot,
                                           slot + s->n_local * per,
                                           slot + 2 * s->n_local * per, w13, w2,
                                           dev->repack_stream, err, errlen);
    if (st == WST_OK)
        st = wst_gpu_event_record(dev->log, dev->repacked, dev->repack_stream);
    if (st == WST_OK)
        st = wst_gpu_event_sync(dev->log, dev->repacked);
    if (st != WST_OK) {
        char why[256];
        snprintf(why, sizeof(why), "%s",
                 err != NULL && err[0] ? err : wst_status_string(st));
        wst_errf(err, errlen, "layer %u: loader %s failed on GPU %d: %s",
                 ml->layer, ml->loader->name, dev->device, why);
    }
    return st;
}
