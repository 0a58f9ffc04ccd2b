/* clock.h - monotonic time for deadlines and rates. */
#ifndef WST_CLOCK_H
#define WST_CLOCK_H

#include <stdint.h>

/* Monotonic nanoseconds. */
uint64_t wst_now_ns(void);

/* Monotonic seconds as a double, for rates and log lines. */
double wst_now_s(void);

/* now + seconds, saturating; seconds <= 0 means "already expired". */
uint64_t wst_deadline_ns(double seconds);

#endif
