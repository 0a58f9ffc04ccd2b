/* xxh3.h - XXH3-64 with a seed, one implementation for C and CUDA devices.
 *
 * The integrity digest (common/digest.h) hashes every chunk with XXH3-64
 * seeded by its stream position. The CPU side calls libxxhash; the GPU side
 * needs the same function in device code, so this header implements it from
 * the XXH3 specification (xxHash doc/xxhash_spec.md) as static inline
 * functions that compile as C and as CUDA __host__ __device__ code. The unit
 * test checks it bit for bit against libxxhash.
 *
 * Inputs of more than 240 bytes keep 8 accumulator lanes over 64-byte
 * stripes. Lanes only interact in pairs (lane i adds its data word into lane
 * i^1), so the four pairs are independent until the final merge:
 *
 *     stripe:  | d0 d1 | d2 d3 | d4 d5 | d6 d7 |   8 little-endian words
 *     pair t:  |  t=0  |  t=1  |  t=2  |  t=3  |   16 bytes each
 *
 * wst_xxh3_long_pair() runs one pair over a whole input; the scalar hash
 * runs it for t = 0..3, a GPU runs the four pairs on four threads and sums
 * the merge terms with shuffles. Both share every arithmetic step.
 *
 * With a seed, long inputs use a secret derived from the default one: word
 * j (64-bit, little-endian) is kSecret[j] + seed for even j, - seed for odd
 * j. Secret reads are expressed as word reads (aligned offsets) or as two
 * adjacent words shifted (the unaligned offsets 3, 11, 119, 121, ...), so
 * the derived secret is never materialized: 'ks' is the 24 default words
 * wherever they live (host array, device shared memory).
 */
#ifndef WST_XXH3_H
#define WST_XXH3_H

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define WST_HD __host__ __device__
#define WST_XXH3_INLINE __forceinline__
#else
#define WST_HD
#define WST_XXH3_INLINE inline
#endif
/* Unrolling a block lets a GPU thread issue its 16 stripe loads at once. */
#ifdef __CUDA_ARCH__
#define WST_XXH3_UNROLL _Pragma("unroll")
#else
#define WST_XXH3_UNROLL
#endif

#define WST_XXH3_P32_1 UINT64_C(0x9E3779B1)
#define WST_XXH3_P32_2 UINT64_C(0x85EBCA77)
#define WST_XXH3_P32_3 UINT64_C(0xC2B2AE3D)
#define WST_XXH3_P64_1 UINT64_C(0x9E3779B185EBCA87)
#define WST_XXH3_P64_2 UINT64_C(0xC2B2AE3D27D4EB4F)
#define WST_XXH3_P64_3 UINT64_C(0x165667B19E3779F9)
#define WST_XXH3_P64_4 UINT64_C(0x85EBCA77C2B2AE63)
#define WST_XXH3_P64_5 UINT64_C(0x27D4EB2F165667C5)
#define WST_XXH3_PMX_1 UINT64_C(0x165667919E3779F9)
#define WST_XXH3_PMX_2 UINT64_C(0x9FB21C651E98DF25)

#define WST_XXH3_STRIPE 64u
#define WST_XXH3_STRIPES_PER_BLOCK 16u /* (192 - 64) / 8 */
#define WST_XXH3_BLOCK (WST_XXH3_STRIPE * WST_XXH3_STRIPES_PER_BLOCK)
#define WST_XXH3_MIDSIZE_MAX 240u
#define WST_XXH3_SECRET_WORDS 24u

/* The 192-byte default secret of the specification, as 24 little-endian
 * 64-bit words. An initializer so device code can put it where it likes. */
