/* digests.c - layer digests. push queues the version's hashing on the
 * sender's digest pool (common/pool.h), layer-major so that every
 * receiver's first layer is ready first, and returns: the trainer's thread
 * never hashes. A host layer is cut into pieces of ~16 MiB
 * (digest_pieces.h) that the pool's threads hash apart, so a layer's
 * digest takes its bytes over the threads' rate, not one thread's; a layer
 * with device runs is one job, hashed on the GPU. Each job hands its sum to
 * the progress thread, which adds a layer's sums and makes its digest once
 * all are in. Data does not wait for digests, so hashing overlaps sending.
 * A layer's LAYER_DONE carries its digest (pump.c), in layer order.
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
#include "digest_pieces.h"
#include "log.h"
#include "sender_internal.h"
#include "worker.h"

/* A job: one piece of a host layer, or a whole layer with device runs.
 * Its pool thread writes the result and posts the job itself to the
 * progress thread: the batch's array stays put until every post of it
 * has run (the next build is a call queued behind them, and destroy
 * stops the worker before it frees the array). */
#define WHOLE_LAYER UINT32_MAX
struct digest_job {
    struct link *l;
    uint32_t layer;
    uint32_t piece; /* into l->dpieces, or WHOLE_LAYER */
    /* The result, from the pool thread: */
    uint64_t version;
    uint64_t sum;
    wst_status_t status; /* not WST_OK: the layer has no digest */
};

/* A layer's hashing: its pieces, and the sums come back so far (its
 * bytes, the digest's total, are l->layer_bytes). */
struct layer_hash {
    size_t first_piece;  /* into l->dpieces */
    uint32_t n_pieces;   /* 0: one job for the whole layer (device runs) */
    uint32_t parts_left; /* this version's sums still to come */
    uint64_t sum;        /* this version's sums added so far */
};

static void do_digest_ready(void *arg)
{
    const struct digest_job *d = arg;
    struct link *l = d->l;

    if (l->version == d->version && l->have_plan &&
        d->layer < l->plan.n_layers && !l->digest_in[d->layer]) {
        struct layer_hash *lh = &l->layer_hash[d->layer];
        if (d->status != WST_OK) {
            /* The refit cannot complete: its caller hears why now, not at
             * its deadline. */
            wst_link_fail(l, d->status, "cannot digest layer %u on the GPU",
                          d->layer);
        } else if (lh->parts_left > 0) {
            lh->sum += d->sum;
            if (--lh->parts_left == 0) {
                WST_TRACE(&l->s->log, "receiver %s: digest of layer %u ready",
                          l->name, d->layer);
                l->digests[d->layer] =
                    wst_digest_from_sum(lh->sum, l->layer_bytes[d->layer]);
                l->digest_in[d->layer] = 1;
                /* Layers finish out of order on several threads. */
                while (l->digests_ready < l->plan.n_layers &&
                       l->digest_in[l->digests_ready])
                    l->digests_ready++;
                wst_send_pump(l);
            }
        }
    }
}

/* One layer's sum for one link, as one job: host runs on this thread,
 * device runs on the GPU (one thread at a time). */
static wst_status_t layer_sum(struct wst_sender *s, const struct link *l,
                              uint32_t layer, uint64_t *sum_p)
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
    *sum_p = d.sum;
    return st;
}

/* Where item i of the link's plan is read (host shards only). */
static const unsigned char *item_run(void *arg, size_t i)
{
    const struct link *l = arg;
    const struct wst_plan_item *it = &l->plan.items[i];

    return (const unsigned char *)l->s->shards[it->have].data + it->src_offset;
}

/* Pool thread: job i of the batch. */
static void digest_job_run(void *arg, size_t i)
{
    struct wst_sender *s = arg;
    struct digest_job *j = &s->digest_jobs[i];
    struct link *l = j->l;

    /* A flag, not l->state: the state is the progress thread's. */
    if (atomic_load_explicit(&l->digests_off, memory_order_relaxed))
        return; /* the link failed: its refit is over */
    /* A failure goes to the progress thread too, which fails the link with
     * it (the link is not this thread's to fail). */
    j->version = s->digest_version;
    j->status = WST_OK;
    if (j->piece == WHOLE_LAYER)
        j->status = layer_sum(s, l, j->layer, &j->sum);
    else
        j->sum = wst_digest_piece_sum(l->plan.items, &l->dpieces[j->piece],
                                      item_run, l);
    /* Without memory to post, the refit stalls into its deadline. */
    wst_worker_post(s->worker, do_digest_ready, j);
}

