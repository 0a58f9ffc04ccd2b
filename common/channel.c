/* channel.c - control connections over our own TCP sockets: the listening
 * port, accepting and connecting, the handshake (handshake.h) under its
 * deadline and caps, and sealed frames (frame.h) both ways.
 *
 * Everything runs on the progress thread, driven by the worker's epoll
 * (worker.c hands each socket event to wst_channel_event). An accepted
 * connection is not the owner's until it has authenticated: until then it
 * sits in w->unauth (at most WST_CHANNEL_UNAUTH_MAX at once), reads only
 * the handshake's bytes, and is dropped with a log line naming the peer
 * and what was wrong when it sends garbage, the wrong proof, or nothing
 * within WST_CHANNEL_HS_TIMEOUT_S. A connecting side queues what the owner
 * sends until the handshake is done, then seals and sends it in order.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "clock.h"
#include "frame.h"
#include "worker_internal.h"

#define HS_TIMEOUT_NS ((uint64_t)(WST_CHANNEL_HS_TIMEOUT_S * 1e9))
#define HS_CLIENT_TIMEOUT_NS ((uint64_t)(WST_CHANNEL_HS_CLIENT_TIMEOUT_S * 1e9))
#define READ_BUDGET (4u << 20) /* bytes read per event, then others' turn */
#define RX_STEP (64u << 10)
/* A receive buffer grown past this for one large frame (a manifest, up
 * to max_control_msg) is given back once the frame was delivered: an
 * idle connection holds no more. */
#define RX_KEEP (256u << 10)

struct wst_out {
    struct wst_out *next;
    void *buf; /* malloc'd payload, owned */
    uint32_t len;
    int sealed;
    uint8_t head[WST_FRAME_HEAD];
    uint8_t mac[WST_FRAME_TAIL];
};

static void set_events(struct wst_conn *c, uint32_t events)
{
    if (c->fd < 0 || c->events == events)
        return;
    struct epoll_event ev = {.events = events, .data.ptr = c};
    if (epoll_ctl(c->worker->epfd, EPOLL_CTL_MOD, c->fd, &ev) == 0)
        c->events = events;
}

/* Stops all I/O on c: its socket stays open until it is closed. */
static void io_stop(struct wst_conn *c)
{
    c->io_dead = 1;
    set_events(c, 0);
}

/* A connection that failed: an unauthenticated one is dropped here, with
 * the log line; the owner's is failed (it logs and closes). */
static void channel_fail(struct wst_conn *c, wst_status_t status,
                         const char *why)
{
    wst_worker_t *w = c->worker;

    io_stop(c);
    if (c->unlisted) {
        WST_WARN(w->log, "refused peer %s: %s", c->name, why);
        wst_conn_close(c);
        return;
    }
    if (!c->authed && !c->failed)
        WST_WARN(w->log, "control connection to %s refused: %s", c->name, why);
    wst_conn_fail(c, status, why);
}

static void fail_errno(struct wst_conn *c, const char *what, int err)
{
    char why[320];
    int unreachable = err == ECONNREFUSED || err == EHOSTUNREACH ||
                      err == ENETUNREACH || err == ETIMEDOUT;

    /* Nothing answered at the address: what a person checks first. */
    if (unreachable && strcmp(what, "connect") == 0)
        snprintf(why, sizeof(why),
                 "%s: %s (check that wstream-agent runs and listens on %s "
                 "(its --listen), and that no firewall blocks the port)",
                 what, strerror(err), c->name);
    else
        snprintf(why, sizeof(why), "%s: %s", what, strerror(err));
    channel_fail(
        c, err == ECONNREFUSED ? WST_ERR_UNREACHABLE : WST_ERR_PEER_FAILED,
        why);
}

/* Sends what iov holds, as much as the socket takes now: the bytes sent,
 * 0 when it takes none, -1 once c has failed. */
static ssize_t send_some(struct wst_conn *c, struct iovec *iov, size_t n)
{
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = n};

    for (;;) {
        ssize_t sent = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
        if (sent >= 0)
            return sent;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN)
            return 0;
        fail_errno(c, "send", errno);
        return -1;
    }
}

/* Writes what can be written: the handshake's bytes, then (once
 * authenticated) the queued frames, sealing each as it comes up. */
