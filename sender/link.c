/* link.c - one link per receiver: its connection, the control messages
 * from the receiver, and its state.
 *
 * A link's life, driven on the progress thread:
 *
 *   IDLE ─connect─▶ CONNECTING ─PLAN─▶ PLANNED ─push: BEGIN(V)─▶ BEGIN_SENT
 *     ▲                                   ▲             READY, GO (group.c) │
 * ack │ (next push reconnects)            └──── COMMIT(V) ◀─ STREAMING ◀────┘
 *   FAILED ◀── any error, ERROR message or dead peer,     PREPARED, COMMIT
 *              from any state                             (group.c)
 *
 * On connect the sender sends HELLO and its HAVE manifest at once; the
 * receiver answers HELLO (with its worker address, and those of its further
 * data lanes) and, once every sender rank has reported, a PLAN: this
 * sender's items, the receiver's regions and keys. The plan is kept for
 * later pushes (a static schedule).
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "lanes.h"
#include "log.h"
#include "manifest.h"
#include "mover.h"
#include "sender_internal.h"
#include "worker.h"

/* ---- state changes seen by the application thread ---- */

void wst_link_set_state(struct link *l, enum link_state st)
{
    pthread_mutex_lock(&l->s->lock);
    l->state = st;
    pthread_cond_broadcast(&l->s->cond);
    pthread_mutex_unlock(&l->s->lock);
}

/* Records the failure for the application; the sending half goes now,
 * the connection now or after 'linger_s' (an ERROR just sent gets out). */
static void fail_link(struct link *l, wst_status_t status, const char *msg,
                      double linger_s)
{
    WST_ERROR(&l->s->log, "receiver %s: %s (%s)", l->name, msg,
              wst_status_string(status));
    pthread_mutex_lock(&l->s->lock);
    l->error = status;
    snprintf(l->error_msg, sizeof(l->error_msg), "%s", msg);
    l->state = LINK_FAILED;
    pthread_cond_broadcast(&l->s->cond);
    pthread_mutex_unlock(&l->s->lock);
    wst_send_skip_digests(l); /* its refit is over */
    /* The connection and the sending half go now: a failed link
     * reconnects from scratch at the next push. */
    wst_link_close_mover(l);
    if (l->conn != NULL) {
        if (linger_s > 0)
            wst_conn_close_later(l->conn, linger_s);
        else
            wst_conn_close(l->conn);
        l->conn = NULL;
    }
}

void wst_link_fail(struct link *l, wst_status_t status, const char *fmt, ...)
{
    char msg[WST_ERROR_MSG_MAX];
    va_list ap;

    if (l->state == LINK_FAILED)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fail_link(l, status, msg, 0);
    /* The rest of its engine group must end this refit the same way. */
    wst_send_group_update(l);
}

void wst_link_abort(struct link *l, wst_status_t status, const char *why)
{
    struct wst_msg m = {.type = WST_MSG_ERROR};

    if (l->state == LINK_FAILED)
        return;
    m.u.error.status = status;
    snprintf(m.u.error.message, sizeof(m.u.error.message), "%s", why);
    l->aborted = 1;
    if (wst_link_send(l, &m) == WST_OK)
        fail_link(l, status, why, 1.0);
}

/* ---- sending control messages ---- */

wst_status_t wst_link_send(struct link *l, const struct wst_msg *msg)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    wst_status_t st = wst_msg_encode(msg, &buf, &len);

    if (st != WST_OK) {
        wst_link_fail(l, st, "cannot encode %s", wst_msg_type_name(msg->type));
        return st;
    }
    st = wst_conn_send(l->conn, buf, len);
    if (st != WST_OK)
        wst_link_fail(l, st, "sending %s failed", wst_msg_type_name(msg->type));
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
    m.u.hello.tcp_rx_seg = wst_worker_tcp_rx_seg(s->worker);
    st = wst_link_send(l, &m);
    if (st != WST_OK)
        return st;

    struct wst_have *haves =
        calloc(s->n_shards ? s->n_shards : 1, sizeof(*haves));
    if (haves == NULL) {
        wst_link_fail(l, WST_ERR_NO_MEMORY, "no memory for the have manifest");
        return WST_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < s->n_shards; i++)
        haves[i] = s->shards[i].have;
    memset(&m, 0, sizeof(m));
    m.type = WST_MSG_HAVE;
    m.u.have.rank = s->rank;
    m.u.have.n_entries = s->n_shards;
    m.u.have.entries = haves;
    st = wst_link_send(l, &m);
    free(haves);
    return st;
}

