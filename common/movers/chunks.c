/* chunks.c - the sending half of the put and am movers (see chunks.h).
 *
 * Each post takes the next piece from the cursor:
 *  - a chunk of one item, at most WST_DATA_CHUNK_MAX bytes (or the item's
 *    own chunk, tx.h), moved from the shard itself; or
 *  - small items (a tensor-parallel slice is one item per row) whose
 *    destinations follow each other, gathered into one message of at most
 *    WST_GATHER_BYTES through one of the tx's gather buffers (registered
 *    once, on first use); or, to a receiver that takes them, small host
 *    items of a layer wherever they land, as one scatter message of at
 *    most WST_SCATTER_BYTES (a sender of an FSDP shard has a small piece
 *    of every tensor for every receiver);
 *  - device pieces, with a bounce ring, are copied into a pinned slot
 *    first and moved once the copy's event completed (bounce_filled).
 * Every piece counts against the window of bytes in flight. A fence goes
 * to the wire once the layer's copies have all become moves.
 */
#include "chunks.h"

#include <stdlib.h>
#include <string.h>

#include "worker.h"

/* Items this small whose destinations follow each other are gathered, into
 * one of GATHER_BUFS buffers of WST_GATHER_BYTES. */
#define GATHER_ITEM_MAX (64u << 10)
#define GATHER_BUFS 8u

/* One piece in flight; recycled (after the first refit the data path
 * allocates nothing). */
struct piece {
    struct piece *next; /* in the free list */
    struct chunks_tx *c;
    uint64_t len;
    int gather; /* gather buffer it holds, or -1 */
    int slot;   /* bounce slot it holds, or -1 */
    uint32_t layer;
    struct wst_move mv; /* bounce: posted once the slot is filled */
};

struct chunks_tx {
    struct wst_tx tx; /* first */
    const struct wst_logger *log;
    wst_worker_t *worker;
    struct wst_wire *wire;        /* owned */
    struct wst_bounce_ring *ring; /* borrowed; NULL: no device sources */
    uint64_t window;
    int scatter; /* chunks.h */
    uint64_t in_flight;
    uint32_t *copying; /* [n_layers]: bounce copies not yet moves */
    int fence_waiting; /* a fence waits for copies of fence_layer */
    uint32_t fence_layer;
    struct piece *free_pieces;
    unsigned char *gather; /* [GATHER_BUFS][WST_GATHER_BYTES]; lazily */
    ucp_mem_h gather_memh;
    uint32_t gather_free; /* bit i: buffer i is free */
    uint64_t live;        /* pieces in flight, and 1 until destroy */
};

static void chunks_free(struct chunks_tx *c)
{
    while (c->free_pieces != NULL) {
        struct piece *p = c->free_pieces;
        c->free_pieces = p->next;
        free(p);
    }
    if (c->gather != NULL)
        wst_worker_mem_unmap(c->worker, c->gather_memh);
    free(c->gather);
    free(c->copying);
    free(c);
}

static struct piece *piece_new(struct chunks_tx *c)
{
    struct piece *p = c->free_pieces;

    if (p != NULL)
        c->free_pieces = p->next;
    else
        p = malloc(sizeof(*p));
    if (p != NULL) {
        p->c = c;
        p->gather = -1;
        p->slot = -1;
        c->live++;
    }
    return p;
}

/* Gives back what 'p' holds and recycles it. */
static void piece_recycle(struct chunks_tx *c, struct piece *p)
{
    if (p->gather >= 0)
        c->gather_free |= 1u << p->gather;
    if (p->slot >= 0)
        wst_bounce_ring_give(c->ring, p->slot);
    p->next = c->free_pieces;
    c->free_pieces = p;
}

/* Returns nonzero when the tx is gone (the last piece freed it). */
static int piece_release(struct chunks_tx *c, struct piece *p)
{
    piece_recycle(c, p);
    if (--c->live == 0) {
        chunks_free(c);
        return 1;
    }
    return 0;
}

