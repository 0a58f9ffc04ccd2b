/* digest_gpu_stub.c - digest_gpu.h for builds without the CUDA toolkit.
 *
 * There is no device memory to hash: creating a context fails with
 * WST_ERR_NO_DEVICE, so callers fall back to the CPU digest (digest.h),
 * which is the same function.
 */
#include <stddef.h>

#include "digest_gpu.h"

wst_status_t wst_gpu_digest_create(const struct wst_logger *log,
                                   uint32_t max_runs,
                                   struct wst_gpu_digest **dg_p)
{
    (void)log;
    (void)max_runs;
    (void)dg_p;
    return WST_ERR_NO_DEVICE;
}

void wst_gpu_digest_destroy(struct wst_gpu_digest *dg)
{
    (void)dg;
}

wst_status_t wst_gpu_digest_enqueue(struct wst_gpu_digest *dg,
                                    const struct wst_digest_run *runs,
                                    uint32_t n, wst_gpu_stream_t stream)
{
    (void)dg;
    (void)runs;
    (void)n;
    (void)stream;
    return WST_ERR_NO_DEVICE;
}

wst_status_t wst_gpu_digest_runs(struct wst_gpu_digest *dg,
                                 const struct wst_digest_run *runs, uint32_t n,
                                 wst_gpu_stream_t stream, struct wst_digest *d)
{
    (void)dg;
    (void)runs;
    (void)n;
    (void)stream;
    (void)d;
    return WST_ERR_NO_DEVICE;
}
