/* wstream/sender.h - the sender library a trainer rank links.
 *
 * A sender holds this rank's shards of the model and pushes them, as a new
 * version, into every receiver (inference worker) it is configured with. It
 * never gathers a full tensor: each receiver plans which bytes it needs from
 * which sender, and this sender moves only its own bytes.
 *
 *     wst_sender_create(&params, &s);
 *     wst_sender_register(s, &shard);        // once per slice, at start-up
 *     for each optimizer step v:
 *         wst_sender_push(s, v);             // starts the refit
 *                                            // (or push_with: a label)
 *         wst_sender_wait(s, 60.0);          // every receiver committed v
 *     wst_sender_destroy(s);
 *
 * Threads: all functions are called from one application thread; the
 * library runs its own progress thread. Shards must not be modified between
 * push and the end of wait (the library reads them and digests them).
 */
#ifndef WSTREAM_SENDER_H
#define WSTREAM_SENDER_H

#include <stddef.h>
#include <stdint.h>
#include <wstream/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct wst_sender wst_sender_t;

/* Log sink: one line without newline; level 0 error .. 4 trace. Called from
 * library threads; must be thread-safe. */
#ifndef WST_LOG_FN_DEFINED
#define WST_LOG_FN_DEFINED
typedef void (*wst_log_fn)(void *arg, int level, const char *line);
#endif

enum wst_sender_param_field {
    WST_SENDER_PARAM_RANK = 1u << 0,
    WST_SENDER_PARAM_WORLD_SIZE = 1u << 1,
    WST_SENDER_PARAM_RECEIVERS = 1u << 2,
    WST_SENDER_PARAM_TIMEOUT = 1u << 3,
    WST_SENDER_PARAM_MOVER = 1u << 4,
    WST_SENDER_PARAM_LOG = 1u << 5,
    WST_SENDER_PARAM_WINDOW = 1u << 6,
    WST_SENDER_PARAM_HEARTBEAT = 1u << 7,
    WST_SENDER_PARAM_SHM_DATA = 1u << 8,
    WST_SENDER_PARAM_PROGRESS = 1u << 9,
    WST_SENDER_PARAM_DEVICE_PATH = 1u << 10,
    WST_SENDER_PARAM_BOUNCE = 1u << 11,
    WST_SENDER_PARAM_AUTH = 1u << 12,
    WST_SENDER_PARAM_DIGEST_THREADS = 1u << 13,
    WST_SENDER_PARAM_LANES = 1u << 14,
    WST_SENDER_PARAM_LANE_DEVICES = 1u << 15,
};

/* Progress: 'layer' of 'version' starts streaming to receiver 'receiver'
 * (index into params.receivers): its first bytes are being posted. Called
 * on the library's progress thread; it must return quickly and must not
 * call into the sender. For progress displays (and fault injection in
 * tests: wstream-demo --fault kill-sender:LAYER). */
typedef void (*wst_layer_progress_fn)(void *arg, size_t receiver,
                                      uint32_t layer, uint64_t version);

