/* sender.c - the sender library: shards, links to receivers, push and wait.
 *
 * One link per receiver. Its life, driven on the progress thread:
 *
 *   IDLE ─connect─▶ CONNECTING ─PLAN─▶ PLANNED ─push: BEGIN(V)─▶ BEGIN_SENT
 *     ▲                                   ▲                         │ ack
 *     │ (next push reconnects)            └──── COMMIT(V) ◀─ STREAMING
 *   FAILED ◀── any error, ERROR message or dead peer, from any state
 *
 * On connect the sender sends HELLO and its HAVE manifest at once; the
 * receiver answers HELLO (with its worker address) and, once every sender
 * rank has reported, a PLAN: this sender's items, the receiver's regions
 * and keys. The plan is kept for later pushes (a static schedule).
 *
 * Streaming pumps items in plan order (layer by layer), cut into chunks and
 * bounded by a window of bytes in flight; right after a layer's last item a
 * fence makes its bytes visible (later layers keep streaming meanwhile), and
 * once the layer is both fenced and digested, LAYER_DONE carries its byte
 * count and digest. Digests are computed on the application thread inside
 * push, layer by layer, and handed to the progress thread as they are
 * ready; data does not wait for them, so hashing overlaps sending.
 *
 * Staged items (routed experts, which land in the receiver's bounded
 * staging) wait for the receiver's CREDIT for their layer: the pump stops
 * at the first staged item of a layer without credit, and the credit
 * restarts it. A layer's dense items come first in plan order, so they are
 * not held up.
 *
 * Device shards (sender/device.h) travel by the path chosen per receiver
 * (common/device_path.h): directly when UCX can read device memory, else
 * through the pinned bounce ring: a chunk (or small items gathered) is
 * copied into a slot, and moved from there once the copy's event has
 * completed. A layer's fence waits until every copy of it has become a
 * move. On the nccl path (kernels/nccl_link.h) a layer is one grouped
 * ncclSend exchange, posted in layer order once its credit is in, and
 * "fenced" when the GPU has done it; the communicator is set up once per
 * plan (NCCL_SETUP, then NCCL_READY from the receiver) and kept across
 * refits.
 *
 * Locking: link fields belong to the progress thread. What the application
 * thread waits on (state, error, committed version) is written under
 * s->lock and signalled on s->cond.
 */
#include <wstream/sender.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "codec.h"
#include "device.h"
#include "device_path.h"
#include "digest.h"
#include "dtype.h"
#include "gpu.h"
#include "gpu_probe.h"
#include "log.h"
#include "manifest.h"
#include "mover.h"
#include "nccl_comm.h"
#include "nccl_link.h"
#include "worker.h"

#define DEFAULT_WINDOW (64ull << 20)
#define DEFAULT_BOUNCE (64ull << 20)

/* Items this small whose destinations follow each other (a tensor-parallel
 * slice: one item per row) are gathered into one message of at most
 * GATHER_BYTES, through GATHER_BUFS buffers per link registered once. */
#define GATHER_ITEM_MAX (64u << 10)
#define GATHER_BYTES (1u << 20)
#define GATHER_BUFS 8u

enum link_state {
    LINK_IDLE,
    LINK_CONNECTING,
    LINK_PLANNED,
    LINK_BEGIN_SENT,
    LINK_STREAMING,
    LINK_COMMITTED,
    LINK_FAILED,
};

struct shard {
    struct wst_have have;
    const void *data;
    uint64_t bytes;
    ucp_mem_h memh; /* NULL for device memory UCX cannot register */
    int device;     /* its GPU, or -1 for host memory */
};

struct link {
    struct wst_sender *s;
    char host[256];
    uint16_t port;
    char name[280];
    wst_conn_t *conn;
    enum link_state state;
    wst_status_t error;
    char error_msg[WST_ERROR_MSG_MAX];

    struct wst_blob address;  /* receiver worker address (owned) */
    struct wst_plan_msg plan; /* owned, from the codec */
    int have_plan;
    size_t *layer_first;   /* [n_layers + 1] item bounds per layer */
    uint64_t *layer_bytes; /* [n_layers] */
    uint64_t *digests;     /* [n_layers], written by push */
    uint8_t *credits;      /* [n_layers]: staging credit for this version */
    uint32_t *copying;     /* [n_layers]: bounce copies not yet moves */
    uint32_t digests_ready;
    struct wst_mover *mover;
    uint64_t mover_gen; /* bumped per mover: late callbacks of old ones */
    enum wst_mover_kind mover_kind;
    enum wst_path path;             /* how device shards travel */
    struct wst_nccl_link *nccl;     /* path nccl: kept across refits */
    struct wst_nccl_run *nccl_runs; /* [n_items], built with the link */
    int nccl_ready, nccl_peer_ready;
    uint32_t nccl_next; /* next layer to post */
    char lanes[256];

    uint64_t version;
    uint64_t committed;
    size_t cursor;        /* next item to move */
    uint64_t cursor_off;  /* bytes of it already moved */
    uint32_t fence_layer; /* next layer to fence */
    int fence_pending;
    uint32_t fenced;    /* layers [0, fenced) are visible at the receiver */
    uint32_t done_sent; /* layers [0, done_sent) reported LAYER_DONE */
    uint32_t started;   /* layers [0, started) began streaming */
    uint64_t in_flight;
    int pumping, pump_again;
    struct chunk_done *free_chunks; /* recycled move contexts (owned) */
    uint64_t bytes_moved;
    unsigned char *gather; /* [GATHER_BUFS][GATHER_BYTES], owned; lazily */
    ucp_mem_h gather_memh;
    uint32_t gather_free; /* bit i: buffer i is free */
};

struct wst_sender {
    struct wst_logger log;
    char log_name[32];
    uint32_t rank;
    uint32_t world_size;
    double timeout_s;
    enum wst_mover_kind mover_pref; /* 0: auto */
    uint64_t window;
    double heartbeat_s;
    double peer_timeout_s;
    int data_peer_errors;
    uint64_t session;
    wst_layer_progress_fn progress_fn;
    void *progress_arg;
    enum wst_path_pref path_pref;
    uint32_t bounce_slots;

    wst_worker_t *worker;
    struct wst_tx_device *dev; /* with the first device shard */
    struct shard *shards;
    size_t n_shards;
    struct link *links;
    size_t n_links;

    pthread_mutex_t lock;
    pthread_cond_t cond;
    uint64_t version; /* last pushed */
    char last_error[WST_ERROR_MSG_MAX + 300];
};

static void pump(struct link *l);

/* ---- state changes seen by the application thread ---- */

static void link_set_state(struct link *l, enum link_state st)
{
    pthread_mutex_lock(&l->s->lock);
    l->state = st;
    pthread_cond_broadcast(&l->s->cond);
    pthread_mutex_unlock(&l->s->lock);
}

static void link_fail(struct link *l, wst_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The NCCL link goes with the connection: aborted if it still has work,
 * so no kernel waits on a receiver that is gone. */
static void nccl_drop(struct link *l)
{
    wst_nccl_link_destroy(l->nccl); /* before its borrowed runs go */
    l->nccl = NULL;
    free(l->nccl_runs);
    l->nccl_runs = NULL;
    l->nccl_ready = 0;
    l->nccl_peer_ready = 0;
}

static void link_fail(struct link *l, wst_status_t status, const char *fmt, ...)
{
    char msg[WST_ERROR_MSG_MAX];
    va_list ap;

    if (l->state == LINK_FAILED)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    WST_ERROR(&l->s->log, "receiver %s: %s (%s)", l->name, msg,
              wst_status_string(status));
    pthread_mutex_lock(&l->s->lock);
    l->error = status;
    snprintf(l->error_msg, sizeof(l->error_msg), "%s", msg);
    l->state = LINK_FAILED;
    pthread_cond_broadcast(&l->s->cond);
    pthread_mutex_unlock(&l->s->lock);
    /* The connection and mover go now: a failed link reconnects from
     * scratch at the next push. */
    if (l->mover != NULL) {
        wst_mover_destroy(l->mover);
        l->mover = NULL;
    }
    nccl_drop(l);
    if (l->conn != NULL) {
        wst_conn_close(l->conn);
        l->conn = NULL;
    }
}

/* ---- sending control messages ---- */

static wst_status_t link_send(struct link *l, const struct wst_msg *msg)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    wst_status_t st = wst_msg_encode(msg, &buf, &len);

    if (st != WST_OK) {
        link_fail(l, st, "cannot encode %s", wst_msg_type_name(msg->type));
        return st;
    }
    st = wst_conn_send(l->conn, buf, len);
    if (st != WST_OK)
        link_fail(l, st, "sending %s failed", wst_msg_type_name(msg->type));
    return st;
}

