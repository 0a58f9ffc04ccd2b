/* receiver_internal.h - what the receiver's files share: the receiver
 * itself, its regions, peers and jobs, and the functions one file offers
 * the others. Private to receiver/.
 *
 * Threads besides the caller's:
 *  - the progress thread (common/worker.c) runs everything that
 *    touches peers and refit state: messages, data arrival, failures, ticks;
 *  - the engine thread (a wst_jobq) runs digest checks and every engine
 *    hook, then posts the result back to the progress thread;
 *  - the hashing threads (a wst_jobq of verify_threads) hash data
 *    messages as they land (common/movers/am_rx.c);
 *  - the repack thread (another wst_jobq) replays staged experts;
 *  - the planner thread (another wst_jobq) unpacks the senders' have
 *    manifests (have_decode.c) and builds plans from a snapshot of them
 *    (plan_cache.c);
 *  - with regions in GPU memory, the landing ring's waiter thread
 *    (common/movers/landing.h), which posts each landed message's
 *    host-to-device copy back once it is done.
 */
#ifndef WST_RECEIVER_INTERNAL_H
#define WST_RECEIVER_INTERNAL_H

#include <wstream/receiver.h>

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "am.h"
#include "auth.h"
#include "codec.h"
#include "experts.h"
#include "jobq.h"
#include "log.h"
#include "manifest.h"
#include "mover.h"
#include "planner.h"
#include "refit_machine.h"
#include "rx.h"
#include "worker.h"

struct wst_recv_device;
struct wst_recv_pending;

struct region {
    char name[WST_NAME_MAX];
    void *data;
    uint64_t length;
    enum wst_mem_type mem; /* WST_MEM_CUDA: not registered with UCX */
    int no_export;         /* device memory this process cannot export (IPC) */
    ucp_mem_h memh;
    void *rkey;
    size_t rkey_len;
};

struct peer {
    struct wst_receiver *r;
    wst_conn_t *conn;
    char name[96];
    int hello_done;
    uint32_t rank;
    struct wst_have_manifest have; /* owned once have_done */
    uint64_t have_bytes;           /* its decoded size, counted as held */
    int have_done;
    int counted_unranked;      /* counted in r->n_unranked (before hello) */
    struct peer *retired_next; /* on r->retired: dropped, manifest kept */
    int have_decoding;      /* its manifest is being unpacked (have_decode.c) */
    uint64_t have_reserved; /* counted as held meanwhile (peer_limits.c) */
    int dropped; /* dropped meanwhile: freed when the manifest is back */
    int plan_sent;
    int plan_put;       /* its plan handed out remote keys: BEGIN may say put */
    uint64_t plan_hash; /* hash of this sender's slice of the plan */
    uint64_t data_token; /* random, in its plan: its data messages carry it */

    /* This sender's slice of the plan, as its receiving halves see it:
     * rebuilt (and the halves destroyed) whenever a plan is sent to it. */
    struct wst_rx_plan rx_plan;
    size_t *rx_layer_first; /* [n_layers + 1], into its own items */
    struct wst_rx *nccl_rx; /* nccl: set up on NCCL_SETUP, kept across
                               refits while the plan is */
    int nccl_ready;         /* this side of its communicator is up */

    /* current refit (the rest of it is the refit machine's) */
    enum wst_mover_kind mover; /* its BEGIN's */
    struct wst_rx *rx;         /* the mover's receiving half (nccl: nccl_rx) */
    enum wst_mover_kind rx_kind; /* the mover rx was made for; 0: none */
};

struct wst_receiver {
    struct wst_logger log;
    char log_name[64];
    uint32_t rank;
    char group[WST_GROUP_NAME_MAX]; /* engine group; "": a group of one */
    uint32_t group_size;
    uint32_t group_member;
    char listen_host[256];
    uint16_t listen_port;
    struct wst_auth_secret secret; /* empty: insecure */
    double timeout_s;
    int allow_put;
    /* Keys for the staging pool in device memory, which the receiver
     * allocated itself (exactly one allocation, so a key grants nothing
     * beside it): senders put experts there where a lane of theirs puts
     * into device memory (cuda_ipc), and move the rest by am. Needs a
     * CUDA-aware UCX and a mover setting other than am. */
    int put_wanted; /* the mover setting allows put */
    int device_put;
    /* The refit now ending was refused or failed (refit.c). */
    int refit_failed;
    int verify;
    unsigned verify_threads;
    unsigned lanes; /* the worker's data lanes, 1..WST_WORKER_LANES_MAX */
    /* wst_receiver_params.lane_devices, checked; "": none. */
    char lane_devices[WST_WORKER_DEVICES_MAX * WST_WORKER_DEVICE_MAX];
    /* The worker's bytes landed per lane when the refit under way began
     * (progress thread). */
    uint64_t lane_bytes_at_start[WST_RECEIVER_LANES_MAX];
    struct wst_heartbeat_params heartbeat; /* heartbeat_msg.h */
    struct wst_receiver_hooks hooks;

