/* pattern.h - the bytes the bench's two-process tools stream: a
 * xorshift64 sequence from a seed, so that each process can make the
 * source on its own and the receiver can check what landed against it.
 */
#ifndef WST_BENCH_PATTERN_H
#define WST_BENCH_PATTERN_H

#include <stddef.h>
#include <stdint.h>

/* Writes n bytes of the sequence seeded by 'seed' to p (a tail of under 8
 * bytes is left as it is). */
void wst_bench_pattern_fill(unsigned char *p, size_t n, uint64_t seed);

#endif
