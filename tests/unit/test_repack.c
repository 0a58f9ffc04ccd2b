/* test_repack.c - the MoE repack loaders (kernels/repack.h), CPU twins.
 *
 * The "trtllm-bf16" layout is checked against an independent reference that
 * composes the four steps of REFIT_LAYOUTS.md section 3 literally (swap,
 * interleave, shuffle in blocks of 32, block layout along K), not the closed
 * form the library uses; the doc's first output rows are asserted on their
 * own. Sources are seeded random bf16 bit patterns, never zero; outputs are
 * poisoned first so an unwritten byte cannot pass.
 *
 * WST_TEST_REPACK_SMALL=1 skips the Qwen3-sized cases and the speed line
 * (for valgrind).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dtype.h"
#include "repack.h"

#define POISON 0xA5

/* ---- data --------------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s)
{
    /* xorshift64* */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

/* Random bytes, none of them zero (bf16 values are compared as bits). */
static void fill_random(void *buf, size_t bytes, uint64_t seed)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 1;
    unsigned char *p = buf;
    uint64_t r = 0;

    for (size_t i = 0; i < bytes; i++) {
        if (i % 8 == 0) {
            r = rng_next(&s);
        }
        p[i] = (unsigned char)(r >> (8 * (i % 8)));
        if (p[i] == 0) {
            p[i] = 0x5A;
        }
    }
}

static int is_poison(const void *buf, size_t bytes)
{
    const unsigned char *p = buf;

    for (size_t i = 0; i < bytes; i++) {
        if (p[i] != POISON) {
            return 0;
        }
    }
    return 1;
}

