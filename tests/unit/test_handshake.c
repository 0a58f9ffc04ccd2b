/* test_handshake.c - the deployment secret's file checks, HMAC-SHA256
 * against RFC 4231, the handshake between a client and a server fed as
 * pure functions (any split of bytes, wrong secrets both ways, insecure
 * mismatches both ways, replays, truncation, garbage) and the control
 * frames (replayed, reflected, altered, oversized, truncated). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "auth.h"
#include "frame.h"
#include "handshake.h"

static struct wst_auth_secret secret_of(uint8_t fill)
{
    static uint8_t bytes[2][40];
    static int next;
    struct wst_auth_secret s = {.bytes = bytes[next++ % 2], .len = 40};

    memset(s.bytes, fill, s.len);
    return s;
}

static void nonce_of(uint8_t *n, uint8_t fill)
{
    memset(n, fill, WST_AUTH_NONCE_LEN);
}

/* Feeds 'len' bytes to hs in pieces of 'piece', collecting its output. */
static wst_status_t feed(struct wst_hs *hs, const uint8_t *in, size_t len,
                         size_t piece, uint8_t *out, size_t *out_len,
                         size_t *used_total)
{
    wst_status_t st = WST_INPROGRESS;
    size_t off = 0;

    *out_len = 0;
    *used_total = 0;
    while (off < len) {
        size_t n = len - off < piece ? len - off : piece, used = 0, ol = 0;
        st = wst_hs_step(hs, in + off, n, &used, out + *out_len, &ol);
        *out_len += ol;
        *used_total += used;
        if (st != WST_INPROGRESS)
            return st;
        off += used;
        if (used == 0)
            break;
    }
    return st;
}

struct pair {
    struct wst_hs c, s;
    uint8_t c1[WST_HS_OUT_MAX], s1[WST_HS_OUT_MAX], c2[WST_HS_OUT_MAX];
    size_t c1_len, s1_len, c2_len;
    wst_status_t c_st, s_st, s1_st;
};

/* Runs C1 → S1 → C2 between c and s, feeding 'piece' bytes at a time. */
static void run_pair(struct pair *p, const struct wst_auth_secret *cs,
                     const struct wst_auth_secret *ss, size_t piece)
{
    uint8_t nc[WST_AUTH_NONCE_LEN], ns[WST_AUTH_NONCE_LEN];
    size_t used;

    nonce_of(nc, 0x11);
    nonce_of(ns, 0x22);
    wst_hs_init(&p->c, WST_HS_CLIENT, cs, nc);
    wst_hs_init(&p->s, WST_HS_SERVER, ss, ns);
    assert_int_equal(wst_hs_step(&p->c, NULL, 0, &used, p->c1, &p->c1_len),
                     WST_INPROGRESS);
    assert_int_equal(p->c1_len, WST_HS_C1_LEN);
    assert_int_equal(wst_hs_step(&p->s, NULL, 0, &used, p->s1, &p->s1_len),
                     WST_INPROGRESS);
    assert_int_equal(p->s1_len, 0);
    p->s1_st = feed(&p->s, p->c1, p->c1_len, piece, p->s1, &p->s1_len, &used);
    p->c_st = feed(&p->c, p->s1, p->s1_len, piece, p->c2, &p->c2_len, &used);
    p->s_st = WST_INPROGRESS;
    if (p->c_st == WST_OK)
        p->s_st =
            feed(&p->s, p->c2, p->c2_len, piece, p->s1 + 100, &used, &used);
}

static void test_handshake_ok_any_split(void **state)
{
    struct wst_auth_secret a = secret_of(0xaa);
    (void)state;

    for (size_t piece = 1; piece <= WST_HS_S1_LEN + 1; piece++) {
        struct pair p;
        run_pair(&p, &a, &a, piece);
        assert_int_equal(p.s1_st, WST_INPROGRESS);
        assert_int_equal(p.s1_len, WST_HS_S1_LEN);
        assert_int_equal(p.c_st, WST_OK);
        assert_int_equal(p.c2_len, WST_HS_C2_LEN);
        assert_int_equal(p.s_st, WST_OK);
        assert_memory_equal(p.c.session, p.s.session, WST_AUTH_KEY_LEN);
        assert_int_equal(wst_hs_need(&p.c), 0);
        assert_int_equal(wst_hs_need(&p.s), 0);
    }
}

