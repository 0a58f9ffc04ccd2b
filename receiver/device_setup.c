/* device_setup.c - the receiver's memory as the movers see it: the GPU
 * side set up at start when regions are device memory (digests and repacks,
 * device.h; the landing ring data for them lands in, common/movers/
 * landing.h), the regions for the movers' receiving halves, and a line per
 * refit on how landing went. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "gpu.h"
#include "gpu_probe.h"
#include "gpu_worker.h"
#include "landing.h"
#include "log.h"
#include "receiver_internal.h"
#include "worker.h"

/* Where device bytes of one refit went, a line per way (am_rx.c's
 * classes): messages, MiB, mean time from placed to received, and the
 * rate over the span from the first placed to the last received; then
 * where a rendezvous message's time went (data_am.c's stages). What makes
 * one layer slower than another shows here. */
static void log_am_classes(struct wst_receiver *r, uint64_t version)
{
    struct wst_rx_timing t;

    for (int k = 0; k < WST_AM_DEST_CLASSES; k++) {
        const struct wst_am_class_stats *c = &r->am_stats.c[k];
        double span = (double)(c->last_ns - c->first_ns) / 1e9;
        if (c->received == 0)
            continue;
        WST_INFO(&r->log,
                 "version %llu: %llu messages (%.1f MiB) to %s: %.3f ms "
                 "placed to received (mean), %.2f GB/s over %.1f ms",
                 (unsigned long long)version, (unsigned long long)c->received,
                 (double)c->bytes / (1 << 20), wst_am_dest_class_names[k],
                 c->placed == c->received
                     ? (double)(c->received_ns_sum - c->placed_ns_sum) /
                           (double)c->received / 1e6
                     : -1.0,
                 span > 0 ? (double)c->bytes / span / 1e9 : 0.0, span * 1e3);
    }
    memset(&r->am_stats, 0, sizeof(r->am_stats));
    wst_worker_rx_timing_take(r->worker, &t);
    if (t.messages == 0)
        return;
    WST_INFO(&r->log,
             "version %llu: %llu rendezvous messages (%.1f MiB), mean ms from "
             "arrival: %.3f to placed, %.3f to receive posted, %.3f to "
             "received, %.3f to reported; %.3f ms at most",
             (unsigned long long)version, (unsigned long long)t.messages,
             (double)t.bytes / (1 << 20),
             (double)t.to_place_ns / (double)t.messages / 1e6,
             (double)t.to_post_ns / (double)t.messages / 1e6,
             (double)t.to_recv_ns / (double)t.messages / 1e6,
             (double)t.to_report_ns / (double)t.messages / 1e6,
             (double)t.max_ns / 1e6);
}

static void log_ring(struct wst_receiver *r, struct wst_landing *ring,
                     const char *what, uint64_t version)
{
    struct wst_landing_stats ls;

    wst_landing_take_stats(ring, &ls);
    if (ls.copies == 0)
        return;
    WST_INFO(&r->log,
             "version %llu: %llu messages (%.1f MiB) landed in the %s and "
             "copied to their places on GPU %d, %.3f ms mean and %.3f ms max "
             "from copy to done; %llu waited for room to land",
             (unsigned long long)version, (unsigned long long)ls.copies,
             (double)ls.bytes / (1 << 20), what, r->device,
             (double)ls.latency_sum_ns / (double)ls.copies / 1e6,
             (double)ls.latency_max_ns / 1e6, (unsigned long long)ls.parked);
}

/* One line per refit on the way device bytes came in: the copies' delay
 * is what a busy GPU or a slow host-to-device link shows in. */
void wst_recv_log_landing(struct wst_receiver *r, uint64_t version)
{
    if (r->dev != NULL)
        log_am_classes(r, version);
    if (r->device_landing != NULL)
        log_ring(r, r->device_landing, "device ring", version);
    if (r->landing != NULL)
        log_ring(r, r->landing, "pinned host ring", version);
}

/* The device ring, when UCX moves device memory and some device region
 * cannot be exported (landing.h), of device_ring_bytes. For measuring:
 * WST_DEVICE_RING=off leaves it out (UCX then falls back to a slow path
 * for those regions), WST_DEVICE_RING=<MiB> sizes it instead (at least
 * 8). */
