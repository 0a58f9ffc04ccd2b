/* pack.h - strided pack and unpack: the bytes of a box that are not one
 * contiguous run, gathered into (pack) or scattered from (unpack) one
 * dense buffer, on the CPU and on the GPU.
 *
 * Movers move contiguous runs only (DESIGN.md section 6). A box whose
 * contiguous pieces are small (a tensor-parallel slice of the last
 * dimension: one short run per row) is packed on its sending side and
 * unpacked on its receiving side, so the wire carries one run.
 *
 * The strided side is described as up to WST_PACK_MAX_DIMS nested loops of
 * byte strides around a contiguous run of run_bytes:
 *
 *   for i0 < count[0], ..., for i(n-1) < count[n-1]:
 *       strided + sum(i_d * stride[d])  <->  dense + (linear index) * run_bytes
 *
 * with dimension 0 outermost. The dense side is row-major, no gaps.
 * wst_strided_from_box builds this from a box inside a row-major tensor and
 * merges dimensions that are contiguous, so a fully contiguous box becomes
 * ndim = 0 (a single run).
 *
 * wst_pack_cpu/wst_unpack_cpu are the reference twins the GPU kernels are
 * checked against bit for bit.
 */
#ifndef WST_PACK_H
#define WST_PACK_H

#include <stddef.h>
#include <stdint.h>
#include <wstream/status.h>

#include "gpu.h"
#include "log.h"

#define WST_PACK_MAX_DIMS 8

struct wst_strided {
    uint32_t ndim;                      /* 0..WST_PACK_MAX_DIMS loops */
    uint64_t count[WST_PACK_MAX_DIMS];  /* iterations, outermost first */
    uint64_t stride[WST_PACK_MAX_DIMS]; /* bytes on the strided side */
    uint64_t run_bytes;                 /* contiguous bytes per position */
};

/* The description of box [start, start + extent) of a row-major tensor of
 * 'ndim' dimensions 'shape' with elements of 'elem_size' bytes; the
 * strided side's origin is the tensor's first byte plus *offset_p (set
 * here: the box's first byte). Contiguous dimensions are merged.
 * WST_ERR_INVALID for ndim 0 or > WST_PACK_MAX_DIMS, an empty extent, a box
 * outside the shape or a size that overflows. */
wst_status_t wst_strided_from_box(uint32_t ndim, const uint64_t *shape,
                                  const uint64_t *start, const uint64_t *extent,
                                  size_t elem_size, struct wst_strided *s,
                                  uint64_t *offset_p);

/* Checks a description: ndim in range, nonzero counts and run_bytes, and
 * the dense size (returned in *dense_bytes_p) and the strided extent (the
 * highest byte touched + 1, in *span_bytes_p) without overflow. Either
 * output may be NULL. */
wst_status_t wst_strided_check(const struct wst_strided *s,
                               uint64_t *dense_bytes_p, uint64_t *span_bytes_p);

/* CPU twins; 's' must have passed wst_strided_check. */
void wst_pack_cpu(void *dense, const void *strided,
                  const struct wst_strided *s);
void wst_unpack_cpu(void *strided, const void *dense,
                    const struct wst_strided *s);

/* GPU: the same on device pointers, enqueued on 'stream' (returns after
 * enqueuing). Checks 's' and the launch; WST_ERR_NO_DEVICE in a build
 * without CUDA. */
wst_status_t wst_gpu_pack(const struct wst_logger *log, void *dense,
                          const void *strided, const struct wst_strided *s,
                          wst_gpu_stream_t stream);
wst_status_t wst_gpu_unpack(const struct wst_logger *log, void *strided,
                            const void *dense, const struct wst_strided *s,
                            wst_gpu_stream_t stream);

#endif
