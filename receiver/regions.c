/* regions.c - the engine's regions and wants: checked, host regions
 * registered with UCX once, kept for the plan. */
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "dtype.h"
#include "gpu.h"
#include "gpu_probe.h"
#include "log.h"
#include "manifest.h"
#include "receiver_internal.h"
#include "worker.h"

/* Where 'offset' bytes into plan item 'it' go. */
void *wst_recv_item_dest(const struct wst_receiver *r,
                         const struct wst_plan_item *it, uint64_t offset)
{
    return (char *)r->regions[it->region].data + it->dst_offset + offset;
}

/* The memory type the caller declared, checked against what CUDA says the
 * pointer is; device regions must all be on one GPU. Each region is logged
 * at debug level, the totals once at start (wst_recv_prepare_device). */
static wst_status_t region_memory(struct wst_receiver *r,
                                  const struct wst_region *region,
                                  enum wst_mem_type *mem_p)
{
    int device = -1;
    enum wst_mem_type found = wst_gpu_mem_type(region->data, &device);

    if (region->mem_type != WST_MEM_HOST && region->mem_type != WST_MEM_CUDA) {
        WST_ERROR(&r->log, "region %s: unknown memory type %d", region->name,
                  region->mem_type);
        return WST_ERR_INVALID;
    }
    if ((int)found != region->mem_type) {
        WST_ERROR(&r->log,
                  "region %s: declared %s memory, but the pointer is %s "
                  "memory%s",
                  region->name,
                  wst_mem_type_name((enum wst_mem_type)region->mem_type),
                  wst_mem_type_name(found),
                  wst_kernels_built_with_cuda() ? "" : " (built without CUDA)");
        return WST_ERR_INVALID;
    }
    if (found == WST_MEM_CUDA && r->device >= 0 && device != r->device) {
        WST_ERROR(&r->log,
                  "region %s: on GPU %d, but other regions are on GPU %d; one "
                  "receiver serves one GPU",
                  region->name, device, r->device);
        return WST_ERR_UNSUPPORTED;
    }
    if (found == WST_MEM_CUDA)
        r->device = device;
    WST_DEBUG(&r->log, "region %s: %.1f MiB of %s memory (GPU %d)",
              region->name, (double)region->length / (1 << 20),
              wst_mem_type_name(found), device);
    *mem_p = found;
    return WST_OK;
}

/* A region's registration and packed key into reg (data, length set):
 * every host region, and the device staging pool; nothing is left
 * registered when it fails. */
static wst_status_t register_region(struct wst_receiver *r, struct region *reg)
{
    wst_status_t st =
        wst_worker_mem_map(r->worker, reg->data, reg->length, &reg->memh);

    if (st != WST_OK)
        return st;
    st = wst_worker_rkey_pack(r->worker, reg->memh, &reg->rkey, &reg->rkey_len);
    if (st != WST_OK) {
        wst_worker_mem_unmap(r->worker, reg->memh);
        reg->memh = NULL;
    }
    return st;
}

wst_status_t wst_receiver_add_region(wst_receiver_t *r,
                                     const struct wst_region *region,
                                     uint32_t *id_p)
{
    struct region reg = {0};
    struct wst_region_desc desc = {0};
    wst_status_t st;

    if (r->started || region->name == NULL ||
        strlen(region->name) >= WST_NAME_MAX || region->data == NULL ||
        region->length == 0)
        return WST_ERR_INVALID;
    st = region_memory(r, region, &reg.mem);
    if (st != WST_OK)
        return st;
    strcpy(reg.name, region->name);
    /* Asked once, here: CUDA's own answer, whatever mapped the memory. */
    reg.no_export =
        reg.mem == WST_MEM_CUDA && !wst_gpu_ipc_exportable(region->data);
    reg.data = region->data;
    reg.length = region->length;
    /* Registered once, here: never on the per-refit path. Device memory
     * is not: this UCX cannot reach it, so data lands in a pinned host
     * ring and is copied (device.h). */
    if (reg.mem == WST_MEM_HOST) {
        st = register_region(r, &reg);
        if (st != WST_OK)
            return st;
    }
    st = wst_array_grow(&r->regions, &r->regions_cap, r->n_regions + 1,
                        sizeof(*r->regions));
    if (st == WST_OK)
        st = wst_array_grow(&r->region_descs, &r->region_descs_cap,
                            r->n_regions + 1, sizeof(*r->region_descs));
    if (st != WST_OK)
        goto err_unregister;
    strcpy(desc.name, region->name);
    desc.length = region->length;
    desc.mem = reg.mem;
    r->regions[r->n_regions] = reg;
    r->region_descs[r->n_regions] = desc;
    if (id_p != NULL)
        *id_p = (uint32_t)r->n_regions;
    r->n_regions++;
    return WST_OK;

err_unregister:
    free(reg.rkey);
    if (reg.memh != NULL)
        wst_worker_mem_unmap(r->worker, reg.memh);
    return st;
}

