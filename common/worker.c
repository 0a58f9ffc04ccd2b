/* worker.c - the progress thread, its UCX worker, listener and connections.
 *
 * See worker.h for the threading model. Internals worth knowing:
 *  - posted functions live in a mutex-protected singly linked FIFO; the
 *    eventfd is written once per post and drained by the thread;
 *  - the thread's loop: run posted functions, progress UCX until idle, run
 *    the tick when due, arm the worker, and sleep in epoll when arm says
 *    nothing is pending;
 *  - connections are found from an incoming active message through its
 *    reply endpoint (senders set UCP_AM_SEND_FLAG_REPLY), by a linear scan:
 *    a worker has tens of connections, not thousands;
 *  - a closed connection is unlinked at once, but its endpoints are closed
 *    only after ucp_worker_progress returns (closing an endpoint from
 *    inside UCX's own failure handling of it aborts UCX 1.13), and the
 *    connection is freed when UCX completes those close requests;
 *  - a data endpoint without peer-failure mode (shared memory) is never
 *    closed before the worker is: when a stopped peer resumes, UCX 1.13
 *    delivers its late rendezvous acknowledgements to whatever request ids
 *    the endpoint had, and asserts if a close has freed them. It is parked
 *    in a graveyard instead.
 */
#include "worker.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "clock.h"
#include "device_path.h"
#include "ucx_status.h"

struct wst_post {
    struct wst_post *next;
    wst_worker_fn fn;
    void *arg;
};

struct wst_conn {
    struct wst_conn *next;
    wst_worker_t *worker;
    ucp_ep_h ep;      /* control */
    ucp_ep_h data_ep; /* NULL until opened */
    void *user;
    int failed;
    int close_refs;       /* c is freed when this drops to 0 after close */
    uint64_t last_rx;     /* ns of the last control message received */
    uint64_t last_tx;     /* ns of the last heartbeat sent */
    uint64_t close_at;    /* ns; nonzero: force-close then (lingering) */
    int data_peer_errors; /* data_ep has UCP_ERR_HANDLING_MODE_PEER */
    char name[96];
};

struct wst_worker {
    const struct wst_logger *log;
    struct wst_worker_ops ops;
    unsigned tick_ms;
    size_t max_control_msg;
    uint64_t hb_interval_ns; /* 0: no heartbeats */
    uint64_t hb_timeout_ns;
    void *hb_msg;
    size_t hb_len;

    ucp_context_h context;
    ucp_worker_h worker;
    ucp_listener_h listener;
    ucp_address_t *address;
    size_t address_len;
    int supports_cuda;
    struct wst_conn *conns;
    int closing;               /* closed connections not yet freed */
    struct wst_conn *to_close; /* closed, endpoints not yet closed */
    ucp_ep_h *graveyard;       /* see the header comment */
    size_t n_graveyard;
    int busy; /* UCX requests in flight (wst_worker_busy) */
    struct wst_parked_data *parked, *parked_tail;
    uint64_t parked_total; /* messages ever parked */

    pthread_t thread;
    int epfd;
    int evfd;
    int ucp_fd;
    pthread_mutex_t lock;
    struct wst_post *head, *tail;
    int stop;
    wst_status_t start_status; /* result of the thread's UCX set-up */
    pthread_cond_t started;
    int start_done;
};

/* A control message that arrived by rendezvous and is being received. */
struct wst_pending_msg {
    wst_worker_t *worker;
    ucp_ep_h reply_ep;
    void *buf;
    size_t len;
};

/* A data message being received into its destination. */
struct wst_pending_data {
    wst_worker_t *worker;
    struct wst_data_hdr hdr;
    size_t len;
    void *dest;
};

/* A data message whose owner had no room for it yet (data_dest said
 * WST_ERR_BUSY): a rendezvous descriptor UCX keeps for us, or an eager
 * payload copied here. Parked in arrival order until wst_worker_data_resume
 * finds room. */
struct wst_parked_data {
    struct wst_parked_data *next;
    struct wst_data_hdr hdr;
    size_t len;
    void *desc;            /* rendezvous descriptor, or NULL */
    unsigned char bytes[]; /* the eager payload when desc is NULL */
};

static struct wst_conn *conn_find(wst_worker_t *w, ucp_ep_h ep)
{
    for (struct wst_conn *c = w->conns; c != NULL; c = c->next)
        if (c->ep == ep || c->data_ep == ep)
            return c;
    return NULL;
}

static void conn_fail(struct wst_conn *c, wst_status_t status, const char *why)
{
    wst_worker_t *w = c->worker;

    if (c->failed)
        return;
    c->failed = 1;
    /* The owner logs it: only it knows whether this loses anything. */
    WST_DEBUG(w->log, "peer %s: %s", c->name, why);
    if (w->ops.conn_failed != NULL)
        w->ops.conn_failed(w->ops.arg, c, status, why);
}

static void close_pending(wst_worker_t *w);
static void close_graveyard(wst_worker_t *w);

static void ep_error_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    struct wst_conn *c = arg;

    (void)ep;
    conn_fail(c, wst_status_from_ucs(status), ucs_status_string(status));
}

