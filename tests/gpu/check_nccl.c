/* check_nccl.c - the NCCL mover (common/gpu/nccl_comm.h) on one GPU, and
 * its speed.
 *
 * NCCL refuses two ranks of one communicator on one GPU, but a rank may
 * send to itself inside one group: every check is a communicator of one
 * rank exchanging with itself. Runs of a random device buffer go to a
 * poisoned one; the whole destination, copied back, must equal a host
 * image built with memcpy (each run's bytes where it lands, poison
 * everywhere else). Runs have odd sizes at odd offsets, and the
 * destination holds them in the opposite order from the source, so a run
 * that lands in its neighbour's place shows.
 *
 * One communicator serves every exchange of the check, as one serves every
 * refit: a few runs, refused arguments (which must change nothing and
 * leave it healthy), a few hundred runs, one run longer than one NCCL call.
 * Every device write an exchange depends on is a copy enqueued on the
 * check's stream before it (check_pack.c says why not wst_gpu_memset).
 *
 * The benchmark times the exchange next to NCCL called bare (its own
 * blocking communicator, ncclGroupStart/ncclSend/ncclRecv/ncclGroupEnd of
 * the same bytes), the ceiling of the wrapped rows; the bare rows are
 * compared with the device-to-device copy. Only that baseline includes
 * nccl.h, when cmake found NCCL (WST_HAVE_NCCL).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu_check.h"
#include "nccl_comm.h"
#ifdef WST_HAVE_NCCL
#include <nccl.h> /* the benchmark's bare baseline */
#endif

#define GUARD 64             /* poisoned bytes after the last run */
#define INIT_TIMEOUT_S 120.0 /* a one-rank init takes a few seconds */
#define N_RANDOM_RUNS 300    /* runs of the second exchange */
#define BENCH_BYTES (1ull << 30)
#define BENCH_SMALL_RUN (4ull << 20)

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Where each run sits in the source and in the destination buffer. */
struct layout {
    size_t n;
    uint64_t *bytes, *src_off, *dst_off;
    uint64_t src_len, dst_len;
};

/* Host images and device buffers of one exchange. */
struct xbufs {
    unsigned char *src;  /* random: the source, uploaded */
    unsigned char *want; /* poison, each run copied where it lands */
    unsigned char *got;  /* poison uploaded from here, then the result */
    unsigned char *d_src, *d_dst;
    struct wst_nccl_run *sends, *recvs;
};

static void layout_free(struct layout *l)
{
    free(l->bytes);
    free(l->src_off);
    free(l->dst_off);
    memset(l, 0, sizeof(*l));
}

/* Lays out runs of 'bytes' (n of them): in order in the source, in
 * reverse order in the destination, a few odd bytes apart. */
static wst_status_t layout_make(const uint64_t *bytes, size_t n,
                                struct layout *l)
{
    uint64_t at = 0;

    memset(l, 0, sizeof(*l));
    l->n = n;
    l->bytes = malloc(n * sizeof(*l->bytes));
    l->src_off = malloc(n * sizeof(*l->src_off));
    l->dst_off = malloc(n * sizeof(*l->dst_off));
    if (l->bytes == NULL || l->src_off == NULL || l->dst_off == NULL)
        return WST_ERR_NO_MEMORY;
    memcpy(l->bytes, bytes, n * sizeof(*bytes));
    for (size_t i = 0; i < n; i++) {
        l->src_off[i] = at + 1 + (i * 7) % 13;
        at = l->src_off[i] + bytes[i];
    }
    l->src_len = at + GUARD;
    at = 0;
    for (size_t i = n; i-- > 0;) {
        l->dst_off[i] = at + 3 + (i * 5) % 11;
        at = l->dst_off[i] + bytes[i];
    }
    l->dst_len = at + GUARD;
    return WST_OK;
}

static void xbufs_free(struct xbufs *b)
{
    free(b->src);
    free(b->want);
    free(b->got);
    free(b->sends);
    free(b->recvs);
    wst_gpu_free(b->d_src);
    wst_gpu_free(b->d_dst);
    memset(b, 0, sizeof(*b));
}

/* Buffers for 'l', the source random, 'want' its image, and the runs
 * (plus one empty send when 'empty_send': skipped, so unmatched). */
