/* digest_queue.c - device bytes hashed as they land (digest_queue.h). */
#include "digest_queue.h"

#include <pthread.h>
#include <stdlib.h>

#include "digest_batch.h"
#include "digest_gpu.h"
#include "gpu.h"
#include "thread_name.h"

struct wst_digest_queue {
    const struct wst_logger *log;
    int device;
    wst_digest_deliver_fn deliver;
    void *arg;
    wst_gpu_stream_t stream;   /* owned; the hashing thread's */
    struct wst_gpu_digest *dg; /* owned; WST_DIGEST_BATCH runs and sums */
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct wst_digest_job *head, *tail; /* under lock */
    int stopping;                       /* under lock */
    /* The hashing thread's launch: runs, their sums, the jobs of the sums. */
    struct wst_digest_run runs[WST_DIGEST_BATCH];
    uint32_t slots[WST_DIGEST_BATCH];
    struct wst_digest_job *slot_job[WST_DIGEST_BATCH];
};

static uint64_t job_runs(const struct wst_digest_job *j)
{
    return j->rows > 0 ? j->rows : j->n_spans;
}

/* Adds j's next run to the launch as run n, into slot s. */
static void take_run(struct wst_digest_queue *q, struct wst_digest_job *j,
                     uint32_t n, uint32_t s)
{
    const struct wst_digest_span *sp =
        &j->spans[j->rows > 0 ? 0 : (uint32_t)j->taken];

    q->runs[n] = (struct wst_digest_run){
        .data = j->src + j->offset,
        .length = sp->len,
        .pos = j->rows > 0 ? sp->pos + j->taken * sp->len : sp->pos};
    q->slots[n] = s;
    j->offset += sp->len;
    j->taken++;
}

static void deliver(struct wst_digest_queue *q, struct wst_digest_job *j)
{
    wst_status_t st = q->deliver(q->arg, j);

    if (st != WST_OK)
        WST_ERROR(q->log,
                  "a message hashed on GPU %d is lost: %s (its refit will "
                  "time out)",
                  q->device, wst_status_string(st));
}

/* Hashes every run of the jobs of 'list' (linked by next), as many runs
 * per launch as the context holds; a job whose runs span launches adds
 * them up. Each job is delivered once all its runs are in. */
static void hash_list(struct wst_digest_queue *q, struct wst_digest_job *list,
                      wst_status_t device_st)
{
    while (list != NULL) {
        struct wst_digest_job *j = list;
        uint32_t n = 0, n_slots = 0;
        wst_status_t st = device_st;

        while (j != NULL && n < WST_DIGEST_BATCH &&
               n_slots < WST_DIGEST_BATCH) {
            q->slot_job[n_slots] = j;
            while (j->taken < job_runs(j) && n < WST_DIGEST_BATCH)
                take_run(q, j, n++, n_slots);
            n_slots++;
            if (j->taken < job_runs(j))
                break; /* the launch is full; the rest of j goes next */
            j = j->next;
        }
        if (st == WST_OK)
            st = wst_gpu_digest_enqueue_slots(q->dg, q->runs, q->slots, n,
                                              n_slots, q->stream);
        if (st == WST_OK)
            st = wst_gpu_stream_sync(q->log, q->stream);
        for (uint32_t s = 0; s < n_slots; s++) {
            struct wst_digest_job *x = q->slot_job[s];
            if (st != WST_OK && x->status == WST_OK)
                x->status = st;
            else if (st == WST_OK)
                x->sum += wst_gpu_digest_slot_sum(q->dg, s);
        }
        while (list != NULL && list->taken == job_runs(list)) {
            struct wst_digest_job *next = list->next;
            deliver(q, list); /* the last we touch it */
            list = next;
        }
    }
}

static void *queue_main(void *arg)
{
    struct wst_digest_queue *q = arg;
    wst_status_t device_st = wst_gpu_set_device(q->log, q->device);

    pthread_mutex_lock(&q->lock);
    for (;;) {
        while (q->head == NULL && !q->stopping)
            pthread_cond_wait(&q->cond, &q->lock);
        if (q->head == NULL)
            break; /* stopping, and every job is delivered */
        struct wst_digest_job *list = q->head;
        q->head = q->tail = NULL;
        pthread_mutex_unlock(&q->lock);
        hash_list(q, list, device_st);
        pthread_mutex_lock(&q->lock);
    }
    pthread_mutex_unlock(&q->lock);
    return NULL;
}

wst_status_t wst_digest_queue_post(struct wst_digest_queue *q,
                                   struct wst_digest_job *job)
{
    if (q == NULL || job == NULL || (job->rows > 0 && job->n_spans != 1))
        return WST_ERR_INVALID;
    job->next = NULL;
    job->taken = 0;
    job->offset = 0;
    job->sum = 0;
    job->status = WST_OK;
    pthread_mutex_lock(&q->lock);
    if (q->stopping) {
        pthread_mutex_unlock(&q->lock);
        return WST_ERR_STATE;
    }
    if (q->tail != NULL)
        q->tail->next = job;
    else
        q->head = job;
    q->tail = job;
    pthread_cond_signal(&q->cond);
    pthread_mutex_unlock(&q->lock);
    return WST_OK;
}

wst_status_t wst_digest_queue_create(const struct wst_logger *log, int device,
                                     wst_digest_deliver_fn deliver, void *arg,
                                     struct wst_digest_queue **q_p)
{
    struct wst_digest_queue *q = calloc(1, sizeof(*q));
    wst_status_t st;

    if (q == NULL)
        return WST_ERR_NO_MEMORY;
    q->log = log;
    q->device = device;
    q->deliver = deliver;
    q->arg = arg;
    st = wst_gpu_set_device(log, device);
    if (st != WST_OK)
        goto err_free;
    st = wst_gpu_stream_create(log, &q->stream);
    if (st != WST_OK)
        goto err_free;
    st = wst_gpu_digest_create(log, WST_DIGEST_BATCH, &q->dg);
    if (st != WST_OK)
        goto err_destroy_stream;
    if (pthread_mutex_init(&q->lock, NULL) != 0) {
        st = WST_ERR_NO_MEMORY;
        goto err_destroy_digest;
    }
    if (pthread_cond_init(&q->cond, NULL) != 0) {
        st = WST_ERR_NO_MEMORY;
        goto err_destroy_lock;
    }
    if (pthread_create(&q->thread, NULL, queue_main, q) != 0) {
        WST_ERROR(log, "cannot start the device hashing thread");
        st = WST_ERR_NO_MEMORY;
        goto err_destroy_cond;
    }
    wst_thread_name(q->thread, "wst-gpu-hash");
    *q_p = q;
    return WST_OK;

err_destroy_cond:
    pthread_cond_destroy(&q->cond);
err_destroy_lock:
    pthread_mutex_destroy(&q->lock);
err_destroy_digest:
    wst_gpu_digest_destroy(q->dg);
err_destroy_stream:
    wst_gpu_stream_destroy(q->stream);
err_free:
    free(q);
    return st;
}

void wst_digest_queue_destroy(struct wst_digest_queue *q)
{
    if (q == NULL)
        return;
    pthread_mutex_lock(&q->lock);
    q->stopping = 1;
    pthread_cond_signal(&q->cond);
    pthread_mutex_unlock(&q->lock);
    pthread_join(q->thread, NULL);
    pthread_cond_destroy(&q->cond);
    pthread_mutex_destroy(&q->lock);
    wst_gpu_digest_destroy(q->dg);
    wst_gpu_stream_destroy(q->stream);
    free(q);
}