static int small_only(void)
{
    const char *v = getenv("WST_TEST_REPACK_SMALL");

    return v != NULL && v[0] != '\0' && strcmp(v, "0") != 0;
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One expert's checkpoint tensors. */
struct expert_src {
    uint16_t *gate; /* [I, H] */
    uint16_t *up;   /* [I, H] */
    uint16_t *down; /* [H, I] */
};

static void expert_src_make(struct expert_src *x, uint32_t h, uint32_t i,
                            uint64_t seed)
{
    size_t n = (size_t)i * h;

    x->gate = malloc(n * 2);
    x->up = malloc(n * 2);
    x->down = malloc(n * 2);
    assert_non_null(x->gate);
    assert_non_null(x->up);
    assert_non_null(x->down);
    fill_random(x->gate, n * 2, seed * 3 + 0);
    fill_random(x->up, n * 2, seed * 3 + 1);
    fill_random(x->down, n * 2, seed * 3 + 2);
}

static void expert_src_free(struct expert_src *x)
{
    free(x->gate);
    free(x->up);
    free(x->down);
}

/* ---- the independent trtllm-bf16 reference: four literal steps ---------- */

/* (a) [gate; up] -> [up; gate]: out is [2I, H]. */
static void ref_swap(const uint16_t *gate, const uint16_t *up, uint32_t i,
                     uint32_t h, uint16_t *out)
{
    memcpy(out, up, (size_t)i * h * 2);
    memcpy(out + (size_t)i * h, gate, (size_t)i * h * 2);
}

/* (b) interleave the halves of [up; gate]: up0, gate0, up1, gate1, ... */
static void ref_interleave(const uint16_t *in, uint32_t i, uint32_t h,
                           uint16_t *out)
{
    for (uint32_t r = 0; r < i; r++) {
        memcpy(out + (size_t)(2 * r) * h, in + (size_t)r * h, (size_t)h * 2);
        memcpy(out + (size_t)(2 * r + 1) * h, in + (size_t)(i + r) * h,
               (size_t)h * 2);
    }
}

/* (c) shuffle rows in blocks of 32: view each block as an 8x4 grid of rows
 * (input row 4a + c at grid position (a, c)) and transpose it to 4x8, so
 * output row 8c + a is input row 4a + c. */
static void ref_shuffle32(const uint16_t *in, uint32_t m, uint32_t k,
                          uint16_t *out)
{
    for (uint32_t blk = 0; blk < m / 32; blk++) {
        for (uint32_t a = 0; a < 8; a++) {
            for (uint32_t c = 0; c < 4; c++) {
                size_t dst = (size_t)blk * 32 + 8 * c + a;
                size_t src = (size_t)blk * 32 + 4 * a + c;

                memcpy(out + dst * k, in + src * k, (size_t)k * 2);
            }
        }
    }
}

/* (d) [M, K] -> [K/64, M, 64]. */
static void ref_block_layout(const uint16_t *in, uint32_t m, uint32_t k,
                             uint16_t *out)
{
    for (uint32_t kb = 0; kb < k / 64; kb++) {
        for (uint32_t n = 0; n < m; n++) {
            for (uint32_t j = 0; j < 64; j++) {
                out[((size_t)kb * m + n) * 64 + j] =
                    in[(size_t)n * k + 64 * kb + j];
            }
        }
    }
}

/* One expert's W13 [H/64, 2I, 64] and W2 [I/64, H, 64]. */
static void ref_trtllm_expert(const struct expert_src *x, uint32_t h,
                              uint32_t i, uint16_t *w13, uint16_t *w2)
{
    size_t n13 = (size_t)2 * i * h;
    uint16_t *t0 = malloc(n13 * 2);
    uint16_t *t1 = malloc(n13 * 2);

    assert_non_null(t0);
    assert_non_null(t1);
    ref_swap(x->gate, x->up, i, h, t0);
    ref_interleave(t0, i, h, t1);
    ref_shuffle32(t1, 2 * i, h, t0);
    ref_block_layout(t0, 2 * i, h, w13);

    ref_shuffle32(x->down, h, i, t0);
    ref_block_layout(t0, h, i, w2);
    free(t0);
    free(t1);
}

/* ---- helpers over the library ------------------------------------------ */

struct live {
    struct wst_expert_shape shape;
    unsigned char *w13;
    unsigned char *w2;
    size_t w13_bytes, w2_bytes; /* whole buffers */
    size_t w13_slice, w2_slice; /* one expert */
};

static void live_make(struct live *lv, const struct wst_repack_loader *ld,
                      uint32_t l, uint32_t h, uint32_t i, enum wst_dtype dt)
{
    char err[256] = "";

    memset(lv, 0, sizeof(*lv));
    lv->shape.n_local = l;
    lv->shape.hidden = h;
    lv->shape.inter = i;
    lv->shape.dtype = dt;
    assert_int_equal(ld->check(&lv->shape, err, sizeof(err)), WST_OK);
    lv->w13_bytes = (size_t)ld->w13_bytes(&lv->shape);
    lv->w2_bytes = (size_t)ld->w2_bytes(&lv->shape);
    assert_int_equal(lv->w13_bytes, (size_t)l * 2 * i * h * wst_dtype_size(dt));
    assert_int_equal(lv->w2_bytes, (size_t)l * h * i * wst_dtype_size(dt));
    lv->w13_slice = lv->w13_bytes / l;
    lv->w2_slice = lv->w2_bytes / l;
    lv->w13 = malloc(lv->w13_bytes);
    lv->w2 = malloc(lv->w2_bytes);
    assert_non_null(lv->w13);
    assert_non_null(lv->w2);
    memset(lv->w13, POISON, lv->w13_bytes);
    memset(lv->w2, POISON, lv->w2_bytes);
}

static void live_free(struct live *lv)
{
    free(lv->w13);
    free(lv->w2);
}

/* Loads experts 'which' (n_which of them) of an L x H x I bf16 layer with
 * the trtllm loader, compares each bit for bit with the reference and checks
 * that every other expert's bytes are still poison. */
static void check_trtllm(uint32_t l, uint32_t h, uint32_t i,
                         const uint32_t *which, uint32_t n_which)
{
    const struct wst_repack_loader *ld = wst_repack_loader_trtllm_bf16();
    struct live lv;
    uint16_t *ref13, *ref2;
    unsigned char *loaded = calloc(l, 1);

    assert_non_null(loaded);
    live_make(&lv, ld, l, h, i, WST_DTYPE_BF16);
    ref13 = malloc(lv.w13_slice);
    ref2 = malloc(lv.w2_slice);
    assert_non_null(ref13);
    assert_non_null(ref2);
    for (uint32_t w = 0; w < n_which; w++) {
        uint32_t e = which[w];
        struct expert_src x;

        expert_src_make(&x, h, i, 1000 * l + e + 1);
        assert_int_equal(ld->load_expert(ld, &lv.shape, e, x.gate, x.up, x.down,
                                         lv.w13, lv.w2),
                         WST_OK);
        ref_trtllm_expert(&x, h, i, ref13, ref2);
        assert_memory_equal(lv.w13 + e * lv.w13_slice, ref13, lv.w13_slice);
        assert_memory_equal(lv.w2 + e * lv.w2_slice, ref2, lv.w2_slice);
        loaded[e] = 1;
        expert_src_free(&x);
    }
    for (uint32_t e = 0; e < l; e++) {
        if (!loaded[e]) {
            assert_true(is_poison(lv.w13 + e * lv.w13_slice, lv.w13_slice));
            assert_true(is_poison(lv.w2 + e * lv.w2_slice, lv.w2_slice));
        }
    }
    free(ref13);
    free(ref2);
    free(loaded);
    live_free(&lv);
}

static void check_trtllm_all(uint32_t l, uint32_t h, uint32_t i)
{
    uint32_t which[64];

    assert_true(l <= 64);
    for (uint32_t e = 0; e < l; e++) {
        which[e] = e;
    }
    check_trtllm(l, h, i, which, l);
}

/* ---- trtllm-bf16 -------------------------------------------------------- */

/* The doc's first W13 rows: up0, up2, ..., up14, gate0, ..., gate14, up1,
 * up3, ..., up15, gate1, ..., gate15; W2's: down0, down4, ..., down28,
 * down1, down5, .... Asserted on the library and on the reference. */
static void test_repack_trtllm_first_rows(void **state)
{
    const uint32_t h = 128, i = 128;
    const struct wst_repack_loader *ld = wst_repack_loader_trtllm_bf16();
    struct live lv;
    struct expert_src x;
    uint16_t *ref13, *ref2;

    (void)state;
    live_make(&lv, ld, 1, h, i, WST_DTYPE_BF16);
    expert_src_make(&x, h, i, 7);
    ref13 = malloc(lv.w13_slice);
    ref2 = malloc(lv.w2_slice);
    assert_non_null(ref13);
    assert_non_null(ref2);
    assert_int_equal(
        ld->load_expert(ld, &lv.shape, 0, x.gate, x.up, x.down, lv.w13, lv.w2),
        WST_OK);
    ref_trtllm_expert(&x, h, i, ref13, ref2);

    for (uint32_t n = 0; n < 32; n++) {
        uint32_t quarter = n / 8, k = n % 8;
        /* quarter 0: up even, 1: gate even, 2: up odd, 3: gate odd */
        uint32_t r = 2 * k + quarter / 2;
        const uint16_t *row = (quarter % 2 == 0 ? x.up : x.gate) + r * h;
        const uint16_t *drow = x.down + (size_t)(4 * k + quarter) * i;

        for (uint32_t kb = 0; kb < h / 64; kb++) {
            const uint16_t *lib =
                (const uint16_t *)lv.w13 + ((size_t)kb * 2 * i + n) * 64;

            assert_memory_equal(lib, row + 64 * kb, 128);
            assert_memory_equal(ref13 + ((size_t)kb * 2 * i + n) * 64,
                                row + 64 * kb, 128);
        }
        for (uint32_t kb = 0; kb < i / 64; kb++) {
            const uint16_t *lib =
                (const uint16_t *)lv.w2 + ((size_t)kb * h + n) * 64;

            assert_memory_equal(lib, drow + 64 * kb, 128);
            assert_memory_equal(ref2 + ((size_t)kb * h + n) * 64,
                                drow + 64 * kb, 128);
        }
    }
    /* sigma itself, on the second block too. */
    assert_int_equal(wst_repack_trtllm_row(0), 0);
    assert_int_equal(wst_repack_trtllm_row(1), 4);
    assert_int_equal(wst_repack_trtllm_row(8), 1);
    assert_int_equal(wst_repack_trtllm_row(31), 31);
    assert_int_equal(wst_repack_trtllm_row(33), 36);

    free(ref13);
    free(ref2);
    expert_src_free(&x);
    live_free(&lv);
}

static void test_repack_trtllm_small_matches_reference(void **state)
{
    (void)state;
    for (uint32_t l = 1; l <= 3; l++) {
        check_trtllm_all(l, 64, 128);
    }
    check_trtllm_all(2, 192, 256); /* several K blocks and shuffle blocks */
}

/* REFIT_LAYOUTS.md's synthetic model: H=1024, I=256, E=16 at ep=4. */
static void test_repack_trtllm_synthetic_matches_reference(void **state)
{
    (void)state;
    check_trtllm_all(16 / 4, 1024, 256);
}

/* Qwen3-30B-A3B at ep=8: H=2048, I=768, L=16; three full experts. */
static void test_repack_trtllm_qwen3_matches_reference(void **state)
{
    const uint32_t which[] = {0, 7, 15};

    (void)state;
    if (small_only()) {
        skip();
    }
    check_trtllm(16, 2048, 768, which, 3);
}

static void test_repack_trtllm_loads_only_its_expert(void **state)
{
    const uint32_t which[] = {1};

    (void)state;
    check_trtllm(3, 64, 128, which, 1);
}

static void test_repack_trtllm_layer_sizes(void **state)
{
    const struct wst_repack_loader *ld = wst_repack_loader_trtllm_bf16();
    struct wst_expert_shape s = {16, 2048, 768, WST_DTYPE_BF16};

    (void)state;
    assert_int_equal(ld->check(&s, NULL, 0), WST_OK);
    /* W13 [16, 32, 1536, 64], W2 [16, 12, 2048, 64], bf16. */
    assert_int_equal(ld->w13_bytes(&s), 16ull * 32 * 1536 * 64 * 2);
    assert_int_equal(ld->w2_bytes(&s), 16ull * 12 * 2048 * 64 * 2);
    assert_int_equal(ld->w13_bytes(&s) + ld->w2_bytes(&s), 150994944ull);
}

/* ---- refusals ----------------------------------------------------------- */

struct refusal {
    struct wst_expert_shape shape;
    const char *needle;
};

static void test_repack_trtllm_refuses_each_constraint(void **state)
{
    const struct refusal cases[] = {
        {{1, 64, 128, WST_DTYPE_F16}, "dtype must be bf16"},
        {{1, 64, 128, WST_DTYPE_F32}, "dtype must be bf16"},
        {{1, 64, 8, WST_DTYPE_BF16}, "2I % 32"},
        {{1, 48, 128, WST_DTYPE_BF16}, "H % 32"},
        {{1, 32, 128, WST_DTYPE_BF16}, "H % 64"},
        {{1, 64, 32, WST_DTYPE_BF16}, "I % 64"},
        {{1, 64, 64, WST_DTYPE_BF16}, "I % 128"},
        {{1, 2048, 192, WST_DTYPE_BF16}, "I % 128"},
        {{2049, 64, 128, WST_DTYPE_BF16}, "n_local"},
        {{0, 64, 128, WST_DTYPE_BF16}, "must be > 0"},
        {{1, 0, 128, WST_DTYPE_BF16}, "must be > 0"},
        {{1, 64, 0, WST_DTYPE_BF16}, "must be > 0"},
        {{1, 64, 128, (enum wst_dtype)99}, "unknown dtype"},
    };
    const struct wst_repack_loader *ld = wst_repack_loader_trtllm_bf16();
    uint16_t src[64 * 128] = {0};
    uint16_t dst13[2 * 64 * 128], dst2[64 * 128];

    (void)state;
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        char err[256] = "";

        assert_int_equal(ld->check(&cases[c].shape, err, sizeof(err)),
                         WST_ERR_REPACK_SHAPE);
        if (strstr(err, cases[c].needle) == NULL ||
            strncmp(err, "trtllm-bf16: ", 13) != 0) {
            fail_msg("case %zu: '%s' does not name '%s'", c, err,
                     cases[c].needle);
        }
        /* load_expert refuses the same shapes on its own. */
        if (cases[c].shape.n_local > 0) {
            memset(dst13, POISON, sizeof(dst13));
            assert_int_equal(ld->load_expert(ld, &cases[c].shape, 0, src, src,
                                             src, dst13, dst2),
                             WST_ERR_REPACK_SHAPE);
            assert_true(is_poison(dst13, sizeof(dst13)));
        }
    }
    /* A tiny err buffer is truncated, not overrun; none at all is fine. */
    {
        char tiny[8];

        memset(tiny, 'x', sizeof(tiny));
        assert_int_equal(ld->check(&cases[0].shape, tiny, 4),
                         WST_ERR_REPACK_SHAPE);
        assert_int_equal(tiny[3], '\0');
        assert_int_equal(tiny[4], 'x');
        assert_int_equal(ld->check(&cases[0].shape, NULL, 0),
                         WST_ERR_REPACK_SHAPE);
    }
}

