/* landing_ring.c - room in arrival order (see landing_ring.h). */
#include "landing_ring.h"

#include <string.h>

void wst_landing_ring_init(struct wst_landing_ring *r, unsigned char *base,
                           uint64_t bytes, struct wst_landing_piece *pieces,
                           uint32_t max_pieces)
{
    memset(r, 0, sizeof(*r));
    r->base = base;
    r->bytes = bytes;
    r->pieces = pieces;
    r->max_pieces = max_pieces;
    memset(pieces, 0, max_pieces * sizeof(*pieces));
}

int64_t wst_landing_ring_take(struct wst_landing_ring *r, size_t len)
{
    uint64_t at = r->head;
    uint64_t into = at % r->bytes;

    if (len == 0 || len > r->bytes ||
        r->piece_head - r->piece_tail == r->max_pieces)
        return -1;
    if (into + len > r->bytes)
        at += r->bytes - into; /* keep the message's bytes contiguous */
    if (at + len - r->tail > r->bytes)
        return -1; /* the oldest pieces still hold the room */
    uint32_t i = (uint32_t)(r->piece_head % r->max_pieces);
    struct wst_landing_piece *p = &r->pieces[i];
    p->start = r->head;
    p->end = at + len;
    p->bytes = r->base + at % r->bytes;
    p->len = len;
    p->done = 0;
    r->piece_head++;
    r->head = p->end;
    return i;
}

int64_t wst_landing_ring_find(const struct wst_landing_ring *r, const void *ptr)
{
    /* Newest first: a message is copied or dropped soon after it lands. */
    for (uint64_t k = r->piece_head; k > r->piece_tail; k--) {
        uint32_t i = (uint32_t)((k - 1) % r->max_pieces);
        if (r->pieces[i].bytes == ptr && !r->pieces[i].done)
            return i;
    }
    return -1;
}

void wst_landing_ring_done(struct wst_landing_ring *r, uint32_t i)
{
    r->pieces[i].done = 1;
    while (r->piece_tail < r->piece_head) {
        struct wst_landing_piece *p = &r->pieces[r->piece_tail % r->max_pieces];
        if (!p->done)
            break;
        r->tail = p->end;
        r->piece_tail++;
    }
}

uint64_t wst_landing_ring_live(const struct wst_landing_ring *r)
{
    return r->piece_head - r->piece_tail;
}