static wst_status_t send_hello_and_have(struct link *l)
{
    struct wst_sender *s = l->s;
    struct wst_msg m = {.type = WST_MSG_HELLO};
    wst_status_t st;

    m.u.hello.protocol_version = WST_PROTOCOL_VERSION;
    m.u.hello.role = WST_ROLE_SENDER;
    m.u.hello.rank = s->rank;
    m.u.hello.world_size = s->world_size;
    m.u.hello.session = s->session;
    st = link_send(l, &m);
    if (st != WST_OK)
        return st;

    struct wst_have *haves =
        calloc(s->n_shards ? s->n_shards : 1, sizeof(*haves));
    if (haves == NULL) {
        link_fail(l, WST_ERR_NO_MEMORY, "no memory for the have manifest");
        return WST_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < s->n_shards; i++)
        haves[i] = s->shards[i].have;
    memset(&m, 0, sizeof(m));
    m.type = WST_MSG_HAVE;
    m.u.have.rank = s->rank;
    m.u.have.n_entries = s->n_shards;
    m.u.have.entries = haves;
    st = link_send(l, &m);
    free(haves);
    return st;
}

/* ---- handling messages from a receiver ---- */

static void on_hello(struct link *l, struct wst_msg *m)
{
    if (m->u.hello.protocol_version != WST_PROTOCOL_VERSION) {
        link_fail(l, WST_ERR_VERSION, "receiver speaks protocol %u, we %u",
                  m->u.hello.protocol_version, WST_PROTOCOL_VERSION);
        return;
    }
    if (m->u.hello.role != WST_ROLE_RECEIVER ||
        m->u.hello.worker_address.len == 0) {
        link_fail(l, WST_ERR_PROTOCOL, "hello without a receiver address");
        return;
    }
    free(l->address.data);
    l->address = m->u.hello.worker_address; /* take ownership */
    m->u.hello.worker_address.data = NULL;
    m->u.hello.worker_address.len = 0;
    WST_DEBUG(&l->s->log, "receiver %s: hello, rank %u", l->name,
              m->u.hello.rank);
}

static wst_status_t index_layers(struct link *l)
{
    const struct wst_plan_msg *p = &l->plan;

    l->layer_first = calloc(p->n_layers + 1, sizeof(*l->layer_first));
    l->layer_bytes = calloc(p->n_layers, sizeof(*l->layer_bytes));
    l->digests = calloc(p->n_layers, sizeof(*l->digests));
    l->credits = calloc(p->n_layers, sizeof(*l->credits));
    l->copying = calloc(p->n_layers, sizeof(*l->copying));
    if (l->layer_first == NULL || l->layer_bytes == NULL ||
        l->digests == NULL || l->credits == NULL || l->copying == NULL)
        return WST_ERR_NO_MEMORY;
    /* Items arrive sorted by layer (checked here, relied on by pump). */
    size_t i = 0;
    for (uint32_t layer = 0; layer < p->n_layers; layer++) {
        l->layer_first[layer] = i;
        for (; i < p->n_items && p->items[i].layer == layer; i++)
            l->layer_bytes[layer] += p->items[i].length;
    }
    l->layer_first[p->n_layers] = i;
    return i == p->n_items ? WST_OK : WST_ERR_PROTOCOL;
}

/* Put only where the data lane does real RMA (describe_lanes), unless the
 * application or the receiver says otherwise. */
static int choose_mover(struct link *l, int rma_real)
{
    struct wst_sender *s = l->s;

    if (l->plan.mover == WST_MOVER_AM) {
        if (s->mover_pref == WST_MOVER_PUT)
            WST_WARN(&s->log,
                     "receiver %s hands out no remote keys: "
                     "using am instead of the configured put",
                     l->name);
        return WST_MOVER_AM;
    }
    if (s->mover_pref != 0)
        return s->mover_pref;
    return rma_real ? WST_MOVER_PUT : WST_MOVER_AM;
}

/* How this link's device shards travel, logged once per plan. */
static wst_status_t choose_path(struct link *l)
{
    struct wst_sender *s = l->s;
    char why[WST_PATH_WHY_LEN];
    struct wst_path_inputs in = {
        .dst_device = (l->plan.caps & WST_CAP_DEVICE_DST) != 0,
        .local_ucx_cuda = wst_worker_supports_cuda(s->worker),
        .peer_ucx_cuda = (l->plan.caps & WST_CAP_UCX_CUDA) != 0,
        .nccl_built = wst_nccl_available() && s->dev != NULL,
        .peer_nccl = (l->plan.caps & WST_CAP_NCCL) != 0,
        .pref = s->path_pref,
    };

    for (size_t i = 0; i < l->plan.n_items && !in.src_device; i++)
        in.src_device = s->shards[l->plan.items[i].have].device >= 0;
    wst_status_t st = wst_path_choose(&in, &l->path, why, sizeof(why));
    if (st != WST_OK) {
        link_fail(l, st, "no device path: %s", why);
        return st;
    }
    for (size_t i = 0; l->path == WST_PATH_NCCL && i < l->plan.n_items; i++) {
        const struct shard *sh = &s->shards[l->plan.items[i].have];
        if (sh->device < 0) {
            link_fail(l, WST_ERR_UNSUPPORTED,
                      "the nccl path moves device memory only, and shard "
                      "'%s' is host memory",
                      sh->have.tensor.name);
            return WST_ERR_UNSUPPORTED;
        }
    }
    if (l->path == WST_PATH_HOST)
        WST_DEBUG(&s->log, "receiver %s: device path host: %s", l->name, why);
    else
        wst_path_log(&s->log, l->name, l->path, why);
    return WST_OK;
}

/* Progress thread: this side of the communicator is ready (or not). */
static void nccl_local_ready(void *arg, wst_status_t status)
{
    struct link *l = arg;

    if (l->state != LINK_CONNECTING)
        return;
    if (status != WST_OK) {
        link_fail(l, status, "nccl communicator with GPU %d failed",
                  wst_tx_device_ordinal(l->s->dev));
        return;
    }
    l->nccl_ready = 1;
    WST_INFO(&l->s->log, "receiver %s: nccl communicator ready (rank 0 of 2)",
             l->name);
    if (l->nccl_peer_ready)
        link_set_state(l, LINK_PLANNED);
}

/* The nccl path: a new unique id to the receiver, and this side's
 * non-blocking init; PLANNED once both sides are ready. */
static wst_status_t nccl_open(struct link *l)
{
    struct wst_sender *s = l->s;
    struct wst_msg m = {.type = WST_MSG_NCCL_SETUP};
    wst_status_t st;

    nccl_drop(l);
    l->mover_kind = WST_MOVER_NCCL;
    /* Every item's run, once per plan: a refit posts slices of these. */
    l->nccl_runs =
        calloc(l->plan.n_items ? l->plan.n_items : 1, sizeof(*l->nccl_runs));
    if (l->nccl_runs == NULL)
        return WST_ERR_NO_MEMORY;
    for (size_t k = 0; k < l->plan.n_items; k++) {
        const struct wst_plan_item *it = &l->plan.items[k];
        l->nccl_runs[k].ptr = (char *)s->shards[it->have].data + it->src_offset;
        l->nccl_runs[k].bytes = it->length;
        l->nccl_runs[k].peer = 1; /* the receiver */
    }
    st = wst_nccl_get_id(&s->log, m.u.nccl_setup.unique_id);
    if (st == WST_OK)
        st = wst_nccl_link_create(&s->log, s->worker,
                                  wst_tx_device_ordinal(s->dev),
                                  m.u.nccl_setup.unique_id, 2, 0, s->timeout_s,
                                  nccl_local_ready, l, &l->nccl);
    if (st == WST_OK)
        st = link_send(l, &m);
    return st;
}

