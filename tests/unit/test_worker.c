/* test_worker.c - the worker (common/worker.h) over real UCX on loopback:
 * posted and called functions run in order on the progress thread; a
 * listener accepts a connection and control messages make a round trip; a
 * data active message lands where data_dest said, also after being parked;
 * a connection fails when its peer closes it or falls silent; registered
 * memory and its packed key take a put from the peer; the lanes module
 * answers for a data endpoint under the process's UCX_TLS.
 *
 * Two workers in one process stand for the two sides. Every wait is
 * bounded (WAIT_S), so a lost callback fails the case instead of hanging.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "timed_wait.h"
#include "lanes.h"
#include "transports.h"
#include "worker.h"
#include "worker_internal.h" /* a lane's worker, to stop its thread */

#define WAIT_S 10.0
#define BIG_LEN (1u << 20) /* a data message that goes by rendezvous */

/* One side: a worker and what its callbacks saw, under 'lock'. */
struct side {
    wst_worker_t *w;
    struct wst_logger log;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int reply;   /* answer every control message with "pong" */
    int no_data; /* takes no data (a sender): no data_dest, no data_done */

    int n_accepted;
    wst_conn_t *accepted;
    int n_msgs;
    char msg[64];
    int seq_gaps; /* "hb N" messages whose N was not the last one's + 1 */
    unsigned long long last_seq;
    int n_failed;
    wst_status_t failed_status;

    /* Data: one destination buffer; data_dest says busy while 'hold'. */
    unsigned char *dest;
    size_t dest_len;
    int hold;
    int n_dest_calls;
    int n_dest_rndv; /* of them, rendezvous messages (UCX moves the bytes) */
    /* Run on the progress thread at data_dest call number dest_hook_at. */
    void (*dest_hook)(void *arg);
    void *dest_hook_arg;
    int dest_hook_at;
    unsigned lanes;        /* data lanes of the worker */
    pthread_t main_thread; /* its progress thread (lanes: filled in) */
    int done_elsewhere;    /* data_done calls on another thread */
    int n_done;
    wst_status_t done_status;
    struct wst_data_hdr done_hdr;
    void *done_dest;
    size_t done_len;
};

static void side_signal(struct side *s)
{
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

/* Waits until *counter >= want; 0 on time out. */
static int side_wait(struct side *s, const int *counter, int want)
{
    uint64_t deadline = wst_deadline_ns(WAIT_S);
    int ok;

    pthread_mutex_lock(&s->lock);
    while (*counter < want &&
           wst_cond_wait_until(&s->cond, &s->lock, deadline) == WST_OK)
        ;
    ok = *counter >= want;
    pthread_mutex_unlock(&s->lock);
    return ok;
}

/* *counter (or any field), read under the lock. */
static int side_count(struct side *s, const int *counter)
{
    pthread_mutex_lock(&s->lock);
    int n = *counter;
    pthread_mutex_unlock(&s->lock);
    return n;
}

static void on_accepted(void *arg, wst_conn_t *conn)
{
    struct side *s = arg;

    pthread_mutex_lock(&s->lock);
    s->accepted = conn;
    s->n_accepted++;
    side_signal(s);
}

static void on_message(void *arg, wst_conn_t *conn, const void *buf, size_t len)
{
    struct side *s = arg;

    pthread_mutex_lock(&s->lock);
    snprintf(s->msg, sizeof(s->msg), "%.*s", (int)len, (const char *)buf);
    unsigned long long seq;
    if (sscanf(s->msg, "hb %llu", &seq) == 1) {
        s->seq_gaps += seq != s->last_seq + 1;
        s->last_seq = seq;
    }
    s->n_msgs++;
    side_signal(s);
    if (s->reply)
        wst_conn_send(conn, strdup("pong"), 4);
}

static void on_failed(void *arg, wst_conn_t *conn, wst_status_t status,
                      const char *why)
{
    struct side *s = arg;

    (void)conn;
    (void)why;
    pthread_mutex_lock(&s->lock);
    s->failed_status = status;
    s->n_failed++;
    side_signal(s);
}

static wst_status_t on_data_dest(void *arg, const struct wst_data_hdr *hdr,
                                 size_t len, int rndv, void **dest_p)
{
    struct side *s = arg;
    wst_status_t st = WST_OK;

    pthread_mutex_lock(&s->lock);
    s->n_dest_calls++;
    s->n_dest_rndv += rndv != 0;
    if (s->dest_hook != NULL && s->n_dest_calls == s->dest_hook_at)
        s->dest_hook(s->dest_hook_arg);
    if (s->hold)
        st = WST_ERR_BUSY;
    else if (hdr->offset + len > s->dest_len)
        st = WST_ERR_INVALID;
    else
        *dest_p = s->dest + hdr->offset;
    side_signal(s);
    return st;
}

static void on_data_done(void *arg, const struct wst_data_hdr *hdr, void *dest,
                         size_t len, wst_status_t status)
{
    struct side *s = arg;

    pthread_mutex_lock(&s->lock);
    if (s->lanes > 1 && !pthread_equal(pthread_self(), s->main_thread))
        s->done_elsewhere++;
    s->done_hdr = *hdr;
    s->done_dest = dest;
    s->done_len = len;
    s->done_status = status;
    s->n_done++;
    side_signal(s);
}

static wst_status_t side_start(struct side *s,
                               const struct wst_heartbeat_params *hb)
{
    struct wst_worker_params p = {
        .log = &s->log,
        .ops =
            {
                .arg = s,
                .accepted = on_accepted,
                .message = on_message,
                .conn_failed = on_failed,
                .data_dest = on_data_dest,
                .data_done = on_data_done,
            },
        .tick_ms = 20,
        /* The worker's own puts are tested here, on lanes that may only
         * emulate them. */
        .rma = WST_WORKER_RMA_ALWAYS,
        .lanes = s->lanes,
    };

    if (s->no_data) {
        p.ops.data_dest = NULL;
        p.ops.data_done = NULL;
    }
    wst_logger_init(&s->log, "test", WST_LOG_WARN);
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    if (hb != NULL)
        p.heartbeat = *hb;
    return wst_worker_create(&p, &s->w);
}

static void side_stop(struct side *s)
{
    wst_worker_destroy(s->w);
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->lock);
    free(s->dest);
}

/* ---- calls onto a progress thread ---- */

struct listen_call {
    wst_worker_t *w;
    uint16_t port;
    wst_status_t st;
};

static void do_listen(void *arg)
{
    struct listen_call *c = arg;

    c->st = wst_worker_listen(c->w, "127.0.0.1", 0, &c->port);
}

struct connect_call {
    wst_worker_t *w;
    uint16_t port;
    wst_conn_t *conn;
    wst_status_t st;
};

static void do_connect(void *arg)
{
    struct connect_call *c = arg;

    c->st = wst_conn_connect(c->w, "127.0.0.1", c->port, &c->conn);
}

struct send_call {
    wst_conn_t *conn;
    const char *text;
    wst_status_t st;
};

static void do_send(void *arg)
{
    struct send_call *c = arg;

    c->st = wst_conn_send(c->conn, strdup(c->text), strlen(c->text));
}

static void do_close(void *arg)
{
    wst_conn_close(arg);
}

struct address_call {
    wst_worker_t *w;
    void *addr; /* malloc'd copy */
    size_t len;
};

static void do_address(void *arg)
{
    struct address_call *c = arg;
    const void *addr;

    if (wst_worker_address(c->w, &addr, &c->len) != WST_OK)
        return;
    c->addr = malloc(c->len);
    if (c->addr != NULL)
        memcpy(c->addr, addr, c->len);
}

struct open_data_call {
    wst_conn_t *conn;
    const void *addr;
    size_t len;
    int peer_errors;
    char lanes[256];
    int rma_real;
    wst_status_t st;
};

static void do_open_data(void *arg)
{
    struct open_data_call *c = arg;

    c->st = wst_conn_open_data(c->conn, c->addr, c->len, c->peer_errors,
                               c->lanes, sizeof(c->lanes), &c->rma_real);
}

