/* test_lib_config.c - the sender's and the receiver's settings tables
 * (sender/sender_config.h, receiver/receiver_config.h): the defaults the
 * public headers document, and what create refuses. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include <wstream/receiver.h>
#include <wstream/sender.h>

#include "select.h"
#include "log.h"
#include "codec.h"
#include "receiver_config.h"
#include "sender_config.h"
#include "worker.h"

/* Every key has its entry, in order, and the table ends after the last. */
static size_t table_length(const struct wst_config_entry *t)
{
    size_t n = 0;

    while (t[n].name != NULL)
        n++;
    return n;
}

/* include/wstream/sender.h: timeout 30, mover auto, log level 2 (info),
 * window, digest threads and lanes auto (0), heartbeat 1, peer timeout 5,
 * shm_data off, device_path auto, bounce 64 MiB. */
static void test_lib_config_sender_defaults(void **state)
{
    struct wst_send_settings set;

    (void)state;
    setenv("WST_TIMEOUT", "7", 1); /* a library reads no WST_* variable */
    assert_int_equal(wst_send_settings_init(&set), WST_OK);
    unsetenv("WST_TIMEOUT");
    assert_true(set.timeout_s == 30.0);
    assert_string_equal(wst_send_mover_names[set.mover], "auto");
    assert_int_equal(set.log_level, WST_LOG_INFO);
    assert_int_equal(set.window_bytes, 0); /* auto, from the lanes */
    assert_true(set.heartbeat_s == 1.0);
    assert_true(set.peer_timeout_s == 5.0);
    assert_int_equal(set.shm_data, 0);
    assert_int_equal(set.device_path, WST_PATH_PREF_AUTO);
    assert_int_equal(set.bounce_bytes, 64ull << 20);
    assert_int_equal(set.digest_threads, 0); /* auto, from the lanes */
    assert_int_equal(set.lanes, 0);          /* auto */
    assert_int_equal(table_length(wst_send_config), WST_SEND_CONFIG_LANES + 1);
}

/* include/wstream/receiver.h: timeout 30, mover auto, verify 1 with
 * hashing threads by the lanes, log level
 * 2 (info), heartbeat 1, peer timeout 5, staging slots 2, manifest entries
 * auto (0), manifest bytes 512 MiB, unranked peers 8, 1 data lane, a
 * device ring of 1 GiB. */
static void test_lib_config_receiver_defaults(void **state)
{
    struct wst_recv_settings set;

    (void)state;
    assert_int_equal(wst_recv_settings_init(&set), WST_OK);
    assert_true(set.timeout_s == 30.0);
    assert_string_equal(wst_recv_mover_names[set.mover], "auto");
    assert_int_equal(set.verify, 1);
    assert_int_equal(set.verify_threads, 0); /* auto, from the lanes */
    assert_int_equal(set.log_level, WST_LOG_INFO);
    assert_true(set.heartbeat_s == 1.0);
    assert_true(set.peer_timeout_s == 5.0);
    assert_int_equal(set.staging_slots, 2);
    assert_int_equal(set.max_manifest_entries, 0);
    assert_int_equal(set.max_manifest_bytes, 512ull << 20);
    assert_int_equal(set.max_unranked, 8);
    assert_int_equal(set.lanes, 0); /* auto */
    assert_int_equal(set.device_ring, 1ull << 30);
    assert_int_equal(table_length(wst_recv_config),
                     WST_RECV_CONFIG_DEVICE_RING + 1);
}

/* The device-path choices are enum wst_path_pref, as the sender parses
 * wst_sender_params.device_path. */
static void test_lib_config_device_path_names(void **state)
{
    enum wst_path_pref pref;
    int i;

    (void)state;
    for (i = 0; wst_send_device_path_names[i] != NULL; i++) {
        assert_int_equal(
            wst_path_pref_parse(wst_send_device_path_names[i], &pref), WST_OK);
        assert_int_equal(pref, i);
    }
    assert_int_equal(i, WST_PATH_PREF_NCCL + 1);
}

