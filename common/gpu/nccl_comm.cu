/* nccl_comm.cu - nccl_comm.h with NCCL.
 *
 * The communicator is non-blocking, so every NCCL call returns at once and
 * the work it starts (the init, the launch of a group, a finalize) goes on
 * in NCCL's threads; ncclCommGetAsyncError says when it is done. settle()
 * polls that with a deadline, which is what lets a dead peer cost a timeout
 * instead of a hang. ncclCommAbort and ncclCommDestroy block even on a
 * non-blocking communicator (NCCL runs them as a blocking group), so they
 * need no settling.
 *
 * State: INIT until the first poll that sees the init done (READY) or
 * failed (FAILED, the error kept and returned again); any NCCL error later
 * also makes it FAILED, because NCCL marks a non-blocking communicator
 * failed after one. ABORTED once ncclCommAbort has freed NCCL's side.
 */
#include <nccl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern "C" {
#include "nccl_comm.h"
}
#include "cuda_status.h"
#include "nccl_args.h"

enum comm_state { COMM_INIT, COMM_READY, COMM_FAILED, COMM_ABORTED };

struct wst_nccl_comm {
    const struct wst_logger *log; /* borrowed, may be NULL */
    ncclComm_t comm;              /* NULL once aborted or destroyed */
    int device, nranks, rank;
    enum comm_state state;
    wst_status_t error; /* when FAILED */
};

static_assert(sizeof(ncclUniqueId) == WST_NCCL_ID_BYTES, "ncclUniqueId size");

/* The one translation of ncclResult_t; logs failures with their context
 * ('c' may be NULL before there is a communicator). */
static wst_status_t nccl_status(const struct wst_logger *log,
                                const struct wst_nccl_comm *c, const char *call,
                                ncclResult_t r)
{
    const char *last;

    if (r == ncclSuccess)
        return WST_OK;
    if (r == ncclInProgress)
        return WST_INPROGRESS;
    last = ncclGetLastError(c != NULL ? c->comm : NULL);
    if (last == NULL || last[0] == '\0')
        last = "no detail";
    if (c != NULL)
        WST_ERROR(log, "nccl rank %d/%d on device %d: %s: %s (%s)", c->rank,
                  c->nranks, c->device, call, ncclGetErrorString(r), last);
    else
        WST_ERROR(log, "nccl: %s: %s (%s)", call, ncclGetErrorString(r), last);
    switch (r) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
        return WST_ERR_INVALID;
    case ncclRemoteError:
        return WST_ERR_PEER_FAILED;
    default: /* system, internal, unhandled CUDA error */
        return WST_ERR_TRANSPORT;
    }
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One step of a polling loop 'elapsed_s' into it. An enqueue settles in
 * tens of microseconds, so the first millisecond only yields; an init
 * takes seconds, so after that the thread sleeps instead of taking a
 * core. */
static void backoff(double elapsed_s)
{
    struct timespec ts = {0, 100000};

    if (elapsed_s < 1e-3)
        sched_yield();
    else
        nanosleep(&ts, NULL);
}

/* Polls the communicator's async state until what 'call' started is no
 * longer in progress: its status, or WST_ERR_TIMED_OUT after 'timeout_s'
 * (not logged here: the caller says what timed out). */
static wst_status_t settle(struct wst_nccl_comm *c, const char *call,
                           double timeout_s)
{
    double t0 = now_s();

    for (;;) {
        ncclResult_t async = ncclInProgress;
        ncclResult_t r = ncclCommGetAsyncError(c->comm, &async);
        double elapsed;

        if (r != ncclSuccess)
            return nccl_status(c->log, c, "ncclCommGetAsyncError", r);
        if (async != ncclInProgress)
            return nccl_status(c->log, c, call, async);
        elapsed = now_s() - t0;
        if (elapsed >= timeout_s)
            return WST_ERR_TIMED_OUT;
        backoff(elapsed);
    }
}

static void fail(struct wst_nccl_comm *c, wst_status_t st)
{
    if (c->state == COMM_ABORTED)
        return;
    c->state = COMM_FAILED;
    c->error = st;
}