static wst_status_t add_piece(void *arg, const struct wst_digest_piece *p)
{
    struct link *l = arg;

    if (wst_array_grow(&l->dpieces, &l->dpieces_cap, l->n_dpieces + 1,
                       sizeof(*l->dpieces)) != WST_OK)
        return WST_ERR_NO_MEMORY;
    l->dpieces[l->n_dpieces++] = *p;
    return WST_OK;
}

/* Progress thread: how each layer of the link's plan is hashed, once per
 * plan. A layer reading any device shard stays one job (the GPU hashes
 * it); a host layer is cut into pieces. */
static wst_status_t build_pieces(struct wst_sender *s, struct link *l)
{
    const struct wst_plan_msg *p = &l->plan;

    l->layer_hash =
        calloc(p->n_layers ? p->n_layers : 1, sizeof(*l->layer_hash));
    if (l->layer_hash == NULL)
        return WST_ERR_NO_MEMORY;
    for (uint32_t layer = 0; layer < p->n_layers; layer++) {
        struct layer_hash *lh = &l->layer_hash[layer];
        size_t first = l->layer_first[layer], end = l->layer_first[layer + 1];
        int device = 0;
        for (size_t k = first; k < end; k++)
            device |= s->shards[p->items[k].have].device >= 0;
        lh->first_piece = l->n_dpieces;
        if (device)
            continue;
        wst_status_t st = wst_digest_pieces(
            p->items, first, end, WST_DIGEST_PIECE_BYTES, add_piece, l);
        /* Piece indexes are 32 bits, WHOLE_LAYER apart. */
        if (st == WST_OK && l->n_dpieces >= WHOLE_LAYER)
            st = WST_ERR_TOO_LARGE;
        if (st != WST_OK) {
            wst_send_free_digest_pieces(l);
            return st;
        }
        lh->n_pieces = (uint32_t)(l->n_dpieces - lh->first_piece);
    }
    return WST_OK;
}

void wst_send_free_digest_pieces(struct link *l)
{
    free(l->layer_hash);
    free(l->dpieces);
    l->layer_hash = NULL;
    l->dpieces = NULL;
    l->n_dpieces = l->dpieces_cap = 0;
}

/* Appends one job to the batch. */
static wst_status_t add_job(struct wst_sender *s, struct link *l,
                            uint32_t layer, uint32_t piece)
{
    if (wst_array_grow(&s->digest_jobs, &s->digest_jobs_cap,
                       s->n_digest_jobs + 1, sizeof(*s->digest_jobs)) != WST_OK)
        return WST_ERR_NO_MEMORY;
    s->digest_jobs[s->n_digest_jobs++] =
        (struct digest_job){.l = l, .layer = layer, .piece = piece};
    return WST_OK;
}

struct build_call {
    struct wst_sender *s;
    wst_status_t status;
};

/* Progress thread: the jobs of every planned link, layer-major, and each
 * layer's sums reset for this version. */
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
        if (!off && l->layer_hash == NULL) {
            *st_p = build_pieces(s, l);
            if (*st_p != WST_OK)
                return;
        }
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
            struct layer_hash *lh = &l->layer_hash[layer];
            lh->sum = 0;
            lh->parts_left = lh->n_pieces ? lh->n_pieces : 1;
            for (uint32_t k = 0; k < lh->n_pieces && *st_p == WST_OK; k++)
                *st_p = add_job(s, l, layer, (uint32_t)(lh->first_piece + k));
            if (lh->n_pieces == 0 && *st_p == WST_OK)
                *st_p = add_job(s, l, layer, WHOLE_LAYER);
            if (*st_p != WST_OK)
                return;
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
