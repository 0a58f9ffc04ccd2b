/* alloc_maps.c - the layout's allocations mapped into wstream-agent
 * (alloc_maps.h): shm objects by mmap, device allocations by CUDA IPC. */
#include "alloc_maps.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpu.h"
#include "gpu_probe.h"
#include "region_memory.h"
#include "shm.h"

/* The layout parser keeps its own copy of the handle size. */
_Static_assert(WST_LAYOUT_CUDA_IPC_BYTES == WST_GPU_IPC_HANDLE_BYTES,
               "layout file and gpu.h disagree on the CUDA IPC handle size");

/* Bytes of label()'s text, with the NUL. */
#define WHAT_MAX (WST_LAYOUT_ALLOC_NAME_MAX + 64)

/* How messages name an allocation: "allocation "x" (allocations[k])", or
 * "shm" / "cuda_ipc" for the top-level one. */
static void label(const struct wst_layout_allocation *a, size_t k, char *buf,
                  size_t len)
{
    if (a->name[0] != '\0')
        snprintf(buf, len, "allocation \"%s\" (allocations[%zu])", a->name, k);
    else
        snprintf(buf, len, "%s",
                 a->kind == WST_LAYOUT_ALLOC_SHM ? "shm" : "cuda_ipc");
}

/* Regions per allocation, for messages: counts[k] (n entries, zeroed). */
static void count_regions(const struct wst_layout *l, size_t *counts)
{
    size_t i, k;

    for (i = 0; i < l->n_regions; i++) {
        k = wst_layout_region_alloc(l, i);
        if (k != SIZE_MAX)
            counts[k]++;
    }
}

/* Opens shm allocation 'a' into *fd_p: it exists and holds its bytes. */
static wst_status_t open_shm(const struct wst_logger *log, const char *path,
                             const char *what,
                             const struct wst_layout_allocation *a, int *fd_p)
{
    struct stat sb;
    int fd = shm_open(a->shm, O_RDWR, 0);

    if (fd < 0) {
        char hint[320];
        int saved = errno;
        WST_ERROR(log, "layout %s: %s: shm_open %s: %s%s", path, what, a->shm,
                  strerror(saved),
                  wst_shm_open_hint(a->shm, saved, hint, sizeof(hint)));
        return WST_ERR_IO;
    }
    if (fstat(fd, &sb) != 0 || (uint64_t)sb.st_size < a->bytes) {
        WST_ERROR(log,
                  "layout %s: %s: shared memory %s holds %lld bytes, the "
                  "layout needs %llu",
                  path, what, a->shm, (long long)sb.st_size,
                  (unsigned long long)a->bytes);
        close(fd);
        return WST_ERR_INVALID;
    }
    *fd_p = fd;
    return WST_OK;
}

/* Maps shm allocation 'a' read-write, populated: faulting 4 KiB pages in
 * during the first refit cost seconds per GB (NOTES.md); like
 * registration, this is start-up work. */
static wst_status_t map_shm(const struct wst_logger *log, const char *path,
                            const char *what,
                            const struct wst_layout_allocation *a,
                            struct wst_alloc_map *m)
{
    void *p;
    int fd = -1;
    wst_status_t st = open_shm(log, path, what, a, &fd);

    if (st != WST_OK)
        return st;
    p = mmap(NULL, a->bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
             fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        WST_ERROR(log, "layout %s: %s: mmap %s: %s", path, what, a->shm,
                  strerror(errno));
        return WST_ERR_IO;
    }
    m->base = p;
    m->bytes = a->bytes;
    m->cuda = 0;
    return WST_OK;
}

/* Fails at start with a message that says what is missing, rather than
 * letting the import fail with CUDA's words. */
static wst_status_t check_device(const struct wst_logger *log, const char *path,
                                 uint32_t device)
{
    char why[256] = "";
    int count = 0;

    if (wst_kernels_device_count(&count, why, sizeof(why)) != WST_OK) {
        WST_ERROR(log, "layout %s: cuda_ipc needs a CUDA build and a GPU: %s",
                  path, why);
        return WST_ERR_NO_DEVICE;
    }
    if (device >= (uint32_t)count) {
        WST_ERROR(log,
                  "layout %s: the engine's device memory is on GPU %u, but "
                  "%d GPU%s visible here",
                  path, device, count, count == 1 ? " is" : "s are");
        return WST_ERR_NO_DEVICE;
    }
    return WST_OK;
}

/* Opens device allocation 'a' by its handle, once. Its last byte must be
 * device memory on its GPU. */