static wst_status_t open_mover(struct link *l)
{
    struct wst_sender *s = l->s;
    int rma_real = 0;
    wst_status_t st;

    st = choose_path(l);
    if (st != WST_OK)
        return st;
    if (l->path == WST_PATH_NCCL)
        return nccl_open(l);

    if (wst_conn_data_ep(l->conn) == NULL) {
        st = wst_conn_open_data(l->conn, l->address.data, l->address.len,
                                s->data_peer_errors, l->lanes, sizeof(l->lanes),
                                &rma_real);
        if (st != WST_OK)
            return st;
    }
    l->mover_kind = choose_mover(l, rma_real);
    struct wst_mover_region *regs =
        calloc(l->plan.n_regions ? l->plan.n_regions : 1, sizeof(*regs));
    if (regs == NULL)
        return WST_ERR_NO_MEMORY;
    for (size_t i = 0; i < l->plan.n_regions; i++) {
        regs[i].base = l->plan.regions[i].base;
        regs[i].length = l->plan.regions[i].length;
        regs[i].rkey = l->plan.regions[i].rkey.data;
        regs[i].rkey_len = l->plan.regions[i].rkey.len;
    }
    l->mover_gen++;
    st = wst_mover_create(l->mover_kind, s->worker, wst_conn_data_ep(l->conn),
                          l->plan.sender, regs, l->plan.n_regions, &s->log,
                          &l->mover);
    free(regs);
    if (st == WST_OK)
        WST_INFO(&s->log,
                 "receiver %s: mover %s, data lanes %s%s, %zu items, "
                 "%u layers",
                 l->name, wst_mover_kind_name(l->mover_kind), l->lanes,
                 rma_real ? " (real rma)" : " (no real rma lane)",
                 l->plan.n_items, l->plan.n_layers);
    return st;
}

static void drop_plan(struct link *l)
{
    if (l->have_plan) {
        struct wst_msg m = {.type = WST_MSG_PLAN, .u.plan = l->plan};
        wst_msg_release(&m);
    }
    memset(&l->plan, 0, sizeof(l->plan));
    l->have_plan = 0;
    free(l->layer_first);
    free(l->layer_bytes);
    free(l->digests);
    free(l->credits);
    free(l->copying);
    l->copying = NULL;
    l->layer_first = NULL;
    l->layer_bytes = NULL;
    l->digests = NULL;
    l->credits = NULL;
}

static void on_plan(struct link *l, struct wst_msg *m)
{
    struct wst_sender *s = l->s;
    char err[256];
    wst_status_t st;

    if (l->state != LINK_CONNECTING || l->address.len == 0) {
        link_fail(l, WST_ERR_PROTOCOL, "unexpected plan");
        return;
    }
    struct wst_have *haves =
        calloc(s->n_shards ? s->n_shards : 1, sizeof(*haves));
    if (haves == NULL) {
        link_fail(l, WST_ERR_NO_MEMORY, "no memory to check the plan");
        return;
    }
    for (size_t i = 0; i < s->n_shards; i++)
        haves[i] = s->shards[i].have;
    st = wst_plan_msg_check(&m->u.plan, haves, s->n_shards, err, sizeof(err));
    free(haves);
    if (st == WST_OK && m->u.plan.sender != s->rank)
        st = WST_ERR_PROTOCOL;
    if (st != WST_OK) {
        link_fail(l, st, "refusing plan: %s", err);
        return;
    }
    drop_plan(l);
    l->plan = m->u.plan; /* take ownership */
    l->have_plan = 1;
    memset(&m->u.plan, 0, sizeof(m->u.plan));
    st = index_layers(l);
    if (st == WST_OK)
        st = open_mover(l);
    if (st != WST_OK) {
        link_fail(l, st, "cannot set up the data path");
        return;
    }
    if (l->path != WST_PATH_NCCL)
        link_set_state(l, LINK_PLANNED);
}

static void on_nccl_ready(struct link *l, const struct wst_nccl_ready *nr)
{
    if (l->state != LINK_CONNECTING || l->nccl == NULL || l->nccl_peer_ready ||
        nr->plan_hash != l->plan.plan_hash) {
        link_fail(l, WST_ERR_PROTOCOL, "unexpected nccl-ready");
        return;
    }
    l->nccl_peer_ready = 1;
    if (l->nccl_ready)
        link_set_state(l, LINK_PLANNED);
}

static void on_begin_ack(struct link *l, const struct wst_begin *b)
{
    if (!b->ack || l->state != LINK_BEGIN_SENT || b->version != l->version) {
        link_fail(l, WST_ERR_PROTOCOL, "unexpected begin for version %llu",
                  (unsigned long long)b->version);
        return;
    }
    link_set_state(l, LINK_STREAMING);
    pump(l);
}

/* A credit may overtake nothing (it follows the begin acknowledgement on
 * the same endpoint) but is accepted in BEGIN_SENT too, so the order of
 * control messages is not load-bearing. */
static void on_credit(struct link *l, const struct wst_credit *c)
{
    if (c->version != l->version || c->layer >= l->plan.n_layers ||
        (l->state != LINK_BEGIN_SENT && l->state != LINK_STREAMING)) {
        link_fail(l, WST_ERR_PROTOCOL,
                  "unexpected credit for layer %u of version %llu", c->layer,
                  (unsigned long long)c->version);
        return;
    }
    WST_DEBUG(&l->s->log, "receiver %s: credit for layer %u", l->name,
              c->layer);
    l->credits[c->layer] = 1;
    pump(l);
}

static void on_commit(struct link *l, const struct wst_commit *c)
{
    if (c->version != l->version || l->state != LINK_STREAMING) {
        link_fail(l, WST_ERR_PROTOCOL, "unexpected commit of version %llu",
                  (unsigned long long)c->version);
        return;
    }
    pthread_mutex_lock(&l->s->lock);
    l->committed = c->version;
    l->state = LINK_COMMITTED;
    pthread_cond_broadcast(&l->s->cond);
    pthread_mutex_unlock(&l->s->lock);
}

static void on_message(void *arg, wst_conn_t *conn, const void *buf, size_t len)
{
    struct wst_sender *s = arg;
    struct link *l = wst_conn_user(conn);
    struct wst_msg m;
    char err[256];
    wst_status_t st;

    if (l == NULL)
        return;
    st = wst_msg_decode(buf, len, WST_MSG_MAX_DEFAULT, &m, err, sizeof(err));
    if (st != WST_OK) {
        link_fail(l, st, "bad message: %s", err);
        return;
    }
    WST_TRACE(&s->log, "receiver %s: %s", l->name, wst_msg_type_name(m.type));
    switch (m.type) {
    case WST_MSG_HELLO:
        on_hello(l, &m);
        break;
    case WST_MSG_WANT_SUMMARY:
        if (!m.u.want_summary.usable)
            WST_WARN(&s->log, "receiver %s is unusable: %s", l->name,
                     m.u.want_summary.reason);
        break;
    case WST_MSG_PLAN:
        on_plan(l, &m);
        break;
    case WST_MSG_BEGIN:
        on_begin_ack(l, &m.u.begin);
        break;
    case WST_MSG_COMMIT:
        on_commit(l, &m.u.commit);
        break;
    case WST_MSG_CREDIT:
        on_credit(l, &m.u.credit);
        break;
    case WST_MSG_NCCL_READY:
        on_nccl_ready(l, &m.u.nccl_ready);
        break;
    case WST_MSG_ERROR:
        link_fail(l, (wst_status_t)m.u.error.status, "receiver reports: %s",
                  m.u.error.message);
        break;
    case WST_MSG_HEARTBEAT:
        break;
    default:
        link_fail(l, WST_ERR_PROTOCOL, "unexpected %s message",
                  wst_msg_type_name(m.type));
        break;
    }
    wst_msg_release(&m);
}

static void on_conn_failed(void *arg, wst_conn_t *conn, wst_status_t status,
                           const char *why)
{
    struct link *l = wst_conn_user(conn);

    (void)arg;
    if (l != NULL)
        link_fail(l, status, "connection lost: %s", why);
}

/* ---- streaming ---- */

