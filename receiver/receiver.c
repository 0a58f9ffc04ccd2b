/* receiver.c - the receiver library: peers, the plan, refits, commit.
 *
 * Threads besides the caller's:
 *  - the progress thread (common/worker.c) runs everything below that
 *    touches peers and refit state: messages, data arrival, failures, ticks;
 *  - the engine thread (a wst_jobq) runs digest checks and every engine
 *    hook, then posts the result back to the progress thread;
 *  - the repack thread (another wst_jobq) replays staged experts;
 *  - with regions in GPU memory, the completion thread of device.h, which
 *    posts each landed message's host-to-device copy back once it is done.
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
 *
 * Senders are identified by rank: the data header's token is the rank the
 * plan was made for.
 */
#include <wstream/receiver.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "codec.h"
#include "device.h"
#include "digest.h"
#include "dtype.h"
#include "experts.h"
#include "gpu.h"
#include "gpu_probe.h"
#include "jobq.h"
#include "log.h"
#include "manifest.h"
#include "nccl_comm.h"
#include "nccl_link.h"
#include "planner.h"
#include "worker.h"

#define MAX_SENDERS 4096

enum refit_state {
    REFIT_IDLE,
    REFIT_BEGINNING,
    REFIT_RECEIVING,
    REFIT_COMMITTING, /* every layer final: the version is held */
};

enum layer_mark {
    MARK_NONE,     /* no LAYER_DONE yet */
    MARK_WAITING,  /* LAYER_DONE in, am bytes still arriving */
    MARK_CHECKING, /* digest check queued */
    MARK_VERIFIED,
};

struct region {
    char name[WST_NAME_MAX];
    void *data;
    uint64_t length;
    enum wst_mem_type mem; /* WST_MEM_CUDA: not registered with UCX */
    ucp_mem_h memh;
    void *rkey;
    size_t rkey_len;
};

struct peer {
    struct wst_receiver *r;
    wst_conn_t *conn;
    char name[96];
    int hello_done;
    uint32_t rank;
    struct wst_have_manifest have; /* owned once have_done */
    int have_done;
    int plan_sent;
    uint64_t plan_hash; /* hash of this sender's slice of the plan */

    /* A refit of this version failed before this sender began it: its
     * BEGIN, still on the way, must not start a new one. */
    uint64_t failed_version;

    /* current refit */
    uint64_t version; /* BEGIN received for this version */
    enum wst_mover_kind mover;
    int acked;
    uint64_t *recv_bytes; /* [n_layers], am and nccl */
    uint8_t *marks;       /* [n_layers] enum layer_mark */
    uint64_t *digests;    /* [n_layers] from LAYER_DONE */

    /* nccl mover: the communicator (kept across refits), the next layer
     * to post, its first item (index into this sender's items), and the
     * next layer whose exchange completes */
    struct wst_nccl_link *nccl;
    struct wst_nccl_run *nccl_runs; /* [nccl_cap], borrowed by the link */
    size_t nccl_cap; /* its items in the plan the link was set up with */
    int nccl_ready;
    uint32_t nccl_next, nccl_done;
    size_t nccl_item;
};

struct wst_receiver {
    struct wst_logger log;
    char log_name[64];
    uint32_t rank;
    char listen_host[256];
    uint16_t listen_port;
    double timeout_s;
    int allow_put;
    int verify;
    double heartbeat_s;
    double peer_timeout_s;
    struct wst_receiver_hooks hooks;

    wst_worker_t *worker;
    wst_jobq_t *engine;
    int started;

    struct region *regions;
    size_t n_regions;
    struct wst_want *wants;
    size_t n_wants;
    struct wst_region_desc *region_descs;
    struct wst_moe moe;        /* MoE layers, staging pool, loaders */
    uint32_t staging_region;   /* valid when moe.staging != NULL */
    void **region_data;        /* [n_regions] base addresses, for repacks */
    int device;                /* GPU of the device regions, or -1 */
    struct wst_rx_device *dev; /* landing, copies: when device >= 0 */
    wst_jobq_t *repacker; /* runs wst_moe_replay, off the progress thread */

    /* progress-thread state */
    uint32_t world_size;   /* senders; 0 until the first hello */
    struct peer **by_rank; /* [world_size] */
    uint64_t first_have_ns;
    struct wst_plan *plan;
    uint64_t plan_key;
    int have_plan_key;
    size_t *layer_index;   /* [n_senders * (n_layers + 1)] item bounds */
    uint8_t *staged_cells; /* [n_senders * n_layers]: has staged items */
    const struct wst_moe_layer **layer_moe; /* [n_layers]; NULL: dense */

    enum refit_state refit;
    uint64_t version;
    uint64_t generation;
    uint64_t refit_start_ns;
    uint64_t last_progress_ns;
    uint32_t *layer_verified; /* [n_layers] senders verified */
    uint32_t layers_final;
    uint64_t ack_ns;       /* begin acknowledged: the timeline's zero */
    uint32_t credit_next;  /* MoE ordinals [0, credit_next) have credit */
    uint8_t *moe_repacked; /* [moe.n_layers] in this refit */
    int polling;           /* holds the worker busy while a refit runs */

    /* what API threads read: under lock */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct wst_receiver_state state;
    struct wst_layer_times *times; /* [n_times] of the current refit */
    uint32_t n_times;
};

