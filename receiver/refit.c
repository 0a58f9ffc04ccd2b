/* refit.c - the refit state machine's driver (progress thread): what
 * happens is fed to the machine (refit_machine.h) as events, one at a
 * time, and the actions it returns are run here: messages to senders,
 * jobs for the engine and repack threads (jobs.c), the senders' receiving
 * halves (data.c), the state API threads read (commit.c), log lines.
 *
 * Run to completion: an event that comes up while the actions of another
 * run (an action that fails, a receiving half that reports inside a call)
 * waits until they all ran. The machine's texts stay valid until then.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "codec.h"
#include "landing.h"
#include "log.h"
#include "receiver_internal.h"
#include "worker.h"

/* An event that waits for the running actions; it owns its strings. */
struct wst_recv_pending {
    struct wst_recv_pending *next;
    struct wst_rm_event ev;
    char peer[sizeof(((struct peer *)0)->name)];
    char reason[WST_ERROR_MSG_MAX];
    char label[WST_LABEL_MAX];
};

static void defer(struct wst_receiver *r, const struct wst_rm_event *ev)
{
    struct wst_recv_pending *pe = calloc(1, sizeof(*pe)), **tail;

    if (pe == NULL) {
        WST_ERROR(&r->log, "no memory for a refit event: it is lost");
        return;
    }
    pe->ev = *ev;
    if (ev->peer != NULL) {
        snprintf(pe->peer, sizeof(pe->peer), "%s", ev->peer);
        pe->ev.peer = pe->peer;
    }
    if (ev->reason != NULL) {
        snprintf(pe->reason, sizeof(pe->reason), "%s", ev->reason);
        pe->ev.reason = pe->reason;
    }
    if (ev->label != NULL) {
        snprintf(pe->label, sizeof(pe->label), "%s", ev->label);
        pe->ev.label = pe->label;
    }
    for (tail = &r->pending; *tail != NULL; tail = &(*tail)->next)
        ;
    *tail = pe;
}

/* ---- actions on one sender ---- */

static void send_ack(struct wst_receiver *r, struct peer *p,
                     const struct wst_rm_action *a)
{
    struct wst_msg m = {.type = WST_MSG_BEGIN};

    m.u.begin.version = a->version;
    m.u.begin.plan_hash = p->plan_hash;
    m.u.begin.ack = 1;
    wst_recv_send_msg(r, p, &m);
}

static void send_credit(struct wst_receiver *r, struct peer *p,
                        const struct wst_rm_action *a)
{
    struct wst_msg m = {.type = WST_MSG_CREDIT};

    m.u.credit.version = a->version;
    m.u.credit.layer = a->layer;
    wst_recv_send_msg(r, p, &m);
}

static void send_barrier(struct wst_receiver *r, struct peer *p,
                         const struct wst_rm_action *a)
{
    struct wst_msg m = {.type = WST_MSG_BARRIER};

    m.u.barrier.version = a->version;
    m.u.barrier.step = a->kind == WST_RM_ACT_SEND_READY ? WST_BARRIER_READY
                                                        : WST_BARRIER_PREPARED;
    wst_recv_send_msg(r, p, &m);
}

static void send_commit(struct wst_receiver *r, struct peer *p,
                        const struct wst_rm_action *a)
{
    struct wst_msg m = {.type = WST_MSG_COMMIT};

    m.u.commit.version = a->version;
    wst_recv_send_msg(r, p, &m);
}

/* The receiving half for its BEGIN's mover; the machine hears whether it
 * opened. */
static void open_rx(struct wst_receiver *r, struct peer *p,
                    const struct wst_rm_action *a)
{
    p->mover = (enum wst_mover_kind)a->mover;
    wst_status_t st = wst_recv_peer_rx_open(r, p);
    if (st != WST_OK) {
        wst_recv_refit_fail(r, st,
                            "sender %s: no receiving half for its %s mover",
                            p->name, wst_mover_kind_name(p->mover));
        return;
    }
    struct wst_rm_event ev = {.kind = WST_RM_EV_RX_OPENED,
                              .rank = p->rank,
                              .counts_bytes = p->rx->ops->counts_bytes};
    wst_recv_refit_event(r, &ev);
}