static void send_layer_done(struct link *l, uint32_t layer)
{
    struct wst_msg m = {.type = WST_MSG_LAYER_DONE};

    m.u.layer_done.layer = layer;
    m.u.layer_done.version = l->version;
    m.u.layer_done.bytes = l->layer_bytes[layer];
    m.u.layer_done.digest = l->digests[layer];
    WST_DEBUG(&l->s->log, "receiver %s: layer %u done, %llu bytes", l->name,
              layer, (unsigned long long)l->layer_bytes[layer]);
    link_send(l, &m);
}

static void fence_done(void *arg, wst_status_t status)
{
    struct link *l = arg;
    uint32_t layer = l->fence_layer - 1;

    l->fence_pending = 0;
    if (l->state != LINK_STREAMING)
        return;
    if (status != WST_OK) {
        link_fail(l, status, "making layer %u visible failed", layer);
        return;
    }
    l->fenced = layer + 1;
    pump(l);
}

struct chunk_done {
    struct chunk_done *next; /* in the link's free list */
    struct link *l;
    uint64_t mover_gen;
    uint64_t len;
    int gather; /* gather buffer it holds, or -1 */
    int slot;   /* bounce slot it holds, or -1 */
    uint32_t layer;
    struct wst_move mv; /* bounce: posted once the slot is filled */
};

/* Chunk contexts are recycled: after the first refit the data path
 * allocates nothing. */
static struct chunk_done *chunk_new(struct link *l)
{
    struct chunk_done *cd = l->free_chunks;

    if (cd != NULL)
        l->free_chunks = cd->next;
    else
        cd = malloc(sizeof(*cd));
    return cd;
}

static void chunk_release(struct link *l, struct chunk_done *cd)
{
    cd->next = l->free_chunks;
    l->free_chunks = cd;
}

/* A bounce slot is free again: links that found none try again ('skip'
 * pumps itself once its own accounting is done). */
static void slot_give(struct wst_sender *s, int slot, const struct link *skip)
{
    wst_tx_device_slot_give(s->dev, slot);
    for (size_t i = 0; i < s->n_links; i++)
        if (&s->links[i] != skip && s->links[i].state == LINK_STREAMING)
            pump(&s->links[i]);
}

static void move_done(void *arg, wst_status_t status)
{
    struct chunk_done *cd = arg;
    struct link *l = cd->l;

    if (cd->gather >= 0)
        l->gather_free |= 1u << cd->gather;
    if (cd->slot >= 0)
        slot_give(l->s, cd->slot, l);
    if (cd->mover_gen != l->mover_gen) {
        chunk_release(l, cd); /* a move of a mover that failed */
        return;
    }
    l->in_flight -= cd->len;
    l->bytes_moved += status == WST_OK ? cd->len : 0;
    chunk_release(l, cd);
    if (l->state != LINK_STREAMING)
        return;
    if (status != WST_OK) {
        link_fail(l, status, "moving data failed");
        return;
    }
    pump(l);
}

/* Items from the cursor on that can go as one message: small, in one
 * layer and region, staged alike, each destination right after the last,
 * GATHER_BYTES at most in all. Their byte total goes to *bytes_p. */
static size_t gather_count(const struct link *l, uint64_t *bytes_p)
{
    const struct shard *shards = l->s->shards;
    const struct wst_plan_item *items = l->plan.items;
    const struct wst_plan_item *first = &items[l->cursor];
    int first_device = shards[first->have].device >= 0;
    uint64_t bytes = 0;
    size_t n = 0;

    for (size_t k = l->cursor; k < l->plan.n_items; k++, n++) {
        const struct wst_plan_item *it = &items[k];
        if (it->length >= GATHER_ITEM_MAX ||
            (shards[it->have].device >= 0) != first_device ||
            bytes + it->length > GATHER_BYTES || it->layer != first->layer ||
            it->region != first->region || it->staged != first->staged ||
            it->dst_offset != first->dst_offset + bytes)
            break;
        bytes += it->length;
    }
    *bytes_p = bytes;
    return n;
}

/* The link's gather buffers, registered once, on first use. */
static int gather_ready(struct link *l)
{
    size_t bytes = (size_t)GATHER_BUFS * GATHER_BYTES;

    if (l->gather != NULL)
        return 1;
    l->gather = aligned_alloc(4096, bytes);
    if (l->gather == NULL)
        return 0;
    if (wst_worker_mem_map(l->s->worker, l->gather, bytes, &l->gather_memh) !=
        WST_OK) {
        free(l->gather);
        l->gather = NULL;
        return 0;
    }
    l->gather_free = (1u << GATHER_BUFS) - 1;
    return 1;
}

/* Unregistered while the worker lives; freed once it is gone (no move
 * can read the buffers then). */
static void gather_unmap(struct link *l)
{
    if (l->gather != NULL)
        wst_worker_mem_unmap(l->s->worker, l->gather_memh);
}

/* The cursor passes 'items' whole items, or (items 0) 'len' bytes of the
 * current one. */
static void advance(struct link *l, size_t items, uint64_t len)
{
    if (items > 0) {
        l->cursor += items;
        l->cursor_off = 0;
        return;
    }
    l->cursor_off += len;
    if (l->cursor_off == l->plan.items[l->cursor].length) {
        l->cursor++;
        l->cursor_off = 0;
    }
}

/* Progress thread: a bounce slot is filled; its move goes now. */
static void bounce_filled(void *arg, wst_status_t status, uint64_t done_ns)
{
    struct chunk_done *cd = arg;
    struct link *l = cd->l;
    struct wst_sender *s = l->s;

    (void)done_ns;
    if (cd->mover_gen != l->mover_gen || l->mover == NULL ||
        l->state != LINK_STREAMING) {
        /* A refit that failed meanwhile: nothing of it is moved. */
        slot_give(s, cd->slot, NULL);
        chunk_release(l, cd);
        return;
    }
    l->copying[cd->layer]--;
    if (status != WST_OK) {
        slot_give(s, cd->slot, NULL);
        chunk_release(l, cd);
        link_fail(l, status, "copying layer %u from the GPU failed", cd->layer);
        return;
    }
    wst_status_t st = l->mover->ops->move(l->mover, &cd->mv, move_done, cd);
    if (st != WST_OK) {
        slot_give(s, cd->slot, NULL);
        chunk_release(l, cd);
        link_fail(l, st, "posting a move failed");
        return;
    }
    pump(l); /* the layer's fence may be due */
}

/* Bounce path: copies the device bytes of the next chunk (items 0, 'len'
 * bytes) or of 'items' gathered small items into a free slot; the move
 * follows in bounce_filled. 0 when blocked (window, or no free slot:
 * a slot given back pumps again). */
static int post_bounce(struct link *l, size_t items, uint64_t len)
{
    struct wst_sender *s = l->s;
    const struct wst_plan_item *first = &l->plan.items[l->cursor];
    wst_status_t st = WST_OK;

    if (l->in_flight > 0 && l->in_flight + len > s->window)
        return 0;
    int slot = wst_tx_device_slot_take(s->dev);
    if (slot < 0)
        return 0;
    struct chunk_done *cd = chunk_new(l);
    if (cd == NULL) {
        wst_tx_device_slot_give(s->dev, slot);
        link_fail(l, WST_ERR_NO_MEMORY, "no memory for a move");
        return 0;
    }
    cd->l = l;
    cd->mover_gen = l->mover_gen;
    cd->len = len;
    cd->gather = -1;
    cd->slot = slot;
    cd->layer = first->layer;
    cd->mv = (struct wst_move){
        .src = wst_tx_device_slot(s->dev, slot),
        .src_memh = wst_tx_device_slot_memh(s->dev),
        .length = len,
        .region = first->region,
        .dst_offset = first->dst_offset + l->cursor_off,
        .item = (uint32_t)l->cursor,
        .item_offset = l->cursor_off,
        .item_count = items > 0 ? (uint32_t)items : 1,
        .version = l->version,
    };
    if (items == 0) {
        st = wst_tx_device_fill(s->dev, slot, 0,
                                (const char *)s->shards[first->have].data +
                                    first->src_offset + l->cursor_off,
                                len);
    }
    for (size_t k = 0, at = 0; st == WST_OK && k < items; k++) {
        const struct wst_plan_item *it = &l->plan.items[l->cursor + k];
        st = wst_tx_device_fill(s->dev, slot, at,
                                (const char *)s->shards[it->have].data +
                                    it->src_offset,
                                it->length);
        at += it->length;
    }
    if (st == WST_OK)
        st = wst_tx_device_filled(s->dev, slot, bounce_filled, cd);
    if (st != WST_OK) {
        /* Copies already enqueued may still write the slot: it is lost
         * until the stream drains, and this refit fails anyway. */
        chunk_release(l, cd);
        link_fail(l, st, "copying layer %u from the GPU failed", first->layer);
        return 0;
    }
    l->copying[first->layer]++;
    l->in_flight += len;
    advance(l, items, len);
    return 1;
}

