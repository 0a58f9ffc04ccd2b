/* gpu.cu - gpu.h with the CUDA runtime.
 *
 * Each wrapper makes one runtime call and passes its status through
 * wst_cuda_status (cuda_status.h), the one place CUDA errors become
 * wst_status_t values and log lines.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

extern "C" {
#include "gpu.h"
}
#include "cuda_status.h"

wst_status_t wst_cuda_status(cudaError_t err, const struct wst_logger *log,
                             const char *call)
{
    if (err == cudaSuccess)
        return WST_OK;
    WST_ERROR(log, "%s: %s (%s)", call, cudaGetErrorString(err),
              cudaGetErrorName(err));
    switch (err) {
    case cudaErrorMemoryAllocation:
        return WST_ERR_NO_MEMORY;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
        return WST_ERR_NO_DEVICE;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidResourceHandle:
        return WST_ERR_INVALID;
    default:
        return WST_ERR_TRANSPORT;
    }
}

wst_status_t wst_cuda_launched(const struct wst_logger *log, const char *kernel)
{
    return wst_cuda_status(cudaGetLastError(), log, kernel);
}

extern "C" enum wst_mem_type wst_gpu_mem_type(const void *ptr, int *device_p)
{
    cudaPointerAttributes attr;
    cudaError_t err = cudaPointerGetAttributes(&attr, ptr);

    *device_p = -1;
    if (err != cudaSuccess) {
        /* No driver or device: host memory by definition. Clear the error
         * so a later launch check does not report it. */
        (void)cudaGetLastError();
        return WST_MEM_HOST;
    }
    if (attr.type != cudaMemoryTypeDevice)
        return WST_MEM_HOST;
    *device_p = attr.device;
    return WST_MEM_CUDA;
}

extern "C" wst_status_t wst_gpu_set_device(const struct wst_logger *log,
                                           int device)
{
    return wst_cuda_status(cudaSetDevice(device), log, "cudaSetDevice");
}

/* Makes current the device that owns 'ptr', when it is device memory. */
static wst_status_t follow(const struct wst_logger *log, const void *ptr)
{
    int device;

    if (wst_gpu_mem_type(ptr, &device) != WST_MEM_CUDA)
        return WST_OK;
    return wst_gpu_set_device(log, device);
}

extern "C" wst_status_t wst_gpu_malloc(const struct wst_logger *log,
                                       size_t bytes, void **ptr_p)
{
    *ptr_p = NULL;
    return wst_cuda_status(cudaMalloc(ptr_p, bytes), log, "cudaMalloc");
}

extern "C" void wst_gpu_free(void *ptr)
{
    if (ptr != NULL)
        (void)cudaFree(ptr);
}

extern "C" wst_status_t wst_gpu_host_alloc(const struct wst_logger *log,
                                           size_t bytes, void **ptr_p)
{
    *ptr_p = NULL;
    return wst_cuda_status(cudaHostAlloc(ptr_p, bytes, cudaHostAllocPortable),
                           log, "cudaHostAlloc");
}

extern "C" void wst_gpu_host_free(void *ptr)
{
    if (ptr != NULL)
        (void)cudaFreeHost(ptr);
}

extern "C" wst_status_t wst_gpu_stream_create(const struct wst_logger *log,
                                              wst_gpu_stream_t *stream_p)
{
    cudaStream_t s = NULL;
    wst_status_t st =
        wst_cuda_status(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
                        log, "cudaStreamCreateWithFlags");

    *stream_p = st == WST_OK ? (wst_gpu_stream_t)s : NULL;
    return st;
}

extern "C" void wst_gpu_stream_destroy(wst_gpu_stream_t stream)
{
    if (stream != NULL)
        (void)cudaStreamDestroy((cudaStream_t)stream);
}

extern "C" wst_status_t wst_gpu_stream_sync(const struct wst_logger *log,
                                            wst_gpu_stream_t stream)
{
    return wst_cuda_status(cudaStreamSynchronize((cudaStream_t)stream), log,
                           "cudaStreamSynchronize");
}

extern "C" wst_status_t wst_gpu_event_create(const struct wst_logger *log,
                                             int timing,
                                             wst_gpu_event_t *event_p)
{
    cudaEvent_t e = NULL;
    unsigned flags = cudaEventBlockingSync;
    wst_status_t st;

    if (!timing)
        flags |= cudaEventDisableTiming;
    st = wst_cuda_status(cudaEventCreateWithFlags(&e, flags), log,
                         "cudaEventCreateWithFlags");
    *event_p = st == WST_OK ? (wst_gpu_event_t)e : NULL;
    return st;
}

extern "C" void wst_gpu_event_destroy(wst_gpu_event_t event)
{
    if (event != NULL)
        (void)cudaEventDestroy((cudaEvent_t)event);
}

extern "C" wst_status_t wst_gpu_event_record(const struct wst_logger *log,
                                             wst_gpu_event_t event,
                                             wst_gpu_stream_t stream)
{
    return wst_cuda_status(
        cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream), log,
        "cudaEventRecord");
}

