/* check_digest_queue.c - digests with a sum per slot (digest_gpu.h) and the
 * queue that hashes landed device bytes in batches (digest_queue.h),
 * against the CPU digest's parts (digest.h) bit for bit.
 *
 * The jobs have the shapes a receiver posts: one chunk-aligned part of an
 * item, whole neighbouring items one after the other, the rows of a
 * tensor-parallel slice (more of them than one launch holds, so a job's
 * sum is added up over launches), rows longer than a digest chunk, and a
 * job with no runs. They are all posted before the first is hashed, so one
 * launch holds several jobs. The queue's thread delivers each; the check
 * compares every job's sum with the CPU's.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "digest.h"
#include "digest_batch.h"
#include "digest_gpu.h"
#include "digest_queue.h"
#include "gpu.h"
#include "gpu_check.h"

#define QBYTES ((size_t)64 << 20)
#define NJOBS 7
#define MAX_SPANS 8

struct qjob {
    struct wst_digest_job dj; /* first: delivered by its address */
    size_t off;               /* of src in the buffers */
    struct wst_digest_span spans[MAX_SPANS];
    uint64_t want;
    int delivered;
};

struct qfix {
    pthread_mutex_t lock;
    int delivered;
};

static void job_done(void *job)
{
    (void)job; /* the check reads the job after the queue is gone */
}

static wst_status_t deliver(void *arg, struct wst_digest_job *dj)
{
    struct qfix *f = arg;
    struct qjob *j = (struct qjob *)dj;

    pthread_mutex_lock(&f->lock);
    j->delivered++;
    f->delivered++;
    pthread_mutex_unlock(&f->lock);
    dj->done(dj);
    return WST_OK;
}

/* The CPU's sum of the job's runs, read from host memory at the same
 * offsets as the device's. */
static uint64_t cpu_sum(const unsigned char *host, const struct qjob *j)
{
    const unsigned char *p = host + j->off;
    uint64_t sum = 0;

    for (uint64_t r = 0; r < j->dj.rows; r++, p += j->spans[0].len)
        sum += wst_digest_part(p, j->spans[0].len,
                               j->spans[0].pos + r * j->spans[0].len);
    for (uint32_t k = 0; j->dj.rows == 0 && k < j->dj.n_spans; k++) {
        sum += wst_digest_part(p, j->spans[k].len, j->spans[k].pos);
        p += j->spans[k].len;
    }
    return sum;
}

static void set_job(struct qjob *j, const unsigned char *dev, size_t off,
                    uint64_t rows, uint32_t n_spans,
                    const struct wst_digest_span *spans)
{
    memset(j, 0, sizeof(*j));
    j->off = off;
    memcpy(j->spans, spans, n_spans * sizeof(spans[0]));
    j->dj.src = dev + off;
    j->dj.spans = j->spans;
    j->dj.n_spans = n_spans;
    j->dj.rows = rows;
    j->dj.done = job_done;
}

/* Runs into three slots, one of them left empty: each slot's sum is the
 * CPU's sum of its runs' parts. */
static void check_slots(struct gcheck *g, const unsigned char *host,
                        const unsigned char *dev)
{
    static const struct {
        size_t off, len;
        uint64_t pos;
        uint32_t slot;
    } runs[] = {{0, 3 * WST_DIGEST_CHUNK, 0, 0},
                {5, 1000, 77, 2},
                {1 << 20, WST_DIGEST_CHUNK + 241, 3 * WST_DIGEST_CHUNK, 0},
                {3 << 20, 129, 9, 2}};
    struct wst_digest_run dr[4];
    uint32_t slots[4];
    uint64_t want[4] = {0};
    struct wst_gpu_digest *dg = NULL;
    wst_status_t st = wst_gpu_digest_create(g->log, 8, &dg);
    int ok = 1;

    for (int i = 0; i < 4; i++) {
        dr[i] = (struct wst_digest_run){dev + runs[i].off, runs[i].len,
                                        runs[i].pos};
        slots[i] = runs[i].slot;
        want[runs[i].slot] +=
            wst_digest_part(host + runs[i].off, runs[i].len, runs[i].pos);
    }
    if (st == WST_OK)
        st = wst_gpu_digest_enqueue_slots(dg, dr, slots, 4, 3, g->stream);
    if (st == WST_OK)
        st = wst_gpu_stream_sync(g->log, g->stream);
    for (uint32_t s = 0; st == WST_OK && s < 3; s++)
        ok &= wst_gpu_digest_slot_sum(dg, s) == want[s];
    gcheck_result(g, st == WST_OK && ok && want[1] == 0, "digest.slots",
                  "4 runs into 3 sums: %016llx %016llx %016llx (cpu %016llx "
                  "%016llx %016llx), status %d",
                  (unsigned long long)wst_gpu_digest_slot_sum(dg, 0),
                  (unsigned long long)wst_gpu_digest_slot_sum(dg, 1),
                  (unsigned long long)wst_gpu_digest_slot_sum(dg, 2),
                  (unsigned long long)want[0], (unsigned long long)want[1],
                  (unsigned long long)want[2], (int)st);
    slots[3] = 3;
    st = dg != NULL
             ? wst_gpu_digest_enqueue_slots(dg, dr, slots, 4, 3, g->stream)
             : WST_ERR_INVALID;
    gcheck_result(g, st == WST_ERR_INVALID, "digest.slot_out_of_range",
                  "a run into sum 3 of 3: status %d", (int)st);
    wst_gpu_digest_destroy(dg);
}