static void flush(struct wst_conn *c)
{
    enum wst_hs_role me = c->server_side ? WST_HS_SERVER : WST_HS_CLIENT;

    if (c->io_dead || c->connecting)
        return;
    while (c->hs_out_off < c->hs_out_len) {
        struct iovec iov = {c->hs_out + c->hs_out_off,
                            c->hs_out_len - c->hs_out_off};
        ssize_t n = send_some(c, &iov, 1);
        if (n < 0)
            return;
        if (n == 0)
            goto want_out;
        c->hs_out_off += (size_t)n;
    }
    while (c->authed && c->out_head != NULL) {
        struct wst_out *o = c->out_head;
        if (!o->sealed) {
            if (wst_frame_seal(c->hs.session, me, c->tx_seq++, o->buf, o->len,
                               o->head, o->mac) != WST_OK) {
                channel_fail(c, WST_ERR_INTEGRITY, "cannot seal a frame");
                return;
            }
            o->sealed = 1;
        }
        struct iovec iov[3] = {{o->head, WST_FRAME_HEAD},
                               {o->buf, o->len},
                               {o->mac, WST_FRAME_TAIL}};
        size_t skip = c->out_off;
        int i = 0;
        while (i < 3 && skip >= iov[i].iov_len)
            skip -= iov[i++].iov_len;
        iov[i].iov_base = (uint8_t *)iov[i].iov_base + skip;
        iov[i].iov_len -= skip;
        ssize_t n = send_some(c, iov + i, (size_t)(3 - i));
        if (n < 0)
            return;
        if (n == 0)
            goto want_out;
        c->out_off += (size_t)n;
        if (c->out_off == WST_FRAME_HEAD + (size_t)o->len + WST_FRAME_TAIL) {
            c->out_head = o->next;
            if (c->out_head == NULL)
                c->out_tail = NULL;
            c->out_off = 0;
            free(o->buf);
            free(o);
        }
    }
    set_events(c, EPOLLIN);
    return;
want_out:
    set_events(c, EPOLLIN | EPOLLOUT);
}

wst_status_t wst_channel_send(struct wst_conn *c, void *buf, size_t len)
{
    if (len > UINT32_MAX || len > c->worker->max_control_msg) {
        WST_WARN(c->worker->log,
                 "control message of %zu bytes to %s exceeds the %zu-byte "
                 "cap, not sent",
                 len, c->name, c->worker->max_control_msg);
        free(buf);
        return WST_ERR_TOO_LARGE;
    }
    struct wst_out *o = calloc(1, sizeof(*o));
    if (o == NULL) {
        free(buf);
        return WST_ERR_NO_MEMORY;
    }
    o->buf = buf;
    o->len = (uint32_t)len;
    __atomic_fetch_add(&c->worker->control.msgs_out, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&c->worker->control.bytes_out, len, __ATOMIC_RELAXED);
    if (c->out_tail != NULL)
        c->out_tail->next = o;
    else
        c->out_head = o;
    c->out_tail = o;
    if (c->authed)
        flush(c);
    return WST_OK;
}

static void on_authed(struct wst_conn *c)
{
    wst_worker_t *w = c->worker;

    c->authed = 1;
    if (c->unlisted) {
        wst_conn_unlink(c); /* from w->unauth */
        c->unlisted = 0;
        c->next = w->conns;
        w->conns = c;
        c->last_rx = c->last_tx = wst_now_ns();
        WST_DEBUG(w->log, "accepted control connection from %s%s", c->name,
                  c->hs.insecure ? " (insecure)" : "");
        if (w->ops.accepted != NULL)
            w->ops.accepted(w->ops.arg, c);
    } else {
        WST_DEBUG(w->log, "control connection to %s authenticated%s", c->name,
                  c->hs.insecure ? " (insecure)" : "");
    }
    if (!c->failed)
        flush(c);
}

/* Before authentication: reads exactly what the handshake still needs, so
 * nothing past it is taken in. Returns nonzero once authenticated. */