static void test_repack_check_experts_limit(void **state)
{
    char err[256] = "";

    (void)state;
    assert_int_equal(wst_repack_check_experts(2048, err, sizeof(err)), WST_OK);
    assert_int_equal(wst_repack_check_experts(1, err, sizeof(err)), WST_OK);
    assert_int_equal(wst_repack_check_experts(2049, err, sizeof(err)),
                     WST_ERR_REPACK_SHAPE);
    assert_non_null(strstr(err, "2048"));
    assert_non_null(strstr(err, "2049"));
    assert_int_equal(wst_repack_check_experts(0, err, sizeof(err)),
                     WST_ERR_REPACK_SHAPE);
}

static void test_repack_load_refuses_bad_arguments(void **state)
{
    const struct wst_repack_loader *loaders[] = {
        wst_repack_loader_checkpoint(), wst_repack_loader_trtllm_bf16()};
    struct wst_expert_shape s = {2, 64, 128, WST_DTYPE_BF16};
    static uint16_t src[64 * 128], w13[2 * 2 * 64 * 128], w2[2 * 64 * 128];

    (void)state;
    for (size_t k = 0; k < 2; k++) {
        const struct wst_repack_loader *ld = loaders[k];

        memset(w13, POISON, sizeof(w13));
        memset(w2, POISON, sizeof(w2));
        assert_int_equal(ld->load_expert(ld, &s, 2, src, src, src, w13, w2),
                         WST_ERR_INVALID);
        assert_int_equal(ld->load_expert(ld, &s, 0, NULL, src, src, w13, w2),
                         WST_ERR_INVALID);
        assert_int_equal(ld->load_expert(ld, &s, 0, src, src, NULL, w13, w2),
                         WST_ERR_INVALID);
        assert_int_equal(ld->load_expert(ld, &s, 0, src, src, src, w13, NULL),
                         WST_ERR_INVALID);
        assert_int_equal(ld->load_expert(ld, NULL, 0, src, src, src, w13, w2),
                         WST_ERR_INVALID);
        assert_true(is_poison(w13, sizeof(w13)));
        assert_true(is_poison(w2, sizeof(w2)));
    }
}

