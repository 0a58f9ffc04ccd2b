/* pinned.c - registered pinned host memory (see pinned.h). */
#include "pinned.h"

#include "gpu.h"

wst_status_t wst_pinned_create(struct wst_pinned *p,
                               const struct wst_logger *log,
                               wst_worker_t *worker, size_t bytes)
{
    wst_status_t st;

    p->mem = NULL;
    p->bytes = bytes;
    p->memh = NULL;
    p->worker = worker;
    st = wst_gpu_host_alloc(log, bytes, (void **)&p->mem);
    if (st != WST_OK)
        return st;
    st = wst_worker_mem_map(worker, p->mem, bytes, &p->memh);
    if (st != WST_OK) {
        wst_gpu_host_free(p->mem);
        p->mem = NULL;
        p->memh = NULL;
    }
    return st;
}

void wst_pinned_unregister(struct wst_pinned *p)
{
    if (p->memh != NULL)
        wst_worker_mem_unmap(p->worker, p->memh);
    p->memh = NULL;
}

void wst_pinned_free(struct wst_pinned *p)
{
    wst_gpu_host_free(p->mem);
    p->mem = NULL;
}
