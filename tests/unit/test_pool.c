/* test_pool.c - common/pool.c: every job of a batch runs exactly once; a
 * cancelled batch skips the jobs not started and finish returns only once
 * none runs; a second batch waits its turn. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "pool.h"

#define N_JOBS 1000

struct batch {
    pthread_mutex_t lock;
    int runs[N_JOBS];
    size_t n_started;
    int running, max_running, after_finish;
    int finished;      /* set by the test once finish returned */
    unsigned sleep_us; /* per job */
};

static void job(void *arg, size_t i)
{
    struct batch *b = arg;

    pthread_mutex_lock(&b->lock);
    b->n_started++;
    b->runs[i]++;
    b->running++;
    if (b->running > b->max_running)
        b->max_running = b->running;
    if (b->finished)
        b->after_finish++;
    pthread_mutex_unlock(&b->lock);
    if (b->sleep_us > 0) {
        struct timespec ts = {0, (long)b->sleep_us * 1000};
        nanosleep(&ts, NULL);
    }
    pthread_mutex_lock(&b->lock);
    b->running--;
    pthread_mutex_unlock(&b->lock);
}

static void test_pool_runs_every_job_once_in_order(void **state)
{
    static struct batch b;
    wst_pool_t *p = NULL;

    (void)state;
    memset(&b, 0, sizeof(b));
    pthread_mutex_init(&b.lock, NULL);
    assert_int_equal(wst_pool_create("test-pool", 4, &p), WST_OK);
    assert_int_equal(wst_pool_start(p, job, &b, N_JOBS), WST_OK);
    wst_pool_finish(p, 0);
    /* Nothing pending: the pool takes another batch (an empty one). */
    assert_int_equal(wst_pool_start(p, job, &b, 0), WST_OK);
    assert_int_equal(b.n_started, N_JOBS);
    /* Indexes are handed out in order, but a thread may be descheduled
     * between taking one and recording it: only "each once" is exact. */
    for (size_t i = 0; i < N_JOBS; i++)
        assert_int_equal(b.runs[i], 1);
    assert_int_equal(b.running, 0);
    /* Another batch, and an empty one. */
    memset(b.runs, 0, sizeof(b.runs));
    b.n_started = 0;
    assert_int_equal(wst_pool_start(p, job, &b, 10), WST_OK);
    wst_pool_finish(p, 0);
    assert_int_equal(b.n_started, 10);
    assert_int_equal(wst_pool_start(p, job, &b, 0), WST_OK);
    wst_pool_finish(p, 0);
    wst_pool_finish(p, 1); /* without a batch: returns */
    wst_pool_destroy(p);
    pthread_mutex_destroy(&b.lock);
}

static void test_pool_cancel_and_busy(void **state)
{
    static struct batch b;
    wst_pool_t *p = NULL;

    (void)state;
    memset(&b, 0, sizeof(b));
    pthread_mutex_init(&b.lock, NULL);
    b.sleep_us = 2000;
    assert_int_equal(wst_pool_create("test-pool", 3, &p), WST_OK);
    assert_int_equal(wst_pool_start(p, job, &b, N_JOBS), WST_OK);
    assert_int_equal(wst_pool_start(p, job, &b, 1), WST_ERR_BUSY);
    struct timespec ts = {0, 10 * 1000 * 1000};
    /* Cancel once some jobs ran (a loaded host may start none in 10 ms):
     * all 1000 take at least 0.6 s on 3 threads. */
    for (;;) {
        pthread_mutex_lock(&b.lock);
        size_t n = b.n_started;
        pthread_mutex_unlock(&b.lock);
        if (n >= 3)
            break;
        nanosleep(&ts, NULL);
    }
    wst_pool_finish(p, 1);
    pthread_mutex_lock(&b.lock);
    b.finished = 1;
    size_t started = b.n_started;
    assert_int_equal(b.running, 0); /* nothing runs once finish returned */
    pthread_mutex_unlock(&b.lock);
    assert_true(started > 0 && started < N_JOBS);
    nanosleep(&ts, NULL);
    assert_int_equal(b.after_finish, 0);
    assert_int_equal(b.n_started, started);
    assert_true(b.max_running <= 3);
    /* The pool takes a new batch after a cancelled one. */
    b.sleep_us = 0;
    b.finished = 0;
    assert_int_equal(wst_pool_start(p, job, &b, 5), WST_OK);
    wst_pool_destroy(p); /* cancels what has not started, joins */
    pthread_mutex_destroy(&b.lock);
}

static void test_pool_refuses_no_threads(void **state)
{
    wst_pool_t *p = NULL;

    (void)state;
    assert_int_equal(wst_pool_create("test-pool", 0, &p), WST_ERR_INVALID);
    assert_null(p);
    wst_pool_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_runs_every_job_once_in_order),
        cmocka_unit_test(test_pool_cancel_and_busy),
        cmocka_unit_test(test_pool_refuses_no_threads),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
