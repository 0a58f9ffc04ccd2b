/* pool.h - a fixed set of threads that run one indexed batch at a time.
 *
 * The sender's layer digests run on one (sender/digests.c), so that push
 * returns at once and hashing never blocks the trainer's thread. A batch is
 * fn(arg, i) for i = 0 .. n-1, started in increasing order of i by
 * whichever thread is free: callers order the work by urgency.
 */
#ifndef WST_POOL_H
#define WST_POOL_H

#include <stddef.h>

#include <wstream/status.h>

typedef struct wst_pool wst_pool_t;
typedef void (*wst_pool_fn)(void *arg, size_t index);

/* Starts n_threads (>= 1) threads named 'name' (thread_name.h). On
 * success *pool_p is owned by the caller (wst_pool_destroy). */
wst_status_t wst_pool_create(const char *name, unsigned n_threads,
                             wst_pool_t **pool_p);

/* Starts a batch of n jobs; arg is borrowed until wst_pool_finish returns.
 * WST_ERR_BUSY while another batch is not finished. Any one thread. */
wst_status_t wst_pool_start(wst_pool_t *pool, wst_pool_fn fn, void *arg,
                            size_t n);

/* Waits for the batch to end; with 'cancel', jobs not yet started are
 * skipped. Returns at once without a batch. After it returns no job of
 * the batch runs, and another may start. */
void wst_pool_finish(wst_pool_t *pool, int cancel);

/* Cancels the batch, then stops and joins the threads. NULL: no-op. */
void wst_pool_destroy(wst_pool_t *pool);

#endif
