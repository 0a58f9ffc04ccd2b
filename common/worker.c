/* worker.c - the progress thread and its UCX context and worker.
 *
 * See worker.h for the threading model. Internals worth knowing:
 *  - posted functions live in a mutex-protected singly linked FIFO; the
 *    eventfd is written by the post that finds the FIFO empty, and
 *    drained by the thread before it takes the FIFO;
 *  - the thread's loop: run posted functions, progress UCX until idle, run
 *    the tick when due, arm the worker, and sleep in epoll when arm says
 *    nothing is pending.
 *  - epoll also watches our sockets (channel.c): the listener and each
 *    control connection; their events are handed to wst_channel_event;
 * The other pieces of the module: conn.c and conn_close.c (connections),
 * listener.c and channel.c (control channels), data_am.c (data messages),
 * heartbeat.c, memory.c; worker_internal.h holds the state they share.
 */
#include "worker.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "clock.h"
#include "lanes.h"
#include "thread_name.h"
#include "ucx_status.h"
#include "worker_internal.h"

struct wst_post {
    struct wst_post *next;
    wst_worker_fn fn;
    void *arg;
};

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

/* Probes this process's transports (once, for every data endpoint's
 * decision too) and applies the RMA rule to them. */
static void decide_rma(wst_worker_t *w)
{
    if (wst_transports_probe(w->log, &w->transports, &w->n_transports) !=
        WST_OK) {
        w->transports = NULL;
        w->n_transports = 0;
    }
    int real = wst_transports_rma_real(w->transports, w->n_transports,
                                       w->rma_why, sizeof(w->rma_why));
    char dev_why[sizeof(w->rma_why)];
    int dev = wst_transports_device_put(w->transports, w->n_transports, dev_why,
                                        sizeof(dev_why));
    switch (w->rma_rule) {
    case WST_WORKER_RMA_NEVER:
        w->rma = 0;
        snprintf(w->rma_why, sizeof(w->rma_why), "not asked for");
        break;
    case WST_WORKER_RMA_ALWAYS:
        w->rma = 1;
        break;
    case WST_WORKER_RMA_INITIATOR:
        if (!real && dev)
            snprintf(w->rma_why, sizeof(w->rma_why), "%s", dev_why);
        w->rma = real || dev;
        break;
    default:
        w->rma = real;
        break;
    }
    WST_DEBUG(w->log, "remote memory access %s: %s", w->rma ? "on" : "off",
              w->rma_why);
}

/* The interface that has IPv4 address 'ip' into name[len]; 0 if none. */
static int iface_of(const char *ip, char *name, size_t len)
{
    struct addrinfo hints = {.ai_family = AF_INET}, *res = NULL;
    struct ifaddrs *ifs = NULL;
    struct in_addr want;
    int found = 0;

    if (getaddrinfo(ip, NULL, &hints, &res) != 0 || res == NULL)
        return 0;
    want = ((struct sockaddr_in *)res->ai_addr)->sin_addr;
    freeaddrinfo(res);
    if (getifaddrs(&ifs) != 0)
        return 0;
    for (struct ifaddrs *i = ifs; i != NULL && !found; i = i->ifa_next) {
        if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET)
            continue;
        struct sockaddr_in *sin = (struct sockaddr_in *)i->ifa_addr;
        if (sin->sin_addr.s_addr == want.s_addr) {
            snprintf(name, len, "%s", i->ifa_name);
            found = 1;
        }
    }
    freeifaddrs(ifs);
    return found;
}

/* UCX's network transports on this lane's device (lane_devices), or else
 * on the interface of w->confine_ip only, so that its tcp transport does
 * not listen on every interface. An operator's own UCX_NET_DEVICES wins. */
