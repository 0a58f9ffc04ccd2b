/* check_pack.c - GPU pack and unpack (kernels/pack.h) against the CPU twins,
 * and their speed.
 *
 * For each box: a random tensor (gcheck_fill_random) on the host and the
 * device; the GPU packs it into a poisoned dense buffer, compared byte for
 * byte (with a poisoned guard after it) with the CPU twin's; then the GPU
 * unpacks that into a poisoned tensor, which must equal a poisoned host
 * tensor the CPU twin unpacked into: the box's bytes back, every byte
 * outside it still poison. Some cases shift the device pointers by a few
 * bytes to take the kernel's narrow-word paths.
 *
 * Every device write a kernel depends on (the tensor, the poison) is a copy
 * enqueued on the check's stream before it. wst_gpu_memset and wst_gpu_copy
 * run on the legacy default stream, which the check's non-blocking stream
 * never waits for, and cudaMemset of device memory (like a pageable
 * host-to-device cudaMemcpy) returns before the bytes land: the poison
 * could then overwrite a finished pack or unpack, or the kernel read the
 * tensor before it arrived.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_check.h"
#include "pack.h"

#define GUARD 256          /* poisoned bytes checked after each output */
#define MAX_SHIFT 16       /* room for the misaligning shifts */
#define N_RANDOM_BOXES 200 /* random boxes in one check line */

struct pack_case {
    const char *name;
    uint32_t ndim;
    uint64_t shape[WST_PACK_MAX_DIMS];
    uint64_t start[WST_PACK_MAX_DIMS];
    uint64_t extent[WST_PACK_MAX_DIMS];
    size_t elem_size;
    size_t tensor_shift; /* bytes added to the device tensor's base */
    size_t dense_shift;  /* bytes added to the device dense buffer */
};

/* Host and device buffers of one case; the device ones have MAX_SHIFT +
 * GUARD bytes of room. */
struct pack_bufs {
    uint64_t tensor_bytes, dense_bytes, offset;
    struct wst_strided s;
    unsigned char *x;      /* the random tensor */
    unsigned char *want;   /* CPU twin's output (dense, then tensor) */
    unsigned char *got;    /* GPU output copied back */
    unsigned char *dense;  /* CPU twin's packed bytes */
    unsigned char *poison; /* GCHECK_POISON, the size of either device buffer */
    unsigned char *d_tensor, *d_dense;
};

static void bufs_free(struct pack_bufs *b)
{
    free(b->x);
    free(b->want);
    free(b->got);
    free(b->dense);
    free(b->poison);
    wst_gpu_free(b->d_tensor);
    wst_gpu_free(b->d_dense);
    memset(b, 0, sizeof(*b));
}

static wst_status_t bufs_alloc(struct gcheck *g, const struct pack_case *c,
                               struct pack_bufs *b)
{
    size_t big, poison;
    wst_status_t st;

    memset(b, 0, sizeof(*b));
    st = wst_strided_from_box(c->ndim, c->shape, c->start, c->extent,
                              c->elem_size, &b->s, &b->offset);
    if (st == WST_OK) {
        st = wst_strided_check(&b->s, &b->dense_bytes, NULL);
    }
    if (st != WST_OK) {
        return st;
    }
    b->tensor_bytes = c->elem_size;
    for (uint32_t d = 0; d < c->ndim; d++) {
        b->tensor_bytes *= c->shape[d];
    }
    big = b->tensor_bytes + GUARD;
    b->x = malloc(b->tensor_bytes);
    b->want = malloc(big);
    b->got = malloc(big);
    b->dense = malloc(b->dense_bytes + GUARD);
    poison =
        (b->dense_bytes > b->tensor_bytes ? b->dense_bytes : b->tensor_bytes) +
        GUARD + MAX_SHIFT;
    b->poison = malloc(poison);
    if (b->x == NULL || b->want == NULL || b->got == NULL || b->dense == NULL ||
        b->poison == NULL) {
        return WST_ERR_NO_MEMORY;
    }
    memset(b->poison, GCHECK_POISON, poison);
    st = wst_gpu_malloc(g->log, big + MAX_SHIFT, (void **)&b->d_tensor);
    if (st == WST_OK) {
        st = wst_gpu_malloc(g->log, b->dense_bytes + GUARD + MAX_SHIFT,
                            (void **)&b->d_dense);
    }
    return st;
}

