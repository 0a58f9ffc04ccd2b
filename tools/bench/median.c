/* median.c - the median of repeated measurements (see median.h). */
#include "median.h"

#include <stdlib.h>
#include <string.h>

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

double wst_bench_median(const double *v, size_t n)
{
    double *c = malloc(n * sizeof(*c)), m;

    if (c == NULL)
        return v[0];
    memcpy(c, v, n * sizeof(*c));
    qsort(c, n, sizeof(*c), compare_double);
    m = n % 2 ? c[n / 2] : (c[n / 2 - 1] + c[n / 2]) / 2;
    free(c);
    return m;
}
