/* handshake.c - the handshake's messages, proofs and session key
 * (handshake.h). Pure: no I/O, no clock, no randomness of its own.
 */
#include "handshake.h"

#include <openssl/crypto.h>
#include <stdio.h>
#include <string.h>

#include "errbuf.h"

enum {
    HS_START,   /* nothing sent or received yet */
    HS_WAIT_C1, /* server */
    HS_WAIT_S1, /* client */
    HS_WAIT_C2, /* server */
    HS_DONE,
    HS_FAILED,
};

#define LABEL_SERVER "wstream-hs-1 server"
#define LABEL_CLIENT "wstream-hs-1 client"
#define LABEL_SESSION "wstream-hs-1 session"

void wst_hs_init(struct wst_hs *hs, enum wst_hs_role role,
                 const struct wst_auth_secret *secret,
                 const uint8_t nonce[WST_AUTH_NONCE_LEN])
{
    memset(hs, 0, sizeof(*hs));
    hs->role = role;
    if (secret != NULL && secret->len > 0) {
        hs->key = secret->bytes;
        hs->key_len = secret->len;
    } else {
        hs->insecure = 1;
        hs->key = (const uint8_t *)WST_AUTH_INSECURE_KEY;
        hs->key_len = sizeof(WST_AUTH_INSECURE_KEY) - 1;
    }
    memcpy(hs->nonce, nonce, WST_AUTH_NONCE_LEN);
    hs->state = HS_START;
}

size_t wst_hs_need(const struct wst_hs *hs)
{
    switch (hs->state) {
    case HS_START:
        return hs->role == WST_HS_SERVER ? WST_HS_C1_LEN : 0;
    case HS_WAIT_C1:
        return WST_HS_C1_LEN - hs->in_have;
    case HS_WAIT_S1:
        return WST_HS_S1_LEN - hs->in_have;
    case HS_WAIT_C2:
        return WST_HS_C2_LEN - hs->in_have;
    default:
        return 0;
    }
}

static wst_status_t fail(struct wst_hs *hs, wst_status_t status,
                         const char *fmt, const char *arg)
{
    hs->state = HS_FAILED;
    wst_errf(hs->why, sizeof(hs->why), fmt, arg);
    return status;
}

/* The 8-byte head of C1 and S1. */
static void put_head(struct wst_hs *hs, uint8_t *p)
{
    memcpy(p, WST_HS_MAGIC, 4);
    p[4] = WST_HS_VERSION;
    p[5] = hs->insecure ? WST_HS_FLAG_INSECURE : 0;
    p[6] = 0;
    p[7] = 0;
}

/* Checks the peer's head; names what is wrong. */
static wst_status_t check_head(struct wst_hs *hs, const uint8_t *p)
{
    const char *peer = hs->role == WST_HS_SERVER ? "client" : "receiver";

    if (memcmp(p, WST_HS_MAGIC, 4) != 0)
        return fail(hs, WST_ERR_PROTOCOL,
                    "not a wstream %s: bad handshake magic", peer);
    if (p[4] != WST_HS_VERSION) {
        char v[64];
        snprintf(v, sizeof(v), "handshake version %u, we speak %u", p[4],
                 WST_HS_VERSION);
        return fail(hs, WST_ERR_VERSION, "%s", v);
    }
    if ((p[5] & ~WST_HS_FLAG_INSECURE) != 0 || p[6] != 0 || p[7] != 0)
        return fail(hs, WST_ERR_PROTOCOL, "%s sent unknown handshake flags",
                    peer);
    return WST_OK;
}

/* The peer is insecure exactly when we are. */
static wst_status_t check_mode(struct wst_hs *hs, const uint8_t *p)
{
    int peer_insecure = (p[5] & WST_HS_FLAG_INSECURE) != 0;

    if (peer_insecure == hs->insecure)
        return WST_OK;
    if (hs->role == WST_HS_SERVER)
        return fail(hs, WST_ERR_CONFIG, "%s",
                    peer_insecure ? "client has no auth secret (insecure) "
                                    "but this receiver requires one"
                                  : "client has an auth secret but this "
                                    "receiver runs --insecure");
    return fail(hs, WST_ERR_CONFIG, "%s",
                peer_insecure ? "receiver runs --insecure but we have an "
                                "auth secret: refusing it"
                              : "receiver requires an auth secret and we "
                                "have none (--auth-secret-file)");
}

static wst_status_t proof(struct wst_hs *hs, const char *label, int full_s1,
                          uint8_t out[WST_AUTH_MAC_LEN])
{
    struct wst_auth_part parts[] = {
        {label, strlen(label)},
        {hs->c1, WST_HS_C1_LEN},
        {hs->s1, full_s1 ? WST_HS_S1_LEN : 8 + WST_AUTH_NONCE_LEN},
    };
    return wst_auth_mac(hs->key, hs->key_len, parts, 3, out);
}

static wst_status_t derive_session(struct wst_hs *hs)
{
    struct wst_auth_part parts[] = {
        {LABEL_SESSION, sizeof(LABEL_SESSION) - 1},
        {hs->c1 + 8, WST_AUTH_NONCE_LEN},
        {hs->s1 + 8, WST_AUTH_NONCE_LEN},
    };
    return wst_auth_mac(hs->key, hs->key_len, parts, 3, hs->session);
}

