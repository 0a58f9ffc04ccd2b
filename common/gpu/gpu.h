/* gpu.h - device memory, streams and events: the CUDA runtime behind a C
 * seam, so nothing outside common/gpu/ and kernels/ includes a CUDA header.
 *
 * gpu.cu implements it with the CUDA runtime; gpu_stub.c (a build without
 * the toolkit) with the same symbols, where every call that needs a device
 * returns WST_ERR_NO_DEVICE and wst_gpu_mem_type calls everything host
 * memory. Every CUDA status is translated once, here, into a wst_status_t
 * (cudaErrorMemoryAllocation: WST_ERR_NO_MEMORY; no device or driver:
 * WST_ERR_NO_DEVICE; a bad argument: WST_ERR_INVALID; anything else:
 * WST_ERR_TRANSPORT) and the call's name with CUDA's own message goes to
 * 'log' (may be NULL) at error level.
 *
 * Streams and events are opaque pointers: a wst_gpu_stream_t is a
 * cudaStream_t, a wst_gpu_event_t a cudaEvent_t. Work from other threads is
 * ordered after a transfer's completion with events (wst_gpu_stream_wait),
 * never by stream position. All functions are thread-safe (the CUDA runtime
 * is); each one that takes a device pointer makes that pointer's device
 * current first, so callers never juggle cudaSetDevice.
 */
#ifndef WST_GPU_H
#define WST_GPU_H

#include <stddef.h>
#include <stdint.h>
#include <wstream/status.h>

#include "log.h"

typedef void *wst_gpu_stream_t;
typedef void *wst_gpu_event_t;

/* Where 'ptr' lives: WST_MEM_CUDA (and its device ordinal in *device_p) for
 * device memory, including memory mapped from another process by CUDA IPC;
 * WST_MEM_HOST for everything else (pageable, pinned or mapped host
 * memory). Never fails for host pointers: a CUDA build with no device, or
 * the stub, reports WST_MEM_HOST with *device_p = -1. */
enum wst_mem_type wst_gpu_mem_type(const void *ptr, int *device_p);

/* Makes 'device' current for the calling thread. */
wst_status_t wst_gpu_set_device(const struct wst_logger *log, int device);

/* Device memory on the current device (cudaMalloc); free with
 * wst_gpu_free, which accepts NULL. */
wst_status_t wst_gpu_malloc(const struct wst_logger *log, size_t bytes,
                            void **ptr_p);
void wst_gpu_free(void *ptr);

/* Page-locked host memory (cudaHostAlloc, portable), for landing buffers
 * and copies that overlap; free with wst_gpu_host_free (NULL is fine). */
wst_status_t wst_gpu_host_alloc(const struct wst_logger *log, size_t bytes,
                                void **ptr_p);
void wst_gpu_host_free(void *ptr);

/* A non-blocking stream on the current device (never synchronizes with the
 * legacy default stream). destroy accepts NULL. */
wst_status_t wst_gpu_stream_create(const struct wst_logger *log,
                                   wst_gpu_stream_t *stream_p);
void wst_gpu_stream_destroy(wst_gpu_stream_t stream);
wst_status_t wst_gpu_stream_sync(const struct wst_logger *log,
                                 wst_gpu_stream_t stream);

/* Events without timing (cheap to record and wait on) unless 'timing' is
 * nonzero; a host waiting on one sleeps instead of spinning. destroy
 * accepts NULL. */
wst_status_t wst_gpu_event_create(const struct wst_logger *log, int timing,
                                  wst_gpu_event_t *event_p);
void wst_gpu_event_destroy(wst_gpu_event_t event);
wst_status_t wst_gpu_event_record(const struct wst_logger *log,
                                  wst_gpu_event_t event,
                                  wst_gpu_stream_t stream);
/* Blocks the calling thread until the event's work is done. */
wst_status_t wst_gpu_event_sync(const struct wst_logger *log,
                                wst_gpu_event_t event);
/* Work enqueued on 'stream' after this call waits for 'event'. */
wst_status_t wst_gpu_stream_wait(const struct wst_logger *log,
                                 wst_gpu_stream_t stream,
                                 wst_gpu_event_t event);
/* Milliseconds between two recorded timing events (both complete). */
wst_status_t wst_gpu_event_elapsed_ms(const struct wst_logger *log,
                                      wst_gpu_event_t start,
                                      wst_gpu_event_t stop, float *ms_p);

/* cudaMemcpyAsync with the direction inferred from the pointers (unified
 * addressing), on 'stream'. Host memory must be pinned for the copy to be
 * asynchronous. */
wst_status_t wst_gpu_copy_async(const struct wst_logger *log, void *dst,
                                const void *src, size_t bytes,
                                wst_gpu_stream_t stream);
/* The same, synchronous (for set-up and tests, never on the refit path). */
wst_status_t wst_gpu_copy(const struct wst_logger *log, void *dst,
                          const void *src, size_t bytes);
/* cudaMemset of device memory; returns once it is done. */
wst_status_t wst_gpu_memset(const struct wst_logger *log, void *dst, int byte,
                            size_t bytes);

/* CUDA IPC: a device allocation's handle (WST_GPU_IPC_HANDLE_BYTES opaque
 * bytes) for another process on the same host, and the mapping of such a
 * handle here (on the device that owns it). The exporter keeps the
 * allocation alive while importers use it; the importer unmaps with
 * wst_gpu_ipc_close. 'base' must be the start of a cudaMalloc allocation. */
#define WST_GPU_IPC_HANDLE_BYTES 64
wst_status_t wst_gpu_ipc_export(const struct wst_logger *log, void *base,
                                unsigned char handle[WST_GPU_IPC_HANDLE_BYTES]);
wst_status_t
wst_gpu_ipc_import(const struct wst_logger *log, int device,
                   const unsigned char handle[WST_GPU_IPC_HANDLE_BYTES],
                   void **ptr_p);
void wst_gpu_ipc_close(void *ptr);
/* Whether this process may export the device memory at 'ptr' by CUDA IPC
 * (cudaIpcGetMemHandle succeeds): memory it allocated with cudaMalloc can;
 * memory it mapped from another process by CUDA IPC (or made with the
 * virtual memory API) cannot. UCX's cuda_ipc exports every buffer whose
 * remote key it packs, so a receiver lands messages for memory that cannot
 * be exported elsewhere first (landing.h). 0 for host memory and without
 * CUDA; the probe's own CUDA error is not logged. */
int wst_gpu_ipc_exportable(const void *ptr);

/* Name of the current device ("NVIDIA H200") and its ordinal, for log
 * lines. */
wst_status_t wst_gpu_device_name(const struct wst_logger *log, int device,
                                 char *name, size_t len);

#endif
