/* floor.h - kernel TCP's own rate for a refit's bytes: the floor
 * wstream-bench sets beside the perftest ceiling.
 *
 * ucx_perftest streams one buffer that stays in cache, busy-polls and
 * hashes nothing; a refit reads its bytes from memory, writes them to
 * other memory and hashes both sides. wstream-tcp-floor (tcp_floor_main.c,
 * beside the bench) measures what the kernel's TCP alone gives such a
 * stream between two processes over loopback, with as many streams as
 * the refit has lanes, in five modes; this runs it and reads its medians.
 * Only for tcp between two processes of this host's loopback: over shm,
 * across namespaces or to another address it is not the same path.
 */
#ifndef WST_BENCH_FLOOR_H
#define WST_BENCH_FLOOR_H

#include <stddef.h>
#include <stdint.h>
#include <wstream/status.h>

enum wst_floor_mode {
    WST_FLOOR_BARE,       /* send and recv, sleeping when they would block */
    WST_FLOOR_BARE_POLL,  /* the same, busy-polling (as perftest does) */
    WST_FLOOR_HASH_HOT,   /* each side hashes each segment next to its call */
    WST_FLOOR_HASH_AFTER, /* the same, the sender just after its send */
    WST_FLOOR_HASH_AHEAD, /* wstream's way: the receiver as above, the
                             sender's bytes by a thread of their own */
    WST_FLOOR_MODES
};

extern const char *const wst_floor_mode_names[WST_FLOOR_MODES];

/* wstream-tcp-floor's rounds of each mode, at most. */
#define WST_FLOOR_REPEATS_MAX 100

struct wst_bench_floor {
    uint64_t bytes;                    /* per round */
    unsigned streams;                  /* TCP connections, a thread each side */
    double gbps[WST_FLOOR_MODES];      /* median GB/s */
    double cpu_s_gib[WST_FLOOR_MODES]; /* median CPU s/GiB, both sides */
};

/* Runs 'bin' (wstream-tcp-floor) over 'bytes' (a multiple of 'streams'
 * MiB), 'streams' streams of 1 MiB segments, 'repeats' rounds of each
 * mode (WST_FLOOR_REPEATS_MAX at most: more are not run), within
 * 'timeout_s'; prints its output as it comes and fills *f.
 * WST_OK when every mode gave a number and every byte was checked;
 * otherwise an error, with why in 'err'. */
wst_status_t wst_bench_floor_run(const char *bin, uint64_t bytes,
                                 unsigned streams, unsigned repeats,
                                 double timeout_s, struct wst_bench_floor *f,
                                 char *err, size_t errlen);

#endif
