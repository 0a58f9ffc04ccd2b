/* test_bad_peer.c - a real wstream-agent survives peers that are not
 * well-behaved senders: garbage control bytes, a hello of an unknown
 * protocol version (answered with WST_ERR_VERSION), have manifests that lie
 * (a box outside its tensor, a shape whose size overflows: answered with
 * WST_ERR_PROTOCOL), a BEGIN whose label breaks the rule (too long, a
 * space, a control byte, a NUL: WST_ERR_PROTOCOL naming the byte), and a
 * peer that connects and says nothing (dropped after the agent's peer
 * timeout, while a correct sender refits).
 *
 * The bad peers are raw UCX clients built on common/worker.h; the good one
 * is the sender library.
 *
 * usage: test_bad_peer PATH_TO_WSTREAM_AGENT
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent_fixture.h"
#include "auth.h"
#include "clock.h"
#include "codec.h"
#include "heartbeat_msg.h"
#include "worker.h"
#include "wstream.pb-c.h"

static const char *agent_bin;

/* A raw client: its worker, and what came back from the agent. */
struct raw_client {
    struct wst_logger log;
    wst_worker_t *worker;
    pthread_mutex_t lock;
    int n_errors;         /* ERROR messages received */
    int32_t error_status; /* of the last one */
    char error_text[WST_ERROR_MSG_MAX];
    int n_failed;             /* connections reported failed */
    int n_hellos;             /* HELLO messages received */
    int n_plans;              /* PLAN messages received */
    double last_heartbeat;    /* wst_now_s() of the last HEARTBEAT, 0: none */
    double max_heartbeat_gap; /* longest time between two, seconds */
    double *beats;            /* wall-clock time of each HEARTBEAT */
    size_t n_beats, beats_cap;
};

/* Seconds since the epoch, as the agent's log lines start. */
static double wall_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* What a posted connect-and-send runs with. */
struct send_job {
    struct raw_client *rc;
    uint16_t port;
    void *buf; /* malloc'd; ownership passes to wst_conn_send; NULL: none */
    size_t len;
    wst_status_t status;
    wst_conn_t *conn;
};

struct bad_peer_fixture {
    struct it_agent agent;
    struct raw_client client;
};

static void on_message(void *arg, wst_conn_t *conn, const void *buf, size_t len)
{
    struct raw_client *rc = arg;
    struct wst_msg m;
    char err[256];

    if (wst_msg_decode(buf, len, WST_MSG_MAX_DEFAULT, &m, err, sizeof(err)) !=
        WST_OK) {
        fprintf(stderr, "raw client: %s sent an undecodable message: %s\n",
                wst_conn_name(conn), err);
        return;
    }
    fprintf(stderr, "raw client: %s sent %s\n", wst_conn_name(conn),
            wst_msg_type_name(m.type));
    if (m.type == WST_MSG_HELLO) {
        pthread_mutex_lock(&rc->lock);
        rc->n_hellos++;
        pthread_mutex_unlock(&rc->lock);
    }
    if (m.type == WST_MSG_HEARTBEAT || m.type == WST_MSG_PLAN) {
        double now = wst_now_s();
        pthread_mutex_lock(&rc->lock);
        if (m.type == WST_MSG_PLAN)
            rc->n_plans++;
        else if (rc->last_heartbeat > 0 &&
                 now - rc->last_heartbeat > rc->max_heartbeat_gap)
            rc->max_heartbeat_gap = now - rc->last_heartbeat;
        if (m.type == WST_MSG_HEARTBEAT) {
            rc->last_heartbeat = now;
            if (rc->n_beats < rc->beats_cap)
                rc->beats[rc->n_beats++] = wall_s();
        }
        pthread_mutex_unlock(&rc->lock);
    }
    if (m.type == WST_MSG_ERROR) {
        pthread_mutex_lock(&rc->lock);
        rc->n_errors++;
        rc->error_status = m.u.error.status;
        snprintf(rc->error_text, sizeof(rc->error_text), "%s",
                 m.u.error.message);
        pthread_mutex_unlock(&rc->lock);
    }
    wst_msg_release(&m);
}

static void on_conn_failed(void *arg, wst_conn_t *conn, wst_status_t status,
                           const char *why)
{
    struct raw_client *rc = arg;

    fprintf(stderr, "raw client: connection %s failed: %s (%s)\n",
            wst_conn_name(conn), wst_status_string(status), why);
    pthread_mutex_lock(&rc->lock);
    rc->n_failed++;
    pthread_mutex_unlock(&rc->lock);
}

/* A raw client that holds the agent's secret: these peers are
 * authenticated but misbehave after the handshake. Heartbeats every
 * hb_interval_s, a connection failed after hb_timeout_s of silence (0:
 * neither). */
