/* repack_gpu.h - the built-in loaders' load_layer_device functions
 * (<wstream/loader.h>), installed in their tables by repack_cpu.c.
 * repack_gpu.cu implements them with CUDA; repack_gpu_stub.c, in a build
 * without the toolkit, returns WST_ERR_NO_DEVICE. */
#ifndef WST_REPACK_GPU_H
#define WST_REPACK_GPU_H

#include <stddef.h>
#include <wstream/loader.h>

wst_status_t wst_gpu_repack_trtllm_bf16(const struct wst_repack_loader *self,
                                        const struct wst_expert_shape *shape,
                                        const void *gate, const void *up,
                                        const void *down, void *w13, void *w2,
                                        void *stream, char *err, size_t errlen);
wst_status_t wst_gpu_repack_checkpoint(const struct wst_repack_loader *self,
                                       const struct wst_expert_shape *shape,
                                       const void *gate, const void *up,
                                       const void *down, void *w13, void *w2,
                                       void *stream, char *err, size_t errlen);

#endif