static void test_handshake_insecure_pair_ok(void **state)
{
    struct pair p;
    struct wst_auth_secret a = secret_of(0xaa);
    (void)state;

    run_pair(&p, NULL, NULL, 7);
    assert_int_equal(p.c_st, WST_OK);
    assert_int_equal(p.s_st, WST_OK);
    assert_true(p.c.insecure && p.s.insecure);
    /* The session key differs from a secured session's. */
    struct pair q;
    run_pair(&q, &a, &a, 7);
    assert_memory_not_equal(p.s.session, q.s.session, WST_AUTH_KEY_LEN);
}

/* Server with secret A, client with B: the client refuses the server's
 * proof; and a C2 made under B is refused by a server with A. */
static void test_handshake_wrong_secret_both_ways(void **state)
{
    struct wst_auth_secret a = secret_of(0xaa), b = secret_of(0xbb);
    struct pair p, q;
    size_t used, ol;
    uint8_t out[WST_HS_OUT_MAX];
    (void)state;

    run_pair(&p, &b, &a, 5);
    assert_int_equal(p.c_st, WST_ERR_INTEGRITY);
    assert_non_null(strstr(p.c.why, "receiver's proof does not match"));
    assert_int_equal(p.c2_len, 0); /* nothing more from the client */

    /* q: client B with a server B (same nonces): C2 made under B. */
    run_pair(&q, &b, &b, 64);
    assert_int_equal(q.c_st, WST_OK);
    /* p's server (A) waits for C2: give it q's. */
    assert_int_equal(wst_hs_step(&p.s, q.c2, q.c2_len, &used, out, &ol),
                     WST_ERR_INTEGRITY);
    assert_non_null(strstr(p.s.why, "client's proof does not match"));
    /* A failed handshake stays failed. */
    assert_int_equal(wst_hs_step(&p.s, q.c2, q.c2_len, &used, out, &ol),
                     WST_ERR_STATE);
}

static void test_handshake_insecure_mismatch_both_ways(void **state)
{
    struct wst_auth_secret a = secret_of(0xaa);
    struct pair p;
    (void)state;

    /* Insecure client, secure server: the server refuses after S1, which
     * tells the client why. */
    run_pair(&p, NULL, &a, 3);
    assert_int_equal(p.s1_st, WST_ERR_CONFIG);
    assert_non_null(strstr(p.s.why, "client has no auth secret"));
    assert_int_equal(p.s1_len, WST_HS_S1_LEN);
    assert_int_equal(p.c_st, WST_ERR_CONFIG);
    assert_non_null(strstr(p.c.why, "receiver requires an auth secret"));

    /* Secure client, insecure server. */
    run_pair(&p, &a, NULL, 3);
    assert_int_equal(p.s1_st, WST_ERR_CONFIG);
    assert_non_null(strstr(p.s.why, "receiver runs --insecure"));
    assert_int_equal(p.c_st, WST_ERR_CONFIG);
    assert_non_null(strstr(p.c.why, "receiver runs --insecure"));
}

/* A recorded session's C1 and C2 replayed to a server with a fresh nonce. */
static void test_handshake_replay_fails(void **state)
{
    struct wst_auth_secret a = secret_of(0xaa);
    struct pair p;
    struct wst_hs s2;
    uint8_t ns[WST_AUTH_NONCE_LEN], out[WST_HS_OUT_MAX];
    size_t used, ol;
    (void)state;

    run_pair(&p, &a, &a, 64);
    assert_int_equal(p.s_st, WST_OK);
    nonce_of(ns, 0x33);
    wst_hs_init(&s2, WST_HS_SERVER, &a, ns);
    assert_int_equal(wst_hs_step(&s2, NULL, 0, &used, out, &ol),
                     WST_INPROGRESS);
    assert_int_equal(wst_hs_step(&s2, p.c1, p.c1_len, &used, out, &ol),
                     WST_INPROGRESS);
    assert_int_equal(wst_hs_step(&s2, p.c2, p.c2_len, &used, out, &ol),
                     WST_ERR_INTEGRITY);

    /* The server's own S1 reflected back as if it were C1 (+ MAC as C2). */
    wst_hs_init(&s2, WST_HS_SERVER, &a, ns);
    (void)wst_hs_step(&s2, NULL, 0, &used, out, &ol);
    (void)wst_hs_step(&s2, p.s1, WST_HS_C1_LEN, &used, out, &ol);
    assert_int_equal(
        wst_hs_step(&s2, p.s1 + WST_HS_C1_LEN, WST_HS_C2_LEN, &used, out, &ol),
        WST_ERR_INTEGRITY);
}