extern "C" int wst_nccl_available(void)
{
    return 1;
}

extern "C" wst_status_t wst_nccl_get_id(const struct wst_logger *log,
                                        unsigned char id[WST_NCCL_ID_BYTES])
{
    ncclUniqueId uid;
    wst_status_t st;

    if (id == NULL) {
        WST_ERROR(log, "nccl: unique id: no buffer for it");
        return WST_ERR_INVALID;
    }
    st = nccl_status(log, NULL, "ncclGetUniqueId", ncclGetUniqueId(&uid));
    if (st == WST_OK)
        memcpy(id, &uid, sizeof(uid));
    return st;
}

extern "C" wst_status_t
wst_nccl_comm_start(const struct wst_logger *log, int device,
                    const unsigned char id[WST_NCCL_ID_BYTES], int nranks,
                    int rank, struct wst_nccl_comm **comm_p)
{
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    struct wst_nccl_comm *c = NULL;
    ncclUniqueId uid;
    wst_status_t st;

    if (wst_nccl_start_args(log, device, id, nranks, rank, comm_p) != WST_OK)
        return WST_ERR_INVALID;
    /* NCCL binds the communicator to the device current at init. */
    st = wst_cuda_status(cudaSetDevice(device), log, "cudaSetDevice");
    if (st != WST_OK)
        return st;
    c = (struct wst_nccl_comm *)calloc(1, sizeof(*c));
    if (c == NULL) {
        WST_ERROR(log, "nccl: out of memory for a communicator");
        return WST_ERR_NO_MEMORY;
    }
    c->log = log;
    c->device = device;
    c->nranks = nranks;
    c->rank = rank;
    c->state = COMM_INIT;
    memcpy(&uid, id, sizeof(uid));
    config.blocking = 0;
    st = nccl_status(
        log, c, "ncclCommInitRankConfig",
        ncclCommInitRankConfig(&c->comm, nranks, uid, rank, &config));
    if (st != WST_OK && st != WST_INPROGRESS)
        goto err_free;
    WST_DEBUG(log, "nccl rank %d/%d on device %d: init started", rank, nranks,
              device);
    *comm_p = c;
    return WST_OK;

err_free:
    /* A failure NCCL sees at once leaves no communicator; one it saw in
     * its init thread leaves one that only an abort frees. */
    if (c->comm != NULL)
        (void)ncclCommAbort(c->comm);
    free(c);
    return st;
}

extern "C" wst_status_t wst_nccl_comm_poll(struct wst_nccl_comm *c)
{
    ncclResult_t async = ncclInProgress;
    ncclResult_t r;
    wst_status_t st;

    if (c == NULL)
        return WST_ERR_INVALID;
    switch (c->state) {
    case COMM_READY:
        return WST_OK;
    case COMM_FAILED:
        return c->error;
    case COMM_ABORTED:
        return WST_ERR_STATE;
    case COMM_INIT:
        break;
    }
    r = ncclCommGetAsyncError(c->comm, &async);
    st = nccl_status(c->log, c, "ncclCommGetAsyncError", r);
    if (st == WST_OK)
        st = nccl_status(c->log, c, "ncclCommInitRankConfig", async);
    if (st == WST_OK) {
        c->state = COMM_READY;
        WST_DEBUG(c->log, "nccl rank %d/%d on device %d: ready", c->rank,
                  c->nranks, c->device);
    } else if (st != WST_INPROGRESS) {
        fail(c, st);
    }
    return st;
}

