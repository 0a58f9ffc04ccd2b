/* plan_cache.c - the plan: built once every sender rank's manifest is
 * in (on the planner thread), kept while the inputs stay the same, each
 * sender's slice encoded there too and sent to it (the progress thread
 * only sends: encoding ~1 M items took it 110-130 ms, NOTES.md); and the
 * per-layer lookups into it (progress thread). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>

#include "am.h"
#include "clock.h"
#include "codec.h"
#include "landing.h"
#include "log.h"
#include "planner.h"
#include "receiver_internal.h"
#include "worker.h"

_Static_assert(WST_DATA_CHUNK_MAX == WST_REGION_MESSAGE_MIN &&
                   WST_DATA_DEVICE_CHUNK_MAX <= WST_REGION_MESSAGE_MAX &&
                   WST_DATA_DEVICE_CHUNK_MAX % WST_REGION_MESSAGE_ALIGN == 0,
               "a region's message_max must pass the codec's check");

/* One sender's PLAN message, encoded: the buffer goes to its connection
 * (NULL once sent, or when it could not be encoded), the hash and token
 * to its peer. */
struct encoded_plan {
    uint8_t *buf;
    size_t len;
    uint64_t plan_hash;
    uint64_t data_token;
    int put; /* it hands out remote keys: its mover is put */
};

uint64_t wst_recv_layer_count(const struct wst_receiver *r)
{
    return r->plan != NULL ? r->plan->n_layers : 0;
}

/* Items of sender 'rank' in 'layer': [first, last). */
void wst_recv_layer_items(const struct wst_receiver *r, uint32_t rank,
                          uint32_t layer, size_t *first, size_t *last)
{
    const size_t *ix = &r->layer_index[(size_t)rank * (r->plan->n_layers + 1)];

    *first = ix[layer];
    *last = ix[layer + 1];
}

/* The refit machine's view of the plan: bytes and staged items per
 * (sender, layer), the MoE layers in ordinal order. */
static wst_status_t plan_machine(struct wst_receiver *r)
{
    const struct wst_plan *pl = r->plan;
    uint8_t *staged = calloc((size_t)pl->n_senders * pl->n_layers + 1, 1);
    uint32_t *moe_layers = calloc(r->moe.n_layers + 1, sizeof(*moe_layers));
    wst_status_t st = WST_ERR_NO_MEMORY;

    if (staged != NULL && moe_layers != NULL) {
        for (size_t i = 0; i < pl->n_items; i++)
            if (pl->items[i].staged)
                staged[(size_t)pl->items[i].sender * pl->n_layers +
                       pl->items[i].layer] = 1;
        for (size_t i = 0; i < r->moe.n_layers; i++)
            moe_layers[i] = r->moe.layers[i].layer;
        struct wst_rm_plan rp = {.n_senders = pl->n_senders,
                                 .n_layers = pl->n_layers,
                                 .total_bytes = pl->total_bytes,
                                 .layer_bytes = pl->layer_bytes,
                                 .staged = staged,
                                 .moe_layers = moe_layers,
                                 .n_moe = (uint32_t)r->moe.n_layers,
                                 .slots = r->moe.slots};
        st = wst_rm_set_plan(&r->rm, &rp);
    }
    free(staged);
    free(moe_layers);
    return st;
}

static wst_status_t build_layer_index(struct wst_receiver *r)
{
    const struct wst_plan *pl = r->plan;
    size_t stride = (size_t)pl->n_layers + 1;

    free(r->layer_index);
    free(r->layer_moe);
    r->layer_index =
        calloc((size_t)pl->n_senders * stride, sizeof(*r->layer_index));
    r->layer_moe = calloc(pl->n_layers, sizeof(*r->layer_moe));
    struct wst_layer_times *times = calloc(pl->n_layers, sizeof(*times));
    if (r->layer_index == NULL || r->layer_moe == NULL || times == NULL ||
        plan_machine(r) != WST_OK) {
        free(times);
        return WST_ERR_NO_MEMORY;
    }
    pthread_mutex_lock(&r->lock);
    free(r->times);
    r->times = times;
    r->n_times = pl->n_layers;
    pthread_mutex_unlock(&r->lock);
    for (size_t i = 0; i < r->moe.n_layers; i++)
        if (r->moe.layers[i].layer < pl->n_layers)
            r->layer_moe[r->moe.layers[i].layer] = &r->moe.layers[i];
    for (uint32_t s = 0; s < pl->n_senders; s++) {
        size_t *ix = &r->layer_index[s * stride];
        size_t k = pl->sender_first[s];
        for (uint32_t l = 0; l < pl->n_layers; l++) {
            ix[l] = k;
            while (k < pl->sender_first[s + 1] && pl->items[k].layer == l)
                k++;
        }
        ix[pl->n_layers] = k;
    }
    return WST_OK;
}

