/* pack_gpu_stub.c - the GPU half of pack.h for builds without the CUDA
 * toolkit: there is no device to pack on. */
#include "pack.h"

wst_status_t wst_gpu_pack(const struct wst_logger *log, void *dense,
                          const void *strided, const struct wst_strided *s,
                          wst_gpu_stream_t stream)
{
    (void)dense;
    (void)strided;
    (void)s;
    (void)stream;
    WST_DEBUG(log, "wst_gpu_pack: built without the CUDA toolkit");
    return WST_ERR_NO_DEVICE;
}

wst_status_t wst_gpu_unpack(const struct wst_logger *log, void *strided,
                            const void *dense, const struct wst_strided *s,
                            wst_gpu_stream_t stream)
{
    (void)strided;
    (void)dense;
    (void)s;
    (void)stream;
    WST_DEBUG(log, "wst_gpu_unpack: built without the CUDA toolkit");
    return WST_ERR_NO_DEVICE;
}
