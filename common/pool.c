/* pool.c - mutex/condvar batch pool: see pool.h. */
#include "pool.h"

#include <pthread.h>
#include <stdlib.h>

#include "thread_name.h"

struct wst_pool {
    pthread_mutex_t lock;
    pthread_cond_t work; /* a batch started, or stop */
    pthread_cond_t idle; /* a job completed */
    pthread_t *threads;
    unsigned n_threads;
    int stop;
    /* The batch: jobs [next, n) wait; 'running' are under way. */
    wst_pool_fn fn;
    void *arg;
    size_t next, n, running;
};

static void *pool_main(void *arg)
{
    struct wst_pool *p = arg;

    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (p->next >= p->n && !p->stop)
            pthread_cond_wait(&p->work, &p->lock);
        if (p->stop)
            break;
        size_t i = p->next++;
        wst_pool_fn fn = p->fn;
        void *fn_arg = p->arg;
        p->running++;
        pthread_mutex_unlock(&p->lock);
        fn(fn_arg, i);
        pthread_mutex_lock(&p->lock);
        p->running--;
        pthread_cond_broadcast(&p->idle);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

wst_status_t wst_pool_create(const char *name, unsigned n_threads,
                             wst_pool_t **pool_p)
{
    struct wst_pool *p = calloc(1, sizeof(*p));

    if (p == NULL || n_threads == 0) {
        free(p);
        return p == NULL ? WST_ERR_NO_MEMORY : WST_ERR_INVALID;
    }
    p->threads = calloc(n_threads, sizeof(*p->threads));
    if (p->threads == NULL) {
        free(p);
        return WST_ERR_NO_MEMORY;
    }
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->idle, NULL);
    for (; p->n_threads < n_threads; p->n_threads++)
        if (pthread_create(&p->threads[p->n_threads], NULL, pool_main, p) !=
            0) {
            wst_pool_destroy(p);
            return WST_ERR_NO_MEMORY;
        } else {
            wst_thread_name(p->threads[p->n_threads], name);
        }
    *pool_p = p;
    return WST_OK;
}

wst_status_t wst_pool_start(wst_pool_t *p, wst_pool_fn fn, void *arg, size_t n)
{
    pthread_mutex_lock(&p->lock);
    if (p->next < p->n || p->running > 0) {
        pthread_mutex_unlock(&p->lock);
        return WST_ERR_BUSY;
    }
    p->fn = fn;
    p->arg = arg;
    p->next = 0;
    p->n = n;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->lock);
    return WST_OK;
}

void wst_pool_finish(wst_pool_t *p, int cancel)
{
    pthread_mutex_lock(&p->lock);
    if (cancel)
        p->n = p->next;
    while (p->next < p->n || p->running > 0)
        pthread_cond_wait(&p->idle, &p->lock);
    p->fn = NULL;
    p->arg = NULL;
    pthread_mutex_unlock(&p->lock);
}

void wst_pool_destroy(wst_pool_t *p)
{
    if (p == NULL)
        return;
    wst_pool_finish(p, 1);
    pthread_mutex_lock(&p->lock);
    p->stop = 1;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->lock);
    for (unsigned i = 0; i < p->n_threads; i++)
        pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->idle);
    pthread_cond_destroy(&p->work);
    pthread_mutex_destroy(&p->lock);
    free(p->threads);
    free(p);
}
