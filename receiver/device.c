/* device.c - the receiver's GPU side (see device.h). */
#include "device.h"

#include <stdio.h>
#include <stdlib.h>

#include "digest_batch.h"
#include "errbuf.h"
#include "gpu.h"

struct wst_recv_device {
    const struct wst_logger *log;
    int device;

    /* engine thread */
    struct wst_digest_batch verify;

    /* repack thread */
    wst_gpu_stream_t repack_stream;
    wst_gpu_event_t repacked;
};

wst_status_t wst_recv_device_create(const struct wst_logger *log, int device,
                                    struct wst_recv_device **dev_p)
{
    struct wst_recv_device *dev = calloc(1, sizeof(*dev));
    wst_status_t st;

    *dev_p = NULL;
    if (dev == NULL)
        return WST_ERR_NO_MEMORY;
    dev->log = log;
    dev->device = device;
    st = wst_gpu_set_device(log, device);
    if (st == WST_OK)
        st = wst_gpu_stream_create(log, &dev->repack_stream);
    if (st == WST_OK)
        st = wst_gpu_event_create(log, 0, &dev->repacked);
    if (st == WST_OK)
        st = wst_digest_batch_init(&dev->verify, log, device);
    if (st != WST_OK) {
        wst_recv_device_destroy(dev);
        return st;
    }
    *dev_p = dev;
    return WST_OK;
}

void wst_recv_device_destroy(struct wst_recv_device *dev)
{
    if (dev == NULL)
        return;
    wst_digest_batch_fini(&dev->verify);
    wst_gpu_event_destroy(dev->repacked);
    wst_gpu_stream_destroy(dev->repack_stream);
    free(dev);
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
