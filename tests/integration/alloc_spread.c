/* alloc_spread.c - a model layout's regions over several allocations, and
 * the check of their contents (alloc_spread.h). */
#include "alloc_spread.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errbuf.h"
#include "model.h"

static uint64_t align_up(uint64_t x)
{
    return (x + IT_SPREAD_ALIGN - 1) / IT_SPREAD_ALIGN * IT_SPREAD_ALIGN;
}

int it_spread(struct wst_layout *l, size_t n)
{
    struct wst_layout_allocation *allocs = calloc(n, sizeof(*allocs));
    uint64_t *end = calloc(n, sizeof(*end));
    size_t i, k;

    if (allocs == NULL || end == NULL) {
        free(allocs);
        free(end);
        return -1;
    }
    for (i = 0; i < l->n_regions; i++) {
        struct wst_layout_region *r = &l->regions[i];

        k = i % n;
        r->allocation = (uint32_t)k + 1;
        r->offset = align_up(end[k] + IT_SPREAD_GAP);
        end[k] = r->offset + r->bytes;
    }
    for (k = 0; k < n; k++) {
        snprintf(allocs[k].name, sizeof(allocs[k].name), "part%zu", k);
        allocs[k].kind = WST_LAYOUT_ALLOC_SHM;
        allocs[k].bytes = end[k] + IT_SPREAD_GAP;
    }
    free(end);
    l->shm[0] = '\0';
    l->shm_bytes = 0;
    l->allocations = allocs;
    l->n_allocations = n;
    return 0;
}

/* Bytes [from, to) of allocation k are all 'poison'. */
static int check_gap(const struct wst_layout *l, size_t k,
                     const unsigned char *p, uint64_t from, uint64_t to,
                     unsigned char poison, char *err, size_t errlen)
{
    for (uint64_t pos = from; pos < to; pos++) {
        if (p[pos] == poison)
            continue;
        wst_errf(err, errlen,
                 "allocation %s: byte %llu, in no region, is 0x%02x, not the "
                 "poison 0x%02x",
                 l->allocations[k].name, (unsigned long long)pos, p[pos],
                 poison);
        return -1;
    }
    return 0;
}

/* The regions of an allocation come in increasing offset order, as
 * it_spread places them: the gaps are what lies between. */
static int check_gaps(const struct wst_layout *l, const void *const *contents,
                      unsigned char poison, char *err, size_t errlen)
{
    for (size_t k = 0; k < l->n_allocations; k++) {
        uint64_t at = 0;

        for (size_t i = 0; i < l->n_regions; i++) {
            const struct wst_layout_region *r = &l->regions[i];
            if (r->allocation != k + 1)
                continue;
            if (check_gap(l, k, contents[k], at, r->offset, poison, err,
                          errlen) != 0)
                return -1;
            at = r->offset + r->bytes;
        }
        if (check_gap(l, k, contents[k], at, l->allocations[k].bytes, poison,
                      err, errlen) != 0)
            return -1;
    }
    return 0;
}

int it_spread_check(const struct wst_layout *l, const void *const *contents,
                    uint64_t seed, uint64_t version, unsigned char poison,
                    char *err, size_t errlen)
{
    struct wst_layout flat = *l;
    struct wst_layout_region *regions;
    unsigned char *buf;
    uint64_t end = 0, checked = 0;
    int rc = -1;

    if (check_gaps(l, contents, poison, err, errlen) != 0)
        return -1;
    regions = calloc(l->n_regions ? l->n_regions : 1, sizeof(*regions));
    for (size_t i = 0; regions != NULL && i < l->n_regions; i++) {
        regions[i] = l->regions[i];
        regions[i].allocation = 0;
        regions[i].offset = end;
        end += align_up(regions[i].bytes);
    }
    buf = malloc(end ? end : 1);
    if (regions == NULL || buf == NULL) {
        wst_errf(err, errlen, "out of memory");
        goto out_free;
    }
    for (size_t i = 0; i < l->n_regions; i++) {
        const unsigned char *from = contents[l->regions[i].allocation - 1];
        memcpy(buf + regions[i].offset, from + l->regions[i].offset,
               regions[i].bytes);
    }
    flat.n_allocations = 0;
    flat.allocations = NULL;
    flat.regions = regions;
    if (wst_model_verify(&flat, buf, seed, version, &checked, err, errlen) ==
        WST_OK) {
        if (checked > 0)
            rc = 0;
        else
            wst_errf(err, errlen, "nothing was checked");
    }
out_free:
    free(buf);
    free(regions);
    return rc;
}
