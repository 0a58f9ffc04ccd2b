/* control.c - control messages from senders (hello, have manifest,
 * begin, layer done, errors) and their connections coming and going
 * (progress thread). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "codec.h"
#include "dtype.h"
#include "lanes.h"
#include "log.h"
#include "manifest.h"
#include "receiver_internal.h"
#include "worker.h"

#define MAX_SENDERS 4096

/* A hello names every data lane a worker can have but its own (lane 0). */
_Static_assert(WST_RECEIVER_LANES_MAX == WST_WORKER_LANES_MAX,
               "a receiver reports every lane a worker may have");
_Static_assert(WST_HELLO_LANES_MAX == WST_WORKER_LANES_MAX - 1,
               "codec.h's WST_HELLO_LANES_MAX is not worker.h's "
               "WST_WORKER_LANES_MAX - 1");

/* The addresses of the worker's lanes 1.. into h (malloc'd: release with
 * free_lane_addresses). A lane whose address cannot be had, or would not
 * fit a hello, is left out with a warning: the sender then opens fewer
 * lanes, which any lane of ours serves alike. */
static void fill_lane_addresses(struct wst_receiver *r, struct peer *p,
                                struct wst_hello *h)
{
    unsigned lanes = wst_worker_lanes(r->worker);
    void *addr;
    size_t len;
    wst_status_t st;

    for (unsigned lane = 1; lane < lanes; lane++) {
        if (h->n_lane_addresses == WST_HELLO_LANES_MAX)
            break;
        st = wst_worker_lane_address(r->worker, lane, &addr, &len);
        if (st == WST_OK && len > WST_MAX_BLOB) {
            free(addr);
            st = WST_ERR_TOO_LARGE;
        }
        if (st != WST_OK) {
            WST_WARN(&r->log, "sender %s: data lane %u of %u left out: %s",
                     p->name, lane, lanes, wst_status_string(st));
            continue;
        }
        h->lane_addresses[h->n_lane_addresses].data = addr;
        h->lane_addresses[h->n_lane_addresses].len = len;
        h->n_lane_addresses++;
    }
}

static void free_lane_addresses(struct wst_hello *h)
{
    for (size_t i = 0; i < h->n_lane_addresses; i++)
        free(h->lane_addresses[i].data);
    h->n_lane_addresses = 0;
}

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
    m.u.hello.tcp_rx_seg = wst_worker_tcp_rx_seg(r->worker);
    m.u.hello.worker_address.len = len;
    m.u.hello.worker_address.data = (uint8_t *)addr;
    fill_lane_addresses(r, p, &m.u.hello);
    wst_recv_send_msg(r, p, &m); /* encodes before it returns */
    free_lane_addresses(&m.u.hello);

    memset(&m, 0, sizeof(m));
    m.type = WST_MSG_WANT_SUMMARY;
    pthread_mutex_lock(&r->lock);
    m.u.want_summary.committed_version = r->state.committed_version;
    snprintf(m.u.want_summary.committed_label,
             sizeof(m.u.want_summary.committed_label), "%s",
             r->state.committed_label);
    m.u.want_summary.usable = r->state.usable;
    if (!r->state.usable)
        snprintf(m.u.want_summary.reason, sizeof(m.u.want_summary.reason), "%s",
                 r->state.reason);
    pthread_mutex_unlock(&r->lock);
    m.u.want_summary.receiver_rank = r->rank;
    snprintf(m.u.want_summary.group, sizeof(m.u.want_summary.group), "%s",
             r->group);
    m.u.want_summary.group_size = r->group_size;
    m.u.want_summary.group_member = r->group_member;
    m.u.want_summary.n_wants = (uint32_t)r->n_wants;
    m.u.want_summary.n_layers = (uint32_t)wst_recv_layer_count(r);
    for (size_t i = 0; i < r->n_wants; i++)
        m.u.want_summary.total_bytes +=
            wst_box_elems(&r->wants[i].box) *
            wst_dtype_size(r->wants[i].tensor.dtype);
    wst_recv_send_msg(r, p, &m);
}

/* A connection heard from within this long is alive: two heartbeat
 * intervals. */
static uint64_t live_ns(const struct wst_receiver *r)
{
    return (uint64_t)(2.0 * r->heartbeat.interval_s * 1e9);
}

