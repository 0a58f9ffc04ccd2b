/* digest.c - the version 1 integrity digest on the CPU (see digest.h).
 *
 * Each run is cut into WST_DIGEST_CHUNK-byte chunks from its own start; every
 * chunk is hashed with XXH3 seeded by its stream position and the hashes are
 * summed mod 2^64. The final digest hashes that sum (8 bytes, little-endian)
 * seeded with the total byte count. A run of length 0 has no chunks: it
 * changes nothing.
 */
#include "digest.h"

#include <xxhash.h>

/* Where libxxhash has it (cmake/deps.cmake), XXH3 dispatched at run time
 * to the widest vectors the CPU has: the same function, less CPU per byte
 * on a loaded host (NOTES.md, issue 17). The final 8-byte hash stays the
 * plain call. */
#ifdef WST_XXH_DISPATCH
#include <xxh_x86dispatch.h>
#define chunk_hash XXH3_64bits_withSeed_dispatch
#else
#define chunk_hash XXH3_64bits_withSeed
#endif

void wst_digest_init(struct wst_digest *d)
{
    d->sum = 0;
    d->pos = 0;
}

void wst_digest_update(struct wst_digest *d, const void *run, size_t len)
{
    const unsigned char *p = run;
    uint64_t sum = d->sum;
    uint64_t pos = d->pos;

    while (len > 0) {
        size_t n = len < WST_DIGEST_CHUNK ? len : WST_DIGEST_CHUNK;

        sum += chunk_hash(p, n, pos);
        p += n;
        pos += n;
        len -= n;
    }
    d->sum = sum;
    d->pos = pos;
}

uint64_t wst_digest_part(const void *run, size_t len, uint64_t pos)
{
    struct wst_digest d = {.sum = 0, .pos = pos};

    wst_digest_update(&d, run, len);
    return d.sum;
}

uint64_t wst_digest_from_sum(uint64_t sum, uint64_t total)
{
    unsigned char le[8];
    int i;

    for (i = 0; i < 8; i++)
        le[i] = (unsigned char)(sum >> (8 * i));
    return XXH3_64bits_withSeed(le, sizeof(le), total);
}

uint64_t wst_digest_final(const struct wst_digest *d)
{
    return wst_digest_from_sum(d->sum, d->pos);
}

uint64_t wst_digest_buffer(const void *buf, size_t len)
{
    struct wst_digest d;

    wst_digest_init(&d);
    wst_digest_update(&d, buf, len);
    return wst_digest_final(&d);
}