static wst_status_t prepare_device_ring(struct wst_receiver *r)
{
    uint64_t bytes = 0;
    size_t n = 0;
    const char *env = getenv("WST_DEVICE_RING");

    for (size_t i = 0; i < r->n_regions; i++)
        if (r->regions[i].no_export) {
            bytes += r->regions[i].length;
            n++;
        }
    if (n == 0)
        return WST_OK;
    /* Said with any UCX: the GPU tests check CUDA's answer with it. */
    WST_INFO(&r->log,
             "%zu device regions (%.1f MiB) cannot be exported by CUDA IPC "
             "(mapped from another process)",
             n, (double)bytes / (1 << 20));
    if (!wst_worker_supports_cuda(r->worker))
        return WST_OK; /* every message for them takes the pinned ring */
    if (env != NULL && strcmp(env, "off") == 0) {
        WST_WARN(&r->log,
                 "WST_DEVICE_RING=off: UCX receives into them directly (it "
                 "fails to pack their keys and falls back to a slow path)");
        return WST_OK;
    }
    uint64_t ring = r->device_ring_bytes;
    if (env != NULL) {
        ring = strtoull(env, NULL, 10) << 20;
        if (ring == 0)
            ring = r->device_ring_bytes;
        WST_INFO(&r->log, "WST_DEVICE_RING=%s: a ring of %llu MiB", env,
                 (unsigned long long)(ring >> 20));
    }
    wst_status_t st =
        wst_landing_create_device(&r->log, r->worker, r->device, (size_t)ring,
                                  r->device_message_max, &r->device_landing);
    if (st == WST_OK)
        WST_INFO(&r->log,
                 "their rendezvous messages land in a %llu MiB device ring, "
                 "%zu MiB at most each, and are copied in place on the GPU "
                 "(UCX cannot export them)",
                 (unsigned long long)(ring >> 20),
                 wst_landing_message_max(r->device_landing) >> 20);
    else
        WST_ERROR(&r->log, "no device ring of %llu MiB: %s",
                  (unsigned long long)(ring >> 20), wst_status_string(st));
    return st;
}

/* The message size offered for device memory UCX writes itself: the
 * default, or WST_DEVICE_MESSAGE_MIB (8 to 32, for measuring one against
 * the other in the same run). */
static void prepare_device_messages(struct wst_receiver *r)
{
    const char *env = getenv("WST_DEVICE_MESSAGE_MIB");
    char *end = NULL;
    unsigned long long mib = env != NULL ? strtoull(env, &end, 10) : 0;

    r->device_message_max = WST_DATA_DEVICE_CHUNK_MAX;
    if (env == NULL || !wst_worker_supports_cuda(r->worker))
        return;
    if (end == env || *end != '\0' || mib < (WST_DATA_CHUNK_MAX >> 20) ||
        mib > (WST_DATA_DEVICE_CHUNK_MAX >> 20)) {
        WST_WARN(&r->log,
                 "WST_DEVICE_MESSAGE_MIB=%s ignored: %llu to %llu (MiB)", env,
                 WST_DATA_CHUNK_MAX >> 20, WST_DATA_DEVICE_CHUNK_MAX >> 20);
        return;
    }
    r->device_message_max = (uint64_t)mib << 20;
    WST_INFO(&r->log,
             "WST_DEVICE_MESSAGE_MIB=%llu: data messages into device memory "
             "UCX writes itself of at most %llu MiB",
             mib, mib);
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
    prepare_device_messages(r);
    wst_status_t st = wst_gpu_worker_bind(&r->log, r->worker, r->device);
    if (st == WST_OK)
        st = wst_recv_device_create(&r->log, r->device, &r->dev);
    if (st == WST_OK)
        st = wst_landing_create(&r->log, r->worker, r->device, &r->landing);
    if (st == WST_OK)
        st = prepare_device_ring(r);
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
            .no_export = r->regions[i].no_export,
            .keyed = wst_recv_region_keyed(r, i),
        };
    return WST_OK;
}
