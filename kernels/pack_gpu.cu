/* pack_gpu.cu - the GPU half of pack.h: strided gather (pack) and scatter
 * (unpack) kernels.
 *
 * Both directions are one kernel that copies pieces of runs from a source
 * side to a destination side; only the strides given to each side differ.
 *
 *  - Words. Every access is one word: the widest of 16, 8, 4, 2 and 1 bytes
 *    that divides run_bytes, every stride that is used and both base
 *    addresses, so a bf16 TP slice moves in 16-byte vectors and an odd
 *    layout still works, one byte at a time.
 *  - Items. Runs are cut into chunks of at most PACK_CHUNK_WORDS words, so that
 *    a box that is one 48 MiB run still spreads over every SM. An item is
 *    one chunk of one position; items are numbered row-major over the
 *    mixed radix (count[0], ..., count[n-1], chunks), and an item's digits
 *    give both of its byte offsets as sum(digit * stride) on each side.
 *  - Teams. A team of T threads (a power of two up to the block) moves one
 *    item, T large enough that each lane has at most 4 words of it: four
 *    independent loads in flight per lane, and the per-item index math
 *    spread over up to four words. A block of 256 threads moves 64 runs of
 *    256 B at once (teams of 4), or 4 runs of 4 KiB, or one 16 KiB chunk.
 *
 *        block  | team 0 | team 1 | ... |     (PACK_BLOCK threads)
 *        item   |  i     |  i+1   | ... |  then i + step, grid-stride
 *
 * Index math: a team divides its first item number into digits once (64-bit
 * divisions, dozens of instructions each) and from then on adds the digits
 * of the grid stride, computed once on the host, with carries: a few adds
 * and compares per item, none per word. Digits are right-aligned in fixed
 * arrays and the loops over them are unrolled, so they live in registers;
 * boxes of up to two dimensions (most of them) get a kernel that touches
 * only the three innermost digits.
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

extern "C" {
#include "pack.h"
}
#include "cuda_status.h"

#define PACK_BLOCK 256u
#define PACK_CHUNK_WORDS 1024u /* a full block, PACK_LANE_WORDS per lane */
#define PACK_LANE_WORDS 4u     /* loads in flight per lane in copy_words */
#define PACK_DIGITS (WST_PACK_MAX_DIMS + 1) /* the dims and the chunk */
#define PACK_SMALL_DIGITS 3                 /* up to 2 dims and the chunk */
#define PACK_MAX_WORD 16

/* Everything a launch needs, passed by value (kernel parameters). Digit
 * PACK_DIGITS - 1 is the chunk; the dims sit right before it, outermost
 * first; unused outer digits have radix 1 and strides 0. */
struct pack_plan {
    uint64_t radix[PACK_DIGITS];
    uint64_t src_stride[PACK_DIGITS]; /* bytes */
    uint64_t dst_stride[PACK_DIGITS]; /* bytes */
    uint64_t step[PACK_DIGITS]; /* step_items in digits; top one unbounded */
    uint64_t items;             /* positions times chunks per run */
    uint64_t step_items;        /* teams in the grid */
    uint64_t run_words;
    uint32_t chunk_words;
    uint32_t team_shift; /* T = 1 << team_shift */
};

/* ---- device ------------------------------------------------------------- */

/* a[] = the digits of 'item'; the outermost digit takes what is left, so
 * it may exceed its radix exactly when item >= items. */
template <int NDIG>
__device__ __forceinline__ void first_digits(uint64_t *a, uint64_t item,
                                             const struct pack_plan &p)
{
    const int lo = PACK_DIGITS - NDIG;

#pragma unroll
    for (int d = PACK_DIGITS - 1; d > lo; d--) {
        a[d] = item % p.radix[d];
        item /= p.radix[d];
    }
    a[lo] = item;
}

/* a[] += p.step[], digit by digit from the innermost. Each digit below the
 * top is < its radix, and so is its step digit, so the sum is below twice
 * the radix and one subtraction brings it back, carrying 1. */
template <int NDIG>
__device__ __forceinline__ void next_digits(uint64_t *a,
                                            const struct pack_plan &p)
{
    const int lo = PACK_DIGITS - NDIG;
    uint64_t carry = 0;

#pragma unroll
    for (int d = PACK_DIGITS - 1; d > lo; d--) {
        uint64_t v = a[d] + p.step[d] + carry;

        carry = v >= p.radix[d];
        a[d] = carry ? v - p.radix[d] : v;
    }
    a[lo] += p.step[lo] + carry;
}

/* A team's lanes copy words [0, n) of one item, four loads in flight per
 * lane before their stores (PACK_LANE_WORDS). The two sides never overlap
 * (pack.h). */