static void deliver_message(wst_worker_t *w, ucp_ep_h reply_ep, const void *buf,
                            size_t len)
{
    struct wst_conn *c = reply_ep != NULL ? conn_find(w, reply_ep) : NULL;

    if (c == NULL) {
        WST_WARN(w->log,
                 "control message of %zu bytes from an unknown "
                 "endpoint dropped",
                 len);
        return;
    }
    if (c->failed)
        return;
    c->last_rx = wst_now_ns();
    if (w->ops.message != NULL)
        w->ops.message(w->ops.arg, c, buf, len);
}

static void control_recv_done(void *request, ucs_status_t status, size_t length,
                              void *user_data)
{
    struct wst_pending_msg *pm = user_data;

    if (status == UCS_OK)
        deliver_message(pm->worker, pm->reply_ep, pm->buf, length);
    else
        WST_WARN(pm->worker->log, "control message receive failed: %s",
                 ucs_status_string(status));
    pm->worker->busy--;
    free(pm->buf);
    free(pm);
    if (request != NULL)
        ucp_request_free(request);
}

static ucs_status_t am_control_cb(void *arg, const void *header,
                                  size_t header_length, void *data,
                                  size_t length,
                                  const ucp_am_recv_param_t *param)
{
    wst_worker_t *w = arg;
    ucp_ep_h reply_ep = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)
                            ? param->reply_ep
                            : NULL;
    int rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;

    (void)header;
    (void)header_length;
    if (length > w->max_control_msg) {
        /* Length cap before anything is allocated or parsed. */
        WST_WARN(w->log,
                 "control message of %zu bytes exceeds the %zu-byte "
                 "cap, dropped",
                 length, w->max_control_msg);
        if (rndv)
            ucp_am_data_release(w->worker, data);
        return UCS_OK;
    }
    if (!rndv) {
        deliver_message(w, reply_ep, data, length);
        return UCS_OK;
    }
    struct wst_pending_msg *pm = calloc(1, sizeof(*pm));
    void *buf = malloc(length ? length : 1);
    if (pm == NULL || buf == NULL) {
        free(pm);
        free(buf);
        ucp_am_data_release(w->worker, data);
        return UCS_OK;
    }
    pm->worker = w;
    w->busy++;
    pm->reply_ep = reply_ep;
    pm->buf = buf;
    pm->len = length;
    ucp_request_param_t rp = {
        .op_attr_mask =
            UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.recv_am = control_recv_done,
        .user_data = pm,
    };
    ucs_status_ptr_t req =
        ucp_am_recv_data_nbx(w->worker, data, buf, length, &rp);
    if (req == NULL)
        control_recv_done(NULL, UCS_OK, length, pm);
    else if (UCS_PTR_IS_ERR(req))
        control_recv_done(NULL, UCS_PTR_STATUS(req), 0, pm);
    return UCS_OK;
}

static void data_recv_done(void *request, ucs_status_t status, size_t length,
                           void *user_data)
{
    struct wst_pending_data *pd = user_data;
    wst_worker_t *w = pd->worker;

    (void)length;
    if (w->ops.data_done != NULL)
        w->ops.data_done(w->ops.arg, &pd->hdr, pd->dest, pd->len,
                         wst_status_from_ucs(status));
    w->busy--;
    free(pd);
    if (request != NULL)
        ucp_request_free(request);
}

/* Receives one accepted data message into 'dest': a rendezvous descriptor
 * by ucp_am_recv_data_nbx, eager bytes by copy. */
static void data_receive(wst_worker_t *w, const struct wst_data_hdr *hdr,
                         void *desc, const void *bytes, size_t length,
                         void *dest)
{
    if (desc == NULL) {
        memcpy(dest, bytes, length);
        if (w->ops.data_done != NULL)
            w->ops.data_done(w->ops.arg, hdr, dest, length, WST_OK);
        return;
    }
    struct wst_pending_data *pd = malloc(sizeof(*pd));
    if (pd == NULL) {
        if (w->ops.data_done != NULL)
            w->ops.data_done(w->ops.arg, hdr, dest, length, WST_ERR_NO_MEMORY);
        ucp_am_data_release(w->worker, desc);
        return;
    }
    pd->worker = w;
    w->busy++;
    pd->hdr = *hdr;
    pd->len = length;
    pd->dest = dest;
    ucp_request_param_t rp = {
        .op_attr_mask =
            UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.recv_am = data_recv_done,
        .user_data = pd,
    };
    ucs_status_ptr_t req =
        ucp_am_recv_data_nbx(w->worker, desc, dest, length, &rp);
    if (req == NULL)
        data_recv_done(NULL, UCS_OK, length, pd);
    else if (UCS_PTR_IS_ERR(req))
        data_recv_done(NULL, UCS_PTR_STATUS(req), 0, pd);
}

/* Parks a message data_dest had no room for. Returns the callback's
 * status: UCS_INPROGRESS keeps a rendezvous descriptor alive. */
static ucs_status_t data_park(wst_worker_t *w, const struct wst_data_hdr *hdr,
                              void *data, size_t length, int rndv)
{
    struct wst_parked_data *pk = malloc(sizeof(*pk) + (rndv ? 0 : length));

    if (pk == NULL) {
        WST_ERROR(w->log, "no memory to park a %zu-byte data message", length);
        if (w->ops.data_done != NULL)
            w->ops.data_done(w->ops.arg, hdr, NULL, length, WST_ERR_NO_MEMORY);
        if (rndv)
            ucp_am_data_release(w->worker, data);
        return UCS_OK;
    }
    pk->next = NULL;
    pk->hdr = *hdr;
    pk->len = length;
    pk->desc = rndv ? data : NULL;
    if (!rndv)
        memcpy(pk->bytes, data, length);
    w->parked_total++;
    if (w->parked_tail != NULL)
        w->parked_tail->next = pk;
    else
        w->parked = pk;
    w->parked_tail = pk;
    return rndv ? UCS_INPROGRESS : UCS_OK;
}

