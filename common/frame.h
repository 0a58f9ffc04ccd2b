/* frame.h - control messages on an authenticated connection, as pure
 * functions over bytes.
 *
 *   frame: u32 length (little-endian) | payload | MAC (32 B)
 *   MAC = HMAC-SHA256(session key, role of the sender | u64 sequence |
 *                     u32 length | payload)
 *
 * Each direction numbers its frames 0, 1, 2, ...; the receiving side
 * knows the number it expects, so a replayed, reordered, reflected or
 * altered frame fails its MAC. The session key comes from the handshake
 * (handshake.h).
 */
#ifndef WST_FRAME_H
#define WST_FRAME_H

#include <stddef.h>
#include <stdint.h>
#include <wstream/status.h>

#include "auth.h"
#include "handshake.h"

#define WST_FRAME_HEAD 4
#define WST_FRAME_TAIL WST_AUTH_MAC_LEN

/* The head and MAC of frame number 'seq' sent by 'role' with 'payload'. */
wst_status_t wst_frame_seal(const uint8_t key[WST_AUTH_KEY_LEN],
                            enum wst_hs_role role, uint64_t seq,
                            const void *payload, uint32_t len,
                            uint8_t head[WST_FRAME_HEAD],
                            uint8_t mac[WST_FRAME_TAIL]);

/* Looks for frame number 'seq' sent by 'role' at the start of buf[0..have).
 * WST_INPROGRESS: incomplete (*need_p says how many bytes the whole frame
 * takes once its head is in, else 0); WST_OK: payload at buf +
 * WST_FRAME_HEAD, *len_p bytes, *need_p the frame's whole size;
 * WST_ERR_TOO_LARGE: the length exceeds max_len; WST_ERR_INTEGRITY: the
 * MAC does not match. */
wst_status_t wst_frame_open(const uint8_t key[WST_AUTH_KEY_LEN],
                            enum wst_hs_role role, uint64_t seq,
                            const uint8_t *buf, size_t have, size_t max_len,
                            uint32_t *len_p, size_t *need_p);

#endif
