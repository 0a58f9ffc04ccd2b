/* perftest.h - one ucx_perftest measurement: a server and a client process.
 *
 * The ceiling wstream-bench compares against. The server (`ucx_perftest -p
 * PORT`) and the client (`ucx_perftest HOST -p PORT -t TEST -s SIZE -n ITERS
 * -w WARMUP`) run as child processes, each optionally under `ip netns exec`,
 * with UCX_TLS set as asked. A run yields a number only when both processes
 * exit 0 and the client printed a "Final:" line: after an error perftest
 * keeps "completing" failed operations and prints nonsense bandwidth.
 *
 * With threads above 1 a UCP test that sends messages (ucp_am_*, tag_*,
 * stream_*) runs on that many client threads (`-T N -M multi`; the server
 * takes both from the client), each with a UCP worker of its own and each
 * sending ITERS messages: wstream's data lanes, which carry the am
 * mover's messages, as near as perftest comes (its threads share one UCP
 * context, hence -M multi). Its "Final:" line then holds the threads'
 * summed bandwidth, in fewer columns. A test named with "+e" at its end
 * ("tag_bw+e") runs with `-e`: endpoints with peer-error handling, as
 * wstream's data endpoints have (UCX 1.13 then gives up zero-copy
 * rendezvous on tcp and cma, which was faster or slower than zero-copy
 * by turns: NOTES.md); on several threads both sides then run without
 * UCX's endpoint keepalive, with which UCX 1.13 hung (perftest.c). Other
 * tests run on one thread: the
 * put mover uses no lanes, and UCX 1.13's ucp_put_bw over tcp hung in
 * about one run of six with -T 2, with or without -M multi.
 */
#ifndef WST_BENCH_PERFTEST_H
#define WST_BENCH_PERFTEST_H

#include <stddef.h>
#include <stdint.h>

struct wst_perftest_params {
    const char *bin;          /* ucx_perftest */
    const char *test;         /* ucp_put_bw, ucp_am_bw, tag_bw, ... */
    const char *tls;          /* UCX_TLS for both sides; NULL: unset */
    const char *host;         /* the client connects here */
    const char *server_netns; /* NULL: none */
    const char *client_netns; /* NULL: none */
    const char *log_path;     /* both processes' output, appended */
    uint64_t msg_bytes;
    uint64_t iters;   /* per thread */
    uint64_t warmup;  /* per thread */
    unsigned threads; /* UCP tests' client threads (-T); 0 or 1: one */
    double timeout_s; /* per process */
};

/* Runs one server/client pair. On success returns 0 and writes the
 * client's overall bandwidth of the "Final:" line (all threads') in MB/s
 * as perftest prints it (2^20 bytes per second) to *mib_s_p; otherwise
 * returns -1, leaves *mib_s_p alone and says why in 'err'. */

/* Nonzero for a test named with "+e": endpoints with peer-error
 * handling, as wstream's data endpoints have (UCX then gives up zero-copy
 * on tcp and cma; NOTES.md, issue 17). */
int wst_perftest_with_errors(const char *test);

/* The threads 'test' runs on with 'threads' asked: all of them for UCP
 * tests that send messages, one for the rest (put, get, atomics, UCT). */
unsigned wst_perftest_threads(const char *test, unsigned threads);
int wst_perftest_run(const struct wst_perftest_params *p, double *mib_s_p,
                     char *err, size_t errlen);

/* The program to run for 'bin': a name without a slash is looked up first
 * in the bin/ folder of the UCX this process loaded (its libucp's folder's
 * ../bin or ../../bin: a UCX prefix, or /usr/bin for Debian's multiarch
 * /usr/lib/x86_64-linux-gnu), then in each folder of $PATH, as a shell
 * would; a path is taken as it is. A ucx_perftest of another UCX than
 * the one loaded (LD_LIBRARY_PATH) fails against its libraries, and would
 * not measure the same UCX if it ran. Writes the executable's path to
 * 'path' (len bytes, caller's) and returns 0; returns -1 when there is
 * none, saying what was searched and what to do in 'err'. Run under
 * `ip netns exec` too, so the name is resolved here. */
int wst_perftest_locate(const char *bin, char *path, size_t len, char *err,
                        size_t errlen);

#endif
