/* check_nccl_pair.c - the ceiling of an NCCL refit between two GPUs: bare
 * ncclSend (GPU 1) / ncclRecv (GPU 0) of the same bytes, in one process
 * with two blocking communicators (ncclCommInitAll). tests/gpu/run.sh puts
 * the NCCL refit's GB/s from GPU 1 to GPU 0 next to it. The bytes are
 * checked once, bit-exact, so the row times a transfer that happened.
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

#ifdef WST_HAVE_NCCL
struct pair {
    ncclComm_t comms[2];
    cudaStream_t streams[2];
    unsigned char *buf[2]; /* device 0: destination; device 1: source */
};

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* GPU 1 sends 'bytes' to GPU 0 in runs of 'run' bytes, one group. */
static int pair_send(struct pair *p, uint64_t bytes, uint64_t run)
{
    if (ncclGroupStart() != ncclSuccess)
        return -1;
    for (uint64_t off = 0; off < bytes; off += run) {
        if (ncclSend(p->buf[1] + off, run, ncclUint8, 0, p->comms[1],
                     p->streams[1]) != ncclSuccess ||
            ncclRecv(p->buf[0] + off, run, ncclUint8, 1, p->comms[0],
                     p->streams[0]) != ncclSuccess) {
            ncclGroupEnd();
            return -1;
        }
    }
    if (ncclGroupEnd() != ncclSuccess)
        return -1;
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

static double pair_median_ms(struct pair *p, uint64_t run, int reps)
{
    double t[32];

    for (int i = 0; i < 3; i++)
        if (pair_send(p, PAIR_BYTES, run) != 0)
            return -1;
    for (int i = 0; i < reps; i++) {
        double t0 = now_ms();
        if (pair_send(p, PAIR_BYTES, run) != 0)
            return -1;
        t[i] = now_ms() - t0;
    }
    qsort(t, (size_t)reps, sizeof(t[0]), cmp_double);
    return t[reps / 2];
}

void bench_nccl_pair(struct gcheck *g)
{
    struct pair p = {0};
    int devs[2] = {0, 1}, n = 0;
    char why[256] = "";
    unsigned char *host = NULL, *back = NULL;

    if (wst_kernels_device_count(&n, why, sizeof(why)) != WST_OK || n < 2) {
        printf("SKIP nccl between two GPUs: %d GPU visible\n", n);
        return;
    }
    host = malloc(PAIR_BYTES);
    back = malloc(PAIR_BYTES);
    int ok = host != NULL && back != NULL &&
             ncclCommInitAll(p.comms, 2, devs) == ncclSuccess;
    for (int i = 0; ok && i < 2; i++)
        ok = cudaSetDevice(i) == cudaSuccess &&
             cudaStreamCreateWithFlags(&p.streams[i], cudaStreamNonBlocking) ==
                 cudaSuccess &&
             cudaMalloc((void **)&p.buf[i], PAIR_BYTES) == cudaSuccess;
    if (ok) {
        gcheck_fill_random(g, host, PAIR_BYTES);
        ok = cudaSetDevice(1) == cudaSuccess &&
             cudaMemcpy(p.buf[1], host, PAIR_BYTES, cudaMemcpyHostToDevice) ==
                 cudaSuccess &&
             cudaSetDevice(0) == cudaSuccess &&
             cudaMemset(p.buf[0], GCHECK_POISON, PAIR_BYTES) == cudaSuccess &&
             cudaDeviceSynchronize() == cudaSuccess &&
             pair_send(&p, PAIR_BYTES, PAIR_SMALL) == 0 &&
             cudaSetDevice(0) == cudaSuccess &&
             cudaMemcpy(back, p.buf[0], PAIR_BYTES, cudaMemcpyDeviceToHost) ==
                 cudaSuccess;
    }
    int same = ok && memcmp(host, back, PAIR_BYTES) == 0;
    gcheck_result(g, same, "nccl bare GPU 1 -> GPU 0",
                  "1 GiB in 4 MiB runs: %s",
                  !ok    ? "set-up or transfer failed"
                  : same ? "bit-exact"
                         : "bytes differ");
    if (same) {
        double ms = pair_median_ms(&p, PAIR_BYTES, 10);
        if (ms > 0)
            gbench_row("nccl bare GPU 1 -> GPU 0, 1 GiB, 1 run",
                       (double)PAIR_BYTES, ms, 0);
        ms = pair_median_ms(&p, PAIR_SMALL, 10);
        if (ms > 0)
            gbench_row("nccl bare GPU 1 -> GPU 0, 1 GiB, 4 MiB runs",
                       (double)PAIR_BYTES, ms, 0);
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
void bench_nccl_pair(struct gcheck *g)
{
    gcheck_result(g, 0, "nccl between two GPUs", "SKIP: built without NCCL");
}
#endif
