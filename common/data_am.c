/* data_am.c - receiving data messages (WST_AM_DATA), the am mover's
 * receiving half: the owner's data_dest callback names each message's
 * destination; a message it has no room for is parked, with every later
 * one behind it, until wst_worker_data_resume; data_done reports the bytes
 * landed (or failed).
 *
 * A message that arrives on a data lane (lane.c) is relayed: the lane's
 * thread hands it to its main worker (a struct wst_relay, holding the
 * rendezvous descriptor or a copy of the eager bytes), which places it
 * as above, parks it among its own, or drops it; a placed rendezvous
 * message goes back to the lane, whose thread receives the bytes and
 * reports them to the main thread again. Every callback of the owner
 * runs on the main worker's thread.
 *
 *   lane: AM ──relay──▶ main: data_dest ──dest──▶ lane: receive
 *                        main: data_done ◀──done── lane
 */
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "ucx_status.h"
#include "worker_internal.h"

/* A data message being received into its destination; linked in
 * w->receiving until UCX reports it (or its worker is reset). */
struct wst_pending_data {
    struct wst_pending_data *prev, *next;
    wst_worker_t *worker;
    struct wst_data_hdr hdr;
    size_t len;
    void *dest;
    struct wst_relay *relay; /* on a lane: reported through it */
    uint64_t posted_ns;      /* its receive was posted */
};

/* A data message a lane received, owned by whichever thread holds it. */
struct wst_relay {
    wst_worker_t *main;
    wst_worker_t *lane;
    unsigned lane_index;
    uint64_t gen; /* the lane's lane_gen when it arrived */
    struct wst_data_hdr hdr;
    size_t len;
    void *desc; /* rendezvous descriptor on the lane's worker, or NULL */
    void *dest;
    wst_status_t status;
    /* Its stages (wst_rx_timing), rendezvous ones only. */
    uint64_t arrived_ns, placed_ns, posted_ns, received_ns;
    unsigned char bytes[]; /* the eager payload when desc is NULL */
};

/* A data message whose owner had no room for it yet (data_dest said
 * WST_ERR_BUSY): a rendezvous descriptor UCX keeps for us, or an eager
 * payload copied here. Parked in arrival order until wst_worker_data_resume
 * finds room. */
struct wst_parked_data {
    struct wst_parked_data *next;
    struct wst_data_hdr hdr;
    size_t len;
    struct wst_relay *relay; /* a lane's message (desc and bytes unused) */
    void *desc;              /* rendezvous descriptor, or NULL */
    unsigned char bytes[];   /* the eager payload when desc is NULL */
};

/* Receives the LENGTH bytes of the rendezvous message DESC into DEST;
 * done(request, status, length, arg) runs when they are in or failed, at
 * once when that is known at once. */
static void am_recv_data(wst_worker_t *w, void *desc, void *dest, size_t length,
                         ucp_am_recv_data_nbx_callback_t done, void *arg)
{
    ucp_request_param_t rp = {
        .op_attr_mask =
            UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.recv_am = done,
        .user_data = arg,
    };
    ucs_status_ptr_t req =
        ucp_am_recv_data_nbx(w->worker, desc, dest, length, &rp);

    if (req == NULL)
        done(NULL, UCS_OK, length, arg);
    else if (UCS_PTR_IS_ERR(req))
        done(NULL, UCS_PTR_STATUS(req), 0, arg);
}

static void relay_report(struct wst_relay *r, wst_status_t status);

static void pending_link(wst_worker_t *w, struct wst_pending_data *pd)
{
    pd->prev = NULL;
    pd->next = w->receiving;
    if (w->receiving != NULL)
        w->receiving->prev = pd;
    w->receiving = pd;
    w->n_receiving++;
    w->busy++;
}

