/* region_memory.h - whether this host has the memory a layout asks for,
 * checked at start, before anything is mapped or allocated.
 *
 * Without "shm" or "cuda_ipc" the agent allocates every region itself, in
 * host memory, and touches all of it: their sum must fit in MemAvailable
 * (/proc/meminfo). With "shm", mapping populates the object: the part of
 * its shm_bytes not yet backed by pages must fit in the free space of the
 * file system that holds it (/dev/shm, through fstatvfs). A layout asking
 * for more is refused with WST_ERR_NO_MEMORY and a message naming the
 * region (or shm object) and the numbers, rather than met by the OOM
 * killer or a SIGBUS during a refit. Both borrow their arguments.
 */
#ifndef WST_REGION_MEMORY_H
#define WST_REGION_MEMORY_H

#include <wstream/status.h>

#include "agent.h"

/* The regions a->layout has the agent allocate (none with shm or
 * cuda_ipc) against MemAvailable. */
wst_status_t wst_region_memory_check_host(struct agent *a);

/* a->layout.shm's shm_bytes against the object 'fd' (open) and the free
 * space of its file system. */
wst_status_t wst_region_memory_check_shm(struct agent *a, int fd);

#endif