/* Returns nonzero when the peer was dropped. */
static int on_hello(struct wst_receiver *r, struct peer *p,
                    const struct wst_hello *h)
{
    char why[320] = "";
    wst_status_t st = WST_ERR_PROTOCOL;
    uint64_t seg = wst_worker_tcp_rx_seg(r->worker);

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
    } else if (!wst_ucx_tcp_seg_fits(h->tcp_rx_seg, seg)) {
        /* Its fragments would abort this process inside UCX (lanes.h). */
        st = WST_ERR_CONFIG;
        snprintf(why, sizeof(why),
                 "its UCX tcp segments (%llu bytes, UCX_TCP_RX_SEG_SIZE) "
                 "exceed this agent's (%llu): give the sender a value no "
                 "larger than the agent's",
                 (unsigned long long)h->tcp_rx_seg, (unsigned long long)seg);
    } else if (r->world_size != h->world_size && wst_recv_any_peer(r)) {
        snprintf(why, sizeof(why), "world size %u, other senders say %u",
                 h->world_size, r->world_size);
    } else if (r->world_size != h->world_size &&
               wst_recv_set_world(r, h->world_size) != WST_OK) {
        st = WST_ERR_NO_MEMORY;
        snprintf(why, sizeof(why), "no memory");
    }
    if (why[0] != '\0') {
        WST_WARN(&r->log, "sender %s: %s", p->name, why);
        wst_recv_send_error(r, p, st, why);
        wst_recv_peer_drop_after_error(r, p);
        return 1;
    }
    struct peer *old = r->by_rank[h->rank];
    if (old != NULL && old->conn != NULL &&
        wst_conn_silent_ns(old->conn) < live_ns(r)) {
        /* The rank's connection is alive (it was heard within two
         * heartbeats): this is a second process claiming it, not a
         * restart (a dead process's socket closes; a stopped one goes
         * silent). Refused; the holder keeps its rank. */
        snprintf(why, sizeof(why),
                 "sender rank %u is already connected from %s (heard "
                 "%.1f s ago)",
                 h->rank, old->name, wst_conn_silent_ns(old->conn) / 1e9);
        WST_WARN(&r->log, "refused sender %s: %s", p->name, why);
        wst_recv_send_error(r, p, WST_ERR_BUSY, why);
        wst_recv_peer_drop_after_error(r, p);
        return 1;
    }
    if (old != NULL) {
        /* The rank restarted: its old connection is stale. */
        WST_WARN(&r->log, "sender rank %u reconnected from %s; dropping %s",
                 h->rank, p->name, old->name);
        wst_recv_refit_peer_fail(
            r, old, WST_RM_EV_PEER_LOST, WST_ERR_PEER_FAILED,
            "sender rank %u restarted during the refit", h->rank);
        wst_recv_peer_drop(r, old);
    }
    p->hello_done = 1;
    if (p->counted_unranked) {
        p->counted_unranked = 0;
        r->n_unranked--;
    }
    p->rank = h->rank;
    r->by_rank[h->rank] = p;
    struct wst_rm_event ev = {.kind = WST_RM_EV_PEER_JOINED, .rank = h->rank};
    wst_recv_refit_event(r, &ev);
    snprintf(p->name + strlen(p->name), sizeof(p->name) - strlen(p->name),
             " (rank %u)", h->rank);
    WST_INFO(&r->log, "sender %s connected, world %u", p->name, h->world_size);
    reply_hello(r, p);
    return 0;
}

/* A manifest over a limit (peer_limits.c): refused before it is kept, the
 * sender dropped (its rank free again), nothing else changes. */
static void refuse_have(struct wst_receiver *r, struct peer *p, const char *why)
{
    WST_WARN(&r->log, "refused sender %s: %s", p->name, why);
    wst_recv_send_error(r, p, WST_ERR_TOO_LARGE, why);
    wst_recv_refit_peer_fail(r, p, WST_RM_EV_PEER_LOST, WST_ERR_TOO_LARGE,
                             "sender %s refused: %s", p->name, why);
    wst_recv_peer_drop_after_error(r, p);
}

