/* plan_index.c - the planner's index of haves by tensor name: a table of
 * names (open addressing) and every have grouped by name in rank order,
 * built in time linear in the haves (planner.c explains why). */
#include "planner_internal.h"

#include "array.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <xxhash.h>

/* The planner's large arrays are written once, fresh: at hundreds of
 * thousands of entries, 4 KiB page faults cost more than the planning
 * itself on some hosts (a VM measured ~10-40 us a fault). Where
 * transparent huge pages are "madvise", ask for them on the 2 MiB-aligned
 * inside of a large array; a hint only, whatever the kernel answers. */
void wst_plan_advise_huge(void *v, size_t len)
{
#ifdef MADV_HUGEPAGE
    const uintptr_t huge = (uintptr_t)2 << 20;
    uintptr_t a = ((uintptr_t)v + huge - 1) & ~(huge - 1);
    uintptr_t b = ((uintptr_t)v + len) & ~(huge - 1);

    if (v != NULL && len >= 2 * huge && b > a)
        (void)madvise((void *)a, b - a, MADV_HUGEPAGE);
#else
    (void)v;
    (void)len;
#endif
}

/* ---- have index --------------------------------------------------------- */

static uint64_t name_hash(const char *name)
{
    return XXH3_64bits(name, strlen(name));
}

/* The slot of 'name': where it is, or the free slot where it would go. */
static struct name_slot *slot_find(const struct planner *p, const char *name,
                                   uint64_t h)
{
    size_t mask = p->n_slots - 1, i = (size_t)h & mask;

    while (p->slots[i].name != NULL &&
           (p->slots[i].hash != h || strcmp(p->slots[i].name, name) != 0))
        i = (i + 1) & mask;
    return &p->slots[i];
}

/* Doubles the table, keeping it at most half full. */
static wst_status_t slots_grow(struct planner *p)
{
    struct name_slot *old = p->slots, *to;
    size_t n_old = p->n_slots, i;

    p->n_slots = n_old ? 2 * n_old : 1024;
    p->slots = calloc(p->n_slots, sizeof(*p->slots));
    if (p->slots == NULL) {
        p->slots = old;
        p->n_slots = n_old;
        return WST_ERR_NO_MEMORY;
    }
    for (i = 0; i < n_old; i++) {
        if (old[i].name == NULL)
            continue;
        to = slot_find(p, old[i].name, old[i].hash);
        *to = old[i];
    }
    free(old);
    return WST_OK;
}

/* The group of 'name', added when new. */
static wst_status_t name_group(struct planner *p, const char *name,
                               size_t *n_first, const char ***names_p,
                               size_t *n_names, uint32_t *g_p)
{
    uint64_t h = name_hash(name);
    struct name_slot *sl;

    if (2 * (p->n_groups + 1) > p->n_slots && slots_grow(p) != WST_OK)
        return WST_ERR_NO_MEMORY;
    sl = slot_find(p, name, h);
    if (sl->name == NULL) {
        if (wst_array_grow(&p->first, n_first, p->n_groups + 2,
                           sizeof(*p->first)) != WST_OK ||
            wst_array_grow(names_p, n_names, p->n_groups + 1,
                           sizeof(**names_p)) != WST_OK)
            return WST_ERR_NO_MEMORY;
        *sl = (struct name_slot){
            .hash = h, .name = name, .group = (uint32_t)p->n_groups};
        (*names_p)[p->n_groups] = name;
        p->first[++p->n_groups] = 0;
    }
    *g_p = sl->group;
    return WST_OK;
}

static struct have_ref have_ref_of(const struct wst_plan_input *in, uint32_t s,
                                   size_t i)
{
    const struct wst_have *h = &in->haves[s][i];
    struct have_ref r = {.sender = s, .have = (uint32_t)i};

    r.lo0 = h->flat ? 0 : h->box.start[0];
    r.hi0 = h->flat ? UINT64_MAX : h->box.stop[0];
    return r;
}

/* Checks every have and groups it by name (group[k] and ref[k] for the
 * k-th have in rank order), counting each group's haves in
 * first[group + 1]: the one pass over the haves themselves (a few hundred
 * thousand of them, 472 bytes each, mostly not in cache). Senders mostly
 * list their tensors in the same order, so have i of the previous sender
 * names the likely group (hint[i]): one strcmp instead of hashing and
 * probing. */
static wst_status_t group_names(struct planner *p, uint32_t *group,
                                struct have_ref *ref)
{
    const struct wst_plan_input *in = p->in;
    size_t k = 0, i, n_first = 0, n_names = 0, n_hint = 0;
    const char **names = NULL;
    uint32_t s, g, *hint;
    wst_status_t status = WST_OK;