static void check_queue(struct gcheck *g, const unsigned char *host,
                        const unsigned char *dev)
{
    const uint64_t C = WST_DIGEST_CHUNK;
    struct qfix f = {.delivered = 0};
    struct qjob *jobs = calloc(NJOBS, sizeof(*jobs));
    struct wst_digest_queue *q = NULL;
    wst_status_t st, bad;
    int posted = 0, ok = 1;

    if (jobs == NULL || pthread_mutex_init(&f.lock, NULL) != 0) {
        gcheck_result(g, 0, "digest_queue.setup", "no memory");
        free(jobs);
        return;
    }
    /* a chunk-aligned part of an item, 8 MiB at item position 16 chunks */
    set_job(&jobs[0], dev, 0, 0, 1,
            (struct wst_digest_span[]){{8u << 20, 16 * C}});
    /* whole items one after the other, odd lengths, each from its own
     * stream position */
    set_job(&jobs[1], dev, (9u << 20) + 3, 0, 4,
            (struct wst_digest_span[]){
                {1000, 0}, {C + 241, 1000}, {129, 9000000}, {3 * C, 5}});
    /* 3000 rows of 100 bytes: more runs than one launch holds */
    set_job(&jobs[2], dev, 20u << 20, 3000, 1,
            (struct wst_digest_span[]){{100, 4096}});
    /* rows longer than a chunk */
    set_job(&jobs[3], dev, 24u << 20, 5, 1,
            (struct wst_digest_span[]){{C + 241, 0}});
    /* no runs */
    set_job(&jobs[4], dev, 0, 0, 0, NULL);
    /* a whole item's tail, short of a chunk */
    set_job(&jobs[5], dev, (30u << 20) + 1, 0, 1,
            (struct wst_digest_span[]){{C / 2 + 7, 5 * C}});
    /* 2000 rows again, right after the first: a launch with both */
    set_job(&jobs[6], dev, 40u << 20, 2000, 1,
            (struct wst_digest_span[]){{240, 0}});
    for (int i = 0; i < NJOBS; i++)
        jobs[i].want = cpu_sum(host, &jobs[i]);
    st = wst_digest_queue_create(g->log, 0, deliver, &f, &q);
    for (int i = 0; st == WST_OK && i < NJOBS; i++)
        if (wst_digest_queue_post(q, &jobs[i].dj) == WST_OK)
            posted++;
    struct qjob extra;
    set_job(&extra, dev, 0, 2, 2,
            (struct wst_digest_span[]){{100, 0}, {100, 100}});
    bad = q != NULL ? wst_digest_queue_post(q, &extra.dj) : WST_ERR_INVALID;
    wst_digest_queue_destroy(q); /* delivers every job posted */
    for (int i = 0; i < NJOBS; i++) {
        const struct qjob *j = &jobs[i];
        int good =
            j->delivered == 1 && j->dj.status == WST_OK && j->dj.sum == j->want;
        if (!good)
            printf("  job %d: delivered %d, status %d, gpu %016llx cpu "
                   "%016llx\n",
                   i, j->delivered, (int)j->dj.status,
                   (unsigned long long)j->dj.sum, (unsigned long long)j->want);
        ok &= good;
    }
    gcheck_result(g,
                  st == WST_OK && posted == NJOBS && ok && f.delivered == NJOBS,
                  "digest_queue.jobs",
                  "%d jobs posted, %d delivered, every sum as the cpu's: %s "
                  "(status %d)",
                  posted, f.delivered, ok ? "yes" : "no", (int)st);
    gcheck_result(g, bad == WST_ERR_INVALID, "digest_queue.bad_job",
                  "rows with 2 spans: status %d", (int)bad);
    pthread_mutex_destroy(&f.lock);
    free(jobs);
}

void check_digest_queue(struct gcheck *g)
{
    unsigned char *host = malloc(QBYTES), *dev = NULL;
    wst_status_t st = host != NULL
                          ? wst_gpu_malloc(g->log, QBYTES, (void **)&dev)
                          : WST_ERR_NO_MEMORY;

    if (st == WST_OK) {
        gcheck_fill_random(g, host, QBYTES);
        st = wst_gpu_copy(g->log, dev, host, QBYTES);
    }
    if (st != WST_OK) {
        gcheck_result(g, 0, "digest_queue.setup", "%zu bytes: status %d",
                      QBYTES, (int)st);
    } else {
        check_slots(g, host, dev);
        check_queue(g, host, dev);
    }
    wst_gpu_free(dev);
    free(host);
}
