/* heartbeat_msg.c - the heartbeat message and its default timing. */
#include "heartbeat_msg.h"

#include "codec.h"

wst_status_t wst_heartbeat_encode(uint64_t seq, void **msg_p, size_t *len_p)
{
    struct wst_msg hb = {.type = WST_MSG_HEARTBEAT, .u.heartbeat.seq = seq};
    uint8_t *buf = NULL;
    wst_status_t st;

    st = wst_msg_encode(&hb, &buf, len_p);
    if (st == WST_OK)
        *msg_p = buf;
    return st;
}

wst_status_t wst_heartbeat_params_set(struct wst_heartbeat_params *hb,
                                      double interval_s, double timeout_s)
{
    if (interval_s <= 0 || timeout_s <= interval_s)
        return WST_ERR_INVALID;
    hb->interval_s = interval_s;
    hb->timeout_s = timeout_s;
    hb->encode = wst_heartbeat_encode;
    return WST_OK;
}