/* Index of the first differing byte, or -1. */
static long long first_diff(const unsigned char *a, const unsigned char *b,
                            size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (a[i] != b[i]) {
            return (long long)i;
        }
    }
    return -1;
}

static wst_status_t gpu_pack(struct gcheck *g, const struct pack_case *c,
                             struct pack_bufs *b)
{
    unsigned char *dd = b->d_dense + c->dense_shift;
    unsigned char *dt = b->d_tensor + c->tensor_shift;
    wst_status_t st;

    st = wst_gpu_copy_async(g->log, b->d_dense, b->poison,
                            b->dense_bytes + GUARD + MAX_SHIFT, g->stream);
    if (st == WST_OK) {
        st = wst_gpu_pack(g->log, dd, dt + b->offset, &b->s, g->stream);
    }
    if (st == WST_OK) {
        st = wst_gpu_stream_sync(g->log, g->stream);
    }
    if (st == WST_OK) {
        st = wst_gpu_copy(g->log, b->got, dd, b->dense_bytes + GUARD);
    }
    return st;
}

static wst_status_t gpu_unpack(struct gcheck *g, const struct pack_case *c,
                               struct pack_bufs *b)
{
    unsigned char *dd = b->d_dense + c->dense_shift;
    unsigned char *dt = b->d_tensor + c->tensor_shift;
    wst_status_t st;

    st = wst_gpu_copy_async(g->log, b->d_tensor, b->poison,
                            b->tensor_bytes + GUARD + MAX_SHIFT, g->stream);
    if (st == WST_OK) {
        st = wst_gpu_unpack(g->log, dt + b->offset, dd, &b->s, g->stream);
    }
    if (st == WST_OK) {
        st = wst_gpu_stream_sync(g->log, g->stream);
    }
    if (st == WST_OK) {
        st = wst_gpu_copy(g->log, b->got, dt, b->tensor_bytes + GUARD);
    }
    return st;
}

/* Runs one case; *pack_diff_p and *unpack_diff_p get the first differing
 * byte (-1: none). The dense buffer the GPU unpacks is its own pack's
 * output, already checked. */
static wst_status_t run_case(struct gcheck *g, const struct pack_case *c,
                             struct pack_bufs *b, long long *pack_diff_p,
                             long long *unpack_diff_p)
{
    wst_status_t st;

    gcheck_fill_random(g, b->x, b->tensor_bytes);
    st = wst_gpu_copy_async(g->log, b->d_tensor + c->tensor_shift, b->x,
                            b->tensor_bytes, g->stream);
    if (st == WST_OK) {
        st = gpu_pack(g, c, b);
    }
    if (st != WST_OK) {
        return st;
    }
    memset(b->dense, GCHECK_POISON, b->dense_bytes + GUARD);
    wst_pack_cpu(b->dense, b->x + b->offset, &b->s);
    *pack_diff_p = first_diff(b->got, b->dense, b->dense_bytes + GUARD);

    st = gpu_unpack(g, c, b);
    if (st != WST_OK) {
        return st;
    }
    memset(b->want, GCHECK_POISON, b->tensor_bytes + GUARD);
    wst_unpack_cpu(b->want + b->offset, b->dense, &b->s);
    *unpack_diff_p = first_diff(b->got, b->want, b->tensor_bytes + GUARD);
    return WST_OK;
}

static void check_case(struct gcheck *g, const struct pack_case *c)
{
    struct pack_bufs b;
    long long pd = -1, ud = -1;
    char name[160];
    wst_status_t st;

    st = bufs_alloc(g, c, &b);
    if (st == WST_OK) {
        st = run_case(g, c, &b, &pd, &ud);
    }
    if (st != WST_OK) {
        snprintf(name, sizeof(name), "pack %s", c->name);
        gcheck_result(g, 0, name, "status %s", wst_status_name(st));
        bufs_free(&b);
        return;
    }
    snprintf(name, sizeof(name), "pack %s", c->name);
    gcheck_result(g, pd < 0, name,
                  "%u loops, %llu B runs, %.1f MB; first bad dense byte %lld",
                  b.s.ndim, (unsigned long long)b.s.run_bytes,
                  (double)b.dense_bytes / 1e6, pd);
    snprintf(name, sizeof(name), "unpack %s", c->name);
    gcheck_result(g, ud < 0, name,
                  "box back, the rest untouched; first bad tensor byte %lld",
                  ud);
    bufs_free(&b);
}

