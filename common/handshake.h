/* handshake.h - the authenticated handshake of a control connection, as
 * pure functions over bytes (no sockets; fuzz-friendly).
 *
 *   client → server  C1: "WSTH" ver flags 0 0 | client nonce      (40 B)
 *   server → client  S1: "WSTH" ver flags 0 0 | server nonce |
 *                        MAC(secret, "server" | C1 | S1[0..40))   (72 B)
 *   client → server  C2: MAC(secret, "client" | C1 | S1)          (32 B)
 *
 * ver is WST_HS_VERSION; flags bit 0 says "insecure" (no secret). Each side
 * proves it holds the secret over both fresh nonces and its own role, so
 * replays and reflections fail. The session key is MAC(secret, "session" |
 * client nonce | server nonce); the control messages that follow are
 * frames sealed with it (frame.h). Insecure peers run the same exchange
 * keyed with WST_AUTH_INSECURE_KEY; a secure peer refuses an insecure one
 * and the other way round, each saying why.
 *
 * Drive it with wst_hs_step: feed the bytes received (any split), send the
 * bytes it returns. The server reveals nothing of use before the client
 * proved itself except its own proof; neither side learns the other's UCX
 * worker address before the handshake is done.
 */
#ifndef WST_HANDSHAKE_H
#define WST_HANDSHAKE_H

#include <stddef.h>
#include <stdint.h>
#include <wstream/status.h>

#include "auth.h"

#define WST_HS_VERSION 1
#define WST_HS_MAGIC "WSTH"
#define WST_HS_C1_LEN 40
#define WST_HS_S1_LEN 72
#define WST_HS_C2_LEN 32
#define WST_HS_OUT_MAX WST_HS_S1_LEN /* most bytes one step returns */
#define WST_HS_FLAG_INSECURE 1u

enum wst_hs_role { WST_HS_CLIENT, WST_HS_SERVER };

struct wst_hs {
    enum wst_hs_role role;
    const uint8_t *key; /* the secret, or WST_AUTH_INSECURE_KEY; borrowed */
    size_t key_len;
    int insecure;
    int state; /* private */
    uint8_t nonce[WST_AUTH_NONCE_LEN];
    uint8_t c1[WST_HS_C1_LEN];
    uint8_t s1[WST_HS_S1_LEN];
    uint8_t in[WST_HS_S1_LEN]; /* the message being received */
    size_t in_have;
    uint8_t session[WST_AUTH_KEY_LEN]; /* valid once done */
    char why[192];                     /* why it failed */
};

/* Starts a handshake. secret NULL or empty: insecure. 'nonce' is this
 * side's fresh random nonce (wst_auth_random); the secret is borrowed for
 * the handshake's lifetime. */
void wst_hs_init(struct wst_hs *hs, enum wst_hs_role role,
                 const struct wst_auth_secret *secret,
                 const uint8_t nonce[WST_AUTH_NONCE_LEN]);

/* One step: consumes up to in_len bytes of 'in' (*used_p says how many:
 * never past the end of the handshake, so bytes after it are the peer's
 * first frames) and writes what to send to out (at least WST_HS_OUT_MAX
 * bytes; *out_len_p). Call it first with no input: the client then
 * returns C1. Returns WST_INPROGRESS while more input is needed, WST_OK
 * once the handshake is done (the session key is in hs->session), or an
 * error with the reason in hs->why: WST_ERR_PROTOCOL (not our protocol),
 * WST_ERR_VERSION, WST_ERR_INTEGRITY (the peer's proof does not match:
 * another secret), WST_ERR_CONFIG (one side insecure, the other not).
 * After an error, bytes in out (a server's S1 that tells an insecure
 * client why) may still be sent before closing; further calls fail. */
wst_status_t wst_hs_step(struct wst_hs *hs, const uint8_t *in, size_t in_len,
                         size_t *used_p, uint8_t *out, size_t *out_len_p);

/* Bytes the next message still needs (0 when done or failed). */
size_t wst_hs_need(const struct wst_hs *hs);

/* Wipes the handshake's keys. */
void wst_hs_clear(struct wst_hs *hs);

#endif