static void test_handshake_garbage_and_truncation(void **state)
{
    struct wst_auth_secret a = secret_of(0xaa);
    uint8_t zeros[64] = {0}, out[WST_HS_OUT_MAX], ns[WST_AUTH_NONCE_LEN];
    struct wst_hs s;
    size_t used, ol;
    (void)state;

    nonce_of(ns, 0x44);
    /* 64 zero bytes: bad magic after exactly C1's 40, nothing sent. */
    wst_hs_init(&s, WST_HS_SERVER, &a, ns);
    (void)wst_hs_step(&s, NULL, 0, &used, out, &ol);
    assert_int_equal(wst_hs_step(&s, zeros, sizeof(zeros), &used, out, &ol),
                     WST_ERR_PROTOCOL);
    assert_int_equal(used, WST_HS_C1_LEN);
    assert_int_equal(ol, 0);
    assert_non_null(strstr(s.why, "bad handshake magic"));

    /* Truncated C1: needs more, says how much, sends nothing. */
    struct pair p;
    run_pair(&p, &a, &a, 64);
    wst_hs_init(&s, WST_HS_SERVER, &a, ns);
    (void)wst_hs_step(&s, NULL, 0, &used, out, &ol);
    assert_int_equal(wst_hs_step(&s, p.c1, 39, &used, out, &ol),
                     WST_INPROGRESS);
    assert_int_equal(wst_hs_need(&s), 1);
    assert_int_equal(ol, 0);

    /* Another version. */
    uint8_t c1[WST_HS_C1_LEN];
    memcpy(c1, p.c1, sizeof(c1));
    c1[4] = 9;
    wst_hs_init(&s, WST_HS_SERVER, &a, ns);
    (void)wst_hs_step(&s, NULL, 0, &used, out, &ol);
    assert_int_equal(wst_hs_step(&s, c1, sizeof(c1), &used, out, &ol),
                     WST_ERR_VERSION);
    /* Unknown flags. */
    memcpy(c1, p.c1, sizeof(c1));
    c1[6] = 1;
    wst_hs_init(&s, WST_HS_SERVER, &a, ns);
    (void)wst_hs_step(&s, NULL, 0, &used, out, &ol);
    assert_int_equal(wst_hs_step(&s, c1, sizeof(c1), &used, out, &ol),
                     WST_ERR_PROTOCOL);

    /* Too much: the handshake takes only its own bytes; the rest is the
     * first frame's. */
    uint8_t more[WST_HS_C2_LEN + 10];
    memcpy(more, p.c2, WST_HS_C2_LEN);
    memset(more + WST_HS_C2_LEN, 0x5a, 10);
    struct pair q;
    run_pair(&q, &a, &a, 64);
    struct wst_hs s3;
    uint8_t ns2[WST_AUTH_NONCE_LEN];
    nonce_of(ns2, 0x22); /* same as run_pair's server */
    wst_hs_init(&s3, WST_HS_SERVER, &a, ns2);
    (void)wst_hs_step(&s3, NULL, 0, &used, out, &ol);
    (void)wst_hs_step(&s3, q.c1, q.c1_len, &used, out, &ol);
    assert_int_equal(wst_hs_step(&s3, more, sizeof(more), &used, out, &ol),
                     WST_OK);
    assert_int_equal(used, WST_HS_C2_LEN);
}