static int raw_client_start(struct raw_client *rc, const char *secret_path,
                            double hb_interval_s, double hb_timeout_s)
{
    struct wst_auth_secret secret;
    char err[512];

    memset(rc, 0, sizeof(*rc));
    pthread_mutex_init(&rc->lock, NULL);
    wst_logger_init(&rc->log, "raw-client", WST_LOG_INFO);
    if (wst_auth_secret_load(secret_path, &secret, err, sizeof(err)) !=
        WST_OK) {
        fprintf(stderr, "raw client: %s\n", err);
        return -1;
    }
    struct wst_worker_params wp = {
        .log = &rc->log,
        .ops = {.arg = rc,
                .message = on_message,
                .conn_failed = on_conn_failed},
        .secret = &secret,
    };
    if (hb_interval_s > 0 &&
        wst_heartbeat_params_set(&wp.heartbeat, hb_interval_s, hb_timeout_s) !=
            WST_OK) {
        wst_auth_secret_release(&secret);
        return -1;
    }
    int rc_ok = wst_worker_create(&wp, &rc->worker) == WST_OK ? 0 : -1;
    wst_auth_secret_release(&secret);
    return rc_ok;
}

static void raw_client_stop(struct raw_client *rc)
{
    if (rc->worker != NULL)
        wst_worker_destroy(rc->worker);
    rc->worker = NULL;
    pthread_mutex_destroy(&rc->lock);
}

/* Progress thread: connect, then send job->buf if there is one. */
static void connect_and_send(void *arg)
{
    struct send_job *job = arg;

    job->status =
        wst_conn_connect(job->rc->worker, "127.0.0.1", job->port, &job->conn);
    if (job->status != WST_OK) {
        free(job->buf);
        return;
    }
    if (job->buf != NULL)
        job->status = wst_conn_send(job->conn, job->buf, job->len);
    job->buf = NULL;
}

/* Progress thread: send job->buf on the already connected job->conn. */
static void send_on_conn(void *arg)
{
    struct send_job *job = arg;

    job->status = wst_conn_send(job->conn, job->buf, job->len);
    job->buf = NULL;
}

static wst_conn_t *raw_send(struct raw_client *rc, uint16_t port, void *buf,
                            size_t len)
{
    struct send_job job = {.rc = rc, .port = port, .buf = buf, .len = len};

    assert_int_equal(wst_worker_call(rc->worker, connect_and_send, &job),
                     WST_OK);
    assert_int_equal(job.status, WST_OK);
    return job.conn;
}

/* An agent with 'args' after the fixture's flags (NULL: none) and a raw
 * client; the client sends heartbeats every 50 ms and fails a connection
 * silent for hb_timeout_s (0: no heartbeats). */
