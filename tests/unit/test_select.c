/* test_select.c - the selection module (common/movers/select.h): the
 * device path decision, its log line and the UCX CUDA query; the mover for
 * host bytes; whether a receiver can take nccl.
 *
 * The rules are checked twice, each time stated differently from
 * select.c's if-chain: an explicit table of representative cases with
 * the words their reasons must carry, and, over every combination of the
 * inputs, an oracle that walks a per-preference ladder of paths and takes
 * the first one that is feasible, plus invariants on the reasons.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucp/api/ucp.h>

#include "lanes.h"
#include "select.h"
#include "log.h"
#include "worker.h"

#define SENTINEL ((enum wst_path)0x5a5a)

/* ---- the oracle ---------------------------------------------------------
 * Each preference lists the paths it accepts, best first; the answer is the
 * first feasible one, and a refusal when none is. */

static int feasible(enum wst_path p, const struct wst_path_inputs *in)
{
    int device = in->src_device || in->dst_device;

    switch (p) {
    case WST_PATH_HOST:
        return !device;
    case WST_PATH_DIRECT:
        return device && (!in->src_device || in->local_ucx_cuda) &&
               (!in->dst_device || in->peer_ucx_cuda);
    case WST_PATH_BOUNCE:
        return device;
    case WST_PATH_NCCL:
        return device && in->nccl_built && in->peer_nccl;
    }
    return 0;
}

static const enum wst_path ladder[4][4] = {
    [WST_PATH_PREF_AUTO] = {WST_PATH_HOST, WST_PATH_DIRECT, WST_PATH_BOUNCE},
    [WST_PATH_PREF_DIRECT] = {WST_PATH_HOST, WST_PATH_DIRECT, WST_PATH_NCCL},
    [WST_PATH_PREF_BOUNCE] = {WST_PATH_HOST, WST_PATH_BOUNCE},
    [WST_PATH_PREF_NCCL] = {WST_PATH_NCCL},
};

/* Returns the expected status; *path_p is set when it is WST_OK. */
static wst_status_t oracle(const struct wst_path_inputs *in,
                           enum wst_path *path_p)
{
    for (int i = 0; i < 4 && ladder[in->pref][i] != 0; i++) {
        if (feasible(ladder[in->pref][i], in)) {
            *path_p = ladder[in->pref][i];
            return WST_OK;
        }
    }
    return WST_ERR_UNSUPPORTED;
}

/* Bit i of 'bits' sets input flag i to 'yes' (any nonzero value). */
static struct wst_path_inputs inputs_from(unsigned bits, int pref, int yes)
{
    struct wst_path_inputs in = {
        .src_device = (bits & 1) ? yes : 0,
        .dst_device = (bits & 2) ? yes : 0,
        .local_ucx_cuda = (bits & 4) ? yes : 0,
        .peer_ucx_cuda = (bits & 8) ? yes : 0,
        .nccl_built = (bits & 16) ? yes : 0,
        .peer_nccl = (bits & 32) ? yes : 0,
        .pref = (enum wst_path_pref)pref,
    };
    return in;
}

static void describe(const struct wst_path_inputs *in, char *buf, size_t len)
{
    snprintf(buf, len,
             "src_device=%d dst_device=%d local_ucx_cuda=%d peer_ucx_cuda=%d "
             "nccl_built=%d peer_nccl=%d pref=%d",
             in->src_device, in->dst_device, in->local_ucx_cuda,
             in->peer_ucx_cuda, in->nccl_built, in->peer_nccl, (int)in->pref);
}

/* ---- the explicit table ------------------------------------------------ */

struct row {
    struct wst_path_inputs in;
    wst_status_t status;
    enum wst_path path;    /* when status is WST_OK */
    const char *must[3];   /* substrings of the reason */
    const char *mustnt[2]; /* and ones it must not carry */
};

#define IN(src, dst, lc, pc, nb, pn, pr)                                       \
    {                                                                          \
        src, dst, lc, pc, nb, pn, WST_PATH_PREF_##pr                           \
    }