/* Posts one move; the window and cursor advance with it. */
static int post_move(struct link *l, struct wst_move *mv, int gather,
                     size_t items)
{
    struct chunk_done *cd = chunk_new(l);

    if (cd == NULL) {
        link_fail(l, WST_ERR_NO_MEMORY, "no memory for a move");
        return 0;
    }
    cd->l = l;
    cd->mover_gen = l->mover_gen;
    cd->len = mv->length;
    cd->gather = gather;
    cd->slot = -1;
    if (gather >= 0)
        l->gather_free &= ~(1u << gather);
    l->in_flight += mv->length;
    advance(l, items, mv->length);
    wst_status_t st = l->mover->ops->move(l->mover, mv, move_done, cd);
    if (st != WST_OK) {
        l->in_flight -= mv->length;
        if (gather >= 0)
            l->gather_free |= 1u << gather;
        chunk_release(l, cd);
        link_fail(l, st, "posting a move failed");
        return 0;
    }
    return 1;
}

/* Copies the items [cursor, cursor + n) into a gather buffer and posts
 * them as one message; 0 when blocked (window, or every buffer busy:
 * move_done pumps again). */
static int post_gathered(struct link *l, size_t n, uint64_t bytes)
{
    struct wst_sender *s = l->s;
    const struct wst_plan_item *first = &l->plan.items[l->cursor];

    if (l->in_flight > 0 && l->in_flight + bytes > s->window)
        return 0;
    if (l->gather_free == 0)
        return 0;
    int g = __builtin_ctz(l->gather_free);
    unsigned char *buf = l->gather + (size_t)g * GATHER_BYTES, *at = buf;
    for (size_t k = 0; k < n; k++) {
        const struct wst_plan_item *it = &l->plan.items[l->cursor + k];
        memcpy(at, (const char *)s->shards[it->have].data + it->src_offset,
               it->length);
        at += it->length;
    }
    struct wst_move mv = {
        .src = buf,
        .src_memh = l->gather_memh,
        .length = bytes,
        .region = first->region,
        .dst_offset = first->dst_offset,
        .item = (uint32_t)l->cursor,
        .item_offset = 0,
        .item_count = (uint32_t)n,
        .version = l->version,
    };
    return post_move(l, &mv, g, n);
}

/* Posts the next chunk of the current item (or the next small items,
 * gathered); returns 0 when blocked. */
static int post_chunk(struct link *l)
{
    struct wst_sender *s = l->s;
    const struct wst_plan_item *it = &l->plan.items[l->cursor];
    const struct shard *sh = &s->shards[it->have];
    uint64_t len = it->length - l->cursor_off;

    if (it->staged && !l->credits[it->layer])
        return 0; /* on_credit pumps again */
    while (l->started <= it->layer) {
        if (s->progress_fn != NULL)
            s->progress_fn(s->progress_arg, (size_t)(l - s->links), l->started,
                           l->version);
        l->started++;
    }
    int bounce = sh->device >= 0 && l->path == WST_PATH_BOUNCE;
    if (l->cursor_off == 0 && it->length < GATHER_ITEM_MAX) {
        uint64_t bytes;
        size_t n = gather_count(l, &bytes);
        if (n > 1 && bounce)
            return post_bounce(l, n, bytes);
        if (n > 1 && gather_ready(l))
            return post_gathered(l, n, bytes);
    }
    if (len > WST_DATA_CHUNK_MAX)
        len = WST_DATA_CHUNK_MAX;
    if (bounce)
        return post_bounce(l, 0, len);
    if (l->in_flight > 0 && l->in_flight + len > s->window)
        return 0;
    struct wst_move mv = {
        .src = (const char *)sh->data + it->src_offset + l->cursor_off,
        .src_memh = sh->memh,
        .length = len,
        .region = it->region,
        .dst_offset = it->dst_offset + l->cursor_off,
        .item = (uint32_t)l->cursor,
        .item_offset = l->cursor_off,
        .item_count = 1,
        .version = l->version,
    };
    return post_move(l, &mv, -1, 0);
}

/* Progress thread: the GPU has sent layer 'fenced' (exchanges complete
 * in the order they were posted). */
static void nccl_sent(void *arg, wst_status_t status)
{
    struct link *l = arg;
    uint32_t layer = l->fenced;

    if (l->state != LINK_STREAMING)
        return;
    if (status != WST_OK) {
        link_fail(l, status, "nccl send of layer %u failed", layer);
        return;
    }
    l->bytes_moved += l->layer_bytes[layer];
    l->fenced = layer + 1;
    pump(l);
}

/* Posts the next layer as one exchange of its items, in plan order, once
 * its credit (if it stages experts) is in; 0 when blocked. */
static int nccl_step(struct link *l)
{
    struct wst_sender *s = l->s;
    uint32_t layer = l->nccl_next;

    if (layer >= l->plan.n_layers)
        return 0;
    size_t first = l->layer_first[layer], n = l->layer_first[layer + 1] - first;
    for (size_t k = 0; k < n; k++)
        if (l->plan.items[first + k].staged && !l->credits[layer])
            return 0; /* on_credit pumps again */
    while (l->started <= layer) {
        if (s->progress_fn != NULL)
            s->progress_fn(s->progress_arg, (size_t)(l - s->links), l->started,
                           l->version);
        l->started++;
    }
    wst_status_t st = wst_nccl_link_post(l->nccl, l->nccl_runs + first, n, NULL,
                                         0, nccl_sent, l);
    if (st == WST_ERR_BUSY)
        return 0; /* a completion pumps again */
    if (st != WST_OK) {
        link_fail(l, st, "posting layer %u to nccl failed", layer);
        return 0;
    }
    l->nccl_next++;
    return 1;
}

/* One step of the pump; returns 0 when nothing more can be done now.
 * Three things, in this order of priority:
 *  1. LAYER_DONE for the next layer once it is both fenced (visible) and
 *     digested, in layer order;
 *  2. a fence for the next layer as soon as its last item is posted (it
 *     covers only what was posted before it, so later layers keep
 *     streaming while it completes);
 *  3. the next chunk, within the window. Data does not wait for digests:
 *     hashing a layer on the application thread overlaps sending it. */
static int pump_step(struct link *l)
{
    uint32_t n_layers = l->plan.n_layers;

    if (l->state != LINK_STREAMING)
        return 0;
    if (l->done_sent < l->fenced && l->done_sent < l->digests_ready) {
        send_layer_done(l, l->done_sent++);
        return 1;
    }
    if (l->path == WST_PATH_NCCL)
        return nccl_step(l);
    if (!l->fence_pending && l->fence_layer < n_layers &&
        l->cursor >= l->layer_first[l->fence_layer + 1] &&
        l->copying[l->fence_layer] == 0) {
        uint32_t layer = l->fence_layer++;
        l->fence_pending = 1;
        wst_status_t st = l->mover->ops->fence(l->mover, fence_done, l);
        if (st != WST_OK) {
            l->fence_pending = 0;
            link_fail(l, st, "fence of layer %u failed", layer);
            return 0;
        }
        return 1;
    }
    if (l->cursor < l->plan.n_items)
        return post_chunk(l);
    return 0;
}

/* Callbacks may fire inside move() or fence(), re-entering pump: the outer
 * call keeps going instead of recursing. */
static void pump(struct link *l)
{
    if (l->pumping) {
        l->pump_again = 1;
        return;
    }
    l->pumping = 1;
    do {
        l->pump_again = 0;
        while (pump_step(l))
            ;
    } while (l->pump_again);
    l->pumping = 0;
}

/* ---- posted from the application thread ---- */

