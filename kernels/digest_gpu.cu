/* digest_gpu.cu - the integrity digest of device memory (digest_gpu.h).
 *
 * Every WST_DIGEST_CHUNK chunk of every run is hashed by a group of four
 * threads, one per XXH3 accumulator lane pair (xxh3.h explains why pairs are
 * independent), so a warp hashes eight chunks side by side and each thread
 * reads 16 bytes of every 64-byte stripe:
 *
 *     chunk c:   stripe 0 | t0 t1 t2 t3 |  stripe 1 | t0 t1 t2 t3 | ...
 *                            16B each        scramble after 16 stripes
 *
 * At the end the four merge shares meet through two shuffles and thread 0
 * of the group adds the chunk hash into one 64-bit device word with an
 * atomic (the digest's sum is order-free). Chunks of at most 240 bytes (a
 * run's short tail, or a short run) are hashed by the group's thread 0
 * alone with the scalar code. Chunk starts that are 16-byte aligned (every
 * chunk of a 16-byte aligned run) use 16-byte loads; others assemble the
 * same words from aligned 8-byte loads, so no read leaves the aligned words
 * that hold the run's bytes.
 *
 * Chunks are numbered across all runs; the host stages the runs table with
 * each run's first chunk number, and a group finds its run by binary search.
 * The sum goes back to a pinned host word in stream order; collect reads it.
 */
#include <cuda_runtime.h>
#include <stdlib.h>

extern "C" {
#include "digest_gpu.h"
}
#include "cuda_status.h"
#include "xxh3.h"

#define DG_THREADS 256
#define DG_GROUP 4               /* threads per chunk: one per lane pair */
#define DG_MAX_BLOCKS (1u << 20) /* grid-stride beyond this */

/* A run as the kernel sees it. */
struct dg_run {
    const unsigned char *data;
    uint64_t length;
    uint64_t pos;
    uint64_t first; /* number of the run's first chunk among all runs' */
};

struct wst_gpu_digest {
    const struct wst_logger *log;
    int device;
    uint32_t max_runs;
    struct dg_run *host_runs; /* pinned staging of the table */
    struct dg_run *dev_runs;
    unsigned long long *dev_sum;
    unsigned long long *host_sum; /* pinned; written in stream order */
};

__constant__ uint64_t dg_ksecret[WST_XXH3_SECRET_WORDS] = WST_XXH3_KSECRET_INIT;

/* ---- device ----------------------------------------------------------- */

/* The run holding chunk c: the last run whose first chunk is <= c. An
 * empty run has the same first chunk as the run after it, so the last one
 * that qualifies is never empty. runs[0].first is 0. */
