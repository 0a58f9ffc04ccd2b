/* wire.c - the UCX put and active-message wires (see wire.h). */
#include "wire.h"

#include <stdlib.h>
#include <string.h>

#include "ucx_status.h"
#include "worker.h"

/* Completion context of one move; the AM header must stay valid until the
 * send completes (UCX 1.13), so it lives here. */
struct move_req {
    struct move_req *next; /* in the mover's free list */
    struct wst_wire *m;
    uint64_t epoch;
    unsigned lane;   /* the data lane it went on (0: m->ep) */
    uint64_t length; /* its bytes, counted in m->lane_bytes[lane] */
    wst_wire_cb cb;
    void *arg;
    struct wst_data_hdr hdr;
};

/* Below this size an AM goes eagerly (one copy, no handshake); the receiver
 * still counts its bytes before trusting a layer. */
#define AM_EAGER_MAX (8u * 1024u)

static void mover_free(struct wst_wire *m)
{
    while (m->free_reqs != NULL) {
        struct move_req *r = m->free_reqs;
        m->free_reqs = r->next;
        free(r);
    }
    for (size_t i = 0; m->rkeys != NULL && i < m->n_regions; i++)
        if (m->rkeys[i] != NULL)
            ucp_rkey_destroy(m->rkeys[i]);
    free(m->rkeys);
    free(m->regions);
    free(m);
}

/* A destroyed mover is freed once no request and no callback holds it. */
static void free_if_released(struct wst_wire *m)
{
    if (m->destroyed && m->outstanding == 0 && m->in_callback == 0)
        mover_free(m);
}

static wst_status_t flush(struct wst_wire *m, wst_wire_cb cb, void *arg);

/* The fence's moves have all completed here: am's bytes are at the
 * receiver then; put's are once a flush issued now completes. Flushing
 * only now matters where UCX emulates puts: a flush issued while earlier
 * puts still wait in UCX's queues completed before they landed (the
 * conformance test's large put, UCX 1.13 over shared memory). */
static void maybe_fire_fence(struct wst_wire *m)
{
    if (m->fence_cb == NULL || m->destroyed ||
        m->in_epoch[m->fence_epoch & 1] != 0)
        return;
    wst_wire_cb cb = m->fence_cb;
    void *arg = m->fence_arg;
    m->fence_cb = NULL;
    if (m->ops->kind != WST_MOVER_PUT || m->error != WST_OK) {
        cb(arg, m->error);
        return;
    }
    wst_status_t st = flush(m, cb, arg);
    if (st != WST_OK)
        cb(arg, st);
}

static void req_release(struct wst_wire *m, struct move_req *r)
{
    r->next = m->free_reqs;
    m->free_reqs = r;
}

static void move_finish(struct move_req *r, wst_status_t st)
{
    struct wst_wire *m = r->m;
    wst_wire_cb cb = r->cb;
    void *arg = r->arg;

    m->lane_bytes[r->lane] -= r->length;
    m->outstanding--;
    m->in_epoch[r->epoch & 1]--;
    if (st != WST_OK && m->error == WST_OK)
        m->error = st;
    req_release(m, r);
    /* The callback may destroy the mover: it is freed after the call. */
    m->in_callback++;
    if (cb != NULL)
        cb(arg, st);
    m->in_callback--;
    if (m->destroyed) {
        free_if_released(m);
        return;
    }
    maybe_fire_fence(m);
}

static void move_done(void *request, ucs_status_t status, void *user_data)
{
    struct move_req *r = user_data;

    if (request != NULL) {
        ucp_request_free(request);
        wst_worker_busy(r->m->worker, -1);
    }
    move_finish(r, wst_status_from_ucs(status));
}

/* A move on a data lane ended (progress thread, posted by the lane). */
static void lane_move_done(void *arg, wst_status_t status)
{
    move_finish(arg, status);
}

/* Counts r as outstanding before it is handed to UCX. The call may fail
 * the endpoint under it (a send that meets a dead peer): UCX then
 * completes this mover's other requests with an error inside the call,
 * and their callbacks may destroy the mover. Counted first, r keeps it
 * alive until track() below; counted after, the mover was freed in the
 * call and track() wrote to freed memory (a sender segfaulted after an
 * agent was killed: 13 of 120 replays of campaign seed 0x3a1766b6dfd9bb76
 * on the 16-core GPU host). */
static void track_begin(struct wst_wire *m, struct move_req *r)
{
    m->lane_bytes[r->lane] += r->length;
    m->outstanding++;
    m->in_epoch[r->epoch & 1]++;
}

/* Common tail of put, am and flush: account for the request UCX
 * returned. The mover may be freed on return when it was destroyed. */
static wst_status_t track(struct wst_wire *m, struct move_req *r,
                          ucs_status_ptr_t req)
{
    if (req == NULL) {
        move_done(NULL, UCS_OK, r);
        return WST_OK;
    }
    if (UCS_PTR_IS_ERR(req)) {
        wst_status_t st = wst_status_from_ucs(UCS_PTR_STATUS(req));

        m->lane_bytes[r->lane] -= r->length;
        m->outstanding--;
        m->in_epoch[r->epoch & 1]--;
        req_release(m, r);
        WST_ERROR(m->log, "move failed: %s",
                  ucs_status_string(UCS_PTR_STATUS(req)));
        free_if_released(m);
        return st;
    }
    wst_worker_busy(m->worker, +1);
    return WST_OK;
}

