/* test_manifest.c - tensor, box, have and want validation (common/manifest.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "manifest.h"

static struct wst_tensor_desc tensor2(uint64_t rows, uint64_t cols,
                                      enum wst_dtype dt)
{
    struct wst_tensor_desc t;

    memset(&t, 0, sizeof(t));
    snprintf(t.name, sizeof(t.name), "model.layers.0.mlp.w");
    t.dtype = dt;
    t.ndim = 2;
    t.shape[0] = rows;
    t.shape[1] = cols;
    return t;
}

static struct wst_box box2(uint64_t r0, uint64_t r1, uint64_t c0, uint64_t c1)
{
    struct wst_box b;

    memset(&b, 0, sizeof(b));
    b.ndim = 2;
    b.start[0] = r0, b.stop[0] = r1;
    b.start[1] = c0, b.stop[1] = c1;
    return b;
}

static struct wst_box box1(uint64_t a, uint64_t b)
{
    struct wst_box x;

    memset(&x, 0, sizeof(x));
    x.ndim = 1;
    x.start[0] = a, x.stop[0] = b;
    return x;
}

static void test_manifest_tensor_layer(void **state)
{
    (void)state;
    assert_int_equal(wst_tensor_layer("model.layers.0.mlp.w"), 0);
    assert_int_equal(wst_tensor_layer("model.layers.17.self_attn.q"), 17);
    assert_int_equal(wst_tensor_layer("model.layers.4294967294.x"),
                     4294967294u);
    assert_int_equal(wst_tensor_layer("model.layers.4294967295.x"), UINT32_MAX);
    assert_int_equal(wst_tensor_layer("model.layers.99999999999999999999.x"),
                     UINT32_MAX);
    assert_int_equal(wst_tensor_layer("model.layers.12"), UINT32_MAX);
    assert_int_equal(wst_tensor_layer("model.layers.12x.w"), UINT32_MAX);
    assert_int_equal(wst_tensor_layer("model.layers.-1.w"), UINT32_MAX);
    assert_int_equal(wst_tensor_layer("model.layers.+1.w"), UINT32_MAX);
    assert_int_equal(wst_tensor_layer("model.layers..w"), UINT32_MAX);
    assert_int_equal(wst_tensor_layer("model.embed_tokens.weight"), UINT32_MAX);
    assert_int_equal(wst_tensor_layer("lm_head.weight"), UINT32_MAX);
    assert_int_equal(wst_tensor_layer("xmodel.layers.1.w"), UINT32_MAX);
    assert_int_equal(wst_tensor_layer(""), UINT32_MAX);
    assert_int_equal(wst_tensor_layer(NULL), UINT32_MAX);
}

static void test_manifest_tensor_desc_check(void **state)
{
    struct wst_tensor_desc t = tensor2(10, 4, WST_DTYPE_BF16);
    uint64_t elems = 0, bytes = 0;

    (void)state;
    assert_int_equal(wst_tensor_desc_check(&t, &elems, &bytes), WST_OK);
    assert_int_equal(elems, 40);
    assert_int_equal(bytes, 80);
    assert_int_equal(wst_tensor_desc_check(&t, NULL, NULL), WST_OK);

    t.ndim = 0;
    assert_int_equal(wst_tensor_desc_check(&t, NULL, NULL), WST_ERR_INVALID);
    t.ndim = 9;
    assert_int_equal(wst_tensor_desc_check(&t, NULL, NULL), WST_ERR_INVALID);
    t.ndim = 8; /* dims 2..7 are zero */
    assert_int_equal(wst_tensor_desc_check(&t, NULL, NULL), WST_ERR_INVALID);

    t = tensor2(10, 4, (enum wst_dtype)0);
    assert_int_equal(wst_tensor_desc_check(&t, NULL, NULL), WST_ERR_INVALID);
    t.dtype = (enum wst_dtype)99;
    assert_int_equal(wst_tensor_desc_check(&t, NULL, NULL), WST_ERR_INVALID);

    t = tensor2(10, 4, WST_DTYPE_BF16);
    memset(t.name, 'a', sizeof(t.name)); /* unterminated */
    assert_int_equal(wst_tensor_desc_check(&t, NULL, NULL), WST_ERR_INVALID);
    t.name[WST_NAME_MAX - 1] = '\0';
    assert_int_equal(wst_tensor_desc_check(&t, NULL, NULL), WST_OK);
    t.name[0] = '\0';
    assert_int_equal(wst_tensor_desc_check(&t, NULL, NULL), WST_ERR_INVALID);
}

