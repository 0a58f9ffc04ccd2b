/* nccl_mover.h - the NCCL mover: whole layers as grouped ncclSend/ncclRecv
 * exchanges over a two-rank communicator (nccl_link.h), sender rank 0,
 * receiver rank 1.
 *
 * Both ends post their layers in plan order, each layer's runs in plan
 * order: NCCL pairs the calls of two ranks in the order they are made, so
 * that order is the protocol. A layer is posted whole, once every staged
 * item of it has its credit; it is "fenced" (visible) when the GPU has
 * done its exchange.
 */
#ifndef WST_MOVERS_NCCL_H
#define WST_MOVERS_NCCL_H

#include <stdlib.h>

#include "log.h"
#include "nccl_comm.h"
#include "nccl_link.h"
#include "rx.h"
#include "tx.h"
#include "worker.h"

/* Both halves move one run per row of an item (planner.h): NCCL pairs a
 * send and a receive of the same size, and the sender's rows lie apart.
 * Allocates *first_p ([n_layers + 1]: the index of each layer's first
 * run, then the number of runs) from the plan's layer bounds, and *runs_p
 * (one zeroed run a row, for the caller to fill); both are the caller's
 * to free, and both stay NULL on failure. */
static inline wst_status_t wst_nccl_runs_new(const struct wst_plan_item *items,
                                             uint32_t n_layers,
                                             const size_t *layer_first,
                                             size_t **first_p,
                                             struct wst_nccl_run **runs_p)
{
    size_t *first = calloc((size_t)n_layers + 1, sizeof(*first));
    size_t runs = 0;

    *first_p = NULL;
    *runs_p = NULL;
    if (first == NULL)
        return WST_ERR_NO_MEMORY;
    for (uint32_t l = 0; l < n_layers; l++) {
        first[l] = runs;
        for (size_t k = layer_first[l]; k < layer_first[l + 1]; k++)
            runs += (size_t)items[k].more_rows + 1;
    }
    first[n_layers] = runs;
    *runs_p = calloc(runs ? runs : 1, sizeof(**runs_p));
    if (*runs_p == NULL) {
        free(first);
        return WST_ERR_NO_MEMORY;
    }
    *first_p = first;
    return WST_OK;
}

struct wst_tx_nccl_params {
    const struct wst_logger *log;   /* borrowed for the tx's lifetime */
    wst_worker_t *worker;           /* borrowed for the tx's lifetime */
    int device;                     /* the sender's GPU */
    double timeout_s;               /* for the communicator's set-up */
    const struct wst_tx_plan *plan; /* borrowed; every source on the GPU */
    struct wst_tx_events events;
    /* The communicator is ready (or failed): the receiver learns the id
     * from id_p and answers when its side is ready too. */
    wst_nccl_link_fn ready_fn;
    void *ready_arg;
};

/* Makes a new unique id (written to id_p, for the receiver) and starts
 * this side's communicator. On success *tx_p is owned by the caller
 * (wst_tx_destroy). */
wst_status_t wst_tx_nccl_create(const struct wst_tx_nccl_params *params,
                                unsigned char id_p[WST_NCCL_ID_BYTES],
                                struct wst_tx **tx_p);

struct wst_rx_nccl_params {
    const struct wst_logger *log;   /* borrowed for the half's lifetime */
    wst_worker_t *worker;           /* borrowed for the half's lifetime */
    int device;                     /* the receiver's GPU */
    double timeout_s;               /* for the communicator's set-up */
    const struct wst_rx_plan *plan; /* borrowed; every region on the GPU */
    struct wst_rx_events events;
    wst_nccl_link_fn ready_fn; /* this side's communicator is ready */
    void *ready_arg;
};

/* Starts this side's communicator with the sender's unique id. On success
 * *rx_p is owned by the caller (wst_rx_destroy). */
wst_status_t wst_rx_nccl_create(const struct wst_rx_nccl_params *params,
                                const unsigned char id[WST_NCCL_ID_BYTES],
                                struct wst_rx **rx_p);

#endif
