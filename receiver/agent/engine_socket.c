/* engine_socket.c - the daemon-mode engine hook over a Unix stream socket
 * (see engine_socket.h).
 *
 * Threads: the accept thread polls the listening socket and a wake pipe; it
 * installs the one engine connection. The request functions run on the
 * receiver's engine thread; they hold 'lock' for a whole request, so the
 * accept thread never swaps the connection under a pending reply (BEGIN,
 * while no engine is connected, waits on 'connected' for one, which
 * releases it). A
 * timeout or a protocol error closes the connection: the engine sees EOF
 * and must reconnect, and no late reply can be taken for the next one.
 */
#include "engine_socket.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "clock.h"
#include "thread_name.h"
#include "timed_wait.h"

#define WST_ENGINE_FIELDS_MAX 4

struct wst_engine_socket {
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    double timeout_s;
    const struct wst_logger *log; /* borrowed */
    int listen_fd;
    int wake[2]; /* pipe: destroy wakes the accept thread */
    pthread_t thread;
    int thread_started;
    pthread_mutex_t lock;     /* guards conn, rbuf, rlen */
    pthread_cond_t connected; /* an engine connected: conn >= 0 */
    int conn;                 /* the engine's connection, -1: none */
    char rbuf[WST_ENGINE_LINE_MAX];
    size_t rlen;
    /* UNUSABLE while the receiver is: a newly connected engine hears it
     * at once ("" when usable). Guarded by lock. */
    char standing[WST_ENGINE_LINE_MAX];
    /* The engine answered READY and has not been told COMMITTED or
     * UNUSABLE since: it is paused for a refit. Guarded by lock. */
    int paused;
};

/* A parsed reply: fields[0] is the keyword; 'rest' the reason (or NULL). */
struct engine_reply {
    char line[WST_ENGINE_LINE_MAX];
    char *fields[WST_ENGINE_FIELDS_MAX];
    size_t n_fields;
    const char *rest;
};

/* ---- connection (called with lock held) ---- */

static void drop_conn(struct wst_engine_socket *s)
{
    if (s->conn >= 0)
        close(s->conn);
    s->conn = -1;
    s->rlen = 0;
}

/* Nonzero when the idle connection has hung up. Unsolicited bytes are a
 * protocol error: the connection is dropped and *status_p set. */
static int conn_gone(struct wst_engine_socket *s, wst_status_t *status_p)
{
    struct pollfd pfd = {.fd = s->conn, .events = POLLIN};
    char c;

    if (s->rlen == 0 && poll(&pfd, 1, 0) == 0)
        return 0;
    if (s->rlen == 0 && recv(s->conn, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0) {
        WST_WARN(s->log, "engine on %s hung up", s->path);
        drop_conn(s);
        *status_p = WST_ERR_UNREACHABLE;
        return 1;
    }
    WST_ERROR(s->log,
              "engine on %s: protocol error: it sent a line nobody asked "
              "for; dropping the connection",
              s->path);
    drop_conn(s);
    *status_p = WST_ERR_PROTOCOL;
    return 1;
}

/* Nonzero when the peer of connection fd has hung up (a restarted engine
 * leaves its old connection so). Bytes waiting in it are no hang-up. */
static int peer_hung_up(int fd)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN | POLLRDHUP};
    char c;

    if (poll(&pfd, 1, 0) <= 0)
        return 0;
    if (pfd.revents & (POLLHUP | POLLERR | POLLRDHUP))
        return 1;
    return (pfd.revents & POLLIN) &&
           recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

static wst_status_t send_line(struct wst_engine_socket *s, const char *line)
{
    size_t len = strlen(line), off = 0;

    while (off < len) {
        ssize_t n = send(s->conn, line + off, len - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            WST_ERROR(s->log, "engine on %s: send: %s; dropping the connection",
                      s->path, strerror(errno));
            drop_conn(s);
            return WST_ERR_UNREACHABLE;
        }
        off += (size_t)n;
    }
    return WST_OK;
}