static int setup_with(void **state, const char *const *args,
                      double hb_timeout_s)
{
    struct bad_peer_fixture *f = calloc(1, sizeof(*f));

    if (f == NULL)
        return -1;
    if (it_agent_start_args(&f->agent, agent_bin, args) != 0) {
        fprintf(stderr, "setup: could not start wstream-agent '%s'\n",
                agent_bin);
        free(f);
        return -1;
    }
    if (raw_client_start(&f->client, f->agent.secret_path,
                         hb_timeout_s > 0 ? 0.05 : 0, hb_timeout_s) != 0) {
        fprintf(stderr, "setup: could not start a UCX worker\n");
        it_agent_stop(&f->agent);
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int setup_fixture(void **state)
{
    return setup_with(state, NULL, 0);
}

static int teardown_fixture(void **state)
{
    struct bad_peer_fixture *f = *state;

    raw_client_stop(&f->client);
    it_agent_stop(&f->agent);
    free(f);
    return 0;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};

    nanosleep(&ts, NULL);
}

/* (a) 100 random bytes as a control message: logged, nothing else. */
static void garbage_peer(struct bad_peer_fixture *f)
{
    unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();
    uint8_t *buf = malloc(100);
    uint64_t committed = 99;
    int usable = 0;

    assert_non_null(buf);
    fprintf(stderr, "garbage seed %u\n", seed);
    srand(seed);
    for (size_t i = 0; i < 100; i++)
        buf[i] = (uint8_t)(rand() >> 7);
    raw_send(&f->client, f->agent.port, buf, 100);
    assert_true(it_agent_wait_log(&f->agent, "bad message", 5.0));
    assert_true(it_agent_alive(&f->agent));
    assert_int_equal(it_agent_status(&f->agent, &committed, &usable), 0);
    assert_true(usable);
    assert_int_equal(committed, 0);
    assert_true(it_agent_shm_untouched(&f->agent));
}

/* Sends a sender's hello of 'protocol_version' (rank 0 of 1) on a new
 * connection, which it returns. */
static wst_conn_t *send_hello(struct bad_peer_fixture *f,
                              uint32_t protocol_version)
{
    struct wst_msg m = {.type = WST_MSG_HELLO};
    uint8_t *buf = NULL;
    size_t len = 0;

    m.u.hello.protocol_version = protocol_version;
    m.u.hello.role = WST_ROLE_SENDER;
    m.u.hello.rank = 0;
    m.u.hello.world_size = 1;
    m.u.hello.session = 42;
    assert_int_equal(wst_msg_encode(&m, &buf, &len), WST_OK);
    return raw_send(&f->client, f->agent.port, buf, len);
}

static void close_conn(void *conn)
{
    wst_conn_close(conn);
}

/* Control for (b): the raw client does hear the agent; a current hello is
 * answered with the agent's own hello. */
static void current_version_peer(struct bad_peer_fixture *f)
{
    struct raw_client *rc = &f->client;
    int n_hellos = 0;
    wst_conn_t *conn = send_hello(f, WST_PROTOCOL_VERSION);
    for (int i = 0; i < 500 && n_hellos == 0; i++) {
        sleep_s(0.01);
        pthread_mutex_lock(&rc->lock);
        n_hellos = rc->n_hellos;
        pthread_mutex_unlock(&rc->lock);
    }
    if (n_hellos == 0)
        fail_msg("no HELLO came back in 5 s for a hello of protocol "
                 "version %d",
                 WST_PROTOCOL_VERSION);
    assert_true(it_agent_alive(&f->agent));
    /* It holds rank 0 while it is connected (a second rank 0 would be
     * refused): it hangs up, so the good sender after it may have it. */
    assert_int_equal(wst_worker_call(rc->worker, close_conn, conn), WST_OK);
    assert_true(it_agent_wait_log(&f->agent, "disconnected", 5.0));
}

/* (b) a hello of protocol version 99: an ERROR with WST_ERR_VERSION. */
static void future_version_peer(struct bad_peer_fixture *f)
{
    struct raw_client *rc = &f->client;
    int n_errors = 0;
    int32_t status = 0;

    pthread_mutex_lock(&rc->lock);
    rc->n_errors = 0;
    pthread_mutex_unlock(&rc->lock);
    send_hello(f, 99);
    for (int i = 0; i < 500 && n_errors == 0; i++) {
        sleep_s(0.01);
        pthread_mutex_lock(&rc->lock);
        n_errors = rc->n_errors;
        status = rc->error_status;
        pthread_mutex_unlock(&rc->lock);
    }
    if (n_errors == 0)
        fail_msg("no ERROR message came back in 5 s for a hello of "
                 "protocol version 99");
    fprintf(stderr, "error from the agent: %s: %s\n", wst_status_string(status),
            rc->error_text);
    assert_int_equal(status, WST_ERR_VERSION);
    assert_true(it_agent_alive(&f->agent));
}

/* Packs a hello then a have manifest of one bf16 entry with the given
 * shape and box, bypassing the codec's own checks (which refuse to encode
 * such a lie), and sends both on one connection. */
static void send_lying_have(struct bad_peer_fixture *f, const uint64_t *shape,
                            const uint64_t *start, const uint64_t *stop,
                            size_t ndim)
{
    struct wst_msg m = {.type = WST_MSG_HELLO};
    uint8_t *hello = NULL;
    size_t hello_len = 0;

    m.u.hello.protocol_version = WST_PROTOCOL_VERSION;
    m.u.hello.role = WST_ROLE_SENDER;
    m.u.hello.world_size = 1;
    assert_int_equal(wst_msg_encode(&m, &hello, &hello_len), WST_OK);

    Wst__HaveEntry entry = WST__HAVE_ENTRY__INIT;
    Wst__HaveEntry *entries[1] = {&entry};
    Wst__HaveManifest have = WST__HAVE_MANIFEST__INIT;
    Wst__Control ctl = WST__CONTROL__INIT;
    entry.name = "model.norm.weight";
    entry.dtype = WST_DTYPE_BF16;
    entry.n_shape = ndim;
    entry.shape = (uint64_t *)shape;
    entry.n_box_start = ndim;
    entry.box_start = (uint64_t *)start;
    entry.n_box_stop = ndim;
    entry.box_stop = (uint64_t *)stop;
    entry.mem_type = WST_MEM_HOST;
    have.n_entries = 1;
    have.entries = entries;
    ctl.msg_case = WST__CONTROL__MSG_HAVE;
    ctl.have = &have;
    size_t len = wst__control__get_packed_size(&ctl);
    uint8_t *buf = malloc(len);
    assert_non_null(buf);
    wst__control__pack(&ctl, buf);

    struct raw_client *rc = &f->client;
    pthread_mutex_lock(&rc->lock);
    rc->n_errors = 0;
    pthread_mutex_unlock(&rc->lock);
    wst_conn_t *conn = raw_send(rc, f->agent.port, hello, hello_len);
    struct send_job job = {.rc = rc, .conn = conn, .buf = buf, .len = len};
    assert_int_equal(wst_worker_call(rc->worker, send_on_conn, &job), WST_OK);
}

/* A hello, then a BEGIN of version 1 with label[0..len), packed by hand
 * (the codec refuses to encode such a label), on one new connection. */
static void send_labeled_begin(struct bad_peer_fixture *f, const char *label,
                               size_t len)
{
    struct wst_msg m = {.type = WST_MSG_HELLO};
    uint8_t *hello = NULL;
    size_t hello_len = 0;

    m.u.hello.protocol_version = WST_PROTOCOL_VERSION;
    m.u.hello.role = WST_ROLE_SENDER;
    m.u.hello.world_size = 1;
    assert_int_equal(wst_msg_encode(&m, &hello, &hello_len), WST_OK);

    Wst__Begin begin = WST__BEGIN__INIT;
    Wst__Control ctl = WST__CONTROL__INIT;
    begin.version = 1;
    begin.mover = WST_MOVER_AM;
    begin.label = (ProtobufCBinaryData){.len = len, .data = (uint8_t *)label};
    ctl.msg_case = WST__CONTROL__MSG_BEGIN;
    ctl.begin = &begin;
    size_t n = wst__control__get_packed_size(&ctl);
    uint8_t *buf = malloc(n);
    assert_non_null(buf);
    wst__control__pack(&ctl, buf);

    struct raw_client *rc = &f->client;
    pthread_mutex_lock(&rc->lock);
    rc->n_errors = 0;
    pthread_mutex_unlock(&rc->lock);
    wst_conn_t *conn = raw_send(rc, f->agent.port, hello, hello_len);
    struct send_job job = {.rc = rc, .conn = conn, .buf = buf, .len = n};
    assert_int_equal(wst_worker_call(rc->worker, send_on_conn, &job), WST_OK);
}

static void expect_error(struct raw_client *rc, wst_status_t want,
                         const char *text)
{
    int n_errors = 0;
    int32_t status = 0;
    char got[WST_ERROR_MSG_MAX] = "";

    for (int i = 0; i < 500 && n_errors == 0; i++) {
        sleep_s(0.01);
        pthread_mutex_lock(&rc->lock);
        n_errors = rc->n_errors;
        status = rc->error_status;
        snprintf(got, sizeof(got), "%s", rc->error_text);
        pthread_mutex_unlock(&rc->lock);
    }
    if (n_errors == 0)
        fail_msg("no ERROR came back in 5 s (expected %s)",
                 wst_status_string(want));
    fprintf(stderr, "error from the agent: %s: %s\n", wst_status_string(status),
            got);
    assert_int_equal(status, want);
    if (strstr(got, text) == NULL)
        fail_msg("error '%s' does not mention '%s'", got, text);
}

/* (f) lying have manifests: refused with a clear error, nothing changes. */
static void lying_peers(struct bad_peer_fixture *f)
{
    const uint64_t shape[1] = {1024}, start[1] = {0}, past[1] = {2048};
    const uint64_t huge[2] = {1ull << 40, 1ull << 40}, zero[2] = {0, 0};

    send_lying_have(f, shape, start, past, 1);
    expect_error(&f->client, WST_ERR_PROTOCOL, "box");
    send_lying_have(f, huge, zero, huge, 2);
    expect_error(&f->client, WST_ERR_PROTOCOL, "model.norm.weight");
    assert_true(it_agent_alive(&f->agent));
    uint64_t committed = 99;
    int usable = 0;
    assert_int_equal(it_agent_status(&f->agent, &committed, &usable), 0);
    assert_true(usable);
    assert_true(it_agent_shm_untouched(&f->agent));
}

/* (c) connects and says nothing; stays connected. */
static void silent_peer(struct bad_peer_fixture *f)
{
    raw_send(&f->client, f->agent.port, NULL, 0);
    sleep_s(0.3); /* let the agent accept it */
    assert_true(it_agent_alive(&f->agent));
}

/* (g) a silent peer is dropped once the agent's peer timeout (2 s in the
 * fixture) passes, with a log line that says so. */
static void silent_peer_dropped(struct bad_peer_fixture *f)
{
    raw_send(&f->client, f->agent.port, NULL, 0);
    assert_true(it_agent_wait_log(&f->agent, "no message for", 6.0));
    assert_true(it_agent_alive(&f->agent));
}

/* (d) a correct sender refits; every byte verified. */
static void good_refit(struct bad_peer_fixture *f, uint64_t version)
{
    struct it_sender s;
    char err[512];
    wst_status_t st;

    assert_int_equal(it_sender_load(&s, &f->agent), 0);
    assert_int_equal(it_sender_setup(&s, &f->agent, SIZE_MAX, version), WST_OK);
    st = wst_sender_push(s.sender, version);
    if (st == WST_OK)
        st = wst_sender_wait(s.sender, 30.0);
    if (st != WST_OK)
        fail_msg("refit %llu: %s: %s", (unsigned long long)version,
                 wst_status_string(st), wst_sender_last_error(s.sender));
    it_sender_destroy(&s);
    if (wst_model_verify(&f->agent.layout, f->agent.shm, IT_SEED, version, NULL,
                         err, sizeof(err)) != WST_OK)
        fail_msg("refit %llu: %s", (unsigned long long)version, err);
}

static void test_bad_peer_garbage(void **state)
{
    struct bad_peer_fixture *f = *state;

    garbage_peer(f);
    good_refit(f, 1);
    assert_true(it_agent_alive(&f->agent));
}

static void test_bad_peer_current_hello_answered(void **state)
{
    struct bad_peer_fixture *f = *state;

    current_version_peer(f);
    good_refit(f, 1);
    assert_true(it_agent_alive(&f->agent));
}

static void test_bad_peer_future_version(void **state)
{
    struct bad_peer_fixture *f = *state;

    future_version_peer(f);
    good_refit(f, 1);
    assert_true(it_agent_alive(&f->agent));
}

static void test_bad_peer_silent_during_refit(void **state)
{
    struct bad_peer_fixture *f = *state;

    silent_peer(f);
    good_refit(f, 1);
    assert_true(it_agent_alive(&f->agent));
}

/* (a) to (e) on one agent: garbage, wrong version, a silent peer kept
 * open, a correct refit, and the agent still alive. */
static void test_bad_peer_lying_have(void **state)
{
    struct bad_peer_fixture *f = *state;

    lying_peers(f);
    good_refit(f, 1);
}

/* A hostile label in a BEGIN: refused where it arrives, naming the byte;
 * the agent is untouched and a correct sender refits after. */
static void test_bad_peer_hostile_labels(void **state)
{
    struct bad_peer_fixture *f = *state;
    static const struct {
        const char *label;
        size_t len;
        const char *why;
    } cases[] = {
        {"0123456789012345678901234567890123456789012345678901234567890123", 64,
         "begin: label \"012"},
        {"step 1", 6, "byte 4 is 0x20"},
        {"step\x1b[2J", 8, "byte 4 is 0x1b"},
        {"ok\0evil", 7, "byte 2 is 0x00"},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        send_labeled_begin(f, cases[i].label, cases[i].len);
        expect_error(&f->client, WST_ERR_PROTOCOL, cases[i].why);
        /* Its rank goes with it: the next one may say hello as rank 0. */
        assert_true(it_agent_wait_log_lines(
            &f->agent, "bad message: begin: label", (int)i + 1, 5.0));
    }
    uint64_t committed = 99;
    int usable = 0;
    assert_int_equal(it_agent_status(&f->agent, &committed, &usable), 0);
    assert_true(usable);
    assert_int_equal(committed, 0);
    assert_true(it_agent_shm_untouched(&f->agent));
    good_refit(f, 1);
}

static void test_bad_peer_silent_dropped(void **state)
{
    struct bad_peer_fixture *f = *state;

    silent_peer_dropped(f);
    good_refit(f, 1);
}

static void test_bad_peer_all_then_refit(void **state)
{
    struct bad_peer_fixture *f = *state;

    garbage_peer(f);
    future_version_peer(f);
    silent_peer(f);
    good_refit(f, 1);
    assert_true(it_agent_alive(&f->agent));
}

/* A hello as rank 'rank' of 'world', then a have manifest of the model's
 * shards for rank 0 of 1 (none when !real) and 'n_extra' bf16 tensors
 * "unwanted.N.weight" of 8 elements, on one new connection. */
/* A hello and a have manifest of rank's: the real sender's shards (when
 * 'real') and n_extra unwanted ones, encoded (both buffers the caller's). */
struct big_have {
    uint8_t *hello, *buf;
    size_t hello_len, len;
};

static void encode_big_have(struct bad_peer_fixture *f, uint32_t rank,
                            uint32_t world, int real, size_t n_extra,
                            struct big_have *bh)
{
    struct it_sender s = {0};
    struct wst_msg m = {.type = WST_MSG_HELLO};

    if (real)
        assert_int_equal(it_sender_load(&s, &f->agent), 0);
    m.u.hello.protocol_version = WST_PROTOCOL_VERSION;
    m.u.hello.role = WST_ROLE_SENDER;
    m.u.hello.rank = rank;
    m.u.hello.world_size = world;
    assert_int_equal(wst_msg_encode(&m, &bh->hello, &bh->hello_len), WST_OK);

    size_t n = s.n_haves + n_extra;
    struct wst_have *h = calloc(n, sizeof(*h));
    assert_non_null(h);
    for (size_t i = 0; i < s.n_haves; i++)
        h[i] = s.haves[i];
    for (size_t i = s.n_haves; i < n; i++) {
        snprintf(h[i].tensor.name, sizeof(h[i].tensor.name),
                 "unwanted.%zu.weight", i);
        h[i].tensor.dtype = WST_DTYPE_BF16;
        h[i].tensor.ndim = 1;
        h[i].tensor.shape[0] = 8;
        h[i].box.ndim = 1;
        h[i].box.stop[0] = 8;
        h[i].mem = WST_MEM_HOST;
    }
    memset(&m, 0, sizeof(m));
    m.type = WST_MSG_HAVE;
    m.u.have.rank = rank;
    m.u.have.n_entries = n;
    m.u.have.entries = h;
    assert_int_equal(wst_msg_encode(&m, &bh->buf, &bh->len), WST_OK);
    free(h);
    it_sender_destroy(&s);
    fprintf(stderr, "have manifest of %zu shards: %zu bytes on the wire\n", n,
            bh->len);
}

/* Sends bh on a new connection; the buffers are taken. */
static wst_conn_t *send_encoded_have(struct bad_peer_fixture *f,
                                     struct big_have *bh)
{
    struct raw_client *rc = &f->client;
    wst_conn_t *conn = raw_send(rc, f->agent.port, bh->hello, bh->hello_len);
    struct send_job job = {
        .rc = rc, .conn = conn, .buf = bh->buf, .len = bh->len};
    assert_int_equal(wst_worker_call(rc->worker, send_on_conn, &job), WST_OK);
    assert_int_equal(job.status, WST_OK);
    return conn;
}

static wst_conn_t *send_big_have(struct bad_peer_fixture *f, uint32_t rank,
                                 uint32_t world, int real, size_t n_extra)
{
    struct big_have bh = {0};

    encode_big_have(f, rank, world, real, n_extra, &bh);
    return send_encoded_have(f, &bh);
}

/* (h) an authenticated sender whose manifest lists 400,000 shards the
 * agent does not want (the tiny model wants a few tensors: the automatic
 * limit is 65,536): refused with WST_ERR_TOO_LARGE naming the limit
 * before it is unpacked (the agent's peak memory grows by less than
 * 64 MB), the agent's log names the sender, and a real refit commits
 * after it. */
static void agent_rss(const struct it_agent *a, long *rss_kb, long *hwm_kb);

static void test_bad_peer_manifest_over_limit(void **state)
{
    struct bad_peer_fixture *f = *state;
    long rss0 = 0, hwm0 = 0, rss1 = 0, hwm1 = 0;

    f->client.n_errors = 0;
    agent_rss(&f->agent, &rss0, &hwm0);
    send_big_have(f, 0, 1, 0, 400000);
    expect_error(&f->client, WST_ERR_TOO_LARGE,
                 "have manifest of 400000 shards exceeds "
                 "max-manifest-entries 65536");
    /* Refused from its wire bytes: the 15 MB frame was read, nothing of
     * it unpacked (decoded, it takes ~190 MB and more while unpacking). */
    agent_rss(&f->agent, &rss1, &hwm1);
    fprintf(stderr, "agent peak RSS %ld -> %ld kB\n", hwm0, hwm1);
    assert_true(hwm1 - hwm0 < 64 * 1024);
    assert_true(it_agent_log_has(&f->agent, "refused sender 127.0.0.1:"));
    assert_true(it_agent_log_has(&f->agent, "max-manifest-entries 65536"));
    assert_true(it_agent_alive(&f->agent));
    assert_true(it_agent_shm_untouched(&f->agent));
    good_refit(f, 1);
}

static int setup_two_big_haves(void **state)
{
    /* One 400,000-shard manifest (about 190 MB decoded, 15 MB on the
     * wire) fits in 300 MB; two do not. */
    setenv("WST_MAX_MANIFEST_ENTRIES", "1048576", 1);
    setenv("WST_MAX_MANIFEST_BYTES", "300m", 1);
    int st = setup_with(state, NULL, 0);
    unsetenv("WST_MAX_MANIFEST_ENTRIES");
    unsetenv("WST_MAX_MANIFEST_BYTES");
    return st;
}

/* (k) two senders' 400,000-shard manifests, sent back to back, where the
 * limit holds one: the second is refused at once from its wire bytes,
 * since the first, still being unpacked (seconds), counts as held.
 * Before, a manifest being unpacked counted for nothing, so any number
 * of senders could queue manifests of up to 64 MiB each (and their
 * decoded size) before the first was held. */
static void test_bad_peer_manifests_being_unpacked_count(void **state)
{
    struct bad_peer_fixture *f = *state;
    struct big_have a = {0}, b = {0};

    encode_big_have(f, 0, 2, 0, 400000, &a);
    encode_big_have(f, 1, 2, 0, 400000, &b);
    f->client.n_errors = 0;
    send_encoded_have(f, &a);
    send_encoded_have(f, &b);
    expect_error(&f->client, WST_ERR_TOO_LARGE,
                 "reserved by manifests being unpacked");
    assert_true(it_agent_log_has(&f->agent, "max-manifest-bytes 314572800"));
    assert_true(it_agent_alive(&f->agent));
    assert_true(it_agent_shm_untouched(&f->agent));
}

/* At debug level the agent logs each control connection it accepts
 * ("accepted control connection from"), just before it counts it. */
static const char *const one_unranked_args[] = {"--max-unranked-peers", "1",
                                                "--log-level", "debug", NULL};

static int setup_one_unranked(void **state)
{
    return setup_with(state, one_unranked_args, 0);
}

/* (j) with --max-unranked-peers 1, a second authenticated connection that
 * has not said hello is refused with WST_ERR_BUSY naming the limit; once
 * the first hangs up, a real refit commits. */
static void test_bad_peer_unranked_over_limit(void **state)
{
    struct bad_peer_fixture *f = *state;

    wst_conn_t *first = raw_send(&f->client, f->agent.port, NULL, 0);
    /* Accepted, and so counted: the agent's progress thread counts it
     * right after that line, before it can take the second. */
    assert_true(
        it_agent_wait_log(&f->agent, "accepted control connection from", 5.0));
    raw_send(&f->client, f->agent.port, NULL, 0);
    expect_error(&f->client, WST_ERR_BUSY, "max-unranked-peers 1");
    assert_true(it_agent_log_has(&f->agent, "refused sender 127.0.0.1:"));
    assert_int_equal(wst_worker_call(f->client.worker, close_conn, first),
                     WST_OK);
    assert_true(it_agent_wait_log(&f->agent, "disconnected", 5.0));
    good_refit(f, 1);
    assert_true(it_agent_alive(&f->agent));
}

/* The agent's peak and current resident memory, kB, from /proc. */
static void agent_rss(const struct it_agent *a, long *rss_kb, long *hwm_kb)
{
    char path[64], line[256];

    snprintf(path, sizeof(path), "/proc/%d/status", (int)a->pid);
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    while (fgets(line, sizeof(line), fp) != NULL) {
        sscanf(line, "VmRSS: %ld", rss_kb);
        sscanf(line, "VmHWM: %ld", hwm_kb);
    }
    fclose(fp);
}

/* From the agent's log: its last plan's "built in X ms", when the last
 * manifest was in (its debug line, the log's time) and when the plan
 * was; -1 for what is not there. */
static void agent_plan_times(const struct it_agent *a, double *ms_p,
                             double *have_at_p, double *plan_at_p)
{
    char line[2048];
    FILE *fp = fopen(a->log_path, "r");

    *ms_p = *have_at_p = *plan_at_p = -1;
    assert_non_null(fp);
    while (fgets(line, sizeof(line), fp) != NULL) {
        const char *p = strstr(line, "built in ");
        if (p != NULL) {
            sscanf(p, "built in %lf ms", ms_p);
            sscanf(line, "%lf", plan_at_p);
        }
        if (strstr(line, "): have manifest of ") != NULL)
            sscanf(line, "%lf", have_at_p);
    }
    fclose(fp);
}

/* The longest time without a heartbeat from 'from' (when the progress
 * thread was done with the last manifest) until the first one after 'to'. */
static double gap_around(const struct raw_client *rc, double from, double to)
{
    double gap = 0, prev = from;

    for (size_t i = 0; i < rc->n_beats; i++) {
        double t = rc->beats[i];
        if (t < from)
            continue;
        if (t - prev > gap)
            gap = t - prev;
        prev = t;
        if (t > to)
            break;
    }
    return gap;
}

static const char *const big_plan_args[] = {
    "--heartbeat", "0.05",        "--peer-timeout", "60", "--timeout",
    "60",          "--log-level", "debug",          NULL};

static int setup_big_plan(void **state)
{
    /* The limits raised through the environment (the agent's table reads
     * WST_*), so an agent without them runs this too. Timeouts far above
     * any gap: the test measures gaps, rather than see someone give up. */
    setenv("WST_MAX_MANIFEST_ENTRIES", "1048576", 1);
    setenv("WST_MAX_MANIFEST_BYTES", "2g", 1);
    int st = setup_with(state, big_plan_args, 60);
    unsetenv("WST_MAX_MANIFEST_ENTRIES");
    unsetenv("WST_MAX_MANIFEST_BYTES");
    if (st != 0)
        return st;
    /* The agent's heartbeats every 50 ms, each one's time kept. */
    struct bad_peer_fixture *f = *state;
    pthread_mutex_lock(&f->client.lock);
    f->client.beats = calloc(1u << 20, sizeof(double));
    f->client.beats_cap = f->client.beats != NULL ? 1u << 20 : 0;
    pthread_mutex_unlock(&f->client.lock);
    return 0;
}

/* (i) heartbeats keep flowing while the agent plans from 3 senders'
 * 400,000-shard manifests (the limits raised to allow them): from the
 * moment the last manifest is in (the agent's debug line) until its plan
 * is built, the agent's heartbeats, 50 ms apart, never pause for more
 * than 200 ms (or half the plan, on a loaded host), and every sender gets
 * its plan; nor do they pause 5 s at any time (the manifests are unpacked
 * on the planner thread too). Plan time, that gap, the longest gap
 * overall and the agent's memory are printed for NOTES.md. With the plan
 * on the progress thread, the gap was the whole plan time. */
static void test_bad_peer_heartbeats_during_big_plan(void **state)
{
    struct bad_peer_fixture *f = *state;
    struct raw_client *rc = &f->client;
    long rss0 = 0, hwm0 = 0, rss1 = 0, hwm1 = 0;
    int plans = 0, failed = 0;
    int world = getenv("IT_WORLD") ? atoi(getenv("IT_WORLD")) : 3;
    double plan_ms, have_at, plan_at;

    assert_non_null(rc->beats);
    sleep_s(0.3); /* heartbeats under way on an idle agent */
    agent_rss(&f->agent, &rss0, &hwm0);
    for (int k = 0; k < world; k++)
        send_big_have(f, (uint32_t)k, (uint32_t)world, k == 0, 400000);
    for (int i = 0; i < 6000 && plans < world && failed == 0; i++) {
        sleep_s(0.01);
        pthread_mutex_lock(&rc->lock);
        plans = rc->n_plans;
        failed = rc->n_failed;
        pthread_mutex_unlock(&rc->lock);
    }
    sleep_s(0.3);
    agent_rss(&f->agent, &rss1, &hwm1);
    agent_plan_times(&f->agent, &plan_ms, &have_at, &plan_at);
    pthread_mutex_lock(&rc->lock);
    double gap = rc->max_heartbeat_gap;
    double plan_gap = gap_around(rc, have_at, plan_at);
    failed = rc->n_failed;
    pthread_mutex_unlock(&rc->lock);
    fprintf(stderr,
            "%d senders x 400,000 shards: plan %.1f ms, longest heartbeat "
            "gap while planning %.1f ms, overall %.1f ms (interval 50 ms), "
            "agent RSS %ld -> %ld kB (peak %ld kB), %d plans, %d "
            "connections failed\n",
            world, plan_ms, plan_gap * 1e3, gap * 1e3, rss0, rss1, hwm1, plans,
            failed);
    assert_int_equal(failed, 0);
    assert_int_equal(plans, world);
    assert_true(have_at > 0 && plan_at >= have_at);
    /* On a loaded host the planner thread and the progress thread share
     * too few cores: the gap may pass 200 ms, but stays well below the
     * plan (with the plan on the progress thread, it was the plan). */
    assert_true(plan_gap < 0.2 || plan_gap < plan_ms / 1e3 / 2);
    /* Nor do the manifests' unpacking: no gap reaches the 5 s after which
     * a sender with default settings gives the agent up (3.9 to 13 s here
     * while they were unpacked on the progress thread). */
    assert_true(gap < 5.0);
    assert_true(it_agent_alive(&f->agent));
    /* The client's progress thread still records heartbeats: the array
     * goes under its lock, with its capacity (freed alone, the next
     * heartbeat was written through NULL: CI's run died here). */
    pthread_mutex_lock(&rc->lock);
    double *beats = rc->beats;
    rc->beats = NULL;
    rc->beats_cap = rc->n_beats = 0;
    pthread_mutex_unlock(&rc->lock);
    free(beats);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_bad_peer_garbage, setup_fixture,
                                        teardown_fixture),
        cmocka_unit_test_setup_teardown(test_bad_peer_current_hello_answered,
                                        setup_fixture, teardown_fixture),
        cmocka_unit_test_setup_teardown(test_bad_peer_future_version,
                                        setup_fixture, teardown_fixture),
        cmocka_unit_test_setup_teardown(test_bad_peer_silent_during_refit,
                                        setup_fixture, teardown_fixture),
        cmocka_unit_test_setup_teardown(test_bad_peer_hostile_labels,
                                        setup_fixture, teardown_fixture),
        cmocka_unit_test_setup_teardown(test_bad_peer_lying_have, setup_fixture,
                                        teardown_fixture),
        cmocka_unit_test_setup_teardown(test_bad_peer_silent_dropped,
                                        setup_fixture, teardown_fixture),
        cmocka_unit_test_setup_teardown(test_bad_peer_all_then_refit,
                                        setup_fixture, teardown_fixture),
        cmocka_unit_test_setup_teardown(test_bad_peer_manifest_over_limit,
                                        setup_fixture, teardown_fixture),
        cmocka_unit_test_setup_teardown(
            test_bad_peer_heartbeats_during_big_plan, setup_big_plan,
            teardown_fixture),
        cmocka_unit_test_setup_teardown(test_bad_peer_unranked_over_limit,
                                        setup_one_unranked, teardown_fixture),
        cmocka_unit_test_setup_teardown(
            test_bad_peer_manifests_being_unpacked_count, setup_two_big_haves,
            teardown_fixture),
    };

    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH_TO_WSTREAM_AGENT\n", argv[0]);
        return 2;
    }
    agent_bin = argv[1];
    return cmocka_run_group_tests(tests, NULL, NULL);
}
