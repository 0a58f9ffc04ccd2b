/* link_open.c - a planned link's data path: how its device shards travel
 * (common/movers/select.h: directly when UCX can read device memory, else
 * through the pinned bounce ring, or NCCL) and the mover that carries its
 * data, chosen once per plan; then its sending half (common/movers/tx.h),
 * which is all the pump sees.
 */
#include <stdlib.h>

#include "chunks.h"
#include "codec.h"
#include "device.h"
#include "select.h"
#include "log.h"
#include "mover.h"
#include "wire.h"
#include "nccl_comm.h"
#include "nccl_mover.h"
#include "sender_internal.h"
#include "worker.h"

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
        wst_link_fail(l, st, "no device path: %s", why);
        return st;
    }
    for (size_t i = 0; l->path == WST_PATH_NCCL && i < l->plan.n_items; i++) {
        const struct shard *sh = &s->shards[l->plan.items[i].have];
        if (sh->device < 0) {
            wst_link_fail(l, WST_ERR_UNSUPPORTED,
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

/* Where each item is read, once per plan: the sending half borrows it. */
static wst_status_t make_tx_plan(struct link *l)
{
    const struct wst_sender *s = l->s;

    free(l->srcs);
    l->srcs = calloc(l->plan.n_items ? l->plan.n_items : 1, sizeof(*l->srcs));
    if (l->srcs == NULL)
        return WST_ERR_NO_MEMORY;
    for (size_t k = 0; k < l->plan.n_items; k++) {
        const struct wst_plan_item *it = &l->plan.items[k];
        const struct shard *sh = &s->shards[it->have];
        l->srcs[k] = (struct wst_tx_src){
            .ptr = (const char *)sh->data + it->src_offset,
            .memh = sh->memh,
            .device = sh->device,
            .chunk = l->plan.regions[it->region].message_max,
        };
    }
    l->tx_plan = (struct wst_tx_plan){
        .items = l->plan.items,
        .srcs = l->srcs,
        .n_items = l->plan.n_items,
        .n_layers = l->plan.n_layers,
        .layer_first = l->layer_first,
    };
    return WST_OK;
}

/* Progress thread: this side of the communicator is ready (or not). */
static void nccl_local_ready(void *arg, wst_status_t status)
{
    struct link *l = arg;

    if (l->state != LINK_CONNECTING)
        return;
    if (status != WST_OK) {
        wst_link_fail(l, status, "nccl communicator with GPU %d failed",
                      wst_send_device_ordinal(l->s->dev));
        return;
    }
    l->nccl_ready = 1;
    WST_INFO(&l->s->log, "receiver %s: nccl communicator ready (rank 0 of 2)",
             l->name);
    if (l->nccl_peer_ready)
        wst_link_set_state(l, LINK_PLANNED);
}

void wst_link_on_nccl_ready(struct link *l, const struct wst_nccl_ready *nr)
{
    if (l->state != LINK_CONNECTING || l->mover_kind != WST_MOVER_NCCL ||
        l->tx == NULL || l->nccl_peer_ready ||
        nr->plan_hash != l->plan.plan_hash) {
        wst_link_fail(l, WST_ERR_PROTOCOL, "unexpected nccl-ready");
        return;
    }
    l->nccl_peer_ready = 1;
    if (l->nccl_ready)
        wst_link_set_state(l, LINK_PLANNED);
}

/* The nccl path: a new unique id to the receiver, and this side's
 * non-blocking init; PLANNED once both sides are ready. */
static wst_status_t open_nccl(struct link *l)
{
    struct wst_sender *s = l->s;
    struct wst_msg m = {.type = WST_MSG_NCCL_SETUP};
    struct wst_tx_nccl_params p = {
        .log = &s->log,
        .worker = s->worker,
        .device = wst_send_device_ordinal(s->dev),
        .timeout_s = s->timeout_s,
        .plan = &l->tx_plan,
        .events = wst_send_pump_events(l),
        .ready_fn = nccl_local_ready,
        .ready_arg = l,
    };

    l->mover_kind = WST_MOVER_NCCL;
    wst_status_t st = wst_tx_nccl_create(&p, m.u.nccl_setup.unique_id, &l->tx);
    if (st == WST_OK)
        st = wst_link_send(l, &m);
    return st;
}

/* Right after the data endpoint: our further data lanes to the
 * receiver's, as many as its HELLO named (the worker cuts them to its
 * own). None named: the data endpoint alone. */
static wst_status_t open_lanes(struct link *l)
{
    const void *addrs[WST_HELLO_LANES_MAX];
    size_t lens[WST_HELLO_LANES_MAX];
    unsigned n = (unsigned)l->n_lane_addresses;

    if (n == 0)
        return WST_OK;
    for (unsigned i = 0; i < n; i++) {
        addrs[i] = l->lane_addresses[i].data;
        lens[i] = l->lane_addresses[i].len;
    }
    return wst_conn_open_lanes(l->conn, addrs, lens, n, l->s->data_peer_errors);
}

/* put or am over the link's data endpoint; device shards through the
 * bounce ring on the bounce path. */
static wst_status_t open_chunks(struct link *l)
{
    struct wst_sender *s = l->s;
    struct wst_wire *wire = NULL;
    int rma_real = 0;
    uint64_t window = wst_path_window(l->path, s->window, s->window_auto);
    wst_status_t st;

    if (wst_conn_data_ep(l->conn) == NULL) {
        st = wst_conn_open_data(l->conn, l->address.data, l->address.len,
                                s->data_peer_errors, l->lanes, sizeof(l->lanes),
                                &rma_real);
        if (st != WST_OK)
            return st;
        st = open_lanes(l);
        if (st != WST_OK)
            return st;
    }
    const char *why, *dev_why = NULL;
    /* On the direct path the keys are for device memory (the receiver's
     * staging), which a lane of its own may put into (cuda_ipc). Only a
     * configured put uses it: on one H200 it moved a 16-layer refit no
     * faster than am (476 vs 494 GB/s, NOTES.md), and a cuda_ipc mapping
     * cannot be revoked after a failed refit as a NIC's key can. */
    int dev_put = l->path == WST_PATH_DIRECT &&
                  s->mover_pref == WST_MOVER_PUT &&
                  wst_conn_device_put(l->conn, &dev_why);
    rma_real |= dev_put;
    if (s->mover_pref == WST_MOVER_PUT && l->plan.mover == WST_MOVER_PUT &&
        !rma_real) {
        WST_ERROR(&s->log,
                  "receiver %s: the put mover needs a lane that puts in "
                  "hardware: %s%s%s",
                  l->name, wst_conn_rma_why(l->conn), dev_why ? "; " : "",
                  dev_why ? dev_why : "");
        return WST_ERR_UNSUPPORTED;
    }
    l->mover_kind =
        wst_mover_choose(l->plan.mover, s->mover_pref, rma_real, &why);
    if (l->mover_kind != s->mover_pref && s->mover_pref != 0)
        WST_WARN(&s->log,
                 "receiver %s: using %s instead of the configured %s: %s",
                 l->name, wst_mover_kind_name(l->mover_kind),
                 wst_mover_kind_name(s->mover_pref), why);
    struct wst_remote_region *regs =
        calloc(l->plan.n_regions ? l->plan.n_regions : 1, sizeof(*regs));
    if (regs == NULL)
        return WST_ERR_NO_MEMORY;
    for (size_t i = 0; i < l->plan.n_regions; i++) {
        regs[i].base = l->plan.regions[i].base;
        regs[i].length = l->plan.regions[i].length;
        regs[i].rkey = l->plan.regions[i].rkey.data;
        regs[i].rkey_len = l->plan.regions[i].rkey.len;
    }
    st = wst_wire_create(l->mover_kind, s->worker, wst_conn_data_ep(l->conn),
                         l->plan.sender, l->plan.data_token, regs,
                         l->plan.n_regions, &s->log, &wire);
    free(regs);
    if (st != WST_OK)
        return st;
    wst_wire_use_lanes(wire, l->conn);
    struct wst_tx_chunks_params p = {
        .log = &s->log,
        .worker = s->worker,
        .wire = wire,
        .ring =
            l->path == WST_PATH_BOUNCE ? wst_send_device_ring(s->dev) : NULL,
        .plan = &l->tx_plan,
        .window = window,
        .scatter = l->mover_kind == WST_MOVER_AM &&
                   (l->plan.caps & WST_CAP_SCATTER) != 0,
        .events = wst_send_pump_events(l),
    };
    st = wst_tx_chunks_create(&p, &l->tx);
    if (st != WST_OK) {
        wst_wire_destroy(wire);
        return st;
    }
    WST_INFO(&s->log,
             "receiver %s: mover %s, data lanes %s%s, %u lanes, window %llu "
             "MiB, %zu items, %u layers",
             l->name, wst_mover_kind_name(l->mover_kind), l->lanes,
             dev_put    ? " (puts into device memory)"
             : rma_real ? " (real rma)"
                        : " (no real rma lane)",
             wst_conn_lanes(l->conn), (unsigned long long)(window >> 20),
             l->plan.n_items, l->plan.n_layers);
    return WST_OK;
}

void wst_link_close_mover(struct link *l)
{
    wst_tx_destroy(l->tx);
    l->tx = NULL;
    l->nccl_ready = 0;
    l->nccl_peer_ready = 0;
}

wst_status_t wst_link_open_mover(struct link *l)
{
    wst_status_t st;

    wst_link_close_mover(l);
    st = choose_path(l);
    if (st == WST_OK)
        st = make_tx_plan(l);
    if (st != WST_OK)
        return st;
    return l->path == WST_PATH_NCCL ? open_nccl(l) : open_chunks(l);
}