static int read_handshake(struct wst_conn *c)
{
    uint8_t in[WST_HS_OUT_MAX], out[WST_HS_OUT_MAX];

    for (;;) {
        size_t need = wst_hs_need(&c->hs), used = 0, out_len = 0;
        if (need == 0)
            return 0;
        ssize_t n = recv(c->fd, in, need, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return 0;
        if (n < 0) {
            fail_errno(c, "receive during the handshake", errno);
            return 0;
        }
        if (n == 0) {
            channel_fail(c, WST_ERR_PEER_FAILED,
                         c->server_side && c->hs_got > 0
                             ? "closed the connection during the handshake "
                               "(another auth secret?)"
                             : "closed the connection before the handshake "
                               "was done");
            return 0;
        }
        c->hs_got += (size_t)n;
        wst_status_t st =
            wst_hs_step(&c->hs, in, (size_t)n, &used, out, &out_len);
        if (out_len > 0) {
            memcpy(c->hs_out + c->hs_out_len, out, out_len);
            c->hs_out_len += out_len;
            flush(c);
        }
        if (st == WST_OK)
            return 1;
        if (st != WST_INPROGRESS) {
            channel_fail(c, st, c->hs.why);
            return 0;
        }
    }
}

static wst_status_t rx_reserve(struct wst_conn *c, size_t want)
{
    if (want <= c->rx_cap)
        return WST_OK;
    uint8_t *p = realloc(c->rx, want);
    if (p == NULL)
        return WST_ERR_NO_MEMORY;
    c->rx = p;
    c->rx_cap = want;
    return WST_OK;
}

/* Delivers every whole frame in c->rx. */
static void deliver_frames(struct wst_conn *c)
{
    wst_worker_t *w = c->worker;
    enum wst_hs_role peer = c->server_side ? WST_HS_CLIENT : WST_HS_SERVER;
    size_t off = 0, partial = 0; /* the bytes a partly read frame needs */

    while (!c->io_dead) {
        uint32_t len = 0;
        size_t need = 0;
        wst_status_t st =
            wst_frame_open(c->hs.session, peer, c->rx_seq, c->rx + off,
                           c->rx_len - off, w->max_control_msg, &len, &need);
        if (st == WST_INPROGRESS) {
            partial = need;
            if (need > 0 && rx_reserve(c, need) != WST_OK)
                channel_fail(c, WST_ERR_NO_MEMORY,
                             "no memory for a control message");
            break;
        }
        if (st == WST_ERR_TOO_LARGE) {
            char why[128];
            snprintf(why, sizeof(why),
                     "control message of %u bytes exceeds the %zu-byte cap",
                     len, w->max_control_msg);
            WST_WARN(w->log, "peer %s: %s: connection dropped", c->name, why);
            channel_fail(c, st, why);
            break;
        }
        if (st != WST_OK) {
            const char *why = "control message with a bad MAC (altered, "
                              "replayed or forged)";
            WST_WARN(w->log, "peer %s: %s: connection dropped", c->name, why);
            channel_fail(c, WST_ERR_INTEGRITY, why);
            break;
        }
        c->rx_seq++;
        off += need;
        if (c->failed)
            continue; /* lingering: read, not delivered */
        c->last_rx = wst_now_ns();
        __atomic_fetch_add(&w->control.msgs_in, 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&w->control.bytes_in, len, __ATOMIC_RELAXED);
        if (w->ops.message != NULL)
            w->ops.message(w->ops.arg, c, c->rx + off - need + WST_FRAME_HEAD,
                           len);
    }
    if (off > 0 && off <= c->rx_len) {
        memmove(c->rx, c->rx + off, c->rx_len - off);
        c->rx_len -= off;
    }
    /* Given back once delivered: not while a frame still arrives into it
     * (it was reserved whole just above). */
    if (c->rx_cap > RX_KEEP && c->rx_len + RX_STEP <= RX_KEEP &&
        partial <= RX_KEEP) {
        uint8_t *p = realloc(c->rx, RX_KEEP);
        if (p != NULL) {
            c->rx = p;
            c->rx_cap = RX_KEEP;
        }
    }
}

static void on_readable(struct wst_conn *c)
{
    size_t budget = READ_BUDGET;

    if (!c->authed) {
        if (!read_handshake(c))
            return;
        on_authed(c);
    }
    while (!c->io_dead && budget > 0) {
        if (rx_reserve(c, c->rx_len + RX_STEP) != WST_OK) {
            channel_fail(c, WST_ERR_NO_MEMORY,
                         "no memory for a control message");
            return;
        }
        size_t room = c->rx_cap - c->rx_len;
        ssize_t n = recv(c->fd, c->rx + c->rx_len, room, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            break;
        if (n < 0) {
            fail_errno(c, "receive", errno);
            return;
        }
        if (n == 0) {
            channel_fail(c, WST_ERR_PEER_FAILED, "connection closed by peer");
            return;
        }
        c->rx_len += (size_t)n;
        budget = (size_t)n >= budget ? 0 : budget - (size_t)n;
        deliver_frames(c);
    }
}

static void on_connected(struct wst_conn *c)
{
    int err = 0;
    socklen_t len = sizeof(err);

    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    if (err != 0) {
        fail_errno(c, "connect", err);
        return;
    }
    c->connecting = 0;
    flush(c);
}

static void set_name(char *name, size_t len, const struct sockaddr_in *sin)
{
    char ip[INET_ADDRSTRLEN] = "?";

    inet_ntop(AF_INET, &sin->sin_addr, ip, sizeof(ip));
    snprintf(name, len, "%s:%u", ip, ntohs(sin->sin_port));
}

static void tune_socket(int fd)
{
    int one = 1;

    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* Starts c's handshake with a fresh nonce; the client's first message is
 * queued. */
static wst_status_t start_handshake(struct wst_conn *c)
{
    uint8_t nonce[WST_AUTH_NONCE_LEN];
    size_t used = 0, out_len = 0;

    if (wst_auth_random(nonce, sizeof(nonce)) != WST_OK)
        return WST_ERR_IO;
    wst_hs_init(&c->hs, c->server_side ? WST_HS_SERVER : WST_HS_CLIENT,
                &c->worker->secret, nonce);
    (void)wst_hs_step(&c->hs, NULL, 0, &used, c->hs_out, &out_len);
    c->hs_out_len = out_len;
    c->hs_deadline =
        wst_now_ns() + (c->server_side ? HS_TIMEOUT_NS : HS_CLIENT_TIMEOUT_NS);
    return WST_OK;
}

static wst_status_t watch(struct wst_conn *c, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.ptr = c};

    if (epoll_ctl(c->worker->epfd, EPOLL_CTL_ADD, c->fd, &ev) != 0)
        return WST_ERR_IO;
    c->events = events;
    return WST_OK;
}

static void accept_one(wst_worker_t *w, int fd, const struct sockaddr_in *sin)
{
    char name[96];

    set_name(name, sizeof(name), sin);
    if (w->n_unauth >= WST_CHANNEL_UNAUTH_MAX) {
        WST_WARN(w->log,
                 "refused peer %s: %d connections are already "
                 "authenticating",
                 name, w->n_unauth);
        close(fd);
        return;
    }
    struct wst_conn *c = wst_conn_new(w, name);
    if (c == NULL) {
        close(fd);
        return;
    }
    /* wst_conn_new listed it with the owner's: not before it proved
     * itself. */
    wst_conn_unlink(c);
    c->fd = fd;
    c->server_side = 1;
    c->unlisted = 1;
    c->next = w->unauth;
    w->unauth = c;
    w->n_unauth++;
    tune_socket(fd);
    if (start_handshake(c) != WST_OK || watch(c, EPOLLIN) != WST_OK) {
        WST_WARN(w->log, "refused peer %s: cannot start its handshake", name);
        wst_conn_close(c);
    }
}

/* Takes the listener out of epoll's interest (events 0) or puts it back.
 * Paused, connections queue in the listen backlog (and, past it, the
 * peers' TCP retries its SYN): a burst of senders -- a trainer's ranks
 * all starting at once -- is served WST_CHANNEL_UNAUTH_MAX at a time
 * instead of refused, and a flood of peers that never authenticate still
 * holds no more than that. */
static void listener_arm(wst_worker_t *w, int on)
{
    struct epoll_event ev = {.events = on ? EPOLLIN : 0,
                             .data.ptr = &w->listen_fd};

    if (w->listen_fd < 0 || w->accept_paused == !on)
        return;
    if (epoll_ctl(w->epfd, EPOLL_CTL_MOD, w->listen_fd, &ev) != 0) {
        WST_WARN(w->log, "listener: epoll_ctl: %s", strerror(errno));
        return;
    }
    w->accept_paused = !on;
    if (on)
        WST_DEBUG(w->log, "listener resumed: %d peers authenticating",
                  w->n_unauth);
    else
        WST_INFO(w->log,
                 "listener paused: %d peers authenticating, later ones wait "
                 "in the backlog",
                 w->n_unauth);
}

void wst_channel_unauth_left(wst_worker_t *w)
{
    if (w->accept_paused && w->n_unauth < WST_CHANNEL_UNAUTH_MAX)
        listener_arm(w, 1);
}

static void on_listener(wst_worker_t *w)
{
    for (;;) {
        if (w->n_unauth >= WST_CHANNEL_UNAUTH_MAX) {
            listener_arm(w, 0);
            return;
        }
        struct sockaddr_in sin;
        socklen_t len = sizeof(sin);
        int fd = accept4(w->listen_fd, (struct sockaddr *)&sin, &len,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno != EAGAIN)
                WST_WARN(w->log, "accept: %s", strerror(errno));
            return;
        }
        accept_one(w, fd, &sin);
    }
}

void wst_channel_event(wst_worker_t *w, void *ptr, uint32_t events)
{
    if (ptr == &w->listen_fd) {
        on_listener(w);
        return;
    }
    struct wst_conn *c = ptr;
    if (c->fd < 0 || c->io_dead)
        return;
    if (c->connecting) {
        if (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))
            on_connected(c);
        return;
    }
    if (events & (EPOLLIN | EPOLLHUP | EPOLLERR))
        on_readable(c);
    if (!c->io_dead && c->fd >= 0 && (events & EPOLLOUT))
        flush(c);
}

