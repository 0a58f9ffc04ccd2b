/* test_hostile_data.c - a real wstream-agent against forged am data
 * messages from a peer that holds the deployment's secret.
 *
 * The attacker authenticates, says HELLO as rank 0 to learn the agent's
 * UCX worker address, opens a data endpoint to it and hangs up its control
 * connection (the endpoint stays open). Then, while the real rank 0 pushes
 * version v, it floods data messages claiming rank 0 (and rank 1, outside
 * the world) with wrong tokens, for items 0..63 and 99999, versions
 * v-1..v+1, eager and rendezvous, every byte 0xee. Expected: the refit
 * commits, every byte of live memory is v's (wst_model_verify), the
 * agent's log names the dropped forged data, its status file counts it,
 * and forged data sent after the commit changes nothing.
 *
 * On main before data tokens (data trusted by the rank in its header),
 * this failed: the refit of v failed with "sender ... (rank 0): data for
 * item 15 (x1) at 0+64 outside its plan", blaming rank 0.
 *
 * Also: two senders holding different tensors (raw peers that say HELLO
 * and HAVE) each get a plan that gives base, length and key only of the
 * regions their own items write.
 *
 * usage: test_hostile_data PATH_TO_WSTREAM_AGENT
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
#include "codec.h"
#include "worker.h"

#define FORGED_BYTE 0xee
#define SMALL_LEN 64
#define BIG_LEN (256 * 1024) /* rendezvous */
#define MAX_IN_FLIGHT 256

static const char *agent_bin;

/* The attacker: its worker, the agent's worker address from the HELLO, and
 * the data endpoint it keeps after hanging up. */
struct attacker {
    struct wst_logger log;
    wst_worker_t *worker;
    pthread_mutex_t lock;
    void *addr; /* malloc'd copy of the agent's worker address */
    size_t addr_len;
    wst_conn_t *conn;
    ucp_ep_h ep;
    uint8_t *small, *big; /* payloads, FORGED_BYTE */
    struct wst_msg plan;  /* the last PLAN received; type 0 before */
    /* progress thread only */
    uint64_t in_flight, sent, seq;
    uint64_t version; /* the one the real sender pushes */
};

/* One forged message: its header must outlive the send (UCX 1.13). */
struct forged {
    struct attacker *at;
    struct wst_data_hdr hdr;
};

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};

    nanosleep(&ts, NULL);
}

static void on_message(void *arg, wst_conn_t *conn, const void *buf, size_t len)
{
    struct attacker *at = arg;
    struct wst_msg m;
    char err[256];

    (void)conn;
    if (wst_msg_decode(buf, len, WST_MSG_MAX_DEFAULT, &m, err, sizeof(err)) !=
        WST_OK)
        return;
    if (m.type == WST_MSG_HELLO && m.u.hello.worker_address.len > 0) {
        pthread_mutex_lock(&at->lock);
        free(at->addr);
        at->addr = malloc(m.u.hello.worker_address.len);
        if (at->addr != NULL) {
            memcpy(at->addr, m.u.hello.worker_address.data,
                   m.u.hello.worker_address.len);
            at->addr_len = m.u.hello.worker_address.len;
        }
        pthread_mutex_unlock(&at->lock);
    }
    if (m.type == WST_MSG_PLAN) {
        pthread_mutex_lock(&at->lock);
        wst_msg_release(&at->plan);
        at->plan = m; /* kept */
        pthread_mutex_unlock(&at->lock);
        return;
    }
    wst_msg_release(&m);
}

static void on_conn_failed(void *arg, wst_conn_t *conn, wst_status_t status,
                           const char *why)
{
    (void)arg;
    fprintf(stderr, "attacker: connection %s failed: %s (%s)\n",
            wst_conn_name(conn), wst_status_string(status), why);
}

static void attacker_start(struct attacker *at, const struct it_agent *a)
{
    struct wst_auth_secret secret;
    char err[512];

    memset(at, 0, sizeof(*at));
    pthread_mutex_init(&at->lock, NULL);
    wst_logger_init(&at->log, "attacker", WST_LOG_INFO);
    assert_int_equal(
        wst_auth_secret_load(a->secret_path, &secret, err, sizeof(err)),
        WST_OK);
    struct wst_worker_params wp = {
        .log = &at->log,
        .ops = {.arg = at,
                .message = on_message,
                .conn_failed = on_conn_failed},
        .secret = &secret,
    };
    assert_int_equal(wst_worker_create(&wp, &at->worker), WST_OK);
    wst_auth_secret_release(&secret);
    at->small = malloc(SMALL_LEN);
    at->big = malloc(BIG_LEN);
    assert_non_null(at->small);
    assert_non_null(at->big);
    memset(at->small, FORGED_BYTE, SMALL_LEN);
    memset(at->big, FORGED_BYTE, BIG_LEN);
}

