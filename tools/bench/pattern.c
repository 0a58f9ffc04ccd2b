/* pattern.c - the bench tools' source bytes (see pattern.h). */
#include "pattern.h"

#include <string.h>

void wst_bench_pattern_fill(unsigned char *p, size_t n, uint64_t seed)
{
    uint64_t x = seed | 1;

    for (size_t i = 0; i + 8 <= n; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(p + i, &x, 8);
    }
}
