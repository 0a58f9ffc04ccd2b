/* gpu_waiter.c - in-order event waits posted to a progress thread (see
 * gpu_waiter.h). */
#include "gpu_waiter.h"

#include <pthread.h>
#include <stdlib.h>

#include "clock.h"
#include "thread_name.h"

struct entry {
    struct wst_gpu_waiter *w;
    wst_gpu_event_t event;
    wst_gpu_waited_fn fn;
    void *arg;
    wst_status_t status;
    uint64_t done_ns;
};

struct wst_gpu_waiter {
    const struct wst_logger *log;
    wst_worker_t *worker;
    int device;
    uint32_t capacity;
    struct entry *entries; /* [capacity], a ring */

    pthread_t thread;
    int thread_started;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    uint32_t first;   /* oldest taken entry (its callback not yet run) */
    uint32_t taken;   /* entries from 'first' on, added and not yet run */
    uint32_t waiting; /* the last 'waiting' of those not yet waited on */
    int stop;
    int destroyed; /* freed by the last posted callback */
};

static void waiter_free(struct wst_gpu_waiter *w)
{
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->lock);
    free(w->entries);
    free(w);
}

/* Progress thread: the entry's completion. Posts run in the order they
 * were made, which is the order of the entries. The entry is free again
 * before its callback runs: the callback may add one (the landing ring's
 * copy done gives its room back, which lets a parked message in, whose
 * copy is added at once); with every entry taken that add found the
 * waiter full and failed the refit (seen on the H200 with the direct
 * path's many small eager messages). */
static void waited(void *arg)
{
    struct entry *e = arg;
    struct wst_gpu_waiter *w = e->w;
    struct entry done = *e;

    pthread_mutex_lock(&w->lock);
    w->first = (w->first + 1) % w->capacity;
    w->taken--;
    int last = w->destroyed && w->taken == 0;
    pthread_mutex_unlock(&w->lock);
    done.fn(done.arg, done.status, done.done_ns);
    if (last)
        waiter_free(w);
}

static void *waiter_main(void *arg)
{
    struct wst_gpu_waiter *w = arg;
    uint32_t dropped = 0;

    wst_gpu_set_device(w->log, w->device);
    pthread_mutex_lock(&w->lock);
    for (;;) {
        while (w->waiting == 0 && !w->stop)
            pthread_cond_wait(&w->cond, &w->lock);
        if (w->waiting == 0)
            break; /* stopping, nothing left in flight */
        struct entry *e =
            &w->entries[(w->first + w->taken - w->waiting) % w->capacity];
        pthread_mutex_unlock(&w->lock);
        e->status = wst_gpu_event_sync(w->log, e->event);
        e->done_ns = wst_now_ns();
        pthread_mutex_lock(&w->lock);
        w->waiting--;
        if (w->stop)
            dropped++; /* the newest entries: given back below */
        else if (wst_worker_post(w->worker, waited, e) != WST_OK)
            WST_ERROR(w->log, "cannot post a GPU completion: a refit using "
                              "it will stall into its deadline");
    }
    w->taken -= dropped;
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

wst_status_t wst_gpu_waiter_create(const struct wst_logger *log,
                                   wst_worker_t *worker, int device,
                                   uint32_t capacity,
                                   struct wst_gpu_waiter **waiter_p)
{
    struct wst_gpu_waiter *w = calloc(1, sizeof(*w));

    *waiter_p = NULL;
    if (w == NULL || capacity == 0)
        goto err_free;
    w->entries = calloc(capacity, sizeof(*w->entries));
    if (w->entries == NULL)
        goto err_free;
    w->log = log;
    w->worker = worker;
    w->device = device;
    w->capacity = capacity;
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->cond, NULL);
    if (pthread_create(&w->thread, NULL, waiter_main, w) != 0)
        goto err_destroy_sync;
    wst_thread_name(w->thread, "wst-gpu-wait");
    w->thread_started = 1;
    *waiter_p = w;
    return WST_OK;

err_destroy_sync:
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->lock);
err_free:
    if (w != NULL)
        free(w->entries);
    free(w);
    return WST_ERR_NO_MEMORY;
}

wst_status_t wst_gpu_waiter_add(struct wst_gpu_waiter *w, wst_gpu_event_t event,
                                wst_gpu_waited_fn fn, void *arg)
{
    pthread_mutex_lock(&w->lock);
    if (w->taken == w->capacity || w->stop) {
        pthread_mutex_unlock(&w->lock);
        return WST_ERR_BUSY;
    }
    struct entry *e = &w->entries[(w->first + w->taken) % w->capacity];
    e->w = w;
    e->event = event;
    e->fn = fn;
    e->arg = arg;
    e->status = WST_OK;
    w->taken++;
    w->waiting++;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
    return WST_OK;
}

void wst_gpu_waiter_stop(struct wst_gpu_waiter *w)
{
    if (w == NULL || !w->thread_started)
        return;
    pthread_mutex_lock(&w->lock);
    w->stop = 1;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    w->thread_started = 0;
}

void wst_gpu_waiter_destroy(struct wst_gpu_waiter *w)
{
    if (w == NULL)
        return;
    wst_gpu_waiter_stop(w);
    /* Callbacks posted and not yet run still hold their entries. */
    pthread_mutex_lock(&w->lock);
    int pending = w->taken > 0;
    w->destroyed = pending;
    pthread_mutex_unlock(&w->lock);
    if (!pending)
        waiter_free(w);
}