/* Reports pd to the owner, and frees it. */
static void pending_end(struct wst_pending_data *pd, wst_status_t status)
{
    wst_worker_t *w = pd->worker;

    if (pd->prev != NULL)
        pd->prev->next = pd->next;
    else
        w->receiving = pd->next;
    if (pd->next != NULL)
        pd->next->prev = pd->prev;
    w->n_receiving--;
    w->busy--;
    if (pd->relay != NULL) {
        pd->relay->posted_ns = pd->posted_ns;
        pd->relay->received_ns = wst_now_ns();
        relay_report(pd->relay, status);
    } else if (status == WST_OK) {
        uint64_t ns = wst_now_ns() - pd->posted_ns;
        w->lane_rx_bytes[0] += pd->len;
        w->rx_timing.messages++;
        w->rx_timing.bytes += pd->len;
        w->rx_timing.to_recv_ns += ns;
        if (ns > w->rx_timing.max_ns)
            w->rx_timing.max_ns = ns;
    }
    if (pd->relay == NULL && w->ops.data_done != NULL)
        w->ops.data_done(w->ops.arg, &pd->hdr, pd->dest, pd->len, status);
    free(pd);
}

static void data_recv_done(void *request, ucs_status_t status, size_t length,
                           void *user_data)
{
    (void)length;
    pending_end(user_data, wst_status_from_ucs(status));
    if (request != NULL)
        ucp_request_free(request);
}

void wst_data_am_cancel_receiving(wst_worker_t *w)
{
    while (w->receiving != NULL)
        pending_end(w->receiving, WST_ERR_CANCELED);
}

/* ---- relaying a lane's messages ---- */

/* Our senders send eagerly only below 8 KiB (wire.c); a lane copies an
 * eager message to relay it, so a peer's larger ones are refused rather
 * than copied. */
#define RELAY_EAGER_MAX (64u * 1024u)
/* Messages relayed and not yet given back, over every lane: the bound on
 * what a flood of them makes the agent hold. */
#define RELAYS_HELD_MAX 16384

static void relay_free(struct wst_relay *r)
{
    __atomic_fetch_sub(&r->main->relays_held, 1, __ATOMIC_RELAXED);
    free(r);
}

static void data_recv_done(void *request, ucs_status_t status, size_t length,
                           void *user_data);

/* Main thread: the lane's receive of r ended. */
static void relay_done_run(void *arg)
{
    struct wst_relay *r = arg;
    wst_worker_t *w = r->main;

    w->n_relayed--;
    if (r->status == WST_OK) {
        uint64_t now = wst_now_ns();
        struct wst_rx_timing *t = &w->rx_timing;
        w->lane_rx_bytes[r->lane_index] += r->len;
        t->messages++;
        t->bytes += r->len;
        t->to_place_ns += r->placed_ns - r->arrived_ns;
        t->to_post_ns += r->posted_ns - r->placed_ns;
        t->to_recv_ns += r->received_ns - r->posted_ns;
        t->to_report_ns += now - r->received_ns;
        if (now - r->arrived_ns > t->max_ns)
            t->max_ns = now - r->arrived_ns;
    }
    if (w->ops.data_done != NULL)
        w->ops.data_done(w->ops.arg, &r->hdr, r->dest, r->len, r->status);
    relay_free(r);
}

/* Lane thread: tells the main thread how r's receive ended. */
static void relay_report(struct wst_relay *r, wst_status_t status)
{
    r->status = status;
    if (wst_worker_post(r->main, relay_done_run, r) == WST_ERR_NO_MEMORY) {
        WST_ERROR(r->lane->log, "a data lane's receive report was lost");
        relay_free(r);
    }
}

/* Lane thread: receives r's bytes into the destination the main thread
 * chose, unless the lane was reset since r arrived. */
static void relay_recv_run(void *arg)
{
    struct wst_relay *r = arg;
    wst_worker_t *lane = r->lane;

    if (r->gen != lane->lane_gen || lane->worker == NULL) {
        relay_report(r, WST_ERR_CANCELED);
        return;
    }
    struct wst_pending_data *pd = malloc(sizeof(*pd));
    if (pd == NULL) {
        ucp_am_data_release(lane->worker, r->desc);
        relay_report(r, WST_ERR_NO_MEMORY);
        return;
    }
    pd->worker = lane;
    pd->relay = r;
    pd->hdr = r->hdr;
    pd->len = r->len;
    pd->dest = r->dest;
    pd->posted_ns = wst_now_ns();
    pending_link(lane, pd);
    am_recv_data(lane, r->desc, r->dest, r->len, data_recv_done, pd);
}

