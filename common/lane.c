/* lane.c - data lanes (worker.h, "Data lanes"): their lifetime, their
 * addresses, the sender's lane endpoints and sends, and what a lane tells
 * the worker it belongs to. Receiving on a lane is data_am.c's (relaying).
 *
 * A lane is a wst_worker of its own (UCX context, UCX worker, progress
 * thread) with no listener, no control channel and no remote memory
 * access; w->main points at the worker it carries data for. Between the
 * two threads only posts travel: the main thread may also wait for a
 * lane (wst_worker_call), the lane never waits for the main thread, so
 * neither can deadlock the other. What a lane posts to its main worker
 * names connections by id, never by pointer: a connection may be gone
 * when the post runs.
 *
 *   main thread ──call/post──▶ lane thread: open endpoints, send, reset,
 *        ▲                                  close, address
 *        └──────────post──────────── send done, endpoint failed, data in
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ucx_status.h"
#include "worker_internal.h"

/* ---- lifetime ---- */

unsigned wst_worker_lanes_auto(void)
{
    cpu_set_t set;
    int cpus = 1;

    if (sched_getaffinity(0, sizeof(set), &set) == 0)
        cpus = CPU_COUNT(&set);
    int lanes = cpus / 2;
    if (lanes < 1)
        lanes = 1;
    if (lanes > WST_WORKER_LANES_MAX)
        lanes = WST_WORKER_LANES_MAX;
    return (unsigned)lanes;
}

unsigned wst_worker_hash_threads_auto(unsigned lanes)
{
    unsigned n = (3 * lanes + 3) / 4;

    return n < 2 ? 2 : n;
}

static int device_char_ok(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '_' || c == '.' || c == ':' ||
           c == '-';
}

wst_status_t wst_worker_lane_device_pick(const char *list, unsigned index,
                                         char *dev, char *err, size_t errlen)
{
    const char *entry[WST_WORKER_DEVICES_MAX];
    size_t len[WST_WORKER_DEVICES_MAX];
    unsigned n = 0;

    dev[0] = '\0';
    if (list == NULL || list[0] == '\0')
        return WST_OK;
    for (const char *p = list;;) {
        const char *end = strchr(p, ',');
        size_t l = end != NULL ? (size_t)(end - p) : strlen(p);
        if (n == WST_WORKER_DEVICES_MAX) {
            snprintf(err, errlen, "lane devices \"%s\": more than %d", list,
                     WST_WORKER_DEVICES_MAX);
            return WST_ERR_INVALID;
        }
        if (l == 0 || l >= WST_WORKER_DEVICE_MAX) {
            snprintf(err, errlen,
                     "lane devices \"%s\": entry %u is empty or longer "
                     "than %d characters",
                     list, n + 1, WST_WORKER_DEVICE_MAX - 1);
            return WST_ERR_INVALID;
        }
        for (size_t i = 0; i < l; i++)
            if (!device_char_ok(p[i])) {
                snprintf(err, errlen,
                         "lane devices \"%s\": entry %u has a character "
                         "a device name has not (letters, digits, \"_.:-\")",
                         list, n + 1);
                return WST_ERR_INVALID;
            }
        entry[n] = p;
        len[n++] = l;
        if (end == NULL)
            break;
        p = end + 1;
    }
    unsigned k = index % n;
    memcpy(dev, entry[k], len[k]);
    dev[len[k]] = '\0';
    return WST_OK;
}

wst_status_t wst_worker_lane_devices_copy(const char *list, char *dst,
                                          size_t len,
                                          const struct wst_logger *lg)
{
    char dev[WST_WORKER_DEVICE_MAX], err[256];

    if (list == NULL)
        list = "";
    if (strlen(list) >= len) {
        WST_ERROR(lg, "lane devices: the list is longer than %zu bytes",
                  len - 1);
        return WST_ERR_INVALID;
    }
    if (wst_worker_lane_device_pick(list, 0, dev, err, sizeof(err)) != WST_OK) {
        WST_ERROR(lg, "%s", err);
        return WST_ERR_INVALID;
    }
    snprintf(dst, len, "%s", list);
    return WST_OK;
}

const char *wst_worker_lane_device(const wst_worker_t *w, unsigned lane)
{
    if (lane >= w->n_lanes)
        return "";
    return lane == 0 ? w->net_device : w->lanes[lane]->net_device;
}

uint64_t wst_worker_window_auto(unsigned lanes)
{
    uint64_t w = (uint64_t)lanes * (32ull << 20);

    return w < (64ull << 20) ? 64ull << 20 : w;
}

