/* refit.c - the refit state machine: begin, credits, verification,
 * repack, failure (progress thread).
 *
 * A refit of version V:
 *
 *   IDLE ─BEGIN(V) from a sender─▶ BEGINNING ─begin hook ok─▶ RECEIVING
 *                                      │ hook fails: refuse,        │
 *                                      ▼ nothing written            │
 *   per (sender, layer): LAYER_DONE + all bytes in (am) → digest check
 *   per layer: every sender verified → layer_finalized hook → final
 *   every layer final → committed hook → COMMIT(V) to every sender → IDLE
 *
 * Each layer goes idle → receiving → complete (every sender's bytes in and
 * verified) → repacked (MoE layers: staged experts replayed into live
 * memory on the repack thread) → final (finalize hook returned). Routed
 * experts land in staging (experts.h): MoE layer k uses slot k mod S, and
 * the senders of its staged bytes get CREDIT(V, layer) only once that slot
 * is free, that is when MoE layer k - S has been repacked; the first S
 * credits go out with the begin acknowledgement. Transfers of later layers
 * go on while earlier ones are repacked and finalized.
 *
 * Any failure after the begin hook acknowledged (peer lost, stall past the
 * deadline, byte count or digest mismatch, bad data message, hook error)
 * fails the refit closed: unusable, with the reason, reported to the
 * engine (unusable hook), to the senders (ERROR) and to
 * wst_receiver_get_state. A later complete refit makes it usable again.
 * Every job posted to the engine thread carries the refit's generation, so
 * late results of a failed refit are ignored.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "codec.h"
#include "device.h"
#include "jobq.h"
#include "landing.h"
#include "log.h"
#include "receiver_internal.h"
#include "worker.h"

/* Every planned sender hears of the failure: those in the refit, and
 * those whose BEGIN is still to come (it will be answered with an error,
 * not taken for a new refit; a retry comes on a new connection). */
static void error_to_peer(struct wst_receiver *r, struct peer *p, void *arg)
{
    const struct job *j = arg;

    if (p->version != r->version) {
        if (!p->plan_sent)
            return;
        p->failed_version = r->version;
    }
    wst_recv_send_error(r, p, j->status, j->reason);
}

static void pub_refused(struct wst_receiver *r, void *arg)
{
    /* An unusable receiver keeps saying why it is unusable. */
    if (r->state.usable)
        wst_recv_set_state_reason(r, arg);
    r->state.refit_in_progress = 0;
}

static void pub_unusable(struct wst_receiver *r, void *arg)
{
    wst_recv_set_state_reason(r, arg);
    r->state.usable = 0;
    r->state.refit_in_progress = 0;
    r->state.refits_failed++;
}

void wst_recv_refit_end(struct wst_receiver *r)
{
    r->refit = REFIT_IDLE;
    r->generation++;
    if (r->polling) {
        wst_worker_busy(r->worker, -1);
        r->polling = 0;
    }
}

static void abort_peer_rx(struct wst_receiver *r, struct peer *p, void *arg)
{
    (void)r;
    (void)arg;
    if (p->rx != NULL)
        p->rx->ops->abort(p->rx);
    if (p->nccl_rx != NULL && p->nccl_rx != p->rx)
        p->nccl_rx->ops->abort(p->nccl_rx);
}

void wst_recv_refit_fail(struct wst_receiver *r, wst_status_t status,
                         const char *fmt, ...)
{
    struct job *j;
    va_list ap;

    if (r->refit == REFIT_IDLE)
        return;
    if (r->refit == REFIT_COMMITTING) {
        /* The version is complete; a late failure loses nothing. */
        va_start(ap, fmt);
        char reason[WST_ERROR_MSG_MAX];
        vsnprintf(reason, sizeof(reason), fmt, ap);
        va_end(ap);
        WST_WARN(&r->log, "after version %llu was complete: %s",
                 (unsigned long long)r->version, reason);
        return;
    }
    j = wst_recv_job_new(r);
    if (j == NULL) {
        wst_recv_refit_end(r);
        return;
    }
    j->status = status;
    va_start(ap, fmt);
    vsnprintf(j->reason, sizeof(j->reason), fmt, ap);
    va_end(ap);
    wst_recv_for_each_peer(r, error_to_peer, j);
    /* No receive may go on writing live memory once the refit failed
     * (NCCL's communicators are aborted; the senders reconnect and set up
     * new ones). */
    wst_recv_for_each_peer(r, abort_peer_rx, NULL);
    if (r->refit == REFIT_BEGINNING) {
        /* Nothing was written: keep serving the committed version. */
        WST_ERROR(&r->log, "refit of version %llu refused: %s",
                  (unsigned long long)r->version, j->reason);
        wst_recv_publish(r, pub_refused, j->reason);
        free(j);
        wst_recv_refit_end(r);
        return;
    }
    WST_ERROR(&r->log, "refit of version %llu failed, receiver unusable: %s",
              (unsigned long long)r->version, j->reason);
    wst_recv_publish(r, pub_unusable, j->reason);
    wst_recv_refit_end(r);
    if (wst_jobq_post(r->engine, wst_recv_job_unusable, j) != WST_OK)
        free(j);
}

