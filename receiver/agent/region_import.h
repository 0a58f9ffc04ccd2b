/* region_import.h - wstream-agent's live regions: where the layout file
 * puts them, and how the receiver gets them.
 *
 * A layout names a POSIX shared-memory object ("shm": mapped and populated
 * at start), the engine's GPU allocation by its CUDA IPC handle ("cuda_ipc":
 * imported, the regions are device memory), or neither (the agent allocates
 * each region itself, zeroed). Then every region, want and expert layer of
 * the layout goes to the receiver. What is mapped, imported or allocated is
 * held in struct agent (shm_base, ipc_base, owned) until
 * wst_region_import_release; a call that fails leaves what it took there
 * too. Every call borrows a for its length.
 */
#ifndef WST_REGION_IMPORT_H
#define WST_REGION_IMPORT_H

#include <wstream/status.h>

#include "agent.h"

/* Maps a->layout.shm, all of its shm_bytes, into a->shm_base. */
wst_status_t wst_region_import_shm(struct agent *a);

/* Imports the engine's allocation named by a->layout.cuda_ipc into
 * a->ipc_base; WST_ERR_NO_DEVICE without a CUDA build or that GPU. */
wst_status_t wst_region_import_cuda_ipc(struct agent *a);

/* Adds a->layout's regions (in the shm mapping, in the imported allocation,
 * or allocated here into a->owned), wants and expert layers to
 * a->receiver. */
wst_status_t wst_region_import_add_layout(struct agent *a);

/* Frees the regions allocated here, unmaps the shm object, closes the CUDA
 * IPC mapping. Only after a->receiver is destroyed: its threads copy into
 * the regions until then. */
void wst_region_import_release(struct agent *a);

#endif
