/* jobq.h - a FIFO of jobs run by one dedicated thread, or by a few.
 *
 * The receiver's engine thread is one of these: digest checks and every
 * engine hook run on it, in the order they were posted, so a slow hook or
 * a long digest never blocks the progress thread (heartbeats, data). Its
 * hashing threads are another, of several threads: data is hashed as it
 * lands, in parallel, in no particular order.
 */
#ifndef WST_JOBQ_H
#define WST_JOBQ_H

#include <wstream/status.h>

typedef struct wst_jobq wst_jobq_t;
typedef void (*wst_job_fn)(void *arg);

/* Starts the thread, named 'name' (at most 15 characters kept: what
 * top -H, /proc and the bench's CPU table show). On success *q_p is owned
 * by the caller. */
wst_status_t wst_jobq_create(const char *name, wst_jobq_t **q_p);

/* Starts n_threads (>= 1) threads that take jobs in FIFO order and run
 * them side by side. On success *q_p is owned by the caller. */
wst_status_t wst_jobq_create_threads(const char *name, unsigned n_threads,
                                     wst_jobq_t **q_p);

/* Queues fn(arg); any thread. Jobs start in FIFO order; with one thread
 * they run one at a time. */
wst_status_t wst_jobq_post(wst_jobq_t *q, wst_job_fn fn, void *arg);

/* Runs the jobs already queued, then stops and joins the threads. */
void wst_jobq_destroy(wst_jobq_t *q);

#endif