/* Random bytes and single-bit flips of a good transcript never pass. */
static void test_handshake_fuzz_never_passes(void **state)
{
    struct wst_auth_secret a = secret_of(0xaa);
    struct pair p;
    uint8_t buf[WST_HS_C1_LEN + WST_HS_C2_LEN], out[WST_HS_OUT_MAX];
    uint8_t ns[WST_AUTH_NONCE_LEN];
    uint64_t x = 12345;
    size_t used, ol;
    (void)state;

    run_pair(&p, &a, &a, 64);
    nonce_of(ns, 0x22);
    for (int trial = 0; trial < 3000; trial++) {
        memcpy(buf, p.c1, WST_HS_C1_LEN);
        memcpy(buf + WST_HS_C1_LEN, p.c2, WST_HS_C2_LEN);
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        if (trial < 1000) {
            for (size_t i = 0; i < sizeof(buf); i++) {
                x = x * 6364136223846793005ull + 1;
                buf[i] = (uint8_t)(x >> 56);
            }
        } else {
            size_t bit = (size_t)(x >> 33) % (sizeof(buf) * 8);
            buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        }
        struct wst_hs s;
        wst_hs_init(&s, WST_HS_SERVER, &a, ns);
        (void)wst_hs_step(&s, NULL, 0, &used, out, &ol);
        wst_status_t st = wst_hs_step(&s, buf, sizeof(buf), &used, out, &ol);
        if (st == WST_INPROGRESS)
            st = wst_hs_step(&s, buf + used, sizeof(buf) - used, &used, out,
                             &ol);
        assert_int_not_equal(st, WST_OK);
    }
}

/* RFC 4231 test case 2. */
static void test_auth_hmac_rfc4231(void **state)
{
    static const uint8_t want[32] = {
        0x5b, 0xdc, 0xc1, 0x46, 0xbf, 0x60, 0x75, 0x4e, 0x6a, 0x04, 0x24,
        0x26, 0x08, 0x95, 0x75, 0xc7, 0x5a, 0x00, 0x3f, 0x08, 0x9d, 0x27,
        0x39, 0x83, 0x9d, 0xec, 0x58, 0xb9, 0x64, 0xec, 0x38, 0x43};
    struct wst_auth_part parts[] = {{"what do ya want ", 16},
                                    {"for nothing?", 12}};
    uint8_t mac[32];
    (void)state;

    assert_int_equal(wst_auth_mac("Jefe", 4, parts, 2, mac), WST_OK);
    assert_memory_equal(mac, want, 32);
    assert_true(wst_auth_mac_equal(mac, want));
    mac[31] ^= 1;
    assert_false(wst_auth_mac_equal(mac, want));
}

static void write_file(const char *path, size_t len, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    uint8_t b[8192];

    assert_true(fd >= 0);
    memset(b, 0x42, sizeof(b));
    assert_int_equal(write(fd, b, len), (ssize_t)len);
    close(fd);
    assert_int_equal(chmod(path, mode), 0);
}

static void test_auth_secret_file_checks(void **state)
{
    char dir[] = "/tmp/wst_secret_XXXXXX", path[64], err[256];
    struct wst_auth_secret s;
    (void)state;

    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/secret", dir);
    write_file(path, 32, 0600);
    assert_int_equal(wst_auth_secret_load(path, &s, err, sizeof(err)), WST_OK);
    assert_int_equal(s.len, 32);
    assert_int_equal(s.bytes[0], 0x42);
    wst_auth_secret_release(&s);
    assert_null(s.bytes);

    write_file(path, 32, 0640);
    assert_int_equal(wst_auth_secret_load(path, &s, err, sizeof(err)),
                     WST_ERR_CONFIG);
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, "mode 0640"));
    write_file(path, 32, 0604);
    assert_int_equal(wst_auth_secret_load(path, &s, err, sizeof(err)),
                     WST_ERR_CONFIG);
    assert_non_null(strstr(err, "mode 0604"));

    write_file(path, 31, 0600);
    assert_int_equal(wst_auth_secret_load(path, &s, err, sizeof(err)),
                     WST_ERR_CONFIG);
    assert_non_null(strstr(err, "31 bytes"));
    write_file(path, 4097, 0600);
    assert_int_equal(wst_auth_secret_load(path, &s, err, sizeof(err)),
                     WST_ERR_CONFIG);

    unlink(path);
    assert_int_equal(wst_auth_secret_load(path, &s, err, sizeof(err)),
                     WST_ERR_CONFIG);
    assert_non_null(strstr(err, "No such file"));
    assert_int_equal(wst_auth_secret_load(dir, &s, err, sizeof(err)),
                     WST_ERR_CONFIG);
    rmdir(dir);
}