/* piece_release for a caller that holds a reference (hold()): the tx
 * cannot be freed here, and its drop() frees it if it is the last. Kept
 * apart so no path frees the tx before that drop() touches it (gcc's
 * -Wuse-after-free cannot see that a held reference keeps live > 0). */
static void piece_release_held(struct chunks_tx *c, struct piece *p)
{
    piece_recycle(c, p);
    c->live--;
}

static int destroyed(const struct chunks_tx *c)
{
    return c->tx.ev.moved == NULL;
}

/* An event may destroy the tx (a link that fails on it does): code that
 * goes on after raising one holds a reference, and drop() says whether the
 * tx is gone or destroyed (then nothing but freeing may touch it). */
static void hold(struct chunks_tx *c)
{
    c->live++;
}

static int drop(struct chunks_tx *c)
{
    if (--c->live == 0) {
        chunks_free(c);
        return 1;
    }
    return destroyed(c);
}

static void fence_done(void *arg, wst_status_t status)
{
    struct chunks_tx *c = arg;

    if (!destroyed(c))
        c->tx.ev.fenced(c->tx.ev.arg, c->fence_layer, status);
}

static wst_status_t fence_now(struct chunks_tx *c)
{
    c->fence_waiting = 0;
    return c->wire->ops->fence(c->wire, fence_done, c);
}

static void move_done(void *arg, wst_status_t status)
{
    struct piece *p = arg;
    struct chunks_tx *c = p->c;
    uint64_t len = p->len;

    c->in_flight -= len;
    if (piece_release(c, p) || destroyed(c))
        return;
    c->tx.ev.moved(c->tx.ev.arg, len, status);
}

/* Progress thread: a bounce slot is filled; its move goes now. */
static void bounce_filled(void *arg, wst_status_t status, uint64_t done_ns)
{
    struct piece *p = arg;
    struct chunks_tx *c = p->c;
    uint32_t layer = p->layer;

    (void)done_ns;
    c->copying[layer]--;
    if (destroyed(c) || status != WST_OK) {
        /* A refit that failed meanwhile: nothing of it is moved. */
        c->in_flight -= p->len;
        uint64_t len = p->len;
        if (piece_release(c, p) || destroyed(c))
            return;
        c->tx.ev.moved(c->tx.ev.arg, len, status);
        return;
    }
    hold(c); /* the move may complete, and its event destroy us, at once */
    wst_status_t st = c->wire->ops->move(c->wire, &p->mv, move_done, p);
    if (st != WST_OK) {
        c->in_flight -= p->len;
        uint64_t len = p->len;
        piece_release_held(c, p);
        if (!destroyed(c))
            c->tx.ev.moved(c->tx.ev.arg, len, st);
        drop(c);
        return;
    }
    if (!destroyed(c) && c->fence_waiting && layer == c->fence_layer &&
        c->copying[layer] == 0) {
        st = fence_now(c);
        if (st != WST_OK && !destroyed(c))
            c->tx.ev.fenced(c->tx.ev.arg, layer, st);
    }
    if (!destroyed(c))
        c->tx.ev.wake(c->tx.ev.arg);
    drop(c);
}

/* Items from the cursor (at an item's start) up to 'limit' that can go as
 * one message: small, host or device alike, in one region, staged alike,
 * each destination right after the last, WST_GATHER_BYTES at most in all.
 * Their byte total goes to *bytes_p. */
static size_t gather_count(const struct chunks_tx *c, size_t at, size_t limit,
                           uint64_t *bytes_p)
{
    const struct wst_tx_plan *pl = c->tx.plan;
    const struct wst_plan_item *first = &pl->items[at];
    int first_device = pl->srcs[at].device >= 0;
    uint64_t bytes = 0;
    size_t n = 0;

    for (size_t k = at; k < limit; k++, n++) {
        const struct wst_plan_item *it = &pl->items[k];
        if (it->length >= GATHER_ITEM_MAX || it->more_rows != 0 ||
            (pl->srcs[k].device >= 0) != first_device ||
            bytes + it->length > WST_GATHER_BYTES ||
            it->layer != first->layer || it->region != first->region ||
            it->staged != first->staged ||
            it->dst_offset != first->dst_offset + bytes)
            break;
        bytes += it->length;
    }
    *bytes_p = bytes;
    return n;
}