static void do_resume(void *arg)
{
    struct side *s = arg;

    pthread_mutex_lock(&s->lock);
    s->hold = 0;
    pthread_mutex_unlock(&s->lock);
    wst_worker_data_resume(s->w);
}

struct parked_call {
    wst_worker_t *w;
    uint64_t total;
};

static void do_parked_total(void *arg)
{
    struct parked_call *c = arg;

    c->total = wst_worker_parked_total(c->w);
}

/* ---- the pair: a listening server and a connected client ---- */

struct pair {
    struct side srv, cli;
    uint16_t port;    /* the server's */
    wst_conn_t *conn; /* the client's */
};

static int pair_connect(struct pair *p)
{
    struct listen_call lc = {.w = p->srv.w};
    struct connect_call cc = {.w = p->cli.w};

    if (wst_worker_call(p->srv.w, do_listen, &lc) != WST_OK ||
        lc.st != WST_OK || lc.port == 0)
        return -1;
    p->port = cc.port = lc.port;
    if (wst_worker_call(p->cli.w, do_connect, &cc) != WST_OK || cc.st != WST_OK)
        return -1;
    p->conn = cc.conn;
    return 0;
}

static int pair_setup_lanes_with(void **state,
                                 const struct wst_heartbeat_params *hb,
                                 unsigned lanes)
{
    struct pair *p = calloc(1, sizeof(*p));

    if (p != NULL)
        p->srv.lanes = p->cli.lanes = lanes;
    if (p == NULL || side_start(&p->srv, hb) != WST_OK) {
        free(p);
        return -1;
    }
    if (side_start(&p->cli, NULL) != WST_OK) {
        side_stop(&p->srv);
        free(p);
        return -1;
    }
    if (pair_connect(p) != 0) {
        side_stop(&p->cli);
        side_stop(&p->srv);
        free(p);
        return -1;
    }
    *state = p;
    return 0;
}

static int pair_setup_with(void **state, const struct wst_heartbeat_params *hb)
{
    return pair_setup_lanes_with(state, hb, 0);
}

static int pair_setup(void **state)
{
    return pair_setup_with(state, NULL);
}

/* Both sides with three data lanes. */
static int pair_setup_lanes(void **state)
{
    return pair_setup_lanes_with(state, NULL, 3);
}

/* The heartbeat numbered seq, as text: "hb <seq>". */
static wst_status_t encode_hb(uint64_t seq, void **msg_p, size_t *len_p)
{
    char text[32];
    int n = snprintf(text, sizeof(text), "hb %llu", (unsigned long long)seq);

    *msg_p = strdup(text);
    *len_p = (size_t)n;
    return *msg_p != NULL ? WST_OK : WST_ERR_NO_MEMORY;
}

/* The server fails silent connections after 0.5 s and sends heartbeats
 * every 50 ms; the client sends none. */
static int pair_setup_heartbeat(void **state)
{
    struct wst_heartbeat_params params = {
        .interval_s = 0.05,
        .timeout_s = 0.5,
        .encode = encode_hb,
    };

    return pair_setup_with(state, &params);
}

static int pair_teardown(void **state)
{
    struct pair *p = *state;

    side_stop(&p->cli);
    side_stop(&p->srv);
    free(p);
    return 0;
}

struct timing_call {
    wst_worker_t *w;
    struct wst_rx_timing t;
};

static void do_timing(void *arg)
{
    struct timing_call *tc = arg;

    wst_worker_rx_timing_take(tc->w, &tc->t);
}

/* The server's rendezvous timing since the last take (and a second take,
 * which must find it reset). */
static void srv_timing(struct pair *p, uint64_t messages, uint64_t bytes)
{
    struct timing_call tc = {.w = p->srv.w};

    assert_int_equal(wst_worker_call(p->srv.w, do_timing, &tc), WST_OK);
    assert_int_equal(tc.t.messages, messages);
    assert_int_equal(tc.t.bytes, bytes);
    assert_true(tc.t.max_ns > 0);
    assert_true(tc.t.to_recv_ns > 0);
    assert_int_equal(wst_worker_call(p->srv.w, do_timing, &tc), WST_OK);
    assert_int_equal(tc.t.messages + tc.t.bytes + tc.t.max_ns, 0);
}

/* Sends 'text' from the client and waits until the server has it. */
static void client_says(struct pair *p, const char *text)
{
    struct send_call sc = {.conn = p->conn, .text = text};
    int want = side_count(&p->srv, &p->srv.n_msgs) + 1;

    assert_int_equal(wst_worker_call(p->cli.w, do_send, &sc), WST_OK);
    assert_int_equal(sc.st, WST_OK);
    assert_true(side_wait(&p->srv, &p->srv.n_msgs, want));
}

/* Opens the data endpoint of the client's 'conn' to the server's worker. */
static void open_data_on(struct pair *p, wst_conn_t *conn, int peer_errors,
                         struct open_data_call *oc)
{
    struct address_call ac = {.w = p->srv.w};

    assert_int_equal(wst_worker_call(p->srv.w, do_address, &ac), WST_OK);
    assert_non_null(ac.addr);
    oc->conn = conn;
    oc->addr = ac.addr;
    oc->len = ac.len;
    oc->peer_errors = peer_errors;
    assert_int_equal(wst_worker_call(p->cli.w, do_open_data, oc), WST_OK);
    free(ac.addr);
    assert_int_equal(oc->st, WST_OK);
    assert_non_null(wst_conn_data_ep(conn));
}

/* Opens the data endpoint of the client's first connection. */
static void open_data(struct pair *p, int peer_errors,
                      struct open_data_call *oc)
{
    open_data_on(p, p->conn, peer_errors, oc);
}

/* ---- posted functions ---- */

#define N_POSTS 100

struct order {
    wst_worker_t *w;
    pthread_t thread[N_POSTS + 3];
    int seen[N_POSTS + 3];
    int n_seen;
};

struct post_arg {
    struct order *o;
    int id;
};

static void record(void *arg)
{
    struct post_arg *a = arg;

    a->o->thread[a->o->n_seen] = pthread_self();
    a->o->seen[a->o->n_seen++] = a->id;
    /* The 50th posts one more from the progress thread itself. */
    if (a->id == 50)
        wst_worker_post(a->o->w, record, a + (N_POSTS + 1 - 50));
}

static void test_worker_post_call_order(void **state)
{
    struct side s = {0};
    struct order o = {0};
    struct post_arg args[N_POSTS + 2];

    (void)state;
    assert_int_equal(side_start(&s, NULL), WST_OK);
    o.w = s.w;
    for (int i = 0; i < N_POSTS + 2; i++)
        args[i] = (struct post_arg){.o = &o, .id = i};
    for (int i = 0; i < N_POSTS; i++)
        assert_int_equal(wst_worker_post(s.w, record, &args[i]), WST_OK);
    /* A call runs after everything this thread posted before it. */
    assert_int_equal(wst_worker_call(s.w, record, &args[N_POSTS]), WST_OK);
    /* The post from inside the 50th was queued before this call. */
    assert_int_equal(wst_worker_call(s.w, record, &args[N_POSTS]), WST_OK);

    /* Posts from one thread run in order, the call after them; the post
     * made by the 50th runs after it and before the second call (it was
     * queued when the second call was posted). */
    assert_int_equal(o.n_seen, N_POSTS + 3);
    int next = 0, inner_at = -1, call_at = -1;
    for (int i = 0; i < o.n_seen; i++) {
        if (o.seen[i] == N_POSTS + 1)
            inner_at = i;
        else if (o.seen[i] == N_POSTS && call_at < 0)
            call_at = i;
        else if (o.seen[i] < N_POSTS)
            assert_int_equal(o.seen[i], next++);
    }
    assert_int_equal(next, N_POSTS);
    assert_int_equal(o.seen[N_POSTS + 2], N_POSTS);
    assert_true(call_at >= N_POSTS && call_at <= N_POSTS + 1);
    assert_true(inner_at > 50 && inner_at < N_POSTS + 2);
    for (int i = 0; i < o.n_seen; i++) {
        assert_false(pthread_equal(o.thread[i], pthread_self()));
        assert_true(pthread_equal(o.thread[i], o.thread[0]));
    }
    side_stop(&s);
}

