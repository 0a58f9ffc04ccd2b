/* jobq.c - a mutex/condvar FIFO drained by one thread or a few. */
#include "jobq.h"

#include <pthread.h>
#include <stdlib.h>

#include "thread_name.h"

struct job {
    struct job *next;
    wst_job_fn fn;
    void *arg;
};

struct wst_jobq {
    pthread_t *threads;
    unsigned n_threads;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct job *head, *tail;
    int stop;
};

static void *jobq_main(void *arg)
{
    struct wst_jobq *q = arg;

    pthread_mutex_lock(&q->lock);
    for (;;) {
        while (q->head == NULL && !q->stop)
            pthread_cond_wait(&q->cond, &q->lock);
        struct job *j = q->head;
        if (j == NULL)
            break; /* stop requested and the queue is drained */
        q->head = j->next;
        if (q->head == NULL)
            q->tail = NULL;
        pthread_mutex_unlock(&q->lock);
        j->fn(j->arg);
        free(j);
        pthread_mutex_lock(&q->lock);
    }
    pthread_mutex_unlock(&q->lock);
    return NULL;
}

/* Stops the threads started so far and frees q. */
static void jobq_stop(struct wst_jobq *q)
{
    pthread_mutex_lock(&q->lock);
    q->stop = 1;
    pthread_cond_broadcast(&q->cond);
    pthread_mutex_unlock(&q->lock);
    for (unsigned i = 0; i < q->n_threads; i++)
        pthread_join(q->threads[i], NULL);
    pthread_cond_destroy(&q->cond);
    pthread_mutex_destroy(&q->lock);
    free(q->threads);
    free(q);
}

wst_status_t wst_jobq_create_threads(const char *name, unsigned n_threads,
                                     wst_jobq_t **q_p)
{
    struct wst_jobq *q;

    if (n_threads == 0)
        return WST_ERR_INVALID;
    q = calloc(1, sizeof(*q));
    if (q == NULL)
        return WST_ERR_NO_MEMORY;
    q->threads = calloc(n_threads, sizeof(*q->threads));
    if (q->threads == NULL) {
        free(q);
        return WST_ERR_NO_MEMORY;
    }
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->cond, NULL);
    for (; q->n_threads < n_threads; q->n_threads++)
        if (pthread_create(&q->threads[q->n_threads], NULL, jobq_main, q) !=
            0) {
            jobq_stop(q);
            return WST_ERR_NO_MEMORY;
        } else {
            wst_thread_name(q->threads[q->n_threads], name);
        }
    *q_p = q;
    return WST_OK;
}

wst_status_t wst_jobq_create(const char *name, wst_jobq_t **q_p)
{
    return wst_jobq_create_threads(name, 1, q_p);
}

wst_status_t wst_jobq_post(wst_jobq_t *q, wst_job_fn fn, void *arg)
{
    struct job *j = malloc(sizeof(*j));

    if (j == NULL)
        return WST_ERR_NO_MEMORY;
    j->next = NULL;
    j->fn = fn;
    j->arg = arg;
    pthread_mutex_lock(&q->lock);
    if (q->tail != NULL)
        q->tail->next = j;
    else
        q->head = j;
    q->tail = j;
    pthread_cond_signal(&q->cond);
    pthread_mutex_unlock(&q->lock);
    return WST_OK;
}

void wst_jobq_destroy(wst_jobq_t *q)
{
    if (q != NULL)
        jobq_stop(q);
}
