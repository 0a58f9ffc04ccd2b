/* fuzz_codec.c - libFuzzer harness for the control message codec
 * (proto/codec.h).
 *
 * Every input is decoded as a peer's control message, of any type. What
 * decodes must encode again (decode's checks are encode's), decode again,
 * and encode to the same bytes a second time: a decoded message carries
 * everything its encoding needs, and nothing decode would refuse. What
 * peeking at a have manifest counts (wst_msg_peek_have) is never below
 * what decoding gives.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void die(const char *what, const char *err)
{
    fprintf(stderr, "fuzz_codec: %s%s%s\n", what, err[0] ? ": " : "", err);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct wst_msg m, again;
    uint8_t *enc = NULL, *enc2 = NULL;
    size_t len = 0, len2 = 0;
    char err[512] = "";
    size_t peeked = 0;
    int is_have = wst_msg_peek_have(data, size, &peeked);

    if (wst_msg_decode(data, size, WST_MSG_MAX_DEFAULT, &m, err, sizeof(err)) !=
        WST_OK)
        return 0;
    /* The receiver refuses manifests over its limit from this count. */
    if (m.type == WST_MSG_HAVE && m.u.have.n_entries > 0 &&
        (!is_have || peeked < m.u.have.n_entries))
        die("peeking counts fewer have entries than decoding", "");
    if (wst_msg_encode(&m, &enc, &len) != WST_OK)
        die("a decoded message does not encode", "");
    if (wst_msg_decode(enc, len, WST_MSG_MAX_DEFAULT, &again, err,
                       sizeof(err)) != WST_OK)
        die("a re-encoded message does not decode", err);
    if (again.type != m.type)
        die("the type changed in a round trip", "");
    if (wst_msg_encode(&again, &enc2, &len2) != WST_OK)
        die("a round-tripped message does not encode", "");
    if (len2 != len || memcmp(enc, enc2, len) != 0)
        die("a round trip changed the encoding", "");
    free(enc2);
    free(enc);
    wst_msg_release(&again);
    wst_msg_release(&m);
    return 0;
}
