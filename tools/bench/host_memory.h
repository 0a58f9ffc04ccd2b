/* host_memory.h - whether this machine can hold a refit of a given size.
 *
 * One sender and one agent on one host hold the model twice: the sender's
 * shards (malloc'd) and the agent's live memory (a POSIX shm object in
 * /dev/shm). At 8 GiB on a 24 GiB VM that fits; at 16 GiB it does not, and
 * the kernel's OOM killer would end the run halfway with little said.
 * Asking first turns that into a clear refusal.
 */
#ifndef WST_BENCH_HOST_MEMORY_H
#define WST_BENCH_HOST_MEMORY_H

#include <stddef.h>
#include <stdint.h>
#include <wstream/status.h>

/* WST_OK when twice 'size' plus a 1 GiB margin is within MemAvailable
 * (/proc/meminfo) and 'size' within /dev/shm's free space; otherwise
 * WST_ERR_NO_MEMORY with the figures in 'err'. When neither can be read,
 * WST_OK (the run will tell). */
wst_status_t wst_bench_host_memory_check(uint64_t size, char *err,
                                         size_t errlen);

#endif
