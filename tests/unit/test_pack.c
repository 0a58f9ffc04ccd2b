/* test_pack.c - strided pack and unpack (kernels/pack.h), CPU twins.
 *
 * wst_strided_from_box is checked on shapes whose merged form is worked out
 * by hand. The twins are checked against an independent element-by-element
 * reference that computes each element's row-major index in the tensor from
 * its coordinates and never looks at a struct wst_strided. Data is seeded
 * random bytes, never zero; outputs are poisoned or hold other random bytes
 * first, so an unwritten byte or a byte written outside the box shows.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "pack.h"

#define POISON 0xA5
#define GUARD 64 /* poisoned bytes after each output, to catch overruns */

struct box_case {
    uint32_t ndim;
    uint64_t shape[WST_PACK_MAX_DIMS];
    uint64_t start[WST_PACK_MAX_DIMS];
    uint64_t extent[WST_PACK_MAX_DIMS];
    size_t elem_size;
};

/* ---- data --------------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s)
{
    /* xorshift64* */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

static void fill_random(void *buf, size_t bytes, uint64_t seed)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 1;
    unsigned char *p = buf;

    for (size_t i = 0; i < bytes; i++) {
        p[i] = (unsigned char)(rng_next(&s) >> 56);
        if (p[i] == 0) {
            p[i] = 0x5A;
        }
    }
}

static uint64_t case_elems(const struct box_case *c)
{
    uint64_t n = 1;

    for (uint32_t d = 0; d < c->ndim; d++) {
        n *= c->shape[d];
    }
    return n;
}

static uint64_t box_elems(const struct box_case *c)
{
    uint64_t n = 1;

    for (uint32_t d = 0; d < c->ndim; d++) {
        n *= c->extent[d];
    }
    return n;
}

/* Row-major index in the tensor of the box element whose coordinates
 * inside the box are i[]. */
static uint64_t tensor_index(const struct box_case *c, const uint64_t *i)
{
    uint64_t index = 0;

    for (uint32_t d = 0; d < c->ndim; d++) {
        index = index * c->shape[d] + c->start[d] + i[d];
    }
    return index;
}

/* The reference: visits box elements in row-major order of their box
 * coordinates; the k-th one is dense element k. */
static void ref_copy(const struct box_case *c, unsigned char *tensor,
                     unsigned char *dense, int pack)
{
    uint64_t i[WST_PACK_MAX_DIMS] = {0};
    uint64_t n = box_elems(c);
    size_t es = c->elem_size;

    for (uint64_t k = 0; k < n; k++) {
        unsigned char *t = tensor + tensor_index(c, i) * es;

        if (pack) {
            memcpy(dense + k * es, t, es);
        } else {
            memcpy(t, dense + k * es, es);
        }
        for (uint32_t d = c->ndim; d-- > 0;) {
            if (++i[d] < c->extent[d]) {
                break;
            }
            i[d] = 0;
        }
    }
}

static void from_case(const struct box_case *c, struct wst_strided *s,
                      uint64_t *offset)
{
    assert_int_equal(wst_strided_from_box(c->ndim, c->shape, c->start,
                                          c->extent, c->elem_size, s, offset),
                     WST_OK);
}

/* ---- from_box: merging -------------------------------------------------- */

static void expect_strided(const struct box_case *c, uint32_t ndim,
                           const uint64_t *count, const uint64_t *stride,
                           uint64_t run_bytes, uint64_t offset)
{
    struct wst_strided s;
    uint64_t off, dense;

    from_case(c, &s, &off);
    assert_int_equal(s.ndim, ndim);
    for (uint32_t d = 0; d < ndim; d++) {
        assert_int_equal(s.count[d], count[d]);
        assert_int_equal(s.stride[d], stride[d]);
    }
    assert_int_equal(s.run_bytes, run_bytes);
    assert_int_equal(off, offset);
    assert_int_equal(wst_strided_check(&s, &dense, NULL), WST_OK);
    assert_int_equal(dense, box_elems(c) * c->elem_size);
}