static const struct row rows[] = {
    /* Rule 1: host memory on both sides. */
    {IN(0, 0, 0, 0, 0, 0, AUTO),
     WST_OK,
     WST_PATH_HOST,
     {"neither side holds device memory"},
     {"preference", "UCX"}},
    {IN(0, 0, 1, 1, 1, 1, DIRECT),
     WST_OK,
     WST_PATH_HOST,
     {"configured direct preference does not apply"},
     {0}},
    {IN(0, 0, 0, 0, 0, 0, BOUNCE),
     WST_OK,
     WST_PATH_HOST,
     {"configured bounce preference does not apply"},
     {0}},
    {IN(0, 0, 1, 1, 1, 1, NCCL),
     WST_ERR_UNSUPPORTED,
     0,
     {"nccl is configured", "device memory only"},
     {0}},
    /* Rule 5: auto is direct or bounce, never nccl. */
    {IN(1, 0, 0, 0, 0, 0, AUTO),
     WST_OK,
     WST_PATH_BOUNCE,
     {"this sender's UCX reports no CUDA memory support",
      "pinned host rings on this sender"},
     {"receiver's UCX"}},
    {IN(0, 1, 1, 0, 0, 0, AUTO),
     WST_OK,
     WST_PATH_BOUNCE,
     {"the receiver's UCX reports no CUDA memory support",
      "pinned host rings on the receiver"},
     {"this sender's UCX"}},
    {IN(1, 1, 0, 0, 1, 1, AUTO),
     WST_OK,
     WST_PATH_BOUNCE,
     {"neither this sender's UCX nor the receiver's UCX",
      "rings on this sender and the receiver", "Debian"},
     {"nccl"}},
    {IN(1, 1, 1, 0, 0, 0, AUTO),
     WST_OK,
     WST_PATH_BOUNCE,
     {"the receiver's UCX reports no CUDA"},
     {"this sender's UCX"}},
    {IN(1, 1, 1, 1, 1, 1, AUTO),
     WST_OK,
     WST_PATH_DIRECT,
     {"on this sender and the receiver", "CUDA IPC", "GPUDirect RDMA"},
     {"configured"}},
    /* A side holding only host memory needs no CUDA-aware UCX. */
    {IN(1, 0, 1, 0, 0, 0, AUTO),
     WST_OK,
     WST_PATH_DIRECT,
     {"device memory on this sender is registered"},
     {"receiver's UCX"}},
    {IN(0, 1, 0, 1, 0, 0, AUTO),
     WST_OK,
     WST_PATH_DIRECT,
     {"device memory on the receiver is registered"},
     {"this sender's UCX"}},
    /* Rule 4. */
    {IN(1, 1, 1, 1, 1, 1, BOUNCE),
     WST_OK,
     WST_PATH_BOUNCE,
     {"configured", "rings on this sender and the receiver"},
     {"UCX"}},
    {IN(0, 1, 0, 0, 0, 0, BOUNCE),
     WST_OK,
     WST_PATH_BOUNCE,
     {"rings on the receiver"},
     {0}},
    /* Rule 3. */
    {IN(1, 1, 1, 1, 0, 0, DIRECT),
     WST_OK,
     WST_PATH_DIRECT,
     {"configured; device memory on this sender and the receiver"},
     {0}},
    {IN(1, 0, 0, 1, 1, 1, DIRECT),
     WST_OK,
     WST_PATH_NCCL,
     {"direct is configured but this sender's UCX", "cannot reach"},
     {"receiver's UCX"}},
    {IN(1, 0, 0, 1, 0, 1, DIRECT),
     WST_ERR_UNSUPPORTED,
     0,
     {"this sender's UCX", "NCCL is not built into this sender",
      "configure bounce or auto"},
     {"receiver cannot run NCCL"}},
    {IN(0, 1, 1, 0, 1, 0, DIRECT),
     WST_ERR_UNSUPPORTED,
     0,
     {"the receiver's UCX", "the receiver cannot run NCCL"},
     {"not built"}},
    {IN(1, 1, 0, 0, 0, 0, DIRECT),
     WST_ERR_UNSUPPORTED,
     0,
     {"neither this sender's UCX nor the receiver's UCX",
      "not built into this sender and the receiver cannot run NCCL"},
     {0}},
    /* Rule 2: nccl regardless of UCX. */
    {IN(1, 1, 1, 1, 1, 1, NCCL),
     WST_OK,
     WST_PATH_NCCL,
     {"configured", "ncclSend/ncclRecv"},
     {"UCX"}},
    {IN(0, 1, 0, 0, 1, 1, NCCL), WST_OK, WST_PATH_NCCL, {"configured"}, {0}},
    {IN(1, 0, 0, 0, 0, 1, NCCL),
     WST_ERR_UNSUPPORTED,
     0,
     {"nccl is configured but NCCL is not built into this sender"},
     {"receiver cannot"}},
    {IN(1, 0, 0, 0, 1, 0, NCCL),
     WST_ERR_UNSUPPORTED,
     0,
     {"nccl is configured but the receiver cannot run NCCL"},
     {"not built"}},
    {IN(1, 1, 1, 1, 0, 0, NCCL),
     WST_ERR_UNSUPPORTED,
     0,
     {"not built into this sender and the receiver cannot run NCCL"},
     {0}},
};