void wst_channel_tick(wst_worker_t *w, uint64_t now)
{
    struct wst_conn *late[WST_CHANNEL_UNAUTH_MAX + 64];
    size_t n = 0;

    for (struct wst_conn *c = w->unauth; c != NULL; c = c->next)
        if (now >= c->hs_deadline && n < sizeof(late) / sizeof(late[0]))
            late[n++] = c;
    for (struct wst_conn *c = w->conns; c != NULL; c = c->next)
        if (!c->authed && !c->io_dead && now >= c->hs_deadline &&
            n < sizeof(late) / sizeof(late[0]))
            late[n++] = c;
    for (size_t i = 0; i < n; i++) {
        char why[160];
        snprintf(why, sizeof(why),
                 "no handshake within %.0f s (%zu of its bytes received)",
                 late[i]->server_side ? WST_CHANNEL_HS_TIMEOUT_S
                                      : WST_CHANNEL_HS_CLIENT_TIMEOUT_S,
                 late[i]->hs_got);
        channel_fail(late[i], WST_ERR_TIMED_OUT, why);
    }
}

wst_status_t wst_channel_connect(struct wst_conn *c,
                                 const struct sockaddr_storage *ss,
                                 socklen_t len)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

    if (fd < 0)
        return WST_ERR_IO;
    c->fd = fd;
    tune_socket(fd);
    if (start_handshake(c) != WST_OK)
        return WST_ERR_IO;
    if (connect(fd, (const struct sockaddr *)ss, len) != 0) {
        if (errno != EINPROGRESS) {
            WST_ERROR(c->worker->log, "connect to %s: %s", c->name,
                      strerror(errno));
            return errno == ECONNREFUSED ? WST_ERR_UNREACHABLE : WST_ERR_IO;
        }
        c->connecting = 1;
        return watch(c, EPOLLOUT);
    }
    if (watch(c, EPOLLIN) != WST_OK)
        return WST_ERR_IO;
    flush(c);
    return WST_OK;
}

