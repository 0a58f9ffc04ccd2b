/* wire.h - how the put and am movers' sending half (chunks.h) moves one
 * contiguous run to one receiver: the UCX operation under it.
 *
 * A wire is a small ops table over one data endpoint. Wires move
 * contiguous runs only; packing of strided runs happens above them.
 * Implementations (wire.c):
 *  - put: ucp_put_nbx into the receiver's registered regions with their
 *    unpacked remote keys; a fence waits for the puts posted before it to
 *    complete, then issues ucp_ep_flush_nbx, the only thing that makes
 *    puts visible at the target. Zero copy where the lane does real
 *    RMA (RDMA, shared memory through cma, cuda_ipc into device memory).
 *    A region the receiver gave no key for (device memory it cannot
 *    export: the engine's, mapped by CUDA IPC) takes am moves on the
 *    same wire; the fence covers both, and the receiver counts the am
 *    bytes (rx.h).
 *  - am: ucp_am_send_nbx with rendezvous into the slot the receiver picks
 *    (its data_dest callback); a fence completes when every send has
 *    completed. For lanes where puts would be emulated (TCP in UCX 1.13).
 * All functions run on the progress thread. Callbacks fire there too, and a
 * callback may fire before the call that started it returns.
 */
#ifndef WST_MOVERS_WIRE_H
#define WST_MOVERS_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <ucp/api/ucp.h>
#include <wstream/status.h>

#include "log.h"
#include "mover_kind.h"
#include "worker.h"

typedef void (*wst_wire_cb)(void *arg, wst_status_t status);

/* One contiguous run. */
struct wst_move {
    const void *src;    /* borrowed until the move's callback */
    ucp_mem_h src_memh; /* registration covering src, or NULL */
    uint64_t length;
    uint32_t region;
    uint64_t dst_offset;
    uint32_t item;        /* plan item index (am: tells the receiver where) */
    uint64_t item_offset; /* bytes into the item of this run */
    uint32_t item_count;  /* items gathered into this run (0 or 1: one) */
    uint64_t version;
    int scatter; /* am only: the items' destinations need not follow each
                    other (WST_DATA_SCATTER; eager, <= WST_SCATTER_BYTES) */
};

/* A remote region as the receiver advertised it. */
/* One region of the receiver's plan. A region none of this sender's items
 * writes has length 0 and no key (the receiver grants only what the plan
 * needs); indices stay those of the plan. */
struct wst_remote_region {
    uint64_t base;
    uint64_t length;
    const void *rkey; /* packed; borrowed during wst_wire_create */
    size_t rkey_len;
};

struct wst_wire;
struct move_req; /* wire.c: the completion context of one move */

struct wst_wire_ops {
    enum wst_mover_kind kind;
    wst_status_t (*move)(struct wst_wire *m, const struct wst_move *mv,
                         wst_wire_cb cb, void *arg);
    wst_status_t (*fence)(struct wst_wire *m, wst_wire_cb cb, void *arg);
    void (*destroy)(struct wst_wire *m);
};

struct wst_worker;

struct wst_wire {
    const struct wst_wire_ops *ops;
    const struct wst_logger *log;
    struct wst_worker *worker; /* told of requests in flight */
    ucp_ep_h ep;
    uint32_t rank;  /* am: this sender's rank */
    uint64_t token; /* am: the receiver's secret for it (Plan.data_token) */
    size_t n_regions;
    struct wst_remote_region *regions; /* owned copy, rkey pointers cleared */
    ucp_rkey_h *rkeys;                 /* put only; owned */
    uint64_t outstanding;              /* moves not yet completed */
    /* A fence covers the moves posted before it, not those posted
     * while it waits (or a busy stream would starve it): moves carry an
     * epoch, a fence closes the current one. One fence at a time, so two
     * counters suffice. */
    uint64_t epoch;
    uint64_t in_epoch[2];
    uint64_t fence_epoch;
    wst_wire_cb fence_cb; /* pending fence */
    void *fence_arg;
    wst_status_t error; /* first failed move, sticky */
    int destroyed;      /* freed when the last outstanding move completes */
    int in_callback;    /* move callbacks running (one may destroy) */
    struct move_req *free_reqs; /* recycled completion contexts (owned) */
    /* am with lanes (wst_wire_use_lanes): the connection whose lanes carry
     * a share of the moves, each move on the lane with the fewest bytes
     * in flight (lane 0 is ep). */
    struct wst_conn *conn;
    unsigned n_lanes;
    uint64_t lane_bytes[WST_WORKER_LANES_MAX];
};

/* Destroying a mover with moves in flight is allowed (its endpoint closed
 * or being closed): their callbacks still fire, usually with an error, and
 * the memory goes when the last one completes. A pending fence never
 * fires after destroy. */

/* Creates a mover of 'kind' over data endpoint 'ep'. For put, the region
 * keys are unpacked here once (never per refit). On success *mover_p is
 * owned by the caller (destroy through m->ops->destroy or
 * wst_wire_destroy). */
wst_status_t wst_wire_create(enum wst_mover_kind kind,
                             struct wst_worker *worker, ucp_ep_h ep,
                             uint32_t rank, uint64_t token,
                             const struct wst_remote_region *regions,
                             size_t n_regions, const struct wst_logger *log,
                             struct wst_wire **mover_p);

void wst_wire_destroy(struct wst_wire *m);

struct wst_conn;

/* Stripe the wire's am messages (a put wire's too, for its regions
 * without a key) over the data lanes of 'conn' (worker.h, "Data
 * lanes"), the connection whose data endpoint the wire was made on and
 * which outlives it; puts stay on the data endpoint. No effect with one
 * lane. */
void wst_wire_use_lanes(struct wst_wire *m, struct wst_conn *conn);

#endif