#define WST_XXH3_KSECRET_INIT                                                  \
    {                                                                          \
        UINT64_C(0xbe4ba423396cfeb8), UINT64_C(0x1cad21f72c81017c),            \
            UINT64_C(0xdb979083e96dd4de), UINT64_C(0x1f67b3b7a4a44072),        \
            UINT64_C(0x78e5c0cc4ee679cb), UINT64_C(0x2172ffcc7dd05a82),        \
            UINT64_C(0x8e2443f7744608b8), UINT64_C(0x4c263a81e69035e0),        \
            UINT64_C(0xcb00c391bb52283c), UINT64_C(0xa32e531b8b65d088),        \
            UINT64_C(0x4ef90da297486471), UINT64_C(0xd8acdea946ef1938),        \
            UINT64_C(0x3f349ce33f76faa8), UINT64_C(0x1d4f0bc7c7bbdcf9),        \
            UINT64_C(0x3159b4cd4be0518a), UINT64_C(0x647378d9c97e9fc8),        \
            UINT64_C(0xc3ebd33483acc5ea), UINT64_C(0xeb6313faffa081c5),        \
            UINT64_C(0x49daf0b751dd0d17), UINT64_C(0x9e68d429265516d3),        \
            UINT64_C(0xfca1477d58be162b), UINT64_C(0xce31d07ad1b8f88f),        \
            UINT64_C(0x280416958f3acb45), UINT64_C(0x7e404bbbcafbd7af),        \
    }

/* Host copy; device code passes its own (constant or shared memory). */
static const uint64_t wst_xxh3_ksecret[WST_XXH3_SECRET_WORDS] =
    WST_XXH3_KSECRET_INIT;

/* ---- input reads: little-endian, any alignment ------------------------ */

/* Byte assembly: endian-independent and alignment-safe; compilers turn it
 * into one load on little-endian hosts. */
WST_HD static WST_XXH3_INLINE uint32_t wst_xxh3_read32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

WST_HD static WST_XXH3_INLINE uint64_t wst_xxh3_read64(const unsigned char *p)
{
    return (uint64_t)wst_xxh3_read32(p) | (uint64_t)wst_xxh3_read32(p + 4)
                                              << 32;
}

#ifdef __CUDA_ARCH__
/* 16 bytes at any address from the aligned 8-byte words that hold them:
 * never touches a byte outside those words, so never crosses a page or an
 * allocation the wanted bytes are not in. */
__device__ static __forceinline__ void
wst_xxh3_load16_words(const unsigned char *p, uint64_t *lo, uint64_t *hi)
{
    unsigned r = (unsigned)((uintptr_t)p & 7u);
    const unsigned long long *w = (const unsigned long long *)(p - r);
    uint64_t w0 = __ldg(w);
    uint64_t w1 = __ldg(w + 1);
    uint64_t w2;

    if (r == 0) {
        *lo = w0;
        *hi = w1;
        return;
    }
    w2 = __ldg(w + 2);
    *lo = (w0 >> (8 * r)) | (w1 << (64 - 8 * r));
    *hi = (w1 >> (8 * r)) | (w2 << (64 - 8 * r));
}
#endif

/* Two little-endian words at p. 'vec' promises p is 16-byte aligned, which
 * lets a GPU use one 16-byte load; the host ignores it. */
WST_HD static WST_XXH3_INLINE void
wst_xxh3_load16(const unsigned char *p, int vec, uint64_t *lo, uint64_t *hi)
{
#ifdef __CUDA_ARCH__
    if (vec) {
        ulonglong2 v = __ldg((const ulonglong2 *)p);
        *lo = v.x;
        *hi = v.y;
        return;
    }
    wst_xxh3_load16_words(p, lo, hi);
#else
    (void)vec;
    *lo = wst_xxh3_read64(p);
    *hi = wst_xxh3_read64(p + 8);
#endif
}

/* ---- arithmetic ------------------------------------------------------- */

WST_HD static WST_XXH3_INLINE uint32_t wst_xxh3_bswap32(uint32_t x)
{
    return (x >> 24) | ((x >> 8) & 0xff00u) | ((x << 8) & 0xff0000u) |
           (x << 24);
}

WST_HD static WST_XXH3_INLINE uint64_t wst_xxh3_bswap64(uint64_t x)
{
    return (uint64_t)wst_xxh3_bswap32((uint32_t)x) << 32 |
           wst_xxh3_bswap32((uint32_t)(x >> 32));
}

WST_HD static WST_XXH3_INLINE uint64_t wst_xxh3_rotl64(uint64_t x, unsigned r)
{
    return (x << r) | (x >> (64 - r));
}

/* The 128-bit product of a and b, low half xor high half, from 32-bit
 * partial products; the fallback for compilers without a 128-bit type, and
 * kept callable so the test can check it against the fast one. */