/* What the receiver's side offers a sender (codec.h); progress thread. */
static uint32_t plan_caps(struct wst_receiver *r)
{
    return (r->device >= 0 ? WST_CAP_DEVICE_DST : 0) |
           (wst_worker_supports_cuda(r->worker) ? WST_CAP_UCX_CUDA : 0) |
           (wst_recv_nccl_possible(r) ? WST_CAP_NCCL : 0) |
           /* am_rx scatters into host memory only */
           (r->device < 0 && !r->allow_put ? WST_CAP_SCATTER : 0) |
           WST_CAP_LAYER_BATCH | WST_CAP_ROWS;
}

/* Sender 'rank''s PLAN, encoded into a new buffer (*buf_p, the caller's),
 * with its plan hash and a new data token (a new secret with every plan:
 * data that claims this rank must come from whoever read this message).
 * Only the regions its items write go with base and length, the others
 * with neither (indices stay the plan's), so a sender learns nothing of
 * memory it has no business in; keys only with 'keys' (they are the
 * progress thread's, wst_recv_regions_rekey), for the regions that have
 * one (wst_recv_region_keyed), and the plan's mover is put if any went
 * (the other regions then take am on the same wire); each region with
 * the largest message it takes (device memory that UCX writes itself
 * takes larger ones, mover.h).
 * Reads the plan, the regions and whether a device ring exists, which are
 * fixed: any thread. */
static wst_status_t encode_plan(const struct wst_receiver *r,
                                const struct wst_plan *pl, uint32_t rank,
                                uint32_t caps, int keys, struct encoded_plan *e)
{
    struct wst_msg m = {.type = WST_MSG_PLAN};
    size_t first = pl->sender_first[rank];
    size_t n = pl->sender_first[rank + 1] - first;
    struct wst_wire_region *regs =
        calloc(r->n_regions ? r->n_regions : 1, sizeof(*regs));
    wst_status_t st;
    int keyed = 0;

    if (regs == NULL)
        return WST_ERR_NO_MEMORY;
    for (size_t k = first; k < first + n; k++) {
        uint32_t i = pl->items[k].region;
        if (i >= r->n_regions || regs[i].length != 0)
            continue;
        regs[i].base = (uint64_t)(uintptr_t)r->regions[i].data;
        regs[i].length = r->regions[i].length;
        if (keys && wst_recv_region_keyed(r, i)) {
            regs[i].rkey.len = r->regions[i].rkey_len;
            regs[i].rkey.data = r->regions[i].rkey;
            keyed = 1;
        }
        if (r->rx_regions != NULL) {
            regs[i].message_max = wst_am_message_max(
                &r->rx_regions[i], (caps & WST_CAP_UCX_CUDA) != 0,
                r->device_landing != NULL
                    ? wst_landing_message_max(r->device_landing)
                    : 0,
                r->device_message_max);
        }
    }
    e->plan_hash =
        wst_plan_hash_items(pl->n_senders, pl->n_layers, &pl->items[first], n);
    if (getrandom(&e->data_token, sizeof(e->data_token), 0) !=
        (ssize_t)sizeof(e->data_token)) {
        free(regs);
        return WST_ERR_IO;
    }
    m.u.plan.plan_hash = e->plan_hash;
    m.u.plan.sender = rank;
    m.u.plan.n_senders = pl->n_senders;
    m.u.plan.n_layers = pl->n_layers;
    m.u.plan.mover = keyed ? WST_MOVER_PUT : WST_MOVER_AM;
    e->put = keyed;
    m.u.plan.data_token = e->data_token;
    m.u.plan.caps = caps;
    m.u.plan.n_items = n;
    m.u.plan.items = &pl->items[first];
    m.u.plan.n_regions = r->n_regions;
    m.u.plan.regions = regs;
    st = wst_msg_encode(&m, &e->buf, &e->len);
    free(regs);
    return st;
}

