/* test_landing_ring.c - room for landed messages: every live piece lies
 * inside the buffer, contiguous, overlapping no other live piece; room
 * comes back only in arrival order; the ring says full exactly when the
 * room or the pieces are all taken. Checked against a model that tracks
 * which bytes of the buffer are held, on random take/done sequences. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "landing_ring.h"

#define BYTES 1000u
#define PIECES 16u

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void test_takes_in_order_and_wraps(void **state)
{
    unsigned char buf[BYTES];
    struct wst_landing_piece pieces[PIECES];
    struct wst_landing_ring r;

    (void)state;
    wst_landing_ring_init(&r, buf, BYTES, pieces, PIECES);
    int64_t a = wst_landing_ring_take(&r, 600);
    int64_t b = wst_landing_ring_take(&r, 300);
    assert_true(a >= 0 && b >= 0);
    assert_ptr_equal(pieces[a].bytes, buf);
    assert_ptr_equal(pieces[b].bytes, buf + 600);
    /* 100 bytes left at the end, none at the start: 200 does not fit. */
    assert_int_equal(wst_landing_ring_take(&r, 200), -1);
    /* b done first: nothing comes back while a is live. */
    wst_landing_ring_done(&r, (uint32_t)b);
    assert_int_equal(wst_landing_ring_take(&r, 200), -1);
    assert_int_equal(wst_landing_ring_live(&r), 2);
    /* a done: both come back, and 200 lands at the start (the 100 bytes
     * at the end are skipped). */
    wst_landing_ring_done(&r, (uint32_t)a);
    assert_int_equal(wst_landing_ring_live(&r), 0);
    int64_t c = wst_landing_ring_take(&r, 200);
    assert_true(c >= 0);
    assert_ptr_equal(pieces[c].bytes, buf);
    assert_int_equal(wst_landing_ring_find(&r, buf), c);
    assert_int_equal(wst_landing_ring_find(&r, buf + 600), -1);
    /* Zero and oversize lengths never fit. */
    assert_int_equal(wst_landing_ring_take(&r, 0), -1);
    assert_int_equal(wst_landing_ring_take(&r, BYTES + 1), -1);
}

static void test_full_by_pieces(void **state)
{
    unsigned char buf[BYTES];
    struct wst_landing_piece pieces[PIECES];
    struct wst_landing_ring r;

    (void)state;
    wst_landing_ring_init(&r, buf, BYTES, pieces, PIECES);
    for (uint32_t i = 0; i < PIECES; i++)
        assert_true(wst_landing_ring_take(&r, 1) >= 0);
    assert_int_equal(wst_landing_ring_take(&r, 1), -1);
    wst_landing_ring_done(&r, (uint32_t)wst_landing_ring_find(&r, buf));
    assert_true(wst_landing_ring_take(&r, 1) >= 0);
}

/* The model: which buffer bytes live pieces hold, and the arrival order of
 * live pieces. */
struct model {
    int held[BYTES];
    int64_t order[4096]; /* piece index per arrival, -1 once given back */
    int done[4096];
    size_t n;
};

static void check_piece(const struct model *m, const unsigned char *buf,
                        const struct wst_landing_piece *p)
{
    assert_true(p->bytes >= buf);
    assert_true(p->bytes + p->len <= buf + BYTES);
    for (size_t k = 0; k < p->len; k++)
        assert_int_equal(m->held[(p->bytes - buf) + k], 0);
}

static void hold(struct model *m, const unsigned char *buf,
                 const struct wst_landing_piece *p, int v)
{
    for (size_t k = 0; k < p->len; k++)
        m->held[(p->bytes - buf) + k] = v;
}

static void test_random_against_model(void **state)
{
    unsigned char buf[BYTES];
    struct wst_landing_piece pieces[PIECES];
    struct wst_landing_ring r;
    struct model *m = calloc(1, sizeof(*m));
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    size_t oldest = 0, taken = 0, refused = 0;

    (void)state;
    assert_non_null(m);
    wst_landing_ring_init(&r, buf, BYTES, pieces, PIECES);
    for (int step = 0; step < 4000 && m->n < 4096; step++) {
        if (rng_next(&seed) % 2 == 0) {
            size_t len = 1 + rng_next(&seed) % 300;
            int64_t i = wst_landing_ring_take(&r, len);
            if (i < 0) {
                refused++;
                continue;
            }
            check_piece(m, buf, &pieces[i]);
            assert_int_equal(pieces[i].len, len);
            hold(m, buf, &pieces[i], 1);
            m->order[m->n++] = i;
            taken++;
        } else {
            /* Finish a random live piece, in any order. */
            size_t live = m->n - oldest;
            if (live == 0)
                continue;
            size_t k = oldest + rng_next(&seed) % live;
            if (m->done[k])
                continue;
            int64_t i = m->order[k];
            assert_int_equal(wst_landing_ring_find(&r, pieces[i].bytes), i);
            m->done[k] = 1;
            wst_landing_ring_done(&r, (uint32_t)i);
            /* Room comes back in arrival order only. */
            while (oldest < m->n && m->done[oldest]) {
                hold(m, buf, &pieces[m->order[oldest]], 0);
                oldest++;
            }
            assert_int_equal(wst_landing_ring_live(&r), m->n - oldest);
        }
    }
    assert_true(taken > 1000);
    assert_true(refused > 10); /* the full case was reached */
    free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_takes_in_order_and_wraps),
        cmocka_unit_test(test_full_by_pieces),
        cmocka_unit_test(test_random_against_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
