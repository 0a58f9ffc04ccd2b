/* heartbeat_msg.h - the heartbeat both libraries send on their control
 * connections: its message, its numbering and its default timing.
 *
 * The worker (common/worker.h) sends heartbeats and fails silent
 * connections but knows no message format; the sender and the receiver
 * both fill its struct wst_heartbeat_params here, so the message, its
 * check and the defaults their public headers document exist once.
 */
#ifndef WST_HEARTBEAT_MSG_H
#define WST_HEARTBEAT_MSG_H

#include <stddef.h>
#include <stdint.h>

#include <wstream/status.h>

#include "worker.h"

/* The defaults of heartbeat_s and peer_timeout_s (sender.h, receiver.h),
 * in seconds: the sender's and the receiver's configuration tables
 * (sender_config.c, receiver_config.c) quote them. */
#define WST_HEARTBEAT_INTERVAL_DEFAULT 1
#define WST_HEARTBEAT_TIMEOUT_DEFAULT 5

/* A wst_heartbeat_encode_fn: a Heartbeat control message carrying SEQ,
 * in a new malloc'd buffer the caller frees. */
wst_status_t wst_heartbeat_encode(uint64_t seq, void **msg_p, size_t *len_p);

/* Fills *hb (every field) for the worker: a heartbeat every INTERVAL_S,
 * a connection silent for TIMEOUT_S failed. WST_ERR_INVALID, *hb
 * untouched, when interval_s <= 0 or timeout_s <= interval_s. */
wst_status_t wst_heartbeat_params_set(struct wst_heartbeat_params *hb,
                                      double interval_s, double timeout_s);

#endif