/* ---- control messages ---- */

static void test_worker_control_round_trip(void **state)
{
    struct pair *p = *state;

    p->srv.reply = 1;
    client_says(p, "ping");
    assert_int_equal(p->srv.n_accepted, 1);
    assert_string_equal(p->srv.msg, "ping");
    assert_true(side_wait(&p->cli, &p->cli.n_msgs, 1));
    assert_string_equal(p->cli.msg, "pong");
    /* The accepted connection is named after the client's address. */
    assert_non_null(p->srv.accepted);
    assert_true(strncmp(wst_conn_name(p->srv.accepted), "127.0.0.1:", 10) == 0);
    assert_true(strncmp(wst_conn_name(p->conn), "127.0.0.1:", 10) == 0);
    assert_int_equal(p->srv.n_failed + p->cli.n_failed, 0);

    /* Counted: one message each way, payload bytes only, no heartbeats
     * here (the handshake is not a control message). */
    struct wst_control_counts cli, srv;
    wst_worker_control_counts(p->cli.w, &cli);
    wst_worker_control_counts(p->srv.w, &srv);
    assert_int_equal(cli.msgs_out, 1);
    assert_int_equal(cli.bytes_out, 4);
    assert_int_equal(cli.msgs_in, 1);
    assert_int_equal(cli.bytes_in, 4);
    assert_int_equal(srv.msgs_out, 1);
    assert_int_equal(srv.msgs_in, 1);
    assert_int_equal(srv.bytes_in, 4);
}

/* ---- UCX operations of the test's own ---- */

/* UCX operations started on a worker's thread, counted as they complete
 * (their callbacks run on that thread; the test thread waits). */
struct ucx_ops {
    wst_worker_t *w;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int n_done;
    ucs_status_t status; /* the first failure */
};

static void ops_init(struct ucx_ops *o, wst_worker_t *w)
{
    memset(o, 0, sizeof(*o));
    o->w = w;
    pthread_mutex_init(&o->lock, NULL);
    pthread_cond_init(&o->cond, NULL);
}

static void ops_fini(struct ucx_ops *o)
{
    pthread_cond_destroy(&o->cond);
    pthread_mutex_destroy(&o->lock);
}

static void op_count(struct ucx_ops *o, ucs_status_t status)
{
    pthread_mutex_lock(&o->lock);
    if (status != UCS_OK && o->status == UCS_OK)
        o->status = status;
    o->n_done++;
    pthread_cond_broadcast(&o->cond);
    pthread_mutex_unlock(&o->lock);
}

static void op_done(void *request, ucs_status_t status, void *user_data)
{
    struct ucx_ops *o = user_data;

    wst_worker_busy(o->w, -1);
    ucp_request_free(request);
    op_count(o, status);
}

/* After starting an operation with op_done as its callback. */
static void op_track(struct ucx_ops *o, ucs_status_ptr_t req)
{
    if (req == NULL)
        op_count(o, UCS_OK);
    else if (UCS_PTR_IS_ERR(req))
        op_count(o, UCS_PTR_STATUS(req));
    else
        wst_worker_busy(o->w, 1); /* poll while it is in flight */
}

static int ops_done(struct ucx_ops *o)
{
    pthread_mutex_lock(&o->lock);
    int n = o->n_done;
    pthread_mutex_unlock(&o->lock);
    return n;
}

/* Waits, bounded, until n operations completed, all of them well. */
static void ops_wait(struct ucx_ops *o, int n)
{
    uint64_t deadline = wst_deadline_ns(WAIT_S);

    pthread_mutex_lock(&o->lock);
    while (o->n_done < n &&
           wst_cond_wait_until(&o->cond, &o->lock, deadline) == WST_OK)
        ;
    pthread_mutex_unlock(&o->lock);
    assert_int_equal(ops_done(o), n);
    assert_int_equal(o->status, UCS_OK);
}

/* ---- data messages ---- */

struct am_send {
    struct ucx_ops ops;
    ucp_ep_h ep;
    struct wst_data_hdr hdr; /* must outlive the send (UCX 1.13) */
    const void *bytes;
    size_t len;
};

static void do_am_send(void *arg)
{
    struct am_send *a = arg;
    ucp_request_param_t rp = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                        UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS,
        .cb.send = op_done,
        .user_data = &a->ops,
        .flags = a->len > 8192 ? UCP_AM_SEND_FLAG_RNDV : UCP_AM_SEND_FLAG_EAGER,
    };

    op_track(&a->ops, ucp_am_send_nbx(a->ep, WST_AM_DATA, &a->hdr,
                                      sizeof(a->hdr), a->bytes, a->len, &rp));
}

/* Starts sending one data message from the client. */
static void data_send_start(struct pair *p, struct am_send *a, uint32_t item,
                            const void *bytes, size_t len)
{
    ops_init(&a->ops, p->cli.w);
    a->ep = wst_conn_data_ep(p->conn);
    a->hdr = (struct wst_data_hdr){.token = 0x5eed00000007ull,
                                   .rank = 2,
                                   .item = item,
                                   .version = 3,
                                   .count = 1};
    a->bytes = bytes;
    a->len = len;
    assert_int_equal(wst_worker_post(p->cli.w, do_am_send, a), WST_OK);
}

static void data_send_wait(struct am_send *a)
{
    ops_wait(&a->ops, 1);
    ops_fini(&a->ops);
}

static unsigned char *pattern(size_t len, unsigned seed)
{
    unsigned char *b = malloc(len);

    assert_non_null(b);
    for (size_t i = 0; i < len; i++)
        b[i] = (unsigned char)(i * 131u + seed);
    return b;
}

/* A zeroed destination of 'len' bytes on the server, and the client's
 * data endpoint (peer-failure mode) to it. */
static void data_ready(struct pair *p, size_t len, struct open_data_call *oc)
{
    p->srv.dest = calloc(1, len);
    p->srv.dest_len = len;
    assert_non_null(p->srv.dest);
    client_says(p, "hello");
    open_data(p, 1, oc);
}

/* An eager and a rendezvous message, each where data_dest put it. */
static void test_worker_data_lands_at_dest(void **state)
{
    struct pair *p = *state;
    struct open_data_call oc = {0};
    struct am_send a;
    unsigned char *small = pattern(256, 1);
    unsigned char *big = pattern(BIG_LEN, 2);

    data_ready(p, BIG_LEN, &oc);

    data_send_start(p, &a, 4, small, 256);
    data_send_wait(&a);
    assert_true(side_wait(&p->srv, &p->srv.n_done, 1));
    assert_int_equal(p->srv.done_status, WST_OK);
    assert_true(p->srv.done_hdr.token == 0x5eed00000007ull);
    assert_int_equal(p->srv.done_hdr.rank, 2);
    assert_int_equal(p->srv.done_hdr.item, 4);
    assert_int_equal(p->srv.done_hdr.version, 3);
    assert_int_equal(p->srv.done_len, 256);
    assert_ptr_equal(p->srv.done_dest, p->srv.dest);
    assert_memory_equal(p->srv.dest, small, 256);
    /* data_dest learns which is which: an eager message is copied with
     * memcpy, so its place must be host memory. */
    assert_int_equal(side_count(&p->srv, &p->srv.n_dest_rndv), 0);

    data_send_start(p, &a, 5, big, BIG_LEN);
    data_send_wait(&a);
    assert_true(side_wait(&p->srv, &p->srv.n_done, 2));
    assert_int_equal(p->srv.done_status, WST_OK);
    assert_int_equal(p->srv.done_hdr.item, 5);
    assert_int_equal(p->srv.done_len, BIG_LEN);
    assert_memory_equal(p->srv.dest, big, BIG_LEN);
    assert_int_equal(side_count(&p->srv, &p->srv.n_dest_rndv), 1);
    /* Only the rendezvous one is timed. */
    srv_timing(p, 1, BIG_LEN);
    free(small);
    free(big);
}

