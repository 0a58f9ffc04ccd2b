/* region_memory.h - whether this host has the memory a layout asks for,
 * checked at start, before anything is mapped or allocated.
 *
 * Regions in no allocation (a layout without "shm" or "cuda_ipc", or a
 * region without "allocation") are the agent's own, in host memory, and
 * it touches all of them: their sum must fit in MemAvailable
 * (/proc/meminfo). Mapping a shm allocation populates the object: the part
 * of its bytes not yet backed by pages, summed over the shm allocations
 * mapped so far, must fit in the free space of the file system that holds
 * them (/dev/shm, through fstatvfs). A layout asking for more is refused
 * with WST_ERR_NO_MEMORY and a message naming the region (or the
 * allocation and its shm object) and the numbers, rather than met by the
 * OOM killer or a SIGBUS during a refit. Both borrow their arguments.
 */
#ifndef WST_REGION_MEMORY_H
#define WST_REGION_MEMORY_H

#include <wstream/status.h>

#include <stddef.h>
#include <stdint.h>

#include "agent.h"
#include "layout_file.h"
#include "log.h"

/* Whether a->layout may have the agent allocate regions itself: memory
 * no engine maps, so a refit would commit where nothing serves it while
 * /readyz says ready. Refused (WST_ERR_CONFIG, naming the regions) unless
 * --private-memory; with it, said once at info. */
wst_status_t wst_region_memory_check_private(struct agent *a);

/* The regions a->layout has the agent allocate against MemAvailable. */
wst_status_t wst_region_memory_check_host(struct agent *a);

/* Allocation 'alloc' (a shm object, open as 'fd', holding 'n_regions'
 * regions) of the layout file 'layout_path' against the free space of its
 * file system. *missing_p carries the unbacked bytes of the shm
 * allocations checked before it (0 for the first) and gets this one's
 * added. */
wst_status_t
wst_region_memory_check_shm(const struct wst_logger *log,
                            const char *layout_path,
                            const struct wst_layout_allocation *alloc,
                            size_t n_regions, int fd, uint64_t *missing_p);

#endif
