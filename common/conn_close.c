/* conn_close.c - closing connections: deferred endpoint and socket close,
 * lingering, and the graveyard of data endpoints.
 *
 *  - a closed connection is unlinked at once, but its endpoints are closed
 *    only after ucp_worker_progress returns (closing an endpoint from
 *    inside UCX's own failure handling of it aborts UCX 1.13), and the
 *    connection is freed when UCX completes those close requests;
 *  - a data endpoint without peer-failure mode (shared memory) is never
 *    closed before the worker is: when a stopped peer resumes, UCX 1.13
 *    delivers its late rendezvous acknowledgements to whatever request ids
 *    the endpoint had, and asserts if a close has freed them. It is parked
 *    in a graveyard instead.
 */
#include <stdlib.h>

#include "array.h"
#include "clock.h"
#include "worker_internal.h"

static void conn_release_ref(struct wst_conn *c)
{
    if (--c->close_refs == 0) {
        c->worker->closing--;
        free(c);
    }
}

static void close_done(void *request, ucs_status_t status, void *user_data)
{
    (void)status;
    ucp_request_free(request);
    conn_release_ref(user_data);
}

static void ep_close_force(struct wst_conn *c, ucp_ep_h ep)
{
    ucp_request_param_t cp = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK |
                        UCP_OP_ATTR_FIELD_USER_DATA,
        .flags = UCP_EP_CLOSE_FLAG_FORCE,
        .cb.send = close_done,
        .user_data = c,
    };
    ucs_status_ptr_t req;

    c->close_refs++;
    req = ucp_ep_close_nbx(ep, &cp);
    if (req == NULL || UCS_PTR_IS_ERR(req))
        conn_release_ref(c);
}

void wst_conn_close(wst_conn_t *c)
{
    /* Usually runs inside a UCX callback or a socket event: only unlink
     * and mark it here (failed silences its error handlers);
     * wst_conn_close_pending does the rest once ucp_worker_progress and
     * the socket events have returned. */
    wst_worker_t *w = c->worker;

    wst_conn_unlink(c);
    c->failed = 1;
    c->user = NULL;
    c->next = w->to_close;
    w->to_close = c;
}

static void bury(wst_worker_t *w, ucp_ep_h ep)
{
    if (wst_array_grow(&w->graveyard, &w->graveyard_cap, w->n_graveyard + 1,
                       sizeof(*w->graveyard)) != WST_OK) {
        /* Leaking the endpoint is the safe failure here. */
        WST_WARN(w->log, "no memory to park a data endpoint: leaked");
        return;
    }
    w->graveyard[w->n_graveyard++] = ep;
}

/* Outside UCX callbacks: closes the endpoints of connections closed since
 * the last call. */
void wst_conn_close_pending(wst_worker_t *w)
{
    while (w->to_close != NULL) {
        struct wst_conn *c = w->to_close;
        w->to_close = c->next;
        w->closing++;
        c->close_refs = 1;
        wst_lanes_conn_close(c);
        if (c->data_ep != NULL && c->data_peer_errors)
            ep_close_force(c, c->data_ep);
        else if (c->data_ep != NULL)
            bury(w, c->data_ep);
        wst_channel_release(c);
        conn_release_ref(c);
    }
}

static void graveyard_close_done(void *request, ucs_status_t status,
                                 void *user_data)
{
    (void)status;
    (void)user_data;
    ucp_request_free(request);
}

/* At shutdown: no late message can arrive once the worker is gone. */
void wst_conn_close_graveyard(wst_worker_t *w)
{
    ucp_request_param_t cp = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK,
        .flags = UCP_EP_CLOSE_FLAG_FORCE,
        .cb.send = graveyard_close_done,
    };

    for (size_t i = 0; i < w->n_graveyard; i++)
        (void)ucp_ep_close_nbx(w->graveyard[i], &cp);
    free(w->graveyard);
    w->graveyard = NULL;
    w->n_graveyard = 0;
    w->graveyard_cap = 0;
}

void wst_conn_close_later(wst_conn_t *c, double linger_s)
{
    c->failed = 1;
    c->user = NULL;
    c->close_at = wst_now_ns() + (uint64_t)(linger_s * 1e9);
    if (c->close_at == 0)
        c->close_at = 1;
}
