/* check_main.c - wst-gpu-check: every kernel against its CPU twin on the
 * GPU, then (with --bench) the benchmarks and their table.
 * wst-gpu-check --nccl-pair BYTES RUN GROUPS: only the bare two-GPU NCCL
 * row, shaped like a refit (tests/gpu/run.sh gives it the refit's shape).
 *
 * Exit status: 0 when every check passed, 1 when one failed, 77 (skip)
 * when there is no usable device, said loudly. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"
#include "gpu_check.h"
#include "gpu_probe.h"

/* Device-to-device copy GB/s (read + written): every kernel's ceiling. */
static double bench_copy(struct gcheck *g)
{
    const size_t bytes = 2ull << 30;
    struct gbench_copy c = {.bytes = bytes};
    double ms = -1;

    if (wst_gpu_malloc(g->log, bytes, &c.dst) == WST_OK &&
        wst_gpu_malloc(g->log, bytes, (void **)&c.src) == WST_OK &&
        wst_gpu_memset(g->log, (void *)c.src, 0x5a, bytes) == WST_OK)
        ms = gbench_median_ms(g, gbench_copy_run, &c, 3, 20);
    wst_gpu_free(c.dst);
    wst_gpu_free((void *)c.src);
    if (ms <= 0)
        return 0;
    gbench_row("device-to-device copy 2 GiB (ceiling)", 2.0 * bytes, ms, 0);
    return 2.0 * bytes / (ms * 1e6);
}

int main(int argc, char **argv)
{
    struct wst_logger log;
    struct gcheck g = {.log = &log, .rng = 0x9E3779B97F4A7C15ull};
    int bench = argc > 1 && strcmp(argv[1], "--bench") == 0;
    int pair = argc == 5 && strcmp(argv[1], "--nccl-pair") == 0;
    int copy_only = argc == 2 && strcmp(argv[1], "--copy") == 0;
    char why[256] = "", name[128] = "";
    int n = 0;

    /* Forks first: before this process touches CUDA. */
    if (argc == 3 && strcmp(argv[1], "--ipc-copy") == 0)
        return ipc_copy_main(strtoull(argv[2], NULL, 0));
    wst_logger_init(&log, "gpu-check", WST_LOG_INFO);
    if (wst_kernels_device_count(&n, why, sizeof(why)) != WST_OK) {
        fprintf(stderr, "SKIP wst-gpu-check: no usable CUDA device: %s\n", why);
        return 77;
    }
    if (wst_gpu_set_device(&log, 0) != WST_OK ||
        wst_gpu_device_name(&log, 0, name, sizeof(name)) != WST_OK ||
        wst_gpu_stream_create(&log, &g.stream) != WST_OK)
        return 1;
    printf("device 0: %s (%d visible)\n", name, n);
    if (pair) {
        bench_nccl_pair(&g, strtoull(argv[2], NULL, 0),
                        strtoull(argv[3], NULL, 0), strtoull(argv[4], NULL, 0));
        gbench_print_table();
        wst_gpu_stream_destroy(g.stream);
        return g.failures == 0 ? 0 : 1;
    }
    if (copy_only) {
        /* The direct path's ceilings on this GPU, in seconds of device
         * time: the copy, and the digest every layer gets on both sides. */
        double copy_gbs = bench_copy(&g);
        bench_digest(&g, copy_gbs);
        gbench_print_table();
        wst_gpu_stream_destroy(g.stream);
        return copy_gbs > 0 ? 0 : 1;
    }
    check_repack(&g);
    check_digest(&g);
    check_pack(&g);
    check_nccl(&g);
    check_nccl_link(&g);
    printf("%d checks, %d failed\n", g.checks, g.failures);
    if (bench) {
        double copy_gbs = bench_copy(&g);
        bench_repack(&g, copy_gbs);
        bench_digest(&g, copy_gbs);
        bench_pack(&g, copy_gbs);
        bench_nccl(&g, copy_gbs);
        bench_pinned(&g);
        bench_nccl_pair(&g, 0, 0, 0);
        gbench_print_table();
    }
    wst_gpu_stream_destroy(g.stream);
    return g.failures == 0 ? 0 : 1;
}
