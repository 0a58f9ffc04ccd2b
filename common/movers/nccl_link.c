/* nccl_link.c - the NCCL mover of one sender-receiver pair (see
 * nccl_link.h). */
#include "nccl_link.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "gpu.h"
#include "gpu_waiter.h"
#include "jobq.h"

/* One exchange, from post to done_fn. */
struct xchg {
    struct wst_nccl_link *link;
    const struct wst_nccl_run *sends, *recvs; /* borrowed until done_fn */
    size_t n_sends, n_recvs;
    wst_nccl_link_fn done_fn;
    void *arg;
    wst_gpu_event_t event;
    wst_status_t status; /* of the enqueue, set on the NCCL thread */
};

struct wst_nccl_link {
    const struct wst_logger *log;
    wst_worker_t *worker;
    int device, nranks, rank;
    double timeout_s;
    unsigned char id[WST_NCCL_ID_BYTES];
    wst_nccl_link_fn ready_fn;
    void *ready_arg;

    /* NCCL thread (after create): the communicator and its stream */
    wst_jobq_t *thread;
    struct wst_nccl_comm *comm;
    wst_gpu_stream_t stream;
    int dead;        /* aborted, or an exchange failed: enqueue nothing more */
    atomic_int stop; /* set by abort: an init still waiting gives up */
    wst_status_t init_status;

    /* progress thread */
    struct wst_gpu_waiter *waiter;
    struct xchg xs[WST_NCCL_LINK_DEPTH]; /* a ring */
    uint32_t first, in_flight;
    int init_pending; /* the ready callback has not run yet */
    int in_callback;  /* a callback may destroy the link: free after it */
    int aborted;
    int closing; /* destroyed: callbacks are dropped, the last frees */
};

static void link_free(struct wst_nccl_link *l)
{
    for (uint32_t i = 0; i < WST_NCCL_LINK_DEPTH; i++)
        wst_gpu_event_destroy(l->xs[i].event);
    wst_gpu_stream_destroy(l->stream);
    free(l);
}

static void maybe_free(struct wst_nccl_link *l)
{
    if (l->closing && l->in_flight == 0 && !l->init_pending &&
        l->in_callback == 0)
        link_free(l);
}

/* ---- progress thread ---- */

static void ready(void *arg)
{
    struct wst_nccl_link *l = arg;

    l->init_pending = 0;
    l->in_callback++;
    if (!l->closing && !l->aborted)
        l->ready_fn(l->ready_arg, l->init_status);
    l->in_callback--;
    maybe_free(l);
}

static void finish(struct xchg *x, wst_status_t status)
{
    struct wst_nccl_link *l = x->link;

    l->first = (l->first + 1) % WST_NCCL_LINK_DEPTH;
    l->in_flight--;
    /* After an abort the kernels were stopped, not finished. */
    if (status == WST_OK && (l->aborted || x->status != WST_OK))
        status = x->status != WST_OK ? x->status : WST_ERR_STATE;
    l->in_callback++;
    if (!l->closing)
        x->done_fn(x->arg, status);
    l->in_callback--;
    maybe_free(l);
}

static void waited(void *arg, wst_status_t status, uint64_t done_ns)
{
    (void)done_ns;
    finish(arg, status);
}

static void refused(void *arg)
{
    struct xchg *x = arg;

    finish(x, x->status);
}

/* ---- NCCL thread ---- */

static void job_init(void *arg)
{
    struct wst_nccl_link *l = arg;
    wst_status_t st = wst_nccl_comm_start(l->log, l->device, l->id, l->nranks,
                                          l->rank, &l->comm);
    uint64_t deadline = wst_deadline_ns(l->timeout_s);
    struct timespec ms = {.tv_sec = 0, .tv_nsec = 1000000};

    /* Polled here rather than in wst_nccl_comm_wait, so that an abort (the
     * peer is gone) ends it at once instead of at the deadline. */
    if (st == WST_OK)
        st = wst_nccl_comm_poll(l->comm);
    while (st == WST_INPROGRESS) {
        if (atomic_load(&l->stop)) {
            st = WST_ERR_STATE;
        } else if (wst_now_ns() >= deadline) {
            WST_ERROR(l->log,
                      "nccl link (rank %d on GPU %d): no communicator after "
                      "%.1f s",
                      l->rank, l->device, l->timeout_s);
            st = WST_ERR_TIMED_OUT;
        } else {
            nanosleep(&ms, NULL);
            st = wst_nccl_comm_poll(l->comm);
        }
    }
    if (st != WST_OK) {
        wst_nccl_comm_abort(l->comm);
        wst_nccl_comm_destroy(l->comm);
        l->comm = NULL;
        l->dead = 1;
    }
    l->init_status = st;
    wst_worker_post(l->worker, ready, l);
}

