/* pump.c - streaming a refit to one receiver, on the progress thread.
 *
 * Streaming pumps items in plan order (layer by layer), cut into chunks and
 * bounded by a window of bytes in flight; right after a layer's last item a
 * fence makes its bytes visible (later layers keep streaming meanwhile), and
 * once the layer is both fenced and digested (digests.c), LAYER_DONE
 * carries its byte count and digest.
 *
 * Staged items (routed experts, which land in the receiver's bounded
 * staging) wait for the receiver's CREDIT for their layer: the pump stops
 * at the first staged item of a layer without credit, and the credit
 * restarts it. A layer's dense items come first in plan order, so they are
 * not held up.
 *
 * Device shards on the bounce path go through tx_bounce.c; on the nccl
 * path a layer is one exchange (tx_nccl.c).
 */
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "log.h"
#include "mover.h"
#include "sender_internal.h"
#include "worker.h"

/* Items this small whose destinations follow each other (a tensor-parallel
 * slice: one item per row) are gathered into one message of at most
 * GATHER_BYTES, through GATHER_BUFS buffers per link registered once. */
#define GATHER_ITEM_MAX (64u << 10)
#define GATHER_BYTES (1u << 20)
#define GATHER_BUFS 8u

/* ---- streaming ---- */

static void send_layer_done(struct link *l, uint32_t layer)
{
    struct wst_msg m = {.type = WST_MSG_LAYER_DONE};

    m.u.layer_done.layer = layer;
    m.u.layer_done.version = l->version;
    m.u.layer_done.bytes = l->layer_bytes[layer];
    m.u.layer_done.digest = l->digests[layer];
    WST_DEBUG(&l->s->log, "receiver %s: layer %u done, %llu bytes", l->name,
              layer, (unsigned long long)l->layer_bytes[layer]);
    wst_link_send(l, &m);
}

static void fence_done(void *arg, wst_status_t status)
{
    struct link *l = arg;
    uint32_t layer = l->fence_layer - 1;

    l->fence_pending = 0;
    if (l->state != LINK_STREAMING)
        return;
    if (status != WST_OK) {
        wst_link_fail(l, status, "making layer %u visible failed", layer);
        return;
    }
    l->fenced = layer + 1;
    wst_tx_pump(l);
}

/* Chunk contexts are recycled: after the first refit the data path
 * allocates nothing. */
struct chunk_done *wst_tx_chunk_new(struct link *l)
{
    struct chunk_done *cd = l->free_chunks;

    if (cd != NULL)
        l->free_chunks = cd->next;
    else
        cd = malloc(sizeof(*cd));
    return cd;
}

void wst_tx_chunk_release(struct link *l, struct chunk_done *cd)
{
    cd->next = l->free_chunks;
    l->free_chunks = cd;
}

void wst_tx_move_done(void *arg, wst_status_t status)
{
    struct chunk_done *cd = arg;
    struct link *l = cd->l;

    if (cd->gather >= 0)
        l->gather_free |= 1u << cd->gather;
    if (cd->slot >= 0)
        wst_tx_bounce_slot_give(l->s, cd->slot, l);
    if (cd->mover_gen != l->mover_gen) {
        wst_tx_chunk_release(l, cd); /* a move of a mover that failed */
        return;
    }
    l->in_flight -= cd->len;
    l->bytes_moved += status == WST_OK ? cd->len : 0;
    wst_tx_chunk_release(l, cd);
    if (l->state != LINK_STREAMING)
        return;
    if (status != WST_OK) {
        wst_link_fail(l, status, "moving data failed");
        return;
    }
    wst_tx_pump(l);
}

/* Items from the cursor on that can go as one message: small, in one
 * layer and region, staged alike, each destination right after the last,
 * GATHER_BYTES at most in all. Their byte total goes to *bytes_p. */