extern "C" wst_status_t wst_gpu_event_sync(const struct wst_logger *log,
                                           wst_gpu_event_t event)
{
    return wst_cuda_status(cudaEventSynchronize((cudaEvent_t)event), log,
                           "cudaEventSynchronize");
}

extern "C" wst_status_t wst_gpu_stream_wait(const struct wst_logger *log,
                                            wst_gpu_stream_t stream,
                                            wst_gpu_event_t event)
{
    return wst_cuda_status(
        cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)event, 0), log,
        "cudaStreamWaitEvent");
}

extern "C" wst_status_t wst_gpu_event_elapsed_ms(const struct wst_logger *log,
                                                 wst_gpu_event_t start,
                                                 wst_gpu_event_t stop,
                                                 float *ms_p)
{
    return wst_cuda_status(
        cudaEventElapsedTime(ms_p, (cudaEvent_t)start, (cudaEvent_t)stop), log,
        "cudaEventElapsedTime");
}

extern "C" wst_status_t wst_gpu_copy_async(const struct wst_logger *log,
                                           void *dst, const void *src,
                                           size_t bytes,
                                           wst_gpu_stream_t stream)
{
    return wst_cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault,
                                           (cudaStream_t)stream),
                           log, "cudaMemcpyAsync");
}

extern "C" wst_status_t wst_gpu_copy(const struct wst_logger *log, void *dst,
                                     const void *src, size_t bytes)
{
    wst_status_t st = follow(log, dst);

    if (st == WST_OK)
        st = follow(log, src);
    if (st != WST_OK)
        return st;
    st = wst_cuda_status(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), log,
                         "cudaMemcpy");
    /* cudaMemcpy from pageable memory may return before the bytes land,
     * and work on non-blocking streams does not wait for the legacy
     * stream: wait here, as the header promises. */
    if (st == WST_OK)
        st = wst_cuda_status(cudaStreamSynchronize(cudaStreamLegacy), log,
                             "cudaStreamSynchronize");
    return st;
}

extern "C" wst_status_t wst_gpu_memset(const struct wst_logger *log, void *dst,
                                       int byte, size_t bytes)
{
    wst_status_t st = follow(log, dst);

    if (st != WST_OK)
        return st;
    st = wst_cuda_status(cudaMemset(dst, byte, bytes), log, "cudaMemset");
    /* cudaMemset of device memory is asynchronous to the host. */
    if (st == WST_OK)
        st = wst_cuda_status(cudaStreamSynchronize(cudaStreamLegacy), log,
                             "cudaStreamSynchronize");
    return st;
}

extern "C" wst_status_t
wst_gpu_ipc_export(const struct wst_logger *log, void *base,
                   unsigned char handle[WST_GPU_IPC_HANDLE_BYTES])
{
    cudaIpcMemHandle_t h;
    wst_status_t st = follow(log, base);

    static_assert(sizeof(h) == WST_GPU_IPC_HANDLE_BYTES,
                  "cudaIpcMemHandle_t size");
    if (st == WST_OK)
        st = wst_cuda_status(cudaIpcGetMemHandle(&h, base), log,
                             "cudaIpcGetMemHandle");
    if (st == WST_OK)
        memcpy(handle, &h, sizeof(h));
    return st;
}

extern "C" wst_status_t
wst_gpu_ipc_import(const struct wst_logger *log, int device,
                   const unsigned char handle[WST_GPU_IPC_HANDLE_BYTES],
                   void **ptr_p)
{
    cudaIpcMemHandle_t h;
    wst_status_t st = wst_gpu_set_device(log, device);

    *ptr_p = NULL;
    memcpy(&h, handle, sizeof(h));
    if (st != WST_OK)
        return st;
    return wst_cuda_status(
        cudaIpcOpenMemHandle(ptr_p, h, cudaIpcMemLazyEnablePeerAccess), log,
        "cudaIpcOpenMemHandle");
}

extern "C" int wst_gpu_ipc_exportable(const void *ptr)
{
    cudaIpcMemHandle_t h;
    int device = -1;

    if (wst_gpu_mem_type(ptr, &device) != WST_MEM_CUDA ||
        follow(NULL, ptr) != WST_OK)
        return 0;
    cudaError_t e = cudaIpcGetMemHandle(&h, (void *)ptr);
    /* A refusal is the answer, not a fault: it must not linger as the
     * thread's last error for a later check to find. */
    if (e != cudaSuccess)
        (void)cudaGetLastError();
    return e == cudaSuccess;
}

extern "C" void wst_gpu_ipc_close(void *ptr)
{
    if (ptr != NULL)
        (void)cudaIpcCloseMemHandle(ptr);
}

extern "C" wst_status_t wst_gpu_device_name(const struct wst_logger *log,
                                            int device, char *name, size_t len)
{
    cudaDeviceProp prop;
    wst_status_t st = wst_cuda_status(cudaGetDeviceProperties(&prop, device),
                                      log, "cudaGetDeviceProperties");

    if (st == WST_OK && len > 0)
        snprintf(name, len, "%s", prop.name);
    return st;
}