wst_status_t wst_lanes_start(wst_worker_t *w,
                             const struct wst_worker_params *params)
{
    unsigned n = params->lanes ? params->lanes : 1;

    if (n > WST_WORKER_LANES_MAX) {
        WST_ERROR(w->log, "%u data lanes: at most %u", n, WST_WORKER_LANES_MAX);
        return WST_ERR_INVALID;
    }
    /* A lane has no control connections, no RMA (the am mover only: and
     * no emulated RMA to attack) and reports its connections' failures to
     * its main worker. */
    struct wst_worker_params lp = {
        .log = params->log,
        .ops = {.conn_failed = wst_lanes_conn_failed},
        .tick_ms = params->tick_ms,
        .rma = WST_WORKER_RMA_NEVER,
        .confine_ip = params->confine_ip,
        .lane_devices = params->lane_devices,
    };
    for (unsigned i = 1; i < n; i++) {
        wst_status_t st = wst_worker_start(&lp, w, i, &w->lanes[i]);
        if (st != WST_OK) {
            WST_ERROR(w->log, "data lane %u of %u: %s", i, n,
                      wst_status_string(st));
            return st; /* the caller destroys w, and the lanes made */
        }
        w->n_lanes = i + 1;
    }
    if (n > 1)
        WST_INFO(w->log,
                 "%u data lanes, each with its own UCX worker and "
                 "progress thread",
                 n);
    return WST_OK;
}

static void lanes_detach(void *arg)
{
    ((wst_worker_t *)arg)->lanes_gone = 1;
}

void wst_lanes_stop(wst_worker_t *w)
{
    if (w->n_lanes <= 1)
        return;
    /* From now on the main thread posts nothing to them; what they post
     * meanwhile still runs there, without touching them. */
    wst_worker_call(w, lanes_detach, w);
    for (unsigned i = 1; i < w->n_lanes; i++) {
        wst_worker_destroy(w->lanes[i]);
        w->lanes[i] = NULL;
    }
    w->n_lanes = 1;
}

unsigned wst_worker_lanes(const wst_worker_t *w)
{
    return w->n_lanes;
}

static void lane_busy_up(void *arg)
{
    wst_worker_busy(arg, +1);
}

static void lane_busy_down(void *arg)
{
    wst_worker_busy(arg, -1);
}

void wst_worker_lanes_busy(wst_worker_t *w, int delta)
{
    for (unsigned i = 1; i < w->n_lanes && !w->lanes_gone; i++)
        (void)wst_worker_post(w->lanes[i],
                              delta > 0 ? lane_busy_up : lane_busy_down,
                              w->lanes[i]);
}

void wst_worker_lane_rx_bytes(const wst_worker_t *w, uint64_t *bytes,
                              unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        bytes[i] = i < WST_WORKER_LANES_MAX ? w->lane_rx_bytes[i] : 0;
}

/* ---- resets ---- */

struct lane_reset {
    wst_worker_t *lane;
    int done;
};

static void lane_reset_run(void *arg)
{
    struct lane_reset *lr = arg;

    lr->done = wst_worker_data_reset(lr->lane);
}

void wst_lanes_data_reset(wst_worker_t *w)
{
    for (unsigned i = 1; i < w->n_lanes && !w->lanes_gone; i++) {
        struct lane_reset lr = {.lane = w->lanes[i]};

        if (wst_worker_call(w->lanes[i], lane_reset_run, &lr) != WST_OK ||
            !lr.done)
            WST_ERROR(w->log,
                      "data lane %u could not be reset: late bytes of a "
                      "failed refit may land through it; restart the agent",
                      i);
    }
}

int wst_lanes_reset_room(const wst_worker_t *w)
{
    int room = WST_DATA_RETIRED_MAX;

    /* Written by a lane only inside a reset the main thread waits for. */
    for (unsigned i = 1; i < w->n_lanes; i++)
        if (WST_DATA_RETIRED_MAX - w->lanes[i]->n_retired < room)
            room = WST_DATA_RETIRED_MAX - w->lanes[i]->n_retired;
    return room;
}

/* ---- addresses ---- */

struct lane_addr {
    wst_worker_t *lane;
    void *addr;
    size_t len;
    wst_status_t status;
};