struct wst_sender_params {
    uint64_t field_mask; /* WST_SENDER_PARAM_* bits of the fields set */
    uint32_t rank;       /* required: this trainer rank */
    uint32_t world_size; /* required: number of sender ranks */
    /* required: receivers as "host:port", borrowed during create */
    const char *const *receivers;
    size_t n_receivers;
    double timeout_s; /* deadline for connect, plan and begin; default 30 */
    /* "auto" (default: put where the data lane does real RMA, active
     * messages otherwise), "put" or "am". Borrowed during create. */
    const char *mover;
    int log_level;     /* 0..4, default 2 (info) */
    wst_log_fn log_fn; /* NULL: stderr */
    void *log_arg;
    /* Bytes in flight per receiver; 0 or unset: 32 MiB per data lane, at
     * least 64 MiB. */
    uint64_t window_bytes;
    /* Control-channel liveness: a heartbeat every heartbeat_s (default 1);
     * a receiver silent for peer_timeout_s (default 5) has failed, even if
     * TCP has not noticed (stopped process, partition). */
    double heartbeat_s;
    double peer_timeout_s;
    /* Data endpoints keep UCX peer-failure detection by default. UCX 1.13's
     * shared-memory transports have none, so same-host data then travels
     * over TCP. Nonzero: data endpoints without it, so same-host data can
     * use shared memory (measured ~1.8x faster here) -- but then UCX 1.13
     * can abort a survivor of a peer failure: a receiver stopped (SIGSTOP)
     * mid-refit and resumed aborted this process in most runs, and a
     * sender killed mid-refit once aborted the receiver (assertions in
     * UCX's rendezvous code; NOTES.md). Failures are detected through the
     * control connection either way. */
    int shm_data;
    wst_layer_progress_fn progress_fn; /* WST_SENDER_PARAM_PROGRESS */
    void *progress_arg;
    /* How device shards travel, per receiver: "auto" (default: directly
     * through UCX where every side holding device memory has a CUDA-aware
     * UCX, else "bounce"), "direct", "bounce" (through pinned host
     * memory) or "nccl". The choice and its reason are logged once per
     * receiver. Borrowed during create. */
    const char *device_path;
    /* Pinned host memory the bounce path copies device shards through,
     * allocated and registered once, in slots of one message (8 MiB);
     * default 64 MiB, at least two slots. */
    uint64_t bounce_bytes;
    /* The deployment's secret: a file of 32 to 4096 bytes that neither
     * group nor others may read (create fails naming the file and its mode
     * otherwise). Every control connection is authenticated with it both
     * ways and every control message carries a MAC. NULL or "" (default):
     * none -- such a sender connects only to receivers that run insecure.
     * The library reads no environment; programs take the default from
     * WST_AUTH_SECRET_FILE. Borrowed during create. */
    const char *auth_secret_file;
    /* Threads that hash each layer of a push for its receiver's check,
     * while the refit streams: push returns without hashing, and wait (or
     * destroy) returns only once none of them reads the shards any more.
     * 1 to 64; 0 or unset: three for every four data lanes, at least 2
     * (WST_SENDER_PARAM_DIGEST_THREADS). Device shards
     * are hashed on their GPU, one layer at a time. */
    unsigned digest_threads;
    /* Data lanes (WST_SENDER_PARAM_LANES): UCX workers, each with a
     * progress thread of its own, over which the am mover stripes its data
     * messages, each lane to one of the receiver's (as many as both sides
     * have). 1 to 8; 0: the default, 1. */
    unsigned lanes;
    /* Network devices for the data lanes (WST_SENDER_PARAM_LANE_DEVICES;
     * copied), as UCX names them, comma-separated: lane i uses entry i mod
     * n only. NULL or "": UCX chooses. UCX_NET_DEVICES in the environment
     * wins. At most 16 entries of 63 characters (letters, digits, "_.:-"). */
    const char *lane_devices;
};

/* One shard of one checkpoint tensor, as this rank owns it. The bytes are a
 * dense row-major array of the box's extents (or, for a flat shard, the
 * flattened elements [box_start[0], box_stop[0]) of the tensor).
 *
 * A rank may own several boxes of one tensor (a parameter that holds
 * several pieces of it, one checkpoint tensor per expert of a grouped
 * tensor): it registers each as its own shard under the same name, a
 * "slice" with its own box (N-D or flat, mixed freely) and its own memory.
 * Each slice is its own entry of the have manifest; a receiver's want
 * that spans several slices is served by several transfers, one per
 * slice. The slices of a name must agree on dtype and global shape and be
 * disjoint (wst_sender_register refuses otherwise). */
struct wst_shard {
    const char *name; /* checkpoint name, e.g. "model.norm.weight" */
    const void *data; /* borrowed until wst_sender_destroy */
    /* enum wst_mem_type: WST_MEM_HOST, or WST_MEM_CUDA for device memory
     * (checked; every device shard of a sender on one GPU). */
    int mem_type;
    int dtype;                 /* enum wst_dtype */
    uint32_t ndim;             /* of the global shape, 1..8 */
    const uint64_t *shape;     /* [ndim] global shape */
    const uint64_t *box_start; /* [ndim], or [1] when flat */
    const uint64_t *box_stop;  /* [ndim], or [1] when flat */
    int flat;                  /* nonzero: a 1-D box over the flattened view */
};

/* Creates a sender and starts its progress thread. Connections are made at
 * the first push. On success *sender_p is owned by the caller. */
wst_status_t wst_sender_create(const struct wst_sender_params *params,
                               wst_sender_t **sender_p);

/* Registers one shard (copied descriptors; 'data' is borrowed) and its
 * memory with UCX, once. Only before the first push. A name registered
 * before gets another slice (struct wst_shard), refused, naming both
 * slices, when its dtype (WST_ERR_DTYPE_MISMATCH) or global shape
 * (WST_ERR_SHAPE_MISMATCH) differs from an earlier slice's, or when it
 * shares an element with one (WST_ERR_INVALID). A refusal changes nothing
 * and says why in wst_sender_last_error. */
wst_status_t wst_sender_register(wst_sender_t *sender,
                                 const struct wst_shard *shard);

