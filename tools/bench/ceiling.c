/* ceiling.c - ucx_perftest's bandwidth at one message size (see
 * ceiling.h). */
#include "ceiling.h"

#include <stdio.h>
#include <stdlib.h>

#include "median.h"

#define MIB (1ull << 20)

/* Runs 'test' 'repeats' times; its median GB/s, or -1 if any run failed
 * (a failed run gives no number, and neither does the test). */
static double run_test(const struct wst_perftest_params *p, uint64_t repeats)
{
    double *gbps = calloc(repeats, sizeof(*gbps)), m = -1;
    char err[512];

    if (gbps == NULL)
        return -1;
    printf("perftest %s:", p->test);
    for (uint64_t i = 0; i < repeats; i++) {
        double mib_s;
        if (wst_perftest_run(p, &mib_s, err, sizeof(err)) != 0) {
            printf(" FAILED\n");
            fprintf(stderr, "wstream-bench: perftest %s\n", err);
            goto out_free;
        }
        gbps[i] = mib_s * MIB / 1e9; /* perftest's MB/s are MiB/s */
        printf(" %.2f", gbps[i]);
        fflush(stdout);
    }
    m = wst_bench_median(gbps, repeats);
    printf(" GB/s, median %.2f\n", m);
out_free:
    fflush(stdout);
    free(gbps);
    return m;
}

wst_status_t wst_bench_ceiling_run(const struct wst_perftest_params *base,
                                   const char (*tests)[32], int n_tests,
                                   const char *what, uint64_t msg_bytes,
                                   uint64_t run_bytes, uint64_t repeats,
                                   struct wst_bench_ceiling *c)
{
    struct wst_perftest_params p = *base;

    c->what = what;
    c->msg_bytes = msg_bytes;
    c->iters = (run_bytes + msg_bytes - 1) / msg_bytes;
    /* Warm-up: an eighth of the run, but at least two messages. */
    c->warmup = c->iters / 8 > 2 ? c->iters / 8 : 2;
    c->n_tests = n_tests;
    c->best = -1;
    c->best_e = -1;
    p.msg_bytes = msg_bytes;
    printf("perftest at %s: UCX_TLS=%s, %llu x %llu bytes per run (+%llu "
           "warm-up)",
           what, p.tls ? p.tls : "(unset)", (unsigned long long)c->iters,
           (unsigned long long)msg_bytes, (unsigned long long)c->warmup);
    if (p.threads > 1)
        printf(", shared by %u threads in message tests", p.threads);
    printf("\n");
    for (int t = 0; t < n_tests; t++) {
        /* A run moves about run_bytes whatever the threads: each sends
         * its share. */
        unsigned threads = wst_perftest_threads(tests[t], p.threads);
        p.test = tests[t];
        p.iters = (c->iters + threads - 1) / threads;
        p.warmup = (c->warmup + threads - 1) / threads;
        c->gbps[t] = run_test(&p, repeats);
        if (c->gbps[t] > 0 && (c->best < 0 || c->gbps[t] > c->gbps[c->best]))
            c->best = t;
        if (c->gbps[t] > 0 && wst_perftest_with_errors(tests[t]) &&
            (c->best_e < 0 || c->gbps[t] > c->gbps[c->best_e]))
            c->best_e = t;
    }
    return c->best >= 0 ? WST_OK : WST_ERR_UNREACHABLE;
}

double wst_bench_ceiling_gbps(const struct wst_bench_ceiling *c)
{
    return c->best >= 0 ? c->gbps[c->best] : 0;
}

double wst_bench_ceiling_gbps_e(const struct wst_bench_ceiling *c)
{
    return c->best_e >= 0 ? c->gbps[c->best_e] : 0;
}
