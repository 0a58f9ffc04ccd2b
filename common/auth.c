/* auth.c - the deployment secret (file checks) and HMAC-SHA256 through
 * OpenSSL's EVP_MAC.
 */
#include "auth.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "errbuf.h"

const struct wst_config_entry wst_auth_config[] = {
    [WST_AUTH_CONFIG_SECRET_FILE] =
        {"auth-secret-file", WST_CONFIG_STRING, "",
         "the deployment's secret: a file of 32 to 4096 random bytes only "
         "its owner may read; peers prove they hold it before anything else",
         0, NULL, NULL},
    WST_CONFIG_END,
};

static EVP_MAC *hmac;
static pthread_once_t hmac_once = PTHREAD_ONCE_INIT;

static void hmac_fetch(void)
{
    hmac = EVP_MAC_fetch(NULL, "HMAC", NULL);
}

static wst_status_t read_all(int fd, uint8_t *buf, size_t len)
{
    size_t got = 0;

    while (got < len) {
        ssize_t n = read(fd, buf + got, len - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return WST_ERR_IO;
        got += (size_t)n;
    }
    return WST_OK;
}

wst_status_t wst_auth_secret_load(const char *path, struct wst_auth_secret *s,
                                  char *err, size_t errlen)
{
    struct stat st;
    wst_status_t status = WST_ERR_CONFIG;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);

    s->bytes = NULL;
    s->len = 0;
    if (fd < 0) {
        wst_errf(err, errlen, "auth secret file %s: %s", path, strerror(errno));
        return WST_ERR_CONFIG;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        wst_errf(err, errlen, "auth secret file %s: not a regular file", path);
        goto out_close;
    }
    if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
        wst_errf(err, errlen,
                 "auth secret file %s has mode %04o: group and others must "
                 "have no access (chmod 600 %s)",
                 path, (unsigned)(st.st_mode & 07777), path);
        goto out_close;
    }
    if (st.st_size < WST_AUTH_SECRET_MIN || st.st_size > WST_AUTH_SECRET_MAX) {
        wst_errf(err, errlen,
                 "auth secret file %s holds %lld bytes: need %d to %d "
                 "(e.g. head -c 32 /dev/urandom)",
                 path, (long long)st.st_size, WST_AUTH_SECRET_MIN,
                 WST_AUTH_SECRET_MAX);
        goto out_close;
    }
    s->len = (size_t)st.st_size;
    s->bytes = malloc(s->len);
    if (s->bytes == NULL) {
        status = WST_ERR_NO_MEMORY;
        s->len = 0;
        goto out_close;
    }
    if (read_all(fd, s->bytes, s->len) != WST_OK) {
        wst_errf(err, errlen, "auth secret file %s: short read", path);
        wst_auth_secret_release(s);
        goto out_close;
    }
    status = WST_OK;
out_close:
    close(fd);
    return status;
}

wst_status_t wst_auth_secret_create(const char *path, char *err, size_t errlen)
{
    uint8_t bytes[WST_AUTH_SECRET_MIN];
    wst_status_t st = wst_auth_random(bytes, sizeof(bytes));
    int fd;

    if (st != WST_OK) {
        wst_errf(err, errlen, "no random bytes for %s", path);
        return st;
    }
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        wst_errf(err, errlen, "create %s: %s", path, strerror(errno));
        return WST_ERR_IO;
    }
    if (write(fd, bytes, sizeof(bytes)) != (ssize_t)sizeof(bytes)) {
        wst_errf(err, errlen, "write %s: %s", path, strerror(errno));
        st = WST_ERR_IO;
    }
    if (close(fd) != 0 && st == WST_OK) {
        wst_errf(err, errlen, "close %s: %s", path, strerror(errno));
        st = WST_ERR_IO;
    }
    OPENSSL_cleanse(bytes, sizeof(bytes));
    return st;
}

wst_status_t wst_auth_secret_copy(struct wst_auth_secret *dst,
                                  const struct wst_auth_secret *src)
{
    dst->bytes = NULL;
    dst->len = 0;
    if (src == NULL || src->len == 0)
        return WST_OK;
    dst->bytes = malloc(src->len);
    if (dst->bytes == NULL)
        return WST_ERR_NO_MEMORY;
    memcpy(dst->bytes, src->bytes, src->len);
    dst->len = src->len;
    return WST_OK;
}

void wst_auth_secret_release(struct wst_auth_secret *s)
{
    if (s->bytes != NULL) {
        OPENSSL_cleanse(s->bytes, s->len);
        free(s->bytes);
    }
    s->bytes = NULL;
    s->len = 0;
}

wst_status_t wst_auth_mac(const void *key, size_t key_len,
                          const struct wst_auth_part *parts, size_t n,
                          uint8_t out[WST_AUTH_MAC_LEN])
{
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
        OSSL_PARAM_construct_end(),
    };
    wst_status_t status = WST_ERR_INTEGRITY;
    size_t out_len = 0;

    pthread_once(&hmac_once, hmac_fetch);
    if (hmac == NULL)
        return WST_ERR_UNSUPPORTED;
    EVP_MAC_CTX *ctx = EVP_MAC_CTX_new(hmac);
    if (ctx == NULL)
        return WST_ERR_NO_MEMORY;
    if (EVP_MAC_init(ctx, key, key_len, params) != 1)
        goto out_free;
    for (size_t i = 0; i < n; i++)
        if (parts[i].len > 0 &&
            EVP_MAC_update(ctx, parts[i].data, parts[i].len) != 1)
            goto out_free;
    if (EVP_MAC_final(ctx, out, &out_len, WST_AUTH_MAC_LEN) != 1 ||
        out_len != WST_AUTH_MAC_LEN)
        goto out_free;
    status = WST_OK;
out_free:
    EVP_MAC_CTX_free(ctx);
    return status;
}

int wst_auth_mac_equal(const uint8_t a[WST_AUTH_MAC_LEN],
                       const uint8_t b[WST_AUTH_MAC_LEN])
{
    return CRYPTO_memcmp(a, b, WST_AUTH_MAC_LEN) == 0;
}

wst_status_t wst_auth_random(void *buf, size_t len)
{
    return RAND_bytes(buf, (int)len) == 1 ? WST_OK : WST_ERR_IO;
}
