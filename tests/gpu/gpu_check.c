/* gpu_check.c - the harness of gpu_check.h. */
#include "gpu_check.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void gcheck_result(struct gcheck *g, int ok, const char *name, const char *fmt,
                   ...)
{
    va_list ap;

    g->checks++;
    if (!ok)
        g->failures++;
    printf("%s %s: ", ok ? "PASS" : "FAIL", name);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}

uint64_t gcheck_rand(struct gcheck *g)
{
    uint64_t x = g->rng;

    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    g->rng = x;
    return x * 0x2545F4914F6CDD1Dull;
}

void gcheck_fill_random(struct gcheck *g, void *buf, size_t len)
{
    unsigned char *p = buf;
    size_t i = 0;

    for (; i + 8 <= len; i += 8) {
        uint64_t v = gcheck_rand(g);
        memcpy(p + i, &v, 8);
    }
    if (i < len) {
        uint64_t v = gcheck_rand(g);
        memcpy(p + i, &v, len - i);
    }
    /* Never all zero: a kernel that writes nothing must not pass. */
    if (len > 0)
        p[0] |= 1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double gbench_median_ms(struct gcheck *g, gbench_fn fn, void *arg, int warmup,
                        int reps)
{
    wst_gpu_event_t start = NULL, stop = NULL;
    double *ms = calloc((size_t)reps, sizeof(*ms));
    double median = -1;
    int i;

    if (ms == NULL || wst_gpu_event_create(g->log, 1, &start) != WST_OK ||
        wst_gpu_event_create(g->log, 1, &stop) != WST_OK)
        goto out;
    for (i = 0; i < warmup; i++)
        if (fn(arg, g->stream) != 0)
            goto out;
    for (i = 0; i < reps; i++) {
        float t;
        if (wst_gpu_event_record(g->log, start, g->stream) != WST_OK ||
            fn(arg, g->stream) != 0 ||
            wst_gpu_event_record(g->log, stop, g->stream) != WST_OK ||
            wst_gpu_event_sync(g->log, stop) != WST_OK ||
            wst_gpu_event_elapsed_ms(g->log, start, stop, &t) != WST_OK)
            goto out;
        ms[i] = t;
    }
    qsort(ms, (size_t)reps, sizeof(*ms), cmp_double);
    median = ms[reps / 2];
out:
    wst_gpu_event_destroy(start);
    wst_gpu_event_destroy(stop);
    free(ms);
    return median;
}

int gbench_copy_run(void *arg, wst_gpu_stream_t stream)
{
    struct gbench_copy *c = arg;
    return wst_gpu_copy_async(NULL, c->dst, c->src, c->bytes, stream) != WST_OK;
}

#define GBENCH_MAX_ROWS 64
struct gbench_row_s {
    char name[96];
    double bytes, ms, ceiling;
};
/* The table is the program's output, filled by the bench_* functions of
 * one process; a file-scope array keeps their signatures small. */
static struct gbench_row_s rows[GBENCH_MAX_ROWS];
static int n_rows;

void gbench_row(const char *name, double bytes, double ms, double ceiling_gbs)
{
    if (n_rows == GBENCH_MAX_ROWS)
        return;
    snprintf(rows[n_rows].name, sizeof(rows[n_rows].name), "%s", name);
    rows[n_rows].bytes = bytes;
    rows[n_rows].ms = ms;
    rows[n_rows].ceiling = ceiling_gbs;
    n_rows++;
    printf("bench %s: %.3f ms, %.1f GB/s\n", name, ms,
           ms > 0 ? bytes / (ms * 1e6) : 0);
    fflush(stdout);
}

void gbench_print_table(void)
{
    printf("\n| %-54s | %10s | %10s | %9s | %8s |\n", "benchmark", "MB", "ms",
           "GB/s", "vs ceil");
    printf("|%s|%s|%s|%s|%s|\n",
           "--------------------------------------------"
           "------------",
           "------------", "------------", "-----------", "----------");
    for (int i = 0; i < n_rows; i++) {
        double gbs = rows[i].ms > 0 ? rows[i].bytes / (rows[i].ms * 1e6) : 0;
        char ratio[16] = "-";
        if (rows[i].ceiling > 0)
            snprintf(ratio, sizeof(ratio), "%.0f%%",
                     100.0 * gbs / rows[i].ceiling);
        printf("| %-54s | %10.1f | %10.3f | %9.1f | %8s |\n", rows[i].name,
               rows[i].bytes / 1e6, rows[i].ms, gbs, ratio);
    }
    fflush(stdout);
}
