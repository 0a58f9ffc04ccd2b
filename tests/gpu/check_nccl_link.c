/* check_nccl_link.c - the NCCL mover's link (common/movers/nccl_link.h) on
 * one GPU, driven as the sender and receiver drive it: created, posted to and
 * destroyed on a real progress thread (a wst_worker), its exchanges run on
 * the link's own thread and their completions come back through the
 * waiter, in order.
 *
 * NCCL refuses two ranks on one GPU, so the link here has one rank and
 * each exchange sends to itself (its sends and receives in one group). An
 * init that no peer ever joins (two ranks, one present) is how a dead peer
 * looks at set-up: aborting it must end it at once.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "gpu_check.h"
#include "nccl_link.h"
#include "timed_wait.h"

#define N_XCHG 8
#define PART (3u << 20) /* bytes each exchange moves, in 3 runs */

static const uint32_t cuts[3] = {1, PART / 2 + 7, PART / 2 - 8};

struct tag {
    struct lc *c;
    int idx;
};

struct lc {
    struct gcheck *g;
    wst_worker_t *worker;
    struct wst_nccl_link *link;
    unsigned char id[WST_NCCL_ID_BYTES];
    int nranks;
    wst_status_t st;          /* of the last call made on the progress thread */
    unsigned char *src, *dst; /* device */
    int second;               /* the second round goes the other way */

    pthread_mutex_t lock;
    pthread_cond_t cond;
    int ready_calls;
    wst_status_t ready_st;
    int done;
    wst_status_t done_st[2 * N_XCHG];
    int order[2 * N_XCHG];
    struct tag tags[2 * N_XCHG];
    struct wst_nccl_run sends[N_XCHG][3], recvs[N_XCHG][3]; /* a round's */
};

static void on_ready(void *arg, wst_status_t status)
{
    struct lc *c = arg;

    pthread_mutex_lock(&c->lock);
    c->ready_calls++;
    c->ready_st = status;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
}

static void on_done(void *arg, wst_status_t status)
{
    struct tag *tag = arg;
    struct lc *c = tag->c;

    pthread_mutex_lock(&c->lock);
    c->done_st[c->done] = status;
    c->order[c->done] = tag->idx;
    c->done++;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
}

static void do_create(void *arg)
{
    struct lc *c = arg;

    c->st = wst_nccl_link_create(c->g->log, c->worker, 0, c->id, c->nranks, 0,
                                 30.0, on_ready, c, &c->link);
}

/* Exchange k moves part k of src, as three runs, to part N_XCHG-1-k of dst,
 * the runs reversed inside it (the second round: dst to src). */
static void do_post(void *arg)
{
    struct lc *c = arg;
    unsigned char *from = c->second ? c->dst : c->src;
    unsigned char *to = c->second ? c->src : c->dst;
    const uint32_t *cut = cuts;

    c->st = WST_OK;
    for (int k = 0; k < N_XCHG && c->st == WST_OK; k++) {
        /* Borrowed by the link until the exchange is done. */
        struct wst_nccl_run *sends = c->sends[k], *recvs = c->recvs[k];
        uint64_t at = 0;
        for (int i = 0; i < 3; i++) {
            sends[i] =
                (struct wst_nccl_run){from + (size_t)k * PART + at, cut[i], 0};
            at += cut[i];
        }
        for (int i = 0; i < 3; i++) {
            /* run i lands at the end of the part minus the runs before */
            uint64_t end = PART, before = 0;
            for (int j = 0; j <= i; j++)
                before += cut[j];
            recvs[i] = (struct wst_nccl_run){
                to + (size_t)(N_XCHG - 1 - k) * PART + (end - before), cut[i],
                0};
        }
        int t = c->second * N_XCHG + k;
        c->tags[t] = (struct tag){c, t};
        c->st = wst_nccl_link_post(c->link, sends, 3, recvs, 3, on_done,
                                   &c->tags[t]);
    }
}

static void do_destroy(void *arg)
{
    struct lc *c = arg;

    wst_nccl_link_destroy(c->link);
    c->link = NULL;
}

static void do_abort_then_post(void *arg)
{
    struct lc *c = arg;
    struct wst_nccl_run run = {c->dst, 1, 0};

    wst_nccl_link_abort(c->link);
    c->st = wst_nccl_link_post(c->link, &run, 1, NULL, 0, on_done, &c->tags[0]);
}

static int wait_for(struct lc *c, int *what, int want, double timeout_s)
{
    uint64_t deadline = wst_deadline_ns(timeout_s);

    pthread_mutex_lock(&c->lock);
    while (*what < want && wst_now_ns() < deadline) {
        wst_cond_wait_s(&c->cond, &c->lock, 0.01);
    }
    int ok = *what >= want;
    pthread_mutex_unlock(&c->lock);
    return ok;
}

/* The host reference of one round: what the exchanges make of 'from'. */
static void expect_round(const unsigned char *from, unsigned char *to)
{
    for (int k = 0; k < N_XCHG; k++) {
        const unsigned char *part = from + (size_t)k * PART;
        unsigned char *out = to + (size_t)(N_XCHG - 1 - k) * PART;
        uint64_t at = 0, before = 0;
        for (int i = 0; i < 3; i++) {
            before += cuts[i];
            memcpy(out + (PART - before), part + at, cuts[i]);
            at += cuts[i];
        }
    }
}

