/* test_hostile_rma.c - remote memory access into a real wstream-agent by a
 * peer that holds the deployment's secret, so that it gets the agent's UCX
 * worker address the way a sender does (HELLO on the authenticated
 * channel), then opens a data endpoint to it with UCP_FEATURE_RMA of its
 * own. With remote keys packed from its own memory (an am sender is given
 * none by the agent) it tries, at the agent's own addresses (read from
 * /proc/PID/maps, as a stronger attacker than a network peer could):
 *  - a put of 4 KiB over the live region in the engine's shm,
 *  - a put of 4 KiB past the last region of that shm,
 *  - a get of the live region's first 4 KiB.
 * UCX 1.13 emulates RMA over tcp and shared memory and then wrote wherever
 * the peer said (issue 16's table; main at 0f3c2ae). Expected now: the
 * agent's worker offers no RMA on lanes that emulate it, so nothing lands
 * and nothing is read: the shm holds its poison, the get's buffer keeps
 * its own pattern, the agent is alive, usable, logs why senders use am,
 * and a real refit commits afterwards.
 *
 * usage: test_hostile_rma PATH_TO_WSTREAM_AGENT
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
#include <ucp/api/ucp.h>

#include "agent_fixture.h"
#include "auth.h"
#include "clock.h"
#include "codec.h"
#include "heartbeat_msg.h"
#include "log.h"
#include "timed_wait.h"
#include "worker.h"

#define PROBE_LEN 4096
#define OP_WAIT_S 3.0
#define N_OPS 3 /* two puts and a get */
#define N_PUTS 2
/* The agent logs each attempt it drops (UCX: "got active message id N,
 * but no handler installed"). */
#define DROPPED "but no handler installed"

struct attacker;

/* One RMA operation and its flush: the two requests' completions. Each
 * operation has its own, so that a request of an earlier one that
 * completes late (the close cancels those still pending) is not counted
 * for a later one. Under attacker.lock. */
struct rma_op {
    struct attacker *x;
    int n_done;
    ucs_status_t status[2];
};

static const char *agent_bin;

/* The attacker: its worker's callbacks and what they saw. */
struct attacker {
    wst_worker_t *w;
    wst_conn_t *conn;
    pthread_mutex_t lock;
    uint8_t *address; /* the agent's worker address, from its HELLO */
    size_t address_len;
    int failed; /* its connection failed */
    const char *host;
    uint16_t port;
    pthread_cond_t cond; /* an rma_op's request completed */
    /* the RMA operation do_rma posts */
    ucp_ep_h ep;
    void *rkey_buf;
    ucp_rkey_h rkey;
    int is_get;
    void *local;
    uint64_t remote;
    struct rma_op *op;
    wst_status_t st;
};

static void on_message(void *arg, wst_conn_t *conn, const void *buf, size_t len)
{
    struct attacker *x = arg;
    struct wst_msg m;
    char err[256];

    (void)conn;
    if (wst_msg_decode(buf, len, 1u << 20, &m, err, sizeof(err)) != WST_OK)
        return;
    pthread_mutex_lock(&x->lock);
    if (m.type == WST_MSG_HELLO && x->address == NULL &&
        m.u.hello.worker_address.len > 0) {
        x->address = m.u.hello.worker_address.data;
        x->address_len = m.u.hello.worker_address.len;
        m.u.hello.worker_address.data = NULL;
        m.u.hello.worker_address.len = 0;
    }
    pthread_mutex_unlock(&x->lock);
    wst_msg_release(&m);
}

static void on_failed(void *arg, wst_conn_t *conn, wst_status_t status,
                      const char *why)
{
    struct attacker *x = arg;

    (void)conn;
    fprintf(stderr, "attacker: connection failed: %s (%s)\n", why,
            wst_status_string(status));
    pthread_mutex_lock(&x->lock);
    x->failed = 1;
    pthread_mutex_unlock(&x->lock);
}

/* Progress thread: connect and say HELLO as sender rank 0 of 1. */
static void do_connect(void *arg)
{
    struct attacker *x = arg;
    struct wst_msg m = {.type = WST_MSG_HELLO};
    uint8_t *buf = NULL;
    size_t len = 0;

    x->st = wst_conn_connect(x->w, x->host, x->port, &x->conn);
    if (x->st != WST_OK)
        return;
    m.u.hello.protocol_version = WST_PROTOCOL_VERSION;
    m.u.hello.role = WST_ROLE_SENDER;
    m.u.hello.rank = 0;
    m.u.hello.world_size = 1;
    m.u.hello.session = 0x6861636b;
    x->st = wst_msg_encode(&m, &buf, &len);
    if (x->st == WST_OK)
        x->st = wst_conn_send(x->conn, buf, len);
}

