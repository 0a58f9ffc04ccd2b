/* lane.c - data lanes (worker.h, "Data lanes"). Not built yet: one lane. */
#include "worker_internal.h"

unsigned wst_worker_lanes(const wst_worker_t *w)
{
    (void)w;
    return 1;
}

wst_status_t wst_worker_lane_address(wst_worker_t *w, unsigned lane,
                                     void **addr_p, size_t *len_p)
{
    (void)w;
    (void)lane;
    (void)addr_p;
    (void)len_p;
    return WST_ERR_INVALID;
}

wst_status_t wst_conn_open_lanes(wst_conn_t *c, const void *const *addrs,
                                 const size_t *lens, unsigned n,
                                 int peer_errors)
{
    (void)c;
    (void)addrs;
    (void)lens;
    (void)n;
    (void)peer_errors;
    return WST_OK;
}

unsigned wst_conn_lanes(const wst_conn_t *c)
{
    (void)c;
    return 1;
}

wst_status_t wst_conn_lane_send(wst_conn_t *c, unsigned lane,
                                const struct wst_data_hdr *hdr,
                                const void *src, size_t len, uint32_t flags,
                                wst_lane_send_cb cb, void *arg)
{
    (void)c;
    (void)lane;
    (void)hdr;
    (void)src;
    (void)len;
    (void)flags;
    (void)cb;
    (void)arg;
    return WST_ERR_UNSUPPORTED;
}