struct hello_job {
    struct attacker *at;
    uint16_t port;
    uint32_t rank, world;
    void *have; /* an encoded HAVE sent after the HELLO, or NULL */
    size_t have_len;
    wst_status_t st;
};

/* Progress thread: connect and say HELLO as sender rank j->rank of
 * j->world (then the HAVE, if any). */
static void do_hello(void *arg)
{
    struct hello_job *j = arg;
    struct wst_msg m = {.type = WST_MSG_HELLO};
    uint8_t *buf = NULL;
    size_t len = 0;

    m.u.hello.protocol_version = WST_PROTOCOL_VERSION;
    m.u.hello.role = WST_ROLE_SENDER;
    m.u.hello.rank = j->rank;
    m.u.hello.world_size = j->world;
    m.u.hello.session = 666;
    j->st = wst_msg_encode(&m, &buf, &len);
    if (j->st != WST_OK)
        return;
    j->st = wst_conn_connect(j->at->worker, "127.0.0.1", j->port, &j->at->conn);
    if (j->st != WST_OK) {
        free(buf);
        return;
    }
    j->st = wst_conn_send(j->at->conn, buf, len);
    if (j->st == WST_OK && j->have != NULL)
        j->st = wst_conn_send(j->at->conn, j->have, j->have_len);
    j->have = NULL;
}

/* Progress thread: the data endpoint to the agent's worker (no peer-error
 * mode: it outlives the control connection), then hang up. */
static void do_open_and_hang_up(void *arg)
{
    struct hello_job *j = arg;
    struct attacker *at = j->at;
    char lanes[256];
    int rma_real = 0;

    j->st = wst_conn_open_data(at->conn, at->addr, at->addr_len, 0, lanes,
                               sizeof(lanes), &rma_real);
    if (j->st != WST_OK)
        return;
    at->ep = wst_conn_data_ep(at->conn);
    wst_conn_close(at->conn);
    at->conn = NULL;
}

/* Learns the agent's worker address the way a sender does, keeps a data
 * endpoint to it, and leaves rank 0 free for the real sender. */
static void attacker_reach_worker(struct attacker *at, const struct it_agent *a)
{
    struct hello_job j = {.at = at, .port = a->port, .rank = 0, .world = 1};
    size_t have = 0;

    assert_int_equal(wst_worker_call(at->worker, do_hello, &j), WST_OK);
    assert_int_equal(j.st, WST_OK);
    for (int i = 0; i < 500 && have == 0; i++) {
        sleep_s(0.01);
        pthread_mutex_lock(&at->lock);
        have = at->addr_len;
        pthread_mutex_unlock(&at->lock);
    }
    assert_true(have > 0);
    assert_int_equal(wst_worker_call(at->worker, do_open_and_hang_up, &j),
                     WST_OK);
    assert_int_equal(j.st, WST_OK);
    assert_non_null(at->ep);
    assert_true(it_agent_wait_log(a, "disconnected", 5.0));
}

static void forged_done(void *request, ucs_status_t status, void *user_data)
{
    struct forged *f = user_data;

    (void)status;
    f->at->in_flight--;
    free(f);
    ucp_request_free(request);
}

/* Progress thread: one batch of forged messages, cycling through claimed
 * ranks, tokens, items, versions and sizes. */
static void do_forge_batch(void *arg)
{
    struct attacker *at = arg;

    for (int k = 0; k < 32 && at->in_flight < MAX_IN_FLIGHT; k++) {
        uint64_t s = at->seq++;
        struct forged *f = malloc(sizeof(*f));
        if (f == NULL)
            return;
        f->at = at;
        f->hdr = (struct wst_data_hdr){
            .token = s % 3 == 0 ? 0 : 0x9e3779b97f4a7c15ull * (s + 1),
            .rank = s % 7 == 6 ? 1 : 0,
            .item = s % 65 == 64 ? 99999 : (uint32_t)(s % 64),
            .offset = 0,
            .version = at->version - 1 + s % 3,
            .count = 1,
        };
        int big = s % 16 == 15;
        ucp_request_param_t rp = {
            .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                            UCP_OP_ATTR_FIELD_USER_DATA |
                            UCP_OP_ATTR_FIELD_FLAGS,
            .cb.send = forged_done,
            .user_data = f,
            .flags = big ? UCP_AM_SEND_FLAG_RNDV : UCP_AM_SEND_FLAG_EAGER,
        };
        ucs_status_ptr_t req = ucp_am_send_nbx(
            at->ep, WST_AM_DATA, &f->hdr, sizeof(f->hdr),
            big ? at->big : at->small, big ? BIG_LEN : SMALL_LEN, &rp);
        at->sent++;
        if (req == NULL || UCS_PTR_IS_ERR(req)) {
            free(f);
            continue;
        }
        at->in_flight++;
    }
}