template <typename W>
__device__ __forceinline__ void
copy_words(W *__restrict__ dst, const W *__restrict__ src, uint32_t n,
           uint32_t lane, uint32_t t)
{
    uint32_t w = lane;

    for (; w + 3 * t < n; w += 4 * t) {
        W v0 = src[w];
        W v1 = src[w + t];
        W v2 = src[w + 2 * t];
        W v3 = src[w + 3 * t];

        dst[w] = v0;
        dst[w + t] = v1;
        dst[w + 2 * t] = v2;
        dst[w + 3 * t] = v3;
    }
    for (; w < n; w += t) {
        dst[w] = src[w];
    }
}

template <typename W, int NDIG>
__global__ void __launch_bounds__(PACK_BLOCK)
    move_kernel(unsigned char *__restrict__ dst,
                const unsigned char *__restrict__ src, const struct pack_plan p)
{
    const int lo = PACK_DIGITS - NDIG;
    const uint32_t t = 1u << p.team_shift;
    const uint32_t lane = threadIdx.x & (t - 1);
    uint64_t item =
        ((uint64_t)blockIdx.x * PACK_BLOCK + threadIdx.x) >> p.team_shift;
    uint64_t a[PACK_DIGITS];

    first_digits<NDIG>(a, item, p);
    for (; item < p.items; item += p.step_items) {
        uint64_t src_off = 0, dst_off = 0;
        uint64_t left;

#pragma unroll
        for (int d = lo; d < PACK_DIGITS; d++) {
            src_off += a[d] * p.src_stride[d];
            dst_off += a[d] * p.dst_stride[d];
        }
        /* The last chunk of a run may be short. */
        left = p.run_words - a[PACK_DIGITS - 1] * p.chunk_words;
        copy_words<W>((W *)(dst + dst_off), (const W *)(src + src_off),
                      left < p.chunk_words ? (uint32_t)left : p.chunk_words,
                      lane, t);
        next_digits<NDIG>(a, p);
    }
}

/* ---- host --------------------------------------------------------------- */

/* The widest word that divides every byte quantity the kernel adds to a
 * base address: one OR, since the sizes are powers of two. */
static uint32_t word_bytes(const struct wst_strided *s, const void *a,
                           const void *b)
{
    uint64_t bits = s->run_bytes | (uintptr_t)a | (uintptr_t)b;

    for (uint32_t d = 0; d < s->ndim; d++) {
        if (s->count[d] > 1) {
            bits |= s->stride[d];
        }
    }
    for (uint32_t w = PACK_MAX_WORD; w > 1; w /= 2) {
        if (bits % w == 0) {
            return w;
        }
    }
    return 1;
}

/* Digits (radixes and strides) of the items of 's' moved in words of
 * 'word' bytes; 'pack' says whether the strided side is the source. */
static void plan_digits(const struct wst_strided *s, uint32_t word, int pack,
                        struct pack_plan *p)
{
    const uint32_t first = PACK_DIGITS - 1 - s->ndim; /* dim 0's digit */
    uint64_t *strided = pack ? p->src_stride : p->dst_stride;
    uint64_t *dense = pack ? p->dst_stride : p->src_stride;
    uint64_t dense_step = s->run_bytes;
    const uint32_t c = PACK_DIGITS - 1;

    p->run_words = s->run_bytes / word;
    p->chunk_words = p->run_words < PACK_CHUNK_WORDS ? (uint32_t)p->run_words
                                                     : PACK_CHUNK_WORDS;
    p->radix[c] = (p->run_words + p->chunk_words - 1) / p->chunk_words;
    strided[c] = (uint64_t)p->chunk_words * word;
    dense[c] = (uint64_t)p->chunk_words * word;
    p->items = p->radix[c];
    for (uint32_t d = s->ndim; d-- > 0;) {
        p->radix[first + d] = s->count[d];
        strided[first + d] = s->stride[d];
        dense[first + d] = dense_step;
        dense_step *= s->count[d];
        p->items *= s->count[d];
    }
    for (uint32_t d = 0; d < first; d++) {
        p->radix[d] = 1;
        strided[d] = 0;
        dense[d] = 0;
    }
}

/* Team size, grid, and the grid stride's digits for a kernel that uses the
 * innermost 'ndig' digits. */
static uint32_t plan_grid(struct pack_plan *p, int ndig, int sms)
{
    const uint32_t max_blocks = (uint32_t)sms * (2048 / PACK_BLOCK);
    uint64_t teams_per_block, blocks, t;

    p->team_shift = 0;
    while ((PACK_LANE_WORDS << p->team_shift) < p->chunk_words &&
           (1u << p->team_shift) < PACK_BLOCK) {
        p->team_shift++;
    }
    teams_per_block = PACK_BLOCK >> p->team_shift;
    blocks = (p->items + teams_per_block - 1) / teams_per_block;
    if (blocks > max_blocks) {
        blocks = max_blocks; /* one resident wave; the rest grid-strides */
    }
    p->step_items = blocks * teams_per_block;
    t = p->step_items;
    for (int d = PACK_DIGITS - 1; d > PACK_DIGITS - ndig; d--) {
        p->step[d] = t % p->radix[d];
        t /= p->radix[d];
    }
    p->step[PACK_DIGITS - ndig] = t;
    return (uint32_t)blocks;
}