/* Items from the cursor (at an item's start) up to 'limit' that can go as
 * one scatter message (worker.h): small host items of one layer, staged
 * alike, WST_SCATTER_BYTES at most in all, wherever they land. */
static size_t scatter_count(const struct chunks_tx *c, size_t at, size_t limit,
                            uint64_t *bytes_p)
{
    const struct wst_tx_plan *pl = c->tx.plan;
    const struct wst_plan_item *first = &pl->items[at];
    uint64_t bytes = 0;
    size_t n = 0;

    for (size_t k = at; k < limit; k++, n++) {
        const struct wst_plan_item *it = &pl->items[k];
        if (it->length >= GATHER_ITEM_MAX || it->more_rows != 0 ||
            pl->srcs[k].device >= 0 || bytes + it->length > WST_SCATTER_BYTES ||
            it->layer != first->layer || it->staged != first->staged)
            break;
        bytes += it->length;
    }
    *bytes_p = bytes;
    return n;
}

/* The gather buffers, registered once, on first use. */
static int gather_ready(struct chunks_tx *c)
{
    size_t bytes = (size_t)GATHER_BUFS * WST_GATHER_BYTES;

    if (c->gather != NULL)
        return 1;
    c->gather = aligned_alloc(4096, bytes);
    if (c->gather == NULL)
        return 0;
    if (wst_worker_mem_map(c->worker, c->gather, bytes, &c->gather_memh) !=
        WST_OK) {
        free(c->gather);
        c->gather = NULL;
        return 0;
    }
    c->gather_free = (1u << GATHER_BUFS) - 1;
    return 1;
}

/* The cursor passes 'items' whole items, or (items 0) 'len' bytes of the
 * current one. */
static void advance(const struct chunks_tx *c, struct wst_tx_cursor *cur,
                    size_t items, uint64_t len)
{
    if (items > 0) {
        cur->item += items;
        cur->offset = 0;
        return;
    }
    cur->offset += len;
    if (cur->offset == wst_plan_item_bytes(&c->tx.plan->items[cur->item])) {
        cur->item++;
        cur->offset = 0;
    }
}

static int window_full(const struct chunks_tx *c, uint64_t len)
{
    return c->in_flight > 0 && c->in_flight + len > c->window;
}

/* The move of 'len' bytes from the cursor: one chunk (items 0) or 'items'
 * gathered items, from 'src'. */
static struct wst_move move_at(const struct chunks_tx *c,
                               const struct wst_tx_cursor *cur, size_t items,
                               uint64_t len, const void *src, ucp_mem_h memh)
{
    const struct wst_plan_item *it = &c->tx.plan->items[cur->item];

    return (struct wst_move){
        .src = src,
        .src_memh = memh,
        .length = len,
        .region = it->region,
        .dst_offset = it->dst_offset + cur->offset,
        .item = (uint32_t)cur->item,
        .item_offset = cur->offset,
        .item_count = items > 0 ? (uint32_t)items : 1,
        .version = c->tx.version,
    };
}

/* Posts 'mv' holding 'p'; the window and cursor advance with it. */
static wst_status_t post_move(struct chunks_tx *c, struct piece *p,
                              struct wst_move *mv, struct wst_tx_cursor *cur,
                              size_t items)
{
    p->len = mv->length;
    c->in_flight += mv->length;
    advance(c, cur, items, mv->length);
    wst_status_t st = c->wire->ops->move(c->wire, mv, move_done, p);
    if (st != WST_OK) {
        c->in_flight -= mv->length;
        piece_release_held(c, p); /* chunks_post holds c */
    }
    return st;
}

