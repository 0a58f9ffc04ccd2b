/* gpu_worker.h - a GPU's context on a worker's threads, for a CUDA-aware
 * UCX.
 *
 * UCX 1.13's CUDA transports call the CUDA driver on the thread that calls
 * UCX (cuIpcGetMemHandle when device memory is registered on the fly,
 * cuMemGetAddressRange to learn a buffer's memory type) and fail with
 * "invalid device context" where no context is current: on the worker's
 * progress thread and its data lanes' threads, which otherwise never call
 * CUDA. UCX then treats device memory as host memory and copies it with
 * memcpy (a crash), or falls back to slow paths. Making the device's
 * primary context current on each of those threads, once, is what UCX
 * expects of its caller.
 */
#ifndef WST_GPU_WORKER_H
#define WST_GPU_WORKER_H

#include <wstream/status.h>

#include "log.h"
#include "worker.h"

/* Makes 'device' current on every thread of 'worker' (progress and lanes)
 * when its UCX reports CUDA memory; nothing to do (WST_OK) otherwise. Not
 * from the worker's threads. 'log' and 'worker' are borrowed for the
 * call. */
wst_status_t wst_gpu_worker_bind(const struct wst_logger *log,
                                 wst_worker_t *worker, int device);

#endif