static long first_diff(const unsigned char *a, const unsigned char *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return (long)i;
    return -1;
}

static void check_rounds(struct lc *c, unsigned char *host, unsigned char *got)
{
    struct gcheck *g = c->g;
    size_t bytes = (size_t)N_XCHG * PART;
    unsigned char *want = malloc(bytes);

    if (want == NULL)
        return;
    for (c->second = 0; c->second < 2; c->second++) {
        int want_done = (c->second + 1) * N_XCHG;
        wst_worker_call(c->worker, do_post, c);
        int came = c->st == WST_OK && wait_for(c, &c->done, want_done, 30.0);
        int in_order = 1, all_ok = 1;
        for (int i = c->second * N_XCHG; came && i < want_done; i++) {
            in_order &= c->order[i] == i;
            all_ok &= c->done_st[i] == WST_OK;
        }
        /* Round 1 moves src into dst, round 2 that into src: 'host' holds
         * each round's source, 'want' what the round must make of it. */
        long bad = -2;
        expect_round(host, want);
        if (came && wst_gpu_copy(g->log, got, c->second ? c->src : c->dst,
                                 bytes) == WST_OK)
            bad = first_diff(want, got, bytes);
        memcpy(host, want, bytes);
        gcheck_result(g, came && in_order && all_ok && bad == -1,
                      c->second ? "nccl link round 2 (communicator kept)"
                                : "nccl link round 1",
                      "post %s; %d of %d exchanges done, in order %s, all OK "
                      "%s; first bad byte %ld",
                      wst_status_string(c->st), c->done - c->second * N_XCHG,
                      N_XCHG, in_order ? "yes" : "no", all_ok ? "yes" : "no",
                      bad);
    }
    free(want);
}

void check_nccl_link(struct gcheck *g)
{
    struct wst_worker_params wp = {.log = g->log};
    struct lc c = {.g = g, .nranks = 1};
    size_t bytes = (size_t)N_XCHG * PART;
    unsigned char *host = malloc(bytes), *got = malloc(bytes);

    pthread_mutex_init(&c.lock, NULL);
    pthread_cond_init(&c.cond, NULL);
    wp.ops.arg = &c;
    if (!wst_nccl_available()) {
        gcheck_result(g, 0, "nccl link", "SKIP: built without NCCL");
        goto out;
    }
    if (host == NULL || got == NULL ||
        wst_worker_create(&wp, &c.worker) != WST_OK ||
        wst_gpu_malloc(g->log, bytes, (void **)&c.src) != WST_OK ||
        wst_gpu_malloc(g->log, bytes, (void **)&c.dst) != WST_OK ||
        wst_nccl_get_id(g->log, c.id) != WST_OK) {
        gcheck_result(g, 0, "nccl link", "cannot set up the check");
        goto out;
    }
    gcheck_fill_random(g, host, bytes);
    wst_gpu_copy(g->log, c.src, host, bytes);
    wst_gpu_memset(g->log, c.dst, GCHECK_POISON, bytes);

    /* 1. A one-rank link: ready, then two rounds of exchanges. */
    double t0 = wst_now_s();
    wst_worker_call(c.worker, do_create, &c);
    int ready = c.st == WST_OK && wait_for(&c, &c.ready_calls, 1, 30.0);
    gcheck_result(g, ready && c.ready_st == WST_OK, "nccl link ready",
                  "create %s, ready %s in %.2f s", wst_status_string(c.st),
                  ready ? wst_status_string(c.ready_st) : "never",
                  wst_now_s() - t0);
    if (ready && c.ready_st == WST_OK)
        check_rounds(&c, host, got);
    wst_worker_call(c.worker, do_destroy, &c);

    /* 2. An init no peer joins, aborted: no ready callback, and destroy
     *    returns at once (the dead-peer case at set-up). */
    c.nranks = 2;
    c.ready_calls = 0;
    wst_nccl_get_id(g->log, c.id);
    wst_worker_call(c.worker, do_create, &c);
    wst_status_t created = c.st;
    struct timespec wait = {.tv_sec = 0, .tv_nsec = 300 * 1000000};
    nanosleep(&wait, NULL);
    int early = c.ready_calls;
    wst_worker_call(c.worker, do_abort_then_post, &c);
    wst_status_t after = c.st;
    t0 = wst_now_s();
    wst_worker_call(c.worker, do_destroy, &c);
    double destroy_s = wst_now_s() - t0;
    nanosleep(&wait, NULL);
    gcheck_result(g,
                  created == WST_OK && early == 0 && after == WST_ERR_STATE &&
                      destroy_s < 2.0 && c.ready_calls == 0,
                  "nccl link init without its peer, aborted",
                  "create %s; ready callbacks %d before and %d after the "
                  "abort; post after abort %s; destroy in %.3f s",
                  wst_status_string(created), early, c.ready_calls,
                  wst_status_string(after), destroy_s);
out:
    if (c.worker != NULL)
        wst_worker_destroy(c.worker);
    wst_gpu_free(c.src);
    wst_gpu_free(c.dst);
    free(host);
    free(got);
    pthread_cond_destroy(&c.cond);
    pthread_mutex_destroy(&c.lock);
}