/* A region's new registration and key; the old ones are destroyed
 * first, so that whatever happens next no put can use them. */
static wst_status_t rekey_region(struct wst_receiver *r, struct region *reg)
{
    wst_worker_mem_unmap(r->worker, reg->memh);
    reg->memh = NULL;
    free(reg->rkey);
    reg->rkey = NULL;
    reg->rkey_len = 0;
    return register_region(r, reg);
}

wst_status_t wst_recv_region_key_device(struct wst_receiver *r, uint32_t id)
{
    if (id >= r->n_regions)
        return WST_ERR_INVALID;
    struct region *reg = &r->regions[id];
    if (reg->mem != WST_MEM_CUDA || reg->no_export || reg->memh != NULL)
        return WST_ERR_INVALID;
    return register_region(r, reg);
}

int wst_recv_region_keyed(const struct wst_receiver *r, size_t i)
{
    if (i >= r->n_regions || r->regions[i].rkey_len == 0)
        return 0;
    const struct region *reg = &r->regions[i];
    return reg->mem == WST_MEM_CUDA ? r->device_put : r->allow_put;
}

wst_status_t wst_recv_regions_rekey(struct wst_receiver *r)
{
    wst_status_t first = WST_OK, dev_first = WST_OK;
    size_t n = 0;

    for (size_t i = 0; i < r->n_regions; i++) {
        struct region *reg = &r->regions[i];
        if (reg->memh == NULL)
            continue;
        wst_status_t st = rekey_region(r, reg);
        if (st == WST_OK) {
            n++;
            continue;
        }
        WST_ERROR(&r->log,
                  "region %s: no new registration after a failed refit "
                  "(%s); senders put into no %s region from now on",
                  reg->name, wst_status_string(st),
                  reg->mem == WST_MEM_CUDA ? "device" : "host");
        if (reg->mem == WST_MEM_CUDA && dev_first == WST_OK)
            dev_first = st;
        else if (reg->mem != WST_MEM_CUDA && first == WST_OK)
            first = st;
    }
    /* Plans from now on are am where no key is left to hand. */
    if (first != WST_OK)
        r->allow_put = 0;
    if (dev_first != WST_OK) {
        r->device_put = 0;
        first = first != WST_OK ? first : dev_first;
    }
    for (size_t i = 0; r->rx_regions != NULL && i < r->n_regions; i++)
        r->rx_regions[i].keyed = wst_recv_region_keyed(r, i);
    /* CUDA IPC has no revocation: a sender that mapped the staging pool
     * through its old key keeps the mapping, whatever the new key is. */
    WST_INFO(&r->log,
             "remote keys of %zu regions replaced after a failed refit: puts "
             "still in flight for it find no key (a NIC's; a cuda_ipc mapping "
             "a sender already holds stays valid)",
             n);
    return first;
}

wst_status_t wst_recv_add_want(struct wst_receiver *r,
                               const struct wst_want *want)
{
    wst_status_t st = wst_want_check(want, r->region_descs, r->n_regions);

    if (st != WST_OK) {
        WST_ERROR(&r->log, "want %s: invalid (region %u, offset %llu)",
                  want->tensor.name, want->region,
                  (unsigned long long)want->offset);
        return st;
    }
    st = wst_array_grow(&r->wants, &r->wants_cap, r->n_wants + 1,
                        sizeof(*r->wants));
    if (st != WST_OK)
        return st;
    r->wants[r->n_wants++] = *want;
    return WST_OK;
}

wst_status_t wst_receiver_add_want(wst_receiver_t *r,
                                   const struct wst_want_entry *w)
{
    struct wst_want want = {0};

    if (r->started || w->name == NULL || strlen(w->name) >= WST_NAME_MAX ||
        w->ndim == 0 || w->ndim > WST_MAX_DIMS || w->shape == NULL ||
        w->box_start == NULL || w->box_stop == NULL)
        return WST_ERR_INVALID;
    strcpy(want.tensor.name, w->name);
    want.tensor.dtype = (enum wst_dtype)w->dtype;
    want.tensor.ndim = w->ndim;
    want.box.ndim = w->ndim;
    for (uint32_t d = 0; d < w->ndim; d++) {
        want.tensor.shape[d] = w->shape[d];
        want.box.start[d] = w->box_start[d];
        want.box.stop[d] = w->box_stop[d];
    }
    want.region = w->region;
    want.offset = w->offset;
    want.row_pitch = w->row_pitch;
    want.expert.grouped = w->expert_grouped != 0;
    want.expert.ep_rank = w->expert_grouped ? w->ep_rank : 0;
    want.expert.ep_size = w->expert_grouped ? w->ep_size : 0;
    return wst_recv_add_want(r, &want);
}
