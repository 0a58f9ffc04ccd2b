/* check_pinned.c - the bounce path's GPU stages measured alone: pinned
 * device-to-host (a sender filling its bounce slots) and host-to-device (a
 * receiver emptying its landing ring), as one copy and in slot-sized
 * chunks on one stream, as the pipeline issues them. tests/gpu/run.sh
 * prints a bounce refit's GB/s next to these and to UCX host-to-host on
 * the same lanes.
 */
#include <stdio.h>

#include "gpu_check.h"

#define COPY_BYTES (1ull << 30)
#define SLOT_BYTES (8ull << 20) /* WST_BOUNCE_SLOT_BYTES */

struct copy_bench {
    void *dst;
    const void *src;
    uint64_t chunk;
};

static int run_copies(void *arg, wst_gpu_stream_t stream)
{
    const struct copy_bench *cb = arg;

    for (uint64_t off = 0; off < COPY_BYTES; off += cb->chunk)
        if (wst_gpu_copy_async(NULL, (char *)cb->dst + off,
                               (const char *)cb->src + off, cb->chunk,
                               stream) != WST_OK)
            return -1;
    return 0;
}

void bench_pinned(struct gcheck *g)
{
    void *host = NULL, *dev = NULL;

    if (wst_gpu_host_alloc(g->log, COPY_BYTES, &host) != WST_OK ||
        wst_gpu_malloc(g->log, COPY_BYTES, &dev) != WST_OK) {
        gcheck_result(g, 0, "bench pinned",
                      "cannot allocate 1 GiB pinned and "
                      "1 GiB device memory");
        goto out_free;
    }
    gcheck_fill_random(g, host, COPY_BYTES);
    static const struct {
        const char *name;
        int to_host;
        uint64_t chunk;
    } cases[] = {
        {"pinned device-to-host 1 GiB, one copy", 1, COPY_BYTES},
        {"pinned device-to-host 1 GiB, 8 MiB chunks", 1, SLOT_BYTES},
        {"pinned host-to-device 1 GiB, one copy", 0, COPY_BYTES},
        {"pinned host-to-device 1 GiB, 8 MiB chunks", 0, SLOT_BYTES},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct copy_bench cb = {
            .dst = cases[i].to_host ? host : dev,
            .src = cases[i].to_host ? dev : host,
            .chunk = cases[i].chunk,
        };
        double ms = gbench_median_ms(g, run_copies, &cb, 2, 10);
        if (ms <= 0) {
            gcheck_result(g, 0, "bench pinned", "%s failed", cases[i].name);
            continue;
        }
        /* Bytes crossing PCIe once; no ceiling in this run to compare. */
        gbench_row(cases[i].name, (double)COPY_BYTES, ms, 0);
    }
out_free:
    wst_gpu_host_free(host);
    wst_gpu_free(dev);
}
