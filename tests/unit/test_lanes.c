/* test_lanes.c - the lane rules without UCX endpoints: UCX_TLS and the
 * device lists read as UCP reads them (transports.c), the lanes' text,
 * and which lanes put in hardware, from transport attributes made up
 * here (lanes.c). The same module over real endpoints is in
 * test_worker.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "lanes.h"
#include "transports.h"

static void test_lanes_tls_filter(void **state)
{
    static const struct {
        const char *tls, *tl;
        int on;
    } cases[] = {
        {NULL, "tcp", 1},
        {"", "rc_mlx5", 1},
        {"all", "rc_mlx5", 1},
        {"tcp", "tcp", 1},
        {"tcp", "cma", 0},
        {"tcp", "rc_mlx5", 0},
        {"sm,tcp", "cma", 1},
        {"sm,tcp", "posix", 1},
        {"sm,tcp", "tcp", 1},
        {"sm,tcp", "rc_mlx5", 0},
        {"shm", "xpmem", 1},
        {"mm", "sysv", 1},
        {"mm", "cma", 0},
        {"^sm", "cma", 0},
        {"^sm", "tcp", 1},
        {"^tcp", "tcp", 0},
        {"^tcp", "posix", 1},
        {"\\tcp", "tcp", 1},
        {"tcp:aux", "tcp", 0},
        /* A family's ":aux" member serves wireup only. */
        {"rc", "rc_mlx5", 1},
        {"rc", "rc_verbs", 1},
        {"rc", "ud_mlx5", 0},
        {"rc,ud", "ud_mlx5", 1},
        {"dc", "dc_mlx5", 1},
        {"ib", "ud_verbs", 1},
        {"ib", "tcp", 0},
        {"cuda", "cuda_ipc", 1},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int on = wst_transports_tl_enabled(cases[i].tls, cases[i].tl);

        if (on != cases[i].on)
            fail_msg("UCX_TLS=%s, %s: %d, expected %d",
                     cases[i].tls ? cases[i].tls : "(unset)", cases[i].tl, on,
                     cases[i].on);
    }
}

static void test_lanes_device_filter(void **state)
{
    (void)state;
    assert_true(wst_transports_dev_enabled(NULL, "eth0"));
    assert_true(wst_transports_dev_enabled("", "eth0"));
    assert_true(wst_transports_dev_enabled("all", "eth0"));
    assert_true(wst_transports_dev_enabled("lo", "lo"));
    assert_false(wst_transports_dev_enabled("lo", "eth0"));
    assert_true(wst_transports_dev_enabled("eth0,lo", "eth0"));
    assert_true(wst_transports_dev_enabled("mlx5_0:1", "mlx5_0:1"));
    assert_false(wst_transports_dev_enabled("mlx5_0:1", "mlx5_0"));
    assert_false(wst_transports_dev_enabled("lo0", "lo"));
}

static void test_lanes_format(void **state)
{
    const struct wst_lane lanes[] = {
        {"sysv/memory", "am,am_bw"},
        {"posix/memory", ""},
        {"cma/memory", "rma_bw"},
    };
    char out[128], small[12];

    (void)state;
    wst_lanes_format(lanes, 3, out, sizeof(out));
    assert_string_equal(
        out, "sysv/memory[am,am_bw] posix/memory[] cma/memory[rma_bw]");
    wst_lanes_format(lanes, 0, out, sizeof(out));
    assert_string_equal(out, "");
    /* Truncated, still a string. */
    wst_lanes_format(lanes, 3, small, sizeof(small));
    assert_int_equal(strlen(small), sizeof(small) - 1);
    assert_memory_equal(small, "sysv/memory", 11);
}

#define HW_PUT                                                                 \
    (UCT_IFACE_FLAG_PUT_SHORT | UCT_IFACE_FLAG_PUT_BCOPY |                     \
     UCT_IFACE_FLAG_GET_BCOPY | UCT_IFACE_FLAG_PENDING)

/* Transports as UCT describes them (flags as this machine's UCX 1.13
 * reports them, rc_mlx5 and xpmem as their interfaces declare). */