static void on_have(struct wst_receiver *r, struct peer *p, struct wst_msg *m)
{
    if (!p->hello_done || p->have_done || m->u.have.rank != p->rank) {
        wst_recv_send_error(r, p, WST_ERR_PROTOCOL, "unexpected have manifest");
        return;
    }
    /* Shards in host or device memory alike (the codec checked the type):
     * how the sender reads device shards is its own business (bounce ring,
     * or UCX with CUDA), and either way the bytes arrive as a host
     * sender's do. */
    char why[256];
    if (wst_recv_limit_have(r, m->u.have.n_entries, why, sizeof(why)) !=
        WST_OK) {
        /* The decoded manifest is freed with the message. */
        refuse_have(r, p, why);
        return;
    }
    p->have = m->u.have; /* take ownership */
    memset(&m->u.have, 0, sizeof(m->u.have));
    p->have_done = 1;
    wst_recv_hold_have(r, p);
    r->plan_generation++;
    if (r->first_have_ns == 0)
        r->first_have_ns = wst_now_ns();
    WST_DEBUG(&r->log, "sender %s: have manifest of %zu shards", p->name,
              p->have.n_entries);
    wst_recv_try_plan(r);
}

/* What only the connection knows is checked here, the rest by the refit
 * machine. */
static void on_begin(struct wst_receiver *r, struct peer *p,
                     const struct wst_begin *b)
{
    const char *why = NULL;

    if (b->ack || !p->plan_sent || b->plan_hash != p->plan_hash)
        why = "begin without the current plan";
    else if (b->mover == WST_MOVER_NCCL && !p->nccl_ready)
        why = "nccl mover without a ready communicator";
    else if (b->mover == WST_MOVER_PUT && !p->plan_put)
        why = "put mover, but no remote keys were given";
    if (why != NULL) {
        wst_recv_send_error(r, p,
                            wst_rm_state(&r->rm) != WST_RM_IDLE ? WST_ERR_BUSY
                                                                : WST_ERR_STATE,
                            why);
        return;
    }
    /* The label passed the codec's check (common/label.h). */
    struct wst_rm_event ev = {.kind = WST_RM_EV_BEGIN,
                              .rank = p->rank,
                              .peer = p->name,
                              .version = b->version,
                              .mover = b->mover,
                              .label = b->label};
    wst_recv_refit_event(r, &ev);
}

/* GO and COMMIT: what the senders saw of the whole engine group. */
static void on_group(struct wst_receiver *r, struct peer *p,
                     const struct wst_msg *m)
{
    struct wst_rm_event ev = {.rank = wst_recv_peer_rank(p), .peer = p->name};

    if (m->type == WST_MSG_COMMIT) {
        ev.kind = WST_RM_EV_COMMIT;
        ev.version = m->u.commit.version;
    } else if (m->u.barrier.step == WST_BARRIER_GO) {
        ev.kind = WST_RM_EV_GO;
        ev.version = m->u.barrier.version;
    } else {
        wst_recv_send_error(r, p, WST_ERR_PROTOCOL,
                            "a barrier step only receivers send");
        return;
    }
    if (!p->hello_done) {
        wst_recv_send_error(r, p, WST_ERR_PROTOCOL, "barrier before hello");
        return;
    }
    wst_recv_refit_event(r, &ev);
}

/* One event per layer the message reports (the codec bounded them). */
static void on_layer_done(struct wst_receiver *r, struct peer *p,
                          const struct wst_layer_done *ld)
{
    struct wst_rm_event ev = {.kind = WST_RM_EV_LAYER_DONE,
                              .rank = wst_recv_peer_rank(p),
                              .peer = p->name,
                              .version = ld->version,
                              .layer = ld->layer,
                              .bytes = ld->bytes,
                              .digest = ld->digest};

    wst_recv_refit_event(r, &ev);
    for (uint32_t i = 0; i < ld->n_more; i++) {
        ev.layer = ld->layer + 1 + i;
        ev.bytes = ld->more_bytes[i];
        ev.digest = ld->more_digests[i];
        wst_recv_refit_event(r, &ev);
    }
}

