/* commit.c - the end of a refit: each layer finalized, and once every
 * one is, the version committed, then the engine and the senders told
 * (progress thread). */
#include <pthread.h>
#include <stdlib.h>

#include "clock.h"
#include "codec.h"
#include "log.h"
#include "mover.h"
#include "receiver_internal.h"

/* The committed refit's bytes: in total, and by mover ([WST_MOVER_*]). */
struct refit_bytes {
    uint64_t total;
    uint64_t by_mover[WST_MOVER_NCCL + 1];
};

static void add_peer_bytes(struct wst_receiver *r, struct peer *p, void *arg)
{
    struct refit_bytes *b = arg;

    if (p->version != r->version || p->mover > WST_MOVER_NCCL)
        return;
    for (uint32_t layer = 0; layer < r->plan->n_layers; layer++)
        b->by_mover[p->mover] += wst_recv_expected_bytes(r, p->rank, layer);
}

static void pub_committed(struct wst_receiver *r, void *arg)
{
    const struct refit_bytes *bytes = arg;

    r->state.committed_version = r->version;
    r->state.usable = 1;
    r->state.reason[0] = '\0';
    r->state.refit_in_progress = 0;
    r->state.refits_ok++;
    r->state.last_refit_bytes = bytes->total;
    r->state.last_refit_put_bytes = bytes->by_mover[WST_MOVER_PUT];
    r->state.last_refit_am_bytes = bytes->by_mover[WST_MOVER_AM];
    r->state.last_refit_nccl_bytes = bytes->by_mover[WST_MOVER_NCCL];
    r->state.last_refit_seconds =
        (double)(wst_now_ns() - r->refit_start_ns) / 1e9;
}

static void commit_to_peer(struct wst_receiver *r, struct peer *p, void *arg)
{
    struct wst_msg m = {.type = WST_MSG_COMMIT};

    (void)arg;
    if (p->version != r->version)
        return;
    m.u.commit.version = r->version;
    wst_recv_send_msg(r, p, &m);
}

void wst_recv_finalize_done(void *arg)
{
    struct job *j = arg;
    struct wst_receiver *r = j->r;

    if (!wst_recv_job_current(r, j))
        return;
    pthread_mutex_lock(&r->lock);
    r->times[j->layer].finalized = wst_recv_since_ack(r);
    r->times[j->layer].finalize_seconds = j->seconds;
    pthread_mutex_unlock(&r->lock);
    if (++r->layers_final < r->plan->n_layers) {
        free(j);
        return;
    }
    /* Every byte is in place and verified: the version is committed now,
     * before the engine is told to serve it. */
    struct refit_bytes bytes = {.total = r->plan->total_bytes};
    wst_recv_for_each_peer(r, add_peer_bytes, &bytes);
    r->refit = REFIT_COMMITTING;
    wst_recv_publish(r, pub_committed, &bytes);
    WST_INFO(&r->log, "version %llu committed: %llu bytes in %.3f s",
             (unsigned long long)r->version, (unsigned long long)bytes.total,
             r->state.last_refit_seconds);
    wst_recv_log_landing(r);
    wst_recv_queue_job(r, wst_recv_job_commit, j);
}

void wst_recv_commit_done(void *arg)
{
    struct job *j = arg;
    struct wst_receiver *r = j->r;

    if (!wst_recv_job_current(r, j))
        return;
    free(j);
    wst_recv_for_each_peer(r, commit_to_peer, NULL);
    wst_recv_refit_end(r);
}