static void test_device_path_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const struct row *r = &rows[i];
        enum wst_path path = SENTINEL;
        char why[WST_PATH_WHY_LEN];
        wst_status_t st = wst_path_choose(&r->in, &path, why, sizeof(why));

        print_message("row %zu: %s %s: %s\n", i, wst_status_name(st),
                      st == WST_OK ? wst_path_name(path) : "-", why);
        assert_int_equal(st, r->status);
        assert_int_equal(path, st == WST_OK ? r->path : SENTINEL);
        for (int k = 0; k < 3 && r->must[k] != NULL; k++)
            assert_non_null(strstr(why, r->must[k]));
        for (int k = 0; k < 2 && r->mustnt[k] != NULL; k++)
            assert_null(strstr(why, r->mustnt[k]));
    }
}

/* ---- every combination ------------------------------------------------- */

static void check_reason(const struct wst_path_inputs *in, wst_status_t st,
                         enum wst_path path, const char *why)
{
    int device = in->src_device || in->dst_device;
    int lacks_src = in->src_device && !in->local_ucx_cuda;
    int lacks_dst = in->dst_device && !in->peer_ucx_cuda;
    int direct_asked =
        in->pref == WST_PATH_PREF_AUTO || in->pref == WST_PATH_PREF_DIRECT;
    char prefix[16];

    /* One complete lowercase sentence, never cut, never repeating the
     * path's name that the log line already prints. */
    assert_true(why[0] != '\0');
    assert_true(islower((unsigned char)why[0]));
    assert_true(strlen(why) < WST_PATH_WHY_LEN - 1);
    assert_null(strchr(why, '\n'));
    if (st == WST_OK) {
        snprintf(prefix, sizeof(prefix), "%s:", wst_path_name(path));
        assert_int_not_equal(strncmp(why, prefix, strlen(prefix)), 0);
    }
    /* Whenever direct was wanted and ruled out, the sides to blame are
     * named, and only those. */
    int blame = device && direct_asked;
    assert_int_equal(strstr(why, "this sender's UCX") != NULL,
                     blame && lacks_src);
    assert_int_equal(strstr(why, "the receiver's UCX") != NULL,
                     blame && lacks_dst);
}

static void check_invariants(const struct wst_path_inputs *in, wst_status_t st,
                             enum wst_path path)
{
    int device = in->src_device || in->dst_device;
    int lacks = (in->src_device && !in->local_ucx_cuda) ||
                (in->dst_device && !in->peer_ucx_cuda);
    int nccl_ok = in->nccl_built && in->peer_nccl;

    assert_true(st == WST_OK || st == WST_ERR_UNSUPPORTED);
    if (st != WST_OK) {
        assert_int_equal(path, SENTINEL); /* outputs only on success */
        /* Only a preference that cannot be honoured is refused. */
        assert_true(in->pref == WST_PATH_PREF_NCCL ||
                    in->pref == WST_PATH_PREF_DIRECT);
        return;
    }
    assert_int_equal(path == WST_PATH_HOST, !device);
    if (path == WST_PATH_DIRECT)
        assert_false(lacks);
    if (path == WST_PATH_NCCL)
        assert_true(nccl_ok);
    if (in->pref == WST_PATH_PREF_AUTO)
        assert_int_not_equal(path, WST_PATH_NCCL);
    if (in->pref == WST_PATH_PREF_BOUNCE && device)
        assert_int_equal(path, WST_PATH_BOUNCE);
    if (in->pref == WST_PATH_PREF_NCCL)
        assert_int_equal(path, WST_PATH_NCCL);
}

/* 'yes' is the value used for true flags: the inputs are "nonzero", not
 * "== 1". */