static wst_status_t import_cuda(const struct wst_logger *log, const char *path,
                                const char *what,
                                const struct wst_layout_allocation *a,
                                struct wst_alloc_map *m)
{
    int device = (int)a->device, found = -1;
    void *p = NULL;
    wst_status_t st;

    st = wst_gpu_ipc_import(log, device, a->cuda_ipc, &p);
    if (st != WST_OK) {
        WST_ERROR(log,
                  "layout %s: %s: cannot import the cuda_ipc handle on GPU "
                  "%d (is the engine that exported it alive, on this host?)",
                  path, what, device);
        return st;
    }
    if (wst_gpu_mem_type((char *)p + a->bytes - 1, &found) != WST_MEM_CUDA ||
        found != device) {
        WST_ERROR(log,
                  "layout %s: %s: %llu bytes run past the engine's device "
                  "allocation on GPU %d",
                  path, what, (unsigned long long)a->bytes, device);
        wst_gpu_ipc_close(p);
        return WST_ERR_INVALID;
    }
    WST_INFO(log,
             "%s: imported %.1f MiB of device memory on GPU %d by CUDA IPC",
             what, (double)a->bytes / (1 << 20), device);
    m->base = p;
    m->bytes = a->bytes;
    m->cuda = 1;
    return WST_OK;
}

/* Before anything is mapped, so that a refusal populates nothing: the
 * GPU of the device entries is visible, and every shm object opens, holds
 * its bytes, and the bytes not yet in pages, summed over the objects, fit
 * in their file system. */
static wst_status_t check_all(const struct wst_layout *l, const char *path,
                              const struct wst_logger *log,
                              const size_t *counts)
{
    struct wst_layout_allocation a;
    char what[WHAT_MAX];
    uint64_t missing = 0;
    uint32_t device;
    wst_status_t st = WST_OK;
    int fd;

    if (wst_layout_cuda_device(l, &device) &&
        (st = check_device(log, path, device)) != WST_OK)
        return st;
    for (size_t k = 0; k < wst_layout_alloc_count(l) && st == WST_OK; k++) {
        wst_layout_alloc_get(l, k, &a);
        if (a.kind != WST_LAYOUT_ALLOC_SHM)
            continue;
        label(&a, k, what, sizeof(what));
        st = open_shm(log, path, what, &a, &fd);
        if (st != WST_OK)
            break;
        st =
            wst_region_memory_check_shm(log, path, &a, counts[k], fd, &missing);
        close(fd);
    }
    return st;
}

/* Gives back maps[0..n). */
static void release_maps(struct wst_alloc_map *maps, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        if (maps[k].cuda)
            wst_gpu_ipc_close(maps[k].base);
        else
            munmap(maps[k].base, maps[k].bytes);
    }
}

wst_status_t wst_alloc_maps_import(const struct wst_layout *l,
                                   const char *layout_path,
                                   const struct wst_logger *log,
                                   struct wst_alloc_maps *out)
{
    size_t n = wst_layout_alloc_count(l), k = 0, *counts = NULL;
    struct wst_alloc_map *maps = NULL;
    struct wst_layout_allocation a;
    char what[WHAT_MAX];
    wst_status_t st = WST_OK;

    if (n == 0) {
        memset(out, 0, sizeof(*out));
        return WST_OK;
    }
    maps = calloc(n, sizeof(*maps));
    counts = calloc(n, sizeof(*counts));
    if (maps == NULL || counts == NULL) {
        WST_ERROR(log, "layout %s: no memory for %zu allocations", layout_path,
                  n);
        st = WST_ERR_NO_MEMORY;
        goto err_free;
    }
    count_regions(l, counts);
    st = check_all(l, layout_path, log, counts);
    if (st != WST_OK)
        goto err_free;
    for (k = 0; k < n && st == WST_OK; k++) {
        wst_layout_alloc_get(l, k, &a);
        label(&a, k, what, sizeof(what));
        if (a.kind == WST_LAYOUT_ALLOC_SHM)
            st = map_shm(log, layout_path, what, &a, &maps[k]);
        else
            st = import_cuda(log, layout_path, what, &a, &maps[k]);
    }
    if (st != WST_OK)
        goto err_release;
    free(counts);
    out->n = n;
    out->maps = maps;
    return WST_OK;

err_release:
    /* maps[k - 1] failed and holds nothing */
    release_maps(maps, k - 1);
err_free:
    free(counts);
    free(maps);
    return st;
}

void wst_alloc_maps_release(struct wst_alloc_maps *m)
{
    if (m->maps != NULL)
        release_maps(m->maps, m->n);
    free(m->maps);
    memset(m, 0, sizeof(*m));
}
