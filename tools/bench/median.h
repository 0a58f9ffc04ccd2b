/* median.h - the median of a bench's repeated measurements.
 *
 * Every figure wstream-bench prints over repeats is a median: the machines
 * it runs on are shared, and one slow repeat should not move the number.
 */
#ifndef WST_BENCH_MEDIAN_H
#define WST_BENCH_MEDIAN_H

#include <stddef.h>

/* Median of v[0..n) (n >= 1): the middle value, or the mean of the two
 * middle ones for even n. Sorts a copy; v is only read. If that copy
 * cannot be had, returns v[0] (a measurement, if not the median). */
double wst_bench_median(const double *v, size_t n);

#endif