/* data_dest busy: the message waits, parked, until the owner resumes. */
static void test_worker_data_parked_until_resume(void **state)
{
    struct pair *p = *state;
    struct open_data_call oc = {0};
    struct parked_call pc = {.w = p->srv.w};
    struct am_send a;
    unsigned char *big = pattern(BIG_LEN, 3);

    data_ready(p, BIG_LEN, &oc);
    p->srv.hold = 1;

    data_send_start(p, &a, 9, big, BIG_LEN);
    assert_true(side_wait(&p->srv, &p->srv.n_dest_calls, 1));
    assert_int_equal(wst_worker_call(p->srv.w, do_parked_total, &pc), WST_OK);
    assert_int_equal(pc.total, 1);
    assert_int_equal(p->srv.n_done, 0);

    assert_int_equal(wst_worker_call(p->srv.w, do_resume, &p->srv), WST_OK);
    data_send_wait(&a);
    assert_true(side_wait(&p->srv, &p->srv.n_done, 1));
    assert_int_equal(p->srv.done_status, WST_OK);
    assert_int_equal(p->srv.done_hdr.item, 9);
    assert_int_equal(p->srv.n_dest_calls, 2);
    assert_memory_equal(p->srv.dest, big, BIG_LEN);
    free(big);
}

/* ---- a failed refit's receive, and the data worker reset ---- */

/* The client's progress thread, stopped (as a stopped sender's is) once
 * its message was announced: it waits until 'go'. */
struct stall {
    wst_worker_t *w;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int stopped, go;
};

static void do_stall(void *arg)
{
    struct stall *st = arg;

    pthread_mutex_lock(&st->lock);
    st->stopped = 1;
    pthread_cond_broadcast(&st->cond);
    while (!st->go)
        pthread_cond_wait(&st->cond, &st->lock);
    pthread_mutex_unlock(&st->lock);
}

/* The server's data_dest hook, on its progress thread before it answers
 * the announcement: the client is stopped before the answer can reach it
 * (waited for here, bounded; the test checks 'stopped'). */
static void post_stall(void *arg)
{
    struct stall *st = arg;
    uint64_t deadline = wst_deadline_ns(WAIT_S);

    if (wst_worker_post(st->w, do_stall, st) != WST_OK)
        return;
    pthread_mutex_lock(&st->lock);
    while (!st->stopped &&
           wst_cond_wait_until(&st->cond, &st->lock, deadline) == WST_OK)
        ;
    pthread_mutex_unlock(&st->lock);
}

static void stall_release(struct stall *st)
{
    pthread_mutex_lock(&st->lock);
    st->go = 1;
    pthread_cond_broadcast(&st->cond);
    pthread_mutex_unlock(&st->lock);
}

struct reset_call {
    wst_worker_t *w;
    size_t receiving_before, receiving_after;
    int made, room;
};

static void do_data_reset(void *arg)
{
    struct reset_call *c = arg;

    c->receiving_before = wst_worker_data_receiving(c->w);
    c->made = wst_worker_data_reset(c->w);
    c->receiving_after = wst_worker_data_receiving(c->w);
    c->room = wst_worker_data_reset_room(c->w);
}

static int all_zero(const unsigned char *b, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (b[i] != 0)
            return 0;
    return 1;
}

#define LATE_LEN (8u << 20) /* many rendezvous fragments */

/* A rendezvous message whose receive the server has posted (its data_dest
 * gave the destination) while the client's thread is stopped, as when a
 * sender is stopped mid-refit; then (reset) the server resets its data
 * worker, and the client resumes. Without the reset the bytes land after
 * whatever the server decided meanwhile; with it they never do, the
 * receive is reported cancelled, and the server's new address takes data
 * on a new connection. */
static void late_receive(struct pair *p, int reset)
{
    struct am_send a;
    struct open_data_call oc = {0};
    struct stall st = {.w = p->cli.w};
    struct address_call old_addr = {.w = p->srv.w};
    unsigned char *small = pattern(256, 5);
    unsigned char *big = pattern(LATE_LEN, 6);

    data_ready(p, LATE_LEN, &oc);
    /* Wired up: the big message's announcement leaves with its send. */
    data_send_start(p, &a, 1, small, 256);
    data_send_wait(&a);
    assert_true(side_wait(&p->srv, &p->srv.n_done, 1));
    memset(p->srv.dest, 0, 256);

    pthread_mutex_init(&st.lock, NULL);
    pthread_cond_init(&st.cond, NULL);
    pthread_mutex_lock(&p->srv.lock);
    p->srv.dest_hook = post_stall;
    p->srv.dest_hook_arg = &st;
    p->srv.dest_hook_at = 2;
    pthread_mutex_unlock(&p->srv.lock);
    data_send_start(p, &a, 2, big, LATE_LEN);
    int placed = side_wait(&p->srv, &p->srv.n_dest_calls, 2);
    uint64_t deadline = wst_deadline_ns(WAIT_S);
    pthread_mutex_lock(&st.lock);
    while (placed && !st.stopped &&
           wst_cond_wait_until(&st.cond, &st.lock, deadline) == WST_OK)
        ;
    int stopped = st.stopped;
    pthread_mutex_unlock(&st.lock);
    int done_before = side_count(&p->srv, &p->srv.n_done);
    wst_worker_call(p->srv.w, do_address, &old_addr);
    struct reset_call rc = {.w = p->srv.w};
    wst_status_t call_st = WST_OK;
    if (reset)
        call_st = wst_worker_call(p->srv.w, do_data_reset, &rc);
    /* Released before any check: a failed one must not leave the client
     * stopped for the teardown to wait on. */
    stall_release(&st);
    assert_true(placed);
    assert_true(stopped);
    assert_int_equal(done_before, 1);
    assert_non_null(old_addr.addr);
    if (reset) {
        assert_int_equal(call_st, WST_OK);
        assert_int_equal(rc.made, 1);
        assert_int_equal(rc.receiving_before, 1);
        assert_int_equal(rc.receiving_after, 0);
        assert_int_equal(rc.room, 15);
        assert_int_equal(side_count(&p->srv, &p->srv.n_done), 2);
        assert_int_equal(p->srv.done_status, WST_ERR_CANCELED);
        assert_int_equal(p->srv.done_hdr.item, 2);
    }
    if (!reset) {
        /* The control: the stopped sender's bytes do land, late. */
        assert_true(side_wait(&p->srv, &p->srv.n_done, 2));
        assert_int_equal(p->srv.done_status, WST_OK);
        assert_memory_equal(p->srv.dest, big, LATE_LEN);
    } else {
        /* Given every chance to land: none does. */
        usleep(500000);
        assert_int_equal(side_count(&p->srv, &p->srv.n_done), 2);
        pthread_mutex_lock(&p->srv.lock);
        assert_true(all_zero(p->srv.dest, LATE_LEN));
        pthread_mutex_unlock(&p->srv.lock);

        /* A new address, and data on it lands. */
        struct address_call new_addr = {.w = p->srv.w};
        struct connect_call cc = {.w = p->cli.w, .port = p->port};
        struct open_data_call oc2 = {0};
        struct am_send b;
        assert_int_equal(wst_worker_call(p->srv.w, do_address, &new_addr),
                         WST_OK);
        assert_non_null(new_addr.addr);
        assert_true(new_addr.len != old_addr.len ||
                    memcmp(new_addr.addr, old_addr.addr, old_addr.len) != 0);
        free(new_addr.addr);
        assert_int_equal(wst_worker_call(p->cli.w, do_connect, &cc), WST_OK);
        assert_int_equal(cc.st, WST_OK);
        open_data_on(p, cc.conn, 1, &oc2);
        ops_init(&b.ops, p->cli.w);
        b.ep = wst_conn_data_ep(cc.conn);
        b.hdr = a.hdr;
        b.hdr.item = 3;
        b.bytes = small;
        b.len = 256;
        assert_int_equal(wst_worker_post(p->cli.w, do_am_send, &b), WST_OK);
        data_send_wait(&b);
        assert_true(side_wait(&p->srv, &p->srv.n_done, 3));
        assert_int_equal(p->srv.done_status, WST_OK);
        assert_int_equal(p->srv.done_hdr.item, 3);
        assert_memory_equal(p->srv.dest, small, 256);
    }
    free(old_addr.addr);
    /* The client's worker goes first, with the send it may still hold. */
    wst_worker_destroy(p->cli.w);
    p->cli.w = NULL;
    ops_fini(&a.ops);
    pthread_cond_destroy(&st.cond);
    pthread_mutex_destroy(&st.lock);
    free(small);
    free(big);
}