static const struct wst_transport transports[] = {
    {"tcp/lo", UCT_DEVICE_TYPE_NET, 1, 1,
     UCT_IFACE_FLAG_PUT_ZCOPY | UCT_IFACE_FLAG_PENDING |
         UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE,
     0},
    {"sysv/memory", UCT_DEVICE_TYPE_SHM, 0, 0, 0, 0},
    {"posix/memory", UCT_DEVICE_TYPE_SHM, 0, 0, 0, 0},
    {"cma/memory", UCT_DEVICE_TYPE_SHM, 1, 1,
     UCT_IFACE_FLAG_PUT_ZCOPY | UCT_IFACE_FLAG_GET_ZCOPY |
         UCT_IFACE_FLAG_PENDING | UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE,
     0},
    {"self/memory0", UCT_DEVICE_TYPE_SELF, 1, 1, HW_PUT, 0},
    {"rc_mlx5/mlx5_0:1", UCT_DEVICE_TYPE_NET, 1, 1,
     HW_PUT | UCT_IFACE_FLAG_PUT_ZCOPY | UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE,
     0},
    {"rc_verbs/mlx5_1:1", UCT_DEVICE_TYPE_NET, 1, 1, HW_PUT, 0},
    {"xpmem/memory", UCT_DEVICE_TYPE_SHM, 1, 1, HW_PUT, 0},
    {"ud_verbs/mlx5_0:1", UCT_DEVICE_TYPE_NET, 1, 1,
     UCT_IFACE_FLAG_PENDING | UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE, 0},
    {"knem/memory", UCT_DEVICE_TYPE_SHM, 1, 0, 0, 0},
    {"odd/nopending", UCT_DEVICE_TYPE_NET, 1, 1,
     HW_PUT & ~(uint64_t)UCT_IFACE_FLAG_PENDING, 0},
    /* As UCX 1.18 with CUDA describes them on the H200 (ucx_info -d):
     * cuda_ipc's domain registers CUDA memory with a 192-byte remote key,
     * its interface does zero-copy put with peer-failure handling;
     * cuda_copy's registers CUDA memory but packs no key. An RDMA port
     * with GPUDirect registers both kinds. */
    {"cuda_ipc/cuda", UCT_DEVICE_TYPE_SHM, 0, 1,
     UCT_IFACE_FLAG_PUT_ZCOPY | UCT_IFACE_FLAG_GET_ZCOPY |
         UCT_IFACE_FLAG_PENDING | UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE,
     1},
    {"cuda_copy/cuda", UCT_DEVICE_TYPE_ACC, 0, 1,
     UCT_IFACE_FLAG_PUT_SHORT | UCT_IFACE_FLAG_PUT_ZCOPY |
         UCT_IFACE_FLAG_GET_SHORT | UCT_IFACE_FLAG_GET_ZCOPY,
     0},
    {"rc_mlx5/mlx5_2:1", UCT_DEVICE_TYPE_NET, 1, 1,
     HW_PUT | UCT_IFACE_FLAG_PUT_ZCOPY | UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE,
     1},
    {"odd/cuda_noerr", UCT_DEVICE_TYPE_SHM, 0, 1, UCT_IFACE_FLAG_PUT_ZCOPY, 1},
};
#define N_TRANSPORTS (sizeof(transports) / sizeof(transports[0]))

/* A rule of lanes.h: wst_lanes_rma_real or wst_lanes_device_put. */
typedef int (*lane_rule)(const struct wst_lane *, size_t,
                         const struct wst_transport *, size_t, int, char *,
                         size_t);

/* The answer and reason of 'rule' for lanes named 'names'
 * (NULL-terminated). */
static int decide_by(lane_rule rule, const char *const *names, int peer_errors,
                     char *why, size_t why_len)
{
    struct wst_lane lanes[WST_LANES_MAX];
    size_t n = 0;

    for (; names[n] != NULL; n++) {
        snprintf(lanes[n].name, sizeof(lanes[n].name), "%s", names[n]);
        lanes[n].roles[0] = '\0';
    }
    return rule(lanes, n, transports, N_TRANSPORTS, peer_errors, why, why_len);
}

/* The host put rule (wst_lanes_rma_real). */
static int decide(const char *const *names, int peer_errors, char *why,
                  size_t why_len)
{
    return decide_by(wst_lanes_rma_real, names, peer_errors, why, why_len);
}

/* The configurations the tests run: tcp, and shared memory (sysv/posix
 * for AM, cma for rendezvous), neither puts in hardware on UCX 1.13. */
static void test_lanes_tcp_and_shm_emulate_put(void **state)
{
    const char *tcp[] = {"tcp/lo", NULL};
    const char *shm[] = {"sysv/memory", "posix/memory", "cma/memory", NULL};
    char why[256];

    (void)state;
    assert_int_equal(decide(tcp, 1, why, sizeof(why)), 0);
    assert_string_equal(why,
                        "no lane puts in hardware: tcp/lo: zero-copy put only");
    assert_int_equal(decide(tcp, 0, why, sizeof(why)), 0);
    assert_int_equal(decide(shm, 0, why, sizeof(why)), 0);
    assert_string_equal(why, "no lane puts in hardware: sysv/memory, "
                             "posix/memory: registers no host memory; "
                             "cma/memory: zero-copy put only");
}

/* RDMA, and a shared-memory transport that maps registered memory. */
static void test_lanes_rdma_puts_in_hardware(void **state)
{
    const char *rc[] = {"ud_verbs/mlx5_0:1", "rc_mlx5/mlx5_0:1", NULL};
    const char *xpmem[] = {"sysv/memory", "xpmem/memory", NULL};
    char why[256];

    (void)state;
    assert_int_equal(decide(rc, 1, why, sizeof(why)), 1);
    assert_string_equal(why, "rc_mlx5/mlx5_0:1 puts in hardware");
    assert_int_equal(decide(rc, 0, why, sizeof(why)), 1);
    assert_int_equal(decide(xpmem, 0, why, sizeof(why)), 1);
    assert_string_equal(why, "xpmem/memory puts in hardware");
}

