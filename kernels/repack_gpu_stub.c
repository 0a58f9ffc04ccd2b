/* repack_gpu_stub.c - repack_gpu.h for builds without the CUDA toolkit. */
#include "repack_gpu.h"

#include <stdio.h>

static wst_status_t no_device(char *err, size_t errlen)
{
    if (err != NULL && errlen > 0)
        snprintf(err, errlen, "built without the CUDA toolkit");
    return WST_ERR_NO_DEVICE;
}

wst_status_t wst_gpu_repack_trtllm_bf16(const struct wst_repack_loader *self,
                                        const struct wst_expert_shape *shape,
                                        const void *gate, const void *up,
                                        const void *down, void *w13, void *w2,
                                        void *stream, char *err, size_t errlen)
{
    (void)self, (void)shape, (void)gate, (void)up, (void)down;
    (void)w13, (void)w2, (void)stream;
    return no_device(err, errlen);
}

wst_status_t wst_gpu_repack_checkpoint(const struct wst_repack_loader *self,
                                       const struct wst_expert_shape *shape,
                                       const void *gate, const void *up,
                                       const void *down, void *w13, void *w2,
                                       void *stream, char *err, size_t errlen)
{
    (void)self, (void)shape, (void)gate, (void)up, (void)down;
    (void)w13, (void)w2, (void)stream;
    return no_device(err, errlen);
}
