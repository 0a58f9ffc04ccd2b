/* check_alloc_ipc.c - wst-gpu-alloc-ipc: a layout whose regions live in
 * several of this process's device allocations, each exported by its own
 * CUDA IPC handle, and one POSIX shm object ("allocations", layout_file.h),
 * as an engine with a caching allocator holds its weights. A real
 * wstream-agent imports every handle once and receives two refits from a
 * real sender; this process copies each allocation back and checks every
 * byte against the model's generator, the gaps between regions still
 * poison (tests/integration/alloc_spread.h).
 *
 * usage: wst-gpu-alloc-ipc PATH_TO_WSTREAM_AGENT
 *
 * Prints one PASS or FAIL line per check. Exit status: 0 when all passed,
 * 1 when one failed, 77 (skip, said on stderr) without a usable GPU.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "agent_fixture.h"
#include "alloc_spread.h"
#include "gpu.h"
#include "gpu_probe.h"
#include "log.h"
#include "shm.h"

#define N_DEVICE 3 /* allocations on GPU 0; one more is a shm object */
#define N_PARTS (N_DEVICE + 1)
#define DEVICE 0
/* cudaMalloc sizes are rounded up to this, as a caching allocator's
 * segments are: each allocation is a block of its own. */
#define SEGMENT (2u << 20)

/* What the edit below made (it cannot return an error: the agent's start,
 * or the first check, fails instead). */
static struct {
    struct wst_logger log;
    void *dev[N_DEVICE];
    uint64_t dev_bytes[N_DEVICE];
    char shm_name[64];
    void *shm;
    uint64_t shm_bytes;
    int ok;
} eng;

/* Device allocation k, poisoned (and the poison landed before the agent,
 * another process, can look), its handle into 'a'. */
static int make_device(size_t k, struct wst_layout_allocation *a)
{
    uint64_t bytes = (a->bytes + SEGMENT - 1) / SEGMENT * SEGMENT;

    if (wst_gpu_malloc(&eng.log, bytes, &eng.dev[k]) != WST_OK)
        return -1;
    eng.dev_bytes[k] = bytes;
    if (wst_gpu_memset(&eng.log, eng.dev[k], IT_POISON, bytes) != WST_OK ||
        wst_gpu_stream_sync(&eng.log, NULL) != WST_OK ||
        wst_gpu_ipc_export(&eng.log, eng.dev[k], a->cuda_ipc) != WST_OK)
        return -1;
    a->kind = WST_LAYOUT_ALLOC_CUDA_IPC;
    a->device = DEVICE;
    return 0;
}

/* it_agent_start_edited's edit: the regions over N_DEVICE device
 * allocations and one shm object, created here. */
static void spread_over_device(struct wst_layout *l)
{
    char err[256];

    if (it_spread(l, N_PARTS) != 0)
        return;
    for (size_t k = 0; k < N_DEVICE; k++)
        if (make_device(k, &l->allocations[k]) != 0)
            return;
    snprintf(eng.shm_name, sizeof(eng.shm_name), "/wst-gpu-alloc-%d",
             (int)getpid());
    eng.shm_bytes = l->allocations[N_DEVICE].bytes;
    if (wst_shm_create(eng.shm_name, eng.shm_bytes, &eng.shm, err,
                       sizeof(err)) != WST_OK) {
        fprintf(stderr, "wst-gpu-alloc-ipc: %s\n", err);
        eng.shm_name[0] = '\0';
        return;
    }
    snprintf(l->allocations[N_DEVICE].shm, sizeof(l->allocations[N_DEVICE].shm),
             "%s", eng.shm_name);
    eng.ok = 1;
}

static int result(int ok, const char *name, const char *detail)
{
    printf("%s alloc_ipc %s%s%s\n", ok ? "PASS" : "FAIL", name,
           detail[0] ? ": " : "", detail);
    fflush(stdout);
    return ok ? 0 : 1;
}