static void confine_ucx(wst_worker_t *w, ucp_config_t *config)
{
    char ifname[64];
    unsigned lane = w->main != NULL ? w->lane_index : 0;
    int own = w->net_device[0] != '\0';
    int by_ip =
        w->confine_ip[0] != '\0' && strcmp(w->confine_ip, "0.0.0.0") != 0;

    if (!own && !by_ip)
        return;
    if (getenv("UCX_NET_DEVICES") != NULL) {
        WST_INFO(w->log,
                 "UCX_NET_DEVICES=%s set: data lane %u not confined to %s",
                 getenv("UCX_NET_DEVICES"), lane,
                 own ? w->net_device : w->confine_ip);
        w->net_device[0] = '\0'; /* not this lane's: say UCX's choice */
        return;
    }
    if (!own && !iface_of(w->confine_ip, ifname, sizeof(ifname))) {
        WST_WARN(w->log,
                 "no interface has address %s: UCX's transports may listen "
                 "on every interface",
                 w->confine_ip);
        return;
    }
    const char *dev = own ? w->net_device : ifname;
    ucs_status_t st = ucp_config_modify(config, "NET_DEVICES", dev);
    if (st != UCS_OK) {
        WST_WARN(w->log, "data lane %u: cannot confine UCX to %s: %s", lane,
                 dev, ucs_status_string(st));
        return;
    }
    if (own)
        WST_INFO(w->log, "data lane %u on network device %s", lane, dev);
    else /* Said at start: an RDMA port is then left out unless named. */
        WST_INFO(w->log,
                 "UCX's network transports confined to interface %s (%s); "
                 "set UCX_NET_DEVICES to choose others (an RDMA port)",
                 dev, w->confine_ip);
}

/* The UCX worker data arrives on: its data handler, its address, and its
 * wake-up fd in our epoll set. */
static ucs_status_t data_worker_open(wst_worker_t *w)
{
    ucs_status_t st;
    ucp_worker_params_t wp = {
        .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
        .thread_mode = UCS_THREAD_MODE_SINGLE,
    };

    st = ucp_worker_create(w->context, &wp, &w->worker);
    if (st != UCS_OK)
        return st;
    st = ucp_worker_get_efd(w->worker, &w->ucp_fd);
    if (st != UCS_OK)
        goto err_destroy_worker;
    st = ucp_worker_get_address(w->worker, &w->address, &w->address_len);
    if (st != UCS_OK)
        goto err_destroy_worker;
    if (set_am_handler(w, WST_AM_DATA, wst_data_am_recv) != WST_OK) {
        st = UCS_ERR_NO_RESOURCE;
        goto err_release_address;
    }
    /* ptr NULL: a wake-up only (channel.c's sockets carry their own). */
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->ucp_fd, &ev) != 0) {
        st = UCS_ERR_IO_ERROR;
        goto err_release_address;
    }
    return UCS_OK;

err_release_address:
    ucp_worker_release_address(w->worker, w->address);
    w->address = NULL;
err_destroy_worker:
    ucp_worker_destroy(w->worker);
    w->worker = NULL;
    return st;
}

/* Takes the data worker out of our epoll set and off w, and returns it:
 * nothing wakes us for it or progresses it any more. */
static ucp_worker_h data_worker_detach(wst_worker_t *w)
{
    ucp_worker_h worker = w->worker;

    epoll_ctl(w->epfd, EPOLL_CTL_DEL, w->ucp_fd, NULL);
    ucp_worker_release_address(worker, w->address);
    w->address = NULL;
    w->worker = NULL;
    return worker;
}

/* Once per process: which UCX was loaded and what memory it reaches, the
 * input of the device path's choice (common/movers/select.h). A UCX other
 * than the one built against (LD_LIBRARY_PATH) shows here. */
static void log_memory_types(wst_worker_t *w, uint64_t types)
{
    char names[160] = "";
    size_t at = 0;

    for (int t = 0; t < UCS_MEMORY_TYPE_LAST && at < sizeof(names); t++)
        if (types & UCS_BIT(t))
            at += (size_t)snprintf(names + at, sizeof(names) - at, "%s%s",
                                   at ? "," : "", ucs_memory_type_names[t]);
    WST_INFO(w->log, "UCX %s reaches memory types %s (0x%llx): %s",
             ucp_get_version_string(), names, (unsigned long long)types,
             wst_ucx_mem_types_have_cuda(types)
                 ? "CUDA-aware, device memory can be moved by UCX"
                 : "no CUDA support, device memory goes through host copies");
}

/* Whether its UCX moves device memory is known only from a context, so a
 * UCX that would run its new protocols by default is asked once with one
 * of its own first. */