static size_t gather_count(const struct link *l, uint64_t *bytes_p)
{
    const struct shard *shards = l->s->shards;
    const struct wst_plan_item *items = l->plan.items;
    const struct wst_plan_item *first = &items[l->cursor];
    int first_device = shards[first->have].device >= 0;
    uint64_t bytes = 0;
    size_t n = 0;

    for (size_t k = l->cursor; k < l->plan.n_items; k++, n++) {
        const struct wst_plan_item *it = &items[k];
        if (it->length >= GATHER_ITEM_MAX ||
            (shards[it->have].device >= 0) != first_device ||
            bytes + it->length > GATHER_BYTES || it->layer != first->layer ||
            it->region != first->region || it->staged != first->staged ||
            it->dst_offset != first->dst_offset + bytes)
            break;
        bytes += it->length;
    }
    *bytes_p = bytes;
    return n;
}

/* The link's gather buffers, registered once, on first use. */
static int gather_ready(struct link *l)
{
    size_t bytes = (size_t)GATHER_BUFS * GATHER_BYTES;

    if (l->gather != NULL)
        return 1;
    l->gather = aligned_alloc(4096, bytes);
    if (l->gather == NULL)
        return 0;
    if (wst_worker_mem_map(l->s->worker, l->gather, bytes, &l->gather_memh) !=
        WST_OK) {
        free(l->gather);
        l->gather = NULL;
        return 0;
    }
    l->gather_free = (1u << GATHER_BUFS) - 1;
    return 1;
}

/* Unregistered while the worker lives; freed once it is gone (no move
 * can read the buffers then). */
void wst_tx_gather_unmap(struct link *l)
{
    if (l->gather != NULL)
        wst_worker_mem_unmap(l->s->worker, l->gather_memh);
}

/* The cursor passes 'items' whole items, or (items 0) 'len' bytes of the
 * current one. */
void wst_tx_advance(struct link *l, size_t items, uint64_t len)
{
    if (items > 0) {
        l->cursor += items;
        l->cursor_off = 0;
        return;
    }
    l->cursor_off += len;
    if (l->cursor_off == l->plan.items[l->cursor].length) {
        l->cursor++;
        l->cursor_off = 0;
    }
}

/* Posts one move; the window and cursor advance with it. */
static int post_move(struct link *l, struct wst_move *mv, int gather,
                     size_t items)
{
    struct chunk_done *cd = wst_tx_chunk_new(l);

    if (cd == NULL) {
        wst_link_fail(l, WST_ERR_NO_MEMORY, "no memory for a move");
        return 0;
    }
    cd->l = l;
    cd->mover_gen = l->mover_gen;
    cd->len = mv->length;
    cd->gather = gather;
    cd->slot = -1;
    if (gather >= 0)
        l->gather_free &= ~(1u << gather);
    l->in_flight += mv->length;
    wst_tx_advance(l, items, mv->length);
    wst_status_t st = l->mover->ops->move(l->mover, mv, wst_tx_move_done, cd);
    if (st != WST_OK) {
        l->in_flight -= mv->length;
        if (gather >= 0)
            l->gather_free |= 1u << gather;
        wst_tx_chunk_release(l, cd);
        wst_link_fail(l, st, "posting a move failed");
        return 0;
    }
    return 1;
}

/* Copies the items [cursor, cursor + n) into a gather buffer and posts
 * them as one message; 0 when blocked (window, or every buffer busy:
 * move_done pumps again). */
static int post_gathered(struct link *l, size_t n, uint64_t bytes)
{
    struct wst_sender *s = l->s;
    const struct wst_plan_item *first = &l->plan.items[l->cursor];

    if (l->in_flight > 0 && l->in_flight + bytes > s->window)
        return 0;
    if (l->gather_free == 0)
        return 0;
    int g = __builtin_ctz(l->gather_free);
    unsigned char *buf = l->gather + (size_t)g * GATHER_BYTES, *at = buf;
    for (size_t k = 0; k < n; k++) {
        const struct wst_plan_item *it = &l->plan.items[l->cursor + k];
        memcpy(at, (const char *)s->shards[it->have].data + it->src_offset,
               it->length);
        at += it->length;
    }
    struct wst_move mv = {
        .src = buf,
        .src_memh = l->gather_memh,
        .length = bytes,
        .region = first->region,
        .dst_offset = first->dst_offset,
        .item = (uint32_t)l->cursor,
        .item_offset = 0,
        .item_count = (uint32_t)n,
        .version = l->version,
    };
    return post_move(l, &mv, g, n);
}