/* Values create refuses before it starts anything. */
static void test_lib_config_create_refuses(void **state)
{
    static const char *const receivers[] = {"127.0.0.1:1"};
    struct wst_receiver_params rp = {0};
    struct wst_sender_params sp = {
        .field_mask = WST_SENDER_PARAM_RANK | WST_SENDER_PARAM_WORLD_SIZE |
                      WST_SENDER_PARAM_RECEIVERS,
        .world_size = 1,
        .receivers = receivers,
        .n_receivers = 1,
    };
    wst_receiver_t *r = NULL;
    wst_sender_t *s = NULL;

    (void)state;
    rp.field_mask = WST_RECEIVER_PARAM_MOVER;
    rp.mover = "put"; /* a receiver offers auto or am */
    assert_int_equal(wst_receiver_create(&rp, &r), WST_ERR_INVALID);
    rp.field_mask = WST_RECEIVER_PARAM_STAGING_SLOTS;
    rp.staging_slots = WST_RECV_STAGING_SLOTS_MAX + 1;
    assert_int_equal(wst_receiver_create(&rp, &r), WST_ERR_INVALID);
    rp.field_mask = WST_RECEIVER_PARAM_HEARTBEAT;
    rp.heartbeat_s = 5;
    rp.peer_timeout_s = 5;
    assert_int_equal(wst_receiver_create(&rp, &r), WST_ERR_INVALID);
    rp.field_mask = WST_RECEIVER_PARAM_LIMITS;
    rp.max_manifest_entries = WST_MAX_HAVES + 1;
    rp.max_manifest_bytes = 1;
    rp.max_unranked_peers = 1;
    assert_int_equal(wst_receiver_create(&rp, &r), WST_ERR_INVALID);
    rp.max_manifest_entries = 0;
    rp.max_manifest_bytes = 0;
    assert_int_equal(wst_receiver_create(&rp, &r), WST_ERR_INVALID);
    rp.max_manifest_bytes = 1;
    rp.max_unranked_peers = 0;
    assert_int_equal(wst_receiver_create(&rp, &r), WST_ERR_INVALID);
    rp.field_mask = WST_RECEIVER_PARAM_LANES;
    rp.lanes = WST_WORKER_LANES_MAX + 1;
    assert_int_equal(wst_receiver_create(&rp, &r), WST_ERR_INVALID);
    /* The device ring: whole MiB, 8 MiB to 64 GiB. */
    rp.field_mask = WST_RECEIVER_PARAM_DEVICE_RING;
    rp.device_ring_bytes = WST_RECV_DEVICE_RING_MIN - (1u << 20);
    assert_int_equal(wst_receiver_create(&rp, &r), WST_ERR_INVALID);
    rp.device_ring_bytes = WST_RECV_DEVICE_RING_MAX + (1u << 20);
    assert_int_equal(wst_receiver_create(&rp, &r), WST_ERR_INVALID);
    rp.device_ring_bytes = (64u << 20) + 4096;
    assert_int_equal(wst_receiver_create(&rp, &r), WST_ERR_INVALID);
    rp.field_mask = WST_RECEIVER_PARAM_LANE_DEVICES;
    rp.lane_devices = "eth0,,eth1";
    assert_int_equal(wst_receiver_create(&rp, &r), WST_ERR_INVALID);
    assert_null(r);

    sp.field_mask |= WST_SENDER_PARAM_MOVER;
    sp.mover = "nccl"; /* chosen per link, never asked for */
    assert_int_equal(wst_sender_create(&sp, &s), WST_ERR_INVALID);
    sp.mover = "auto";
    sp.field_mask |= WST_SENDER_PARAM_BOUNCE;
    sp.bounce_bytes = 0;
    assert_int_equal(wst_sender_create(&sp, &s), WST_ERR_INVALID);
    sp.bounce_bytes = 64ull << 20;
    sp.field_mask |= WST_SENDER_PARAM_DIGEST_THREADS;
    sp.digest_threads = WST_DIGEST_THREADS_MAX + 1;
    assert_int_equal(wst_sender_create(&sp, &s), WST_ERR_INVALID);
    sp.digest_threads = 2;
    sp.field_mask |= WST_SENDER_PARAM_LANES;
    sp.lanes = WST_WORKER_LANES_MAX + 1;
    assert_int_equal(wst_sender_create(&sp, &s), WST_ERR_INVALID);
    sp.lanes = 1;
    sp.field_mask |= WST_SENDER_PARAM_LANE_DEVICES;
    sp.lane_devices = "eth0;eth1";
    assert_int_equal(wst_sender_create(&sp, &s), WST_ERR_INVALID);
    assert_null(s);
}

