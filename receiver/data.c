/* data.c - the receiver's side of the mover interface (common/movers/rx.h):
 * each sender's receiving half, opened for the mover its BEGIN names, and
 * what the half reports (bytes landed, a failure) fed to the refit state
 * machine; data messages from the worker routed by their header's rank to
 * that rank's half, only when they carry the data token its plan did
 * (others are dropped and counted as forged) (progress thread). Nothing
 * here knows how a mover works.
 */
#include <pthread.h>
#include <stdlib.h>

#include "am.h"
#include "log.h"
#include "put.h"
#include "receiver_internal.h"

static void on_landed(void *arg, uint32_t layer, uint64_t bytes,
                      uint64_t hashed, uint64_t sum)
{
    struct peer *p = arg;
    struct wst_rm_event ev = {.kind = WST_RM_EV_LANDED,
                              .rank = wst_recv_peer_rank(p),
                              .layer = layer,
                              .bytes = bytes,
                              .hashed = hashed,
                              .sum = sum};

    wst_recv_refit_event(p->r, &ev);
}

static void on_failed(void *arg, wst_status_t status, const char *reason)
{
    struct peer *p = arg;

    wst_recv_refit_fail(p->r, status, "sender %s: %s", p->name, reason);
}

struct wst_rx_events wst_recv_rx_events(struct peer *p)
{
    return (struct wst_rx_events){
        .arg = p, .landed = on_landed, .failed = on_failed};
}

void wst_recv_peer_rx_close(struct peer *p)
{
    if (p->rx != p->nccl_rx)
        wst_rx_destroy(p->rx);
    p->rx = NULL;
    p->rx_kind = 0;
    wst_rx_destroy(p->nccl_rx);
    p->nccl_rx = NULL;
    p->nccl_ready = 0;
}

wst_status_t wst_recv_peer_rx_plan(struct wst_receiver *r, struct peer *p)
{
    const struct wst_plan *pl = r->plan;
    size_t first = pl->sender_first[p->rank];
    size_t *bounds = calloc((size_t)pl->n_layers + 1, sizeof(*bounds));

    if (bounds == NULL)
        return WST_ERR_NO_MEMORY;
    wst_recv_peer_rx_close(p); /* they borrow the old slice */
    for (uint32_t layer = 0; layer < pl->n_layers; layer++) {
        size_t lo, hi;
        wst_recv_layer_items(r, p->rank, layer, &lo, &hi);
        bounds[layer] = lo - first;
    }
    bounds[pl->n_layers] = pl->sender_first[p->rank + 1] - first;
    free(p->rx_layer_first);
    p->rx_layer_first = bounds;
    p->rx_plan = (struct wst_rx_plan){
        .items = pl->items + first,
        .n_items = pl->sender_first[p->rank + 1] - first,
        .n_layers = pl->n_layers,
        .layer_first = bounds,
        .regions = r->rx_regions,
        .n_regions = r->n_regions,
    };
    return WST_OK;
}

/* Whether every item of 'pl' writes a keyed region (a put plan's half
 * then sees no data). */
static int put_only(const struct wst_rx_plan *pl)
{
    for (size_t k = 0; k < pl->n_items; k++)
        if (!pl->regions[pl->items[k].region].keyed)
            return 0;
    return 1;
}

/* The am half for p, of a put plan with regions that have no key when
 * 'put_share' (am.h). */
static wst_status_t open_am(struct wst_receiver *r, struct peer *p,
                            int put_share)
{
    struct wst_rx_am_params ap = {
        .log = &r->log,
        .landing = r->landing,
        .ucx_cuda = wst_worker_supports_cuda(r->worker),
        .device_landing = r->device_landing,
        .stats = &r->am_stats,
        .plan = &p->rx_plan,
        .events = wst_recv_rx_events(p),
        .hashers = r->hashers,
        .worker = r->worker,
        .put_share = put_share,
    };
    return wst_rx_am_create(&ap, &p->rx);
}

