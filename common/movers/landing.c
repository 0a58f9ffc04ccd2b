/* landing.c - the receiving side's landing ring (see landing.h). */
#include "landing.h"

#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "gpu.h"
#include "gpu_waiter.h"
#include "landing_ring.h"
#include "pinned.h"

/* One landed message's copy to the GPU; recs[i] goes with the ring's
 * piece i (landing_ring.h) and events[i]. */
struct copy_rec {
    struct wst_landing *landing;
    uint32_t idx; /* in recs[], events[] and the ring's pieces */
    size_t len;
    wst_landing_copied_fn fn;
    void *ctx;
    uint64_t tag;
    uint64_t enqueued_ns; /* copy enqueued */
};

struct wst_landing {
    const struct wst_logger *log;
    wst_worker_t *worker;
    int device;
    struct wst_pinned mem; /* the host ring; unused on the device */
    unsigned char *dmem;   /* the device ring (owned); NULL on the host */
    unsigned char *base;   /* the ring: mem.mem or dmem */
    size_t bytes;
    size_t message_max; /* the largest message taken */
    int on_device;
    struct wst_landing_ring room;
    struct wst_landing_piece pieces[WST_LANDING_RECORDS];
    struct copy_rec recs[WST_LANDING_RECORDS];
    wst_gpu_event_t events[WST_LANDING_RECORDS];
    struct wst_landing_stats stats; /* since the last take */
    uint64_t parked_base;           /* the worker's parked count then */
    wst_gpu_stream_t copy_stream;
    struct wst_gpu_waiter *waiter; /* copies' events, in order */
};

/* Progress thread: a copy is done; its room is free again. */
static void copied(void *arg, wst_status_t status, uint64_t done_ns)
{
    struct copy_rec *rec = arg;
    struct wst_landing *l = rec->landing;
    uint64_t ns = done_ns - rec->enqueued_ns;

    l->stats.copies++;
    l->stats.bytes += rec->len;
    l->stats.latency_sum_ns += ns;
    if (ns > l->stats.latency_max_ns)
        l->stats.latency_max_ns = ns;
    rec->fn(rec->ctx, rec->tag, rec->len, status);
    wst_landing_ring_done(&l->room, rec->idx);
    wst_worker_data_resume(l->worker);
}

static wst_status_t create_parts(struct wst_landing *l)
{
    wst_status_t st = wst_gpu_stream_create(l->log, &l->copy_stream);

    for (uint32_t i = 0; st == WST_OK && i < WST_LANDING_RECORDS; i++)
        st = wst_gpu_event_create(l->log, 0, &l->events[i]);
    if (st == WST_OK && !l->on_device)
        st = wst_pinned_create(&l->mem, l->log, l->worker, l->bytes);
    else if (st == WST_OK)
        st = wst_gpu_malloc(l->log, l->bytes, (void **)&l->dmem);
    if (st != WST_OK)
        return st;
    l->base = l->dmem != NULL ? l->dmem : l->mem.mem;
    wst_landing_ring_init(&l->room, l->base, l->bytes, l->pieces,
                          WST_LANDING_RECORDS);
    for (uint32_t i = 0; i < WST_LANDING_RECORDS; i++) {
        l->recs[i].landing = l;
        l->recs[i].idx = i;
    }
    return wst_gpu_waiter_create(l->log, l->worker, l->device,
                                 WST_LANDING_RECORDS, &l->waiter);
}

static wst_status_t landing_create(const struct wst_logger *log,
                                   wst_worker_t *worker, int device,
                                   int on_device, size_t bytes,
                                   size_t message_max,
                                   struct wst_landing **landing_p)
{
    struct wst_landing *l = calloc(1, sizeof(*l));
    wst_status_t st;

    if (l == NULL)
        return WST_ERR_NO_MEMORY;
    l->log = log;
    l->worker = worker;
    l->device = device;
    l->bytes = bytes;
    l->message_max = message_max;
    l->on_device = on_device;
    st = wst_gpu_set_device(log, device);
    if (st == WST_OK)
        st = create_parts(l);
    if (st != WST_OK) {
        wst_landing_stop(l);
        wst_landing_destroy(l);
        return st;
    }
    *landing_p = l;
    return WST_OK;
}