static ucs_status_t am_data_cb(void *arg, const void *header,
                               size_t header_length, void *data, size_t length,
                               const ucp_am_recv_param_t *param)
{
    wst_worker_t *w = arg;
    int rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    struct wst_data_hdr hdr;
    void *dest = NULL;
    wst_status_t st;

    if (header_length != sizeof(hdr) || w->ops.data_dest == NULL) {
        WST_WARN(w->log, "data message with a %zu-byte header dropped",
                 header_length);
        goto drop;
    }
    memcpy(&hdr, header, sizeof(hdr));
    /* Later messages wait behind parked ones: arrival order is kept. */
    st = w->parked != NULL ? WST_ERR_BUSY
                           : w->ops.data_dest(w->ops.arg, &hdr, length, &dest);
    if (st == WST_ERR_BUSY)
        return data_park(w, &hdr, data, length, rndv);
    if (st != WST_OK)
        goto drop;
    data_receive(w, &hdr, rndv ? data : NULL, data, length, dest);
    return UCS_OK;

drop:
    if (rndv)
        ucp_am_data_release(w->worker, data);
    return UCS_OK;
}

static void parked_free(wst_worker_t *w, struct wst_parked_data *pk)
{
    if (pk->desc != NULL)
        ucp_am_data_release(w->worker, pk->desc);
    free(pk);
}

uint64_t wst_worker_parked_total(const wst_worker_t *w)
{
    return w->parked_total;
}

void wst_worker_data_resume(wst_worker_t *w)
{
    struct wst_parked_data *pk;

    while ((pk = w->parked) != NULL) {
        void *dest = NULL;
        wst_status_t st =
            w->ops.data_dest(w->ops.arg, &pk->hdr, pk->len, &dest);

        if (st == WST_ERR_BUSY)
            return;
        w->parked = pk->next;
        if (w->parked == NULL)
            w->parked_tail = NULL;
        if (st == WST_OK) {
            data_receive(w, &pk->hdr, pk->desc, pk->bytes, pk->len, dest);
            free(pk);
        } else {
            parked_free(w, pk);
        }
    }
}

static wst_status_t set_am_handler(wst_worker_t *w, unsigned id,
                                   ucp_am_recv_callback_t cb)
{
    ucp_am_handler_param_t hp = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                      UCP_AM_HANDLER_PARAM_FIELD_CB |
                      UCP_AM_HANDLER_PARAM_FIELD_ARG,
        .id = id,
        .cb = cb,
        .arg = w,
    };
    ucs_status_t st = ucp_worker_set_am_recv_handler(w->worker, &hp);

    if (st != UCS_OK) {
        WST_ERROR(w->log, "ucp_worker_set_am_recv_handler(%u): %s", id,
                  ucs_status_string(st));
        return wst_status_from_ucs(st);
    }
    return WST_OK;
}

static wst_status_t ucx_init(wst_worker_t *w)
{
    ucp_config_t *config = NULL;
    ucs_status_t st;

    st = ucp_config_read(NULL, NULL, &config);
    if (st != UCS_OK)
        goto err;
    ucp_params_t cp = {
        .field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME,
        .features = UCP_FEATURE_AM | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP,
        .name = "wstream",
    };
    st = ucp_init(&cp, config, &w->context);
    ucp_config_release(config);
    if (st != UCS_OK)
        goto err;

    ucp_context_attr_t ca = {.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES};
    if (ucp_context_query(w->context, &ca) == UCS_OK)
        w->supports_cuda = wst_ucx_mem_types_have_cuda(ca.memory_types);

    ucp_worker_params_t wp = {
        .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
        .thread_mode = UCS_THREAD_MODE_SINGLE,
    };
    st = ucp_worker_create(w->context, &wp, &w->worker);
    if (st != UCS_OK)
        goto err_cleanup_context;
    st = ucp_worker_get_efd(w->worker, &w->ucp_fd);
    if (st != UCS_OK)
        goto err_destroy_worker;
    st = ucp_worker_get_address(w->worker, &w->address, &w->address_len);
    if (st != UCS_OK)
        goto err_destroy_worker;
    if (set_am_handler(w, WST_AM_CONTROL, am_control_cb) != WST_OK ||
        set_am_handler(w, WST_AM_DATA, am_data_cb) != WST_OK) {
        st = UCS_ERR_NO_RESOURCE;
        goto err_release_address;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = w->ucp_fd};
    if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->ucp_fd, &ev) != 0) {
        st = UCS_ERR_IO_ERROR;
        goto err_release_address;
    }
    return WST_OK;

err_release_address:
    ucp_worker_release_address(w->worker, w->address);
    w->address = NULL;
err_destroy_worker:
    ucp_worker_destroy(w->worker);
    w->worker = NULL;
err_cleanup_context:
    ucp_cleanup(w->context);
    w->context = NULL;
err:
    WST_ERROR(w->log, "ucx initialisation failed: %s", ucs_status_string(st));
    return wst_status_from_ucs(st);
}