static void test_worker_late_receive_lands(void **state)
{
    late_receive(*state, 0);
}

static void test_worker_data_reset_stops_late_receive(void **state)
{
    late_receive(*state, 1);
}

/* ---- failures ---- */

/* The client closes its connection: the server's fails, once. */
struct held_call {
    wst_conn_t *conn;
    size_t held;
};

static void do_held(void *arg)
{
    struct held_call *h = arg;

    h->held = wst_conn_rx_held(h->conn);
}

/* A large control message grows the receiver's buffer while it is read,
 * and the buffer is given back once it was delivered: before, every
 * connection that ever carried a 64 MiB manifest kept 64 MiB. */
static void test_worker_large_message_buffer_given_back(void **state)
{
    struct pair *p = *state;
    const size_t big = 4u << 20;
    char *text = malloc(big + 1);

    assert_non_null(text);
    memset(text, 'm', big);
    text[big] = '\0';
    client_says(p, "hello");
    assert_non_null(p->srv.accepted);
    client_says(p, text);
    free(text);
    client_says(p, "after");
    struct held_call h = {.conn = p->srv.accepted};
    assert_int_equal(wst_worker_call(p->srv.w, do_held, &h), WST_OK);
    fprintf(stderr, "receive buffer after a %zu-byte message: %zu bytes\n", big,
            h.held);
    assert_true(h.held <= (256u << 10));
}

static void test_worker_conn_failed_on_peer_close(void **state)
{
    struct pair *p = *state;

    client_says(p, "bye");
    assert_int_equal(wst_worker_call(p->cli.w, do_close, p->conn), WST_OK);
    assert_true(side_wait(&p->srv, &p->srv.n_failed, 1));
    assert_true(p->srv.failed_status < 0);
    assert_int_not_equal(p->srv.failed_status, WST_ERR_TIMED_OUT);
    /* No callback for a connection its owner closed. */
    assert_int_equal(p->cli.n_failed, 0);
}

/* A client that sends nothing fails on the server after the timeout, and
 * it received the server's heartbeats meanwhile, numbered 1, 2, 3, ... */
static void test_worker_heartbeat_timeout(void **state)
{
    struct pair *p = *state;

    assert_true(side_wait(&p->srv, &p->srv.n_failed, 1));
    assert_int_equal(p->srv.failed_status, WST_ERR_TIMED_OUT);
    assert_true(side_wait(&p->cli, &p->cli.n_msgs, 2));
    pthread_mutex_lock(&p->cli.lock);
    unsigned long long last = p->cli.last_seq;
    int gaps = p->cli.seq_gaps, n = p->cli.n_msgs;
    pthread_mutex_unlock(&p->cli.lock);
    assert_true(last >= 2);
    assert_int_equal(last, (unsigned long long)n);
    assert_int_equal(gaps, 0);
    assert_int_equal(side_count(&p->cli, &p->cli.n_failed), 0);
}

static void block_thread(void *arg)
{
    const struct timespec *ts = arg;

    nanosleep(ts, NULL);
}

/* A progress thread held up past the timeout (a long UCX progress call
 * under load) while the client kept talking: the client's messages wait
 * in the socket, and the server reads them before it judges the client
 * silent. It judged first, and failed a live sender, before 2026-12-02:
 * "no message for 2.2 s" in fault tests run two at a time. */
static void test_worker_heartbeat_held_up_reads_first(void **state)
{
    struct pair *p = *state;
    struct timespec hold = {0, 800 * 1000 * 1000}; /* timeout 0.5 s */
    struct timespec step = {0, 50 * 1000 * 1000};

    client_says(p, "hello");
    assert_int_equal(wst_worker_post(p->srv.w, block_thread, &hold), WST_OK);
    for (int i = 0; i < 16; i++) { /* 0.8 s, and past the hold */
        struct send_call sc = {.conn = p->conn, .text = "still here"};
        assert_int_equal(wst_worker_call(p->cli.w, do_send, &sc), WST_OK);
        assert_int_equal(sc.st, WST_OK);
        nanosleep(&step, NULL);
    }
    assert_true(side_wait(&p->srv, &p->srv.n_msgs, 17));
    assert_int_equal(side_count(&p->srv, &p->srv.n_failed), 0);
}

/* ---- memory ---- */

struct put_call {
    struct ucx_ops ops;
    ucp_ep_h ep;
    const void *rkey_buf;
    const void *src;
    void *dst;
    size_t len;
    ucp_rkey_h rkey;
};

/* A put of the whole buffer and a flush, on the client's thread. */
static void do_put(void *arg)
{
    struct put_call *c = arg;
    ucp_request_param_t rp = {
        .op_attr_mask =
            UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send = op_done,
        .user_data = &c->ops,
    };
    ucs_status_t st = ucp_ep_rkey_unpack(c->ep, c->rkey_buf, &c->rkey);

    if (st != UCS_OK) {
        op_count(&c->ops, st);
        op_count(&c->ops, st);
        return;
    }
    op_track(&c->ops, ucp_put_nbx(c->ep, c->src, c->len,
                                  (uint64_t)(uintptr_t)c->dst, c->rkey, &rp));
    op_track(&c->ops, ucp_ep_flush_nbx(c->ep, &rp));
}

static void do_rkey_destroy(void *arg)
{
    struct put_call *c = arg;

    if (c->rkey != NULL)
        ucp_rkey_destroy(c->rkey);
}

/* Memory mapped on the server, its key packed there and unpacked by the
 * client, takes the client's put. */
/* By default a worker offers remote memory access only where a transport
 * puts in hardware: on a host without RDMA, none (UCX would emulate puts
 * and write wherever a peer said). */
static void test_worker_no_emulated_rma(void **state)
{
    struct wst_logger log;
    struct wst_transport *t = NULL;
    size_t n = 0;
    char why[256];
    const char *worker_why = NULL;
    wst_worker_t *w = NULL;
    struct wst_worker_params p = {.log = &log};

    (void)state;
    wst_logger_init(&log, "test", WST_LOG_WARN);
    assert_int_equal(wst_transports_probe(&log, &t, &n), WST_OK);
    int hardware = wst_transports_rma_real(t, n, why, sizeof(why));
    free(t);
    assert_int_equal(wst_worker_create(&p, &w), WST_OK);
    assert_int_equal(wst_worker_has_rma(w, &worker_why), hardware);
    assert_non_null(worker_why);
    if (!hardware)
        assert_non_null(strstr(worker_why, "no lane puts in hardware"));
    wst_worker_destroy(w);
    p.rma = WST_WORKER_RMA_NEVER;
    assert_int_equal(wst_worker_create(&p, &w), WST_OK);
    assert_false(wst_worker_has_rma(w, NULL));
    wst_worker_destroy(w);
}