/* Requests are recycled: after the first refit the data path allocates
 * nothing. */
static struct move_req *req_new(struct wst_wire *m, wst_wire_cb cb, void *arg)
{
    struct move_req *r = m->free_reqs;

    if (r != NULL)
        m->free_reqs = r->next;
    else
        r = malloc(sizeof(*r));
    if (r != NULL) {
        r->m = m;
        r->epoch = m->epoch;
        r->lane = 0;
        r->length = 0;
        r->cb = cb;
        r->arg = arg;
    }
    return r;
}

static wst_status_t check_move(const struct wst_wire *m,
                               const struct wst_move *mv)
{
    if (m->error != WST_OK)
        return m->error;
    /* A scatter message's items each have their own place; the receiver
     * checks every one of them. */
    if (mv->scatter)
        return mv->length <= WST_SCATTER_BYTES ? WST_OK : WST_ERR_INVALID;
    if (mv->region >= m->n_regions ||
        mv->dst_offset > m->regions[mv->region].length ||
        mv->length > m->regions[mv->region].length - mv->dst_offset)
        return WST_ERR_INVALID; /* plans are checked; this is a bug */
    return WST_OK;
}

static wst_status_t am_move(struct wst_wire *m, const struct wst_move *mv,
                            wst_wire_cb cb, void *arg);

static wst_status_t put_move(struct wst_wire *m, const struct wst_move *mv,
                             wst_wire_cb cb, void *arg)
{
    wst_status_t st = mv->scatter ? WST_ERR_INVALID : check_move(m, mv);
    if (st != WST_OK)
        return st; /* scatter: a put lands in one place (a bug) */
    /* A region the receiver gave no key for takes am (wire.h). */
    if (m->rkeys[mv->region] == NULL)
        return am_move(m, mv, cb, arg);
    struct move_req *r = req_new(m, cb, arg);
    if (r == NULL)
        return WST_ERR_NO_MEMORY;
    ucp_request_param_t p = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                        UCP_OP_ATTR_FIELD_USER_DATA |
                        (mv->src_memh ? UCP_OP_ATTR_FIELD_MEMH : 0),
        .cb.send = move_done,
        .user_data = r,
        .memh = mv->src_memh,
    };
    uint64_t raddr = m->regions[mv->region].base + mv->dst_offset;
    track_begin(m, r);
    return track(m, r,
                 ucp_put_nbx(m->ep, mv->src, mv->length, raddr,
                             m->rkeys[mv->region], &p));
}

static void flush_done(void *request, ucs_status_t status, void *user_data)
{
    struct move_req *r = user_data;

    /* A flush is tracked like a move so destroy stays safe. */
    move_done(request, status, r);
}

static wst_status_t flush(struct wst_wire *m, wst_wire_cb cb, void *arg)
{
    struct move_req *r = req_new(m, cb, arg);
    if (r == NULL)
        return WST_ERR_NO_MEMORY;
    ucp_request_param_t p = {
        .op_attr_mask =
            UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send = flush_done,
        .user_data = r,
    };
    track_begin(m, r);
    return track(m, r, ucp_ep_flush_nbx(m->ep, &p));
}

/* The lane with the fewest bytes in flight: a slow lane takes fewer. */
static unsigned pick_lane(const struct wst_wire *m)
{
    unsigned best = 0;

    for (unsigned i = 1; i < m->n_lanes; i++)
        if (m->lane_bytes[i] < m->lane_bytes[best])
            best = i;
    return best;
}

/* track() for a move handed to a data lane: it completes later, through
 * lane_move_done, unless the hand-over failed. */
static wst_status_t lane_track(struct wst_wire *m, struct move_req *r,
                               wst_status_t st)
{
    if (st == WST_OK)
        return WST_OK;
    m->lane_bytes[r->lane] -= r->length;
    m->outstanding--;
    m->in_epoch[r->epoch & 1]--;
    req_release(m, r);
    WST_ERROR(m->log, "move on data lane %u failed: %s", r->lane,
              wst_status_string(st));
    free_if_released(m);
    return st;
}

