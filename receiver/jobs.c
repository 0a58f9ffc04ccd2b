/* jobs.c - work off the progress thread: engine hooks and digest checks
 * on the engine thread, expert repacks on the repack thread. Each job
 * posts itself back to the progress thread, where its result goes to the
 * refit state machine (refit.c) as an event and the job is freed. */
#include <stdio.h>
#include <stdlib.h>

#include "clock.h"
#include "device.h"
#include "digest.h"
#include "experts.h"
#include "jobq.h"
#include "receiver_internal.h"
#include "worker.h"

struct job *wst_recv_job_new(struct wst_receiver *r,
                             const struct wst_rm_action *a)
{
    struct job *j = calloc(1, sizeof(*j));

    if (j != NULL) {
        j->r = r;
        j->generation = a->generation;
        j->version = a->version;
        j->rank = a->rank;
        j->layer = a->layer;
        j->digest = a->digest;
        j->bytes = a->bytes;
        j->hashed = a->hashed;
        j->sum = a->sum;
        j->status = a->status;
        if (a->text != NULL)
            snprintf(j->reason, sizeof(j->reason), "%s", a->text);
    }
    return j;
}

void wst_recv_queue_job(struct wst_receiver *r, wst_job_fn fn, struct job *j)
{
    if (j == NULL || wst_jobq_post(r->engine, fn, j) != WST_OK) {
        free(j);
        wst_recv_refit_fail(r, WST_ERR_NO_MEMORY, "cannot queue engine work");
    }
}

/* Progress thread: a job's result, to the machine. */
static void job_done(struct job *j, enum wst_rm_event_kind kind)
{
    struct wst_rm_event ev = {.kind = kind,
                              .generation = j->generation,
                              .rank = j->rank,
                              .layer = j->layer,
                              .status = j->status,
                              .seconds = j->seconds,
                              .reason = j->reason};

    wst_recv_refit_event(j->r, &ev);
    free(j);
}

static void begin_done(void *arg)
{
    job_done(arg, WST_RM_EV_BEGIN_RESULT);
}

static void verify_done(void *arg)
{
    job_done(arg, WST_RM_EV_VERIFY_RESULT);
}

static void repack_done(void *arg)
{
    job_done(arg, WST_RM_EV_REPACK_RESULT);
}

static void finalize_done(void *arg)
{
    job_done(arg, WST_RM_EV_FINALIZE_RESULT);
}

static void commit_done(void *arg)
{
    job_done(arg, WST_RM_EV_COMMIT_DONE);
}

void wst_recv_job_begin(void *arg)
{
    struct job *j = arg;
    struct wst_receiver *r = j->r;

    j->status = r->hooks.begin != NULL
                    ? r->hooks.begin(r->hooks.arg, j->version, j->reason,
                                     sizeof(j->reason))
                    : WST_OK;
    wst_worker_post(r->worker, begin_done, j);
}

/* The layer's digest 'got' against the sender's; 'how' it was taken. */
static void check_digest(struct job *j, uint64_t got, const char *how)
{
    if (got == j->digest)
        return;
    j->status = WST_ERR_INTEGRITY;
    snprintf(j->reason, sizeof(j->reason),
             "digest mismatch in layer %u from sender rank %u (version "
             "%llu): sender %016llx, received %016llx (%s)",
             j->layer, j->rank, (unsigned long long)j->version,
             (unsigned long long)j->digest, (unsigned long long)got, how);
}