/* Posts the next chunk of the current item (or the next small items,
 * gathered); returns 0 when blocked. */
static int post_chunk(struct link *l)
{
    struct wst_sender *s = l->s;
    const struct wst_plan_item *it = &l->plan.items[l->cursor];
    const struct shard *sh = &s->shards[it->have];
    uint64_t len = it->length - l->cursor_off;

    if (it->staged && !l->credits[it->layer])
        return 0; /* on_credit pumps again */
    while (l->started <= it->layer) {
        if (s->progress_fn != NULL)
            s->progress_fn(s->progress_arg, (size_t)(l - s->links), l->started,
                           l->version);
        l->started++;
    }
    int bounce = sh->device >= 0 && l->path == WST_PATH_BOUNCE;
    if (l->cursor_off == 0 && it->length < GATHER_ITEM_MAX) {
        uint64_t bytes;
        size_t n = gather_count(l, &bytes);
        if (n > 1 && bounce)
            return wst_tx_bounce_post(l, n, bytes);
        if (n > 1 && gather_ready(l))
            return post_gathered(l, n, bytes);
    }
    if (len > WST_DATA_CHUNK_MAX)
        len = WST_DATA_CHUNK_MAX;
    if (bounce)
        return wst_tx_bounce_post(l, 0, len);
    if (l->in_flight > 0 && l->in_flight + len > s->window)
        return 0;
    struct wst_move mv = {
        .src = (const char *)sh->data + it->src_offset + l->cursor_off,
        .src_memh = sh->memh,
        .length = len,
        .region = it->region,
        .dst_offset = it->dst_offset + l->cursor_off,
        .item = (uint32_t)l->cursor,
        .item_offset = l->cursor_off,
        .item_count = 1,
        .version = l->version,
    };
    return post_move(l, &mv, -1, 0);
}

/* One step of the pump; returns 0 when nothing more can be done now.
 * Three things, in this order of priority:
 *  1. LAYER_DONE for the next layer once it is both fenced (visible) and
 *     digested, in layer order;
 *  2. a fence for the next layer as soon as its last item is posted (it
 *     covers only what was posted before it, so later layers keep
 *     streaming while it completes);
 *  3. the next chunk, within the window. Data does not wait for digests:
 *     hashing a layer on the application thread overlaps sending it. */
static int pump_step(struct link *l)
{
    uint32_t n_layers = l->plan.n_layers;

    if (l->state != LINK_STREAMING)
        return 0;
    if (l->done_sent < l->fenced && l->done_sent < l->digests_ready) {
        send_layer_done(l, l->done_sent++);
        return 1;
    }
    if (l->path == WST_PATH_NCCL)
        return wst_tx_nccl_step(l);
    if (!l->fence_pending && l->fence_layer < n_layers &&
        l->cursor >= l->layer_first[l->fence_layer + 1] &&
        l->copying[l->fence_layer] == 0) {
        uint32_t layer = l->fence_layer++;
        l->fence_pending = 1;
        wst_status_t st = l->mover->ops->fence(l->mover, fence_done, l);
        if (st != WST_OK) {
            l->fence_pending = 0;
            wst_link_fail(l, st, "fence of layer %u failed", layer);
            return 0;
        }
        return 1;
    }
    if (l->cursor < l->plan.n_items)
        return post_chunk(l);
    return 0;
}

/* Callbacks may fire inside move() or fence(), re-entering pump: the outer
 * call keeps going instead of recursing. */
void wst_tx_pump(struct link *l)
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