WST_HD static WST_XXH3_INLINE uint64_t
wst_xxh3_mul128_fold64_portable(uint64_t a, uint64_t b)
{
    uint64_t lo_lo = (a & 0xffffffffu) * (b & 0xffffffffu);
    uint64_t hi_lo = (a >> 32) * (b & 0xffffffffu);
    uint64_t lo_hi = (a & 0xffffffffu) * (b >> 32);
    uint64_t hi_hi = (a >> 32) * (b >> 32);
    uint64_t cross = (lo_lo >> 32) + (hi_lo & 0xffffffffu) + lo_hi;
    uint64_t hi = hi_hi + (hi_lo >> 32) + (cross >> 32);
    uint64_t lo = (cross << 32) | (lo_lo & 0xffffffffu);

    return lo ^ hi;
}

WST_HD static WST_XXH3_INLINE uint64_t wst_xxh3_mul128_fold64(uint64_t a,
                                                              uint64_t b)
{
#if defined(__CUDA_ARCH__)
    return (a * b) ^ __umul64hi(a, b);
#elif defined(__SIZEOF_INT128__)
    __extension__ unsigned __int128 m = (unsigned __int128)a * b;

    return (uint64_t)m ^ (uint64_t)(m >> 64);
#else
    return wst_xxh3_mul128_fold64_portable(a, b);
#endif
}

/* Low 32 bits times high 32 bits: the per-lane multiply of a stripe. */
WST_HD static WST_XXH3_INLINE uint64_t wst_xxh3_mul32x32(uint64_t x)
{
    return (uint64_t)(uint32_t)x * (x >> 32);
}

WST_HD static WST_XXH3_INLINE uint64_t wst_xxh3_avalanche(uint64_t h)
{
    h ^= h >> 37;
    h *= WST_XXH3_PMX_1;
    return h ^ (h >> 32);
}

/* XXH64's avalanche, which XXH3 uses for inputs of 0 to 3 bytes. */
WST_HD static WST_XXH3_INLINE uint64_t wst_xxh3_avalanche_xxh64(uint64_t h)
{
    h ^= h >> 33;
    h *= WST_XXH3_P64_2;
    h ^= h >> 29;
    h *= WST_XXH3_P64_3;
    return h ^ (h >> 32);
}

/* ---- the secret ------------------------------------------------------- */

/* Word j of the secret derived from 'seed' (seed 0: the default secret). */
WST_HD static WST_XXH3_INLINE uint64_t wst_xxh3_secret_word(const uint64_t *ks,
                                                            uint64_t seed,
                                                            unsigned j)
{
    return (j & 1u) ? ks[j] - seed : ks[j] + seed;
}

/* The 8 secret bytes at byte offset 'off' (off + 8 <= 192) as a
 * little-endian word: one word when aligned, else two adjacent words. */
WST_HD static WST_XXH3_INLINE uint64_t wst_xxh3_secret_at(const uint64_t *ks,
                                                          uint64_t seed,
                                                          unsigned off)
{
    unsigned j = off >> 3, r = off & 7u;
    uint64_t w0 = wst_xxh3_secret_word(ks, seed, j);

    if (r == 0)
        return w0;
    return (w0 >> (8 * r)) |
           (wst_xxh3_secret_word(ks, seed, j + 1) << (64 - 8 * r));
}

/* ---- inputs of 0 to 240 bytes (default secret, seed folded in) -------- */

WST_HD static WST_XXH3_INLINE uint64_t wst_xxh3_len_0(const uint64_t *ks,
                                                      uint64_t seed)
{
    uint64_t k = wst_xxh3_secret_at(ks, 0, 56) ^ wst_xxh3_secret_at(ks, 0, 64);

    return wst_xxh3_avalanche_xxh64(seed ^ k);
}

WST_HD static WST_XXH3_INLINE uint64_t wst_xxh3_len_1to3(const unsigned char *p,
                                                         size_t len,
                                                         const uint64_t *ks,
                                                         uint64_t seed)
{
    uint32_t combined = (uint32_t)p[len - 1] | (uint32_t)len << 8 |
                        (uint32_t)p[0] << 16 | (uint32_t)p[len >> 1] << 24;
    uint64_t s = wst_xxh3_secret_at(ks, 0, 0);
    uint64_t flip = (uint64_t)((uint32_t)s ^ (uint32_t)(s >> 32)) + seed;

    return wst_xxh3_avalanche_xxh64((uint64_t)combined ^ flip);
}