extern "C" wst_status_t wst_nccl_comm_wait(struct wst_nccl_comm *c,
                                           double timeout_s)
{
    double t0 = now_s(), elapsed;
    wst_status_t st;

    if (c == NULL || !(timeout_s >= 0))
        return WST_ERR_INVALID;
    for (;;) {
        st = wst_nccl_comm_poll(c);
        if (st != WST_INPROGRESS)
            break;
        elapsed = now_s() - t0;
        if (elapsed >= timeout_s) {
            st = WST_ERR_TIMED_OUT;
            break;
        }
        backoff(elapsed);
    }
    if (st == WST_OK || c->state == COMM_ABORTED)
        return st;
    if (st == WST_ERR_TIMED_OUT)
        WST_ERROR(c->log,
                  "nccl rank %d/%d on device %d: init not done after %.1f s: "
                  "aborting the communicator",
                  c->rank, c->nranks, c->device, timeout_s);
    else
        WST_ERROR(c->log,
                  "nccl rank %d/%d on device %d: communicator failed (%s): "
                  "aborting it",
                  c->rank, c->nranks, c->device, wst_status_name(st));
    wst_nccl_comm_abort(c);
    return st;
}

/* WST_OK when every run of 'runs' can be posted: logs the first that
 * cannot. */
static wst_status_t check_runs(const struct wst_nccl_comm *c, const char *what,
                               const struct wst_nccl_run *runs, size_t n)
{
    if (n > 0 && runs == NULL) {
        WST_ERROR(c->log, "nccl rank %d/%d: exchange: %zu %s runs but no array",
                  c->rank, c->nranks, n, what);
        return WST_ERR_INVALID;
    }
    for (size_t i = 0; i < n; i++) {
        if (runs[i].peer < 0 || runs[i].peer >= c->nranks ||
            (runs[i].bytes > 0 && runs[i].ptr == NULL)) {
            WST_ERROR(c->log,
                      "nccl rank %d/%d: exchange: %s run %zu: peer %d, %llu "
                      "bytes at %p",
                      c->rank, c->nranks, what, i, runs[i].peer,
                      (unsigned long long)runs[i].bytes, runs[i].ptr);
            return WST_ERR_INVALID;
        }
    }
    return WST_OK;
}

static uint64_t total_bytes(const struct wst_nccl_run *runs, size_t n)
{
    uint64_t sum = 0;

    for (size_t i = 0; i < n; i++)
        sum += runs[i].bytes;
    return sum;
}

/* ncclSend or ncclRecv of every run, split into calls of at most
 * WST_NCCL_MAX_CALL_BYTES, inside the caller's group. */
static wst_status_t post(struct wst_nccl_comm *c, int send,
                         const struct wst_nccl_run *runs, size_t n,
                         cudaStream_t stream)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char *p = (unsigned char *)runs[i].ptr;

        for (uint64_t off = 0; off < runs[i].bytes;) {
            uint64_t left = runs[i].bytes - off;
            size_t count = (size_t)(left < WST_NCCL_MAX_CALL_BYTES
                                        ? left
                                        : WST_NCCL_MAX_CALL_BYTES);
            ncclResult_t r = send ? ncclSend(p + off, count, ncclUint8,
                                             runs[i].peer, c->comm, stream)
                                  : ncclRecv(p + off, count, ncclUint8,
                                             runs[i].peer, c->comm, stream);
            /* Inside a group a call only queues; on a non-blocking
             * communicator it answers with the communicator's state. */
            wst_status_t st =
                nccl_status(c->log, c, send ? "ncclSend" : "ncclRecv", r);

            if (st != WST_OK && st != WST_INPROGRESS)
                return st;
            off += count;
        }
    }
    return WST_OK;
}

/* The communicator can take an exchange: WST_OK, or why not (logged). */
static wst_status_t usable(struct wst_nccl_comm *c)
{
    wst_status_t st = wst_nccl_comm_poll(c);

    if (st == WST_INPROGRESS) {
        WST_ERROR(c->log,
                  "nccl rank %d/%d on device %d: exchange before the init "
                  "finished",
                  c->rank, c->nranks, c->device);
        return WST_ERR_STATE;
    }
    if (st == WST_ERR_STATE)
        WST_ERROR(c->log,
                  "nccl rank %d/%d on device %d: exchange on an aborted "
                  "communicator",
                  c->rank, c->nranks, c->device);
    else if (st != WST_OK)
        WST_ERROR(c->log,
                  "nccl rank %d/%d on device %d: exchange on a failed "
                  "communicator (%s)",
                  c->rank, c->nranks, c->device, wst_status_name(st));
    return st;
}