static void do_open_data(void *arg)
{
    struct attacker *x = arg;
    char lanes[512];
    int rma_real = 0;

    x->st = wst_conn_open_data(x->conn, x->address, x->address_len, 1, lanes,
                               sizeof(lanes), &rma_real);
    x->ep = wst_conn_data_ep(x->conn);
    fprintf(stderr, "attacker: data lanes %s (rma real: %d)\n", lanes,
            rma_real);
    if (x->st != WST_OK)
        return;
    ucs_status_t st = ucp_ep_rkey_unpack(x->ep, x->rkey_buf, &x->rkey);
    if (st != UCS_OK) {
        fprintf(stderr, "attacker: rkey unpack: %s\n", ucs_status_string(st));
        x->st = WST_ERR_INVALID;
    }
}

static void op_done(void *request, ucs_status_t status, void *user_data)
{
    struct rma_op *op = user_data;
    struct attacker *x = op->x;

    if (request != NULL)
        ucp_request_free(request);
    pthread_mutex_lock(&x->lock);
    if (op->n_done < 2)
        op->status[op->n_done] = status;
    op->n_done++;
    pthread_cond_broadcast(&x->cond);
    pthread_mutex_unlock(&x->lock);
}

static void op_track(struct rma_op *op, ucs_status_ptr_t req)
{
    if (req == NULL)
        op_done(NULL, UCS_OK, op);
    else if (UCS_PTR_IS_ERR(req))
        op_done(NULL, UCS_PTR_STATUS(req), op);
}

/* Progress thread: the put or get, then a flush. */
static void do_rma(void *arg)
{
    struct attacker *x = arg;
    ucp_request_param_t rp = {
        .op_attr_mask =
            UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send = op_done,
        .user_data = x->op,
    };

    if (x->is_get)
        op_track(x->op, ucp_get_nbx(x->ep, x->local, PROBE_LEN, x->remote,
                                    x->rkey, &rp));
    else
        op_track(x->op, ucp_put_nbx(x->ep, x->local, PROBE_LEN, x->remote,
                                    x->rkey, &rp));
    op_track(x->op, ucp_ep_flush_nbx(x->ep, &rp));
}

/* Progress thread: closing the endpoints cancels what never completed. */
static void do_close(void *arg)
{
    struct attacker *x = arg;

    if (x->conn != NULL)
        wst_conn_close(x->conn);
    x->conn = NULL;
}

/* Progress thread, once the close has run: no request uses the key. */
static void do_rkey_destroy(void *arg)
{
    struct attacker *x = arg;

    if (x->rkey != NULL)
        ucp_rkey_destroy(x->rkey);
    x->rkey = NULL;
}

/* Waits (lock held) until every one of ops[0..n) has both its requests
 * completed, at most wait_s: nonzero when they have. */
static int ops_wait(struct attacker *x, struct rma_op *ops, int n,
                    double wait_s)
{
    uint64_t deadline = wst_deadline_ns(wait_s);

    for (int i = 0; i < n; i++)
        while (ops[i].n_done < 2)
            if (wst_cond_wait_until(&x->cond, &x->lock, deadline) != WST_OK &&
                ops[i].n_done < 2)
                return 0;
    return 1;
}

/* Runs one operation into 'op'; returns how many of its two requests
 * completed within OP_WAIT_S, and prints their statuses. */
static int rma(struct attacker *x, struct rma_op *op, int is_get, void *local,
               uint64_t remote)
{
    pthread_mutex_lock(&x->lock);
    *op = (struct rma_op){.x = x, .status = {UCS_INPROGRESS, UCS_INPROGRESS}};
    pthread_mutex_unlock(&x->lock);
    x->is_get = is_get;
    x->local = local;
    x->remote = remote;
    x->op = op;
    assert_int_equal(wst_worker_call(x->w, do_rma, x), WST_OK);
    pthread_mutex_lock(&x->lock);
    ops_wait(x, op, 1, OP_WAIT_S);
    int n = op->n_done;
    ucs_status_t st0 = op->status[0], st1 = op->status[1];
    pthread_mutex_unlock(&x->lock);
    fprintf(stderr, "attacker: %s at 0x%llx: %d of 2 completed (%s, %s)\n",
            is_get ? "get" : "put", (unsigned long long)remote, n,
            ucs_status_string(st0), ucs_status_string(st1));
    return n;
}

/* Where the agent mapped the engine's shm (/dev/shm/NAME): its start and
 * end in the agent's address space. */
static int agent_shm_range(const struct it_agent *a, uint64_t *start_p,
                           uint64_t *end_p)
{
    char path[64], line[512], needle[96];
    FILE *f;
    int found = 0;

    snprintf(path, sizeof(path), "/proc/%d/maps", (int)a->pid);
    snprintf(needle, sizeof(needle), "/dev/shm%s%s",
             a->shm_name[0] == '/' ? "" : "/", a->shm_name);
    f = fopen(path, "r");
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned long long s, e;
        if (strstr(line, needle) == NULL ||
            sscanf(line, "%llx-%llx", &s, &e) != 2)
            continue;
        if (!found || s < *start_p)
            *start_p = s;
        if (!found || e > *end_p)
            *end_p = e;
        found = 1;
    }
    fclose(f);
    return found ? 0 : -1;
}