static wst_status_t am_move(struct wst_wire *m, const struct wst_move *mv,
                            wst_wire_cb cb, void *arg)
{
    wst_status_t st = check_move(m, mv);
    if (st != WST_OK)
        return st;
    struct move_req *r = req_new(m, cb, arg);
    if (r == NULL)
        return WST_ERR_NO_MEMORY;
    r->hdr.token = m->token;
    r->hdr.rank = m->rank;
    r->hdr.item = mv->item;
    r->hdr.offset = mv->item_offset;
    r->hdr.version = mv->version;
    r->hdr.count = mv->item_count > 1 ? mv->item_count : 1;
    r->hdr.flags = mv->scatter ? WST_DATA_SCATTER : 0;
    ucp_request_param_t p = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                        UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS |
                        (mv->src_memh ? UCP_OP_ATTR_FIELD_MEMH : 0),
        .cb.send = move_done,
        .user_data = r,
        .flags = mv->length > AM_EAGER_MAX && !mv->scatter
                     ? UCP_AM_SEND_FLAG_RNDV
                     : UCP_AM_SEND_FLAG_EAGER,
        .memh = mv->src_memh,
    };
    r->lane = pick_lane(m);
    r->length = mv->length;
    track_begin(m, r);
    if (r->lane != 0)
        return lane_track(m, r,
                          wst_conn_lane_send(m->conn, r->lane, &r->hdr, mv->src,
                                             mv->length, p.flags,
                                             lane_move_done, r));
    return track(m, r,
                 ucp_am_send_nbx(m->ep, WST_AM_DATA, &r->hdr, sizeof(r->hdr),
                                 mv->src, mv->length, &p));
}

/* Closes the current epoch: the fence fires (put: flushes) once every
 * move posted before it has completed. */
static wst_status_t epoch_fence(struct wst_wire *m, wst_wire_cb cb, void *arg)
{
    if (m->error != WST_OK)
        return m->error;
    if (m->fence_cb != NULL)
        return WST_ERR_BUSY;
    m->fence_cb = cb;
    m->fence_arg = arg;
    m->fence_epoch = m->epoch++;
    maybe_fire_fence(m);
    return WST_OK;
}

static void mover_ops_destroy(struct wst_wire *m)
{
    m->destroyed = 1;
    free_if_released(m);
}

static const struct wst_wire_ops put_ops = {
    .kind = WST_MOVER_PUT,
    .move = put_move,
    .fence = epoch_fence,
    .destroy = mover_ops_destroy,
};

static const struct wst_wire_ops am_ops = {
    .kind = WST_MOVER_AM,
    .move = am_move,
    .fence = epoch_fence,
    .destroy = mover_ops_destroy,
};

static wst_status_t unpack_rkeys(struct wst_wire *m,
                                 const struct wst_remote_region *regions)
{
    size_t n_put = 0, n_am = 0;

    m->rkeys = calloc(m->n_regions ? m->n_regions : 1, sizeof(*m->rkeys));
    if (m->rkeys == NULL)
        return WST_ERR_NO_MEMORY;
    for (size_t i = 0; i < m->n_regions; i++) {
        /* A region no item of ours writes comes without base, length or
         * key (receiver/plan_cache.c): nothing to unpack, and check_move
         * refuses any move into it. One we write but have no key for
         * takes am. */
        if (regions[i].rkey_len == 0) {
            n_am += regions[i].length != 0;
            continue;
        }
        ucs_status_t st =
            ucp_ep_rkey_unpack(m->ep, regions[i].rkey, &m->rkeys[i]);
        if (st != UCS_OK) {
            WST_ERROR(m->log, "unpacking the remote key of region %zu: %s", i,
                      ucs_status_string(st));
            return wst_status_from_ucs(st);
        }
        n_put++;
    }
    if (n_am > 0)
        WST_DEBUG(m->log, "%zu regions by put, %zu by am (no key given)", n_put,
                  n_am);
    return WST_OK;
}

wst_status_t wst_wire_create(enum wst_mover_kind kind,
                             struct wst_worker *worker, ucp_ep_h ep,
                             uint32_t rank, uint64_t token,
                             const struct wst_remote_region *regions,
                             size_t n_regions, const struct wst_logger *log,
                             struct wst_wire **mover_p)
{
    wst_status_t status = WST_ERR_NO_MEMORY;
    struct wst_wire *m = calloc(1, sizeof(*m));

    if (m == NULL)
        return WST_ERR_NO_MEMORY;
    m->ops = kind == WST_MOVER_PUT ? &put_ops : &am_ops;
    m->n_lanes = 1;
    m->log = log;
    m->worker = worker;
    m->ep = ep;
    m->rank = rank;
    m->token = token;
    m->n_regions = n_regions;
    m->regions = calloc(n_regions ? n_regions : 1, sizeof(*m->regions));
    if (m->regions == NULL)
        goto err_free;
    for (size_t i = 0; i < n_regions; i++) {
        m->regions[i].base = regions[i].base;
        m->regions[i].length = regions[i].length;
    }
    if (kind == WST_MOVER_PUT) {
        status = unpack_rkeys(m, regions);
        if (status != WST_OK)
            goto err_free;
    } else if (kind != WST_MOVER_AM) {
        status = WST_ERR_INVALID;
        goto err_free;
    }
    *mover_p = m;
    return WST_OK;

err_free:
    mover_free(m);
    return status;
}

void wst_wire_destroy(struct wst_wire *m)
{
    if (m != NULL)
        m->ops->destroy(m);
}

void wst_wire_use_lanes(struct wst_wire *m, struct wst_conn *conn)
{
    if (wst_conn_lanes(conn) <= 1)
        return;
    m->conn = conn;
    m->n_lanes = wst_conn_lanes(conn);
}
