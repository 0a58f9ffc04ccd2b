/* rx_nccl.c - the receiving half of the NCCL mover: a communicator per
 * sender, set up when it asks, and each refit's layers posted to it as
 * receive exchanges, in order, as their destinations are ready
 * (progress thread). */
#include <stdlib.h>

#include "codec.h"
#include "log.h"
#include "nccl_comm.h"
#include "nccl_link.h"
#include "planner.h"
#include "receiver_internal.h"
#include "worker.h"

/* Progress thread: layer nccl_done of this sender is in its destinations
 * (exchanges complete in the order they were posted). */
static void nccl_received(void *arg, wst_status_t status)
{
    struct peer *p = arg;
    struct wst_receiver *r = p->r;
    uint32_t layer = p->nccl_done++;

    if (r->refit != REFIT_RECEIVING || p->version != r->version || !p->acked)
        return;
    if (status != WST_OK) {
        wst_recv_refit_fail(r, status,
                            "sender %s: nccl receive of layer %u failed",
                            p->name, layer);
        return;
    }
    wst_recv_count_layer(r, p, layer,
                         wst_recv_expected_bytes(r, p->rank, layer));
}

/* Posts this sender's layers, in order, as one receive exchange each, as
 * far as their destinations are ready: a layer that stages experts waits
 * for its credit (its staging slot). The sender posts its sends in the
 * same order, which is how NCCL pairs them. */
void wst_recv_nccl_post(struct wst_receiver *r, struct peer *p)
{
    const struct wst_plan_item *items =
        r->plan->items + r->plan->sender_first[p->rank];
    size_t n_items =
        r->plan->sender_first[p->rank + 1] - r->plan->sender_first[p->rank];

    if (p->mover != WST_MOVER_NCCL || p->nccl == NULL)
        return;
    while (p->nccl_next < r->plan->n_layers) {
        uint32_t layer = p->nccl_next;
        size_t first = p->nccl_item, n = 0;
        for (; first + n < n_items && items[first + n].layer == layer; n++)
            if (items[first + n].staged &&
                (r->layer_moe[layer] == NULL ||
                 r->layer_moe[layer]->ordinal >= r->credit_next))
                return; /* credit_to_peer posts again */
        if (first + n > p->nccl_cap) {
            /* The runs were sized for the plan of the link's set-up. */
            wst_recv_refit_fail(
                r, WST_ERR_STATE,
                "sender %s: the plan changed under its nccl link", p->name);
            return;
        }
        struct wst_nccl_run *runs = p->nccl_runs + first;
        for (size_t k = 0; k < n; k++) {
            runs[k].ptr = wst_recv_item_dest(r, &items[first + k], 0);
            runs[k].bytes = items[first + k].length;
            runs[k].peer = 0; /* the sender */
        }
        wst_status_t st =
            wst_nccl_link_post(p->nccl, NULL, 0, runs, n, nccl_received, p);
        if (st == WST_ERR_BUSY)
            return; /* nccl_received makes room; wst_recv_count_layer posts
                     * again
                     */
        if (st != WST_OK) {
            wst_recv_refit_fail(r, st,
                                "sender %s: posting layer %u to nccl failed",
                                p->name, layer);
            return;
        }
        p->nccl_item = first + n;
        p->nccl_next++;
    }
}

/* Progress thread: this side of the communicator is ready (or not). */
static void nccl_ready(void *arg, wst_status_t status)
{
    struct peer *p = arg;
    struct wst_receiver *r = p->r;

    if (status != WST_OK) {
        wst_recv_send_error(r, p, status < 0 ? status : WST_ERR_TRANSPORT,
                            "nccl communicator failed on the receiver");
        wst_recv_peer_drop_after_error(r, p);
        return;
    }
    struct wst_msg m = {.type = WST_MSG_NCCL_READY};
    m.u.nccl_ready.plan_hash = p->plan_hash;
    p->nccl_ready = 1;
    WST_INFO(&r->log,
             "sender %s: nccl communicator ready on GPU %d (rank 1 of "
             "2)",
             p->name, r->device);
    wst_recv_send_msg(r, p, &m);
}

/* Every destination of an nccl refit must be device memory. */
int wst_recv_nccl_possible(const struct wst_receiver *r)
{
    if (r->device < 0 || !wst_nccl_available())
        return 0;
    for (size_t i = 0; i < r->n_regions; i++)
        if (r->regions[i].mem != WST_MEM_CUDA)
            return 0;
    return 1;
}

void wst_recv_on_nccl_setup(struct wst_receiver *r, struct peer *p,
                            const struct wst_nccl_setup *ns)
{
    const char *why = NULL;

    if (!p->plan_sent || p->nccl != NULL || r->refit != REFIT_IDLE)
        why = "unexpected nccl setup";
    else if (!wst_recv_nccl_possible(r))
        why = "this receiver cannot run nccl (its memory is not all on one "
              "GPU, or it was built without NCCL)";
    if (why != NULL) {
        wst_recv_send_error(r, p, WST_ERR_UNSUPPORTED, why);
        wst_recv_peer_drop_after_error(r, p);
        return;
    }
    /* Room for every item's run, once: a refit fills and posts slices. */
    size_t n_items =
        r->plan->sender_first[p->rank + 1] - r->plan->sender_first[p->rank];
    p->nccl_runs = calloc(n_items ? n_items : 1, sizeof(*p->nccl_runs));
    p->nccl_cap = n_items;
    wst_status_t st =
        p->nccl_runs == NULL
            ? WST_ERR_NO_MEMORY
            : wst_nccl_link_create(&r->log, r->worker, r->device, ns->unique_id,
                                   2, 1, r->timeout_s, nccl_ready, p, &p->nccl);
    if (st != WST_OK) {
        wst_recv_send_error(r, p, st, "cannot start an nccl communicator");
        wst_recv_peer_drop_after_error(r, p);
    }
}

void wst_recv_nccl_abort_peer(struct wst_receiver *r, struct peer *p, void *arg)
{
    (void)r;
    (void)arg;
    wst_nccl_link_abort(p->nccl);
}
