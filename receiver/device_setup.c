/* device_setup.c - the receiver's memory as the movers see it: the GPU
 * side set up at start when regions are device memory (digests and repacks,
 * device.h; the landing ring data for them lands in, common/movers/
 * landing.h), the regions for the movers' receiving halves, and a line per
 * refit on how landing went. */
#include <stdio.h>
#include <stdlib.h>

#include "device.h"
#include "gpu.h"
#include "gpu_probe.h"
#include "gpu_worker.h"
#include "landing.h"
#include "log.h"
#include "receiver_internal.h"
#include "worker.h"

/* One line per refit on the way device bytes came in: the copies' delay
 * is what a busy GPU or a slow host-to-device link shows in. */
void wst_recv_log_landing(struct wst_receiver *r, uint64_t version)
{
    struct wst_landing_stats ls;

    if (r->landing == NULL)
        return;
    wst_landing_take_stats(r->landing, &ls);
    if (ls.copies == 0)
        return;
    WST_INFO(&r->log,
             "version %llu: %llu messages (%.1f MiB) landed and copied to GPU "
             "%d, %.3f ms mean and %.3f ms max from copy to on the GPU; %llu "
             "waited for room to land",
             (unsigned long long)version, (unsigned long long)ls.copies,
             (double)ls.bytes / (1 << 20), r->device,
             (double)ls.latency_sum_ns / (double)ls.copies / 1e6,
             (double)ls.latency_max_ns / 1e6, (unsigned long long)ls.parked);
}

/* The GPU side, when any region is device memory: the landing ring and
 * its copies (for every message when this UCX cannot write device memory,
 * for eager ones when it can), device digests. */
wst_status_t wst_recv_prepare_device(struct wst_receiver *r)
{
    char name[128] = "";
    uint64_t host = 0, device = 0;

    for (size_t i = 0; i < r->n_regions; i++) {
        if (r->regions[i].mem == WST_MEM_CUDA)
            device += r->regions[i].length;
        else
            host += r->regions[i].length;
    }
    if (r->device < 0) {
        char gpus[64] = "no GPU", why[160] = "";
        int n = 0;
        if (wst_kernels_device_count(&n, why, sizeof(why)) == WST_OK)
            snprintf(gpus, sizeof(gpus), "%d GPU(s) visible, none used", n);
        else if (!wst_kernels_built_with_cuda())
            snprintf(gpus, sizeof(gpus), "a build without CUDA");
        else /* a CPU-only host is no fault: CUDA's words for it are detail */
            WST_DEBUG(&r->log, "no GPU: %s", why);
        WST_INFO(&r->log, "regions: %.1f MiB of host memory (%s)",
                 (double)host / (1 << 20), gpus);
        return WST_OK;
    }
    wst_gpu_device_name(&r->log, r->device, name, sizeof(name));
    if (wst_worker_supports_cuda(r->worker))
        WST_INFO(&r->log,
                 "regions: %.1f MiB of device memory on GPU %d (%s), %.1f MiB "
                 "of host memory; UCX reports CUDA memory: rendezvous data "
                 "lands in device memory directly, moved by UCX, and eager "
                 "messages in a %llu MiB pinned host ring copied to the GPU",
                 (double)device / (1 << 20), r->device, name,
                 (double)host / (1 << 20),
                 (unsigned long long)(WST_LANDING_BYTES >> 20));
    else
        WST_INFO(&r->log,
                 "regions: %.1f MiB of device memory on GPU %d (%s), %.1f MiB "
                 "of host memory; UCX has no CUDA memory: data lands in a "
                 "%llu MiB pinned host ring and is copied to the GPU",
                 (double)device / (1 << 20), r->device, name,
                 (double)host / (1 << 20),
                 (unsigned long long)(WST_LANDING_BYTES >> 20));
    /* Puts would need remote keys for device memory, which no receiver
     * hands out yet (also with a CUDA-aware UCX): active messages. */
    r->allow_put = 0;
    wst_status_t st = wst_gpu_worker_bind(&r->log, r->worker, r->device);
    if (st == WST_OK)
        st = wst_recv_device_create(&r->log, r->device, &r->dev);
    if (st == WST_OK)
        st = wst_landing_create(&r->log, r->worker, r->device, &r->landing);
    return st;
}

/* Where the movers find each region, once every region is in (the
 * staging pool is the last). */
wst_status_t wst_recv_prepare_rx_regions(struct wst_receiver *r)
{
    r->rx_regions =
        calloc(r->n_regions ? r->n_regions : 1, sizeof(*r->rx_regions));
    if (r->rx_regions == NULL)
        return WST_ERR_NO_MEMORY;
    for (size_t i = 0; i < r->n_regions; i++)
        r->rx_regions[i] = (struct wst_rx_region){
            .base = r->regions[i].data,
            .length = r->regions[i].length,
            .mem = r->regions[i].mem,
        };
    return WST_OK;
}