/* ---- checkpoint --------------------------------------------------------- */

/* Any dtype, any sizes: w13[e] = [gate; up], w2[e] = down, bit for bit. */
static void check_checkpoint(enum wst_dtype dt, uint32_t l, uint32_t h,
                             uint32_t i)
{
    const struct wst_repack_loader *ld = wst_repack_loader_checkpoint();
    size_t es = wst_dtype_size(dt);
    size_t proj = (size_t)i * h * es;
    struct live lv;
    unsigned char *gate = malloc(proj * l), *up = malloc(proj * l);
    unsigned char *down = malloc(proj * l);

    assert_non_null(gate);
    assert_non_null(up);
    assert_non_null(down);
    fill_random(gate, proj * l, 11 + dt);
    fill_random(up, proj * l, 12 + dt);
    fill_random(down, proj * l, 13 + dt);
    live_make(&lv, ld, l, h, i, dt);

    /* The middle expert alone first: its neighbours stay poisoned. */
    assert_int_equal(ld->load_expert(ld, &lv.shape, l / 2,
                                     gate + proj * (l / 2), up + proj * (l / 2),
                                     down + proj * (l / 2), lv.w13, lv.w2),
                     WST_OK);
    for (uint32_t e = 0; e < l; e++) {
        if (e != l / 2) {
            assert_true(is_poison(lv.w13 + e * lv.w13_slice, lv.w13_slice));
            assert_true(is_poison(lv.w2 + e * lv.w2_slice, lv.w2_slice));
        }
    }
    for (uint32_t e = 0; e < l; e++) {
        assert_int_equal(ld->load_expert(ld, &lv.shape, e, gate + proj * e,
                                         up + proj * e, down + proj * e, lv.w13,
                                         lv.w2),
                         WST_OK);
    }
    /* Direct reference, element by element. */
    for (uint32_t e = 0; e < l; e++) {
        for (uint32_t r = 0; r < 2 * i; r++) {
            const unsigned char *want =
                (r < i ? gate + proj * e + (size_t)r * h * es
                       : up + proj * e + (size_t)(r - i) * h * es);
            const unsigned char *got =
                lv.w13 + (((size_t)e * 2 * i + r) * h) * es;

            assert_memory_equal(got, want, (size_t)h * es);
        }
        assert_memory_equal(lv.w2 + e * lv.w2_slice, down + proj * e, proj);
    }
    free(gate);
    free(up);
    free(down);
    live_free(&lv);
}