int wst_worker_old_protocols(void)
{
    unsigned major = 0, minor = 0, release = 0;
    ucp_params_t cp = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                       .features = UCP_FEATURE_AM};
    ucp_context_attr_t ca = {.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES};
    ucp_context_h probe = NULL;
    int cuda;

    ucp_get_version(&major, &minor, &release);
    if (!wst_ucx_old_protocols(major, minor, getenv("UCX_PROTO_ENABLE"), 0))
        return 0;
    if (ucp_init(&cp, NULL, &probe) != UCS_OK)
        return 0; /* the real context will say why */
    cuda = ucp_context_query(probe, &ca) == UCS_OK &&
           wst_ucx_mem_types_have_cuda(ca.memory_types);
    ucp_cleanup(probe);
    return wst_ucx_old_protocols(major, minor, NULL, cuda);
}

uint64_t wst_worker_tcp_rx_seg(const wst_worker_t *worker)
{
    return worker->tcp_rx_seg;
}

/* The key for ucp_config_modify when this process sets the segment. */
static const char *tcp_seg_key_to_set(void)
{
    unsigned major = 0, minor = 0, release = 0;

    if (getenv("UCX_TCP_RX_SEG_SIZE") != NULL)
        return NULL;
    ucp_get_version(&major, &minor, &release);
    return wst_ucx_tcp_seg_key(major, minor);
}

uint64_t wst_worker_tcp_rx_seg_set(void)
{
    return tcp_seg_key_to_set() != NULL ? WST_UCX_TCP_RX_SEG : 0;
}

/* Once per process: which protocols carry the data, and how to choose
 * (the new ones move tcp data with peer-error handling at under half the
 * old ones' rate). */
static void note_protocols(wst_worker_t *w)
{
    unsigned major = 0, minor = 0, release = 0;

    ucp_get_version(&major, &minor, &release);
    if (w->old_protocols)
        WST_INFO(w->log,
                 "UCX %u.%u moves no device memory here: its old protocols "
                 "carry the data (UCX_PROTO_ENABLE=n; its new ones, its "
                 "default from 1.16, move tcp data at under half their "
                 "rate: NOTES.md); set UCX_PROTO_ENABLE to choose",
                 major, minor);
    else if (wst_ucx_proto_v2(major, minor, getenv("UCX_PROTO_ENABLE")))
        WST_INFO(w->log,
                 "UCX %u.%u runs its new protocols (UCX_PROTO_ENABLE, on by "
                 "default from 1.16): over tcp they move data at under half "
                 "the old ones' rate (NOTES.md); set UCX_PROTO_ENABLE=n on "
                 "agents and senders whose data crosses tcp in host memory",
                 major, minor);
    if (getenv("UCX_TCP_RX_SEG_SIZE") == NULL)
        WST_INFO(w->log,
                 "UCX's tcp transport receives in %llu KiB segments (UCX's "
                 "default 64 KiB%s: NOTES.md); set UCX_TCP_RX_SEG_SIZE to "
                 "choose, no larger on a sender than on its agents",
                 (unsigned long long)(w->tcp_rx_seg >> 10),
                 w->tcp_rx_seg == WST_UCX_TCP_RX_SEG_UCX
                     ? ", kept: wstream sets it on UCX 1.13 and 1.18 only"
                     : "");
    else if (w->tcp_rx_seg == 0)
        WST_WARN(w->log,
                 "UCX_TCP_RX_SEG_SIZE=%s does not parse as a size here: "
                 "peers cannot check that their tcp fragments fit",
                 getenv("UCX_TCP_RX_SEG_SIZE"));
}

