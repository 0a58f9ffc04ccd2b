/* test_thread_cpu.c - the bench's per-thread CPU table
 * (tools/bench/thread_cpu.h) against each thread's own CPU clock. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "thread_cpu.h"

#define BURN_NS (30ull * 1000000ull)

/* A thread that burns BURN_NS of its own CPU time when told, then parks,
 * so the samples around a burn see only it. */
struct burner {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int go, done, quit;
    pid_t tid;
    uint64_t burnt_ns; /* by its own clock, the last burn */
};

static uint64_t thread_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *burn_main(void *arg)
{
    struct burner *b = arg;
    volatile uint64_t sink = 0;

    pthread_setname_np(pthread_self(), "wst-burner");
    pthread_mutex_lock(&b->lock);
    b->tid = (pid_t)syscall(SYS_gettid);
    pthread_cond_broadcast(&b->cond);
    for (;;) {
        while (!b->go && !b->quit)
            pthread_cond_wait(&b->cond, &b->lock);
        if (b->quit)
            break;
        b->go = 0;
        pthread_mutex_unlock(&b->lock);
        uint64_t t0 = thread_ns(), t;
        while ((t = thread_ns()) - t0 < BURN_NS)
            sink += t;
        pthread_mutex_lock(&b->lock);
        b->burnt_ns = t - t0;
        b->done = 1;
        pthread_cond_broadcast(&b->cond);
    }
    pthread_mutex_unlock(&b->lock);
    (void)sink;
    return NULL;
}

static void burn_once(struct burner *b)
{
    pthread_mutex_lock(&b->lock);
    b->done = 0;
    b->go = 1;
    pthread_cond_broadcast(&b->cond);
    while (!b->done)
        pthread_cond_wait(&b->cond, &b->lock);
    pthread_mutex_unlock(&b->lock);
}

static void burner_start(struct burner *b, pthread_t *t)
{
    *b = (struct burner){.lock = PTHREAD_MUTEX_INITIALIZER,
                         .cond = PTHREAD_COND_INITIALIZER};
    assert_int_equal(pthread_create(t, NULL, burn_main, b), 0);
    pthread_mutex_lock(&b->lock);
    while (b->tid == 0)
        pthread_cond_wait(&b->cond, &b->lock);
    pthread_mutex_unlock(&b->lock);
}

static void burner_stop(struct burner *b, pthread_t t)
{
    pthread_mutex_lock(&b->lock);
    b->quit = 1;
    pthread_cond_broadcast(&b->cond);
    pthread_mutex_unlock(&b->lock);
    pthread_join(t, NULL);
}

static size_t row_index(const struct wst_thread_cpu_table *t, pid_t tid)
{
    for (size_t r = 0; r < t->n_rows; r++)
        if (t->rows[r].tid == tid)
            return r;
    fail_msg("no row for tid %d", (int)tid);
    return 0;
}

/* Three burns: the burner's row matches its own clock, by schedstat's
 * nanoseconds where the kernel has them (within 2 ms), by clock ticks
 * otherwise (within 2 ticks); its name is read; and the threads but the
 * main one spent at least what it burnt, the main thread being left out. */
static void test_rows_follow_the_threads_clock(void **state)
{
    struct wst_thread_cpu_table table;
    struct wst_thread_cpu_sample before, after;
    struct burner b;
    pthread_t t;
    double burnt_s[3];

    (void)state;
    burner_start(&b, &t);
    assert_int_equal(wst_thread_cpu_table_init(&table, "test", getpid(), 3),
                     WST_OK);
    for (size_t k = 0; k < 3; k++) {
        assert_int_equal(wst_thread_cpu_sample(getpid(), &before), WST_OK);
        burn_once(&b);
        assert_int_equal(wst_thread_cpu_sample(getpid(), &after), WST_OK);
        wst_thread_cpu_table_add(&table, k, &before, &after);
        burnt_s[k] = (double)b.burnt_ns / 1e9;
    }
    size_t r = row_index(&table, b.tid);
    assert_string_equal(table.rows[r].comm, "wst-burner");
    int precise = after.t[0].run_ns != 0;
    double tol = precise ? 0.002 : 2.0 / (double)sysconf(_SC_CLK_TCK);
    for (size_t k = 0; k < 3; k++) {
        double row = table.row_s[r * table.repeats + k];
        if (row < burnt_s[k] - tol || row > burnt_s[k] + tol)
            fail_msg("burn %zu: the row says %.4f s, the thread's clock "
                     "%.4f s (tolerance %.4f, %s)",
                     k, row, burnt_s[k], tol,
                     precise ? "schedstat" : "clock ticks");
    }
    /* The main thread (tid == pid) mostly waits here: the others' figure
     * is the burner's, within the tolerance, and never the process's. */
    double others = wst_thread_cpu_table_others_s(&table);
    assert_true(others >= burnt_s[0] - tol && others >= burnt_s[1] - tol);
    assert_true(others <= 0.030 * 1.2 + 3 * tol);
    wst_thread_cpu_table_release(&table);
    burner_stop(&b, t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows_follow_the_threads_clock),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
