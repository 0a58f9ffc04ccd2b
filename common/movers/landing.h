/* landing.h - the receiving side's landing ring: when live regions are
 * device memory and UCX cannot write device memory, data messages land in
 * a ring of pinned host memory (registered with UCX once) and each is
 * copied to its device destination on a copy stream. A waiter thread
 * (gpu_waiter.h) waits on each copy's event in order and posts the
 * completion to the progress thread, which gives the message's room back,
 * calls the copy's callback and lets parked messages in
 * (wst_worker_data_resume).
 *
 *   UCX rndv ──▶ pinned ring ──cudaMemcpyAsync──▶ device region
 *                   ▲  event ──▶ waiter ──post──▶ progress thread
 *                   └────────────── room free again ◀───────────┘
 *
 * A device ring (wst_landing_create_device) serves a CUDA-aware UCX: its
 * memory is this process's own cudaMalloc, which UCX's cuda_ipc can
 * export, and each message is copied device to device into memory the
 * receiver mapped from its engine by CUDA IPC, which UCX cannot export
 * (gpu.h, wst_gpu_ipc_exportable): a rendezvous message straight into
 * that memory makes UCX 1.13-1.16 fail to pack its remote key ("invalid
 * argument" from cuIpcGetMemHandle) and fall back to a path ~100 times
 * slower. The extra copy reads and writes each byte once more on the GPU.
 *
 * At most one of each per receiver, shared by its senders' receiving
 * halves. Threads: every function on the progress thread; stop waits for
 * copies in flight.
 */
#ifndef WST_MOVERS_LANDING_H
#define WST_MOVERS_LANDING_H

#include <stddef.h>
#include <stdint.h>
#include <wstream/status.h>

#include "log.h"
#include "mover.h"
#include "worker.h"

/* Largest data message that lands: the senders' chunk size. */
#define WST_LANDING_MESSAGE_MAX WST_DATA_CHUNK_MAX
/* The pinned ring messages land in, and how many may be in it at once:
 * small messages (a tensor-parallel slice arrives as one message per row)
 * must not each hold a whole chunk's room. */
#define WST_LANDING_BYTES (8 * WST_LANDING_MESSAGE_MAX)
#define WST_LANDING_RECORDS 1024u

/* A landed message is in device memory (or its copy failed); 'tag' is what
 * wst_landing_copy was given. Progress thread. */
typedef void (*wst_landing_copied_fn)(void *ctx, uint64_t tag, size_t len,
                                      wst_status_t status);

struct wst_landing;

/* Creates the ring on 'device' (its memory registered with 'worker'), the
 * copy stream and the waiter. 'log' and 'worker' are borrowed for its
 * lifetime. On success *landing_p is owned by the caller: stop it
 * (wst_landing_stop) before the worker goes, destroy it after. */
wst_status_t wst_landing_create(const struct wst_logger *log,
                                wst_worker_t *worker, int device,
                                struct wst_landing **landing_p);
/* The same with a ring of 'bytes' (at least WST_LANDING_MESSAGE_MAX; the
 * receiver's device_ring_bytes) of device memory on 'device', not
 * registered (UCX registers it on first use, once per UCX context, in its
 * registration cache), taking messages of up to 'message_max' bytes (from
 * WST_LANDING_MESSAGE_MAX to WST_DATA_DEVICE_CHUNK_MAX; cut to 'bytes' when
 * larger); WST_ERR_INVALID otherwise. Its messages come from a CUDA-aware UCX,
 * whose per-message cost bounds a ring of 8 MiB messages at about a tenth
 * of what the GPU copies (NOTES.md, issue 19). */
wst_status_t wst_landing_create_device(const struct wst_logger *log,
                                       wst_worker_t *worker, int device,
                                       size_t bytes, size_t message_max,
                                       struct wst_landing **landing_p);
void wst_landing_stop(struct wst_landing *landing);
void wst_landing_destroy(struct wst_landing *landing);

/* Room for a 'len'-byte message, or NULL when the ring or its records are
 * full (answer WST_ERR_BUSY: the message is parked). Room is taken in
 * arrival order and given back in that order (landing_ring.h). */
void *wst_landing_take(struct wst_landing *landing, size_t len);

/* The largest message the ring takes. */
size_t wst_landing_message_max(const struct wst_landing *landing);

/* Nonzero when 'ptr' points into the ring. */
int wst_landing_owns(const struct wst_landing *landing, const void *ptr);

/* Gives a message's room back without copying (a dropped message) and lets
 * parked messages in. */
void wst_landing_release(struct wst_landing *landing, void *ptr);

/* Copies the 'len' landed bytes at 'ptr' to device memory 'dst';
 * fn(ctx, tag, len, status) follows once they are there and their room is
 * free again. On error the room is released here and nothing follows. */
wst_status_t wst_landing_copy(struct wst_landing *landing, void *ptr, void *dst,
                              size_t len, wst_landing_copied_fn fn, void *ctx,
                              uint64_t tag);

/* What the ring did since the last call, for a log line per refit. */
struct wst_landing_stats {
    uint64_t copies;
    uint64_t bytes;
    uint64_t latency_sum_ns; /* copy enqueued to its event seen */
    uint64_t latency_max_ns;
    uint64_t parked; /* messages that waited for room */
};
void wst_landing_take_stats(struct wst_landing *landing,
                            struct wst_landing_stats *stats);

#endif