static void refit_fail(struct wst_receiver *r, wst_status_t status,
                       const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- small helpers ---- */

static uint64_t layer_count(const struct wst_receiver *r)
{
    return r->plan != NULL ? r->plan->n_layers : 0;
}

/* Items of sender 'rank' in 'layer': [first, last). */
static void layer_items(const struct wst_receiver *r, uint32_t rank,
                        uint32_t layer, size_t *first, size_t *last)
{
    const size_t *ix = &r->layer_index[(size_t)rank * (r->plan->n_layers + 1)];

    *first = ix[layer];
    *last = ix[layer + 1];
}

/* Where 'offset' bytes into plan item 'it' go. */
static void *item_dest(const struct wst_receiver *r,
                       const struct wst_plan_item *it, uint64_t offset)
{
    return (char *)r->regions[it->region].data + it->dst_offset + offset;
}

static void send_msg(struct wst_receiver *r, struct peer *p,
                     const struct wst_msg *m)
{
    uint8_t *buf = NULL;
    size_t len = 0;

    if (p->conn == NULL)
        return;
    if (wst_msg_encode(m, &buf, &len) != WST_OK) {
        WST_ERROR(&r->log, "cannot encode %s for %s",
                  wst_msg_type_name(m->type), p->name);
        return;
    }
    wst_conn_send(p->conn, buf, len);
}

static void send_error(struct wst_receiver *r, struct peer *p,
                       wst_status_t status, const char *msg)
{
    struct wst_msg m = {.type = WST_MSG_ERROR};

    m.u.error.status = status;
    snprintf(m.u.error.message, sizeof(m.u.error.message), "%s", msg);
    send_msg(r, p, &m);
}

static void for_each_peer(struct wst_receiver *r,
                          void (*fn)(struct wst_receiver *, struct peer *,
                                     void *),
                          void *arg)
{
    for (uint32_t i = 0; i < r->world_size; i++)
        if (r->by_rank[i] != NULL)
            fn(r, r->by_rank[i], arg);
}

static void set_state_reason(struct wst_receiver *r, const char *reason)
{
    snprintf(r->state.reason, sizeof(r->state.reason), "%s", reason);
}

/* ---- peers ---- */

static void peer_reset_refit(struct wst_receiver *r, struct peer *p)
{
    uint64_t n = layer_count(r);

    p->version = 0;
    p->acked = 0;
    p->nccl_next = 0;
    p->nccl_done = 0;
    p->nccl_item = 0;
    free(p->recv_bytes);
    free(p->marks);
    free(p->digests);
    p->recv_bytes = n ? calloc(n, sizeof(*p->recv_bytes)) : NULL;
    p->marks = n ? calloc(n, sizeof(*p->marks)) : NULL;
    p->digests = n ? calloc(n, sizeof(*p->digests)) : NULL;
}

static void peer_free(struct peer *p)
{
    if (p->have_done) {
        struct wst_msg m = {.type = WST_MSG_HAVE, .u.have = p->have};
        wst_msg_release(&m);
    }
    wst_nccl_link_destroy(p->nccl); /* before its borrowed runs go */
    free(p->nccl_runs);
    free(p->recv_bytes);
    free(p->marks);
    free(p->digests);
    free(p);
}

/* Drops a peer: closes its connection and forgets its manifest. A refit it
 * takes part in fails (the caller decides before calling). */
static void peer_drop(struct wst_receiver *r, struct peer *p)
{
    if (p->hello_done && p->rank < r->world_size && r->by_rank[p->rank] == p)
        r->by_rank[p->rank] = NULL;
    if (p->conn != NULL) {
        wst_conn_set_user(p->conn, NULL);
        wst_conn_close(p->conn);
    }
    peer_free(p);
}

/* As peer_drop, after an ERROR: the connection lingers long enough for the
 * peer to read why. */
static void peer_drop_after_error(struct wst_receiver *r, struct peer *p)
{
    if (p->conn != NULL) {
        wst_conn_close_later(p->conn, 0.5);
        p->conn = NULL;
    }
    peer_drop(r, p);
}

static int peer_in_refit(const struct wst_receiver *r, const struct peer *p)
{
    return r->refit != REFIT_IDLE && p->hello_done && p->plan_sent;
}

/* ---- state visible to the API ---- */

static void publish(struct wst_receiver *r,
                    void (*fn)(struct wst_receiver *, void *), void *arg)
{
    pthread_mutex_lock(&r->lock);
    fn(r, arg);
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
}

/* ---- engine-thread jobs ---- */

struct job {
    struct wst_receiver *r;
    uint64_t generation;
    uint64_t version;
    uint32_t rank;
    uint32_t layer;
    uint64_t digest; /* expected */
    double seconds;  /* repack or finalize, measured where it ran */
    wst_status_t status;
    char reason[WST_ERROR_MSG_MAX];
};

static struct job *job_new(struct wst_receiver *r)
{
    struct job *j = calloc(1, sizeof(*j));

    if (j != NULL) {
        j->r = r;
        j->generation = r->generation;
        j->version = r->version;
    }
    return j;
}

static void queue_job(struct wst_receiver *r, wst_job_fn fn, struct job *j)
{
    if (j == NULL || wst_jobq_post(r->engine, fn, j) != WST_OK) {
        free(j);
        refit_fail(r, WST_ERR_NO_MEMORY, "cannot queue engine work");
    }
}

static void verify_done(void *arg);
static void repack_done(void *arg);
static void finalize_done(void *arg);
static void commit_done(void *arg);
static void begin_done(void *arg);

static void job_begin(void *arg)
{
    struct job *j = arg;
    struct wst_receiver *r = j->r;

    j->status = r->hooks.begin != NULL
                    ? r->hooks.begin(r->hooks.arg, j->version, j->reason,
                                     sizeof(j->reason))
                    : WST_OK;
    wst_worker_post(r->worker, begin_done, j);
}

static void job_verify(void *arg)
{
    struct job *j = arg;
    struct wst_receiver *r = j->r;
    size_t first, last;
    struct wst_digest d;

    layer_items(r, j->rank, j->layer, &first, &last);
    wst_digest_init(&d);
    /* Runs in device memory are hashed on the GPU, batched; the digest's
     * sum is order-free, so host and device runs mix. */
    for (size_t k = first; k < last && j->status == WST_OK; k++) {
        const struct wst_plan_item *it = &r->plan->items[k];
        const void *run = item_dest(r, it, 0);
        if (r->regions[it->region].mem == WST_MEM_CUDA)
            j->status = wst_rx_device_digest_add(r->dev, &d, run, it->length);
        else
            wst_digest_update(&d, run, it->length);
    }
    if (r->dev != NULL && j->status == WST_OK)
        j->status = wst_rx_device_digest_flush(r->dev, &d);
    uint64_t got = wst_digest_final(&d);
    if (j->status != WST_OK) {
        snprintf(j->reason, sizeof(j->reason),
                 "digest of layer %u from sender rank %u on GPU %d failed: %s",
                 j->layer, j->rank, r->device, wst_status_string(j->status));
    } else if (got != j->digest) {
        j->status = WST_ERR_INTEGRITY;
        snprintf(j->reason, sizeof(j->reason),
                 "digest mismatch in layer %u from sender rank %u (version "
                 "%llu): sender %016llx, received %016llx",
                 j->layer, j->rank, (unsigned long long)j->version,
                 (unsigned long long)j->digest, (unsigned long long)got);
    }
    wst_worker_post(r->worker, verify_done, j);
}

static void job_skip_verify(void *arg)
{
    struct job *j = arg;

    wst_worker_post(j->r->worker, verify_done, j);
}

/* On the repack thread: the layer is complete and verified, and its slot
 * is not reused before repack_done grants its next credit. */
static void job_repack(void *arg)
{
    struct job *j = arg;
    struct wst_receiver *r = j->r;
    const struct wst_moe_layer *ml = r->layer_moe[j->layer];
    double t0 = wst_now_s();

    if (r->moe.staging_device >= 0)
        j->status = wst_rx_device_repack(r->dev, &r->moe, ml, r->region_data,
                                         j->reason, sizeof(j->reason));
    else
        j->status = wst_moe_replay(&r->moe, ml, r->region_data, j->reason,
                                   sizeof(j->reason));
    j->seconds = wst_now_s() - t0;
    wst_worker_post(r->worker, repack_done, j);
}

static void job_finalize(void *arg)
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

static void job_commit(void *arg)
{
    struct job *j = arg;
    struct wst_receiver *r = j->r;

    if (r->hooks.committed != NULL)
        r->hooks.committed(r->hooks.arg, j->version);
    wst_worker_post(r->worker, commit_done, j);
}

static void job_unusable(void *arg)
{
    struct job *j = arg;
    struct wst_receiver *r = j->r;

    if (r->hooks.unusable != NULL)
        r->hooks.unusable(r->hooks.arg, j->status, j->reason);
    free(j);
}

/* The engine paused for a refit that was refused before anything was
 * written: let it serve its committed version again. */
static void job_resume(void *arg)
{
    struct job *j = arg;
    struct wst_receiver *r = j->r;

    if (r->hooks.committed != NULL && j->version != 0)
        r->hooks.committed(r->hooks.arg, j->version);
    free(j);
}

/* ---- refit state machine (progress thread) ---- */

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
    send_error(r, p, j->status, j->reason);
}

static void pub_refused(struct wst_receiver *r, void *arg)
{
    /* An unusable receiver keeps saying why it is unusable. */
    if (r->state.usable)
        set_state_reason(r, arg);
    r->state.refit_in_progress = 0;
}

static void pub_unusable(struct wst_receiver *r, void *arg)
{
    set_state_reason(r, arg);
    r->state.usable = 0;
    r->state.refit_in_progress = 0;
    r->state.refits_failed++;
}

static void refit_end(struct wst_receiver *r)
{
    r->refit = REFIT_IDLE;
    r->generation++;
    if (r->polling) {
        wst_worker_busy(r->worker, -1);
        r->polling = 0;
    }
}

static void nccl_abort_peer(struct wst_receiver *r, struct peer *p, void *arg)
{
    (void)r;
    (void)arg;
    wst_nccl_link_abort(p->nccl);
}

static void refit_fail(struct wst_receiver *r, wst_status_t status,
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
    j = job_new(r);
    if (j == NULL) {
        refit_end(r);
        return;
    }
    j->status = status;
    va_start(ap, fmt);
    vsnprintf(j->reason, sizeof(j->reason), fmt, ap);
    va_end(ap);
    for_each_peer(r, error_to_peer, j);
    /* No receive may go on writing live memory once the refit failed:
     * their communicators are aborted (the senders reconnect and set up
     * new ones). */
    for_each_peer(r, nccl_abort_peer, NULL);
    if (r->refit == REFIT_BEGINNING) {
        /* Nothing was written: keep serving the committed version. */
        WST_ERROR(&r->log, "refit of version %llu refused: %s",
                  (unsigned long long)r->version, j->reason);
        publish(r, pub_refused, j->reason);
        free(j);
        refit_end(r);
        return;
    }
    WST_ERROR(&r->log, "refit of version %llu failed, receiver unusable: %s",
              (unsigned long long)r->version, j->reason);
    publish(r, pub_unusable, j->reason);
    refit_end(r);
    if (wst_jobq_post(r->engine, job_unusable, j) != WST_OK)
        free(j);
}

/* ---- the nccl mover ---- */

static uint64_t expected_bytes(const struct wst_receiver *r, uint32_t rank,
                               uint32_t layer)
{
    return r->plan->layer_bytes[(size_t)rank * r->plan->n_layers + layer];
}

static void count_layer(struct wst_receiver *r, struct peer *p, uint32_t layer,
                        uint64_t len);

/* Progress thread: layer nccl_done of this sender is in its destinations
 * (exchanges complete in the order they were posted). */
static void nccl_received(void *arg, wst_status_t status)
{
    struct peer *p = arg;
    struct wst_receiver *r = p->r;
    uint32_t layer = p->nccl_done++;

    if (r->refit != REFIT_RECEIVING || p->version != r->version || !p->acked)
        return;
    if (status != WST_OK) {
        refit_fail(r, status, "sender %s: nccl receive of layer %u failed",
                   p->name, layer);
        return;
    }
    count_layer(r, p, layer, expected_bytes(r, p->rank, layer));
}

/* Posts this sender's layers, in order, as one receive exchange each, as
 * far as their destinations are ready: a layer that stages experts waits
 * for its credit (its staging slot). The sender posts its sends in the
 * same order, which is how NCCL pairs them. */
static void nccl_post(struct wst_receiver *r, struct peer *p)
{
    const struct wst_plan_item *items =
        r->plan->items + r->plan->sender_first[p->rank];
    size_t n_items =
        r->plan->sender_first[p->rank + 1] - r->plan->sender_first[p->rank];

    if (p->mover != WST_MOVER_NCCL || p->nccl == NULL)
        return;
    while (p->nccl_next < r->plan->n_layers) {
        uint32_t layer = p->nccl_next;
        size_t first = p->nccl_item, n = 0;
        for (; first + n < n_items && items[first + n].layer == layer; n++)
            if (items[first + n].staged &&
                (r->layer_moe[layer] == NULL ||
                 r->layer_moe[layer]->ordinal >= r->credit_next))
                return; /* credit_to_peer posts again */
        if (first + n > p->nccl_cap) {
            /* The runs were sized for the plan of the link's set-up. */
            refit_fail(r, WST_ERR_STATE,
                       "sender %s: the plan changed under its nccl link",
                       p->name);
            return;
        }
        struct wst_nccl_run *runs = p->nccl_runs + first;
        for (size_t k = 0; k < n; k++) {
            runs[k].ptr = item_dest(r, &items[first + k], 0);
            runs[k].bytes = items[first + k].length;
            runs[k].peer = 0; /* the sender */
        }
        wst_status_t st =
            wst_nccl_link_post(p->nccl, NULL, 0, runs, n, nccl_received, p);
        if (st == WST_ERR_BUSY)
            return; /* nccl_received makes room; count_layer posts again */
        if (st != WST_OK) {
            refit_fail(r, st, "sender %s: posting layer %u to nccl failed",
                       p->name, layer);
            return;
        }
        p->nccl_item = first + n;
        p->nccl_next++;
    }
}