wst_status_t wst_recv_peer_rx_open(struct wst_receiver *r, struct peer *p)
{
    wst_status_t st = WST_OK;

    /* A half lives as long as the plan it was made for: a refit with the
     * same mover reuses it, allocating nothing (begin resets it). */
    if (p->rx != NULL && p->rx_kind == p->mover)
        return WST_OK;
    if (p->rx != p->nccl_rx)
        wst_rx_destroy(p->rx);
    p->rx = NULL;
    p->rx_kind = p->mover;
    switch (p->mover) {
    case WST_MOVER_NCCL:
        p->rx = p->nccl_rx;
        break;
    case WST_MOVER_PUT:
        /* Regions without a key (the engine's device memory) take am on
         * the put wire: the am half takes those, counting the rest. */
        if (!put_only(&p->rx_plan)) {
            st = open_am(r, p, 1);
            break;
        }
        st = wst_rx_put_create(&p->rx_plan, &p->rx);
        break;
    case WST_MOVER_AM:
        st = open_am(r, p, 0);
        break;
    }
    if (st == WST_OK && p->rx == NULL)
        st = WST_ERR_INVALID;
    if (st != WST_OK)
        p->rx_kind = 0;
    return st;
}

/* The peer whose plan's data token the message carries: the rank it
 * claims must hold that secret (sent only on its own control connection). */
static struct peer *token_peer(struct wst_receiver *r,
                               const struct wst_data_hdr *hdr)
{
    struct peer *p = r->by_rank != NULL && hdr->rank < r->world_size
                         ? r->by_rank[hdr->rank]
                         : NULL;

    return p != NULL && p->plan_sent && p->data_token == hdr->token ? p : NULL;
}

/* The sender of a data message, while its refit is the one receiving. */
static struct peer *data_peer(struct wst_receiver *r,
                              const struct wst_data_hdr *hdr)
{
    struct peer *p = token_peer(r, hdr);

    if (p == NULL) {
        /* Not from the sender it names: never its bytes, and no failure
         * of its refit either (which would let anyone fail one). */
        if (!r->forged_logged) {
            WST_WARN(&r->log,
                     "data claiming sender rank %u with a wrong token "
                     "dropped (further ones are counted, not logged)",
                     hdr->rank);
            r->forged_logged = 1;
        }
        pthread_mutex_lock(&r->lock);
        r->state.forged_data++;
        pthread_mutex_unlock(&r->lock);
        return NULL;
    }
    if (p->rx == NULL || !wst_rm_takes_data(&r->rm, hdr->rank, hdr->version))
        return NULL;
    return p;
}

wst_status_t wst_recv_on_data_dest(void *arg, const struct wst_data_hdr *hdr,
                                   size_t len, int rndv, void **dest_p)
{
    struct wst_receiver *r = arg;
    struct peer *p = data_peer(r, hdr);

    if (p == NULL) {
        WST_DEBUG(&r->log, "data for version %llu dropped (not receiving it)",
                  (unsigned long long)hdr->version);
        return WST_ERR_STATE;
    }
    if (p->rx->ops->data_dest == NULL) {
        /* Its mover takes no messages: nothing of its plan comes so. */
        wst_recv_refit_fail(r, WST_ERR_PROTOCOL,
                            "sender %s: data for item %u outside its plan "
                            "(its mover is %s)",
                            p->name, hdr->item, p->rx->ops->name);
        return WST_ERR_PROTOCOL;
    }
    return p->rx->ops->data_dest(p->rx, hdr, len, rndv, dest_p);
}

void wst_recv_on_data_done(void *arg, const struct wst_data_hdr *hdr,
                           void *dest, size_t len, wst_status_t status)
{
    struct wst_receiver *r = arg;
    struct peer *p = token_peer(r, hdr);

    /* Its half placed it, and decides (it may hold landing room). */
    if (p != NULL && p->rx != NULL && p->rx->ops->data_done != NULL) {
        p->rx->ops->data_done(p->rx, hdr, dest, len, status);
        return;
    }
    /* The half that placed it is gone: its landing room comes back. */
    if (r->landing != NULL && dest != NULL &&
        wst_landing_owns(r->landing, dest))
        wst_landing_release(r->landing, dest);
    else if (r->device_landing != NULL && dest != NULL &&
             wst_landing_owns(r->device_landing, dest))
        wst_landing_release(r->device_landing, dest);
}