static void job_exchange(void *arg)
{
    struct xchg *x = arg;
    struct wst_nccl_link *l = x->link;
    wst_status_t st = l->dead || l->comm == NULL ? WST_ERR_STATE : WST_OK;

    if (st == WST_OK)
        st = wst_nccl_exchange(l->comm, x->sends, x->n_sends, x->recvs,
                               x->n_recvs, l->stream);
    if (st == WST_OK)
        st = wst_gpu_event_record(l->log, x->event, l->stream);
    x->status = st;
    if (st == WST_OK)
        st = wst_gpu_waiter_add(l->waiter, x->event, waited, x);
    if (st != WST_OK) {
        l->dead = 1;
        x->status = st;
        wst_worker_post(l->worker, refused, x);
    }
}

static void job_abort(void *arg)
{
    struct wst_nccl_link *l = arg;

    l->dead = 1;
    wst_nccl_comm_abort(l->comm);
}

/* ---- API ---- */

wst_status_t wst_nccl_link_create(const struct wst_logger *log,
                                  wst_worker_t *worker, int device,
                                  const unsigned char id[WST_NCCL_ID_BYTES],
                                  int nranks, int rank, double timeout_s,
                                  wst_nccl_link_fn ready_fn, void *arg,
                                  struct wst_nccl_link **link_p)
{
    struct wst_nccl_link *l = calloc(1, sizeof(*l));
    wst_status_t st;

    *link_p = NULL;
    if (l == NULL)
        return WST_ERR_NO_MEMORY;
    if (!wst_nccl_available()) {
        WST_ERROR(log, "nccl link: built without NCCL");
        free(l);
        return WST_ERR_UNSUPPORTED;
    }
    l->log = log;
    l->worker = worker;
    l->device = device;
    l->nranks = nranks;
    l->rank = rank;
    l->timeout_s = timeout_s;
    memcpy(l->id, id, WST_NCCL_ID_BYTES);
    l->ready_fn = ready_fn;
    l->ready_arg = arg;
    st = wst_gpu_set_device(log, device);
    if (st == WST_OK)
        st = wst_gpu_stream_create(log, &l->stream);
    for (uint32_t i = 0; st == WST_OK && i < WST_NCCL_LINK_DEPTH; i++) {
        l->xs[i].link = l;
        st = wst_gpu_event_create(log, 0, &l->xs[i].event);
    }
    /* One entry more than the ring: a layer posted inside the callback of
     * the one before it (whose entry is not free yet). */
    if (st == WST_OK)
        st = wst_gpu_waiter_create(log, worker, device, WST_NCCL_LINK_DEPTH + 1,
                                   &l->waiter);
    if (st == WST_OK)
        st = wst_jobq_create("wst-nccl", &l->thread);
    if (st != WST_OK)
        goto err_free;
    l->init_pending = 1;
    st = wst_jobq_post(l->thread, job_init, l);
    if (st != WST_OK) {
        l->init_pending = 0;
        goto err_free;
    }
    *link_p = l;
    return WST_OK;

err_free:
    wst_jobq_destroy(l->thread);
    wst_gpu_waiter_destroy(l->waiter);
    link_free(l);
    return st;
}

wst_status_t
wst_nccl_link_post(struct wst_nccl_link *l, const struct wst_nccl_run *sends,
                   size_t n_sends, const struct wst_nccl_run *recvs,
                   size_t n_recvs, wst_nccl_link_fn done_fn, void *arg)
{
    if (l->aborted || l->closing)
        return WST_ERR_STATE;
    if (l->in_flight == WST_NCCL_LINK_DEPTH)
        return WST_ERR_BUSY;
    struct xchg *x = &l->xs[(l->first + l->in_flight) % WST_NCCL_LINK_DEPTH];
    x->sends = sends;
    x->recvs = recvs;
    x->n_sends = n_sends;
    x->n_recvs = n_recvs;
    x->done_fn = done_fn;
    x->arg = arg;
    x->status = WST_OK;
    wst_status_t st = wst_jobq_post(l->thread, job_exchange, x);
    if (st != WST_OK)
        return st;
    l->in_flight++;
    return WST_OK;
}

uint32_t wst_nccl_link_in_flight(const struct wst_nccl_link *l)
{
    return l->in_flight;
}

void wst_nccl_link_abort(struct wst_nccl_link *l)
{
    if (l == NULL || l->aborted)
        return;
    l->aborted = 1;
    atomic_store(&l->stop, 1);
    WST_WARN(l->log, "nccl link (rank %d on GPU %d): aborting", l->rank,
             l->device);
    if (wst_jobq_post(l->thread, job_abort, l) != WST_OK)
        WST_ERROR(l->log, "nccl link: cannot queue the abort");
}

void wst_nccl_link_destroy(struct wst_nccl_link *l)
{
    if (l == NULL)
        return;
    if (l->in_flight > 0 || l->init_pending)
        wst_nccl_link_abort(l);
    l->closing = 1;
    /* The NCCL thread ends after its last job (an exchange still settling
     * gives up after WST_NCCL_SETTLE_TIMEOUT_S); then the waiter, whose
     * events end once the kernels did. */
    wst_jobq_destroy(l->thread);
    l->thread = NULL;
    wst_gpu_waiter_destroy(l->waiter);
    l->waiter = NULL;
    wst_nccl_comm_destroy(l->comm);
    l->comm = NULL;
    maybe_free(l); /* or when the last posted callback has run */
}