static void do_connect(void *arg)
{
    struct link *l = arg;
    wst_status_t st;

    if (l->state != LINK_IDLE && l->state != LINK_FAILED)
        return;
    drop_plan(l);
    l->error = WST_OK;
    link_set_state(l, LINK_CONNECTING);
    st = wst_conn_connect(l->s->worker, l->host, l->port, &l->conn);
    if (st != WST_OK) {
        l->conn = NULL;
        link_fail(l, st, "cannot connect");
        return;
    }
    wst_conn_set_user(l->conn, l);
    send_hello_and_have(l);
}

static void do_begin(void *arg)
{
    struct link *l = arg;
    struct wst_msg m = {.type = WST_MSG_BEGIN};

    if (l->state != LINK_PLANNED && l->state != LINK_COMMITTED)
        return;
    l->version = l->s->version;
    l->cursor = 0;
    l->cursor_off = 0;
    /* Moves of a failed refit belong to a mover that is gone: they no
     * longer occupy the window (move_done ignores them). */
    l->in_flight = 0;
    l->fence_layer = 0;
    l->fence_pending = 0;
    l->fenced = 0;
    l->done_sent = 0;
    l->started = 0;
    l->digests_ready = 0;
    l->bytes_moved = 0;
    memset(l->credits, 0, l->plan.n_layers * sizeof(*l->credits));
    memset(l->copying, 0, l->plan.n_layers * sizeof(*l->copying));
    l->nccl_next = 0;
    m.u.begin.version = l->version;
    m.u.begin.plan_hash = l->plan.plan_hash;
    m.u.begin.mover = l->mover_kind;
    link_set_state(l, LINK_BEGIN_SENT);
    link_send(l, &m);
}

struct digest_ready {
    struct link *l;
    uint64_t version;
    uint32_t layer;
    uint64_t digest;
};

static void do_digest_ready(void *arg)
{
    struct digest_ready *d = arg;
    struct link *l = d->l;

    WST_TRACE(&l->s->log, "receiver %s: digest of layer %u ready", l->name,
              d->layer);
    if (l->version == d->version && l->have_plan &&
        d->layer == l->digests_ready) {
        l->digests[d->layer] = d->digest;
        l->digests_ready = d->layer + 1;
        pump(l);
    }
    free(d);
}

/* ---- public API ---- */

static wst_status_t parse_receiver(struct link *l, const char *spec)
{
    const char *colon = spec != NULL ? strrchr(spec, ':') : NULL;
    char *end = NULL;

    if (colon == NULL || colon == spec ||
        (size_t)(colon - spec) >= sizeof(l->host))
        return WST_ERR_INVALID;
    unsigned long port = strtoul(colon + 1, &end, 10);
    if (*end != '\0' || port == 0 || port > 65535)
        return WST_ERR_INVALID;
    memcpy(l->host, spec, (size_t)(colon - spec));
    l->host[colon - spec] = '\0';
    l->port = (uint16_t)port;
    snprintf(l->name, sizeof(l->name), "%s", spec);
    return WST_OK;
}

/* Shared memory may carry data unless UCX_TLS rules it out. */
static int shm_possible(void)
{
    const char *tls = getenv("UCX_TLS");
    static const char *const shm[] = {"sm",  "shm",  "posix", "sysv",
                                      "cma", "knem", "xpmem", "all"};

    if (tls == NULL || *tls == '\0')
        return 1;
    for (size_t i = 0; i < sizeof(shm) / sizeof(shm[0]); i++)
        if (strstr(tls, shm[i]) != NULL)
            return 1;
    return 0;
}

static wst_status_t apply_params(struct wst_sender *s,
                                 const struct wst_sender_params *p)
{
    uint64_t need = WST_SENDER_PARAM_RANK | WST_SENDER_PARAM_WORLD_SIZE |
                    WST_SENDER_PARAM_RECEIVERS;

    if ((p->field_mask & need) != need || p->world_size == 0 ||
        p->rank >= p->world_size || p->n_receivers == 0 || p->receivers == NULL)
        return WST_ERR_INVALID;
    s->rank = p->rank;
    s->world_size = p->world_size;
    s->timeout_s =
        (p->field_mask & WST_SENDER_PARAM_TIMEOUT) && p->timeout_s > 0
            ? p->timeout_s
            : 30.0;
    s->window = (p->field_mask & WST_SENDER_PARAM_WINDOW) && p->window_bytes
                    ? p->window_bytes
                    : DEFAULT_WINDOW;
    s->heartbeat_s = 1.0;
    s->peer_timeout_s = 5.0;
    if (p->field_mask & WST_SENDER_PARAM_HEARTBEAT) {
        if (p->heartbeat_s <= 0 || p->peer_timeout_s <= p->heartbeat_s)
            return WST_ERR_INVALID;
        s->heartbeat_s = p->heartbeat_s;
        s->peer_timeout_s = p->peer_timeout_s;
    }
    s->mover_pref = 0;
    if ((p->field_mask & WST_SENDER_PARAM_MOVER) && p->mover != NULL &&
        strcmp(p->mover, "auto") != 0) {
        s->mover_pref = wst_mover_kind_parse(p->mover);
        if (s->mover_pref == 0)
            return WST_ERR_INVALID;
    }
    snprintf(s->log_name, sizeof(s->log_name), "sender[%u]", p->rank);
    wst_logger_init(&s->log, s->log_name, WST_LOG_INFO);
    if (p->field_mask & WST_SENDER_PARAM_LOG) {
        if (p->log_level >= 0 && p->log_level <= WST_LOG_TRACE)
            s->log.level = (enum wst_log_level)p->log_level;
        s->log.sink = p->log_fn;
        s->log.sink_arg = p->log_arg;
    }
    if (p->field_mask & WST_SENDER_PARAM_PROGRESS) {
        s->progress_fn = p->progress_fn;
        s->progress_arg = p->progress_arg;
    }
    s->path_pref = WST_PATH_PREF_AUTO;
    if ((p->field_mask & WST_SENDER_PARAM_DEVICE_PATH) &&
        wst_path_pref_parse(p->device_path, &s->path_pref) != WST_OK) {
        WST_ERROR(&s->log,
                  "device_path '%s': want auto, direct, bounce or nccl",
                  p->device_path);
        return WST_ERR_INVALID;
    }
    uint64_t bounce = (p->field_mask & WST_SENDER_PARAM_BOUNCE)
                          ? p->bounce_bytes
                          : DEFAULT_BOUNCE;
    if (bounce / WST_BOUNCE_SLOT_BYTES < WST_BOUNCE_MIN_SLOTS ||
        bounce / WST_BOUNCE_SLOT_BYTES > WST_BOUNCE_MAX_SLOTS) {
        WST_ERROR(&s->log, "bounce_bytes %llu: want %u to %u slots of %llu MiB",
                  (unsigned long long)bounce, WST_BOUNCE_MIN_SLOTS,
                  WST_BOUNCE_MAX_SLOTS,
                  (unsigned long long)(WST_BOUNCE_SLOT_BYTES >> 20));
        return WST_ERR_INVALID;
    }
    s->bounce_slots = (uint32_t)(bounce / WST_BOUNCE_SLOT_BYTES);
    int shm_data = (p->field_mask & WST_SENDER_PARAM_SHM_DATA) && p->shm_data;
    s->data_peer_errors = !(shm_data && shm_possible());
    return WST_OK;
}

wst_status_t wst_sender_create(const struct wst_sender_params *params,
                               wst_sender_t **sender_p)
{
    wst_status_t st = WST_ERR_NO_MEMORY;
    struct wst_sender *s = calloc(1, sizeof(*s));

    if (s == NULL)
        return WST_ERR_NO_MEMORY;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    st = apply_params(s, params);
    if (st != WST_OK)
        goto err_free;
    s->session = wst_now_ns() ^ ((uint64_t)params->rank << 48);
    s->links = calloc(params->n_receivers, sizeof(*s->links));
    if (s->links == NULL) {
        st = WST_ERR_NO_MEMORY;
        goto err_free;
    }
    s->n_links = params->n_receivers;
    for (size_t i = 0; i < s->n_links; i++) {
        s->links[i].s = s;
        st = parse_receiver(&s->links[i], params->receivers[i]);
        if (st != WST_OK) {
            WST_ERROR(&s->log, "bad receiver address '%s': want host:port",
                      params->receivers[i] ? params->receivers[i] : "");
            goto err_free_links;
        }
    }
    struct wst_msg hb = {.type = WST_MSG_HEARTBEAT};
    uint8_t *hb_buf = NULL;
    size_t hb_len = 0;
    st = wst_msg_encode(&hb, &hb_buf, &hb_len);
    if (st != WST_OK)
        goto err_free_links;
    struct wst_worker_params wp = {
        .log = &s->log,
        .ops = {.arg = s, .message = on_message, .conn_failed = on_conn_failed},
        .heartbeat = {.interval_s = s->heartbeat_s,
                      .timeout_s = s->peer_timeout_s,
                      .msg = hb_buf,
                      .msg_len = hb_len},
    };
    st = wst_worker_create(&wp, &s->worker);
    free(hb_buf);
    if (st != WST_OK)
        goto err_free_links;
    WST_DEBUG(&s->log, "data endpoints %s peer-failure detection",
              s->data_peer_errors ? "with" : "without (shared memory)");
    *sender_p = s;
    return WST_OK;

err_free_links:
    free(s->links);
err_free:
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->lock);
    free(s);
    return st;
}