/* ---- handling messages from a receiver ---- */

static void on_hello(struct link *l, struct wst_msg *m)
{
    if (m->u.hello.protocol_version != WST_PROTOCOL_VERSION) {
        wst_link_fail(l, WST_ERR_VERSION, "receiver speaks protocol %u, we %u",
                      m->u.hello.protocol_version, WST_PROTOCOL_VERSION);
        return;
    }
    if (m->u.hello.role != WST_ROLE_RECEIVER ||
        m->u.hello.worker_address.len == 0) {
        wst_link_fail(l, WST_ERR_PROTOCOL, "hello without a receiver address");
        return;
    }
    /* The receiver refuses us first (control.c); this says it here too. */
    uint64_t seg = wst_worker_tcp_rx_seg(l->s->worker);
    if (!wst_ucx_tcp_seg_fits(seg, m->u.hello.tcp_rx_seg)) {
        wst_link_fail(l, WST_ERR_CONFIG,
                      "our UCX tcp segments (%llu bytes, "
                      "UCX_TCP_RX_SEG_SIZE) exceed the receiver's (%llu): "
                      "its UCX would abort on our fragments; give the "
                      "sender a value no larger than the agent's",
                      (unsigned long long)seg,
                      (unsigned long long)m->u.hello.tcp_rx_seg);
        return;
    }
    wst_link_drop_addresses(l);
    l->address = m->u.hello.worker_address; /* take ownership */
    m->u.hello.worker_address.data = NULL;
    m->u.hello.worker_address.len = 0;
    l->n_lane_addresses = m->u.hello.n_lane_addresses; /* and of these */
    memcpy(l->lane_addresses, m->u.hello.lane_addresses,
           l->n_lane_addresses * sizeof(l->lane_addresses[0]));
    m->u.hello.n_lane_addresses = 0;
    WST_DEBUG(&l->s->log, "receiver %s: hello, rank %u, %zu further lanes",
              l->name, m->u.hello.rank, l->n_lane_addresses);
}

static void on_want_summary(struct link *l, const struct wst_want_summary *w)
{
    if (!w->usable)
        WST_WARN(&l->s->log, "receiver %s is unusable: %s", l->name, w->reason);
    pthread_mutex_lock(&l->s->lock);
    l->held_version = w->committed_version;
    memcpy(l->held_label, w->committed_label, sizeof(l->held_label));
    pthread_mutex_unlock(&l->s->lock);
    snprintf(l->group, sizeof(l->group), "%s", w->group);
    l->group_size = w->group_size;
    l->group_member = w->group_member;
}

static wst_status_t index_layers(struct link *l)
{
    const struct wst_plan_msg *p = &l->plan;

    l->layer_first = calloc(p->n_layers + 1, sizeof(*l->layer_first));
    l->layer_bytes = calloc(p->n_layers, sizeof(*l->layer_bytes));
    l->digests = calloc(p->n_layers, sizeof(*l->digests));
    l->digest_in = calloc(p->n_layers, sizeof(*l->digest_in));
    l->credits = calloc(p->n_layers, sizeof(*l->credits));
    if (l->layer_first == NULL || l->layer_bytes == NULL ||
        l->digests == NULL || l->digest_in == NULL || l->credits == NULL)
        return WST_ERR_NO_MEMORY;
    /* Items arrive sorted by layer (checked here, relied on by pump). */
    size_t i = 0;
    for (uint32_t layer = 0; layer < p->n_layers; layer++) {
        l->layer_first[layer] = i;
        for (; i < p->n_items && p->items[i].layer == layer; i++)
            l->layer_bytes[layer] += wst_plan_item_bytes(&p->items[i]);
    }
    l->layer_first[p->n_layers] = i;
    return i == p->n_items ? WST_OK : WST_ERR_PROTOCOL;
}

void wst_link_drop_plan(struct link *l)
{
    wst_link_close_mover(l); /* it borrows the plan */
    if (l->have_plan) {
        struct wst_msg m = {.type = WST_MSG_PLAN, .u.plan = l->plan};
        wst_msg_release(&m);
    }
    memset(&l->plan, 0, sizeof(l->plan));
    l->have_plan = 0;
    wst_send_free_digest_pieces(l);
    free(l->layer_first);
    free(l->layer_bytes);
    free(l->digests);
    free(l->digest_in);
    free(l->credits);
    free(l->srcs);
    l->srcs = NULL;
    l->layer_first = NULL;
    l->layer_bytes = NULL;
    l->digests = NULL;
    l->digest_in = NULL;
    l->credits = NULL;
}