void wst_channel_release(struct wst_conn *c)
{
    if (c->fd >= 0) {
        (void)epoll_ctl(c->worker->epfd, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
        c->fd = -1;
    }
    while (c->out_head != NULL) {
        struct wst_out *o = c->out_head;
        c->out_head = o->next;
        free(o->buf);
        free(o);
    }
    c->out_tail = NULL;
    free(c->rx);
    c->rx = NULL;
    c->rx_len = c->rx_cap = 0;
    wst_hs_clear(&c->hs);
}

wst_status_t wst_channel_listen(wst_worker_t *w,
                                const struct sockaddr_storage *ss,
                                socklen_t len, uint16_t *port_p)
{
    int one = 1, err;
    struct sockaddr_in bound;
    socklen_t blen = sizeof(bound);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

    if (fd < 0)
        return WST_ERR_IO;
    /* A restarted agent rebinds its port at once. */
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (const struct sockaddr *)ss, len) != 0 ||
        listen(fd, 128) != 0 ||
        getsockname(fd, (struct sockaddr *)&bound, &blen) != 0)
        goto err_close;
    w->listen_fd = fd;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &w->listen_fd};
    if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        w->listen_fd = -1;
        goto err_close;
    }
    *port_p = ntohs(bound.sin_port);
    return WST_OK;

err_close:
    err = errno;
    WST_ERROR(w->log, "listen: %s", strerror(err));
    close(fd);
    return err == EADDRINUSE ? WST_ERR_BUSY : WST_ERR_IO;
}

size_t wst_conn_rx_held(const wst_conn_t *c)
{
    return c->rx_cap;
}

void wst_worker_control_counts(const wst_worker_t *w,
                               struct wst_control_counts *out)
{
    out->msgs_out = __atomic_load_n(&w->control.msgs_out, __ATOMIC_RELAXED);
    out->bytes_out = __atomic_load_n(&w->control.bytes_out, __ATOMIC_RELAXED);
    out->msgs_in = __atomic_load_n(&w->control.msgs_in, __ATOMIC_RELAXED);
    out->bytes_in = __atomic_load_n(&w->control.bytes_in, __ATOMIC_RELAXED);
}
