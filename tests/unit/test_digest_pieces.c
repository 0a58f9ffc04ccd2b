/* test_digest_pieces.c - sender/digest_pieces.c: a layer's runs cut into
 * pieces whose sums add up to the digest the whole layer hashed in order
 * gives (common/digest.c), for single runs of odd lengths, items of rows
 * with strides, and an empty layer; the pieces are contiguous, at least
 * the target (but the last) and at most one cut beyond it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "digest.h"
#include "digest_pieces.h"

#define KIB 1024ull
#define SRC_BYTES (8ull << 20)
#define MAX_PIECES 4096

struct layer {
    unsigned char *src;
    struct wst_plan_item items[16];
    size_t n_items;
    struct wst_digest_piece pieces[MAX_PIECES];
    size_t n_pieces;
    int fail_at; /* the piece index whose fn fails, or -1 */
};

static const unsigned char *run_at(void *arg, size_t i)
{
    struct layer *l = arg;

    return l->src + l->items[i].src_offset;
}

static wst_status_t keep(void *arg, const struct wst_digest_piece *p)
{
    struct layer *l = arg;

    if ((int)l->n_pieces == l->fail_at)
        return WST_ERR_NO_MEMORY;
    assert_true(l->n_pieces < MAX_PIECES);
    l->pieces[l->n_pieces++] = *p;
    return WST_OK;
}

static int setup(void **state)
{
    struct layer *l = calloc(1, sizeof(*l));

    if (l == NULL || (l->src = malloc(SRC_BYTES)) == NULL) {
        free(l);
        return -1;
    }
    for (uint64_t i = 0; i < SRC_BYTES; i++)
        l->src[i] = (unsigned char)(i * 2654435761u >> 13);
    l->fail_at = -1;
    *state = l;
    return 0;
}

static int teardown(void **state)
{
    struct layer *l = *state;

    free(l->src);
    free(l);
    return 0;
}

static void add_item(struct layer *l, uint64_t src_offset, uint64_t length,
                     uint32_t more_rows, uint64_t src_stride)
{
    l->items[l->n_items++] = (struct wst_plan_item){
        .src_offset = src_offset,
        .length = length,
        .more_rows = more_rows,
        .src_stride = src_stride,
    };
}

/* The layer's digest as the single job computed it: every run in order. */
static uint64_t whole_digest(const struct layer *l, uint64_t *bytes_p)
{
    struct wst_digest d;

    wst_digest_init(&d);
    for (size_t k = 0; k < l->n_items; k++) {
        const struct wst_plan_item *it = &l->items[k];
        for (uint64_t r = 0; r <= it->more_rows; r++)
            wst_digest_update(&d, l->src + it->src_offset + r * it->src_stride,
                              it->length);
    }
    *bytes_p = d.pos;
    return wst_digest_final(&d);
}

/* Cuts at 'target', checks the pieces' shape and that their sums give the
 * whole layer's digest; 'slack' is the most a piece may pass the target. */
static void check_cut(struct layer *l, uint64_t target, uint64_t slack)
{
    uint64_t bytes, pos = 0, sum = 0;
    uint64_t want = whole_digest(l, &bytes);

    l->n_pieces = 0;
    assert_int_equal(
        wst_digest_pieces(l->items, 0, l->n_items, target, keep, l), WST_OK);
    assert_true(l->n_pieces >= 1);
    for (size_t i = 0; i < l->n_pieces; i++) {
        const struct wst_digest_piece *p = &l->pieces[i];
        assert_int_equal(p->pos, pos);
        assert_int_equal(p->off % WST_DIGEST_CHUNK, 0);
        if (i + 1 < l->n_pieces) {
            assert_true(p->bytes >= target);
            assert_true(p->bytes <= target + slack);
        } else {
            assert_true(p->bytes <= target + slack);
        }
        pos += p->bytes;
        sum += wst_digest_piece_sum(l->items, p, run_at, l);
    }
    assert_int_equal(pos, bytes);
    assert_true(wst_digest_from_sum(sum, bytes) == want);
}

static void test_digest_pieces_single_runs(void **state)
{
    struct layer *l = *state;

    add_item(l, 0, 3 * 1024 * KIB + 17, 0, 0); /* cut inside, odd end */
    add_item(l, 4 * 1024 * KIB, 100, 0, 0);    /* tiny */
    add_item(l, 4 * 1024 * KIB + 512, 1024 * KIB, 0, 0);
    add_item(l, 6 * 1024 * KIB + 3, 64 * KIB + 1, 0, 0); /* unaligned src */
    check_cut(l, 64 * KIB, WST_DIGEST_CHUNK);
    check_cut(l, 200 * KIB, WST_DIGEST_CHUNK); /* rounded up to 256 KiB */
    check_cut(l, 1024 * KIB, WST_DIGEST_CHUNK);
    check_cut(l, 64ull << 20, 0); /* one piece: the whole layer */
    assert_int_equal(l->n_pieces, 1);
}

static void test_digest_pieces_rows(void **state)
{
    struct layer *l = *state;

    /* Rows of 3000 bytes every 4096, then of 24 KiB every 40 KiB, around
     * a single run: rows are cut only between rows. */
    add_item(l, 0, 3000, 999, 4096);
    add_item(l, 5 * 1024 * KIB, 700 * KIB + 5, 0, 0);
    add_item(l, 6 * 1024 * KIB, 24 * KIB, 40, 40 * KIB);
    check_cut(l, 64 * KIB, WST_DIGEST_CHUNK);
    check_cut(l, 512 * KIB, WST_DIGEST_CHUNK);
    for (size_t i = 0; i < l->n_pieces; i++)
        if (l->items[l->pieces[i].item].more_rows != 0)
            assert_int_equal(l->pieces[i].off, 0);
}

static void test_digest_pieces_empty_layer(void **state)
{
    struct layer *l = *state;

    assert_int_equal(wst_digest_pieces(l->items, 0, 0, 1 << 20, keep, l),
                     WST_OK);
    assert_int_equal(l->n_pieces, 1);
    assert_int_equal(l->pieces[0].bytes, 0);
    assert_int_equal(wst_digest_piece_sum(l->items, &l->pieces[0], run_at, l),
                     0);
}

/* A failing callback stops the cut and its status comes back. */
static void test_digest_pieces_callback_error(void **state)
{
    struct layer *l = *state;

    add_item(l, 0, 1024 * KIB, 0, 0);
    l->fail_at = 2;
    assert_int_equal(wst_digest_pieces(l->items, 0, 1, 64 * KIB, keep, l),
                     WST_ERR_NO_MEMORY);
    assert_int_equal(l->n_pieces, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_digest_pieces_single_runs, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_digest_pieces_rows, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_digest_pieces_empty_layer, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_digest_pieces_callback_error,
                                        setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
