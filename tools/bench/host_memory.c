/* host_memory.c - can this host hold a refit of a given size (see
 * host_memory.h). */
#include "host_memory.h"

#include <stdio.h>
#include <sys/statvfs.h>

#include "errbuf.h"
#include "meminfo.h"

#define GIB (1ull << 30)

wst_status_t wst_bench_host_memory_check(uint64_t size, char *err,
                                         size_t errlen)
{
    uint64_t avail = 0; /* unknown: not checked */
    char why[256];
    struct statvfs vfs;

    if (wst_mem_available(&avail, why, sizeof(why)) != WST_OK)
        avail = 0;
    if (avail != 0 && 2 * size + GIB > avail) {
        wst_errf(err, errlen,
                 "--size %.1f GiB: the sender and the agent hold it twice, "
                 "and %.1f GiB (plus 1 GiB to spare) is more than the %.1f "
                 "GiB available",
                 (double)size / GIB, 2.0 * size / GIB, (double)avail / GIB);
        return WST_ERR_NO_MEMORY;
    }
    if (statvfs("/dev/shm", &vfs) == 0 &&
        (uint64_t)vfs.f_bavail * vfs.f_frsize < size) {
        wst_errf(err, errlen,
                 "--size %.1f GiB: /dev/shm has only %.1f GiB free for the "
                 "agent's live memory",
                 (double)size / GIB, (double)vfs.f_bavail * vfs.f_frsize / GIB);
        return WST_ERR_NO_MEMORY;
    }
    return WST_OK;
}
