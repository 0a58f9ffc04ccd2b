/* check_ipc_copy.c - wst-gpu-check --ipc-copy BYTES: the copy between two
 * processes' device buffers through CUDA IPC, the ceiling a direct refit
 * on one GPU is compared with (tests/gpu/run.sh section 7). The refit's
 * sender and agent are two processes; a device-to-device copy inside one
 * process is not the same operation (the importer reaches the owner's
 * memory through its IPC mapping).
 *
 * The owner (a child forked before either process touches CUDA, as the
 * demo's agents are) allocates BYTES, exports the handle through a pipe
 * and waits. The importer (this process) maps it, times cudaMemcpyAsync
 * from its own buffer into the mapping and back (CUDA events, median of
 * 20 after 3 warm-ups), then tells the owner, which checks that the bytes
 * it holds are the importer's pattern: its exit status is one more check.
 *
 * Rows count bytes read + written, as the device-to-device copy's row
 * does (the refit's table halves both).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpu.h"
#include "gpu_check.h"
#include "gpu_probe.h"

#define OWNER_FILL 0x3c
#define IMPORTER_FILL 0x5a
#define PROBE 4096 /* bytes the owner checks at each end of its buffer */

static int write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int read_all(int fd, void *buf, size_t len)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = read(fd, p, len);
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Whether the first and last PROBE bytes of 'dev' are all 'byte'. */
static int ends_hold(const struct wst_logger *log, const void *dev,
                     size_t bytes, int byte)
{
    unsigned char host[PROBE];
    size_t n = bytes < PROBE ? bytes : PROBE;

    for (int end = 0; end < 2; end++) {
        const char *at = (const char *)dev + (end ? bytes - n : 0);
        if (wst_gpu_copy(log, host, at, n) != WST_OK)
            return 0;
        for (size_t i = 0; i < n; i++)
            if (host[i] != byte)
                return 0;
    }
    return 1;
}

/* The child: owns the buffer. Exit 0 when the importer's bytes landed,
 * 77 without a usable GPU. */
static int owner(const struct wst_logger *log, size_t bytes, int to_parent,
                 int from_parent)
{
    unsigned char handle[WST_GPU_IPC_HANDLE_BYTES] = {0};
    void *buf = NULL;
    char go, why[256] = "";
    int ok = 0, n = 0;

    if (wst_kernels_device_count(&n, why, sizeof(why)) != WST_OK || n < 1) {
        fprintf(stderr,
                "SKIP wst-gpu-check --ipc-copy: no usable CUDA "
                "device: %s\n",
                why);
        (void)write_all(to_parent, handle, sizeof(handle));
        return 77;
    }
    if (wst_gpu_set_device(log, 0) == WST_OK &&
        wst_gpu_malloc(log, bytes, &buf) == WST_OK &&
        wst_gpu_memset(log, buf, OWNER_FILL, bytes) == WST_OK &&
        wst_gpu_ipc_export(log, buf, handle) == WST_OK)
        ok = 1;
    /* An all-zero handle tells the importer the export failed. */
    if (!ok)
        memset(handle, 0, sizeof(handle));
    if (write_all(to_parent, handle, sizeof(handle)) != 0)
        ok = 0;
    if (read_all(from_parent, &go, 1) != 0)
        ok = 0;
    if (ok)
        ok = ends_hold(log, buf, bytes, IMPORTER_FILL);
    wst_gpu_free(buf);
    return ok ? 0 : 1;
}

static int all_zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != 0)
            return 0;
    return 1;
}

int ipc_copy_main(size_t bytes)
{
    struct wst_logger log;
    struct gcheck g = {.log = &log};
    unsigned char handle[WST_GPU_IPC_HANDLE_BYTES];
    int up[2], down[2], status = 0;
    void *mine = NULL, *theirs = NULL;
    pid_t pid;

    wst_logger_init(&log, "gpu-ipc-copy", WST_LOG_INFO);
    signal(SIGPIPE, SIG_IGN); /* an owner that died is its exit status */
    if (bytes == 0 || pipe(up) != 0 || pipe(down) != 0) {
        fprintf(stderr, "wst-gpu-check --ipc-copy: bad size or no pipe\n");
        return 1;
    }
    /* Before this process touches CUDA: a forked child may not inherit a
     * CUDA context. */
    pid = fork();
    if (pid < 0)
        return 1;
    if (pid == 0) {
        close(up[0]);
        close(down[1]);
        _exit(owner(&log, bytes, up[1], down[0]));
    }
    close(up[1]);
    close(down[0]);
    int got = read_all(up[0], handle, sizeof(handle)) == 0 &&
              !all_zero(handle, sizeof(handle));
    if (!got && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
        WEXITSTATUS(status) == 77)
        return 77; /* no GPU: the owner said so */
    if (!got || wst_gpu_set_device(&log, 0) != WST_OK ||
        wst_gpu_stream_create(&log, &g.stream) != WST_OK ||
        wst_gpu_ipc_import(&log, 0, handle, &theirs) != WST_OK ||
        wst_gpu_malloc(&log, bytes, &mine) != WST_OK ||
        wst_gpu_memset(&log, mine, IMPORTER_FILL, bytes) != WST_OK) {
        gcheck_result(&g, 0, "ipc copy set-up", "%s",
                      got ? "importing or allocating failed"
                          : "the owner could not export its buffer");
        goto out_release;
    }
    /* Into the other process's memory first: the owner checks those
     * bytes, so the copy back (which overwrites 'mine' with the same
     * pattern) leaves them as they are. */
    struct gbench_copy in = {.dst = theirs, .src = mine, .bytes = bytes};
    struct gbench_copy back = {.dst = mine, .src = theirs, .bytes = bytes};
    char what[96];
    double ms = gbench_median_ms(&g, gbench_copy_run, &in, 3, 20);
    snprintf(what, sizeof(what), "IPC copy %zu MiB, own -> other process's",
             bytes >> 20);
    if (ms > 0)
        gbench_row(what, 2.0 * (double)bytes, ms, 0);
    double ms_back = gbench_median_ms(&g, gbench_copy_run, &back, 3, 20);
    snprintf(what, sizeof(what), "IPC copy %zu MiB, other process's -> own",
             bytes >> 20);
    if (ms_back > 0)
        gbench_row(what, 2.0 * (double)bytes, ms_back, 0);
    gcheck_result(&g, ms > 0 && ms_back > 0, "ipc copy timed",
                  "%.3f ms in, %.3f ms back (medians of 20)", ms, ms_back);
    wst_gpu_stream_sync(&log, g.stream);
out_release:
    /* The owner checks its bytes, and frees them, only once the importer
     * is done with them. */
    if (theirs != NULL)
        wst_gpu_ipc_close(theirs);
    int told = write_all(down[1], "x", 1) == 0;
    close(down[1]);
    close(up[0]);
    if (waitpid(pid, &status, 0) != pid)
        status = -1;
    gcheck_result(
        &g,
        told && mine != NULL && WIFEXITED(status) && WEXITSTATUS(status) == 0,
        "ipc copy landed in the owner's memory", "owner exit status %d",
        WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    wst_gpu_free(mine);
    if (g.stream != NULL)
        wst_gpu_stream_destroy(g.stream);
    gbench_print_table();
    return g.failures == 0 ? 0 : 1;
}
