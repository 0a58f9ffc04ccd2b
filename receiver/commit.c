/* commit.c - a refit's outcome as API threads read it (under the lock):
 * started, each layer's times, committed with its bytes, refused or
 * unusable with the reason; the refit state machine's actions decide it
 * (refit.c), this only writes it down (progress thread). */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "mover.h"
#include "receiver_internal.h"

static void pub_started(struct wst_receiver *r, void *arg)
{
    const struct wst_rm_action *a = arg;

    if (r->times != NULL)
        memset(r->times, 0, r->n_times * sizeof(*r->times));
    r->state.refit_in_progress = 1;
    r->state.refit_version = a->version;
    snprintf(r->state.refit_phase, sizeof(r->state.refit_phase), "beginning");
    snprintf(r->state.refit_label, sizeof(r->state.refit_label), "%s",
             a->text != NULL ? a->text : "");
}

static void end_refit(struct wst_receiver *r)
{
    r->state.refit_in_progress = 0;
    r->state.refit_version = 0;
    r->state.refit_phase[0] = '\0';
    r->state.refit_label[0] = '\0';
}

void wst_recv_publish_started(struct wst_receiver *r,
                              const struct wst_rm_action *a)
{
    wst_recv_publish(r, pub_started, (void *)a);
}

static void pub_phase(struct wst_receiver *r, void *arg)
{
    const struct wst_rm_action *a = arg;
    const char *phase = a->kind == WST_RM_ACT_READY       ? "ready"
                        : a->kind == WST_RM_ACT_RECEIVING ? "receiving"
                                                          : "prepared";

    snprintf(r->state.refit_phase, sizeof(r->state.refit_phase), "%s", phase);
}

void wst_recv_publish_phase(struct wst_receiver *r,
                            const struct wst_rm_action *a)
{
    wst_recv_publish(r, pub_phase, (void *)a);
}

void wst_recv_publish_times(struct wst_receiver *r,
                            const struct wst_rm_action *a)
{
    pthread_mutex_lock(&r->lock);
    if (a->layer < r->n_times) {
        struct wst_layer_times *t = &r->times[a->layer];
        if (a->kind == WST_RM_ACT_RECEIVED) {
            t->received = a->at;
        } else if (a->kind == WST_RM_ACT_REPACKED) {
            t->repacked = a->at;
            t->repack_seconds = a->seconds;
        } else if (a->kind == WST_RM_ACT_FINAL) {
            t->finalized = a->at;
            t->finalize_seconds = a->seconds;
        }
    }
    pthread_mutex_unlock(&r->lock);
    if (a->kind == WST_RM_ACT_REPACKED && r->layer_moe[a->layer] != NULL) {
        const struct wst_moe_layer *ml = r->layer_moe[a->layer];
        WST_DEBUG(&r->log,
                  "version %llu: layer %u repacked (%u experts, %s) in %.3f "
                  "ms",
                  (unsigned long long)a->version, a->layer, ml->shape.n_local,
                  ml->loader->name, a->seconds * 1e3);
    }
}

static void pub_committed(struct wst_receiver *r, void *arg)
{
    const struct wst_rm_action *a = arg;

    r->state.committed_version = a->version;
    snprintf(r->state.committed_label, sizeof(r->state.committed_label), "%s",
             a->text != NULL ? a->text : "");
    r->state.usable = 1;
    r->state.reason[0] = '\0';
    end_refit(r);
    r->state.refits_ok++;
    r->state.last_refit_bytes = a->bytes;
    r->state.last_refit_put_bytes = a->bytes_by_mover[WST_MOVER_PUT];
    r->state.last_refit_am_bytes = a->bytes_by_mover[WST_MOVER_AM];
    r->state.last_refit_nccl_bytes = a->bytes_by_mover[WST_MOVER_NCCL];
    r->state.last_refit_seconds = a->seconds;
    /* Published from the progress thread: the worker's counters are
     * read where they are kept. */
    uint64_t now[WST_RECEIVER_LANES_MAX];
    wst_worker_lane_rx_bytes(r->worker, now, WST_RECEIVER_LANES_MAX);
    for (unsigned i = 0; i < WST_RECEIVER_LANES_MAX; i++)
        r->state.last_refit_lane_bytes[i] = now[i] - r->lane_bytes_at_start[i];
}

/* Every byte is in place and verified: the version is committed now,
 * before the engine is told to serve it. */
void wst_recv_publish_committed(struct wst_receiver *r,
                                const struct wst_rm_action *a)
{
    wst_recv_publish(r, pub_committed, (void *)a);
    WST_INFO(&r->log, "version %llu%s%s committed: %llu bytes in %.3f s",
             (unsigned long long)a->version,
             a->text != NULL && a->text[0] != '\0' ? " label " : "",
             a->text != NULL ? a->text : "", (unsigned long long)a->bytes,
             a->seconds);
    wst_recv_log_landing(r, a->version);
}

static void pub_refused(struct wst_receiver *r, void *arg)
{
    const struct wst_rm_action *a = arg;

    wst_recv_set_state_reason(r, a->reason);
    end_refit(r);
}

/* Nothing was written: the receiver keeps serving its committed version
 * (and an unusable one keeps saying why: the machine's reason). */
void wst_recv_publish_refused(struct wst_receiver *r,
                              const struct wst_rm_action *a)
{
    WST_ERROR(&r->log, "refit of version %llu refused: %s",
              (unsigned long long)a->version, a->text);
    wst_recv_publish(r, pub_refused, (void *)a);
}

static void pub_unusable(struct wst_receiver *r, void *arg)
{
    const struct wst_rm_action *a = arg;

    wst_recv_set_state_reason(r, a->text);
    r->state.usable = 0;
    end_refit(r);
    r->state.refits_failed++;
}

void wst_recv_publish_unusable(struct wst_receiver *r,
                               const struct wst_rm_action *a)
{
    WST_ERROR(&r->log, "refit of version %llu failed, receiver unusable: %s",
              (unsigned long long)a->version, a->text);
    wst_recv_publish(r, pub_unusable, (void *)a);
}

static void pub_reason(struct wst_receiver *r, void *arg)
{
    wst_recv_set_state_reason(r, arg);
}

void wst_recv_publish_reason(struct wst_receiver *r, const char *reason)
{
    wst_recv_publish(r, pub_reason, (void *)reason);
}
