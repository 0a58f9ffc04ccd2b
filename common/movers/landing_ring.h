/* landing_ring.h - room for data messages in one fixed buffer, taken in
 * arrival order and given back in that order.
 *
 * The receiver lands messages for device memory in a pinned host ring
 * (device.h). Each message takes a contiguous piece at the ring's head
 * (skipping the ring's last bytes when the piece would not fit before the
 * end); a piece is done when its bytes are no longer needed, which can
 * happen in any order (receives complete out of order), but its room is
 * given back only when every older piece is done too:
 *
 *     tail                      head
 *      |  done | live | done | live |        free         |
 *      ^ room comes back from here once the oldest is done
 *
 * Positions count bytes from the start and never wrap (64 bits); a piece's
 * [start, end) includes the bytes it skipped. Pure logic, no threads: the
 * owner serializes every call (the receiver's progress thread).
 */
#ifndef WST_LANDING_RING_H
#define WST_LANDING_RING_H

#include <stddef.h>
#include <stdint.h>

struct wst_landing_piece {
    uint64_t start, end;  /* ring positions, skipped bytes included */
    unsigned char *bytes; /* where the message goes */
    size_t len;
    int done;
};

struct wst_landing_ring {
    unsigned char *base; /* borrowed: the buffer */
    uint64_t bytes;
    struct wst_landing_piece *pieces; /* borrowed: [max_pieces] */
    uint32_t max_pieces;
    uint64_t head, tail;             /* byte positions */
    uint64_t piece_head, piece_tail; /* pieces [piece_tail, piece_head) */
};

/* An empty ring over base[0, bytes) keeping at most max_pieces pieces in
 * pieces[] (both owned by the caller, for the ring's life). */
void wst_landing_ring_init(struct wst_landing_ring *r, unsigned char *base,
                           uint64_t bytes, struct wst_landing_piece *pieces,
                           uint32_t max_pieces);

/* Takes room for 'len' bytes (0 < len <= bytes): the piece's index in
 * pieces[] (its bytes in pieces[i].bytes), or -1 when the room or the
 * pieces are all taken. */
int64_t wst_landing_ring_take(struct wst_landing_ring *r, size_t len);

/* The index of the live piece whose bytes start at 'ptr', or -1. */
int64_t wst_landing_ring_find(const struct wst_landing_ring *r,
                              const void *ptr);

/* Marks piece i done and gives back the room of the oldest done pieces. */
void wst_landing_ring_done(struct wst_landing_ring *r, uint32_t i);

/* Pieces taken and not yet given back. */
uint64_t wst_landing_ring_live(const struct wst_landing_ring *r);

#endif