wst_status_t wst_landing_create(const struct wst_logger *log,
                                wst_worker_t *worker, int device,
                                struct wst_landing **landing_p)
{
    return landing_create(log, worker, device, 0, WST_LANDING_BYTES,
                          WST_LANDING_MESSAGE_MAX, landing_p);
}

wst_status_t wst_landing_create_device(const struct wst_logger *log,
                                       wst_worker_t *worker, int device,
                                       size_t bytes, size_t message_max,
                                       struct wst_landing **landing_p)
{
    if (bytes < WST_LANDING_MESSAGE_MAX ||
        message_max < WST_LANDING_MESSAGE_MAX ||
        message_max > WST_DATA_DEVICE_CHUNK_MAX)
        return WST_ERR_INVALID;
    if (message_max > bytes)
        message_max = bytes;
    return landing_create(log, worker, device, 1, bytes, message_max,
                          landing_p);
}

void wst_landing_stop(struct wst_landing *l)
{
    if (l == NULL)
        return;
    wst_gpu_waiter_stop(l->waiter);
    wst_pinned_unregister(&l->mem);
}

void wst_landing_destroy(struct wst_landing *l)
{
    if (l == NULL)
        return;
    wst_gpu_waiter_destroy(l->waiter);
    for (uint32_t i = 0; i < WST_LANDING_RECORDS; i++)
        wst_gpu_event_destroy(l->events[i]);
    wst_gpu_stream_destroy(l->copy_stream);
    wst_pinned_free(&l->mem);
    wst_gpu_free(l->dmem);
    free(l);
}

size_t wst_landing_message_max(const struct wst_landing *l)
{
    return l->message_max;
}

void *wst_landing_take(struct wst_landing *l, size_t len)
{
    int64_t i =
        len <= l->message_max ? wst_landing_ring_take(&l->room, len) : -1;

    return i >= 0 ? l->pieces[i].bytes : NULL;
}

int wst_landing_owns(const struct wst_landing *l, const void *ptr)
{
    const unsigned char *p = ptr;

    return l->base != NULL && p >= l->base && p < l->base + l->bytes;
}

void wst_landing_release(struct wst_landing *l, void *ptr)
{
    int64_t i = wst_landing_ring_find(&l->room, ptr);

    if (i >= 0)
        wst_landing_ring_done(&l->room, (uint32_t)i);
    wst_worker_data_resume(l->worker);
}

wst_status_t wst_landing_copy(struct wst_landing *l, void *ptr, void *dst,
                              size_t len, wst_landing_copied_fn fn, void *ctx,
                              uint64_t tag)
{
    int64_t i = wst_landing_ring_find(&l->room, ptr);
    struct copy_rec *rec = i >= 0 ? &l->recs[i] : NULL;
    /* Each calling thread makes the device current: streams belong to it. */
    wst_status_t st =
        rec != NULL ? wst_gpu_set_device(l->log, l->device) : WST_ERR_STATE;

    if (st == WST_OK)
        st = wst_gpu_copy_async(l->log, dst, ptr, len, l->copy_stream);
    if (st == WST_OK)
        st = wst_gpu_event_record(l->log, l->events[rec->idx], l->copy_stream);
    if (st == WST_OK) {
        rec->len = len;
        rec->fn = fn;
        rec->ctx = ctx;
        rec->tag = tag;
        rec->enqueued_ns = wst_now_ns();
        /* The waiter has a record for every ring piece: never busy. */
        st = wst_gpu_waiter_add(l->waiter, l->events[rec->idx], copied, rec);
    }
    if (st != WST_OK) {
        wst_landing_release(l, ptr);
        return st;
    }
    return WST_OK;
}

void wst_landing_take_stats(struct wst_landing *l,
                            struct wst_landing_stats *stats)
{
    uint64_t parked = wst_worker_parked_total(l->worker);

    *stats = l->stats;
    stats->parked = parked - l->parked_base;
    memset(&l->stats, 0, sizeof(l->stats));
    l->parked_base = parked;
}