/* A random box of at most 2^18 elements: rank 1..8, dimensions up to 40,
 * extents whole, 1 or between, element sizes 1..16, shifted bases. */
static void random_case(struct gcheck *g, struct pack_case *c)
{
    static const size_t sizes[] = {1, 2, 3, 4, 6, 8, 16};
    uint64_t budget = 1u << 18;

    memset(c, 0, sizeof(*c));
    c->name = "random";
    c->ndim = 1 + (uint32_t)(gcheck_rand(g) % WST_PACK_MAX_DIMS);
    c->elem_size = sizes[gcheck_rand(g) % (sizeof(sizes) / sizeof(sizes[0]))];
    for (uint32_t d = 0; d < c->ndim; d++) {
        uint64_t cap = budget < 40 ? budget : 40; /* budget >= 1 */

        c->shape[d] = 1 + gcheck_rand(g) % cap;
        budget /= c->shape[d];
        switch (gcheck_rand(g) % 3) {
        case 0:
            c->extent[d] = c->shape[d];
            break;
        case 1:
            c->extent[d] = 1;
            break;
        default:
            c->extent[d] = 1 + gcheck_rand(g) % c->shape[d];
        }
        c->start[d] = gcheck_rand(g) % (c->shape[d] - c->extent[d] + 1);
    }
    /* Half the cases aligned, so the wide words are taken too. */
    if (gcheck_rand(g) % 2) {
        c->tensor_shift = gcheck_rand(g) % MAX_SHIFT;
        c->dense_shift = gcheck_rand(g) % MAX_SHIFT;
    }
}

static void check_random(struct gcheck *g)
{
    int bad = 0;
    char first[200] = "none";

    for (int i = 0; i < N_RANDOM_BOXES; i++) {
        struct pack_case c;
        struct pack_bufs b;
        long long pd = -1, ud = -1;
        wst_status_t st;

        random_case(g, &c);
        st = bufs_alloc(g, &c, &b);
        if (st == WST_OK) {
            st = run_case(g, &c, &b, &pd, &ud);
        }
        if ((st != WST_OK || pd >= 0 || ud >= 0) && bad++ == 0) {
            snprintf(first, sizeof(first),
                     "#%d: rank %u, %zu B elements, shifts %zu/%zu, %u "
                     "loops, run %llu B: status %s, bytes %lld/%lld",
                     i, c.ndim, c.elem_size, c.tensor_shift, c.dense_shift,
                     b.s.ndim, (unsigned long long)b.s.run_bytes,
                     wst_status_name(st), pd, ud);
        }
        bufs_free(&b);
    }
    gcheck_result(g, bad == 0, "pack+unpack random boxes",
                  "%d of %d wrong; first: %s", bad, N_RANDOM_BOXES, first);
}

void check_pack(struct gcheck *g)
{
    static const struct pack_case cases[] = {
        {"tp8 rank 3 of the last dim of bf16 [4096, 14336]",
         2,
         {4096, 14336},
         {0, 3 * 1792},
         {4096, 1792},
         2,
         0,
         0},
        {"dim-1 rows 32..48 of f32 [64, 128, 512]",
         3,
         {64, 128, 512},
         {0, 32, 0},
         {64, 16, 512},
         4,
         0,
         0},
        {"1-byte runs: column 17 of u8 [1024, 4097]",
         2,
         {1024, 4097},
         {0, 17},
         {1024, 1},
         1,
         0,
         0},
        {"6-byte runs of bf16 [300, 7, 11], dense +2 B",
         3,
         {300, 7, 11},
         {1, 2, 4},
         {298, 3, 3},
         2,
         0,
         2},
        {"256-byte runs of f32 [257, 96] at odd bases (+1 B, +3 B)",
         2,
         {257, 96},
         {0, 8},
         {257, 64},
         4,
         1,
         3},
        {"3-byte elements [50, 40, 30] box [5:45, 3:30, 7:29]",
         3,
         {50, 40, 30},
         {5, 3, 7},
         {40, 27, 22},
         3,
         0,
         0},
        {"long runs in chunks: f16 [5, 40000] cols 5..39995, +2 B",
         2,
         {5, 40000},
         {0, 5},
         {5, 39990},
         2,
         2,
         2},
        {"3 loops: f32 [6, 5, 7, 9, 16] box [1:5, 1:4, 2:6, 0:9, 3:11]",
         5,
         {6, 5, 7, 9, 16},
         {1, 1, 2, 0, 3},
         {4, 3, 4, 9, 8},
         4,
         0,
         0},
        {"8-d u16 [3, 4, 3, 4, 3, 4, 3, 4] box of 2s",
         8,
         {3, 4, 3, 4, 3, 4, 3, 4},
         {1, 1, 0, 2, 1, 0, 1, 1},
         {2, 2, 2, 2, 2, 2, 2, 2},
         2,
         0,
         0},
        {"Qwen3-30B-A3B experts 16..32 of bf16 [128, 768, 2048]",
         3,
         {128, 768, 2048},
         {16, 0, 0},
         {16, 768, 2048},
         2,
         0,
         0},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        check_case(g, &cases[i]);
    }
    check_random(g);
}