/* Sends 'e' (its buffer goes to the connection) and takes its hash and
 * token as the peer's. */
static void send_encoded_plan(struct wst_receiver *r, struct peer *p,
                              struct encoded_plan *e)
{
    if (wst_recv_peer_rx_plan(r, p) != WST_OK) {
        wst_recv_send_error(r, p, WST_ERR_NO_MEMORY, "no memory for the plan");
        return;
    }
    p->plan_hash = e->plan_hash;
    p->data_token = e->data_token;
    p->plan_put = e->put;
    if (p->conn != NULL)
        wst_conn_send(p->conn, e->buf, e->len);
    else
        free(e->buf);
    e->buf = NULL;
    p->plan_sent = 1;
    struct wst_rm_event ev = {.kind = WST_RM_EV_PEER_PLANNED, .rank = p->rank};
    wst_recv_refit_event(r, &ev);
}

static void send_plan(struct wst_receiver *r, struct peer *p)
{
    struct encoded_plan e = {0};
    wst_status_t st = encode_plan(r, r->plan, p->rank, plan_caps(r),
                                  r->allow_put || r->device_put, &e);

    if (st != WST_OK) {
        WST_ERROR(&r->log, "cannot encode the plan for %s: %s", p->name,
                  wst_status_string(st));
        wst_recv_send_error(r, p, st, "cannot encode the plan");
        return;
    }
    send_encoded_plan(r, p, &e);
}

void wst_recv_refuse_to_peer(struct wst_receiver *r, struct peer *p, void *arg)
{
    const struct job *j = arg;

    wst_recv_send_error(r, p, j->status, j->reason);
}

/* The refusal stands as the receiver's reason (the refit machine's). */
static void refused(struct wst_receiver *r, const char *reason)
{
    struct wst_rm_event ev = {.kind = WST_RM_EV_PLAN_REFUSED, .reason = reason};

    wst_recv_refit_event(r, &ev);
}

static void pub_plan_time(struct wst_receiver *r, void *arg)
{
    const double *s = arg;

    r->state.plan_seconds = s[0];
    r->state.plan_cpu_seconds = s[1];
    r->state.manifest_bytes = r->manifest_bytes; /* progress thread's */
}

/* A plan computed on the planner thread from a snapshot of the manifests
 * (borrowed: a peer dropped meanwhile keeps its manifest until the job is
 * back: it waits on r->retired, wst_recv_release_retired), posted back
 * with its generation. */
struct plan_job {
    struct wst_receiver *r;
    uint64_t generation; /* r->plan_generation when it was taken */
    struct wst_plan_input in;
    const struct wst_have **haves; /* [n_senders], owned */
    size_t *n_haves;               /* [n_senders], owned */
    uint64_t cached_key;           /* of r->plan; valid if has_cached */
    int has_cached;
    uint64_t key;          /* of in */
    struct wst_plan *plan; /* owned; NULL: the cached one stands */
    wst_status_t status;
    char reason[WST_ERROR_MSG_MAX];
    double seconds[2]; /* wall, and the planner thread's CPU */
    /* Every sender's PLAN, encoded here too (am mover only: a put
     * mover's keys are the progress thread's), so that the progress
     * thread only sends them: [n_senders], owned; NULL: not encoded. */
    uint32_t caps;
    int encode;
    uint8_t *unsent; /* [n_senders]: no PLAN sent to that peer yet, as the
                        progress thread saw it when the job began; only
                        those are encoded (a sender that reconnects to a
                        cached plan needs its own PLAN, not 256) */
    struct encoded_plan *enc;
    double encode_s;
};

