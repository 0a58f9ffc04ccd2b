/* clock.c - CLOCK_MONOTONIC helpers. */
#include "clock.h"

#include <time.h>

uint64_t wst_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double wst_now_s(void)
{
    return (double)wst_now_ns() / 1e9;
}

double wst_thread_cpu_s(void)
{
    struct timespec ts;

    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return 0;
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

uint64_t wst_deadline_ns(double seconds)
{
    uint64_t now = wst_now_ns();

    if (seconds <= 0)
        return now;
    if (seconds > 1e9)
        return UINT64_MAX;
    return now + (uint64_t)(seconds * 1e9);
}
