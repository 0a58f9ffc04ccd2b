/* ceiling.h - ucx_perftest's bandwidth at one message size: the ceiling
 * wstream-bench holds wstream against.
 *
 * Each test (ucp_put_bw, ucp_am_bw, tag_bw, ...) runs 'repeats' times with
 * the same UCX_TLS as the refit; a test's figure is the median of its runs
 * and the ceiling is the best test's. The bench asks twice: at wstream's
 * data chunk (8 MiB, one buffer reused, so it stays in the CPU's caches)
 * and at the refit's footprint (256 MiB messages, or the refit's size if
 * smaller: every message streams through memory, as a refit's bytes do).
 * Beside the best of all tests it keeps the best with peer-error handling.
 */
#ifndef WST_BENCH_CEILING_H
#define WST_BENCH_CEILING_H

#include <stdint.h>
#include <wstream/status.h>

#include "perftest.h"

#define WST_CEILING_MAX_TESTS 8

struct wst_bench_ceiling {
    const char *what; /* "8 MiB", "footprint": names the runs in output */
    uint64_t msg_bytes;
    uint64_t iters;
    uint64_t warmup;
    int n_tests;
    double gbps[WST_CEILING_MAX_TESTS]; /* median GB/s; < 0: failed */
    int best;                           /* index into the tests; -1: none */
    int best_e; /* the best test with peer-error handling; -1: none */
};

/* Measures tests[0..n_tests) with messages of 'msg_bytes', about
 * 'run_bytes' per run (at least one message), 'repeats' runs each.
 * 'base' gives the program, UCX_TLS, host, namespaces, log, timeout and
 * threads (a run's messages are shared among them); its test and sizes
 * are ignored. Prints each run as it goes. Fills *c
 * (what is borrowed); WST_OK when at least one test gave a number,
 * WST_ERR_UNREACHABLE when none did. */
wst_status_t wst_bench_ceiling_run(const struct wst_perftest_params *base,
                                   const char (*tests)[32], int n_tests,
                                   const char *what, uint64_t msg_bytes,
                                   uint64_t run_bytes, uint64_t repeats,
                                   struct wst_bench_ceiling *c);

/* The best test's median GB/s, 0 when none gave a number. */
double wst_bench_ceiling_gbps(const struct wst_bench_ceiling *c);
/* The same among the tests with peer-error handling ("+e"), the only modes
 * wstream's safety rules leave its data endpoints. */
double wst_bench_ceiling_gbps_e(const struct wst_bench_ceiling *c);

#endif