template <typename W>
static void launch_word(uint32_t blocks, int ndig, cudaStream_t stream,
                        unsigned char *dst, const unsigned char *src,
                        const struct pack_plan &p)
{
    if (ndig == PACK_SMALL_DIGITS) {
        move_kernel<W, PACK_SMALL_DIGITS>
            <<<blocks, PACK_BLOCK, 0, stream>>>(dst, src, p);
    } else {
        move_kernel<W, PACK_DIGITS>
            <<<blocks, PACK_BLOCK, 0, stream>>>(dst, src, p);
    }
}

static void launch(uint32_t word, uint32_t blocks, int ndig,
                   cudaStream_t stream, unsigned char *dst,
                   const unsigned char *src, const struct pack_plan &p)
{
    switch (word) {
    case 16:
        launch_word<uint4>(blocks, ndig, stream, dst, src, p);
        break;
    case 8:
        launch_word<uint2>(blocks, ndig, stream, dst, src, p);
        break;
    case 4:
        launch_word<uint32_t>(blocks, ndig, stream, dst, src, p);
        break;
    case 2:
        launch_word<uint16_t>(blocks, ndig, stream, dst, src, p);
        break;
    default:
        launch_word<uint8_t>(blocks, ndig, stream, dst, src, p);
        break;
    }
}

/* Makes current the device that owns the strided side, else the dense
 * side; with neither in device memory (mapped pinned host memory) the
 * current device runs it. */
static wst_status_t follow(const struct wst_logger *log, const void *strided,
                           const void *dense)
{
    int device;

    if (wst_gpu_mem_type(strided, &device) == WST_MEM_CUDA ||
        wst_gpu_mem_type(dense, &device) == WST_MEM_CUDA) {
        return wst_gpu_set_device(log, device);
    }
    return WST_OK;
}

static wst_status_t sm_count(const struct wst_logger *log, int *sms_p)
{
    int device;
    wst_status_t status;

    status = wst_cuda_status(cudaGetDevice(&device), log, "cudaGetDevice");
    if (status != WST_OK) {
        return status;
    }
    return wst_cuda_status(
        cudaDeviceGetAttribute(sms_p, cudaDevAttrMultiProcessorCount, device),
        log, "cudaDeviceGetAttribute");
}

/* Pack (strided -> dense) or unpack (dense -> strided). */
static wst_status_t move(const struct wst_logger *log, const char *name,
                         void *dst, const void *src,
                         const struct wst_strided *s, int pack,
                         wst_gpu_stream_t stream)
{
    const void *strided = pack ? src : dst;
    const void *dense = pack ? dst : src;
    struct pack_plan p;
    uint32_t word, blocks;
    int sms, ndig;
    wst_status_t status;

    if (dst == NULL || src == NULL ||
        wst_strided_check(s, NULL, NULL) != WST_OK) {
        WST_ERROR(log, "%s: null buffer or bad strided description", name);
        return WST_ERR_INVALID;
    }
    status = follow(log, strided, dense);
    if (status != WST_OK) {
        return status;
    }
    status = sm_count(log, &sms);
    if (status != WST_OK) {
        return status;
    }
    word = word_bytes(s, strided, dense);
    ndig = s->ndim + 1 <= PACK_SMALL_DIGITS ? PACK_SMALL_DIGITS : PACK_DIGITS;
    memset(&p, 0, sizeof(p));
    plan_digits(s, word, pack, &p);
    blocks = plan_grid(&p, ndig, sms);
    launch(word, blocks, ndig, (cudaStream_t)stream, (unsigned char *)dst,
           (const unsigned char *)src, p);
    return wst_cuda_launched(log, name);
}

extern "C" wst_status_t wst_gpu_pack(const struct wst_logger *log, void *dense,
                                     const void *strided,
                                     const struct wst_strided *s,
                                     wst_gpu_stream_t stream)
{
    return move(log, "wst_gpu_pack", dense, strided, s, 1, stream);
}

extern "C" wst_status_t wst_gpu_unpack(const struct wst_logger *log,
                                       void *strided, const void *dense,
                                       const struct wst_strided *s,
                                       wst_gpu_stream_t stream)
{
    return move(log, "wst_gpu_unpack", strided, dense, s, 0, stream);
}
