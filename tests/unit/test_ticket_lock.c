/* test_ticket_lock.c - common/ticket_lock.c: turns go in the order they
 * were asked for, even to a waiter up against a thread that leaves and
 * asks again at once (which a pthread mutex lets win, turn after turn). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ticket_lock.h"

#define GREEDY_TURNS 200
#define N_WAITERS 8

struct rig {
    struct wst_ticket_lock lock;
    pthread_mutex_t rec_lock;
    char order[GREEDY_TURNS + N_WAITERS + 1]; /* who had each turn */
    size_t n;
};

static void record(struct rig *g, char who)
{
    pthread_mutex_lock(&g->rec_lock);
    g->order[g->n++] = who;
    pthread_mutex_unlock(&g->rec_lock);
}

/* Tickets handed out so far (callers that asked). */
static uint64_t asked(struct rig *g)
{
    pthread_mutex_lock(&g->lock.mutex);
    uint64_t n = g->lock.next;
    pthread_mutex_unlock(&g->lock.mutex);
    return n;
}

static void wait_asked(struct rig *g, uint64_t n)
{
    while (asked(g) < n)
        usleep(100);
}

static void *greedy(void *arg)
{
    struct rig *g = arg;

    for (int i = 0; i < GREEDY_TURNS; i++) {
        wst_ticket_lock_enter(&g->lock);
        record(g, 'g');
        wst_ticket_lock_leave(&g->lock);
    }
    return NULL;
}

static void *once(void *arg)
{
    struct rig *g = arg;

    wst_ticket_lock_enter(&g->lock);
    record(g, 'w');
    wst_ticket_lock_leave(&g->lock);
    return NULL;
}

/* The greedy thread asks first, then a waiter: the waiter's turn comes
 * right after the greedy thread's first, not after its last. */
static void test_ticket_lock_waiter_not_starved(void **state)
{
    struct rig g;
    pthread_t a, b;

    (void)state;
    memset(&g, 0, sizeof(g));
    wst_ticket_lock_init(&g.lock);
    pthread_mutex_init(&g.rec_lock, NULL);
    wst_ticket_lock_enter(&g.lock); /* held: both must queue */
    assert_int_equal(pthread_create(&a, NULL, greedy, &g), 0);
    wait_asked(&g, 2);
    assert_int_equal(pthread_create(&b, NULL, once, &g), 0);
    wait_asked(&g, 3);
    wst_ticket_lock_leave(&g.lock);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    assert_int_equal(g.n, GREEDY_TURNS + 1);
    assert_int_equal(g.order[0], 'g');
    assert_int_equal(g.order[1], 'w');
    wst_ticket_lock_destroy(&g.lock);
    pthread_mutex_destroy(&g.rec_lock);
}

struct numbered {
    struct rig *g;
    char id;
};

static void *numbered_once(void *arg)
{
    struct numbered *n = arg;

    wst_ticket_lock_enter(&n->g->lock);
    record(n->g, n->id);
    wst_ticket_lock_leave(&n->g->lock);
    return NULL;
}

/* Waiters that asked one after another are served in that order. */
static void test_ticket_lock_fifo(void **state)
{
    struct rig g;
    pthread_t t[N_WAITERS];
    struct numbered n[N_WAITERS];

    (void)state;
    memset(&g, 0, sizeof(g));
    wst_ticket_lock_init(&g.lock);
    pthread_mutex_init(&g.rec_lock, NULL);
    wst_ticket_lock_enter(&g.lock);
    /* Started in reverse, each only once the one before it queued. */
    for (int i = 0; i < N_WAITERS; i++) {
        n[i] =
            (struct numbered){.g = &g, .id = (char)('a' + N_WAITERS - 1 - i)};
        assert_int_equal(pthread_create(&t[i], NULL, numbered_once, &n[i]), 0);
        wait_asked(&g, (uint64_t)i + 2);
    }
    wst_ticket_lock_leave(&g.lock);
    for (int i = 0; i < N_WAITERS; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(g.n, N_WAITERS);
    assert_memory_equal(g.order, "hgfedcba", N_WAITERS);
    wst_ticket_lock_destroy(&g.lock);
    pthread_mutex_destroy(&g.rec_lock);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ticket_lock_waiter_not_starved),
        cmocka_unit_test(test_ticket_lock_fifo),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
