/* receiver_config.c - the receiver's settings and their defaults. */
#include "receiver_config.h"

#include <stddef.h>

#include "heartbeat_msg.h"
#include "log.h"
#include "worker.h"

const char *const wst_recv_mover_names[] = {"auto", "am", NULL};

#define FIELD(f) offsetof(struct wst_recv_settings, f)
#define HEARTBEAT_DEFAULT WST_CONFIG_QUOTE(WST_HEARTBEAT_INTERVAL_DEFAULT)
#define PEER_TIMEOUT_DEFAULT WST_CONFIG_QUOTE(WST_HEARTBEAT_TIMEOUT_DEFAULT)
#define SLOTS_MAX WST_CONFIG_QUOTE(WST_RECV_STAGING_SLOTS_MAX)
#define VERIFY_THREADS_MAX WST_CONFIG_QUOTE(WST_RECV_VERIFY_THREADS_MAX)
#define MULTIPLE WST_CONFIG_QUOTE(WST_RECV_MANIFEST_WANT_MULTIPLE)
#define ENTRIES_MIN WST_CONFIG_QUOTE(WST_RECV_MANIFEST_ENTRIES_MIN)
#define LANES_DEFAULT WST_CONFIG_QUOTE(WST_RECV_LANES_DEFAULT)
#define LANES_MAX WST_CONFIG_QUOTE(WST_WORKER_LANES_MAX)

const struct wst_config_entry wst_recv_config[] = {
    [WST_RECV_CONFIG_TIMEOUT] =
        {"timeout", WST_CONFIG_DOUBLE, "30",
         "seconds before missing manifests or a stalled refit fail",
         FIELD(timeout_s), NULL, NULL},
    [WST_RECV_CONFIG_HEARTBEAT] =
        {"heartbeat", WST_CONFIG_DOUBLE, HEARTBEAT_DEFAULT,
         "seconds between heartbeats on every control connection",
         FIELD(heartbeat_s), NULL, NULL},
    [WST_RECV_CONFIG_PEER_TIMEOUT] =
        {"peer-timeout", WST_CONFIG_DOUBLE, PEER_TIMEOUT_DEFAULT,
         "seconds of silence after which a sender has failed",
         FIELD(peer_timeout_s), NULL, NULL},
    [WST_RECV_CONFIG_MOVER] =
        {"mover", WST_CONFIG_ENUM, "auto",
         "auto: keys for host regions where senders' lanes do real RMA, and "
         "for the device staging pool with a CUDA-aware UCX (senders put "
         "there with --mover put); am: no keys, never put",
         FIELD(mover), wst_recv_mover_names, NULL},
    [WST_RECV_CONFIG_STAGING_SLOTS] =
        {"staging-slots", WST_CONFIG_UINT, "2",
         "MoE layers staged at once (1.." SLOTS_MAX "): staging memory is "
         "this many layers' local experts",
         FIELD(staging_slots), NULL, NULL},
    [WST_RECV_CONFIG_VERIFY] = {"verify", WST_CONFIG_BOOL, "yes",
                                "check every layer's digest", FIELD(verify),
                                NULL, NULL},
    [WST_RECV_CONFIG_VERIFY_THREADS] = {"verify-threads", WST_CONFIG_UINT, "0",
                                        "threads (1.." VERIFY_THREADS_MAX
                                        ") that hash data as it lands, "
                                        "with verify; 0: three for every "
                                        "four lanes, at least 2",
                                        FIELD(verify_threads), NULL, NULL},
    [WST_RECV_CONFIG_LOG_LEVEL] = {"log-level", WST_CONFIG_ENUM, "info",
                                   "error, warn, info, debug, trace",
                                   FIELD(log_level), wst_log_level_names, NULL},
    [WST_RECV_CONFIG_MAX_MANIFEST_ENTRIES] =
        {"max-manifest-entries", WST_CONFIG_UINT, "0",
         "shards one sender's manifest may list (at most 1048576); 0: "
         "auto, " MULTIPLE " times the tensors this receiver wants, at "
         "least " ENTRIES_MIN,
         FIELD(max_manifest_entries), NULL, NULL},
    [WST_RECV_CONFIG_MAX_MANIFEST_BYTES] =
        {"max-manifest-bytes", WST_CONFIG_UINT, "512m",
         "memory all senders' decoded manifests may hold together",
         FIELD(max_manifest_bytes), NULL, NULL},
    [WST_RECV_CONFIG_MAX_UNRANKED] =
        {"max-unranked-peers", WST_CONFIG_UINT, "8",
         "authenticated connections at once that have not said hello (have "
         "no sender rank yet)",
         FIELD(max_unranked), NULL, NULL},
    [WST_RECV_CONFIG_LANES] =
        {"lanes", WST_CONFIG_UINT, LANES_DEFAULT,
         "data lanes (1.." LANES_MAX
         "; 0: one per two CPUs): UCX workers, each with a thread of "
         "its own, that take a share of the senders' am data",
         FIELD(lanes), NULL, NULL},
    [WST_RECV_CONFIG_DEVICE_RING] =
        {"device-ring-bytes", WST_CONFIG_UINT, "1g",
         "GPU memory (whole MiB, 8m to 64g) in which data for engine memory "
         "a CUDA-aware UCX cannot export lands before its copy in place; "
         "allocated only then (WST_DEVICE_RING=<MiB>|off overrides it, "
         "for measuring)",
         FIELD(device_ring), NULL, NULL},
    WST_CONFIG_END,
};

wst_status_t wst_recv_settings_init(struct wst_recv_settings *set)
{
    return wst_config_init(wst_recv_config, set, NULL, 0);
}
