/* sender_config.h - the sender's settings, in one table: the single source
 * of each default.
 *
 * wst_sender_create starts from the table (wst_send_settings_init) and
 * takes what the caller's params set. A program that offers one of these
 * settings as a flag (wstream-send, the demo) adds a WST_CONFIG_LIKE entry
 * pointing here (config.h), so the flag's default, type and choices come
 * from this table too. include/wstream/sender.h documents the same
 * defaults (test_lib_config holds them to it).
 */
#ifndef WST_SENDER_CONFIG_H
#define WST_SENDER_CONFIG_H

#include <stdint.h>

#include <wstream/status.h>

#include "config.h"

/* The table's settings, as wst_config stores them. */
struct wst_send_settings {
    double timeout_s;
    int mover;     /* index into wst_send_mover_names */
    int log_level; /* enum wst_log_level */
    uint64_t window_bytes;
    double heartbeat_s;
    double peer_timeout_s;
    int shm_data;
    int device_path; /* enum wst_path_pref (device_path.h) */
    uint64_t bounce_bytes;
    uint64_t digest_threads;
    uint64_t lanes;
};

#define WST_DIGEST_THREADS_MAX 64

/* Data lanes of a sender's worker (wst_sender_params.lanes) when the caller
 * says nothing: 0, auto (wst_worker_lanes_auto, common/worker.h); at most
 * WST_WORKER_LANES_MAX. */
#define WST_SEND_LANES_DEFAULT 0

/* Indexes of wst_send_config, for WST_CONFIG_LIKE entries. */
enum wst_send_config_key {
    WST_SEND_CONFIG_TIMEOUT,
    WST_SEND_CONFIG_MOVER,
    WST_SEND_CONFIG_LOG_LEVEL,
    WST_SEND_CONFIG_WINDOW,
    WST_SEND_CONFIG_HEARTBEAT,
    WST_SEND_CONFIG_PEER_TIMEOUT,
    WST_SEND_CONFIG_SHM_DATA,
    WST_SEND_CONFIG_DEVICE_PATH,
    WST_SEND_CONFIG_BOUNCE,
    WST_SEND_CONFIG_DIGEST_THREADS,
    WST_SEND_CONFIG_LANES,
};

/* "auto", "put", "am", then NULL: wst_sender_params.mover. */
extern const char *const wst_send_mover_names[];

/* "auto", "direct", "bounce", "nccl", then NULL, in the order of enum
 * wst_path_pref: wst_sender_params.device_path. */
extern const char *const wst_send_device_path_names[];

/* The table, indexed by enum wst_send_config_key, WST_CONFIG_END after. */
extern const struct wst_config_entry wst_send_config[];

/* Fills *set with the table's defaults (no environment). */
wst_status_t wst_send_settings_init(struct wst_send_settings *set);

#endif
