/* receiver_config.h - the receiver's settings, in one table: the single
 * source of each default.
 *
 * wst_receiver_create starts from the table (wst_recv_settings_init) and
 * takes what the caller's params set. wstream-agent offers each setting as
 * a flag through a WST_CONFIG_LIKE entry (config.h), so its defaults, types
 * and choices, and its WST_* variables' defaults, come from here too.
 * include/wstream/receiver.h documents the same defaults (test_lib_config
 * holds them to it).
 */
#ifndef WST_RECEIVER_CONFIG_H
#define WST_RECEIVER_CONFIG_H

#include <stdint.h>

#include <wstream/status.h>

#include "config.h"

/* Hashing threads a receiver takes (wst_receiver_params.verify_threads). */
#define WST_RECV_VERIFY_THREADS_MAX 64

/* Data lanes of a receiver's worker (wst_receiver_params.lanes) when the caller
 * says nothing: 0, auto (wst_worker_lanes_auto, common/worker.h); at most
 * WST_WORKER_LANES_MAX. */
#define WST_RECV_LANES_DEFAULT 0

/* The device ring's bounds (wst_receiver_params.device_ring_bytes; its
 * default, 1 GiB, is in the table: 32 of its largest messages, the direct
 * path's window, select.h). An 8-layer direct refit on one H200 (NOTES.md,
 * issue 19): 8 MiB messages in 256 MiB 384-397 GB/s; 32 MiB messages in
 * 256 MiB 445-450, in 1 GiB 478-479. It costs that much of the engine's
 * GPU, and exists only where UCX moves device memory it cannot export. */
#define WST_RECV_DEVICE_RING_MIN (8ull << 20)
#define WST_RECV_DEVICE_RING_MAX (64ull << 30)

/* Staging slots a receiver takes (wst_receiver_params.staging_slots). */
#define WST_RECV_STAGING_SLOTS_MAX 64

/* The table's settings, as wst_config stores them. */
struct wst_recv_settings {
    double timeout_s;
    double heartbeat_s;
    double peer_timeout_s;
    int mover; /* index into wst_recv_mover_names */
    uint64_t staging_slots;
    int verify;
    uint64_t verify_threads;
    int log_level;                 /* enum wst_log_level */
    uint64_t max_manifest_entries; /* per sender; 0: auto (wst_recv_limits) */
    uint64_t max_manifest_bytes;   /* all senders' manifests together */
    uint64_t max_unranked;         /* authenticated peers before hello */
    uint64_t lanes;                /* data lanes of the worker */
    uint64_t device_ring;          /* bytes of the device ring */
};

/* Indexes of wst_recv_config, for WST_CONFIG_LIKE entries. */
enum wst_recv_config_key {
    WST_RECV_CONFIG_TIMEOUT,
    WST_RECV_CONFIG_HEARTBEAT,
    WST_RECV_CONFIG_PEER_TIMEOUT,
    WST_RECV_CONFIG_MOVER,
    WST_RECV_CONFIG_STAGING_SLOTS,
    WST_RECV_CONFIG_VERIFY,
    WST_RECV_CONFIG_VERIFY_THREADS,
    WST_RECV_CONFIG_LOG_LEVEL,
    WST_RECV_CONFIG_MAX_MANIFEST_ENTRIES,
    WST_RECV_CONFIG_MAX_MANIFEST_BYTES,
    WST_RECV_CONFIG_MAX_UNRANKED,
    WST_RECV_CONFIG_LANES,
    WST_RECV_CONFIG_DEVICE_RING,
};

/* max-manifest-entries 0: this many times the tensors the receiver wants,
 * and at least WST_RECV_MANIFEST_ENTRIES_MIN. */
#define WST_RECV_MANIFEST_WANT_MULTIPLE 64
#define WST_RECV_MANIFEST_ENTRIES_MIN 65536

/* "auto" (remote keys where senders may put: host regions over real
 * RMA, the device staging pool), "am"; NULL after. */
extern const char *const wst_recv_mover_names[];

/* The table, indexed by enum wst_recv_config_key, WST_CONFIG_END after. */
extern const struct wst_config_entry wst_recv_config[];

/* Fills *set with the table's defaults (no environment). */
wst_status_t wst_recv_settings_init(struct wst_recv_settings *set);

#endif