/* Reads one line (without its '\n') into 'line' by 'deadline_ns'. */
static wst_status_t read_line(struct wst_engine_socket *s, uint64_t deadline_ns,
                              const char *what, char *line)
{
    for (;;) {
        char *nl = memchr(s->rbuf, '\n', s->rlen);
        if (nl != NULL) {
            size_t n = (size_t)(nl - s->rbuf);
            memcpy(line, s->rbuf, n);
            line[n] = '\0';
            s->rlen -= n + 1;
            memmove(s->rbuf, nl + 1, s->rlen);
            return WST_OK;
        }
        if (s->rlen == sizeof(s->rbuf)) {
            WST_ERROR(s->log,
                      "engine on %s: protocol error: reply to %s longer "
                      "than %d bytes; dropping the connection",
                      s->path, what, WST_ENGINE_LINE_MAX);
            drop_conn(s);
            return WST_ERR_PROTOCOL;
        }
        uint64_t now = wst_now_ns();
        struct pollfd pfd = {.fd = s->conn, .events = POLLIN};
        int ms = now >= deadline_ns
                     ? 0
                     : (int)((deadline_ns - now + 999999) / 1000000);
        int rc = poll(&pfd, 1, ms);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc == 0) {
            WST_ERROR(s->log,
                      "engine on %s did not answer %s within %.1f s; "
                      "dropping the connection",
                      s->path, what, s->timeout_s);
            drop_conn(s);
            return WST_ERR_TIMED_OUT;
        }
        ssize_t n = rc < 0 ? -1
                           : read(s->conn, s->rbuf + s->rlen,
                                  sizeof(s->rbuf) - s->rlen);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            WST_ERROR(s->log, "engine on %s hung up while asked %s%s%s",
                      s->path, what, n < 0 ? ": " : "",
                      n < 0 ? strerror(errno) : "");
            drop_conn(s);
            return WST_ERR_UNREACHABLE;
        }
        s->rlen += (size_t)n;
    }
}

/* ---- parsing ---- */

/* Splits rp->line: printable ASCII only, fields separated by one space,
 * no leading or trailing space. The first 'n_fixed' fields are split off;
 * whatever follows them is rp->rest. 0 when well-formed. */
static int split_reply(struct engine_reply *rp, size_t n_fixed)
{
    char *p = rp->line;
    size_t len = strlen(p);

    if (len == 0 || p[0] == ' ' || p[len - 1] == ' ' || strstr(p, "  "))
        return -1;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)p[i] < 0x20 || (unsigned char)p[i] > 0x7e)
            return -1;
    rp->n_fields = 0;
    rp->rest = NULL;
    while (p != NULL && rp->n_fields < n_fixed) {
        rp->fields[rp->n_fields++] = p;
        p = strchr(p, ' ');
        if (p != NULL)
            *p++ = '\0';
    }
    rp->rest = p;
    return 0;
}

static int parse_u64(const char *text, uint64_t *value_p)
{
    uint64_t v = 0;

    if (text == NULL || *text == '\0' || strlen(text) > 20)
        return -1;
    for (const char *c = text; *c; c++) {
        if (*c < '0' || *c > '9')
            return -1;
        if (v > (UINT64_MAX - (uint64_t)(*c - '0')) / 10)
            return -1;
        v = v * 10 + (uint64_t)(*c - '0');
    }
    *value_p = v;
    return 0;
}

/* ---- one request ---- */

/* A request: the line to send, the reply keywords, and the numbers the
 * reply must repeat (layer: only when has_layer). */
struct engine_request {
    const char *what; /* "BEGIN 3", for log lines */
    const char *ok;   /* "READY" */
    const char *fail; /* "REFUSE" */
    wst_status_t fail_status;
    int has_layer;
    uint32_t layer;
    uint64_t version;
    char *reason; /* why, on an error; may be NULL */
    size_t reason_len;
    double connect_wait_s; /* with no engine connected, wait for one */
};

