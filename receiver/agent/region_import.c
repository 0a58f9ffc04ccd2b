/* region_import.c - wstream-agent's live regions: in the layout's
 * allocations (alloc_maps.h), or allocated here (region_import.h). */
#include "region_import.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "alloc_maps.h"
#include "layout_file.h"
#include "log.h"

wst_status_t wst_region_import_allocations(struct agent *a)
{
    return wst_alloc_maps_import(&a->layout, a->set.layout, &a->log,
                                 &a->allocs);
}

/* Region i's memory: in its allocation (*cuda_p says whether that is
 * device memory), or allocated here. */
static void *region_memory(struct agent *a, size_t i, int *cuda_p)
{
    const struct wst_layout_region *reg = &a->layout.regions[i];
    size_t k = wst_layout_region_alloc(&a->layout, i);
    void *p = NULL;

    *cuda_p = 0;
    if (k != SIZE_MAX) {
        *cuda_p = a->allocs.maps[k].cuda;
        return (char *)a->allocs.maps[k].base + reg->offset;
    }
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
        int cuda;
        struct wst_region reg = {
            .name = l->regions[i].name,
            .data = region_memory(a, i, &cuda),
            .length = l->regions[i].bytes,
        };
        reg.mem_type = cuda ? WST_MEM_CUDA : WST_MEM_HOST;
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
    wst_alloc_maps_release(&a->allocs);
}