/* Starts pushing 'version' (> every version pushed before) to every
 * receiver: connects and exchanges manifests and plans on first use, asks
 * each receiver to begin, then streams layer by layer. Returns once the
 * refit is under way (the layers are hashed meanwhile, on digest_threads;
 * the shards must not change until wait returns); errors found before
 * that are returned here: a refusal of the plan (WST_ERR_COVERAGE,
 * WST_ERR_DTYPE_MISMATCH, ...), WST_ERR_TIMED_OUT, or WST_ERR_BUSY while
 * the previous version is still in flight (wait for it first). */
wst_status_t wst_sender_push(wst_sender_t *sender, uint64_t version);

/* The same, for shards written by asynchronous GPU work: 'cuda_event' (a
 * cudaEvent_t the application recorded on its stream after that work, or
 * NULL) is waited for on the GPU before this push reads any device shard,
 * so nothing stale is sent or digested. The event may be recorded again
 * once this returns. */
wst_status_t wst_sender_push_after(wst_sender_t *sender, uint64_t version,
                                   void *cuda_event);

enum wst_push_field {
    WST_PUSH_CUDA_EVENT = 1u << 0,
    WST_PUSH_LABEL = 1u << 1,
};

/* What a push may say besides its version (wst_sender_push_with). */
struct wst_push_params {
    uint64_t field_mask; /* WST_PUSH_* bits of the fields set */
    /* As wst_sender_push_after's (WST_PUSH_CUDA_EVENT); NULL: none. */
    void *cuda_event;
    /* The version's label (WST_PUSH_LABEL; copied): free-form, e.g.
     * "step-1200" or a run or git id, at most WST_LABEL_MAX - 1 bytes of
     * printable ASCII without spaces (status.h). It travels with the
     * refit; each receiver keeps it with the version once committed
     * (wst_receiver_state.committed_label, wstream-agent's status and
     * state files, metrics and engine socket) and tells it to senders
     * that connect (wst_sender_committed_label). NULL or "": none. Every
     * sender rank of a push must name the same label (a receiver refuses
     * the refit otherwise). A label that breaks the rule: WST_ERR_INVALID,
     * wst_sender_last_error says which byte, nothing is pushed. */
    const char *label;
};

/* wst_sender_push with the fields of 'params' that its field_mask names
 * (NULL: none): wst_sender_push_after's event, a label. */
wst_status_t wst_sender_push_with(wst_sender_t *sender, uint64_t version,
                                  const struct wst_push_params *params);

/* Connects to every receiver and exchanges manifests and plans, as the
 * first push does, without pushing; then wst_sender_committed_version says
 * what each receiver holds, so that a restarted trainer can number its
 * next version above it. Errors as a push's before it begins. */
wst_status_t wst_sender_connect(wst_sender_t *sender);

/* The version receiver i holds committed, as it last said (when this
 * sender connected, or at its commit of a push since); 0 when it holds
 * none or was not heard yet. */
uint64_t wst_sender_committed_version(wst_sender_t *sender, size_t i);

/* The label of that version (wst_push_params.label), as receiver i last
 * said, copied into label[0..len) (NUL-terminated; WST_LABEL_MAX bytes
 * always hold it, a shorter buffer gets it cut); "" when it has none or
 * was not heard yet. WST_ERR_INVALID for i out of range, a NULL label or
 * len 0. */
wst_status_t wst_sender_committed_label(wst_sender_t *sender, size_t i,
                                        char *label, size_t len);

/* Waits until every receiver has committed the pushed version (WST_OK), a
 * receiver or connection reports an error (that error), or timeout_s passes
 * (WST_ERR_TIMED_OUT). A receiver that holds a version at least as high
 * refuses the push with WST_ERR_STALE_VERSION, wst_sender_last_error
 * naming both ("version 3 is not above 5"). */
wst_status_t wst_sender_wait(wst_sender_t *sender, double timeout_s);

/* The last error's message ("receiver 127.0.0.1:7070: ..."), owned by the
 * sender, valid until the next call. "" when there was none. */
const char *wst_sender_last_error(wst_sender_t *sender);

/* Bytes this sender moved in the last push, and the data lanes UCX chose
 * for receiver i (e.g. "posix/memory[am,am_bw] cma/memory[rma_bw]");
 * NULL if unknown.
 * Strings are owned by the sender. */
uint64_t wst_sender_bytes_moved(const wst_sender_t *sender);
const char *wst_sender_lanes(const wst_sender_t *sender, size_t i);
const char *wst_sender_mover(const wst_sender_t *sender, size_t i);

/* Closes connections, stops the thread, frees everything. */
void wst_sender_destroy(wst_sender_t *sender);

#ifdef __cplusplus
}
#endif
#endif /* WSTREAM_SENDER_H */