static void run_all(int yes)
{
    char desc[160];

    for (int pref = 0; pref < 4; pref++) {
        for (unsigned bits = 0; bits < 64; bits++) {
            struct wst_path_inputs in = inputs_from(bits, pref, yes);
            enum wst_path path = SENTINEL, want = SENTINEL;
            enum wst_path path_small = SENTINEL, path_none = SENTINEL;
            char why[WST_PATH_WHY_LEN];
            char small[12];
            wst_status_t st, want_st;

            describe(&in, desc, sizeof(desc));
            st = wst_path_choose(&in, &path, why, sizeof(why));
            want_st = oracle(&in, &want);
            if (st != want_st || (st == WST_OK && path != want))
                fail_msg("%s: got %s %s, want %s %s (%s)", desc,
                         wst_status_name(st),
                         st == WST_OK ? wst_path_name(path) : "-",
                         wst_status_name(want_st),
                         want_st == WST_OK ? wst_path_name(want) : "-", why);
            check_invariants(&in, st, path);
            check_reason(&in, st, path, why);

            /* A short buffer, or none, changes nothing but the text. */
            memset(small, 'x', sizeof(small));
            assert_int_equal(
                wst_path_choose(&in, &path_small, small, sizeof(small)), st);
            assert_int_equal(path_small, path);
            assert_int_equal(strlen(small), sizeof(small) - 1);
            assert_int_equal(wst_path_choose(&in, &path_none, NULL, 0), st);
            assert_int_equal(path_none, path);
        }
    }
}

static void test_device_path_every_combination(void **state)
{
    (void)state;
    run_all(1);
}

static void test_device_path_flags_are_nonzero_not_one(void **state)
{
    (void)state;
    run_all(-1);
    run_all(2);
}

static void test_device_path_invalid_arguments(void **state)
{
    struct wst_path_inputs in = inputs_from(63, WST_PATH_PREF_AUTO, 1);
    enum wst_path path = SENTINEL;
    char why[WST_PATH_WHY_LEN];

    (void)state;
    assert_int_equal(wst_path_choose(NULL, &path, why, sizeof(why)),
                     WST_ERR_INVALID);
    assert_int_equal(wst_path_choose(&in, NULL, why, sizeof(why)),
                     WST_ERR_INVALID);
    in.pref = (enum wst_path_pref)4;
    assert_int_equal(wst_path_choose(&in, &path, why, sizeof(why)),
                     WST_ERR_INVALID);
    in.pref = (enum wst_path_pref) - 1;
    assert_int_equal(wst_path_choose(&in, &path, why, sizeof(why)),
                     WST_ERR_INVALID);
    assert_int_equal(path, SENTINEL);
}

/* ---- names and parsing ------------------------------------------------- */

static void test_device_path_names(void **state)
{
    (void)state;
    /* These values travel on the wire. */
    assert_int_equal(WST_PATH_HOST, 1);
    assert_int_equal(WST_PATH_DIRECT, 2);
    assert_int_equal(WST_PATH_BOUNCE, 3);
    assert_int_equal(WST_PATH_NCCL, 4);
    assert_string_equal(wst_path_name(WST_PATH_HOST), "host");
    assert_string_equal(wst_path_name(WST_PATH_DIRECT), "direct");
    assert_string_equal(wst_path_name(WST_PATH_BOUNCE), "bounce");
    assert_string_equal(wst_path_name(WST_PATH_NCCL), "nccl");
    assert_string_equal(wst_path_name((enum wst_path)0), "invalid");
    assert_string_equal(wst_path_name((enum wst_path)5), "invalid");
}

static void test_device_path_pref_parse(void **state)
{
    static const struct {
        const char *s;
        enum wst_path_pref pref;
    } ok[] = {
        {"auto", WST_PATH_PREF_AUTO},     {"direct", WST_PATH_PREF_DIRECT},
        {"bounce", WST_PATH_PREF_BOUNCE}, {"nccl", WST_PATH_PREF_NCCL},
        {"", WST_PATH_PREF_AUTO},         {NULL, WST_PATH_PREF_AUTO},
    };
    static const char *const bad[] = {
        "AUTO", "Direct", " nccl", "nccl ", "gpudirect", "host", "dir", "0",
    };
    enum wst_path_pref p;

    (void)state;
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        p = (enum wst_path_pref)99;
        assert_int_equal(wst_path_pref_parse(ok[i].s, &p), WST_OK);
        assert_int_equal(p, ok[i].pref);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        p = (enum wst_path_pref)99;
        assert_int_equal(wst_path_pref_parse(bad[i], &p), WST_ERR_INVALID);
        assert_int_equal(p, 99); /* untouched */
    }
    assert_int_equal(wst_path_pref_parse("auto", NULL), WST_ERR_INVALID);
}

