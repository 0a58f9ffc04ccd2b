/* alloc_maps.h - the layout's allocations, mapped into wstream-agent: each
 * shm object mmap'd (populated), each CUDA IPC handle opened once.
 *
 * The list is wst_layout_alloc_get's: the entries of "allocations", or the
 * one top-level "shm" or "cuda_ipc". Taking them is all or nothing: first
 * everything that can be checked without mapping is (the GPU is there;
 * each shm object exists, holds its bytes, and populating them all fits
 * in /dev/shm), then each is mapped or imported in order. An allocation
 * that cannot be taken is named in the log, with the layout file and why,
 * and what was taken before it is given back, so an agent that fails at
 * start holds none of the engine's memory.
 */
#ifndef WST_ALLOC_MAPS_H
#define WST_ALLOC_MAPS_H

#include <stddef.h>
#include <stdint.h>

#include <wstream/status.h>

#include "layout_file.h"
#include "log.h"

/* One allocation, mapped here. */
struct wst_alloc_map {
    void *base;     /* its first byte in this process */
    uint64_t bytes; /* the layout's size of it */
    int cuda;       /* device memory, opened by CUDA IPC (else a shm mmap) */
};

struct wst_alloc_maps {
    size_t n;
    struct wst_alloc_map *maps; /* owned: [n], in the layout's order */
};

/* Maps every allocation of 'l' into *out. Device entries first need their
 * GPU visible here (once), and each one's last byte must be device memory
 * on it: an entry larger than the engine's allocation is refused here,
 * not found during a refit. 'l', 'layout_path' (for messages) and 'log'
 * are borrowed for the call. On failure *out is untouched and nothing
 * stays mapped: WST_ERR_IO (an object that cannot be opened or mapped),
 * WST_ERR_INVALID (an object smaller than its bytes, a device entry past
 * the engine's allocation), WST_ERR_NO_MEMORY (no room to populate an
 * object, or no memory for the list), WST_ERR_NO_DEVICE (no CUDA build,
 * or no such GPU), or the CUDA import's status. */
wst_status_t wst_alloc_maps_import(const struct wst_layout *l,
                                   const char *layout_path,
                                   const struct wst_logger *log,
                                   struct wst_alloc_maps *out);

/* Unmaps every shm allocation, closes every CUDA IPC mapping, frees the
 * list and zeroes *m. Only once nothing copies into them any more (after
 * wst_receiver_destroy). A zeroed struct is fine. */
void wst_alloc_maps_release(struct wst_alloc_maps *m);

#endif