/* Lane thread: gives back a dropped message's descriptor. */
static void relay_release_run(void *arg)
{
    struct wst_relay *r = arg;
    wst_worker_t *lane = r->lane;

    if (r->gen == lane->lane_gen && lane->worker != NULL)
        ucp_am_data_release(lane->worker, r->desc);
    relay_free(r);
}

/* Main thread: r is not received; its descriptor goes back to the lane
 * ('release'), unless the lanes are being destroyed or reset anyway. */
static void relay_drop(wst_worker_t *w, struct wst_relay *r, int release)
{
    if (r->desc != NULL && release && !w->lanes_gone &&
        wst_worker_post(r->lane, relay_release_run, r) != WST_ERR_NO_MEMORY)
        return;
    relay_free(r);
}

/* Main thread: r goes to 'dest'. Eager bytes are copied here; a
 * rendezvous message is received by its lane. */
static void relay_place(wst_worker_t *w, struct wst_relay *r, void *dest)
{
    wst_status_t st = WST_ERR_CANCELED;

    if (r->desc == NULL) {
        memcpy(dest, r->bytes, r->len);
        w->lane_rx_bytes[r->lane_index] += r->len;
        st = WST_OK;
    } else if (!w->lanes_gone) {
        r->dest = dest;
        r->placed_ns = wst_now_ns();
        w->n_relayed++;
        if (wst_worker_post(r->lane, relay_recv_run, r) != WST_ERR_NO_MEMORY)
            return;
        w->n_relayed--;
        st = WST_ERR_NO_MEMORY;
    }
    if (w->ops.data_done != NULL)
        w->ops.data_done(w->ops.arg, &r->hdr, dest, r->len, st);
    relay_free(r);
}

static void park(wst_worker_t *w, struct wst_parked_data *pk)
{
    w->parked_total++;
    if (w->parked_tail != NULL)
        w->parked_tail->next = pk;
    else
        w->parked = pk;
    w->parked_tail = pk;
}

/* Main thread: a lane's message offered to the owner like one of ours. */
static void relay_offer_run(void *arg)
{
    struct wst_relay *r = arg;
    wst_worker_t *w = r->main;
    void *dest = NULL;
    wst_status_t st;

    if (w->lanes_gone) {
        relay_free(r);
        return;
    }
    st = w->parked != NULL ? WST_ERR_BUSY
                           : w->ops.data_dest(w->ops.arg, &r->hdr, r->len,
                                              r->desc != NULL, &dest);
    if (st == WST_OK) {
        relay_place(w, r, dest);
    } else if (st == WST_ERR_BUSY) {
        struct wst_parked_data *pk = malloc(sizeof(*pk));
        if (pk == NULL) {
            WST_ERROR(w->log, "no memory to park a %zu-byte data message",
                      r->len);
            if (w->ops.data_done != NULL)
                w->ops.data_done(w->ops.arg, &r->hdr, NULL, r->len,
                                 WST_ERR_NO_MEMORY);
            relay_drop(w, r, 1);
            return;
        }
        pk->next = NULL;
        pk->hdr = r->hdr;
        pk->len = r->len;
        pk->relay = r;
        pk->desc = NULL;
        park(w, pk);
    } else {
        relay_drop(w, r, 1);
    }
}

