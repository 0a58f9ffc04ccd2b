/* sender_internal.h - the sender library's private state (shards, links,
 * the sender) and the functions its files share.
 *
 * The library's files:
 *   sender.c     the public API: parameters, create, push, wait, destroy
 *   sender_config.c  the settings table: every default (sender_config.h)
 *   shards.c     registering shards
 *   slices.c     several shards (slices) of one tensor name: the name
 *                index and the checks between slices
 *   link.c       one link per receiver: connection, control messages, state
 *   link_open.c  a planned link's device path and mover, chosen once
 *   group.c      the refit's two barriers over an engine group's links
 *   pump.c       streaming a refit through its sending half
 *                (common/movers/tx.h), layer by layer
 *   digests.c    layer digests, hashed on the digest pool (common/pool.h)
 *   digest_pieces.c  a layer's digest cut into pieces hashed apart
 *   unwanted.c   the shards no plan names, said once per push
 *   device.c     the GPU side (device.h)
 *
 * Locking: link fields belong to the progress thread. What the application
 * thread waits on (state, error, committed version) is written under
 * s->lock and signalled on s->cond.
 */
#ifndef WST_SENDER_INTERNAL_H
/* Tensors the unwanted line names (unwanted.c); the count covers all. */
#define WST_SEND_UNWANTED_NAMED 4

#define WST_SENDER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <wstream/sender.h>

#include "auth.h"
#include "codec.h"
#include "device.h"
#include "select.h"
#include "log.h"
#include "manifest.h"
#include "mover.h"
#include "pool.h"
#include "ticket_lock.h"
#include "tx.h"
#include "worker.h"

struct layer_hash;       /* digests.c */
struct wst_digest_piece; /* digest_pieces.h */

enum link_state {
    LINK_IDLE,
    LINK_CONNECTING,
    LINK_PLANNED,
    LINK_BEGIN_SENT,
    LINK_STREAMING,
    LINK_COMMITTED,
    LINK_FAILED,
};

/* One registered shard: a slice of a tensor, its own have entry (its index
 * in s->shards is its index in the have manifest, which plan items name). */
struct shard {
    struct wst_have have;
    const void *data;
    uint64_t bytes;
    ucp_mem_h memh;    /* NULL for device memory UCX cannot register */
    int device;        /* its GPU, or -1 for host memory */
    size_t prev_slice; /* the previous slice of this name, or SIZE_MAX */
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

    struct wst_blob address; /* receiver worker address (owned) */
    /* The receiver's further data lanes' addresses (owned), from its
     * HELLO: our lane i + 1 opens an endpoint to lane_addresses[i]. */
    size_t n_lane_addresses;
    struct wst_blob lane_addresses[WST_HELLO_LANES_MAX];
    /* The receiver's engine group (its WANT_SUMMARY); group_first is the
     * index of the group's first link, set by push (group.c). */
    char group[WST_GROUP_NAME_MAX];
    uint32_t group_size, group_member;
    size_t group_first;
    struct wst_plan_msg plan; /* owned, from the codec */
    int have_plan;
    size_t *layer_first;    /* [n_layers + 1] item bounds per layer */
    uint64_t *layer_bytes;  /* [n_layers] */
    uint64_t *digests;      /* [n_layers], from the digest pool */
    uint8_t *digest_in;     /* [n_layers]: digests[layer] is this version's */
    uint8_t *credits;       /* [n_layers]: staging credit for this version */
    uint32_t digests_ready; /* layers [0, digests_ready) have their digest */
    /* How the layers are hashed (digests.c): built on the progress thread
     * at the first push of a plan, freed with it; the pool's jobs read
     * dpieces, the progress thread alone the rest of layer_hash. */
    struct layer_hash *layer_hash;    /* [n_layers]; NULL: not built yet */
    struct wst_digest_piece *dpieces; /* the host layers' pieces */
    size_t n_dpieces, dpieces_cap;
    /* Set when the link fails (and by each push for the links it
     * hashes): its digest jobs not yet started skip their layer. Read on
     * the digest pool's threads, hence atomic. */
    atomic_int digests_off;
    struct wst_tx_src *srcs;         /* [n_items]: where each item is read */
    struct wst_tx_plan tx_plan;      /* the plan as the sending half sees it */
    struct wst_tx *tx;               /* the sending half, one per plan */
    enum wst_mover_kind mover_kind;  /* what BEGIN announces */
    enum wst_path path;              /* how device shards travel */
    int nccl_ready, nccl_peer_ready; /* nccl: both communicators up */
    char lanes[256];