    wst_worker_t *worker;
    wst_jobq_t *engine;
    wst_jobq_t *hashers; /* hash data as it lands; NULL: verify off */
    int started;

    struct region *regions;
    size_t n_regions, regions_cap;
    struct wst_want *wants;
    size_t n_wants, wants_cap;
    struct wst_region_desc *region_descs; /* [n_regions] */
    size_t region_descs_cap;
    struct wst_moe moe;          /* MoE layers, staging pool, loaders */
    uint32_t staging_region;     /* valid when moe.staging != NULL */
    void **region_data;          /* [n_regions] base addresses, for repacks */
    int device;                  /* GPU of the device regions, or -1 */
    struct wst_recv_device *dev; /* digests, repacks: when device >= 0 */
    struct wst_landing *landing; /* am data for device regions lands here */
    /* With a CUDA-aware UCX and device regions it cannot export: their
     * rendezvous messages land here first (landing.h). NULL otherwise. */
    struct wst_landing *device_landing;
    /* The largest data message offered for device regions its UCX writes
     * itself (mover.h; WST_DEVICE_MESSAGE_MIB, for measuring). Set with
     * the device (device_setup.c), before any region is device memory. */
    uint64_t device_message_max;
    /* The device ring's size when there is one (device_ring_bytes;
     * WST_DEVICE_RING overrides it, for measuring). */
    uint64_t device_ring_bytes;
    struct wst_rx_am_stats am_stats;  /* the am halves', per refit */
    struct wst_rx_region *rx_regions; /* [n_regions], for the movers */
    wst_jobq_t *repacker; /* runs wst_moe_replay, off the progress thread */

    /* What authenticated senders may make it hold (control.c): entries
     * 0 is auto, from the wants (peer_limits.c). */
    struct {
        uint64_t entries;  /* per sender's manifest */
        uint64_t bytes;    /* all manifests held, decoded */
        uint32_t unranked; /* peers before hello */
    } limits;

    /* progress-thread state */
    uint32_t world_size;     /* senders; 0 until the first hello */
    uint64_t manifest_bytes; /* decoded manifests held by peers now, and
                                those being unpacked (have_unpacking) */
    uint64_t have_unpacking; /* of those, reserved for manifests being
                                unpacked: wire copy and decoded size */
    uint32_t n_unranked;     /* peers without hello now */
    struct peer **by_rank;   /* [world_size] */
    uint64_t first_have_ns;
    struct wst_plan *plan;
    uint64_t plan_key;
    int have_plan_key;
    /* Planning runs on the planner thread (plan_cache.c), one plan at a
     * time; plan_generation moves whenever a manifest comes or goes, and
     * a plan of an older generation is dropped. Peers dropped while one
     * runs wait on 'retired' with their manifests, which it may read. */
    wst_jobq_t *planner;
    int planning;
    uint64_t plan_generation;
    struct peer *retired;
    int closing;         /* wst_receiver_destroy began: results are dropped */
    size_t *layer_index; /* [n_senders * (n_layers + 1)] item bounds */
    const struct wst_moe_layer **layer_moe; /* [n_layers]; NULL: dense */

    /* the refit: its state machine, and what its driver (refit.c) keeps */
    struct wst_refit_machine rm;
    struct wst_rm_actions actions;    /* the step's, being run */
    struct wst_recv_pending *pending; /* events waiting for them */
    int stepping;
    int polling; /* holds the worker busy while a refit runs */
    /* Data messages whose token is not the one the rank they claim was
     * given are dropped and counted (state.forged_data), the first logged. */
    int forged_logged;

    /* what API threads read: under lock */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct wst_receiver_state state;
    struct wst_layer_times *times; /* [n_times] of the current refit */
    uint32_t n_times;
};

/* Work for the engine or repack thread (jobs.c) and its result, posted
 * back to the progress thread, which feeds it to the refit machine and
 * frees it. It carries the generation of the refit it belongs to. */
struct job {
    struct wst_receiver *r;
    uint64_t generation;
    uint64_t version;
    uint32_t rank;
    uint32_t layer;
    uint64_t digest; /* expected */
    uint64_t bytes;  /* verify: the layer's */
    uint64_t hashed; /* verify: bytes hashed as they landed */
    uint64_t sum;    /* verify: their chunk hashes, added up */
    double seconds;  /* repack or finalize, measured where it ran */
    wst_status_t status;
    char reason[WST_ERROR_MSG_MAX];
};

