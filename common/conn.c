/* conn.c - connections: an authenticated control channel (our socket,
 * channel.c), an optional UCX data endpoint to the peer's worker address.
 *
 * Closing them is conn_close.c's; accepting them is listener.c's and
 * channel.c's.
 */
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "errbuf.h"
#include "lanes.h"
#include "ucx_status.h"
#include "worker_internal.h"

void wst_conn_fail(struct wst_conn *c, wst_status_t status, const char *why)
{
    wst_worker_t *w = c->worker;

    if (c->failed)
        return;
    c->failed = 1;
    /* The owner logs it: only it knows whether this loses anything. */
    WST_DEBUG(w->log, "peer %s: %s", c->name, why);
    if (w->ops.conn_failed != NULL)
        w->ops.conn_failed(w->ops.arg, c, status, why);
}

void wst_conn_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    struct wst_conn *c = arg;

    (void)ep;
    wst_conn_fail(c, wst_status_from_ucs(status), ucs_status_string(status));
}

wst_status_t wst_worker_resolve(const wst_worker_t *w, const char *host,
                                uint16_t port, struct sockaddr_storage *ss,
                                socklen_t *len_p)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    char service[16];
    int rc;

    snprintf(service, sizeof(service), "%u", port);
    rc = getaddrinfo(host, service, &hints, &res);
    if (rc != 0 || res == NULL) {
        WST_ERROR(w->log, "cannot resolve '%s': %s", host, gai_strerror(rc));
        return WST_ERR_UNREACHABLE;
    }
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len_p = res->ai_addrlen;
    freeaddrinfo(res);
    return WST_OK;
}

struct wst_conn *wst_conn_new(wst_worker_t *w, const char *name)
{
    struct wst_conn *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return NULL;
    c->worker = w;
    c->id = ++w->next_conn_id;
    c->n_lanes = 1;
    c->fd = -1;
    c->last_rx = c->last_tx = wst_now_ns();
    snprintf(c->name, sizeof(c->name), "%s", name);
    c->next = w->conns;
    w->conns = c;
    return c;
}

void wst_conn_unlink(struct wst_conn *c)
{
    wst_worker_t *w = c->worker;

    for (struct wst_conn **pp = &w->conns; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            return;
        }
    }
    for (struct wst_conn **pp = &w->unauth; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            w->n_unauth--;
            wst_channel_unauth_left(w);
            return;
        }
    }
}

wst_status_t wst_conn_connect(wst_worker_t *w, const char *host, uint16_t port,
                              wst_conn_t **conn_p)
{
    struct sockaddr_storage ss;
    socklen_t sslen;
    char name[96];
    wst_status_t status = wst_worker_resolve(w, host, port, &ss, &sslen);

    if (status != WST_OK)
        return status;
    snprintf(name, sizeof(name), "%s:%u", host, port);
    struct wst_conn *c = wst_conn_new(w, name);
    if (c == NULL)
        return WST_ERR_NO_MEMORY;
    status = wst_channel_connect(c, &ss, sslen);
    if (status != WST_OK) {
        /* Closed like any other, never reported: the caller sees status. */
        wst_conn_close(c);
        return status;
    }
    *conn_p = c;
    return WST_OK;
}

wst_status_t wst_conn_send(wst_conn_t *c, void *buf, size_t len)
{
    if (c->failed) {
        free(buf);
        return WST_ERR_PEER_FAILED;
    }
    return wst_channel_send(c, buf, len);
}

/* Whether puts on c's new data endpoint run in hardware (lanes.h), from
 * the worker's transports, probed once; the reason goes to c->rma_why. */
static int data_rma_real(struct wst_conn *c, const struct wst_lane *lanes,
                         size_t n_lanes)
{
    wst_worker_t *w = c->worker;

    c->device_put = 0;
    if (!w->rma) {
        /* Without the feature UCX has no rma lane to offer. */
        wst_errf(c->rma_why, sizeof(c->rma_why),
                 "no remote memory access on this worker: %s", w->rma_why);
        snprintf(c->device_why, sizeof(c->device_why), "%s", c->rma_why);
        return 0;
    }
    int real =
        wst_lanes_rma_real(lanes, n_lanes, w->transports, w->n_transports,
                           c->data_peer_errors, c->rma_why, sizeof(c->rma_why));
    c->device_put = wst_lanes_device_put(lanes, n_lanes, w->transports,
                                         w->n_transports, c->data_peer_errors,
                                         c->device_why, sizeof(c->device_why));
    WST_DEBUG(w->log, "peer %s: data lanes: %s; %s", c->name, c->rma_why,
              c->device_why);
    return real;
}

wst_status_t wst_conn_open_data(wst_conn_t *c, const void *addr,
                                size_t addr_len, int peer_errors, char *lanes,
                                size_t lanes_len, int *rma_real_p)
{
    wst_worker_t *w = c->worker;

    (void)addr_len; /* the address is self-describing; length checked by
                       the codec */
    /* Without peer mode there is no error handler: such an endpoint may
     * outlive c in the graveyard and must not point at it. */
    ucp_ep_params_t ep = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      (peer_errors ? UCP_EP_PARAM_FIELD_ERR_HANDLER : 0),
        .address = addr,
        .err_mode = peer_errors ? UCP_ERR_HANDLING_MODE_PEER
                                : UCP_ERR_HANDLING_MODE_NONE,
        .err_handler = {.cb = wst_conn_ep_error, .arg = c},
    };
    c->data_peer_errors = peer_errors;
    ucs_status_t st = ucp_ep_create(w->worker, &ep, &c->data_ep);
    if (st != UCS_OK) {
        WST_ERROR(w->log, "data endpoint to %s: %s", c->name,
                  ucs_status_string(st));
        c->data_ep = NULL;
        return wst_status_from_ucs(st);
    }
    struct wst_lane read[WST_LANES_MAX];
    size_t n_read = wst_lanes_read(c->data_ep, read, WST_LANES_MAX);
    wst_lanes_format(read, n_read, lanes, lanes_len);
    *rma_real_p = data_rma_real(c, read, n_read);
    return WST_OK;
}

ucp_ep_h wst_conn_data_ep(wst_conn_t *c)
{
    return c->data_ep;
}

void wst_conn_set_user(wst_conn_t *c, void *user)
{
    c->user = user;
}

void *wst_conn_user(const wst_conn_t *c)
{
    return c->user;
}

const char *wst_conn_name(const wst_conn_t *c)
{
    return c->name;
}

int wst_conn_device_put(const wst_conn_t *c, const char **why_p)
{
    if (why_p != NULL)
        *why_p = c->device_why;
    return c->device_put;
}

const char *wst_conn_rma_why(const wst_conn_t *c)
{
    return c->rma_why;
}

uint64_t wst_conn_silent_ns(const wst_conn_t *c)
{
    uint64_t now = wst_now_ns();

    return now > c->last_rx ? now - c->last_rx : 0;
}
