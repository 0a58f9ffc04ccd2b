/* frame.c - sealing and opening control frames (frame.h). */
#include "frame.h"

#include <string.h>

static const char *const role_label[] = {"wstream-frame client",
                                         "wstream-frame server"};

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static wst_status_t frame_mac(const uint8_t key[WST_AUTH_KEY_LEN],
                              enum wst_hs_role role, uint64_t seq,
                              const uint8_t head[WST_FRAME_HEAD],
                              const void *payload, uint32_t len,
                              uint8_t mac[WST_FRAME_TAIL])
{
    uint8_t seq_le[8];

    for (int i = 0; i < 8; i++)
        seq_le[i] = (uint8_t)(seq >> (8 * i));
    struct wst_auth_part parts[] = {
        {role_label[role == WST_HS_SERVER], strlen(role_label[0])},
        {seq_le, sizeof(seq_le)},
        {head, WST_FRAME_HEAD},
        {payload, len},
    };
    return wst_auth_mac(key, WST_AUTH_KEY_LEN, parts, 4, mac);
}

wst_status_t wst_frame_seal(const uint8_t key[WST_AUTH_KEY_LEN],
                            enum wst_hs_role role, uint64_t seq,
                            const void *payload, uint32_t len,
                            uint8_t head[WST_FRAME_HEAD],
                            uint8_t mac[WST_FRAME_TAIL])
{
    put_u32(head, len);
    return frame_mac(key, role, seq, head, payload, len, mac);
}

wst_status_t wst_frame_open(const uint8_t key[WST_AUTH_KEY_LEN],
                            enum wst_hs_role role, uint64_t seq,
                            const uint8_t *buf, size_t have, size_t max_len,
                            uint32_t *len_p, size_t *need_p)
{
    uint8_t mac[WST_FRAME_TAIL];

    *need_p = 0;
    if (have < WST_FRAME_HEAD)
        return WST_INPROGRESS;
    uint32_t len = get_u32(buf);
    *len_p = len;
    if (len > max_len)
        return WST_ERR_TOO_LARGE;
    *need_p = WST_FRAME_HEAD + (size_t)len + WST_FRAME_TAIL;
    if (have < *need_p)
        return WST_INPROGRESS;
    if (frame_mac(key, role, seq, buf, buf + WST_FRAME_HEAD, len, mac) !=
        WST_OK)
        return WST_ERR_INTEGRITY;
    if (!wst_auth_mac_equal(mac, buf + WST_FRAME_HEAD + len))
        return WST_ERR_INTEGRITY;
    return WST_OK;
}