/* ---- UCX memory types -------------------------------------------------- */

static void test_device_path_mem_types_mask(void **state)
{
    (void)state;
    assert_false(wst_ucx_mem_types_have_cuda(0));
    assert_false(wst_ucx_mem_types_have_cuda(UCS_BIT(UCS_MEMORY_TYPE_HOST)));
    assert_true(wst_ucx_mem_types_have_cuda(UCS_BIT(UCS_MEMORY_TYPE_CUDA)));
    assert_true(wst_ucx_mem_types_have_cuda(UCS_BIT(UCS_MEMORY_TYPE_HOST) |
                                            UCS_BIT(UCS_MEMORY_TYPE_CUDA)));
    /* Managed memory alone is not enough: weights are cudaMalloc'd. */
    assert_false(
        wst_ucx_mem_types_have_cuda(UCS_BIT(UCS_MEMORY_TYPE_CUDA_MANAGED)));
    assert_false(wst_ucx_mem_types_have_cuda(
        UCS_BIT(UCS_MEMORY_TYPE_HOST) | UCS_BIT(UCS_MEMORY_TYPE_CUDA_MANAGED) |
        UCS_BIT(UCS_MEMORY_TYPE_ROCM) | UCS_BIT(UCS_MEMORY_TYPE_ROCM_MANAGED)));
    assert_true(wst_ucx_mem_types_have_cuda(~(uint64_t)0));
    assert_false(
        wst_ucx_mem_types_have_cuda(~(uint64_t)UCS_BIT(UCS_MEMORY_TYPE_CUDA)));
}

/* UCX's new protocols: on by default from 1.16, and as the environment
 * says in any UCX (NOTES.md: they halve tcp data with peer errors). */
static void test_ucx_proto_v2(void **state)
{
    (void)state;
    assert_false(wst_ucx_proto_v2(1, 13, NULL));
    assert_false(wst_ucx_proto_v2(1, 15, NULL));
    assert_true(wst_ucx_proto_v2(1, 16, NULL));
    assert_true(wst_ucx_proto_v2(1, 18, NULL));
    assert_true(wst_ucx_proto_v2(2, 0, NULL));
    assert_false(wst_ucx_proto_v2(1, 18, "n"));
    assert_false(wst_ucx_proto_v2(1, 18, "NO"));
    assert_false(wst_ucx_proto_v2(1, 18, "off"));
    assert_false(wst_ucx_proto_v2(1, 18, "0"));
    assert_true(wst_ucx_proto_v2(1, 13, "y"));
    assert_true(wst_ucx_proto_v2(1, 14, "Yes"));
    /* A spelling UCX refuses leaves its default. */
    assert_true(wst_ucx_proto_v2(1, 18, "maybe"));
    assert_false(wst_ucx_proto_v2(1, 13, ""));
}

/* Sizes as UCX reads them (ucs_str_to_memunits), and nothing else. */
static void test_ucx_memunits(void **state)
{
    uint64_t b = 7;

    (void)state;
    assert_int_equal(wst_ucx_memunits_parse("65536", &b), 0);
    assert_int_equal(b, 65536);
    assert_int_equal(wst_ucx_memunits_parse("64k", &b), 0);
    assert_int_equal(b, 65536);
    assert_int_equal(wst_ucx_memunits_parse("64KB", &b), 0);
    assert_int_equal(b, 65536);
    assert_int_equal(wst_ucx_memunits_parse("1m", &b), 0);
    assert_int_equal(b, 1u << 20);
    assert_int_equal(wst_ucx_memunits_parse("2Gb", &b), 0);
    assert_int_equal(b, 2ull << 30);
    assert_int_equal(wst_ucx_memunits_parse("100b", &b), 0);
    assert_int_equal(b, 100);
    assert_int_equal(wst_ucx_memunits_parse("0", &b), 0);
    assert_int_equal(b, 0);
    b = 7;
    const char *bad[] = {"",
                         "k",
                         "-1",
                         " 64k",
                         "64 k",
                         "64kk",
                         "64x",
                         "64kbb",
                         "inf",
                         "auto",
                         "1.5m",
                         "99999999999999999999",
                         "17179869184g",
                         NULL};
    for (int i = 0; bad[i] != NULL; i++) {
        assert_int_equal(wst_ucx_memunits_parse(bad[i], &b), -1);
        assert_int_equal(b, 7);
    }
    assert_int_equal(wst_ucx_memunits_parse(NULL, &b), -1);
}