__device__ static uint32_t dg_find_run(const struct dg_run *runs, uint32_t n,
                                       uint64_t c)
{
    uint32_t lo = 0, hi = n - 1;

    while (lo < hi) {
        uint32_t mid = lo + (hi - lo + 1) / 2;

        if (runs[mid].first <= c)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* Lane pair t's part of hashing a chunk of more than 240 bytes; every
 * thread of the group returns the hash. 'mask' names the group's lanes. */
__device__ static uint64_t dg_hash_long(const unsigned char *p, size_t len,
                                        uint64_t seed, unsigned t,
                                        unsigned mask, const uint64_t *ks)
{
    unsigned long long share;
    uint64_t a0, a1;

    /* Two instances, so the aligned one has no per-load alignment test. */
    if (((uintptr_t)p & 15u) == 0)
        wst_xxh3_long_pair(p, len, 1, t, ks, seed, &a0, &a1);
    else
        wst_xxh3_long_pair(p, len, 0, t, ks, seed, &a0, &a1);
    share = wst_xxh3_merge_pair(a0, a1, t, ks, seed);
    share += __shfl_xor_sync(mask, share, 1);
    share += __shfl_xor_sync(mask, share, 2);
    return wst_xxh3_merge_final(share, len);
}

/* The hash of chunk c as thread t of its group sees it: valid in t == 0. */
__device__ static uint64_t dg_hash_chunk(const struct dg_run *runs, uint32_t n,
                                         uint64_t c, unsigned t, unsigned mask,
                                         const uint64_t *ks)
{
    const struct dg_run *r = &runs[dg_find_run(runs, n, c)];
    uint64_t off = (c - r->first) * WST_DIGEST_CHUNK;
    uint64_t left = r->length - off;
    size_t len = left < WST_DIGEST_CHUNK ? (size_t)left : WST_DIGEST_CHUNK;
    const unsigned char *p = r->data + off;
    uint64_t seed = r->pos + off;

    if (len > WST_XXH3_MIDSIZE_MAX)
        return dg_hash_long(p, len, seed, t, mask, ks);
    return t == 0 ? wst_xxh3_64_short(p, len, ks, seed) : 0;
}

/* Groups of DG_GROUP threads walk the chunks grid-stride; all threads of a
 * group always hold the same chunk, so they meet at the shuffles. */
static __global__ void __launch_bounds__(DG_THREADS)
    dg_kernel(const struct dg_run *runs, uint32_t n, uint64_t chunks,
              unsigned long long *sum)
{
    __shared__ uint64_t ks[WST_XXH3_SECRET_WORDS];
    unsigned t = threadIdx.x % DG_GROUP;
    unsigned mask = 0xfu << ((threadIdx.x % 32) & ~(DG_GROUP - 1u));
    uint64_t c = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) / DG_GROUP;
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x / DG_GROUP;

    if (threadIdx.x < WST_XXH3_SECRET_WORDS)
        ks[threadIdx.x] = dg_ksecret[threadIdx.x];
    __syncthreads();
    for (; c < chunks; c += stride) {
        uint64_t h = dg_hash_chunk(runs, n, c, t, mask, ks);

        if (t == 0)
            atomicAdd(sum, (unsigned long long)h);
    }
}

/* ---- host ------------------------------------------------------------- */

extern "C" wst_status_t wst_gpu_digest_create(const struct wst_logger *log,
                                              uint32_t max_runs,
                                              struct wst_gpu_digest **dg_p)
{
    size_t table =
        (size_t)(max_runs > 0 ? max_runs : 1) * sizeof(struct dg_run);
    struct wst_gpu_digest *dg;
    wst_status_t status;

    dg = (struct wst_gpu_digest *)calloc(1, sizeof(*dg));
    if (dg == NULL)
        return WST_ERR_NO_MEMORY;
    dg->log = log;
    dg->max_runs = max_runs;
    status = wst_cuda_status(cudaGetDevice(&dg->device), log,
                             "gpu digest: cudaGetDevice");
    if (status != WST_OK)
        goto err_destroy;
    status = wst_cuda_status(cudaMalloc((void **)&dg->dev_runs, table), log,
                             "gpu digest: cudaMalloc(runs table)");
    if (status != WST_OK)
        goto err_destroy;
    status = wst_cuda_status(cudaMalloc((void **)&dg->dev_sum, 8), log,
                             "gpu digest: cudaMalloc(sum)");
    if (status != WST_OK)
        goto err_destroy;
    status = wst_cuda_status(
        cudaHostAlloc((void **)&dg->host_runs, table, cudaHostAllocPortable),
        log, "gpu digest: cudaHostAlloc(runs table)");
    if (status != WST_OK)
        goto err_destroy;
    status = wst_cuda_status(
        cudaHostAlloc((void **)&dg->host_sum, 8, cudaHostAllocPortable), log,
        "gpu digest: cudaHostAlloc(sum)");
    if (status != WST_OK)
        goto err_destroy;
    *dg->host_sum = 0;
    *dg_p = dg;
    return WST_OK;

err_destroy:
    wst_gpu_digest_destroy(dg); /* frees what was allocated, skips NULLs */
    return status;
}

extern "C" void wst_gpu_digest_destroy(struct wst_gpu_digest *dg)
{
    const struct wst_logger *log;

    if (dg == NULL)
        return;
    /* Failures here leave nothing to undo; wst_cuda_status logs them. */
    log = dg->log;
    if (dg->dev_runs != NULL || dg->dev_sum != NULL)
        wst_cuda_status(cudaSetDevice(dg->device), log,
                        "gpu digest: cudaSetDevice");
    if (dg->host_sum != NULL)
        wst_cuda_status(cudaFreeHost(dg->host_sum), log,
                        "gpu digest: cudaFreeHost(sum)");
    if (dg->host_runs != NULL)
        wst_cuda_status(cudaFreeHost(dg->host_runs), log,
                        "gpu digest: cudaFreeHost(runs table)");
    if (dg->dev_sum != NULL)
        wst_cuda_status(cudaFree(dg->dev_sum), log,
                        "gpu digest: cudaFree(sum)");
    if (dg->dev_runs != NULL)
        wst_cuda_status(cudaFree(dg->dev_runs), log,
                        "gpu digest: cudaFree(runs table)");
    free(dg);
}

/* Copies runs[0..n) into the pinned table with their first chunk numbers;
 * *chunks_p is the total. A run with bytes but no pointer is refused. */
static wst_status_t dg_stage(struct wst_gpu_digest *dg,
                             const struct wst_digest_run *runs, uint32_t n,
                             uint64_t *chunks_p)
{
    uint64_t chunks = 0;
    uint32_t i;

    for (i = 0; i < n; i++) {
        if (runs[i].length > 0 && runs[i].data == NULL) {
            WST_ERROR(dg->log, "gpu digest: run %u of %u: %llu bytes at NULL",
                      i, n, (unsigned long long)runs[i].length);
            return WST_ERR_INVALID;
        }
        dg->host_runs[i].data = (const unsigned char *)runs[i].data;
        dg->host_runs[i].length = runs[i].length;
        dg->host_runs[i].pos = runs[i].pos;
        dg->host_runs[i].first = chunks;
        chunks += (runs[i].length + WST_DIGEST_CHUNK - 1) / WST_DIGEST_CHUNK;
    }
    *chunks_p = chunks;
    return WST_OK;
}

/* Copies the table in and launches; the caller has zeroed the sum. */
static wst_status_t dg_launch(struct wst_gpu_digest *dg, uint32_t n,
                              uint64_t chunks, cudaStream_t stream)
{
    uint64_t blocks = (chunks * DG_GROUP + DG_THREADS - 1) / DG_THREADS;
    wst_status_t status;

    status = wst_cuda_status(cudaMemcpyAsync(dg->dev_runs, dg->host_runs,
                                             n * sizeof(struct dg_run),
                                             cudaMemcpyHostToDevice, stream),
                             dg->log, "gpu digest: cudaMemcpyAsync(runs)");
    if (status != WST_OK)
        return status;
    if (blocks > DG_MAX_BLOCKS)
        blocks = DG_MAX_BLOCKS;
    dg_kernel<<<(unsigned)blocks, DG_THREADS, 0, stream>>>(dg->dev_runs, n,
                                                           chunks, dg->dev_sum);
    return wst_cuda_launched(dg->log, "gpu digest: dg_kernel launch");
}

/* The pinned table and sum word are reused by the next enqueue, which the
 * header's contract orders after this one's collect. */
extern "C" wst_status_t
wst_gpu_digest_enqueue(struct wst_gpu_digest *dg,
                       const struct wst_digest_run *runs, uint32_t n,
                       wst_gpu_stream_t stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    uint64_t chunks;
    wst_status_t status;

    if (dg == NULL || (n > 0 && runs == NULL))
        return WST_ERR_INVALID;
    if (n > dg->max_runs) {
        WST_ERROR(dg->log, "gpu digest: %u runs, context holds %u", n,
                  dg->max_runs);
        return WST_ERR_INVALID;
    }
    status = dg_stage(dg, runs, n, &chunks);
    if (status != WST_OK)
        return status;
    status = wst_cuda_status(cudaSetDevice(dg->device), dg->log,
                             "gpu digest: cudaSetDevice");
    if (status != WST_OK)
        return status;
    status = wst_cuda_status(cudaMemsetAsync(dg->dev_sum, 0, 8, s), dg->log,
                             "gpu digest: cudaMemsetAsync(sum)");
    if (status != WST_OK)
        return status;
    if (chunks > 0) {
        status = dg_launch(dg, n, chunks, s);
        if (status != WST_OK)
            return status;
    }
    return wst_cuda_status(cudaMemcpyAsync(dg->host_sum, dg->dev_sum, 8,
                                           cudaMemcpyDeviceToHost, s),
                           dg->log, "gpu digest: cudaMemcpyAsync(sum)");
}

/* After the enqueued work is complete: adds the chunk-hash sum into
 * d->sum. The caller sets d->pos (the total byte count) itself. */
static void digest_collect(const struct wst_gpu_digest *dg,
                           struct wst_digest *d)
{
    /* volatile: the word was written by a DMA the compiler cannot see. */
    d->sum += *(volatile const unsigned long long *)dg->host_sum;
}

extern "C" wst_status_t wst_gpu_digest_runs(struct wst_gpu_digest *dg,
                                            const struct wst_digest_run *runs,
                                            uint32_t n, wst_gpu_stream_t stream,
                                            struct wst_digest *d)
{
    wst_status_t status = wst_gpu_digest_enqueue(dg, runs, n, stream);

    if (status != WST_OK)
        return status;
    status = wst_cuda_status(cudaStreamSynchronize((cudaStream_t)stream),
                             dg->log, "gpu digest: cudaStreamSynchronize");
    if (status != WST_OK)
        return status;
    digest_collect(dg, d);
    return WST_OK;
}