/* Bounded: at shutdown a dead peer must not keep us here. */
static void wait_request(wst_worker_t *w, ucs_status_ptr_t req)
{
    uint64_t deadline = wst_now_ns() + 2000000000ull;

    if (req == NULL || UCS_PTR_IS_ERR(req))
        return;
    while (ucp_request_check_status(req) == UCS_INPROGRESS &&
           wst_now_ns() < deadline)
        ucp_worker_progress(w->worker);
    ucp_request_free(req);
}

static void ucx_fini(wst_worker_t *w)
{
    while (w->parked != NULL) {
        struct wst_parked_data *pk = w->parked;
        w->parked = pk->next;
        parked_free(w, pk);
    }
    w->parked_tail = NULL;
    while (w->conns != NULL)
        wst_conn_close(w->conns);
    if (w->listener != NULL)
        ucp_listener_destroy(w->listener);
    close_pending(w);
    close_graveyard(w);
    uint64_t deadline = wst_now_ns() + 2000000000ull;
    while (w->closing > 0 && wst_now_ns() < deadline)
        ucp_worker_progress(w->worker);
    ucp_request_param_t fp = {.op_attr_mask = 0};
    wait_request(w, ucp_worker_flush_nbx(w->worker, &fp));
    ucp_worker_release_address(w->worker, w->address);
    ucp_worker_destroy(w->worker);
    ucp_cleanup(w->context);
}

static struct wst_post *take_posts(wst_worker_t *w)
{
    uint64_t v;

    /* Drain the eventfd first: a post racing with this sees a fresh wake. */
    if (read(w->evfd, &v, sizeof(v)) < 0 && errno != EAGAIN)
        WST_WARN(w->log, "eventfd read: %s", strerror(errno));
    pthread_mutex_lock(&w->lock);
    struct wst_post *p = w->head;
    w->head = w->tail = NULL;
    pthread_mutex_unlock(&w->lock);
    return p;
}

static int run_posts(wst_worker_t *w)
{
    int n = 0;

    for (struct wst_post *p = take_posts(w); p != NULL; n++) {
        struct wst_post *next = p->next;
        p->fn(p->arg);
        free(p);
        p = next;
    }
    return n;
}

/* Sends heartbeats that are due and fails connections gone silent. The
 * failure callback may close connections, so walk a snapshot. */
static void heartbeat_tick(wst_worker_t *w, uint64_t now)
{
    struct wst_conn *silent[64];
    size_t n_silent = 0;
    struct wst_conn *next;

    for (struct wst_conn *c = w->conns; c != NULL; c = next) {
        next = c->next; /* closing unlinks c */
        if (c->close_at != 0 && now >= c->close_at)
            wst_conn_close(c);
    }
    for (struct wst_conn *c = w->conns; c != NULL; c = c->next) {
        if (c->failed)
            continue;
        if (w->hb_interval_ns == 0)
            continue;
        if (now - c->last_rx > w->hb_timeout_ns) {
            if (n_silent < sizeof(silent) / sizeof(silent[0]))
                silent[n_silent++] = c;
            continue;
        }
        if (now - c->last_tx >= w->hb_interval_ns) {
            void *copy = malloc(w->hb_len);
            if (copy == NULL)
                continue;
            memcpy(copy, w->hb_msg, w->hb_len);
            c->last_tx = now;
            wst_conn_send(c, copy, w->hb_len);
        }
    }
    for (size_t i = 0; i < n_silent; i++) {
        char why[96];
        snprintf(why, sizeof(why), "no message for %.1f s",
                 (double)(now - silent[i]->last_rx) / 1e9);
        conn_fail(silent[i], WST_ERR_TIMED_OUT, why);
    }
}

#define BURST_NS (10ull * 1000000ull) /* one progress burst at most */

static void progress_loop(wst_worker_t *w)
{
    uint64_t tick_ns = (uint64_t)w->tick_ms * 1000000ull;
    uint64_t next_tick = wst_now_ns() + tick_ns;

    while (!w->stop) {
        int busy = run_posts(w);
        /* Bounded in calls and in time: under a steady stream progress
         * never returns 0, and the tick below (heartbeats, deadlines) must
         * still run. A busy agent that stopped sending heartbeats was
         * declared dead by its senders (seen under ASan); a 6 GB refit on
         * a VM where the kernel's socket copies were slow failed on a 5 s
         * peer timeout until bursts were bounded in time (NOTES.md). */
        uint64_t burst_end = wst_now_ns() + BURST_NS;
        for (int i = 0; i < 256 && ucp_worker_progress(w->worker) != 0; i++) {
            busy = 1;
            if (wst_now_ns() >= burst_end)
                break;
        }
        if (w->to_close != NULL) {
            close_pending(w);
            busy = 1;
        }
        uint64_t now = wst_now_ns();
        if (now >= next_tick) {
            heartbeat_tick(w, now);
            if (w->ops.tick != NULL)
                w->ops.tick(w->ops.arg);
            next_tick = now + tick_ns;
        }
        if (busy || w->stop)
            continue;
        if (ucp_worker_arm(w->worker) == UCS_ERR_BUSY)
            continue;
        struct epoll_event evs[2];
        int timeout =
            w->busy > 0 ? 1 : (int)((next_tick - now) / 1000000ull) + 1;
        if (epoll_wait(w->epfd, evs, 2, timeout) < 0 && errno != EINTR)
            WST_WARN(w->log, "epoll_wait: %s", strerror(errno));
    }
}

