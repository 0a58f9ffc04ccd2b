/* mover.h - how a sender moves contiguous runs to one receiver.
 *
 * A mover is a small ops table (NCCL-transport style) over one data
 * endpoint. Movers move contiguous runs only; packing of strided runs
 * happens above them. Implementations:
 *  - put: ucp_put_nbx into the receiver's registered regions with their
 *    unpacked remote keys; a fence waits for the puts posted before it to
 *    complete, then issues ucp_ep_flush_nbx, the only thing that makes
 *    puts visible at the target. Zero copy where the lane does real
 *    RMA (RDMA, shared memory through cma).
 *  - am: ucp_am_send_nbx with rendezvous into the slot the receiver picks
 *    (its data_dest callback); a fence completes when every send has
 *    completed. For lanes where puts would be emulated (TCP in UCX 1.13).
 * All functions run on the progress thread. Callbacks fire there too, and a
 * callback may fire before the call that started it returns.
 */
#ifndef WST_MOVER_H
#define WST_MOVER_H

#include <stddef.h>
#include <stdint.h>
#include <ucp/api/ucp.h>
#include <wstream/status.h>

#include "log.h"

/* The largest data message a sender posts: items move in chunks of at
 * most this, and a receiver landing data for device memory in host slots
 * sizes them by it. */
#define WST_DATA_CHUNK_MAX (8ull << 20)

/* Values travel on the wire (put and am in a plan: what the receiver
 * offers; any of them in a sender's BEGIN: what it uses). nccl moves
 * whole layers with ncclSend/ncclRecv (kernels/nccl_link.h), not through
 * this ops table. */
enum wst_mover_kind {
    WST_MOVER_PUT = 1,
    WST_MOVER_AM = 2,
    WST_MOVER_NCCL = 3,
};

const char *wst_mover_kind_name(enum wst_mover_kind kind);

/* Parses "put" or "am"; 0 if neither. */
enum wst_mover_kind wst_mover_kind_parse(const char *name);

typedef void (*wst_mover_cb)(void *arg, wst_status_t status);

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
};

/* A remote region as the receiver advertised it. */
struct wst_mover_region {
    uint64_t base;
    uint64_t length;
    const void *rkey; /* packed; borrowed during wst_mover_create */
    size_t rkey_len;
};

struct wst_mover;
struct move_req; /* mover.c: the completion context of one move */

struct wst_mover_ops {
    enum wst_mover_kind kind;
    wst_status_t (*move)(struct wst_mover *m, const struct wst_move *mv,
                         wst_mover_cb cb, void *arg);
    wst_status_t (*fence)(struct wst_mover *m, wst_mover_cb cb, void *arg);
    void (*destroy)(struct wst_mover *m);
};

struct wst_worker;

struct wst_mover {
    const struct wst_mover_ops *ops;
    const struct wst_logger *log;
    struct wst_worker *worker; /* told of requests in flight */
    ucp_ep_h ep;
    uint32_t token; /* am: receiver-assigned id of this sender */
    size_t n_regions;
    struct wst_mover_region *regions; /* owned copy, rkey pointers cleared */
    ucp_rkey_h *rkeys;                /* put only; owned */
    uint64_t outstanding;             /* moves not yet completed */
    /* A fence covers the moves posted before it, not those posted
     * while it waits (or a busy stream would starve it): moves carry an
     * epoch, a fence closes the current one. One fence at a time, so two
     * counters suffice. */
    uint64_t epoch;
    uint64_t in_epoch[2];
    uint64_t fence_epoch;
    wst_mover_cb fence_cb; /* pending fence */
    void *fence_arg;
    wst_status_t error; /* first failed move, sticky */
    int destroyed;      /* freed when the last outstanding move completes */
    int in_callback;    /* move callbacks running (one may destroy) */
    struct move_req *free_reqs; /* recycled completion contexts (owned) */
};

/* Destroying a mover with moves in flight is allowed (its endpoint closed
 * or being closed): their callbacks still fire, usually with an error, and
 * the memory goes when the last one completes. A pending fence never
 * fires after destroy. */

/* Creates a mover of 'kind' over data endpoint 'ep'. For put, the region
 * keys are unpacked here once (never per refit). On success *mover_p is
 * owned by the caller (destroy through m->ops->destroy or
 * wst_mover_destroy). */
wst_status_t wst_mover_create(enum wst_mover_kind kind,
                              struct wst_worker *worker, ucp_ep_h ep,
                              uint32_t token,
                              const struct wst_mover_region *regions,
                              size_t n_regions, const struct wst_logger *log,
                              struct wst_mover **mover_p);

void wst_mover_destroy(struct wst_mover *m);

#endif