static wst_status_t shard_to_have(const struct wst_shard *sh,
                                  struct wst_have *h, uint64_t *bytes_p)
{
    uint64_t elems;

    memset(h, 0, sizeof(*h));
    if (sh->name == NULL || strlen(sh->name) >= WST_NAME_MAX || sh->ndim == 0 ||
        sh->ndim > WST_MAX_DIMS || sh->shape == NULL || sh->box_start == NULL ||
        sh->box_stop == NULL)
        return WST_ERR_INVALID;
    strcpy(h->tensor.name, sh->name);
    h->tensor.dtype = (enum wst_dtype)sh->dtype;
    h->tensor.ndim = sh->ndim;
    memcpy(h->tensor.shape, sh->shape, sh->ndim * sizeof(uint64_t));
    h->flat = sh->flat != 0;
    h->box.ndim = h->flat ? 1 : sh->ndim;
    memcpy(h->box.start, sh->box_start, h->box.ndim * sizeof(uint64_t));
    memcpy(h->box.stop, sh->box_stop, h->box.ndim * sizeof(uint64_t));
    h->mem = (enum wst_mem_type)sh->mem_type;
    wst_status_t st = wst_have_check(h);
    if (st != WST_OK)
        return st;
    elems = wst_box_elems(&h->box);
    *bytes_p = elems * wst_dtype_size(h->tensor.dtype);
    return WST_OK;
}

/* The shard's memory must be what it says (UCX given a device pointer it
 * cannot read crashes); the first device shard brings up the GPU side. */
static wst_status_t shard_memory(struct wst_sender *s,
                                 const struct wst_shard *sh,
                                 struct shard *entry)
{
    int device = -1;
    enum wst_mem_type found = wst_gpu_mem_type(sh->data, &device);

    entry->device = -1;
    if (entry->bytes > 0 && (int)found != sh->mem_type) {
        WST_ERROR(&s->log,
                  "register '%s': declared %s memory, but the pointer is %s "
                  "memory%s",
                  sh->name, wst_mem_type_name((enum wst_mem_type)sh->mem_type),
                  wst_mem_type_name(found),
                  wst_kernels_built_with_cuda() ? "" : " (built without CUDA)");
        return WST_ERR_INVALID;
    }
    if (found != WST_MEM_CUDA || entry->bytes == 0)
        return WST_OK;
    if (s->dev != NULL && wst_tx_device_ordinal(s->dev) != device) {
        WST_ERROR(&s->log,
                  "register '%s': on GPU %d, but other shards are on GPU %d; "
                  "one sender reads one GPU",
                  sh->name, device, wst_tx_device_ordinal(s->dev));
        return WST_ERR_UNSUPPORTED;
    }
    if (s->dev == NULL) {
        wst_status_t st = wst_tx_device_create(&s->log, s->worker, device,
                                               s->bounce_slots, &s->dev);
        if (st != WST_OK) {
            WST_ERROR(&s->log, "register '%s': cannot set up GPU %d (%s)",
                      sh->name, device, wst_status_string(st));
            return st;
        }
        char name[128] = "?";
        wst_gpu_device_name(&s->log, device, name, sizeof(name));
        WST_INFO(&s->log,
                 "device shards on GPU %d (%s); bounce ring %u x %llu MiB "
                 "pinned, registered once",
                 device, name, s->bounce_slots,
                 (unsigned long long)(WST_BOUNCE_SLOT_BYTES >> 20));
    }
    entry->device = device;
    return WST_OK;
}

/* A refused registration: the message goes to the log and, for the
 * application (wst_sender_last_error), into last_error. */
static wst_status_t register_refused(struct wst_sender *s,
                                     const struct wst_shard *sh,
                                     wst_status_t st, const char *why)
{
    snprintf(s->last_error, sizeof(s->last_error), "register '%s': %s (%s)",
             sh->name ? sh->name : "(null)", why, wst_status_name(st));
    WST_ERROR(&s->log, "%s", s->last_error);
    return st;
}

wst_status_t wst_sender_register(wst_sender_t *s, const struct wst_shard *sh)
{
    struct shard entry = {0};
    wst_status_t st;

    s->last_error[0] = '\0';
    if (s->version != 0)
        return register_refused(s, sh, WST_ERR_STATE,
                                "shards are registered before the first push");
    if (sh->mem_type != WST_MEM_HOST && sh->mem_type != WST_MEM_CUDA) {
        char why[48];
        snprintf(why, sizeof(why), "unknown memory type %d", sh->mem_type);
        return register_refused(s, sh, WST_ERR_INVALID, why);
    }
    st = shard_to_have(sh, &entry.have, &entry.bytes);
    if (st != WST_OK)
        return register_refused(s, sh, st, "invalid shard description");
    for (size_t i = 0; i < s->n_shards; i++)
        if (strcmp(s->shards[i].have.tensor.name, sh->name) == 0)
            return register_refused(s, sh, WST_ERR_INVALID, "registered twice");
    if (entry.bytes > 0 && sh->data == NULL)
        return register_refused(s, sh, WST_ERR_INVALID, "no data pointer");
    entry.data = sh->data;
    st = shard_memory(s, sh, &entry);
    if (st != WST_OK)
        return register_refused(s, sh, st,
                                "its memory cannot be used (the log says why)");
    /* Device memory is registered only with a UCX that can read it; the
     * bounce path reads it through its own registered ring. */
    if (entry.bytes > 0 &&
        (entry.device < 0 || wst_worker_supports_cuda(s->worker))) {
        st = wst_worker_mem_map(s->worker, (void *)sh->data, entry.bytes,
                                &entry.memh);
        if (st != WST_OK)
            return register_refused(s, sh, st,
                                    "UCX cannot register its memory");
    }
    struct shard *grown =
        realloc(s->shards, (s->n_shards + 1) * sizeof(*s->shards));
    if (grown == NULL) {
        wst_worker_mem_unmap(s->worker, entry.memh);
        return register_refused(s, sh, WST_ERR_NO_MEMORY, "out of memory");
    }
    s->shards = grown;
    s->shards[s->n_shards++] = entry;
    return WST_OK;
}

static void set_error(struct wst_sender *s, const struct link *l)
{
    snprintf(s->last_error, sizeof(s->last_error), "receiver %s: %s", l->name,
             l->error_msg);
}

/* Waits (lock held) until every link satisfies 'done' or one failed. */
static wst_status_t wait_links(struct wst_sender *s,
                               int (*done)(const struct link *, uint64_t),
                               uint64_t version, double timeout_s,
                               const char *what)
{
    uint64_t deadline = wst_deadline_ns(timeout_s);
    struct timespec ts;

    for (;;) {
        size_t n_done = 0;
        for (size_t i = 0; i < s->n_links; i++) {
            const struct link *l = &s->links[i];
            if (l->state == LINK_FAILED) {
                set_error(s, l);
                return l->error != WST_OK ? l->error : WST_ERR_PEER_FAILED;
            }
            n_done += done(l, version) != 0;
        }
        if (n_done == s->n_links)
            return WST_OK;
        if (wst_now_ns() >= deadline) {
            for (size_t i = 0; i < s->n_links; i++)
                if (!done(&s->links[i], version)) {
                    snprintf(s->last_error, sizeof(s->last_error),
                             "receiver %s: timed out after %.1f s waiting "
                             "for %s",
                             s->links[i].name, timeout_s, what);
                    break;
                }
            WST_ERROR(&s->log, "%s", s->last_error);
            return WST_ERR_TIMED_OUT;
        }
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&s->cond, &s->lock, &ts);
    }
}

