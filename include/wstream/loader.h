/* wstream/loader.h - MoE repack loaders: the C interface an engine
 * implements to receive routed experts in its own layout.
 *
 * When every byte of an MoE layer is staged and verified, the receiver
 * replays each staged local expert i as global id expert_start + i through
 * the layer's loader, which writes that expert's slice of the engine's live
 * buffers w13 and w2 in place. Built-ins (kernels/repack.h): "checkpoint"
 * (w13 = [L, 2I, H] with rows [0,I) gate and [I,2I) up per expert, w2 =
 * [L, H, I]) and "trtllm-bf16" (REFIT_LAYOUTS.md section 3). An engine
 * registers its own with wst_receiver_add_loader (receiver.h).
 */
#ifndef WSTREAM_LOADER_H
#define WSTREAM_LOADER_H

#include <stddef.h>
#include <stdint.h>
#include <wstream/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Experts of one MoE layer held by this rank. */
struct wst_expert_shape {
    uint32_t n_local;     /* L experts on this rank */
    uint32_t hidden;      /* H */
    uint32_t inter;       /* I, per expert */
    enum wst_dtype dtype; /* element type, unchanged by every loader */
};

/* A loader's ops table. All functions are pure in their arguments: no state
 * lives in a loader, so one table serves every layer and thread at once.
 *
 * check:       refuses a shape the layout cannot hold with
 *              WST_ERR_REPACK_SHAPE and a message naming the violated
 *              constraint in 'err' (NUL-terminated, truncated to errlen; err
 *              may be NULL when errlen is 0). The receiver calls it when it
 *              plans, before any byte moves.
 * w13_bytes:   size in bytes of the whole live w13 buffer (all L experts) for
 *              a shape check() accepted.
 * w2_bytes:    the same for w2.
 * load_expert: writes expert 'local' (< n_local) of w13 and w2 from gate, up
 *              and down; 'self' is the table it was called through, so an
 *              engine's own loader reaches its context through self->arg
 *              (a stream, a handle). Borrows every pointer for the call. Never
 *              touches bytes of other experts. WST_ERR_INVALID for a NULL
 *              pointer or local >= n_local, WST_ERR_REPACK_SHAPE for a shape
 *              check() refuses. Source and destination must not overlap.
 *              Called from the receiver's repack thread, never the progress
 *              thread; one layer at a time.
 * arg:         for the owner of the table; the built-ins leave it NULL.
 * load_layer_device:
 *              optional (NULL: the loader writes host memory only, and the
 *              receiver refuses it for a layer whose live buffers are on a
 *              GPU). All n_local experts of one layer at once, on the GPU:
 *              gate, up and down are device pointers to the staged experts
 *              in checkpoint order ([L,I,H], [L,I,H], [L,H,I]), w13 and w2
 *              the live device buffers. Enqueues the work on 'stream' (a
 *              cudaStream_t) and returns; the receiver orders what follows
 *              with an event recorded after it. A message goes to 'err' on
 *              failure. Same rules as load_expert otherwise. */
struct wst_repack_loader {
    const char *name;
    wst_status_t (*check)(const struct wst_expert_shape *shape, char *err,
                          size_t errlen);
    uint64_t (*w13_bytes)(const struct wst_expert_shape *shape);
    uint64_t (*w2_bytes)(const struct wst_expert_shape *shape);
    wst_status_t (*load_expert)(const struct wst_repack_loader *self,
                                const struct wst_expert_shape *shape,
                                uint32_t local, const void *gate /* [I,H] */,
                                const void *up /* [I,H] */,
                                const void *down /* [H,I] */, void *w13,
                                void *w2);
    void *arg;
    wst_status_t (*load_layer_device)(const struct wst_repack_loader *self,
                                      const struct wst_expert_shape *shape,
                                      const void *gate, const void *up,
                                      const void *down, void *w13, void *w2,
                                      void *stream, char *err, size_t errlen);
};

#ifdef __cplusplus
}
#endif
#endif /* WSTREAM_LOADER_H */