struct flood {
    struct attacker *at;
    pthread_t thread;
    pthread_mutex_t lock;
    int stop;
};

static void *flood_main(void *arg)
{
    struct flood *fl = arg;

    for (;;) {
        pthread_mutex_lock(&fl->lock);
        int stop = fl->stop;
        pthread_mutex_unlock(&fl->lock);
        if (stop)
            break;
        wst_worker_call(fl->at->worker, do_forge_batch, fl->at);
        usleep(200);
    }
    return NULL;
}

static void flood_start(struct flood *fl, struct attacker *at)
{
    fl->at = at;
    fl->stop = 0;
    pthread_mutex_init(&fl->lock, NULL);
    assert_int_equal(pthread_create(&fl->thread, NULL, flood_main, fl), 0);
}

static void flood_stop(struct flood *fl)
{
    pthread_mutex_lock(&fl->lock);
    fl->stop = 1;
    pthread_mutex_unlock(&fl->lock);
    pthread_join(fl->thread, NULL);
    pthread_mutex_destroy(&fl->lock);
}

static void do_sent(void *arg)
{
    struct attacker *at = arg;

    fprintf(stderr, "attacker: %llu forged messages sent, %llu in flight\n",
            (unsigned long long)at->sent, (unsigned long long)at->in_flight);
}

static void attacker_stop(struct attacker *at)
{
    wst_worker_call(at->worker, do_sent, at);
    /* Lets the last sends drain before the endpoint goes. */
    sleep_s(0.3);
    wst_worker_destroy(at->worker);
    wst_msg_release(&at->plan);
    free(at->addr);
    free(at->small);
    free(at->big);
    pthread_mutex_destroy(&at->lock);
}

static void verify(const struct it_agent *a, uint64_t version)
{
    char err[512];

    if (wst_model_verify(&a->layout, a->shm, IT_SEED, version, NULL, err,
                         sizeof(err)) != WST_OK)
        fail_msg("live memory is not version %llu: %s",
                 (unsigned long long)version, err);
}

/* The "forged_data" count of the agent's status file, or -1. */
static long long status_forged(const struct it_agent *a)
{
    char buf[4096];
    FILE *f = fopen(a->status_path, "r");
    long long n = -1;

    if (f == NULL)
        return -1;
    size_t got = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[got] = '\0';
    const char *p = strstr(buf, "\"forged_data\"");
    if (p != NULL && (p = strchr(p, ':')) != NULL)
        n = strtoll(p + 1, NULL, 10);
    return n;
}

static void test_hostile_data_forged_during_refit(void **state)
{
    struct it_agent a;
    struct attacker at;
    struct flood fl;
    struct it_sender s;
    const uint64_t v = 2;
    (void)state;

    assert_int_equal(it_agent_start(&a, agent_bin), 0);
    assert_int_equal(it_refit(&a, 1), 0);
    verify(&a, 1);
    attacker_start(&at, &a);
    attacker_reach_worker(&at, &a);
    at.version = v;

    assert_int_equal(it_sender_load(&s, &a), 0);
    assert_int_equal(it_sender_setup(&s, &a, SIZE_MAX, v), WST_OK);
    flood_start(&fl, &at);
    sleep_s(0.2); /* forged data already arriving when the refit starts */
    wst_status_t st = wst_sender_push(s.sender, v);
    if (st == WST_OK)
        st = wst_sender_wait(s.sender, 30.0);
    sleep_s(0.2); /* and after its commit */
    flood_stop(&fl);
    if (st != WST_OK)
        fail_msg("refit of version %llu under forged data: %s: %s",
                 (unsigned long long)v, wst_status_string(st),
                 wst_sender_last_error(s.sender));
    it_sender_destroy(&s);
    attacker_stop(&at);

    assert_int_equal(it_agent_wait_status(&a, v, 10.0), 0);
    assert_true(it_agent_alive(&a));
    verify(&a, v);
    assert_true(it_agent_log_has(&a, "data claiming sender rank 0 with a "
                                     "wrong token dropped"));
    uint64_t committed = 0;
    int usable = 0;
    assert_int_equal(it_agent_status(&a, &committed, &usable), 0);
    assert_int_equal(committed, v);
    assert_true(usable);
    long long forged = status_forged(&a);
    fprintf(stderr, "status file: forged_data %lld\n", forged);
    assert_true(forged > 0);

    /* The agent goes on: a further refit commits, every byte its own. */
    assert_int_equal(it_refit(&a, v + 1), 0);
    verify(&a, v + 1);
    it_agent_stop(&a);
}