static void test_repack_checkpoint_matches_reference(void **state)
{
    (void)state;
    check_checkpoint(WST_DTYPE_BF16, 3, 64, 128);
    check_checkpoint(WST_DTYPE_F32, 3, 40, 24);
    check_checkpoint(WST_DTYPE_FP8_E4M3, 4, 33, 7);
    check_checkpoint(WST_DTYPE_F64, 1, 5, 3);
}

static void test_repack_checkpoint_accepts_any_dtype(void **state)
{
    const struct wst_repack_loader *ld = wst_repack_loader_checkpoint();
    struct wst_expert_shape s = {3, 48, 8, WST_DTYPE_F16};
    char err[256] = "";

    (void)state;
    assert_int_equal(ld->check(&s, err, sizeof(err)), WST_OK);
    s.dtype = WST_DTYPE_I64;
    assert_int_equal(ld->check(&s, err, sizeof(err)), WST_OK);
    s.dtype = (enum wst_dtype)99;
    assert_int_equal(ld->check(&s, err, sizeof(err)), WST_ERR_REPACK_SHAPE);
    assert_non_null(strstr(err, "checkpoint: unknown dtype"));
    s.dtype = WST_DTYPE_BF16;
    s.inter = 0;
    assert_int_equal(ld->check(&s, err, sizeof(err)), WST_ERR_REPACK_SHAPE);
    /* A layer too large for any address space. */
    s.n_local = UINT32_MAX;
    s.hidden = UINT32_MAX;
    s.inter = UINT32_MAX;
    assert_int_equal(ld->check(&s, err, sizeof(err)), WST_ERR_REPACK_SHAPE);
    assert_non_null(strstr(err, "does not fit"));
}

