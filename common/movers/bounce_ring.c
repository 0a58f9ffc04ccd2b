/* bounce_ring.c - the sending side's pinned bounce ring (see
 * bounce_ring.h). */
#include "bounce_ring.h"

#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "gpu.h"
#include "pinned.h"

/* One slot's current fill. */
struct slot {
    struct wst_bounce_ring *ring;
    wst_gpu_event_t event;
    uint64_t bytes;       /* copied into it so far */
    uint64_t first_ns;    /* its first copy was enqueued */
    wst_gpu_waited_fn fn; /* after its copies */
    void *arg;
};

struct wst_bounce_ring {
    const struct wst_logger *log;
    int device;
    void (*wake)(void *arg);
    void *wake_arg;
    wst_gpu_stream_t copy_stream;
    struct wst_gpu_waiter *waiter;
    struct wst_pinned mem; /* [n_slots][WST_BOUNCE_SLOT_BYTES] */
    uint32_t n_slots;
    uint64_t free_slots; /* bit i: slot i is free */
    struct slot slots[WST_BOUNCE_MAX_SLOTS];
    struct wst_bounce_stats stats;
};

static wst_status_t create_slots(struct wst_bounce_ring *ring,
                                 wst_worker_t *worker)
{
    wst_status_t st =
        wst_pinned_create(&ring->mem, ring->log, worker,
                          (size_t)ring->n_slots * WST_BOUNCE_SLOT_BYTES);

    for (uint32_t i = 0; st == WST_OK && i < ring->n_slots; i++) {
        ring->slots[i].ring = ring;
        st = wst_gpu_event_create(ring->log, 0, &ring->slots[i].event);
    }
    ring->free_slots =
        ring->n_slots == 64 ? ~0ull : (1ull << ring->n_slots) - 1;
    return st;
}

wst_status_t wst_bounce_ring_create(const struct wst_bounce_ring_params *p,
                                    struct wst_bounce_ring **ring_p)
{
    struct wst_bounce_ring *ring;
    wst_status_t st;

    if (p->n_slots > WST_BOUNCE_MAX_SLOTS || p->n_slots < WST_BOUNCE_MIN_SLOTS)
        return WST_ERR_INVALID;
    ring = calloc(1, sizeof(*ring));
    if (ring == NULL)
        return WST_ERR_NO_MEMORY;
    ring->log = p->log;
    ring->device = p->device;
    ring->wake = p->wake;
    ring->wake_arg = p->wake_arg;
    ring->n_slots = p->n_slots;
    st = wst_gpu_set_device(p->log, p->device);
    if (st == WST_OK)
        st = wst_gpu_stream_create(p->log, &ring->copy_stream);
    if (st == WST_OK)
        st = create_slots(ring, p->worker);
    if (st == WST_OK)
        /* One entry per slot, plus one: a slot given back inside its own
         * completion (a move that finished at once) may be filled again
         * before that completion's entry is free. */
        st = wst_gpu_waiter_create(p->log, p->worker, p->device, p->n_slots + 1,
                                   &ring->waiter);
    if (st != WST_OK) {
        wst_bounce_ring_stop(ring);
        wst_bounce_ring_destroy(ring);
        return st;
    }
    *ring_p = ring;
    return WST_OK;
}

void wst_bounce_ring_stop(struct wst_bounce_ring *ring)
{
    if (ring == NULL)
        return;
    wst_gpu_waiter_stop(ring->waiter);
    wst_pinned_unregister(&ring->mem);
}

void wst_bounce_ring_destroy(struct wst_bounce_ring *ring)
{
    if (ring == NULL)
        return;
    wst_gpu_waiter_destroy(ring->waiter);
    for (uint32_t i = 0; i < WST_BOUNCE_MAX_SLOTS; i++)
        wst_gpu_event_destroy(ring->slots[i].event);
    wst_gpu_stream_destroy(ring->copy_stream);
    wst_pinned_free(&ring->mem);
    free(ring);
}

wst_status_t wst_bounce_ring_after(struct wst_bounce_ring *ring, void *event)
{
    return wst_gpu_stream_wait(ring->log, ring->copy_stream, event);
}

int wst_bounce_ring_take(struct wst_bounce_ring *ring)
{
    if (ring->free_slots == 0) {
        ring->stats.no_slot++;
        return -1;
    }
    int i = __builtin_ctzll(ring->free_slots);
    ring->free_slots &= ~(1ull << i);
    ring->slots[i].bytes = 0;
    return i;
}

void *wst_bounce_ring_slot(const struct wst_bounce_ring *ring, int slot)
{
    return ring->mem.mem + (size_t)slot * WST_BOUNCE_SLOT_BYTES;
}

ucp_mem_h wst_bounce_ring_memh(const struct wst_bounce_ring *ring)
{
    return ring->mem.memh;
}

void wst_bounce_ring_give(struct wst_bounce_ring *ring, int slot)
{
    ring->free_slots |= 1ull << slot;
    if (ring->wake != NULL)
        ring->wake(ring->wake_arg);
}

wst_status_t wst_bounce_ring_fill(struct wst_bounce_ring *ring, int slot,
                                  uint64_t offset, const void *src,
                                  uint64_t len)
{
    struct slot *sl = &ring->slots[slot];

    if (offset + len > WST_BOUNCE_SLOT_BYTES || len == 0)
        return WST_ERR_INVALID;
    if (sl->bytes == 0)
        sl->first_ns = wst_now_ns();
    sl->bytes += len;
    return wst_gpu_copy_async(ring->log,
                              (char *)wst_bounce_ring_slot(ring, slot) + offset,
                              src, len, ring->copy_stream);
}

/* Progress thread: the slot's copies are done. */
static void slot_waited(void *arg, wst_status_t status, uint64_t done_ns)
{
    struct slot *sl = arg;
    struct wst_bounce_ring *ring = sl->ring;
    uint64_t ns = done_ns - sl->first_ns;

    ring->stats.fills++;
    ring->stats.bytes += sl->bytes;
    ring->stats.copy_ns_sum += ns;
    if (ns > ring->stats.copy_ns_max)
        ring->stats.copy_ns_max = ns;
    sl->fn(sl->arg, status, done_ns);
}

wst_status_t wst_bounce_ring_filled(struct wst_bounce_ring *ring, int slot,
                                    wst_gpu_waited_fn fn, void *arg)
{
    struct slot *sl = &ring->slots[slot];
    wst_status_t st =
        wst_gpu_event_record(ring->log, sl->event, ring->copy_stream);

    sl->fn = fn;
    sl->arg = arg;
    /* Enough waiter entries for every slot: never busy. */
    if (st == WST_OK)
        st = wst_gpu_waiter_add(ring->waiter, sl->event, slot_waited, sl);
    return st;
}

void wst_bounce_ring_take_stats(struct wst_bounce_ring *ring,
                                struct wst_bounce_stats *stats)
{
    *stats = ring->stats;
    memset(&ring->stats, 0, sizeof(ring->stats));
}
