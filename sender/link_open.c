/* link_open.c - a planned link's data path: how its device shards travel
 * (common/device_path.h: directly when UCX can read device memory, else
 * through the pinned bounce ring, or NCCL) and the mover that carries its
 * data, chosen once per plan.
 */
#include <stdlib.h>

#include "device.h"
#include "device_path.h"
#include "log.h"
#include "mover.h"
#include "nccl_comm.h"
#include "sender_internal.h"
#include "worker.h"

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

wst_status_t wst_link_open_mover(struct link *l)
{
    struct wst_sender *s = l->s;
    int rma_real = 0;
    wst_status_t st;

    st = choose_path(l);
    if (st != WST_OK)
        return st;
    if (l->path == WST_PATH_NCCL)
        return wst_tx_nccl_open(l);

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