static void test_manifest_tensor_desc_overflow(void **state)
{
    struct wst_tensor_desc t = tensor2(1ull << 32, 1ull << 32, WST_DTYPE_U8);
    uint64_t elems = 7, bytes = 7;

    (void)state;
    /* element count overflows */
    assert_int_equal(wst_tensor_desc_check(&t, &elems, &bytes),
                     WST_ERR_INVALID);
    assert_int_equal(elems, 7); /* outputs untouched on failure */
    assert_int_equal(bytes, 7);
    /* count fits, bytes overflow */
    t = tensor2(1ull << 31, 1ull << 32, WST_DTYPE_F32);
    assert_int_equal(wst_tensor_desc_check(&t, NULL, NULL), WST_ERR_INVALID);
    t = tensor2(1ull << 31, 1ull << 31, WST_DTYPE_F32); /* 2^64 bytes */
    assert_int_equal(wst_tensor_desc_check(&t, NULL, NULL), WST_ERR_INVALID);
    t = tensor2(1ull << 31, 1ull << 30, WST_DTYPE_F32); /* 2^63 bytes */
    assert_int_equal(wst_tensor_desc_check(&t, &elems, &bytes), WST_OK);
    assert_int_equal(elems, 1ull << 61);
    assert_int_equal(bytes, 1ull << 63);
}

static void test_manifest_box_check(void **state)
{
    struct wst_tensor_desc t = tensor2(10, 4, WST_DTYPE_F32);
    struct wst_box b = box2(0, 10, 0, 4);

    (void)state;
    assert_int_equal(wst_box_check(&t, &b, 0), WST_OK);
    assert_int_equal(wst_box_elems(&b), 40);
    b = box2(3, 3, 1, 2); /* empty is fine */
    assert_int_equal(wst_box_check(&t, &b, 0), WST_OK);
    assert_int_equal(wst_box_elems(&b), 0);
    b = box2(10, 10, 4, 4);
    assert_int_equal(wst_box_check(&t, &b, 0), WST_OK);
    b = box2(0, 11, 0, 4); /* past the extent */
    assert_int_equal(wst_box_check(&t, &b, 0), WST_ERR_INVALID);
    b = box2(5, 4, 0, 4); /* start > stop */
    assert_int_equal(wst_box_check(&t, &b, 0), WST_ERR_INVALID);
    b = box1(0, 4); /* wrong ndim */
    assert_int_equal(wst_box_check(&t, &b, 0), WST_ERR_INVALID);

    /* flat: 1-D over the 40 elements */
    b = box1(7, 40);
    assert_int_equal(wst_box_check(&t, &b, 1), WST_OK);
    assert_int_equal(wst_box_elems(&b), 33);
    b = box1(7, 41);
    assert_int_equal(wst_box_check(&t, &b, 1), WST_ERR_INVALID);
    b = box1(8, 7);
    assert_int_equal(wst_box_check(&t, &b, 1), WST_ERR_INVALID);
    b = box2(0, 10, 0, 4);
    assert_int_equal(wst_box_check(&t, &b, 1), WST_ERR_INVALID);
}

static struct wst_want want_of(uint64_t offset, uint64_t pitch)
{
    struct wst_want w;

    memset(&w, 0, sizeof(w));
    w.tensor = tensor2(10, 4, WST_DTYPE_F32);
    w.box = box2(2, 5, 1, 3); /* 3 rows of 2 elements: 8 bytes per row */
    w.region = 1;
    w.offset = offset;
    w.row_pitch = pitch;
    return w;
}

static void test_manifest_want_span(void **state)
{
    struct wst_want w = want_of(0, 0);

    (void)state;
    assert_int_equal(wst_want_span(&w), 24);
    w.row_pitch = 20;
    assert_int_equal(wst_want_span(&w), 2 * 20 + 8);
    w.box = box2(2, 2, 1, 3);
    assert_int_equal(wst_want_span(&w), 0);
}

