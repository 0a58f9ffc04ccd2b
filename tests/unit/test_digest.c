/* test_digest.c - the integrity digest against a reference written from the
 * definition in digest.h, plus a pinned golden value. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "digest.h"

#define CHUNK ((size_t)WST_DIGEST_CHUNK)
#define MIB ((size_t)1 << 20)

/* Digest of 1 MiB of bytes (i * 31 + 7) mod 256, as one run. Pinned: if this
 * changes, the digest definition changed and peers would disagree. */
#define GOLDEN_1MIB UINT64_C(0xc353e5d79b274794)

/* Reference: straight from the definition, one run at a time. */
static uint64_t ref_digest(const unsigned char *buf, const size_t *runs,
                           size_t nruns)
{
    uint64_t sum = 0, pos = 0;
    unsigned char le[8];
    size_t r, off, n;
    int i;

    for (r = 0; r < nruns; r++) {
        for (off = 0; off < runs[r]; off += n) {
            n = runs[r] - off < CHUNK ? runs[r] - off : CHUNK;
            sum += XXH3_64bits_withSeed(buf + pos, n, pos);
            pos += n;
        }
    }
    for (i = 0; i < 8; i++)
        le[i] = (unsigned char)(sum >> (8 * i));
    return XXH3_64bits_withSeed(le, 8, pos);
}

static uint64_t wst_runs(const unsigned char *buf, const size_t *runs,
                         size_t nruns)
{
    struct wst_digest d;
    size_t r, pos = 0;

    wst_digest_init(&d);
    for (r = 0; r < nruns; r++) {
        wst_digest_update(&d, buf + pos, runs[r]);
        pos += runs[r];
    }
    return wst_digest_final(&d);
}

static unsigned char *random_bytes(size_t len, uint64_t seed)
{
    unsigned char *buf = malloc(len > 0 ? len : 1);
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    size_t i;

    assert_non_null(buf);
    for (i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        buf[i] = (unsigned char)(x >> 24);
    }
    return buf;
}

static void test_digest_matches_reference_one_run(void **state)
{
    static const size_t lens[] = {0,
                                  1,
                                  2,
                                  63,
                                  CHUNK - 1,
                                  CHUNK,
                                  CHUNK + 1,
                                  2 * CHUNK,
                                  3 * CHUNK + 17,
                                  MIB,
                                  5 * MIB + 12345};
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        unsigned char *buf = random_bytes(lens[i], i + 1);
        uint64_t want = ref_digest(buf, &lens[i], 1);

        assert_true(wst_digest_buffer(buf, lens[i]) == want);
        assert_true(wst_runs(buf, &lens[i], 1) == want);
        free(buf);
    }
}

static void test_digest_matches_reference_many_runs(void **state)
{
    static const size_t runs[] = {1, CHUNK - 1,   0,  CHUNK,     CHUNK + 1,
                                  3, 2 * MIB + 5, 77, CHUNK * 4, 1000};
    size_t total = 0, i;
    unsigned char *buf;

    (void)state;
    for (i = 0; i < sizeof(runs) / sizeof(runs[0]); i++)
        total += runs[i];
    buf = random_bytes(total, 42);
    for (i = 1; i <= sizeof(runs) / sizeof(runs[0]); i++)
        assert_true(wst_runs(buf, runs, i) == ref_digest(buf, runs, i));
    free(buf);
}

static void test_digest_empty_runs_change_nothing(void **state)
{
    static const size_t with_empty[] = {0, 100, 0, 0, 200, 0};
    static const size_t without[] = {100, 200};
    unsigned char *buf = random_bytes(300, 7);
    struct wst_digest d;

    (void)state;
    assert_true(wst_runs(buf, with_empty, 6) == wst_runs(buf, without, 2));
    wst_digest_init(&d);
    assert_true(wst_digest_final(&d) == wst_digest_buffer(buf, 0));
    free(buf);
}

static void test_digest_run_boundaries_matter(void **state)
{
    size_t len = 3 * CHUNK + 100;
    size_t split_a[] = {CHUNK / 2, len - CHUNK / 2};
    size_t split_b[] = {CHUNK, len - CHUNK};
    size_t split_c[] = {CHUNK, CHUNK, len - 2 * CHUNK};
    size_t small_a[] = {10, 20};
    size_t small_b[] = {20, 10};
    unsigned char *buf = random_bytes(len, 3);
    uint64_t whole = wst_digest_buffer(buf, len);

    (void)state;
    assert_true(wst_runs(buf, split_a, 2) != whole);
    /* Splitting exactly on chunk boundaries gives the same chunks. */
    assert_true(wst_runs(buf, split_b, 2) == whole);
    assert_true(wst_runs(buf, split_c, 3) == whole);
    /* Below one chunk every split is visible. */
    assert_true(wst_runs(buf, small_a, 2) != wst_runs(buf, small_b, 2));
    assert_true(wst_runs(buf, small_a, 2) != wst_digest_buffer(buf, 30));
    free(buf);
}

static void test_digest_bit_flip_detected(void **state)
{
    size_t len = 2 * CHUNK + 999;
    size_t offs[] = {0, 1, CHUNK - 1, CHUNK, 2 * CHUNK + 998};
    unsigned char *buf = random_bytes(len, 11);
    uint64_t base = wst_digest_buffer(buf, len);
    size_t i;
    int bit;

    (void)state;
    for (i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
        for (bit = 0; bit < 8; bit += 7) {
            buf[offs[i]] ^= (unsigned char)(1u << bit);
            assert_true(wst_digest_buffer(buf, len) != base);
            buf[offs[i]] ^= (unsigned char)(1u << bit);
        }
    }
    assert_true(wst_digest_buffer(buf, len) == base);
    /* Length is covered too: one byte more or less. */
    assert_true(wst_digest_buffer(buf, len - 1) != base);
    free(buf);
}

static void test_digest_chunk_swap_detected(void **state)
{
    size_t len = 4 * CHUNK;
    unsigned char *buf = random_bytes(len, 5);
    unsigned char *tmp = malloc(CHUNK);
    uint64_t base = wst_digest_buffer(buf, len);

    (void)state;
    assert_non_null(tmp);
    memcpy(tmp, buf + CHUNK, CHUNK);
    memcpy(buf + CHUNK, buf + 3 * CHUNK, CHUNK);
    memcpy(buf + 3 * CHUNK, tmp, CHUNK);
    assert_true(wst_digest_buffer(buf, len) != base);
    free(tmp);
    free(buf);
}

static void test_digest_golden_value(void **state)
{
    unsigned char *buf = malloc(MIB);
    uint64_t got;
    size_t i;

    (void)state;
    assert_non_null(buf);
    for (i = 0; i < MIB; i++)
        buf[i] = (unsigned char)(i * 31 + 7);
    got = wst_digest_buffer(buf, MIB);
    if (got != GOLDEN_1MIB)
        fail_msg("golden digest 0x%016llx, pinned 0x%016llx",
                 (unsigned long long)got, (unsigned long long)GOLDEN_1MIB);
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_digest_matches_reference_one_run),
        cmocka_unit_test(test_digest_matches_reference_many_runs),
        cmocka_unit_test(test_digest_empty_runs_change_nothing),
        cmocka_unit_test(test_digest_run_boundaries_matter),
        cmocka_unit_test(test_digest_bit_flip_detected),
        cmocka_unit_test(test_digest_chunk_swap_detected),
        cmocka_unit_test(test_digest_golden_value),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
