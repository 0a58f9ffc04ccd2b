/* digest.h - the integrity digest (DESIGN.md section 5), CPU implementation.
 *
 * Definition (version 1). The input is an ordered sequence of byte runs;
 * 'pos' counts bytes across the whole sequence from 0. Each run is cut into
 * chunks of WST_DIGEST_CHUNK bytes from the run's own start (the last chunk
 * of a run may be short). A chunk starting at stream position p with bytes
 * b[0..n) hashes to  h = XXH3_64bits_withSeed(b, n, p).  The digest of the
 * sequence is
 *     D = XXH3_64bits_withSeed(&S, 8, T)
 * where S = sum of all chunk hashes mod 2^64 (stored little-endian) and T
 * the total byte count. Chunks are independent, so a GPU computes them in
 * parallel and reduces with a sum; the CUDA twin lives in kernels/.
 */
#ifndef WST_DIGEST_H
#define WST_DIGEST_H

#include <stddef.h>
#include <stdint.h>

#define WST_DIGEST_CHUNK (64u * 1024u)

/* Incremental state: feed runs in order with wst_digest_update. */
struct wst_digest {
    uint64_t sum;
    uint64_t pos;
};

void wst_digest_init(struct wst_digest *d);

/* Adds one run of 'len' bytes (a run boundary also restarts chunking). */
void wst_digest_update(struct wst_digest *d, const void *run, size_t len);

uint64_t wst_digest_final(const struct wst_digest *d);

/* Piecewise, in any order (the receiver hashes data as it lands): the sum
 * of the chunk hashes of a run of 'len' bytes that starts at stream
 * position 'pos'. The same bytes cut at a WST_DIGEST_CHUNK multiple from
 * the run's start give parts that add up to the whole run's part. */
uint64_t wst_digest_part(const void *run, size_t len, uint64_t pos);

/* D of the definition from S (every part added) and T (total bytes). */
uint64_t wst_digest_from_sum(uint64_t sum, uint64_t total);

/* The digest of one run. */
uint64_t wst_digest_buffer(const void *buf, size_t len);

#endif
