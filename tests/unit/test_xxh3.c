/* test_xxh3.c - kernels/xxh3.h (the XXH3-64 the GPU digest runs) against
 * libxxhash, bit for bit: every length class, every length up to 2048 and
 * the block and chunk boundaries, unaligned inputs, zero and random seeds.
 * This is what proves the device hash correct on machines with no GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "digest.h"
#include "xxh3.h"

#define MAX_SHORT 2048
#define MAX_LEN ((size_t)1 << 20)
#define SLACK 16 /* room for the unaligned starts */

static const size_t long_lengths[] = {
    4095, 4096, 4097, 65535, 65536, 65537, 100003, (size_t)1 << 20,
};
static const size_t misalign[] = {0, 1, 3, 7, 8, 13};

struct fixture {
    unsigned char *buf; /* MAX_LEN + SLACK random bytes */
    uint64_t rng;
};

static uint64_t next_rand(uint64_t *x)
{
    *x ^= *x >> 12;
    *x ^= *x << 25;
    *x ^= *x >> 27;
    return *x * UINT64_C(0x2545F4914F6CDD1D);
}

/* Random bytes with no zero byte at all, so no length can hash zeros. */
static void fill_random(unsigned char *buf, size_t len, uint64_t *rng)
{
    size_t i;

    for (i = 0; i < len; i++) {
        unsigned char b = (unsigned char)(next_rand(rng) >> 56);

        buf[i] = b != 0 ? b : 0x5b;
    }
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));

    if (f == NULL)
        return -1;
    f->buf = malloc(MAX_LEN + SLACK);
    if (f->buf == NULL) {
        free(f);
        return -1;
    }
    f->rng = UINT64_C(0x9E3779B97F4A7C15);
    fill_random(f->buf, MAX_LEN + SLACK, &f->rng);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;

    free(f->buf);
    free(f);
    return 0;
}

/* Compares one input under one seed; prints the case before failing. */
static void check_one(const unsigned char *p, size_t len, uint64_t seed)
{
    uint64_t want = XXH3_64bits_withSeed(p, len, seed);
    uint64_t got = wst_xxh3_64(p, len, seed);

    if (got != want)
        print_error("len %zu seed 0x%016llx misalign %u: got 0x%016llx "
                    "want 0x%016llx\n",
                    len, (unsigned long long)seed,
                    (unsigned)((uintptr_t)p & 15u), (unsigned long long)got,
                    (unsigned long long)want);
    assert_int_equal(got, want);
}

/* Seeds that matter: zero (default secret), a random one, a chunk position
 * as the digest uses, and one with all high bits set (the derived secret's
 * subtraction wraps). */
static void check_seeds(struct fixture *f, const unsigned char *p, size_t len)
{
    check_one(p, len, 0);
    check_one(p, len, next_rand(&f->rng));
    check_one(p, len, (uint64_t)37 * WST_DIGEST_CHUNK);
    check_one(p, len, ~UINT64_C(0) - (next_rand(&f->rng) & 0xffff));
}

static void test_xxh3_every_short_length(void **state)
{
    struct fixture *f = *state;
    size_t len, m;

    for (len = 0; len <= MAX_SHORT; len++)
        for (m = 0; m < sizeof(misalign) / sizeof(misalign[0]); m++)
            check_seeds(f, f->buf + misalign[m], len);
}

static void test_xxh3_long_lengths(void **state)
{
    struct fixture *f = *state;
    size_t i, m;

    for (i = 0; i < sizeof(long_lengths) / sizeof(long_lengths[0]); i++)
        for (m = 0; m < sizeof(misalign) / sizeof(misalign[0]); m++)
            check_seeds(f, f->buf + misalign[m], long_lengths[i]);
}

/* Many random seeds on one input per length class boundary. */
static void test_xxh3_random_seeds(void **state)
{
    static const size_t lens[] = {0,   1,   3,   4,   8,    9,    16,  17,
                                  128, 129, 240, 241, 1024, 1025, 4097};
    struct fixture *f = *state;
    size_t i;
    int k;

    for (i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
        for (k = 0; k < 200; k++)
            check_one(f->buf + (k & 15), lens[i], next_rand(&f->rng));
}

/* The 32-bit-partial-product multiply against the native one. */
static void test_xxh3_mul128_portable(void **state)
{
    struct fixture *f = *state;
    uint64_t edge[] = {0, 1, 0xffffffffu, UINT64_C(0x100000000), ~UINT64_C(0)};
    size_t i, j;
    int k;

    for (i = 0; i < 5; i++)
        for (j = 0; j < 5; j++)
            assert_int_equal(wst_xxh3_mul128_fold64_portable(edge[i], edge[j]),
                             wst_xxh3_mul128_fold64(edge[i], edge[j]));
    for (k = 0; k < 100000; k++) {
        uint64_t a = next_rand(&f->rng), b = next_rand(&f->rng);

        assert_int_equal(wst_xxh3_mul128_fold64_portable(a, b),
                         wst_xxh3_mul128_fold64(a, b));
    }
}

/* The GPU's way of computing the digest (four lane pairs per chunk, shares
 * summed, chunk hashes summed) equals the CPU digest of several runs. */
static void test_xxh3_digest_by_lane_pairs(void **state)
{
    static const size_t runs[] = {1000, 3 * WST_DIGEST_CHUNK + 7, 0, 129,
                                  WST_DIGEST_CHUNK + 241};
    struct fixture *f = *state;
    struct wst_digest cpu, mine;
    const unsigned char *p = f->buf + 1;
    size_t r, off, n;

    wst_digest_init(&cpu);
    wst_digest_init(&mine);
    for (r = 0; r < sizeof(runs) / sizeof(runs[0]); r++) {
        wst_digest_update(&cpu, p, runs[r]);
        for (off = 0; off < runs[r]; off += n) {
            n = runs[r] - off;
            if (n > WST_DIGEST_CHUNK)
                n = WST_DIGEST_CHUNK;
            mine.sum += wst_xxh3_64(p + off, n, mine.pos + off);
        }
        mine.pos += runs[r];
        p += runs[r];
    }
    assert_int_equal(mine.pos, cpu.pos);
    assert_int_equal(wst_digest_final(&mine), wst_digest_final(&cpu));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_xxh3_every_short_length, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_xxh3_long_lengths, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_xxh3_random_seeds, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_xxh3_mul128_portable, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_xxh3_digest_by_lane_pairs, setup,
                                        teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
