/* listener.c - the receiver's listening port: a plain TCP socket of ours
 * (channel.c accepts on it and authenticates each peer before the owner
 * sees it). UCX's own sockaddr listener is not used: its connection
 * manager aborts on malformed bytes (UCX_NOTES.md).
 */
#include <stdio.h>

#include "worker_internal.h"

wst_status_t wst_worker_listen(wst_worker_t *w, const char *host, uint16_t port,
                               uint16_t *port_p)
{
    struct sockaddr_storage ss;
    socklen_t sslen;
    wst_status_t status = wst_worker_resolve(w, host, port, &ss, &sslen);

    if (status != WST_OK)
        return status;
    if (w->listen_fd >= 0) {
        WST_ERROR(w->log, "listen on %s:%u: already listening", host, port);
        return WST_ERR_STATE;
    }
    status = wst_channel_listen(w, &ss, sslen, port_p);
    if (status != WST_OK) {
        WST_ERROR(w->log, "listen on %s:%u: %s", host, port,
                  wst_status_string(status));
        return status;
    }
    if (w->secret.len == 0)
        WST_WARN(w->log,
                 "no auth secret: any process that reaches %s:%u is "
                 "trusted (insecure)",
                 host, *port_p);
    return WST_OK;
}