/* ---- registry ----------------------------------------------------------- */

static wst_status_t custom_check(const struct wst_expert_shape *s, char *err,
                                 size_t errlen)
{
    (void)s;
    (void)err;
    (void)errlen;
    return WST_OK;
}

static uint64_t custom_bytes(const struct wst_expert_shape *s)
{
    (void)s;
    return 0;
}

/* Reaches its context through self->arg, as an engine's loader would. */
static wst_status_t custom_load(const struct wst_repack_loader *self,
                                const struct wst_expert_shape *s,
                                uint32_t local, const void *gate,
                                const void *up, const void *down, void *w13,
                                void *w2)
{
    if (self != NULL && self->arg != NULL)
        ++*(int *)self->arg;
    (void)s;
    (void)local;
    (void)gate;
    (void)up;
    (void)down;
    (void)w13;
    (void)w2;
    return WST_ERR_UNSUPPORTED;
}

static void test_repack_registry_finds_builtins(void **state)
{
    struct wst_loader_registry reg;

    (void)state;
    wst_loader_registry_init(&reg);
    assert_ptr_equal(wst_loader_registry_find(&reg, "checkpoint"),
                     wst_repack_loader_checkpoint());
    assert_ptr_equal(wst_loader_registry_find(&reg, "trtllm-bf16"),
                     wst_repack_loader_trtllm_bf16());
    assert_string_equal(wst_repack_loader_checkpoint()->name, "checkpoint");
    assert_string_equal(wst_repack_loader_trtllm_bf16()->name, "trtllm-bf16");
    assert_null(wst_loader_registry_find(&reg, "trtllm-fp8"));
    assert_null(wst_loader_registry_find(&reg, ""));
    assert_null(wst_loader_registry_find(&reg, NULL));
}