static void send_credit(struct wst_receiver *r, struct peer *p, uint32_t layer)
{
    struct wst_msg m = {.type = WST_MSG_CREDIT};

    if (!r->staged_cells[(size_t)p->rank * r->plan->n_layers + layer])
        return;
    m.u.credit.version = r->version;
    m.u.credit.layer = layer;
    wst_recv_send_msg(r, p, &m);
}

static void credit_to_peer(struct wst_receiver *r, struct peer *p, void *arg)
{
    if (p->acked && p->version == r->version) {
        send_credit(r, p, *(const uint32_t *)arg);
        p->rx->ops->allow(p->rx, wst_recv_credit_bound(r));
    }
}

/* Grants credits in MoE-layer order while slots are free: ordinal k needs
 * ordinal k - S repacked (its slot's previous tenant). */
static void grant_credits(struct wst_receiver *r)
{
    uint32_t slots = r->moe.slots;

    while (
        r->credit_next < r->moe.n_layers &&
        (r->credit_next < slots || r->moe_repacked[r->credit_next - slots])) {
        uint32_t layer = r->moe.layers[r->credit_next++].layer;
        WST_DEBUG(&r->log, "version %llu: credit for layer %u",
                  (unsigned long long)r->version, layer);
        wst_recv_for_each_peer(r, credit_to_peer, &layer);
    }
}

double wst_recv_since_ack(const struct wst_receiver *r)
{
    return (double)(wst_now_ns() - r->ack_ns) / 1e9;
}

void wst_recv_ack_peer(struct wst_receiver *r, struct peer *p, void *arg)
{
    struct wst_msg m = {.type = WST_MSG_BEGIN};

    (void)arg;
    if (p->version != r->version || p->acked)
        return;
    p->acked = 1;
    m.u.begin.version = r->version;
    m.u.begin.plan_hash = p->plan_hash;
    m.u.begin.ack = 1;
    wst_recv_send_msg(r, p, &m);
    for (uint32_t k = 0; k < r->credit_next; k++)
        send_credit(r, p, r->moe.layers[k].layer);
    /* Its receiving half takes bytes from now on, as far as credits go. */
    wst_status_t st = p->rx->ops->begin(p->rx, r->version);
    if (st != WST_OK) {
        wst_recv_refit_fail(r, st, "sender %s: its %s mover cannot begin",
                            p->name, p->rx->ops->name);
        return;
    }
    p->rx->ops->allow(p->rx, wst_recv_credit_bound(r));
}

static void pub_in_progress(struct wst_receiver *r, void *arg)
{
    (void)arg;
    r->state.refit_in_progress = 1;
}

void wst_recv_begin_done(void *arg)
{
    struct job *j = arg;
    struct wst_receiver *r = j->r;

    if (j->generation != r->generation) {
        /* Refused meanwhile: the engine paused for nothing. It may serve
         * again only if its live memory is the committed version; an
         * unusable receiver's is not, so the engine hears why instead. */
        if (j->status == WST_OK && r->state.usable) {
            j->version = r->state.committed_version;
            if (wst_jobq_post(r->engine, wst_recv_job_resume, j) == WST_OK)
                return;
        } else if (j->status == WST_OK) {
            j->status = WST_ERR_UNUSABLE;
            snprintf(j->reason, sizeof(j->reason), "%s", r->state.reason);
            if (wst_jobq_post(r->engine, wst_recv_job_unusable, j) == WST_OK)
                return;
        }
        free(j);
        return;
    }
    if (j->status != WST_OK) {
        wst_status_t st = j->status;
        char reason[WST_ERROR_MSG_MAX];
        snprintf(reason, sizeof(reason), "%s",
                 j->reason[0] ? j->reason : wst_status_string(st));
        free(j);
        wst_recv_refit_fail(r, st, "engine refused to begin version %llu: %s",
                            (unsigned long long)r->version, reason);
        return;
    }
    free(j);
    r->refit = REFIT_RECEIVING;
    r->last_progress_ns = wst_now_ns();
    WST_INFO(&r->log, "version %llu: engine paused, receiving",
             (unsigned long long)r->version);
    r->ack_ns = wst_now_ns();
    /* Acks carry the credits granted so far: grant the first ones first. */
    grant_credits(r);
    wst_recv_for_each_peer(r, wst_recv_ack_peer, NULL);
}

/* A job back from the engine or repack thread: nonzero when its refit is
 * still the current one and the job succeeded. Otherwise the job is freed
 * here, after failing the refit if it was current. */
