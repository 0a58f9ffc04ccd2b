/* fuzz_layout.c - libFuzzer harness for the agent's layout file parser
 * (receiver/agent/layout_file.h), from a buffer.
 *
 * What parses must hold what the header promises the agent: every index
 * into 'regions' and 'allocations' in range, every region inside its
 * allocation, counts under WST_LAYOUT_MAX and WST_LAYOUT_ALLOC_MAX,
 * NUL-terminated names, device allocations on one GPU.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_layout: a parsed layout has %s\n", what);
        abort();
    }
}

/* The allocations: bounded, one way of spelling them, names terminated,
 * one GPU for all device entries. */
static void check_allocations(const struct wst_layout *l)
{
    uint32_t device = 0;
    int cuda = 0;

    check(l->n_allocations <= WST_LAYOUT_ALLOC_MAX, "too many allocations");
    check(!(l->shm[0] && l->has_cuda_ipc), "both shm and cuda_ipc");
    check(l->n_allocations == 0 || (!l->shm[0] && !l->has_cuda_ipc),
          "allocations next to shm or cuda_ipc");
    for (size_t k = 0; k < l->n_allocations; k++) {
        const struct wst_layout_allocation *a = &l->allocations[k];
        check(a->name[0] && memchr(a->name, '\0', sizeof(a->name)) != NULL,
              "a bad allocation name");
        check(a->bytes > 0, "an empty allocation");
        if (a->kind == WST_LAYOUT_ALLOC_SHM) {
            check(a->shm[0] && memchr(a->shm, '\0', sizeof(a->shm)) != NULL,
                  "a bad shm name");
            check(a->device == 0, "a device on a shm allocation");
            continue;
        }
        check(a->kind == WST_LAYOUT_ALLOC_CUDA_IPC, "an unknown kind");
        check(!cuda || a->device == device, "two devices");
        cuda = 1;
        device = a->device;
    }
}

static void check_layout(const struct wst_layout *l)
{
    struct wst_layout_allocation a;

    check(l->n_regions <= WST_LAYOUT_MAX && l->n_wants <= WST_LAYOUT_MAX,
          "too many entries");
    check_allocations(l);
    for (size_t i = 0; i < l->n_regions; i++) {
        const struct wst_layout_region *r = &l->regions[i];
        size_t k = wst_layout_region_alloc(l, i);
        check(memchr(r->name, '\0', sizeof(r->name)) != NULL,
              "an unterminated region name");
        check(r->allocation <= l->n_allocations,
              "a region's allocation out of range");
        if (k == SIZE_MAX)
            continue;
        check(k < wst_layout_alloc_count(l), "a region's allocation unknown");
        wst_layout_alloc_get(l, k, &a);
        check(r->offset <= a.bytes && r->bytes <= a.bytes - r->offset,
              "a region past its allocation");
    }
    for (size_t i = 0; i < l->n_wants; i++)
        check(l->wants[i].region < l->n_regions,
              "a want's region out of range");
    for (size_t i = 0; i < l->n_experts; i++) {
        const struct wst_layout_experts *x = &l->experts[i];
        check(x->w13_region < l->n_regions && x->w2_region < l->n_regions,
              "an expert layer's region out of range");
        check(x->ep_rank < x->ep_size, "ep_rank >= ep_size");
        check(x->n_expert_ids == 0 || x->expert_ids != NULL,
              "expert_ids missing");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct wst_layout l;
    char err[512];

    memset(&l, 0, sizeof(l));
    if (wst_layout_parse((const char *)data, size, &l, err, sizeof(err)) !=
        WST_OK)
        return 0;
    check_layout(&l);
    wst_layout_release(&l);
    return 0;
}