static wst_status_t xbufs_make(struct gcheck *g, const struct layout *l,
                               int empty_send, struct xbufs *b)
{
    wst_status_t st;

    memset(b, 0, sizeof(*b));
    b->src = malloc(l->src_len);
    b->want = malloc(l->dst_len);
    b->got = malloc(l->dst_len);
    b->sends = calloc(l->n + 1, sizeof(*b->sends));
    b->recvs = calloc(l->n, sizeof(*b->recvs));
    if (b->src == NULL || b->want == NULL || b->got == NULL ||
        b->sends == NULL || b->recvs == NULL)
        return WST_ERR_NO_MEMORY;
    st = wst_gpu_malloc(g->log, l->src_len, (void **)&b->d_src);
    if (st == WST_OK)
        st = wst_gpu_malloc(g->log, l->dst_len, (void **)&b->d_dst);
    if (st != WST_OK)
        return st;
    gcheck_fill_random(g, b->src, l->src_len);
    memset(b->want, GCHECK_POISON, l->dst_len);
    for (size_t i = 0; i < l->n; i++) {
        memcpy(b->want + l->dst_off[i], b->src + l->src_off[i], l->bytes[i]);
        b->sends[i] =
            (struct wst_nccl_run){b->d_src + l->src_off[i], l->bytes[i], 0};
        b->recvs[i] =
            (struct wst_nccl_run){b->d_dst + l->dst_off[i], l->bytes[i], 0};
    }
    if (empty_send)
        b->sends[l->n] = (struct wst_nccl_run){NULL, 0, 0};
    return WST_OK;
}

