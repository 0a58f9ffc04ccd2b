/* metrics.h - the agent's HTTP endpoints: Prometheus text metrics on
 * /metrics, liveness on /healthz and readiness on /readyz (200 only while
 * the receiver is usable and holds a committed version, 503 otherwise,
 * with the reason). Served by libmicrohttpd's own thread.
 *
 * Names follow Prometheus conventions: one prefix (wstream_), base units
 * (bytes, seconds), _total on counters. What the receiver's state says is
 * read at scrape time; what happens at refits (outcomes, errors by status,
 * bytes, per-layer repack and finalize durations) is recorded by the
 * agent's hooks through wst_metrics_refit_*.
 *
 * Threads: record from the receiver's hook thread, scrape from the
 * server's thread; a mutex orders them.
 */
#ifndef WST_RECEIVER_METRICS_H
#define WST_RECEIVER_METRICS_H

#include <stdint.h>
#include <wstream/receiver.h>
#include <wstream/status.h>

#include "log.h"

struct wst_metrics;

/* Serves on host:port (port 0: any; the bound port goes to *port_p).
 * 'receiver' and 'log' are borrowed for the server's lifetime. Nonzero
 * 'insecure' (no auth secret) shows as wstream_insecure 1 and in the
 * /readyz body. On success *m_p is owned by the caller
 * (wst_metrics_destroy). */
wst_status_t wst_metrics_start(const struct wst_logger *log,
                               wst_receiver_t *receiver, int insecure,
                               const char *host, uint16_t port,
                               uint16_t *port_p, struct wst_metrics **m_p);

/* A refit committed: its bytes and the layer timeline of the receiver. */
void wst_metrics_refit_committed(struct wst_metrics *m);

/* A refit failed and left the receiver unusable, with 'status'. */
void wst_metrics_refit_failed(struct wst_metrics *m, wst_status_t status);

/* Stops the server (waits for a scrape in progress); NULL is fine. */
void wst_metrics_destroy(struct wst_metrics *m);

#endif
