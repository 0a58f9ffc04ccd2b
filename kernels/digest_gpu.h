/* digest_gpu.h - the integrity digest (common/digest.h) of device memory.
 *
 * The same definition as the CPU digest, computed on the GPU: every
 * WST_DIGEST_CHUNK chunk of every run is hashed with XXH3-64 seeded by its
 * stream position, by many threads at once, and the hashes are summed. The
 * result is added into a struct wst_digest, so runs in host memory (hashed
 * by wst_digest_update) and runs in device memory can make up one digest:
 * the sum is order-free, and positions are explicit.
 *
 * A context owns device scratch for up to max_runs runs and a pinned host
 * word for the sum; one enqueue at a time per context (one verifier thread
 * owns it). Not thread-safe.
 */
#ifndef WST_DIGEST_GPU_H
#define WST_DIGEST_GPU_H

#include <stddef.h>
#include <stdint.h>
#include <wstream/status.h>

#include "digest.h"
#include "gpu.h"
#include "log.h"

/* One run of device memory; 'pos' is its stream position, the sum of the
 * lengths of the runs before it in the digest's sequence. */
struct wst_digest_run {
    const void *data; /* device pointer, any alignment */
    uint64_t length;
    uint64_t pos;
};

struct wst_gpu_digest;

/* Allocates the context on the current device. On success *dg_p is owned
 * by the caller (wst_gpu_digest_destroy, which accepts NULL). */
wst_status_t wst_gpu_digest_create(const struct wst_logger *log,
                                   uint32_t max_runs,
                                   struct wst_gpu_digest **dg_p);
void wst_gpu_digest_destroy(struct wst_gpu_digest *dg);

/* Enqueues on 'stream' the hashing of runs[0..n) (n <= max_runs; runs are
 * borrowed for the call only, copied before it returns). WST_ERR_INVALID
 * for n > max_runs. Zero-length runs are allowed and hash nothing. */
wst_status_t wst_gpu_digest_enqueue(struct wst_gpu_digest *dg,
                                    const struct wst_digest_run *runs,
                                    uint32_t n, wst_gpu_stream_t stream);

/* enqueue, synchronize 'stream', collect: one call for a verifier thread. */
wst_status_t wst_gpu_digest_runs(struct wst_gpu_digest *dg,
                                 const struct wst_digest_run *runs, uint32_t n,
                                 wst_gpu_stream_t stream, struct wst_digest *d);

#endif
