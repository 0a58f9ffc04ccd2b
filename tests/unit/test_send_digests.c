/* test_send_digests.c - sender/digests.c against hand-made links, the rest
 * of the sender stubbed: every layer of a live link gets its digest, and a
 * link that fails while the batch runs has its jobs not yet started
 * skipped, so that wait does not hash a dead receiver's layers.
 *
 * The pool has one thread and the first job (link 0, layer 0) reads a
 * "device" run whose stubbed digest call blocks until the test lets it
 * go: the test fails link 1 while every job of link 1 is still queued.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "digest.h"
#include "sender_internal.h"

#define N_LINKS 2
#define N_LAYERS 3
#define RUN_BYTES 4096

/* ---- stubs for the rest of the sender ---- */

static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int entered, released;
} gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};

/* Holds the pool's one thread inside the first job until released. */
wst_status_t wst_send_device_digest_add(struct wst_send_device *dev,
                                        struct wst_digest *d, const void *data,
                                        uint64_t len)
{
    (void)dev;
    pthread_mutex_lock(&gate.lock);
    gate.entered = 1;
    pthread_cond_broadcast(&gate.cond);
    while (!gate.released)
        pthread_cond_wait(&gate.cond, &gate.lock);
    pthread_mutex_unlock(&gate.lock);
    wst_digest_update(d, data, len);
    return WST_OK;
}

wst_status_t wst_send_device_digest_flush(struct wst_send_device *dev,
                                          struct wst_digest *d)
{
    (void)dev;
    (void)d;
    return WST_OK;
}

static int n_link_fail;

void wst_link_fail(struct link *l, wst_status_t status, const char *fmt, ...)
{
    (void)l;
    (void)status;
    (void)fmt;
    n_link_fail++;
}

void wst_send_pump(struct link *l)
{
    (void)l;
}

/* ---- fixture ---- */

struct fixture {
    struct wst_sender s;
    struct link links[N_LINKS];
    struct shard shards[2]; /* 0: host, 1: "device" (the gate) */
    struct wst_plan_item items[N_LINKS][N_LAYERS];
    size_t layer_first[N_LINKS][N_LAYERS + 1];
    uint64_t layer_bytes[N_LINKS][N_LAYERS];
    uint64_t digests[N_LINKS][N_LAYERS];
    uint8_t digest_in[N_LINKS][N_LAYERS];
    uint8_t data[2][N_LINKS * N_LAYERS * RUN_BYTES];
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));

    if (f == NULL)
        return -1;
    gate.entered = gate.released = 0;
    n_link_fail = 0;
    wst_logger_init(&f->s.log, "test", WST_LOG_WARN);
    pthread_mutex_init(&f->s.lock, NULL);
    pthread_cond_init(&f->s.cond, NULL);
    wst_ticket_lock_init(&f->s.dev_hash_lock);
    for (size_t i = 0; i < sizeof(f->data); i++)
        ((uint8_t *)f->data)[i] = (uint8_t)(i * 131 + 7);
    for (int k = 0; k < 2; k++) {
        f->shards[k].data = f->data[k];
        f->shards[k].bytes = sizeof(f->data[k]);
        f->shards[k].device = k == 1 ? 0 : -1;
    }
    for (int i = 0; i < N_LINKS; i++) {
        struct link *l = &f->links[i];
        l->s = &f->s;
        snprintf(l->name, sizeof(l->name), "link%d", i);
        for (uint32_t layer = 0; layer < N_LAYERS; layer++) {
            /* Only the batch's first job reads the gated shard. */
            f->items[i][layer] = (struct wst_plan_item){
                .have = i == 0 && layer == 0 ? 1 : 0,
                .src_offset = (uint64_t)(i * N_LAYERS + layer) * RUN_BYTES,
                .length = RUN_BYTES,
                .layer = layer};
            f->layer_first[i][layer] = layer;
            f->layer_bytes[i][layer] = RUN_BYTES;
        }
        f->layer_first[i][N_LAYERS] = N_LAYERS;
        l->plan.n_layers = N_LAYERS;
        l->plan.n_items = N_LAYERS;
        l->plan.items = f->items[i];
        l->have_plan = 1;
        l->layer_first = f->layer_first[i];
        l->layer_bytes = f->layer_bytes[i];
        l->digests = f->digests[i];
        l->digest_in = f->digest_in[i];
        l->version = 7;
        l->state = LINK_STREAMING;
    }
    f->s.shards = f->shards;
    f->s.n_shards = 2;
    f->s.links = f->links;
    f->s.n_links = N_LINKS;
    struct wst_worker_params wp = {.log = &f->s.log};
    if (wst_worker_create(&wp, &f->s.worker) != WST_OK ||
        wst_pool_create("test-digest", 1, &f->s.digest_pool) != WST_OK) {
        wst_worker_destroy(f->s.worker);
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;

    pthread_mutex_lock(&gate.lock);
    gate.released = 1;
    pthread_cond_broadcast(&gate.cond);
    pthread_mutex_unlock(&gate.lock);
    wst_pool_destroy(f->s.digest_pool);
    wst_worker_destroy(f->s.worker);
    for (int i = 0; i < N_LINKS; i++)
        wst_send_free_digest_pieces(&f->links[i]);
    free(f->s.digest_jobs);
    wst_ticket_lock_destroy(&f->s.dev_hash_lock);
    pthread_cond_destroy(&f->s.cond);
    pthread_mutex_destroy(&f->s.lock);
    free(f);
    return 0;
}

