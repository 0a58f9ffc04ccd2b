/* sender_internal.h - the sender library's private state (shards, links,
 * the sender) and the functions its files share.
 *
 * The library's files:
 *   sender.c     the public API: parameters, create, push, wait, destroy
 *   shards.c     registering shards
 *   link.c       one link per receiver: connection, control messages, state
 *   link_open.c  a planned link's device path and mover
 *   pump.c       streaming a refit through the mover, layer by layer
 *   tx_bounce.c  device shards through the pinned bounce ring
 *   tx_nccl.c    device shards through NCCL
 *   digests.c    layer digests, computed inside push
 *   device.c     the GPU side (device.h)
 *
 * Locking: link fields belong to the progress thread. What the application
 * thread waits on (state, error, committed version) is written under
 * s->lock and signalled on s->cond.
 */
#ifndef WST_SENDER_INTERNAL_H
#define WST_SENDER_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <wstream/sender.h>

#include "codec.h"
#include "device.h"
#include "device_path.h"
#include "log.h"
#include "manifest.h"
#include "mover.h"
#include "nccl_comm.h"
#include "nccl_link.h"
#include "worker.h"

enum link_state {
    LINK_IDLE,
    LINK_CONNECTING,
    LINK_PLANNED,
    LINK_BEGIN_SENT,
    LINK_STREAMING,
    LINK_COMMITTED,
    LINK_FAILED,
};

struct shard {
    struct wst_have have;
    const void *data;
    uint64_t bytes;
    ucp_mem_h memh; /* NULL for device memory UCX cannot register */
    int device;     /* its GPU, or -1 for host memory */
};

struct link {
    struct wst_sender *s;
    char host[256];
    uint16_t port;
    char name[280];
    wst_conn_t *conn;
    enum link_state state;
    wst_status_t error;
    char error_msg[WST_ERROR_MSG_MAX];

    struct wst_blob address;  /* receiver worker address (owned) */
    struct wst_plan_msg plan; /* owned, from the codec */
    int have_plan;
    size_t *layer_first;   /* [n_layers + 1] item bounds per layer */
    uint64_t *layer_bytes; /* [n_layers] */
    uint64_t *digests;     /* [n_layers], written by push */
    uint8_t *credits;      /* [n_layers]: staging credit for this version */
    uint32_t *copying;     /* [n_layers]: bounce copies not yet moves */
    uint32_t digests_ready;
    struct wst_mover *mover;
    uint64_t mover_gen; /* bumped per mover: late callbacks of old ones */
    enum wst_mover_kind mover_kind;
    enum wst_path path;             /* how device shards travel */
    struct wst_nccl_link *nccl;     /* path nccl: kept across refits */
    struct wst_nccl_run *nccl_runs; /* [n_items], built with the link */
    int nccl_ready, nccl_peer_ready;
    uint32_t nccl_next; /* next layer to post */
    char lanes[256];

    uint64_t version;
    uint64_t committed;
    size_t cursor;        /* next item to move */
    uint64_t cursor_off;  /* bytes of it already moved */
    uint32_t fence_layer; /* next layer to fence */
    int fence_pending;
    uint32_t fenced;    /* layers [0, fenced) are visible at the receiver */
    uint32_t done_sent; /* layers [0, done_sent) reported LAYER_DONE */
    uint32_t started;   /* layers [0, started) began streaming */
    uint64_t in_flight;
    int pumping, pump_again;
    struct chunk_done *free_chunks; /* recycled move contexts (owned) */
    uint64_t bytes_moved;
    unsigned char *gather; /* [GATHER_BUFS][GATHER_BYTES], owned; lazily */
    ucp_mem_h gather_memh;
    uint32_t gather_free; /* bit i: buffer i is free */
};

struct wst_sender {
    struct wst_logger log;
    char log_name[32];
    uint32_t rank;
    uint32_t world_size;
    double timeout_s;
    enum wst_mover_kind mover_pref; /* 0: auto */
    uint64_t window;
    double heartbeat_s;
    double peer_timeout_s;
    int data_peer_errors;
    uint64_t session;
    wst_layer_progress_fn progress_fn;
    void *progress_arg;
    enum wst_path_pref path_pref;
    uint32_t bounce_slots;

