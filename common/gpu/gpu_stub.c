/* gpu_stub.c - gpu.h for builds without the CUDA toolkit: everything is
 * host memory, and whatever needs a device says there is none. */
#include "gpu.h"

#include <stdio.h>

static wst_status_t none(const struct wst_logger *log, const char *what)
{
    WST_ERROR(log, "%s: built without the CUDA toolkit", what);
    return WST_ERR_NO_DEVICE;
}

enum wst_mem_type wst_gpu_mem_type(const void *ptr, int *device_p)
{
    (void)ptr;
    *device_p = -1;
    return WST_MEM_HOST;
}

wst_status_t wst_gpu_set_device(const struct wst_logger *log, int device)
{
    (void)device;
    return none(log, "cudaSetDevice");
}

wst_status_t wst_gpu_malloc(const struct wst_logger *log, size_t bytes,
                            void **ptr_p)
{
    (void)bytes;
    *ptr_p = NULL;
    return none(log, "cudaMalloc");
}

void wst_gpu_free(void *ptr)
{
    (void)ptr;
}

wst_status_t wst_gpu_host_alloc(const struct wst_logger *log, size_t bytes,
                                void **ptr_p)
{
    (void)bytes;
    *ptr_p = NULL;
    return none(log, "cudaHostAlloc");
}

void wst_gpu_host_free(void *ptr)
{
    (void)ptr;
}

wst_status_t wst_gpu_stream_create(const struct wst_logger *log,
                                   wst_gpu_stream_t *stream_p)
{
    *stream_p = NULL;
    return none(log, "cudaStreamCreate");
}

void wst_gpu_stream_destroy(wst_gpu_stream_t stream)
{
    (void)stream;
}

wst_status_t wst_gpu_stream_sync(const struct wst_logger *log,
                                 wst_gpu_stream_t stream)
{
    (void)stream;
    return none(log, "cudaStreamSynchronize");
}

wst_status_t wst_gpu_event_create(const struct wst_logger *log, int timing,
                                  wst_gpu_event_t *event_p)
{
    (void)timing;
    *event_p = NULL;
    return none(log, "cudaEventCreate");
}

void wst_gpu_event_destroy(wst_gpu_event_t event)
{
    (void)event;
}

wst_status_t wst_gpu_event_record(const struct wst_logger *log,
                                  wst_gpu_event_t event,
                                  wst_gpu_stream_t stream)
{
    (void)event;
    (void)stream;
    return none(log, "cudaEventRecord");
}

wst_status_t wst_gpu_event_sync(const struct wst_logger *log,
                                wst_gpu_event_t event)
{
    (void)event;
    return none(log, "cudaEventSynchronize");
}

wst_status_t wst_gpu_stream_wait(const struct wst_logger *log,
                                 wst_gpu_stream_t stream, wst_gpu_event_t event)
{
    (void)stream;
    (void)event;
    return none(log, "cudaStreamWaitEvent");
}

wst_status_t wst_gpu_event_elapsed_ms(const struct wst_logger *log,
                                      wst_gpu_event_t start,
                                      wst_gpu_event_t stop, float *ms_p)
{
    (void)start;
    (void)stop;
    *ms_p = 0;
    return none(log, "cudaEventElapsedTime");
}

wst_status_t wst_gpu_copy_async(const struct wst_logger *log, void *dst,
                                const void *src, size_t bytes,
                                wst_gpu_stream_t stream)
{
    (void)dst;
    (void)src;
    (void)bytes;
    (void)stream;
    return none(log, "cudaMemcpyAsync");
}

wst_status_t wst_gpu_copy(const struct wst_logger *log, void *dst,
                          const void *src, size_t bytes)
{
    (void)dst;
    (void)src;
    (void)bytes;
    return none(log, "cudaMemcpy");
}

wst_status_t wst_gpu_memset(const struct wst_logger *log, void *dst, int byte,
                            size_t bytes)
{
    (void)dst;
    (void)byte;
    (void)bytes;
    return none(log, "cudaMemset");
}

wst_status_t wst_gpu_ipc_export(const struct wst_logger *log, void *base,
                                unsigned char handle[WST_GPU_IPC_HANDLE_BYTES])
{
    (void)base;
    (void)handle;
    return none(log, "cudaIpcGetMemHandle");
}

wst_status_t
wst_gpu_ipc_import(const struct wst_logger *log, int device,
                   const unsigned char handle[WST_GPU_IPC_HANDLE_BYTES],
                   void **ptr_p)
{
    (void)device;
    (void)handle;
    *ptr_p = NULL;
    return none(log, "cudaIpcOpenMemHandle");
}

int wst_gpu_ipc_exportable(const void *ptr)
{
    (void)ptr;
    return 0;
}

void wst_gpu_ipc_close(void *ptr)
{
    (void)ptr;
}

wst_status_t wst_gpu_device_name(const struct wst_logger *log, int device,
                                 char *name, size_t len)
{
    (void)device;
    if (len > 0)
        snprintf(name, len, "none");
    return none(log, "cudaGetDeviceProperties");
}
