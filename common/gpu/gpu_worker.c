/* gpu_worker.c - a GPU's context on a worker's threads (gpu_worker.h). */
#include "gpu_worker.h"

#include "gpu.h"

struct bind {
    const struct wst_logger *log;
    int device;
    wst_status_t status;
};

/* On one of the worker's threads. */
static void bind_thread(void *arg)
{
    struct bind *b = arg;

    if (b->status == WST_OK)
        b->status = wst_gpu_set_device(b->log, b->device);
}

wst_status_t wst_gpu_worker_bind(const struct wst_logger *log,
                                 wst_worker_t *worker, int device)
{
    struct bind b = {.log = log, .device = device, .status = WST_OK};

    if (!wst_worker_supports_cuda(worker) || device < 0)
        return WST_OK;
    wst_status_t st = wst_worker_call_each_thread(worker, bind_thread, &b);
    if (st == WST_OK)
        st = b.status;
    if (st != WST_OK)
        WST_ERROR(log, "cannot make GPU %d current on the UCX threads: %s",
                  device, wst_status_string(st));
    else
        WST_DEBUG(log, "GPU %d current on every UCX thread", device);
    return st;
}