WST_HD static WST_XXH3_INLINE uint64_t wst_xxh3_len_4to8(const unsigned char *p,
                                                         size_t len,
                                                         const uint64_t *ks,
                                                         uint64_t seed)
{
    uint64_t first = wst_xxh3_read32(p);
    uint64_t last = wst_xxh3_read32(p + len - 4);
    uint64_t mseed = seed ^ (uint64_t)wst_xxh3_bswap32((uint32_t)seed) << 32;
    uint64_t flip =
        (wst_xxh3_secret_at(ks, 0, 8) ^ wst_xxh3_secret_at(ks, 0, 16)) - mseed;
    uint64_t v = (last | first << 32) ^ flip;

    v ^= wst_xxh3_rotl64(v, 49) ^ wst_xxh3_rotl64(v, 24);
    v *= WST_XXH3_PMX_2;
    v ^= (v >> 35) + len;
    v *= WST_XXH3_PMX_2;
    return v ^ (v >> 28);
}

WST_HD static WST_XXH3_INLINE uint64_t wst_xxh3_len_9to16(
    const unsigned char *p, size_t len, const uint64_t *ks, uint64_t seed)
{
    uint64_t flip_lo =
        (wst_xxh3_secret_at(ks, 0, 24) ^ wst_xxh3_secret_at(ks, 0, 32)) + seed;
    uint64_t flip_hi =
        (wst_xxh3_secret_at(ks, 0, 40) ^ wst_xxh3_secret_at(ks, 0, 48)) - seed;
    uint64_t lo = wst_xxh3_read64(p) ^ flip_lo;
    uint64_t hi = wst_xxh3_read64(p + len - 8) ^ flip_hi;

    return wst_xxh3_avalanche(len + wst_xxh3_bswap64(lo) + hi +
                              wst_xxh3_mul128_fold64(lo, hi));
}

/* 16 input bytes against 16 secret bytes at 'off', seed folded in. */
WST_HD static WST_XXH3_INLINE uint64_t wst_xxh3_mix16(const unsigned char *p,
                                                      const uint64_t *ks,
                                                      unsigned off,
                                                      uint64_t seed)
{
    uint64_t s0 = wst_xxh3_secret_at(ks, 0, off) + seed;
    uint64_t s1 = wst_xxh3_secret_at(ks, 0, off + 8) - seed;

    return wst_xxh3_mul128_fold64(wst_xxh3_read64(p) ^ s0,
                                  wst_xxh3_read64(p + 8) ^ s1);
}

/* 17 to 128 bytes: pairs of 16-byte pieces from both ends. */
WST_HD static WST_XXH3_INLINE uint64_t wst_xxh3_len_17to128(
    const unsigned char *p, size_t len, const uint64_t *ks, uint64_t seed)
{
    uint64_t acc = len * WST_XXH3_P64_1;
    unsigned rounds = (unsigned)((len - 1) >> 5) + 1;
    unsigned i;

    for (i = 0; i < rounds; i++) {
        acc += wst_xxh3_mix16(p + 16 * i, ks, 32 * i, seed);
        acc += wst_xxh3_mix16(p + len - 16 * i - 16, ks, 32 * i + 16, seed);
    }
    return wst_xxh3_avalanche(acc);
}

/* 129 to 240 bytes: the first 128 bytes, an avalanche, the other whole
 * 16-byte pieces against the secret from offset 3, the last 16 bytes. */
WST_HD static WST_XXH3_INLINE uint64_t wst_xxh3_len_129to240(
    const unsigned char *p, size_t len, const uint64_t *ks, uint64_t seed)
{
    uint64_t acc = len * WST_XXH3_P64_1;
    unsigned pieces = (unsigned)(len >> 4);
    unsigned i;

    for (i = 0; i < 8; i++)
        acc += wst_xxh3_mix16(p + 16 * i, ks, 16 * i, seed);
    acc = wst_xxh3_avalanche(acc);
    for (i = 8; i < pieces; i++)
        acc += wst_xxh3_mix16(p + 16 * i, ks, 16 * (i - 8) + 3, seed);
    acc += wst_xxh3_mix16(p + len - 16, ks, 119, seed);
    return wst_xxh3_avalanche(acc);
}

