/* peers.c - the receiver's senders: one struct peer each, found by
 * rank, with its connection, its manifest and its part in the current
 * refit (progress thread).
 *
 * Senders are identified by rank; a data message is theirs only when it
 * also carries the data token their plan gave them (data.c).
 */
#include <stdio.h>
#include <stdlib.h>

#include "codec.h"
#include "log.h"
#include "receiver_internal.h"
#include "worker.h"

void wst_recv_send_msg(struct wst_receiver *r, struct peer *p,
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

void wst_recv_send_error(struct wst_receiver *r, struct peer *p,
                         wst_status_t status, const char *msg)
{
    struct wst_msg m = {.type = WST_MSG_ERROR};

    m.u.error.status = status;
    snprintf(m.u.error.message, sizeof(m.u.error.message), "%s", msg);
    wst_recv_send_msg(r, p, &m);
}

void wst_recv_for_each_peer(struct wst_receiver *r,
                            void (*fn)(struct wst_receiver *, struct peer *,
                                       void *),
                            void *arg)
{
    for (uint32_t i = 0; i < r->world_size; i++)
        if (r->by_rank[i] != NULL)
            fn(r, r->by_rank[i], arg);
}

uint32_t wst_recv_peer_rank(const struct peer *p)
{
    return p->hello_done ? p->rank : WST_RM_NO_RANK;
}

static void have_free(struct peer *p)
{
    struct wst_msg m = {.type = WST_MSG_HAVE, .u.have = p->have};

    wst_msg_release(&m);
    wst_recv_release_have(p->r, p->have_bytes);
}

/* A peer's manifest changes the plan's inputs: a plan running from them
 * is stale. While one runs, the manifest is still read by the planner
 * thread, so the peer is kept on r->retired until the plan is back. */
static void peer_free(struct peer *p)
{
    struct wst_receiver *r = p->r;

    if (p->counted_unranked)
        r->n_unranked--;
    p->counted_unranked = 0;
    wst_recv_peer_rx_close(p);
    free(p->rx_layer_first);
    p->rx_layer_first = NULL;
    if (p->have_decoding) {
        p->dropped = 1; /* freed once its manifest is unpacked */
        return;
    }
    if (p->have_done) {
        r->plan_generation++;
        if (r->planning) {
            p->retired_next = r->retired;
            r->retired = p;
            return;
        }
        have_free(p);
    }
    free(p);
}

void wst_recv_release_retired(struct wst_receiver *r)
{
    while (r->retired != NULL) {
        struct peer *p = r->retired;
        r->retired = p->retired_next;
        have_free(p);
        free(p);
    }
}

/* Drops a peer: closes its connection and forgets its manifest. A refit it
 * takes part in fails (the caller decides before calling). */
void wst_recv_peer_drop(struct wst_receiver *r, struct peer *p)
{
    if (p->hello_done && p->rank < r->world_size && r->by_rank[p->rank] == p) {
        r->by_rank[p->rank] = NULL;
        struct wst_rm_event ev = {.kind = WST_RM_EV_PEER_LEFT, .rank = p->rank};
        wst_recv_refit_event(r, &ev);
    }
    if (p->conn != NULL) {
        wst_conn_set_user(p->conn, NULL);
        wst_conn_close(p->conn);
    }
    peer_free(p);
}

/* As wst_recv_peer_drop, after an ERROR: the connection lingers long enough for
 * the peer to read why. */
void wst_recv_peer_drop_after_error(struct wst_receiver *r, struct peer *p)
{
    if (p->conn != NULL) {
        wst_conn_close_later(p->conn, 0.5);
        p->conn = NULL;
    }
    wst_recv_peer_drop(r, p);
}

int wst_recv_any_peer(const struct wst_receiver *r)
{
    for (uint32_t i = 0; i < r->world_size; i++)
        if (r->by_rank[i] != NULL)
            return 1;
    return 0;
}

wst_status_t wst_recv_set_world(struct wst_receiver *r, uint32_t world)
{
    struct peer **by_rank = calloc(world, sizeof(*by_rank));

    if (by_rank == NULL)
        return WST_ERR_NO_MEMORY;
    if (wst_rm_set_world(&r->rm, world) != WST_OK) {
        free(by_rank);
        return WST_ERR_NO_MEMORY;
    }
    free(r->by_rank);
    r->by_rank = by_rank;
    r->world_size = world;
    return WST_OK;
}