/* ---- helpers ---- */

static void wait_gate_entered(void)
{
    pthread_mutex_lock(&gate.lock);
    while (!gate.entered)
        pthread_cond_wait(&gate.cond, &gate.lock);
    pthread_mutex_unlock(&gate.lock);
}

static void release_gate(void)
{
    pthread_mutex_lock(&gate.lock);
    gate.released = 1;
    pthread_cond_broadcast(&gate.cond);
    pthread_mutex_unlock(&gate.lock);
}

/* Progress thread: what link.c's failure does to the link's digests. */
static void fail_link1(void *arg)
{
    struct fixture *f = arg;

    f->links[1].state = LINK_FAILED;
    wst_send_skip_digests(&f->links[1]);
}

static void noop(void *arg)
{
    (void)arg;
}

/* Stops the batch as wait does and lets the posted results land. */
static void finish_batch(struct fixture *f)
{
    wst_send_stop_digests(&f->s, 0);
    assert_int_equal(wst_worker_call(f->s.worker, noop, NULL), WST_OK);
}

static void assert_link_digested(const struct fixture *f, int i)
{
    const struct link *l = &f->links[i];

    assert_int_equal(l->digests_ready, N_LAYERS);
    for (uint32_t layer = 0; layer < N_LAYERS; layer++) {
        const struct wst_plan_item *it = &f->items[i][layer];
        struct wst_digest d;
        wst_digest_init(&d);
        wst_digest_update(&d, f->data[it->have] + it->src_offset, it->length);
        assert_int_equal(l->digest_in[layer], 1);
        assert_true(l->digests[layer] == wst_digest_final(&d));
    }
}

static void assert_link_not_digested(const struct fixture *f, int i)
{
    assert_int_equal(f->links[i].digests_ready, 0);
    for (uint32_t layer = 0; layer < N_LAYERS; layer++)
        assert_int_equal(f->links[i].digest_in[layer], 0);
}

/* ---- cases ---- */

static void test_send_digests_every_layer_of_live_links(void **state)
{
    struct fixture *f = *state;

    assert_int_equal(wst_send_start_digests(&f->s, 7), WST_OK);
    assert_int_equal(f->s.n_digest_jobs, N_LINKS * N_LAYERS);
    wait_gate_entered();
    release_gate();
    finish_batch(f);
    assert_link_digested(f, 0);
    assert_link_digested(f, 1);
    assert_int_equal(n_link_fail, 0);
}

static void test_send_digests_failed_link_skipped(void **state)
{
    struct fixture *f = *state;

    assert_int_equal(wst_send_start_digests(&f->s, 7), WST_OK);
    /* The one pool thread is inside link 0's layer 0; link 1's jobs are
     * all still queued when it fails. */
    wait_gate_entered();
    assert_int_equal(wst_worker_call(f->s.worker, fail_link1, f), WST_OK);
    release_gate();
    finish_batch(f);
    assert_link_digested(f, 0);
    assert_link_not_digested(f, 1);
}

static void test_send_digests_failed_before_batch_gets_no_jobs(void **state)
{
    struct fixture *f = *state;

    /* Failed after its plan, before the batch (its BEGIN failed). */
    f->links[1].state = LINK_FAILED;
    assert_int_equal(wst_send_start_digests(&f->s, 7), WST_OK);
    assert_int_equal(f->s.n_digest_jobs, N_LAYERS);
    wait_gate_entered();
    release_gate();
    finish_batch(f);
    assert_link_digested(f, 0);
    assert_link_not_digested(f, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            test_send_digests_every_layer_of_live_links, setup, teardown),
        cmocka_unit_test_setup_teardown(test_send_digests_failed_link_skipped,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_send_digests_failed_before_batch_gets_no_jobs, setup,
            teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
