/* repack_gpu.cu - the built-in loaders' whole-layer GPU paths
 * (load_layer_device in <wstream/loader.h>); their CPU twins are in
 * repack_cpu.c and define the bytes.
 *
 * "trtllm-bf16" is one gather pass from staging into live memory. Output
 * block (e, kb, n) is 128 contiguous bytes (64 bf16) taken from source row
 * sigma(n) at column 64*kb (REFIT_LAYOUTS.md section 3). A CUDA block of
 * 256 threads owns one shuffle block of 32 output rows in KB_PER_BLOCK
 * consecutive K planes: 8 threads move one 128-byte block with 16-byte
 * accesses, so a warp reads four whole 128-byte lines and writes 512
 * contiguous bytes; each thread issues all its loads before its stores.
 *
 *   grid.x: 32-row tiles of M   grid.y: K planes / KB_PER_BLOCK   grid.z:
 * expert
 *
 * Buffers that are not 16-byte aligned take the same kernel with 2-byte
 * accesses (correct, slower). "checkpoint" is two strided unpacks
 * (pack.h) and a copy.
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

extern "C" {
#include "dtype.h"
#include "pack.h"
#include "repack.h"
#include "repack_gpu.h"
}
#include "cuda_status.h"

#define SHUFFLE_ROWS 32u
#define BLOCK_BYTES 128u /* one K block: 64 bf16 */
#define THREADS 256u
#define KB_PER_BLOCK 4u

__host__ __device__ static inline uint32_t sigma(uint32_t n)
{
    return 32u * (n / 32u) + 4u * (n % 8u) + (n % 32u) / 8u;
}

/* T is the access unit: uint4 (16 bytes) or uint16_t. a/b as in the CPU
 * twin: source row q is a[q] when b is NULL, else a[q >> 1] for even q and
 * b[q >> 1] for odd q. Strides are in units of T. */
template <typename T>
__global__ void __launch_bounds__(THREADS)
    trtllm_gather(T *__restrict__ dst, const T *__restrict__ a,
                  const T *__restrict__ b, uint32_t m, uint32_t nkb,
                  uint64_t src_expert, uint64_t dst_expert)
{
    constexpr uint32_t units = BLOCK_BYTES / sizeof(T); /* per 128 B */
    constexpr uint32_t rows_per_pass = THREADS / units;
    const uint32_t j = threadIdx.x % units;
    const uint64_t row_units = (uint64_t)nkb * units; /* one source row */
    const uint32_t e = blockIdx.z;
    const uint32_t kb0 = blockIdx.y * KB_PER_BLOCK;
    const uint32_t kbn = min(KB_PER_BLOCK, nkb - kb0);

    a += e * src_expert;
    if (b != nullptr)
        b += e * src_expert;
    dst += e * dst_expert;
    for (uint32_t r = threadIdx.x / units; r < SHUFFLE_ROWS;
         r += rows_per_pass) {
        const uint32_t n = blockIdx.x * SHUFFLE_ROWS + r;
        const uint32_t q = sigma(n);
        const T *src = b == nullptr ? a + (uint64_t)q * row_units
                       : (q & 1u)   ? b + (uint64_t)(q >> 1) * row_units
                                    : a + (uint64_t)(q >> 1) * row_units;
        T v[KB_PER_BLOCK];

        src += (uint64_t)kb0 * units + j;
#pragma unroll
        for (uint32_t i = 0; i < KB_PER_BLOCK; i++)
            if (i < kbn)
                v[i] = __ldg(src + (uint64_t)i * units);
        T *out = dst + ((uint64_t)kb0 * m + n) * units + j;
#pragma unroll
        for (uint32_t i = 0; i < KB_PER_BLOCK; i++)
            if (i < kbn)
                out[(uint64_t)i * m * units] = v[i];
    }
}

/* A CUDA status as the loader's status, with the call and CUDA's message
 * in 'err' (loaders report through err, not a logger). */
static wst_status_t cuda_ok(cudaError_t e, const char *call, char *err,
                            size_t errlen)
{
    if (e != cudaSuccess && err != NULL && errlen > 0)
        snprintf(err, errlen, "%s: %s", call, cudaGetErrorString(e));
    return wst_cuda_status(e, NULL, call);
}

/* wst_gpu_unpack with the loader's way of reporting. */
static wst_status_t unpack(void *dst, const void *src,
                           const struct wst_strided *rows, cudaStream_t s,
                           const char *what, char *err, size_t errlen)
{
    wst_status_t st = wst_gpu_unpack(NULL, dst, src, rows, s);

    if (st != WST_OK && err != NULL && errlen > 0)
        snprintf(err, errlen, "%s: %s", what, wst_status_string(st));
    return st;
}

