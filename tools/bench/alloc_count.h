/* alloc_count.h - heap bytes in use and their high-water mark, for
 * wstream-plan-bench's planner memory figures.
 *
 * The program is linked with -Wl,--wrap for malloc, calloc, realloc and
 * free, so every allocation made by our own objects (the planner, the
 * codec, the bench) passes through alloc_count.c, which adds and takes
 * away malloc_usable_size(). Allocations inside shared libraries (libc's
 * own strdup, protobuf-c's unpacking) are not seen. The counters are the
 * process's one piece of global state: malloc has no context argument.
 */
#ifndef WST_BENCH_ALLOC_COUNT_H
#define WST_BENCH_ALLOC_COUNT_H

#include <stdint.h>

/* Bytes currently allocated through the wrapped calls. */
int64_t ac_in_use(void);

/* Starts a new high-water mark at the current use; ac_peak() then returns
 * the most bytes in use at any moment since. */
void ac_peak_reset(void);
int64_t ac_peak(void);

#endif
