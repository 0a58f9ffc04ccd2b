/* rx_am.c - the receiving half of the active-message mover: where each
 * data message goes (its place in the plan, or the landing ring when that
 * is device memory) and its bytes counted once they are in place
 * (progress thread). */
#include <stddef.h>

#include "device.h"
#include "log.h"
#include "planner.h"
#include "receiver_internal.h"
#include "worker.h"

/* Whether a data message lands exactly where the plan puts it: 'len'
 * bytes at 'offset' into one item, or (count > 1) whole items [item,
 * item + count) of one layer and region whose destinations follow each
 * other, 'len' bytes in all. items[0..n) are the sender's. */
static int data_fits(const struct wst_plan_item *items, size_t n,
                     const struct wst_data_hdr *hdr, size_t len)
{
    const struct wst_plan_item *it = &items[hdr->item];
    uint64_t sum = 0;

    if (hdr->count == 1)
        return hdr->offset <= it->length && len <= it->length - hdr->offset;
    if (hdr->count == 0 || hdr->count > n - hdr->item || hdr->offset != 0)
        return 0;
    for (uint32_t k = 0; k < hdr->count; k++) {
        const struct wst_plan_item *x = &it[k];
        if (x->layer != it->layer || x->region != it->region ||
            x->staged != it->staged || x->dst_offset != it->dst_offset + sum)
            return 0;
        sum += x->length;
    }
    return sum == len;
}

wst_status_t wst_recv_on_data_dest(void *arg, const struct wst_data_hdr *hdr,
                                   size_t len, void **dest_p)
{
    struct wst_receiver *r = arg;
    struct peer *p = hdr->token < r->world_size ? r->by_rank[hdr->token] : NULL;

    if (r->refit != REFIT_RECEIVING || hdr->version != r->version ||
        p == NULL || !p->acked) {
        WST_DEBUG(&r->log, "data for version %llu dropped (not receiving it)",
                  (unsigned long long)hdr->version);
        return WST_ERR_STATE;
    }
    size_t first = r->plan->sender_first[p->rank];
    size_t n = r->plan->sender_first[p->rank + 1] - first;
    const struct wst_plan_item *it =
        hdr->item < n ? &r->plan->items[first + hdr->item] : NULL;
    if (it == NULL || p->mover != WST_MOVER_AM ||
        !data_fits(r->plan->items + first, n, hdr, len)) {
        wst_recv_refit_fail(
            r, WST_ERR_PROTOCOL,
            "sender %s: data for item %u (x%u) at %llu+%zu outside its "
            "plan",
            p->name, hdr->item, hdr->count, (unsigned long long)hdr->offset,
            len);
        return WST_ERR_PROTOCOL;
    }
    if (it->staged && (r->layer_moe[it->layer] == NULL ||
                       r->layer_moe[it->layer]->ordinal >= r->credit_next)) {
        wst_recv_refit_fail(
            r, WST_ERR_PROTOCOL,
            "sender %s: experts of layer %u sent before their credit", p->name,
            it->layer);
        return WST_ERR_PROTOCOL;
    }
    if (r->regions[it->region].mem == WST_MEM_CUDA) {
        if (len > WST_LANDING_MESSAGE_MAX) {
            wst_recv_refit_fail(
                r, WST_ERR_PROTOCOL,
                "sender %s: a %zu-byte data message for device memory "
                "exceeds the %llu-byte landing limit",
                p->name, len, (unsigned long long)WST_LANDING_MESSAGE_MAX);
            return WST_ERR_PROTOCOL;
        }
        *dest_p = wst_recv_device_land(r->dev, len);
        return *dest_p != NULL ? WST_OK : WST_ERR_BUSY;
    }
    *dest_p = wst_recv_item_dest(r, it, hdr->offset);
    return WST_OK;
}

/* The sender of a data message, while its refit is the one receiving. */
struct peer *wst_recv_data_peer(struct wst_receiver *r,
                                const struct wst_data_hdr *hdr)
{
    struct peer *p = r->by_rank != NULL && hdr->token < r->world_size
                         ? r->by_rank[hdr->token]
                         : NULL;

    if (r->refit != REFIT_RECEIVING || hdr->version != r->version)
        return NULL;
    return p;
}

void wst_recv_count_data(struct wst_receiver *r, struct peer *p,
                         const struct wst_data_hdr *hdr, size_t len)
{
    const struct wst_plan_item *it =
        &r->plan->items[r->plan->sender_first[p->rank] + hdr->item];

    wst_recv_count_layer(r, p, it->layer, len);
}

void wst_recv_on_data_done(void *arg, const struct wst_data_hdr *hdr,
                           void *dest, size_t len, wst_status_t status)
{
    struct wst_receiver *r = arg;
    struct peer *p = wst_recv_data_peer(r, hdr);
    int landed =
        r->dev != NULL && dest != NULL && wst_recv_device_owns(r->dev, dest);

    if (p != NULL && status != WST_OK)
        wst_recv_refit_fail(r, status, "sender %s: receiving data failed",
                            p->name);
    if (p == NULL || status != WST_OK) {
        if (landed)
            wst_recv_device_release(r->dev, dest);
        return;
    }
    if (!landed) {
        wst_recv_count_data(r, p, hdr, len);
        return;
    }
    /* In the landing ring: counted once it is on the GPU (on_copied). */
    const struct wst_plan_item *it =
        &r->plan->items[r->plan->sender_first[p->rank] + hdr->item];
    wst_status_t st = wst_recv_device_copy(
        r->dev, dest, wst_recv_item_dest(r, it, hdr->offset), len, hdr,
        r->generation);
    if (st != WST_OK)
        wst_recv_refit_fail(r, st, "copying data of sender %s to GPU %d failed",
                            p->name, r->device);
}
