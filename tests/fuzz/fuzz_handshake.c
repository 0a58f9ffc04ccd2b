/* fuzz_handshake.c - libFuzzer harness for the authenticated handshake
 * (common/handshake.h) and the frames that follow it (common/frame.h),
 * played by a peer that does not hold the secret.
 *
 * Input: byte 0 picks the side under attack (even: the agent's server
 * side, odd: a sender's client side), byte 1 the size of the pieces the
 * rest arrives in (1..32: any split must behave alike); the rest is what
 * the hostile peer sends. Whatever it sends:
 *   - a step never consumes past its input nor returns more than
 *     WST_HS_OUT_MAX bytes, and one given input always makes progress;
 *   - the handshake never completes: without the secret no proof can
 *     match (a completion is a forged authentication);
 *   - after a failure, further steps keep failing.
 * The bytes after byte 1 are also offered as frame number 0 under a
 * session key the peer cannot know: they must never open.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "handshake.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_handshake: %s\n", what);
        abort();
    }
}

static void fuzz_handshake(enum wst_hs_role role, size_t piece,
                           const uint8_t *in, size_t len)
{
    static uint8_t key[32] = "the deployment's secret, 32 B..";
    struct wst_auth_secret secret = {.bytes = key, .len = sizeof(key)};
    uint8_t nonce[WST_AUTH_NONCE_LEN] = {7};
    uint8_t out[WST_HS_OUT_MAX];
    struct wst_hs hs;
    size_t used = 0, out_len = 0, off = 0;
    wst_status_t st;

    wst_hs_init(&hs, role, &secret, nonce);
    st = wst_hs_step(&hs, NULL, 0, &used, out, &out_len);
    check(out_len <= sizeof(out), "a first step returned too much");
    while (st == WST_INPROGRESS && off < len) {
        size_t n = len - off < piece ? len - off : piece;
        used = 0;
        out_len = 0;
        st = wst_hs_step(&hs, in + off, n, &used, out, &out_len);
        check(used <= n, "a step consumed past its input");
        check(out_len <= sizeof(out), "a step returned too much");
        /* A step may stop at a message's end; it must not stall. */
        if (st == WST_INPROGRESS)
            check(used > 0 || out_len > 0, "a step with input made no "
                                           "progress");
        off += used;
    }
    check(st != WST_OK, "authenticated a peer without the secret");
    if (st != WST_INPROGRESS) {
        used = 0;
        check(wst_hs_step(&hs, in, len, &used, out, &out_len) != WST_OK,
              "a failed handshake completed later");
    }
    wst_hs_clear(&hs);
}

static void fuzz_frame(const uint8_t *in, size_t len)
{
    static const uint8_t session[WST_AUTH_KEY_LEN] = {1, 2, 3};
    uint32_t plen = 0;
    size_t need = 0;
    wst_status_t st = wst_frame_open(session, WST_HS_CLIENT, 0, in, len,
                                     1u << 20, &plen, &need);

    check(st != WST_OK, "a forged frame opened");
    if (st == WST_INPROGRESS && need != 0)
        check(need > len, "an incomplete frame needs no more bytes");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    fuzz_handshake(data[0] % 2 ? WST_HS_CLIENT : WST_HS_SERVER,
                   (size_t)data[1] % 32 + 1, data + 2, size - 2);
    fuzz_frame(data + 2, size - 2);
    return 0;
}