static void test_pack_from_box_fully_contiguous(void **state)
{
    (void)state;
    const struct box_case whole = {3, {4, 8, 16}, {0, 0, 0}, {4, 8, 16}, 2};
    /* Qwen3-30B-A3B-like experts 16..32 of [128, 768, 2048] bf16. */
    const struct box_case experts = {
        3, {128, 768, 2048}, {16, 0, 0}, {16, 768, 2048}, 2};
    const struct box_case one = {2, {5, 7}, {3, 4}, {1, 1}, 8};

    expect_strided(&whole, 0, NULL, NULL, 4 * 8 * 16 * 2, 0);
    expect_strided(&experts, 0, NULL, NULL, 16ull * 768 * 2048 * 2,
                   16ull * 768 * 2048 * 2);
    expect_strided(&one, 0, NULL, NULL, 8, (3 * 7 + 4) * 8);
}

static void test_pack_from_box_last_dim_slice(void **state)
{
    (void)state;
    /* TP=8 rank 3 of the last dim of a bf16 [4096, 14336]. */
    const struct box_case c = {
        2, {4096, 14336}, {0, 3 * 1792}, {4096, 1792}, 2};
    const uint64_t count[] = {4096};
    const uint64_t stride[] = {14336 * 2};

    expect_strided(&c, 1, count, stride, 1792 * 2, 3 * 1792 * 2);
}

static void test_pack_from_box_middle_dim_slice(void **state)
{
    (void)state;
    const struct box_case c = {3, {64, 128, 512}, {0, 32, 0}, {64, 16, 512}, 4};
    const uint64_t count[] = {64};
    const uint64_t stride[] = {128 * 512 * 4};

    expect_strided(&c, 1, count, stride, 16 * 512 * 4, 32 * 512 * 4);
}

static void test_pack_from_box_one_element_runs(void **state)
{
    (void)state;
    /* One u8 column: runs of one byte. */
    const struct box_case col = {2, {8, 16}, {0, 5}, {8, 1}, 1};
    const uint64_t count[] = {8};
    const uint64_t stride[] = {16};
    /* Every other column of every row would be 1-byte runs too, but a box
     * cannot skip; a 2x3 corner with elements of 1 byte: */
    const struct box_case corner = {2, {8, 16}, {2, 4}, {2, 3}, 1};
    const uint64_t ccount[] = {2};
    const uint64_t cstride[] = {16};

    expect_strided(&col, 1, count, stride, 1, 5);
    expect_strided(&corner, 1, ccount, cstride, 3, 2 * 16 + 4);
}

static void test_pack_from_box_drops_extent_one(void **state)
{
    (void)state;
    /* Dim 2 of extent 1 inside, dim 1 of shape 1: one loop over dim 0. */
    const struct box_case c = {
        4, {4, 1, 8, 16}, {0, 0, 2, 0}, {4, 1, 1, 16}, 2};
    const uint64_t count[] = {4};
    const uint64_t stride[] = {8 * 16 * 2};

    expect_strided(&c, 1, count, stride, 16 * 2, 2 * 16 * 2);
}

static void test_pack_from_box_4d(void **state)
{
    (void)state;
    /* [2, 3, 4, 5] f32, box [0:2, 1:3, 0:4, 1:4]: the run is 3 elements;
     * dims 1 and 2 merge (dim 2 is whole) into 8 positions 20 B apart;
     * dim 0 (240 B) does not merge with them (8 * 20 = 160). */
    const struct box_case c = {4, {2, 3, 4, 5}, {0, 1, 0, 1}, {2, 2, 4, 3}, 4};
    const uint64_t count[] = {2, 8};
    const uint64_t stride[] = {240, 20};

    expect_strided(&c, 2, count, stride, 12, (1 * 20 + 1) * 4);
}

static void test_pack_from_box_8d(void **state)
{
    (void)state;
    /* [2]^8 with dim 3 at index 1: dims 4..7 make one run of 16 elements,
     * dims 0..2 one loop of 8, 32 elements apart. */
    const struct box_case merged = {8,
                                    {2, 2, 2, 2, 2, 2, 2, 2},
                                    {0, 0, 0, 1, 0, 0, 0, 0},
                                    {2, 2, 2, 1, 2, 2, 2, 2},
                                    2};
    const uint64_t mcount[] = {8};
    const uint64_t mstride[] = {32 * 2};
    /* [3]^8, box [0:2]^8: nothing merges beyond the 2-element run. */
    const struct box_case none = {8,
                                  {3, 3, 3, 3, 3, 3, 3, 3},
                                  {0, 0, 0, 0, 0, 0, 0, 0},
                                  {2, 2, 2, 2, 2, 2, 2, 2},
                                  1};
    const uint64_t ncount[] = {2, 2, 2, 2, 2, 2, 2};
    const uint64_t nstride[] = {2187, 729, 243, 81, 27, 9, 3};

    expect_strided(&merged, 1, mcount, mstride, 16 * 2, 16 * 2);
    expect_strided(&none, 7, ncount, nstride, 2, 0);
}

