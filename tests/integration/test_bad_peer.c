/* test_bad_peer.c - a real wstream-agent survives peers that are not
 * well-behaved senders: garbage control bytes, a hello of an unknown
 * protocol version (answered with WST_ERR_VERSION), and a peer that
 * connects and says nothing while a correct sender refits.
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
#include "codec.h"
#include "worker.h"

static const char *agent_bin;

/* A raw client: its worker, and what came back from the agent. */
struct raw_client {
    struct wst_logger log;
    wst_worker_t *worker;
    pthread_mutex_t lock;
    int n_errors;      /* ERROR messages received */
    int32_t error_status; /* of the last one */
    char error_text[WST_ERROR_MSG_MAX];
    int n_failed;      /* connections reported failed */
    int n_hellos;      /* HELLO messages received */
};

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

static void on_message(void *arg, wst_conn_t *conn, const void *buf,
                       size_t len)
{
    struct raw_client *rc = arg;
    struct wst_msg m;
    char err[256];

    if (wst_msg_decode(buf, len, WST_MSG_MAX_DEFAULT, &m, err,
                       sizeof(err)) != WST_OK) {
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

static int raw_client_start(struct raw_client *rc)
{
    memset(rc, 0, sizeof(*rc));
    pthread_mutex_init(&rc->lock, NULL);
    wst_logger_init(&rc->log, "raw-client", WST_LOG_INFO);
    struct wst_worker_params wp = {
        .log = &rc->log,
        .ops = {.arg = rc,
                .message = on_message,
                .conn_failed = on_conn_failed},
    };
    return wst_worker_create(&wp, &rc->worker) == WST_OK ? 0 : -1;
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

    job->status = wst_conn_connect(job->rc->worker, "127.0.0.1", job->port,
                                   &job->conn);
    if (job->status != WST_OK) {
        free(job->buf);
        return;
    }
    if (job->buf != NULL)
        job->status = wst_conn_send(job->conn, job->buf, job->len);
    job->buf = NULL;
}

static wst_conn_t *raw_send(struct raw_client *rc, uint16_t port, void *buf,
                            size_t len)
{
    struct send_job job = {
        .rc = rc, .port = port, .buf = buf, .len = len};

    assert_int_equal(wst_worker_call(rc->worker, connect_and_send, &job),
                     WST_OK);
    assert_int_equal(job.status, WST_OK);
    return job.conn;
}

static int setup_fixture(void **state)
{
    struct bad_peer_fixture *f = calloc(1, sizeof(*f));

    if (f == NULL)
        return -1;
    if (it_agent_start(&f->agent, agent_bin) != 0) {
        fprintf(stderr, "setup: could not start wstream-agent '%s'\n",
                agent_bin);
        free(f);
        return -1;
    }
    if (raw_client_start(&f->client) != 0) {
        fprintf(stderr, "setup: could not start a UCX worker\n");
        it_agent_stop(&f->agent);
        free(f);
        return -1;
    }
    *state = f;
    return 0;
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
    for (int i = 0; i < 500 && !it_agent_log_has(&f->agent, "bad message");
         i++)
        sleep_s(0.01);
    assert_true(it_agent_log_has(&f->agent, "bad message"));
    assert_true(it_agent_alive(&f->agent));
    assert_int_equal(it_agent_status(&f->agent, &committed, &usable), 0);
    assert_true(usable);
    assert_int_equal(committed, 0);
    assert_true(it_agent_shm_untouched(&f->agent));
}

/* Sends a sender's hello of 'protocol_version' (rank 0 of 1). */
static void send_hello(struct bad_peer_fixture *f, uint32_t protocol_version)
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
    raw_send(&f->client, f->agent.port, buf, len);
}

/* Control for (b): the raw client does hear the agent; a current hello is
 * answered with the agent's own hello. */
static void current_version_peer(struct bad_peer_fixture *f)
{
    struct raw_client *rc = &f->client;
    int n_hellos = 0;

    send_hello(f, WST_PROTOCOL_VERSION);
    for (int i = 0; i < 500 && n_hellos == 0; i++) {
        sleep_s(0.01);
        pthread_mutex_lock(&rc->lock);
        n_hellos = rc->n_hellos;
        pthread_mutex_unlock(&rc->lock);
    }
    if (n_hellos == 0)
        fail_msg("no HELLO came back in 5 s for a hello of protocol "
                 "version %d", WST_PROTOCOL_VERSION);
    assert_true(it_agent_alive(&f->agent));
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
    fprintf(stderr, "error from the agent: %s: %s\n",
            wst_status_string(status), rc->error_text);
    assert_int_equal(status, WST_ERR_VERSION);
    assert_true(it_agent_alive(&f->agent));
}

/* (c) connects and says nothing; stays connected. */
static void silent_peer(struct bad_peer_fixture *f)
{
    raw_send(&f->client, f->agent.port, NULL, 0);
    sleep_s(0.3); /* let the agent accept it */
    assert_true(it_agent_alive(&f->agent));
}

/* (d) a correct sender refits; every byte verified. */
static void good_refit(struct bad_peer_fixture *f, uint64_t version)
{
    struct it_sender s;
    char err[512];
    wst_status_t st;

    assert_int_equal(it_sender_load(&s, &f->agent), 0);
    assert_int_equal(it_sender_setup(&s, &f->agent, SIZE_MAX, version),
                     WST_OK);
    st = wst_sender_push(s.sender, version);
    if (st == WST_OK)
        st = wst_sender_wait(s.sender, 30.0);
    if (st != WST_OK)
        fail_msg("refit %llu: %s: %s", (unsigned long long)version,
                 wst_status_string(st), wst_sender_last_error(s.sender));
    it_sender_destroy(&s);
    if (wst_model_verify(&f->agent.layout, f->agent.shm, IT_SEED, version,
                         NULL, err, sizeof(err)) != WST_OK)
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
static void test_bad_peer_all_then_refit(void **state)
{
    struct bad_peer_fixture *f = *state;

    garbage_peer(f);
    future_version_peer(f);
    silent_peer(f);
    good_refit(f, 1);
    assert_true(it_agent_alive(&f->agent));
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
        cmocka_unit_test_setup_teardown(test_bad_peer_all_then_refit,
                                        setup_fixture, teardown_fixture),
    };

    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH_TO_WSTREAM_AGENT\n", argv[0]);
        return 2;
    }
    agent_bin = argv[1];
    return cmocka_run_group_tests(tests, NULL, NULL);
}