void wst_recv_job_verify(void *arg)
{
    struct job *j = arg;
    struct wst_receiver *r = j->r;
    size_t first, last;
    struct wst_digest d;

    /* Every byte hashed as it landed: the parts add up to the digest. */
    if (j->hashed == j->bytes) {
        WST_DEBUG(&r->log, "layer %u from rank %u: checked from its hashes",
                  j->layer, j->rank);
        check_digest(j, wst_digest_from_sum(j->sum, j->bytes), "hashed");
        wst_worker_post(r->worker, verify_done, j);
        return;
    }
    WST_DEBUG(&r->log,
              "layer %u from rank %u: read again (%llu of %llu bytes hashed "
              "as they landed)",
              j->layer, j->rank, (unsigned long long)j->hashed,
              (unsigned long long)j->bytes);
    wst_recv_layer_items(r, j->rank, j->layer, &first, &last);
    wst_digest_init(&d);
    /* Runs in device memory are hashed on the GPU, batched; the digest's
     * sum is order-free, so host and device runs mix. */
    for (size_t k = first; k < last && j->status == WST_OK; k++) {
        const struct wst_plan_item *it = &r->plan->items[k];
        const char *run = wst_recv_item_dest(r, it, 0);
        /* each row is a run of its own (planner.h) */
        for (uint64_t row = 0; j->status == WST_OK && row <= it->more_rows;
             row++, run += it->length) {
            if (r->regions[it->region].mem == WST_MEM_CUDA)
                j->status =
                    wst_recv_device_digest_add(r->dev, &d, run, it->length);
            else
                wst_digest_update(&d, run, it->length);
        }
    }
    if (r->dev != NULL && j->status == WST_OK)
        j->status = wst_recv_device_digest_flush(r->dev, &d);
    if (j->status != WST_OK)
        snprintf(j->reason, sizeof(j->reason),
                 "digest of layer %u from sender rank %u on GPU %d failed: %s",
                 j->layer, j->rank, r->device, wst_status_string(j->status));
    else
        check_digest(j, wst_digest_final(&d), "read again");
    wst_worker_post(r->worker, verify_done, j);
}

void wst_recv_job_skip_verify(void *arg)
{
    struct job *j = arg;

    wst_worker_post(j->r->worker, verify_done, j);
}

/* On the repack thread: every byte of the layer is in (its digest checks
 * may still run beside this, reading the same slot), and its slot is not
 * reused before both are done (refit_machine.h). */
void wst_recv_job_repack(void *arg)
{
    struct job *j = arg;
    struct wst_receiver *r = j->r;
    const struct wst_moe_layer *ml = r->layer_moe[j->layer];
    double t0 = wst_now_s();

    if (r->moe.staging_device >= 0)
        j->status = wst_recv_device_repack(r->dev, &r->moe, ml, r->region_data,
                                           j->reason, sizeof(j->reason));
    else
        j->status = wst_moe_replay(&r->moe, ml, r->region_data, j->reason,
                                   sizeof(j->reason));
    j->seconds = wst_now_s() - t0;
    wst_worker_post(r->worker, repack_done, j);
}

void wst_recv_job_finalize(void *arg)
{
    struct job *j = arg;
    struct wst_receiver *r = j->r;
    double t0 = wst_now_s();

    if (r->hooks.layer_finalized != NULL) {
        char why[WST_ERROR_MSG_MAX - 64] = "";
        j->status = r->hooks.layer_finalized(r->hooks.arg, j->layer, j->version,
                                             why, sizeof(why));
        if (j->status != WST_OK)
            snprintf(j->reason, sizeof(j->reason),
                     "engine failed to finalize layer %u: %s", j->layer,
                     why[0] ? why : wst_status_string(j->status));
    }
    j->seconds = wst_now_s() - t0;
    wst_worker_post(r->worker, finalize_done, j);
}

void wst_recv_job_commit(void *arg)
{
    struct job *j = arg;
    struct wst_receiver *r = j->r;

    if (r->hooks.committed != NULL)
        r->hooks.committed(r->hooks.arg, j->version);
    wst_worker_post(r->worker, commit_done, j);
}

void wst_recv_job_unusable(void *arg)
{
    struct job *j = arg;
    struct wst_receiver *r = j->r;

    if (r->hooks.unusable != NULL)
        r->hooks.unusable(r->hooks.arg, j->status, j->reason);
    free(j);
}

/* The engine paused for a refit that was refused before anything was
 * written: let it serve its committed version again. */
void wst_recv_job_resume(void *arg)
{
    struct job *j = arg;
    struct wst_receiver *r = j->r;

    if (r->hooks.committed != NULL && j->version != 0)
        r->hooks.committed(r->hooks.arg, j->version);
    free(j);
}