/* Where row 'row' of item 'k' starts in its source. */
static const char *row_src(const struct wst_tx_plan *pl, size_t k, uint64_t row)
{
    return (const char *)pl->srcs[k].ptr + row * pl->items[k].src_stride;
}

/* The whole rows of the cursor's item in its next 'len' bytes, into
 * bounce slot 'slot', one after the other. */
static wst_status_t fill_rows(struct chunks_tx *c, int slot,
                              const struct wst_tx_cursor *cur, uint64_t len)
{
    const struct wst_tx_plan *pl = c->tx.plan;
    uint64_t row_len = pl->items[cur->item].length;
    uint64_t row = cur->offset / row_len;
    wst_status_t st = WST_OK;

    for (uint64_t at = 0; st == WST_OK && at < len; at += row_len, row++)
        st = wst_bounce_ring_fill(c->ring, slot, at,
                                  row_src(pl, cur->item, row), row_len);
    return st;
}

/* Bounce: copies the device bytes of the next chunk (items 0, 'len' bytes)
 * or of 'items' gathered items into a free slot; the move follows in
 * bounce_filled. *posted_p stays 0 when blocked (window, or no free slot:
 * a slot given back wakes the pump). */
static wst_status_t post_bounce(struct chunks_tx *c, struct wst_tx_cursor *cur,
                                size_t items, uint64_t len, int *posted_p)
{
    const struct wst_tx_plan *pl = c->tx.plan;
    const struct wst_plan_item *first = &pl->items[cur->item];
    wst_status_t st = WST_OK;

    if (window_full(c, len))
        return WST_OK;
    int slot = wst_bounce_ring_take(c->ring);
    if (slot < 0)
        return WST_OK;
    struct piece *p = piece_new(c);
    if (p == NULL) {
        wst_bounce_ring_give(c->ring, slot);
        return WST_ERR_NO_MEMORY;
    }
    p->slot = slot;
    p->len = len;
    p->layer = first->layer;
    p->mv = move_at(c, cur, items, len, wst_bounce_ring_slot(c->ring, slot),
                    wst_bounce_ring_memh(c->ring));
    if (items == 0 && first->more_rows != 0)
        st = fill_rows(c, slot, cur, len);
    else if (items == 0)
        st = wst_bounce_ring_fill(
            c->ring, slot, 0,
            (const char *)pl->srcs[cur->item].ptr + cur->offset, len);
    for (size_t k = 0, at = 0; st == WST_OK && k < items; k++) {
        st =
            wst_bounce_ring_fill(c->ring, slot, at, pl->srcs[cur->item + k].ptr,
                                 pl->items[cur->item + k].length);
        at += pl->items[cur->item + k].length;
    }
    if (st == WST_OK)
        st = wst_bounce_ring_filled(c->ring, slot, bounce_filled, p);
    if (st != WST_OK) {
        /* Copies already enqueued may still write the slot: it is lost
         * until the stream drains, and this refit fails anyway. */
        p->slot = -1;
        piece_release_held(c, p); /* chunks_post holds c */
        return st;
    }
    c->copying[first->layer]++;
    c->in_flight += len;
    advance(c, cur, items, len);
    *posted_p = 1;
    return WST_OK;
}

/* Posts 'len' bytes from the cursor as one move straight from 'src'
 * (registered by 'memh', or NULL); *posted_p stays 0 when the window is
 * full (a completion wakes the pump). */
static wst_status_t post_direct(struct chunks_tx *c, struct wst_tx_cursor *cur,
                                uint64_t len, const void *src, ucp_mem_h memh,
                                int *posted_p)
{
    if (window_full(c, len))
        return WST_OK;
    struct piece *p = piece_new(c);
    if (p == NULL)
        return WST_ERR_NO_MEMORY;
    struct wst_move mv = move_at(c, cur, 0, len, src, memh);
    *posted_p = 1;
    return post_move(c, p, &mv, cur, 0);
}

/* A piece holding a free gather buffer (*buf_p) for a message of 'bytes',
 * or NULL: blocked (window, or every buffer busy: a completion wakes the
 * pump; *st_p WST_OK) or out of memory (*st_p says so). */