static void test_worker_mem_map_rkey_pack(void **state)
{
    struct pair *p = *state;
    struct open_data_call oc = {0};
    const size_t len = 64 * 1024;
    unsigned char *dst = calloc(1, len);
    unsigned char *src = pattern(len, 4);
    ucp_mem_h memh = NULL;
    void *rkey = NULL;
    size_t rkey_len = 0;

    assert_non_null(dst);
    assert_int_equal(wst_worker_mem_map(p->srv.w, dst, len, &memh), WST_OK);
    assert_non_null(memh);
    assert_int_equal(wst_worker_rkey_pack(p->srv.w, memh, &rkey, &rkey_len),
                     WST_OK);
    assert_non_null(rkey);
    assert_true(rkey_len > 0);

    client_says(p, "hello");
    open_data(p, 1, &oc);
    struct put_call pc = {.ep = wst_conn_data_ep(p->conn),
                          .rkey_buf = rkey,
                          .src = src,
                          .dst = dst,
                          .len = len};
    ops_init(&pc.ops, p->cli.w);
    assert_int_equal(wst_worker_call(p->cli.w, do_put, &pc), WST_OK);
    ops_wait(&pc.ops, 2);
    /* Where puts are emulated the bytes may land just after the flush
     * (NOTES.md): wait for them, bounded. */
    uint64_t until = wst_now_ns() + (uint64_t)(WAIT_S * 1e9);
    while (memcmp(dst, src, len) != 0 && wst_now_ns() < until) {
        struct timespec ms = {.tv_nsec = 1000000};
        nanosleep(&ms, NULL);
    }
    assert_memory_equal(dst, src, len);
    assert_int_equal(wst_worker_call(p->cli.w, do_rkey_destroy, &pc), WST_OK);
    ops_fini(&pc.ops);

    free(rkey);
    wst_worker_mem_unmap(p->srv.w, memh);
    wst_worker_mem_unmap(p->srv.w, NULL); /* a no-op */
    free(src);
    free(dst);
}

/* ---- lanes ---- */

/* Whether this host may have a transport that puts in hardware: an RDMA
 * device or xpmem. */
static int host_may_put_in_hardware(void)
{
    DIR *d = opendir("/sys/class/infiniband");
    int found = access("/dev/xpmem", F_OK) == 0;

    for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;)
        found |= e->d_name[0] != '.';
    if (d != NULL)
        closedir(d);
    return found;
}

/* Whether UCX_TLS lets data use shared memory. */
static int tls_allows_shm(const char *tls)
{
    return tls == NULL || *tls == '\0' || strstr(tls, "sm") != NULL ||
           strcmp(tls, "all") == 0;
}

/* One data endpoint's lanes and answer: the reason names every lane and
 * agrees with the answer; without RDMA or xpmem the answer is no. */
static void check_lanes(const struct open_data_call *oc, const char *why)
{
    char names[256];

    print_message("UCX_TLS=%s, peer errors %s: lanes %s; %s\n",
                  getenv("UCX_TLS") ? getenv("UCX_TLS") : "(unset)",
                  oc->peer_errors ? "on" : "off", oc->lanes, why);
    assert_true(oc->lanes[0] != '\0');
    snprintf(names, sizeof(names), "%s", oc->lanes);
    for (char *save = NULL, *t = strtok_r(names, " ", &save); t != NULL;
         t = strtok_r(NULL, " ", &save)) {
        char *bracket = strchr(t, '[');
        assert_non_null(bracket);
        *bracket = '\0';
        assert_non_null(strstr(why, t));
    }
    assert_int_equal(oc->rma_real,
                     strncmp(why, "no lane puts in hardware: ", 26) != 0);
    if (!host_may_put_in_hardware())
        assert_int_equal(oc->rma_real, 0);
}

/* The lanes module's answer under the process's UCX_TLS. Without RDMA,
 * puts over tcp and over shared memory are emulated (the am mover), and
 * peer-failure mode keeps data off shared memory. */
/* ---- data lanes ---- */

static void do_self(void *arg)
{
    *(pthread_t *)arg = pthread_self();
}

struct lane_addr_call {
    wst_worker_t *w;
    unsigned lane;
    void *addr;
    size_t len;
    wst_status_t st;
};

static void do_lane_address(void *arg)
{
    struct lane_addr_call *c = arg;

    c->st = wst_worker_lane_address(c->w, c->lane, &c->addr, &c->len);
}

struct open_lanes_call {
    wst_conn_t *conn;
    void *addrs[2];
    size_t lens[2];
    int peer_errors;
    wst_status_t st;
    unsigned lanes;
};

static void do_open_lanes(void *arg)
{
    struct open_lanes_call *c = arg;

    c->st = wst_conn_open_lanes(c->conn, (const void *const *)c->addrs, c->lens,
                                2, c->peer_errors);
    c->lanes = wst_conn_lanes(c->conn);
}

/* The server's two further lanes' addresses. */
static void lane_addresses(struct pair *p, struct open_lanes_call *ol)
{
    for (unsigned i = 0; i < 2; i++) {
        struct lane_addr_call la = {.w = p->srv.w, .lane = i + 1};
        assert_int_equal(wst_worker_call(p->srv.w, do_lane_address, &la),
                         WST_OK);
        assert_int_equal(la.st, WST_OK);
        ol->addrs[i] = la.addr;
        ol->lens[i] = la.len;
    }
}

/* A zeroed destination of 'len' bytes on the server, and the client's
 * data endpoints on all three lanes (peer-failure mode) to it. */
static void lanes_ready(struct pair *p, size_t len)
{
    struct open_data_call oc = {0};
    struct open_lanes_call ol = {.conn = p->conn, .peer_errors = 1};

    p->srv.dest = calloc(1, len);
    p->srv.dest_len = len;
    assert_non_null(p->srv.dest);
    assert_int_equal(wst_worker_call(p->srv.w, do_self, &p->srv.main_thread),
                     WST_OK);
    assert_int_equal(wst_worker_lanes(p->srv.w), 3);
    client_says(p, "hello");
    open_data(p, 1, &oc);
    lane_addresses(p, &ol);
    assert_int_equal(wst_worker_call(p->cli.w, do_open_lanes, &ol), WST_OK);
    free(ol.addrs[0]);
    free(ol.addrs[1]);
    assert_int_equal(ol.st, WST_OK);
    assert_int_equal(ol.lanes, 3);
}

/* One data message sent on a lane of the client's connection. */
struct lane_send_call {
    wst_conn_t *conn;
    unsigned lane;
    struct wst_data_hdr hdr;
    const void *src;
    size_t len;
    int eager; /* eager whatever the size (a hostile peer's choice) */
    pthread_t call_thread, cb_thread;
    wst_status_t st, done_st;
    int done;
    pthread_mutex_t lock;
    pthread_cond_t cond;
};

static void lane_sent(void *arg, wst_status_t status)
{
    struct lane_send_call *c = arg;

    pthread_mutex_lock(&c->lock);
    c->done_st = status;
    c->cb_thread = pthread_self();
    c->done = 1;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
}

static void do_lane_send(void *arg)
{
    struct lane_send_call *c = arg;

    c->call_thread = pthread_self();
    c->st =
        wst_conn_lane_send(c->conn, c->lane, &c->hdr, c->src, c->len,
                           c->len > 8192 && !c->eager ? UCP_AM_SEND_FLAG_RNDV
                                                      : UCP_AM_SEND_FLAG_EAGER,
                           lane_sent, c);
}

/* Starts sending 'len' bytes of src on 'lane', for offset 'offset' of the
 * server's destination. */
static void lane_send_start_as(struct pair *p, struct lane_send_call *c,
                               unsigned lane, uint32_t item, uint64_t offset,
                               const void *src, size_t len, int eager)
{
    memset(c, 0, sizeof(*c));
    c->eager = eager;
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->cond, NULL);
    c->conn = p->conn;
    c->lane = lane;
    c->hdr = (struct wst_data_hdr){.token = 0x5eed00000007ull,
                                   .rank = 2,
                                   .item = item,
                                   .offset = offset,
                                   .version = 3,
                                   .count = 1};
    c->src = src;
    c->len = len;
    assert_int_equal(wst_worker_post(p->cli.w, do_lane_send, c), WST_OK);
}

static void lane_send_start(struct pair *p, struct lane_send_call *c,
                            unsigned lane, uint32_t item, uint64_t offset,
                            const void *src, size_t len)
{
    lane_send_start_as(p, c, lane, item, offset, src, len, 0);
}

/* Waits, bounded, for the send's callback; 1 when it came. */
static int lane_send_wait(struct lane_send_call *c)
{
    uint64_t deadline = wst_deadline_ns(WAIT_S);

    pthread_mutex_lock(&c->lock);
    while (!c->done &&
           wst_cond_wait_until(&c->cond, &c->lock, deadline) == WST_OK)
        ;
    int done = c->done;
    pthread_mutex_unlock(&c->lock);
    return done;
}