static void *progress_main(void *arg)
{
    wst_worker_t *w = arg;
    wst_status_t status = ucx_init(w);

    pthread_mutex_lock(&w->lock);
    w->start_status = status;
    w->start_done = 1;
    pthread_cond_signal(&w->started);
    pthread_mutex_unlock(&w->lock);
    if (status != WST_OK)
        return NULL;
    progress_loop(w);
    run_posts(w); /* callers of wst_worker_call must not wait forever */
    ucx_fini(w);
    return NULL;
}

wst_status_t wst_worker_create(const struct wst_worker_params *params,
                               wst_worker_t **worker_p)
{
    wst_status_t status = WST_ERR_NO_MEMORY;
    wst_worker_t *w = calloc(1, sizeof(*w));

    if (w == NULL)
        return WST_ERR_NO_MEMORY;
    w->log = params->log;
    w->ops = params->ops;
    w->tick_ms = params->tick_ms ? params->tick_ms : 100;
    w->max_control_msg =
        params->max_control_msg ? params->max_control_msg : (64u << 20);
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->started, NULL);
    if (params->heartbeat.interval_s > 0 && params->heartbeat.msg_len > 0) {
        w->hb_msg = malloc(params->heartbeat.msg_len);
        if (w->hb_msg == NULL)
            goto err_free;
        memcpy(w->hb_msg, params->heartbeat.msg, params->heartbeat.msg_len);
        w->hb_len = params->heartbeat.msg_len;
        w->hb_interval_ns = (uint64_t)(params->heartbeat.interval_s * 1e9);
        w->hb_timeout_ns = (uint64_t)(params->heartbeat.timeout_s * 1e9);
    }
    w->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (w->evfd < 0)
        goto err_free;
    w->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (w->epfd < 0)
        goto err_close_evfd;
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = w->evfd};
    if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->evfd, &ev) != 0)
        goto err_close_epfd;
    if (pthread_create(&w->thread, NULL, progress_main, w) != 0)
        goto err_close_epfd;
    pthread_mutex_lock(&w->lock);
    while (!w->start_done)
        pthread_cond_wait(&w->started, &w->lock);
    pthread_mutex_unlock(&w->lock);
    status = w->start_status;
    if (status != WST_OK) {
        pthread_join(w->thread, NULL);
        goto err_close_epfd;
    }
    *worker_p = w;
    return WST_OK;

err_close_epfd:
    close(w->epfd);
err_close_evfd:
    close(w->evfd);
err_free:
    free(w->hb_msg);
    pthread_cond_destroy(&w->started);
    pthread_mutex_destroy(&w->lock);
    free(w);
    return status;
}

static void set_stop(void *arg)
{
    ((wst_worker_t *)arg)->stop = 1;
}

void wst_worker_destroy(wst_worker_t *w)
{
    if (w == NULL)
        return;
    wst_worker_post(w, set_stop, w);
    pthread_join(w->thread, NULL);
    for (struct wst_post *p = w->head; p != NULL;) {
        struct wst_post *next = p->next;
        free(p);
        p = next;
    }
    close(w->epfd);
    close(w->evfd);
    free(w->hb_msg);
    pthread_cond_destroy(&w->started);
    pthread_mutex_destroy(&w->lock);
    free(w);
}

wst_status_t wst_worker_post(wst_worker_t *w, wst_worker_fn fn, void *arg)
{
    struct wst_post *p = malloc(sizeof(*p));
    uint64_t one = 1;

    if (p == NULL)
        return WST_ERR_NO_MEMORY;
    p->next = NULL;
    p->fn = fn;
    p->arg = arg;
    pthread_mutex_lock(&w->lock);
    if (w->tail != NULL)
        w->tail->next = p;
    else
        w->head = p;
    w->tail = p;
    pthread_mutex_unlock(&w->lock);
    if (write(w->evfd, &one, sizeof(one)) < 0 && errno != EAGAIN)
        return WST_ERR_IO;
    return WST_OK;
}

struct wst_call {
    wst_worker_fn fn;
    void *arg;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int done;
};

static void run_call(void *arg)
{
    struct wst_call *c = arg;

    c->fn(c->arg);
    pthread_mutex_lock(&c->lock);
    c->done = 1;
    pthread_cond_signal(&c->cond);
    pthread_mutex_unlock(&c->lock);
}

wst_status_t wst_worker_call(wst_worker_t *w, wst_worker_fn fn, void *arg)
{
    struct wst_call c = {.fn = fn, .arg = arg};
    wst_status_t status;

    pthread_mutex_init(&c.lock, NULL);
    pthread_cond_init(&c.cond, NULL);
    status = wst_worker_post(w, run_call, &c);
    if (status == WST_OK) {
        pthread_mutex_lock(&c.lock);
        while (!c.done)
            pthread_cond_wait(&c.cond, &c.lock);
        pthread_mutex_unlock(&c.lock);
    }
    pthread_cond_destroy(&c.cond);
    pthread_mutex_destroy(&c.lock);
    return status;
}

