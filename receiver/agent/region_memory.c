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

wst_status_t wst_region_memory_check_private(struct agent *a)
{
    const struct wst_layout *l = &a->layout;
    size_t n = 0, first = SIZE_MAX;

    for (size_t i = 0; i < l->n_regions; i++) {
        if (wst_layout_region_alloc(l, i) != SIZE_MAX)
            continue;
        if (n++ == 0)
            first = i;
    }
    if (n == 0)
        return WST_OK;
    if (a->set.private_memory) {
        WST_INFO(&a->log,
                 "layout %s: %zu region%s in agent-private memory "
                 "(--private-memory): no engine sees what a refit commits "
                 "there",
                 a->set.layout, n, n == 1 ? "" : "s");
        return WST_OK;
    }
    WST_ERROR(&a->log,
              "layout %s: %zu of %zu regions (the first '%s') are in no "
              "\"shm\", \"cuda_ipc\" or \"allocations\" entry: the agent "
              "would allocate them itself, where no engine sees what a refit "
              "commits; name the engine's memory in the layout, or give "
              "--private-memory (WST_PRIVATE_MEMORY=yes) to serve private "
              "memory on purpose",
              a->set.layout, n, l->n_regions, l->regions[first].name);
    return WST_ERR_CONFIG;
}

wst_status_t wst_region_memory_check_host(struct agent *a)
{
    const struct wst_layout *l = &a->layout;
    uint64_t avail, sum = 0;
    size_t n = 0;
    char why[256];
    wst_status_t st;

    for (size_t i = 0; i < l->n_regions; i++)
        n += wst_layout_region_alloc(l, i) == SIZE_MAX;
    if (n == 0)
        return WST_OK;
    st = wst_mem_available(&avail, why, sizeof(why));
    if (st != WST_OK) {
        WST_ERROR(&a->log, "%s", why);
        return st;
    }
    n = 0;
    for (size_t i = 0; i < l->n_regions; i++) {
        const struct wst_layout_region *r = &l->regions[i];
        if (wst_layout_region_alloc(l, i) != SIZE_MAX)
            continue;
        n++;
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
                  a->set.layout, r->name, r->bytes, sum, n, n > 1 ? "s" : "",
                  avail);
        return WST_ERR_NO_MEMORY;
    }
    return WST_OK;
}

wst_status_t
wst_region_memory_check_shm(const struct wst_logger *log,
                            const char *layout_path,
                            const struct wst_layout_allocation *alloc,
                            size_t n_regions, int fd, uint64_t *missing_p)
{
    struct statvfs vfs;
    struct stat sb;
    uint64_t backed, missing, avail;

    if (fstat(fd, &sb) != 0 || fstatvfs(fd, &vfs) != 0) {
        WST_ERROR(log, "layout %s: shared memory %s: cannot stat: %s",
                  layout_path, alloc->shm, strerror(errno));
        return WST_ERR_IO;
    }
    /* st_blocks counts 512-byte units whatever the block size. */
    backed = (uint64_t)sb.st_blocks * 512;
    missing = backed < alloc->bytes ? alloc->bytes - backed : 0;
    avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
    /* Both terms are below INT64_MAX (the parser's bound on bytes). */
    if (*missing_p + missing <= avail) {
        *missing_p += missing;
        return WST_OK;
    }
    if (alloc->name[0] == '\0')
        WST_ERROR(log,
                  "layout %s: shared memory %s: shm_bytes %" PRIu64 " (%zu "
                  "region%s) need %" PRIu64 " bytes more than the object "
                  "holds in pages, and its file system has %" PRIu64
                  " bytes free",
                  layout_path, alloc->shm, alloc->bytes, n_regions,
                  n_regions == 1 ? "" : "s", missing, avail);
    else
        WST_ERROR(log,
                  "layout %s: allocation \"%s\": shared memory %s: bytes "
                  "%" PRIu64 " (%zu region%s) need %" PRIu64 " bytes more "
                  "than the object holds in pages, %" PRIu64 " with the shm "
                  "allocations before it, and its file system has %" PRIu64
                  " bytes free",
                  layout_path, alloc->name, alloc->shm, alloc->bytes, n_regions,
                  n_regions == 1 ? "" : "s", missing, *missing_p + missing,
                  avail);
    return WST_ERR_NO_MEMORY;
}