static void test_manifest_want_check(void **state)
{
    struct wst_region_desc regions[2];
    struct wst_want w;

    (void)state;
    memset(regions, 0, sizeof(regions));
    regions[0].length = 1000;
    regions[1].length = 100;
    w = want_of(76, 0); /* 76 + 24 = 100: fits exactly */
    assert_int_equal(wst_want_check(&w, regions, 2), WST_OK);
    w = want_of(77, 0);
    assert_int_equal(wst_want_check(&w, regions, 2), WST_ERR_INVALID);
    w = want_of(0, 0);
    w.region = 2; /* out of range */
    assert_int_equal(wst_want_check(&w, regions, 2), WST_ERR_INVALID);
    assert_int_equal(wst_want_check(&w, NULL, 0), WST_ERR_INVALID);

    /* row pitch: 0, or a multiple of 4 that is >= 8 */
    w = want_of(0, 8);
    assert_int_equal(wst_want_check(&w, regions, 2), WST_OK);
    w = want_of(0, 44); /* 2 * 44 + 8 = 96 */
    assert_int_equal(wst_want_check(&w, regions, 2), WST_OK);
    w = want_of(0, 48); /* 104 > 100 */
    assert_int_equal(wst_want_check(&w, regions, 2), WST_ERR_INVALID);
    w = want_of(0, 4); /* smaller than a row */
    assert_int_equal(wst_want_check(&w, regions, 2), WST_ERR_INVALID);
    w = want_of(0, 10); /* not a multiple of the element size */
    assert_int_equal(wst_want_check(&w, regions, 2), WST_ERR_INVALID);

    /* offset + span and the span itself must not wrap around */
    regions[1].length = UINT64_MAX;
    w = want_of(UINT64_MAX - 24, 0); /* ends at UINT64_MAX */
    assert_int_equal(wst_want_check(&w, regions, 2), WST_OK);
    w = want_of(UINT64_MAX - 23, 0); /* end would be 2^64 */
    assert_int_equal(wst_want_check(&w, regions, 2), WST_ERR_INVALID);
    w = want_of(0, 1ull << 63); /* (3 - 1) * 2^63 wraps */
    assert_int_equal(wst_want_check(&w, regions, 2), WST_ERR_INVALID);
    assert_int_equal(wst_want_span(&w), UINT64_MAX);

    /* the tensor and box are checked too */
    w = want_of(0, 0);
    w.box.stop[0] = 11;
    assert_int_equal(wst_want_check(&w, regions, 2), WST_ERR_INVALID);
    w = want_of(0, 0);
    w.tensor.dtype = (enum wst_dtype)0;
    assert_int_equal(wst_want_check(&w, regions, 2), WST_ERR_INVALID);
}

/* A grouped [16, 4, 8] expert tensor, ep rank 1 of 4: experts [4, 8). */
static struct wst_want expert_want(uint32_t ep_rank, uint32_t ep_size)
{
    struct wst_want w;

    memset(&w, 0, sizeof(w));
    snprintf(w.tensor.name, sizeof(w.tensor.name),
             "model.layers.0.mlp.experts.gate_proj.weight");
    w.tensor.dtype = WST_DTYPE_BF16;
    w.tensor.ndim = 3;
    w.tensor.shape[0] = 16, w.tensor.shape[1] = 4, w.tensor.shape[2] = 8;
    w.box.ndim = 3;
    w.box.start[0] = 4, w.box.stop[0] = 8;
    w.box.stop[1] = 4, w.box.stop[2] = 8;
    w.expert.grouped = 1;
    w.expert.ep_rank = ep_rank;
    w.expert.ep_size = ep_size;
    return w;
}