static wst_status_t resolve(const wst_worker_t *w, const char *host,
                            uint16_t port, struct sockaddr_storage *ss,
                            socklen_t *len_p)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    char service[16];
    int rc;

    snprintf(service, sizeof(service), "%u", port);
    rc = getaddrinfo(host, service, &hints, &res);
    if (rc != 0 || res == NULL) {
        WST_ERROR(w->log, "cannot resolve '%s': %s", host, gai_strerror(rc));
        return WST_ERR_UNREACHABLE;
    }
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len_p = res->ai_addrlen;
    freeaddrinfo(res);
    return WST_OK;
}

static struct wst_conn *conn_new(wst_worker_t *w, const char *name)
{
    struct wst_conn *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return NULL;
    c->worker = w;
    c->last_rx = c->last_tx = wst_now_ns();
    snprintf(c->name, sizeof(c->name), "%s", name);
    c->next = w->conns;
    w->conns = c;
    return c;
}

static void conn_unlink(struct wst_conn *c)
{
    for (struct wst_conn **pp = &c->worker->conns; *pp != NULL;
         pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            return;
        }
    }
}

static void conn_request_cb(ucp_conn_request_h req, void *arg)
{
    wst_worker_t *w = arg;
    char name[96] = "unknown peer";
    ucp_conn_request_attr_t ra = {.field_mask =
                                      UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR};

    if (ucp_conn_request_query(req, &ra) == UCS_OK &&
        ra.client_address.ss_family == AF_INET) {
        struct sockaddr_in *sin = (struct sockaddr_in *)&ra.client_address;
        char ip[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &sin->sin_addr, ip, sizeof(ip));
        snprintf(name, sizeof(name), "%s:%u", ip, ntohs(sin->sin_port));
    }
    struct wst_conn *c = conn_new(w, name);
    if (c == NULL) {
        ucp_listener_reject(w->listener, req);
        return;
    }
    ucp_ep_params_t ep = {
        .field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST |
                      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
        .conn_request = req,
        .err_mode = UCP_ERR_HANDLING_MODE_PEER,
        .err_handler = {.cb = ep_error_cb, .arg = c},
    };
    ucs_status_t st = ucp_ep_create(w->worker, &ep, &c->ep);
    if (st != UCS_OK) {
        WST_WARN(w->log, "accepting %s: %s", name, ucs_status_string(st));
        conn_unlink(c);
        free(c);
        return;
    }
    WST_DEBUG(w->log, "accepted control connection from %s", name);
    if (w->ops.accepted != NULL)
        w->ops.accepted(w->ops.arg, c);
}

wst_status_t wst_worker_listen(wst_worker_t *w, const char *host, uint16_t port,
                               uint16_t *port_p)
{
    struct sockaddr_storage ss;
    socklen_t sslen;
    wst_status_t status = resolve(w, host, port, &ss, &sslen);

    if (status != WST_OK)
        return status;
    ucp_listener_params_t lp = {
        .field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
                      UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
        .sockaddr = {.addr = (struct sockaddr *)&ss, .addrlen = sslen},
        .conn_handler = {.cb = conn_request_cb, .arg = w},
    };
    ucs_status_t st = ucp_listener_create(w->worker, &lp, &w->listener);
    if (st != UCS_OK) {
        WST_ERROR(w->log, "listen on %s:%u: %s", host, port,
                  ucs_status_string(st));
        return wst_status_from_ucs(st);
    }
    ucp_listener_attr_t la = {.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR};
    st = ucp_listener_query(w->listener, &la);
    if (st != UCS_OK) {
        ucp_listener_destroy(w->listener);
        w->listener = NULL;
        return wst_status_from_ucs(st);
    }
    *port_p = ntohs(((struct sockaddr_in *)&la.sockaddr)->sin_port);
    return WST_OK;
}

wst_status_t wst_worker_address(wst_worker_t *w, const void **addr_p,
                                size_t *len_p)
{
    *addr_p = w->address;
    *len_p = w->address_len;
    return WST_OK;
}

wst_status_t wst_worker_mem_map(wst_worker_t *w, void *ptr, size_t len,
                                ucp_mem_h *memh_p)
{
    ucp_mem_map_params_t mp = {
        .field_mask =
            UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
        .address = ptr,
        .length = len,
    };
    ucs_status_t st = ucp_mem_map(w->context, &mp, memh_p);

    if (st != UCS_OK) {
        WST_ERROR(w->log, "ucp_mem_map of %zu bytes at %p: %s", len, ptr,
                  ucs_status_string(st));
        return wst_status_from_ucs(st);
    }
    return WST_OK;
}

void wst_worker_mem_unmap(wst_worker_t *w, ucp_mem_h memh)
{
    if (memh != NULL)
        ucp_mem_unmap(w->context, memh);
}

wst_status_t wst_worker_rkey_pack(wst_worker_t *w, ucp_mem_h memh, void **buf_p,
                                  size_t *len_p)
{
    void *rkey = NULL;
    size_t len = 0;
    ucs_status_t st = ucp_rkey_pack(w->context, memh, &rkey, &len);

    if (st != UCS_OK) {
        WST_ERROR(w->log, "ucp_rkey_pack: %s", ucs_status_string(st));
        return wst_status_from_ucs(st);
    }
    void *copy = malloc(len ? len : 1);
    if (copy == NULL) {
        ucp_rkey_buffer_release(rkey);
        return WST_ERR_NO_MEMORY;
    }
    memcpy(copy, rkey, len);
    ucp_rkey_buffer_release(rkey);
    *buf_p = copy;
    *len_p = len;
    return WST_OK;
}