/* The segment each side says it runs, and which pairs may exchange tcp
 * data: a sender's fragments must fit its receiver's segments. */
static void test_ucx_tcp_seg(void **state)
{
    (void)state;
    assert_string_equal(wst_ucx_tcp_seg_key(1, 13), "RX_SEG_SIZE");
    assert_string_equal(wst_ucx_tcp_seg_key(1, 18), "TCP_RX_SEG_SIZE");
    assert_null(wst_ucx_tcp_seg_key(1, 16)); /* not run here */
    assert_null(wst_ucx_tcp_seg_key(2, 0));
    assert_int_equal(wst_ucx_tcp_rx_seg(NULL, 1), WST_UCX_TCP_RX_SEG);
    assert_int_equal(wst_ucx_tcp_rx_seg(NULL, 0), WST_UCX_TCP_RX_SEG_UCX);
    assert_int_equal(wst_ucx_tcp_rx_seg("64k", 1), 65536);
    assert_int_equal(wst_ucx_tcp_rx_seg("auto", 1), 0); /* unknown */
    assert_true(wst_ucx_tcp_seg_fits(65536, 1u << 20));
    assert_true(wst_ucx_tcp_seg_fits(1u << 20, 1u << 20));
    assert_false(wst_ucx_tcp_seg_fits(1u << 20, 65536));
    assert_true(wst_ucx_tcp_seg_fits(0, 65536)); /* unknown: unchecked */
    assert_true(wst_ucx_tcp_seg_fits(1u << 20, 0));
}

/* wstream turns the new protocols off itself only where they would run by
 * UCX's default and its UCX moves no device memory. */
static void test_ucx_old_protocols(void **state)
{
    (void)state;
    assert_true(wst_ucx_old_protocols(1, 16, NULL, 0));
    assert_true(wst_ucx_old_protocols(1, 18, NULL, 0));
    assert_false(wst_ucx_old_protocols(1, 18, NULL, 1)); /* CUDA-aware */
    assert_false(wst_ucx_old_protocols(1, 13, NULL, 0)); /* old by default */
    assert_false(wst_ucx_old_protocols(1, 15, NULL, 0));
    /* Whatever the environment says is left to UCX. */
    assert_false(wst_ucx_old_protocols(1, 18, "y", 0));
    assert_false(wst_ucx_old_protocols(1, 18, "n", 0));
    assert_false(wst_ucx_old_protocols(1, 18, "", 0));
}

/* The masks real UCX builds report (the worker logs them at start):
 * tests/gpu/build-ucx.sh's UCX 1.13.1 with CUDA on the H200 host, 0x7
 * (host, cuda, cuda-managed); Debian's 1.13.1, and the CUDA build on a
 * machine without a GPU, 0x1 (host only). The
 * path choice over them: direct with the first on both sides, bounce
 * under auto as soon as one side holding device memory has the second. */
static void test_device_path_real_ucx_masks(void **state)
{
    const uint64_t cuda_build = 0x7, distro = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    enum wst_path p;
    char why[WST_PATH_WHY_LEN];

    (void)state;
    assert_true(cuda_build ==
                (UCS_BIT(UCS_MEMORY_TYPE_HOST) | UCS_BIT(UCS_MEMORY_TYPE_CUDA) |
                 UCS_BIT(UCS_MEMORY_TYPE_CUDA_MANAGED)));
    assert_true(wst_ucx_mem_types_have_cuda(cuda_build));
    assert_false(wst_ucx_mem_types_have_cuda(distro));
    struct wst_path_inputs in = {
        .src_device = 1,
        .dst_device = 1,
        .local_ucx_cuda = wst_ucx_mem_types_have_cuda(cuda_build),
        .peer_ucx_cuda = wst_ucx_mem_types_have_cuda(cuda_build),
        .pref = WST_PATH_PREF_AUTO,
    };
    assert_int_equal(wst_path_choose(&in, &p, why, sizeof(why)), WST_OK);
    assert_int_equal(p, WST_PATH_DIRECT);
    in.peer_ucx_cuda = wst_ucx_mem_types_have_cuda(distro);
    assert_int_equal(wst_path_choose(&in, &p, why, sizeof(why)), WST_OK);
    assert_int_equal(p, WST_PATH_BOUNCE);
    assert_non_null(strstr(why, "the receiver's UCX reports no CUDA"));
}

