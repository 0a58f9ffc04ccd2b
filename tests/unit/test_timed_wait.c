/* test_timed_wait.c - condition waits against monotonic deadlines
 * (common/timed_wait.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <unistd.h>

#include "clock.h"
#include "timed_wait.h"

struct waiter {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int flag;
};

static void waiter_init(struct waiter *w)
{
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->cond, NULL);
    w->flag = 0;
}

static void waiter_fini(struct waiter *w)
{
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->lock);
}

/* Sets the flag after 50 ms and signals. */
static void *late_signal(void *arg)
{
    struct waiter *w = arg;

    usleep(50 * 1000);
    pthread_mutex_lock(&w->lock);
    w->flag = 1;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

/* Nobody signals: the wait ends at the deadline, not before, not long after. */
static void test_timed_wait_times_out(void **state)
{
    struct waiter w;
    uint64_t t0, deadline;
    wst_status_t st;

    (void)state;
    waiter_init(&w);
    t0 = wst_now_ns();
    deadline = t0 + 100 * 1000000ull;
    pthread_mutex_lock(&w.lock);
    while ((st = wst_cond_wait_until(&w.cond, &w.lock, deadline)) == WST_OK)
        ;
    pthread_mutex_unlock(&w.lock);
    assert_int_equal(st, WST_ERR_TIMED_OUT);
    assert_true(wst_now_ns() >= deadline);
    assert_true(wst_now_ns() - t0 < 5000 * 1000000ull);
    waiter_fini(&w);
}

/* A passed deadline returns at once, whatever the clock says. */
static void test_timed_wait_past_deadline(void **state)
{
    struct waiter w;
    uint64_t t0;

    (void)state;
    waiter_init(&w);
    t0 = wst_now_ns();
    pthread_mutex_lock(&w.lock);
    assert_int_equal(wst_cond_wait_until(&w.cond, &w.lock, 0),
                     WST_ERR_TIMED_OUT);
    assert_int_equal(wst_cond_wait_until(&w.cond, &w.lock, t0),
                     WST_ERR_TIMED_OUT);
    assert_int_equal(wst_cond_wait_s(&w.cond, &w.lock, 0), WST_ERR_TIMED_OUT);
    assert_int_equal(wst_cond_wait_s(&w.cond, &w.lock, -1), WST_ERR_TIMED_OUT);
    pthread_mutex_unlock(&w.lock);
    assert_true(wst_now_ns() - t0 < 1000 * 1000000ull);
    waiter_fini(&w);
}

/* A signal ends the wait early, with WST_OK, long before the deadline. */
static void test_timed_wait_signalled(void **state)
{
    struct waiter w;
    pthread_t t;
    uint64_t t0;
    wst_status_t st = WST_OK;

    (void)state;
    waiter_init(&w);
    t0 = wst_now_ns();
    assert_int_equal(pthread_create(&t, NULL, late_signal, &w), 0);
    pthread_mutex_lock(&w.lock);
    while (!w.flag && st == WST_OK)
        st = wst_cond_wait_s(&w.cond, &w.lock, 30.0);
    pthread_mutex_unlock(&w.lock);
    pthread_join(t, NULL);
    assert_int_equal(st, WST_OK);
    assert_int_equal(w.flag, 1);
    assert_true(wst_now_ns() - t0 < 20000 * 1000000ull);
    waiter_fini(&w);
}

/* A deadline far away (or "never") neither overflows nor returns early. */
static void test_timed_wait_far_deadline(void **state)
{
    struct waiter w;
    pthread_t t;
    wst_status_t st = WST_OK;

    (void)state;
    waiter_init(&w);
    assert_int_equal(pthread_create(&t, NULL, late_signal, &w), 0);
    pthread_mutex_lock(&w.lock);
    while (!w.flag && st == WST_OK)
        st = wst_cond_wait_until(&w.cond, &w.lock, UINT64_MAX);
    pthread_mutex_unlock(&w.lock);
    pthread_join(t, NULL);
    assert_int_equal(st, WST_OK);
    assert_int_equal(w.flag, 1);
    waiter_fini(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timed_wait_times_out),
        cmocka_unit_test(test_timed_wait_past_deadline),
        cmocka_unit_test(test_timed_wait_signalled),
        cmocka_unit_test(test_timed_wait_far_deadline),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
