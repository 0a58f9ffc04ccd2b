/* digests.c - layer digests. push queues one job per (link, layer) of the
 * version on the sender's digest pool (common/pool.h), layer-major so that
 * every receiver's first layer is ready first, and returns: the trainer's
 * thread never hashes. A job hashes host runs on its pool thread and
 * device runs on the GPU, and hands the digest to the progress thread;
 * data does not wait for digests, so hashing overlaps sending. A layer's
 * LAYER_DONE carries its digest (pump.c), in layer order.
 *
 * Jobs read the link's plan and the shards with no lock: a batch runs
 * from the end of push to the next push, wait or destroy, which stop it
 * (wst_send_stop_digests) before anything drops or replaces a plan
 * (wst_link_drop_plan: a link reconnecting, a new PLAN, close), and a
 * failed link keeps its plan. A link that fails skips its jobs not yet
 * started (wst_send_skip_digests): its refit is over, and wait would
 * otherwise hash the dead receiver's layers for nothing. The shards are
 * the caller's until wait or destroy returns, and both stop the batch
 * first.
 */
#include <stdatomic.h>
#include <stdlib.h>

#include "array.h"
#include "device.h"
#include "digest.h"
#include "log.h"
#include "sender_internal.h"
#include "worker.h"

struct digest_job {
    struct link *l;
    uint32_t layer;
};

struct digest_ready {
    struct link *l;
    uint64_t version;
    uint32_t layer;
    uint64_t digest;
    wst_status_t status; /* not WST_OK: the layer has no digest */
};

static void do_digest_ready(void *arg)
{
    struct digest_ready *d = arg;
    struct link *l = d->l;

    WST_TRACE(&l->s->log, "receiver %s: digest of layer %u ready", l->name,
              d->layer);
    if (l->version == d->version && l->have_plan &&
        d->layer < l->plan.n_layers && !l->digest_in[d->layer]) {
        if (d->status != WST_OK) {
            /* The refit cannot complete: its caller hears why now, not at
             * its deadline. */
            wst_link_fail(l, d->status, "cannot digest layer %u on the GPU",
                          d->layer);
        } else {
            l->digests[d->layer] = d->digest;
            l->digest_in[d->layer] = 1;
            /* Layers finish out of order on several threads. */
            while (l->digests_ready < l->plan.n_layers &&
                   l->digest_in[l->digests_ready])
                l->digests_ready++;
            wst_send_pump(l);
        }
    }
    free(d);
}

/* One layer's digest for one link: host runs on this thread, device runs
 * on the GPU (one thread at a time). */
static wst_status_t layer_digest(struct wst_sender *s, const struct link *l,
                                 uint32_t layer, uint64_t *digest_p)
{
    struct wst_digest d;
    wst_status_t st = WST_OK;
    int device = 0;

    wst_digest_init(&d);
    for (size_t k = l->layer_first[layer];
         st == WST_OK && k < l->layer_first[layer + 1]; k++) {
        const struct wst_plan_item *it = &l->plan.items[k];
        const struct shard *sh = &s->shards[it->have];
        const char *run = (const char *)sh->data + it->src_offset;
        if (sh->device >= 0 && !device) {
            wst_ticket_lock_enter(&s->dev_hash_lock);
            device = 1;
        }
        /* each row is a run of its own (planner.h) */
        for (uint64_t r = 0; st == WST_OK && r <= it->more_rows;
             r++, run += it->src_stride) {
            if (sh->device >= 0)
                st = wst_send_device_digest_add(s->dev, &d, run, it->length);
            else
                wst_digest_update(&d, run, it->length);
        }
    }
    if (device) {
        if (st == WST_OK)
            st = wst_send_device_digest_flush(s->dev, &d);
        wst_ticket_lock_leave(&s->dev_hash_lock);
    }
    *digest_p = wst_digest_final(&d);
    return st;
}

/* Pool thread: job i of the batch. */
static void digest_job_run(void *arg, size_t i)
{
    struct wst_sender *s = arg;
    const struct digest_job *j = &s->digest_jobs[i];
    struct link *l = j->l;
    uint64_t digest = 0;

    /* A flag, not l->state: the state is the progress thread's. */
    if (atomic_load_explicit(&l->digests_off, memory_order_relaxed))
        return; /* the link failed: its refit is over */
    /* A failure goes to the progress thread too, which fails the link with
     * it (the link is not this thread's to fail). */
    wst_status_t st = layer_digest(s, l, j->layer, &digest);
    struct digest_ready *dr = malloc(sizeof(*dr));
    if (dr == NULL)
        return; /* the refit then stalls into its deadline */
    dr->l = l;
    dr->version = s->digest_version;
    dr->layer = j->layer;
    dr->digest = digest;
    dr->status = st;
    wst_worker_post(s->worker, do_digest_ready, dr);
}

struct build_call {
    struct wst_sender *s;
    wst_status_t status;
};

/* Progress thread: the jobs of every planned link, layer-major. */
static void build_jobs(void *arg)
{
    struct build_call *c = arg;
    struct wst_sender *s = c->s;
    wst_status_t *st_p = &c->status;
    uint32_t max_layers = 0;

    s->n_digest_jobs = 0;
    for (size_t i = 0; i < s->n_links; i++) {
        struct link *l = &s->links[i];
        /* A link that failed since its plan (its BEGIN) gets no jobs. */
        int off = !l->have_plan || l->state == LINK_FAILED;
        atomic_store_explicit(&l->digests_off, off, memory_order_relaxed);
        if (!off && l->plan.n_layers > max_layers)
            max_layers = l->plan.n_layers;
    }
    for (uint32_t layer = 0; layer < max_layers; layer++)
        for (size_t i = 0; i < s->n_links; i++) {
            struct link *l = &s->links[i];
            if (atomic_load_explicit(&l->digests_off, memory_order_relaxed) ||
                layer >= l->plan.n_layers)
                continue;
            if (wst_array_grow(&s->digest_jobs, &s->digest_jobs_cap,
                               s->n_digest_jobs + 1,
                               sizeof(*s->digest_jobs)) != WST_OK) {
                *st_p = WST_ERR_NO_MEMORY;
                return;
            }
            s->digest_jobs[s->n_digest_jobs++] =
                (struct digest_job){.l = l, .layer = layer};
        }
}

wst_status_t wst_send_start_digests(struct wst_sender *s, uint64_t version)
{
    struct build_call c = {.s = s, .status = WST_OK};

    wst_send_stop_digests(s, 1);
    /* The links' plans belong to the progress thread. */
    wst_status_t st = wst_worker_call(s->worker, build_jobs, &c);
    if (st == WST_OK)
        st = c.status;
    if (st != WST_OK)
        return st;
    s->digest_version = version;
    return wst_pool_start(s->digest_pool, digest_job_run, s, s->n_digest_jobs);
}

void wst_send_skip_digests(struct link *l)
{
    atomic_store_explicit(&l->digests_off, 1, memory_order_relaxed);
}

void wst_send_stop_digests(struct wst_sender *s, int cancel)
{
    if (s->digest_pool != NULL)
        wst_pool_finish(s->digest_pool, cancel);
}