static void test_manifest_want_expert(void **state)
{
    struct wst_region_desc region;
    struct wst_want w;
    uint64_t a = 77, b = 77;

    (void)state;
    memset(&region, 0, sizeof(region));
    region.length = 4 * 4 * 8 * 2;
    w = expert_want(1, 4);
    assert_int_equal(wst_want_expert_check(&w), WST_OK);
    assert_int_equal(wst_want_check(&w, &region, 1), WST_OK);
    assert_int_equal(wst_want_expert_range(&w, &a, &b), WST_OK);
    assert_int_equal(a, 4);
    assert_int_equal(b, 8);
    w = expert_want(0, 1); /* ep 1: every expert */
    assert_int_equal(wst_want_expert_range(&w, &a, &b), WST_OK);
    assert_int_equal(a, 0);
    assert_int_equal(b, 16);

    /* the descriptor itself */
    w = expert_want(4, 4); /* ep_rank >= ep_size */
    assert_int_equal(wst_want_expert_check(&w), WST_ERR_INVALID);
    assert_int_equal(wst_want_check(&w, &region, 1), WST_ERR_INVALID);
    w = expert_want(0, 0); /* ep_size 0 */
    assert_int_equal(wst_want_check(&w, &region, 1), WST_ERR_INVALID);
    w = expert_want(1, 4);
    w.tensor.ndim = 1, w.box.ndim = 1; /* grouped needs [E, ...] */
    w.box.start[0] = 0, w.box.stop[0] = 16;
    assert_int_equal(wst_want_expert_check(&w), WST_ERR_INVALID);

    /* zeroed = dense; a dense want may not carry ep fields */
    w = expert_want(1, 4);
    memset(&w.expert, 0, sizeof(w.expert));
    assert_int_equal(wst_want_check(&w, &region, 1), WST_OK);
    assert_int_equal(wst_want_expert_range(&w, &a, &b), WST_ERR_INVALID);
    w.expert.ep_size = 4;
    assert_int_equal(wst_want_check(&w, &region, 1), WST_ERR_INVALID);

    /* divisibility is reported by the range, outputs left alone */
    w = expert_want(1, 4);
    w.tensor.shape[0] = 10;
    a = b = 77;
    assert_int_equal(wst_want_expert_range(&w, &a, &b),
                     WST_ERR_EXPERT_DIVISIBILITY);
    assert_int_equal(a, 77);
    assert_int_equal(b, 77);
    /* ... but is not the descriptor's business */
    assert_int_equal(wst_want_expert_check(&w), WST_OK);
}

static void test_manifest_have_check(void **state)
{
    struct wst_have h;

    (void)state;
    memset(&h, 0, sizeof(h));
    h.tensor = tensor2(10, 4, WST_DTYPE_F32);
    h.box = box2(0, 5, 0, 4);
    h.mem = WST_MEM_HOST;
    assert_int_equal(wst_have_check(&h), WST_OK);
    h.mem = WST_MEM_CUDA;
    assert_int_equal(wst_have_check(&h), WST_OK);
    h.mem = (enum wst_mem_type)0;
    assert_int_equal(wst_have_check(&h), WST_ERR_INVALID);
    h.mem = WST_MEM_HOST;
    h.flat = 1; /* a 2-D box is not a flat box */
    assert_int_equal(wst_have_check(&h), WST_ERR_INVALID);
    h.box = box1(20, 40);
    assert_int_equal(wst_have_check(&h), WST_OK);
    h.tensor.shape[1] = 0;
    assert_int_equal(wst_have_check(&h), WST_ERR_INVALID);
}

/* ---- flat ranges and overlaps, against element-level truth ----------- */

static struct wst_tensor_desc tensor3(void)
{
    struct wst_tensor_desc t = tensor2(3, 4, WST_DTYPE_BF16);

    t.ndim = 3;
    t.shape[2] = 5;
    return t;
}

static uint64_t flat_of(const struct wst_tensor_desc *t, const uint64_t *x)
{
    uint64_t f = 0;

    for (uint32_t d = 0; d < t->ndim; d++)
        f = f * t->shape[d] + x[d];
    return f;
}

static void index_of(const struct wst_tensor_desc *t, uint64_t f, uint64_t *x)
{
    for (uint32_t d = t->ndim; d-- > 0;) {
        x[d] = f % t->shape[d];
        f /= t->shape[d];
    }
}