ucs_status_t wst_data_relay_in(wst_worker_t *lane, const void *header,
                               void *data, size_t length, int rndv)
{
    wst_worker_t *w = lane->main;

    /* A sender takes no data: a peer sending some back on the endpoint
     * UCX made for its rendezvous replies is dropped, as on lane 0. (Its
     * ops never change after create: readable here.) */
    if (w->ops.data_dest == NULL) {
        if (!lane->relay_warned++)
            WST_WARN(lane->log,
                     "data lane %u: a data message to a worker that takes "
                     "none dropped (further drops are not logged)",
                     lane->lane_index);
        return UCS_OK;
    }
    if (!rndv && length > RELAY_EAGER_MAX) {
        if (!lane->relay_warned++)
            WST_WARN(lane->log,
                     "data lane %u: an eager data message of %zu bytes dropped "
                     "(at most %u; further drops are not logged)",
                     lane->lane_index, length, RELAY_EAGER_MAX);
        return UCS_OK;
    }
    if (__atomic_fetch_add(&w->relays_held, 1, __ATOMIC_RELAXED) >=
        RELAYS_HELD_MAX) {
        __atomic_fetch_sub(&w->relays_held, 1, __ATOMIC_RELAXED);
        if (!lane->relay_warned++)
            WST_WARN(lane->log,
                     "data lane %u: %d data messages wait already; one more "
                     "dropped (further drops are not logged)",
                     lane->lane_index, RELAYS_HELD_MAX);
        return UCS_OK;
    }
    struct wst_relay *r = malloc(sizeof(*r) + (rndv ? 0 : length));

    if (r == NULL) {
        __atomic_fetch_sub(&w->relays_held, 1, __ATOMIC_RELAXED);
        WST_ERROR(lane->log, "no memory to relay a %zu-byte data message",
                  length);
        return UCS_OK; /* dropped: UCX answers a rendezvous sender */
    }
    r->main = lane->main;
    r->lane = lane;
    r->lane_index = lane->lane_index;
    r->gen = lane->lane_gen;
    memcpy(&r->hdr, header, sizeof(r->hdr));
    r->len = length;
    r->desc = rndv ? data : NULL;
    r->dest = NULL;
    r->status = WST_OK;
    r->arrived_ns = r->placed_ns = r->posted_ns = r->received_ns =
        rndv ? wst_now_ns() : 0;
    if (!rndv)
        memcpy(r->bytes, data, length);
    if (wst_worker_post(lane->main, relay_offer_run, r) == WST_ERR_NO_MEMORY) {
        relay_free(r);
        return UCS_OK;
    }
    return rndv ? UCS_INPROGRESS : UCS_OK;
}

/* Receives one accepted data message into 'dest': a rendezvous descriptor
 * by ucp_am_recv_data_nbx, eager bytes by copy. in_cb: called from the
 * message's own callback, where a descriptor we do not take is UCX's to
 * release (once the callback returns UCS_OK); parked ones are ours. */
static void data_receive(wst_worker_t *w, const struct wst_data_hdr *hdr,
                         void *desc, const void *bytes, size_t length,
                         void *dest, int in_cb)
{
    if (desc == NULL) {
        memcpy(dest, bytes, length);
        w->lane_rx_bytes[0] += length;
        if (w->ops.data_done != NULL)
            w->ops.data_done(w->ops.arg, hdr, dest, length, WST_OK);
        return;
    }
    struct wst_pending_data *pd = malloc(sizeof(*pd));
    if (pd == NULL) {
        if (w->ops.data_done != NULL)
            w->ops.data_done(w->ops.arg, hdr, dest, length, WST_ERR_NO_MEMORY);
        if (!in_cb)
            ucp_am_data_release(w->worker, desc);
        return;
    }
    pd->worker = w;
    pd->relay = NULL;
    pending_link(w, pd);
    pd->hdr = *hdr;
    pd->len = length;
    pd->dest = dest;
    pd->posted_ns = wst_now_ns();
    am_recv_data(w, desc, dest, length, data_recv_done, pd);
}

/* Parks a message data_dest had no room for. Returns the callback's
 * status: UCS_INPROGRESS keeps a rendezvous descriptor alive. */