/* Hashing threads for 0 ("auto"): three for every four lanes, at least
 * 2 (common/worker.h; the figures that chose it are in NOTES.md). */
static void test_lib_config_hash_threads_auto(void **state)
{
    static const unsigned want[WST_WORKER_LANES_MAX + 1] = {2, 2, 2, 3, 3,
                                                            4, 5, 6, 6};

    (void)state;
    for (unsigned l = 0; l <= WST_WORKER_LANES_MAX; l++)
        assert_int_equal(wst_worker_hash_threads_auto(l), want[l]);
    /* the window: 32 MiB a lane, at least 64 MiB */
    assert_int_equal(wst_worker_window_auto(1), 64ull << 20);
    assert_int_equal(wst_worker_window_auto(2), 64ull << 20);
    assert_int_equal(wst_worker_window_auto(3), 96ull << 20);
    assert_int_equal(wst_worker_window_auto(8), 256ull << 20);
}

/* lane_devices (common/worker.h): entry index mod n, checked whole. */
static void test_lib_config_lane_devices(void **state)
{
    char dev[WST_WORKER_DEVICE_MAX], err[256];
    char long_name[WST_WORKER_DEVICE_MAX + 1];
    char many[WST_WORKER_DEVICES_MAX * 3 + 8] = "";

    (void)state;
    assert_int_equal(wst_worker_lane_device_pick(NULL, 3, dev, err, 256),
                     WST_OK);
    assert_string_equal(dev, "");
    assert_int_equal(wst_worker_lane_device_pick("", 0, dev, err, 256), WST_OK);
    assert_string_equal(dev, "");
    assert_int_equal(
        wst_worker_lane_device_pick("mlx5_0:1,mlx5_1:1", 0, dev, err, 256),
        WST_OK);
    assert_string_equal(dev, "mlx5_0:1");
    assert_int_equal(
        wst_worker_lane_device_pick("mlx5_0:1,mlx5_1:1", 3, dev, err, 256),
        WST_OK);
    assert_string_equal(dev, "mlx5_1:1");
    assert_int_equal(wst_worker_lane_device_pick("eth-1.2", 5, dev, err, 256),
                     WST_OK);
    assert_string_equal(dev, "eth-1.2");

    static const char *const bad[] = {",eth0",   "eth0,", "eth0,,eth1",
                                      "eth0;rm", "eth 0", "eth0,\"x\""};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        assert_int_equal(wst_worker_lane_device_pick(bad[i], 0, dev, err, 256),
                         WST_ERR_INVALID);
        assert_non_null(strstr(err, "lane devices"));
    }
    memset(long_name, 'a', WST_WORKER_DEVICE_MAX);
    long_name[WST_WORKER_DEVICE_MAX] = '\0';
    assert_int_equal(wst_worker_lane_device_pick(long_name, 0, dev, err, 256),
                     WST_ERR_INVALID);
    long_name[WST_WORKER_DEVICE_MAX - 1] = '\0'; /* the longest allowed */
    assert_int_equal(wst_worker_lane_device_pick(long_name, 0, dev, err, 256),
                     WST_OK);
    for (int i = 0; i < WST_WORKER_DEVICES_MAX; i++)
        strcat(many, i ? ",e" : "e");
    assert_int_equal(wst_worker_lane_device_pick(many, 0, dev, err, 256),
                     WST_OK);
    strcat(many, ",e");
    assert_int_equal(wst_worker_lane_device_pick(many, 0, dev, err, 256),
                     WST_ERR_INVALID);
    assert_non_null(strstr(err, "more than"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lib_config_sender_defaults),
        cmocka_unit_test(test_lib_config_receiver_defaults),
        cmocka_unit_test(test_lib_config_device_path_names),
        cmocka_unit_test(test_lib_config_create_refuses),
        cmocka_unit_test(test_lib_config_hash_threads_auto),
        cmocka_unit_test(test_lib_config_lane_devices),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