/* ---- from_box and check: refusals --------------------------------------- */

static void expect_refused(const struct box_case *c)
{
    struct wst_strided s;
    uint64_t off = 77;

    memset(&s, POISON, sizeof(s));
    assert_int_equal(wst_strided_from_box(c->ndim, c->shape, c->start,
                                          c->extent, c->elem_size, &s, &off),
                     WST_ERR_INVALID);
    /* Outputs are written only on success. */
    assert_int_equal(off, 77);
    assert_int_equal(s.ndim, 0xA5A5A5A5u);
}

static void test_pack_from_box_refuses_bad_input(void **state)
{
    (void)state;
    const struct box_case good = {2, {4, 8}, {1, 2}, {2, 3}, 4};
    struct box_case c;
    struct wst_strided s;
    uint64_t off;

    c = good;
    c.ndim = 0;
    expect_refused(&c);
    c = good;
    c.ndim = WST_PACK_MAX_DIMS + 1;
    expect_refused(&c);
    c = good;
    c.extent[1] = 0;
    expect_refused(&c);
    c = good;
    c.start[1] = 6; /* 6 + 3 > 8 */
    expect_refused(&c);
    c = good;
    c.extent[0] = 5; /* larger than the dimension */
    expect_refused(&c);
    c = good;
    c.start[0] = UINT64_MAX; /* start + extent wraps */
    expect_refused(&c);
    c = good;
    c.elem_size = 0;
    expect_refused(&c);
    /* 2^40 * 2^30 * 16 bytes does not fit in 64 bits. */
    c = good;
    c.shape[0] = 1ull << 40;
    c.shape[1] = 1ull << 30;
    c.elem_size = 16;
    expect_refused(&c);
    assert_int_equal(
        wst_strided_from_box(2, NULL, good.start, good.extent, 4, &s, &off),
        WST_ERR_INVALID);
    assert_int_equal(wst_strided_from_box(2, good.shape, good.start,
                                          good.extent, 4, NULL, &off),
                     WST_ERR_INVALID);
    assert_int_equal(wst_strided_from_box(2, good.shape, good.start,
                                          good.extent, 4, &s, NULL),
                     WST_ERR_INVALID);
}

static void test_pack_from_box_largest_tensor(void **state)
{
    (void)state;
    /* 2^32 * 2^28 * 16 bytes would be 2^64; 2^28 - 1 columns fit. */
    const struct box_case c = {2,
                               {1ull << 32, (1ull << 28) - 1},
                               {(1ull << 32) - 1, 0},
                               {1, (1ull << 28) - 1},
                               16};
    struct wst_strided s;
    uint64_t off, span;

    from_case(&c, &s, &off);
    assert_int_equal(s.ndim, 0);
    assert_int_equal(off, ((1ull << 32) - 1) * ((1ull << 28) - 1) * 16);
    assert_int_equal(wst_strided_check(&s, NULL, &span), WST_OK);
    assert_int_equal(span, ((1ull << 28) - 1) * 16);
}