/* Every allocation as the engine sees it after a refit of 'version'. */
static int check_version(const struct wst_layout *l, uint64_t version)
{
    void *contents[N_PARTS] = {0};
    char name[64], err[512] = "";
    int ok = 1;

    for (size_t k = 0; k < N_DEVICE && ok; k++) {
        contents[k] = malloc(l->allocations[k].bytes);
        ok = contents[k] != NULL &&
             wst_gpu_copy(&eng.log, contents[k], eng.dev[k],
                          l->allocations[k].bytes) == WST_OK;
        if (!ok)
            snprintf(err, sizeof(err), "copying %s back failed",
                     l->allocations[k].name);
    }
    contents[N_DEVICE] = eng.shm;
    if (ok)
        ok = it_spread_check(l, (const void *const *)contents, IT_SEED, version,
                             IT_POISON, err, sizeof(err)) == 0;
    for (size_t k = 0; k < N_DEVICE; k++)
        free(contents[k]);
    snprintf(name, sizeof(name), "version %llu bit-exact",
             (unsigned long long)version);
    return result(ok, name, err);
}

/* CUDA's answer on exporting memory again: this process's own
 * allocations can be, host memory cannot, and the agent must find that
 * none of the device regions it mapped from here can (UCX's cuda_ipc would
 * fail to pack their keys; a CUDA-aware agent lands their messages in a
 * device ring instead). */
static int check_exportable(const struct it_agent *a)
{
    size_t n_dev = 0;
    char needle[128], detail[256];

    for (size_t i = 0; i < a->layout.n_regions; i++) {
        uint32_t k = a->layout.regions[i].allocation;
        n_dev += k >= 1 && k <= N_DEVICE;
    }
    snprintf(needle, sizeof(needle), "%zu device regions (", n_dev);
    int own = wst_gpu_ipc_exportable(eng.dev[0]);
    int host = wst_gpu_ipc_exportable(eng.shm);
    int says = it_agent_log_has(a, needle) &&
               it_agent_log_has(a, "cannot be exported by CUDA IPC");
    snprintf(detail, sizeof(detail),
             "own allocation %d (want 1), shm %d (want 0), the agent says "
             "its %zu device regions cannot be exported: %s",
             own, host, n_dev, says ? "yes" : "no");
    return result(own == 1 && host == 0 && n_dev > 0 && says, "exportable",
                  detail);
}

static void release_engine(void)
{
    for (size_t k = 0; k < N_DEVICE; k++)
        wst_gpu_free(eng.dev[k]);
    if (eng.shm != NULL)
        munmap(eng.shm, eng.shm_bytes);
    if (eng.shm_name[0] != '\0')
        shm_unlink(eng.shm_name);
}

int main(int argc, char **argv)
{
    struct it_agent a;
    char why[256] = "", detail[128];
    int n = 0, failed = 0, imports = 0;

    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH_TO_WSTREAM_AGENT\n", argv[0]);
        return 2;
    }
    if (wst_kernels_device_count(&n, why, sizeof(why)) != WST_OK) {
        fprintf(stderr, "SKIP wst-gpu-alloc-ipc: no usable CUDA device: %s\n",
                why);
        return 77;
    }
    wst_logger_init(&eng.log, "alloc-ipc", WST_LOG_INFO);
    if (wst_gpu_set_device(&eng.log, DEVICE) != WST_OK)
        return 1;
    if (it_agent_start_edited(&a, argv[1], spread_over_device) != 0 ||
        !eng.ok) {
        result(0, "agent start", "see above");
        release_engine();
        return 1;
    }
    imports = 0;
    for (size_t k = 0; k < N_DEVICE; k++) {
        char needle[128];
        snprintf(needle, sizeof(needle),
                 "allocation \"part%zu\" (allocations[%zu]): imported", k, k);
        imports += it_agent_log_has(&a, needle);
    }
    snprintf(detail, sizeof(detail), "%d of %d handles imported by the agent",
             imports, N_DEVICE);
    failed |= result(imports == N_DEVICE, "import", detail);
    failed |= check_exportable(&a);
    for (uint64_t v = 1; v <= 2; v++) {
        snprintf(detail, sizeof(detail), "refit of version %llu",
                 (unsigned long long)v);
        if (it_refit(&a, v) != 0) {
            failed |= result(0, detail, "the agent did not commit it");
            break;
        }
        failed |= check_version(&a.layout, v);
    }
    /* The agent closes its IPC mappings before the memory is freed. */
    it_agent_stop(&a);
    release_engine();
    printf("%s\n", failed ? "alloc_ipc: FAILED" : "alloc_ipc: all passed");
    return failed ? 1 : 0;
}