/* Server: C1 is in; answer S1. */
static wst_status_t on_c1(struct wst_hs *hs, uint8_t *out, size_t *out_len_p)
{
    wst_status_t st = check_head(hs, hs->in);

    if (st != WST_OK)
        return st;
    memcpy(hs->c1, hs->in, WST_HS_C1_LEN);
    put_head(hs, hs->s1);
    memcpy(hs->s1 + 8, hs->nonce, WST_AUTH_NONCE_LEN);
    if (proof(hs, LABEL_SERVER, 0, hs->s1 + 8 + WST_AUTH_NONCE_LEN) != WST_OK)
        return fail(hs, WST_ERR_INTEGRITY, "%s", "cannot compute a MAC");
    memcpy(out, hs->s1, WST_HS_S1_LEN);
    *out_len_p = WST_HS_S1_LEN;
    /* A mismatched mode is refused after S1 went out: it tells the
     * client which side lacks the secret. */
    st = check_mode(hs, hs->c1);
    if (st != WST_OK)
        return st;
    hs->state = HS_WAIT_C2;
    return WST_INPROGRESS;
}

/* Client: S1 is in; check the receiver's proof and answer C2. */
static wst_status_t on_s1(struct wst_hs *hs, uint8_t *out, size_t *out_len_p)
{
    uint8_t want[WST_AUTH_MAC_LEN];
    wst_status_t st = check_head(hs, hs->in);

    if (st != WST_OK)
        return st;
    memcpy(hs->s1, hs->in, WST_HS_S1_LEN);
    st = check_mode(hs, hs->s1);
    if (st != WST_OK)
        return st;
    if (proof(hs, LABEL_SERVER, 0, want) != WST_OK)
        return fail(hs, WST_ERR_INTEGRITY, "%s", "cannot compute a MAC");
    if (!wst_auth_mac_equal(want, hs->s1 + 8 + WST_AUTH_NONCE_LEN))
        return fail(hs, WST_ERR_INTEGRITY, "%s",
                    "receiver's proof does not match our auth secret "
                    "(another secret?)");
    if (proof(hs, LABEL_CLIENT, 1, out) != WST_OK ||
        derive_session(hs) != WST_OK)
        return fail(hs, WST_ERR_INTEGRITY, "%s", "cannot compute a MAC");
    *out_len_p = WST_HS_C2_LEN;
    hs->state = HS_DONE;
    return WST_OK;
}

/* Server: C2 is in; check the client's proof. */
static wst_status_t on_c2(struct wst_hs *hs)
{
    uint8_t want[WST_AUTH_MAC_LEN];

    if (proof(hs, LABEL_CLIENT, 1, want) != WST_OK)
        return fail(hs, WST_ERR_INTEGRITY, "%s", "cannot compute a MAC");
    if (!wst_auth_mac_equal(want, hs->in))
        return fail(hs, WST_ERR_INTEGRITY, "%s",
                    "client's proof does not match our auth secret "
                    "(another secret?)");
    if (derive_session(hs) != WST_OK)
        return fail(hs, WST_ERR_INTEGRITY, "%s", "cannot compute a MAC");
    hs->state = HS_DONE;
    return WST_OK;
}

wst_status_t wst_hs_step(struct wst_hs *hs, const uint8_t *in, size_t in_len,
                         size_t *used_p, uint8_t *out, size_t *out_len_p)
{
    *used_p = 0;
    *out_len_p = 0;
    if (hs->state == HS_FAILED)
        return WST_ERR_STATE;
    if (hs->state == HS_DONE)
        return WST_OK;
    if (hs->state == HS_START) {
        hs->in_have = 0;
        if (hs->role == WST_HS_SERVER) {
            hs->state = HS_WAIT_C1;
        } else {
            put_head(hs, hs->c1);
            memcpy(hs->c1 + 8, hs->nonce, WST_AUTH_NONCE_LEN);
            memcpy(out, hs->c1, WST_HS_C1_LEN);
            *out_len_p = WST_HS_C1_LEN;
            hs->state = HS_WAIT_S1;
            return WST_INPROGRESS;
        }
    }
    size_t need = wst_hs_need(hs);
    size_t take = in_len < need ? in_len : need;
    if (take > 0)
        memcpy(hs->in + hs->in_have, in, take);
    hs->in_have += take;
    *used_p = take;
    if (take < need)
        return WST_INPROGRESS;
    hs->in_have = 0;
    switch (hs->state) {
    case HS_WAIT_C1:
        return on_c1(hs, out, out_len_p);
    case HS_WAIT_S1:
        return on_s1(hs, out, out_len_p);
    case HS_WAIT_C2:
        return on_c2(hs);
    default:
        return fail(hs, WST_ERR_STATE, "%s", "handshake in a bad state");
    }
}

void wst_hs_clear(struct wst_hs *hs)
{
    OPENSSL_cleanse(hs->session, sizeof(hs->session));
    OPENSSL_cleanse(hs->in, sizeof(hs->in));
}