void wst_link_drop_addresses(struct link *l)
{
    free(l->address.data);
    l->address.data = NULL;
    l->address.len = 0;
    for (size_t i = 0; i < l->n_lane_addresses; i++)
        free(l->lane_addresses[i].data);
    memset(l->lane_addresses, 0, sizeof(l->lane_addresses));
    l->n_lane_addresses = 0;
}

static void on_plan(struct link *l, struct wst_msg *m)
{
    struct wst_sender *s = l->s;
    char err[256];
    wst_status_t st;

    if (l->state != LINK_CONNECTING || l->address.len == 0) {
        wst_link_fail(l, WST_ERR_PROTOCOL, "unexpected plan");
        return;
    }
    struct wst_have *haves =
        calloc(s->n_shards ? s->n_shards : 1, sizeof(*haves));
    if (haves == NULL) {
        wst_link_fail(l, WST_ERR_NO_MEMORY, "no memory to check the plan");
        return;
    }
    for (size_t i = 0; i < s->n_shards; i++)
        haves[i] = s->shards[i].have;
    st = wst_plan_msg_check(&m->u.plan, haves, s->n_shards, err, sizeof(err));
    free(haves);
    if (st == WST_OK && m->u.plan.sender != s->rank)
        st = WST_ERR_PROTOCOL;
    if (st != WST_OK) {
        wst_link_fail(l, st, "refusing plan: %s", err);
        return;
    }
    wst_link_drop_plan(l);
    l->plan = m->u.plan; /* take ownership */
    l->have_plan = 1;
    s->plans_taken++;
    memset(&m->u.plan, 0, sizeof(m->u.plan));
    st = index_layers(l);
    if (st == WST_OK)
        st = wst_link_open_mover(l);
    if (st != WST_OK) {
        wst_link_fail(l, st, "cannot set up the data path");
        return;
    }
    if (l->path != WST_PATH_NCCL)
        wst_link_set_state(l, LINK_PLANNED);
}

static void on_begin_ack(struct link *l, const struct wst_begin *b)
{
    if (!b->ack || l->state != LINK_BEGIN_SENT || b->version != l->version ||
        !l->go_sent) {
        wst_link_fail(l, WST_ERR_PROTOCOL, "unexpected begin for version %llu",
                      (unsigned long long)b->version);
        return;
    }
    wst_link_set_state(l, LINK_STREAMING);
    wst_send_pump(l);
}

/* READY: the receiver's engine paused; PREPARED: it holds every layer of
 * ours (and the others'), verified and finalized. group.c decides what
 * follows. */
static void on_barrier(struct link *l, const struct wst_barrier *b)
{
    int ok = b->version == l->version;

    if (b->step == WST_BARRIER_READY)
        ok = ok && l->state == LINK_BEGIN_SENT && !l->ready;
    else if (b->step == WST_BARRIER_PREPARED)
        ok = ok && l->state == LINK_STREAMING && !l->prepared &&
             l->done_sent == l->plan.n_layers;
    else
        ok = 0;
    if (!ok) {
        wst_link_fail(l, WST_ERR_PROTOCOL,
                      "unexpected barrier step %d for version %llu", b->step,
                      (unsigned long long)b->version);
        return;
    }
    if (b->step == WST_BARRIER_READY)
        l->ready = 1;
    else
        l->prepared = 1;
    wst_send_group_update(l);
}

/* A credit may overtake nothing (it follows the begin acknowledgement on
 * the same endpoint) but is accepted in BEGIN_SENT too, so the order of
 * control messages is not load-bearing. */
static void on_credit(struct link *l, const struct wst_credit *c)
{
    if (c->version != l->version || c->layer >= l->plan.n_layers ||
        (l->state != LINK_BEGIN_SENT && l->state != LINK_STREAMING)) {
        wst_link_fail(l, WST_ERR_PROTOCOL,
                      "unexpected credit for layer %u of version %llu",
                      c->layer, (unsigned long long)c->version);
        return;
    }
    WST_DEBUG(&l->s->log, "receiver %s: credit for layer %u", l->name,
              c->layer);
    l->credits[c->layer] = 1;
    wst_send_pump(l);
}