/* Its receiving half takes bytes from now on, as far as credits go. */
static void rx_begin(struct wst_receiver *r, struct peer *p,
                     const struct wst_rm_action *a)
{
    if (p->rx == NULL)
        return;
    wst_status_t st = p->rx->ops->begin(p->rx, a->version);
    if (st != WST_OK) {
        wst_recv_refit_fail(r, st, "sender %s: its %s mover cannot begin",
                            p->name, p->rx->ops->name);
        return;
    }
    p->rx->ops->allow(p->rx, a->bound);
}

/* No receive may go on writing live memory once the refit failed (NCCL's
 * communicators are aborted; the senders reconnect and set up new ones).
 * UCX receives already posted cannot be: see retire_receives. */
static void abort_rx(struct wst_receiver *r, struct peer *p,
                     const struct wst_rm_action *a)
{
    (void)r;
    (void)a;
    if (p->rx != NULL)
        p->rx->ops->abort(p->rx);
    if (p->nccl_rx != NULL && p->nccl_rx != p->rx)
        p->nccl_rx->ops->abort(p->nccl_rx);
}

static void rx_allow(struct wst_receiver *r, struct peer *p,
                     const struct wst_rm_action *a)
{
    (void)r;
    if (p->rx != NULL)
        p->rx->ops->allow(p->rx, a->bound);
}

static void send_error(struct wst_receiver *r, struct peer *p,
                       const struct wst_rm_action *a)
{
    wst_recv_send_error(r, p, a->status, a->text);
}

/* The actions on one sender (who may have gone since). */
static void (*const on_sender[])(struct wst_receiver *, struct peer *,
                                 const struct wst_rm_action *) = {
    [WST_RM_ACT_OPEN_RX] = open_rx,
    [WST_RM_ACT_SEND_ERROR] = send_error,
    [WST_RM_ACT_SEND_READY] = send_barrier,
    [WST_RM_ACT_SEND_PREPARED] = send_barrier,
    [WST_RM_ACT_ACK] = send_ack,
    [WST_RM_ACT_SEND_CREDIT] = send_credit,
    [WST_RM_ACT_RX_BEGIN] = rx_begin,
    [WST_RM_ACT_RX_ALLOW] = rx_allow,
    [WST_RM_ACT_SEND_COMMIT] = send_commit,
    [WST_RM_ACT_ABORT_RX] = abort_rx,
};

static int run_on_sender(struct wst_receiver *r, const struct wst_rm_action *a)
{
    struct peer *p = r->by_rank != NULL && a->rank < r->world_size
                         ? r->by_rank[a->rank]
                         : NULL;

    if ((size_t)a->kind >= sizeof(on_sender) / sizeof(on_sender[0]) ||
        on_sender[a->kind] == NULL)
        return 0;
    if (p != NULL)
        on_sender[a->kind](r, p, a);
    return 1;
}

/* ---- the others ---- */

/* Data over shared memory raises no event on the worker's fd: poll
 * while a refit runs. */
static void poll_worker(struct wst_receiver *r, int on)
{
    if (on == r->polling)
        return;
    wst_worker_busy(r->worker, on ? +1 : -1);
    wst_worker_lanes_busy(r->worker, on ? +1 : -1);
    r->polling = on;
}

/* At a refit's end, UCX receives still posted into live memory belong to
 * a refit that failed (a whole one has every byte in), and UCX 1.13
 * cannot cancel them: one whose sender was stopped may land long after
 * the next version was checked. The data worker they were posted on is
 * replaced, never to be progressed again (every sender of a failed refit
 * connects again, and its HELLO gives the new address). Once per refit,
 * whichever senders are still there. */
static void retire_receives(struct wst_receiver *r)
{
    size_t n = wst_worker_data_receiving(r->worker);

    if (n == 0)
        return;
    if (wst_worker_data_reset_room(r->worker) == 0) {
        WST_ERROR(&r->log,
                  "%zu receives of a failed refit are in flight and the data "
                  "worker cannot be replaced again: late bytes may land in a "
                  "later version; restart the agent",
                  n);
        return;
    }
    if (!wst_worker_data_reset(r->worker))
        return;
    pthread_mutex_lock(&r->lock);
    r->state.data_resets++;
    pthread_mutex_unlock(&r->lock);
}

