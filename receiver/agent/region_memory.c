/* region_memory.c - whether this host has the memory a layout asks for
 * (region_memory.h). */
#include "region_memory.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "layout_file.h"
#include "log.h"
#include "meminfo.h"

wst_status_t wst_region_memory_check_host(struct agent *a)
{
    const struct wst_layout *l = &a->layout;
    uint64_t avail, sum = 0;
    char why[256];
    wst_status_t st;

    if (l->shm[0] != '\0' || l->has_cuda_ipc || l->n_regions == 0)
        return WST_OK;
    st = wst_mem_available(&avail, why, sizeof(why));
    if (st != WST_OK) {
        WST_ERROR(&a->log, "%s", why);
        return st;
    }
    for (size_t i = 0; i < l->n_regions; i++) {
        const struct wst_layout_region *r = &l->regions[i];
        /* Each is < INT64_MAX (the parser's bound): the sum cannot wrap
         * before it passes avail, which is far below that. */
        sum += r->bytes;
        if (sum <= avail)
            continue;
        WST_ERROR(&a->log,
                  "layout %s: region '%s' (%" PRIu64 " bytes) brings the "
                  "memory the agent allocates to %" PRIu64 " bytes over "
                  "%zu region%s; this host has %" PRIu64 " bytes available "
                  "(MemAvailable in /proc/meminfo)",
                  a->set.layout, r->name, r->bytes, sum, i + 1, i ? "s" : "",
                  avail);
        return WST_ERR_NO_MEMORY;
    }
    return WST_OK;
}

wst_status_t wst_region_memory_check_shm(struct agent *a, int fd)
{
    const struct wst_layout *l = &a->layout;
    struct statvfs vfs;
    struct stat sb;
    uint64_t backed, missing, avail;

    if (fstat(fd, &sb) != 0 || fstatvfs(fd, &vfs) != 0) {
        WST_ERROR(&a->log, "shared memory %s: cannot stat: %s", l->shm,
                  strerror(errno));
        return WST_ERR_IO;
    }
    /* st_blocks counts 512-byte units whatever the block size. */
    backed = (uint64_t)sb.st_blocks * 512;
    missing = backed < l->shm_bytes ? l->shm_bytes - backed : 0;
    avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
    if (missing <= avail)
        return WST_OK;
    WST_ERROR(&a->log,
              "layout %s: shared memory %s: shm_bytes %" PRIu64 " (%zu "
              "region%s) need %" PRIu64 " bytes more than the object "
              "holds in pages, and its file system has %" PRIu64 " bytes free",
              a->set.layout, l->shm, l->shm_bytes, l->n_regions,
              l->n_regions == 1 ? "" : "s", missing, avail);
    return WST_ERR_NO_MEMORY;
}