static void lane_addr_run(void *arg)
{
    struct lane_addr *la = arg;
    const void *addr;
    size_t len;

    la->status = wst_worker_address(la->lane, &addr, &len);
    if (la->status != WST_OK)
        return;
    if (len == 0) {
        la->status = WST_ERR_UNREACHABLE;
        return;
    }
    la->addr = malloc(len);
    if (la->addr == NULL) {
        la->status = WST_ERR_NO_MEMORY;
        return;
    }
    memcpy(la->addr, addr, len);
    la->len = len;
}

wst_status_t wst_worker_lane_address(wst_worker_t *w, unsigned lane,
                                     void **addr_p, size_t *len_p)
{
    if (lane == 0 || lane >= w->n_lanes || w->lanes_gone)
        return WST_ERR_INVALID;
    struct lane_addr la = {.lane = w->lanes[lane]};
    wst_status_t st = wst_worker_call(la.lane, lane_addr_run, &la);

    if (st == WST_OK)
        st = la.status;
    if (st != WST_OK)
        return st;
    *addr_p = la.addr;
    *len_p = la.len;
    return WST_OK;
}

/* ---- the sender's lane endpoints ---- */

struct lane_open {
    wst_worker_t *lane;
    const struct wst_conn *main_conn;
    const void *addr;
    size_t len;
    int peer_errors;
    struct wst_conn *conn; /* out */
    char lanes[256];
    wst_status_t status;
};

static void lane_open_run(void *arg)
{
    struct lane_open *lo = arg;
    char name[sizeof(lo->main_conn->name)];
    int rma_real;

    snprintf(name, sizeof(name), "%.80s#lane%u", lo->main_conn->name,
             lo->lane->lane_index);
    struct wst_conn *c = wst_conn_new(lo->lane, name);
    if (c == NULL) {
        lo->status = WST_ERR_NO_MEMORY;
        return;
    }
    c->io_dead = 1; /* no control channel: no handshake, no heartbeats */
    c->main_id = lo->main_conn->id;
    lo->status = wst_conn_open_data(c, lo->addr, lo->len, lo->peer_errors,
                                    lo->lanes, sizeof(lo->lanes), &rma_real);
    if (lo->status != WST_OK) {
        wst_conn_close(c);
        return;
    }
    lo->conn = c;
}

wst_status_t wst_conn_open_lanes(wst_conn_t *c, const void *const *addrs,
                                 const size_t *lens, unsigned n,
                                 int peer_errors)
{
    wst_worker_t *w = c->worker;

    if (n > w->n_lanes - 1)
        n = w->n_lanes - 1;
    for (unsigned i = 0; i < n && c->n_lanes == i + 1; i++) {
        struct lane_open lo = {
            .lane = w->lanes[i + 1],
            .main_conn = c,
            .addr = addrs[i],
            .len = lens[i],
            .peer_errors = peer_errors,
        };
        if (c->failed || w->lanes_gone)
            return WST_ERR_PEER_FAILED;
        wst_status_t st = wst_worker_call(lo.lane, lane_open_run, &lo);
        if (st == WST_OK)
            st = lo.status;
        if (st != WST_OK) {
            WST_ERROR(w->log, "data lane %u to %s: %s", i + 1, c->name,
                      wst_status_string(st));
            return st;
        }
        c->lane_conns[i + 1] = lo.conn;
        c->n_lanes = i + 2;
        WST_DEBUG(w->log, "data lane %u to %s: %s", i + 1, c->name, lo.lanes);
    }
    return WST_OK;
}

unsigned wst_conn_lanes(const wst_conn_t *c)
{
    return c->n_lanes;
}

static void lane_conn_close_run(void *arg)
{
    wst_conn_close(arg);
}

void wst_lanes_conn_close(struct wst_conn *c)
{
    wst_worker_t *w = c->worker;

    /* Posted after every send on them: those run first (posts are FIFO). */
    for (unsigned i = 1; i < c->n_lanes && !w->lanes_gone; i++)
        if (wst_worker_post(w->lanes[i], lane_conn_close_run,
                            c->lane_conns[i]) != WST_OK)
            WST_WARN(w->log, "data lane %u of %s left open", i, c->name);
    c->n_lanes = 1;
}

/* What a lane's connection failure tells the main thread. */
struct lane_failed {
    wst_worker_t *main;
    uint64_t conn_id;
    unsigned lane;
    wst_status_t status;
    char why[160];
};

static void lane_failed_run(void *arg)
{
    struct lane_failed *lf = arg;

    for (struct wst_conn *c = lf->main->conns; c != NULL; c = c->next) {
        if (c->id == lf->conn_id) {
            char why[200];
            snprintf(why, sizeof(why), "data lane %u: %s", lf->lane, lf->why);
            wst_conn_fail(c, lf->status, why);
            break;
        }
    }
    free(lf);
}