static void plan_job_free(struct plan_job *j)
{
    for (uint32_t i = 0; j->enc != NULL && i < j->in.n_senders; i++)
        free(j->enc[i].buf);
    free(j->enc);
    free(j->unsent);
    wst_plan_destroy(j->plan);
    free(j->haves);
    free(j->n_haves);
    free(j);
}

/* The new plan replaces the old one: its index, the refit machine's view,
 * and the published time. */
static wst_status_t install_plan(struct wst_receiver *r, struct plan_job *j)
{
    wst_plan_destroy(r->plan);
    r->plan = j->plan;
    j->plan = NULL;
    r->plan_key = j->key;
    r->have_plan_key = 1;
    if (build_layer_index(r) != WST_OK) {
        wst_plan_destroy(r->plan);
        r->plan = NULL;
        r->have_plan_key = 0;
        return WST_ERR_NO_MEMORY;
    }
    const struct wst_plan *plan = r->plan;
    wst_recv_publish(r, pub_plan_time, j->seconds);
    WST_INFO(&r->log,
             "plan %016llx: %zu items, %llu bytes from %u senders, %u "
             "layers, built in %.3f ms",
             (unsigned long long)plan->hash, plan->n_items,
             (unsigned long long)plan->total_bytes, plan->n_senders,
             plan->n_layers, j->seconds[0] * 1e3);
    return WST_OK;
}

/* Progress thread: the planner's result. Inputs that changed meanwhile
 * (a manifest came or went: the generation moved on) make it stale: it is
 * dropped and planning starts again from what is there now. */
static void plan_done(void *arg)
{
    struct plan_job *j = arg;
    struct wst_receiver *r = j->r;
    struct job refusal = {.status = j->status};

    r->planning = 0;
    wst_recv_release_retired(r);
    if (r->closing) {
        plan_job_free(j);
        return;
    }
    if (j->generation != r->plan_generation) {
        WST_DEBUG(&r->log, "plan of manifests that changed meanwhile dropped");
        plan_job_free(j);
        wst_recv_try_plan(r);
        return;
    }
    if (j->status != WST_OK) {
        /* A refusal changes nothing: the live buffers and the committed
         * version stay as they are. */
        snprintf(refusal.reason, sizeof(refusal.reason), "%s", j->reason);
        refused(r, refusal.reason);
        wst_recv_for_each_peer(r, wst_recv_refuse_to_peer, &refusal);
        plan_job_free(j);
        return;
    }
    if (j->plan != NULL && install_plan(r, j) != WST_OK) {
        plan_job_free(j);
        return;
    }
    double t0 = wst_now_s(), c0 = wst_thread_cpu_s();
    for (uint32_t i = 0; i < r->world_size; i++) {
        struct peer *p = r->by_rank[i];
        if (p == NULL || p->plan_sent)
            continue;
        if (j->enc != NULL && j->enc[i].buf != NULL)
            send_encoded_plan(r, p, &j->enc[i]);
        else
            send_plan(r, p);
    }
    WST_DEBUG(&r->log,
              "plans sent in %.3f ms (%.3f ms CPU) on the progress thread, "
              "encoded on the planner thread in %.3f ms",
              (wst_now_s() - t0) * 1e3, (wst_thread_cpu_s() - c0) * 1e3,
              j->encode_s * 1e3);
    plan_job_free(j);
}

/* Planner thread: the input's key, and a plan unless the cached one is
 * for the same key. Reads only the snapshot and what the receiver fixed
 * before it started (wants, regions). */
