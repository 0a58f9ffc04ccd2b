/* tx_bounce.c - the bounce path: device shards that UCX cannot read go
 * through the pinned bounce ring (sender/device.h).
 *
 * A chunk (or small items gathered) is copied into a slot, and moved from
 * there once the copy's event has completed. A layer's fence waits until
 * every copy of it has become a move. A slot given back restarts the links
 * that found none free.
 */
#include "device.h"
#include "log.h"
#include "mover.h"
#include "sender_internal.h"

/* A bounce slot is free again: links that found none try again ('skip'
 * pumps itself once its own accounting is done). */
void wst_tx_bounce_slot_give(struct wst_sender *s, int slot,
                             const struct link *skip)
{
    wst_tx_device_slot_give(s->dev, slot);
    for (size_t i = 0; i < s->n_links; i++)
        if (&s->links[i] != skip && s->links[i].state == LINK_STREAMING)
            wst_tx_pump(&s->links[i]);
}

/* Progress thread: a bounce slot is filled; its move goes now. */
static void bounce_filled(void *arg, wst_status_t status, uint64_t done_ns)
{
    struct chunk_done *cd = arg;
    struct link *l = cd->l;
    struct wst_sender *s = l->s;

    (void)done_ns;
    if (cd->mover_gen != l->mover_gen || l->mover == NULL ||
        l->state != LINK_STREAMING) {
        /* A refit that failed meanwhile: nothing of it is moved. */
        wst_tx_bounce_slot_give(s, cd->slot, NULL);
        wst_tx_chunk_release(l, cd);
        return;
    }
    l->copying[cd->layer]--;
    if (status != WST_OK) {
        wst_tx_bounce_slot_give(s, cd->slot, NULL);
        wst_tx_chunk_release(l, cd);
        wst_link_fail(l, status, "copying layer %u from the GPU failed",
                      cd->layer);
        return;
    }
    wst_status_t st =
        l->mover->ops->move(l->mover, &cd->mv, wst_tx_move_done, cd);
    if (st != WST_OK) {
        wst_tx_bounce_slot_give(s, cd->slot, NULL);
        wst_tx_chunk_release(l, cd);
        wst_link_fail(l, st, "posting a move failed");
        return;
    }
    wst_tx_pump(l); /* the layer's fence may be due */
}

/* Bounce path: copies the device bytes of the next chunk (items 0, 'len'
 * bytes) or of 'items' gathered small items into a free slot; the move
 * follows in bounce_filled. 0 when blocked (window, or no free slot:
 * a slot given back pumps again). */
int wst_tx_bounce_post(struct link *l, size_t items, uint64_t len)
{
    struct wst_sender *s = l->s;
    const struct wst_plan_item *first = &l->plan.items[l->cursor];
    wst_status_t st = WST_OK;

    if (l->in_flight > 0 && l->in_flight + len > s->window)
        return 0;
    int slot = wst_tx_device_slot_take(s->dev);
    if (slot < 0)
        return 0;
    struct chunk_done *cd = wst_tx_chunk_new(l);
    if (cd == NULL) {
        wst_tx_device_slot_give(s->dev, slot);
        wst_link_fail(l, WST_ERR_NO_MEMORY, "no memory for a move");
        return 0;
    }
    cd->l = l;
    cd->mover_gen = l->mover_gen;
    cd->len = len;
    cd->gather = -1;
    cd->slot = slot;
    cd->layer = first->layer;
    cd->mv = (struct wst_move){
        .src = wst_tx_device_slot(s->dev, slot),
        .src_memh = wst_tx_device_slot_memh(s->dev),
        .length = len,
        .region = first->region,
        .dst_offset = first->dst_offset + l->cursor_off,
        .item = (uint32_t)l->cursor,
        .item_offset = l->cursor_off,
        .item_count = items > 0 ? (uint32_t)items : 1,
        .version = l->version,
    };
    if (items == 0) {
        st = wst_tx_device_fill(s->dev, slot, 0,
                                (const char *)s->shards[first->have].data +
                                    first->src_offset + l->cursor_off,
                                len);
    }
    for (size_t k = 0, at = 0; st == WST_OK && k < items; k++) {
        const struct wst_plan_item *it = &l->plan.items[l->cursor + k];
        st = wst_tx_device_fill(s->dev, slot, at,
                                (const char *)s->shards[it->have].data +
                                    it->src_offset,
                                it->length);
        at += it->length;
    }
    if (st == WST_OK)
        st = wst_tx_device_filled(s->dev, slot, bounce_filled, cd);
    if (st != WST_OK) {
        /* Copies already enqueued may still write the slot: it is lost
         * until the stream drains, and this refit fails anyway. */
        wst_tx_chunk_release(l, cd);
        wst_link_fail(l, st, "copying layer %u from the GPU failed",
                      first->layer);
        return 0;
    }
    l->copying[first->layer]++;
    l->in_flight += len;
    wst_tx_advance(l, items, len);
    return 1;
}

/* Progress thread: one line per refit on what the bounce path did. */
void wst_tx_bounce_log(void *arg)
{
    struct wst_sender *s = arg;
    struct wst_bounce_stats b;

    wst_tx_device_take_stats(s->dev, &b);
    if (b.fills == 0)
        return;
    WST_INFO(&s->log,
             "bounce: %llu slots filled, %.1f MiB from GPU %d; "
             "device-to-host %.3f ms mean, %.3f ms max per slot; "
             "no free slot %llu times",
             (unsigned long long)b.fills, (double)b.bytes / (1 << 20),
             wst_tx_device_ordinal(s->dev),
             (double)b.copy_ns_sum / (double)b.fills / 1e6,
             (double)b.copy_ns_max / 1e6, (unsigned long long)b.no_slot);
}