static void lane_send_fini(struct lane_send_call *c)
{
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->lock);
}

/* Sends one message on a lane and waits for its callback; its status. */
static wst_status_t lane_send_sync(struct pair *p, unsigned lane, uint32_t item,
                                   const void *src, size_t len, int eager)
{
    struct lane_send_call c;

    lane_send_start_as(p, &c, lane, item, 0, src, len, eager);
    assert_true(lane_send_wait(&c));
    wst_status_t st = c.st != WST_OK ? c.st : c.done_st;
    lane_send_fini(&c);
    return st;
}

/* Messages on lanes 1 and 2, eager and rendezvous, land where data_dest
 * put them; every callback runs on the progress thread of its side. */
static void test_worker_lanes_stripe(void **state)
{
    struct pair *p = *state;
    struct lane_send_call c[4];
    unsigned char *big1 = pattern(BIG_LEN, 11);
    unsigned char *big2 = pattern(BIG_LEN, 12);
    unsigned char *small1 = pattern(256, 13);
    unsigned char *small2 = pattern(256, 14);

    lanes_ready(p, 3 * BIG_LEN);
    lane_send_start(p, &c[0], 1, 1, 0, big1, BIG_LEN);
    lane_send_start(p, &c[1], 2, 2, BIG_LEN, big2, BIG_LEN);
    lane_send_start(p, &c[2], 1, 3, 2 * BIG_LEN, small1, 256);
    lane_send_start(p, &c[3], 2, 4, 2 * BIG_LEN + 4096, small2, 256);
    for (int i = 0; i < 4; i++) {
        assert_true(lane_send_wait(&c[i]));
        assert_int_equal(c[i].st, WST_OK);
        assert_int_equal(c[i].done_st, WST_OK);
        assert_true(pthread_equal(c[i].cb_thread, c[i].call_thread));
        lane_send_fini(&c[i]);
    }
    assert_true(side_wait(&p->srv, &p->srv.n_done, 4));
    /* Every callback has run: nothing writes these any more. */
    assert_int_equal(side_count(&p->srv, &p->srv.n_dest_calls), 4);
    assert_int_equal(side_count(&p->srv, &p->srv.n_dest_rndv), 2);
    assert_int_equal(side_count(&p->srv, &p->srv.done_elsewhere), 0);
    assert_int_equal(p->srv.done_status, WST_OK);
    assert_memory_equal(p->srv.dest, big1, BIG_LEN);
    assert_memory_equal(p->srv.dest + BIG_LEN, big2, BIG_LEN);
    assert_memory_equal(p->srv.dest + 2 * BIG_LEN, small1, 256);
    assert_memory_equal(p->srv.dest + 2 * BIG_LEN + 4096, small2, 256);
    /* The two rendezvous messages, relayed by their lanes, are timed. */
    srv_timing(p, 2, 2 * BIG_LEN);
    free(big1);
    free(big2);
    free(small1);
    free(small2);
}

/* A lane copies an eager message to relay it: one far larger than our
 * senders send is dropped before anything is held for it, and the lane
 * goes on. */
static void test_worker_lanes_big_eager_dropped(void **state)
{
    struct pair *p = *state;
    unsigned char *big = pattern(BIG_LEN, 18);
    unsigned char *small = pattern(256, 19);

    lanes_ready(p, BIG_LEN);
    (void)lane_send_sync(p, 1, 7, big, BIG_LEN, 1); /* sent; dropped there */
    assert_int_equal(lane_send_sync(p, 1, 8, small, 256, 0), WST_OK);
    assert_true(side_wait(&p->srv, &p->srv.n_done, 1));
    /* Read under the lock, checked after it: a failed check must not
     * leave the server's callbacks blocked for the teardown. */
    pthread_mutex_lock(&p->srv.lock);
    int dest_calls = p->srv.n_dest_calls;
    uint32_t item = p->srv.done_hdr.item;
    int small_in = memcmp(p->srv.dest, small, 256) == 0;
    int rest_zero = all_zero(p->srv.dest + 256, BIG_LEN - 256);
    pthread_mutex_unlock(&p->srv.lock);
    assert_int_equal(dest_calls, 1);
    assert_int_equal(item, 8);
    assert_true(small_in);
    assert_true(rest_zero);
    free(big);
    free(small);
}

/* Both sides with three lanes, the client taking no data (a sender). */
static int pair_setup_lanes_sender(void **state)
{
    struct pair *p = calloc(1, sizeof(*p));

    if (p == NULL)
        return -1;
    p->srv.lanes = p->cli.lanes = 3;
    p->cli.no_data = 1;
    if (side_start(&p->srv, NULL) != WST_OK) {
        free(p);
        return -1;
    }
    if (side_start(&p->cli, NULL) != WST_OK || pair_connect(p) != 0) {
        if (p->cli.w != NULL)
            side_stop(&p->cli);
        side_stop(&p->srv);
        free(p);
        return -1;
    }
    *state = p;
    return 0;
}

/* A peer sends data to a worker that takes none (a sender's lane, over
 * the endpoint UCX made for rendezvous replies): it is dropped, and the
 * worker lives on. Before, the lane relayed it and the main thread called
 * a data_dest it does not have. */
static void test_worker_lanes_no_data_taker(void **state)
{
    struct pair *p = *state;
    struct address_call ac = {.w = p->cli.w};
    struct open_data_call oc = {0};
    struct open_lanes_call ol = {.peer_errors = 1};
    unsigned char *small = pattern(256, 20);
    struct lane_send_call c;

    client_says(p, "hello");
    assert_non_null(p->srv.accepted);
    /* The server opens its data lanes to the client's. */
    assert_int_equal(wst_worker_call(p->cli.w, do_address, &ac), WST_OK);
    assert_non_null(ac.addr);
    oc.conn = p->srv.accepted;
    oc.addr = ac.addr;
    oc.len = ac.len;
    oc.peer_errors = 1;
    assert_int_equal(wst_worker_call(p->srv.w, do_open_data, &oc), WST_OK);
    free(ac.addr);
    assert_int_equal(oc.st, WST_OK);
    for (unsigned i = 0; i < 2; i++) {
        struct lane_addr_call la = {.w = p->cli.w, .lane = i + 1};
        assert_int_equal(wst_worker_call(p->cli.w, do_lane_address, &la),
                         WST_OK);
        assert_int_equal(la.st, WST_OK);
        ol.addrs[i] = la.addr;
        ol.lens[i] = la.len;
    }
    ol.conn = p->srv.accepted;
    assert_int_equal(wst_worker_call(p->srv.w, do_open_lanes, &ol), WST_OK);
    free(ol.addrs[0]);
    free(ol.addrs[1]);
    assert_int_equal(ol.lanes, 3);
    /* One message on a lane. */
    memset(&c, 0, sizeof(c));
    pthread_mutex_init(&c.lock, NULL);
    pthread_cond_init(&c.cond, NULL);
    c.conn = p->srv.accepted;
    c.lane = 1;
    c.src = small;
    c.len = 256;
    assert_int_equal(wst_worker_post(p->srv.w, do_lane_send, &c), WST_OK);
    assert_true(lane_send_wait(&c));
    lane_send_fini(&c);
    /* The client is alive and answers. */
    client_says(p, "still here");
    free(small);
}

/* data_dest busy for a lane's message: it waits, parked on the progress
 * thread, until the owner resumes; then its lane receives it. */