static int box_has(const struct wst_box *b, const uint64_t *x)
{
    for (uint32_t d = 0; d < b->ndim; d++)
        if (x[d] < b->start[d] || x[d] >= b->stop[d])
            return 0;
    return 1;
}

static int have_has(const struct wst_have *h, const uint64_t *x)
{
    uint64_t f = flat_of(&h->tensor, x);

    if (h->flat)
        return f >= h->box.start[0] && f < h->box.stop[0];
    return box_has(&h->box, x);
}

static void test_manifest_flat_boxes(void **state)
{
    struct wst_tensor_desc t = tensor3();
    struct wst_box out[WST_FLAT_MAX_BOXES];
    uint64_t x[WST_MAX_DIMS], n_el = 60;

    (void)state;
    for (uint64_t a = 0; a <= n_el; a++) {
        for (uint64_t b = a; b <= n_el; b++) {
            size_t n = wst_flat_boxes(&t, a, b, out);
            assert_true(n <= 2 * t.ndim - 1);
            /* every element in exactly one box iff it is in [a, b) */
            for (uint64_t f = 0; f < n_el; f++) {
                int hits = 0;
                index_of(&t, f, x);
                for (size_t k = 0; k < n; k++) {
                    assert_int_equal(out[k].ndim, 3);
                    hits += box_has(&out[k], x);
                }
                assert_int_equal(hits, f >= a && f < b);
            }
        }
    }
}

static struct wst_have have3(const struct wst_box *b, int flat)
{
    struct wst_have h;

    memset(&h, 0, sizeof(h));
    h.tensor = tensor3();
    h.box = *b;
    h.flat = flat;
    h.mem = WST_MEM_HOST;
    return h;
}

static struct wst_have rnd_have3(uint64_t *seed)
{
    struct wst_tensor_desc t = tensor3();
    struct wst_box b;
    uint64_t r[6];

    for (int i = 0; i < 6; i++) {
        *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
        r[i] = *seed >> 33;
    }
    memset(&b, 0, sizeof(b));
    if (r[0] % 2) {
        b.ndim = 1;
        b.start[0] = r[1] % 61;
        b.stop[0] = b.start[0] + r[2] % (61 - b.start[0]);
        return have3(&b, 1);
    }
    b.ndim = 3;
    for (uint32_t d = 0; d < 3; d++) {
        b.start[d] = r[1 + d] % (t.shape[d] + 1);
        b.stop[d] = b.start[d] + r[4 + (d % 2)] % (t.shape[d] - b.start[d] + 1);
    }
    return have3(&b, 0);
}

static void test_manifest_haves_overlap(void **state)
{
    uint64_t seed = 42, x[WST_MAX_DIMS], y[WST_MAX_DIMS];
    int both = 0, apart = 0;

    (void)state;
    for (int c = 0; c < 4000; c++) {
        struct wst_have a = rnd_have3(&seed), b = rnd_have3(&seed);
        int truth = 0;

        assert_int_equal(wst_have_check(&a), WST_OK);
        assert_int_equal(wst_have_check(&b), WST_OK);
        for (uint64_t f = 0; f < 60 && !truth; f++) {
            index_of(&a.tensor, f, y);
            truth = have_has(&a, y) && have_has(&b, y);
        }
        memset(x, 0xff, sizeof(x));
        assert_int_equal(wst_haves_overlap(&a, &b, x), truth);
        assert_int_equal(wst_haves_overlap(&b, &a, NULL), truth);
        if (truth) {
            /* the element it names is in both */
            assert_true(have_has(&a, x) && have_has(&b, x));
            both++;
        } else {
            apart++;
        }
    }
    assert_true(both > 500 && apart > 500);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_manifest_tensor_layer),
        cmocka_unit_test(test_manifest_tensor_desc_check),
        cmocka_unit_test(test_manifest_tensor_desc_overflow),
        cmocka_unit_test(test_manifest_box_check),
        cmocka_unit_test(test_manifest_want_span),
        cmocka_unit_test(test_manifest_want_check),
        cmocka_unit_test(test_manifest_want_expert),
        cmocka_unit_test(test_manifest_have_check),
        cmocka_unit_test(test_manifest_flat_boxes),
        cmocka_unit_test(test_manifest_haves_overlap),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