static void set_reason(const struct engine_request *rq, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void set_reason(const struct engine_request *rq, const char *fmt, ...)
{
    va_list ap;

    if (rq->reason == NULL || rq->reason_len == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(rq->reason, rq->reason_len, fmt, ap);
    va_end(ap);
}

static wst_status_t protocol_error(struct wst_engine_socket *s,
                                   const struct engine_request *rq,
                                   const char *line, const char *why)
{
    WST_ERROR(s->log,
              "engine on %s: protocol error: reply '%s' to %s: %s; dropping "
              "the connection",
              s->path, line, rq->what, why);
    set_reason(rq, "engine protocol error: reply '%s' to %s: %s", line,
               rq->what, why);
    drop_conn(s);
    return WST_ERR_PROTOCOL;
}

static wst_status_t check_reply(struct wst_engine_socket *s,
                                const struct engine_request *rq,
                                struct engine_reply *rp)
{
    char copy[WST_ENGINE_LINE_MAX];
    size_t n_fixed = rq->has_layer ? 3 : 2;
    uint64_t layer = 0, version = 0;
    int failed;

    memcpy(copy, rp->line, sizeof(copy));
    if (split_reply(rp, n_fixed) != 0)
        return protocol_error(s, rq, copy,
                              "not printable fields separated by one space");
    failed = strcmp(rp->fields[0], rq->fail) == 0;
    if (!failed && strcmp(rp->fields[0], rq->ok) != 0)
        return protocol_error(s, rq, copy, "unexpected keyword");
    if (rp->n_fields != n_fixed || (failed != (rp->rest != NULL)))
        return protocol_error(s, rq, copy,
                              failed ? "expected numbers and a reason"
                                     : "wrong number of fields");
    if ((rq->has_layer &&
         (parse_u64(rp->fields[1], &layer) != 0 || layer != rq->layer)) ||
        parse_u64(rp->fields[n_fixed - 1], &version) != 0 ||
        version != rq->version)
        return protocol_error(s, rq, copy, "it names another layer or version");
    if (failed) {
        WST_ERROR(s->log, "engine on %s answered %s with %s: %s", s->path,
                  rq->what, rq->fail, rp->rest);
        set_reason(rq, "engine answered %s: %s", rq->fail, rp->rest);
        return rq->fail_status;
    }
    return WST_OK;
}

/* With no engine connected: waits (lock held, released while waiting) up
 * to rq->connect_wait_s, and at most a quarter of the timeout (the refit's
 * own deadline runs meanwhile: the rest is its margin), for one to
 * connect. */
static void wait_for_engine(struct wst_engine_socket *s,
                            const struct engine_request *rq)
{
    double wait_s = rq->connect_wait_s < s->timeout_s / 4 ? rq->connect_wait_s
                                                          : s->timeout_s / 4;
    if (wait_s <= 0)
        return;
    uint64_t until = wst_deadline_ns(wait_s);
    WST_INFO(s->log, "%s: no engine connected on %s yet; waiting %g s",
             rq->what, s->path, wait_s);
    while (s->conn < 0 &&
           wst_cond_wait_until(&s->connected, &s->lock, until) == WST_OK)
        ;
}

static wst_status_t request(struct wst_engine_socket *s,
                            const struct engine_request *rq, const char *line)
{
    uint64_t deadline;
    struct engine_reply rp;
    wst_status_t status = WST_OK;

    pthread_mutex_lock(&s->lock);
    if (s->conn >= 0 && conn_gone(s, &status) &&
        status != WST_ERR_UNREACHABLE) {
        /* a protocol error, logged: no engine for this request */
        set_reason(rq, "no engine connected on %s", s->path);
        goto out_unlock;
    }
    if (s->conn < 0)
        wait_for_engine(s, rq);
    if (s->conn < 0) {
        WST_ERROR(s->log, "cannot send %s: no engine connected on %s", rq->what,
                  s->path);
        status = WST_ERR_UNREACHABLE;
        set_reason(rq, "no engine connected on %s", s->path);
        goto out_unlock;
    }
    deadline = wst_now_ns() + (uint64_t)(s->timeout_s * 1e9);
    status = send_line(s, line);
    if (status == WST_OK)
        status = read_line(s, deadline, rq->what, rp.line);
    if (status != WST_OK) {
        set_reason(rq, "no reply from the engine to %s: %s", rq->what,
                   wst_status_string(status));
        goto out_unlock;
    }
    status = check_reply(s, rq, &rp);

out_unlock:
    pthread_mutex_unlock(&s->lock);
    return status;
}

/* " <label>" after a version, or "" without one. */
static void label_field(char *out, size_t len, const char *label)
{
    snprintf(out, len, "%s%s", label != NULL && label[0] != '\0' ? " " : "",
             label != NULL ? label : "");
}

wst_status_t wst_engine_socket_begin(struct wst_engine_socket *sock,
                                     uint64_t version, const char *label,
                                     char *reason, size_t reason_len)
{
    char line[128], what[112], field[WST_LABEL_MAX + 1];
    struct engine_request rq = {.what = what,
                                .ok = "READY",
                                .fail = "REFUSE",
                                .fail_status = WST_ERR_STATE,
                                .version = version,
                                .reason = reason,
                                .reason_len = reason_len,
                                .connect_wait_s = WST_ENGINE_CONNECT_WAIT_S};

    label_field(field, sizeof(field), label);
    snprintf(what, sizeof(what), "BEGIN %llu%s", (unsigned long long)version,
             field);
    snprintf(line, sizeof(line), "%s\n", what);
    wst_status_t st = request(sock, &rq, line);
    if (st == WST_OK) {
        pthread_mutex_lock(&sock->lock);
        sock->paused = 1;
        pthread_mutex_unlock(&sock->lock);
    }
    return st;
}

wst_status_t wst_engine_socket_layer(struct wst_engine_socket *sock,
                                     uint32_t layer, uint64_t version,
                                     char *reason, size_t reason_len)
{
    char line[64], what[48];
    struct engine_request rq = {.what = what,
                                .ok = "FINALIZED",
                                .fail = "FAILED",
                                .fail_status = WST_ERR_UNUSABLE,
                                .has_layer = 1,
                                .layer = layer,
                                .version = version,
                                .reason = reason,
                                .reason_len = reason_len};

    snprintf(what, sizeof(what), "LAYER %u %llu", layer,
             (unsigned long long)version);
    snprintf(line, sizeof(line), "%s\n", what);
    return request(sock, &rq, line);
}

/* Sends a line that gets no reply. */
static void notify(struct wst_engine_socket *s, const char *line)
{
    wst_status_t status = WST_OK;

    pthread_mutex_lock(&s->lock);
    s->paused = 0; /* COMMITTED or UNUSABLE: the refit is over */
    if (s->conn < 0 || conn_gone(s, &status))
        WST_WARN(s->log, "no engine connected on %s to tell: %.*s", s->path,
                 (int)strcspn(line, "\n"), line);
    else
        send_line(s, line);
    pthread_mutex_unlock(&s->lock);
}

void wst_engine_socket_committed(struct wst_engine_socket *sock,
                                 uint64_t version, const char *label)
{
    char line[128], field[WST_LABEL_MAX + 1];

    label_field(field, sizeof(field), label);
    snprintf(line, sizeof(line), "COMMITTED %llu%s\n",
             (unsigned long long)version, field);
    wst_engine_socket_standing(sock, WST_OK, NULL);
    notify(sock, line);
}

/* "UNUSABLE <status-name> <reason...>\n" in line[WST_ENGINE_LINE_MAX]. */
static void format_unusable(char *line, wst_status_t status, const char *reason)
{
    char text[WST_ENGINE_LINE_MAX];
    const char *name = wst_status_name(status);
    size_t j = 0;

    /* The reason as words of printable ASCII, one space apart. */
    for (const char *c = reason; c != NULL && *c && j + 1 < sizeof(text); c++) {
        unsigned char u = (unsigned char)*c;
        char ch = (u < 0x20 || u > 0x7e) ? ' ' : *c;
        if (ch != ' ' || (j > 0 && text[j - 1] != ' '))
            text[j++] = ch;
    }
    /* Cut to fit the line with its '\n'; no trailing space. */
    int head = snprintf(line, WST_ENGINE_LINE_MAX, "UNUSABLE %s ",
                        name != NULL ? name : "WST_ERR_UNKNOWN");
    if (j > WST_ENGINE_LINE_MAX - (size_t)head - 2)
        j = WST_ENGINE_LINE_MAX - (size_t)head - 2;
    while (j > 0 && text[j - 1] == ' ')
        j--;
    text[j] = '\0';
    snprintf(line + head, WST_ENGINE_LINE_MAX - (size_t)head, "%s\n",
             j > 0 ? text : "unknown");
}

void wst_engine_socket_standing(struct wst_engine_socket *sock,
                                wst_status_t status, const char *reason)
{
    pthread_mutex_lock(&sock->lock);
    if (status == WST_OK)
        sock->standing[0] = '\0';
    else
        format_unusable(sock->standing, status, reason);
    pthread_mutex_unlock(&sock->lock);
}

void wst_engine_socket_unusable(struct wst_engine_socket *sock,
                                wst_status_t status, const char *reason)
{
    char line[WST_ENGINE_LINE_MAX];

    format_unusable(line, status, reason);
    wst_engine_socket_standing(sock, status, reason);
    notify(sock, line);
}

/* ---- accept thread ---- */

static void take_conn(struct wst_engine_socket *s, int fd)
{
    static const char busy[] = "ERROR busy\n";

    pthread_mutex_lock(&s->lock);
    /* A restarted engine finds its old connection still installed: the
     * agent learns of a hang-up only when it next writes. An idle one that
     * hung up is replaced now. One paused for a refit is not: that refit
     * fails at its next request, and the new engine, told busy, comes
     * back after it (never handed a refit it did not pause for). */
    if (s->conn >= 0 && !s->paused && peer_hung_up(s->conn)) {
        drop_conn(s);
        WST_WARN(s->log,
                 "engine on %s hung up; the engine connecting now "
                 "replaces it",
                 s->path);
    }
    if (s->conn >= 0) {
        pthread_mutex_unlock(&s->lock);
        WST_WARN(s->log,
                 "engine socket %s: refused a second engine connection "
                 "(busy)",
                 s->path);
        if (send(fd, busy, sizeof(busy) - 1, MSG_NOSIGNAL) < 0)
            WST_DEBUG(s->log, "engine socket %s: send busy: %s", s->path,
                      strerror(errno));
        close(fd);
        return;
    }
    s->conn = fd;
    s->rlen = 0;
    pthread_cond_broadcast(&s->connected);
    /* An engine that (re)connects to an unusable agent -- one restarted
     * from its state file, or one whose engine restarted -- hears so at
     * once, not at the next refit. */
    int told = s->standing[0] != '\0' && send_line(s, s->standing) == WST_OK;
    pthread_mutex_unlock(&s->lock);
    WST_INFO(s->log, "engine connected on %s%s", s->path,
             told ? " (told it the agent is unusable)" : "");
}

static void *accept_loop(void *arg)
{
    struct wst_engine_socket *s = arg;
    struct pollfd pfd[2] = {{.fd = s->listen_fd, .events = POLLIN},
                            {.fd = s->wake[0], .events = POLLIN}};

    for (;;) {
        int rc = poll(pfd, 2, -1);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc < 0) {
            WST_ERROR(s->log, "engine socket %s: poll: %s", s->path,
                      strerror(errno));
            break;
        }
        if (pfd[1].revents != 0)
            break;
        if (pfd[0].revents & POLLIN) {
            int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
            if (fd >= 0)
                take_conn(s, fd);
            else if (errno != EINTR && errno != EAGAIN)
                WST_WARN(s->log, "engine socket %s: accept: %s", s->path,
                         strerror(errno));
        }
    }
    return NULL;
}

/* ---- create / destroy ---- */

static wst_status_t listen_on(struct wst_engine_socket *s)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    mode_t old_mask;
    int rc;

    memcpy(sa.sun_path, s->path, sizeof(s->path));
    if (unlink(s->path) != 0 && errno != ENOENT) {
        WST_ERROR(s->log, "engine socket %s: cannot remove the stale file: %s",
                  s->path, strerror(errno));
        return WST_ERR_IO;
    }
    s->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s->listen_fd < 0) {
        WST_ERROR(s->log, "engine socket %s: socket: %s", s->path,
                  strerror(errno));
        return WST_ERR_IO;
    }
    /* Created 0600 from the start: no window where others may connect. */
    old_mask = umask(0177);
    rc = bind(s->listen_fd, (struct sockaddr *)&sa, sizeof(sa));
    umask(old_mask);
    if (rc != 0 || chmod(s->path, 0600) != 0 || listen(s->listen_fd, 4) != 0) {
        WST_ERROR(s->log, "engine socket %s: bind/listen: %s", s->path,
                  strerror(errno));
        return WST_ERR_IO;
    }
    return WST_OK;
}

