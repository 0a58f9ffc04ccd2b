/* region_import.c - wstream-agent's live regions: mapped from shared
 * memory, imported by CUDA IPC, or allocated here (region_import.h). */
#include "region_import.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpu.h"
#include "gpu_probe.h"
#include "layout_file.h"
#include "log.h"
#include "region_memory.h"

/* The layout parser keeps its own copy of the handle size. */
_Static_assert(WST_LAYOUT_CUDA_IPC_BYTES == WST_GPU_IPC_HANDLE_BYTES,
               "layout file and gpu.h disagree on the CUDA IPC handle size");

wst_status_t wst_region_import_shm(struct agent *a)
{
    const struct wst_layout *l = &a->layout;
    struct stat sb;
    int fd = shm_open(l->shm, O_RDWR, 0);

    if (fd < 0) {
        WST_ERROR(&a->log, "shm_open %s: %s", l->shm, strerror(errno));
        return WST_ERR_IO;
    }
    if (fstat(fd, &sb) != 0 || (uint64_t)sb.st_size < l->shm_bytes) {
        WST_ERROR(&a->log,
                  "shared memory %s holds %lld bytes, the layout "
                  "needs %llu",
                  l->shm, (long long)sb.st_size,
                  (unsigned long long)l->shm_bytes);
        close(fd);
        return WST_ERR_INVALID;
    }
    if (wst_region_memory_check_shm(a, fd) != WST_OK) {
        close(fd);
        return WST_ERR_NO_MEMORY;
    }
    /* Populate now: faulting 4 KiB pages in during the first refit cost
     * seconds per GB (NOTES.md); like registration, this is start-up
     * work. */
    a->shm_base = mmap(NULL, l->shm_bytes, PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_POPULATE, fd, 0);
    close(fd);
    if (a->shm_base == MAP_FAILED) {
        a->shm_base = NULL;
        WST_ERROR(&a->log, "mmap %s: %s", l->shm, strerror(errno));
        return WST_ERR_IO;
    }
    a->shm_bytes = l->shm_bytes;
    return WST_OK;
}

/* Fails at start with a message that says what is missing, rather than
 * letting the import fail with CUDA's words. */
static wst_status_t check_device(struct agent *a, int device)
{
    char why[256] = "";
    int count = 0;

    if (wst_kernels_device_count(&count, why, sizeof(why)) != WST_OK) {
        WST_ERROR(&a->log,
                  "layout %s: cuda_ipc needs a CUDA build and a GPU: %s",
                  a->set.layout, why);
        return WST_ERR_NO_DEVICE;
    }
    if (device >= count) {
        WST_ERROR(&a->log,
                  "layout %s: cuda_device %d, but %d GPU%s visible here",
                  a->set.layout, device, count, count == 1 ? " is" : "s are");
        return WST_ERR_NO_DEVICE;
    }
    return WST_OK;
}

/* Maps the engine's device allocation named by the layout's cuda_ipc. Its
 * last byte must be device memory on that GPU: a cuda_bytes larger than
 * the engine's allocation is refused here, not found during a refit. */
wst_status_t wst_region_import_cuda_ipc(struct agent *a)
{
    const struct wst_layout *l = &a->layout;
    int device = (int)l->cuda_device, found = -1;
    wst_status_t st;

    st = check_device(a, device);
    if (st != WST_OK)
        return st;
    st = wst_gpu_ipc_import(&a->log, device, l->cuda_ipc, &a->ipc_base);
    if (st != WST_OK) {
        a->ipc_base = NULL;
        WST_ERROR(&a->log,
                  "layout %s: cannot import the cuda_ipc handle on GPU %d "
                  "(is the engine that exported it alive, on this host?)",
                  a->set.layout, device);
        return st;
    }
    if (wst_gpu_mem_type((char *)a->ipc_base + l->cuda_bytes - 1, &found) !=
            WST_MEM_CUDA ||
        found != device) {
        WST_ERROR(&a->log,
                  "layout %s: cuda_bytes %llu runs past the engine's device "
                  "allocation on GPU %d",
                  a->set.layout, (unsigned long long)l->cuda_bytes, device);
        return WST_ERR_INVALID;
    }
    WST_INFO(&a->log,
             "imported %.1f MiB of device memory on GPU %d by CUDA IPC",
             (double)l->cuda_bytes / (1 << 20), device);
    return WST_OK;
}

