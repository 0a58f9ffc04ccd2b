/* pinned.h - page-locked host memory registered with UCX once: the
 * sender's bounce ring and the receiver's landing ring. Allocating 4 GiB
 * pinned costs seconds and registering it with RDMA hardware more, so
 * both happen at start-up, never per refit.
 */
#ifndef WST_PINNED_H
#define WST_PINNED_H

#include <stddef.h>
#include <ucp/api/ucp.h>
#include <wstream/status.h>

#include "log.h"
#include "worker.h"

struct wst_pinned {
    unsigned char *mem; /* owned, pinned (cudaHostAlloc) */
    size_t bytes;
    ucp_mem_h memh;       /* registration with 'worker' */
    wst_worker_t *worker; /* borrowed */
};

/* Allocates and registers 'bytes'. On failure nothing is left to free. */
wst_status_t wst_pinned_create(struct wst_pinned *p,
                               const struct wst_logger *log,
                               wst_worker_t *worker, size_t bytes);

/* Unregisters, while the worker lives; again is a no-op. */
void wst_pinned_unregister(struct wst_pinned *p);

/* Frees the memory, once nothing can read or write it; NULL mem is fine. */
void wst_pinned_free(struct wst_pinned *p);

#endif