/* What this machine's UCX says, asked directly rather than through the
 * worker, with the worker's features. */
static int ucx_reports_cuda(void)
{
    ucp_config_t *config = NULL;
    ucp_context_h ctx = NULL;
    ucp_params_t cp = {
        .field_mask = UCP_PARAM_FIELD_FEATURES,
        .features = UCP_FEATURE_AM | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP,
    };
    ucp_context_attr_t ca = {.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES};

    assert_int_equal(ucp_config_read(NULL, NULL, &config), UCS_OK);
    assert_int_equal(ucp_init(&cp, config, &ctx), UCS_OK);
    ucp_config_release(config);
    assert_int_equal(ucp_context_query(ctx, &ca), UCS_OK);
    ucp_cleanup(ctx);
    return (ca.memory_types & (1ull << UCS_MEMORY_TYPE_CUDA)) != 0;
}

static void test_device_path_worker_reports_ucx_cuda(void **state)
{
    struct wst_logger lg;
    wst_worker_t *w = NULL;
    int want;

    (void)state;
    wst_logger_init(&lg, "test", WST_LOG_WARN);
    struct wst_worker_params wp = {.log = &lg};
    if (wst_worker_create(&wp, &w) != WST_OK) {
        fprintf(stderr, "SKIP: cannot create a UCX worker here\n");
        skip();
    }
    want = ucx_reports_cuda();
    /* Debian's UCX 1.13 reports host memory only; a CUDA-aware build would
     * flip both answers together. */
    print_message("this machine's UCX: CUDA memory %s\n",
                  want ? "supported" : "not supported");
    assert_int_equal(wst_worker_supports_cuda(w) != 0, want);
    wst_worker_destroy(w);
}

/* ---- the log line ------------------------------------------------------ */

struct capture {
    int n;
    int level;
    char line[1024];
};

static void sink(void *arg, int level, const char *line)
{
    struct capture *c = arg;

    c->n++;
    c->level = level;
    snprintf(c->line, sizeof(c->line), "%s", line);
}

static void log_choice(struct capture *c, enum wst_log_level level,
                       const char *peer, const struct wst_path_inputs *in,
                       enum wst_path want)
{
    struct wst_logger lg;
    enum wst_path path = SENTINEL;
    char why[WST_PATH_WHY_LEN];

    wst_logger_init(&lg, "sender", level);
    lg.sink = sink;
    lg.sink_arg = c;
    memset(c, 0, sizeof(*c));
    assert_int_equal(wst_path_choose(in, &path, why, sizeof(why)), WST_OK);
    assert_int_equal(path, want);
    wst_path_log(&lg, peer, path, why);
}

static void test_device_path_log_bounce(void **state)
{
    struct wst_path_inputs in = IN(1, 0, 0, 0, 0, 0, AUTO);
    struct capture c;

    (void)state;
    log_choice(&c, WST_LOG_INFO, "10.0.0.7:7070", &in, WST_PATH_BOUNCE);
    assert_int_equal(c.n, 1);
    assert_int_equal(c.level, WST_LOG_INFO);
    assert_string_equal(
        c.line, "receiver 10.0.0.7:7070: device path bounce: this sender's "
                "UCX reports no CUDA memory support (Debian's and Ubuntu's "
                "UCX builds have none); device bytes go through pinned host "
                "rings on this sender");
}

static void test_device_path_log_direct(void **state)
{
    struct wst_path_inputs in = IN(1, 1, 1, 1, 0, 0, AUTO);
    struct capture c;

    (void)state;
    log_choice(&c, WST_LOG_INFO, "10.0.0.7:7070", &in, WST_PATH_DIRECT);
    assert_int_equal(c.n, 1);
    assert_int_equal(c.level, WST_LOG_INFO);
    assert_string_equal(
        c.line, "receiver 10.0.0.7:7070: device path direct: device memory "
                "on this sender and the receiver is registered with a "
                "CUDA-aware UCX and moved without host copies (CUDA IPC "
                "within a host, GPUDirect RDMA across hosts) (GPUDirect RDMA "
                "across hosts is unverified on hardware: no machine here has "
                "an RDMA NIC)");
}