/* receiver.c: the state API threads read, under r->lock */
void wst_recv_set_state_reason(struct wst_receiver *r, const char *reason);
void wst_recv_publish(struct wst_receiver *r,
                      void (*fn)(struct wst_receiver *, void *), void *arg);

/* regions.c */
void *wst_recv_item_dest(const struct wst_receiver *r,
                         const struct wst_plan_item *it, uint64_t offset);
wst_status_t wst_recv_add_want(struct wst_receiver *r,
                               const struct wst_want *want);
/* Progress thread, after a refit failed where plans handed out remote
 * keys (allow_put: puts in hardware; device_put): every registered region
 * is registered again and its key packed again; the old registration goes
 * first. A NIC's put that a stopped sender of the failed refit issues when
 * it resumes then meets a key that no longer exists, and writes nothing
 * (retire_receives in refit.c covers receives, not puts; a cuda_ipc
 * mapping a sender already holds is not undone). The senders of the failed
 * refit reconnect at their next push and get plans with the new keys. A
 * region that cannot be registered again turns puts into its kind of
 * memory off (allow_put or device_put 0: later plans are am there). */
wst_status_t wst_recv_regions_rekey(struct wst_receiver *r);
/* Registers device region 'id' (the staging pool) with UCX and packs its
 * remote key; on failure nothing stays registered. */
wst_status_t wst_recv_region_key_device(struct wst_receiver *r, uint32_t id);
/* Whether senders get region i's remote key: host memory with allow_put,
 * device memory with device_put. Its bytes then come by put. */
int wst_recv_region_keyed(const struct wst_receiver *r, size_t i);

/* peers.c */
void wst_recv_send_msg(struct wst_receiver *r, struct peer *p,
                       const struct wst_msg *m);
void wst_recv_send_error(struct wst_receiver *r, struct peer *p,
                         wst_status_t status, const char *msg);
void wst_recv_for_each_peer(struct wst_receiver *r,
                            void (*fn)(struct wst_receiver *, struct peer *,
                                       void *),
                            void *arg);
/* Its rank as the refit machine knows it: WST_RM_NO_RANK before hello. */
uint32_t wst_recv_peer_rank(const struct peer *p);
void wst_recv_peer_drop(struct wst_receiver *r, struct peer *p);
void wst_recv_peer_drop_after_error(struct wst_receiver *r, struct peer *p);
int wst_recv_any_peer(const struct wst_receiver *r);
/* Frees the peers on r->retired (no plan runs). */
void wst_recv_release_retired(struct wst_receiver *r);
wst_status_t wst_recv_set_world(struct wst_receiver *r, uint32_t world);

/* peer_limits.c: what authenticated senders may make the receiver hold */
/* WST_OK when a manifest of n_entries may be kept; else why[] says which
 * limit it is over (WST_ERR_TOO_LARGE). */
wst_status_t wst_recv_limit_have(const struct wst_receiver *r, size_t n_entries,
                                 char *why, size_t len);
/* Counts p's manifest (taken) as held; release with its have_bytes once
 * it is freed. */
void wst_recv_hold_have(struct wst_receiver *r, struct peer *p);
void wst_recv_release_have(struct wst_receiver *r, uint64_t bytes);
/* Before p's manifest of n_entries, wire_len bytes on the wire, is queued
 * to be unpacked: its copy and its decoded size count as held until it is
 * back (wst_recv_unreserve_have), so manifests waiting to be unpacked
 * cannot together exceed the limit either. WST_ERR_TOO_LARGE: why[]. */
wst_status_t wst_recv_reserve_have(struct wst_receiver *r, struct peer *p,
                                   size_t n_entries, size_t wire_len, char *why,
                                   size_t len);
void wst_recv_unreserve_have(struct wst_receiver *r, struct peer *p);
/* WST_OK when one more peer without a rank may stay (WST_ERR_BUSY). */
wst_status_t wst_recv_limit_unranked(struct wst_receiver *r, char *why,
                                     size_t len);

/* plan_cache.c */
uint64_t wst_recv_layer_count(const struct wst_receiver *r);
void wst_recv_layer_items(const struct wst_receiver *r, uint32_t rank,
                          uint32_t layer, size_t *first, size_t *last);
void wst_recv_refuse_to_peer(struct wst_receiver *r, struct peer *p, void *arg);
void wst_recv_try_plan(struct wst_receiver *r);

/* jobs.c: wst_recv_job_* run on the engine thread (wst_recv_job_repack on the
 * repack thread); a job is made for an action of the refit machine */
struct job *wst_recv_job_new(struct wst_receiver *r,
                             const struct wst_rm_action *a);