static void test_hostile_rma_into_live_weights(void **state)
{
    struct it_agent a;
    struct attacker x = {.host = "127.0.0.1"};
    struct wst_logger log;
    struct wst_auth_secret secret = {0};
    char err[512];
    uint64_t start = 0, end = 0;
    (void)state;

    assert_int_equal(it_agent_start(&a, agent_bin), 0);
    assert_int_equal(agent_shm_range(&a, &start, &end), 0);
    fprintf(stderr, "agent %d maps its engine shm at 0x%llx-0x%llx\n",
            (int)a.pid, (unsigned long long)start, (unsigned long long)end);

    wst_logger_init(&log, "attacker", WST_LOG_INFO);
    assert_int_equal(
        wst_auth_secret_load(a.secret_path, &secret, err, sizeof(err)), WST_OK);
    pthread_mutex_init(&x.lock, NULL);
    pthread_cond_init(&x.cond, NULL);
    x.port = a.port;
    struct wst_worker_params p = {
        .log = &log,
        .ops = {.arg = &x, .message = on_message, .conn_failed = on_failed},
        .rma = WST_WORKER_RMA_ALWAYS,
        .secret = &secret,
        /* It keeps its connection alive as a sender would. */
        .heartbeat = {.interval_s = 0.2,
                      .timeout_s = 30.0,
                      .encode = wst_heartbeat_encode},
    };
    assert_int_equal(wst_worker_create(&p, &x.w), WST_OK);
    assert_int_equal(wst_worker_call(x.w, do_connect, &x), WST_OK);
    assert_int_equal(x.st, WST_OK);
    uint64_t until = wst_now_ns() + 10000000000ull;
    for (;;) {
        pthread_mutex_lock(&x.lock);
        int got = x.address != NULL || x.failed;
        pthread_mutex_unlock(&x.lock);
        if (got || wst_now_ns() > until)
            break;
        struct timespec ms = {.tv_nsec = 1000000};
        nanosleep(&ms, NULL);
    }
    /* It authenticated: the agent gave it what it gives a sender. */
    assert_non_null(x.address);
    /* Keys from the attacker's own memory: the only kind it has. */
    uint8_t *mine = malloc(PROBE_LEN), *got = malloc(PROBE_LEN);
    assert_non_null(mine);
    assert_non_null(got);
    memset(mine, 0x41, PROBE_LEN);
    memset(got, 0x5a, PROBE_LEN);
    ucp_mem_h memh = NULL;
    size_t rkey_len = 0;
    assert_int_equal(wst_worker_mem_map(x.w, mine, PROBE_LEN, &memh), WST_OK);
    assert_int_equal(wst_worker_rkey_pack(x.w, memh, &x.rkey_buf, &rkey_len),
                     WST_OK);
    assert_int_equal(wst_worker_call(x.w, do_open_data, &x), WST_OK);
    assert_int_equal(x.st, WST_OK);

    struct rma_op ops[N_OPS];
    rma(&x, &ops[0], 0, mine, start); /* into live weights */
    rma(&x, &ops[1], 0, mine,
        end > PROBE_LEN ? end - PROBE_LEN : end); /* past them */
    rma(&x, &ops[2], 1, got, start);              /* read them */
    /* Each put reached the agent, and UCX dropped it there: without
     * UCP_FEATURE_RMA its worker has no handler for emulated puts/gets.
     * Only then is what they wrote (nothing) there to look at. (The get
     * is not counted: its request may not leave the attacker at all.) */
    assert_true(it_agent_wait_log_lines(&a, DROPPED, N_PUTS, 10.0));

    assert_true(it_agent_alive(&a));
    assert_true(it_agent_shm_untouched(&a));
    for (size_t i = 0; i < PROBE_LEN; i++)
        if (got[i] != 0x5a)
            fail_msg("the get read live bytes: byte %zu is 0x%02x", i, got[i]);
    assert_true(it_agent_log_has(&a, "no remote memory access"));
    uint64_t committed = 99;
    int usable = 0;
    assert_int_equal(it_agent_status(&a, &committed, &usable), 0);
    assert_int_equal(committed, 0);
    assert_true(usable);

    assert_int_equal(wst_worker_call(x.w, do_close, &x), WST_OK);
    /* The close cancels the requests still pending; the key goes once
     * none is left. */
    pthread_mutex_lock(&x.lock);
    int all_done = ops_wait(&x, ops, N_OPS, 10.0);
    pthread_mutex_unlock(&x.lock);
    assert_true(all_done);
    assert_int_equal(wst_worker_call(x.w, do_rkey_destroy, &x), WST_OK);
    wst_worker_mem_unmap(x.w, memh);
    wst_worker_destroy(x.w);
    free(x.rkey_buf);
    free(x.address);
    free(mine);
    free(got);
    wst_auth_secret_release(&secret);
    pthread_cond_destroy(&x.cond);
    pthread_mutex_destroy(&x.lock);

    /* The agent is untouched and serves a real refit. */
    assert_int_equal(it_refit(&a, 1), 0);
    it_agent_stop(&a);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hostile_rma_into_live_weights),
    };

    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH_TO_WSTREAM_AGENT\n", argv[0]);
        return 2;
    }
    agent_bin = argv[1];
    return cmocka_run_group_tests(tests, NULL, NULL);
}
