/* heartbeat.c - liveness of control connections: heartbeats sent every
 * interval (numbered per connection, encoded by the owner), silent
 * connections failed after the timeout, and lingering closes
 * (wst_conn_close_later) carried out when due. Runs from the progress
 * thread's tick.
 */
#include <stdio.h>

#include "worker_internal.h"

/* Sends heartbeats that are due and fails connections gone silent. The
 * failure callback may close connections, so walk a snapshot. */
void wst_heartbeat_tick(wst_worker_t *w, uint64_t now)
{
    struct wst_conn *silent[64];
    size_t n_silent = 0;
    struct wst_conn *next;

    for (struct wst_conn *c = w->conns; c != NULL; c = next) {
        next = c->next; /* closing unlinks c */
        if (c->close_at != 0 && now >= c->close_at)
            wst_conn_close(c);
    }
    for (struct wst_conn *c = w->conns; c != NULL; c = c->next) {
        if (c->failed)
            continue;
        if (w->hb_interval_ns == 0)
            continue;
        if (now - c->last_rx > w->hb_timeout_ns) {
            if (n_silent < sizeof(silent) / sizeof(silent[0]))
                silent[n_silent++] = c;
            continue;
        }
        if (now - c->last_tx >= w->hb_interval_ns) {
            void *msg = NULL;
            size_t len = 0;

            if (w->hb_encode(c->hb_seq + 1, &msg, &len) != WST_OK)
                continue;
            c->hb_seq++;
            c->last_tx = now;
            wst_conn_send(c, msg, len);
        }
    }
    for (size_t i = 0; i < n_silent; i++) {
        char why[96];
        snprintf(why, sizeof(why), "no message for %.1f s",
                 (double)(now - silent[i]->last_rx) / 1e9);
        wst_conn_fail(silent[i], WST_ERR_TIMED_OUT, why);
    }
}