/* Says HELLO as rank 'rank' of 2 with a HAVE of haves[0..n), then waits
 * for the agent's PLAN. */
static void plan_for(struct attacker *at, const struct it_agent *a,
                     uint32_t rank, struct wst_have *haves, size_t n)
{
    struct wst_msg m = {.type = WST_MSG_HAVE};
    uint8_t *buf = NULL;
    size_t len = 0;

    m.u.have.rank = rank;
    m.u.have.n_entries = n;
    m.u.have.entries = haves;
    assert_int_equal(wst_msg_encode(&m, &buf, &len), WST_OK);
    struct hello_job j = {.at = at,
                          .port = a->port,
                          .rank = rank,
                          .world = 2,
                          .have = buf,
                          .have_len = len};
    assert_int_equal(wst_worker_call(at->worker, do_hello, &j), WST_OK);
    assert_int_equal(j.st, WST_OK);
}

static int got_plan(struct attacker *at)
{
    pthread_mutex_lock(&at->lock);
    int got = at->plan.type == WST_MSG_PLAN;
    pthread_mutex_unlock(&at->lock);
    return got;
}

/* Every region the plan gives a base, length or key for is one its items
 * write, and every one they write is given. Returns how many are. */
static size_t check_grants(const struct wst_plan_msg *pl, size_t n_regions)
{
    int *writes = calloc(n_regions, sizeof(*writes));
    size_t granted = 0;

    assert_non_null(writes);
    assert_int_equal(pl->n_regions, n_regions);
    for (size_t k = 0; k < pl->n_items; k++) {
        assert_true(pl->items[k].region < n_regions);
        writes[pl->items[k].region] = 1;
    }
    for (size_t i = 0; i < n_regions; i++) {
        const struct wst_wire_region *g = &pl->regions[i];
        fprintf(stderr,
                "plan of sender %u: region %zu base 0x%llx length %llu "
                "rkey %zu bytes; its items write it: %s\n",
                pl->sender, i, (unsigned long long)g->base,
                (unsigned long long)g->length, g->rkey.len,
                writes[i] ? "yes" : "no");
        if (writes[i]) {
            assert_true(g->base != 0 && g->length != 0);
            granted++;
        } else {
            assert_true(g->base == 0 && g->length == 0 && g->rkey.len == 0);
        }
    }
    free(writes);
    return granted;
}

/* Two senders that hold different tensors: each one's plan names base,
 * length (and, for the put mover, a key) only of the regions its own
 * items write; the others go empty, at their indices. */
static void test_hostile_data_plan_grants_own_regions(void **state)
{
    struct it_agent a;
    struct it_sender s;
    struct attacker p0, p1;
    (void)state;

    assert_int_equal(it_agent_start(&a, agent_bin), 0);
    assert_int_equal(it_sender_load(&s, &a), 0);
    size_t split = s.n_haves / 2;
    attacker_start(&p0, &a);
    attacker_start(&p1, &a);
    plan_for(&p0, &a, 0, s.haves, split);
    plan_for(&p1, &a, 1, s.haves + split, s.n_haves - split);
    for (int i = 0; i < 500 && !(got_plan(&p0) && got_plan(&p1)); i++)
        sleep_s(0.01);
    assert_true(got_plan(&p0));
    assert_true(got_plan(&p1));

    size_t n = a.layout.n_regions;
    size_t g0 = check_grants(&p0.plan.u.plan, n);
    size_t g1 = check_grants(&p1.plan.u.plan, n);
    /* Neither is given everything: the check above is not vacuous. */
    assert_true(g0 > 0 && g0 < n);
    assert_true(g1 > 0 && g1 < n);
    attacker_stop(&p0);
    attacker_stop(&p1);
    it_sender_destroy(&s);
    assert_true(it_agent_alive(&a));
    it_agent_stop(&a);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hostile_data_forged_during_refit),
        cmocka_unit_test(test_hostile_data_plan_grants_own_regions),
    };

    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH_TO_WSTREAM_AGENT\n", argv[0]);
        return 2;
    }
    agent_bin = argv[1];
    return cmocka_run_group_tests(tests, NULL, NULL);
}