static int link_planned(const struct link *l, uint64_t version)
{
    (void)version;
    return l->state == LINK_PLANNED || l->state == LINK_COMMITTED;
}

static int link_committed(const struct link *l, uint64_t version)
{
    return l->state == LINK_COMMITTED && l->committed == version;
}

/* One layer's digest for one link: host runs on this thread, device runs
 * on the GPU. */
static wst_status_t layer_digest(struct wst_sender *s, const struct link *l,
                                 uint32_t layer, uint64_t *digest_p)
{
    struct wst_digest d;
    wst_status_t st = WST_OK;

    wst_digest_init(&d);
    for (size_t k = l->layer_first[layer];
         st == WST_OK && k < l->layer_first[layer + 1]; k++) {
        const struct wst_plan_item *it = &l->plan.items[k];
        const struct shard *sh = &s->shards[it->have];
        const char *run = (const char *)sh->data + it->src_offset;
        if (sh->device >= 0)
            st = wst_tx_device_digest_add(s->dev, &d, run, it->length);
        else
            wst_digest_update(&d, run, it->length);
    }
    if (st == WST_OK && s->dev != NULL)
        st = wst_tx_device_digest_flush(s->dev, &d);
    *digest_p = wst_digest_final(&d);
    return st;
}

static void compute_digests(struct wst_sender *s, uint64_t version)
{
    uint32_t max_layers = 0;

    for (size_t i = 0; i < s->n_links; i++)
        if (s->links[i].plan.n_layers > max_layers)
            max_layers = s->links[i].plan.n_layers;
    /* Layer-major, so the first layer of every receiver is ready first. */
    for (uint32_t layer = 0; layer < max_layers; layer++) {
        for (size_t i = 0; i < s->n_links; i++) {
            struct link *l = &s->links[i];
            if (layer >= l->plan.n_layers)
                continue;
            uint64_t digest;
            if (layer_digest(s, l, layer, &digest) != WST_OK) {
                WST_ERROR(&s->log,
                          "receiver %s: cannot digest layer %u on the GPU: "
                          "the refit stalls into its deadline",
                          l->name, layer);
                continue;
            }
            struct digest_ready *dr = malloc(sizeof(*dr));
            if (dr == NULL)
                continue; /* the refit then stalls into its deadline */
            dr->l = l;
            dr->version = version;
            dr->layer = layer;
            dr->digest = digest;
            wst_worker_post(s->worker, do_digest_ready, dr);
        }
    }
}

wst_status_t wst_sender_push(wst_sender_t *s, uint64_t version)
{
    return wst_sender_push_after(s, version, NULL);
}

wst_status_t wst_sender_push_after(wst_sender_t *s, uint64_t version,
                                   void *cuda_event)
{
    wst_status_t st;

    s->last_error[0] = '\0';
    if (version == 0 || version <= s->version) {
        snprintf(s->last_error, sizeof(s->last_error),
                 "version %llu is not above the last pushed (%llu)",
                 (unsigned long long)version, (unsigned long long)s->version);
        return WST_ERR_INVALID;
    }
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->n_links; i++) {
        enum link_state ls = s->links[i].state;
        if (ls == LINK_BEGIN_SENT || ls == LINK_STREAMING) {
            snprintf(s->last_error, sizeof(s->last_error),
                     "receiver %s: version %llu is still in flight",
                     s->links[i].name, (unsigned long long)s->version);
            pthread_mutex_unlock(&s->lock);
            return WST_ERR_BUSY;
        }
        /* A link that failed before reconnects now: its old error must
         * not answer for this push (link_fail already closed it). */
        if (ls == LINK_FAILED) {
            s->links[i].state = LINK_IDLE;
            s->links[i].error = WST_OK;
        }
    }
    pthread_mutex_unlock(&s->lock);
    for (size_t i = 0; i < s->n_links; i++)
        wst_worker_post(s->worker, do_connect, &s->links[i]);
    pthread_mutex_lock(&s->lock);
    st = wait_links(s, link_planned, 0, s->timeout_s, "a plan");
    pthread_mutex_unlock(&s->lock);
    if (st != WST_OK)
        return st;
    /* Before the first copy or digest of this push is enqueued. */
    if (cuda_event != NULL && s->dev != NULL) {
        st = wst_tx_device_after(s->dev, cuda_event);
        if (st != WST_OK) {
            snprintf(s->last_error, sizeof(s->last_error),
                     "cannot wait for the shards' ready event (%s)",
                     wst_status_string(st));
            return st;
        }
    }
    s->version = version;
    for (size_t i = 0; i < s->n_links; i++)
        wst_worker_post(s->worker, do_begin, &s->links[i]);
    compute_digests(s, version);
    return WST_OK;
}

/* Progress thread: one line per refit on what the bounce path did. */
static void log_bounce(void *arg)
{
    struct wst_sender *s = arg;
    struct wst_bounce_stats b;

    wst_tx_device_take_stats(s->dev, &b);
    if (b.fills == 0)
        return;
    WST_INFO(&s->log,
             "bounce: %llu slots filled, %.1f MiB from GPU %d; "
             "device-to-host %.3f ms mean, %.3f ms max per slot; "
             "no free slot %llu times",
             (unsigned long long)b.fills, (double)b.bytes / (1 << 20),
             wst_tx_device_ordinal(s->dev),
             (double)b.copy_ns_sum / (double)b.fills / 1e6,
             (double)b.copy_ns_max / 1e6, (unsigned long long)b.no_slot);
}

wst_status_t wst_sender_wait(wst_sender_t *s, double timeout_s)
{
    wst_status_t st;

    pthread_mutex_lock(&s->lock);
    st = wait_links(s, link_committed, s->version, timeout_s, "the commit");
    pthread_mutex_unlock(&s->lock);
    if (s->dev != NULL)
        wst_worker_call(s->worker, log_bounce, s);
    return st;
}

const char *wst_sender_last_error(wst_sender_t *s)
{
    return s->last_error;
}

uint64_t wst_sender_bytes_moved(const wst_sender_t *s)
{
    uint64_t total = 0;

    for (size_t i = 0; i < s->n_links; i++)
        total += s->links[i].bytes_moved;
    return total;
}

const char *wst_sender_lanes(const wst_sender_t *s, size_t i)
{
    return i < s->n_links && s->links[i].lanes[0] ? s->links[i].lanes : NULL;
}

const char *wst_sender_mover(const wst_sender_t *s, size_t i)
{
    if (i >= s->n_links || s->links[i].mover_kind == 0)
        return NULL;
    return wst_mover_kind_name(s->links[i].mover_kind);
}

static void close_links(void *arg)
{
    struct wst_sender *s = arg;

    for (size_t i = 0; i < s->n_links; i++) {
        struct link *l = &s->links[i];
        if (l->mover != NULL)
            wst_mover_destroy(l->mover);
        nccl_drop(l);
        if (l->conn != NULL)
            wst_conn_close(l->conn);
        l->mover = NULL;
        l->conn = NULL;
        drop_plan(l);
        free(l->address.data);
        l->address.data = NULL;
    }
}

void wst_sender_destroy(wst_sender_t *s)
{
    if (s == NULL)
        return;
    wst_worker_call(s->worker, close_links, s);
    for (size_t i = 0; i < s->n_shards; i++)
        wst_worker_mem_unmap(s->worker, s->shards[i].memh);
    for (size_t i = 0; i < s->n_links; i++)
        gather_unmap(&s->links[i]);
    wst_tx_device_stop(s->dev);    /* no copy completes into a link after it */
    wst_worker_destroy(s->worker); /* after it, no move calls back */
    wst_tx_device_destroy(s->dev);
    for (size_t i = 0; i < s->n_links; i++)
        free(s->links[i].gather);
    for (size_t i = 0; i < s->n_links; i++)
        while (s->links[i].free_chunks != NULL) {
            struct chunk_done *cd = s->links[i].free_chunks;
            s->links[i].free_chunks = cd->next;
            free(cd);
        }
    free(s->shards);
    free(s->links);
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->lock);
    free(s);
}