static void on_commit(struct link *l, const struct wst_commit *c)
{
    if (c->version != l->version || l->state != LINK_STREAMING ||
        !l->prepared) {
        wst_link_fail(l, WST_ERR_PROTOCOL, "unexpected commit of version %llu",
                      (unsigned long long)c->version);
        return;
    }
    pthread_mutex_lock(&l->s->lock);
    l->committed = c->version;
    l->held_version = c->version;
    memcpy(l->held_label, l->label, sizeof(l->held_label));
    l->state = LINK_COMMITTED;
    pthread_cond_broadcast(&l->s->cond);
    pthread_mutex_unlock(&l->s->lock);
}

void wst_link_on_message(void *arg, wst_conn_t *conn, const void *buf,
                         size_t len)
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
        wst_link_fail(l, st, "bad message: %s", err);
        return;
    }
    WST_TRACE(&s->log, "receiver %s: %s", l->name, wst_msg_type_name(m.type));
    switch (m.type) {
    case WST_MSG_HELLO:
        on_hello(l, &m);
        break;
    case WST_MSG_WANT_SUMMARY:
        on_want_summary(l, &m.u.want_summary);
        break;
    case WST_MSG_BARRIER:
        on_barrier(l, &m.u.barrier);
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
        wst_link_on_nccl_ready(l, &m.u.nccl_ready);
        break;
    case WST_MSG_ERROR:
        wst_link_fail(l, (wst_status_t)m.u.error.status, "receiver reports: %s",
                      m.u.error.message);
        break;
    case WST_MSG_HEARTBEAT:
        break;
    default:
        wst_link_fail(l, WST_ERR_PROTOCOL, "unexpected %s message",
                      wst_msg_type_name(m.type));
        break;
    }
    wst_msg_release(&m);
}

void wst_link_on_conn_failed(void *arg, wst_conn_t *conn, wst_status_t status,
                             const char *why)
{
    struct link *l = wst_conn_user(conn);

    (void)arg;
    if (l != NULL)
        wst_link_fail(l, status, "connection lost: %s", why);
}

/* ---- posted from the application thread ---- */

void wst_link_do_connect(void *arg)
{
    struct link *l = arg;
    wst_status_t st;

    if (l->state != LINK_IDLE && l->state != LINK_FAILED)
        return;
    wst_link_drop_plan(l);
    l->error = WST_OK;
    wst_link_set_state(l, LINK_CONNECTING);
    st = wst_conn_connect(l->s->worker, l->host, l->port, &l->conn);
    if (st != WST_OK) {
        l->conn = NULL;
        wst_link_fail(l, st, "cannot connect");
        return;
    }
    wst_conn_set_user(l->conn, l);
    send_hello_and_have(l);
}

void wst_link_do_begin(void *arg)
{
    struct link *l = arg;
    struct wst_msg m = {.type = WST_MSG_BEGIN};

    if (l->state != LINK_PLANNED && l->state != LINK_COMMITTED)
        return;
    l->version = l->s->version;
    memcpy(l->label, l->s->label, sizeof(l->label));
    l->cur = (struct wst_tx_cursor){0};
    l->fence_layer = 0;
    l->fence_pending = 0;
    l->fenced = 0;
    l->done_sent = 0;
    l->done_batch = 0;
    l->started = 0;
    l->digests_ready = 0;
    memset(l->digest_in, 0, l->plan.n_layers * sizeof(*l->digest_in));
    l->bytes_moved = 0;
    l->ready = l->prepared = l->go_sent = l->commit_sent = l->aborted = 0;
    memset(l->credits, 0, l->plan.n_layers * sizeof(*l->credits));
    wst_status_t st = l->tx->ops->begin(l->tx, l->version);
    if (st != WST_OK) {
        wst_link_fail(l, st, "its mover cannot begin version %llu",
                      (unsigned long long)l->version);
        return;
    }
    m.u.begin.version = l->version;
    m.u.begin.plan_hash = l->plan.plan_hash;
    m.u.begin.mover = l->mover_kind;
    memcpy(m.u.begin.label, l->label, sizeof(m.u.begin.label));
    wst_link_set_state(l, LINK_BEGIN_SENT);
    wst_link_send(l, &m);
}