wst_status_t wst_engine_socket_create(const char *path, double timeout_s,
                                      const char *unusable_reason,
                                      const struct wst_logger *log,
                                      struct wst_engine_socket **sock_p)
{
    struct wst_engine_socket *s;
    wst_status_t status;

    if (path == NULL || path[0] == '\0' || strlen(path) >= sizeof(s->path)) {
        WST_ERROR(log,
                  "--engine-socket: bad value '%s': empty or longer than "
                  "%zu bytes",
                  path ? path : "", sizeof(s->path) - 1);
        return WST_ERR_CONFIG;
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return WST_ERR_NO_MEMORY;
    snprintf(s->path, sizeof(s->path), "%s", path);
    s->timeout_s = timeout_s;
    s->log = log;
    s->listen_fd = -1;
    s->conn = -1;
    s->wake[0] = s->wake[1] = -1;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->connected, NULL);
    /* Before the first engine can connect. */
    if (unusable_reason != NULL && unusable_reason[0] != '\0')
        format_unusable(s->standing, WST_ERR_UNUSABLE, unusable_reason);
    status = listen_on(s);
    if (status != WST_OK)
        goto err_destroy;
    if (pipe2(s->wake, O_CLOEXEC) != 0) {
        WST_ERROR(log, "engine socket %s: pipe: %s", path, strerror(errno));
        status = WST_ERR_IO;
        goto err_destroy;
    }
    if (pthread_create(&s->thread, NULL, accept_loop, s) != 0) {
        WST_ERROR(log, "engine socket %s: cannot start the accept thread",
                  path);
        status = WST_ERR_NO_MEMORY;
        goto err_destroy;
    }
    wst_thread_name(s->thread, "wst-engine-sock");
    s->thread_started = 1;
    WST_INFO(log, "waiting for an engine on %s", path);
    *sock_p = s;
    return WST_OK;

err_destroy:
    wst_engine_socket_destroy(s);
    return status;
}

void wst_engine_socket_destroy(struct wst_engine_socket *sock)
{
    if (sock == NULL)
        return;
    if (sock->thread_started) {
        if (write(sock->wake[1], "x", 1) != 1)
            WST_WARN(sock->log,
                     "engine socket %s: cannot wake the accept "
                     "thread",
                     sock->path);
        pthread_join(sock->thread, NULL);
    }
    for (int i = 0; i < 2; i++)
        if (sock->wake[i] >= 0)
            close(sock->wake[i]);
    drop_conn(sock);
    if (sock->listen_fd >= 0) {
        close(sock->listen_fd);
        unlink(sock->path);
    }
    pthread_cond_destroy(&sock->connected);
    pthread_mutex_destroy(&sock->lock);
    free(sock);
}