    uint64_t version;
    char label[WST_LABEL_MAX]; /* version's, as its BEGIN says; "": none */
    uint64_t committed;
    /* The version the receiver holds committed, as it last said (its
     * want summary at connect, its commit since), and its label; 0 and "":
     * none. Under s->lock. */
    uint64_t held_version;
    char held_label[WST_LABEL_MAX];
    /* This version's barriers (group.c): the receiver said READY and
     * PREPARED, we said GO and COMMIT; aborted: failed because another
     * receiver of the group did. */
    int ready, prepared, go_sent, commit_sent, aborted;
    struct wst_tx_cursor cur; /* next item to post, and bytes of it */
    uint32_t fence_layer;     /* next layer to fence */
    int fence_pending;
    uint32_t fenced;     /* layers [0, fenced) are visible at the receiver */
    uint32_t done_sent;  /* layers [0, done_sent) reported LAYER_DONE */
    uint32_t done_batch; /* layers [done_sent - done_batch, done_sent) are
                            to be reported by the next LAYER_DONE (pump.c) */
    uint32_t started;    /* layers [0, started) began streaming */
    int pumping, pump_again;
    uint64_t bytes_moved;
};

struct wst_sender {
    struct wst_logger log;
    char log_name[32];
    uint32_t rank;
    uint32_t world_size;
    double timeout_s;
    enum wst_mover_kind mover_pref; /* 0: auto */
    uint64_t window;
    int window_auto; /* none asked for: the direct path may take more */
    struct wst_heartbeat_params heartbeat; /* heartbeat_msg.h */
    int data_peer_errors;
    uint64_t session;
    int done_flush_posted; /* wst_send_flush_done is queued (pump.c) */
    wst_layer_progress_fn progress_fn;
    void *progress_arg;
    enum wst_path_pref path_pref;
    uint32_t bounce_slots;
    struct wst_auth_secret secret; /* empty: none (insecure receivers only) */
    unsigned lanes; /* the worker's data lanes, 1..WST_WORKER_LANES_MAX */
    /* wst_sender_params.lane_devices, checked; "": none. */
    char lane_devices[WST_WORKER_DEVICES_MAX * WST_WORKER_DEVICE_MAX];

    wst_worker_t *worker;
    struct wst_send_device *dev; /* with the first device shard */
    struct shard *shards;
    size_t n_shards, shards_cap;
    /* slices.c: open-addressing index of shard names, each slot a shard
     * index + 1 (the latest slice of its name) or 0 (free). */
    size_t *name_slots;
    size_t name_slots_cap, n_names;
    struct link *links;
    size_t n_links;
    /* unwanted.c, on the progress thread: plans taken so far (on_plan),
     * and the unwanted shards as of unwanted_plans of them: their count
     * and the line's names, so that a push whose plans did not change
     * logs without scanning or allocating. */
    uint64_t plans_taken, unwanted_plans;
    size_t n_unwanted;
    char unwanted_names[WST_SEND_UNWANTED_NAMED * (WST_NAME_MAX + 2) + 8];

    pthread_mutex_t lock;
    pthread_cond_t cond;
    uint64_t version;          /* last pushed */
    char label[WST_LABEL_MAX]; /* its label; "": none */

    /* Layer digests (digests.c): one batch of jobs per push, layer-major,
     * hashed on the pool's threads while the refit streams, so push
     * returns at once. A job reads its link's plan and the shards
     * unlocked: no plan is dropped while a batch runs (digests.c). The
     * GPU's digest calls are serialized by dev_hash_lock, in the order
     * the jobs asked for it: with a mutex one thread's layer waited while
     * the others took every later one (layer 1's digest came last, 10 ms
     * into a 16-layer refit on the H200, holding up its LAYER_DONE). */
    wst_pool_t *digest_pool;
    unsigned digest_threads;
    struct digest_job *digest_jobs;
    size_t n_digest_jobs, digest_jobs_cap;
    uint64_t digest_version;
    struct wst_ticket_lock dev_hash_lock;
    char last_error[WST_ERROR_MSG_MAX + 300];
};

/* ---- slices.c: application thread, while registering ---- */

/* The shard index of the latest slice registered under 'name', or
 * SIZE_MAX when there is none. */
size_t wst_send_slice_latest(const struct wst_sender *s, const char *name);

