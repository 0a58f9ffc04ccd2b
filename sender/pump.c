/* pump.c - streaming a refit to one receiver, on the progress thread.
 *
 * The pump walks the link's plan items in plan order (layer by layer) and
 * hands them to the link's sending half (common/movers/tx.h), which knows
 * how they travel; the pump does not. Three things, in this order:
 *  1. LAYER_DONE for the next layer once it is both fenced (visible) and
 *     digested (digests.c), in layer order, with its byte count and digest;
 *     layers that become done at about the same time share a message;
 *  2. a fence for the next layer as soon as its last item is posted (it
 *     covers only what was posted before it, so later layers keep
 *     streaming while it completes);
 *  3. more of the current layer, as far as the sending half takes it. Data
 *     does not wait for digests: hashing a layer on the application thread
 *     overlaps sending it.
 *
 * Staged items (routed experts, which land in the receiver's bounded
 * staging) wait for the receiver's CREDIT for their layer: the pump offers
 * items only up to the first staged item of a layer without credit, and
 * the credit restarts it. A layer's dense items come first in plan order,
 * so they are not held up.
 */
#include "codec.h"
#include "log.h"
#include "sender_internal.h"
#include "worker.h"

/* Reports the layers of the batch in one LAYER_DONE. */
static void flush_layers_done(struct link *l)
{
    struct wst_msg m = {.type = WST_MSG_LAYER_DONE};
    uint32_t layer = l->done_sent - l->done_batch;

    if (l->done_batch == 0)
        return;
    m.u.layer_done.layer = layer;
    m.u.layer_done.version = l->version;
    m.u.layer_done.bytes = l->layer_bytes[layer];
    m.u.layer_done.digest = l->digests[layer];
    m.u.layer_done.n_more = l->done_batch - 1;
    for (uint32_t i = 0; i < m.u.layer_done.n_more; i++) {
        m.u.layer_done.more_bytes[i] = l->layer_bytes[layer + 1 + i];
        m.u.layer_done.more_digests[i] = l->digests[layer + 1 + i];
    }
    l->done_batch = 0;
    WST_DEBUG(&l->s->log, "receiver %s: layers %u..%u done", l->name, layer,
              layer + m.u.layer_done.n_more);
    wst_link_send(l, &m);
}

void wst_send_flush_done(void *arg)
{
    struct wst_sender *s = arg;

    s->done_flush_posted = 0;
    for (size_t i = 0; i < s->n_links; i++)
        if (s->links[i].state == LINK_STREAMING)
            flush_layers_done(&s->links[i]);
}

/* Layer done_sent is fenced and digested: it joins the batch, which goes
 * when full or from a post queued behind the events that are waiting now
 * (digests of other layers, completions of this round), so layers done
 * at about the same time share one message. Each digest comes back in a
 * post of its own, and a batch flushed at the end of each pump carried
 * about three layers (NOTES.md, issue 21). A receiver that did not offer
 * batches gets one message per layer. */
static void layer_done(struct link *l)
{
    struct wst_sender *s = l->s;

    l->done_sent++;
    l->done_batch++;
    if (!(l->plan.caps & WST_CAP_LAYER_BATCH) ||
        l->done_batch == 1 + WST_LAYER_DONE_MORE_MAX) {
        flush_layers_done(l);
        return;
    }
    if (!s->done_flush_posted &&
        wst_worker_post(s->worker, wst_send_flush_done, s) == WST_OK)
        s->done_flush_posted = 1;
    else if (!s->done_flush_posted)
        flush_layers_done(l); /* no memory to post: now */
}

static void on_moved(void *arg, uint64_t bytes, wst_status_t status)
{
    struct link *l = arg;

    if (l->state != LINK_STREAMING)
        return;
    if (status != WST_OK) {
        wst_link_fail(l, status, "moving data failed");
        return;
    }
    l->bytes_moved += bytes;
    wst_send_pump(l);
}

static void on_fenced(void *arg, uint32_t layer, wst_status_t status)
{
    struct link *l = arg;

    l->fence_pending = 0;
    if (l->state != LINK_STREAMING)
        return;
    if (status != WST_OK) {
        wst_link_fail(l, status, "making layer %u visible failed", layer);
        return;
    }
    l->fenced = layer + 1;
    wst_send_pump(l);
}

static void on_wake(void *arg)
{
    struct link *l = arg;

    if (l->state == LINK_STREAMING)
        wst_send_pump(l);
}

struct wst_tx_events wst_send_pump_events(struct link *l)
{
    return (struct wst_tx_events){
        .arg = l, .moved = on_moved, .fenced = on_fenced, .wake = on_wake};
}

void wst_send_pump_all(void *arg)
{
    struct wst_sender *s = arg;

    for (size_t i = 0; i < s->n_links; i++)
        if (s->links[i].state == LINK_STREAMING)
            wst_send_pump(&s->links[i]);
}

/* Tells the application of every layer up to 'layer' that it began. */
static void note_started(struct link *l, uint32_t layer)
{
    struct wst_sender *s = l->s;

    while (l->started <= layer) {
        if (s->progress_fn != NULL)
            s->progress_fn(s->progress_arg, (size_t)(l - s->links), l->started,
                           l->version);
        l->started++;
    }
}

/* The end of what may go now from the cursor: the end of its layer, or
 * its first staged item still waiting for the layer's credit. */
static size_t post_limit(const struct link *l)
{
    uint32_t layer = l->plan.items[l->cur.item].layer;
    size_t end = l->layer_first[layer + 1];

    if (l->credits[layer])
        return end;
    for (size_t k = l->cur.item; k < end; k++)
        if (l->plan.items[k].staged)
            return k;
    return end;
}

static int pump_step(struct link *l)
{
    uint32_t n_layers = l->plan.n_layers;
    int posted = 0;

    if (l->state != LINK_STREAMING)
        return 0;
    if (l->done_sent < l->fenced && l->done_sent < l->digests_ready) {
        layer_done(l);
        return 1;
    }
    if (!l->fence_pending && l->fence_layer < n_layers &&
        l->cur.item >= l->layer_first[l->fence_layer + 1]) {
        uint32_t layer = l->fence_layer++;
        l->fence_pending = 1;
        wst_status_t st = l->tx->ops->fence(l->tx, layer);
        if (st != WST_OK) {
            l->fence_pending = 0;
            wst_link_fail(l, st, "fence of layer %u failed", layer);
            return 0;
        }
        return 1;
    }
    if (l->cur.item >= l->plan.n_items)
        return 0;
    size_t limit = post_limit(l);
    if (limit == l->cur.item)
        return 0; /* the credit pumps again */
    uint32_t layer = l->plan.items[l->cur.item].layer;
    note_started(l, layer);
    wst_status_t st = l->tx->ops->post(l->tx, &l->cur, limit, &posted);
    if (st != WST_OK) {
        wst_link_fail(l, st, "posting layer %u failed", layer);
        return 0;
    }
    return posted;
}

/* Events may fire inside post() or fence(), re-entering the pump: the
 * outer call keeps going instead of recursing. */
void wst_send_pump(struct link *l)
{
    if (l->pumping) {
        l->pump_again = 1;
        return;
    }
    l->pumping = 1;
    do {
        l->pump_again = 0;
        while (pump_step(l))
            ;
    } while (l->pump_again);
    l->pumping = 0;
}