void wst_lanes_conn_failed(void *arg, wst_conn_t *conn, wst_status_t status,
                           const char *why)
{
    wst_worker_t *lane = conn->worker;
    struct lane_failed *lf = malloc(sizeof(*lf));

    (void)arg;
    if (lf == NULL) {
        WST_ERROR(lane->log, "%s failed (%s) and no memory to say so",
                  conn->name, why);
        return;
    }
    lf->main = lane->main;
    lf->conn_id = conn->main_id;
    lf->lane = lane->lane_index;
    lf->status = status;
    snprintf(lf->why, sizeof(lf->why), "%s", why);
    if (wst_worker_post(lane->main, lane_failed_run, lf) == WST_ERR_NO_MEMORY)
        free(lf);
}

/* ---- the sender's lane sends ---- */

struct lane_send {
    wst_worker_t *main;
    wst_worker_t *lane;
    struct wst_conn *lane_conn;
    const struct wst_data_hdr *hdr;
    const void *src;
    size_t len;
    uint32_t flags;
    wst_lane_send_cb cb;
    void *arg;
    wst_status_t status;
};

static void lane_send_finish(void *arg)
{
    struct lane_send *ls = arg;

    ls->cb(ls->arg, ls->status);
    free(ls);
}

/* Lane thread: the send is over; its owner hears of it on the main
 * thread. */
static void lane_send_report(struct lane_send *ls, wst_status_t status)
{
    ls->status = status;
    if (wst_worker_post(ls->main, lane_send_finish, ls) == WST_ERR_NO_MEMORY) {
        /* Cannot happen short of memory; the owner's move never ends. */
        WST_ERROR(ls->lane->log, "a data lane's send completion was lost");
        free(ls);
    }
}

static void lane_send_done(void *request, ucs_status_t status, void *user_data)
{
    struct lane_send *ls = user_data;

    ucp_request_free(request);
    wst_worker_busy(ls->lane, -1);
    if (status != UCS_OK)
        ls->lane->failed_sends++;
    lane_send_report(ls, wst_status_from_ucs(status));
}

static void lane_send_run(void *arg)
{
    struct lane_send *ls = arg;
    struct wst_conn *lc = ls->lane_conn;

    if (lc->failed || lc->data_ep == NULL) {
        lane_send_report(ls, WST_ERR_PEER_FAILED);
        return;
    }
    ucp_request_param_t p = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                        UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS,
        .cb.send = lane_send_done,
        .user_data = ls,
        .flags = ls->flags,
    };
    ucs_status_ptr_t req =
        ucp_am_send_nbx(lc->data_ep, WST_AM_DATA, ls->hdr, sizeof(*ls->hdr),
                        ls->src, ls->len, &p);
    if (req == NULL)
        lane_send_report(ls, WST_OK);
    else if (UCS_PTR_IS_ERR(req)) {
        ls->lane->failed_sends++;
        lane_send_report(ls, wst_status_from_ucs(UCS_PTR_STATUS(req)));
    } else
        wst_worker_busy(ls->lane, +1); /* shm raises no event for it */
}

wst_status_t wst_conn_lane_send(wst_conn_t *c, unsigned lane,
                                const struct wst_data_hdr *hdr, const void *src,
                                size_t len, uint32_t flags, wst_lane_send_cb cb,
                                void *arg)
{
    wst_worker_t *w = c->worker;

    if (lane == 0 || lane >= c->n_lanes)
        return WST_ERR_INVALID;
    if (c->failed || w->lanes_gone)
        return WST_ERR_PEER_FAILED;
    struct lane_send *ls = malloc(sizeof(*ls));
    if (ls == NULL)
        return WST_ERR_NO_MEMORY;
    *ls = (struct lane_send){
        .main = w,
        .lane = w->lanes[lane],
        .lane_conn = c->lane_conns[lane],
        .hdr = hdr,
        .src = src,
        .len = len,
        .flags = flags,
        .cb = cb,
        .arg = arg,
    };
    /* Only a post that was not queued fails to run (an eventfd that
     * cannot be written still finds the post at the next wake-up). */
    if (wst_worker_post(ls->lane, lane_send_run, ls) == WST_ERR_NO_MEMORY) {
        free(ls);
        return WST_ERR_NO_MEMORY;
    }
    return WST_OK;
}