static ucs_status_t data_park(wst_worker_t *w, const struct wst_data_hdr *hdr,
                              void *data, size_t length, int rndv)
{
    struct wst_parked_data *pk = malloc(sizeof(*pk) + (rndv ? 0 : length));

    if (pk == NULL) {
        WST_ERROR(w->log, "no memory to park a %zu-byte data message", length);
        if (w->ops.data_done != NULL)
            w->ops.data_done(w->ops.arg, hdr, NULL, length, WST_ERR_NO_MEMORY);
        return UCS_OK; /* UCX releases a rendezvous descriptor */
    }
    pk->next = NULL;
    pk->hdr = *hdr;
    pk->len = length;
    pk->relay = NULL;
    pk->desc = rndv ? data : NULL;
    if (!rndv)
        memcpy(pk->bytes, data, length);
    park(w, pk);
    return rndv ? UCS_INPROGRESS : UCS_OK;
}

ucs_status_t wst_data_am_recv(void *arg, const void *header,
                              size_t header_length, void *data, size_t length,
                              const ucp_am_recv_param_t *param)
{
    wst_worker_t *w = arg;
    int rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    struct wst_data_hdr hdr;
    void *dest = NULL;
    wst_status_t st;

    if (header_length == sizeof(hdr) && w->main != NULL)
        return wst_data_relay_in(w, header, data, length, rndv);
    if (header_length != sizeof(hdr) || w->ops.data_dest == NULL) {
        WST_WARN(w->log, "data message with a %zu-byte header dropped",
                 header_length);
        goto drop;
    }
    memcpy(&hdr, header, sizeof(hdr));
    /* Later messages wait behind parked ones: arrival order is kept. */
    st = w->parked != NULL
             ? WST_ERR_BUSY
             : w->ops.data_dest(w->ops.arg, &hdr, length, rndv, &dest);
    if (st == WST_ERR_BUSY)
        return data_park(w, &hdr, data, length, rndv);
    if (st != WST_OK)
        goto drop;
    data_receive(w, &hdr, rndv ? data : NULL, data, length, dest, 1);
    return UCS_OK;

drop:
    /* A rendezvous message refused in its callback: UCX answers the sender
     * and frees the descriptor once we return UCS_OK. Releasing it here
     * too answered twice, and the sender's UCX aborted on the second
     * answer (ucp_rndv_ats_handler: the request was gone). */
    return UCS_OK;
}

static void parked_free(wst_worker_t *w, struct wst_parked_data *pk,
                        int release)
{
    if (pk->relay != NULL)
        relay_drop(w, pk->relay, release);
    else if (pk->desc != NULL && release)
        ucp_am_data_release(w->worker, pk->desc);
    free(pk);
}

void wst_data_am_drop_parked(wst_worker_t *w, int release)
{
    while (w->parked != NULL) {
        struct wst_parked_data *pk = w->parked;
        w->parked = pk->next;
        parked_free(w, pk, release);
    }
    w->parked_tail = NULL;
}

void wst_worker_rx_timing_take(wst_worker_t *w, struct wst_rx_timing *out)
{
    *out = w->rx_timing;
    memset(&w->rx_timing, 0, sizeof(w->rx_timing));
}

uint64_t wst_worker_parked_total(const wst_worker_t *w)
{
    return w->parked_total;
}

void wst_worker_data_resume(wst_worker_t *w)
{
    struct wst_parked_data *pk;

    while ((pk = w->parked) != NULL) {
        void *dest = NULL;
        int rndv =
            pk->relay != NULL ? pk->relay->desc != NULL : pk->desc != NULL;
        wst_status_t st =
            w->ops.data_dest(w->ops.arg, &pk->hdr, pk->len, rndv, &dest);

        if (st == WST_ERR_BUSY)
            return;
        w->parked = pk->next;
        if (w->parked == NULL)
            w->parked_tail = NULL;
        if (st == WST_OK && pk->relay != NULL) {
            relay_place(w, pk->relay, dest);
            free(pk);
        } else if (st == WST_OK) {
            data_receive(w, &pk->hdr, pk->desc, pk->bytes, pk->len, dest, 0);
            free(pk);
        } else {
            parked_free(w, pk, 1);
        }
    }
}
