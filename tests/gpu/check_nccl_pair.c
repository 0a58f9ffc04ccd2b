/* check_nccl_pair.c - the ceiling of an NCCL refit between two GPUs: bare
 * ncclSend (GPU 0) / ncclRecv (GPU 1) of the same bytes, in one process
 * with two blocking communicators (ncclCommInitAll). tests/gpu/run.sh puts
 * the NCCL refit's GB/s from a sender on GPU 0 to an agent on GPU 1 next
 * to it, with the refit's shape: its bytes, cut into the same number of
 * groups (one per layer, as the NCCL mover posts them) of runs of about its
 * items' size. The bytes are checked once, bit-exact, so the rows time a
 * transfer that happened.
 * Needs two GPUs; with one it prints a SKIP line (not a failure: the
 * one-GPU kind cannot run it, and run.sh says which kind does).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu_check.h"
#include "gpu_probe.h"
#ifdef WST_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>
#endif

#define PAIR_BYTES (1ull << 30)
#define PAIR_SMALL (4ull << 20)
#define PAIR_MAX_BYTES (64ull << 30)

#ifdef WST_HAVE_NCCL
struct pair {
    ncclComm_t comms[2];
    cudaStream_t streams[2];
    unsigned char *buf[2]; /* device 0: source; device 1: destination */
};

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* GPU 0 sends 'bytes' to GPU 1 as 'groups' grouped exchanges, one after
 * the other (as the mover posts layers), each cut into runs of at most
 * 'run' bytes. */
static int pair_send(struct pair *p, uint64_t bytes, uint64_t run,
                     uint64_t groups)
{
    uint64_t per_group = (bytes + groups - 1) / groups;

    for (uint64_t g0 = 0; g0 < bytes; g0 += per_group) {
        uint64_t g1 = g0 + per_group < bytes ? g0 + per_group : bytes;
        if (ncclGroupStart() != ncclSuccess)
            return -1;
        for (uint64_t off = g0; off < g1; off += run) {
            uint64_t n = g1 - off < run ? g1 - off : run;
            if (ncclSend(p->buf[0] + off, n, ncclUint8, 1, p->comms[0],
                         p->streams[0]) != ncclSuccess ||
                ncclRecv(p->buf[1] + off, n, ncclUint8, 0, p->comms[1],
                         p->streams[1]) != ncclSuccess) {
                ncclGroupEnd();
                return -1;
            }
        }
        if (ncclGroupEnd() != ncclSuccess)
            return -1;
    }
    for (int i = 0; i < 2; i++)
        if (cudaSetDevice(i) != cudaSuccess ||
            cudaStreamSynchronize(p->streams[i]) != cudaSuccess)
            return -1;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pair_median_ms(struct pair *p, uint64_t bytes, uint64_t run,
                             uint64_t groups, int reps)
{
    double t[32];

    for (int i = 0; i < 3; i++)
        if (pair_send(p, bytes, run, groups) != 0)
            return -1;
    for (int i = 0; i < reps; i++) {
        double t0 = now_ms();
        if (pair_send(p, bytes, run, groups) != 0)
            return -1;
        t[i] = now_ms() - t0;
    }
    qsort(t, (size_t)reps, sizeof(t[0]), cmp_double);
    return t[reps / 2];
}

void bench_nccl_pair(struct gcheck *g, uint64_t bytes, uint64_t run,
                     uint64_t groups)
{
    struct pair p = {0};
    int devs[2] = {0, 1}, n = 0;
    char why[256] = "", name[96];
    unsigned char *host = NULL, *back = NULL;
    int shaped = bytes != 0;

    if (!shaped) {
        bytes = PAIR_BYTES;
        run = PAIR_SMALL;
        groups = 1;
    }
    if (bytes > PAIR_MAX_BYTES || run == 0 || groups == 0 || groups > bytes) {
        gcheck_result(g, 0, "nccl between two GPUs",
                      "bad shape: %llu bytes, runs of %llu, %llu groups",
                      (unsigned long long)bytes, (unsigned long long)run,
                      (unsigned long long)groups);
        return;
    }
    if (wst_kernels_device_count(&n, why, sizeof(why)) != WST_OK || n < 2) {
        printf("SKIP nccl between two GPUs: %d GPU visible\n", n);
        return;
    }
    host = malloc(bytes);
    back = malloc(bytes);
    int ok = host != NULL && back != NULL &&
             ncclCommInitAll(p.comms, 2, devs) == ncclSuccess;
    for (int i = 0; ok && i < 2; i++)
        ok = cudaSetDevice(i) == cudaSuccess &&
             cudaStreamCreateWithFlags(&p.streams[i], cudaStreamNonBlocking) ==
                 cudaSuccess &&
             cudaMalloc((void **)&p.buf[i], bytes) == cudaSuccess;
    if (ok) {
        gcheck_fill_random(g, host, bytes);
        ok = cudaSetDevice(0) == cudaSuccess &&
             cudaMemcpy(p.buf[0], host, bytes, cudaMemcpyHostToDevice) ==
                 cudaSuccess &&
             cudaSetDevice(1) == cudaSuccess &&
             cudaMemset(p.buf[1], GCHECK_POISON, bytes) == cudaSuccess &&
             cudaDeviceSynchronize() == cudaSuccess &&
             pair_send(&p, bytes, run, groups) == 0 &&
             cudaSetDevice(1) == cudaSuccess &&
             cudaMemcpy(back, p.buf[1], bytes, cudaMemcpyDeviceToHost) ==
                 cudaSuccess;
    }
    int same = ok && memcmp(host, back, bytes) == 0;
    gcheck_result(g, same, "nccl bare GPU 0 -> GPU 1",
                  "%.1f MB in %llu groups of runs of %.2f MiB: %s", bytes / 1e6,
                  (unsigned long long)groups, run / 1048576.0,
                  !ok    ? "set-up or transfer failed"
                  : same ? "bit-exact"
                         : "bytes differ");
    if (same && !shaped) {
        double ms = pair_median_ms(&p, bytes, bytes, 1, 10);
        if (ms > 0)
            gbench_row("nccl bare GPU 0 -> GPU 1, 1 GiB, 1 run", (double)bytes,
                       ms, 0);
    }
    if (same) {
        double ms = pair_median_ms(&p, bytes, run, groups, 10);
        if (shaped)
            snprintf(name, sizeof(name),
                     "nccl bare GPU 0 -> GPU 1, %.0f MB, %llu groups, "
                     "%.2f MiB runs",
                     bytes / 1e6, (unsigned long long)groups, run / 1048576.0);
        else
            snprintf(name, sizeof(name),
                     "nccl bare GPU 0 -> GPU 1, 1 GiB, 4 MiB runs");
        if (ms > 0)
            gbench_row(name, (double)bytes, ms, 0);
    }
    for (int i = 0; i < 2; i++) {
        if (p.comms[i] != NULL)
            ncclCommDestroy(p.comms[i]);
        cudaSetDevice(i);
        if (p.buf[i] != NULL)
            cudaFree(p.buf[i]);
        if (p.streams[i] != NULL)
            cudaStreamDestroy(p.streams[i]);
    }
    cudaSetDevice(0);
    free(host);
    free(back);
}
#else
void bench_nccl_pair(struct gcheck *g, uint64_t bytes, uint64_t run,
                     uint64_t groups)
{
    (void)bytes;
    (void)run;
    (void)groups;
    gcheck_result(g, 0, "nccl between two GPUs", "SKIP: built without NCCL");
}
#endif
