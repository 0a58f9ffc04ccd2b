/* put_rx.c - the put mover's receiving half (see put.h): it only keeps
 * the refit's version; the bytes come one-sided. */
#include "put.h"

#include <stdlib.h>

static wst_status_t put_begin(struct wst_rx *rx, uint64_t version)
{
    rx->version = version;
    rx->receiving = 1;
    return WST_OK;
}

static void put_allow(struct wst_rx *rx, uint32_t layer_bound)
{
    rx->layer_bound = layer_bound;
}

static void put_abort(struct wst_rx *rx)
{
    rx->receiving = 0;
}

static void put_destroy(struct wst_rx *rx)
{
    free(rx);
}

static const struct wst_rx_ops put_rx_ops = {
    .name = "put",
    .counts_bytes = 0,
    .begin = put_begin,
    .allow = put_allow,
    .abort = put_abort,
    .destroy = put_destroy,
};

wst_status_t wst_rx_put_create(const struct wst_rx_plan *plan,
                               struct wst_rx **rx_p)
{
    struct wst_rx *rx = calloc(1, sizeof(*rx));

    if (rx == NULL)
        return WST_ERR_NO_MEMORY;
    rx->ops = &put_rx_ops;
    rx->plan = plan;
    *rx_p = rx;
    return WST_OK;
}
