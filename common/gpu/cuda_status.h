/* cuda_status.h - CUDA errors into wst_status_t, for the .cu files of
 * common/gpu/ and kernels/.
 *
 * The one translation (gpu.cu): cudaErrorMemoryAllocation is
 * WST_ERR_NO_MEMORY; no device or driver, WST_ERR_NO_DEVICE; a bad value,
 * pointer or handle, WST_ERR_INVALID; anything else WST_ERR_TRANSPORT. A
 * failure is logged once, here, with the call's name and CUDA's message
 * ('log' may be NULL). C++ only: it names cudaError_t.
 */
#ifndef WST_CUDA_STATUS_H
#define WST_CUDA_STATUS_H

#include <cuda_runtime.h>

extern "C" {
#include <wstream/status.h>

#include "log.h"
}

wst_status_t wst_cuda_status(cudaError_t err, const struct wst_logger *log,
                             const char *call);

/* The status of the last launch (cudaGetLastError), named 'kernel'. */
wst_status_t wst_cuda_launched(const struct wst_logger *log,
                               const char *kernel);

#endif