static wst_status_t ucx_init(wst_worker_t *w)
{
    ucp_config_t *config = NULL;
    ucs_status_t st;

    decide_rma(w);
    w->old_protocols =
        w->main != NULL ? w->main->old_protocols : wst_worker_old_protocols();
    st = ucp_config_read(NULL, NULL, &config);
    if (st != UCS_OK)
        goto err;
    confine_ucx(w, config);
    if (w->old_protocols)
        st = ucp_config_modify(config, "PROTO_ENABLE", "n");
    /* Every worker of a process gets the same segment (its lanes' peers
     * are told one value); a UCP key it does not know goes to the UCT
     * transports' configs. */
    const char *seg_key = tcp_seg_key_to_set();
    w->tcp_rx_seg =
        wst_ucx_tcp_rx_seg(getenv("UCX_TCP_RX_SEG_SIZE"), seg_key != NULL);
    if (st == UCS_OK && seg_key != NULL) {
        char seg[32];
        snprintf(seg, sizeof(seg), "%llu",
                 (unsigned long long)WST_UCX_TCP_RX_SEG);
        st = ucp_config_modify(config, seg_key, seg);
    }
    if (st != UCS_OK) {
        ucp_config_release(config);
        goto err;
    }
    ucp_params_t cp = {
        .field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME,
        .features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP |
                    (w->rma ? UCP_FEATURE_RMA : 0),
        .name = "wstream",
    };
    st = ucp_init(&cp, config, &w->context);
    ucp_config_release(config);
    if (st != UCS_OK)
        goto err;

    ucp_context_attr_t ca = {.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES};
    if (ucp_context_query(w->context, &ca) == UCS_OK) {
        w->supports_cuda = wst_ucx_mem_types_have_cuda(ca.memory_types);
        if (w->main == NULL)
            log_memory_types(w, ca.memory_types);
    }
    if (w->main == NULL)
        note_protocols(w);

    st = data_worker_open(w);
    if (st != UCS_OK)
        goto err_cleanup_context;
    return WST_OK;

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

/* The first connection (from 'c' on) that has a data endpoint. */
static struct wst_conn *with_data_ep(struct wst_conn *c)
{
    while (c != NULL && c->data_ep == NULL)
        c = c->next;
    return c;
}

/* Replaces the data worker with a new one (see wst_worker_data_reset).
 * Outside ucp_worker_progress. The old one is never progressed again, so
 * nothing it still holds lands anywhere; nor is it destroyed: UCX 1.13
 * asserts when a worker goes with receives its endpoints still track,
 * and it cancels them only through progress, which could land them. */
static void data_reset(wst_worker_t *w)
{
    size_t n = w->n_receiving;
    struct wst_conn *c;

    w->data_reset_due = 0;
    w->in_progress = 1; /* no reset from the callbacks below */
    /* Its endpoints stay with it. Their connections fail: no data flows
     * on them any more. */
    while ((c = with_data_ep(w->conns)) != NULL) {
        c->data_ep = NULL;
        wst_conn_fail(c, WST_ERR_PEER_FAILED, "the data worker was reset");
    }
    for (c = w->to_close; c != NULL; c = c->next)
        c->data_ep = NULL;
    w->n_graveyard = 0;
    wst_data_am_drop_parked(w, 0);
    w->retired[w->n_retired++] = data_worker_detach(w);
    /* UCX never reports them now: each is cancelled here. */
    wst_data_am_cancel_receiving(w);
    if (w->main != NULL)
        w->lane_gen++; /* messages held for the old worker are void */
    ucs_status_t st = data_worker_open(w);
    w->in_progress = 0;
    wst_lanes_data_reset(w); /* theirs are of the same refit */
    if (st != UCS_OK) {
        /* No data can arrive; senders are told (an empty address) until
         * wst_worker_address makes one. */
        WST_ERROR(w->log,
                  "data worker reset: no new UCX worker yet (%s); tried "
                  "again when a sender connects",
                  ucs_status_string(st));
        return;
    }
    WST_INFO(w->log,
             "data worker%s reset: %zu receives in flight will never land "
             "(%d of %d retired workers held); new UCX address",
             w->main != NULL ? " of a lane" : "", n, w->n_retired,
             WST_DATA_RETIRED_MAX);
}

int wst_worker_data_reset(wst_worker_t *w)
{
    if (w->data_reset_due || w->worker == NULL ||
        w->n_retired == WST_DATA_RETIRED_MAX)
        return 0;
    if (w->in_progress)
        w->data_reset_due = 1;
    else
        data_reset(w);
    return 1;
}

size_t wst_worker_data_receiving(const wst_worker_t *w)
{
    return w->n_receiving + w->n_relayed;
}

int wst_worker_data_reset_room(const wst_worker_t *w)
{
    int room = WST_DATA_RETIRED_MAX - w->n_retired;
    int lanes = wst_lanes_reset_room(w);

    return lanes < room ? lanes : room;
}

static void ucx_fini(wst_worker_t *w)
{
    wst_data_am_drop_parked(w, 1);
    while (w->conns != NULL)
        wst_conn_close(w->conns);
    while (w->unauth != NULL)
        wst_conn_close(w->unauth);
    if (w->listen_fd >= 0) {
        close(w->listen_fd);
        w->listen_fd = -1;
    }
    wst_conn_close_pending(w);
    wst_conn_close_graveyard(w);
    uint64_t deadline = wst_now_ns() + 2000000000ull;
    while (w->worker != NULL && w->closing > 0 && wst_now_ns() < deadline)
        ucp_worker_progress(w->worker);
    if (w->worker != NULL) {
        ucp_request_param_t fp = {.op_attr_mask = 0};
        wait_request(w, ucp_worker_flush_nbx(w->worker, &fp));
    }
    /* Requests UCX never completed (a send to a peer whose worker was
     * reset and is never progressed again: its rendezvous is never
     * answered), and some that failed, keep the registrations UCX made
     * for them, and UCX 1.13 asserts in ucp_cleanup on such a
     * registration (rcache.c:409: a sender with lanes, whose sends carry
     * no memory handle, aborted at exit in 3 of 400 campaign trials).
     * Such a context is left to the process's exit, like that of a
     * retired worker; so is the main worker's when a lane's was (its
     * context then asserted the same way, with no request of its own
     * left: why is not known). */
    int held = w->busy > 0 || w->failed_sends > 0 || w->lanes_held;
    if (held && w->main != NULL)
        w->main->lanes_held = 1; /* read after this thread is joined */
    if (w->worker != NULL)
        ucp_worker_destroy(data_worker_detach(w));
    /* Retired workers cannot be destroyed (see data_reset), nor then
     * the context: both are left to the process's exit. */
    if (w->n_retired == 0 && !held)
        ucp_cleanup(w->context);
    else if (held)
        WST_DEBUG(w->log,
                  "UCX context left to the process's exit: %d requests "
                  "never completed, %llu sends failed",
                  w->busy, (unsigned long long)w->failed_sends);
    free(w->transports);
    wst_auth_secret_release(&w->secret);
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
        w->in_progress = 1;
        /* A reset asked for inside progress stops the burst: the worker
         * to be retired lands nothing more. */
        for (int i = 0; w->worker != NULL && !w->data_reset_due && i < 256 &&
                        ucp_worker_progress(w->worker) != 0;
             i++) {
            busy = 1;
            if (wst_now_ns() >= burst_end)
                break;
        }
        w->in_progress = 0;
        if (w->data_reset_due)
            data_reset(w);
        if (w->to_close != NULL) {
            wst_conn_close_pending(w);
            busy = 1;
        }
        uint64_t now = wst_now_ns();
        /* Sockets are looked at every round; the thread sleeps only
         * when nothing is pending. */
        int timeout = 0;
        if (!busy && !w->stop && now < next_tick &&
            (w->worker == NULL || ucp_worker_arm(w->worker) != UCS_ERR_BUSY))
            timeout =
                w->busy > 0 ? 1 : (int)((next_tick - now) / 1000000ull) + 1;
        struct epoll_event evs[32];
        int n = epoll_wait(w->epfd, evs, 32, timeout);
        if (n < 0 && errno != EINTR)
            WST_WARN(w->log, "epoll_wait: %s", strerror(errno));
        /* Connections closed meanwhile are freed only by
         * wst_conn_close_pending, after this batch. */
        for (int i = 0; i < n; i++)
            if (evs[i].data.ptr != NULL)
                wst_channel_event(w, evs[i].data.ptr, evs[i].events);
        /* Silence is judged after the sockets were read: one UCX progress
         * call can hold the thread for longer than a peer's timeout (a
         * sender's took 0.3-0.7 s under load, pushing its window), and a
         * peer whose heartbeats wait in the socket is alive. */
        now = wst_now_ns();
        if (now >= next_tick) {
            wst_channel_tick(w, now);
            wst_heartbeat_tick(w, now);
            if (w->ops.tick != NULL)
                w->ops.tick(w->ops.arg);
            next_tick = now + tick_ns;
        }
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
    wst_worker_t *w = NULL;
    wst_status_t status = wst_worker_start(params, NULL, 0, &w);

    if (status != WST_OK)
        return status;
    status = wst_lanes_start(w, params);
    if (status != WST_OK) {
        wst_worker_destroy(w);
        return status;
    }
    *worker_p = w;
    return WST_OK;
}

wst_status_t wst_worker_start(const struct wst_worker_params *params,
                              wst_worker_t *main, unsigned index,
                              wst_worker_t **worker_p)
{
    wst_status_t status = WST_ERR_NO_MEMORY;
    wst_worker_t *w = calloc(1, sizeof(*w));

    if (w == NULL)
        return WST_ERR_NO_MEMORY;
    w->main = main;
    w->lane_index = index;
    w->n_lanes = 1;
    w->log = params->log;
    w->ops = params->ops;
    w->listen_fd = -1;
    if (wst_auth_secret_copy(&w->secret, params->secret) != WST_OK) {
        free(w);
        return WST_ERR_NO_MEMORY;
    }
    if (params->confine_ip != NULL)
        snprintf(w->confine_ip, sizeof(w->confine_ip), "%s",
                 params->confine_ip);
    char err[256];
    if (wst_worker_lane_device_pick(params->lane_devices, index, w->net_device,
                                    err, sizeof(err)) != WST_OK) {
        WST_ERROR(params->log, "%s", err);
        wst_auth_secret_release(&w->secret);
        free(w);
        return WST_ERR_INVALID;
    }
    w->tick_ms = params->tick_ms ? params->tick_ms : 100;
    w->rma_rule = params->rma;
    w->max_control_msg =
        params->max_control_msg ? params->max_control_msg : (64u << 20);
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->started, NULL);
    if (params->heartbeat.interval_s > 0 && params->heartbeat.encode != NULL) {
        w->hb_encode = params->heartbeat.encode;
        w->hb_interval_ns = (uint64_t)(params->heartbeat.interval_s * 1e9);
        w->hb_timeout_ns = (uint64_t)(params->heartbeat.timeout_s * 1e9);
    }
    w->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (w->evfd < 0)
        goto err_free;
    w->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (w->epfd < 0)
        goto err_close_evfd;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->evfd, &ev) != 0)
        goto err_close_epfd;
    if (pthread_create(&w->thread, NULL, progress_main, w) != 0)
        goto err_close_epfd;
    wst_thread_name(w->thread, main != NULL ? "wst-lane" : "wst-progress");
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
    pthread_cond_destroy(&w->started);
    pthread_mutex_destroy(&w->lock);
    wst_auth_secret_release(&w->secret);
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
    wst_lanes_stop(w); /* they post to this worker until they stop */
    wst_worker_post(w, set_stop, w);
    pthread_join(w->thread, NULL);
    for (struct wst_post *p = w->head; p != NULL;) {
        struct wst_post *next = p->next;
        free(p);
        p = next;
    }
    close(w->epfd);
    close(w->evfd);
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
    /* Only the post that finds the FIFO empty wakes the thread: one that
     * finds it queued rides on that post's wake, which the thread cannot
     * have consumed yet, because it drains the eventfd before it takes
     * the FIFO (take_posts). A wake per post cost the agents of a 16 ->
     * 4 scale run ~6,500 eventfd writes a second (NOTES.md). */
    int wake = w->head == NULL;
    if (w->tail != NULL)
        w->tail->next = p;
    else
        w->head = p;
    w->tail = p;
    pthread_mutex_unlock(&w->lock);
    if (wake && write(w->evfd, &one, sizeof(one)) < 0 && errno != EAGAIN)
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

wst_status_t wst_worker_call_each_thread(wst_worker_t *w, wst_worker_fn fn,
                                         void *arg)
{
    wst_status_t st = wst_worker_call(w, fn, arg);

    /* Lanes are started with the worker and live as long as it does. */
    for (unsigned i = 1; st == WST_OK && i < w->n_lanes; i++)
        st = wst_worker_call(w->lanes[i], fn, arg);
    return st;
}

wst_status_t wst_worker_address(wst_worker_t *w, const void **addr_p,
                                size_t *len_p)
{
    /* A reset that could not make its new worker (the network device was
     * down: a partition) tries again when a peer asks. */
    if (w->worker == NULL && !w->in_progress) {
        ucs_status_t st = data_worker_open(w);
        if (st == UCS_OK)
            WST_INFO(w->log, "data worker made again; new UCX address");
        else
            WST_WARN(w->log, "data worker: still none: %s",
                     ucs_status_string(st));
    }
    *addr_p = w->address;
    *len_p = w->address != NULL ? w->address_len : 0;
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

int wst_worker_has_rma(const wst_worker_t *w, const char **why_p)
{
    if (why_p != NULL)
        *why_p = w->rma_why;
    return w->rma;
}