/* XXH3-64 of len <= 240 bytes. */
WST_HD static WST_XXH3_INLINE uint64_t wst_xxh3_64_short(const unsigned char *p,
                                                         size_t len,
                                                         const uint64_t *ks,
                                                         uint64_t seed)
{
    if (len > 128)
        return wst_xxh3_len_129to240(p, len, ks, seed);
    if (len > 16)
        return wst_xxh3_len_17to128(p, len, ks, seed);
    if (len > 8)
        return wst_xxh3_len_9to16(p, len, ks, seed);
    if (len >= 4)
        return wst_xxh3_len_4to8(p, len, ks, seed);
    if (len > 0)
        return wst_xxh3_len_1to3(p, len, ks, seed);
    return wst_xxh3_len_0(ks, seed);
}

/* ---- inputs of more than 240 bytes: one lane pair at a time ----------- */

/* Initial values of lanes 2t and 2t+1. */
WST_HD static WST_XXH3_INLINE void wst_xxh3_init_pair(unsigned t, uint64_t *a0,
                                                      uint64_t *a1)
{
    switch (t) {
    case 0:
        *a0 = WST_XXH3_P32_3;
        *a1 = WST_XXH3_P64_1;
        break;
    case 1:
        *a0 = WST_XXH3_P64_2;
        *a1 = WST_XXH3_P64_3;
        break;
    case 2:
        *a0 = WST_XXH3_P64_4;
        *a1 = WST_XXH3_P32_2;
        break;
    default:
        *a0 = WST_XXH3_P64_5;
        *a1 = WST_XXH3_P32_1;
        break;
    }
}

/* One stripe's step for a lane pair: data words d0, d1 and secret words
 * s0, s1. Each lane multiplies its keyed word's halves and takes its
 * neighbour's raw data word. */
WST_HD static WST_XXH3_INLINE void
wst_xxh3_accumulate_pair(uint64_t *a0, uint64_t *a1, uint64_t d0, uint64_t d1,
                         uint64_t s0, uint64_t s1)
{
    *a0 += d1 + wst_xxh3_mul32x32(d0 ^ s0);
    *a1 += d0 + wst_xxh3_mul32x32(d1 ^ s1);
}

/* The end-of-block scramble of one lane with its secret word. */
WST_HD static WST_XXH3_INLINE uint64_t wst_xxh3_scramble(uint64_t acc,
                                                         uint64_t s)
{
    acc ^= acc >> 47;
    acc ^= s;
    return acc * WST_XXH3_P32_1;
}

/* Stripe n of a block, lane pair t: bytes 16t..16t+16 of the stripe against
 * secret words n+2t and n+2t+1. */
WST_HD static WST_XXH3_INLINE void
wst_xxh3_stripe_pair(const unsigned char *stripe, int vec, unsigned t,
                     unsigned n, const uint64_t *ks, uint64_t seed,
                     uint64_t *a0, uint64_t *a1)
{
    uint64_t d0, d1;

    wst_xxh3_load16(stripe + 16 * t, vec, &d0, &d1);
    wst_xxh3_accumulate_pair(a0, a1, d0, d1,
                             wst_xxh3_secret_word(ks, seed, n + 2 * t),
                             wst_xxh3_secret_word(ks, seed, n + 2 * t + 1));
}

/* A full 1024-byte block for lane pair t: 16 stripes, then the scramble
 * with secret words 16+2t and 17+2t (the secret's last 64 bytes). */
WST_HD static WST_XXH3_INLINE void
wst_xxh3_block_pair(const unsigned char *blk, int vec, unsigned t,
                    const uint64_t *ks, uint64_t seed, uint64_t *a0,
                    uint64_t *a1)
{
    unsigned n;

    WST_XXH3_UNROLL
    for (n = 0; n < WST_XXH3_STRIPES_PER_BLOCK; n++)
        wst_xxh3_stripe_pair(blk + WST_XXH3_STRIPE * n, vec, t, n, ks, seed, a0,
                             a1);
    *a0 = wst_xxh3_scramble(*a0, wst_xxh3_secret_word(ks, seed, 16 + 2 * t));
    *a1 = wst_xxh3_scramble(*a1, wst_xxh3_secret_word(ks, seed, 17 + 2 * t));
}