static void
test_repack_registry_adds_custom_and_refuses_duplicates(void **state)
{
    int ctx = 42;
    const struct wst_repack_loader custom = {
        "engine-x",  custom_check, custom_bytes, custom_bytes,
        custom_load, &ctx,         NULL};
    const struct wst_repack_loader again = {
        "engine-x",  custom_check, custom_bytes, custom_bytes,
        custom_load, NULL,         NULL};
    const struct wst_repack_loader shadow = {
        "trtllm-bf16", custom_check, custom_bytes, custom_bytes,
        custom_load,   NULL,         NULL};
    struct wst_repack_loader broken = custom;
    struct wst_loader_registry reg, other;
    const struct wst_repack_loader *found;

    (void)state;
    wst_loader_registry_init(&reg);
    wst_loader_registry_init(&other);
    assert_int_equal(wst_loader_registry_add(&reg, &custom), WST_OK);
    found = wst_loader_registry_find(&reg, "engine-x");
    assert_ptr_equal(found, &custom);
    assert_ptr_equal(found->arg, &ctx);
    /* Called through the registry, the loader reaches its own context. */
    assert_int_equal(
        found->load_expert(found, NULL, 0, NULL, NULL, NULL, NULL, NULL),
        WST_ERR_UNSUPPORTED);
    assert_int_equal(ctx, 43);
    /* Registries are independent: no global state. */
    assert_null(wst_loader_registry_find(&other, "engine-x"));

    assert_int_equal(wst_loader_registry_add(&reg, &again), WST_ERR_INVALID);
    assert_int_equal(wst_loader_registry_add(&reg, &shadow), WST_ERR_INVALID);
    assert_ptr_equal(wst_loader_registry_find(&reg, "engine-x"), &custom);
    assert_ptr_equal(wst_loader_registry_find(&reg, "trtllm-bf16"),
                     wst_repack_loader_trtllm_bf16());

    broken.name = "broken";
    broken.load_expert = NULL;
    assert_int_equal(wst_loader_registry_add(&reg, &broken), WST_ERR_INVALID);
    broken = custom;
    broken.name = "";
    assert_int_equal(wst_loader_registry_add(&reg, &broken), WST_ERR_INVALID);
    assert_int_equal(wst_loader_registry_add(&reg, NULL), WST_ERR_INVALID);
    assert_null(wst_loader_registry_find(&reg, "broken"));
}