static void test_device_path_log_respects_level(void **state)
{
    struct wst_path_inputs in = IN(0, 0, 0, 0, 0, 0, AUTO);
    struct capture c;

    (void)state;
    log_choice(&c, WST_LOG_WARN, "r", &in, WST_PATH_HOST);
    assert_int_equal(c.n, 0);
    log_choice(&c, WST_LOG_INFO, NULL, &in, WST_PATH_HOST);
    assert_int_equal(c.n, 1);
    assert_string_equal(c.line, "receiver ?: device path host: neither side "
                                "holds device memory for this receiver");
    assert_null(strstr(c.line, "unverified"));
}

/* Every combination of offer, preference and lane: the receiver's am-only
 * offer wins, then the preference, then the lane; the reason is said. */
static void test_select_mover_choose(void **state)
{
    static const enum wst_mover_kind kinds[] = {0, WST_MOVER_PUT, WST_MOVER_AM};
    (void)state;
    for (int o = 1; o < 3; o++)
        for (int p = 0; p < 3; p++)
            for (int rma = 0; rma < 2; rma++) {
                const char *why = NULL;
                enum wst_mover_kind got =
                    wst_mover_choose(kinds[o], kinds[p], rma, &why);
                enum wst_mover_kind want = kinds[o] == WST_MOVER_AM
                                               ? WST_MOVER_AM
                                           : kinds[p] != 0 ? kinds[p]
                                           : rma           ? WST_MOVER_PUT
                                                           : WST_MOVER_AM;
                assert_int_equal(got, want);
                assert_non_null(why);
                assert_true(strlen(why) > 0);
            }
}

static void test_select_nccl_possible(void **state)
{
    struct wst_rx_region dev[2] = {{.mem = WST_MEM_CUDA},
                                   {.mem = WST_MEM_CUDA}};
    struct wst_rx_region mixed[2] = {{.mem = WST_MEM_CUDA},
                                     {.mem = WST_MEM_HOST}};
    const char *why = NULL;

    (void)state;
    assert_true(wst_rx_nccl_possible(dev, 2, 0, 1, &why));
    assert_null(why);
    assert_false(wst_rx_nccl_possible(dev, 2, -1, 1, &why));
    assert_non_null(strstr(why, "nccl"));
    assert_false(wst_rx_nccl_possible(dev, 2, 0, 0, &why));
    assert_false(wst_rx_nccl_possible(mixed, 2, 0, 1, &why));
}

/* The window on the direct path: 1 GiB at least when none was asked for;
 * an asked-for window, and every other path, as given. */
static void test_path_window(void **state)
{
    const uint64_t mib = 1ull << 20;

    (void)state;
    assert_true(wst_path_window(WST_PATH_DIRECT, 256 * mib, 1) ==
                WST_DIRECT_WINDOW_MIN);
    assert_true(wst_path_window(WST_PATH_DIRECT, 64 * mib, 1) == 1024 * mib);
    assert_true(wst_path_window(WST_PATH_DIRECT, 2048 * mib, 1) == 2048 * mib);
    assert_true(wst_path_window(WST_PATH_DIRECT, 64 * mib, 0) == 64 * mib);
    assert_true(wst_path_window(WST_PATH_HOST, 256 * mib, 1) == 256 * mib);
    assert_true(wst_path_window(WST_PATH_BOUNCE, 256 * mib, 1) == 256 * mib);
    assert_true(wst_path_window(WST_PATH_NCCL, 64 * mib, 1) == 64 * mib);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_path_table),
        cmocka_unit_test(test_device_path_every_combination),
        cmocka_unit_test(test_device_path_flags_are_nonzero_not_one),
        cmocka_unit_test(test_device_path_invalid_arguments),
        cmocka_unit_test(test_device_path_names),
        cmocka_unit_test(test_path_window),
        cmocka_unit_test(test_device_path_pref_parse),
        cmocka_unit_test(test_device_path_mem_types_mask),
        cmocka_unit_test(test_ucx_proto_v2),
        cmocka_unit_test(test_ucx_memunits),
        cmocka_unit_test(test_ucx_tcp_seg),
        cmocka_unit_test(test_ucx_old_protocols),
        cmocka_unit_test(test_device_path_real_ucx_masks),
        cmocka_unit_test(test_device_path_worker_reports_ucx_cuda),
        cmocka_unit_test(test_device_path_log_bounce),
        cmocka_unit_test(test_device_path_log_direct),
        cmocka_unit_test(test_device_path_log_respects_level),
        cmocka_unit_test(test_select_mover_choose),
        cmocka_unit_test(test_select_nccl_possible),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