    for (s = 0; s < in->n_senders; s++)
        if (in->n_haves[s] > n_hint)
            n_hint = in->n_haves[s];
    hint = malloc((n_hint ? n_hint : 1) * sizeof(*hint));
    if (hint == NULL ||
        wst_array_grow(&p->first, &n_first, 2, sizeof(*p->first)) != WST_OK) {
        free(hint);
        return wst_plan_fail(p, WST_ERR_NO_MEMORY,
                             "planner: no memory to index the haves");
    }
    memset(hint, 0xff, (n_hint ? n_hint : 1) * sizeof(*hint));
    p->first[0] = 0;
    for (s = 0; s < in->n_senders && status == WST_OK; s++) {
        for (i = 0; i < in->n_haves[s] && status == WST_OK; i++, k++) {
            const struct wst_have *h = &in->haves[s][i];
            const char *name = h->tensor.name;

            if (wst_have_check(h) != WST_OK) {
                status =
                    wst_plan_fail(p, WST_ERR_INVALID,
                                  "sender %u have %zu (tensor %.*s): invalid "
                                  "entry (dtype, shape, box or memory type)",
                                  s, i, wst_plan_name_len(name), name);
                break;
            }
            ref[k] = have_ref_of(in, s, i);
            g = hint[i];
            if (g == UINT32_MAX || strcmp(names[g], name) != 0)
                status = name_group(p, name, &n_first, &names, &n_names, &g);
            if (status != WST_OK) {
                status = wst_plan_fail(p, status,
                                       "planner: no memory to index %s", name);
                break;
            }
            hint[i] = g;
            group[k] = g;
            p->first[g + 1]++;
        }
    }
    free(hint);
    free(names);
    return status;
}

/* Indexes the haves by tensor name in time linear in their number: a hash
 * table of the distinct names, then a counting sort of the refs by name
 * (stable, so each name's refs stay in (sender, have) order). */
wst_status_t wst_plan_index_haves(struct planner *p)
{
    const struct wst_plan_input *in = p->in;
    size_t total = 0, k, i, *next = NULL;
    struct have_ref *ref = NULL;
    uint32_t s, *group;
    wst_status_t status;

    for (s = 0; s < in->n_senders; s++)
        total += in->n_haves[s];
    if (total > UINT32_MAX)
        return wst_plan_fail(p, WST_ERR_INVALID,
                             "planner: %zu haves in all, more than %u", total,
                             UINT32_MAX);
    group = malloc((total ? total : 1) * sizeof(*group));
    ref = malloc((total ? total : 1) * sizeof(*ref));
    p->refs = malloc((total ? total : 1) * sizeof(*p->refs));
    if (group == NULL || ref == NULL || p->refs == NULL ||
        slots_grow(p) != WST_OK)
        goto err_no_memory;
    wst_plan_advise_huge(group, total * sizeof(*group));
    wst_plan_advise_huge(ref, total * sizeof(*ref));
    wst_plan_advise_huge(p->refs, total * sizeof(*p->refs));
    status = group_names(p, group, ref);
    if (status != WST_OK)
        goto out_free;
    for (i = 0; i < p->n_groups; i++)
        p->first[i + 1] += p->first[i];
    next = malloc((p->n_groups ? p->n_groups : 1) * sizeof(*next));
    if (next == NULL)
        goto err_no_memory;
    memcpy(next, p->first, p->n_groups * sizeof(*next));
    for (k = 0; k < total; k++)
        p->refs[next[group[k]]++] = ref[k];
    p->n_refs = total;
    free(next);
    goto out_free;

err_no_memory:
    status = wst_plan_fail(p, WST_ERR_NO_MEMORY,
                           "planner: no memory to index %zu haves", total);
out_free:
    free(ref);
    free(group);
    return status;
}

/* The haves of tensor 'name': refs[*lo_p .. *hi_p), in rank order. */
void wst_plan_find_refs(const struct planner *p, const char *name, size_t *lo_p,
                        size_t *hi_p)
{
    const struct name_slot *sl = slot_find(p, name, name_hash(name));

    *lo_p = sl->name != NULL ? p->first[sl->group] : 0;
    *hi_p = sl->name != NULL ? p->first[sl->group + 1] : 0;
}

const struct wst_have *wst_plan_ref_have(const struct planner *p,
                                         const struct have_ref *r)
{
    return &p->in->haves[r->sender][r->have];
}