void wst_recv_on_message(void *arg, wst_conn_t *conn, const void *buf,
                         size_t len)
{
    struct wst_receiver *r = arg;
    struct peer *p = wst_conn_user(conn);
    struct wst_msg m;
    char err[256];

    if (p == NULL)
        return;
    size_t n_entries = 0;
    int is_have = wst_msg_peek_have(buf, len, &n_entries);
    if (is_have &&
        wst_recv_limit_have(r, n_entries, err, sizeof(err)) != WST_OK) {
        /* Over a limit before anything of it is unpacked. */
        refuse_have(r, p, err);
        return;
    }
    if (is_have && (!p->hello_done || p->have_done || p->have_decoding)) {
        /* Before hello, or a second one (while the first is unpacked, or
         * after): refused from its wire bytes, never unpacked here. */
        wst_recv_send_error(r, p, WST_ERR_PROTOCOL, "unexpected have manifest");
        return;
    }
    /* The manifest a sender is expected to send: unpacked on the
     * planner thread (have_decode.c), it comes back to wst_recv_on_msg. */
    if (is_have) {
        if (wst_recv_reserve_have(r, p, n_entries, len, err, sizeof(err)) !=
            WST_OK) {
            refuse_have(r, p, err);
            return;
        }
        if (wst_recv_decode_have(r, p, buf, len) == WST_OK)
            return;
        wst_recv_unreserve_have(r, p);
    }
    wst_status_t st =
        wst_msg_decode(buf, len, WST_MSG_MAX_DEFAULT, &m, err, sizeof(err));
    wst_recv_on_msg(r, p, st, &m, err);
}

/* Bad input: a clear error to that peer, nothing else changes (unless it
 * was part of a refit, which cannot complete now). */
static void bad_message(struct wst_receiver *r, struct peer *p, wst_status_t st,
                        const char *err)
{
    WST_WARN(&r->log, "sender %s: bad message: %s", p->name, err);
    wst_recv_send_error(r, p, st, err);
    wst_recv_refit_peer_fail(r, p, WST_RM_EV_PEER_LOST, st,
                             "sender %s sent a bad message: %s", p->name, err);
    wst_recv_peer_drop_after_error(r, p);
}

void wst_recv_on_msg(struct wst_receiver *r, struct peer *p, wst_status_t st,
                     struct wst_msg *mp, const char *err)
{
    struct wst_msg m = *mp; /* ours: released below */

    if (st != WST_OK) {
        bad_message(r, p, st, err);
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
        wst_recv_on_nccl_setup(r, p, &m.u.nccl_setup);
        break;
    case WST_MSG_BARRIER:
    case WST_MSG_COMMIT:
        on_group(r, p, &m);
        break;
    case WST_MSG_HEARTBEAT:
        break;
    case WST_MSG_ERROR:
        WST_WARN(&r->log, "sender %s reports: %s", p->name, m.u.error.message);
        wst_recv_refit_peer_fail(
            r, p, WST_RM_EV_PEER_ERROR, (wst_status_t)m.u.error.status,
            "sender %s failed: %s", p->name, m.u.error.message);
        break;
    default:
        wst_recv_send_error(r, p, WST_ERR_PROTOCOL, "unexpected message");
        break;
    }
    wst_msg_release(&m);
}

void wst_recv_on_accepted(void *arg, wst_conn_t *conn)
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

    char why[160];
    wst_status_t st = wst_recv_limit_unranked(r, why, sizeof(why));
    if (st != WST_OK) {
        WST_WARN(&r->log, "refused sender %s: %s", p->name, why);
        wst_recv_send_error(r, p, st, why);
        wst_recv_peer_drop_after_error(r, p);
        return;
    }
    p->counted_unranked = 1;
    r->n_unranked++;
}

void wst_recv_on_conn_failed(void *arg, wst_conn_t *conn, wst_status_t status,
                             const char *why)
{
    struct wst_receiver *r = arg;
    struct peer *p = wst_conn_user(conn);

    if (p == NULL)
        return;
    if (wst_rm_in_refit(&r->rm, wst_recv_peer_rank(p)))
        wst_recv_refit_peer_fail(r, p, WST_RM_EV_PEER_LOST, status,
                                 "sender %s lost: %s", p->name, why);
    else
        WST_INFO(&r->log, "sender %s disconnected: %s", p->name, why);
    wst_recv_peer_drop(r, p);
}
