/* auth.h - the deployment secret and the MACs made from it.
 *
 * Every peer of a deployment holds the same secret, read from a file that
 * only its owner may read. MACs are HMAC-SHA256 (OpenSSL's EVP_MAC);
 * nothing here is hand-written crypto. A worker without a secret runs
 * "insecure": the same handshake and MACs, keyed with a fixed public key
 * (WST_AUTH_INSECURE_KEY), so both modes share one code path.
 */
#ifndef WST_AUTH_H
#define WST_AUTH_H

#include <stddef.h>
#include <stdint.h>
#include <wstream/status.h>

#include "config.h"

#define WST_AUTH_SECRET_MIN 32   /* bytes */
#define WST_AUTH_SECRET_MAX 4096 /* bytes */
#define WST_AUTH_MAC_LEN 32
#define WST_AUTH_NONCE_LEN 32
#define WST_AUTH_KEY_LEN 32

/* The key of insecure mode: public, it only marks the mode. */
#define WST_AUTH_INSECURE_KEY "wstream insecure: no secret"

/* A secret; len 0 means none (insecure). bytes is owned by the struct. */
struct wst_auth_secret {
    uint8_t *bytes;
    size_t len;
};

/* The programs' --auth-secret-file flag (and WST_AUTH_SECRET_FILE), for
 * their WST_CONFIG_LIKE entries: one definition of its help and default. */
enum { WST_AUTH_CONFIG_SECRET_FILE };
extern const struct wst_config_entry wst_auth_config[];

/* Reads the secret from 'path': a regular file of WST_AUTH_SECRET_MIN to
 * WST_AUTH_SECRET_MAX bytes that neither group nor others may access.
 * Otherwise returns WST_ERR_CONFIG with the reason (naming the file and
 * its mode) in err. */
wst_status_t wst_auth_secret_load(const char *path, struct wst_auth_secret *s,
                                  char *err, size_t errlen);

/* Creates 'path' (which must not exist) holding WST_AUTH_SECRET_MIN fresh
 * random bytes, mode 0600: a deployment's secret for tests and the demo.
 * WST_ERR_IO with the reason in err otherwise. */
wst_status_t wst_auth_secret_create(const char *path, char *err, size_t errlen);

/* Copies src into *dst (both may be empty). */
wst_status_t wst_auth_secret_copy(struct wst_auth_secret *dst,
                                  const struct wst_auth_secret *src);

/* Wipes and frees the bytes; *s is empty after. */
void wst_auth_secret_release(struct wst_auth_secret *s);

/* One piece of a MAC's input. */
struct wst_auth_part {
    const void *data;
    size_t len;
};

/* out = HMAC-SHA256(key, parts[0] || ... || parts[n-1]). */
wst_status_t wst_auth_mac(const void *key, size_t key_len,
                          const struct wst_auth_part *parts, size_t n,
                          uint8_t out[WST_AUTH_MAC_LEN]);

/* Nonzero when the two MACs are equal; constant time. */
int wst_auth_mac_equal(const uint8_t a[WST_AUTH_MAC_LEN],
                       const uint8_t b[WST_AUTH_MAC_LEN]);

/* len bytes from OpenSSL's CSPRNG. */
wst_status_t wst_auth_random(void *buf, size_t len);

#endif
