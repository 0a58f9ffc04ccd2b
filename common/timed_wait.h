/* timed_wait.h - waiting on a condition variable with a monotonic deadline.
 *
 * pthread_cond_timedwait() takes a CLOCK_REALTIME timespec; deadlines here
 * are CLOCK_MONOTONIC nanoseconds (clock.h). These two calls do the
 * conversion once. Both return after one wake-up, which may be spurious:
 * the caller loops on its own condition, e.g.
 *
 *     while (!ready(x) && wst_cond_wait_until(&c, &m, deadline) == WST_OK)
 *         ;
 */
#ifndef WST_TIMED_WAIT_H
#define WST_TIMED_WAIT_H

#include <pthread.h>
#include <stdint.h>

#include <wstream/status.h>

/* Waits on COND, whose LOCK the caller holds (as for pthread_cond_wait),
 * until it is signalled or the monotonic time DEADLINE_NS (wst_now_ns(),
 * wst_deadline_ns()) is reached. WST_OK when woken before the deadline,
 * WST_ERR_TIMED_OUT once it has passed (at once, without waiting, when it
 * already has). Borrows cond and lock for the call. */
wst_status_t wst_cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *lock,
                                 uint64_t deadline_ns);

/* The same with a deadline SECONDS from now (<= 0: already passed). */
wst_status_t wst_cond_wait_s(pthread_cond_t *cond, pthread_mutex_t *lock,
                             double seconds);

#endif
