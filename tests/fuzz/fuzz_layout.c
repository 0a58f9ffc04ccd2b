/* fuzz_layout.c - libFuzzer harness for the agent's layout file parser
 * (receiver/agent/layout_file.h), from a buffer.
 *
 * What parses must hold what the header promises the agent: every index
 * into 'regions' in range, every region inside its shm or cuda_ipc
 * allocation, counts under WST_LAYOUT_MAX, NUL-terminated names.
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

static void check_layout(const struct wst_layout *l)
{
    uint64_t limit = l->shm[0]         ? l->shm_bytes
                     : l->has_cuda_ipc ? l->cuda_bytes
                                       : UINT64_MAX;

    check(l->n_regions <= WST_LAYOUT_MAX && l->n_wants <= WST_LAYOUT_MAX,
          "too many entries");
    check(!(l->shm[0] && l->has_cuda_ipc), "both shm and cuda_ipc");
    for (size_t i = 0; i < l->n_regions; i++) {
        const struct wst_layout_region *r = &l->regions[i];
        check(memchr(r->name, '\0', sizeof(r->name)) != NULL,
              "an unterminated region name");
        check(r->offset <= limit && r->bytes <= limit - r->offset,
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