/* Progress thread: this side of the communicator is ready (or not). */
static void nccl_ready(void *arg, wst_status_t status)
{
    struct peer *p = arg;
    struct wst_receiver *r = p->r;

    if (status != WST_OK) {
        send_error(r, p, status < 0 ? status : WST_ERR_TRANSPORT,
                   "nccl communicator failed on the receiver");
        peer_drop_after_error(r, p);
        return;
    }
    struct wst_msg m = {.type = WST_MSG_NCCL_READY};
    m.u.nccl_ready.plan_hash = p->plan_hash;
    p->nccl_ready = 1;
    WST_INFO(&r->log,
             "sender %s: nccl communicator ready on GPU %d (rank 1 of "
             "2)",
             p->name, r->device);
    send_msg(r, p, &m);
}

/* Every destination of an nccl refit must be device memory. */
static int nccl_possible(const struct wst_receiver *r)
{
    if (r->device < 0 || !wst_nccl_available())
        return 0;
    for (size_t i = 0; i < r->n_regions; i++)
        if (r->regions[i].mem != WST_MEM_CUDA)
            return 0;
    return 1;
}

static void on_nccl_setup(struct wst_receiver *r, struct peer *p,
                          const struct wst_nccl_setup *ns)
{
    const char *why = NULL;

    if (!p->plan_sent || p->nccl != NULL || r->refit != REFIT_IDLE)
        why = "unexpected nccl setup";
    else if (!nccl_possible(r))
        why = "this receiver cannot run nccl (its memory is not all on one "
              "GPU, or it was built without NCCL)";
    if (why != NULL) {
        send_error(r, p, WST_ERR_UNSUPPORTED, why);
        peer_drop_after_error(r, p);
        return;
    }
    /* Room for every item's run, once: a refit fills and posts slices. */
    size_t n_items =
        r->plan->sender_first[p->rank + 1] - r->plan->sender_first[p->rank];
    p->nccl_runs = calloc(n_items ? n_items : 1, sizeof(*p->nccl_runs));
    p->nccl_cap = n_items;
    wst_status_t st =
        p->nccl_runs == NULL
            ? WST_ERR_NO_MEMORY
            : wst_nccl_link_create(&r->log, r->worker, r->device, ns->unique_id,
                                   2, 1, r->timeout_s, nccl_ready, p, &p->nccl);
    if (st != WST_OK) {
        send_error(r, p, st, "cannot start an nccl communicator");
        peer_drop_after_error(r, p);
    }
}

static void send_credit(struct wst_receiver *r, struct peer *p, uint32_t layer)
{
    struct wst_msg m = {.type = WST_MSG_CREDIT};

    if (!r->staged_cells[(size_t)p->rank * r->plan->n_layers + layer])
        return;
    m.u.credit.version = r->version;
    m.u.credit.layer = layer;
    send_msg(r, p, &m);
}

static void credit_to_peer(struct wst_receiver *r, struct peer *p, void *arg)
{
    if (p->acked && p->version == r->version) {
        send_credit(r, p, *(const uint32_t *)arg);
        nccl_post(r, p);
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
        for_each_peer(r, credit_to_peer, &layer);
    }
}

static double since_ack(const struct wst_receiver *r)
{
    return (double)(wst_now_ns() - r->ack_ns) / 1e9;
}

static void ack_peer(struct wst_receiver *r, struct peer *p, void *arg)
{
    struct wst_msg m = {.type = WST_MSG_BEGIN};

    (void)arg;
    if (p->version != r->version || p->acked)
        return;
    p->acked = 1;
    m.u.begin.version = r->version;
    m.u.begin.plan_hash = p->plan_hash;
    m.u.begin.ack = 1;
    send_msg(r, p, &m);
    for (uint32_t k = 0; k < r->credit_next; k++)
        send_credit(r, p, r->moe.layers[k].layer);
    nccl_post(r, p);
}

static void pub_in_progress(struct wst_receiver *r, void *arg)
{
    (void)arg;
    r->state.refit_in_progress = 1;
}

