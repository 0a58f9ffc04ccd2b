/* engine_socket.h - the daemon-mode engine hook: a local socket an engine
 * process connects to.
 *
 * The agent listens on a Unix stream socket; one engine connects and is
 * told about every refit in '\n'-terminated text lines of at most 600
 * bytes, fields separated by one space (README.md, "Engine socket
 * protocol"):
 *
 *     agent -> engine            engine -> agent
 *     BEGIN <v> [<label>]        READY <v> | REFUSE <v> <reason...>
 *     LAYER <l> <v>              FINALIZED <l> <v> | FAILED <l> <v> <reason...>
 *     COMMITTED <v> [<label>]    (no reply)
 *     UNUSABLE <status> <reason...>  (no reply)
 *
 * <label> is the version's label (common/label.h: printable ASCII without
 * spaces, so one field), there only when the version has one.
 *
 * An accept thread takes the connection (a second one gets "ERROR busy" and
 * is closed, unless the first hung up while not paused for a refit: then
 * the second replaces it); the request functions run on the receiver's engine
 * thread and block until the reply or the deadline. Any timeout or protocol
 * error drops the connection, since a late reply would desynchronise the
 * stream.
 */
#ifndef WST_ENGINE_SOCKET_H
#define WST_ENGINE_SOCKET_H

#include <stddef.h>
#include <stdint.h>
#include <wstream/status.h>

#include "log.h"

struct wst_engine_socket;

#define WST_ENGINE_LINE_MAX 600 /* bytes, the '\n' included */

/* A BEGIN with no engine connected waits this long for one (at most a
 * quarter of the timeout) before it is refused: an engine and its agent start
 * together (a sidecar, the demo), and a trainer may push before the
 * engine's hook has connected (the Python hook retries with a back-off of
 * up to 2 s; the stand-in every 50 ms). */
#define WST_ENGINE_CONNECT_WAIT_S 3.0

/* Unlinks a stale file at 'path', listens there (mode 0600) and starts the
 * accept thread. 'path' is copied; 'log' is borrowed until destroy. Replies
 * are awaited for at most timeout_s. unusable_reason (NULL or "": usable)
 * is the standing state engines hear when they connect (below). On success
 * *sock_p is owned by the caller. */
wst_status_t wst_engine_socket_create(const char *path, double timeout_s,
                                      const char *unusable_reason,
                                      const struct wst_logger *log,
                                      struct wst_engine_socket **sock_p);

/* Stops the accept thread, closes the connection and the listener, unlinks
 * the socket file and frees everything. Safe on NULL. */
void wst_engine_socket_destroy(struct wst_engine_socket *sock);

/* BEGIN, with 'label' ("": none; the receiver's, already checked):
 * WST_OK on READY; WST_ERR_UNREACHABLE with no engine connected within
 * WST_ENGINE_CONNECT_WAIT_S (or when it hangs up); WST_ERR_STATE on REFUSE;
 * WST_ERR_TIMED_OUT; WST_ERR_PROTOCOL on a malformed or mismatched reply. On an
 * error, why (the engine's own reason for REFUSE) goes to
 * reason[0..reason_len). */
wst_status_t wst_engine_socket_begin(struct wst_engine_socket *sock,
                                     uint64_t version, const char *label,
                                     char *reason, size_t reason_len);

/* LAYER: WST_OK on FINALIZED; WST_ERR_UNUSABLE on FAILED; otherwise as
 * wst_engine_socket_begin. */
wst_status_t wst_engine_socket_layer(struct wst_engine_socket *sock,
                                     uint32_t layer, uint64_t version,
                                     char *reason, size_t reason_len);

/* The agent's standing state for engines that connect later: WST_OK
 * (usable: nothing is said), or an error status and reason, sent at once
 * to every engine that connects as "UNUSABLE <status> <reason...>".
 * UNUSABLE below sets it and COMMITTED clears it; the agent sets it at
 * start from its persisted state. 'reason' is copied. */
void wst_engine_socket_standing(struct wst_engine_socket *sock,
                                wst_status_t status, const char *reason);

/* COMMITTED (with the version's label, "": none) and UNUSABLE: no reply;
 * a missing engine is logged. 'reason' is borrowed during the call;
 * control characters are sent as spaces. */
void wst_engine_socket_committed(struct wst_engine_socket *sock,
                                 uint64_t version, const char *label);
void wst_engine_socket_unusable(struct wst_engine_socket *sock,
                                wst_status_t status, const char *reason);

#endif