static void started(struct wst_receiver *r, const struct wst_rm_action *a)
{
    poll_worker(r, 1);
    wst_worker_lane_rx_bytes(r->worker, r->lane_bytes_at_start,
                             WST_RECEIVER_LANES_MAX);
    if (r->landing != NULL) {
        struct wst_landing_stats drop;
        wst_landing_take_stats(r->landing, &drop); /* counts start here */
    }
    if (r->device_landing != NULL) {
        struct wst_landing_stats drop;
        wst_landing_take_stats(r->device_landing, &drop);
    }
    if (r->dev != NULL) {
        struct wst_rx_timing drop;
        wst_worker_rx_timing_take(r->worker, &drop);
        memset(&r->am_stats, 0, sizeof(r->am_stats));
    }
    wst_recv_publish_started(r, a);
}

static void queue_verify(struct wst_receiver *r, const struct wst_rm_action *a)
{
    struct job *j = wst_recv_job_new(r, a);

    if (j == NULL) {
        wst_recv_refit_fail(r, WST_ERR_NO_MEMORY,
                            "cannot queue a digest check");
        return;
    }
    /* Unverified layers still pass through the engine thread, so events
     * keep one order. */
    wst_recv_queue_job(
        r, r->verify ? wst_recv_job_verify : wst_recv_job_skip_verify, j);
}

static void queue_repack(struct wst_receiver *r, const struct wst_rm_action *a)
{
    struct job *j = wst_recv_job_new(r, a);

    if (j == NULL ||
        wst_jobq_post(r->repacker, wst_recv_job_repack, j) != WST_OK) {
        free(j);
        wst_recv_refit_fail(r, WST_ERR_NO_MEMORY,
                            "cannot queue the repack of layer %u", a->layer);
    }
}

/* The engine hears it on its thread; nothing to do if that cannot be. */
static void tell_engine(struct wst_receiver *r, wst_job_fn fn,
                        const struct wst_rm_action *a)
{
    struct job *j = wst_recv_job_new(r, a);

    if (j != NULL && wst_jobq_post(r->engine, fn, j) != WST_OK)
        free(j);
}

static void run_action(struct wst_receiver *r, const struct wst_rm_action *a)
{
    if (r->log.level >= WST_LOG_TRACE) {
        char line[2 * WST_ERROR_MSG_MAX];
        wst_rm_action_describe(a, line, sizeof(line));
        WST_TRACE(&r->log, "refit: %s", line);
    }
    if (run_on_sender(r, a))
        return;
    switch (a->kind) {
    case WST_RM_ACT_START:
        started(r, a);
        break;
    case WST_RM_ACT_BEGIN_HOOK:
        wst_recv_queue_job(r, wst_recv_job_begin, wst_recv_job_new(r, a));
        break;
    case WST_RM_ACT_READY:
        WST_INFO(&r->log, "version %llu: engine paused, ready",
                 (unsigned long long)a->version);
        wst_recv_publish_phase(r, a);
        break;
    case WST_RM_ACT_RECEIVING:
        WST_INFO(&r->log, "version %llu: the group is ready, receiving",
                 (unsigned long long)a->version);
        wst_recv_publish_phase(r, a);
        break;
    case WST_RM_ACT_PREPARED:
        WST_INFO(&r->log,
                 "version %llu: prepared in %.3f s, waiting for the group",
                 (unsigned long long)a->version, a->seconds);
        wst_recv_publish_phase(r, a);
        break;
    case WST_RM_ACT_GRANT:
        WST_DEBUG(&r->log, "version %llu: credit for layer %u",
                  (unsigned long long)a->version, a->layer);
        break;
    case WST_RM_ACT_VERIFY:
        queue_verify(r, a);
        break;
    case WST_RM_ACT_RECEIVED:
        WST_DEBUG(&r->log, "version %llu: layer %u complete",
                  (unsigned long long)a->version, a->layer);
        wst_recv_publish_times(r, a);
        break;
    case WST_RM_ACT_REPACK:
        queue_repack(r, a);
        break;
    case WST_RM_ACT_REPACKED:
        wst_recv_publish_times(r, a);
        break;
    case WST_RM_ACT_FINALIZE:
        wst_recv_queue_job(r, wst_recv_job_finalize, wst_recv_job_new(r, a));
        break;
    case WST_RM_ACT_FINAL:
        wst_recv_publish_times(r, a);
        break;
    case WST_RM_ACT_COMMITTED:
        wst_recv_publish_committed(r, a);
        break;
    case WST_RM_ACT_COMMIT_HOOK:
        wst_recv_queue_job(r, wst_recv_job_commit, wst_recv_job_new(r, a));
        break;
    case WST_RM_ACT_REFUSED:
        wst_recv_publish_refused(r, a);
        r->refit_failed = 1;
        break;
    case WST_RM_ACT_UNUSABLE:
        wst_recv_publish_unusable(r, a);
        r->refit_failed = 1;
        break;
    case WST_RM_ACT_LATE_FAILURE:
        /* The version is complete; a late failure loses nothing. */
        WST_WARN(&r->log, "after version %llu was complete: %s",
                 (unsigned long long)a->version, a->text);
        break;
    case WST_RM_ACT_TELL_UNUSABLE:
        tell_engine(r, wst_recv_job_unusable, a);
        break;
    case WST_RM_ACT_RESUME:
        tell_engine(r, wst_recv_job_resume, a);
        break;
    case WST_RM_ACT_END:
        retire_receives(r);
        /* Puts in hardware land without us: their keys go instead. */
        if (r->refit_failed && (r->allow_put || r->device_put))
            wst_recv_regions_rekey(r);
        r->refit_failed = 0;
        poll_worker(r, 0);
        break;
    case WST_RM_ACT_REASON:
        wst_recv_publish_reason(r, a->text);
        break;
    default:
        break;
    }
}