extern "C" wst_status_t
wst_nccl_exchange(struct wst_nccl_comm *c, const struct wst_nccl_run *sends,
                  size_t n_sends, const struct wst_nccl_run *recvs,
                  size_t n_recvs, wst_gpu_stream_t stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    wst_status_t st, end;

    if (c == NULL)
        return WST_ERR_INVALID;
    st = check_runs(c, "send", sends, n_sends);
    if (st == WST_OK)
        st = check_runs(c, "recv", recvs, n_recvs);
    if (st == WST_OK)
        st = usable(c);
    if (st != WST_OK)
        return st;
    if (total_bytes(sends, n_sends) == 0 && total_bytes(recvs, n_recvs) == 0)
        return WST_OK;
    st = wst_cuda_status(cudaSetDevice(c->device), c->log, "cudaSetDevice");
    if (st != WST_OK)
        return st;

    st = nccl_status(c->log, c, "ncclGroupStart", ncclGroupStart());
    if (st != WST_OK)
        goto err_fail;
    st = post(c, 1, sends, n_sends, s);
    if (st == WST_OK)
        st = post(c, 0, recvs, n_recvs, s);
    /* The group is closed whatever happened inside it; a call that failed
     * in it has already failed the group (and logged why). */
    end = nccl_status(st == WST_OK ? c->log : NULL, c, "ncclGroupEnd",
                      ncclGroupEnd());
    if (st != WST_OK)
        goto err_fail;
    if (end == WST_INPROGRESS)
        end = settle(c, "ncclGroupEnd", WST_NCCL_SETTLE_TIMEOUT_S);
    if (end == WST_ERR_TIMED_OUT) {
        WST_ERROR(c->log,
                  "nccl rank %d/%d on device %d: exchange of %zu sends and %zu "
                  "recvs not enqueued after %.0f s: aborting the "
                  "communicator",
                  c->rank, c->nranks, c->device, n_sends, n_recvs,
                  WST_NCCL_SETTLE_TIMEOUT_S);
        wst_nccl_comm_abort(c);
        return end;
    }
    st = end;
    if (st != WST_OK)
        goto err_fail;
    return WST_OK;

err_fail:
    fail(c, st);
    return st;
}

extern "C" void wst_nccl_comm_abort(struct wst_nccl_comm *c)
{
    if (c == NULL || c->comm == NULL)
        return;
    /* Callers have said why (wait, exchange) or are tearing down. */
    WST_DEBUG(c->log, "nccl rank %d/%d on device %d: ncclCommAbort", c->rank,
              c->nranks, c->device);
    (void)nccl_status(c->log, c, "ncclCommAbort", ncclCommAbort(c->comm));
    /* Whether or not NCCL managed, there is nothing left to do with it. */
    c->comm = NULL;
    c->state = COMM_ABORTED;
}

extern "C" void wst_nccl_comm_destroy(struct wst_nccl_comm *c)
{
    wst_status_t st;

    if (c == NULL)
        return;
    if (c->state == COMM_READY) {
        st = nccl_status(c->log, c, "ncclCommFinalize",
                         ncclCommFinalize(c->comm));
        if (st == WST_INPROGRESS)
            st = settle(c, "ncclCommFinalize", WST_NCCL_SETTLE_TIMEOUT_S);
        if (st == WST_ERR_TIMED_OUT)
            WST_ERROR(c->log,
                      "nccl rank %d/%d on device %d: finalize not done after "
                      "%.0f s: aborting the communicator",
                      c->rank, c->nranks, c->device, WST_NCCL_SETTLE_TIMEOUT_S);
        if (st == WST_OK) {
            (void)nccl_status(c->log, c, "ncclCommDestroy",
                              ncclCommDestroy(c->comm));
            c->comm = NULL;
        }
    }
    wst_nccl_comm_abort(c);
    free(c);
}