    wst_worker_t *worker;
    struct wst_tx_device *dev; /* with the first device shard */
    struct shard *shards;
    size_t n_shards;
    struct link *links;
    size_t n_links;

    pthread_mutex_t lock;
    pthread_cond_t cond;
    uint64_t version; /* last pushed */
    char last_error[WST_ERROR_MSG_MAX + 300];
};

struct chunk_done {
    struct chunk_done *next; /* in the link's free list */
    struct link *l;
    uint64_t mover_gen;
    uint64_t len;
    int gather; /* gather buffer it holds, or -1 */
    int slot;   /* bounce slot it holds, or -1 */
    uint32_t layer;
    struct wst_move mv; /* bounce: posted once the slot is filled */
};

/* ---- link.c: progress thread ---- */

/* Sets what the application thread waits on, under s->lock. */
void wst_link_set_state(struct link *l, enum link_state st);

/* Fails the link with 'status' (logged once, kept for the application);
 * its mover, nccl link and connection go now. No-op on a failed link. */
void wst_link_fail(struct link *l, wst_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Sends one control message; a failure fails the link. */
wst_status_t wst_link_send(struct link *l, const struct wst_msg *msg);

/* Frees the link's plan and what was indexed from it. */
void wst_link_drop_plan(struct link *l);

/* The worker's ops (arg: the sender): a message from a receiver, a lost
 * connection. */
void wst_link_on_message(void *arg, wst_conn_t *conn, const void *buf,
                         size_t len);
void wst_link_on_conn_failed(void *arg, wst_conn_t *conn, wst_status_t status,
                             const char *why);

/* Posted by push (arg: the link): connect (an idle or failed link), and
 * BEGIN of s->version (a planned or committed one). */
void wst_link_do_connect(void *arg);
void wst_link_do_begin(void *arg);

/* ---- link_open.c: progress thread ---- */

/* Chooses how the plan's device shards travel and opens the mover (or,
 * on the nccl path, starts the communicator). */
wst_status_t wst_link_open_mover(struct link *l);

/* ---- pump.c: progress thread ---- */

/* Streams what can go now; callbacks re-enter it. */
void wst_tx_pump(struct link *l);

/* Move contexts, recycled per link; NULL without memory. */
struct chunk_done *wst_tx_chunk_new(struct link *l);
void wst_tx_chunk_release(struct link *l, struct chunk_done *cd);

/* A move's completion (arg: its chunk_done). */
void wst_tx_move_done(void *arg, wst_status_t status);

/* The cursor passes 'items' items, or (items 0) 'len' bytes. */
void wst_tx_advance(struct link *l, size_t items, uint64_t len);

/* Unregisters the link's gather buffers (the worker still up). */
void wst_tx_gather_unmap(struct link *l);

/* ---- tx_bounce.c: progress thread ---- */

/* Gives a bounce slot back; streaming links other than 'skip' pump. */
void wst_tx_bounce_slot_give(struct wst_sender *s, int slot,
                             const struct link *skip);

/* Copies the next chunk or 'items' gathered items into a slot; its move
 * follows once the copy is done. 0 when blocked. */
int wst_tx_bounce_post(struct link *l, size_t items, uint64_t len);

/* Logs the refit's bounce figures (arg: the sender). */
void wst_tx_bounce_log(void *arg);

/* ---- tx_nccl.c: progress thread ---- */

/* Destroys the link's nccl link and runs. */
void wst_tx_nccl_drop(struct link *l);

/* Starts the nccl path of a plan (NCCL_SETUP and this side's init). */
wst_status_t wst_tx_nccl_open(struct link *l);

/* NCCL_READY from the receiver. */
void wst_tx_nccl_on_ready(struct link *l, const struct wst_nccl_ready *nr);

/* Posts the next layer as one exchange; 0 when blocked. */
int wst_tx_nccl_step(struct link *l);

/* ---- digests.c: application thread ---- */

/* Digests every link's layers of 'version', layer-major, and hands each
 * to the progress thread as it is ready. */
void wst_tx_compute_digests(struct wst_sender *s, uint64_t version);

#endif