static void test_pack_check_refuses_bad_descriptions(void **state)
{
    (void)state;
    const struct wst_strided good = {
        .ndim = 2, .count = {3, 4}, .stride = {100, 20}, .run_bytes = 8};
    struct wst_strided s;
    uint64_t dense = 1, span = 2;

    assert_int_equal(wst_strided_check(&good, &dense, &span), WST_OK);
    assert_int_equal(dense, 3 * 4 * 8);
    assert_int_equal(span, 2 * 100 + 3 * 20 + 8);
    assert_int_equal(wst_strided_check(&good, NULL, NULL), WST_OK);
    assert_int_equal(wst_strided_check(NULL, &dense, &span), WST_ERR_INVALID);

    s = good;
    s.ndim = WST_PACK_MAX_DIMS + 1;
    assert_int_equal(wst_strided_check(&s, NULL, NULL), WST_ERR_INVALID);
    s = good;
    s.count[1] = 0;
    assert_int_equal(wst_strided_check(&s, NULL, NULL), WST_ERR_INVALID);
    s = good;
    s.run_bytes = 0;
    assert_int_equal(wst_strided_check(&s, NULL, NULL), WST_ERR_INVALID);
    /* Dense size overflows: 2^33 * 2^32 * 8. */
    s = good;
    s.count[0] = 1ull << 33;
    s.count[1] = 1ull << 32;
    s.stride[0] = 0;
    s.stride[1] = 0;
    assert_int_equal(wst_strided_check(&s, NULL, NULL), WST_ERR_INVALID);
    /* Span overflows in the product, then in the sum. */
    s = good;
    s.stride[0] = 1ull << 63;
    assert_int_equal(wst_strided_check(&s, NULL, NULL), WST_ERR_INVALID);
    s = good;
    s.count[0] = 2;
    s.stride[0] = UINT64_MAX - 8;
    assert_int_equal(wst_strided_check(&s, NULL, NULL), WST_ERR_INVALID);
    /* Outputs untouched on failure. */
    assert_int_equal(dense, 3 * 4 * 8);
    assert_int_equal(span, 2 * 100 + 3 * 20 + 8);
    /* ndim 0 is one run. */
    s = good;
    s.ndim = 0;
    assert_int_equal(wst_strided_check(&s, &dense, &span), WST_OK);
    assert_int_equal(dense, 8);
    assert_int_equal(span, 8);
}

/* ---- pack and unpack against the reference ------------------------------ */

/* Packs and unpacks box c of a random tensor with the twins and the
 * reference; every output byte is compared, guards included. */
static void check_twins(const struct box_case *c, uint64_t seed)
{
    size_t tbytes = case_elems(c) * c->elem_size;
    size_t dbytes = box_elems(c) * c->elem_size;
    unsigned char *x = malloc(tbytes);
    unsigned char *dense = malloc(dbytes + GUARD);
    unsigned char *want = malloc(dbytes + GUARD);
    unsigned char *out = malloc(tbytes + GUARD);
    unsigned char *expect = malloc(tbytes + GUARD);
    struct wst_strided s;
    uint64_t off, dense_bytes, span;

    assert_non_null(x);
    assert_non_null(dense);
    assert_non_null(want);
    assert_non_null(out);
    assert_non_null(expect);
    from_case(c, &s, &off);
    assert_int_equal(wst_strided_check(&s, &dense_bytes, &span), WST_OK);
    assert_int_equal(dense_bytes, dbytes);
    assert_true(off + span <= tbytes);

    fill_random(x, tbytes, seed);
    memset(dense, POISON, dbytes + GUARD);
    memset(want, POISON, dbytes + GUARD);
    wst_pack_cpu(dense, x + off, &s);
    ref_copy(c, x, want, 1);
    assert_memory_equal(dense, want, dbytes + GUARD);

    /* Unpack onto poison, then onto other random bytes: outside the box
     * the backdrop stays, inside it x comes back. */
    for (int backdrop = 0; backdrop < 2; backdrop++) {
        if (backdrop == 0) {
            memset(out, POISON, tbytes + GUARD);
        } else {
            fill_random(out, tbytes, seed + 1000003);
            memset(out + tbytes, POISON, GUARD);
        }
        memcpy(expect, out, tbytes + GUARD);
        wst_unpack_cpu(out + off, dense, &s);
        ref_copy(c, expect, want, 0);
        assert_memory_equal(out, expect, tbytes + GUARD);
    }
    free(x);
    free(dense);
    free(want);
    free(out);
    free(expect);
}