static int aligned16(const void *p)
{
    return ((uintptr_t)p & 15u) == 0;
}

/* One [L, K/64, M, 64] layout from L experts of M rows of K bf16. */
static wst_status_t gather(void *dst, const void *a, const void *b,
                           uint32_t n_local, uint32_t m, uint32_t k,
                           cudaStream_t stream, const char *what, char *err,
                           size_t errlen)
{
    const uint32_t nkb = k / 64u;
    const uint64_t expert_bytes = (uint64_t)m * k * 2u;
    dim3 grid(m / SHUFFLE_ROWS, (nkb + KB_PER_BLOCK - 1) / KB_PER_BLOCK,
              n_local);

    if (aligned16(dst) && aligned16(a) && (b == NULL || aligned16(b))) {
        trtllm_gather<uint4><<<grid, THREADS, 0, stream>>>(
            (uint4 *)dst, (const uint4 *)a, (const uint4 *)b, m, nkb,
            expert_bytes / (b != NULL ? 2u : 1u) / 16u, expert_bytes / 16u);
    } else {
        trtllm_gather<uint16_t><<<grid, THREADS, 0, stream>>>(
            (uint16_t *)dst, (const uint16_t *)a, (const uint16_t *)b, m, nkb,
            expert_bytes / (b != NULL ? 2u : 1u) / 2u, expert_bytes / 2u);
    }
    return cuda_ok(cudaGetLastError(), what, err, errlen);
}

/* What both loaders check before enqueuing anything: no NULL pointer, and
 * a shape the loader's own check accepts (its message goes to err). */
static wst_status_t args_ok(const struct wst_repack_loader *self,
                            const struct wst_expert_shape *shape,
                            const void *gate, const void *up, const void *down,
                            const void *w13, const void *w2, char *err,
                            size_t errlen)
{
    if (shape == NULL || gate == NULL || up == NULL || down == NULL ||
        w13 == NULL || w2 == NULL)
        return WST_ERR_INVALID;
    return self->check(shape, err, errlen);
}

wst_status_t wst_gpu_repack_trtllm_bf16(const struct wst_repack_loader *self,
                                        const struct wst_expert_shape *shape,
                                        const void *gate, const void *up,
                                        const void *down, void *w13, void *w2,
                                        void *stream, char *err, size_t errlen)
{
    cudaStream_t s = (cudaStream_t)stream;
    wst_status_t st;

    st = args_ok(self, shape, gate, up, down, w13, w2, err, errlen);
    if (st != WST_OK)
        return st;
    /* The interleave puts up at even rows and gate at odd ones. */
    st = gather(w13, up, gate, shape->n_local, 2u * shape->inter, shape->hidden,
                s, "trtllm_gather(w13)", err, errlen);
    if (st == WST_OK)
        st = gather(w2, down, NULL, shape->n_local, shape->hidden, shape->inter,
                    s, "trtllm_gather(w2)", err, errlen);
    return st;
}

wst_status_t wst_gpu_repack_checkpoint(const struct wst_repack_loader *self,
                                       const struct wst_expert_shape *shape,
                                       const void *gate, const void *up,
                                       const void *down, void *w13, void *w2,
                                       void *stream, char *err, size_t errlen)
{
    cudaStream_t s = (cudaStream_t)stream;
    size_t proj; /* one expert's [I, H] */
    wst_status_t st;

    st = args_ok(self, shape, gate, up, down, w13, w2, err, errlen);
    if (st != WST_OK)
        return st;
    proj = (size_t)shape->inter * shape->hidden * wst_dtype_size(shape->dtype);
    /* w13[e] = [gate_e; up_e]: gate and up each unpacked into every other
     * projection-sized run of w13 (the pack kernel: 16-byte accesses, ~85%
     * of copy speed where cudaMemcpy2DAsync reached ~46%); w2 is the staged
     * down as it is. */
    struct wst_strided rows;
    memset(&rows, 0, sizeof(rows));
    rows.ndim = 1;
    rows.run_bytes = proj;
    rows.count[0] = shape->n_local;
    rows.stride[0] = 2 * proj;
    st = unpack(w13, gate, &rows, s, "unpack(gate)", err, errlen);
    if (st == WST_OK)
        st =
            unpack((char *)w13 + proj, up, &rows, s, "unpack(up)", err, errlen);
    if (st == WST_OK)
        st = cuda_ok(cudaMemcpyAsync(w2, down, proj * shape->n_local,
                                     cudaMemcpyDeviceToDevice, s),
                     "cudaMemcpyAsync(down)", err, errlen);
    return st;
}