/* Checks a new slice 'h' against every earlier slice of its name, from
 * 'latest' (wst_send_slice_latest) back: the same dtype
 * (WST_ERR_DTYPE_MISMATCH) and global shape (WST_ERR_SHAPE_MISMATCH), and
 * no element in common (WST_ERR_INVALID); 'why' names both slices. */
wst_status_t wst_send_slice_check(const struct wst_sender *s, size_t latest,
                                  const struct wst_have *h, char *why,
                                  size_t len);

/* Makes room in the index for one more name (before the shard is added,
 * so that adding cannot fail). */
wst_status_t wst_send_slice_reserve(struct wst_sender *s);

/* Indexes shard i (already in s->shards) as the latest slice of its name
 * and links it to the previous one. */
void wst_send_slice_add(struct wst_sender *s, size_t i);

/* Frees the index (destroy). */
void wst_send_slices_free(struct wst_sender *s);

/* ---- link.c: progress thread ---- */

/* Sets what the application thread waits on, under s->lock. */
void wst_link_set_state(struct link *l, enum link_state st);

/* Fails the link with 'status' (logged once, kept for the application);
 * its mover, nccl link and connection go now. No-op on a failed link. */
void wst_link_fail(struct link *l, wst_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Tells the receiver the refit fails (an ERROR of 'status' and 'why')
 * and fails the link, which lingers until the message is out. */
void wst_link_abort(struct link *l, wst_status_t status, const char *why);

/* Sends one control message; a failure fails the link. */
wst_status_t wst_link_send(struct link *l, const struct wst_msg *msg);

/* Frees the link's plan and what was indexed from it. No digest batch
 * runs (its jobs read the plan unlocked): every caller stops it first. */
void wst_link_drop_plan(struct link *l);

/* Frees the receiver's worker and lane addresses from its HELLO. */
void wst_link_drop_addresses(struct link *l);

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

/* ---- group.c ---- */

/* Progress thread, every link planned (push): checks that each engine
 * group the receivers name is reached whole (each member once, one size)
 * and numbers the groups. WST_ERR_CONFIG with the reason in err. */
wst_status_t wst_send_groups_check(struct wst_sender *s, char *err,
                                   size_t errlen);

/* Progress thread: l's receiver said READY or PREPARED, or l failed: GO,
 * COMMIT or ERROR to the links of its group, as the group now stands. */
void wst_send_group_update(struct link *l);

/* ---- unwanted.c: application thread, in push ---- */

/* Every link planned: one info line for version when some shards are in
 * no link's plan (they are not sent), naming a few and counting all. */
void wst_send_log_unwanted(struct wst_sender *s, uint64_t version);

/* ---- link_open.c: progress thread ---- */

/* Chooses how the plan's device shards travel and the mover that carries
 * the link's data, and opens its sending half (on the nccl path, also
 * NCCL_SETUP: the link is planned once NCCL_READY is in too). */
wst_status_t wst_link_open_mover(struct link *l);

/* NCCL_READY from the receiver. */
void wst_link_on_nccl_ready(struct link *l, const struct wst_nccl_ready *nr);

/* Destroys the link's sending half (moves in flight complete on their
 * own). */
void wst_link_close_mover(struct link *l);

/* ---- pump.c: progress thread ---- */

/* Streams what can go now; events re-enter it. */
void wst_send_pump(struct link *l);

/* The events a link's sending half reports to its pump. */
struct wst_tx_events wst_send_pump_events(struct link *l);

/* Every streaming link pumps (a bounce slot came free; arg: the sender). */
void wst_send_pump_all(void *arg);
/* Posted: every link's batch of LAYER_DONE goes (pump.c). */
void wst_send_flush_done(void *arg);

/* ---- digests.c: application thread ---- */

/* Application thread, in push: ends the previous batch (cancelled), then
 * queues this version's layer digests on the pool. A job's result reaches
 * its link on the progress thread; layers may finish out of order. */
wst_status_t wst_send_start_digests(struct wst_sender *s, uint64_t version);

/* Progress thread, when a link fails: its digest jobs not yet started
 * skip their layer (a job hashing one finishes it). */
void wst_send_skip_digests(struct link *l);

/* Progress thread, with the plan: frees how its layers are hashed. */
void wst_send_free_digest_pieces(struct link *l);

/* Application thread: no digest job runs once this returns (wait, destroy:
 * the caller may then change or free its shards); with 'cancel', jobs not
 * started are skipped, otherwise they run first. */
void wst_send_stop_digests(struct wst_sender *s, int cancel);

#endif