/* Lane pair t over all of p[0..len), len > 240. 'vec': p is 16-byte
 * aligned (GPU vector loads). Full blocks except the last (even when it is
 * full) are scrambled; the last block's whole stripes but its final one are
 * accumulated; then the input's last 64 bytes against the secret at byte
 * 121 (192 - 64 - 7). */
WST_HD static WST_XXH3_INLINE void
wst_xxh3_long_pair(const unsigned char *p, size_t len, int vec, unsigned t,
                   const uint64_t *ks, uint64_t seed, uint64_t *a0_p,
                   uint64_t *a1_p)
{
    size_t blocks = (len - 1) / WST_XXH3_BLOCK;
    size_t tail = (len - 1) - blocks * WST_XXH3_BLOCK;
    const unsigned char *last = p + blocks * WST_XXH3_BLOCK;
    uint64_t a0, a1, d0, d1;
    size_t b;
    unsigned n;

    wst_xxh3_init_pair(t, &a0, &a1);
    for (b = 0; b < blocks; b++)
        wst_xxh3_block_pair(p + b * WST_XXH3_BLOCK, vec, t, ks, seed, &a0, &a1);
    for (n = 0; n < tail / WST_XXH3_STRIPE; n++)
        wst_xxh3_stripe_pair(last + WST_XXH3_STRIPE * n, vec, t, n, ks, seed,
                             &a0, &a1);
    wst_xxh3_load16(p + len - WST_XXH3_STRIPE + 16 * t, vec && (len & 15u) == 0,
                    &d0, &d1);
    wst_xxh3_accumulate_pair(&a0, &a1, d0, d1,
                             wst_xxh3_secret_at(ks, seed, 121 + 16 * t),
                             wst_xxh3_secret_at(ks, seed, 129 + 16 * t));
    *a0_p = a0;
    *a1_p = a1;
}

/* Pair t's share of the final merge (secret from byte 11). The hash is
 * wst_xxh3_merge_final of the four shares' sum. */
WST_HD static WST_XXH3_INLINE uint64_t wst_xxh3_merge_pair(
    uint64_t a0, uint64_t a1, unsigned t, const uint64_t *ks, uint64_t seed)
{
    return wst_xxh3_mul128_fold64(
        a0 ^ wst_xxh3_secret_at(ks, seed, 11 + 16 * t),
        a1 ^ wst_xxh3_secret_at(ks, seed, 19 + 16 * t));
}

WST_HD static WST_XXH3_INLINE uint64_t wst_xxh3_merge_final(uint64_t shares,
                                                            size_t len)
{
    return wst_xxh3_avalanche(len * WST_XXH3_P64_1 + shares);
}

/* ---- the whole hash --------------------------------------------------- */

/* XXH3_64bits_withSeed(data, len, seed) with the default secret words
 * 'ks' (host: wst_xxh3_ksecret). Scalar: the four lane pairs in turn. */
WST_HD static WST_XXH3_INLINE uint64_t wst_xxh3_64_ks(const void *data,
                                                      size_t len,
                                                      const uint64_t *ks,
                                                      uint64_t seed)
{
    const unsigned char *p = (const unsigned char *)data;
    uint64_t shares = 0, a0, a1;
    unsigned t;

    if (len <= WST_XXH3_MIDSIZE_MAX)
        return wst_xxh3_64_short(p, len, ks, seed);
    for (t = 0; t < 4; t++) {
        wst_xxh3_long_pair(p, len, 0, t, ks, seed, &a0, &a1);
        shares += wst_xxh3_merge_pair(a0, a1, t, ks, seed);
    }
    return wst_xxh3_merge_final(shares, len);
}

/* Host convenience: XXH3_64bits_withSeed. */
static inline uint64_t wst_xxh3_64(const void *data, size_t len, uint64_t seed)
{
    return wst_xxh3_64_ks(data, len, wst_xxh3_ksecret, seed);
}

#endif