/* ---- benchmarks --------------------------------------------------------- */

struct pack_bench {
    const struct wst_logger *log;
    struct wst_strided s;
    unsigned char *strided; /* the box origin in the device tensor */
    unsigned char *dense;
    int unpack;
};

static int run_bench(void *arg, wst_gpu_stream_t stream)
{
    struct pack_bench *pb = arg;
    wst_status_t st;

    if (pb->unpack) {
        st = wst_gpu_unpack(pb->log, pb->strided, pb->dense, &pb->s, stream);
    } else {
        st = wst_gpu_pack(pb->log, pb->dense, pb->strided, &pb->s, stream);
    }
    return st != WST_OK;
}

/* Pack and unpack of box 'c' (about 1 GiB) of a tensor of constant bytes:
 * the speed does not depend on the values. */
static void bench_case(struct gcheck *g, const struct pack_case *c,
                       double copy_gbs)
{
    struct pack_bench pb = {.log = g->log};
    unsigned char *d_tensor = NULL;
    uint64_t offset, dense_bytes, tensor_bytes = c->elem_size;
    char name[160];

    for (uint32_t d = 0; d < c->ndim; d++) {
        tensor_bytes *= c->shape[d];
    }
    if (wst_strided_from_box(c->ndim, c->shape, c->start, c->extent,
                             c->elem_size, &pb.s, &offset) != WST_OK ||
        wst_strided_check(&pb.s, &dense_bytes, NULL) != WST_OK ||
        wst_gpu_malloc(g->log, tensor_bytes, (void **)&d_tensor) != WST_OK ||
        wst_gpu_malloc(g->log, dense_bytes, (void **)&pb.dense) != WST_OK ||
        wst_gpu_memset(g->log, d_tensor, 0x5A, tensor_bytes) != WST_OK ||
        wst_gpu_memset(g->log, pb.dense, 0x5A, dense_bytes) != WST_OK) {
        gcheck_result(g, 0, c->name, "benchmark set-up failed");
        goto out;
    }
    pb.strided = d_tensor + offset;
    for (pb.unpack = 0; pb.unpack < 2; pb.unpack++) {
        double ms = gbench_median_ms(g, run_bench, &pb, 3, 10);

        snprintf(name, sizeof(name), "%s %s", pb.unpack ? "unpack" : "pack",
                 c->name);
        if (ms <= 0) {
            gcheck_result(g, 0, name, "benchmark run failed");
            continue;
        }
        /* Bytes read + written: the box, once each way. */
        gbench_row(name, 2.0 * (double)dense_bytes, ms, copy_gbs);
    }
out:
    wst_gpu_free(d_tensor);
    wst_gpu_free(pb.dense);
}

void bench_pack(struct gcheck *g, double copy_gbs)
{
    static const struct pack_case cases[] = {
        {"1 GiB, 256 B runs (bf16 [4M, 256] cols 0..128)",
         2,
         {4194304, 256},
         {0, 0},
         {4194304, 128},
         2,
         0,
         0},
        {"1 GiB, 4096 B runs (bf16 [256K, 4096] cols 2048..)",
         2,
         {262144, 4096},
         {0, 2048},
         {262144, 2048},
         2,
         0,
         0},
        {"1 GiB, one run (bf16 [2, 512M] row 1)",
         2,
         {2, 536870912},
         {1, 0},
         {1, 536870912},
         2,
         0,
         0},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        bench_case(g, &cases[i], copy_gbs);
    }
}