static void plan_run(void *arg)
{
    struct plan_job *j = arg;
    struct wst_receiver *r = j->r;
    double t0 = wst_now_s(), c0 = wst_thread_cpu_s();

    j->key = wst_plan_input_key(&j->in);
    if (!j->has_cached || j->key != j->cached_key)
        j->status = wst_plan_build(&j->in, &r->log, &j->plan, j->reason,
                                   sizeof(j->reason));
    j->seconds[0] = wst_now_s() - t0;
    j->seconds[1] = wst_thread_cpu_s() - c0;
    /* The plan in force once this job is back: its own, or the cached
     * one, which only plan_done replaces, after this job. */
    const struct wst_plan *pl = j->plan != NULL ? j->plan : r->plan;
    if (j->status == WST_OK && j->encode && pl != NULL) {
        double e0 = wst_now_s();
        j->enc = calloc(j->in.n_senders, sizeof(*j->enc));
        for (uint32_t i = 0; j->enc != NULL && i < j->in.n_senders; i++)
            if (j->unsent[i] &&
                encode_plan(r, pl, i, j->caps, 0, &j->enc[i]) != WST_OK)
                j->enc[i].buf = NULL; /* sent the old way */
        j->encode_s = wst_now_s() - e0;
    }
    if (wst_worker_post(r->worker, plan_done, j) != WST_OK)
        WST_ERROR(&r->log, "cannot post a plan back to the progress thread");
}

static struct plan_job *plan_job_new(struct wst_receiver *r)
{
    struct plan_job *j = calloc(1, sizeof(*j));

    if (j == NULL)
        return NULL;
    j->haves = calloc(r->world_size, sizeof(*j->haves));
    j->n_haves = calloc(r->world_size, sizeof(*j->n_haves));
    j->unsent = calloc(r->world_size, sizeof(*j->unsent));
    if (j->haves == NULL || j->n_haves == NULL || j->unsent == NULL) {
        plan_job_free(j);
        return NULL;
    }
    j->r = r;
    j->generation = r->plan_generation;
    for (uint32_t i = 0; i < r->world_size; i++) {
        j->haves[i] = r->by_rank[i]->have.entries;
        j->n_haves[i] = r->by_rank[i]->have.n_entries;
        j->unsent[i] = !r->by_rank[i]->plan_sent;
    }
    j->in = (struct wst_plan_input){
        .wants = r->wants,
        .n_wants = r->n_wants,
        .regions = r->region_descs,
        .n_regions = r->n_regions,
        .haves = j->haves,
        .n_haves = j->n_haves,
        .n_senders = r->world_size,
        .receiver_rank = r->rank,
    };
    j->has_cached = r->plan != NULL && r->have_plan_key;
    j->cached_key = r->plan_key;
    j->caps = plan_caps(r);
    j->encode = !r->allow_put && !r->device_put;
    return j;
}

/* Plans once every sender rank has sent its manifest, on the planner
 * thread, so the progress thread keeps sending heartbeats; a cached plan
 * is reused when the inputs are the same (the usual case: a sender
 * restarts, or every refit after the first). One plan at a time: a call
 * while one runs waits for its result, which is stale if the manifests
 * changed. */
void wst_recv_try_plan(struct wst_receiver *r)
{
    struct job refusal = {0};

    for (uint32_t i = 0; i < r->world_size; i++)
        if (r->by_rank[i] == NULL || !r->by_rank[i]->have_done)
            return;
    /* Every manifest is in: the wait for missing ones is over, even if a
     * sender leaves before its deadline (a one-shot wstream-send does). */
    r->first_have_ns = 0;
    if (r->moe.refusal != WST_OK) {
        /* The engine's expert layout cannot be served: say so to every
         * sender, write nothing. */
        refusal.status = r->moe.refusal;
        snprintf(refusal.reason, sizeof(refusal.reason), "%s", r->moe.reason);
        WST_ERROR(&r->log, "plan refused: %s", refusal.reason);
        refused(r, refusal.reason);
        wst_recv_for_each_peer(r, wst_recv_refuse_to_peer, &refusal);
        return;
    }
    if (r->planning)
        return; /* plan_done sees the generation moved and comes back */
    struct plan_job *j = plan_job_new(r);
    if (j == NULL || wst_jobq_post(r->planner, plan_run, j) != WST_OK) {
        if (j != NULL)
            plan_job_free(j);
        refusal.status = WST_ERR_NO_MEMORY;
        snprintf(refusal.reason, sizeof(refusal.reason),
                 "no memory to start planning");
        WST_ERROR(&r->log, "%s", refusal.reason);
        wst_recv_for_each_peer(r, wst_recv_refuse_to_peer, &refusal);
        return;
    }
    r->planning = 1;
}
