/* timed_wait.c - pthread_cond_timedwait() against a monotonic deadline. */
#include "timed_wait.h"

#include <time.h>

#include "clock.h"

wst_status_t wst_cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *lock,
                                 uint64_t deadline_ns)
{
    uint64_t now = wst_now_ns(), left;
    struct timespec ts;

    if (now >= deadline_ns)
        return WST_ERR_TIMED_OUT;
    left = deadline_ns - now;
    /* beyond a day is as good as forever, and cannot overflow time_t */
    if (left > 86400ull * 1000000000ull)
        left = 86400ull * 1000000000ull;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)(left / 1000000000ull);
    ts.tv_nsec += (long)(left % 1000000000ull);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(cond, lock, &ts);
    return wst_now_ns() >= deadline_ns ? WST_ERR_TIMED_OUT : WST_OK;
}

wst_status_t wst_cond_wait_s(pthread_cond_t *cond, pthread_mutex_t *lock,
                             double seconds)
{
    return wst_cond_wait_until(cond, lock, wst_deadline_ns(seconds));
}
