/* clock.h - monotonic time for deadlines and rates. */
#ifndef WST_CLOCK_H
#define WST_CLOCK_H

#include <stdint.h>

/* Monotonic nanoseconds. */
uint64_t wst_now_ns(void);

/* Monotonic seconds as a double, for rates and log lines. */
double wst_now_s(void);

/* CPU seconds the calling thread has used (CLOCK_THREAD_CPUTIME_ID): on
 * a host with more runnable threads than cores, what a step cost, where
 * wst_now_s differences also count the waits for a core. */
double wst_thread_cpu_s(void);

/* now + seconds, saturating; seconds <= 0 means "already expired". */
uint64_t wst_deadline_ns(double seconds);

#endif