static void test_worker_lanes_parked_until_resume(void **state)
{
    struct pair *p = *state;
    struct parked_call pc = {.w = p->srv.w};
    struct lane_send_call c;
    unsigned char *big = pattern(BIG_LEN, 15);

    lanes_ready(p, BIG_LEN);
    p->srv.hold = 1;
    lane_send_start(p, &c, 2, 9, 0, big, BIG_LEN);
    assert_true(side_wait(&p->srv, &p->srv.n_dest_calls, 1));
    assert_int_equal(wst_worker_call(p->srv.w, do_parked_total, &pc), WST_OK);
    assert_int_equal(pc.total, 1);
    assert_int_equal(side_count(&p->srv, &p->srv.n_done), 0);

    assert_int_equal(wst_worker_call(p->srv.w, do_resume, &p->srv), WST_OK);
    assert_true(lane_send_wait(&c));
    assert_int_equal(c.done_st, WST_OK);
    lane_send_fini(&c);
    assert_true(side_wait(&p->srv, &p->srv.n_done, 1));
    assert_int_equal(p->srv.done_status, WST_OK);
    assert_int_equal(p->srv.done_hdr.item, 9);
    assert_int_equal(p->srv.n_dest_calls, 2);
    assert_int_equal(p->srv.done_elsewhere, 0);
    assert_memory_equal(p->srv.dest, big, BIG_LEN);
    free(big);
}

/* A lane's receive posted while the client's lane thread is stopped (a
 * stopped sender): the server's data reset resets its lanes too, the
 * receive is reported cancelled, the bytes never land, and the lane has
 * a new address. */
static void test_worker_lanes_data_reset(void **state)
{
    struct pair *p = *state;
    struct lane_send_call c;
    struct stall st = {.w = p->cli.w->lanes[1]};
    unsigned char *small = pattern(256, 16);
    unsigned char *big = pattern(LATE_LEN, 17);
    struct lane_addr_call old_addr = {.w = p->srv.w, .lane = 1};
    struct lane_addr_call new_addr = {.w = p->srv.w, .lane = 1};

    lanes_ready(p, LATE_LEN);
    /* Wired up: the big message's announcement leaves with its send. */
    assert_int_equal(lane_send_sync(p, 1, 1, small, 256, 0), WST_OK);
    assert_true(side_wait(&p->srv, &p->srv.n_done, 1));
    memset(p->srv.dest, 0, 256);

    pthread_mutex_init(&st.lock, NULL);
    pthread_cond_init(&st.cond, NULL);
    pthread_mutex_lock(&p->srv.lock);
    p->srv.dest_hook = post_stall;
    p->srv.dest_hook_arg = &st;
    p->srv.dest_hook_at = 2;
    pthread_mutex_unlock(&p->srv.lock);
    lane_send_start(p, &c, 1, 2, 0, big, LATE_LEN);
    int placed = side_wait(&p->srv, &p->srv.n_dest_calls, 2);
    uint64_t deadline = wst_deadline_ns(WAIT_S);
    pthread_mutex_lock(&st.lock);
    while (placed && !st.stopped &&
           wst_cond_wait_until(&st.cond, &st.lock, deadline) == WST_OK)
        ;
    int stopped = st.stopped;
    pthread_mutex_unlock(&st.lock);
    wst_worker_call(p->srv.w, do_lane_address, &old_addr);
    struct reset_call rc = {.w = p->srv.w};
    wst_status_t call_st = wst_worker_call(p->srv.w, do_data_reset, &rc);
    int cancelled = side_wait(&p->srv, &p->srv.n_done, 2);
    stall_release(&st);
    assert_true(placed);
    assert_true(stopped);
    assert_int_equal(call_st, WST_OK);
    assert_int_equal(rc.made, 1);
    assert_int_equal(rc.receiving_before, 1);
    assert_int_equal(rc.room, 15);
    assert_true(cancelled);
    assert_int_equal(p->srv.done_status, WST_ERR_CANCELED);
    assert_int_equal(p->srv.done_hdr.item, 2);
    assert_int_equal(p->srv.done_elsewhere, 0);

    /* Given every chance to land: none does. */
    usleep(500000);
    assert_int_equal(side_count(&p->srv, &p->srv.n_done), 2);
    pthread_mutex_lock(&p->srv.lock);
    assert_true(all_zero(p->srv.dest, LATE_LEN));
    pthread_mutex_unlock(&p->srv.lock);
    assert_int_equal(wst_worker_call(p->srv.w, do_lane_address, &new_addr),
                     WST_OK);
    assert_int_equal(old_addr.st, WST_OK);
    assert_int_equal(new_addr.st, WST_OK);
    assert_true(new_addr.len != old_addr.len ||
                memcmp(new_addr.addr, old_addr.addr, old_addr.len) != 0);
    free(old_addr.addr);
    free(new_addr.addr);
    /* The client's worker goes first, with the send it may still hold. */
    wst_worker_destroy(p->cli.w);
    p->cli.w = NULL;
    lane_send_fini(&c);
    pthread_cond_destroy(&st.cond);
    pthread_mutex_destroy(&st.lock);
    free(small);
    free(big);
}

static void test_worker_lanes_under_tls(void **state)
{
    struct pair *p = *state;
    const char *tls = getenv("UCX_TLS");
    struct open_data_call oc = {0}, oc_peer = {0};
    struct connect_call cc = {.w = p->cli.w, .port = p->port};

    client_says(p, "hello");
    open_data(p, 0, &oc);
    check_lanes(&oc, wst_conn_rma_why(p->conn));
    if (tls_allows_shm(tls)) {
        assert_non_null(strstr(oc.lanes, "/memory"));
    } else {
        assert_non_null(strstr(oc.lanes, "tcp/"));
        assert_null(strstr(oc.lanes, "/memory"));
    }

    assert_int_equal(wst_worker_call(p->cli.w, do_connect, &cc), WST_OK);
    assert_int_equal(cc.st, WST_OK);
    open_data_on(p, cc.conn, 1, &oc_peer);
    check_lanes(&oc_peer, wst_conn_rma_why(cc.conn));
    assert_null(strstr(oc_peer.lanes, "/memory"));
    if (!host_may_put_in_hardware())
        assert_non_null(strstr(oc_peer.lanes, "tcp/"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_worker_post_call_order),
        cmocka_unit_test_setup_teardown(test_worker_control_round_trip,
                                        pair_setup, pair_teardown),
        cmocka_unit_test_setup_teardown(test_worker_data_lands_at_dest,
                                        pair_setup, pair_teardown),
        cmocka_unit_test_setup_teardown(test_worker_data_parked_until_resume,
                                        pair_setup, pair_teardown),
        cmocka_unit_test_setup_teardown(test_worker_late_receive_lands,
                                        pair_setup, pair_teardown),
        cmocka_unit_test_setup_teardown(
            test_worker_data_reset_stops_late_receive, pair_setup,
            pair_teardown),
        cmocka_unit_test_setup_teardown(test_worker_conn_failed_on_peer_close,
                                        pair_setup, pair_teardown),
        cmocka_unit_test_setup_teardown(
            test_worker_large_message_buffer_given_back, pair_setup,
            pair_teardown),
        cmocka_unit_test_setup_teardown(test_worker_heartbeat_timeout,
                                        pair_setup_heartbeat, pair_teardown),
        cmocka_unit_test_setup_teardown(
            test_worker_heartbeat_held_up_reads_first, pair_setup_heartbeat,
            pair_teardown),
        cmocka_unit_test(test_worker_no_emulated_rma),
        cmocka_unit_test_setup_teardown(test_worker_mem_map_rkey_pack,
                                        pair_setup, pair_teardown),
        cmocka_unit_test_setup_teardown(test_worker_lanes_stripe,
                                        pair_setup_lanes, pair_teardown),
        cmocka_unit_test_setup_teardown(test_worker_lanes_no_data_taker,
                                        pair_setup_lanes_sender, pair_teardown),
        cmocka_unit_test_setup_teardown(test_worker_lanes_big_eager_dropped,
                                        pair_setup_lanes, pair_teardown),
        cmocka_unit_test_setup_teardown(test_worker_lanes_parked_until_resume,
                                        pair_setup_lanes, pair_teardown),
        cmocka_unit_test_setup_teardown(test_worker_lanes_data_reset,
                                        pair_setup_lanes, pair_teardown),
        cmocka_unit_test_setup_teardown(test_worker_lanes_under_tls, pair_setup,
                                        pair_teardown),
    };

    setenv("UCX_TCP_CM_REUSEADDR", "y", 0);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