static void test_pack_twins_named_shapes(void **state)
{
    (void)state;
    const struct box_case cases[] = {
        {2, {4096, 14336}, {0, 3 * 1792}, {4096, 1792}, 2},
        {3, {64, 128, 512}, {0, 32, 0}, {64, 16, 512}, 4},
        {2, {1024, 97}, {0, 17}, {1024, 1}, 1},
        {3, {300, 7, 11}, {1, 2, 4}, {298, 3, 3}, 2},
        {3, {16, 768, 64}, {4, 0, 0}, {8, 768, 64}, 2},
        {4, {2, 3, 4, 5}, {0, 1, 0, 1}, {2, 2, 4, 3}, 4},
        {4, {4, 1, 8, 16}, {0, 0, 2, 0}, {4, 1, 1, 16}, 2},
        {8,
         {3, 3, 3, 3, 3, 3, 3, 3},
         {1, 0, 1, 0, 1, 0, 1, 0},
         {2, 2, 2, 2, 2, 2, 2, 2},
         3},
        {8,
         {2, 2, 2, 2, 2, 2, 2, 2},
         {0, 0, 0, 1, 0, 0, 0, 0},
         {2, 2, 2, 1, 2, 2, 2, 2},
         2},
        {1, {1000}, {999}, {1}, 1},
        {1, {1000}, {0}, {1000}, 16},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        check_twins(&cases[i], i + 1);
    }
}

/* A random case of at most about 2^16 elements: random rank, dimensions,
 * box and element size (odd sizes included). */
static void random_case(struct box_case *c, uint64_t *rng)
{
    static const size_t sizes[] = {1, 2, 3, 4, 6, 8, 16};
    uint64_t budget = 1u << 16;

    memset(c, 0, sizeof(*c));
    c->ndim = 1 + (uint32_t)(rng_next(rng) % WST_PACK_MAX_DIMS);
    c->elem_size = sizes[rng_next(rng) % (sizeof(sizes) / sizeof(sizes[0]))];
    for (uint32_t d = 0; d < c->ndim; d++) {
        uint64_t cap = budget < 12 ? budget : 12; /* budget >= 1 */

        c->shape[d] = 1 + rng_next(rng) % cap;
        budget /= c->shape[d];
        /* Whole, one element, or anything between: all three matter for
         * merging, so make the first two common. */
        switch (rng_next(rng) % 3) {
        case 0:
            c->extent[d] = c->shape[d];
            break;
        case 1:
            c->extent[d] = 1;
            break;
        default:
            c->extent[d] = 1 + rng_next(rng) % c->shape[d];
        }
        c->start[d] = rng_next(rng) % (c->shape[d] - c->extent[d] + 1);
    }
}

static void test_pack_twins_random_boxes(void **state)
{
    (void)state;
    uint64_t rng = 0x5EED;

    for (int i = 0; i < 500; i++) {
        struct box_case c;

        random_case(&c, &rng);
        check_twins(&c, 100 + (uint64_t)i);
    }
}

/* The GPU functions in a build without CUDA, or on a machine without a
 * device: the stub refuses with WST_ERR_NO_DEVICE, so the only thing
 * checked here is that a bad description is never accepted. */
static void test_pack_gpu_refuses_bad_description(void **state)
{
    (void)state;
    struct wst_strided s = {.ndim = 1, .count = {0}, .run_bytes = 4};
    unsigned char a[16] = {0}, b[16] = {0};
    wst_status_t st;

    st = wst_gpu_pack(NULL, a, b, &s, NULL);
    assert_true(st == WST_ERR_INVALID || st == WST_ERR_NO_DEVICE);
    st = wst_gpu_unpack(NULL, a, b, &s, NULL);
    assert_true(st == WST_ERR_INVALID || st == WST_ERR_NO_DEVICE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pack_from_box_fully_contiguous),
        cmocka_unit_test(test_pack_from_box_last_dim_slice),
        cmocka_unit_test(test_pack_from_box_middle_dim_slice),
        cmocka_unit_test(test_pack_from_box_one_element_runs),
        cmocka_unit_test(test_pack_from_box_drops_extent_one),
        cmocka_unit_test(test_pack_from_box_4d),
        cmocka_unit_test(test_pack_from_box_8d),
        cmocka_unit_test(test_pack_from_box_refuses_bad_input),
        cmocka_unit_test(test_pack_from_box_largest_tensor),
        cmocka_unit_test(test_pack_check_refuses_bad_descriptions),
        cmocka_unit_test(test_pack_twins_named_shapes),
        cmocka_unit_test(test_pack_twins_random_boxes),
        cmocka_unit_test(test_pack_gpu_refuses_bad_description),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