/* ---- events ---- */

static void step(struct wst_receiver *r, struct wst_rm_event *ev)
{
    ev->now_ns = wst_now_ns();
    wst_rm_actions_clear(&r->actions);
    wst_rm_step(&r->rm, ev, &r->actions);
    if (r->actions.lost != 0)
        WST_ERROR(&r->log, "refit: no memory for %zu of its actions",
                  r->actions.lost);
    for (size_t i = 0; i < r->actions.n; i++)
        run_action(r, &r->actions.v[i]);
}

void wst_recv_refit_event(struct wst_receiver *r, const struct wst_rm_event *ev)
{
    struct wst_rm_event e = *ev;

    if (r->stepping) {
        defer(r, ev);
        return;
    }
    r->stepping = 1;
    step(r, &e);
    while (r->pending != NULL) {
        struct wst_recv_pending *pe = r->pending;
        r->pending = pe->next;
        step(r, &pe->ev);
        free(pe);
    }
    r->stepping = 0;
}

static void vfail(struct wst_receiver *r, enum wst_rm_event_kind kind,
                  uint32_t rank, wst_status_t status, const char *fmt,
                  va_list ap)
{
    char reason[WST_ERROR_MSG_MAX];

    vsnprintf(reason, sizeof(reason), fmt, ap);
    struct wst_rm_event ev = {
        .kind = kind, .rank = rank, .status = status, .reason = reason};
    wst_recv_refit_event(r, &ev);
}

void wst_recv_refit_fail(struct wst_receiver *r, wst_status_t status,
                         const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vfail(r, WST_RM_EV_FAIL, WST_RM_NO_RANK, status, fmt, ap);
    va_end(ap);
}

void wst_recv_refit_peer_fail(struct wst_receiver *r, struct peer *p,
                              enum wst_rm_event_kind kind, wst_status_t status,
                              const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vfail(r, kind, wst_recv_peer_rank(p), status, fmt, ap);
    va_end(ap);
}

void wst_recv_refit_shutdown(struct wst_receiver *r)
{
    struct wst_rm_event ev = {.kind = WST_RM_EV_SHUTDOWN};

    wst_recv_refit_event(r, &ev);
}

void wst_recv_refit_release(struct wst_receiver *r)
{
    while (r->pending != NULL) {
        struct wst_recv_pending *pe = r->pending;
        r->pending = pe->next;
        free(pe);
    }
    wst_rm_actions_free(&r->actions);
    wst_rm_release(&r->rm);
}