/* Index of the first differing byte, or -1. */
static long long first_diff(const unsigned char *a, const unsigned char *b,
                            size_t n)
{
    if (memcmp(a, b, n) == 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return (long long)i;
    return -1;
}

/* Uploads the source and the poison, exchanges, and copies the result
 * back into b->got. */
static wst_status_t run_exchange_once(struct gcheck *g,
                                      struct wst_nccl_comm *comm,
                                      const struct layout *l, int empty_send,
                                      struct xbufs *b)
{
    wst_status_t st;

    memset(b->got, GCHECK_POISON, l->dst_len);
    st = wst_gpu_copy_async(g->log, b->d_src, b->src, l->src_len, g->stream);
    if (st == WST_OK)
        st =
            wst_gpu_copy_async(g->log, b->d_dst, b->got, l->dst_len, g->stream);
    if (st == WST_OK)
        st = wst_nccl_exchange(comm, b->sends, l->n + (empty_send ? 1 : 0),
                               b->recvs, l->n, g->stream);
    if (st == WST_OK)
        st = wst_gpu_stream_sync(g->log, g->stream);
    if (st == WST_OK)
        st = wst_gpu_copy(g->log, b->got, b->d_dst, l->dst_len);
    return st;
}

static void check_exchange(struct gcheck *g, struct wst_nccl_comm *comm,
                           const char *name, const uint64_t *bytes, size_t n,
                           int empty_send)
{
    struct layout l;
    struct xbufs b;
    long long bad = -1;
    uint64_t total = 0;
    wst_status_t st;

    memset(&b, 0, sizeof(b));
    st = layout_make(bytes, n, &l);
    if (st == WST_OK)
        st = xbufs_make(g, &l, empty_send, &b);
    if (st == WST_OK)
        st = run_exchange_once(g, comm, &l, empty_send, &b);
    if (st == WST_OK)
        bad = first_diff(b.got, b.want, l.dst_len);
    for (size_t i = 0; i < n; i++)
        total += bytes[i];
    gcheck_result(g, st == WST_OK && bad < 0, name,
                  "status %s, %zu runs, %.1f MB; first bad destination byte "
                  "%lld of %llu",
                  wst_status_name(st), n, (double)total / 1e6, bad,
                  (unsigned long long)l.dst_len);
    xbufs_free(&b);
    layout_free(&l);
}

/* Every malformed exchange is refused before anything is enqueued: the
 * destination stays poison and the communicator stays ready. */
static void check_refused(struct gcheck *g, struct wst_nccl_comm *comm)
{
    enum { LEN = 4096 };
    unsigned char *src = malloc(LEN), *got = malloc(LEN), *poison = malloc(LEN);
    unsigned char *d_src = NULL, *d_dst = NULL;
    int refused = 0, cases = 0;
    long long bad = -1;
    wst_status_t st = WST_ERR_NO_MEMORY, ready = WST_ERR_STATE;

    if (src == NULL || got == NULL || poison == NULL)
        goto out;
    gcheck_fill_random(g, src, LEN);
    memset(poison, GCHECK_POISON, LEN);
    st = wst_gpu_malloc(g->log, LEN, (void **)&d_src);
    if (st == WST_OK)
        st = wst_gpu_malloc(g->log, LEN, (void **)&d_dst);
    if (st == WST_OK)
        st = wst_gpu_copy_async(g->log, d_src, src, LEN, g->stream);
    if (st == WST_OK)
        st = wst_gpu_copy_async(g->log, d_dst, poison, LEN, g->stream);
    if (st != WST_OK)
        goto out;
    {
        const struct wst_nccl_run ok = {d_src, 100, 0};
        const struct wst_nccl_run in = {d_dst, 100, 0};
        const struct wst_nccl_run to1 = {d_src, 100, 1}; /* 1 rank */
        const struct wst_nccl_run from_neg = {d_dst, 100, -1};
        const struct wst_nccl_run nul = {NULL, 16, 0};
        const struct wst_nccl_run two_s[2] = {ok, {d_src + 200, 50, 1}};
        const struct wst_nccl_run two_r[2] = {in, {d_dst + 200, 50, 1}};
        wst_status_t got_st[] = {
            wst_nccl_exchange(NULL, &ok, 1, &in, 1, g->stream),
            wst_nccl_exchange(comm, NULL, 1, &in, 1, g->stream),
            wst_nccl_exchange(comm, &ok, 1, NULL, 1, g->stream),
            wst_nccl_exchange(comm, &to1, 1, &in, 1, g->stream),
            wst_nccl_exchange(comm, &ok, 1, &from_neg, 1, g->stream),
            wst_nccl_exchange(comm, &nul, 1, &in, 1, g->stream),
            wst_nccl_exchange(comm, two_s, 2, two_r, 2, g->stream),
        };

        cases = (int)(sizeof(got_st) / sizeof(got_st[0]));
        for (int i = 0; i < cases; i++)
            refused += got_st[i] == WST_ERR_INVALID;
    }
    st = wst_gpu_stream_sync(g->log, g->stream);
    if (st == WST_OK)
        st = wst_gpu_copy(g->log, got, d_dst, LEN);
    if (st == WST_OK)
        bad = first_diff(got, poison, LEN);
    ready = wst_nccl_comm_poll(comm);
out:
    gcheck_result(g,
                  st == WST_OK && cases > 0 && refused == cases && bad < 0 &&
                      ready == WST_OK,
                  "nccl refuses bad exchanges",
                  "%d of %d refused with WST_ERR_INVALID; first changed "
                  "destination byte %lld; communicator %s (set-up %s)",
                  refused, cases, bad, wst_status_name(ready),
                  wst_status_name(st));
    free(src);
    free(got);
    free(poison);
    wst_gpu_free(d_src);
    wst_gpu_free(d_dst);
}

/* A second communicator aborted while (most likely) still initializing:
 * abort returns, later calls say the state, destroy after is fine. */
static void check_abort(struct gcheck *g)
{
    unsigned char id[WST_NCCL_ID_BYTES];
    struct wst_nccl_comm *comm = NULL;
    wst_status_t st, poll = WST_OK, xchg = WST_OK, wait = WST_OK;
    double t0 = now_s(), secs;

    st = wst_nccl_get_id(g->log, id);
    if (st == WST_OK)
        st = wst_nccl_comm_start(g->log, 0, id, 1, 0, &comm);
    if (st == WST_OK) {
        wst_nccl_comm_abort(comm);
        wst_nccl_comm_abort(comm); /* a second one does nothing */
        poll = wst_nccl_comm_poll(comm);
        xchg = wst_nccl_exchange(comm, NULL, 0, NULL, 0, g->stream);
        wait = wst_nccl_comm_wait(comm, 1.0);
    }
    wst_nccl_comm_destroy(comm);
    secs = now_s() - t0;
    gcheck_result(g,
                  st == WST_OK && poll == WST_ERR_STATE &&
                      xchg == WST_ERR_STATE && wait == WST_ERR_STATE,
                  "nccl abort during init",
                  "start %s; after abort: poll %s, exchange %s, wait %s; "
                  "start to destroyed in %.2f s",
                  wst_status_name(st), wst_status_name(poll),
                  wst_status_name(xchg), wst_status_name(wait), secs);
}

/* Runs of the second exchange: mostly up to 100 KB, some of 1 to 8 B. */
static uint64_t *random_sizes(struct gcheck *g, size_t n)
{
    uint64_t *s = malloc(n * sizeof(*s));

    for (size_t i = 0; s != NULL && i < n; i++)
        s[i] =
            i % 10 == 0 ? 1 + gcheck_rand(g) % 8 : 1 + gcheck_rand(g) % 100000;
    return s;
}

void check_nccl(struct gcheck *g)
{
    static const uint64_t few[] = {1, 3, 4096 + 1, 8ull << 20,
                                   (64ull << 20) + 7};
    const uint64_t split[] = {WST_NCCL_MAX_CALL_BYTES + 5};
    unsigned char id[WST_NCCL_ID_BYTES];
    struct wst_nccl_comm *comm = NULL;
    uint64_t *sizes = NULL;
    wst_status_t st, again = WST_ERR_STATE, polled = WST_ERR_STATE;
    double t0, secs;

    if (!wst_nccl_available()) {
        printf("SKIP nccl: built without NCCL\n");
        gcheck_result(g, 0, "nccl built in",
                      "this build has no NCCL and the GPU machine is "
                      "supposed to: see cmake's 'wstream: NCCL mover' line");
        return;
    }
    t0 = now_s();
    st = wst_nccl_get_id(g->log, id);
    if (st == WST_OK)
        st = wst_nccl_comm_start(g->log, 0, id, 1, 0, &comm);
    if (st == WST_OK)
        st = wst_nccl_comm_wait(comm, INIT_TIMEOUT_S);
    secs = now_s() - t0;
    gcheck_result(g, st == WST_OK, "nccl init of one rank", "%s in %.2f s",
                  wst_status_name(st), secs);
    if (st != WST_OK)
        goto out;

    check_exchange(g, comm, "nccl exchange 1 B .. 64 MiB+7 at odd offsets", few,
                   sizeof(few) / sizeof(few[0]), 0);
    check_refused(g, comm);
    sizes = random_sizes(g, N_RANDOM_RUNS);
    if (sizes != NULL)
        check_exchange(g, comm,
                       "nccl 2nd exchange: 300 random runs, 1 empty send",
                       sizes, N_RANDOM_RUNS, 1);
    else
        gcheck_result(g, 0, "nccl 2nd exchange", "out of host memory");
    check_exchange(g, comm, "nccl 3rd exchange: 1 GiB + 5 B, split in 2 calls",
                   split, 1, 0);

    polled = wst_nccl_comm_poll(comm);
    t0 = now_s();
    again = wst_nccl_comm_wait(comm, 5.0);
    secs = now_s() - t0;
    gcheck_result(g, polled == WST_OK && again == WST_OK && secs < 0.1,
                  "nccl wait on a ready communicator",
                  "poll %s, wait %s in %.4f s", wst_status_name(polled),
                  wst_status_name(again), secs);
    check_abort(g);
out:
    free(sizes);
    wst_nccl_comm_destroy(comm);
}

/* ---- benchmarks --------------------------------------------------------- */

#ifdef WST_HAVE_NCCL
struct nccl_bench {
    struct wst_nccl_comm *comm; /* the wrapped mover */
    ncclComm_t bare;            /* the baseline, blocking */
    struct wst_nccl_run *sends, *recvs;
    size_t n;
};

static int run_wrapped(void *arg, wst_gpu_stream_t stream)
{
    struct nccl_bench *nb = arg;

    return wst_nccl_exchange(nb->comm, nb->sends, nb->n, nb->recvs, nb->n,
                             stream) != WST_OK;
}

static int run_bare(void *arg, wst_gpu_stream_t stream)
{
    struct nccl_bench *nb = arg;
    ncclResult_t r = ncclGroupStart(), end;

    if (r != ncclSuccess)
        goto out;
    for (size_t i = 0; r == ncclSuccess && i < nb->n; i++)
        r = ncclSend(nb->sends[i].ptr, nb->sends[i].bytes, ncclUint8, 0,
                     nb->bare, stream);
    for (size_t i = 0; r == ncclSuccess && i < nb->n; i++)
        r = ncclRecv(nb->recvs[i].ptr, nb->recvs[i].bytes, ncclUint8, 0,
                     nb->bare, stream);
    end = ncclGroupEnd();
    if (r == ncclSuccess)
        r = end;
out:
    if (r != ncclSuccess)
        fprintf(stderr, "nccl bare exchange: %s (%s)\n", ncclGetErrorString(r),
                ncclGetLastError(nb->bare));
    return r != ncclSuccess;
}

/* The wrapped and the bare exchange of BENCH_BYTES as runs of 'run' bytes;
 * two rows. */
static void bench_shape(struct gcheck *g, struct nccl_bench *nb,
                        unsigned char *d_src, unsigned char *d_dst,
                        uint64_t run, double copy_gbs)
{
    const double bytes = 2.0 * (double)BENCH_BYTES; /* read + written */
    char name[96];
    double bare_ms, ms;

    nb->n = (size_t)(BENCH_BYTES / run);
    nb->sends = calloc(nb->n, sizeof(*nb->sends));
    nb->recvs = calloc(nb->n, sizeof(*nb->recvs));
    if (nb->sends == NULL || nb->recvs == NULL) {
        gcheck_result(g, 0, "nccl benchmark", "out of host memory");
        goto out;
    }
    for (size_t i = 0; i < nb->n; i++) {
        nb->sends[i] = (struct wst_nccl_run){d_src + i * run, run, 0};
        nb->recvs[i] = (struct wst_nccl_run){d_dst + i * run, run, 0};
    }
    bare_ms = gbench_median_ms(g, run_bare, nb, 3, 10);
    snprintf(name, sizeof(name), "nccl bare self send/recv 1 GiB, %zu run%s",
             nb->n, nb->n > 1 ? "s" : "");
    if (bare_ms > 0)
        gbench_row(name, bytes, bare_ms, copy_gbs);
    else
        gcheck_result(g, 0, name, "benchmark run failed");
    ms = gbench_median_ms(g, run_wrapped, nb, 3, 10);
    snprintf(name, sizeof(name), "nccl exchange to self 1 GiB, %zu run%s",
             nb->n, nb->n > 1 ? "s" : "");
    if (ms > 0)
        gbench_row(name, bytes, ms, bare_ms > 0 ? bytes / (bare_ms * 1e6) : 0);
    else
        gcheck_result(g, 0, name, "benchmark run failed");
out:
    free(nb->sends);
    free(nb->recvs);
    nb->sends = nb->recvs = NULL;
}

void bench_nccl(struct gcheck *g, double copy_gbs)
{
    struct nccl_bench nb = {0};
    unsigned char id[WST_NCCL_ID_BYTES];
    unsigned char *d_src = NULL, *d_dst = NULL;
    ncclUniqueId bare_id;
    ncclResult_t r;
    wst_status_t st;

    if (!wst_nccl_available()) {
        printf("SKIP bench nccl: built without NCCL\n");
        return;
    }
    st = wst_gpu_malloc(g->log, BENCH_BYTES, (void **)&d_src);
    if (st == WST_OK)
        st = wst_gpu_malloc(g->log, BENCH_BYTES, (void **)&d_dst);
    if (st == WST_OK)
        st = wst_gpu_memset(g->log, d_src, 0x5A, BENCH_BYTES);
    if (st == WST_OK)
        st = wst_nccl_get_id(g->log, id);
    if (st == WST_OK)
        st = wst_nccl_comm_start(g->log, 0, id, 1, 0, &nb.comm);
    if (st == WST_OK)
        st = wst_nccl_comm_wait(nb.comm, INIT_TIMEOUT_S);
    if (st != WST_OK) {
        gcheck_result(g, 0, "nccl benchmark set-up", "%s", wst_status_name(st));
        goto out;
    }
    /* Device 0 is current (wst_nccl_comm_start made it so). */
    r = ncclGetUniqueId(&bare_id);
    if (r == ncclSuccess)
        r = ncclCommInitRank(&nb.bare, 1, bare_id, 0);
    if (r != ncclSuccess) {
        gcheck_result(g, 0, "nccl benchmark set-up", "bare init: %s (%s)",
                      ncclGetErrorString(r), ncclGetLastError(NULL));
        nb.bare = NULL;
        goto out;
    }
    bench_shape(g, &nb, d_src, d_dst, BENCH_BYTES, copy_gbs);
    bench_shape(g, &nb, d_src, d_dst, BENCH_SMALL_RUN, copy_gbs);
out:
    if (wst_gpu_stream_sync(g->log, g->stream) != WST_OK)
        wst_nccl_comm_abort(nb.comm);
    if (nb.bare != NULL)
        (void)ncclCommDestroy(nb.bare);
    wst_nccl_comm_destroy(nb.comm);
    wst_gpu_free(d_src);
    wst_gpu_free(d_dst);
}
#else
void bench_nccl(struct gcheck *g, double copy_gbs)
{
    (void)g;
    (void)copy_gbs;
    printf("SKIP bench nccl: built without NCCL\n");
}
#endif
