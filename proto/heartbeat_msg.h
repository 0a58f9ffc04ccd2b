/* heartbeat_msg.h - the heartbeat both libraries send on their control
 * connections: its message, its numbering and its default timing.
 *
 * The worker (common/worker.h) sends heartbeats and fails silent
 * connections but knows no message format; the sender and the receiver
 * both fill its struct wst_heartbeat_params here, so the message and the
 * defaults their public headers document exist once.
 */
#ifndef WST_HEARTBEAT_MSG_H
#define WST_HEARTBEAT_MSG_H

#include <stddef.h>
#include <stdint.h>

#include <wstream/status.h>

#include "worker.h"

/* The defaults of heartbeat_s and peer_timeout_s (sender.h, receiver.h),
 * in seconds, as literals so that configuration tables can quote them. */
#define WST_HEARTBEAT_INTERVAL_DEFAULT 1
#define WST_HEARTBEAT_TIMEOUT_DEFAULT 5

/* A wst_heartbeat_encode_fn: a Heartbeat control message carrying SEQ,
 * in a new malloc'd buffer the caller frees. */
wst_status_t wst_heartbeat_encode(uint64_t seq, void **msg_p, size_t *len_p);

/* Fills *hb (every field) for the worker: INTERVAL_S and TIMEOUT_S when
 * GIVEN, else the defaults. WST_ERR_INVALID, *hb untouched, when given
 * values are not 0 < interval_s < timeout_s. */
wst_status_t wst_heartbeat_params_set(struct wst_heartbeat_params *hb,
                                      int given, double interval_s,
                                      double timeout_s);

#endif
