/* listener.c - the sockaddr listener: connection requests become accepted
 * connections (peer-failure mode on, like connected ones).
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>

#include "ucx_status.h"
#include "worker_internal.h"

static void conn_request_cb(ucp_conn_request_h req, void *arg)
{
    wst_worker_t *w = arg;
    char name[96] = "unknown peer";
    ucp_conn_request_attr_t ra = {.field_mask =
                                      UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR};

    if (ucp_conn_request_query(req, &ra) == UCS_OK &&
        ra.client_address.ss_family == AF_INET) {
        struct sockaddr_in *sin = (struct sockaddr_in *)&ra.client_address;
        char ip[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &sin->sin_addr, ip, sizeof(ip));
        snprintf(name, sizeof(name), "%s:%u", ip, ntohs(sin->sin_port));
    }
    struct wst_conn *c = wst_conn_new(w, name);
    if (c == NULL) {
        ucp_listener_reject(w->listener, req);
        return;
    }
    ucp_ep_params_t ep = {
        .field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST |
                      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
        .conn_request = req,
        .err_mode = UCP_ERR_HANDLING_MODE_PEER,
        .err_handler = {.cb = wst_conn_ep_error, .arg = c},
    };
    ucs_status_t st = ucp_ep_create(w->worker, &ep, &c->ep);
    if (st != UCS_OK) {
        WST_WARN(w->log, "accepting %s: %s", name, ucs_status_string(st));
        wst_conn_unlink(c);
        free(c);
        return;
    }
    WST_DEBUG(w->log, "accepted control connection from %s", name);
    if (w->ops.accepted != NULL)
        w->ops.accepted(w->ops.arg, c);
}

wst_status_t wst_worker_listen(wst_worker_t *w, const char *host, uint16_t port,
                               uint16_t *port_p)
{
    struct sockaddr_storage ss;
    socklen_t sslen;
    wst_status_t status = wst_worker_resolve(w, host, port, &ss, &sslen);

    if (status != WST_OK)
        return status;
    ucp_listener_params_t lp = {
        .field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
                      UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
        .sockaddr = {.addr = (struct sockaddr *)&ss, .addrlen = sslen},
        .conn_handler = {.cb = conn_request_cb, .arg = w},
    };
    ucs_status_t st = ucp_listener_create(w->worker, &lp, &w->listener);
    if (st != UCS_OK) {
        WST_ERROR(w->log, "listen on %s:%u: %s", host, port,
                  ucs_status_string(st));
        return wst_status_from_ucs(st);
    }
    ucp_listener_attr_t la = {.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR};
    st = ucp_listener_query(w->listener, &la);
    if (st != UCS_OK) {
        ucp_listener_destroy(w->listener);
        w->listener = NULL;
        return wst_status_from_ucs(st);
    }
    *port_p = ntohs(((struct sockaddr_in *)&la.sockaddr)->sin_port);
    return WST_OK;
}
