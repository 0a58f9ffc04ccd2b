/* tx_nccl.c - the nccl path (kernels/nccl_link.h): a layer is one grouped
 * ncclSend exchange, posted in layer order once its credit is in, and
 * "fenced" when the GPU has done it. The communicator is set up once per
 * plan (NCCL_SETUP, then NCCL_READY from the receiver) and kept across
 * refits; it goes with the connection.
 */
#include <stdlib.h>

#include "codec.h"
#include "device.h"
#include "log.h"
#include "nccl_comm.h"
#include "nccl_link.h"
#include "sender_internal.h"

/* The NCCL link goes with the connection: aborted if it still has work,
 * so no kernel waits on a receiver that is gone. */
void wst_tx_nccl_drop(struct link *l)
{
    wst_nccl_link_destroy(l->nccl); /* before its borrowed runs go */
    l->nccl = NULL;
    free(l->nccl_runs);
    l->nccl_runs = NULL;
    l->nccl_ready = 0;
    l->nccl_peer_ready = 0;
}

/* Progress thread: this side of the communicator is ready (or not). */
static void nccl_local_ready(void *arg, wst_status_t status)
{
    struct link *l = arg;

    if (l->state != LINK_CONNECTING)
        return;
    if (status != WST_OK) {
        wst_link_fail(l, status, "nccl communicator with GPU %d failed",
                      wst_tx_device_ordinal(l->s->dev));
        return;
    }
    l->nccl_ready = 1;
    WST_INFO(&l->s->log, "receiver %s: nccl communicator ready (rank 0 of 2)",
             l->name);
    if (l->nccl_peer_ready)
        wst_link_set_state(l, LINK_PLANNED);
}

/* The nccl path: a new unique id to the receiver, and this side's
 * non-blocking init; PLANNED once both sides are ready. */
wst_status_t wst_tx_nccl_open(struct link *l)
{
    struct wst_sender *s = l->s;
    struct wst_msg m = {.type = WST_MSG_NCCL_SETUP};
    wst_status_t st;

    wst_tx_nccl_drop(l);
    l->mover_kind = WST_MOVER_NCCL;
    /* Every item's run, once per plan: a refit posts slices of these. */
    l->nccl_runs =
        calloc(l->plan.n_items ? l->plan.n_items : 1, sizeof(*l->nccl_runs));
    if (l->nccl_runs == NULL)
        return WST_ERR_NO_MEMORY;
    for (size_t k = 0; k < l->plan.n_items; k++) {
        const struct wst_plan_item *it = &l->plan.items[k];
        l->nccl_runs[k].ptr = (char *)s->shards[it->have].data + it->src_offset;
        l->nccl_runs[k].bytes = it->length;
        l->nccl_runs[k].peer = 1; /* the receiver */
    }
    st = wst_nccl_get_id(&s->log, m.u.nccl_setup.unique_id);
    if (st == WST_OK)
        st = wst_nccl_link_create(&s->log, s->worker,
                                  wst_tx_device_ordinal(s->dev),
                                  m.u.nccl_setup.unique_id, 2, 0, s->timeout_s,
                                  nccl_local_ready, l, &l->nccl);
    if (st == WST_OK)
        st = wst_link_send(l, &m);
    return st;
}

void wst_tx_nccl_on_ready(struct link *l, const struct wst_nccl_ready *nr)
{
    if (l->state != LINK_CONNECTING || l->nccl == NULL || l->nccl_peer_ready ||
        nr->plan_hash != l->plan.plan_hash) {
        wst_link_fail(l, WST_ERR_PROTOCOL, "unexpected nccl-ready");
        return;
    }
    l->nccl_peer_ready = 1;
    if (l->nccl_ready)
        wst_link_set_state(l, LINK_PLANNED);
}

/* Progress thread: the GPU has sent layer 'fenced' (exchanges complete
 * in the order they were posted). */
static void nccl_sent(void *arg, wst_status_t status)
{
    struct link *l = arg;
    uint32_t layer = l->fenced;

    if (l->state != LINK_STREAMING)
        return;
    if (status != WST_OK) {
        wst_link_fail(l, status, "nccl send of layer %u failed", layer);
        return;
    }
    l->bytes_moved += l->layer_bytes[layer];
    l->fenced = layer + 1;
    wst_tx_pump(l);
}

/* Posts the next layer as one exchange of its items, in plan order, once
 * its credit (if it stages experts) is in; 0 when blocked. */
int wst_tx_nccl_step(struct link *l)
{
    struct wst_sender *s = l->s;
    uint32_t layer = l->nccl_next;

    if (layer >= l->plan.n_layers)
        return 0;
    size_t first = l->layer_first[layer], n = l->layer_first[layer + 1] - first;
    for (size_t k = 0; k < n; k++)
        if (l->plan.items[first + k].staged && !l->credits[layer])
            return 0; /* on_credit pumps again */
    while (l->started <= layer) {
        if (s->progress_fn != NULL)
            s->progress_fn(s->progress_arg, (size_t)(l - s->links), l->started,
                           l->version);
        l->started++;
    }
    wst_status_t st = wst_nccl_link_post(l->nccl, l->nccl_runs + first, n, NULL,
                                         0, nccl_sent, l);
    if (st == WST_ERR_BUSY)
        return 0; /* a completion pumps again */
    if (st != WST_OK) {
        wst_link_fail(l, st, "posting layer %u to nccl failed", layer);
        return 0;
    }
    l->nccl_next++;
    return 1;
}