/* Each way a lane falls short is named. */
static void test_lanes_reasons(void **state)
{
    const char *verbs[] = {"rc_verbs/mlx5_1:1", NULL};
    const char *self[] = {"self/memory0", NULL};
    const char *unknown[] = {"gni/ipogif0", NULL};
    const char *knem[] = {"knem/memory", NULL};
    const char *pending[] = {"odd/nopending", NULL};
    const char *none[] = {NULL};
    char why[256], tiny[16];

    (void)state;
    /* Peer-failure mode needs the transport to handle it. */
    assert_int_equal(decide(verbs, 0, why, sizeof(why)), 1);
    assert_int_equal(decide(verbs, 1, why, sizeof(why)), 0);
    assert_non_null(strstr(why, "rc_verbs/mlx5_1:1: no peer-failure"));
    assert_int_equal(decide(self, 0, why, sizeof(why)), 0);
    assert_non_null(strstr(why, "neither network nor shared memory"));
    assert_int_equal(decide(unknown, 0, why, sizeof(why)), 0);
    assert_non_null(strstr(why, "gni/ipogif0: not among the probed"));
    assert_int_equal(decide(knem, 0, why, sizeof(why)), 0);
    assert_non_null(strstr(why, "interface not queried"));
    assert_int_equal(decide(pending, 0, why, sizeof(why)), 0);
    assert_non_null(strstr(why, "no pending queue"));
    assert_int_equal(decide(none, 0, why, sizeof(why)), 0);
    assert_string_equal(why, "no lane read from ucx");
    /* A short buffer still gets a string. */
    assert_int_equal(decide(knem, 0, tiny, sizeof(tiny)), 0);
    assert_int_equal(strlen(tiny), sizeof(tiny) - 1);
}

/* The device put rule (wst_lanes_device_put). */
static int decide_device(const char *const *names, int peer_errors, char *why,
                         size_t why_len)
{
    return decide_by(wst_lanes_device_put, names, peer_errors, why, why_len);
}

/* The direct path's lanes on the H200 (tcp for am, cuda_ipc for device
 * memory) put into device memory; cuda_copy, which packs no key, and
 * lanes of host memory only do not; GPUDirect RDMA does. */
static void test_lanes_device_put(void **state)
{
    const char *direct[] = {"tcp/lo", "cuda_ipc/cuda", NULL};
    const char *copy[] = {"tcp/lo", "cuda_copy/cuda", NULL};
    const char *host_rc[] = {"rc_mlx5/mlx5_0:1", "cma/memory", NULL};
    const char *gdr[] = {"ud_verbs/mlx5_0:1", "rc_mlx5/mlx5_2:1", NULL};
    const char *noerr[] = {"odd/cuda_noerr", NULL};
    char why[256];

    (void)state;
    assert_int_equal(decide_device(direct, 1, why, sizeof(why)), 1);
    assert_string_equal(why,
                        "cuda_ipc/cuda put into device memory in hardware");
    assert_int_equal(decide_device(copy, 1, why, sizeof(why)), 0);
    assert_string_equal(why, "no lane puts into device memory in hardware");
    assert_int_equal(decide_device(host_rc, 0, why, sizeof(why)), 0);
    assert_int_equal(decide_device(gdr, 1, why, sizeof(why)), 1);
    assert_string_equal(why,
                        "rc_mlx5/mlx5_2:1 put into device memory in hardware");
    /* Peer-failure mode needs the transport to handle it. */
    assert_int_equal(decide_device(noerr, 0, why, sizeof(why)), 1);
    assert_int_equal(decide_device(noerr, 1, why, sizeof(why)), 0);
    /* The host rule is not moved by a device lane: cuda_ipc registers no
     * host memory. */
    assert_int_equal(decide(direct, 1, why, sizeof(why)), 0);
    /* Judged as lanes: the transports of the direct path. */
    struct wst_transport t[2] = {transports[0], transports[11]};
    assert_string_equal(t[1].name, "cuda_ipc/cuda");
    assert_int_equal(wst_transports_device_put(t, 2, why, sizeof(why)), 1);
    assert_int_equal(wst_transports_device_put(t, 1, why, sizeof(why)), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lanes_tls_filter),
        cmocka_unit_test(test_lanes_device_filter),
        cmocka_unit_test(test_lanes_format),
        cmocka_unit_test(test_lanes_tcp_and_shm_emulate_put),
        cmocka_unit_test(test_lanes_rdma_puts_in_hardware),
        cmocka_unit_test(test_lanes_reasons),
        cmocka_unit_test(test_lanes_device_put),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