static struct piece *gather_piece(struct chunks_tx *c, uint64_t bytes,
                                  unsigned char **buf_p, wst_status_t *st_p)
{
    *st_p = WST_OK;
    if (window_full(c, bytes) || c->gather_free == 0)
        return NULL;
    struct piece *p = piece_new(c);
    if (p == NULL) {
        *st_p = WST_ERR_NO_MEMORY;
        return NULL;
    }
    p->gather = __builtin_ctz(c->gather_free);
    c->gather_free &= ~(1u << p->gather);
    *buf_p = c->gather + (size_t)p->gather * WST_GATHER_BYTES;
    return p;
}

/* Copies the items [cur, cur + n) into a gather buffer and posts them as
 * one message; *posted_p stays 0 when blocked (gather_piece). */
static wst_status_t post_gathered(struct chunks_tx *c,
                                  struct wst_tx_cursor *cur, size_t n,
                                  uint64_t bytes, int scatter, int *posted_p)
{
    const struct wst_tx_plan *pl = c->tx.plan;
    unsigned char *buf, *at;
    wst_status_t st;
    struct piece *p = gather_piece(c, bytes, &buf, &st);

    if (p == NULL)
        return st;
    at = buf;
    for (size_t k = 0; k < n; k++) {
        memcpy(at, pl->srcs[cur->item + k].ptr,
               pl->items[cur->item + k].length);
        at += pl->items[cur->item + k].length;
    }
    struct wst_move mv = move_at(c, cur, n, bytes, buf, c->gather_memh);
    mv.scatter = scatter;
    *posted_p = 1;
    return post_move(c, p, &mv, cur, n);
}

/* The next whole rows of an item of rows (planner.h): gathered into one
 * message whose destination is contiguous, through a gather buffer (host)
 * or a bounce slot (device); a row at a time, straight from the source,
 * where neither is there (device memory UCX moves itself). A message of
 * such an item never cuts a row, so each row stays one digest part. */
static wst_status_t post_rows(struct chunks_tx *c, struct wst_tx_cursor *cur,
                              int bounce, int *posted_p)
{
    const struct wst_tx_plan *pl = c->tx.plan;
    const struct wst_plan_item *it = &pl->items[cur->item];
    const struct wst_tx_src *src = &pl->srcs[cur->item];
    uint64_t left = wst_plan_item_bytes(it) - cur->offset;
    uint64_t row = cur->offset / it->length;
    uint64_t room = bounce                               ? WST_BOUNCE_SLOT_BYTES
                    : src->device < 0 && gather_ready(c) ? WST_GATHER_BYTES
                                                         : it->length;
    uint64_t len = room / it->length * it->length;
    unsigned char *buf;
    wst_status_t st;

    if (len > left)
        len = left;
    if (bounce)
        return post_bounce(c, cur, 0, len, posted_p);
    if (len == it->length)
        return post_direct(c, cur, len, row_src(pl, cur->item, row), src->memh,
                           posted_p);
    struct piece *p = gather_piece(c, len, &buf, &st);
    if (p == NULL)
        return st;
    for (uint64_t at = 0; at < len; at += it->length, row++)
        memcpy(buf + at, row_src(pl, cur->item, row), it->length);
    struct wst_move mv = move_at(c, cur, 0, len, buf, c->gather_memh);
    *posted_p = 1;
    return post_move(c, p, &mv, cur, 0);
}

/* Posts the next chunk of the current item (or the next small items,
 * gathered). */
