/* data_am.c - receiving data messages (WST_AM_DATA), the am mover's
 * receiving half: the owner's data_dest callback names each message's
 * destination; a message it has no room for is parked, with every later
 * one behind it, until wst_worker_data_resume; data_done reports the bytes
 * landed (or failed).
 */
#include <stdlib.h>
#include <string.h>

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
};

/* A data message whose owner had no room for it yet (data_dest said
 * WST_ERR_BUSY): a rendezvous descriptor UCX keeps for us, or an eager
 * payload copied here. Parked in arrival order until wst_worker_data_resume
 * finds room. */
struct wst_parked_data {
    struct wst_parked_data *next;
    struct wst_data_hdr hdr;
    size_t len;
    void *desc;            /* rendezvous descriptor, or NULL */
    unsigned char bytes[]; /* the eager payload when desc is NULL */
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
    if (w->ops.data_done != NULL)
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
    pending_link(w, pd);
    pd->hdr = *hdr;
    pd->len = length;
    pd->dest = dest;
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
    pk->desc = rndv ? data : NULL;
    if (!rndv)
        memcpy(pk->bytes, data, length);
    w->parked_total++;
    if (w->parked_tail != NULL)
        w->parked_tail->next = pk;
    else
        w->parked = pk;
    w->parked_tail = pk;
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

    if (header_length != sizeof(hdr) || w->ops.data_dest == NULL) {
        WST_WARN(w->log, "data message with a %zu-byte header dropped",
                 header_length);
        goto drop;
    }
    memcpy(&hdr, header, sizeof(hdr));
    /* Later messages wait behind parked ones: arrival order is kept. */
    st = w->parked != NULL ? WST_ERR_BUSY
                           : w->ops.data_dest(w->ops.arg, &hdr, length, &dest);
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
    if (pk->desc != NULL && release)
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

uint64_t wst_worker_parked_total(const wst_worker_t *w)
{
    return w->parked_total;
}

void wst_worker_data_resume(wst_worker_t *w)
{
    struct wst_parked_data *pk;

    while ((pk = w->parked) != NULL) {
        void *dest = NULL;
        wst_status_t st =
            w->ops.data_dest(w->ops.arg, &pk->hdr, pk->len, &dest);

        if (st == WST_ERR_BUSY)
            return;
        w->parked = pk->next;
        if (w->parked == NULL)
            w->parked_tail = NULL;
        if (st == WST_OK) {
            data_receive(w, &pk->hdr, pk->desc, pk->bytes, pk->len, dest, 0);
            free(pk);
        } else {
            parked_free(w, pk, 1);
        }
    }
}
