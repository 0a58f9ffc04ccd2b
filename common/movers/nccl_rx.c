/* nccl_rx.c - the NCCL mover's receiving half (see nccl_mover.h): one grouped
 * ncclRecv exchange per layer, posted in plan order as far as the layers'
 * destinations are ready (a layer that stages experts waits for its
 * credit); a layer has landed when the GPU has done its exchange.
 */
#include "nccl_mover.h"

#include <stdio.h>
#include <stdlib.h>

struct nccl_rx {
    struct wst_rx rx;           /* first */
    struct wst_nccl_link *link; /* owned */
    struct wst_nccl_run *runs;  /* one a row, borrowed by the link */
    size_t *run_first;          /* [n_layers + 1]: each layer's first run */
    uint32_t next;              /* next layer to post */
    uint32_t done;              /* next layer to complete */
};

static void failed(struct nccl_rx *n, wst_status_t status, const char *what,
                   uint32_t layer)
{
    char reason[128];

    snprintf(reason, sizeof(reason), "nccl %s of layer %u failed", what, layer);
    n->rx.ev.failed(n->rx.ev.arg, status, reason);
}

static void post_layers(struct nccl_rx *n);

/* Progress thread: layer 'done' is in its destinations (exchanges complete
 * in the order they were posted). */
static void received(void *arg, wst_status_t status)
{
    struct nccl_rx *n = arg;
    const struct wst_rx_plan *pl = n->rx.plan;
    uint32_t layer = n->done++;
    uint64_t bytes = 0;

    if (!n->rx.receiving)
        return;
    if (status != WST_OK) {
        failed(n, status, "receive", layer);
        return;
    }
    for (size_t k = pl->layer_first[layer]; k < pl->layer_first[layer + 1]; k++)
        bytes += wst_plan_item_bytes(&pl->items[k]);
    n->rx.ev.landed(n->rx.ev.arg, layer, bytes, 0, 0);
    post_layers(n); /* room for the next */
}

/* Posts this sender's layers, in order, as one receive exchange each, as
 * far as their destinations are ready. The sender posts its sends in the
 * same order, which is how NCCL pairs them. */
static void post_layers(struct nccl_rx *n)
{
    const struct wst_rx_plan *pl = n->rx.plan;

    while (n->rx.receiving && n->next < pl->n_layers) {
        uint32_t layer = n->next;
        size_t first = pl->layer_first[layer];
        size_t count = pl->layer_first[layer + 1] - first;
        for (size_t k = 0; k < count; k++)
            if (!wst_rx_item_allowed(&n->rx, first + k))
                return; /* allow() posts again */
        struct wst_nccl_run *runs = n->runs + n->run_first[layer];
        size_t r = 0;
        for (size_t k = 0; k < count; k++) {
            const struct wst_plan_item *it = &pl->items[first + k];
            for (uint64_t row = 0; row <= it->more_rows; row++, r++) {
                runs[r].ptr = wst_rx_item_dest(pl, it, row * it->length);
                runs[r].bytes = it->length;
                runs[r].peer = 0; /* the sender */
            }
        }
        wst_status_t st =
            wst_nccl_link_post(n->link, NULL, 0, runs, r, received, n);
        if (st == WST_ERR_BUSY)
            return; /* received() makes room */
        if (st != WST_OK) {
            failed(n, st, "posting", layer);
            return;
        }
        n->next++;
    }
}

static wst_status_t nccl_begin(struct wst_rx *rx, uint64_t version)
{
    struct nccl_rx *n = (struct nccl_rx *)rx;

    if (wst_nccl_link_in_flight(n->link) != 0)
        return WST_ERR_STATE; /* a failed refit left work behind */
    rx->version = version;
    rx->receiving = 1;
    n->next = 0;
    n->done = 0;
    post_layers(n);
    return WST_OK;
}

static void nccl_allow(struct wst_rx *rx, uint32_t layer_bound)
{
    rx->layer_bound = layer_bound;
    post_layers((struct nccl_rx *)rx);
}

/* No receive may go on writing live memory once the refit failed: the
 * communicator is aborted (the sender sets up a new one). */
static void nccl_abort(struct wst_rx *rx)
{
    struct nccl_rx *n = (struct nccl_rx *)rx;

    rx->receiving = 0;
    wst_nccl_link_abort(n->link);
}

static void nccl_destroy(struct wst_rx *rx)
{
    struct nccl_rx *n = (struct nccl_rx *)rx;

    rx->receiving = 0;
    wst_nccl_link_destroy(n->link); /* before its borrowed runs go */
    free(n->runs);
    free(n->run_first);
    free(n);
}

static const struct wst_rx_ops nccl_rx_ops = {
    .name = "nccl",
    .counts_bytes = 1,
    .begin = nccl_begin,
    .allow = nccl_allow,
    .abort = nccl_abort,
    .destroy = nccl_destroy,
};

wst_status_t wst_rx_nccl_create(const struct wst_rx_nccl_params *p,
                                const unsigned char id[WST_NCCL_ID_BYTES],
                                struct wst_rx **rx_p)
{
    struct nccl_rx *n = calloc(1, sizeof(*n));
    wst_status_t st = WST_ERR_NO_MEMORY;

    if (n == NULL)
        return st;
    /* Room for every row's run, once: a refit fills and posts slices. */
    st = wst_nccl_runs_new(p->plan->items, p->plan->n_layers,
                           p->plan->layer_first, &n->run_first, &n->runs);
    if (st != WST_OK)
        goto err_free;
    n->rx.ops = &nccl_rx_ops;
    n->rx.ev = p->events;
    n->rx.plan = p->plan;
    st =
        wst_nccl_link_create(p->log, p->worker, p->device, id, 2, 1,
                             p->timeout_s, p->ready_fn, p->ready_arg, &n->link);
    if (st != WST_OK)
        goto err_free;
    *rx_p = &n->rx;
    return WST_OK;

err_free:
    free(n->runs);
    free(n->run_first);
    free(n);
    return st;
}
