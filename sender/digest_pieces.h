/* digest_pieces.h - a layer's digest cut into pieces that several threads
 * hash apart and whose parts add up to the layer's digest.
 *
 * The digest (common/digest.h) is a sum of chunk hashes, each seeded with
 * its chunk's stream position, so any cut at a run's end, or inside a run
 * at a WST_DIGEST_CHUNK multiple from the run's start, gives parts that add
 * up to the whole. A layer hashed as one job took one thread's rate from
 * DRAM (~5 GB/s on the 16-core GPU host: a 256 MiB layer ~50 ms), and its
 * LAYER_DONE waited for it however many threads were idle (NOTES.md, issue
 * 17). Pieces of about WST_DIGEST_PIECE_BYTES spread it over the pool.
 *
 * The runs are a plan's items in order, each more_rows + 1 rows of
 * 'length' bytes (planner.h); rows are shorter than a chunk, so an item of
 * rows is cut only between rows. Pure functions; no threads, no state.
 */
#ifndef WST_SEND_DIGEST_PIECES_H
#define WST_SEND_DIGEST_PIECES_H

#include <stddef.h>
#include <stdint.h>
#include <wstream/status.h>

#include "planner.h"

#define WST_DIGEST_PIECE_BYTES (16ull << 20)

/* Where a piece starts, and how many bytes it covers. */
struct wst_digest_piece {
    size_t item;  /* index into the items array */
    uint64_t row; /* the item's row it starts in */
    uint64_t off; /* bytes into that row: 0, or a chunk multiple */
    uint64_t pos; /* stream position in the layer (the digest's seed) */
    uint64_t bytes;
};

/* Called with each piece, in order; anything but WST_OK stops the cut and
 * is returned by wst_digest_pieces. */
typedef wst_status_t (*wst_digest_piece_fn)(void *arg,
                                            const struct wst_digest_piece *p);

/* Cuts the runs of items[first, end) into pieces of 'target' bytes or a
 * little more (at most the next cut: one chunk, or one row, further), the
 * last one what is left. A layer with no bytes is one empty piece, so that
 * every layer has at least one. 'target' is rounded up to a chunk. */
wst_status_t wst_digest_pieces(const struct wst_plan_item *items, size_t first,
                               size_t end, uint64_t target,
                               wst_digest_piece_fn fn, void *arg);

/* The address of item i's first row (rows follow at its src_stride). */
typedef const unsigned char *(*wst_digest_run_fn)(void *arg, size_t item);

/* The sum of the chunk hashes of piece 'p' (wst_digest_part's sum): the
 * layer's digest is wst_digest_from_sum(sum of its pieces' sums, bytes). */
uint64_t wst_digest_piece_sum(const struct wst_plan_item *items,
                              const struct wst_digest_piece *p,
                              wst_digest_run_fn run, void *arg);

#endif