static void test_repack_registry_refuses_when_full(void **state)
{
    static char names[WST_LOADER_REGISTRY_MAX][16];
    static struct wst_repack_loader tables[WST_LOADER_REGISTRY_MAX];
    struct wst_loader_registry reg;
    uint32_t added = 0;

    (void)state;
    wst_loader_registry_init(&reg);
    for (uint32_t k = 0; k < WST_LOADER_REGISTRY_MAX; k++) {
        snprintf(names[k], sizeof(names[k]), "custom-%u", k);
        tables[k] = (struct wst_repack_loader){
            names[k],    custom_check, custom_bytes, custom_bytes,
            custom_load, NULL,         NULL};
        if (wst_loader_registry_add(&reg, &tables[k]) == WST_OK) {
            added++;
        } else {
            break;
        }
    }
    assert_int_equal(added, WST_LOADER_REGISTRY_MAX - 2);
    assert_int_equal(wst_loader_registry_add(&reg, &tables[added]),
                     WST_ERR_TOO_LARGE);
    assert_ptr_equal(wst_loader_registry_find(&reg, "custom-0"), &tables[0]);
}

/* ---- speed (printed, not asserted) -------------------------------------- */

/* One Qwen3-30B-A3B layer on one ep=8 rank: L=16, H=2048, I=768. */
static void test_repack_trtllm_speed(void **state)
{
    const struct wst_repack_loader *ld = wst_repack_loader_trtllm_bf16();
    struct wst_expert_shape s = {16, 2048, 768, WST_DTYPE_BF16};
    size_t w13b, w2b, total, proj;
    unsigned char *src, *dst;
    double best_repack = 1e30, best_copy = 1e30;

    (void)state;
    if (small_only()) {
        skip();
    }
    assert_int_equal(ld->check(&s, NULL, 0), WST_OK);
    w13b = ld->w13_bytes(&s);
    w2b = ld->w2_bytes(&s);
    total = w13b + w2b;
    proj = (size_t)s.inter * s.hidden * 2;
    src = malloc(total);
    dst = malloc(total);
    assert_non_null(src);
    assert_non_null(dst);
    fill_random(src, total, 99);
    memset(dst, POISON, total);

    for (int rep = 0; rep < 3; rep++) {
        double t0 = now_s(), t;

        for (uint32_t e = 0; e < s.n_local; e++) {
            const unsigned char *x = src + (size_t)e * 3 * proj;

            assert_int_equal(ld->load_expert(ld, &s, e, x, x + proj,
                                             x + 2 * proj, dst, dst + w13b),
                             WST_OK);
        }
        t = now_s() - t0;
        best_repack = t < best_repack ? t : best_repack;

        t0 = now_s();
        memcpy(dst, src, total);
        t = now_s() - t0;
        best_copy = t < best_copy ? t : best_copy;
    }
    /* Bytes read + written. */
    printf("[ SPEED    ] trtllm-bf16 repack, one Qwen3-30B-A3B layer at ep=8 "
           "(L=16, %.1f MB): %.2f GB/s (%.1f ms); memcpy of the same bytes: "
           "%.2f GB/s (%.1f ms)\n",
           (double)total / 1e6, 2.0 * (double)total / best_repack / 1e9,
           best_repack * 1e3, 2.0 * (double)total / best_copy / 1e9,
           best_copy * 1e3);
    free(src);
    free(dst);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_repack_trtllm_first_rows),
        cmocka_unit_test(test_repack_trtllm_small_matches_reference),
        cmocka_unit_test(test_repack_trtllm_synthetic_matches_reference),
        cmocka_unit_test(test_repack_trtllm_qwen3_matches_reference),
        cmocka_unit_test(test_repack_trtllm_loads_only_its_expert),
        cmocka_unit_test(test_repack_trtllm_layer_sizes),
        cmocka_unit_test(test_repack_trtllm_refuses_each_constraint),
        cmocka_unit_test(test_repack_check_experts_limit),
        cmocka_unit_test(test_repack_load_refuses_bad_arguments),
        cmocka_unit_test(test_repack_checkpoint_matches_reference),
        cmocka_unit_test(test_repack_checkpoint_accepts_any_dtype),
        cmocka_unit_test(test_repack_registry_finds_builtins),
        cmocka_unit_test(
            test_repack_registry_adds_custom_and_refuses_duplicates),
        cmocka_unit_test(test_repack_registry_refuses_when_full),
        cmocka_unit_test(test_repack_trtllm_speed),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