void wst_recv_queue_job(struct wst_receiver *r, wst_job_fn fn, struct job *j);
void wst_recv_job_begin(void *arg);
void wst_recv_job_verify(void *arg);
void wst_recv_job_skip_verify(void *arg);
void wst_recv_job_repack(void *arg);
void wst_recv_job_finalize(void *arg);
void wst_recv_job_commit(void *arg);
void wst_recv_job_unusable(void *arg);
void wst_recv_job_resume(void *arg);

/* refit.c: the refit machine's driver. Every event goes through
 * wst_recv_refit_event, which runs the actions. */
void wst_recv_refit_event(struct wst_receiver *r,
                          const struct wst_rm_event *ev);
/* A failure of the refit under way, if any (WST_RM_EV_FAIL). */
void wst_recv_refit_fail(struct wst_receiver *r, wst_status_t status,
                         const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A sender lost (WST_RM_EV_PEER_LOST) or failed (_PEER_ERROR): the refit
 * fails if the sender takes part in it. */
void wst_recv_refit_peer_fail(struct wst_receiver *r, struct peer *p,
                              enum wst_rm_event_kind kind, wst_status_t status,
                              const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* The receiver goes away: results still to come are stale. */
void wst_recv_refit_shutdown(struct wst_receiver *r);
void wst_recv_refit_release(struct wst_receiver *r);

/* commit.c: the refit's outcome, published under r->lock */
/* A refit starts: its version and label (START's text). */
void wst_recv_publish_started(struct wst_receiver *r,
                              const struct wst_rm_action *a);
/* The refit's phase after a READY, RECEIVING or PREPARED action. */
void wst_recv_publish_phase(struct wst_receiver *r,
                            const struct wst_rm_action *a);
void wst_recv_publish_times(struct wst_receiver *r,
                            const struct wst_rm_action *a);
void wst_recv_publish_committed(struct wst_receiver *r,
                                const struct wst_rm_action *a);
void wst_recv_publish_refused(struct wst_receiver *r,
                              const struct wst_rm_action *a);
void wst_recv_publish_unusable(struct wst_receiver *r,
                               const struct wst_rm_action *a);
void wst_recv_publish_reason(struct wst_receiver *r, const char *reason);

/* control.c: the worker's callbacks for control messages and connections */
void wst_recv_on_message(void *arg, wst_conn_t *conn, const void *buf,
                         size_t len);
void wst_recv_on_accepted(void *arg, wst_conn_t *conn);
/* A decoded message of p's (st WST_OK; *m is taken over and released), or
 * why it did not decode (st, err): handled as wst_recv_on_message does. */
void wst_recv_on_msg(struct wst_receiver *r, struct peer *p, wst_status_t st,
                     struct wst_msg *m, const char *err);

/* have_decode.c: a sender's have manifest, unpacked on the planner
 * thread; the result goes to wst_recv_on_msg. WST_OK once it is queued
 * (buf is copied); otherwise the caller decodes it itself. */
wst_status_t wst_recv_decode_have(struct wst_receiver *r, struct peer *p,
                                  const void *buf, size_t len);
void wst_recv_on_conn_failed(void *arg, wst_conn_t *conn, wst_status_t status,
                             const char *why);

/* deadlines.c: the worker's tick */
void wst_recv_on_tick(void *arg);

/* data.c: what the movers' receiving halves report, and the worker's
 * data callbacks routed to them */
wst_status_t wst_recv_on_data_dest(void *arg, const struct wst_data_hdr *hdr,
                                   size_t len, int rndv, void **dest_p);
void wst_recv_on_data_done(void *arg, const struct wst_data_hdr *hdr,
                           void *dest, size_t len, wst_status_t status);
struct wst_rx_events wst_recv_rx_events(struct peer *p);
/* This sender's slice of the current plan (its halves are destroyed). */
wst_status_t wst_recv_peer_rx_plan(struct wst_receiver *r, struct peer *p);
/* The receiving half for BEGIN's mover (nccl: the one set up before). */
wst_status_t wst_recv_peer_rx_open(struct wst_receiver *r, struct peer *p);
void wst_recv_peer_rx_close(struct peer *p);

/* device_setup.c */
wst_status_t wst_recv_prepare_device(struct wst_receiver *r);
wst_status_t wst_recv_prepare_rx_regions(struct wst_receiver *r);
void wst_recv_log_landing(struct wst_receiver *r, uint64_t version);

/* nccl_setup.c */
int wst_recv_nccl_possible(const struct wst_receiver *r);
void wst_recv_on_nccl_setup(struct wst_receiver *r, struct peer *p,
                            const struct wst_nccl_setup *ns);

#endif
