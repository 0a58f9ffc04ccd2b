/* gpu_waiter.h - a thread that waits on CUDA events in the order they were
 * added and posts each completion to a worker's progress thread.
 *
 * Asynchronous copies (a receiver's landing ring into device memory, a
 * sender's device shards into its pinned bounce ring) must not be polled
 * from the progress thread, which sleeps in epoll. Events are recorded on
 * one stream in order, so they complete in order: one thread blocking on
 * the oldest is enough, and the progress thread hears of each completion
 * through wst_worker_post.
 *
 *   progress thread ──add(event, fn, arg)──▶ entries ──▶ waiter thread
 *          ▲                                              │ event sync
 *          └───────────── post: fn(arg, status) ◀─────────┘
 *
 * An entry stays taken until its callback has run on the progress thread,
 * so 'capacity' bounds what is in flight, posted callbacks included.
 */
#ifndef WST_GPU_WAITER_H
#define WST_GPU_WAITER_H

#include <stdint.h>
#include <wstream/status.h>

#include "gpu.h"
#include "log.h"
#include "worker.h"

/* Runs on the progress thread once the event completed (status WST_OK) or
 * waiting on it failed; done_ns is when the waiter saw it (wst_now_ns). */
typedef void (*wst_gpu_waited_fn)(void *arg, wst_status_t status,
                                  uint64_t done_ns);

struct wst_gpu_waiter;

/* Starts the thread, which makes 'device' current. 'log' and 'worker' are
 * borrowed for the waiter's lifetime. On success *waiter_p is owned by the
 * caller: stop it before the worker goes, destroy it after. */
wst_status_t wst_gpu_waiter_create(const struct wst_logger *log,
                                   wst_worker_t *worker, int device,
                                   uint32_t capacity,
                                   struct wst_gpu_waiter **waiter_p);

/* Any one thread at a time (the progress thread in practice): once 'event'
 * (recorded after the work to wait for) completes, fn(arg, ...) is posted
 * to the worker. WST_ERR_BUSY when 'capacity' entries are taken. */
wst_status_t wst_gpu_waiter_add(struct wst_gpu_waiter *w, wst_gpu_event_t event,
                                wst_gpu_waited_fn fn, void *arg);

/* Waits for every event added and ends the thread; nothing is posted after
 * it returns (callbacks already posted still run, and destroy leaves the
 * memory to the last of them, so a waiter may go while its worker lives).
 * NULL is fine. */
void wst_gpu_waiter_stop(struct wst_gpu_waiter *w);
void wst_gpu_waiter_destroy(struct wst_gpu_waiter *w);

#endif
