/* digest_queue.h - device bytes hashed as they land: one thread that takes
 * every job queued, hashes all their runs in one kernel launch with a sum
 * per job (digest_gpu.h, slots), waits for it, and hands each job back.
 *
 * A receiver hashes a message into host memory while it is in cache
 * (common/movers/am_rx.c); this is the same for device memory. Without it
 * the layer's check reads every byte again from HBM once the layer is in,
 * a pass that competes with the transfer itself on one GPU's memory and
 * leaves the last layer's check as a serial tail (NOTES.md, "The direct
 * path, traced"). Hashed now, a message may still be in the GPU's L2.
 *
 * Why batches: one 8 MiB message is 128 digest chunks, a few hundred GPU
 * threads; a launch and a wait per message would leave the GPU mostly idle
 * and cost more than the hashing. Whatever queued while a launch ran goes
 * into the next one, so the batch grows with the rate of landing.
 *
 *   progress thread ──post(job)──▶ queue ──▶ hashing thread
 *          ▲                                  │ one launch, a sum per job
 *          └──── deliver(job): job->sum ◀─────┘ after the stream is synced
 *
 * A job is owned by its poster throughout: the queue links it and writes
 * its results, and 'deliver' (the poster's, e.g. a post to its worker) is
 * the last the queue touches it.
 */
#ifndef WST_DIGEST_QUEUE_H
#define WST_DIGEST_QUEUE_H

#include <stdint.h>
#include <wstream/status.h>

#include "log.h"

/* One run of a job: 'len' bytes at digest stream position 'pos'. */
struct wst_digest_span {
    uint64_t len;
    uint64_t pos;
};

struct wst_digest_job {
    /* The poster's. The runs lie one after the other from 'src' (device
     * memory): with rows == 0, spans[0..n_spans) in order; with rows > 0,
     * spans[0] repeated 'rows' times, the k-th at position
     * spans[0].pos + k * spans[0].len (rows of a tensor-parallel slice,
     * each a run of its own: planner.h). 'spans' is borrowed until the job
     * is delivered. */
    const unsigned char *src;
    const struct wst_digest_span *spans;
    uint32_t n_spans;
    uint64_t rows;
    /* What 'deliver' runs, or posts to run, with the job. */
    void (*done)(void *job);
    /* Set before delivery: the sum of the runs' chunk hashes (digest.h's
     * S, for these runs only), and WST_OK or why the GPU failed. */
    uint64_t sum;
    wst_status_t status;
    /* The queue's. */
    struct wst_digest_job *next;
    uint64_t taken;  /* runs already in a launch */
    uint64_t offset; /* from src, of the next run */
};

/* Hands a hashed job back; on the hashing thread, so it should only pass
 * the job on (wst_worker_post). A nonzero return is logged: the job is
 * then lost to its poster. */
typedef wst_status_t (*wst_digest_deliver_fn)(void *arg,
                                              struct wst_digest_job *job);

struct wst_digest_queue;

/* Starts the hashing thread on 'device' (its stream and digest context
 * are made there). 'log' and 'arg' are borrowed for the queue's lifetime.
 * On success *q_p is owned by the caller (wst_digest_queue_destroy). */
wst_status_t wst_digest_queue_create(const struct wst_logger *log, int device,
                                     wst_digest_deliver_fn deliver, void *arg,
                                     struct wst_digest_queue **q_p);

/* Any thread. WST_ERR_STATE once the queue is stopping. */
wst_status_t wst_digest_queue_post(struct wst_digest_queue *q,
                                   struct wst_digest_job *job);

/* Hashes and delivers every job posted, then ends the thread and frees the
 * queue. NULL is fine. */
void wst_digest_queue_destroy(struct wst_digest_queue *q);

#endif