int wst_recv_job_current(struct wst_receiver *r, struct job *j)
{
    if (j->generation == r->generation && j->status == WST_OK)
        return 1;
    if (j->generation == r->generation)
        wst_recv_refit_fail(r, j->status, "%s", j->reason);
    free(j);
    return 0;
}

void wst_recv_queue_verify(struct wst_receiver *r, struct peer *p,
                           uint32_t layer)
{
    struct job *j = wst_recv_job_new(r);

    p->marks[layer] = MARK_CHECKING;
    if (j == NULL) {
        wst_recv_refit_fail(r, WST_ERR_NO_MEMORY,
                            "cannot queue a digest check");
        return;
    }
    j->rank = p->rank;
    j->layer = layer;
    j->digest = p->digests[layer];
    /* Unverified layers still pass through the engine thread, so events
     * keep one order. */
    wst_recv_queue_job(
        r, r->verify ? wst_recv_job_verify : wst_recv_job_skip_verify, j);
}

void wst_recv_verify_done(void *arg)
{
    struct job *j = arg;
    struct wst_receiver *r = j->r;

    if (!wst_recv_job_current(r, j))
        return;
    struct peer *p = r->by_rank[j->rank];
    uint32_t layer = j->layer;
    if (p != NULL)
        p->marks[layer] = MARK_VERIFIED;
    r->last_progress_ns = wst_now_ns();
    if (++r->layer_verified[layer] < r->world_size) {
        free(j);
        return;
    }
    WST_DEBUG(&r->log, "version %llu: layer %u complete",
              (unsigned long long)r->version, layer);
    pthread_mutex_lock(&r->lock);
    r->times[layer].received = wst_recv_since_ack(r);
    pthread_mutex_unlock(&r->lock);
    if (r->layer_moe[layer] == NULL) {
        wst_recv_queue_job(r, wst_recv_job_finalize, j);
        return;
    }
    if (wst_jobq_post(r->repacker, wst_recv_job_repack, j) != WST_OK) {
        free(j);
        wst_recv_refit_fail(r, WST_ERR_NO_MEMORY,
                            "cannot queue the repack of layer %u", layer);
    }
}

void wst_recv_repack_done(void *arg)
{
    struct job *j = arg;
    struct wst_receiver *r = j->r;

    if (!wst_recv_job_current(r, j))
        return;
    const struct wst_moe_layer *ml = r->layer_moe[j->layer];
    pthread_mutex_lock(&r->lock);
    r->times[j->layer].repacked = wst_recv_since_ack(r);
    r->times[j->layer].repack_seconds = j->seconds;
    pthread_mutex_unlock(&r->lock);
    WST_DEBUG(&r->log,
              "version %llu: layer %u repacked (%u experts, %s) in %.3f ms",
              (unsigned long long)r->version, j->layer, ml->shape.n_local,
              ml->loader->name, j->seconds * 1e3);
    r->last_progress_ns = wst_now_ns();
    r->moe_repacked[ml->ordinal] = 1;
    grant_credits(r);
    wst_recv_queue_job(r, wst_recv_job_finalize, j);
}

/* 'len' bytes of a message are where the plan wants them. */
void wst_recv_count_layer(struct wst_receiver *r, struct peer *p,
                          uint32_t layer, uint64_t len)
{
    p->recv_bytes[layer] += len;
    r->last_progress_ns = wst_now_ns();
    if (p->marks[layer] == MARK_WAITING &&
        p->recv_bytes[layer] == wst_recv_expected_bytes(r, p->rank, layer))
        wst_recv_queue_verify(r, p, layer);
}

void wst_recv_refit_start(struct wst_receiver *r, uint64_t version)
{
    struct job *j;

    r->refit = REFIT_BEGINNING;
    r->version = version;
    /* Data over shared memory raises no event on the worker's fd: poll
     * while a refit runs. */
    if (!r->polling) {
        wst_worker_busy(r->worker, +1);
        r->polling = 1;
    }
    r->generation++;
    r->refit_start_ns = wst_now_ns();
    r->last_progress_ns = r->refit_start_ns;
    r->layers_final = 0;
    memset(r->layer_verified, 0,
           r->plan->n_layers * sizeof(*r->layer_verified));
    r->credit_next = 0;
    memset(r->moe_repacked, 0, r->moe.n_layers + 1);
    if (r->landing != NULL) {
        struct wst_landing_stats drop;
        wst_landing_take_stats(r->landing, &drop); /* counts start here */
    }
    pthread_mutex_lock(&r->lock);
    memset(r->times, 0, r->plan->n_layers * sizeof(*r->times));
    pthread_mutex_unlock(&r->lock);
    for (uint32_t i = 0; i < r->world_size; i++)
        if (r->by_rank[i] != NULL)
            wst_recv_peer_reset_refit(r, r->by_rank[i]);
    wst_recv_publish(r, pub_in_progress, NULL);
    j = wst_recv_job_new(r);
    wst_recv_queue_job(r, wst_recv_job_begin, j);
}