int wst_worker_supports_cuda(const wst_worker_t *w)
{
    return w->supports_cuda;
}

void wst_worker_busy(wst_worker_t *w, int delta)
{
    w->busy += delta;
}

ucp_worker_h wst_worker_ucp(wst_worker_t *w)
{
    return w->worker;
}

const struct wst_logger *wst_worker_log(wst_worker_t *w)
{
    return w->log;
}

wst_status_t wst_conn_connect(wst_worker_t *w, const char *host, uint16_t port,
                              wst_conn_t **conn_p)
{
    struct sockaddr_storage ss;
    socklen_t sslen;
    char name[96];
    wst_status_t status = resolve(w, host, port, &ss, &sslen);

    if (status != WST_OK)
        return status;
    snprintf(name, sizeof(name), "%s:%u", host, port);
    struct wst_conn *c = conn_new(w, name);
    if (c == NULL)
        return WST_ERR_NO_MEMORY;
    ucp_ep_params_t ep = {
        .field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
        .flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
        .sockaddr = {.addr = (struct sockaddr *)&ss, .addrlen = sslen},
        .err_mode = UCP_ERR_HANDLING_MODE_PEER,
        .err_handler = {.cb = ep_error_cb, .arg = c},
    };
    ucs_status_t st = ucp_ep_create(w->worker, &ep, &c->ep);
    if (st != UCS_OK) {
        WST_ERROR(w->log, "connect to %s: %s", name, ucs_status_string(st));
        conn_unlink(c);
        free(c);
        return wst_status_from_ucs(st);
    }
    *conn_p = c;
    return WST_OK;
}

static void send_done(void *request, ucs_status_t status, void *user_data)
{
    (void)status; /* a failed control send surfaces through ep_error_cb */
    free(user_data);
    if (request != NULL)
        ucp_request_free(request);
}

wst_status_t wst_conn_send(wst_conn_t *c, void *buf, size_t len)
{
    if (c->failed) {
        free(buf);
        return WST_ERR_PEER_FAILED;
    }
    ucp_request_param_t sp = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                        UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS,
        .cb.send = send_done,
        .user_data = buf,
        .flags = UCP_AM_SEND_FLAG_REPLY,
    };
    ucs_status_ptr_t req =
        ucp_am_send_nbx(c->ep, WST_AM_CONTROL, NULL, 0, buf, len, &sp);
    if (req == NULL) {
        free(buf);
        return WST_OK;
    }
    if (UCS_PTR_IS_ERR(req)) {
        free(buf);
        WST_WARN(c->worker->log, "send to %s: %s", c->name,
                 ucs_status_string(UCS_PTR_STATUS(req)));
        return wst_status_from_ucs(UCS_PTR_STATUS(req));
    }
    return WST_OK;
}

/* Reads the lanes UCX chose from ucp_ep_print_info: 1.13 has no query for
 * them. Lines look like
 *   "#   lane[2]:  4:cma/memory.0 md[3]  -> md[3]/cma/sysdev[255] rma_bw#0"
 * and become "cma/memory[rma_bw]" (roles without their '#n' index).
 * ucp_put_nbx runs on a lane with the "rma" role; when no transport can
 * do put short/bcopy (cma and knem only do zero-copy, TCP does none), UCX
 * 1.13 emulates puts over active messages and shows no "rma" lane at all:
 * rma_bw lanes serve rendezvous only. Measured: "put" over sm,tcp ran in
 * uct_mm_ep_am_bcopy + ucp_put_handler (two copies), AM rendezvous over
 * the same lanes used cma (NOTES.md). So only an "rma" role counts. */
/* Whether the comma-separated 'roles' holds exactly 'role'. */
static int has_role(const char *roles, const char *role)
{
    size_t n = strlen(role);

    for (const char *p = roles; (p = strstr(p, role)) != NULL; p += n)
        if ((p == roles || p[-1] == ',') && (p[n] == ',' || p[n] == '\0'))
            return 1;
    return 0;
}

static void describe_lanes(ucp_ep_h ep, char *out, size_t outlen,
                           int *rma_real_p)
{
    char *text = NULL;
    size_t textlen = 0;
    FILE *f = open_memstream(&text, &textlen);
    size_t used = 0;

    *rma_real_p = 0;
    if (outlen > 0)
        out[0] = '\0';
    if (f == NULL)
        return;
    ucp_ep_print_info(ep, f);
    fclose(f);
    for (char *line = strtok(text, "\n"); line != NULL;
         line = strtok(NULL, "\n")) {
        char *lane = strstr(line, "lane[");
        char *arrow = lane != NULL ? strstr(lane, "->") : NULL;
        char tl[64] = "", roles[128] = "";
        if (arrow == NULL ||
            sscanf(strchr(lane, ':') + 1, " %*d:%63s", tl) != 1)
            continue;
        char *dot = strrchr(tl, '.');
        if (dot != NULL)
            *dot = '\0';
        /* Roles follow the remote md/tl/sysdev token. */
        char *tok = strchr(arrow + 3, ' ');
        size_t rused = 0;
        while (tok != NULL && rused < sizeof(roles)) {
            while (*tok == ' ')
                tok++;
            size_t n = strcspn(tok, " #");
            if (n > 0)
                rused +=
                    (size_t)snprintf(roles + rused, sizeof(roles) - rused,
                                     "%s%.*s", rused ? "," : "", (int)n, tok);
            tok = strchr(tok, ' ');
        }
        if (has_role(roles, "rma") && strncmp(tl, "tcp", 3) != 0)
            *rma_real_p = 1;
        if (used < outlen)
            used += (size_t)snprintf(out + used, outlen - used, "%s%s[%s]",
                                     used ? " " : "", tl, roles);
    }
    free(text);
}