static void begin_done(void *arg)
{
    struct job *j = arg;
    struct wst_receiver *r = j->r;

    if (j->generation != r->generation) {
        /* Refused meanwhile: the engine paused for nothing. It may serve
         * again only if its live memory is the committed version; an
         * unusable receiver's is not, so the engine hears why instead. */
        if (j->status == WST_OK && r->state.usable) {
            j->version = r->state.committed_version;
            if (wst_jobq_post(r->engine, job_resume, j) == WST_OK)
                return;
        } else if (j->status == WST_OK) {
            j->status = WST_ERR_UNUSABLE;
            snprintf(j->reason, sizeof(j->reason), "%s", r->state.reason);
            if (wst_jobq_post(r->engine, job_unusable, j) == WST_OK)
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
        refit_fail(r, st, "engine refused to begin version %llu: %s",
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
    for_each_peer(r, ack_peer, NULL);
}

/* A job back from the engine or repack thread: nonzero when its refit is
 * still the current one and the job succeeded. Otherwise the job is freed
 * here, after failing the refit if it was current. */
static int job_current(struct wst_receiver *r, struct job *j)
{
    if (j->generation == r->generation && j->status == WST_OK)
        return 1;
    if (j->generation == r->generation)
        refit_fail(r, j->status, "%s", j->reason);
    free(j);
    return 0;
}

static void queue_verify(struct wst_receiver *r, struct peer *p, uint32_t layer)
{
    struct job *j = job_new(r);

    p->marks[layer] = MARK_CHECKING;
    if (j == NULL) {
        refit_fail(r, WST_ERR_NO_MEMORY, "cannot queue a digest check");
        return;
    }
    j->rank = p->rank;
    j->layer = layer;
    j->digest = p->digests[layer];
    /* Unverified layers still pass through the engine thread, so events
     * keep one order. */
    queue_job(r, r->verify ? job_verify : job_skip_verify, j);
}

static void verify_done(void *arg)
{
    struct job *j = arg;
    struct wst_receiver *r = j->r;

    if (!job_current(r, j))
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
    r->times[layer].received = since_ack(r);
    pthread_mutex_unlock(&r->lock);
    if (r->layer_moe[layer] == NULL) {
        queue_job(r, job_finalize, j);
        return;
    }
    if (wst_jobq_post(r->repacker, job_repack, j) != WST_OK) {
        free(j);
        refit_fail(r, WST_ERR_NO_MEMORY, "cannot queue the repack of layer %u",
                   layer);
    }
}

static void repack_done(void *arg)
{
    struct job *j = arg;
    struct wst_receiver *r = j->r;

    if (!job_current(r, j))
        return;
    const struct wst_moe_layer *ml = r->layer_moe[j->layer];
    pthread_mutex_lock(&r->lock);
    r->times[j->layer].repacked = since_ack(r);
    r->times[j->layer].repack_seconds = j->seconds;
    pthread_mutex_unlock(&r->lock);
    WST_DEBUG(&r->log,
              "version %llu: layer %u repacked (%u experts, %s) in %.3f ms",
              (unsigned long long)r->version, j->layer, ml->shape.n_local,
              ml->loader->name, j->seconds * 1e3);
    r->last_progress_ns = wst_now_ns();
    r->moe_repacked[ml->ordinal] = 1;
    grant_credits(r);
    queue_job(r, job_finalize, j);
}

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
        b->by_mover[p->mover] += expected_bytes(r, p->rank, layer);
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
    send_msg(r, p, &m);
}

/* One line per refit on the way device bytes came in: the copies' delay
 * is what a busy GPU or a slow host-to-device link shows in. */
static void log_landing(struct wst_receiver *r)
{
    struct wst_landing_stats ls;

    if (r->dev == NULL)
        return;
    wst_rx_device_take_stats(r->dev, &ls);
    if (ls.copies == 0)
        return;
    WST_INFO(&r->log,
             "version %llu: %llu messages (%.1f MiB) landed and copied to GPU "
             "%d, %.3f ms mean and %.3f ms max from copy to on the GPU; %llu "
             "waited for room to land",
             (unsigned long long)r->version, (unsigned long long)ls.copies,
             (double)ls.bytes / (1 << 20), r->device,
             (double)ls.latency_sum_ns / (double)ls.copies / 1e6,
             (double)ls.latency_max_ns / 1e6, (unsigned long long)ls.parked);
}

static void finalize_done(void *arg)
{
    struct job *j = arg;
    struct wst_receiver *r = j->r;

    if (!job_current(r, j))
        return;
    pthread_mutex_lock(&r->lock);
    r->times[j->layer].finalized = since_ack(r);
    r->times[j->layer].finalize_seconds = j->seconds;
    pthread_mutex_unlock(&r->lock);
    if (++r->layers_final < r->plan->n_layers) {
        free(j);
        return;
    }
    /* Every byte is in place and verified: the version is committed now,
     * before the engine is told to serve it. */
    struct refit_bytes bytes = {.total = r->plan->total_bytes};
    for_each_peer(r, add_peer_bytes, &bytes);
    r->refit = REFIT_COMMITTING;
    publish(r, pub_committed, &bytes);
    WST_INFO(&r->log, "version %llu committed: %llu bytes in %.3f s",
             (unsigned long long)r->version, (unsigned long long)bytes.total,
             r->state.last_refit_seconds);
    log_landing(r);
    queue_job(r, job_commit, j);
}

static void commit_done(void *arg)
{
    struct job *j = arg;
    struct wst_receiver *r = j->r;

    if (!job_current(r, j))
        return;
    free(j);
    for_each_peer(r, commit_to_peer, NULL);
    refit_end(r);
}

static void refit_start(struct wst_receiver *r, uint64_t version)
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
    if (r->dev != NULL) {
        struct wst_landing_stats drop;
        wst_rx_device_take_stats(r->dev, &drop); /* counts start here */
    }
    pthread_mutex_lock(&r->lock);
    memset(r->times, 0, r->plan->n_layers * sizeof(*r->times));
    pthread_mutex_unlock(&r->lock);
    for (uint32_t i = 0; i < r->world_size; i++)
        if (r->by_rank[i] != NULL)
            peer_reset_refit(r, r->by_rank[i]);
    publish(r, pub_in_progress, NULL);
    j = job_new(r);
    queue_job(r, job_begin, j);
}

/* ---- planning ---- */

static wst_status_t build_layer_index(struct wst_receiver *r)
{
    const struct wst_plan *pl = r->plan;
    size_t stride = (size_t)pl->n_layers + 1;

    free(r->layer_index);
    free(r->layer_verified);
    free(r->staged_cells);
    free(r->layer_moe);
    free(r->moe_repacked);
    r->layer_index =
        calloc((size_t)pl->n_senders * stride, sizeof(*r->layer_index));
    r->layer_verified = calloc(pl->n_layers, sizeof(*r->layer_verified));
    r->staged_cells = calloc((size_t)pl->n_senders * pl->n_layers, 1);
    r->layer_moe = calloc(pl->n_layers, sizeof(*r->layer_moe));
    r->moe_repacked = calloc(r->moe.n_layers + 1, 1);
    struct wst_layer_times *times = calloc(pl->n_layers, sizeof(*times));
    if (r->layer_index == NULL || r->layer_verified == NULL ||
        r->staged_cells == NULL || r->layer_moe == NULL ||
        r->moe_repacked == NULL || times == NULL) {
        free(times);
        return WST_ERR_NO_MEMORY;
    }
    pthread_mutex_lock(&r->lock);
    free(r->times);
    r->times = times;
    r->n_times = pl->n_layers;
    pthread_mutex_unlock(&r->lock);
    for (size_t i = 0; i < pl->n_items; i++)
        if (pl->items[i].staged)
            r->staged_cells[(size_t)pl->items[i].sender * pl->n_layers +
                            pl->items[i].layer] = 1;
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

static void send_plan(struct wst_receiver *r, struct peer *p)
{
    const struct wst_plan *pl = r->plan;
    struct wst_msg m = {.type = WST_MSG_PLAN};
    size_t first = pl->sender_first[p->rank];
    size_t n = pl->sender_first[p->rank + 1] - first;
    struct wst_wire_region *regs =
        calloc(r->n_regions ? r->n_regions : 1, sizeof(*regs));

    if (regs == NULL) {
        send_error(r, p, WST_ERR_NO_MEMORY, "no memory for the plan");
        return;
    }
    for (size_t i = 0; i < r->n_regions; i++) {
        regs[i].base = (uint64_t)(uintptr_t)r->regions[i].data;
        regs[i].length = r->regions[i].length;
        if (r->allow_put) {
            regs[i].rkey.len = r->regions[i].rkey_len;
            regs[i].rkey.data = r->regions[i].rkey;
        }
    }
    p->plan_hash =
        wst_plan_hash_items(pl->n_senders, pl->n_layers, &pl->items[first], n);
    m.u.plan.plan_hash = p->plan_hash;
    m.u.plan.sender = p->rank;
    m.u.plan.n_senders = pl->n_senders;
    m.u.plan.n_layers = pl->n_layers;
    m.u.plan.mover = r->allow_put ? WST_MOVER_PUT : WST_MOVER_AM;
    m.u.plan.caps =
        (r->device >= 0 ? WST_CAP_DEVICE_DST : 0) |
        (wst_worker_supports_cuda(r->worker) ? WST_CAP_UCX_CUDA : 0) |
        (nccl_possible(r) ? WST_CAP_NCCL : 0);
    m.u.plan.n_items = n;
    m.u.plan.items = &pl->items[first];
    m.u.plan.n_regions = r->n_regions;
    m.u.plan.regions = regs;
    send_msg(r, p, &m);
    free(regs);
    p->plan_sent = 1;
}

static void refuse_to_peer(struct wst_receiver *r, struct peer *p, void *arg)
{
    const struct job *j = arg;

    send_error(r, p, j->status, j->reason);
}

static void pub_reason(struct wst_receiver *r, void *arg)
{
    set_state_reason(r, arg);
}

static void pub_plan_time(struct wst_receiver *r, void *arg)
{
    r->state.plan_seconds = *(const double *)arg;
}

/* Plans once every sender rank has sent its manifest; a cached plan is
 * reused when the inputs are the same (the usual case: a sender restarts,
 * or every refit after the first). */
static void try_plan(struct wst_receiver *r)
{
    const struct wst_have **haves;
    size_t *n_haves;
    struct job refusal = {0};

    for (uint32_t i = 0; i < r->world_size; i++)
        if (r->by_rank[i] == NULL || !r->by_rank[i]->have_done)
            return;
    /* Every manifest is in: the wait for missing ones is over, even if a
     * sender leaves before its deadline (a one-shot wstream-send does). */
    r->first_have_ns = 0;
    haves = calloc(r->world_size, sizeof(*haves));
    n_haves = calloc(r->world_size, sizeof(*n_haves));
    if (haves == NULL || n_haves == NULL)
        goto out_free;
    for (uint32_t i = 0; i < r->world_size; i++) {
        haves[i] = r->by_rank[i]->have.entries;
        n_haves[i] = r->by_rank[i]->have.n_entries;
    }
    struct wst_plan_input in = {
        .wants = r->wants,
        .n_wants = r->n_wants,
        .regions = r->region_descs,
        .n_regions = r->n_regions,
        .haves = haves,
        .n_haves = n_haves,
        .n_senders = r->world_size,
        .receiver_rank = r->rank,
    };
    if (r->moe.refusal != WST_OK) {
        /* The engine's expert layout cannot be served: say so to every
         * sender, write nothing. */
        refusal.status = r->moe.refusal;
        snprintf(refusal.reason, sizeof(refusal.reason), "%s", r->moe.reason);
        WST_ERROR(&r->log, "plan refused: %s", refusal.reason);
        publish(r, pub_reason, refusal.reason);
        for_each_peer(r, refuse_to_peer, &refusal);
        goto out_free;
    }
    uint64_t key = wst_plan_input_key(&in);
    if (r->plan == NULL || !r->have_plan_key || key != r->plan_key) {
        struct wst_plan *plan = NULL;
        double t0 = wst_now_s();
        refusal.status = wst_plan_build(&in, &r->log, &plan, refusal.reason,
                                        sizeof(refusal.reason));
        if (refusal.status != WST_OK) {
            /* A refusal changes nothing: the live buffers and the
             * committed version stay as they are. */
            publish(r, pub_reason, refusal.reason);
            for_each_peer(r, refuse_to_peer, &refusal);
            goto out_free;
        }
        wst_plan_destroy(r->plan);
        r->plan = plan;
        r->plan_key = key;
        r->have_plan_key = 1;
        if (build_layer_index(r) != WST_OK) {
            wst_plan_destroy(r->plan);
            r->plan = NULL;
            goto out_free;
        }
        double plan_s = wst_now_s() - t0;
        publish(r, pub_plan_time, &plan_s);
        WST_INFO(&r->log,
                 "plan %016llx: %zu items, %llu bytes from %u senders, %u "
                 "layers, built in %.3f ms",
                 (unsigned long long)plan->hash, plan->n_items,
                 (unsigned long long)plan->total_bytes, plan->n_senders,
                 plan->n_layers, plan_s * 1e3);
    }
    for (uint32_t i = 0; i < r->world_size; i++)
        if (!r->by_rank[i]->plan_sent) {
            peer_reset_refit(r, r->by_rank[i]);
            send_plan(r, r->by_rank[i]);
        }
out_free:
    free(haves);
    free(n_haves);
}

/* ---- messages ---- */

static void reply_hello(struct wst_receiver *r, struct peer *p)
{
    struct wst_msg m = {.type = WST_MSG_HELLO};
    const void *addr;
    size_t len;

    wst_worker_address(r->worker, &addr, &len);
    m.u.hello.protocol_version = WST_PROTOCOL_VERSION;
    m.u.hello.role = WST_ROLE_RECEIVER;
    m.u.hello.rank = r->rank;
    m.u.hello.world_size = 1;
    m.u.hello.worker_address.len = len;
    m.u.hello.worker_address.data = (uint8_t *)addr;
    send_msg(r, p, &m);

    memset(&m, 0, sizeof(m));
    m.type = WST_MSG_WANT_SUMMARY;
    pthread_mutex_lock(&r->lock);
    m.u.want_summary.committed_version = r->state.committed_version;
    m.u.want_summary.usable = r->state.usable;
    if (!r->state.usable)
        snprintf(m.u.want_summary.reason, sizeof(m.u.want_summary.reason), "%s",
                 r->state.reason);
    pthread_mutex_unlock(&r->lock);
    m.u.want_summary.receiver_rank = r->rank;
    m.u.want_summary.n_wants = (uint32_t)r->n_wants;
    m.u.want_summary.n_layers = (uint32_t)layer_count(r);
    for (size_t i = 0; i < r->n_wants; i++)
        m.u.want_summary.total_bytes +=
            wst_box_elems(&r->wants[i].box) *
            wst_dtype_size(r->wants[i].tensor.dtype);
    send_msg(r, p, &m);
}

static int any_peer(const struct wst_receiver *r)
{
    for (uint32_t i = 0; i < r->world_size; i++)
        if (r->by_rank[i] != NULL)
            return 1;
    return 0;
}

static wst_status_t set_world(struct wst_receiver *r, uint32_t world)
{
    struct peer **by_rank = calloc(world, sizeof(*by_rank));

    if (by_rank == NULL)
        return WST_ERR_NO_MEMORY;
    free(r->by_rank);
    r->by_rank = by_rank;
    r->world_size = world;
    return WST_OK;
}

/* Returns nonzero when the peer was dropped. */
static int on_hello(struct wst_receiver *r, struct peer *p,
                    const struct wst_hello *h)
{
    char why[160] = "";
    wst_status_t st = WST_ERR_PROTOCOL;

    if (h->protocol_version != WST_PROTOCOL_VERSION) {
        st = WST_ERR_VERSION;
        snprintf(why, sizeof(why), "protocol version %u, expected %u",
                 h->protocol_version, WST_PROTOCOL_VERSION);
    } else if (p->hello_done || h->role != WST_ROLE_SENDER) {
        snprintf(why, sizeof(why), "unexpected hello");
    } else if (h->world_size == 0 || h->world_size > MAX_SENDERS ||
               h->rank >= h->world_size) {
        snprintf(why, sizeof(why), "rank %u of world %u is invalid", h->rank,
                 h->world_size);
    } else if (r->world_size != h->world_size && any_peer(r)) {
        snprintf(why, sizeof(why), "world size %u, other senders say %u",
                 h->world_size, r->world_size);
    } else if (r->world_size != h->world_size &&
               set_world(r, h->world_size) != WST_OK) {
        st = WST_ERR_NO_MEMORY;
        snprintf(why, sizeof(why), "no memory");
    }
    if (why[0] != '\0') {
        WST_WARN(&r->log, "sender %s: %s", p->name, why);
        send_error(r, p, st, why);
        peer_drop_after_error(r, p);
        return 1;
    }
    struct peer *old = r->by_rank[h->rank];
    if (old != NULL) {
        /* The rank restarted: its old connection is stale. */
        WST_WARN(&r->log, "sender rank %u reconnected from %s; dropping %s",
                 h->rank, p->name, old->name);
        if (peer_in_refit(r, old))
            refit_fail(r, WST_ERR_PEER_FAILED,
                       "sender rank %u restarted during the refit", h->rank);
        peer_drop(r, old);
    }
    p->hello_done = 1;
    p->rank = h->rank;
    r->by_rank[h->rank] = p;
    snprintf(p->name + strlen(p->name), sizeof(p->name) - strlen(p->name),
             " (rank %u)", h->rank);
    WST_INFO(&r->log, "sender %s connected, world %u", p->name, h->world_size);
    reply_hello(r, p);
    return 0;
}

static void on_have(struct wst_receiver *r, struct peer *p, struct wst_msg *m)
{
    if (!p->hello_done || p->have_done || m->u.have.rank != p->rank) {
        send_error(r, p, WST_ERR_PROTOCOL, "unexpected have manifest");
        return;
    }
    /* Shards in host or device memory alike (the codec checked the type):
     * how the sender reads device shards is its own business (bounce ring,
     * or UCX with CUDA), and either way the bytes arrive as a host
     * sender's do. */
    p->have = m->u.have; /* take ownership */
    memset(&m->u.have, 0, sizeof(m->u.have));
    p->have_done = 1;
    if (r->first_have_ns == 0)
        r->first_have_ns = wst_now_ns();
    WST_DEBUG(&r->log, "sender %s: have manifest of %zu shards", p->name,
              p->have.n_entries);
    try_plan(r);
}

static void on_begin(struct wst_receiver *r, struct peer *p,
                     const struct wst_begin *b)
{
    char why[160] = "";

    if (b->ack || !p->plan_sent || b->plan_hash != p->plan_hash)
        snprintf(why, sizeof(why), "begin without the current plan");
    else if (b->mover == WST_MOVER_NCCL && !p->nccl_ready)
        snprintf(why, sizeof(why), "nccl mover without a ready communicator");
    else if (b->mover == WST_MOVER_PUT && !r->allow_put)
        snprintf(why, sizeof(why), "put mover, but no remote keys were given");
    else if (r->refit == REFIT_IDLE && b->version == p->failed_version)
        snprintf(why, sizeof(why),
                 "version %llu failed before this sender began it; retry "
                 "on a new connection",
                 (unsigned long long)b->version);
    else if (r->refit != REFIT_IDLE && b->version != r->version)
        snprintf(why, sizeof(why), "busy with version %llu",
                 (unsigned long long)r->version);
    else if (r->refit == REFIT_IDLE && b->version <= r->state.committed_version)
        snprintf(why, sizeof(why), "version %llu is not above %llu",
                 (unsigned long long)b->version,
                 (unsigned long long)r->state.committed_version);
    if (why[0] != '\0') {
        send_error(r, p, r->refit != REFIT_IDLE ? WST_ERR_BUSY : WST_ERR_STATE,
                   why);
        return;
    }
    if (r->refit == REFIT_IDLE)
        refit_start(r, b->version);
    p->version = b->version;
    p->mover = b->mover;
    if (r->refit == REFIT_RECEIVING)
        ack_peer(r, p, NULL);
}

static void on_layer_done(struct wst_receiver *r, struct peer *p,
                          const struct wst_layer_done *ld)
{
    if (r->refit != REFIT_RECEIVING || !p->acked || ld->version != r->version ||
        ld->layer >= r->plan->n_layers || p->marks[ld->layer] != MARK_NONE) {
        refit_fail(r, WST_ERR_PROTOCOL,
                   "sender %s: unexpected layer-done for layer %u of "
                   "version %llu",
                   p->name, ld->layer, (unsigned long long)ld->version);
        return;
    }
    uint64_t want = expected_bytes(r, p->rank, ld->layer);
    if (ld->bytes != want) {
        refit_fail(r, WST_ERR_INTEGRITY,
                   "sender %s: layer %u has %llu bytes, the plan %llu", p->name,
                   ld->layer, (unsigned long long)ld->bytes,
                   (unsigned long long)want);
        return;
    }
    r->last_progress_ns = wst_now_ns();
    p->digests[ld->layer] = ld->digest;
    if (p->mover != WST_MOVER_PUT && p->recv_bytes[ld->layer] < want) {
        p->marks[ld->layer] = MARK_WAITING;
        return;
    }
    queue_verify(r, p, ld->layer);
}

static void on_message(void *arg, wst_conn_t *conn, const void *buf, size_t len)
{
    struct wst_receiver *r = arg;
    struct peer *p = wst_conn_user(conn);
    struct wst_msg m;
    char err[256];

    if (p == NULL)
        return;
    wst_status_t st =
        wst_msg_decode(buf, len, WST_MSG_MAX_DEFAULT, &m, err, sizeof(err));
    if (st != WST_OK) {
        /* Bad input: a clear error to that peer, nothing else changes
         * (unless it was part of a refit, which cannot complete now). */
        WST_WARN(&r->log, "sender %s: bad message: %s", p->name, err);
        send_error(r, p, st, err);
        if (peer_in_refit(r, p))
            refit_fail(r, st, "sender %s sent a bad message: %s", p->name, err);
        peer_drop_after_error(r, p);
        return;
    }
    switch (m.type) {
    case WST_MSG_HELLO:
        on_hello(r, p, &m.u.hello);
        break;
    case WST_MSG_HAVE:
        on_have(r, p, &m);
        break;
    case WST_MSG_BEGIN:
        on_begin(r, p, &m.u.begin);
        break;
    case WST_MSG_LAYER_DONE:
        on_layer_done(r, p, &m.u.layer_done);
        break;
    case WST_MSG_NCCL_SETUP:
        on_nccl_setup(r, p, &m.u.nccl_setup);
        break;
    case WST_MSG_HEARTBEAT:
        break;
    case WST_MSG_ERROR:
        WST_WARN(&r->log, "sender %s reports: %s", p->name, m.u.error.message);
        if (peer_in_refit(r, p) && p->version == r->version)
            refit_fail(r, (wst_status_t)m.u.error.status,
                       "sender %s failed: %s", p->name, m.u.error.message);
        break;
    default:
        send_error(r, p, WST_ERR_PROTOCOL, "unexpected message");
        break;
    }
    wst_msg_release(&m);
}

static void on_accepted(void *arg, wst_conn_t *conn)
{
    struct wst_receiver *r = arg;
    struct peer *p = calloc(1, sizeof(*p));

    if (p == NULL) {
        wst_conn_close(conn);
        return;
    }
    p->r = r;
    p->conn = conn;
    snprintf(p->name, sizeof(p->name), "%s", wst_conn_name(conn));
    wst_conn_set_user(conn, p);
}

static void on_conn_failed(void *arg, wst_conn_t *conn, wst_status_t status,
                           const char *why)
{
    struct wst_receiver *r = arg;
    struct peer *p = wst_conn_user(conn);

    if (p == NULL)
        return;
    if (peer_in_refit(r, p))
        refit_fail(r, status, "sender %s lost: %s", p->name, why);
    else
        WST_INFO(&r->log, "sender %s disconnected: %s", p->name, why);
    peer_drop(r, p);
}

/* ---- data (am mover) ---- */

/* Whether a data message lands exactly where the plan puts it: 'len'
 * bytes at 'offset' into one item, or (count > 1) whole items [item,
 * item + count) of one layer and region whose destinations follow each
 * other, 'len' bytes in all. items[0..n) are the sender's. */
static int data_fits(const struct wst_plan_item *items, size_t n,
                     const struct wst_data_hdr *hdr, size_t len)
{
    const struct wst_plan_item *it = &items[hdr->item];
    uint64_t sum = 0;

    if (hdr->count == 1)
        return hdr->offset <= it->length && len <= it->length - hdr->offset;
    if (hdr->count == 0 || hdr->count > n - hdr->item || hdr->offset != 0)
        return 0;
    for (uint32_t k = 0; k < hdr->count; k++) {
        const struct wst_plan_item *x = &it[k];
        if (x->layer != it->layer || x->region != it->region ||
            x->staged != it->staged || x->dst_offset != it->dst_offset + sum)
            return 0;
        sum += x->length;
    }
    return sum == len;
}

static wst_status_t on_data_dest(void *arg, const struct wst_data_hdr *hdr,
                                 size_t len, void **dest_p)
{
    struct wst_receiver *r = arg;
    struct peer *p = hdr->token < r->world_size ? r->by_rank[hdr->token] : NULL;

    if (r->refit != REFIT_RECEIVING || hdr->version != r->version ||
        p == NULL || !p->acked) {
        WST_DEBUG(&r->log, "data for version %llu dropped (not receiving it)",
                  (unsigned long long)hdr->version);
        return WST_ERR_STATE;
    }
    size_t first = r->plan->sender_first[p->rank];
    size_t n = r->plan->sender_first[p->rank + 1] - first;
    const struct wst_plan_item *it =
        hdr->item < n ? &r->plan->items[first + hdr->item] : NULL;
    if (it == NULL || p->mover != WST_MOVER_AM ||
        !data_fits(r->plan->items + first, n, hdr, len)) {
        refit_fail(r, WST_ERR_PROTOCOL,
                   "sender %s: data for item %u (x%u) at %llu+%zu outside its "
                   "plan",
                   p->name, hdr->item, hdr->count,
                   (unsigned long long)hdr->offset, len);
        return WST_ERR_PROTOCOL;
    }
    if (it->staged && (r->layer_moe[it->layer] == NULL ||
                       r->layer_moe[it->layer]->ordinal >= r->credit_next)) {
        refit_fail(r, WST_ERR_PROTOCOL,
                   "sender %s: experts of layer %u sent before their credit",
                   p->name, it->layer);
        return WST_ERR_PROTOCOL;
    }
    if (r->regions[it->region].mem == WST_MEM_CUDA) {
        if (len > WST_LANDING_MESSAGE_MAX) {
            refit_fail(r, WST_ERR_PROTOCOL,
                       "sender %s: a %zu-byte data message for device memory "
                       "exceeds the %llu-byte landing limit",
                       p->name, len,
                       (unsigned long long)WST_LANDING_MESSAGE_MAX);
            return WST_ERR_PROTOCOL;
        }
        *dest_p = wst_rx_device_land(r->dev, len);
        return *dest_p != NULL ? WST_OK : WST_ERR_BUSY;
    }
    *dest_p = item_dest(r, it, hdr->offset);
    return WST_OK;
}

/* The sender of a data message, while its refit is the one receiving. */
static struct peer *data_peer(struct wst_receiver *r,
                              const struct wst_data_hdr *hdr)
{
    struct peer *p = r->by_rank != NULL && hdr->token < r->world_size
                         ? r->by_rank[hdr->token]
                         : NULL;

    if (r->refit != REFIT_RECEIVING || hdr->version != r->version)
        return NULL;
    return p;
}

/* 'len' bytes of a message are where the plan wants them. */
static void count_layer(struct wst_receiver *r, struct peer *p, uint32_t layer,
                        uint64_t len)
{
    p->recv_bytes[layer] += len;
    r->last_progress_ns = wst_now_ns();
    if (p->marks[layer] == MARK_WAITING &&
        p->recv_bytes[layer] == expected_bytes(r, p->rank, layer))
        queue_verify(r, p, layer);
    nccl_post(r, p); /* an exchange completed: room for the next */
}

static void count_data(struct wst_receiver *r, struct peer *p,
                       const struct wst_data_hdr *hdr, size_t len)
{
    const struct wst_plan_item *it =
        &r->plan->items[r->plan->sender_first[p->rank] + hdr->item];

    count_layer(r, p, it->layer, len);
}

static void on_data_done(void *arg, const struct wst_data_hdr *hdr, void *dest,
                         size_t len, wst_status_t status)
{
    struct wst_receiver *r = arg;
    struct peer *p = data_peer(r, hdr);
    int landed =
        r->dev != NULL && dest != NULL && wst_rx_device_owns(r->dev, dest);

    if (p != NULL && status != WST_OK)
        refit_fail(r, status, "sender %s: receiving data failed", p->name);
    if (p == NULL || status != WST_OK) {
        if (landed)
            wst_rx_device_release(r->dev, dest);
        return;
    }
    if (!landed) {
        count_data(r, p, hdr, len);
        return;
    }
    /* In the landing ring: counted once it is on the GPU (on_copied). */
    const struct wst_plan_item *it =
        &r->plan->items[r->plan->sender_first[p->rank] + hdr->item];
    wst_status_t st = wst_rx_device_copy(
        r->dev, dest, item_dest(r, it, hdr->offset), len, hdr, r->generation);
    if (st != WST_OK)
        refit_fail(r, st, "copying data of sender %s to GPU %d failed", p->name,
                   r->device);
}

static void on_copied(void *arg, const struct wst_data_hdr *hdr, size_t len,
                      uint64_t tag, wst_status_t status)
{
    struct wst_receiver *r = arg;
    struct peer *p = data_peer(r, hdr);

    if (p == NULL || tag != r->generation)
        return; /* a refit that is over */
    if (status != WST_OK) {
        refit_fail(r, status, "copying data of sender %s to GPU %d failed",
                   p->name, r->device);
        return;
    }
    count_data(r, p, hdr, len);
}

/* ---- deadlines ---- */

static void on_tick(void *arg)
{
    struct wst_receiver *r = arg;
    uint64_t now = wst_now_ns();
    uint64_t limit = (uint64_t)(r->timeout_s * 1e9);

    if (r->refit != REFIT_IDLE && now - r->last_progress_ns > limit) {
        refit_fail(r, WST_ERR_TIMED_OUT, "version %llu: no progress for %.1f s",
                   (unsigned long long)r->version, r->timeout_s);
        return;
    }
    if (r->first_have_ns == 0 || now - r->first_have_ns <= limit)
        return;
    /* Some ranks never sent a manifest: say which, and start over. */
    char missing[256] = "";
    size_t used = 0;
    for (uint32_t i = 0; i < r->world_size && used < sizeof(missing); i++)
        if (r->by_rank[i] == NULL || !r->by_rank[i]->have_done)
            used += (size_t)snprintf(missing + used, sizeof(missing) - used,
                                     "%s%u", used ? "," : "", i);
    if (used == 0) {
        r->first_have_ns = 0;
        return;
    }
    struct job refusal = {.status = WST_ERR_TIMED_OUT};
    snprintf(refusal.reason, sizeof(refusal.reason),
             "no have manifest from sender ranks %s within %.1f s", missing,
             r->timeout_s);
    WST_ERROR(&r->log, "%s", refusal.reason);
    for_each_peer(r, refuse_to_peer, &refusal);
    r->first_have_ns = 0;
}

/* ---- public API ---- */

static wst_status_t apply_params(struct wst_receiver *r,
                                 const struct wst_receiver_params *p)
{
    uint64_t f = p->field_mask;

    r->rank = (f & WST_RECEIVER_PARAM_RANK) ? p->rank : 0;
    snprintf(r->listen_host, sizeof(r->listen_host), "%s",
             (f & WST_RECEIVER_PARAM_LISTEN) && p->listen_host ? p->listen_host
                                                               : "0.0.0.0");
    r->listen_port = (f & WST_RECEIVER_PARAM_LISTEN) ? p->listen_port : 0;
    r->timeout_s = (f & WST_RECEIVER_PARAM_TIMEOUT) && p->timeout_s > 0
                       ? p->timeout_s
                       : 30.0;
    r->allow_put = 1;
    if ((f & WST_RECEIVER_PARAM_MOVER) && p->mover != NULL) {
        if (strcmp(p->mover, "am") == 0)
            r->allow_put = 0;
        else if (strcmp(p->mover, "auto") != 0)
            return WST_ERR_INVALID;
    }
    r->verify = (f & WST_RECEIVER_PARAM_VERIFY) ? p->verify != 0 : 1;
    r->heartbeat_s = 1.0;
    r->peer_timeout_s = 5.0;
    if (f & WST_RECEIVER_PARAM_HEARTBEAT) {
        if (p->heartbeat_s <= 0 || p->peer_timeout_s <= p->heartbeat_s)
            return WST_ERR_INVALID;
        r->heartbeat_s = p->heartbeat_s;
        r->peer_timeout_s = p->peer_timeout_s;
    }
    if (f & WST_RECEIVER_PARAM_HOOKS)
        r->hooks = p->hooks;
    if ((f & WST_RECEIVER_PARAM_STAGING_SLOTS) &&
        (p->staging_slots == 0 || p->staging_slots > 64))
        return WST_ERR_INVALID;
    wst_moe_init(&r->moe,
                 (f & WST_RECEIVER_PARAM_STAGING_SLOTS) ? p->staging_slots : 2);
    snprintf(r->log_name, sizeof(r->log_name), "%s",
             (f & WST_RECEIVER_PARAM_LOG) && p->log_name ? p->log_name
                                                         : "receiver");
    wst_logger_init(&r->log, r->log_name, WST_LOG_INFO);
    if (f & WST_RECEIVER_PARAM_LOG) {
        if (p->log_level >= 0 && p->log_level <= WST_LOG_TRACE)
            r->log.level = (enum wst_log_level)p->log_level;
        r->log.sink = p->log_fn;
        r->log.sink_arg = p->log_arg;
    }
    return WST_OK;
}

wst_status_t wst_receiver_create(const struct wst_receiver_params *params,
                                 wst_receiver_t **receiver_p)
{
    struct wst_receiver *r = calloc(1, sizeof(*r));
    wst_status_t st;

    if (r == NULL)
        return WST_ERR_NO_MEMORY;
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->cond, NULL);
    r->state.usable = 1;
    r->device = -1;
    st = apply_params(r, params);
    if (st != WST_OK)
        goto err_free;
    struct wst_msg hb = {.type = WST_MSG_HEARTBEAT};
    uint8_t *hb_buf = NULL;
    size_t hb_len = 0;
    st = wst_msg_encode(&hb, &hb_buf, &hb_len);
    if (st != WST_OK)
        goto err_free;
    st = wst_jobq_create(&r->engine);
    if (st != WST_OK) {
        free(hb_buf);
        goto err_free;
    }
    st = wst_jobq_create(&r->repacker);
    if (st != WST_OK) {
        free(hb_buf);
        goto err_destroy_engine;
    }
    struct wst_worker_params wp = {
        .log = &r->log,
        .ops = {.arg = r,
                .accepted = on_accepted,
                .message = on_message,
                .conn_failed = on_conn_failed,
                .data_dest = on_data_dest,
                .data_done = on_data_done,
                .tick = on_tick},
        .max_control_msg = WST_MSG_MAX_DEFAULT,
        .heartbeat = {.interval_s = r->heartbeat_s,
                      .timeout_s = r->peer_timeout_s,
                      .msg = hb_buf,
                      .msg_len = hb_len},
    };
    st = wst_worker_create(&wp, &r->worker);
    free(hb_buf);
    if (st != WST_OK)
        goto err_destroy_repacker;
    *receiver_p = r;
    return WST_OK;

err_destroy_repacker:
    wst_jobq_destroy(r->repacker);
err_destroy_engine:
    wst_jobq_destroy(r->engine);
err_free:
    pthread_cond_destroy(&r->cond);
    pthread_mutex_destroy(&r->lock);
    free(r);
    return st;
}

static wst_status_t grow(void **array, size_t n, size_t size)
{
    void *grown = realloc(*array, (n + 1) * size);

    if (grown == NULL)
        return WST_ERR_NO_MEMORY;
    *array = grown;
    return WST_OK;
}

/* The memory type the caller declared, checked against what CUDA says the
 * pointer is; device regions must all be on one GPU. Each region is logged
 * at debug level, the totals once at start (prepare_device). */
static wst_status_t region_memory(struct wst_receiver *r,
                                  const struct wst_region *region,
                                  enum wst_mem_type *mem_p)
{
    int device = -1;
    enum wst_mem_type found = wst_gpu_mem_type(region->data, &device);

    if (region->mem_type != WST_MEM_HOST && region->mem_type != WST_MEM_CUDA) {
        WST_ERROR(&r->log, "region %s: unknown memory type %d", region->name,
                  region->mem_type);
        return WST_ERR_INVALID;
    }
    if ((int)found != region->mem_type) {
        WST_ERROR(&r->log,
                  "region %s: declared %s memory, but the pointer is %s "
                  "memory%s",
                  region->name,
                  wst_mem_type_name((enum wst_mem_type)region->mem_type),
                  wst_mem_type_name(found),
                  wst_kernels_built_with_cuda() ? "" : " (built without CUDA)");
        return WST_ERR_INVALID;
    }
    if (found == WST_MEM_CUDA && r->device >= 0 && device != r->device) {
        WST_ERROR(&r->log,
                  "region %s: on GPU %d, but other regions are on GPU %d; one "
                  "receiver serves one GPU",
                  region->name, device, r->device);
        return WST_ERR_UNSUPPORTED;
    }
    if (found == WST_MEM_CUDA)
        r->device = device;
    WST_DEBUG(&r->log, "region %s: %.1f MiB of %s memory (GPU %d)",
              region->name, (double)region->length / (1 << 20),
              wst_mem_type_name(found), device);
    *mem_p = found;
    return WST_OK;
}

wst_status_t wst_receiver_add_region(wst_receiver_t *r,
                                     const struct wst_region *region,
                                     uint32_t *id_p)
{
    struct region reg = {0};
    struct wst_region_desc desc = {0};
    wst_status_t st;

    if (r->started || region->name == NULL ||
        strlen(region->name) >= WST_NAME_MAX || region->data == NULL ||
        region->length == 0)
        return WST_ERR_INVALID;
    st = region_memory(r, region, &reg.mem);
    if (st != WST_OK)
        return st;
    strcpy(reg.name, region->name);
    reg.data = region->data;
    reg.length = region->length;
    /* Registered once, here: never on the per-refit path. Device memory
     * is not: this UCX cannot reach it, so data lands in a pinned host
     * ring and is copied (device.h). */
    if (reg.mem == WST_MEM_HOST) {
        st = wst_worker_mem_map(r->worker, region->data, region->length,
                                &reg.memh);
        if (st != WST_OK)
            return st;
        st =
            wst_worker_rkey_pack(r->worker, reg.memh, &reg.rkey, &reg.rkey_len);
        if (st != WST_OK)
            goto err_unmap;
    }
    st = grow((void **)&r->regions, r->n_regions, sizeof(*r->regions));
    if (st == WST_OK)
        st = grow((void **)&r->region_descs, r->n_regions,
                  sizeof(*r->region_descs));
    if (st != WST_OK)
        goto err_free_rkey;
    strcpy(desc.name, region->name);
    desc.length = region->length;
    desc.mem = reg.mem;
    r->regions[r->n_regions] = reg;
    r->region_descs[r->n_regions] = desc;
    if (id_p != NULL)
        *id_p = (uint32_t)r->n_regions;
    r->n_regions++;
    return WST_OK;

err_free_rkey:
    free(reg.rkey);
err_unmap:
    if (reg.memh != NULL)
        wst_worker_mem_unmap(r->worker, reg.memh);
    return st;
}

static wst_status_t add_want(struct wst_receiver *r,
                             const struct wst_want *want)
{
    wst_status_t st = wst_want_check(want, r->region_descs, r->n_regions);

    if (st != WST_OK) {
        WST_ERROR(&r->log, "want %s: invalid (region %u, offset %llu)",
                  want->tensor.name, want->region,
                  (unsigned long long)want->offset);
        return st;
    }
    st = grow((void **)&r->wants, r->n_wants, sizeof(*r->wants));
    if (st != WST_OK)
        return st;
    r->wants[r->n_wants++] = *want;
    return WST_OK;
}

wst_status_t wst_receiver_add_want(wst_receiver_t *r,
                                   const struct wst_want_entry *w)
{
    struct wst_want want = {0};

    if (r->started || w->name == NULL || strlen(w->name) >= WST_NAME_MAX ||
        w->ndim == 0 || w->ndim > WST_MAX_DIMS || w->shape == NULL ||
        w->box_start == NULL || w->box_stop == NULL)
        return WST_ERR_INVALID;
    strcpy(want.tensor.name, w->name);
    want.tensor.dtype = (enum wst_dtype)w->dtype;
    want.tensor.ndim = w->ndim;
    want.box.ndim = w->ndim;
    for (uint32_t d = 0; d < w->ndim; d++) {
        want.tensor.shape[d] = w->shape[d];
        want.box.start[d] = w->box_start[d];
        want.box.stop[d] = w->box_stop[d];
    }
    want.region = w->region;
    want.offset = w->offset;
    want.row_pitch = w->row_pitch;
    want.expert.grouped = w->expert_grouped != 0;
    want.expert.ep_rank = w->expert_grouped ? w->ep_rank : 0;
    want.expert.ep_size = w->expert_grouped ? w->ep_size : 0;
    return add_want(r, &want);
}

wst_status_t wst_receiver_add_loader(wst_receiver_t *r,
                                     const struct wst_repack_loader *loader)
{
    if (r->started)
        return WST_ERR_INVALID;
    wst_status_t st = wst_moe_add_loader(&r->moe, loader);
    if (st != WST_OK)
        WST_ERROR(&r->log, "loader %s: cannot register it (%s)",
                  loader != NULL && loader->name != NULL ? loader->name : "?",
                  wst_status_string(st));
    return st;
}

wst_status_t wst_receiver_add_expert_layer(wst_receiver_t *r,
                                           const struct wst_expert_layer *e)
{
    char err[256];

    if (r->started || e == NULL)
        return WST_ERR_INVALID;
    wst_status_t st = wst_moe_add(&r->moe, e, r->region_descs, r->n_regions,
                                  err, sizeof(err));
    if (st != WST_OK)
        WST_ERROR(&r->log, "%s", err);
    return st;
}

/* Staging lives where the live expert buffers are, and the repack writes
 * them from there: live w13/w2 split between host and GPU cannot be
 * served by one staging pool. */
static wst_status_t check_moe_memory(struct wst_receiver *r)
{
    enum wst_mem_type want = r->device >= 0 ? WST_MEM_CUDA : WST_MEM_HOST;

    for (size_t i = 0; i < r->moe.n_layers; i++) {
        const struct wst_moe_layer *ml = &r->moe.layers[i];
        if (r->regions[ml->w13_region].mem != want ||
            r->regions[ml->w2_region].mem != want) {
            WST_ERROR(&r->log,
                      "layer %u: live expert buffers in %s memory while "
                      "other regions are on GPU %d: put every MoE layer's "
                      "w13 and w2 on the GPU",
                      ml->layer,
                      wst_mem_type_name(r->regions[ml->w13_region].mem),
                      r->device);
            return WST_ERR_UNSUPPORTED;
        }
    }
    return WST_OK;
}

/* The GPU side, when any region is device memory: the landing ring and
 * its copies (this UCX cannot write device memory), device digests. */
static void on_copied(void *arg, const struct wst_data_hdr *hdr, size_t len,
                      uint64_t tag, wst_status_t status);

static wst_status_t prepare_device(struct wst_receiver *r)
{
    char name[128] = "";
    uint64_t host = 0, device = 0;

    for (size_t i = 0; i < r->n_regions; i++) {
        if (r->regions[i].mem == WST_MEM_CUDA)
            device += r->regions[i].length;
        else
            host += r->regions[i].length;
    }
    if (r->device < 0) {
        char why[160] = "";
        int n = 0;
        if (wst_kernels_device_count(&n, why, sizeof(why)) == WST_OK)
            snprintf(why, sizeof(why), "%d GPU(s) visible, none used", n);
        WST_INFO(&r->log, "regions: %.1f MiB of host memory (%s)",
                 (double)host / (1 << 20), why);
        return WST_OK;
    }
    wst_gpu_device_name(&r->log, r->device, name, sizeof(name));
    WST_INFO(&r->log,
             "regions: %.1f MiB of device memory on GPU %d (%s), %.1f MiB of "
             "host memory; UCX %s CUDA memory: data lands in a %llu MiB pinned "
             "host ring and is copied to the GPU",
             (double)device / (1 << 20), r->device, name,
             (double)host / (1 << 20),
             wst_worker_supports_cuda(r->worker) ? "reports" : "has no",
             (unsigned long long)(WST_LANDING_BYTES >> 20));
    /* Puts would need remote keys for device memory: active messages into
     * the landing ring instead. */
    r->allow_put = 0;
    return wst_rx_device_create(&r->log, r->worker, r->device, on_copied, r,
                                &r->dev);
}

/* Before listening: the engine's expert layers are checked (a refusal is
 * kept for the plan), the staging pool is allocated and registered as the
 * last region, and each MoE layer's three staged wants are added. */
static wst_status_t prepare_experts(struct wst_receiver *r)
{
    wst_status_t st = wst_moe_prepare(&r->moe, r->device);

    if (st != WST_OK) {
        WST_ERROR(&r->log, "cannot allocate %llu bytes of expert staging",
                  (unsigned long long)r->moe.staging_bytes);
        return st;
    }
    if (r->moe.refusal != WST_OK) {
        WST_WARN(&r->log, "expert layout will be refused: %s", r->moe.reason);
        return WST_OK;
    }
    if (r->moe.staging == NULL)
        return WST_OK;
    struct wst_region staging = {.name = "wstream.expert_staging",
                                 .data = r->moe.staging,
                                 .length = r->moe.staging_bytes,
                                 .mem_type = r->device >= 0 ? WST_MEM_CUDA
                                                            : WST_MEM_HOST};
    st = check_moe_memory(r);
    if (st == WST_OK)
        st = wst_receiver_add_region(r, &staging, &r->staging_region);
    for (size_t i = 0; st == WST_OK && i < r->moe.n_layers; i++) {
        struct wst_want w[3];
        wst_moe_staging_wants(&r->moe, &r->moe.layers[i], r->staging_region, w);
        for (int p = 0; p < 3 && st == WST_OK; p++)
            st = add_want(r, &w[p]);
    }
    /* The repack thread finds live memory here, allocating nothing. */
    if (st == WST_OK && (r->region_data = calloc(
                             r->n_regions, sizeof(*r->region_data))) == NULL)
        st = WST_ERR_NO_MEMORY;
    for (size_t i = 0; st == WST_OK && i < r->n_regions; i++)
        r->region_data[i] = r->regions[i].data;
    if (st == WST_OK)
        WST_INFO(&r->log,
                 "%zu MoE layers: staging %u slots x %llu bytes (%.1f MiB)",
                 r->moe.n_layers, r->moe.slots,
                 (unsigned long long)r->moe.slot_bytes,
                 (double)r->moe.staging_bytes / (1 << 20));
    return st;
}

struct listen_call {
    struct wst_receiver *r;
    uint16_t port;
    wst_status_t st;
};

static void do_listen(void *arg)
{
    struct listen_call *c = arg;

    c->st = wst_worker_listen(c->r->worker, c->r->listen_host,
                              c->r->listen_port, &c->port);
}

wst_status_t wst_receiver_start(wst_receiver_t *r, uint16_t *port_p)
{
    struct listen_call c = {.r = r};
    wst_status_t st;

    if (r->started)
        return WST_ERR_STATE;
    st = prepare_device(r);
    if (st == WST_OK)
        st = prepare_experts(r);
    if (st != WST_OK)
        return st;
    st = wst_worker_call(r->worker, do_listen, &c);
    if (st == WST_OK)
        st = c.st;
    if (st != WST_OK)
        return st;
    r->started = 1;
    WST_INFO(&r->log, "listening on %s:%u: %zu regions, %zu wants",
             r->listen_host, c.port, r->n_regions, r->n_wants);
    if (port_p != NULL)
        *port_p = c.port;
    return WST_OK;
}

void wst_receiver_get_state(wst_receiver_t *r, struct wst_receiver_state *state)
{
    pthread_mutex_lock(&r->lock);
    *state = r->state;
    pthread_mutex_unlock(&r->lock);
}

wst_status_t wst_receiver_wait_committed(wst_receiver_t *r, uint64_t version,
                                         double timeout_s)
{
    uint64_t deadline = wst_deadline_ns(timeout_s);
    uint64_t failed_before;
    wst_status_t st = WST_ERR_TIMED_OUT;

    pthread_mutex_lock(&r->lock);
    failed_before = r->state.refits_failed;
    while (wst_now_ns() < deadline) {
        if (r->state.committed_version >= version) {
            st = WST_OK;
            break;
        }
        if (r->state.refits_failed != failed_before) {
            st = WST_ERR_UNUSABLE;
            break;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 20 * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&r->cond, &r->lock, &ts);
    }
    pthread_mutex_unlock(&r->lock);
    return st;
}

uint32_t wst_receiver_get_timeline(wst_receiver_t *r,
                                   struct wst_layer_times *times, uint32_t n)
{
    uint32_t layers;

    pthread_mutex_lock(&r->lock);
    layers = r->n_times;
    if (times != NULL && layers != 0)
        memcpy(times, r->times, (n < layers ? n : layers) * sizeof(*times));
    pthread_mutex_unlock(&r->lock);
    return layers;
}

static void shutdown_peers(void *arg)
{
    struct wst_receiver *r = arg;

    r->refit = REFIT_IDLE;
    r->generation++;
    for (uint32_t i = 0; i < r->world_size; i++)
        if (r->by_rank[i] != NULL)
            peer_drop(r, r->by_rank[i]);
}

void wst_receiver_destroy(wst_receiver_t *r)
{
    if (r == NULL)
        return;
    /* Peers first (no new work), then the engine thread (its late results
     * are posted to the worker and dropped as stale), then the worker. */
    wst_worker_call(r->worker, shutdown_peers, r);
    wst_jobq_destroy(r->repacker);
    wst_jobq_destroy(r->engine);
    wst_rx_device_stop(r->dev); /* copies done, none posted after this */
    for (size_t i = 0; i < r->n_regions; i++) {
        free(r->regions[i].rkey);
        if (r->regions[i].memh != NULL)
            wst_worker_mem_unmap(r->worker, r->regions[i].memh);
    }
    wst_worker_destroy(r->worker);
    wst_rx_device_destroy(r->dev);
    wst_plan_destroy(r->plan);
    free(r->layer_index);
    free(r->layer_verified);
    free(r->staged_cells);
    free(r->layer_moe);
    free(r->moe_repacked);
    free(r->times);
    free(r->region_data);
    wst_moe_release(&r->moe);
    free(r->by_rank);
    free(r->regions);
    free(r->region_descs);
    free(r->wants);
    pthread_cond_destroy(&r->cond);
    pthread_mutex_destroy(&r->lock);
    free(r);
}
