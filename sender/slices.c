/* slices.c - several shards of one tensor name on one sender: an index from
 * name to the latest slice registered under it, and the checks a new slice
 * must pass against the earlier ones.
 *
 * A trainer's parameter may hold several boxes of a checkpoint tensor, and a
 * checkpoint may hold one tensor per expert of a grouped wire tensor: each
 * is its own slice, with its own box and memory, and its own have entry in
 * the manifest. The planner already takes any set of haves per sender and
 * tensor, and plan items name a have (a slice), not a tensor; what must hold
 * here is that the slices describe one tensor (one dtype, one global shape)
 * and that no element is claimed twice.
 *
 * The index is open addressing over the names' hashes (slots hold a shard
 * index + 1; 0 is free), kept at most half full; each shard links to the
 * previous slice of its name (shard.prev_slice). Finding a name's slices
 * costs O(1) and checking a new slice O(slices of that name), so 100,000
 * registrations no longer compare every pair of names.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "dtype.h"
#include "sender_internal.h"

#define SLOTS_MIN 64

static uint64_t name_hash(const char *name)
{
    return XXH3_64bits(name, strlen(name));
}

/* The slot of 'name': where it is, or the free slot where it would go. */
static size_t find_slot(const struct wst_sender *s, const char *name)
{
    size_t mask = s->name_slots_cap - 1;
    size_t i = (size_t)name_hash(name) & mask;

    while (s->name_slots[i] != 0 &&
           strcmp(s->shards[s->name_slots[i] - 1].have.tensor.name, name) != 0)
        i = (i + 1) & mask;
    return i;
}

size_t wst_send_slice_latest(const struct wst_sender *s, const char *name)
{
    size_t slot;

    if (s->name_slots_cap == 0)
        return SIZE_MAX;
    slot = find_slot(s, name);
    return s->name_slots[slot] != 0 ? s->name_slots[slot] - 1 : SIZE_MAX;
}

/* Doubles the table and puts every name's latest slice back. */
static wst_status_t grow_slots(struct wst_sender *s)
{
    size_t old_cap = s->name_slots_cap, cap = old_cap ? 2 * old_cap : SLOTS_MIN;
    size_t *old = s->name_slots, i;

    s->name_slots = calloc(cap, sizeof(*s->name_slots));
    if (s->name_slots == NULL) {
        s->name_slots = old;
        return WST_ERR_NO_MEMORY;
    }
    s->name_slots_cap = cap;
    for (i = 0; i < old_cap; i++)
        if (old[i] != 0)
            s->name_slots[find_slot(
                s, s->shards[old[i] - 1].have.tensor.name)] = old[i];
    free(old);
    return WST_OK;
}

wst_status_t wst_send_slice_reserve(struct wst_sender *s)
{
    /* at most half full once one more name is in */
    if (2 * (s->n_names + 1) <= s->name_slots_cap)
        return WST_OK;
    return grow_slots(s);
}

void wst_send_slice_add(struct wst_sender *s, size_t i)
{
    size_t slot = find_slot(s, s->shards[i].have.tensor.name);

    s->shards[i].prev_slice =
        s->name_slots[slot] != 0 ? s->name_slots[slot] - 1 : SIZE_MAX;
    if (s->name_slots[slot] == 0)
        s->n_names++;
    s->name_slots[slot] = i + 1;
}

void wst_send_slices_free(struct wst_sender *s)
{
    free(s->name_slots);
    s->name_slots = NULL;
    s->name_slots_cap = s->n_names = 0;
}

/* "[0:3, 0:4]", or "flat [10:20]" for a flat box. */
static void fmt_box(const struct wst_have *h, char *buf, size_t len)
{
    size_t used = (size_t)snprintf(buf, len, "%s[", h->flat ? "flat " : "");

    for (uint32_t d = 0; d < h->box.ndim && used < len; d++)
        used +=
            (size_t)snprintf(buf + used, len - used, "%s%llu:%llu",
                             d ? ", " : "", (unsigned long long)h->box.start[d],
                             (unsigned long long)h->box.stop[d]);
    if (used < len)
        snprintf(buf + used, len - used, "]");
}

static void fmt_dims(const uint64_t *v, uint32_t n, char *buf, size_t len)
{
    size_t used = (size_t)snprintf(buf, len, "[");

    for (uint32_t d = 0; d < n && used < len; d++)
        used += (size_t)snprintf(buf + used, len - used, "%s%llu",
                                 d ? ", " : "", (unsigned long long)v[d]);
    if (used < len)
        snprintf(buf + used, len - used, "]");
}

static int same_shape(const struct wst_tensor_desc *a,
                      const struct wst_tensor_desc *b)
{
    return a->ndim == b->ndim &&
           memcmp(a->shape, b->shape, a->ndim * sizeof(a->shape[0])) == 0;
}

/* One earlier slice against the new one. */
static wst_status_t check_pair(const struct wst_have *old,
                               const struct wst_have *h, char *why, size_t len)
{
    char a[160], b[160], x[160], y[160];
    uint64_t at[WST_MAX_DIMS];

    fmt_box(h, a, sizeof(a));
    fmt_box(old, b, sizeof(b));
    if (old->tensor.dtype != h->tensor.dtype) {
        snprintf(why, len,
                 "slice %s has dtype %s, but slice %s registered before it "
                 "has %s; the slices of a tensor share its dtype",
                 a, wst_dtype_name(h->tensor.dtype), b,
                 wst_dtype_name(old->tensor.dtype));
        return WST_ERR_DTYPE_MISMATCH;
    }
    if (!same_shape(&old->tensor, &h->tensor)) {
        fmt_dims(h->tensor.shape, h->tensor.ndim, x, sizeof(x));
        fmt_dims(old->tensor.shape, old->tensor.ndim, y, sizeof(y));
        snprintf(why, len,
                 "slice %s gives the tensor shape %s, but slice %s registered "
                 "before it gives %s; the slices of a tensor share its shape",
                 a, x, b, y);
        return WST_ERR_SHAPE_MISMATCH;
    }
    if (wst_haves_overlap(old, h, at)) {
        fmt_dims(at, h->tensor.ndim, x, sizeof(x));
        snprintf(why, len,
                 "slice %s overlaps slice %s registered before it (both hold "
                 "element %s); the slices of a tensor must be disjoint",
                 a, b, x);
        return WST_ERR_INVALID;
    }
    return WST_OK;
}

wst_status_t wst_send_slice_check(const struct wst_sender *s, size_t latest,
                                  const struct wst_have *h, char *why,
                                  size_t len)
{
    wst_status_t st = WST_OK;

    for (size_t i = latest; i != SIZE_MAX && st == WST_OK;
         i = s->shards[i].prev_slice)
        st = check_pair(&s->shards[i].have, h, why, len);
    return st;
}