static void *region_memory(struct agent *a, size_t i)
{
    const struct wst_layout_region *reg = &a->layout.regions[i];
    void *p = NULL;

    if (a->shm_base != NULL)
        return (char *)a->shm_base + reg->offset;
    if (a->ipc_base != NULL)
        return (char *)a->ipc_base + reg->offset;
    if (posix_memalign(&p, 4096, reg->bytes) != 0)
        return NULL;
    memset(p, 0, reg->bytes);
    a->owned[i] = p;
    return p;
}

wst_status_t wst_region_import_add_layout(struct agent *a)
{
    const struct wst_layout *l = &a->layout;
    wst_status_t st;

    a->owned = calloc(l->n_regions ? l->n_regions : 1, sizeof(*a->owned));
    if (a->owned == NULL)
        return WST_ERR_NO_MEMORY;
    for (size_t i = 0; i < l->n_regions; i++) {
        struct wst_region reg = {
            .name = l->regions[i].name,
            .data = region_memory(a, i),
            .length = l->regions[i].bytes,
            .mem_type = a->ipc_base != NULL ? WST_MEM_CUDA : WST_MEM_HOST,
        };
        if (reg.data == NULL)
            return WST_ERR_NO_MEMORY;
        st = wst_receiver_add_region(a->receiver, &reg, NULL);
        if (st != WST_OK)
            return st;
    }
    for (size_t i = 0; i < l->n_wants; i++) {
        const struct wst_want *w = &l->wants[i];
        struct wst_want_entry e = {
            .name = w->tensor.name,
            .dtype = w->tensor.dtype,
            .ndim = w->tensor.ndim,
            .shape = w->tensor.shape,
            .box_start = w->box.start,
            .box_stop = w->box.stop,
            .region = w->region,
            .offset = w->offset,
            .row_pitch = w->row_pitch,
            .expert_grouped = w->expert.grouped,
            .ep_rank = w->expert.ep_rank,
            .ep_size = w->expert.ep_size,
        };
        st = wst_receiver_add_want(a->receiver, &e);
        if (st != WST_OK)
            return st;
    }
    for (size_t i = 0; i < l->n_experts; i++) {
        const struct wst_layout_experts *x = &l->experts[i];
        struct wst_expert_layer e = {
            .layer = x->layer,
            .loader = x->loader,
            .dtype = x->dtype,
            .n_experts = x->n_experts,
            .ep_rank = x->ep_rank,
            .ep_size = x->ep_size,
            .hidden = x->hidden,
            .inter = x->inter,
            .expert_ids = x->expert_ids,
            .n_expert_ids = x->n_expert_ids,
            .inter_tp_rank = x->inter_tp_rank,
            .inter_tp_size = x->inter_tp_size,
            .w13_region = x->w13_region,
            .w13_offset = x->w13_offset,
            .w2_region = x->w2_region,
            .w2_offset = x->w2_offset,
        };
        st = wst_receiver_add_expert_layer(a->receiver, &e);
        if (st != WST_OK)
            return st;
    }
    return WST_OK;
}

void wst_region_import_release(struct agent *a)
{
    for (size_t i = 0; a->owned != NULL && i < a->layout.n_regions; i++)
        free(a->owned[i]);
    free(a->owned);
    if (a->shm_base != NULL)
        munmap(a->shm_base, a->shm_bytes);
    /* After the receiver: its threads copy into the mapping until then. */
    if (a->ipc_base != NULL)
        wst_gpu_ipc_close(a->ipc_base);
}