static void test_frame_round_trip_and_attacks(void **state)
{
    uint8_t key[WST_AUTH_KEY_LEN], other[WST_AUTH_KEY_LEN];
    uint8_t buf[256], head[WST_FRAME_HEAD], mac[WST_FRAME_TAIL];
    const char *msg = "PLAN digests";
    uint32_t len = (uint32_t)strlen(msg), got_len;
    size_t need, whole = WST_FRAME_HEAD + len + WST_FRAME_TAIL;
    (void)state;

    memset(key, 1, sizeof(key));
    memset(other, 2, sizeof(other));
    assert_int_equal(wst_frame_seal(key, WST_HS_CLIENT, 7, msg, len, head, mac),
                     WST_OK);
    memcpy(buf, head, WST_FRAME_HEAD);
    memcpy(buf + WST_FRAME_HEAD, msg, len);
    memcpy(buf + WST_FRAME_HEAD + len, mac, WST_FRAME_TAIL);

    assert_int_equal(wst_frame_open(key, WST_HS_CLIENT, 7, buf, whole, 1024,
                                    &got_len, &need),
                     WST_OK);
    assert_int_equal(got_len, len);
    assert_int_equal(need, whole);
    assert_memory_equal(buf + WST_FRAME_HEAD, msg, len);
    /* Truncated: every prefix needs more. */
    for (size_t n = 0; n < whole; n++)
        assert_int_equal(wst_frame_open(key, WST_HS_CLIENT, 7, buf, n, 1024,
                                        &got_len, &need),
                         WST_INPROGRESS);
    /* Replayed (another number), reflected (other role), other key. */
    assert_int_equal(wst_frame_open(key, WST_HS_CLIENT, 8, buf, whole, 1024,
                                    &got_len, &need),
                     WST_ERR_INTEGRITY);
    assert_int_equal(wst_frame_open(key, WST_HS_SERVER, 7, buf, whole, 1024,
                                    &got_len, &need),
                     WST_ERR_INTEGRITY);
    assert_int_equal(wst_frame_open(other, WST_HS_CLIENT, 7, buf, whole, 1024,
                                    &got_len, &need),
                     WST_ERR_INTEGRITY);
    /* Any flipped bit. */
    for (size_t bit = 0; bit < whole * 8; bit++) {
        buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        wst_status_t st = wst_frame_open(key, WST_HS_CLIENT, 7, buf, whole,
                                         1024, &got_len, &need);
        assert_true(st == WST_ERR_INTEGRITY || st == WST_INPROGRESS ||
                    st == WST_ERR_TOO_LARGE);
        buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
    /* Oversized: refused from its head alone. */
    assert_int_equal(
        wst_frame_open(key, WST_HS_CLIENT, 7, buf, 4, len - 1, &got_len, &need),
        WST_ERR_TOO_LARGE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_handshake_ok_any_split),
        cmocka_unit_test(test_handshake_insecure_pair_ok),
        cmocka_unit_test(test_handshake_wrong_secret_both_ways),
        cmocka_unit_test(test_handshake_insecure_mismatch_both_ways),
        cmocka_unit_test(test_handshake_replay_fails),
        cmocka_unit_test(test_handshake_garbage_and_truncation),
        cmocka_unit_test(test_handshake_fuzz_never_passes),
        cmocka_unit_test(test_auth_hmac_rfc4231),
        cmocka_unit_test(test_auth_secret_file_checks),
        cmocka_unit_test(test_frame_round_trip_and_attacks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