wst_status_t wst_conn_open_data(wst_conn_t *c, const void *addr,
                                size_t addr_len, int peer_errors, char *lanes,
                                size_t lanes_len, int *rma_real_p)
{
    wst_worker_t *w = c->worker;

    (void)addr_len; /* the address is self-describing; length checked by
                       the codec */
    /* Without peer mode there is no error handler: such an endpoint may
     * outlive c in the graveyard and must not point at it. */
    ucp_ep_params_t ep = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      (peer_errors ? UCP_EP_PARAM_FIELD_ERR_HANDLER : 0),
        .address = addr,
        .err_mode = peer_errors ? UCP_ERR_HANDLING_MODE_PEER
                                : UCP_ERR_HANDLING_MODE_NONE,
        .err_handler = {.cb = ep_error_cb, .arg = c},
    };
    c->data_peer_errors = peer_errors;
    ucs_status_t st = ucp_ep_create(w->worker, &ep, &c->data_ep);
    if (st != UCS_OK) {
        WST_ERROR(w->log, "data endpoint to %s: %s", c->name,
                  ucs_status_string(st));
        c->data_ep = NULL;
        return wst_status_from_ucs(st);
    }
    describe_lanes(c->data_ep, lanes, lanes_len, rma_real_p);
    return WST_OK;
}

ucp_ep_h wst_conn_data_ep(wst_conn_t *c)
{
    return c->data_ep;
}

static void conn_release_ref(struct wst_conn *c)
{
    if (--c->close_refs == 0) {
        c->worker->closing--;
        free(c);
    }
}

static void close_done(void *request, ucs_status_t status, void *user_data)
{
    (void)status;
    ucp_request_free(request);
    conn_release_ref(user_data);
}

static void ep_close_force(struct wst_conn *c, ucp_ep_h ep)
{
    ucp_request_param_t cp = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK |
                        UCP_OP_ATTR_FIELD_USER_DATA,
        .flags = UCP_EP_CLOSE_FLAG_FORCE,
        .cb.send = close_done,
        .user_data = c,
    };
    ucs_status_ptr_t req;

    c->close_refs++;
    req = ucp_ep_close_nbx(ep, &cp);
    if (req == NULL || UCS_PTR_IS_ERR(req))
        conn_release_ref(c);
}

void wst_conn_close(wst_conn_t *c)
{
    /* Usually runs inside a UCX callback: only unlink and mark it here
     * (failed silences its error handlers); close_pending does the rest
     * once ucp_worker_progress has returned. */
    wst_worker_t *w = c->worker;

    conn_unlink(c);
    c->failed = 1;
    c->user = NULL;
    c->next = w->to_close;
    w->to_close = c;
}

static void bury(wst_worker_t *w, ucp_ep_h ep)
{
    ucp_ep_h *grown =
        realloc(w->graveyard, (w->n_graveyard + 1) * sizeof(*grown));

    if (grown == NULL) {
        /* Leaking the endpoint is the safe failure here. */
        WST_WARN(w->log, "no memory to park a data endpoint: leaked");
        return;
    }
    w->graveyard = grown;
    w->graveyard[w->n_graveyard++] = ep;
}

/* Outside UCX callbacks: closes the endpoints of connections closed since
 * the last call. */
static void close_pending(wst_worker_t *w)
{
    while (w->to_close != NULL) {
        struct wst_conn *c = w->to_close;
        w->to_close = c->next;
        w->closing++;
        c->close_refs = 1;
        if (c->data_ep != NULL && c->data_peer_errors)
            ep_close_force(c, c->data_ep);
        else if (c->data_ep != NULL)
            bury(w, c->data_ep);
        if (c->ep != NULL)
            ep_close_force(c, c->ep);
        conn_release_ref(c);
    }
}

static void graveyard_close_done(void *request, ucs_status_t status,
                                 void *user_data)
{
    (void)status;
    (void)user_data;
    ucp_request_free(request);
}

/* At shutdown: no late message can arrive once the worker is gone. */
static void close_graveyard(wst_worker_t *w)
{
    ucp_request_param_t cp = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK,
        .flags = UCP_EP_CLOSE_FLAG_FORCE,
        .cb.send = graveyard_close_done,
    };

    for (size_t i = 0; i < w->n_graveyard; i++)
        (void)ucp_ep_close_nbx(w->graveyard[i], &cp);
    free(w->graveyard);
    w->graveyard = NULL;
    w->n_graveyard = 0;
}

void wst_conn_close_later(wst_conn_t *c, double linger_s)
{
    c->failed = 1;
    c->user = NULL;
    c->close_at = wst_now_ns() + (uint64_t)(linger_s * 1e9);
    if (c->close_at == 0)
        c->close_at = 1;
}

void wst_conn_set_user(wst_conn_t *c, void *user)
{
    c->user = user;
}

void *wst_conn_user(const wst_conn_t *c)
{
    return c->user;
}

const char *wst_conn_name(const wst_conn_t *c)
{
    return c->name;
}
