/* region_import.h - wstream-agent's live regions: where the layout file
 * puts them, and how the receiver gets them.
 *
 * A layout's allocations -- POSIX shm objects (mapped and populated at
 * start) and the engine's GPU allocations named by their CUDA IPC handles
 * (imported; their regions are device memory) -- are taken by
 * alloc_maps.h; a region lives at its offset in its allocation, or, in
 * none, is allocated by the agent itself, zeroed. Then every region, want
 * and expert layer of the layout goes to the receiver. What is mapped,
 * imported or allocated is held in struct agent (allocs, owned) until
 * wst_region_import_release; a call that fails leaves what it took there
 * too. Every call borrows a for its length.
 */
#ifndef WST_REGION_IMPORT_H
#define WST_REGION_IMPORT_H

#include <wstream/status.h>

#include "agent.h"

/* Maps every allocation of a->layout into a->allocs (all or none). */
wst_status_t wst_region_import_allocations(struct agent *a);

/* Adds a->layout's regions (in their allocation in a->allocs, or
 * allocated here into a->owned), wants and expert layers to a->receiver. */
wst_status_t wst_region_import_add_layout(struct agent *a);

/* Frees the regions allocated here, unmaps the shm objects, closes the
 * CUDA IPC mappings. Only after a->receiver is destroyed: its threads copy
 * into the regions until then. */
void wst_region_import_release(struct agent *a);

#endif
