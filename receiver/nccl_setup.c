/* nccl_setup.c - a sender's NCCL_SETUP: the NCCL mover's receiving half
 * (common/movers/nccl_mover.h) started with the sender's unique id, and
 * NCCL_READY once this side's communicator is up (progress thread). The
 * half is kept across refits while the sender's plan is.
 */
#include "codec.h"
#include "log.h"
#include "nccl_mover.h"
#include "select.h"
#include "receiver_internal.h"

/* Progress thread: this side of the communicator is ready (or not). */
static void nccl_ready(void *arg, wst_status_t status)
{
    struct peer *p = arg;
    struct wst_receiver *r = p->r;

    if (status != WST_OK) {
        wst_recv_send_error(r, p, status < 0 ? status : WST_ERR_TRANSPORT,
                            "nccl communicator failed on the receiver");
        wst_recv_peer_drop_after_error(r, p);
        return;
    }
    struct wst_msg m = {.type = WST_MSG_NCCL_READY};
    m.u.nccl_ready.plan_hash = p->plan_hash;
    p->nccl_ready = 1;
    WST_INFO(&r->log,
             "sender %s: nccl communicator ready on GPU %d (rank 1 of 2)",
             p->name, r->device);
    wst_recv_send_msg(r, p, &m);
}

int wst_recv_nccl_possible(const struct wst_receiver *r)
{
    const char *why;

    return r->rx_regions != NULL &&
           wst_rx_nccl_possible(r->rx_regions, r->n_regions, r->device,
                                wst_nccl_available(), &why);
}

void wst_recv_on_nccl_setup(struct wst_receiver *r, struct peer *p,
                            const struct wst_nccl_setup *ns)
{
    const char *why = NULL;

    if (!p->plan_sent || p->nccl_rx != NULL ||
        wst_rm_state(&r->rm) != WST_RM_IDLE)
        why = "unexpected nccl setup";
    else if (r->rx_regions == NULL ||
             !wst_rx_nccl_possible(r->rx_regions, r->n_regions, r->device,
                                   wst_nccl_available(), &why))
        why = why != NULL ? why : "this receiver has no regions";
    if (why != NULL) {
        wst_recv_send_error(r, p, WST_ERR_UNSUPPORTED, why);
        wst_recv_peer_drop_after_error(r, p);
        return;
    }
    struct wst_rx_nccl_params np = {
        .log = &r->log,
        .worker = r->worker,
        .device = r->device,
        .timeout_s = r->timeout_s,
        .plan = &p->rx_plan,
        .events = wst_recv_rx_events(p),
        .ready_fn = nccl_ready,
        .ready_arg = p,
    };
    wst_status_t st = wst_rx_nccl_create(&np, ns->unique_id, &p->nccl_rx);
    if (st != WST_OK) {
        wst_recv_send_error(r, p, st, "cannot start an nccl communicator");
        wst_recv_peer_drop_after_error(r, p);
    }
}
