/* gpu_check.h - the small harness shared by the GPU checks and benchmarks
 * (tests/gpu/): results, random fills, timing with CUDA events.
 *
 * Checks print one line each, "PASS name: detail" or "FAIL name: detail",
 * and count failures; the program exits nonzero if any failed. Benchmarks
 * add rows to a table printed last. Inputs are random (never zeros) and
 * outputs are poisoned before every run.
 */
#ifndef WST_GPU_CHECK_H
#define WST_GPU_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "gpu.h"
#include "log.h"

struct gcheck {
    const struct wst_logger *log;
    uint64_t rng; /* xorshift state */
    int checks;
    int failures;
    wst_gpu_stream_t stream; /* for the kernels under test */
};

/* Records one check; prints PASS/FAIL with the formatted detail. */
void gcheck_result(struct gcheck *g, int ok, const char *name, const char *fmt,
                   ...) __attribute__((format(printf, 4, 5)));

/* Random bytes (xorshift64*), never all zero. */
void gcheck_fill_random(struct gcheck *g, void *buf, size_t len);
uint64_t gcheck_rand(struct gcheck *g);

/* The poison byte outputs are filled with before a kernel runs. */
#define GCHECK_POISON 0xA5

/* Benchmarks: 'fn' enqueues one run on 'stream'; timed with events over
 * 'reps' repeats after 'warmup' runs; returns the median milliseconds, or a
 * negative value on a CUDA error. */
typedef int (*gbench_fn)(void *arg, wst_gpu_stream_t stream);
double gbench_median_ms(struct gcheck *g, gbench_fn fn, void *arg, int warmup,
                        int reps);

/* One cudaMemcpyAsync of 'bytes' from src to dst, as a gbench_fn (arg: a
 * struct gbench_copy): the copy ceilings' benchmark. */
struct gbench_copy {
    void *dst;
    const void *src;
    size_t bytes;
};
int gbench_copy_run(void *arg, wst_gpu_stream_t stream);

/* A row of the final table: what, bytes moved (read + written), median ms,
 * and the ceiling it is compared with (GB/s, 0 for none). */
void gbench_row(const char *name, double bytes, double ms, double ceiling_gbs);
void gbench_print_table(void);

/* The checks and benchmarks each file provides; each returns after
 * recording its results in 'g'. */
void check_repack(struct gcheck *g);
void check_digest(struct gcheck *g);
void check_pack(struct gcheck *g);
/* The NCCL mover on one rank; a build without NCCL fails it loudly. */
void check_nccl(struct gcheck *g);
/* The NCCL mover's link (thread, events, completions on a progress
 * thread) with one rank exchanging with itself. */
void check_nccl_link(struct gcheck *g);
/* copy_gbs: device-to-device copy GB/s (read + written) measured in the
 * same run, the ceiling each kernel is reported against. */
void bench_repack(struct gcheck *g, double copy_gbs);
void bench_digest(struct gcheck *g, double copy_gbs);
void bench_pack(struct gcheck *g, double copy_gbs);
void bench_nccl(struct gcheck *g, double copy_gbs);
/* The bounce path's stages alone: pinned copies each way, whole and in
 * bounce-slot chunks. */
void bench_pinned(struct gcheck *g);
/* Bare ncclSend/ncclRecv from GPU 0 to GPU 1 (skips with one GPU): 'bytes'
 * as 'groups' grouped exchanges of runs of at most 'run' bytes; bytes 0:
 * 1 GiB as one run and as 4 MiB runs. */
void bench_nccl_pair(struct gcheck *g, uint64_t bytes, uint64_t run,
                     uint64_t groups);
/* The whole --ipc-copy BYTES run (check_ipc_copy.c): forks the owner of
 * the buffer before this process touches CUDA; the exit status. */
int ipc_copy_main(size_t bytes);

#endif
