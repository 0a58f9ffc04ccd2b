/* digest_pieces.c - a layer's digest in pieces (see digest_pieces.h). */
#include "digest_pieces.h"

#include "digest.h"

/* Where the next piece starts once the cut is at (k, r, off): an item
 * whose rows are all taken hands over to the next item's start. */
static struct wst_digest_piece next_start(const struct wst_plan_item *it,
                                          size_t k, uint64_t r, uint64_t off,
                                          uint64_t pos)
{
    if (r == (uint64_t)it->more_rows + 1)
        return (struct wst_digest_piece){.item = k + 1, .pos = pos};
    return (struct wst_digest_piece){
        .item = k, .row = r, .off = off, .pos = pos};
}

wst_status_t wst_digest_pieces(const struct wst_plan_item *items, size_t first,
                               size_t end, uint64_t target,
                               wst_digest_piece_fn fn, void *arg)
{
    struct wst_digest_piece cur = {.item = first};
    uint64_t pos = 0;
    int emitted = 0;
    wst_status_t st;

    if (target == 0)
        target = 1;
    target =
        (target + WST_DIGEST_CHUNK - 1) / WST_DIGEST_CHUNK * WST_DIGEST_CHUNK;
    for (size_t k = first; k < end; k++) {
        const struct wst_plan_item *it = &items[k];
        uint64_t rows = (uint64_t)it->more_rows + 1, r = 0, off = 0;

        while (r < rows) {
            uint64_t need = target - cur.bytes, take;
            if (it->more_rows != 0) {
                /* Whole rows: a cut between rows is always a run's end. */
                uint64_t n = (need + it->length - 1) / it->length;
                if (n > rows - r)
                    n = rows - r;
                take = n * it->length;
                r += n;
            } else {
                /* One run: cut at a chunk multiple from its start. */
                take = it->length - off;
                if (need < take) {
                    uint64_t at = (need + WST_DIGEST_CHUNK - 1) /
                                  WST_DIGEST_CHUNK * WST_DIGEST_CHUNK;
                    if (at < take)
                        take = at;
                }
                off += take;
                if (off == it->length) {
                    off = 0;
                    r++;
                }
            }
            cur.bytes += take;
            pos += take;
            if (cur.bytes >= target) {
                st = fn(arg, &cur);
                if (st != WST_OK)
                    return st;
                emitted = 1;
                cur = next_start(it, k, r, off, pos);
            }
        }
    }
    if (cur.bytes > 0 || !emitted)
        return fn(arg, &cur);
    return WST_OK;
}

uint64_t wst_digest_piece_sum(const struct wst_plan_item *items,
                              const struct wst_digest_piece *p,
                              wst_digest_run_fn run, void *arg)
{
    uint64_t sum = 0, left = p->bytes, pos = p->pos, row = p->row;
    uint64_t off = p->off;

    for (size_t k = p->item; left > 0; k++, row = 0, off = 0) {
        const struct wst_plan_item *it = &items[k];
        const unsigned char *base = run(arg, k);
        uint64_t rows = (uint64_t)it->more_rows + 1;

        for (; row < rows && left > 0; row++, off = 0) {
            uint64_t len = it->length - off;
            if (len > left)
                len = left;
            sum += wst_digest_part(base + row * it->src_stride + off, len, pos);
            pos += len;
            left -= len;
        }
    }
    return sum;
}