static wst_status_t post_piece(struct chunks_tx *c, struct wst_tx_cursor *cur,
                               size_t limit, int *posted_p)
{
    const struct wst_tx_plan *pl = c->tx.plan;
    const struct wst_plan_item *it = &pl->items[cur->item];
    const struct wst_tx_src *src = &pl->srcs[cur->item];
    int bounce = src->device >= 0 && c->ring != NULL;

    if (it->more_rows != 0)
        return post_rows(c, cur, bounce, posted_p);
    uint64_t len = it->length - cur->offset;
    if (cur->offset == 0 && it->length < GATHER_ITEM_MAX) {
        uint64_t bytes;
        size_t n = gather_count(c, cur->item, limit, &bytes);
        if (n > 1 && bounce)
            return post_bounce(c, cur, n, bytes, posted_p);
        /* More items in one message when their places may differ; those
         * that follow each other anyway go without the receiver's copy. */
        uint64_t s_bytes;
        size_t s_n = c->scatter && src->device < 0
                         ? scatter_count(c, cur->item, limit, &s_bytes)
                         : 0;
        if (s_n > 1 && s_n > n && gather_ready(c))
            return post_gathered(c, cur, s_n, s_bytes, 1, posted_p);
        if (n > 1 && src->device < 0 && gather_ready(c))
            return post_gathered(c, cur, n, bytes, 0, posted_p);
    }
    /* A bounce slot holds WST_DATA_CHUNK_MAX. */
    uint64_t chunk =
        src->chunk != 0 && !bounce ? src->chunk : WST_DATA_CHUNK_MAX;
    if (len > chunk)
        len = chunk;
    if (bounce)
        return post_bounce(c, cur, 0, len, posted_p);
    return post_direct(c, cur, len, (const char *)src->ptr + cur->offset,
                       src->memh, posted_p);
}

static wst_status_t chunks_post(struct wst_tx *tx, struct wst_tx_cursor *cur,
                                size_t limit, int *posted_p)
{
    struct chunks_tx *c = (struct chunks_tx *)tx;
    wst_status_t st = WST_OK;
    int posted = 1;

    *posted_p = 0;
    hold(c); /* a move's event may destroy us in mid-loop */
    while (st == WST_OK && posted && cur->item < limit && !destroyed(c)) {
        posted = 0;
        st = post_piece(c, cur, limit, &posted);
        *posted_p |= posted;
    }
    drop(c);
    return st;
}

static wst_status_t chunks_fence(struct wst_tx *tx, uint32_t layer)
{
    struct chunks_tx *c = (struct chunks_tx *)tx;

    c->fence_layer = layer;
    if (c->copying[layer] > 0) {
        c->fence_waiting = 1; /* bounce_filled fences */
        return WST_OK;
    }
    return fence_now(c);
}

static wst_status_t chunks_begin(struct wst_tx *tx, uint64_t version)
{
    struct chunks_tx *c = (struct chunks_tx *)tx;

    tx->version = version;
    c->fence_waiting = 0;
    return c->wire->error;
}

static void chunks_destroy(struct wst_tx *tx)
{
    struct chunks_tx *c = (struct chunks_tx *)tx;

    memset(&c->tx.ev, 0, sizeof(c->tx.ev));
    /* Moves in flight complete with an error once the endpoint closes;
     * their buffers (gather, slots) stay until then. */
    wst_wire_destroy(c->wire);
    c->wire = NULL;
    drop(c);
}

static const struct wst_tx_ops chunks_ops = {
    .name = "chunks",
    .begin = chunks_begin,
    .post = chunks_post,
    .fence = chunks_fence,
    .destroy = chunks_destroy,
};

wst_status_t wst_tx_chunks_create(const struct wst_tx_chunks_params *p,
                                  struct wst_tx **tx_p)
{
    struct chunks_tx *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return WST_ERR_NO_MEMORY;
    c->copying =
        calloc(p->plan->n_layers ? p->plan->n_layers : 1, sizeof(*c->copying));
    if (c->copying == NULL) {
        free(c);
        return WST_ERR_NO_MEMORY;
    }
    c->tx.ops = &chunks_ops;
    c->tx.ev = p->events;
    c->tx.plan = p->plan;
    c->log = p->log;
    c->worker = p->worker;
    c->wire = p->wire;
    c->ring = p->ring;
    c->window = p->window;
    c->scatter = p->scatter;
    c->live = 1;
    *tx_p = &c->tx;
    return WST_OK;
}
