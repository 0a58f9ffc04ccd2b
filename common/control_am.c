/* control_am.c - receiving control messages (WST_AM_CONTROL): the length
 * cap, eager delivery, rendezvous receive into a buffer of our own, and
 * delivery to the owner's message callback with the connection found from
 * the reply endpoint.
 */
#include <stdlib.h>

#include "clock.h"
#include "worker_internal.h"

/* A control message that arrived by rendezvous and is being received. */
struct wst_pending_msg {
    wst_worker_t *worker;
    ucp_ep_h reply_ep;
    void *buf;
    size_t len;
};

static void deliver_message(wst_worker_t *w, ucp_ep_h reply_ep, const void *buf,
                            size_t len)
{
    struct wst_conn *c = reply_ep != NULL ? wst_conn_find(w, reply_ep) : NULL;

    if (c == NULL) {
        WST_WARN(w->log,
                 "control message of %zu bytes from an unknown "
                 "endpoint dropped",
                 len);
        return;
    }
    if (c->failed)
        return;
    c->last_rx = wst_now_ns();
    if (w->ops.message != NULL)
        w->ops.message(w->ops.arg, c, buf, len);
}

static void control_recv_done(void *request, ucs_status_t status, size_t length,
                              void *user_data)
{
    struct wst_pending_msg *pm = user_data;

    if (status == UCS_OK)
        deliver_message(pm->worker, pm->reply_ep, pm->buf, length);
    else
        WST_WARN(pm->worker->log, "control message receive failed: %s",
                 ucs_status_string(status));
    pm->worker->busy--;
    free(pm->buf);
    free(pm);
    if (request != NULL)
        ucp_request_free(request);
}

ucs_status_t wst_control_am_recv(void *arg, const void *header,
                                 size_t header_length, void *data,
                                 size_t length,
                                 const ucp_am_recv_param_t *param)
{
    wst_worker_t *w = arg;
    ucp_ep_h reply_ep = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)
                            ? param->reply_ep
                            : NULL;
    int rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;

    (void)header;
    (void)header_length;
    if (length > w->max_control_msg) {
        /* Length cap before anything is allocated or parsed. */
        WST_WARN(w->log,
                 "control message of %zu bytes exceeds the %zu-byte "
                 "cap, dropped",
                 length, w->max_control_msg);
        if (rndv)
            ucp_am_data_release(w->worker, data);
        return UCS_OK;
    }
    if (!rndv) {
        deliver_message(w, reply_ep, data, length);
        return UCS_OK;
    }
    struct wst_pending_msg *pm = calloc(1, sizeof(*pm));
    void *buf = malloc(length ? length : 1);
    if (pm == NULL || buf == NULL) {
        free(pm);
        free(buf);
        ucp_am_data_release(w->worker, data);
        return UCS_OK;
    }
    pm->worker = w;
    w->busy++;
    pm->reply_ep = reply_ep;
    pm->buf = buf;
    pm->len = length;
    wst_am_recv_data(w, data, buf, length, control_recv_done, pm);
    return UCS_OK;
}
