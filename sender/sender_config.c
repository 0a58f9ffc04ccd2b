/* sender_config.c - the sender's settings and their defaults. */
#include "sender_config.h"

#include <stddef.h>

#include "heartbeat_msg.h"
#include "log.h"
#include "worker.h"

const char *const wst_send_mover_names[] = {"auto", "put", "am", NULL};

const char *const wst_send_device_path_names[] = {"auto", "direct", "bounce",
                                                  "nccl", NULL};

#define FIELD(f) offsetof(struct wst_send_settings, f)
#define HEARTBEAT_DEFAULT WST_CONFIG_QUOTE(WST_HEARTBEAT_INTERVAL_DEFAULT)
#define PEER_TIMEOUT_DEFAULT WST_CONFIG_QUOTE(WST_HEARTBEAT_TIMEOUT_DEFAULT)
#define LANES_DEFAULT WST_CONFIG_QUOTE(WST_SEND_LANES_DEFAULT)
#define LANES_MAX WST_CONFIG_QUOTE(WST_WORKER_LANES_MAX)

const struct wst_config_entry wst_send_config[] = {
    [WST_SEND_CONFIG_TIMEOUT] = {"timeout", WST_CONFIG_DOUBLE, "30",
                                 "seconds allowed to connect, plan and begin",
                                 FIELD(timeout_s), NULL, NULL},
    [WST_SEND_CONFIG_MOVER] = {"mover", WST_CONFIG_ENUM, "auto",
                               "data mover: auto, put, am", FIELD(mover),
                               wst_send_mover_names, NULL},
    [WST_SEND_CONFIG_LOG_LEVEL] = {"log-level", WST_CONFIG_ENUM, "info",
                                   "error, warn, info, debug, trace",
                                   FIELD(log_level), wst_log_level_names, NULL},
    [WST_SEND_CONFIG_WINDOW] = {"window", WST_CONFIG_UINT, "0",
                                "bytes in flight per receiver (0: 32 MiB "
                                "per data lane, at least 64 MiB; 1 GiB on "
                                "the direct device path)",
                                FIELD(window_bytes), NULL, NULL},
    [WST_SEND_CONFIG_HEARTBEAT] =
        {"heartbeat", WST_CONFIG_DOUBLE, HEARTBEAT_DEFAULT,
         "seconds between heartbeats on every control connection",
         FIELD(heartbeat_s), NULL, NULL},
    [WST_SEND_CONFIG_PEER_TIMEOUT] =
        {"peer-timeout", WST_CONFIG_DOUBLE, PEER_TIMEOUT_DEFAULT,
         "seconds of silence after which a receiver has failed",
         FIELD(peer_timeout_s), NULL, NULL},
    [WST_SEND_CONFIG_SHM_DATA] =
        {"shm-data", WST_CONFIG_BOOL, "no",
         "data endpoints without peer-failure detection, so same-host data "
         "can use shared memory",
         FIELD(shm_data), NULL, NULL},
    [WST_SEND_CONFIG_DEVICE_PATH] =
        {"device-path", WST_CONFIG_ENUM, "auto",
         "how device shards travel: auto, direct, bounce or nccl",
         FIELD(device_path), wst_send_device_path_names, NULL},
    [WST_SEND_CONFIG_BOUNCE] =
        {"bounce", WST_CONFIG_UINT, "64m",
         "pinned host memory the bounce path copies device shards through",
         FIELD(bounce_bytes), NULL, NULL},
    [WST_SEND_CONFIG_DIGEST_THREADS] =
        {"digest-threads", WST_CONFIG_UINT, "0",
         "threads that hash layers while the refit streams (push returns "
         "at once); 0: three for every four lanes, at least 2",
         FIELD(digest_threads), NULL, NULL},
    [WST_SEND_CONFIG_LANES] = {"lanes", WST_CONFIG_UINT, LANES_DEFAULT,
                               "data lanes (1.." LANES_MAX
                               "; 0: one per two CPUs): UCX workers, each "
                               "with a thread of "
                               "its own, that the am mover stripes data over",
                               FIELD(lanes), NULL, NULL},
    WST_CONFIG_END,
};

wst_status_t wst_send_settings_init(struct wst_send_settings *set)
{
    return wst_config_init(wst_send_config, set, NULL, 0);
}
